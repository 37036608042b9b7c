#!/usr/bin/env python3
"""Tests of check_gpu.py, the real-GPU suite's checker, without a GPU: on
made-up snapshots, every check must pass when its fact holds and fail, with
its message, when it does not; the verdict logic (pass, fail, skip).

With --build-dir BUILD, also on real runs of the suite's programs on the
simulated GPU (BUILD/tests/gpu/sim-*): an untouched run passes, and each
mutation of what the program printed, or of the snapshots, fails.

Usage: test_check_gpu.py [--build-dir BUILD]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_gpu  # noqa: E402

MIB = 1 << 20
PID = 4242
G = 2 * MIB


def device(index: int = 0, free: int | None = 1000 * MIB, pages: int = 0,
           reserved: int | None = 0) -> dict[str, Any]:
    return {"index": index, "total_bytes": 1024 * MIB if free is not None else None,
            "free_bytes": free, "live_bytes": 0,
            "pools": None if reserved is None else {"count": 1, "reserved_bytes": reserved, "used_bytes": 0},
            "pages": {"granularity": G, "granularity_known": True, "pages": pages, "partial": 0,
                      "stranded_bytes": 0, "occupancy": [0, 0, 0, 0, pages]}}


def alloc(address: int, size: int, kind: str = "device", dev: int = 0) -> dict[str, Any]:
    return {"address": hex(address), "size": size, "device": dev, "kind": kind,
            "api": "cuMemAlloc_v2", "thread": PID, "time_ns": 1, "stack": 0}


def snapshot(reason: str, allocations: list[dict[str, Any]], devices: list[dict[str, Any]],
             **more: Any) -> dict[str, Any]:
    doc = {"format": "gpumemtrace-snapshot", "version": 1, "reason": reason, "pid": PID,
           "allocations": allocations, "devices": devices, "vmm": {"reservations": [], "mappings": []}}
    doc.update(more)
    return doc


class Scenario:
    """A made-up run: a program's output and the snapshot directory."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="gmt-check-gpu-test-")
        self.lines = [f"TEST made-up {PID}"]
        self.seq = 0

    def write(self, reason: str, doc: dict[str, Any]) -> str:
        self.seq += 1
        path = os.path.join(self.dir, f"gpumemtrace.{PID}.{reason}.{self.seq}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        return path

    def checkpoint(self, label: str, doc: dict[str, Any] | None, where: str | None = None,
                   live: list[tuple[int, int, str, int]] = (), meminfo: tuple[int, int] | None = None) -> None:
        if where is None:
            where = self.write("api", doc)
        elif doc is not None:
            self.write(where[1:], doc)
        self.lines.append(f"CHECKPOINT {label} {where}")
        self.lines.append(f"COVER {label} all")
        self.lines += [f"LIVE {label} {hex(a)} {s} {k} {d}" for a, s, k, d in live]
        if meminfo is not None:
            self.lines.append(f"MEMINFO {label} 0 {meminfo[0]} {meminfo[1]}")

    def run(self, tolerance: int = 0, status: int = 0, expect: int = 0, stderr: str = "",
            leak_check: bool = False) -> check_gpu.Outcome:
        exp = check_gpu.parse("\n".join(self.lines) + "\n")
        return check_gpu.check(exp, self.dir, tolerance, status, expect, stderr, leak_check)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


A = 0x7f0000000000


def base(sc: Scenario, free_after: int = 990 * MIB) -> None:
    """start: nothing; allocated: 8 MiB + 1 MiB (5 pages, 10 MiB)."""
    sc.checkpoint("start", snapshot("api", [], [device(free=1000 * MIB)]), meminfo=(1000 * MIB, 1024 * MIB))
    allocs = [alloc(A, 8 * MIB), alloc(A + 8 * MIB, 1 * MIB)]
    sc.checkpoint("allocated", snapshot("api", allocs, [device(free=990 * MIB, pages=5)]),
                  live=[(A, 8 * MIB, "device", 0), (A + 8 * MIB, 1 * MIB, "device", 0)],
                  meminfo=(free_after, 1024 * MIB))


Case = tuple[str, Callable[[Scenario], dict[str, Any]], str | None]


def case_ok(sc: Scenario) -> dict[str, Any]:
    base(sc)
    return {}


def case_missing(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"LIVE allocated {hex(A + 64 * MIB)} 4096 device 0")
    return {}


def case_wrong_kind(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines = [ln.replace(f"{hex(A)} {8 * MIB} device", f"{hex(A)} {8 * MIB} async") for ln in sc.lines]
    return {}


def case_unknown_frees(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("start", snapshot("api", [], [device(free=1000 * MIB)], stats={"unknown_frees": 1}),
                  meminfo=(1000 * MIB, 1024 * MIB))
    return {}


def case_delta(sc: Scenario) -> dict[str, Any]:
    base(sc, free_after=988 * MIB)
    return {"tolerance": MIB}


def case_delta_tolerated(sc: Scenario) -> dict[str, Any]:
    base(sc, free_after=988 * MIB)
    return {"tolerance": 4 * MIB}


def case_snapshot_free(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("start", snapshot("api", [], [device(free=900 * MIB)]), meminfo=(1000 * MIB, 1024 * MIB))
    return {}


def case_pages(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("start", snapshot("api", [alloc(A, 8 * MIB)], [device(free=None, pages=3)]),
                  live=[(A, 8 * MIB, "device", 0)])
    return {}


def case_extra(sc: Scenario) -> dict[str, Any]:
    """Managed memory touched: the free bytes fall by what EXTRA says."""
    sc.checkpoint("start", snapshot("api", [], [device()]), meminfo=(1000 * MIB, 1024 * MIB))
    sc.checkpoint("touched", snapshot("api", [alloc(A, 64 * MIB, "managed")], [device(free=936 * MIB)]),
                  live=[(A, 64 * MIB, "managed", 0)], meminfo=(936 * MIB, 1024 * MIB))
    sc.lines.append(f"EXTRA touched 0 {64 * MIB}")
    return {}


def case_extra_missing(sc: Scenario) -> dict[str, Any]:
    case_extra(sc)
    sc.lines.pop()
    return {}


def case_pool(sc: Scenario) -> dict[str, Any]:
    """Async memory freed but reserved: the pool's bytes are the footprint."""
    sc.checkpoint("start", snapshot("api", [], [device()]), meminfo=(1000 * MIB, 1024 * MIB))
    sc.checkpoint("freed", snapshot("api", [], [device(free=968 * MIB, reserved=32 * MIB)]),
                  meminfo=(968 * MIB, 1024 * MIB))
    sc.lines.append(f"POOL freed 0 {32 * MIB}")
    return {}


def case_pool_wrong(sc: Scenario) -> dict[str, Any]:
    case_pool(sc)
    sc.lines[-1] = f"POOL freed 0 {30 * MIB}"
    return {}


def case_no_pools(sc: Scenario) -> dict[str, Any]:
    """No pools asked: stream-ordered bytes count in whole pages."""
    sc.checkpoint("start", snapshot("api", [], [device(reserved=None)]), meminfo=(1000 * MIB, 1024 * MIB))
    sc.checkpoint("a", snapshot("api", [alloc(A, 3 * MIB, "async")], [device(free=996 * MIB, reserved=None)]),
                  live=[(A, 3 * MIB, "async", 0)], meminfo=(996 * MIB, 1024 * MIB))
    return {}


def case_vmm_array(sc: Scenario) -> dict[str, Any]:
    """VMM handles by size, arrays in whole pages."""
    sc.checkpoint("start", snapshot("api", [], [device()]), meminfo=(1000 * MIB, 1024 * MIB))
    doc = snapshot("api", [alloc(0x1000, 4 * MIB, "vmm"), alloc(0x2000, 3 * MIB, "array")],
                   [device(free=992 * MIB)])
    doc["vmm"]["reservations"] = [{"address": hex(A), "size": 1024 * MIB, "device": -1}]
    sc.checkpoint("v", doc, live=[(0x1000, 4 * MIB, "vmm", 0), (0x2000, 3 * MIB, "array", 0)],
                  meminfo=(992 * MIB, 1024 * MIB))
    sc.lines.append(f"RESERVATION v {1024 * MIB}")
    return {}


def case_reservation_missing(sc: Scenario) -> dict[str, Any]:
    case_vmm_array(sc)
    sc.lines[-1] = f"RESERVATION v {2048 * MIB}"
    return {}


def mapped_base(sc: Scenario) -> None:
    """A buffer that is a VMM mapping of its own (JAX's platform allocator on
    CUDA 13): handle 0x1000 of 4 MiB mapped at A."""
    sc.checkpoint("start", snapshot("api", [], [device()]), meminfo=(1000 * MIB, 1024 * MIB))
    doc = snapshot("api", [alloc(0x1000, 4 * MIB, "vmm")], [device(free=996 * MIB)])
    doc["vmm"]["reservations"] = [{"address": hex(A), "size": 4 * MIB, "device": -1}]
    doc["vmm"]["mappings"] = [{"address": hex(A), "size": 4 * MIB, "device": 0, "handle": "0x1000", "offset": 0}]
    sc.checkpoint("m", doc, live=[(0x1000, 4 * MIB, "vmm", 0)], meminfo=(996 * MIB, 1024 * MIB))


def case_has_mapped(sc: Scenario) -> dict[str, Any]:
    mapped_base(sc)
    sc.lines.append(f"HAS m {hex(A)} device,mapped 0 {3 * MIB}")
    return {}


def case_has_mapped_small(sc: Scenario) -> dict[str, Any]:
    mapped_base(sc)
    sc.lines.append(f"HAS m {hex(A)} device,mapped 0 {5 * MIB}")
    return {}


def case_gone_mapped(sc: Scenario) -> dict[str, Any]:
    mapped_base(sc)
    sc.lines.append(f"GONE m {hex(A)}")
    return {}


def case_bytes(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"BYTES allocated 0 device {9 * MIB}")
    sc.lines.append(f"HAS allocated {hex(A)} device,async 0 {8 * MIB}")
    sc.lines.append(f"GONE allocated {hex(A + 32 * MIB)}")
    return {}


def case_bytes_wrong(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"BYTES allocated 0 device {10 * MIB}")
    return {}


def case_has_wrong(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"HAS allocated {hex(A)} device 0 {9 * MIB}")
    return {}


def pyframe_base(sc: Scenario) -> None:
    """base(), the 8 MiB allocation's stack with Python frames."""
    base(sc)
    frames = [{"function": "cuMemAlloc_v2", "file": None, "line": None, "python": False},
              {"function": "make_activation", "file": "/x/torch_memory.py", "line": 42, "python": True},
              {"function": "run_allocator", "file": "/x/torch_memory.py", "line": 77, "python": True}]
    path = [p for p in sorted(os.listdir(sc.dir))][-1]
    with open(os.path.join(sc.dir, path), encoding="utf-8") as f:
        doc = json.load(f)
    doc["allocations"][0]["stack"] = 7
    doc["stacks"] = [{"id": 7, "frames": frames}]
    with open(os.path.join(sc.dir, path), "w", encoding="utf-8") as f:
        json.dump(doc, f)


def case_pyframe(sc: Scenario) -> dict[str, Any]:
    pyframe_base(sc)
    sc.lines.append(f"PYFRAME allocated {hex(A)} make_activation torch_memory.py 42")
    return {}


def case_pyframe_line(sc: Scenario) -> dict[str, Any]:
    pyframe_base(sc)
    sc.lines.append(f"PYFRAME allocated {hex(A)} make_activation torch_memory.py 43")
    return {}


def case_pyframe_none(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"PYFRAME allocated {hex(A)} make_activation torch_memory.py 42")
    return {}


def case_gone_wrong(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"GONE allocated {hex(A)}")
    return {}


def oom_doc(size: int, verdicts: list[str]) -> dict[str, Any]:
    return snapshot("oom", [alloc(A, 8 * MIB)], [device(free=4 * MIB, pages=4)],
                    failed_request={"api": "cuMemAlloc_v2", "size": size, "device": 0, "result": 2,
                                    "failure": 1},
                    diagnosis={"verdict": verdicts[0], "summary": "made up",
                               "verdicts": [{"name": v} for v in verdicts]})


def case_oom(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("oom", oom_doc(16 * MIB, ["exhaustion", "fragmentation"]), where="@oom",
                  live=[(A, 8 * MIB, "device", 0)], meminfo=(4 * MIB, 1024 * MIB))
    sc.lines += [f"OOM oom cuMemAlloc_v2 {16 * MIB} 0 exact", "VERDICT oom exhaustion primary",
                 "VERDICT oom fragmentation"]
    return {}


def case_oom_size(sc: Scenario) -> dict[str, Any]:
    case_oom(sc)
    sc.lines.append(f"OOM oom * {17 * MIB} 0 min")
    return {}


def case_oom_min(sc: Scenario) -> dict[str, Any]:
    case_oom(sc)
    sc.lines.append(f"OOM oom * {15 * MIB} 0 min")
    return {}


def case_oom_primary(sc: Scenario) -> dict[str, Any]:
    case_oom(sc)
    sc.lines.append("VERDICT oom fragmentation primary")
    return {}


def case_oom_missing(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("oom", None, where="@oom")
    return {}


def case_oom_unexpected(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.write("oom", oom_doc(16 * MIB, ["exhaustion"]))
    return {}


def growth_doc(label: str, steps: int = 6) -> dict[str, Any]:
    """An oom snapshot whose diagnosis says growth at a tensor site `label`,
    the remedy free_growing_site first."""
    doc = oom_doc(16 * MIB, ["growth", "allocator_fragmentation"])
    doc["diagnosis"]["numbers"] = {"growth_top_stack": (1 << 30) + 3, "growth_top_steps": steps}
    doc["diagnosis"]["remedies"] = [{"name": "free_growing_site"}, {"name": "expandable_segments"}]
    doc["stacks"] = [{"id": 7, "site": {"label": "main (other.py:3)"}},
                     {"id": (1 << 30) + 3, "site": {"label": label}}]
    return doc


def growth_base(sc: Scenario, label: str = "train (loss.py:12) ← main (loss.py:40)", steps: int = 6) -> None:
    sc.checkpoint("oom", growth_doc(label, steps), where="@oom", live=[(A, 8 * MIB, "device", 0)])


def case_growth_site(sc: Scenario) -> dict[str, Any]:
    growth_base(sc)
    sc.lines += ["GROWTHSITE oom loss.py 12 4", "REMEDY oom free_growing_site first",
                 "REMEDY oom expandable_segments", "NOVERDICT oom exhaustion"]
    return {}


def case_growth_site_line(sc: Scenario) -> dict[str, Any]:
    growth_base(sc, label="main (loss.py:40)")
    sc.lines.append("GROWTHSITE oom loss.py 12")
    return {}


def case_growth_site_steps(sc: Scenario) -> dict[str, Any]:
    growth_base(sc, steps=0)
    sc.lines.append("GROWTHSITE oom loss.py 12 4")
    return {}


def case_growth_site_none(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("oom", oom_doc(16 * MIB, ["exhaustion"]), where="@oom", live=[(A, 8 * MIB, "device", 0)])
    sc.lines.append("GROWTHSITE oom loss.py 12")
    return {}


def case_remedy_first(sc: Scenario) -> dict[str, Any]:
    growth_base(sc)
    sc.lines.append("REMEDY oom expandable_segments first")
    return {}


def case_remedy_missing(sc: Scenario) -> dict[str, Any]:
    growth_base(sc)
    sc.lines.append("REMEDY oom smaller_batch")
    return {}


def replay_base(sc: Scenario, replay: Any) -> None:
    doc = growth_doc("main (frag.py:9)")
    doc["diagnosis"]["replay"] = replay
    sc.checkpoint("oom", doc, where="@oom", live=[(A, 8 * MIB, "device", 0)])


def case_replay(sc: Scenario) -> dict[str, Any]:
    replay_base(sc, {"setting": "expandable_segments:True", "replayed": True, "why": None, "fits": True,
                     "peak_reserved_bytes": 920 * MIB, "device_bytes": 1024 * MIB})
    sc.lines.append("REPLAY oom fits")
    return {}


def case_replay_nofit(sc: Scenario) -> dict[str, Any]:
    replay_base(sc, {"setting": "expandable_segments:True", "replayed": True, "why": None, "fits": False,
                     "peak_reserved_bytes": 900 * MIB, "device_bytes": 1024 * MIB})
    sc.lines.append("REPLAY oom fits")
    return {}


def case_replay_unanswered(sc: Scenario) -> dict[str, Any]:
    replay_base(sc, {"setting": "expandable_segments:True", "replayed": False,
                     "why": "the replay under the run's own settings is not faithful: at request #3"})
    sc.lines.append("REPLAY oom nofit")
    return {}


def case_replay_absent(sc: Scenario) -> dict[str, Any]:
    replay_base(sc, None)
    sc.lines.append("REPLAY oom fits")
    return {}


def case_noverdict(sc: Scenario) -> dict[str, Any]:
    growth_base(sc)
    sc.lines.append("NOVERDICT oom allocator_fragmentation")
    return {}


def case_recovered(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.write("oom", oom_doc(16 * MIB, ["exhaustion"]))
    sc.lines.append("RECOVERED")
    return {}


def framework_base(sc: Scenario, joined: bool = True, active: int = 8 * MIB, cupy: bool = False,
                   limit: int | None = None) -> None:
    """An oom snapshot with PyTorch's state: one 20 MiB segment at A (the
    live driver allocation) with an 8 MiB active block and 12 MiB free;
    with limit, its limit on the device (a memory fraction)."""
    doc = oom_doc(16 * MIB, ["exhaustion"])
    doc["allocations"] = [alloc(A, 20 * MIB)]
    doc["devices"] = [device(free=4 * MIB, pages=10)]
    doc["framework"] = {
        "name": "torch", "version": "2.11.0", "reason": "oom", "segments_joined": 1 if joined else 0,
        "devices": [{"device": 0, "allocated_bytes": 8 * MIB, "reserved_bytes": 20 * MIB,
                     "reserved_unallocated_bytes": 12 * MIB, "largest_free_block_bytes": 12 * MIB}],
        "segments": [{"device": 0, "address": A, "total_size": 20 * MIB, "allocation": joined,
                      "blocks": [{"address": A, "size": active, "state": "active_allocated"},
                                 {"address": A + active, "size": 20 * MIB - active, "state": "inactive"}]}]}
    if limit is not None:
        doc["framework"]["devices"][0]["limit_bytes"] = limit
    if cupy:  # CuPy's pool: its counters, no segments, no largest free block
        doc["framework"].update(name="cupy", segments=[], segments_joined=0)
        doc["framework"]["devices"][0]["largest_free_block_bytes"] = None
    sc.checkpoint("oom", doc, where="@oom", live=[(A, 20 * MIB, "device", 0)])


def case_framework(sc: Scenario) -> dict[str, Any]:
    framework_base(sc)
    sc.lines.append(f"FRAMEWORK oom 0 {8 * MIB} {20 * MIB}")
    return {}


def case_framework_cupy(sc: Scenario) -> dict[str, Any]:
    framework_base(sc, cupy=True)
    sc.lines.append(f"FRAMEWORK oom 0 {8 * MIB} {20 * MIB}")
    return {}


def case_framework_counters(sc: Scenario) -> dict[str, Any]:
    framework_base(sc)
    sc.lines.append(f"FRAMEWORK oom 0 {10 * MIB} {20 * MIB}")
    return {}


def case_framework_blocks(sc: Scenario) -> dict[str, Any]:
    framework_base(sc, active=6 * MIB)
    sc.lines.append(f"FRAMEWORK oom 0 {8 * MIB} {20 * MIB}")
    return {}


def case_framework_unjoined(sc: Scenario) -> dict[str, Any]:
    framework_base(sc, joined=False)
    sc.lines.append(f"FRAMEWORK oom 0 {8 * MIB} {20 * MIB}")
    return {}


def case_limit(sc: Scenario) -> dict[str, Any]:
    framework_base(sc, limit=64 * MIB)
    sc.lines.append(f"LIMIT oom 0 {64 * MIB}")
    return {}


def case_limit_wrong(sc: Scenario) -> dict[str, Any]:
    framework_base(sc)
    sc.lines.append(f"LIMIT oom 0 {64 * MIB}")
    return {}


def case_framework_missing(sc: Scenario) -> dict[str, Any]:
    case_oom(sc)
    sc.lines.append(f"FRAMEWORK oom 0 {8 * MIB} {20 * MIB}")
    return {}


def case_leaks(sc: Scenario) -> dict[str, Any]:
    doc = snapshot("exit", [alloc(A, 3 * MIB)], [device(free=None, pages=2)],
                   leaks={"totals": {"counted": {"count": 1, "bytes": 3 * MIB}}})
    sc.checkpoint("exit", doc, where="@exit", live=[(A, 3 * MIB, "device", 0)])
    sc.lines.append(f"LEAKS exit 1 {3 * MIB}")
    return {"status": 23, "expect": 23, "leak_check": True,
            "stderr": "gpumemtrace: leak check: 1 allocation of 3.00 MiB live at exit count as leaks\n"}


def case_leaks_wrong(sc: Scenario) -> dict[str, Any]:
    more = case_leaks(sc)
    sc.lines.append("LEAKS exit 2 1")
    return more


def case_two_exits(sc: Scenario) -> dict[str, Any]:
    sc.checkpoint("exit", snapshot("exit", [], [device(free=None)]), where="@exit")
    sc.write("exit", snapshot("exit", [], [device(free=None)]))
    return {}


def case_skip(sc: Scenario) -> dict[str, Any]:
    sc.lines.append("SKIP one device")
    return {}


def case_skip_crashed(sc: Scenario) -> dict[str, Any]:
    sc.lines.append("SKIP one device")
    return {"status": 1}


def case_untraced(sc: Scenario) -> dict[str, Any]:
    sc.lines += ["CHECKPOINT start -", "COVER start all"]
    return {}


def case_status(sc: Scenario) -> dict[str, Any]:
    base(sc)
    return {"status": 1}


def case_tracer_message(sc: Scenario) -> dict[str, Any]:
    base(sc)
    return {"stderr": "gpumemtrace: warning: something odd\n"}


def case_oom_report(sc: Scenario) -> dict[str, Any]:
    base(sc)
    return {"stderr": "gpumemtrace: out of memory: cuMemAlloc_v2 of 4 MiB failed\n"
                      "gpumemtrace:   verdict: exhaustion\n"}


def case_recovered_report(sc: Scenario) -> dict[str, Any]:
    base(sc)
    return {"stderr": "gpumemtrace: out of memory, recovered: cuMemAlloc_v2 of 256 MiB on device 0 failed 1 time; "
                      "torch reported no out-of-memory\ngpumemtrace:   snapshot: ./gpumemtrace.1.oom.1.json\n"}


def case_malformed(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append("LIVE allocated 0x10 many device 0")
    return {}


def case_no_test(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.pop(0)
    return {}


def case_unknown_label(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"BYTES elsewhere 0 device {9 * MIB}")
    return {}


def case_no_checkpoint(sc: Scenario) -> dict[str, Any]:
    return {}


def case_granularity(sc: Scenario) -> dict[str, Any]:
    base(sc)
    sc.lines.append(f"GRANULARITY 0 {64 * 1024}")
    return {}


CASES: list[Case] = [
    ("pass", case_ok, None),
    ("fail", case_missing, "live set differs"),
    ("fail", case_wrong_kind, "live set differs"),
    ("fail", case_unknown_frees, "stats.unknown_frees is 1"),
    ("fail", case_delta, "free bytes fell by 12.00 MiB"),
    ("pass", case_delta_tolerated, None),
    ("fail", case_snapshot_free, "cudaMemGetInfo right after"),
    ("fail", case_pages, "pages.pages is 3"),
    ("pass", case_extra, None),
    ("fail", case_extra_missing, "footprint grew by 0 B"),
    ("pass", case_pool, None),
    ("fail", case_pool_wrong, "the program's pool"),
    ("pass", case_no_pools, None),
    ("pass", case_vmm_array, None),
    ("fail", case_reservation_missing, "no VMM reservation"),
    ("pass", case_bytes, None),
    ("fail", case_bytes_wrong, "device bytes on device 0"),
    ("fail", case_has_wrong, "no allocation of device"),
    ("fail", case_gone_wrong, "still live"),
    ("pass", case_has_mapped, None),
    ("fail", case_has_mapped_small, "no allocation of device/mapped"),
    ("fail", case_gone_mapped, "still live"),
    ("pass", case_pyframe, None),
    ("fail", case_pyframe_line, "innermost Python frame"),
    ("fail", case_pyframe_none, "innermost Python frame"),
    ("pass", case_oom, None),
    ("fail", case_oom_size, "failed_request.size"),
    ("pass", case_oom_min, None),
    ("fail", case_oom_primary, "verdict fragmentation (primary)"),
    ("fail", case_oom_missing, "no out-of-memory snapshot"),
    ("fail", case_oom_unexpected, "none expected"),
    ("pass", case_recovered, None),
    ("pass", case_growth_site, None),
    ("fail", case_growth_site_line, "the growing site is 'main (loss.py:40)', loss.py:12 expected"),
    ("fail", case_growth_site_steps, "grew over 0 marked steps, at least 4 expected"),
    ("fail", case_growth_site_none, "names no growing site"),
    ("fail", case_remedy_first, "remedy expandable_segments (first) expected"),
    ("fail", case_remedy_missing, "remedy smaller_batch expected"),
    ("fail", case_noverdict, "verdict allocator_fragmentation not expected"),
    ("pass", case_replay, None),
    ("fail", case_replay_nofit, "says the request does not fit (peak reserved 943718400 of 1073741824), fits "
                                "expected"),
    ("fail", case_replay_unanswered, "the diagnosis's replay did not answer: the replay under the run's own "
                                     "settings is not faithful: at request #3"),
    ("fail", case_replay_absent, "the diagnosis's replay did not answer: no replay"),
    ("pass", case_leaks, None),
    ("fail", case_leaks_wrong, "the leak check counts 1"),
    ("pass", case_framework, None),
    ("pass", case_framework_cupy, None),
    ("fail", case_framework_counters, "the framework says allocated 8388608"),
    ("fail", case_framework_blocks, "its active blocks add up to 6291456"),
    ("fail", case_framework_unjoined, "1 of 1 segments joined to no driver allocation"),
    ("fail", case_framework_missing, "no framework section"),
    ("pass", case_limit, None),
    ("fail", case_limit_wrong, "the framework's limit on device 0 is None, 67108864 expected"),
    ("fail", case_two_exits, "2 exit snapshots"),
    ("skip", case_skip, None),
    ("fail", case_skip_crashed, "exit status 1"),
    ("fail", case_untraced, "was the program traced"),
    ("fail", case_status, "exit status 1"),
    ("fail", case_tracer_message, "unexpected messages"),
    ("pass", case_oom_report, None),
    ("pass", case_recovered_report, None),
    ("fail", case_malformed, "malformed LIVE"),
    ("fail", case_no_test, "no TEST line"),
    ("fail", case_unknown_label, "which is no checkpoint"),
    ("fail", case_no_checkpoint, "no checkpoint"),
    ("fail", case_granularity, "granularity"),
]


def made_up() -> list[str]:
    failures = []
    for want, build, message in CASES:
        sc = Scenario()
        try:
            more = build(sc)
            out = sc.run(more.get("tolerance", 0), more.get("status", 0), more.get("expect", 0),
                         more.get("stderr", ""), more.get("leak_check", False))
        finally:
            sc.close()
        text = "\n".join(out.problems)
        if out.status != want or (message is not None and message not in text):
            failures.append(f"{build.__name__}: {out.status} (wanted {want}"
                            f"{f', with {message!r}' if message else ''}): {out.problems}")
    return failures


# --- Mutations of real runs on the simulated GPU -----------------------------

def mutations(build_dir: str) -> list[str]:
    import gpu_suite  # noqa: E402  (here: it imports tests/schema)

    paths = gpu_suite.paths_for(build_dir, "sim")
    cases = {c.name: c for c in gpu_suite.CASES}
    failures: list[str] = []
    for name, changes in (("runtime-static", RUNTIME_MUTATIONS), ("fragmentation", FRAGMENT_MUTATIONS),
                          ("vmm-expandable", VMM_MUTATIONS)):
        row = gpu_suite.run_case(cases[name], "sim", paths, sys.executable, 0)
        if row.outcome.status != "pass":
            failures.append(f"{name}: the untouched run does not pass: {row.outcome.problems}")
            continue
        with open(os.path.join(row.workdir, "stdout.txt"), encoding="utf-8") as f:
            output = f.read()
        for what, mutate in changes:
            work = tempfile.mkdtemp(prefix="gmt-mutation-")
            for p in glob.glob(os.path.join(row.workdir, "gpumemtrace.*.json")):
                shutil.copy(p, work)
            lines = [ln.replace(row.workdir, work) for ln in output.splitlines()]
            lines = mutate(lines, work)
            out = check_gpu.check(check_gpu.parse("\n".join(lines) + "\n"), work, 0, 0, 0, "", False)
            if out.status != "fail":
                failures.append(f"{name}: mutation {what!r} was not caught")
            shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(row.workdir, ignore_errors=True)
    return failures


def drop_first(prefix: str) -> Callable[[list[str], str], list[str]]:
    def mutate(lines: list[str], _work: str) -> list[str]:
        i = next(i for i, ln in enumerate(lines) if ln.startswith(prefix))
        return lines[:i] + lines[i + 1:]
    return mutate


def shift_meminfo(label: str, by: int) -> Callable[[list[str], str], list[str]]:
    def mutate(lines: list[str], _work: str) -> list[str]:
        out = []
        for ln in lines:
            f = ln.split()
            if f[:2] == ["MEMINFO", label]:
                f[3] = str(int(f[3]) - by)
                ln = " ".join(f)
            out.append(ln)
        return out
    return mutate


def edit_snapshots(reason: str, edit: Callable[[dict[str, Any]], None]) -> Callable[[list[str], str], list[str]]:
    def mutate(lines: list[str], work: str) -> list[str]:
        for p in glob.glob(os.path.join(work, f"gpumemtrace.*.{reason}.*.json")):
            with open(p, encoding="utf-8") as f:
                doc = json.load(f)
            edit(doc)
            with open(p, "w", encoding="utf-8") as f:
                json.dump(doc, f)
        return lines
    return mutate


def remove_oom(lines: list[str], work: str) -> list[str]:
    for p in glob.glob(os.path.join(work, "gpumemtrace.*.oom.*.json")):
        os.remove(p)
    return lines


def replace(old: str, new: str) -> Callable[[list[str], str], list[str]]:
    return lambda lines, _work: [ln.replace(old, new) for ln in lines]


def grow_first_allocation(doc: dict[str, Any]) -> None:
    if doc["allocations"]:
        doc["allocations"][0]["size"] += 256


def one_page_less(doc: dict[str, Any]) -> None:
    for d in doc["devices"]:
        if d.get("pages") and d["pages"]["pages"]:
            d["pages"]["pages"] -= 1


RUNTIME_MUTATIONS = [
    ("a LIVE line dropped", drop_first("LIVE allocated")),
    ("2 MiB less free at allocated", shift_meminfo("allocated", 2 * MIB)),
    ("an allocation 256 bytes larger", edit_snapshots("api", grow_first_allocation)),
    ("one page less in the snapshots", edit_snapshots("api", one_page_less)),
    ("a snapshot's free bytes changed", edit_snapshots("api", lambda d: d["devices"][0].update(
        free_bytes=d["devices"][0]["free_bytes"] - MIB))),
]

FRAGMENT_MUTATIONS = [
    ("the oom snapshot removed", remove_oom),
    ("another request size", replace(f"OOM oom cuMemAlloc_v2 {4 * MIB}", f"OOM oom cuMemAlloc_v2 {2 * MIB}")),
    ("another verdict", replace("VERDICT oom fragmentation", "VERDICT oom growth")),
    ("free bytes at the failure", shift_meminfo("oom", 2 * MIB)),
]

VMM_MUTATIONS = [
    ("a vmm handle dropped", drop_first("LIVE grown 0x")),
    ("a larger reservation", replace("RESERVATION grown ", "RESERVATION grown 9")),
    ("kind vmm read as device", replace(" vmm 0", " device 0")),
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", help="also mutate real runs of BUILD/tests/gpu/sim-*")
    args = ap.parse_args(argv)
    failures = made_up()
    print(f"made-up runs: {len(CASES) - len(failures)} of {len(CASES)} as expected")
    if args.build_dir:
        more = mutations(args.build_dir)
        print(f"mutations of simulated runs: {len(more)} not as expected")
        failures += more
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
