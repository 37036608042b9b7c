#!/usr/bin/env python3
"""A process that never calls CUDA (a shell, a launcher script that only runs
the real program) writes no exit snapshot under `gpumemtrace run`; under
`gpumemtrace check` it still does (a clean result the gate must see).

And a run that wrote no snapshot says so: under `gpumemtrace run` a program
that allocated and freed without running out of memory ends with exactly
one line, "no snapshot written: …", how to get one; a run that wrote one
(--snapshot-on exit), a process that recorded nothing (the shell),
GPUMEMTRACE_EXIT_NOTE=0 and a plain LD_PRELOAD are silent.

usage: test_quiet_helpers.py LAUNCHER PROGRAM LIBRARY"""
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
        failures += exit_note(launcher, os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), env, tmp)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


def exit_note(launcher: str, program: str, library: str, env: dict, tmp: str) -> int:
    note = "gpumemtrace: no snapshot written: no allocation ran out of memory"
    failures = 0
    cases = [
        ("run, nothing out of memory", [launcher, "run", "--dir", tmp, "--", program], {}, 1),
        ("run --snapshot-on exit", [launcher, "run", "--dir", tmp, "--snapshot-on", "exit", "--", program], {}, 0),
        ("run of a shell", [launcher, "run", "--dir", tmp, "--", "sh", "-c", "true"], {}, 0),
        ("GPUMEMTRACE_EXIT_NOTE=0", [launcher, "run", "--dir", tmp, "--", program],
         {"GPUMEMTRACE_EXIT_NOTE": "0"}, 0),
        ("plain LD_PRELOAD", [program],
         {"LD_PRELOAD": ":".join(filter(None, [env.get("LD_PRELOAD", ""), library]))}, 0),
    ]
    for what, cmd, extra, want in cases:
        # driver_link.c: run with these, as its comment says.
        sim = {"GMTSIM_DEVICES": "2", "GMTSIM_MEMORY": "1G,2G", "GMTSIM_CONTEXT_BYTES": "3M"}
        r = subprocess.run(cmd, env=dict(env, **sim, **extra), capture_output=True, text=True,
                           timeout=60, cwd=tmp)
        got = [ln for ln in r.stderr.splitlines() if ln.startswith(note)]
        if r.returncode != 0 or len(got) != want or (want and "--snapshot-on exit" not in got[0]):
            print(f"FAIL {what}: status {r.returncode}, {len(got)} note lines, {want} expected\n{r.stderr[-800:]}")
            failures += 1
        else:
            print(f"ok   {what}: {len(got)} note line{'s' if len(got) != 1 else ''}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
