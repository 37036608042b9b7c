#!/usr/bin/env python3
"""The Python bootstrap and PyTorch's own view (docs/guide.md, "PyTorch's own
view"), on the simulated GPU with a test double of PyTorch (fake_torch/: its
toy caching allocator over libcuda through ctypes, and the functions the
bootstrap uses), under `gpumemtrace run`:

- join: a program keeps three tensors, caches three 64 MiB segments and asks
  for 1 TiB: the out-of-memory snapshot holds a "framework" section whose
  segments are exactly the snapshot's live driver allocations (address and
  size, each joined), whose allocated and reserved bytes are what the
  program's torch.cuda.memory_allocated() and memory_reserved() said after
  the failure, and whose reserved-but-unallocated bytes are the toy
  allocator's free bytes inside its segments; its allocator_history is
  PyTorch's history (segment events and failures too) and alloc_conf the
  settings PyTorch's snapshot names (minor 14); the episode has the two
  failures (before and after the cache was released); the pickle beside it
  is PyTorch's snapshot; the exit snapshot has the state handed over at exit,
  its history PyTorch's but the snapshot entry the first hand-over left;
- expandable: with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as
  PyTorch's: a VMM reservation of 1 1/8 of the device per pool, in pages of
  20 MiB (large pool) and 2 MiB (small), mapped as requests need them and
  unmapped, whole pages only, when the cache is released; the segments
  those of PyTorch's snapshot, the runs of mapped pages (two starting at
  their pool's reservation, one after pages the cache released), each
  joined and expandable; PyTorch's history of the mappings, address and
  size (EXPANDABLE derives each); expandable segments not offered as the
  remedy;
- fragmentation: free bytes inside the allocator's segments cover a
  request but no free block does: the verdict allocator_fragmentation, on
  the allocator's own numbers;
- fraction: under set_per_process_memory_fraction(0.5), PyTorch refuses a
  request without a driver call: its limit the allowed maximum its
  observer was told, the verdict framework_limit on its reserved bytes (on
  its allocated bytes the request would have fitted), the remedy the
  fraction that fits, in PyTorch's call;
- recovered: a failure the toy allocator recovers from (its cache freed,
  the retry succeeded) is one line on stderr, the one it raises after a full
  report; without the bootstrap both are full reports; a failure PyTorch
  never reports is written when its episode ends; with expandable
  segments, a refused page that a mapped page follows, unreported, is one
  line too, and a refused page with none after it a full report;
- chain: a program with its own sitecustomize on PYTHONPATH still runs it;
- no torch: a program that never imports torch loads nothing of
  gpumemtrace's Python, writes no framework file, prints what it prints
  without the tracer;
- an old torch (FAKE_TORCH_MINIMAL=1: no _record_memory_history): one
  warning, the program runs, no framework section;
- PyTorch's cudaMallocAsync backend (FAKE_TORCH_BACKEND): nothing asked of
  it, no warning;
- off: GPUMEMTRACE_FRAMEWORKS=0: no framework section, no pickle.

Every snapshot is checked against docs/snapshot.schema.json.

Usage: test_torch_double.py LAUNCHER SOURCE_ROOT"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES: List[str] = []
MIB = 1 << 20

PROGRAM = r'''
import sys
import torch
MIB = 1 << 20
keep = [torch.empty(3 * MIB), torch.empty(512 * 1024), torch.empty(100)]
cached = [torch.empty(64 * MIB) for _ in range(3)]
del cached
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    pass
a = torch.cuda._allocator()
print("STATE", torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), a.cached_free())
print("SEGMENTS", " ".join(f"{s.address}:{s.size}" for s in a.segments))
print("MODULES", sorted(m for m in sys.modules if m.startswith("gpumemtrace")))
'''

# Expandable segments, as PyTorch's, on the 1 GiB device: each pool reserves
# 1 1/8 of it (1152 MiB) in its pages, the large pool 58 of 20 MiB (1160
# MiB, L), the small one 576 of 2 MiB (1152 MiB, S), and maps pages as
# requests need them. a: pages 0-3 of L (80 MiB), a at L. b: the 16 MiB free
# after a and the unmapped range after it hold 64 MiB: 48 MiB more, pages 4-6
# (60 MiB at L+80), b at L+64, 12 MiB free after it. small: page 0 of S.
# empty_cache() after a's free: of the free blocks, by size, the 12 MiB at
# L+128 holds no whole page, the 64 MiB at L+0 pages 0-2 (60 MiB unmapped at
# L), 4 MiB staying mapped at L+60. d (32 MiB): the lowest unmapped range,
# L (60 MiB, then the 4 MiB), maps pages 0-1 (40 MiB), d at L. Then 960 MiB:
# the unmapped range after b's page 6 (1020 MiB at L+140, with the 12 MiB
# before it) holds it, but 48 pages are more than the device has left (122
# MiB mapped), and releasing the cache unmaps nothing (no free block holds a
# whole page): out of memory. The segments, as PyTorch's snapshot reports
# them, are the runs of mapped pages: L (40 MiB), L+60 (80 MiB: pages 3-6),
# S (2 MiB).
EXPANDABLE = r'''
import torch
MIB = 1 << 20
a = torch.empty(64 * MIB)
b = torch.empty(64 * MIB)
small = torch.empty(100)
del a
torch.cuda.empty_cache()
d = torch.empty(32 * MIB)
try:
    torch.empty(960 * MIB)
except torch.cuda.OutOfMemoryError:
    pass
print("SEGMENTS", " ".join(f"{s['address']}:{s['total_size']}" for s in torch.cuda.memory._snapshot()["segments"]))
print("RESERVATIONS", " ".join(str(sp.address) for sp in torch.cuda._allocator().spaces))
'''

# Fragmentation inside the allocator: a 600 MiB segment cut into 64 MiB
# blocks, every other one freed (256 MiB free in blocks of 64 MiB, 88 MiB at
# the end), the rest of the device taken, then 128 MiB asked.
FRAGMENTED = r'''
import torch
MIB = 1 << 20
t = torch.empty(600 * MIB)
del t
blocks = [torch.empty(64 * MIB) for _ in range(8)]
del blocks[::2]
blocker = torch.empty(400 * MIB)
try:
    torch.empty(128 * MIB)
except torch.cuda.OutOfMemoryError:
    pass
a = torch.cuda._allocator()
print("STATE", a.cached_free(), max(b["size"] for s in torch.cuda.memory._snapshot()["segments"]
                                   for b in s["blocks"] if b["state"] == "inactive"))
'''

# A training loop: 256 MiB of weights; each step's forward keeps 8
# activations of 32 MiB (from the cache after the first), then the optimizer
# steps; step 6 has a long batch of 64 activations and runs out at the 25th
# (1 GiB device). The program prints PyTorch's count at the last optimizer
# step and at the failure.
TRAIN = r'''
import torch
MIB = 1 << 20
weights = torch.empty(256 * MIB)
opt = torch.optim.Optimizer([weights])
steps = 0
at_step = None
for n in range(1, 7):
    acts = []
    try:
        for _ in range(8 if n < 6 else 64):
            acts.append(torch.empty(32 * MIB))
    except torch.cuda.OutOfMemoryError:
        print("OOM", n, steps, torch.cuda.memory_allocated(), at_step)
        break
    del acts
    opt.step()
    steps += 1
    at_step = torch.cuda.memory_allocated()
'''

# A storm of episodes: 30 requests too big for the device, each refused
# (PyTorch reports each), a small tensor made between them.
STORM = r'''
import torch
MIB = 1 << 20
keep = torch.empty(3 * MIB)
for _ in range(30):
    try:
        torch.empty(1 << 40)
    except torch.cuda.OutOfMemoryError:
        pass
    x = torch.empty(MIB)
    del x
print("DONE")
'''

# A failure the allocator recovers from: 800 MiB cached, 600 MiB asked of a
# 1 GiB device (the driver fails, the cache goes, the retry succeeds); then
# one it raises.
RECOVER = r'''
import torch
MIB = 1 << 20
cached = [torch.empty(400 * MIB) for _ in range(2)]
del cached
x = torch.empty(600 * MIB)
print("RECOVERED", torch.cuda.memory_allocated())
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("RAISED")
'''

# A failure that is not the framework's: the driver asked directly (as a
# library's own cudaMalloc would) while PyTorch watches, then the end.
UNREPORTED = r'''
import torch
from gmt_sim_driver import Driver
torch.cuda.init()
print("FAILED", Driver().malloc(2 << 30) is None)
'''

# Under expandable segments: 400 MiB cached in pages before 400 MiB live;
# 600 MiB more cannot be mapped beside them until PyTorch unmaps the cached
# pages (a cuMemCreate of a 20 MiB page fails first), then it fits.
RECOVER_PAGES = r'''
import torch
MIB = 1 << 20
a = torch.empty(400 * MIB)
b = torch.empty(400 * MIB)
del a
x = torch.empty(600 * MIB)
print("RECOVERED", torch.cuda.memory_allocated())
'''

# A page the driver refuses that nobody reports; a page made and released;
# the same refused again (the same episode: memory was freed since), and no
# page after it.
UNREPORTED_PAGE = r'''
import torch
from gmt_sim_driver import Driver
torch.cuda.init()
d = Driver()
first = d.create(2 << 30) is None
d.release(d.create(20 << 20))
print("FAILED", first, d.create(2 << 30) is None)
'''

PLAIN = r'''
import sys
print("PLAIN", sorted(m for m in sys.modules if m.startswith(("gpumemtrace", "torch"))))
'''


def check(ok: bool, what: str, got: object = None) -> None:
    if not ok:
        FAILURES.append(what)
        print(f"FAIL {what}" + (f": {got!r}" if got is not None else ""))
    else:
        print(f"ok   {what}")


def base_env(source: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEMTRACE_", "GMTSIM_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env["GMTSIM_MEMORY"] = "1G"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(HERE, "fake_torch", "site-packages"), os.path.join(HERE, "fake_common", "site-packages")])
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def run(launcher: str, env: Dict[str, str], tmp: str, text: str, name: str,
        on: str = "oom,exit") -> subprocess.CompletedProcess:
    script = os.path.join(tmp, name)
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    return subprocess.run([launcher, "run", "--dir", tmp, "--snapshot-on", on, "--", sys.executable, script],
                          env=env, cwd=tmp, capture_output=True, text=True, timeout=300)


def trace_entry(e: dict) -> list:
    """A PyTorch history entry as the snapshot's allocator_history has it:
    an oom's address is its device_free (PyTorch's name; it has no addr)."""
    return [e["action"], e["device_free" if e["action"] == "oom" else "addr"], e["size"], e["stream"]]


def snapshots(d: str) -> List[dict]:
    """Every snapshot a run wrote into d."""
    out = []
    for p in glob.glob(os.path.join(d, "gpumemtrace.*.json")):
        with open(p, encoding="utf-8") as f:
            out.append(json.load(f))
    return out


def schema_ok(source: str, paths: List[str], what: str) -> None:
    if not paths:
        return
    r = subprocess.run([sys.executable, os.path.join(source, "tools", "validate_snapshot.py"), *paths],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"{what}: every snapshot valid against the schema", r.stdout[-800:] + r.stderr[-400:])


def oom_snapshot(tmp: str) -> Tuple[List[str], dict]:
    """The run's oom snapshots, and the one when there is exactly one."""
    ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
    if len(ooms) != 1:
        return ooms, {}
    with open(ooms[0], encoding="utf-8") as f:
        return ooms, json.load(f)


