#!/usr/bin/env python3
"""`meson install` into a temporary root, then a program compiled with the
flags `pkg-config --cflags --libs gpumemtrace` gives for the installed tree: it
builds, runs unchanged without the library (every API call -ENOSYS), and under
LD_PRELOAD of the installed library the API answers.

Usage: test_install.py BUILDDIR SOURCE.c"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile


def main() -> int:
    build, source = sys.argv[1], sys.argv[2]
    root = tempfile.mkdtemp(prefix="gmt-install-")
    try:
        subprocess.run(["meson", "install", "-C", build, "--destdir", root, "--no-rebuild", "--quiet"],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        pcs = glob.glob(os.path.join(root, "**", "pkgconfig", "gpumemtrace.pc"), recursive=True)
        libs = glob.glob(os.path.join(root, "**", "libgpumemtrace.so"), recursive=True)
        if len(pcs) != 1 or len(libs) != 1:
            print(f"FAIL: installed {pcs} and {libs}, one of each expected")
            return 1
        # The documents --help points to, and the man page (help2man).
        docs = glob.glob(os.path.join(root, "**", "doc", "gpumemtrace", "tracing.md"), recursive=True)
        mans = glob.glob(os.path.join(root, "**", "man1", "gpumemtrace.1"), recursive=True)
        pymod = glob.glob(os.path.join(root, "**", "gpumemtrace", "python", "gpumemtrace", "pytest_plugin.py"),
                          recursive=True)
        if len(pymod) != 1:
            print(f"FAIL: the Python module installed as {pymod}, once expected")
            return 1
        if len(docs) != 1 or len(mans) != 1:
            print(f"FAIL: installed {docs} and {mans}, one of each expected")
            return 1
        src_docs = os.path.join(os.path.dirname(os.path.abspath(source)), "..", "..", "docs")
        want = {n for n in os.listdir(src_docs) if n.endswith((".md", ".json"))}
        got = set(os.listdir(os.path.dirname(docs[0])))
        if want != got:
            print(f"FAIL: docs installed {sorted(got)}, the source tree's {sorted(want)} expected "
                  "(docs/meson.build lists them)")
            return 1
        with open(mans[0], encoding="utf-8") as f:
            page = f.read()
        if "GPUMEMTRACE_SNAPSHOT_ON" not in page or "doc/gpumemtrace" not in page:
            print(f"FAIL: the man page lacks the help text: {page[:400]!r}")
            return 1
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]), PKG_CONFIG_SYSROOT_DIR=root)
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "gpumemtrace"], env=env, check=True,
                               stdout=subprocess.PIPE, text=True).stdout.split()
        exe = os.path.join(root, "api_user")
        subprocess.run([os.environ.get("CC", "cc"), "-std=c99", "-Wall", "-Werror", "-o", exe, source] + flags,
                       check=True)
        plain = subprocess.run([exe], check=True, stdout=subprocess.PIPE, text=True,
                               env={k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}).stdout
        # NOTE: an instrumented library (sanitizer build) needs the ASan
        # runtime ahead of it in an uninstrumented program.
        preload = " ".join(filter(None, [os.environ.get("GMT_TEST_ASAN_RUNTIME", ""), libs[0]]))
        traced = subprocess.run([exe], check=True, stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, LD_PRELOAD=preload)).stdout
        problems = []
        if plain.strip() != "rc -38 bytes 0":
            problems.append(f"untraced: {plain.strip()!r}, 'rc -38 bytes 0' expected")
        if traced.strip() != "rc 0 bytes 0":
            problems.append(f"traced: {traced.strip()!r}, 'rc 0 bytes 0' expected")
        for p in problems:
            print("FAIL:", p)
        if not problems:
            print(f"ok: built with {' '.join(flags)}; -ENOSYS untraced, answers traced")
        return 1 if problems else 0
    finally:
        subprocess.run(["rm", "-rf", root], check=False)


if __name__ == "__main__":
    sys.exit(main())
