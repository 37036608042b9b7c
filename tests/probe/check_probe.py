#!/usr/bin/env python3
"""The proof behind the test static-runtime-no-runtime-symbols.

A program linked with the static runtime has no cudaMalloc symbol that
LD_PRELOAD could interpose, and reaches cuMemAlloc_v2 only through the pointer
returned by the self-lookup of cuGetProcAddress. The same program linked with
the shared runtime imports cudaMalloc (interposable), and still reaches the
driver only through the self-lookup. Checked with readelf and with probe.so
preloaded, against the driver double's exit ledger.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional


def dynamic_symbols(readelf: str, path: str) -> Dict[str, str]:
    """Name -> section index ("UND" for an import) of every dynamic symbol."""
    out = subprocess.run([readelf, "--dyn-syms", "-W", path], check=True,
                         capture_output=True, text=True).stdout
    symbols: Dict[str, str] = {}
    for line in out.splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) >= 8 and fields[0].endswith(":") and fields[0][:-1].isdigit():
            symbols[fields[7].split("@")[0]] = fields[6]
    return symbols


def needed_libraries(readelf: str, path: str) -> List[str]:
    """The DT_NEEDED entries of an ELF file."""
    out = subprocess.run([readelf, "-d", "-W", path], check=True,
                         capture_output=True, text=True).stdout
    return [line.split("[", 1)[1].split("]", 1)[0]
            for line in out.splitlines() if "(NEEDED)" in line]


def run_under_probe(program: str, probe: str, n: int, workdir: str) -> Dict[str, object]:
    """Runs `program n` with the probe preloaded and a ledger directory; returns
    {"rc", "stderr", "probe": counters or None, "ledger": exit ledger or None}."""
    ledger_dir = os.path.join(workdir, "ledger")
    os.mkdir(ledger_dir)
    probe_out = os.path.join(workdir, "probe.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GMTSIM_")}
    env["GMTSIM_LEDGER_DIR"] = ledger_dir
    env["PROBE_OUT"] = probe_out
    # An instrumented probe needs the ASan runtime loaded first.
    env["LD_PRELOAD"] = " ".join(p for p in (os.environ.get("GMT_TEST_ASAN_RUNTIME", ""), probe) if p)
    proc = subprocess.run([program, str(n)], env=env, capture_output=True, text=True, timeout=60)
    result: Dict[str, object] = {"rc": proc.returncode, "stderr": proc.stderr,
                                 "probe": None, "ledger": None}
    if os.path.exists(probe_out):
        with open(probe_out, encoding="utf-8") as f:
            counters = json.load(f)
        result["probe"] = counters
        ledger = os.path.join(ledger_dir, "ledger.%d.exit.json" % counters["pid"])
        if os.path.exists(ledger):
            with open(ledger, encoding="utf-8") as f:
                result["ledger"] = json.load(f)
    return result


def check_symbols(readelf: str, static: str, shared: str) -> List[str]:
    """Failures of part (1): who exports or imports cudaMalloc, who needs what."""
    failures = []
    static_syms = dynamic_symbols(readelf, static)
    shared_syms = dynamic_symbols(readelf, shared)
    if "cudaMalloc" in static_syms:
        failures.append("static program: dynamic symbol cudaMalloc present (section %s); "
                        "expected none" % static_syms["cudaMalloc"])
    if shared_syms.get("cudaMalloc") != "UND":
        failures.append("shared program: cudaMalloc is %r in the dynamic symbol table; "
                        "expected an import (UND)" % shared_syms.get("cudaMalloc"))
    for name, path, want, refuse in (
            ("static", static, [], ["libcudart.so.13", "libcuda.so.1"]),
            ("shared", shared, ["libcudart.so.13"], ["libcuda.so.1"])):
        needed = needed_libraries(readelf, path)
        failures += ["%s program: needs %s: %s" % (name, lib, needed)
                     for lib in refuse if lib in needed]
        failures += ["%s program: does not need %s: %s" % (name, lib, needed)
                     for lib in want if lib not in needed]
    return failures


def expect_eq(failures: List[str], what: str, actual: object, expected: object) -> None:
    if actual != expected:
        failures.append("%s is %r, expected %r" % (what, actual, expected))


def check_run(name: str, run: Dict[str, object], n: int, shared: bool) -> List[str]:
    """Failures of part (2) for one program run under the probe."""
    failures: List[str] = []
    if run["rc"] != 0:
        failures.append("%s program exited with %s; stderr:\n%s" % (name, run["rc"], run["stderr"]))
    probe = run["probe"]
    ledger = run["ledger"]
    if not isinstance(probe, dict):
        return failures + ["%s program: the probe wrote no counters (not preloaded?)" % name]
    if not isinstance(ledger, dict):
        return failures + ["%s program: no exit ledger from the driver double" % name]
    calls = ledger.get("calls", {})
    p = "%s program: " % name

    expect_eq(failures, p + 'dlsym(h, "cuGetProcAddress_v2") calls',
              probe["dlsym_cuGetProcAddress_v2"], 1)
    expect_eq(failures, p + "self-lookups handed out", probe["self_lookups_handed_out"], 1)
    expect_eq(failures, p + "calls of cudaMalloc exported by the probe",
              probe["exported_cudaMalloc_calls"], n if shared else 0)
    expect_eq(failures, p + "calls of cuMemAlloc_v2 exported by the probe",
              probe["exported_cuMemAlloc_v2_calls"], 0)
    expect_eq(failures, p + 'lookups of "cuMemAlloc" bypassing the self-lookup',
              probe["gpa_v2_cuMemAlloc_lookups"], 0)
    expect_eq(failures, p + "calls of the cuMemAlloc_v2 from the self-lookup",
              probe["self_lookup_cuMemAlloc_v2_calls"], n)
    expect_eq(failures, p + 'ledger calls["cuMemAlloc_v2"]', calls.get("cuMemAlloc_v2", 0), n)
    expect_eq(failures, p + 'ledger calls["cuMemFree_v2"]', calls.get("cuMemFree_v2", 0), n)
    # Every lookup the driver saw went through one of the probe's wrappers.
    expect_eq(failures, p + 'ledger calls["cuGetProcAddress_v2"]',
              calls.get("cuGetProcAddress_v2", 0),
              probe["gpa_v2_calls"] + probe["self_lookup_calls"])
    expect_eq(failures, p + "ledger totals.allocs", ledger.get("totals", {}).get("allocs"), n)
    return failures


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--static", required=True, help="alloc_n linked with libcudart_static.a")
    ap.add_argument("--shared", required=True, help="alloc_n linked with libcudart.so.13")
    ap.add_argument("--probe", required=True, help="probe.so")
    ap.add_argument("--readelf", default="readelf")
    ap.add_argument("-n", type=int, default=7, help="cudaMalloc/cudaFree pairs per run")
    args = ap.parse_args(argv)

    failures = check_symbols(args.readelf, args.static, args.shared)
    for name, program, shared in (("static", args.static, False), ("shared", args.shared, True)):
        with tempfile.TemporaryDirectory(prefix="gmt-probe-") as workdir:
            run = run_under_probe(program, args.probe, args.n, workdir)
            failures += check_run(name, run, args.n, shared)
            if run["probe"] is not None:
                print("%s: %s" % (name, json.dumps(run["probe"], sort_keys=True)))
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if not failures:
        print("PASS: static runtime: no cudaMalloc to interpose, cuMemAlloc_v2 reached %d times, "
              "only through the self-lookup" % args.n)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