def exit_framework(tmp: str) -> Tuple[List[str], dict]:
    """The run's exit snapshots, and the framework section of the one."""
    exits = glob.glob(os.path.join(tmp, "gpumemtrace.*.exit.*.json"))
    if len(exits) != 1:
        return exits, {}
    with open(exits[0], encoding="utf-8") as f:
        return exits, json.load(f).get("framework") or {}


def view_counters(launcher: str, env: Dict[str, str], source: str, path: str, allocated: int, reserved: int,
                  unallocated: int) -> Tuple[subprocess.CompletedProcess, str, bool]:
    """The viewer's summary of a snapshot, its words on one line, and
    whether it shows the framework's counters on device 0 as given."""
    sys.path.insert(0, os.path.join(source, "tools", "python"))
    from gpumemtrace.view.model import fmt_bytes
    v = subprocess.run([launcher, "view", path], env=env, capture_output=True, text=True, timeout=60)
    flat = " ".join(v.stdout.split())
    line = (f"GPU 0: allocated {fmt_bytes(allocated)}, reserved {fmt_bytes(reserved)}, "
            f"reserved but unallocated {fmt_bytes(unallocated)}")
    return v, flat, line in flat


def test_join(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, env, tmp, PROGRAM, "join.py")
        check(r.returncode == 0, "join: the program ran", r.stdout + r.stderr)
        m = re.search(r"^STATE (\d+) (\d+) (\d+)$", r.stdout, re.M)
        segs = re.search(r"^SEGMENTS (.*)$", r.stdout, re.M)
        ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
        check(m is not None and segs is not None and len(ooms) == 1, "join: one oom snapshot", (r.stdout, ooms))
        if m is None or segs is None or len(ooms) != 1:
            return
        allocated, reserved, cached_free = map(int, m.groups())
        with open(ooms[0], encoding="utf-8") as f:
            doc = json.load(f)
        fw = doc.get("framework") or {}
        check(fw.get("name") == "torch" and fw.get("reason") == "oom", "join: the framework section, at the oom",
              {k: fw.get(k) for k in ("name", "reason")})
        dev = (fw.get("devices") or [{}])[0]
        check(dev.get("allocated_bytes") == allocated, "join: allocated = torch.cuda.memory_allocated()",
              (dev.get("allocated_bytes"), allocated))
        check(dev.get("reserved_bytes") == reserved, "join: reserved = torch.cuda.memory_reserved()",
              (dev.get("reserved_bytes"), reserved))
        check(dev.get("reserved_unallocated_bytes") == cached_free,
              "join: reserved but unallocated = the allocator's free bytes in its segments",
              (dev.get("reserved_unallocated_bytes"), cached_free))
        active = sum(b["size"] for s in fw.get("segments", []) for b in s["blocks"] if b["state"] == "active_allocated")
        check(active == allocated, "join: allocated = the sum of active blocks", (active, allocated))
        want = sorted(tuple(map(int, x.split(":"))) for x in segs.group(1).split())
        got = sorted((s["address"], s["total_size"]) for s in fw.get("segments", []))
        driver = sorted((int(a["address"], 16), a["size"]) for a in doc["allocations"] if a["kind"] == "device")
        check(got == want, "join: the segments are the allocator's", (got, want))
        check(got == driver, "join: the segments are exactly the live driver allocations", (got, driver))
        check(all(s.get("allocation") is True for s in fw.get("segments", [])) and
              fw.get("segments_joined") == len(want), "join: every segment joined", fw.get("segments_joined"))
        # What PyTorch's observer is told: the most it may hold is the
        # device's total here (no memory fraction), not allocated bytes.
        total = next((d.get("total_bytes") for d in doc.get("devices", []) if d.get("index") == 0), None)
        oom = fw.get("oom") or {}
        check(oom.get("device") == 0 and oom.get("requested_bytes") == 1 << 40 and total is not None and
              oom.get("device_limit_bytes") == total and "device_allocated_bytes" not in oom and
              isinstance(oom.get("device_free_bytes"), int),
              "join: the observer's numbers: the 1 TiB asked, the device's total as PyTorch's limit", (oom, total))
        frames = [f["name"] for s in fw.get("segments", []) for b in s["blocks"] if b["state"] == "active_allocated"
                  for f in b["frames"][:3]]
        check("<module>" in frames, "join: the blocks carry the allocating Python frames", frames[:6])
        ep = doc.get("episode") or {}
        check(ep.get("failures") == 2 and ep.get("described") == 2 and ep.get("not_written") == 1 and
              ep["freed"]["bytes"] == 192 * MIB,
              "join: the episode: a failure, the cache released (192 MiB), a failure",
              (ep.get("failures"), ep.get("described"), (ep.get("freed") or {}).get("bytes")))
        pick = fw.get("file")
        ok = False
        if pick and os.path.isfile(pick):
            with open(pick, "rb") as f:
                ok = "segments" in pickle.load(f)
        check(ok, "join: PyTorch's snapshot saved beside it", pick)
        # minor 14: the history for the replay, every event of PyTorch's own
        # (no snapshot entries here), and its settings.
        hist = fw.get("allocator_history") or [{}]
        traced = []
        if ok:
            with open(pick, "rb") as f:
                traced = [trace_entry(e) for e in pickle.load(f)["device_traces"][0]]
        check(len(hist) == 1 and hist[0].get("device") == 0 and hist[0].get("complete") is True and
              hist[0].get("events") == traced and
              {e[0] for e in traced} == {"alloc", "free_requested", "free_completed", "segment_alloc",
                                         "segment_free", "oom"},
              "join: allocator_history is PyTorch's history, segments and failures too",
              (len(hist), len(hist[0].get("events") or []), len(traced)))
        check((fw.get("alloc_conf"), fw.get("alloc_conf_from")) == ("", "pytorch"),
              "join: the run's allocator settings, as PyTorch's snapshot says them",
              (fw.get("alloc_conf"), fw.get("alloc_conf_from")))
        exits, exit_fw = exit_framework(tmp)
        check(exit_fw.get("reason") == "exit" and (exit_fw.get("devices") or [{}])[0].get("reserved_bytes") == reserved,
              "join: the exit snapshot has the state handed over at exit", exit_fw.get("reason"))
        # The exit's history holds the snapshot entry the out-of-memory's
        # _snapshot() left, as PyTorch's does: not an allocator event, left out.
        traced = []
        if exit_fw.get("file") and os.path.isfile(exit_fw["file"]):
            with open(exit_fw["file"], "rb") as f:
                traced = [trace_entry(e) for e in pickle.load(f)["device_traces"][0]]
        kept = [e for e in traced if e[0] != "snapshot"]
        check(len(kept) < len(traced) and
              (exit_fw.get("allocator_history") or [{}])[0].get("events") == kept,
              "join: the exit's history is PyTorch's but its snapshot entries",
              (len(traced), len(kept), len((exit_fw.get("allocator_history") or [{}])[0].get("events") or [])))
        check("MODULES ['gpumemtrace', 'gpumemtrace.frameworks']" in r.stdout, "join: the bootstrap loaded its module",
              r.stdout)
        schema_ok(source, ooms + exits, "join")
        v, flat, counters = view_counters(launcher, env, source, ooms[0], allocated, reserved, cached_free)
        check(v.returncode == 0 and counters and f"{len(want)} of {len(want)} segments joined" in flat,
              "join: the viewer's summary shows the framework's counters", v.stdout[-1500:] + v.stderr)
        check(f"segments, most free first ({min(5, len(want))} of {len(want)})" in flat,
              "join: the viewer's summary lists the segments with their blocks", v.stdout[-1500:])
        export = os.path.join(tmp, "export.pickle")
        e = subprocess.run([launcher, "view", "--pytorch", export, ooms[0]], env=env, capture_output=True,
                           text=True, timeout=60)
        segs = {}
        if e.returncode == 0:
            with open(export, "rb") as f:
                segs = {sg["address"]: sg for sg in pickle.load(f)["segments"]}
        blocks = sorted((b["address"], b["size"], b["state"]) for sg in fw.get("segments", []) for b in sg["blocks"])
        exported = sorted((b["address"], b["size"], b["state"]) for a, _ in want for b in segs.get(a, {}).get("blocks", []))
        check(e.returncode == 0 and exported == blocks and
              sum(segs[a]["allocated_size"] for a, _ in want if a in segs) == allocated,
              "join: the PyTorch export holds PyTorch's blocks, allocated = memory_allocated()",
              (e.stderr[-400:], len(exported), len(blocks)))


