#!/usr/bin/env python3
"""The Python module (tools/python/gpumemtrace) on the simulated GPU:
traced (under `gpumemtrace run`, which puts it on PYTHONPATH) its answers are
the program's own numbers and its tag and snapshot land in the snapshot;
untraced every call does nothing, silently, and the numbers stay numbers
(0; dump() None, available() False); and the pytest
plugin (with Debian's pytest) fails exactly the tests over their limits (not one
exactly at them, after others that leaked and peaked), with
where they allocated. Skipped parts: none, but the plugin's without a python3
that has pytest (exit 77 when nothing could run).

usage: test_python_api.py LAUNCHER CUDART SOURCE_ROOT
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Dict, List

FAILURES: List[str] = []

RUNTIME = '''
import ctypes, os
MIB = 1024 * 1024
rt = ctypes.PyDLL(os.environ["GMT_TEST_CUDART"])
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaMalloc.restype = ctypes.c_int
rt.cudaFree.argtypes = [ctypes.c_void_p]
rt.cudaFree.restype = ctypes.c_int


def alloc(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
    return p
'''

SCRIPT = RUNTIME + '''
import json, warnings
import gpumemtrace as g

warnings.simplefilter("always")
out = {"available": g.available()}
out["live0"] = g.live_bytes(0)
g.peak_reset()
m = g.mark()
older = alloc(2 * MIB)
g.step(7)
with g.tag("forward"):
    a = alloc(4 * MIB)
    b = alloc(1 * MIB)
assert rt.cudaFree(a) == 0
out["peak"] = g.peak_bytes(0)
out["live"] = g.live_bytes(0)
out["since"] = g.live_since(m)
out["dump"] = g.dump()
print("RESULT " + json.dumps(out))
'''

PYTEST_TESTS = RUNTIME + '''
import pytest


@pytest.mark.gpu_limit_memory("4 MiB")
@pytest.mark.gpu_limit_leaks("0")
def test_within() -> None:
    p = alloc(2 * MIB)
    assert rt.cudaFree(p) == 0


@pytest.mark.gpu_limit_leaks("1 MiB")
def test_leaks_too_much() -> None:
    alloc(3 * MIB)  # LEAK_LINE


@pytest.mark.gpu_limit_memory("4 MiB")
def test_peaks_too_high() -> None:
    p = alloc(8 * MIB)  # PEAK_LINE
    assert rt.cudaFree(p) == 0


# Exactly at both limits, after a test that left 3 MiB live and one that
# peaked at 8 MiB: neither counts against it.
@pytest.mark.gpu_limit_memory("2 MiB")
@pytest.mark.gpu_limit_leaks("2 MiB")
def test_at_limits() -> None:
    alloc(2 * MIB)
'''


def check(ok: bool, what: str, got: object = None) -> None:
    if not ok:
        FAILURES.append(what)
        print(f"FAIL {what}" + (f": {got!r}" if got is not None else ""))


def base_env(cudart: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEMTRACE_", "GMTSIM_", "PYTEST_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["GMT_TEST_CUDART"] = cudart
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        # python is not instrumented: the runtime must lead LD_PRELOAD
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def run_traced(launcher: str, env: Dict[str, str], tmp: str, text: str, name: str) -> subprocess.CompletedProcess:
    """text as the script tmp/name, run under `gpumemtrace run`."""
    script = os.path.join(tmp, name)
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    return subprocess.run([launcher, "run", "--dir", tmp, "--", sys.executable, script], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=240)


def test_traced(launcher: str, env: Dict[str, str], tmp: str) -> None:
    r = run_traced(launcher, env, tmp, SCRIPT, "api.py")
    m = re.search(r"^RESULT (.*)$", r.stdout, re.M)
    check(r.returncode == 0 and m is not None, "traced: the script ran", r.stdout + r.stderr)
    if m is None:
        return
    out = json.loads(m.group(1))
    mib = 1 << 20
    check(out["available"] is True, "traced: available()")
    check(out["live0"] == 0, "traced: nothing live at first", out["live0"])
    check(out["peak"] == 7 * mib, "traced: the peak since the reset", out["peak"])
    check(out["live"] == 3 * mib, "traced: live bytes", out["live"])
    check(out["since"] == [3 * mib, 2], "traced: what the stretch left", out["since"])
    check(bool(out["dump"]) and os.path.isfile(out["dump"]), "traced: dump() wrote its snapshot", out["dump"])
    if out["dump"] and os.path.isfile(out["dump"]):
        with open(out["dump"], encoding="utf-8") as f:
            doc = json.load(f)
        tagged = {a["size"] for a in doc["allocations"]
                  for s in doc["stacks"] if s["id"] == a["stack"] and s["tags"] == ["forward"]}
        check(doc["reason"] == "api" and tagged == {1 * mib}, "traced: the tag in the snapshot", tagged)
        steps = [e.get("step") for e in doc["history"]["events"] if e["op"] == "step"]
        check(steps == [7], "traced: the step in the history", steps)


TAGS = RUNTIME + '''
import gpumemtrace as g

kept = []
with g.tag("lone \\ud800 surrogate"):
    kept.append(alloc(77 * 1024))
for i in range(5000):
    with g.tag(f"tag{i}"):
        if i in (0, 4093, 4094, 4999):
            kept.append(alloc((i + 1) * 1024))
print("DUMP", g.dump())
'''


def test_tags(launcher: str, env: Dict[str, str], tmp: str) -> None:
    """tag() never raises for capacity or encoding: names past the 4,095th
    share one tag (one warning), a lone surrogate is escaped."""
    r = run_traced(launcher, env, tmp, TAGS, "tags.py")
    m = re.search(r"^DUMP (.*)$", r.stdout, re.M)
    check(r.returncode == 0 and m is not None, "tags: 5,000 names and a lone surrogate, no exception",
          r.stdout + r.stderr[-800:])
    warned = [x for x in r.stderr.splitlines() if "distinct tag names" in x]
    check(len(warned) == 1 and "(tags past the 4095th)" in warned[0], "tags: one warning when the table fills",
          r.stderr[-800:])
    if m is None or not os.path.isfile(m.group(1)):
        return
    with open(m.group(1), encoding="utf-8") as f:
        doc = json.load(f)
    stacks = {s["id"]: s["tags"] for s in doc["stacks"]}
    by_size = {a["size"]: stacks.get(a["stack"]) for a in doc["allocations"]}
    want = {1024: ["tag0"], 4094 * 1024: ["tag4093"], 4095 * 1024: ["(tags past the 4095th)"],
            5000 * 1024: ["(tags past the 4095th)"], 77 * 1024: ["lone \\ud800 surrogate"]}
    check(all(by_size.get(k) == v for k, v in want.items()), "tags: each allocation's tag in the snapshot",
          {k: (by_size.get(k), v) for k, v in want.items()})


# stderr closed and a data file opened in its place (fd 2), then an
# out-of-memory: the report goes to the stderr the process started with.
REUSED = RUNTIME + '''
os.close(2)
data = open(os.environ["DATA"], "wb")
assert data.fileno() == 2
p = ctypes.c_void_p()
print("FAILED", rt.cudaMalloc(ctypes.byref(p), 1 << 44), flush=True)
data.write(b"payload")
data.close()
'''


def test_stderr_reused(launcher: str, env: Dict[str, str], tmp: str) -> None:
    """The tracer's lines never land in a file the program opened at fd 2."""
    data = os.path.join(tmp, "data.bin")
    r = run_traced(launcher, dict(env, DATA=data), tmp, REUSED, "reused.py")
    with open(data, "rb") as f:
        content = f.read()
    check(r.returncode == 0 and "FAILED 2" in r.stdout and content == b"payload",
          "stderr reused: the program's file holds its own bytes only", (r.returncode, content[:300]))
    check("gpumemtrace: out of memory" in r.stderr, "stderr reused: the report on the stderr it started with",
          r.stderr[-600:])


