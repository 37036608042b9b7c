#!/usr/bin/env python3
"""The pytest conftest.py of docs/ci.md, for real: taken from the document,
put beside two tiny tests that allocate through the simulated GPU (ctypes on
its libcudart), one freeing what it allocates and one not, and run with
pytest. Exactly the leaking test must fail, with the gate's status (23) and
its report in the failure. Skipped (77) without a python3 that has pytest
(apt-get install python3-pytest)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SKIP = 77

TESTS = '''\
import ctypes
import os

MIB = 1024 * 1024


def runtime() -> ctypes.CDLL:
    # PyDLL: the GIL stays held in the call, so the stacks have Python frames
    rt = ctypes.PyDLL(os.environ["GMT_TEST_CUDART"])
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaMalloc.restype = ctypes.c_int
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    rt.cudaFree.restype = ctypes.c_int
    return rt


def test_frees_what_it_allocates() -> None:
    rt = runtime()
    ptr = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(ptr), 2 * MIB) == 0
    assert rt.cudaFree(ptr) == 0


def test_forgets_to_free() -> None:
    rt = runtime()
    ptr = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(ptr), 3 * MIB) == 0  # LEAK_LINE
'''


def python_with_pytest() -> str | None:
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import pytest"],
                                                 capture_output=True).returncode == 0:
            return py
    return None


def conftest_of(doc: str) -> str:
    """The ```python block of docs/ci.md that starts with '# conftest.py'."""
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [b for b in blocks if b.startswith("# conftest.py")]
    if len(found) != 1:
        raise SystemExit(f"{doc}: expected one ```python block starting '# conftest.py', "
                         f"found {len(found)}")
    return found[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("launcher")
    ap.add_argument("cudart", help="the simulated GPU's libcudart.so")
    ap.add_argument("doc", help="docs/ci.md")
    a = ap.parse_args()

    py = python_with_pytest()
    if py is None:
        print("skip: no python3 with pytest (apt-get install python3-pytest)")
        return SKIP
    failures = 0

    def check(what: str, ok: bool, detail: str = "") -> None:
        nonlocal failures
        if not ok:
            failures += 1
            print(f"FAIL {what}" + (f"\n{detail[-4000:]}" if detail else ""), file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="gmt-pytest-") as tmp:
        with open(os.path.join(tmp, "conftest.py"), "w", encoding="utf-8") as f:
            f.write(conftest_of(a.doc))
        with open(os.path.join(tmp, "test_gpu.py"), "w", encoding="utf-8") as f:
            f.write(TESTS)
        leak_line = TESTS.splitlines().index(
            next(l for l in TESTS.splitlines() if "LEAK_LINE" in l)) + 1

        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUMEMTRACE_", "GITHUB_", "PYTEST_")) and k != "LD_PRELOAD"}
        env["GPUMEMTRACE_CHECK"] = f"{os.path.abspath(a.launcher)} check"
        env["GMT_TEST_CUDART"] = os.path.abspath(a.cudart)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
        if asan:
            # python is not instrumented: the ASan runtime must lead LD_PRELOAD
            env["LD_PRELOAD"] = asan
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        junit = os.path.join(tmp, "outer.xml")
        p = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={junit}",
                            "test_gpu.py"], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=240)
        output = p.stdout + p.stderr
        check("pytest: status 1 (a test failed)", p.returncode == 1, output)
        try:
            root = ET.parse(junit).getroot()
        except (OSError, ET.ParseError) as e:
            check("pytest's JUnit report", False, f"{e}\n{output}")
            return 1
        cases = {tc.get("name"): tc for tc in root.iter("testcase")}
        check("two tests ran", sorted(cases) == ["test_forgets_to_free", "test_frees_what_it_allocates"],
              f"{sorted(cases)}\n{output}")
        clean = cases.get("test_frees_what_it_allocates")
        check("the clean test passes", clean is not None and len(clean) == 0,
              ET.tostring(clean, "unicode") if clean is not None else output)
        leaky = cases.get("test_forgets_to_free")
        fail = leaky.find("failure") if leaky is not None else None
        check("the leaking test fails", fail is not None, output)
        if fail is not None:
            text = (fail.get("message") or "") + (fail.text or "")
            check("failure: the gate's status 23", "exited with status 23" in text, text)
            check("failure: the leak's bytes", "3145728 bytes" in text)
            check("failure: the test's line", "test_forgets_to_free (" in text
                  and f"test_gpu.py:{leak_line})" in text)

        # No gpumemtrace on PATH, none named: one clear line, no test run.
        env.pop("GPUMEMTRACE_CHECK")
        env["PATH"] = os.path.dirname(os.path.realpath(py)) + ":/nonexistent"
        p = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", "test_gpu.py"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=120)
        output = p.stdout + p.stderr
        errors = [ln for ln in output.splitlines() if "gpumemtrace" in ln and "not on PATH" in ln]
        check("no gate on PATH: pytest's usage error", p.returncode == 4, output)
        check("no gate on PATH: one line saying so", len(errors) == 1 and "FileNotFoundError" not in output,
              output)
    if failures:
        print(f"{failures} failure(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
