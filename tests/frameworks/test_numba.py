#!/usr/bin/env python3
"""numba.cuda — a real CUDA client no one here wrote (Debian's python3-numba:
ctypes over libcuda, frees it defers, a flush and one retry at an
out-of-memory) — traced on the stock simulated driver as a CUDA 12.8 driver
(docs/simulator.md, "Older drivers"), each program run traced and untraced:

- every run behaves as untraced: exit status, output (numba's exception
  text included) and stderr but the tracer's own lines;
- leak: device arrays, to_device and copy_to_host, then arrays kept until
  numba raises: one snapshot, whose live allocations are exactly the
  simulator's ledger at that failure, named at the program's own line,
  with numba's framework section (no pending frees);
- deferred: frees numba deferred let a failure recover (one line naming
  numba, no snapshot); a later failure raised after numba flushed two
  pending frees: its snapshot says they were pending and flushed;
- defer_cleanup: under cuda.defer_cleanup() numba flushes nothing: the
  snapshot says one pending free, none flushed, and the viewer says so;
- phases: a failure raised to the program, then another call's that numba
  recovers from: the snapshot is the raised one's, at its call, the
  recovered one a line;
- threads: four threads allocate, then the main thread leaks until numba
  raises: the snapshot's live set is the ledger's, each thread's arrays
  named at its own line.

Every snapshot is checked against docs/snapshot.schema.json. Exits 77
(skipped) when numba cannot be imported by the interpreter it needs.

Usage: test_numba.py LAUNCHER SOURCE_ROOT DRIVER12_DIR"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_torch_double import FAILURES, check, schema_ok  # noqa: E402

MIB = 1 << 20
# numba is Debian's, for Debian's interpreter.
PYTHON = "/usr/bin/python3"

PRELUDE = '''import threading
import numpy as np
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError
MIB = 1 << 20
'''

LEAK = PRELUDE + '''host = np.arange(4096, dtype=np.float32)
d = cuda.to_device(host)
back = d.copy_to_host()
print("ROUNDTRIP", back.shape, float(back.sum()))
keep = []
try:
    while True:
        keep.append(cuda.device_array(64 * MIB, dtype=np.uint8))  # LEAK-LINE
except CudaAPIError as e:
    print("RAISED", len(keep), e)
'''

DEFERRED = PRELUDE + '''keep = [cuda.device_array(300 * MIB, dtype=np.uint8) for _ in range(2)]
tmp = [cuda.device_array(60 * MIB, dtype=np.uint8) for _ in range(3)]
del tmp
x = cuda.device_array(300 * MIB, dtype=np.uint8)
print("RECOVERED")
tmp = [cuda.device_array(40 * MIB, dtype=np.uint8) for _ in range(2)]
del tmp
try:
    cuda.device_array(400 * MIB, dtype=np.uint8)
except CudaAPIError as e:
    print("RAISED", e)
'''

DEFER_CLEANUP = PRELUDE + '''keep = [cuda.device_array(300 * MIB, dtype=np.uint8) for _ in range(3)]
with cuda.defer_cleanup():
    a = cuda.device_array(50 * MIB, dtype=np.uint8)
    del a
    try:
        cuda.device_array(200 * MIB, dtype=np.uint8)
    except CudaAPIError as e:
        print("RAISED", e)
'''

PHASES = PRELUDE + '''keep = [cuda.device_array(300 * MIB, dtype=np.uint8) for _ in range(3)]
try:
    cuda.device_array(500 * MIB, dtype=np.uint8)  # PHASE3-LINE
except CudaAPIError:
    print("phase 3 raised")
tmp = [cuda.device_array(40 * MIB, dtype=np.uint8) for _ in range(2)]
del tmp
x = cuda.device_array(100 * MIB, dtype=np.uint8)  # PHASE4-LINE
print("phase 4 recovered")
'''

THREADS = PRELUDE + '''held = {}
def worker(n):
    held[n] = [cuda.device_array((n + 1) * MIB, dtype=np.uint8) for _ in range(8)]  # THREAD-LINE
cuda.current_context()
threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
keep = []
try:
    while True:
        keep.append(cuda.device_array(100 * MIB, dtype=np.uint8))  # MAIN-LINE
except CudaAPIError as e:
    print("RAISED", sum(len(v) for v in held.values()), len(keep))
'''


def numba_importable(driver12: str) -> bool:
    """Whether numba.cuda imports, in the environment the runs have (under
    the sanitizers: their runtime preloaded, the instrumented driver)."""
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = subprocess.run([PYTHON, "-c", "import numba.cuda"], env=base_env(driver12, tmp), capture_output=True,
                           timeout=120)
    return r.returncode == 0


def base_env(driver12: str, tmp: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEMTRACE_", "GMTSIM_", "NUMBA_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["LD_LIBRARY_PATH"] = driver12
    env["GMTSIM_MEMORY"] = "1G"
    env["GMTSIM_LEDGER_DIR"] = os.path.join(tmp, "ledger")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def line_of(text: str, mark: str) -> int:
    return next(i for i, s in enumerate(text.splitlines(), 1) if mark in s)


def run_both(launcher: str, driver12: str, tmp: str, text: str, name: str) -> subprocess.CompletedProcess:
    """Runs the program untraced, then traced; checks that the traced run
    behaves as the untraced one, and returns the traced run."""
    script = os.path.join(tmp, name)
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    runs = []
    for traced in (False, True):
        out = os.path.join(tmp, "traced" if traced else "untraced")
        os.makedirs(os.path.join(out, "ledger"), exist_ok=True)
        env = base_env(driver12, out)
        cmd = [launcher, "run", "--dir", out, "--", PYTHON, script] if traced else [PYTHON, script]
        runs.append(subprocess.run(cmd, env=env, cwd=out, capture_output=True, text=True, timeout=300))
    plain, traced = runs
    ours = [s for s in traced.stderr.splitlines() if not s.startswith("gpumemtrace:")]
    check(traced.returncode == plain.returncode and traced.stdout == plain.stdout
          and ours == plain.stderr.splitlines(),
          f"{name}: traced as untraced (exit status, output, stderr but the tracer's lines)",
          (plain.returncode, traced.returncode, plain.stdout[-300:], traced.stdout[-300:],
           plain.stderr[-300:], "\n".join(ours)[-300:]))
    return traced


def oom_snapshots(tmp: str) -> List[str]:
    return sorted(glob.glob(os.path.join(tmp, "traced", "gpumemtrace.*.oom.*.json")))


def ledger_at(tmp: str, failure: int) -> Dict[int, int]:
    """The simulator's live device allocations (address: size) at its
    failure number `failure` of the traced run."""
    paths = glob.glob(os.path.join(tmp, "traced", "ledger", f"ledger.*.oom.{failure}.json"))
    if len(paths) != 1:
        return {}
    with open(paths[0], encoding="utf-8") as f:
        led = json.load(f)
    return {int(a["address"], 16): a["size"] for a in led["live"] if a["kind"] == "device"}


def live_of(snap: dict) -> Dict[int, int]:
    return {int(a["address"], 16): a["size"] for a in snap["allocations"] if a["kind"] == "device"}


def failures_of(tmp: str) -> int:
    return len(glob.glob(os.path.join(tmp, "traced", "ledger", "ledger.*.oom.*.json")))


def one_snapshot(tmp: str, name: str) -> Tuple[List[str], dict]:
    paths = oom_snapshots(tmp)
    check(len(paths) == 1, f"{name}: one snapshot, of the failure numba raised", paths)
    if len(paths) != 1:
        return paths, {}
    with open(paths[0], encoding="utf-8") as f:
        return paths, json.load(f)


def labels_of(snap: dict) -> List[str]:
    return [s.get("site", {}).get("label", "") for s in snap.get("stacks", [])]


def test_leak(launcher: str, source: str, driver12: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = run_both(launcher, driver12, tmp, LEAK, "leak.py")
        # 15 of 64 MiB: the small array pins a 2 MiB page (docs/simulator.md)
        check("ROUNDTRIP (4096,) 0.0" in r.stdout and "RAISED 15 " in r.stdout,
              "leak: device memory reads as zeros; 15 arrays of 64 MiB fit beside the small one",
              r.stdout[-300:])
        paths, snap = one_snapshot(tmp, "leak")
        if not snap:
            return
        n = failures_of(tmp)
        check(n == 2 and live_of(snap) == ledger_at(tmp, n),
              "leak: the snapshot's live allocations are the ledger's at numba's second failure",
              (n, len(live_of(snap)), len(ledger_at(tmp, n))))
        fw = snap.get("framework") or {}
        check(fw.get("name") == "numba" and fw.get("pending_frees") == {
                  "count": 0, "bytes": 0, "flushed_count": 0, "flushed_bytes": 0}
              and fw["devices"][0]["allocated_bytes"] == 15 * 64 * MIB + 4096 * 4,
              "leak: numba's section: its live device memory, no pending free", fw)
        where = f"leak.py:{line_of(LEAK, 'LEAK-LINE')}"
        check(any(where in lab for lab in labels_of(snap)) and where in r.stderr,
              "leak: the arrays named at the program's own line", (labels_of(snap), r.stderr[-500:]))
        check(not any("frameworks.py" in lab for lab in labels_of(snap)),
              "leak: no frame of the tracer's own Python in a site", labels_of(snap))
        schema_ok(source, paths, "leak")


def test_deferred(launcher: str, source: str, driver12: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = run_both(launcher, driver12, tmp, DEFERRED, "deferred.py")
        recovered = [s for s in r.stderr.splitlines() if "out of memory, recovered" in s]
        check(len(recovered) == 1 and "numba" in recovered[0] and "300 MiB" in recovered[0],
              "deferred: the failure numba recovered from is one line naming numba", recovered)
        paths, snap = one_snapshot(tmp, "deferred")
        if not snap:
            return
        n = failures_of(tmp)
        check(n == 3 and live_of(snap) == ledger_at(tmp, n),
              "deferred: the snapshot's live allocations are the ledger's at the raised failure",
              (n, len(live_of(snap)), len(ledger_at(tmp, n))))
        pending = (snap.get("framework") or {}).get("pending_frees")
        check(pending == {"count": 2, "bytes": 80 * MIB, "flushed_count": 2, "flushed_bytes": 80 * MIB},
              "deferred: two frees of 40 MiB were pending at the failure, and numba flushed both", pending)
        check(snap["failed_request"]["size"] == 400 * MIB, "deferred: the failed request is the raised one",
              snap.get("failed_request"))
        schema_ok(source, paths, "deferred")


def test_defer_cleanup(launcher: str, source: str, driver12: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = run_both(launcher, driver12, tmp, DEFER_CLEANUP, "defer.py")
        check("RAISED" in r.stdout, "defer_cleanup: numba raised", r.stdout[-300:])
        paths, snap = one_snapshot(tmp, "defer_cleanup")
        if not snap:
            return
        pending = (snap.get("framework") or {}).get("pending_frees")
        check(pending == {"count": 1, "bytes": 50 * MIB, "flushed_count": 0, "flushed_bytes": 0},
              "defer_cleanup: one free of 50 MiB pending, none flushed", pending)
        n = failures_of(tmp)
        check(live_of(snap) == ledger_at(tmp, n) and 0 < len(live_of(snap)) == 4,
              "defer_cleanup: the live set is the ledger's, the pending array still in it", len(live_of(snap)))
        v = subprocess.run([launcher, "view", paths[0]], capture_output=True, text=True, timeout=60)
        flat = " ".join(v.stdout.split())
        check("1 pending free (50.0 MiB) held when the allocation failed; it flushed none" in flat,
              "defer_cleanup: the viewer says what was pending and that nothing was flushed", flat[-900:])
        schema_ok(source, paths, "defer_cleanup")


def test_phases(launcher: str, source: str, driver12: str) -> None:
    """A failure raised to the program (twice: numba's retry), then another
    call's failure numba recovers from: the snapshot is the raised one's,
    with its call's stack; the recovered one is a line of its own."""
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = run_both(launcher, driver12, tmp, PHASES, "phases.py")
        recovered = [s for s in r.stderr.splitlines() if "out of memory, recovered" in s]
        check(len(recovered) == 1 and "100 MiB" in recovered[0],
              "phases: phase 4's failure is one recovered line", recovered)
        paths, snap = one_snapshot(tmp, "phases")
        if not snap:
            return
        fr = snap["failed_request"]
        stack = next((s for s in snap.get("stacks", []) if s.get("id") == fr.get("stack")), {})
        where = f"phases.py:{line_of(PHASES, 'PHASE3-LINE')}"
        check(fr["size"] == 500 * MIB and snap["episode"].get("failures") == 2
              and where in stack.get("site", {}).get("label", ""),
              "phases: the snapshot describes phase 3's raised failure, at its own call",
              (fr.get("size"), snap["episode"].get("failures"), stack.get("site")))
        check(live_of(snap) == ledger_at(tmp, 2), "phases: its live set is the ledger's at that failure",
              len(live_of(snap)))
        schema_ok(source, paths, "phases")


def test_threads(launcher: str, source: str, driver12: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-numba-") as tmp:
        r = run_both(launcher, driver12, tmp, THREADS, "threads.py")
        m = re.search(r"RAISED (\d+) (\d+)", r.stdout)
        check(m is not None and m.group(1) == "32", "threads: four threads made 32 arrays", r.stdout[-300:])
        paths, snap = one_snapshot(tmp, "threads")
        if not snap:
            return
        n = failures_of(tmp)
        live = live_of(snap)
        check(live == ledger_at(tmp, n) and m is not None and len(live) == 32 + int(m.group(2)),
              "threads: the snapshot's live allocations are the ledger's at the raised failure",
              (len(live), len(ledger_at(tmp, n))))
        labels = " ".join(labels_of(snap))
        check(f"threads.py:{line_of(THREADS, 'THREAD-LINE')}" in labels
              and f"threads.py:{line_of(THREADS, 'MAIN-LINE')}" in labels,
              "threads: each thread's arrays named at its own line", labels[-600:])
        schema_ok(source, paths, "threads")


def main(argv: List[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, source, driver12 = os.path.abspath(argv[0]), argv[1], argv[2]
    if not numba_importable(driver12):
        print(f"skipped: {PYTHON} cannot import numba.cuda (Debian's python3-numba)")
        return 77
    test_leak(launcher, source, driver12)
    test_deferred(launcher, source, driver12)
    test_defer_cleanup(launcher, source, driver12)
    test_phases(launcher, source, driver12)
    test_threads(launcher, source, driver12)
    print(f"{'FAIL' if FAILURES else 'ok'}: {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