def run_to_oom(launcher: str, env: Dict[str, str], tmp: str, text: str, name: str, line: str,
               what: str) -> Optional[Tuple[subprocess.CompletedProcess, "re.Match[str]", dict, List[str]]]:
    """Runs a program that ends in one out-of-memory: the run, its stdout
    line matching `line`, the snapshot's diagnosis and the oom files; None
    (a failure noted) when it did not."""
    r = run(launcher, env, tmp, text, name, on="oom")
    m = re.search(line, r.stdout, re.M)
    ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
    check(r.returncode == 0 and m is not None and len(ooms) == 1, f"{what}: one oom snapshot",
          r.stdout + r.stderr[-600:])
    if m is None or len(ooms) != 1:
        return None
    with open(ooms[0], encoding="utf-8") as f:
        return r, m, json.load(f).get("diagnosis") or {}, ooms


def test_fragmentation(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        got = run_to_oom(launcher, env, tmp, FRAGMENTED, "frag.py", r"^STATE (\d+) (\d+)$", "fragmentation")
        if got is None:
            return
        r, m, dg, ooms = got
        free_in, largest = map(int, m.groups())
        nums = dg.get("numbers") or {}
        check(dg.get("verdict") == "allocator_fragmentation", "fragmentation: the verdict",
              (dg.get("verdict"), dg.get("summary")))
        check((nums.get("framework_requested_bytes"), nums.get("reserved_unallocated_bytes"),
               nums.get("largest_free_block_bytes")) == (128 * MIB, free_in, largest),
              "fragmentation: the numbers it rests on are the allocator's",
              (nums.get("framework_requested_bytes"), nums.get("reserved_unallocated_bytes"),
               nums.get("largest_free_block_bytes"), free_in, largest))
        check("allocator_fragmentation" in r.stderr, "fragmentation: the report names it", r.stderr[-600:])
        remedies = [(x["name"], x["bytes"]) for x in dg.get("remedies") or []]
        check(remedies == [("expandable_segments", free_in)] and nums.get("framework_expandable") is False,
              "fragmentation: expandable segments offered, its segments not expandable",
              (remedies, nums.get("framework_expandable")))
        schema_ok(source, ooms, "fragmentation")


# Under a memory fraction of half the 1 GiB device: 24 tensors of 8 MiB,
# two in each 20 MiB segment (192 MiB allocated, 240 reserved), then 280 MiB:
# within the limit counted on allocated bytes (472 MiB), past it on reserved
# (520), which is what PyTorch weighs.
FRACTION = r'''
import torch
MIB = 1 << 20
torch.cuda.set_per_process_memory_fraction(0.5)
kept = [torch.empty(8 * MIB) for _ in range(24)]
print("STATE", torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
try:
    big = torch.empty(280 * MIB)
except torch.cuda.OutOfMemoryError:
    pass
'''


def test_fraction(launcher: str, source: str, env: Dict[str, str]) -> None:
    """PyTorch's per-process memory fraction as its own limit: it refuses
    without asking the driver; the verdict framework_limit on its reserved
    bytes, the remedy a fraction that fits, in PyTorch's call."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        got = run_to_oom(launcher, env, tmp, FRACTION, "fraction.py", r"^STATE (\d+) (\d+)$", "fraction")
        if got is None:
            return
        r, m, dg, ooms = got
        allocated, reserved = map(int, m.groups())
        with open(ooms[0], encoding="utf-8") as f:
            doc = json.load(f)
        fw = doc.get("framework") or {}
        limit = 512 * MIB
        check((allocated, reserved) == (192 * MIB, 240 * MIB), "fraction: two 8 MiB tensors a 20 MiB segment",
              (allocated, reserved))
        check((doc.get("failed_request") or {}).get("refused_by") == "framework" and
              (fw.get("oom") or {}).get("device_limit_bytes") == limit and
              (fw.get("devices") or [{}])[0].get("limit_bytes") == limit,
              "fraction: refused by PyTorch itself, its limit the 512 MiB its observer was told",
              (doc.get("failed_request"), fw.get("oom"), (fw.get("devices") or [{}])[0].get("limit_bytes")))
        check(dg.get("verdict") == "framework_limit" and
              "the 240 MiB it reserves and the 280 MiB asked exceed its limit of 512 MiB" in dg.get("summary", ""),
              "fraction: framework_limit, weighed on the reserved bytes", (dg.get("verdict"), dg.get("summary")))
        remedies = [(x["name"], x["text"]) for x in dg.get("remedies") or []]
        check(remedies[:1] and remedies[0][0] == "raise_framework_limit" and
              remedies[0][1].startswith("torch.cuda.set_per_process_memory_fraction(0.51): PyTorch's allocator "
                                        "may reserve 512 MiB (50% of the device's 1.00 GiB) and needed 520 MiB"),
              "fraction: the remedy is a fraction that fits, in PyTorch's call", remedies)
        schema_ok(source, ooms, "fraction")


def test_steps(launcher: str, source: str, env: Dict[str, str]) -> None:
    """Optimizer steps marked by the bootstrap; the step's memory measured in
    PyTorch's counters (its cache serves the step, not the driver); the
    remedies that rest on it."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        got = run_to_oom(launcher, env, tmp, TRAIN, "train.py", r"^OOM (\d+) (\d+) (\d+) (\d+)$", "steps")
        if got is None:
            return
        r, m, dg, ooms = got
        n, steps, now, at_step = map(int, m.groups())
        nums = dg.get("numbers") or {}
        check((nums.get("step"), nums.get("steps")) == (steps, steps) and n == steps + 1,
              "steps: each optimizer step marked", (nums.get("step"), nums.get("steps"), steps))
        check((nums.get("step_live_bytes"), nums.get("step_live_source")) == (now - at_step, "tensors"),
              "steps: the step's memory is its tensors': PyTorch's count now less at the step's mark",
              (nums.get("step_live_bytes"), nums.get("step_live_source"), now - at_step))
        names = [x["name"] for x in dg.get("remedies") or []]
        check(dg.get("verdict") == "exhaustion" and names[:2] == ["smaller_batch", "checkpointing"],
              "steps: a smaller batch and checkpointing offered", (dg.get("verdict"), names))
        batch = next((x for x in dg.get("remedies") or [] if x["name"] == "smaller_batch"), {})
        check(f"still live is {(now - at_step) >> 20} MiB" in batch.get("text", "") and "a batch of 1/2" in
              batch.get("text", ""), "steps: the remedy says how much", batch.get("text"))
        check("try: a smaller batch" in r.stderr, "steps: the report's try: line", r.stderr[-800:])
        schema_ok(source, ooms, "steps")
        # A program that marks its own steps: the bootstrap's marks stop.
        own = TRAIN.replace("    opt.step()\n", "    opt.step()\n    import gpumemtrace; gpumemtrace.step(1000 + n)\n")
        r = run(launcher, env, tmp, own, "own.py", on="oom")
        latest = max(glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json")), key=os.path.getmtime)
        with open(latest, encoding="utf-8") as f:
            nums = (json.load(f).get("diagnosis") or {}).get("numbers") or {}
        check(nums.get("step") == 1000 + steps and nums.get("step_live_source") == "tensors",
              "steps: the program's own marks, not the bootstrap's", (nums.get("step"), nums.get("step_live_source")))


def recovered_then_raised(launcher: str, env: Dict[str, str], tmp: str, text: str, name: str,
                          framework: str, what: str) -> None:
    """A program whose allocator recovers from one failure, then raises at
    another: one line and no snapshot for the first episode (no write held
    up the failing call), the full report and the snapshot for the second,
    and stats.oom_recovered 1 at exit."""
    r = run(launcher, env, tmp, text, name)
    check(r.returncode == 0 and "RECOVERED" in r.stdout and "RAISED" in r.stdout, f"{what}: the program ran",
          r.stdout + r.stderr[-800:])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
    first = [ln for ln in lines if "out of memory, recovered:" in ln]
    check(len(first) == 1 and f"of 600 MiB on device 0 failed 1 time; {framework} reported no out-of-memory" in first[0]
          and first[0].endswith(": no snapshot"),
          f"{what}: the recovered failure is one line, no snapshot", lines)
    check(r.stderr.count("verdict:") == 1 and r.stderr.index("recovered:") < r.stderr.index("verdict:"),
          f"{what}: the failure the program saw has the full report", r.stderr[-1200:])
    ooms, raised = oom_snapshot(tmp)
    exits = [d for d in snapshots(tmp) if d.get("reason") == "exit"]
    check(len(ooms) == 1 and (raised.get("failed_request") or {}).get("size") == 1 << 40 and
          len(exits) == 1 and exits[0]["stats"].get("oom_recovered") == 1,
          f"{what}: one snapshot, of the failure the program saw; oom_recovered 1",
          (len(ooms), [d["stats"].get("oom_recovered") for d in exits]))


def test_recovered(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        recovered_then_raised(launcher, env, tmp, RECOVER, "recover.py", "torch", "recovered")
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, dict(env, GPUMEMTRACE_FRAMEWORKS="0"), tmp, RECOVER, "recover-off.py")
        check("recovered:" not in r.stderr and r.stderr.count("verdict:") == 2,
              "recovered: without the bootstrap's observer, both failures are full reports", r.stderr[-1200:])


def test_recovered_pages(launcher: str, env: Dict[str, str]) -> None:
    """With expandable segments a page's success does not end an episode
    (the failing request maps pages too); one after the last failure, with
    no word from PyTorch by the episode's end, is a recovery all the same:
    one line, no snapshot. An episode whose last refused page has none
    after it is not."""
    pages = dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, pages, tmp, RECOVER_PAGES, "recover-pages.py")
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("gpumemtrace:")]
        ooms, _ = oom_snapshot(tmp)
        exits = [d for d in snapshots(tmp) if d.get("reason") == "exit"]
        check(r.returncode == 0 and "RECOVERED" in r.stdout and len(lines) == 1 and
              lines[0].startswith("gpumemtrace: out of memory, recovered: cuMemCreate of 20.0 MiB on device 0 failed")
              and lines[0].endswith(": no snapshot"),
              "recovered pages: one line", r.stdout + r.stderr[-1200:])
        check(not ooms and len(exits) == 1 and exits[0]["stats"].get("oom_recovered") == 1,
              "recovered pages: no oom snapshot; oom_recovered 1",
              (ooms, [d["stats"].get("oom_recovered") for d in exits]))
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, pages, tmp, UNREPORTED_PAGE, "unreported-page.py", on="oom")
        _, doc = oom_snapshot(tmp)
        ep = doc.get("episode") or {}
        check(r.returncode == 0 and "FAILED True True" in r.stdout and "verdict:" in r.stderr and
              "recovered" not in r.stderr and (ep.get("end"), ep.get("failures")) == ("exit", 2),
              "unreported page: the full report, written when the episode ended", r.stdout + r.stderr[-800:])


