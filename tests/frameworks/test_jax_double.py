#!/usr/bin/env python3
"""The Python bootstrap and JAX's allocator (docs/guide.md, "JAX's
allocator"), on the simulated GPU with a test double of JAX (fake_jax/: a toy
BFC allocator over libcuda through ctypes, its JaxRuntimeError, its
memory_stats()), under `gpumemtrace run`:

- limit: the allocator reserved 75 % of the 1 GiB device at start; the
  program holds 500 MiB of it and asks for 400 MiB more: JAX refuses with no
  driver failure, and still the snapshot is written — its failed request is
  JAX's (refused_by framework, the size the message names, the program's
  line and no frame of gpumemtrace's), its framework section holds what
  memory_stats() said in the program's handler (in use, the pool — exactly
  the snapshot's live driver memory —, its largest free block, its limit),
  the verdict is framework_limit on those numbers, with the fraction that
  would have fitted (XLA_PYTHON_CLIENT_MEM_FRACTION) as its remedy; the
  report, the exit snapshot and the viewer say so;
- fragmentation: free bytes inside the pool cover the request, no free
  block does: allocator_fragmentation on the allocator's own numbers;
- two refusals: each one the program was told of is an episode of its own
  (the first ended "reported"), two files;
- driver: without preallocation the allocator asks the driver for a region
  and is refused twice: one episode of those two failures, joined by JAX's
  hand-over (refused_by driver), not framework_limit;
- other errors: a JaxRuntimeError that is no out-of-memory hands nothing
  over;
- thread: the refusal reported on a Python thread with no current context:
  the device's free and total bytes are still known (asked in its primary
  context), and so the remedy that needs them;
- off: GPUMEMTRACE_FRAMEWORKS=0: JAX's own refusal reaches no one, no
  snapshot.

Every snapshot is checked against docs/snapshot.schema.json.

Usage: test_jax_double.py LAUNCHER SOURCE_ROOT"""

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

LIMIT = r'''
import jax
import jax.numpy as jnp
MIB = 1 << 20
keep = [jnp.empty(300 * MIB), jnp.empty(200 * MIB)]
try:
    jnp.empty(400 * MIB)  # the refused request
except jax.errors.JaxRuntimeError as e:
    st = jax.local_devices()[0].memory_stats()
    print("STATE", st["bytes_in_use"], st["pool_bytes"], st["largest_free_block_bytes"], st["bytes_limit"])
    print("ERROR", e)
'''

# 11 blocks of 64 MiB in the 768 MiB pool, every other one freed: 448 MiB
# free, the largest piece 128 MiB (the last block and the pool's tail).
FRAGMENTED = r'''
import jax
import jax.numpy as jnp
MIB = 1 << 20
blocks = [jnp.empty(64 * MIB) for _ in range(11)]
del blocks[::2]
try:
    jnp.empty(192 * MIB)
except jax.errors.JaxRuntimeError:
    st = jax.local_devices()[0].memory_stats()
    print("STATE", st["pool_bytes"] - st["bytes_in_use"], st["largest_free_block_bytes"])
'''

TWICE = r'''
import jax
import jax.numpy as jnp
MIB = 1 << 20
keep = jnp.empty(700 * MIB)
for n in range(2):
    try:
        jnp.empty(100 * MIB)
    except jax.errors.JaxRuntimeError:
        print("REFUSED", n)
'''

# No preallocation: 500 MiB taken by another library first, then 601 MiB
# asked of JAX, whose region (602 MiB) and then the request alone the
# driver refuses.
DRIVER = r'''
import jax
import jax.numpy as jnp
from gmt_sim_driver import Driver
MIB = 1 << 20
other = Driver().malloc(500 * MIB)
try:
    jnp.empty(601 * MIB)
except jax.errors.JaxRuntimeError as e:
    print("ERROR", e)
'''

# The refusal on a Python thread of its own, which has no context (the
# simulated driver's current context is per thread, as CUDA's).
THREAD = r'''
import threading
import jax
import jax.numpy as jnp
MIB = 1 << 20
keep = [jnp.empty(500 * MIB)]
def ask():
    try:
        jnp.empty(400 * MIB)
    except jax.errors.JaxRuntimeError as e:
        print("ERROR", e)
t = threading.Thread(target=ask)
t.start()
t.join()
'''

OTHER = r'''
import jax
import jax.numpy as jnp
x = jnp.empty(1 << 20)
try:
    jax.fail("INTERNAL: the compiler gave up")
except jax.errors.JaxRuntimeError as e:
    print("ERROR", e)
'''


def jax_env(source: str) -> Dict[str, str]:
    env = common.base_env(source)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "fake_jax", "site-packages"), os.path.join(HERE, "fake_common", "site-packages")])
    return env


def frames_of(doc: dict, stack: int) -> List[dict]:
    for s in doc.get("stacks", []):
        if s["id"] == stack:
            return s["frames"]
    return []


