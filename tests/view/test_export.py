#!/usr/bin/env python3
"""Tests of the viewer's exports (tools/python/gpumemtrace/view/export.py): Chrome trace JSON,
speedscope JSON and the PyTorch memory snapshot, on synthetic snapshots whose
contents are known, on hostile names, and — with a build directory — on the
snapshots the demo writes on the simulated GPU under the real tracer.

    python3 tests/view/test_export.py [BUILD_DIR]

Exits 1 when a test fails. check_memory_viz() below checks a PyTorch snapshot
against what PyTorch's own readers take from it.
"""

from __future__ import annotations

import bisect
import copy
import json
import os
import pickle
import pickletools
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
sys.path.insert(0, HERE)

import fixtures  # noqa: E402
from gpumemtrace.view import cli, export, load, model  # noqa: E402

MiB = 1 << 20
HOST_KINDS = ("host", "registered")


class Failure(Exception):
    pass


def eq(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise Failure(f"{what}: got {_short(got)}, want {_short(want)}")


def ok(cond: Any, what: str) -> None:
    if not cond:
        raise Failure(what)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 300 else s[:297] + "..."


def checked(doc: Dict[str, Any], name: str = "synthetic") -> Dict[str, Any]:
    """The fixture as the viewer reads it (through load's checks)."""
    return load.parse(json.dumps(doc), name)


def shifted(doc: Dict[str, Any], delta_ns: int) -> Dict[str, Any]:
    """A copy of a raw fixture document with every time moved by delta_ns."""
    d = copy.deepcopy(doc)
    d["time_ns"] += delta_ns
    s = d["series"]
    s["start_ns"] += delta_ns
    s["time_ns"] = [t + delta_ns for t in s["time_ns"]]
    for e in d["history"]["events"]:
        e["time_ns"] += delta_ns
    for a in d["allocations"]:
        a["time_ns"] += delta_ns
    return d


def roundtrip_json(obj: Any) -> Any:
    data = export.dumps(obj)
    ok(isinstance(data, bytes), "dumps() returns bytes")
    return json.loads(data.decode("utf-8"))


# ---------------------------------------------------------------------------
# Chrome trace


def trace_of(pid_name: str, trace: Dict[str, Any]) -> int:
    """The trace pid of the process named pid_name."""
    for e in trace["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name" and e["args"]["name"] == pid_name:
            return e["pid"]
    raise Failure(f"no process named {pid_name!r}; names: "
                  f"{[e['args']['name'] for e in trace['traceEvents'] if e.get('name') == 'process_name']}")


def counter_finals(trace: Dict[str, Any], pid: int) -> Dict[Tuple[str, str], Any]:
    """{(counter name, kind): value at the last event} of one process."""
    last: Dict[str, Tuple[float, Dict[str, Any]]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "C" and e["pid"] == pid:
            prev = last.get(e["name"])
            ok(prev is None or e["ts"] >= prev[0], f"counter {e['name']} goes back in time")
            last[e["name"]] = (e["ts"], e["args"])
    return {(name, k): v for name, (_, args) in last.items() for k, v in args.items()}


def counter_name(dev: int) -> str:
    return "host live bytes" if dev < 0 else f"GPU {dev} live bytes"


def check_trace_shape(trace: Dict[str, Any]) -> None:
    """What Perfetto's and chrome://tracing's JSON readers need of every event."""
    ok(isinstance(trace.get("traceEvents"), list), "traceEvents is a list")
    # Perfetto (json_trace_tokenizer.cc) reads displayTimeUnit only at the
    # start, takes "ns" to mean ts in nanoseconds, and stops at a top-level
    # key it does not know.
    eq(list(trace)[0], "displayTimeUnit", "the first key")
    eq(trace["displayTimeUnit"], "ms", "displayTimeUnit")
    ok(set(trace) <= {"displayTimeUnit", "traceEvents", "otherData"}, f"top-level keys {sorted(trace)}")
    for e in trace["traceEvents"]:
        ok(isinstance(e.get("ph"), str) and len(e["ph"]) == 1, f"event without a phase: {e}")
        ok(isinstance(e.get("name"), str), f"event without a name: {e}")
        for k in ("pid", "tid"):
            ok(isinstance(e.get(k), int) and 0 <= e[k] < 1 << 32, f"{k} not a 32-bit id: {e}")
        ok(all(v is not None for v in e.get("args", {}).values()), f"null arg: {e}")
        if e["ph"] != "M":
            ok(isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, f"bad ts: {e}")
        if e["ph"] == "C":
            ok(isinstance(e.get("args"), dict) and e["args"], f"counter without values: {e}")
            ok(all(isinstance(v, int) for v in e["args"].values()), f"counter value not an int: {e}")
        if e["ph"] == "X":
            ok(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"bad dur: {e}")
        if e["ph"] == "i":
            ok(e.get("s") in ("t", "p", "g"), f"instant without scope: {e}")
    # One pool of ids: a thread never has another process's pid, and a
    # thread id belongs to one process.
    pids = {e["pid"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    owner: Dict[int, int] = {}
    for e in trace["traceEvents"]:
        ok(e["pid"] in pids, f"event of an unnamed process: {e}")
        ok(e["tid"] not in pids or e["tid"] == e["pid"], f"tid is another process's pid: {e}")
        ok(owner.setdefault(e["tid"], e["pid"]) == e["pid"], f"tid {e['tid']} in two processes")
    # Complete events on one thread must nest, or Perfetto cuts them.
    by_track: Dict[Tuple[int, int], List[Tuple[float, float]]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for track, spans in by_track.items():
        open_: List[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ and open_[-1] <= start + 1e-9 and open_[-1] < end:
                open_.pop()
            ok(not open_ or end <= open_[-1] + 1e-6, f"slices on {track} overlap without nesting")
            open_.append(end)


def expected_tag_spans(raw: Dict[str, Any]) -> Dict[str, Tuple[int, int]]:
    """path -> (first, last) event time, from the fixture: allocations (all
    live in synthetic()) and out-of-memory results whose stack has tags."""
    tags = {s["id"]: s.get("tags") or [] for s in raw["stacks"]}
    spans: Dict[str, List[int]] = {}
    items = [(a["time_ns"], a["stack"]) for a in raw["allocations"]]
    items += [(e["time_ns"], e["stack"]) for e in raw["history"]["events"] if e["op"] == "oom"]
    for t, sid in items:
        tg = tags.get(sid, [])
        for k in range(1, len(tg) + 1):
            sp = spans.setdefault("/".join(tg[:k]), [t, t])
            sp[0], sp[1] = min(sp[0], t), max(sp[1], t)
    return {p: (a, b) for p, (a, b) in spans.items()}


def test_trace_single() -> None:
    raw, truth = fixtures.synthetic(n=3000, sites=24, devices=2, seed=7)
    # A free after every allocation, of a tagged stack: it carries the
    # allocation's stack, not the tags open when it ran, so no tag grows.
    hist = raw["history"]["events"]
    a = next(a for a in raw["allocations"] if a["stack"] % 2 and a["device"] >= 0)
    hist.insert(-1, {"op": "free", "seq": 10 ** 6, "time_ns": hist[-1]["time_ns"] - 1, "address": a["address"],
                     "size": a["size"], "kind": a["kind"], "device": a["device"], "api": "cuMemFree_v2",
                     "thread": 4242, "stack": a["stack"]})
    doc = checked(raw)
    trace = roundtrip_json(export.chrome_trace([doc]))
    check_trace_shape(trace)
    pid = trace_of(model.process_label(doc), trace)
    eq(pid, doc["pid"], "a lone process keeps its pid")
    finals = counter_finals(trace, pid)
    want = {(counter_name(dev), kind): v for dev, kinds in truth["devices"].items() for kind, v in kinds.items()}
    eq(finals, want, "final counter values (live bytes per device and kind)")
    # One counter event per series point and device (and a zero before the first).
    points = len(raw["series"]["time_ns"])
    for dev in truth["devices"]:
        n = sum(1 for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == counter_name(dev))
        eq(n, points + 1, f"counter events of device {dev}")
    origin = min(raw["series"]["start_ns"], min(a["time_ns"] for a in raw["allocations"]))
    eq(trace["otherData"]["origin_ns"], origin, "origin")

    ooms = [e for e in trace["traceEvents"] if e.get("cat") == "oom"]
    eq(len(ooms), 1, "out-of-memory instants")
    o = ooms[0]
    eq((o["ph"], o["s"]), ("i", "p"), "the oom is a process instant")
    eq(o["args"]["size"], raw["failed_request"]["size"], "oom size")
    eq(o["args"]["api"], raw["failed_request"]["api"], "oom api")
    eq(o["args"]["diagnosis"], raw["diagnosis"]["summary"], "oom diagnosis")
    oom_ev = [e for e in raw["history"]["events"] if e["op"] == "oom"][0]
    eq(o["ts"], (oom_ev["time_ns"] - origin) / 1000, "oom time")

    slices = {e["args"]["path"]: (e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"}
    want_tags = {p: ((a - origin) / 1000, (b - a) / 1000) for p, (a, b) in expected_tag_spans(raw).items()}
    eq(sorted(slices), sorted(want_tags), "tag slices")
    for p, (ts, dur) in want_tags.items():
        ok(abs(slices[p][0] - ts) < 1e-3 and abs(slices[p][1] - dur) < 1e-3,
           f"tag {p}: got {slices[p]}, want {(ts, dur)}")

    hist = [e for e in trace["traceEvents"] if e.get("cat") == "memory"]
    eq(len(hist), sum(1 for e in raw["history"]["events"] if e["op"] != "oom"), "history instants")
    marks = [e for e in trace["traceEvents"] if e.get("cat") == "snapshot"]
    eq([m["ts"] for m in marks], [(raw["time_ns"] - origin) / 1000], "snapshot mark")


def test_trace_ranks_align() -> None:
    raws, docs = [], []
    delta = 5_000_000_123  # 5 s and 123 ns
    for r in range(3):
        raw, _ = fixtures.synthetic(n=200, sites=8, seed=10 + r, pid=1000 + r, rank=2 - r, oom=(r == 1))
        raw = shifted(raw, r * delta)
        raws.append(raw)
        docs.append(checked(raw, f"rank{2 - r}"))
    trace = roundtrip_json(export.chrome_trace(docs))
    check_trace_shape(trace)
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    eq(names, [model.process_label(d) for d in sorted(docs, key=lambda d: d["process"]["rank"])],
       "process names in rank order")
    ok(all(n.startswith("rank ") for n in names), "ranks named 'rank N (pid …)'")
    first = {}
    for d in docs:
        pid = trace_of(model.process_label(d), trace)
        first[d["pid"]] = min(e["ts"] for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == pid)
    eq(first[1000], 0, "the earliest document starts at 0")
    for r in (1, 2):
        got = first[1000 + r] - first[1000]
        ok(abs(got - r * delta / 1000) < 1e-3, f"rank offset: got {got} us, want {r * delta / 1000}")
    sort = {e["pid"]: e["args"]["sort_index"] for e in trace["traceEvents"] if e.get("name") == "process_sort_index"}
    eq(sorted(sort.values()), [0, 1, 2], "sort indices")


def test_trace_same_process() -> None:
    """Two snapshots of one process: two trace processes, ids that do not meet."""
    raw1, _ = fixtures.synthetic(n=300, seed=1, oom=True)
    raw2, truth2 = fixtures.synthetic(n=400, seed=2, oom=False)
    raw2["seq"] = 2
    raw2 = shifted(raw2, 2_000_000_000)
    d1, d2 = checked(raw1), checked(raw2)
    trace = roundtrip_json(export.chrome_trace([d2, d1]))
    check_trace_shape(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    eq(len(names), 2, "one trace process per snapshot")
    eq(sorted(names.values()), sorted([model.process_label(d1) + " (oom snapshot 1)",
                                       model.process_label(d2) + " (exit snapshot 2)"]), "labels")
    pid2 = trace_of(model.process_label(d2) + " (exit snapshot 2)", trace)
    want = {(counter_name(dev), k): v for dev, kinds in truth2["devices"].items() for k, v in kinds.items()}
    eq(counter_finals(trace, pid2), want, "the second snapshot's final counters")
    tids: Dict[int, set] = {}
    for e in trace["traceEvents"]:
        tids.setdefault(e["tid"], set()).add(e["pid"])
    ok(all(len(p) == 1 for p in tids.values()), "no thread id in two trace processes")


def test_trace_hostile() -> None:
    raw, truth = fixtures.hostile(n=300, sites=12, seed=4, rank=3)
    doc = checked(raw)
    text = export.dumps(export.chrome_trace([doc])).decode("utf-8")
    trace = json.loads(text)
    check_trace_shape(trace)
    trace_of(model.process_label(doc), trace)
    tags = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    ok("train" + fixtures.HOSTILE in tags, "hostile tag names kept exactly")
    # A lone surrogate (valid in JSON text, not in UTF-8) still exports.
    raw["stacks"][0]["frames"][1]["function"] = "bad\ud800name"
    raw["stacks"][0]["tags"] = ["t\udfff"]
    doc = checked(raw)
    for fn in (export.chrome_trace, export.speedscope):
        data = export.dumps(fn([doc]))
        json.loads(data.decode("utf-8"))
    pickle.loads(pickle.dumps(export.pytorch_snapshot([doc]), protocol=2))


# ---------------------------------------------------------------------------
# speedscope


def check_speedscope_shape(ss: Dict[str, Any]) -> None:
    """What speedscope's importer reads (src/lib/file-format-spec.ts)."""
    eq(ss.get("$schema"), "https://www.speedscope.app/file-format-schema.json", "$schema")
    frames = ss["shared"]["frames"]
    for f in frames:
        ok(isinstance(f.get("name"), str), f"frame without a name: {f}")
        ok("file" not in f or isinstance(f["file"], str), f"bad file: {f}")
        ok("line" not in f or isinstance(f["line"], int), f"bad line: {f}")
    for p in ss["profiles"]:
        eq(p["type"], "sampled", "profile type")
        eq(p["unit"], "bytes", "unit")
        ok(isinstance(p["name"], str), "profile name")
        eq(len(p["samples"]), len(p["weights"]), "samples and weights")
        eq(p["endValue"] - p["startValue"], sum(p["weights"]), "endValue - startValue is the total weight")
        for s in p["samples"]:
            ok(s and all(isinstance(i, int) and 0 <= i < len(frames) for i in s), f"bad sample {s}")


def sample_names(ss: Dict[str, Any], p: Dict[str, Any]) -> Dict[Tuple[str, ...], int]:
    fr = ss["shared"]["frames"]
    out: Dict[Tuple[str, ...], int] = {}
    for s, w in zip(p["samples"], p["weights"]):
        key = tuple(fr[i]["name"] for i in s)
        out[key] = out.get(key, 0) + w
    return out


def want_samples(raw: Dict[str, Any], truth: Dict[str, Any]) -> Dict[Tuple[str, ...], int]:
    """Stack (function names, outermost first) -> live bytes, from the truth."""
    stacks = {s["id"]: s for s in raw["stacks"]}
    out: Dict[Tuple[str, ...], int] = {}
    for sid, (nbytes, _) in truth["sites"].items():
        names = tuple(f["function"] for f in reversed(stacks[sid]["frames"]))
        out[names] = out.get(names, 0) + nbytes
    return out


def test_speedscope() -> None:
    raw, truth = fixtures.synthetic(n=3000, sites=30, devices=2, seed=5)
    doc = checked(raw)
    ss = roundtrip_json(export.speedscope([doc]))
    check_speedscope_shape(ss)
    eq(len(ss["profiles"]), 1, "one profile per snapshot")
    p = ss["profiles"][0]
    ok(p["name"].startswith(model.process_label(doc)) and "oom" in p["name"], f"profile name {p['name']!r}")
    eq(sum(p["weights"]), truth["live_bytes"], "total weight = live bytes")
    eq(sample_names(ss, p), want_samples(raw, truth), "weight per stack")
    fr = ss["shared"]["frames"]
    for s in p["samples"]:
        eq(fr[s[0]]["name"], "__libc_start_main", "outermost frame first")
        eq(fr[s[-1]]["name"], "cudaMalloc", "innermost frame last")
    py = [f for f in fr if f["name"] == "forward"]
    ok(py and py[0]["file"] == "/src/train.py" and isinstance(py[0]["line"], int), "Python frames with file and line")
    native = [f for f in fr if f["name"] == "cudaMalloc"]
    eq(native[0].get("file"), "/usr/lib/x86_64-linux-gnu/libcudart.so.13", "a native frame without source names its module")
    eq(len({(f["name"], f.get("file"), f.get("line")) for f in fr}), len(fr), "frames are shared, not repeated")


def test_speedscope_several() -> None:
    docs, truths = [], []
    for r in range(3):
        raw, truth = fixtures.hostile(n=150 + 50 * r, sites=9, seed=20 + r, pid=700 + r, rank=r)
        docs.append(checked(raw))
        truths.append((raw, truth))
    ss = roundtrip_json(export.speedscope(list(reversed(docs))))
    check_speedscope_shape(ss)
    eq(len(ss["profiles"]), 3, "profiles")
    for r, p in enumerate(ss["profiles"]):
        raw, truth = truths[r]
        ok(p["name"].startswith(f"rank {r} "), f"profiles in rank order: {p['name']!r}")
        eq(sum(p["weights"]), truth["live_bytes"], f"rank {r} total")
        eq(sample_names(ss, p), want_samples(raw, truth), f"rank {r} weight per stack")


# ---------------------------------------------------------------------------
# PyTorch memory snapshot

# The pickle opcodes the unpickler of pytorch.org/memory_viz handles
# (torch/utils/viz/MemoryViz.js, function unpickle): any other one fails there.
_JS_OPCODES = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET",
               "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1",
               "LONG_BINGET", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM",
               "DICT", "SHORT_BINUNICODE", "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2",
               "TUPLE3", "BINFLOAT"}
_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
            "segment_map", "segment_unmap", "oom", "snapshot")
_STATES = ("active_allocated", "active_pending_free", "inactive")


def check_pickle_opcodes(data: bytes) -> None:
    for op, arg, _ in pickletools.genops(data):
        ok(op.name in _JS_OPCODES, f"pickle opcode {op.name} is not one MemoryViz.js reads")
        if op.name == "PROTO":
            ok(2 <= arg <= 4, f"pickle protocol {arg}: MemoryViz.js reads 2 to 4")


def _check_frames(frames: Any, where: str) -> None:
    ok(isinstance(frames, list), f"{where}: frames not a list")
    for f in frames:
        # _memory_viz._frame_fmt/_frame_filter and MemoryViz.js format_frames/
        # frameFilter: f['filename'].split('/'), name.includes(…), f['line'].
        ok(isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("name"), str)
           and isinstance(f.get("line"), int) and not isinstance(f.get("line"), bool),
           f"{where}: bad frame {f}")


def check_memory_viz(snap: Any) -> None:
    """Raises Failure where PyTorch's readers would fail on snap, or show it
    wrong. What is checked comes from reading them:
    torch/cuda/_memory_viz.py (segsum, trace, segments, memory, compare,
    _write_blocks, _block_extra, _frame_fmt) and torch/utils/viz/MemoryViz.js
    (annotate_snapshot, process_alloc_data, MemoryView's simulate_memory and
    draw, formatEvent, format_frames, snapshot_change)."""
    ok(isinstance(snap, dict), "snapshot is a dict")
    segs, traces = snap.get("segments"), snap.get("device_traces")
    ok(isinstance(segs, list), "segments is a list")
    # snapshot_change falls back to device 0: device_traces[0] must exist.
    ok(isinstance(traces, list) and traces and all(isinstance(t, list) for t in traces),
       "device_traces is a non-empty list of lists")
    final: Dict[int, Tuple[Dict[int, int], Dict[int, int]]] = {i: ({}, {}) for i in range(len(traces))}
    for n, seg in enumerate(segs):
        w = f"segments[{n}]"
        for k in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream"):
            ok(isinstance(seg.get(k), int) and not isinstance(seg.get(k), bool), f"{w}: {k} not an int")
        # MemoryViz.js picks a device's segments with seg.device === index.
        ok(0 <= seg["device"] < len(traces), f"{w}: device {seg['device']} has no trace list")
        ok(seg.get("segment_type") in ("large", "small"), f"{w}: segment_type")
        ok(isinstance(seg.get("is_expandable"), bool), f"{w}: is_expandable")
        _check_frames(seg.get("frames", []), w)
        blocks = seg.get("blocks")
        ok(isinstance(blocks, list) and blocks, f"{w}: no blocks")
        addr, allocated = seg["address"], 0
        segs_of, blocks_of = final[seg["device"]]
        ok(addr not in segs_of, f"{w}: two segments at one address")
        segs_of[addr] = seg["total_size"]
        for b in blocks:
            ok(isinstance(b.get("size"), int) and b["size"] > 0, f"{w}: block size")
            ok(b.get("state") in _STATES, f"{w}: block state {b.get('state')!r}")
            if b["state"] in ("active_allocated", "active_pending_free"):
                # _block_extra: b['frames'], b['requested_size']; segsum counts
                # size - requested_size as internal free, which cannot be < 0.
                ok("frames" in b and isinstance(b.get("requested_size"), int), f"{w}: block without frames/requested_size")
                ok(0 <= b["requested_size"] <= b["size"], f"{w}: requested_size above size")
                _check_frames(b["frames"], w)
                allocated += b["requested_size"]
                blocks_of[addr] = b["size"]    # annotate_snapshot: b.addr = segment address + offsets
            addr += b["size"]
        # segsum: assert free_external + free_internal + allocated == total_size.
        eq(addr - seg["address"], seg["total_size"], f"{w}: block sizes add up to total_size")
        ok(seg["allocated_size"] <= seg["total_size"], f"{w}: allocated_size")

    for dev, trace in enumerate(traces):
        for n, e in enumerate(trace):
            w = f"device_traces[{dev}][{n}]"
            ok(isinstance(e, dict) and e.get("action") in _ACTIONS, f"{w}: action {e.get('action')!r}")
            # annotate_snapshot renames streams; one without "stream" becomes a
            # second stream and every event prints one.
            ok(isinstance(e.get("stream"), int), f"{w}: stream")
            ok(isinstance(e.get("size"), int), f"{w}: size")
            if e["action"] == "oom":
                # formatEvent: formatSize(event.device_free) calls toFixed().
                ok(isinstance(e.get("device_free"), int), f"{w}: oom without device_free")
            elif e["action"] != "snapshot":
                ok(isinstance(e.get("addr"), int), f"{w}: addr")  # formatAddr: addr.toString(16)
            _check_frames(e.get("frames", []), w)
            if "time_us" in e:
                ok(isinstance(e["time_us"], int), f"{w}: time_us")
            ok("category" not in e, f"{w}: category (annotate_snapshot's 'categores' typo throws without 'unknown')")
        _replay(dev, trace, *final[dev])


def _replay(dev: int, trace: List[Dict[str, Any]], segs: Dict[int, int], blocks: Dict[int, int]) -> None:
    """MemoryView's simulate_memory(): from the final segments and blocks, undo
    the events from the last; at every step each block must lie in a segment
    (draw() reads b.segment.occupied), and a segment_alloc undone must name a
    segment (else findIndex gives -1 and splice drops the last one)."""
    # annotate_snapshot: free_requested directly followed by free_completed of
    # the same address becomes one 'free'.
    events: List[Dict[str, Any]] = []
    for e in trace:
        if (e["action"] == "free_completed" and events and events[-1]["action"] == "free_requested"
                and events[-1]["addr"] == e["addr"]):
            events[-1] = dict(events[-1], action="free")
            continue
        events.append(e)
    seg_starts = sorted(segs)
    blocks = dict(blocks)

    def in_segment(addr: int) -> bool:
        i = bisect.bisect_right(seg_starts, addr) - 1
        return i >= 0 and addr < seg_starts[i] + segs[seg_starts[i]]

    for b in blocks:
        ok(in_segment(b), f"device {dev}: final block {b:#x} in no segment")
    for n in range(len(events) - 1, -1, -1):
        e = events[n]
        w = f"device {dev} event {n} ({e['action']})"
        act = e["action"]
        if act in ("free", "free_completed"):
            ok(in_segment(e["addr"]), f"{w}: block {e['addr']:#x} put back in no segment")
            blocks[e["addr"]] = e["size"]
        elif act == "free_requested":
            # l_block_map[event.addr].free_requested = false
            ok(e["addr"] in blocks, f"{w}: free_requested of a block not there")
        elif act == "alloc":
            blocks.pop(e["addr"], None)
        elif act == "segment_free":
            ok(e["addr"] not in segs, f"{w}: segment {e['addr']:#x} twice")
            segs[e["addr"]] = e["size"]
            bisect.insort(seg_starts, e["addr"])
        elif act == "segment_alloc":
            ok(e["addr"] in segs, f"{w}: segment {e['addr']:#x} undone but not there")
            end = e["addr"] + segs[e["addr"]]
            inside = [b for b in blocks if e["addr"] <= b < end]
            ok(not inside, f"{w}: segment removed under live block {inside[:1]}")
            del segs[e["addr"]]
            seg_starts.remove(e["addr"])


def pytorch_roundtrip(docs: List[Dict[str, Any]]) -> Dict[str, Any]:
    snap = export.pytorch_snapshot(docs)
    data = pickle.dumps(snap, protocol=2)   # as cli.py writes it
    check_pickle_opcodes(data)
    back = pickle.loads(data)
    check_memory_viz(back)
    return back


def torch_frames(stack: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for f in (stack or {}).get("frames", []):
        if f["python"]:
            out.append({"filename": f["file"], "line": f["line"], "name": f["function"]})
        else:
            out.append({"filename": f["file"] or f["module"], "line": f["line"] or 0, "name": f["function"]})
    return out


def test_pytorch_single() -> None:
    raw, truth = fixtures.synthetic(n=2500, sites=20, devices=2, seed=9)
    # Some history of frees, an allocation freed and its address reused.
    hist = raw["history"]["events"]
    alive = [a for a in raw["allocations"] if a["device"] == 1]
    gone = {"address": "0x7ff000000000", "size": 3 * MiB, "kind": "device", "device": 1,
            "api": "cuMemAlloc_v2", "thread": 4242, "stack": 3}
    t0 = hist[0]["time_ns"] - 10_000
    hist.insert(0, dict(gone, op="alloc", seq=900001, time_ns=t0))
    hist.insert(1, dict(gone, op="free", seq=900002, time_ns=t0 + 1, api="cuMemFree_v2"))
    hist.insert(2, dict(gone, op="alloc", seq=900003, time_ns=t0 + 2))
    hist.insert(3, dict(gone, op="free", seq=900004, time_ns=t0 + 3, api="cuMemFree_v2"))
    # A free of an allocation older than the history.
    hist.insert(4, dict(gone, op="free", address="0x7ff100000000", seq=900005, time_ns=t0 + 4))
    doc = checked(raw)
    snap = pytorch_roundtrip([doc])
    eq(len(snap["device_traces"]), 2, "a list per device ordinal")
    for dev in (0, 1):
        want = sum(v for k, v in truth["devices"].get(dev, {}).items() if k not in HOST_KINDS)
        got = sum(s["total_size"] for s in snap["segments"] if s["device"] == dev)
        eq(got, want, f"device {dev}: segments total = live bytes")
    eq(len(snap["segments"]), sum(1 for a in raw["allocations"] if a["device"] >= 0), "a segment per allocation")
    stacks = {s["id"]: s for s in raw["stacks"]}
    by_addr = {int(a["address"], 16): a for a in raw["allocations"]}
    for s in snap["segments"]:
        a = by_addr[s["address"]]
        eq(s["blocks"][0]["frames"], torch_frames(stacks.get(a["stack"])), "block frames = the allocation's stack")
        eq(s["blocks"][0]["state"], "active_allocated", "block state")
    tr = snap["device_traces"][1]
    acts = [e["action"] for e in tr]
    n_alloc = sum(1 for e in hist if e["op"] == "alloc" and e["device"] == 1)
    n_free = sum(1 for e in hist if e["op"] == "free" and e["device"] == 1)
    eq(acts.count("alloc"), n_alloc, "alloc entries")
    eq(acts.count("segment_alloc"), n_alloc, "segment_alloc entries")
    eq(acts.count("free_requested"), n_free, "free_requested entries")
    eq(acts.count("free_completed"), n_free, "free_completed entries")
    eq(acts.count("segment_free"), n_free, "segment_free entries")
    eq(acts[:5], ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"], "entry order")
    eq(tr[0]["time_us"], t0 // 1000, "time_us")
    ooms = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    eq(len(ooms), 1, "oom entries")
    eq(ooms[0]["size"], raw["failed_request"]["size"], "oom size")
    eq(ooms[0]["device_free"], raw["devices"][0]["free_bytes"], "oom device_free")
    eq(snap["gpumemtrace"]["history_events_dropped"], 0, "nothing dropped")
    ok(alive, "device 1 has allocations")


def test_pytorch_framework() -> None:
    """Where PyTorch's state was handed over, its joined segments are
    exported as PyTorch has them: real blocks (free ones too) and streams;
    the trace leaves their history out (memory_viz's replay is checked)."""
    raw, truth = fixtures.synthetic(n=300, sites=8, seed=21)
    seg, other = fixtures.with_torch_state(raw, stream=0x3FAE5C90)
    addr = seg["address"]
    hist = raw["history"]["events"]
    a = next(x for x in raw["allocations"] if int(x["address"], 16) == addr)
    hist.insert(0, dict({k: a[k] for k in ("address", "size", "kind", "device", "api", "thread", "stack")},
                        op="alloc", seq=900001, time_ns=hist[0]["time_ns"] - 10))
    snap = pytorch_roundtrip([checked(raw)])
    got = next(s for s in snap["segments"] if s["address"] == addr)
    eq([(b["address"], b["size"], b["state"], b["requested_size"]) for b in got["blocks"]],
       [(b["address"], b["size"], b["state"], b["requested_size"]) for b in seg["blocks"]], "PyTorch's blocks")
    eq(got["blocks"][0]["frames"], [{"filename": "/w/model.py", "line": 12, "name": "forward"}], "a block's frames")
    active = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
    eq((got["stream"], got["allocated_size"], got["active_size"], got["requested_size"]),
       (0x3FAE5C90, sum(b["size"] for b in active), sum(b["size"] for b in active),
        sum(b["requested_size"] for b in active)), "the segment's stream and counters")
    plain = next(s for s in snap["segments"] if s["address"] == int(other["address"], 16))
    eq((len(plain["blocks"]), plain["stream"], plain["blocks"][0]["size"]), (1, 0, other["size"]),
       "an allocation PyTorch does not hold: one block, as before")
    want = sum(v for k, v in truth["devices"].get(0, {}).items() if k not in HOST_KINDS)
    eq(sum(s["total_size"] for s in snap["segments"] if s["device"] == 0), want, "segments total = live bytes")
    at = [e for e in snap["device_traces"][seg["device"]] if e.get("addr") == addr]
    eq(at, [], "the trace leaves the segment's history to PyTorch's own")


def test_pytorch_streams() -> None:
    """A stream-ordered allocation's stream (format minor 5) is its
    segment's and its trace entries' stream, the free's included; one
    without a stream is on 0."""
    raw, _ = fixtures.synthetic(n=300, sites=8, seed=5)
    hist = raw["history"]["events"]
    a = next(x for x in raw["allocations"] if x["kind"] == "async" and x["device"] == 0)
    a["stream"] = "0x5a17c0"
    alloc = [e for e in hist if e["op"] == "alloc" and e["address"] == a["address"]][-1]
    alloc["stream"] = a["stream"]
    gone = dict(alloc, address="0x7ffff0000000", seq=800001, time_ns=alloc["time_ns"] + 1, stream="0x5a1800")
    # A free has no stream of its own in the snapshot.
    freed = dict({k: v for k, v in gone.items() if k != "stream"}, op="free", seq=800002, time_ns=gone["time_ns"] + 1)
    hist[hist.index(alloc) + 1:hist.index(alloc) + 1] = [gone, freed]
    snap = pytorch_roundtrip([checked(raw)])
    seg = next(s for s in snap["segments"] if s["address"] == int(a["address"], 16))
    eq(seg["stream"], 0x5A17C0, "the segment's stream")
    trace = snap["device_traces"][seg["device"]]
    eq({e["stream"] for e in trace if e.get("addr") == int(a["address"], 16)}, {0x5A17C0}, "its trace's stream")
    eq([(e["action"], e["stream"]) for e in trace if e.get("addr") == 0x7FFFF0000000],
       [("segment_alloc", 0x5A1800), ("alloc", 0x5A1800), ("free_requested", 0x5A1800),
        ("free_completed", 0x5A1800), ("segment_free", 0x5A1800)], "a free on its allocation's stream")
    other = next(s for s in snap["segments"] if s["address"] != seg["address"])
    eq(other["stream"], 0, "without a stream: 0")


def test_pytorch_inconsistent_history() -> None:
    """Events that disagree with the live allocations are left out, so that
    memory_viz's replay cannot fail."""
    raw, _ = fixtures.synthetic(n=100, sites=5, seed=3)
    hist = raw["history"]["events"]
    live = hist[-2]   # an alloc of a live allocation (the last is the oom)
    ok(live["op"] == "alloc", "fixture: the history ends with allocations")
    hist.append(dict(live, op="free", seq=999999, time_ns=live["time_ns"] + 1))      # freed, yet live
    hist.append(dict(live, op="alloc", address="0x10000", seq=1000000, time_ns=live["time_ns"] + 2))  # not live
    doc = checked(raw)
    snap = pytorch_roundtrip([doc])
    eq(snap["gpumemtrace"]["history_events_dropped"], 2, "events dropped")


def test_pytorch_oom_unknown_free() -> None:
    """An out-of-memory result where the driver's free bytes were not asked
    (an exit snapshot's history): device_free is still a number."""
    raw, _ = fixtures.synthetic(n=50, sites=4, seed=12, oom=False)
    raw["history"]["events"].append({"op": "oom", "seq": 1, "time_ns": raw["time_ns"] - 5, "address": None,
                                     "size": 8 * MiB, "kind": "async", "device": 0, "api": "cuMemAllocAsync",
                                     "thread": 4242, "stack": 1})
    snap = pytorch_roundtrip([checked(raw)])
    ooms = [e for e in snap["device_traces"][0] if e["action"] == "oom"]
    eq([(e["size"], e["device_free"]) for e in ooms], [(8 * MiB, 0)], "oom entry")


def test_pytorch_several() -> None:
    docs, truths = [], []
    for r in range(2):
        raw, truth = fixtures.hostile(n=400, sites=10, devices=2, seed=30 + r, pid=800 + r, rank=1 - r)
        docs.append(checked(raw))
        truths.append(truth)
    snap = pytorch_roundtrip(docs)
    listed = snap["gpumemtrace"]["devices"]
    eq([(d["rank"], d["device"], d["index"]) for d in listed], [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)],
       "one list per (document, device), in rank order")
    eq(len(snap["device_traces"]), 4, "device lists")
    for d in listed:
        truth = truths[1 - d["rank"]]
        want = sum(v for k, v in truth["devices"].get(d["device"], {}).items() if k not in HOST_KINDS)
        got = sum(s["total_size"] for s in snap["segments"] if s["device"] == d["index"])
        eq(got, want, f"rank {d['rank']} device {d['device']} total")


def test_pytorch_large_ordinal() -> None:
    """A snapshot naming a device ordinal no machine has (an edited or
    damaged file): its lists numbered in order, not one per ordinal up to
    it (2^40 empty lists, which never finished)."""
    raw, truth = fixtures.synthetic(n=200, sites=5, devices=2, seed=14)
    big = 1 << 40
    for a in raw["allocations"] + raw["history"]["events"]:
        if a["device"] == 1:
            a["device"] = big
    for d in raw["devices"]:
        if d["index"] == 1:
            d["index"] = big
    snap = pytorch_roundtrip([checked(raw)])
    listed = snap["gpumemtrace"]["devices"]
    eq([(d["device"], d["index"]) for d in listed], [(0, 0), (big, 1)], "numbered in order, the ordinal kept")
    eq(len(snap["device_traces"]), 2, "a list per device named")
    want = sum(v for k, v in truth["devices"].get(1, {}).items() if k not in HOST_KINDS)
    eq(sum(s["total_size"] for s in snap["segments"] if s["device"] == 1), want, "the large ordinal's segments")


# ---------------------------------------------------------------------------
# Empty and minimal snapshots, the command line


def test_empty() -> None:
    raw, _ = fixtures.synthetic(n=0, sites=3, oom=False)
    raw["series"]["time_ns"] = []
    raw["series"]["columns"] = []
    minimal = {"format": "gpumemtrace-snapshot", "version": 1, "reason": "api", "seq": 1,
               "time_ns": fixtures.T0, "pid": 5,
               "summary": {"live_bytes": 0, "live_count": 0, "peak_bytes": 0, "total_allocs": 0, "total_frees": 0}}
    for d in (checked(raw), checked(minimal, "minimal")):
        trace = roundtrip_json(export.chrome_trace([d]))
        check_trace_shape(trace)
        trace_of(model.process_label(d), trace)
        eq([e for e in trace["traceEvents"] if e["ph"] in "CX"], [], "no counters or slices")
        ss = roundtrip_json(export.speedscope([d]))
        check_speedscope_shape(ss)
        eq(ss["profiles"][0]["samples"], [], "no samples")
        snap = pytorch_roundtrip([d])
        eq(snap["segments"], [], "no segments")
        ok(snap["device_traces"] in ([[]], [[] for _ in d["devices"]]), f"empty traces: {snap['device_traces']}")


def test_cli() -> None:
    raw, truth = fixtures.synthetic(n=300, seed=11)
    with tempfile.TemporaryDirectory() as tmp:
        src = fixtures.write(raw, os.path.join(tmp, "snap.json"))
        outs = {k: os.path.join(tmp, f"out.{k}") for k in ("trace", "ss", "pt")}
        rc = cli.main(["-q", "--perfetto", outs["trace"], "--speedscope", outs["ss"], "--pytorch", outs["pt"], src])
        eq(rc, 0, "exit status")
        with open(outs["trace"], "rb") as f:
            check_trace_shape(json.load(f))
        with open(outs["ss"], "rb") as f:
            ss = json.load(f)
        eq(sum(ss["profiles"][0]["weights"]), truth["live_bytes"], "speedscope total")
        with open(outs["pt"], "rb") as f:
            data = f.read()
        check_pickle_opcodes(data)
        check_memory_viz(pickle.loads(data))


# ---------------------------------------------------------------------------
# The real tracer's snapshots (simulated GPU)


def check_real(path: str) -> None:
    doc = load.load(path)
    live: Dict[Tuple[int, str], int] = {}
    for a in doc["allocations"]:
        live[(a["device"], a["kind"])] = live.get((a["device"], a["kind"]), 0) + a["size"]
    trace = roundtrip_json(export.chrome_trace([doc]))
    check_trace_shape(trace)
    pid = trace_of(model.process_label(doc), trace)
    finals = counter_finals(trace, pid)
    cols = {(c["device"], c["kind"]) for c in doc["series"]["columns"]}
    eq(finals, {(counter_name(d), k): live.get((d, k), 0) for d, k in cols},
       f"{path}: final counters = live bytes by device and kind")
    for dv in doc["devices"]:
        for k, v in dv["kinds"].items():
            eq(finals.get((counter_name(dv["index"]), k)), v, f"{path}: device {dv['index']} {k}")
    if doc["reason"] == "oom":
        ooms = [e for e in trace["traceEvents"] if e.get("cat") == "oom" and "diagnosis" in e["args"]]
        eq(len(ooms), 1, f"{path}: the failed request's instant")
        eq(ooms[0]["args"]["diagnosis"], doc["diagnosis"]["summary"], f"{path}: diagnosis")
    ss = roundtrip_json(export.speedscope([doc]))
    check_speedscope_shape(ss)
    eq(sum(ss["profiles"][0]["weights"]), doc["summary"]["live_bytes"], f"{path}: speedscope total")
    snap = pytorch_roundtrip([doc])
    for dv in doc["devices"]:
        want = sum(v for (d, k), v in live.items() if d == dv["index"] and k not in HOST_KINDS)
        got = sum(s["total_size"] for s in snap["segments"] if s["device"] == dv["index"])
        eq(got, want, f"{path}: device {dv['index']} segments")
    eq(snap["gpumemtrace"]["history_events_dropped"], 0, f"{path}: history agrees with the allocations")
    n_alloc = sum(1 for e in doc["history"]["events"] if e["op"] == "alloc" and e["kind"] not in HOST_KINDS)
    eq(sum(1 for t in snap["device_traces"] for e in t if e["action"] == "alloc"), n_alloc, f"{path}: alloc entries")


def make_simulator_test(build_dir: str) -> Callable[[], None]:
    def test_simulator() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            snaps = fixtures.simulator_snapshots(build_dir, tmp)
            for reason in ("oom", "exit"):
                check_real(snaps[reason])
            docs = [load.load(snaps[r]) for r in ("oom", "exit")]
            trace = roundtrip_json(export.chrome_trace(docs))
            check_trace_shape(trace)
            pytorch_roundtrip(docs)
    return test_simulator


# ---------------------------------------------------------------------------


def bench(n: int = 100_000) -> None:
    """Export times for a snapshot of n allocations (not a test: prints them)."""
    t = time.perf_counter()
    raw, _ = fixtures.synthetic(n=n, sites=200, devices=2, seed=1, points=2048)
    doc = checked(raw)
    print(f"fixture of {n} allocations: {time.perf_counter() - t:.2f} s")
    for name, fn in (("chrome trace", lambda: export.dumps(export.chrome_trace([doc]))),
                     ("speedscope", lambda: export.dumps(export.speedscope([doc]))),
                     ("pytorch", lambda: pickle.dumps(export.pytorch_snapshot([doc]), protocol=2))):
        t = time.perf_counter()
        data = fn()
        print(f"{name}: {time.perf_counter() - t:.2f} s, {len(data) / 1e6:.1f} MB")


def test_trace_steps() -> None:
    """The program's steps (gmt_step) are process-wide instants, at their
    times, and the other exports leave them out."""
    raw, _ = fixtures.synthetic(n=200, sites=4, seed=3)
    hist = raw["history"]["events"]
    t0 = hist[0]["time_ns"]
    for k in range(3):
        hist.insert(2 * k, {"op": "step", "seq": k + 1, "time_ns": t0 + k, "address": None, "size": 0,
                            "step": 10 + k, "kind": None, "device": -1, "api": None, "thread": 1,
                            "stack": 0})
    doc = checked(raw)
    eq([s["step"] for s in doc["history"]["steps"]], [10, 11, 12], "steps kept aside")
    ok(all(e["op"] != "step" for e in doc["history"]["events"]), "events hold memory only")
    trace = roundtrip_json(export.chrome_trace([doc]))
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
    eq([e["name"] for e in steps], ["step 10", "step 11", "step 12"], "step instants")
    ok(all(e["ph"] == "i" and e["s"] == "p" for e in steps), "process-wide instants")
    pickle.loads(pickle.dumps(export.pytorch_snapshot([doc]), protocol=2))
    roundtrip_json(export.speedscope([doc]))


TESTS: List[Callable[[], None]] = [
    test_trace_steps,
    test_trace_single, test_trace_ranks_align, test_trace_same_process, test_trace_hostile,
    test_speedscope, test_speedscope_several,
    test_pytorch_single, test_pytorch_framework, test_pytorch_streams, test_pytorch_inconsistent_history,
    test_pytorch_oom_unknown_free,
    test_pytorch_several, test_pytorch_large_ordinal,
    test_empty, test_cli,
]


def main(argv: List[str]) -> int:
    if argv[:1] == ["--bench"]:
        bench(int(argv[1]) if len(argv) > 1 else 100_000)
        return 0
    tests = list(TESTS)
    if argv:
        tests.append(make_simulator_test(argv[0]))
    passed = failed = 0
    for t in tests:
        try:
            t()
        except Exception as e:  # noqa: BLE001 - every failure is reported and counted
            failed += 1
            print(f"FAIL {t.__name__}: {e}")
            if not isinstance(e, Failure):
                traceback.print_exc()
        else:
            passed += 1
            print(f"ok   {t.__name__}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