# A framework's state with values out of the schema's ranges: each refused
# (EINVAL), never written; the good one written, every snapshot valid.
FRAMEWORK = RUNTIME + '''
import copy, json
import gpumemtrace as g

kept = alloc(1024 * 1024)
good = {"name": "torch", "version": "2.0", "reason": "api", "file": None, "oom": None,
        "devices": [{"device": 0, "allocated_bytes": 512, "reserved_bytes": 1024,
                     "reserved_unallocated_bytes": 512, "largest_free_block_bytes": None}],
        "segments": [{"device": 0, "address": 4096, "total_size": 1024, "stream": 0,
                      "blocks": [{"address": 4096, "size": 512, "state": "active_allocated", "frames": []}]}],
        "truncated": False}
bad = [("devices", 0, "device", -1), ("devices", 0, "allocated_bytes", -5),
       ("devices", 0, "largest_free_block_bytes", 1.5), ("devices", 0, "reserved_bytes", "1024"),
       ("segments", 0, "address", -4096), ("segments", 0, "total_size", None),
       ("block", 0, "size", -1), ("block", 0, "frames", [{"name": "f"}] * 17), ("block", 0, "state", 3),
       ("top", 0, "version", None), ("top", 0, "truncated", "no"), ("top", 0, "oom", {"requested_bytes": -1}),
       ("top", 0, "devices", {}), ("top", 0, "file", 7)]
results = []
for where, i, key, value in bad:
    state = copy.deepcopy(good)
    target = {"devices": state["devices"][0], "segments": state["segments"][0],
              "block": state["segments"][0]["blocks"][0], "top": state}[where]
    target[key] = value
    try:
        g.framework(json.dumps(state))
        results.append([where, key, "taken", g.dump()])
    except OSError as e:
        results.append([where, key, e.errno, None])
missing = copy.deepcopy(good)
del missing["devices"][0]["reserved_unallocated_bytes"]
try:
    g.framework(json.dumps(missing))
    results.append(["devices", "reserved_unallocated_bytes missing", "taken", g.dump()])
except OSError as e:
    results.append(["devices", "reserved_unallocated_bytes missing", e.errno, None])
g.framework(json.dumps(good))
print("GOOD", g.dump())
print("RESULTS", json.dumps(results))
'''