def test_limit(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, env, tmp, LIMIT, "limit.py")
        m = re.search(r"^STATE (\d+) (\d+) (\d+) (\d+)$", r.stdout, re.M)
        ooms, doc = common.oom_snapshot(tmp)
        check(r.returncode == 0 and m is not None and len(ooms) == 1,
              "limit: JAX's own refusal has its snapshot", r.stdout + r.stderr[-800:])
        if m is None or len(ooms) != 1:
            return
        used, pool, largest, limit = map(int, m.groups())
        fr = doc.get("failed_request") or {}
        check((fr.get("api"), fr.get("refused_by"), fr.get("size"), fr.get("device")) ==
              ("jax", "framework", 400 * MIB, 0),
              "limit: the failed request is JAX's, of the size its message names", fr)
        frames = frames_of(doc, fr.get("stack", 0))
        files = [f.get("file") or "" for f in frames]
        check(bool(frames) and all(f["python"] for f in frames) and
              any(f.get("file", "").endswith("limit.py") and f.get("line") == 7 for f in frames) and
              not any(x.endswith(("gpumemtrace/frameworks.py", "gpumemtrace/__init__.py")) for x in files),
              "limit: its stack is the program's Python stack at the raise, without gpumemtrace's frames", files)
        fw = doc.get("framework") or {}
        dev = (fw.get("devices") or [{}])[0]
        check((fw.get("name"), fw.get("reason"), fw.get("segments")) == ("jax", "oom", []),
              "limit: JAX's framework section, at the oom", {k: fw.get(k) for k in ("name", "reason")})
        got = (dev.get("allocated_bytes"), dev.get("reserved_bytes"), dev.get("reserved_unallocated_bytes"),
               dev.get("largest_free_block_bytes"), dev.get("limit_bytes"))
        check(got == (used, pool, pool - used, largest, limit) and used == 500 * MIB,
              "limit: in use, pool, unallocated, largest free block, limit = memory_stats() in the handler",
              (got, (used, pool, largest, limit)))
        driver = sum(a["size"] for a in doc["allocations"] if a["kind"] == "device")
        check(driver == pool, "limit: the pool is exactly the live driver allocations", (driver, pool))
        dg = doc.get("diagnosis") or {}
        nums = dg.get("numbers") or {}
        check(dg.get("verdict") == "framework_limit" and
              (nums.get("framework_allocated_bytes"), nums.get("framework_limit_bytes"),
               nums.get("framework_requested_bytes")) == (used, limit, 400 * MIB),
              "limit: the verdict framework_limit, on JAX's numbers",
              (dg.get("verdict"), dg.get("summary"), nums.get("framework_allocated_bytes"),
               nums.get("framework_limit_bytes")))
        total = nums.get("total_bytes") or 1
        hundredths = -(-(used + 400 * MIB) * 100 // total)
        fraction = f"XLA_PYTHON_CLIENT_MEM_FRACTION={hundredths // 100}.{hundredths % 100:02d}"
        remedies = dg.get("remedies") or []
        check([x["name"] for x in remedies] == ["raise_framework_limit"] and fraction in remedies[0]["text"] and
              remedies[0]["bytes"] == used + 400 * MIB - limit,
              "limit: the remedy is the fraction that fits", (remedies, fraction))
        check("jax's allocator refused 400 MiB on device 0" in r.stderr and "verdict: framework_limit" in r.stderr
              and f"try: {fraction}" in r.stderr,
              "limit: the report says JAX refused, why, and what to try", r.stderr[-1000:])
        ep = doc.get("episode") or {}
        check((ep.get("failures"), ep.get("described"), ep["listed"][0]["api"]) == (1, 1, "jax"),
              "limit: an episode of that one failure", ep)
        exits, exit_fw = common.exit_framework(tmp)
        check(exit_fw.get("name") == "jax" and exit_fw.get("reason") == "exit" and
              (exit_fw.get("devices") or [{}])[0].get("allocated_bytes") == used,
              "limit: the exit snapshot has JAX's state at exit", exit_fw)
        schema_ok(source, ooms + exits, "limit")
        v, flat, counters = common.view_counters(launcher, env, source, ooms[0], used, pool, pool - used)
        check(v.returncode == 0 and counters and "jax 0.11.2+fake" in flat and
              "refused by jax's own allocator on GPU 0 (no driver call failed" in flat,
              "limit: the viewer's summary shows JAX's counters and its refusal", v.stdout[-1500:] + v.stderr)
        html = os.path.join(tmp, "report.html")
        h = subprocess.run([launcher, "view", "--html", html, ooms[0]], env=env, capture_output=True, text=True,
                           timeout=60)
        page = open(html, encoding="utf-8").read() if h.returncode == 0 else ""
        check("jax's own allocator refused <strong>400 MiB</strong>" in page and "framework_limit" in page,
              "limit: the HTML report says JAX's allocator refused it", h.stderr[-400:])


def test_fragmentation(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        got = common.run_to_oom(launcher, env, tmp, FRAGMENTED, "frag.py", r"^STATE (\d+) (\d+)$", "fragmentation")
        if got is None:
            return
        r, m, dg, ooms = got
        free_in, largest = map(int, m.groups())
        nums = dg.get("numbers") or {}
        check((free_in, largest) == (448 * MIB, 128 * MIB), "fragmentation: the pool as built", (free_in, largest))
        check(dg.get("verdict") == "allocator_fragmentation" and
              (nums.get("framework_requested_bytes"), nums.get("reserved_unallocated_bytes"),
               nums.get("largest_free_block_bytes")) == (192 * MIB, free_in, largest),
              "fragmentation: allocator_fragmentation, on JAX's numbers",
              (dg.get("verdict"), nums.get("reserved_unallocated_bytes"), nums.get("largest_free_block_bytes")))
        check(not dg.get("remedies"), "fragmentation: no remedy (expandable segments are PyTorch's)",
              dg.get("remedies"))
        schema_ok(source, ooms, "fragmentation")


def test_twice(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, env, tmp, TWICE, "twice.py", on="oom")
        paths = sorted(glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json")))
        docs = []
        for p in paths:
            with open(p, encoding="utf-8") as f:
                docs.append(json.load(f))
        eps = [(d["episode"]["id"], d["episode"]["failures"], d["failed_request"]["failure"]) for d in docs]
        check(r.returncode == 0 and "REFUSED 1" in r.stdout and sorted(eps) == [(1, 1, 1), (2, 1, 2)],
              "two refusals: two episodes, one file each", (eps, r.stdout))
        check(r.stderr.count("out of memory: jax's allocator refused") == 2, "two refusals: two reports", r.stderr[-1200:])
        schema_ok(source, paths, "two refusals")


def test_driver(launcher: str, source: str, env: Dict[str, str]) -> None:
    env = dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false", XLA_PYTHON_CLIENT_MEM_FRACTION="1.0")
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, env, tmp, DRIVER, "driver.py", on="oom")
        ooms, doc = common.oom_snapshot(tmp)
        fr = doc.get("failed_request") or {}
        ep = doc.get("episode") or {}
        fw = doc.get("framework") or {}
        check(r.returncode == 0 and "ERROR RESOURCE_EXHAUSTED" in r.stdout and len(ooms) == 1,
              "driver: one snapshot", r.stdout + r.stderr[-800:])
        check((fr.get("api"), fr.get("refused_by"), fr.get("size")) == ("cuMemAlloc_v2", "driver", 601 * MIB) and
              (ep.get("failures"), ep.get("described")) == (2, 2),
              "driver: the driver's two failures, one episode, described at the last", (fr, ep.get("failures")))
        check(fw.get("name") == "jax" and (fw.get("oom") or {}).get("requested_bytes") == 601 * MIB and
              (doc.get("diagnosis") or {}).get("verdict") != "framework_limit",
              "driver: JAX's state joined, and not its limit", (fw.get("oom"), (doc.get("diagnosis") or {}).get("verdict")))
        schema_ok(source, ooms, "driver")


def test_thread(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, env, tmp, THREAD, "thread.py", on="oom")
        ooms, doc = common.oom_snapshot(tmp)
        check(r.returncode == 0 and "ERROR RESOURCE_EXHAUSTED" in r.stdout and len(ooms) == 1,
              "thread: one snapshot", r.stdout + r.stderr[-800:])
        if len(ooms) != 1:
            return
        dev = (doc.get("devices") or [{}])[0]
        dg = doc.get("diagnosis") or {}
        check(dev.get("total_bytes") == 1 << 30 and isinstance(dev.get("free_bytes"), int) and
              [x["name"] for x in dg.get("remedies") or []] == ["raise_framework_limit"],
              "thread: a thread without a context still has the device's numbers (its primary context's),"
              " and the remedy that needs them", (dev, dg.get("remedies")))
        schema_ok(source, ooms, "thread")


def test_other_error(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, env, tmp, OTHER, "other.py", on="oom")
        # The tracer's one line is the run's note that it wrote nothing.
        said = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
        check(r.returncode == 0 and "ERROR INTERNAL" in r.stdout and not glob.glob(os.path.join(tmp, "*.json")) and
              len(said) == 1 and said[0].startswith("gpumemtrace: no snapshot written:"),
              "other errors: nothing handed over, nothing written", r.stdout + r.stderr[-600:])


def test_off(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-jax-") as tmp:
        r = run(launcher, dict(env, GPUMEMTRACE_FRAMEWORKS="0"), tmp, LIMIT, "off.py", on="oom")
        check(r.returncode == 0 and "ERROR RESOURCE_EXHAUSTED" in r.stdout and
              not glob.glob(os.path.join(tmp, "*.json")),
              "off: GPUMEMTRACE_FRAMEWORKS=0: JAX's own refusal has no snapshot", r.stdout + r.stderr[-600:])


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    launcher, source = os.path.abspath(argv[0]), argv[1]
    env = jax_env(source)
    test_limit(launcher, source, env)
    test_fragmentation(launcher, source, env)
    test_twice(launcher, source, env)
    test_driver(launcher, source, env)
    test_thread(launcher, source, env)
    test_other_error(launcher, env)
    test_off(launcher, env)
    print(f"{'FAIL' if common.FAILURES else 'ok'}: {len(common.FAILURES)} failed")
    return 1 if common.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
