#!/usr/bin/env python3
"""The gate's GitHub annotations on the simulated GPU: two leaks made through
one allocation wrapper from two callers (tests/check/wrapper_leaks.c). Their
labels name the wrapper and the caller that tells them apart; each
annotation must point at that caller's line (stacks[].site.label_frame),
never both at the wrapper's.

Usage: test_gate_annotations.py LAUNCHER PROGRAM WORKSPACE
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

failures = 0


def check(what: str, ok: bool, detail: str = "") -> None:
    global failures
    if not ok:
        failures += 1
        print(f"FAIL {what}" + (f": {detail}" if detail else ""), file=sys.stderr)


def main() -> int:
    launcher, program, workspace = sys.argv[1], sys.argv[2], sys.argv[3]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "GITHUB_"))}
    env.update({"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": workspace})
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    # Strict: the annotations are tested, not whether a stale copy of an
    # address left on the stack makes an allocation referenced.
    r = subprocess.run([launcher, "check", "--strict", "--", program], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=300)
    lines = dict(re.findall(r"^(WRAPPER|LOAD|BUFFERS) (\d+)$", r.stdout, re.M))
    notes = [l for l in r.stdout.splitlines() if l.startswith("::")]
    check("exit 23", r.returncode == 23, f"{r.returncode}\n{r.stderr}")
    check("the program printed its lines", len(lines) == 3, r.stdout)
    check("one annotation per leak site", len(notes) == 2, r.stdout)
    where = sorted(re.findall(r"^::error file=([^,]*),line=(\d+),", "\n".join(notes), re.M))
    want = sorted([("tests/check/wrapper_leaks.c", lines.get("LOAD", "?")),
                   ("tests/check/wrapper_leaks.c", lines.get("BUFFERS", "?"))])
    check("each at the caller that tells the sites apart", where == want, f"{where} != {want}\n{r.stdout}")
    check("none at the wrapper", all(line != lines.get("WRAPPER") for _, line in where), r.stdout)
    check("the messages name the wrapper and the caller",
          all(re.search(r"device_alloc \(wrapper_leaks\.c:\d+\) \u2190 (load_weights|make_buffers) "
                        r"\(wrapper_leaks\.c:\d+\)", n) for n in notes), r.stdout)
    print(f"gate annotations: {'FAILED' if failures else 'passed'} ({failures} failures)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