def test_unreported(launcher: str, env: Dict[str, str]) -> None:
    """A failure PyTorch never reports, with no success after it: written
    when the episode ends (at exit), with the full report."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, env, tmp, UNREPORTED, "unreported.py", on="oom")
        _, doc = oom_snapshot(tmp)
        ep = doc.get("episode") or {}
        check(r.returncode == 0 and "FAILED True" in r.stdout and "verdict:" in r.stderr and
              "recovered" not in r.stderr, "unreported: the full report", r.stdout + r.stderr[-800:])
        check((ep.get("end"), ep.get("described"), ep.get("not_written")) == ("exit", 0, 1),
              "unreported: one snapshot, taken when the episode ended", ep)


def test_storm(launcher: str, env: Dict[str, str]) -> None:
    """A storm of 30 episodes PyTorch reported: the tracer's files and
    PyTorch's pickles stay bounded (the first 8 episodes, and the latest),
    the latest episode's snapshot has PyTorch's state."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, env, tmp, STORM, "storm.py", on="oom")
        ooms = sorted(glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json")),
                      key=lambda p: int(p.rsplit(".", 2)[1]))
        pickles = glob.glob(os.path.join(tmp, "gpumemtrace.*.torch.*.pickle"))
        last: Dict = {}
        if ooms:
            with open(ooms[-1], encoding="utf-8") as f:
                last = json.load(f)
        check(r.returncode == 0 and "DONE" in r.stdout, "storm: the program ran", r.stdout + r.stderr[-800:])
        check(len(ooms) == 9 and len(pickles) <= 9, "storm: 9 oom snapshots, at most 9 pickles (8 episodes and exit)",
              (len(ooms), len(pickles)))
        check((last.get("episode") or {}).get("id") == 30 and (last.get("framework") or {}).get("name") == "torch",
              "storm: the last snapshot is episode 30's, with PyTorch's state",
              ((last.get("episode") or {}).get("id"), list(last.get("framework") or {})))
        check("episodes 9 to 30 of this process (22)" in r.stderr, "storm: one line says which were left out",
              r.stderr[-800:])


