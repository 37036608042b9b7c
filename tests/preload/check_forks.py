#!/usr/bin/env python3
"""A fork at any moment: a child's fate never depends on what the tracer's
threads were doing when it was forked (docs/reliability.md).

fork_writes keeps allocations live and forks children one after another while
the tracer writes snapshots (MODE signal: SIGUSR2 every 2 ms, the background
thread writes; MODE dump: a thread of the program calls gmt_dump()); each
child calls the driver and exits, writing its own exit snapshot. Run twice:

- as it is: every child must exit with 0 (the loader's data a child inherits
  from a dlopen in flight in the writer can make the child's own dlopen fault,
  but only when the fork lands in a window of microseconds);
- with slow_loader preloaded first, a double of a loader whose dlopen takes
  3 ms on threads other than the main one, and which ends a child forked
  while such a call was in flight (status 86) at its first dlopen: the window
  is then the whole call, and a tracer that let a fork happen during its own
  loader calls fails every time.

Both runs: the program exits with 0 and says "DIED 0"; the parent wrote at
least one snapshot while it forked; every child and the parent left one exit
snapshot, each whole JSON; no temporary file is left.

Usage: check_forks.py MODE --lib LIBGPUMEMTRACE --shim SLOW_LOADER -- PROGRAM
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import preload_env

CHILDREN = 200
LIVE = 100
EXIT_NAME = re.compile(r"^gpumemtrace\.(\d+)\.exit\.\d+\.json$")


def traced_env(preload: list[str], snapdir: str, mode: str) -> dict[str, str]:
    """The tracer last in LD_PRELOAD, after the slow loader when there is
    one. NOTE: no leak scan in the exit snapshots: not what this is about."""
    triggers = "exit,signal" if mode == "signal" else "exit"
    env = preload_env.env_of(preload[-1], GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON=triggers,
                             GPUMEMTRACE_STACK_DEPTH="16", GPUMEMTRACE_LEAK_SCAN="0", GMTSIM_MEMORY="4G")
    env["LD_PRELOAD"] = " ".join(env["LD_PRELOAD"].split(" ")[:-1] + preload)
    return env


def run_problems(program: str, mode: str, preload: list[str], label: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="gmt-forks-") as snapdir:
        p = subprocess.run([program, mode, str(CHILDREN), str(LIVE)], env=traced_env(preload, snapdir, mode),
                           cwd=snapdir, capture_output=True, text=True, errors="replace", timeout=600,
                           check=False)
        problems = []
        if p.returncode != 0 or f"CHILDREN {CHILDREN} DIED 0" not in p.stdout:
            died = [line for line in p.stdout.splitlines() if line.startswith("DIED")]
            problems.append(f"{label}: exit status {p.returncode}, {len(died)} of {CHILDREN} children died "
                            f"({'; '.join(died[:5])}); stderr: {p.stderr.strip()[-600:]}")
        names = os.listdir(snapdir)
        leftovers = [n for n in names if n.endswith(".tmp")]
        if leftovers:
            problems.append(f"{label}: temporary files left: {leftovers[:5]}")
        exits = {}
        for n in names:
            m = EXIT_NAME.match(n)
            if m:
                exits[int(m.group(1))] = n
        if len(exits) != CHILDREN + 1:
            problems.append(f"{label}: {len(exits)} processes left an exit snapshot, expected {CHILDREN + 1}")
        during = [n for n in names if ".signal." in n or ".api." in n]
        if not during:
            problems.append(f"{label}: the parent wrote no snapshot while it forked: the test proves nothing")
        for path in sorted(glob.glob(os.path.join(snapdir, "gpumemtrace.*.json"))):
            try:
                with open(path, encoding="utf-8") as f:
                    json.load(f)
            except (OSError, ValueError) as e:
                problems.append(f"{label}: {os.path.basename(path)} is not a whole document: {e}")
                break
        return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["signal", "dump"])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("program")
    a = ap.parse_args()
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        # NOTE: GCC 12's AddressSanitizer does not hold its allocator's locks
        # across fork: a child forked while another thread allocates can wait
        # forever on one (seen: the child's first malloc), traced or not.
        print("SKIP: AddressSanitizer's allocator is not fork-safe with threads that allocate (GCC 12)")
        return 77
    a.program = os.path.abspath(a.program)
    problems = run_problems(a.program, a.mode, [a.lib], "as it is")
    problems += run_problems(a.program, a.mode, [a.shim, a.lib], "slow loader")
    for p in problems:
        print(f"FAIL: {p}")
    if problems:
        return 1
    print(f"OK: {a.mode}: {CHILDREN} children forked during snapshot writes, twice, every one exited with 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
