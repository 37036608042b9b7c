#!/usr/bin/env python3
"""A rank of the metrics tests (test_metrics.py): on the simulated GPU through
ctypes, it allocates known blocks at two sites of its own (their sizes scaled
by its RANK, so that ranks differ), writes the simulated driver's ledger of
that moment (LEDGER), says READY, and holds its memory until the file GO
exists; then frees the first site's blocks and exits. With "oom", it first
asks for more than the device has (one out-of-memory).

Usage: rank.py LEDGER GO [oom]"""

import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frameworks", "fake_common"))
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


def main(argv):
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["oom"]):
        print(__doc__, file=sys.stderr)
        return 2
    ledger, go = argv[:2]
    rank = int(os.environ.get("RANK", "0"))
    drv = Driver()
    kept = weights(drv, rank)
    temp = activations(drv, rank)
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