def test_chain(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        own = os.path.join(tmp, "own")
        os.mkdir(own)
        with open(os.path.join(own, "sitecustomize.py"), "w", encoding="utf-8") as f:
            f.write("import os\nos.environ['OWN_SITECUSTOMIZE'] = 'ran'\n")
        e = dict(env, PYTHONPATH=env["PYTHONPATH"] + os.pathsep + own)
        r = run(launcher, e, tmp, PROGRAM.replace('print("STATE"', 'import os; print("OWN", os.environ.get("OWN_SITECUSTOMIZE")); print("STATE"'),
                "chain.py")
        check("OWN ran" in r.stdout, "chain: the program's own sitecustomize ran", r.stdout + r.stderr)
        ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
        fw = {}
        if len(ooms) == 1:
            with open(ooms[0], encoding="utf-8") as f:
                fw = json.load(f).get("framework") or {}
        check(fw.get("name") == "torch", "chain: PyTorch's state recorded all the same", list(fw))


def test_no_torch(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, env, tmp, PLAIN, "plain.py")
        plain = subprocess.run([sys.executable, os.path.join(tmp, "plain.py")], env=env, cwd=tmp,
                               capture_output=True, text=True, timeout=60)
        check(r.returncode == 0 and r.stdout == plain.stdout == "PLAIN []\n",
              "no torch: nothing of gpumemtrace's Python loaded, the same output", (r.stdout, plain.stdout))
        check(r.stderr == "", "no torch: nothing on stderr", r.stderr)
        check(not glob.glob(os.path.join(tmp, "*.pickle")), "no torch: no framework file")


def test_old_torch(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, dict(env, FAKE_TORCH_MINIMAL="1"), tmp, PROGRAM, "old.py")
        warns = [line for line in r.stderr.splitlines() if "allocator state is not recorded" in line]
        check(r.returncode == 0 and "STATE" in r.stdout, "old torch: the program runs", r.stderr[-500:])
        check(len(warns) == 1 and "_record_memory_history" in warns[0], "old torch: one warning naming what lacks",
              warns)
        docs = snapshots(tmp)
        check(docs and not any("framework" in d for d in docs), "old torch: no framework section")


def test_async_backend(launcher: str, env: Dict[str, str]) -> None:
    """PyTorch's cudaMallocAsync backend (FAKE_TORCH_BACKEND): it refuses a
    history and keeps no segments; nothing is asked of it, nothing said."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, dict(env, FAKE_TORCH_BACKEND="cudaMallocAsync"), tmp, PROGRAM, "async.py")
        docs = snapshots(tmp)
        quiet = [line for line in r.stderr.splitlines() if "allocator state" in line]
        check(r.returncode == 0 and "STATE" in r.stdout and not quiet and docs
              and not any("framework" in d for d in docs),
              "async backend: no history asked, no warning, no framework section", (r.stderr[-400:], quiet))


def test_off(launcher: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, dict(env, GPUMEMTRACE_FRAMEWORKS="0"), tmp, PROGRAM, "off.py")
        docs = snapshots(tmp)
        check(r.returncode == 0 and docs and not any("framework" in d for d in docs)
              and not glob.glob(os.path.join(tmp, "*.pickle")),
              "off: GPUMEMTRACE_FRAMEWORKS=0 records nothing of PyTorch's", r.stderr[-300:])
        check("STATE" in r.stdout, "off: the program ran", r.stdout)


# Symlinks planted where the PyTorch snapshot (the pickle) would go: at the
# temporary name the bootstrap once used and at the first final name.
PLANTED = r'''
import os
import torch
MIB = 1 << 20
d, pid, victim = os.environ["GPUMEMTRACE_DIR"], os.getpid(), os.environ["VICTIM"]
base = os.path.join(d, f"gpumemtrace.{pid}.torch.1.pickle")
os.symlink(victim, base + f".tmp{pid}")
os.symlink(victim, base)
try:
    torch.empty(1 << 40)
except torch.cuda.OutOfMemoryError:
    print("OOM")
'''


def test_expandable(launcher: str, source: str, env: Dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        r = run(launcher, dict(env, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), tmp, EXPANDABLE,
                "expandable.py")
        segs = re.search(r"^SEGMENTS (.*)$", r.stdout, re.M)
        res = re.search(r"^RESERVATIONS (\d+) (\d+)$", r.stdout, re.M)
        ooms, doc = oom_snapshot(tmp)
        check(r.returncode == 0 and segs is not None and res is not None and len(ooms) == 1,
              "expandable: the program ran, one oom snapshot", (r.stdout, r.stderr[-600:], ooms))
        if segs is None or res is None or not doc:
            return
        fw = doc.get("framework") or {}
        want = sorted(tuple(map(int, x.split(":"))) for x in segs.group(1).split())
        got = sorted((s["address"], s["total_size"]) for s in fw.get("segments", []))
        large, small = map(int, res.groups())  # the large pool's reservation made first

        def where(addr: int) -> Tuple[str, int]:
            """An address as its reservation (L or S) and the offset in it."""
            return ("S", addr - small) if small <= addr < small + 1152 * MIB else ("L", addr - large)

        check(got == want, "expandable: the segments are PyTorch's snapshot's", (got, want))
        check(got == sorted([(large, 40 * MIB), (large + 60 * MIB, 80 * MIB), (small, 2 * MIB)]),
              "expandable: the runs of mapped pages: L (40 MiB), L+60 MiB (80 MiB), S (2 MiB)",
              [(where(a), n) for a, n in got])
        reserved = sorted((int(v["address"], 16), v["size"]) for v in doc["vmm"]["reservations"])
        check(reserved == sorted([(large, 58 * 20 * MIB), (small, 576 * 2 * MIB)]),
              "expandable: the pools' reservations in the snapshot: 58 pages of 20 MiB, 576 of 2 MiB",
              (reserved, large, small))
        # PyTorch's history of the pages: (action, offset in its reservation, MiB).
        hist = (fw.get("allocator_history") or [{}])[0].get("events", [])
        pages = [(e[0], *where(e[1]), e[2] // MIB) for e in hist if e[0] in ("segment_map", "segment_unmap")]
        check(pages == [("segment_map", "L", 0, 80), ("segment_map", "L", 80 * MIB, 60), ("segment_map", "S", 0, 2),
                        ("segment_unmap", "L", 0, 60), ("segment_map", "L", 0, 40)] and
              [e[0] for e in hist][-1:] == ["oom"] and hist[-1][2] == 960 * MIB,
              "expandable: the history maps and unmaps PyTorch's ranges, then the 960 MiB fails", hist)
        check(all(s.get("allocation") is True and s.get("is_expandable") is True for s in fw.get("segments", [])) and
              fw.get("segments_joined") == len(want), "expandable: every segment joined",
              [(s.get("address"), s.get("allocation")) for s in fw.get("segments", [])])
        dg = doc.get("diagnosis") or {}
        check(dg.get("numbers", {}).get("framework_expandable") is True and
              "expandable_segments" not in [x["name"] for x in dg.get("remedies") or []] and
              "replay" in dg and dg["replay"] is None,
              "expandable: the segments are expandable already, not offered as the remedy nor replayed",
              (dg.get("numbers", {}).get("framework_expandable"), dg.get("remedies"), dg.get("replay")))
        schema_ok(source, ooms, "expandable")


def test_planted_links(launcher: str, env: Dict[str, str]) -> None:
    """The pickle is written as snapshots are: no symlink followed, no file
    replaced, mode 0600 (issue: a shared job directory)."""
    with tempfile.TemporaryDirectory(prefix="gmt-torch-") as tmp:
        victim = os.path.join(tmp, "important.conf")
        with open(victim, "w", encoding="utf-8") as f:
            f.write("keep me\n")
        r = run(launcher, dict(env, VICTIM=victim), tmp, PLANTED, "planted.py", on="oom")
        with open(victim, encoding="utf-8") as f:
            kept = f.read() == "keep me\n"
        ooms = glob.glob(os.path.join(tmp, "gpumemtrace.*.oom.*.json"))
        pick = None
        if ooms:
            with open(ooms[0], encoding="utf-8") as f:
                pick = (json.load(f).get("framework") or {}).get("file")
        check(r.returncode == 0 and "OOM" in r.stdout and kept, "planted links: the file they point at is untouched",
              (r.returncode, kept, r.stderr[-400:]))
        ok = pick is not None and not os.path.islink(pick) and os.path.isfile(pick) and \
            os.stat(pick).st_mode & 0o777 == 0o600 and os.path.basename(pick).endswith(".torch.2.pickle")
        check(ok, "planted links: the pickle under the next free name, a regular file of mode 0600",
              (pick, oct(os.stat(pick).st_mode) if pick and os.path.exists(pick) else None))
        links = [p for p in glob.glob(os.path.join(tmp, "gpumemtrace.*")) if os.path.islink(p)]
        check(len(links) == 2 and not glob.glob(os.path.join(tmp, ".gpumemtrace.*.tmp")),
              "planted links: left as they were, no temporary file left", (links, os.listdir(tmp)))


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, source = os.path.abspath(argv[0]), argv[1]
    env = base_env(source)
    test_join(launcher, source, env)
    test_expandable(launcher, source, env)
    test_fragmentation(launcher, source, env)
    test_fraction(launcher, source, env)
    test_steps(launcher, source, env)
    test_recovered(launcher, env)
    test_recovered_pages(launcher, env)
    test_unreported(launcher, env)
    test_storm(launcher, env)
    test_chain(launcher, env)
    test_no_torch(launcher, env)
    test_old_torch(launcher, env)
    test_async_backend(launcher, env)
    test_off(launcher, env)
    test_planted_links(launcher, env)
    print(f"{'FAIL' if FAILURES else 'ok'}: {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
