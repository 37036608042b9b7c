#!/usr/bin/env python3
"""The Python bootstrap and CuPy's pool (docs/guide.md, "CuPy's pool"), on
the simulated GPU with a test double of CuPy (fake_cupy/: its toy pool over
libcuda through ctypes, its OutOfMemoryError), under `gpumemtrace run`:

- oom: a program keeps 103 MiB, caches three 64 MiB chunks and asks for
  1 TiB: the pool frees its cache and fails twice more; the episode's
  snapshot holds a "framework" section of CuPy's whose allocated, reserved
  and reserved-but-unallocated bytes are what the program's pool said in its
  handler (used_bytes, total_bytes, free_bytes), whose reserved bytes are
  exactly the live driver allocations of the snapshot, with the request the
  error was raised for, no largest free block (CuPy says none) and no
  fragmentation verdict; the exit snapshot has the state at exit; the viewer
  shows the pool's counters;
- recovered: a failure the pool recovers from is one line on stderr, the
  one it raises after a full report; with PyTorch watching too, the line
  names both;
- no pool (an allocator of no pool's): the error still marks the episode
  as the program's — full report, snapshot with the request alone;
- limit: the pool's own limit refuses a request with no driver failure: its
  error still makes it a failure of the tracer's — a snapshot of CuPy's
  refusal, the verdict framework_limit and the limit that would fit; after
  a driver failure the program saw, such a refusal is an episode of its own;
- async pool: a MemoryAsyncPool whose release threshold (its "limit") is
  2**64 - 1: the state is handed over without a warning, with no limit;
- a CuPy whose error cannot be observed (FAKE_CUPY_NO_ERROR=1): one
  warning, the program runs, no framework section;
- off: GPUMEMTRACE_FRAMEWORKS=0: no framework section.

Every snapshot is checked against docs/snapshot.schema.json.

Usage: test_cupy_double.py LAUNCHER SOURCE_ROOT"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch_double as common  # noqa: E402
from test_torch_double import check, run, schema_ok  # noqa: E402

MIB = 1 << 20

PROGRAM = r'''
import cupy
MIB = 1 << 20
pool = cupy.get_default_memory_pool()
keep = [cupy.empty(100 * MIB), cupy.empty(3 * MIB)]
cached = [cupy.empty(64 * MIB) for _ in range(3)]
del cached
try:
    cupy.empty(1 << 40)
except cupy.cuda.memory.OutOfMemoryError as e:
    print("STATE", pool.used_bytes(), pool.total_bytes(), pool.free_bytes())
    print("ERROR", e)
'''

# The pool recovers from one failure (its cache freed, the retry succeeds),
# then raises at another.
RECOVER = r'''
import cupy
MIB = 1 << 20
cached = [cupy.empty(400 * MIB) for _ in range(2)]
del cached
x = cupy.empty(600 * MIB)
print("RECOVERED")
try:
    cupy.empty(1 << 40)
except cupy.cuda.memory.OutOfMemoryError:
    print("RAISED")
'''

LIMITED = r'''
import cupy
MIB = 1 << 20
pool = cupy.get_default_memory_pool()
pool.set_limit(size=200 * MIB)
keep = cupy.empty(150 * MIB)
try:
    cupy.empty(100 * MIB)
except cupy.cuda.memory.OutOfMemoryError as e:
    print("LIMITED", e)
'''

# A driver failure the program sees, then the pool's limit refuses a request:
# the second is an episode of its own, and the first episode's file keeps its
# own state.
AFTER = r'''
import cupy
MIB = 1 << 20
pool = cupy.get_default_memory_pool()
keep = cupy.empty(150 * MIB)
try:
    cupy.empty(1 << 40)
except cupy.cuda.memory.OutOfMemoryError:
    print("RAISED")
pool.set_limit(size=200 * MIB)
try:
    cupy.empty(100 * MIB)
except cupy.cuda.memory.OutOfMemoryError as e:
    print("LIMITED", e)
'''


def cupy_env(source: str) -> Dict[str, str]:
    env = common.base_env(source)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "fake_cupy", "site-packages"), os.path.join(HERE, "fake_common", "site-packages")])
    return env


def test_oom(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, env, tmp, PROGRAM, "oom.py")
        m = re.search(r"^STATE (\d+) (\d+) (\d+)$", r.stdout, re.M)
        ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
        check(r.returncode == 0 and m is not None and len(ooms) == 1, "oom: one oom snapshot",
              r.stdout + r.stderr[-800:])
        if m is None or len(ooms) != 1:
            return
        used, total, free = map(int, m.groups())
        with open(ooms[0], encoding="utf-8") as f:
            doc = json.load(f)
        fw = doc.get("framework") or {}
        check((fw.get("name"), fw.get("reason"), fw.get("segments")) == ("cupy", "oom", []),
              "oom: CuPy's framework section, at the oom, with no segments", {k: fw.get(k) for k in ("name", "reason")})
        dev = (fw.get("devices") or [{}])[0]
        got = (dev.get("allocated_bytes"), dev.get("reserved_bytes"), dev.get("reserved_unallocated_bytes"))
        check(got == (used, total, free), "oom: allocated, reserved, unallocated = used_bytes, total_bytes, free_bytes",
              (got, (used, total, free)))
        check(used == 103 * MIB and free == 0, "oom: the pool freed its cache before raising", (used, free))
        driver = sum(a["size"] for a in doc["allocations"] if a["kind"] == "device")
        check(driver == total, "oom: the pool's total is exactly the live driver allocations", (driver, total))
        check(dev.get("largest_free_block_bytes", 0) is None and dev.get("limit_bytes", 0) is None,
              "oom: no largest free block and no limit (CuPy says none, none set)", dev)
        check((fw.get("oom") or {}).get("requested_bytes") == 1 << 40, "oom: the request the error was raised for",
              fw.get("oom"))
        dg = doc.get("diagnosis") or {}
        names = [v["name"] for v in dg.get("verdicts", [])]
        check("allocator_fragmentation" not in names and dg.get("verdict") == "never_fits",
              "oom: never_fits, and no fragmentation verdict without a largest free block", names)
        ep = doc.get("episode") or {}
        check(ep.get("failures") == 3 and ep["freed"]["bytes"] == 192 * MIB,
              "oom: the episode: three failures, the cache (192 MiB) released between them",
              (ep.get("failures"), (ep.get("freed") or {}).get("bytes")))
        exits, exit_fw = common.exit_framework(tmp)
        check(exit_fw.get("reason") == "exit" and
              (exit_fw.get("devices") or [{}])[0].get("reserved_bytes") == total,
              "oom: the exit snapshot has the pool's state at exit", exit_fw)
        schema_ok(source, ooms + exits, "oom")
        v, flat, counters = common.view_counters(launcher, env, source, ooms[0], used, total, free)
        check(v.returncode == 0 and counters and "cupy 14.2.0+fake" in flat and "largest free block" not in flat,
              "oom: the viewer's summary shows the pool's counters", v.stdout[-1500:] + v.stderr)


def test_recovered(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        common.recovered_then_raised(launcher, env, tmp, RECOVER, "recover.py", "cupy", "recovered")


def test_both(launcher: str, env: Dict[str, str]) -> None:
    """PyTorch and CuPy in one program: both watch, and the recovered line
    names them both."""
    both = dict(env, PYTHONPATH=os.pathsep.join([env["PYTHONPATH"], os.path.join(HERE, "fake_torch", "site-packages")]))
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        text = "import torch\ntorch.cuda.init()\n" + RECOVER
        common.recovered_then_raised(launcher, both, tmp, text, "both.py", "torch/cupy", "both")


# No pool: the error is raised at the first failure; then an allocation
# succeeds, as a program that handles it goes on.
DIRECT = r'''
import cupy
MIB = 1 << 20
cupy.cuda.set_allocator(cupy.cuda.memory.malloc_direct)
keep = cupy.empty(100 * MIB)
try:
    cupy.empty(1 << 40)
except cupy.cuda.memory.OutOfMemoryError:
    print("RAISED")
more = cupy.empty(1 * MIB)
'''


def test_no_pool(launcher: str, source: str, env: Dict[str, str]) -> None:
    """An allocator that is no pool's: the error still tells the tracer the
    program saw the out-of-memory — not recovered, its snapshot written with
    the request and no pool's counters."""
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, env, tmp, DIRECT, "direct.py", on="oom")
        ooms, doc = common.oom_snapshot(tmp)
        fw = doc.get("framework") or {}
        check(r.returncode == 0 and "RAISED" in r.stdout and "recovered" not in r.stderr and
              r.stderr.count("verdict:") == 1 and len(ooms) == 1,
              "no pool: the full report and the snapshot", r.stdout + r.stderr[-800:])
        check(fw.get("devices") == [] and (fw.get("oom") or {}).get("requested_bytes") == 1 << 40,
              "no pool: the request, no counters", fw)
        if ooms:
            v = subprocess.run([launcher, "view", ooms[0]], env=env, capture_output=True, text=True, timeout=60)
            check(v.returncode == 0 and "no counters: its allocator keeps no pool" in v.stdout,
                  "no pool: the viewer says so", v.stdout[-800:] + v.stderr)
        schema_ok(source, ooms, "no pool")


