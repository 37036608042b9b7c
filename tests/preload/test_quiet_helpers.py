#!/usr/bin/env python3
"""A process that never calls CUDA (a shell, a launcher script that only runs
the real program) writes no exit snapshot under `gpumemtrace run`; under
`gpumemtrace check` it still does (a clean result the gate must see).

usage: test_quiet_helpers.py LAUNCHER"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile


def main() -> int:
    launcher = os.path.abspath(sys.argv[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEMTRACE_")}
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        # uninstrumented programs: the sanitizer's runtime must come first
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    failures = 0
    with tempfile.TemporaryDirectory(prefix="gmt-quiet-") as tmp:
        run_dir = os.path.join(tmp, "run")
        r = subprocess.run([launcher, "run", "--dir", run_dir, "--snapshot-on", "exit", "--",
                            "sh", "-c", "ls >/dev/null; sh -c true"], env=env, capture_output=True, text=True,
                           timeout=60)
        files = glob.glob(os.path.join(run_dir, "gpumemtrace.*"))
        if r.returncode != 0 or files:
            print(f"FAIL run: status {r.returncode}, snapshots {files}: none expected\n{r.stderr}")
            failures += 1
        check_dir = os.path.join(tmp, "check")
        # NOTE: not `sh -c`: dash leaves by _exit, which writes nothing.
        r = subprocess.run([launcher, "check", "--dir", check_dir, "--", "/bin/true"], env=env,
                           capture_output=True, text=True, timeout=60)
        files = glob.glob(os.path.join(check_dir, "gpumemtrace.*.exit.*.json"))
        if r.returncode != 0 or not files:
            print(f"FAIL check: status {r.returncode}, exit snapshots {files}: a clean one expected\n{r.stderr}")
            failures += 1
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
