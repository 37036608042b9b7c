#!/usr/bin/env python3
"""Driver lookups under GPUMEMTRACE_VERBOSE=1: each lookup of a memory
function (cuMem…, cuArray…) through dlsym or cuGetProcAddress is one line
saying whether the tracer hooked it, so that a framework whose allocations
are not seen can be told from one that never allocates (docs/tracing.md).
Without the option, none of these lines.

dlsym_loader fetches cuMemAlloc_v2 with dlsym; static_runtime's cudart
fetches the driver's functions with cuGetProcAddress (cuMemAlloc hooked,
cuMemGetInfo not a function the tracer hooks). The lookups happen before the
program's first hooked call, when the tracer has not read its options yet:
the line must still come.

Usage: check_lookups.py LIB DLSYM_LOADER STATIC_RUNTIME
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile


def run(lib: str, program: str, verbose: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="gmt-lookups-") as d:
        # Under the sanitizer build its runtime must come first.
        preload = [x for x in (os.environ.get("GMT_TEST_ASAN_RUNTIME", ""), lib) if x]
        env = dict(os.environ, LD_PRELOAD=" ".join(preload), GPUMEMTRACE_DIR=d)
        env.pop("GPUMEMTRACE_VERBOSE", None)
        if verbose:
            env["GPUMEMTRACE_VERBOSE"] = "yes"
        proc = subprocess.run([program], env=env, cwd=d, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=100)
    if proc.returncode != 0:
        sys.exit(f"check_lookups: {program} exited {proc.returncode}: {proc.stderr[-500:]}")
    return proc.stderr


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    lib, loader, static = (os.path.abspath(a) for a in argv)
    problems = []
    want = {
        loader: [r"^gpumemtrace: dlsym cuMemAlloc_v2: hooked$", r"^gpumemtrace: dlsym cuMemFree_v2: hooked$"],
        static: [r"^gpumemtrace: cuGetProcAddress cuMemAlloc \(version \d+, flags \d+\): hooked$",
                 r"^gpumemtrace: cuGetProcAddress cuMemGetInfo \(version \d+, flags \d+\): "
                 r"not a function the tracer hooks$"],
    }
    for program, patterns in want.items():
        name = os.path.basename(program)
        err = run(lib, program, True)
        for p in patterns:
            if not re.search(p, err, re.M):
                problems.append(f"{name} with GPUMEMTRACE_VERBOSE: no line matching {p!r}")
        quiet = run(lib, program, False)
        lines = [line for line in quiet.splitlines() if re.search(r"(dlsym|cuGetProcAddress) cu", line)]
        if lines:
            problems.append(f"{name} without GPUMEMTRACE_VERBOSE: lookup lines {lines[:3]}")
    for p in problems:
        print(f"FAIL {p}")
    print(f"{'FAIL' if problems else 'ok'}: lookups logged under GPUMEMTRACE_VERBOSE only")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
