#!/usr/bin/env python3
"""A command line longer than the snapshot's argv holds (256 arguments within
16 KiB) is marked: "argv_truncated": true, absent when it fits; every
snapshot passes the schema (docs/snapshot-format.md).

Runs PROGRAM (any test program with an allocation live at exit; it ignores
its arguments) with 3 arguments, 300 arguments and one argument of 20,000
bytes, and reads each exit snapshot.

Usage: check_argv.py PROGRAM --lib LIBGPUMEMTRACE
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
import schema_check  # noqa: E402
from preload_env import env_of, finish  # noqa: E402

CASES = {
    "short": (["a", "b", "c"], False),
    "many": ([f"arg{i}" for i in range(300)], True),
    "long": (["x" * 20000], True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    program = os.path.abspath(args.program)
    problems = []
    with tempfile.TemporaryDirectory(prefix="gmt-argv-") as tmp:
        for name, (argv, cut) in CASES.items():
            snapdir = os.path.join(tmp, name)
            os.mkdir(snapdir)
            r = subprocess.run([program] + argv, env=env_of(args.lib, GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON="exit",
                                                                    GPUMEMTRACE_LEAK_SCAN="0"), capture_output=True,
                               text=True, timeout=120, check=False)
            snaps = glob.glob(os.path.join(snapdir, "gpumemtrace.*.exit.*.json"))
            if r.returncode != 0 or len(snaps) != 1:
                problems.append(f"{name}: exit {r.returncode}, snapshots {snaps}: {r.stderr[-300:]!r}")
                continue
            problems += schema_check.validate(snaps)
            with open(snaps[0], encoding="utf-8") as f:
                doc = json.load(f)
            got = doc.get("argv", [])
            if doc.get("argv_truncated", False) is not cut:
                problems.append(f"{name}: argv_truncated {doc.get('argv_truncated')!r}, want {cut} "
                                f"({len(got)} arguments kept)")
            if not cut and got[1:] != argv:
                problems.append(f"{name}: argv {got!r}")
            if cut and (not got or got[0] != program or any(a not in [program] + argv for a in got[:-1])):
                problems.append(f"{name}: the arguments kept are not the first ones: {got[:4]!r}")
    return finish(problems, "a command line past 256 arguments or 16 KiB is marked argv_truncated, "
                            "one that fits is not")


if __name__ == "__main__":
    sys.exit(main())
