#!/usr/bin/env python3
"""A rank of the metrics tests (test_metrics.py): on the simulated GPU through
ctypes, it allocates known blocks at two sites of its own (their sizes scaled
by its RANK, so that ranks differ), writes the simulated driver's ledger of
that moment (LEDGER), says READY, and holds its memory until the file GO
exists; then frees the first site's blocks and exits. With "oom", it first
asks for more than the device has (one out-of-memory). With "many", it
also allocates at 36 sites more, site_01 … site_36 of a module it writes
beside LEDGER, site_NN one block of NN MiB: more stacks than the metrics
keep for their top sites.

Usage: rank.py LEDGER GO [oom|many]"""

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frameworks", "fake_common", "site-packages"))
from gmt_sim_driver import Driver  # noqa: E402

MIB = 1 << 20


def weights(drv, rank):
    out = []
    for _ in range(3):
        out.append(drv.malloc((8 + rank) * MIB))
    return out


def activations(drv, rank):
    out = []
    for _ in range(5):
        out.append(drv.malloc((2 + rank) * MIB))
    return out


SITES = 36


def many_sites(drv, where):
    with open(os.path.join(where, "many_sites.py"), "w", encoding="utf-8") as f:
        for i in range(1, SITES + 1):
            f.write(f"def site_{i:02d}(drv):\n    return drv.malloc({i} << 20)\n\n\n")
    sys.path.insert(0, where)
    import many_sites
    return [getattr(many_sites, f"site_{i:02d}")(drv) for i in range(1, SITES + 1)]


def main(argv):
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["oom"], ["many"]):
        print(__doc__, file=sys.stderr)
        return 2
    ledger, go = argv[:2]
    rank = int(os.environ.get("RANK", "0"))
    drv = Driver()
    kept = weights(drv, rank)
    temp = activations(drv, rank)
    if argv[2:] == ["many"]:
        kept += many_sites(drv, os.path.dirname(os.path.abspath(ledger)))
    if argv[2:] == ["oom"] and drv.malloc(1 << 40) is not None:
        print("no out-of-memory", file=sys.stderr)
        return 1
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
    lib.gmtsim_ledger_write.argtypes = [ctypes.c_char_p]
    if lib.gmtsim_ledger_write(ledger.encode()) != 0:
        print(f"cannot write {ledger}", file=sys.stderr)
        return 1
    print("READY", flush=True)
    deadline = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in temp:
        drv.free(p)
    print("DONE", kept and "kept", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
