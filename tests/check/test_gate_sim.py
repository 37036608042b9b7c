#!/usr/bin/env python3
"""gpumemtrace check end to end: the gate on a leaking program of the simulated
GPU (tests/preload/leak_classes.c), the real library and no crafted snapshot.

Ground truth is what the program prints ("EXPECT <address> <class> <bytes>
<what>") and the exit snapshot the gate keeps (--dir). Covered: the default
verdict (LeakSanitizer's: only leaked memory counts — exit 23, each counted
site in the report, the referenced ones listed as not counted), a program
whose only memory left is held by a global and the heap (passes by default,
fails with --strict and with GPUMEMTRACE_LEAK_CLASSES=leaked,referenced),
--strict (leaked and referenced count), a suppressions file (the workspace no longer counts), --max-leak-bytes
and --max-leaks at the counted total and one below, --leak-classes leaked
(LeakSanitizer's reading), a clean run (0), the program's own failure winning
(3), a child whose exit snapshot cannot be written (125, never a pass),
--max-peak (24), JUnit XML parsed, and --baseline/--max-growth between a
clean and a leaking run, with the verdict derived from their snapshots' peaks.

Usage: test_gate_sim.py LAUNCHER PROGRAM
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Any, Dict, List, Tuple

failures = 0
MiB = 1024 * 1024


def check(what: str, ok: bool, detail: str = "") -> None:
    global failures
    if not ok:
        failures += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""), file=sys.stderr)


def gate(launcher: str, args: List[str], program: str, prog_args: List[str] = (),
         env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
    env.update(extra)
    env.pop("GITHUB_ACTIONS", None)
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return subprocess.run([launcher, "check"] + args + ["--", program] + list(prog_args), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def expected(stdout: str) -> Dict[str, Tuple[str, int]]:
    """what → (class, bytes) from the program's EXPECT lines."""
    out = {}
    for line in stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "EXPECT":
            out[f[4]] = (f[2], int(f[3]))
    return out


def counted(exp: Dict[str, Tuple[str, int]], classes: Tuple[str, ...], suppressed: bool) -> Tuple[int, int]:
    items = [(cls, n) for what, (cls, n) in exp.items()
             if cls in classes and not (suppressed and what == "suppressed")]
    return sum(n for _, n in items), len(items)


def exit_snapshot(d: str) -> Dict[str, Any]:
    snaps = [json.load(open(p, encoding="utf-8")) for p in glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))]
    snaps = [s for s in snaps if s["summary"]["total_allocs"]]
    check(f"one exit snapshot with allocations in {d}", len(snaps) == 1, str(len(snaps)))
    return snaps[0] if snaps else {}