def test_limit(launcher: str, source: str, env: Dict[str, str]) -> None:
    """The pool's own limit refuses with no driver failure: CuPy's error
    makes the failure the tracer's all the same — a snapshot of the refusal,
    framework_limit, the limit that would have fitted."""
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, env, tmp, LIMITED, "limit.py", on="oom")
        ooms, doc = common.oom_snapshot(tmp)
        fr = doc.get("failed_request") or {}
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        check(r.returncode == 0 and "LIMITED Out of memory allocating 104,857,600 bytes" in r.stdout and
              len(ooms) == 1, "limit: the pool's limit refused the request; its snapshot", r.stdout + r.stderr)
        check((fr.get("api"), fr.get("refused_by"), fr.get("size")) == ("cupy", "framework", 100 * MIB),
              "limit: the failed request is CuPy's", fr)
        check(dg.get("verdict") == "framework_limit" and
              (nums.get("framework_allocated_bytes"), nums.get("framework_limit_bytes")) == (150 * MIB, 200 * MIB),
              "limit: framework_limit, on the pool's numbers", (dg.get("verdict"), dg.get("summary")))
        remedies = dg.get("remedies") or []
        check([x["name"] for x in remedies] == ["raise_framework_limit"] and
              f"set_limit(size={250 * MIB})" in remedies[0]["text"] and
              f"try: raise the pool's limit to at least 250 MiB" in r.stderr,
              "limit: the limit that fits, offered", (remedies, r.stderr[-800:]))
        schema_ok(source, ooms, "limit")
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, env, tmp, AFTER, "after.py", on="oom")
        docs = sorted((d for d in common.snapshots(tmp) if d.get("reason") == "oom"),
                      key=lambda d: d["episode"]["id"])
        got = [((d.get("framework") or {}).get("oom") or {}).get("requested_bytes") for d in docs]
        check(r.returncode == 0 and "RAISED" in r.stdout and "LIMITED" in r.stdout and
              got == [1 << 40, 100 * MIB] and [d["failed_request"]["refused_by"] for d in docs] == ["driver", "framework"],
              "limit: a refusal after a failure the program saw is an episode of its own; the first file keeps its state",
              (r.stdout, got))