def test_framework_ranges(launcher: str, env: Dict[str, str], tmp: str) -> None:
    """gmt_framework refuses a state out of the schema's ranges (EINVAL, as
    the header says) and never writes a snapshot that fails the schema."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
    import schema_check
    sub = os.path.join(tmp, "framework")
    os.mkdir(sub)
    r = run_traced(launcher, env, sub, FRAMEWORK, "framework.py")
    m = re.search(r"^RESULTS (.*)$", r.stdout, re.M)
    good = re.search(r"^GOOD (.*)$", r.stdout, re.M)
    check(r.returncode == 0 and m is not None and good is not None, "framework: the script ran",
          r.stdout + r.stderr[-800:])
    if m is None:
        return
    for where, key, got, path in json.loads(m.group(1)):
        check(got == 22, f"framework: {where} {key} out of range refused with EINVAL", (got, path))
    snaps = schema_check.snapshot_files(sub)
    problems = schema_check.validate(snaps)
    check(not problems, "framework: every snapshot passes the schema", problems[:5])
    if good is not None and os.path.isfile(good.group(1)):
        with open(good.group(1), encoding="utf-8") as f:
            doc = json.load(f)
        check((doc.get("framework") or {}).get("name") == "torch", "framework: the good state written",
              doc.get("framework"))


def test_untraced(source: str, env: Dict[str, str], tmp: str) -> None:
    script = os.path.join(tmp, "api_untraced.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(SCRIPT)
    plain = dict(env, PYTHONPATH=os.path.join(source, "tools", "python"),
                 LD_LIBRARY_PATH=env.get("LD_LIBRARY_PATH", ""))
    r = subprocess.run([sys.executable, script], env=plain, cwd=tmp, capture_output=True, text=True, timeout=120)
    m = re.search(r"^RESULT (.*)$", r.stdout, re.M)
    check(r.returncode == 0 and m is not None, "untraced: the script ran", r.stdout + r.stderr)
    if m is not None:
        out = json.loads(m.group(1))
        check(out["available"] is False and out["dump"] is None
              and all(out[k] == 0 and type(out[k]) is int for k in ("live0", "peak", "live"))
              and out["since"] == [0, 0], "untraced: numbers are 0, dump() None", out)
    warned = [ln for ln in r.stderr.splitlines() if "Warning" in ln]
    check(not warned, "untraced: no warning", r.stderr)


def python_with_pytest() -> str:
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import pytest"], capture_output=True).returncode == 0:
            return py
    return ""


def test_plugin(launcher: str, env: Dict[str, str], tmp: str) -> bool:
    py = python_with_pytest()
    if not py:
        print("skip: no python3 with pytest (apt-get install python3-pytest): the plugin's test")
        return False
    work = os.path.join(tmp, "plugin")
    os.makedirs(work)
    with open(os.path.join(work, "test_limits.py"), "w", encoding="utf-8") as f:
        f.write(PYTEST_TESTS)
    lines = PYTEST_TESTS.splitlines()
    leak_line = next(i for i, ln in enumerate(lines) if "LEAK_LINE" in ln) + 1
    peak_line = next(i for i, ln in enumerate(lines) if "PEAK_LINE" in ln) + 1
    junit = os.path.join(work, "out.xml")
    r = subprocess.run([launcher, "run", "--dir", work, "--", py, "-m", "pytest", "-p", "no:cacheprovider",
                        "-p", "gpumemtrace.pytest_plugin", f"--junitxml={junit}", "test_limits.py"],
                       env=env, cwd=work, capture_output=True, text=True, timeout=240)
    output = r.stdout + r.stderr
    check(r.returncode == 1, "plugin: pytest's status 1", output)
    try:
        cases = {tc.get("name"): tc for tc in ET.parse(junit).getroot().iter("testcase")}
    except (OSError, ET.ParseError) as e:
        check(False, "plugin: the JUnit report", f"{e}\n{output}")
        return True
    failed = sorted(n for n, tc in cases.items() if tc.find("failure") is not None)
    check(failed == ["test_leaks_too_much", "test_peaks_too_high"], "plugin: exactly the tests over their limits fail",
          f"{failed}\n{output}")
    def failure_of(name: str) -> str:
        tc = cases.get(name)
        fail = tc.find("failure") if tc is not None else None
        return (fail.get("message") or "") + (fail.text or "") if fail is not None else ""

    text = failure_of("test_leaks_too_much")
    check("left 3.00 MiB of GPU memory in 1 allocation" in text and "limit of 1.00 MiB" in text,
          "plugin: the leak's bytes and limit", text)
    check(f"\u2190 test_leaks_too_much (test_limits.py:{leak_line})" in text, "plugin: the leak's site", text)
    text = failure_of("test_peaks_too_high")
    check("used 8.00 MiB of GPU memory at its peak" in text and "limit of 4.00 MiB" in text,
          "plugin: the peak and limit", text)
    check(f"\u2190 test_peaks_too_high (test_limits.py:{peak_line})" in text, "plugin: the peak's site", text)
    return True


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, cudart, source = sys.argv[1:4]
    env = base_env(os.path.abspath(cudart))
    with tempfile.TemporaryDirectory(prefix="gmt-pyapi-") as tmp:
        test_traced(os.path.abspath(launcher), env, tmp)
        test_untraced(source, env, tmp)
        test_tags(os.path.abspath(launcher), env, tmp)
        test_stderr_reused(os.path.abspath(launcher), env, tmp)
        test_framework_ranges(os.path.abspath(launcher), env, tmp)
        test_plugin(os.path.abspath(launcher), env, tmp)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