def main() -> int:
    launcher, program = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="gmt-gate-sim-")
    supp = os.path.join(work, "supp.txt")
    with open(supp, "w", encoding="utf-8") as f:
        f.write("# the workspace is meant to live until exit\nleak:workspace_create\n")

    # The default verdict, with the snapshots kept.
    d1 = os.path.join(work, "leaking")
    r = gate(launcher, ["--dir", d1], program)
    exp = expected(r.stdout)
    check("program printed its expectations", len(exp) == 7, r.stdout)
    check("default: exit 23", r.returncode == 23, f"{r.returncode}\n{r.stderr}")
    nbytes, n = counted(exp, ("leaked",), False)
    check("default: counted total in the report",
          f"counted leaks (classes leaked): {nbytes} bytes" in r.stderr and f"in {n} allocations" in r.stderr,
          r.stderr)
    check("default: the leaked site in the report", "at lose (" in r.stderr, r.stderr)
    check("default: the referenced sites do not count", "(referenced)" not in r.stderr, r.stderr)
    check("default: the cached segment does not count", "(cached)" not in r.stderr, r.stderr)
    leaking = exit_snapshot(d1)
    if leaking:
        check("default: snapshot's counted bytes", leaking["leaks"]["totals"]["counted"]["bytes"] == nbytes,
              str(leaking["leaks"]["totals"]))

    # Memory a global (its base or its middle) and a heap block still hold at exit: still
    # reachable, which LeakSanitizer does not report by default — nor does
    # the gate; --strict (or the variable) counts it.
    r = gate(launcher, [], program, ["--referenced"])
    exp_ref = expected(r.stdout)
    rbytes, rn = counted(exp_ref, ("referenced",), False)
    check("referenced only: the program keeps 3 referenced allocations (a global, an interior pointer, a heap block)", rn == 3, r.stdout)
    check("referenced only, by default: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr}")
    r = gate(launcher, ["--strict"], program, ["--referenced"])
    check("referenced only, --strict: exit 23", r.returncode == 23, f"{r.returncode}\n{r.stderr}")
    check("referenced only, --strict: counted in the report",
          f"counted leaks (classes leaked,referenced): {rbytes} bytes" in r.stderr and "at main (" in r.stderr,
          r.stderr)
    env_strict = {"GPUMEMTRACE_LEAK_CLASSES": "leaked,referenced"}
    r = gate(launcher, [], program, ["--referenced"], env=env_strict)
    check("referenced only, GPUMEMTRACE_LEAK_CLASSES=leaked,referenced: exit 23", r.returncode == 23,
          f"{r.returncode}\n{r.stderr}")
    r = gate(launcher, ["--strict", "--leak-classes", "leaked"], program, ["--referenced"])
    check("--strict with --leak-classes: a usage error", r.returncode == 2 and "--strict" in r.stderr,
          f"{r.returncode}\n{r.stderr}")

    # --strict: everything not freed but caches.
    sbytes_all, sn_all = counted(exp, ("leaked", "referenced"), False)
    r = gate(launcher, ["--strict"], program)
    check("--strict: counted total in the report",
          r.returncode == 23 and f"counted leaks (classes leaked,referenced): {sbytes_all} bytes" in r.stderr
          and f"in {sn_all} allocations" in r.stderr, f"{r.returncode}\n{r.stderr}")
    for where in ("lose (", "workspace_create ("):
        check(f"--strict: site {where} in the report", f"at {where}" in r.stderr, r.stderr)

    # Suppressions (of a referenced workspace: --strict), and the limits at
    # the counted total and one below.
    sbytes, sn = counted(exp, ("leaked", "referenced"), True)
    strict_supp = ["--strict", "--suppressions", supp]
    r = gate(launcher, strict_supp, program)
    check("suppressions: exit 23", r.returncode == 23, str(r.returncode))
    check("suppressions: workspace no longer counted", f"{sbytes} bytes" in r.stderr
          and "at workspace_create" not in r.stderr, r.stderr)
    r = gate(launcher, strict_supp + [f"--max-leak-bytes={sbytes}", f"--max-leaks={sn}"], program)
    check("limits at the total: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr}")
    r = gate(launcher, strict_supp + [f"--max-leak-bytes={sbytes - 1}", f"--max-leaks={sn}"], program)
    check("one byte below: exit 23", r.returncode == 23, f"{r.returncode}\n{r.stderr}")
    r = gate(launcher, strict_supp + [f"--max-leak-bytes={sbytes}", f"--max-leaks={sn - 1}"], program)
    check("one allocation below: exit 23", r.returncode == 23, f"{r.returncode}\n{r.stderr}")

    # LeakSanitizer's reading: only what nothing refers to.
    lbytes, ln = counted(exp, ("leaked",), False)
    r = gate(launcher, ["--leak-classes", "leaked", f"--max-leak-bytes={lbytes}", f"--max-leaks={ln}"], program)
    check("leaked only, at its total: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr}")
    r = gate(launcher, ["--leak-classes", "leaked"], program)
    check("leaked only: its bytes", r.returncode == 23 and f"{lbytes} bytes" in r.stderr, r.stderr)

    # A clean run passes; the program's own failure wins over the leaks.
    d2 = os.path.join(work, "clean")
    r = gate(launcher, ["--dir", d2], program, ["--clean"])
    check("clean: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr}")
    clean = exit_snapshot(d2)
    r = gate(launcher, [], program, ["--status", "3"])
    check("program's status 3 wins", r.returncode == 3, f"{r.returncode}\n{r.stderr}")

    # A run the gate cannot judge never passes: the clean program runs as a
    # child whose exit snapshot cannot be written (a 1 KiB file-size limit),
    # under a Python parent that exits 0 with its own (empty) snapshot.
    d3 = os.path.join(work, "unjudged")
    parent = ("import subprocess, sys; "
              f"subprocess.run(['/bin/sh', '-c', 'ulimit -f 1; exec {program} --clean'], stdout=sys.stderr)")
    r = gate(launcher, ["--dir", d3], sys.executable, ["-c", parent])
    check("unjudged child: exit 125", r.returncode == 125, f"{r.returncode}\n{r.stderr}")
    check("unjudged child: the gate says which process",
          re.search(r"process \d+ wrote no exit snapshot", r.stderr) is not None, r.stderr[-600:])
    check("unjudged child: its mark is gone", not glob.glob(os.path.join(d3, "*.pending")), str(os.listdir(d3)))

    # The peak budget.
    if clean:
        peak = clean["summary"]["peak_bytes"]
        r = gate(launcher, [f"--max-peak={peak}"], program, ["--clean"])
        check("max-peak at the peak: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr}")
        r = gate(launcher, [f"--max-peak={peak - 1}"], program, ["--clean"])
        check("max-peak one below: exit 24", r.returncode == 24, f"{r.returncode}\n{r.stderr}")

    # JUnit XML of a failing run.
    junit = os.path.join(work, "junit.xml")
    r = gate(launcher, ["--junit", junit], program)
    try:
        root = ET.parse(junit).getroot()
        cases = root.iter("testcase")
        fails = [f for tc in cases for f in tc.iter("failure")]
        check("junit: a failure", len(fails) >= 1, ET.tostring(root, encoding="unicode"))
        check("junit: names the leak bytes", any(str(nbytes) in (f.get("message", "") + (f.text or ""))
                                                 for f in fails), ET.tostring(root, encoding="unicode"))
    except (OSError, ET.ParseError) as e:
        check("junit parses", False, str(e))

    # Growth against a baseline: a clean run's peak is its growth loop's, 2 MiB
    # a step (8 steps by default) and the step's temporary of 256 KiB at the
    # last; 10 steps grow 4 MiB past the clean run.
    if clean:
        base = [p for p in glob.glob(os.path.join(d2, "gpumemtrace.*.exit.*.json"))
                if json.load(open(p, encoding="utf-8"))["summary"]["total_allocs"]][0]
        check("clean run's peak is 8 steps of 2 MiB and a temporary",
              clean["summary"]["peak_bytes"] == 16 * MiB + MiB // 4,
              str(clean["summary"]["peak_bytes"]))
        grow = 4 * MiB
        for limit, status in [(str(grow), 0), (str(grow - 1), 24), ("25%", 0), ("24%", 24), ("4M", 0)]:
            r = gate(launcher, ["--baseline", base, "--max-growth", limit], program,
                     ["--clean", "--growth-steps", "10"])
            check(f"baseline, --max-growth {limit}: exit {status}", r.returncode == status,
                  f"{r.returncode}\n{r.stderr}")

    print(f"gate on the simulator: {'FAILED' if failures else 'passed'} ({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
