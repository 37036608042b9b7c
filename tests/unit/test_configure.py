#!/usr/bin/env python3
"""The configure step names what is missing and how to get it.

Runs `meson setup` on the source tree into throw-away build directories with one
prerequisite hidden at a time, and checks that it fails with one clear line.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile


def configure(source: str, extra_args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Runs meson setup; returns its exit status and combined output."""
    with tempfile.TemporaryDirectory(prefix="gmt-configure-") as build:
        proc = subprocess.run(
            ["meson", "setup", build, source, *extra_args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, timeout=120)
    return proc.returncode, proc.stdout


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "ERROR:" in line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("source", help="the project's source directory")
    args = parser.parse_args()

    base = {k: v for k, v in os.environ.items()
            if k not in ("CUDA_HOME", "CUDA_PATH", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR")}
    cases = [
        ("CUDA toolkit given but absent", ["-Dcudatoolkit=/nonexistent/cuda"], {},
         ["cuda.h", "/nonexistent/cuda", "-Dcudatoolkit"]),
        ("CUDA_HOME that lacks the headers is passed over for the next candidate",
         [], {"CUDA_HOME": "/nonexistent/cuda-home", "PKG_CONFIG_LIBDIR": "/nonexistent"},
         ["libunwind", "apt-get install libunwind-dev"]),
        ("libunwind missing", [], {"PKG_CONFIG_LIBDIR": "/nonexistent"},
         ["libunwind", "apt-get install libunwind-dev"]),
    ]
    failed = 0
    for name, extra, env_add, expected in cases:
        status, output = configure(args.source, extra, {**base, **env_add})
        errors = error_lines(output)
        problems = []
        if status == 0:
            problems.append("configure succeeded")
        if len(errors) != 1:
            problems.append(f"expected one ERROR line, got {len(errors)}: {errors}")
        else:
            problems += [f"error line lacks {word!r}: {errors[0]}"
                         for word in expected if word not in errors[0]]
        print(f"{'ok' if not problems else 'FAIL'}: {name}")
        for p in problems:
            print(f"    {p}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
