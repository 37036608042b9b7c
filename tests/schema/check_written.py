#!/usr/bin/env python3
"""Runs a test that writes snapshots (tests/output/test_snapshot: the writer
alone, on a live table built by hand) with GMT_TEST_KEEP_DIR set, so that it
keeps a copy of each, then checks every copy against docs/snapshot.schema.json
(schema_check.py). Fails when the test fails, keeps fewer than --min
snapshots, or one is invalid.

Usage: check_written.py [--min N] -- COMMAND [ARG]...
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import schema_check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min", type=int, default=1, help="snapshots the command must write (default 1)")
    ap.add_argument("command", nargs="+", help="the test and its arguments (after --)")
    args = ap.parse_args()

    keep = tempfile.mkdtemp(prefix="gmt-schema-")
    problems = []
    proc = subprocess.run(args.command, env=dict(os.environ, GMT_TEST_KEEP_DIR=keep),
                          stdin=subprocess.DEVNULL, timeout=300)
    if proc.returncode != 0:
        problems.append(f"{' '.join(args.command)} exited {proc.returncode}")
    written = schema_check.snapshot_files(keep)
    if len(written) < args.min:
        problems.append(f"{len(written)} snapshots kept in {keep}, at least {args.min} expected "
                        "(does the test still copy them into GMT_TEST_KEEP_DIR?)")
    problems += schema_check.validate(written)
    for p in problems:
        print("FAIL:", p)
    if problems:
        print(f"snapshots kept in {keep}")
        return 1
    print(f"ok: schema: {len(written)} snapshots valid")
    shutil.rmtree(keep, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