ASYNC = r'''
import cupy
MIB = 1 << 20
pool = cupy.cuda.MemoryAsyncPool()
pool.set_limit(size=(1 << 64) - 1)
cupy.cuda.set_allocator(pool.malloc)
keep = cupy.empty(10 * MIB)
print("USED", pool.used_bytes())
'''


def test_async_pool(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, env, tmp, ASYNC, "async.py")
        exits, fw = common.exit_framework(tmp)
        dev = (fw.get("devices") or [{}])[0]
        check(r.returncode == 0 and "gpumemtrace:" not in r.stderr and
              (dev.get("allocated_bytes"), dev.get("limit_bytes")) == (10 * MIB, None),
              "async pool: a release threshold of 2**64 - 1 is no limit; the state is handed over",
              (dev, r.stderr[-600:]))


def test_unobservable(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, dict(env, FAKE_CUPY_NO_ERROR="1"), tmp,
                "import cupy\nx = cupy.empty(1 << 20)\nprint('RAN')\n", "old.py")
        warn = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
        check(r.returncode == 0 and "RAN" in r.stdout and len(warn) == 1 and "OutOfMemoryError" in warn[0],
              "unobservable: one warning, the program runs", r.stderr)
        exits = common.snapshots(tmp)
        check(len(exits) == 1 and "framework" not in exits[0], "unobservable: no framework section", len(exits))


def test_off(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-cupy-") as tmp:
        r = run(launcher, dict(env, GPUMEMTRACE_FRAMEWORKS="0"), tmp, PROGRAM, "off.py")
        docs = common.snapshots(tmp)
        check(r.returncode == 0 and len(docs) == 2 and not any("framework" in d for d in docs),
              "off: GPUMEMTRACE_FRAMEWORKS=0: no framework section", (len(docs), r.stderr[-400:]))
        check(not [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:") and "out of memory" not in ln
                   and not ln.startswith("gpumemtrace:   ")],
              "off: no warning (the tracer knows the bootstrap's option)", r.stderr[-600:])


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    launcher, source = os.path.abspath(argv[0]), argv[1]
    env = cupy_env(source)
    test_oom(launcher, source, env)
    test_recovered(launcher, env)
    test_both(launcher, env)
    test_no_pool(launcher, source, env)
    test_limit(launcher, source, env)
    test_async_pool(launcher, env)
    test_unobservable(launcher, env)
    test_off(launcher, env)
    print(f"{'FAIL' if common.FAILURES else 'ok'}: {len(common.FAILURES)} failed")
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
