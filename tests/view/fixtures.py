"""Snapshots for the viewer's tests, whose contents are known.

synthetic() builds a snapshot document (valid against
docs/snapshot.schema.json) from a seed: n live allocations spread over sites,
devices and kinds, Python and native frames, a series, a history, an optional
out-of-memory and leak section — and returns it with the truth the views must
show (live bytes per site, per device and kind). hostile() is the same with
markup, script and control characters in every name the views print.

run_tests() runs a test script's functions, reporting every failure.

simulator_snapshots() runs the demo program (build/demo/train_loop) on the
simulated GPU under the real tracer and returns the paths of its oom and exit
snapshots: the viewer's end-to-end input.
"""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

MiB = 1 << 20
GRANULARITY = 2 * MiB
KINDS = ("device", "async", "managed", "host")
T0 = 1_795_000_000_000_000_000
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;\u202e\x01"\''


def _frames(rng: random.Random, site: int, depth: int, python: bool, evil: str) -> List[Dict[str, Any]]:
    frames = [{"address": f"0x{0x7f0000001000 + site * 64:x}", "offset": f"0x{0x1000 + site * 64:x}",
               "module": "/usr/lib/x86_64-linux-gnu/libcudart.so.13", "function": "cudaMalloc",
               "file": None, "line": None, "inlined": False, "python": False, "role": "cuda"}]
    for level in range(depth):
        frames.append({"address": f"0x{0x555500001000 + site * 4096 + level * 16:x}",
                       "offset": f"0x{0x1000 + site * 4096 + level * 16:x}",
                       "module": "/opt/app/bin/app" + evil,
                       "function": f"layer{site % 7}_fn{level}{evil}" if level else f"site_{site}{evil}",
                       "file": f"/src/app/model{site % 3}.c{evil}", "line": 10 + level,
                       "inlined": False, "python": False, "role": "user"})
    if python:
        frames.append({"address": None, "module": None, "function": f"forward{evil}",
                       "file": f"/src/train{evil}.py", "line": 40 + site % 5, "inlined": False,
                       "python": True, "role": "user"})
        frames.append({"address": None, "module": None, "function": "<module>",
                       "file": "/src/train.py", "line": 1, "inlined": False, "python": True,
                       "role": "user"})
    frames.append({"address": "0x7f00000271a0", "offset": "0x271a0",
                   "module": "/usr/lib/x86_64-linux-gnu/libc.so.6", "function": "__libc_start_main",
                   "file": None, "line": None, "inlined": False, "python": False, "role": "library"})
    return frames


