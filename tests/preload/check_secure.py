#!/usr/bin/env python3
"""Secure execution: the tracer takes no path and no behaviour from the
environment of a set-user-ID program run by another user.

A copy of secure_prog (linked to the tracer, which the loader loads in that
mode by its absolute run path) is made set-user-ID root and run as nobody
with settings that would, if honoured, write snapshots into a directory the
caller chose, read a root-only file as suppressions (echoing its first line
as a bad rule) and end the process with the leak check's status. In secure
mode none of it may happen: the program's own exit status and output, no
file in the directory, the secret never on stderr, one line saying the
tracer is off. The same copy without the set-user-ID bit, run the same way,
is traced (it writes its snapshots and the leak check ends it with 23): the
test would see a tracer that ignored the mode.

Usage: check_secure.py PROGRAM   (exit 77: skipped, where the mode cannot be
made: not root, a nosuid filesystem, or AddressSanitizer's runtime, which
refuses set-user-ID programs)
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

NOBODY = 65534
SECRET = "leak:only-root-may-read-this-line"


def as_nobody() -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def run(program: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([program], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=100, preexec_fn=as_nobody)


def main() -> int:
    if os.geteuid() != 0:
        print("skipped: not root (a set-user-ID program of another user is needed)")
        return 77
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        print("skipped: the sanitizer build (AddressSanitizer refuses set-user-ID programs)")
        return 77
    problems = []
    work = tempfile.mkdtemp(prefix="gmt-secure-")
    try:
        os.chmod(work, 0o755)
        snapdir = os.path.join(work, "snapshots")
        os.mkdir(snapdir)
        os.chmod(snapdir, 0o777)  # the user's choice, writable by them
        secret = os.path.join(work, "root-only")
        with open(secret, "w", encoding="utf-8") as f:
            f.write(SECRET + "\n")
        os.chmod(secret, 0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
        env.update(GPUMEMTRACE_DIR=snapdir, GPUMEMTRACE_SNAPSHOT_ON="oom,exit", GPUMEMTRACE_LEAK_CHECK="1",
                   GPUMEMTRACE_SUPPRESSIONS=secret, GPUMEMTRACE_VERBOSE="1")

        # The control: not set-user-ID, so traced, the settings honoured.
        plain = os.path.join(work, "plain")
        shutil.copy(sys.argv[1], plain)
        os.chmod(plain, 0o755)
        r = run(plain, env)
        if r.returncode != 23 or not os.listdir(snapdir) or "AT_SECURE 0" not in r.stdout:
            problems.append(f"the control run (not set-user-ID) is not traced as its settings say: status "
                            f"{r.returncode}, files {os.listdir(snapdir)}, stdout {r.stdout!r}, "
                            f"stderr {r.stderr[-300:]!r}")
        for name in os.listdir(snapdir):
            os.unlink(os.path.join(snapdir, name))

        setuid = os.path.join(work, "setuid")
        shutil.copy(sys.argv[1], setuid)
        os.chown(setuid, 0, 0)
        os.chmod(setuid, 0o4755)
        r = run(setuid, env)
        if "AT_SECURE 1" not in r.stdout:
            print(f"skipped: the set-user-ID copy does not run in secure mode here (stdout {r.stdout!r}, "
                  f"stderr {r.stderr[-200:]!r})")
            return 77
        if r.returncode != 0:
            problems.append(f"exit status {r.returncode}, the program's 0 expected (stderr {r.stderr[-300:]!r})")
        if "TRACED 0" not in r.stdout:
            problems.append(f"the tracer answered the public API in secure mode: {r.stdout!r}")
        if os.listdir(snapdir):
            problems.append(f"files written in secure mode: {os.listdir(snapdir)}")
        if SECRET in r.stderr or SECRET in r.stdout:
            problems.append("the root-only file's line was printed")
        ours = [line for line in r.stderr.splitlines() if line.startswith("gpumemtrace:")]
        if len(ours) != 1 or "secure execution" not in ours[0]:
            problems.append(f"the tracer's lines in secure mode: {ours}, one saying it is off expected")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for p in problems:
        print(f"FAIL {p}")
    if not problems:
        print("ok: secure execution: nothing taken from the environment")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
