#!/usr/bin/env python3
"""scripts/demo itself, on the build it is part of (--sim --no-build): it ends
in the out-of-memory, shows the summary, says where the HTML report is, runs
the diff it announces (the diff follows its heading), and reads the simulated
NVML it built (other processes known, not "not installed").

usage: test_demo_script.py SOURCE_ROOT"""
from __future__ import annotations

import os
import re
import subprocess
import sys


def main() -> int:
    root = sys.argv[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_"))}
    r = subprocess.run(["scripts/demo", "--sim", "--no-build"], cwd=root, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    problems = []
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
    for p in problems:
        print("FAIL", p)
    if problems:
        print(out[-6000:])
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
