#!/usr/bin/env python3
"""A relative GPUMEMTRACE_DIR is the directory the process started in, whatever
chdir() it makes later (docs/guide.md).

chdir_oom.c changes its working directory before its first CUDA call, or
after its first allocation, then runs out of memory: with GPUMEMTRACE_DIR
relative ("snaps") and the default ("."), the oom and exit snapshots must be
in the starting directory's snaps/ (or the starting directory), none in the
new one, no warning; the report names the snapshot by its absolute path.

Usage: check_chdir.py PROGRAM --lib LIBGPUMEMTRACE
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

from preload_env import env_of, finish


def snapshots(directory: str) -> list[str]:
    return sorted(glob.glob(os.path.join(directory, "gpumemtrace.*.json")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    program = os.path.abspath(args.program)
    problems = []
    with tempfile.TemporaryDirectory(prefix="gmt-chdir-") as tmp:
        for when in ("before", "after"):
            for snapdir in ("snaps", None):
                start = os.path.realpath(os.path.join(tmp, f"{when}-{snapdir or 'default'}"))
                elsewhere = os.path.join(start, "elsewhere")
                os.makedirs(os.path.join(elsewhere, "snaps" if snapdir else "x"))
                want = os.path.join(start, "snaps") if snapdir else start
                os.makedirs(want, exist_ok=True)
                settings = dict(GMTSIM_MEMORY="256M", GPUMEMTRACE_SNAPSHOT_ON="oom,exit", GPUMEMTRACE_LEAK_SCAN="0")
                if snapdir is not None:
                    settings["GPUMEMTRACE_DIR"] = snapdir
                r = subprocess.run([program, when, elsewhere], env=env_of(args.lib, **settings), cwd=start,
                                   capture_output=True, text=True, timeout=120, check=False)
                what = f"{when}, GPUMEMTRACE_DIR={snapdir or '(default)'}"
                got = snapshots(want)
                if r.returncode != 0 or "PID " not in r.stdout:
                    problems.append(f"{what}: the program failed ({r.returncode}): {r.stderr[-400:]!r}")
                    continue
                if not any(".oom." in p for p in got) or not any(".exit." in p for p in got):
                    problems.append(f"{what}: snapshots in {want}: {got}; stderr {r.stderr[-400:]!r}")
                moved = snapshots(os.path.join(elsewhere, "snaps")) + snapshots(elsewhere)
                if moved:
                    problems.append(f"{what}: snapshots in the new working directory: {moved}")
                if "cannot write" in r.stderr:
                    problems.append(f"{what}: a warning: {r.stderr[-400:]!r}")
                lines = [x for x in r.stderr.splitlines() if x.startswith("gpumemtrace:   snapshot: ")]
                if not lines or not lines[0].split("snapshot: ", 1)[1].startswith(want + "/"):
                    problems.append(f"{what}: the report does not name the snapshot by its absolute path: {lines}")
    return finish(problems, "a relative GPUMEMTRACE_DIR is the starting directory's, chdir() or not")


if __name__ == "__main__":
    sys.exit(main())