def _site(sid: int, frames: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The site the tracer names (src/analyze/sites.c): the first frame of the
    program's own code, labelled by function, file name and line."""
    at = next(i for i, f in enumerate(frames) if f["role"] == "user")
    f = frames[at]
    return {"id": sid, "frame": at, "user": True,
            "label": f"{f['function']} ({os.path.basename(f['file'])}:{f['line']})"}


def synthetic(n: int = 1000, sites: int = 20, devices: int = 1, seed: int = 1, depth: int = 6,
              oom: bool = True, leaks: bool = False, evil: str = "", pid: int = 4242, episode: bool = False,
              rank: Optional[int] = None, points: int = 200) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(document, truth). truth: {"live_bytes", "live_count", "sites": {stack id:
    (bytes, count)}, "devices": {index: {kind: bytes}}, "titles": {stack id: the
    site's own function name}}."""
    rng = random.Random(seed)
    stacks = []
    for s in range(1, sites + 1):
        frames = _frames(rng, s, depth, s % 3 == 0, evil)
        stacks.append({"id": s, "runtime_call": "cudaMalloc" + evil,
                       "tags": ["train" + evil, f"layer{s % 4}"] if s % 2 else [],
                       "site": _site(s, frames), "frames": frames})
    allocs = []
    next_addr = {d: 0x7f0000000000 + d * (1 << 36) for d in range(devices)}
    truth_sites: Dict[int, List[int]] = {}
    truth_dev: Dict[int, Dict[str, int]] = {}
    t = T0
    for i in range(n):
        site = 1 + (i * 7919 + rng.randrange(sites)) % sites
        dev = i % devices
        kind = KINDS[site % len(KINDS)]
        # Sizes from 512 B to 64 MiB, small ones packed into shared pages.
        size = 512 << rng.randrange(18)
        addr = next_addr[dev]
        next_addr[dev] += (size + 511) // 512 * 512 if size < GRANULARITY else \
            (size + GRANULARITY - 1) // GRANULARITY * GRANULARITY
        t += rng.randrange(1, 200_000)
        if kind == "host":
            dev_ix = -1
        else:
            dev_ix = dev
        allocs.append({"address": f"0x{addr:x}", "size": size, "device": dev_ix, "kind": kind,
                       "seq": i + 1, "api": "cuMemAlloc_v2", "thread": pid, "time_ns": t,
                       "stack": site})
        truth_sites.setdefault(site, [0, 0])
        truth_sites[site][0] += size
        truth_sites[site][1] += 1
        truth_dev.setdefault(dev_ix, {}).setdefault(kind, 0)
        truth_dev[dev_ix][kind] += size
    allocs.sort(key=lambda a: int(a["address"], 16))
    live = sum(a["size"] for a in allocs)
    end = t + 1_000_000

    site_rows = []
    for sid in range(1, sites + 1):
        b, c = truth_sites.get(sid, (0, 0))
        site_rows.append({"stack": sid, "live_bytes": b, "live_count": c, "allocs": c + sid,
                          "alloc_bytes": b + sid * MiB, "peak_bytes": b + sid * MiB,
                          "rising_windows": 5 if sid == 1 else 1, "falling_windows": 0,
                          "growth_bytes": b // 2 if sid == 1 else 0, "growing": sid == 1,
                          "suspect": sid == 1})
    site_rows.sort(key=lambda s: (-s["live_bytes"], s["stack"]))

    # The series: every (device, kind) column rises linearly to its final value.
    times = [T0 + (end - T0) * (k + 1) // points for k in range(points)]
    columns = []
    for dev_ix in sorted(truth_dev):
        for kind in sorted(truth_dev[dev_ix]):
            final = truth_dev[dev_ix][kind]
            vals = [final * (k + 1) // points for k in range(points)]
            columns.append({"device": dev_ix, "kind": kind, "live_bytes": vals,
                            "max_bytes": [v + (MiB if k % 10 == 5 else 0) for k, v in enumerate(vals)]})

    events = []
    for a in allocs[-min(len(allocs), 500):]:
        events.append({"op": "alloc", "seq": a["seq"], "time_ns": a["time_ns"], "address": a["address"],
                       "size": a["size"], "kind": a["kind"], "device": a["device"], "api": a["api"],
                       "thread": pid, "stack": a["stack"]})
    events.sort(key=lambda e: e["seq"])

    dev_docs = []
    for d in range(devices):
        kinds = {k: v for k, v in truth_dev.get(d, {}).items()}
        total = max(80 << 30, 2 * sum(kinds.values()))
        dev_docs.append({
            "index": d, "total_bytes": total if oom else None,
            "free_bytes": (total - sum(kinds.values())) if oom else None,
            "live_bytes": sum(kinds.values()), "kinds": kinds,
            "pools": {"count": 1, "reserved_bytes": kinds.get("async", 0) + 4 * MiB,
                      "used_bytes": kinds.get("async", 0)} if oom else None,
            "pages": {"granularity": GRANULARITY, "granularity_known": True, "pages": 10, "partial": 3,
                      "stranded_bytes": 3 * MiB, "occupancy": [1, 1, 1, 0, 7]},
            "fragmentation": {"free_bytes": None, "free_in_whole_pages": None, "stranded_bytes": 3 * MiB,
                              "largest_hole_bytes": MiB, "largest_fit_bytes": None,
                              "pool_unused_bytes": None,
                              "size_classes": [{"min": 1 << 20, "max": (1 << 21) - 1, "count": 1,
                                                "bytes": 1 << 20}]},
            "other_processes": {"known": False, "why": "NVML is not installed" + evil}})

    doc: Dict[str, Any] = {
        "format": "gpumemtrace-snapshot", "version": 1, "reason": "oom" if oom else "exit", "seq": 1,
        "time_ns": end, "pid": pid, "argv": ["./train" + evil, "--steps", "10"],
        "summary": {"live_bytes": live, "live_count": len(allocs), "peak_bytes": live + 64 * MiB,
                    "total_allocs": len(allocs) + 100, "total_frees": 100},
        "process": {"pid": pid, "ppid": 1, "host": "node7" + evil, "rank": rank,
                    "rank_variable": "RANK" if rank is not None else None, "local_rank": rank,
                    "world_size": 8 if rank is not None else None},
        "devices": dev_docs,
        "stats": {"events": len(allocs) + 200, "ring_full": 0},
        "allocations": allocs,
        "vmm": {"reservations": [], "mappings": []},
        "sites": site_rows,
        "series": {"interval_ns": 10_000_000, "start_ns": T0, "time_ns": times, "columns": columns,
                   "columns_dropped": 0},
        "history": {"capacity": 10000, "dropped": max(0, len(allocs) - 500), "events": events},
        "stacks": stacks,
        "modules": [{"path": "/opt/app/bin/app" + evil, "base": "0x555500000000", "build_id": None}],
    }
    if oom:
        req = 96 * MiB
        events.append({"op": "oom", "seq": 1, "time_ns": end, "address": None, "size": req,
                       "kind": "device", "device": 0, "api": "cuMemAlloc_v2", "thread": pid, "stack": 2})
        doc["failed_request"] = {"api": "cuMemAlloc_v2", "size": req, "kind": "device", "device": 0,
                                 "result": 2, "failure": 1, "stack": 2}
        summary = f"growth: 96.0 MiB requested; 1 allocation site kept growing{evil}"
        doc["diagnosis"] = {
            "verdict": "growth", "summary": summary,
            "verdicts": [{"name": "growth", "primary": True, "bytes": site_rows[0]["growth_bytes"],
                          "rests_on": ["growth_bytes"], "detail": "1 allocation site kept growing" + evil},
                         {"name": "exhaustion", "primary": False, "bytes": live,
                          "rests_on": ["tracked_total_bytes"], "detail": "this process holds it all"}],
            "remedies": [{"name": "free_growing_site", "verdict": "growth", "bytes": site_rows[0]["growth_bytes"],
                          "stack": 1, "rests_on": ["growth_top_stack", "growth_top_bytes"],
                          "text": "drop what this growing site keeps by mistake: it gained "
                                  f"{site_rows[0]['growth_bytes']} bytes{evil}"}],
            "numbers": {"device": 0, "requested_bytes": req, "needed_bytes": req,
                        "granularity": GRANULARITY, "total_bytes": dev_docs[0]["total_bytes"],
                        "free_bytes": dev_docs[0]["free_bytes"],
                        "used_bytes": dev_docs[0]["total_bytes"] - dev_docs[0]["free_bytes"],
                        "shortfall_bytes": 0, "tracked_bytes": {"device": 0, "async": 0, "managed": 0,
                                                                "vmm": 0, "array": 0},
                        "tracked_total_bytes": live, "footprint_bytes": live, "pool_reserved_bytes": 0,
                        "pool_used_bytes": 0, "pool_unused_bytes": 0, "other_processes_bytes": None,
                        "untracked_bytes": 0, "pages": 10, "pages_partial": 3, "stranded_bytes": 3 * MiB,
                        "growth_bytes": site_rows[0]["growth_bytes"], "growth_sites": 1,
                        "growth_stacks": [1]}}
    if oom and episode:
        # Three failures of the same request, the cache freed between them
        # by sites 3 and 4 (which hold nothing live any more).
        t1 = end - 3_000_000
        doc["episode"] = {
            "id": 1, "device": 0, "failures": 3, "described": 3, "end": "open",
            "first_ns": t1, "last_ns": end, "not_written": 0,
            "freed": {"bytes": 768 * MiB, "count": 3, "other_bytes": 0, "other_count": 0,
                      "sites": [{"stack": 3, "kind": "device", "bytes": 512 * MiB, "count": 2},
                                {"stack": 4, "kind": "device", "bytes": 256 * MiB, "count": 1}]},
            "listed": [{"failure": i + 1, "time_ns": t1 + i * 1_500_000, "api": "cuMemAlloc_v2", "size": 96 * MiB,
                        "kind": "device", "stack": 2, "live_bytes": live + freed_after, "freed_bytes": freed,
                        "freed_count": n}
                       for i, (freed, n, freed_after) in enumerate([(0, 0, 768 * MiB), (256 * MiB, 1, 512 * MiB),
                                                                   (512 * MiB, 2, 0)])],
        }
        doc["failed_request"]["failure"] = 3
    if leaks:
        lsites = []
        for s in site_rows[:3]:
            if not s["live_count"]:
                continue
            addrs = [a["address"] for a in allocs if a["stack"] == s["stack"]]
            lsites.append({"stack": s["stack"], "class": "leaked" if s["stack"] % 2 else "referenced",
                           "counted": True, "suppressed_by": None, "rule": None, "rule_source": None,
                           "count": s["live_count"], "bytes": s["live_bytes"],
                           "kinds": {KINDS[s["stack"] % len(KINDS)]: s["live_bytes"]},
                           "devices": sorted({a["device"] for a in allocs if a["stack"] == s["stack"]}),
                           "addresses": addrs,
                           "referenced_from": None if s["stack"] % 2 else
                           {"address": "0x555500004010", "value": addrs[0], "region": "global",
                            "what": f"global 'kept{evil}' (app)"}})
        tot = {c: {"count": sum(x["count"] for x in lsites if x["class"] == c),
                   "bytes": sum(x["bytes"] for x in lsites if x["class"] == c)}
               for c in ("leaked", "referenced", "cached", "suppressed")}
        tot["counted"] = {"count": tot["leaked"]["count"] + tot["referenced"]["count"],
                          "bytes": tot["leaked"]["bytes"] + tot["referenced"]["bytes"]}
        doc["leaks"] = {"scan": {"done": True, "why": None, "mappings": 10, "bytes": 1 << 20,
                                 "excluded_bytes": 0, "walked_bytes": 0, "bookkeeping_modules": ["libcuda.so.1"],
                                 "seconds": 0.01},
                        "classes": ["leaked", "referenced"], "exit_status": 0, "suppressions_error": None,
                        "totals": tot, "sites": lsites,
                        "suspects": [{"stack": 1, "live_bytes": site_rows[0]["live_bytes"],
                                      "peak_bytes": site_rows[0]["peak_bytes"],
                                      "growth_bytes": site_rows[0]["growth_bytes"],
                                      "rising_windows": 5, "falling_windows": 0}],
                        "suppressions": []}
    truth = {"live_bytes": live, "live_count": len(allocs),
             "sites": {k: tuple(v) for k, v in truth_sites.items()},
             "devices": truth_dev,
             "titles": {s: f"site_{s}{evil}" for s in range(1, sites + 1)}}
    return doc, truth


def with_torch_state(raw: Dict[str, Any], stream: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A fixture with PyTorch's state handed over: its first device-kind
    allocation a segment of PyTorch's (an active block, a free one, another
    active one; `stream`), and the address of an allocation that no segment
    of PyTorch's holds. Returns the segment and that allocation."""
    dev = [a for a in raw["allocations"] if a["kind"] == "device" and a["size"] >= 8192]
    seg_a, other = dev[0], dev[1]
    addr, size = int(seg_a["address"], 16), seg_a["size"]
    third = size // 4 // 512 * 512
    blocks = [{"address": addr, "size": third, "requested_size": third - 100, "state": "active_allocated",
               "frames": [{"name": "forward", "filename": "/w/model.py", "line": 12}]},
              {"address": addr + third, "size": third, "requested_size": third, "state": "inactive", "frames": []},
              {"address": addr + 2 * third, "size": size - 2 * third, "requested_size": size - 2 * third,
               "state": "active_allocated", "frames": []}]
    seg = {"device": seg_a["device"], "address": addr, "total_size": size, "stream": stream,
           "segment_type": "large", "is_expandable": False, "allocation": True, "blocks": blocks}
    raw["framework"] = {"name": "torch", "version": "2.11.0", "reason": "oom", "file": None, "oom": None,
                        "devices": [{"device": seg_a["device"], "allocated_bytes": size - third,
                                     "reserved_bytes": size, "reserved_unallocated_bytes": third,
                                     "largest_free_block_bytes": third}],
                        "segments": [seg], "segments_joined": 1, "truncated": False}
    return seg, other


def hostile(**kw: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """synthetic() with markup, script and control characters in every name."""
    kw.setdefault("evil", HOSTILE)
    kw.setdefault("leaks", True)
    return synthetic(**kw)


def write(doc: Dict[str, Any], path: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


# A PyTorch training loop on the PyTorch double that keeps each step's loss
# (24 MiB a step) until the 2 GiB device is full: its oom snapshot has a
# tensors section (torch_snapshot).
TORCH_LOSS_KEPT = """
import torch
MIB = 1 << 20
weights = torch.empty(256 * MIB)
opt = torch.optim.Optimizer([weights])
losses = []
try:
    while True:
        acts = [torch.empty(8 * MIB) for _ in range(4)]
        grads = [torch.empty(40 * MIB) for _ in range(2)]
        del grads
        loss = torch.empty(24 * MIB)  # LOSS
        losses.append(loss)
        del acts
        opt.step()
except torch.cuda.OutOfMemoryError:
    pass
"""


def torch_snapshot(build_dir: str, out_dir: str, text: str = TORCH_LOSS_KEPT) -> str:
    """Run the Python program `text` with the PyTorch double
    (tests/frameworks/fake_torch) on the simulated GPU (2 GiB) under the
    tracer; the path of its oom snapshot."""
    os.makedirs(out_dir, exist_ok=True)
    script = os.path.join(out_dir, "train.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    doubles = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "frameworks")
    env = {"GMTSIM_MEMORY": "2G", "GMTSIM_CONTEXT_BYTES": "0", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(os.path.join(doubles, d, "site-packages")
                                         for d in ("fake_torch", "fake_common"))}
    return simulator_snapshots(build_dir, out_dir, env, program=sys.executable, argv=[script], status=0,
                               reasons=("oom",))["oom"]


def simulator_snapshots(build_dir: str, out_dir: str, env: Optional[Dict[str, str]] = None,
                        program: str = os.path.join("demo", "train_loop"), status: int = 2,
                        argv: Sequence[str] = (), reasons: Sequence[str] = ("oom", "exit")) -> Dict[str, str]:
    """Run build/demo/train_loop (or another program of the build, or an
    absolute path, with argv) on the simulated GPU (4 GiB) under the tracer;
    {"oom": path, "exit": path} of the first snapshots of those reasons it
    wrote into out_dir. It must exit with `status`."""
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("GMTSIM_", "GPUMEMTRACE_")):
            del e[k]
    e.update({"GMTSIM_MEMORY": "4G", "GMTSIM_CONTEXT_BYTES": "300M",
              "LD_LIBRARY_PATH": os.path.join(build_dir, "sim", "driver")})
    # Under AddressSanitizer (build-san) its runtime must lead LD_PRELOAD; the
    # launcher keeps it in front of the library.
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    if asan:
        e["LD_PRELOAD"] = asan
        e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    e.update(env or {})
    launcher = os.path.join(build_dir, "src", "cli", "gpumemtrace")
    prog = os.path.join(build_dir, program)
    os.makedirs(out_dir, exist_ok=True)
    r = subprocess.run([launcher, "run", "--dir", out_dir, "--snapshot-on", ",".join(reasons), "--", prog, *argv],
                       env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    if r.returncode != status:
        raise RuntimeError(f"{prog} ended with {r.returncode}, not {status}: {r.stderr[-2000:]}")
    out = {}
    for reason in reasons:
        found = sorted(glob.glob(os.path.join(out_dir, f"gpumemtrace.*.{reason}.*.json")))
        if not found:
            raise RuntimeError(f"no {reason} snapshot in {out_dir}")
        out[reason] = found[0]
    return out


def run_tests(tests: Sequence[Callable[[], None]]) -> int:
    """Each test in turn, every failure reported with its traceback (the next
    test still runs); "N of M passed"; the exit status."""
    failed = 0
    for fn in tests:
        try:
            fn()
            print(f"ok    {fn.__name__}")
        except Exception:  # noqa: BLE001 — every failure is reported, then the next test runs
            failed += 1
            print(f"FAIL  {fn.__name__}\n{traceback.format_exc()}")
    print(f"{len(tests) - failed} of {len(tests)} passed")
    return 1 if failed else 0


def with_steps(doc: Dict[str, Any], n: int, first: int = 1) -> Dict[str, Any]:
    """doc with the steps first .. first + n - 1 (gmt_step) in its history,
    evenly from its series' start, so that its end (its out-of-memory) falls
    half a step after the last: at step first + n - 0.5 on a timeline
    aligned on steps."""
    start, end = doc["series"]["start_ns"], doc["time_ns"]
    seq = max((e["seq"] for e in doc["history"]["events"]), default=0)
    for k in range(n):
        doc["history"]["events"].append(
            {"op": "step", "seq": seq + 1 + k, "time_ns": start + (end - start) * (2 * k + 2) // (2 * n + 1),
             "address": None, "size": 0, "step": first + k, "kind": None, "device": -1, "api": None,
             "thread": doc["pid"], "stack": 0})
    return doc
