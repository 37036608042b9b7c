#!/usr/bin/env python3
"""scripts/demo itself, on the build it is part of (--sim --no-build): it ends
in the out-of-memory, shows the summary, says where the HTML report is, runs
the diff it announces (the diff follows its heading), and reads the simulated
NVML it built (other processes known, not "not installed").

Its build step, with a ninja double first on PATH that prints a screen of
build output (the real build is the suite's own, done): the build's output
goes to build/demo-build.log, not to the terminal, which says where the log
is and then shows the demo's result; a build that fails shows the log's last
lines and its path, not its first lines, and exits 1. Where a package the
demo would install is missing (it would run apt-get), these two are skipped,
saying so.

usage: test_demo_script.py SOURCE_ROOT"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

BUILD_LOG = os.path.join("build", "demo-build.log")
# A ninja double: a screen of build output, then the given exit status.
FAKE_NINJA = """#!/bin/sh
i=0
while [ $i -lt 300 ]; do echo "[$i/300] Compiling C object fake-$i.o"; i=$((i + 1)); done
[ "$GMT_TEST_NINJA_FAILS" = 1 ] || exit 0
echo "FAILED: fake-299.o"
echo "fake.c:1:1: error: the fake compiler's error"
echo "ninja: build stopped: subcommand failed."
exit 1
"""


def missing_packages(root: str, env: Dict[str, str]) -> str:
    """What the demo would install (scripts/lib.sh's probes), space separated."""
    r = subprocess.run(["bash", "-c", '. scripts/lib.sh && gmt__missing'], cwd=root, env=env,
                       capture_output=True, text=True, timeout=120)
    return " ".join(r.stdout.split()) if r.returncode == 0 else f"(the probe failed: {r.stderr.strip()})"


def check_build_step(root: str, env: Dict[str, str], problems: List[str]) -> None:
    """The demo's build step with the ninja double: its output in the log only."""
    before = len(problems)
    with tempfile.TemporaryDirectory(prefix="gmt-demo-ninja-") as tmp:
        ninja = os.path.join(tmp, "ninja")
        with open(ninja, "w", encoding="utf-8") as f:
            f.write(FAKE_NINJA)
        os.chmod(ninja, 0o755)
        fenv = dict(env, PATH=tmp + os.pathsep + env.get("PATH", ""))
        r = subprocess.run(["scripts/demo", "--sim"], cwd=root, env=fenv, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        with open(os.path.join(root, BUILD_LOG), encoding="utf-8", errors="replace") as f:
            log = f.read()
        if r.returncode != 0:
            problems.append(f"with the build step: exit status {r.returncode}")
        if "Compiling C object" in out:
            problems.append("with the build step: the build's output is on the terminal")
        if "[299/300] Compiling C object fake-299.o" not in log:
            problems.append(f"with the build step: the build's output is not in {BUILD_LOG}")
        first = out.splitlines()[:1]
        if not first or BUILD_LOG not in first[0]:
            problems.append(f"with the build step: the first line does not name the log: {first}")
        if "the demo ended in CUDA out-of-memory, as expected" not in out:
            problems.append("with the build step: no result shown")
        fenv["GMT_TEST_NINJA_FAILS"] = "1"
        r = subprocess.run(["scripts/demo", "--sim"], cwd=root, env=fenv, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=300)
        out = r.stdout + r.stderr
        if r.returncode != 1:
            problems.append(f"a failed build: exit status {r.returncode}, not 1")
        if "fake-0.o" in out or "fake-100.o" in out:
            problems.append("a failed build: the log's first lines are on the terminal")
        if "error: the fake compiler's error" not in out or "fake-299.o" not in out:
            problems.append("a failed build: the log's last lines are not shown")
        if os.path.join(root, BUILD_LOG) not in out:
            problems.append("a failed build: the log's path is not said")
        if len(problems) > before:
            print(out[-3000:])


def main() -> int:
    root = sys.argv[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_"))}
    r = subprocess.run(["scripts/demo", "--sim", "--no-build"], cwd=root, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    problems: List[str] = []
    if r.returncode != 0:
        problems.append(f"exit status {r.returncode}")
    lines = out.splitlines()
    at = next((i for i, ln in enumerate(lines) if "what changed from the out-of-memory to the exit:" in ln), None)
    if at is None:
        problems.append("no diff announced")
    elif not any(ln.startswith("gpumemtrace diff:") for ln in lines[at + 1:at + 4]):
        problems.append(f"the announced diff does not follow: {lines[at + 1:at + 4]}")
    if "is not installed" in out or not re.search(r"other processes: 0 B in 0", out):
        problems.append("the simulated NVML is not used")
    m = re.search(r"HTML report \(open it in a browser\): (\S+)", out)
    if m is None or not os.path.isfile(m.group(1)):
        problems.append(f"no HTML report: {m.group(1) if m else 'no path said'}")
    if problems:
        print(out[-6000:])
    missing = missing_packages(root, env)
    if missing:
        print(f"SKIP the build step: the demo would install {missing}")
    else:
        # The log of a real build, put back after the double's.
        saved = os.path.join(root, BUILD_LOG + ".test-saved")
        had_log = os.path.isfile(os.path.join(root, BUILD_LOG))
        if had_log:
            shutil.copyfile(os.path.join(root, BUILD_LOG), saved)
        try:
            check_build_step(root, env, problems)
        finally:
            if had_log:
                os.replace(saved, os.path.join(root, BUILD_LOG))
    for p in problems:
        print("FAIL", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
