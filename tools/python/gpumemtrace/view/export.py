"""Exports for other viewers: Chrome trace JSON (Perfetto, chrome://tracing),
speedscope JSON (live bytes by stack) and PyTorch's memory snapshot (the dict
torch.cuda.memory._snapshot() returns, for pytorch.org/memory_viz). Each takes
the documents of load.load() and returns plain data; dumps() makes JSON bytes.

Several documents: one trace process per document (ranks, or several snapshots
of one process side by side), one speedscope profile per document, and one
PyTorch "device" per (document, device) pair. docs/viewer.md says more.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import model
from .vocab import HOST_KINDS, KINDS

Doc = Dict[str, Any]
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
GENERATOR = "gpumemtrace view"
_U32 = 1 << 32
# pid_max is at most 2^22 on Linux: ids moved by multiples of it stay
# recognisable (412 -> 4194716) and cannot meet a real id.
_ID_STEP = 1 << 22
# Trace thread ids for the region-tag lanes start here, above any real tid.
_LANE_TID = 1 << 30
# One snapshot's device lists are indexed by the device ordinal, as
# PyTorch's are, where every ordinal is below this (no machine has that many
# devices); a file that names a larger one is numbered in order instead,
# rather than given a list per ordinal up to it.
_ORDINAL_LISTS = 1024


def dumps(obj: Any) -> bytes:
    """obj as compact JSON in UTF-8."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        # NOTE: a lone surrogate ("\ud800" in the snapshot's JSON) has no UTF-8
        # form; escaped, it stays valid JSON that browsers parse.
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"),
                          allow_nan=False).encode("ascii")


# ---------------------------------------------------------------------------
# What the exports share


def _order(docs: Sequence[Doc]) -> List[int]:
    """The documents' indices in rank order, as model.merge() lists them."""
    if len(docs) == 1:
        return [0]
    return list(model.merge(docs)["order"])


def _labels(docs: Sequence[Doc]) -> List[str]:
    """Each document's process label; where one process has several
    snapshots, each says which ("pid 412 (oom snapshot 1)")."""
    key = [(d["process"].get("host"), d["pid"], d["process"].get("rank")) for d in docs]
    out = []
    for i, d in enumerate(docs):
        label = model.process_label(d)
        if key.count(key[i]) > 1:
            label += f" ({d['reason']} snapshot {d['seq']})"
        out.append(label)
    return out


def _unique_id(want: int, used: set) -> int:
    """want, or want moved by multiples of 2^22 until no other process or
    thread of the trace has it (JSON trace ids are 32-bit). Processes and
    threads draw from one pool, as in the kernel: Perfetto files a thread
    under the process whose pid equals its tid."""
    c, k = want % _U32, 0
    while c in used:
        k += 1
        c = (want + k * _ID_STEP) % _U32
    used.add(c)
    return c


class _Titles:
    """stack_title() by stack id, computed once per document."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.cache: Dict[int, str] = {}

    def __call__(self, sid: int) -> str:
        t = self.cache.get(sid)
        if t is None:
            t = self.cache[sid] = model.stack_title(self.doc, sid)
        return t


def _frame_parts(f: Dict[str, Any]) -> Tuple[str, Optional[str], Optional[int]]:
    """(function name, file, line) of a frame, for viewers that know only those:
    a native frame without a function is named module+offset, and one without
    a source file gives its module as the file."""
    if f.get("python"):
        return f.get("function") or "<python>", f.get("file"), f.get("line")
    name = f.get("function")
    if not name:
        name = model.module_name(f.get("module"))
        if f.get("offset"):
            name += "+" + f["offset"]
    return name, f.get("file") or f.get("module"), f.get("line")


def _first_time(doc: Doc) -> int:
    """The earliest time the document records (ns since the epoch)."""
    times = [doc["time_ns"]]
    s = doc["series"]
    if s.get("start_ns") is not None:
        times.append(s["start_ns"])
    if s["time_ns"]:
        times.append(s["time_ns"][0])
    ev = doc["history"]["events"]
    if ev:
        times.append(min(e["time_ns"] for e in ev))
    at = [a["time_ns"] for a in doc["allocations"] if a["time_ns"] is not None]
    if at:
        times.append(min(at))
    return min(times)


# ---------------------------------------------------------------------------
# Chrome trace (Trace Event Format, JSON object form)


def _us(t_ns: int, origin: int) -> Any:
    """A trace timestamp: microseconds after origin, to the nanosecond."""
    d = t_ns - origin
    return d // 1000 if d % 1000 == 0 else round(d / 1000, 3)


def _counter_name(device: int) -> str:
    return "host live bytes" if device < 0 else f"GPU {device} live bytes"


def chrome_trace(docs: Sequence[Doc]) -> Dict[str, Any]:
    """The snapshots as one Chrome trace: per document a process ("rank 3
    (pid 412 on node7)") with counter tracks of live bytes per device and
    kind, its allocations and frees (thread instants), its out-of-memory
    results (process instants, with the diagnosis), a mark where the snapshot
    was taken, and the region tags as slices. Times are microseconds after the
    earliest time of any document, so that documents line up."""
    order = _order(docs)
    labels = _labels(docs)
    origin = min(_first_time(d) for d in docs)
    ids: set = set()
    events: List[Dict[str, Any]] = []
    listed = []
    for pos, i in enumerate(order):
        doc = docs[i]
        pid = _unique_id(doc["pid"], ids)
        listed.append({"process": labels[i], "trace_pid": pid, "pid": doc["pid"],
                       "reason": doc["reason"], "seq": doc["seq"], "time_ns": doc["time_ns"]})
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": pid,
                       "args": {"name": labels[i]}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": pid,
                       "args": {"sort_index": pos}})
        _Process(doc, pid, origin, ids, events).emit()
    # NOTE: Perfetto's JSON tokenizer (json_trace_tokenizer.cc) reads
    # displayTimeUnit only in the first chunk, and ignores the rest of the file
    # after a top-level key it does not know: hence this order and no other
    # keys. "ns" there would make it read every ts as nanoseconds.
    return {
        "displayTimeUnit": "ms",
        "traceEvents": events,
        "otherData": {"generator": GENERATOR, "origin_ns": origin,
                      "time": "microseconds after origin_ns (ns since the Unix epoch)",
                      "snapshots": listed},
    }


def _args(**kw: Any) -> Dict[str, Any]:
    """Trace event args without the unknown (null) ones."""
    return {k: v for k, v in kw.items() if v is not None}


class _Process:
    """The trace events of one document (one trace process)."""

    def __init__(self, doc: Doc, pid: int, origin: int, ids: set, out: List[Dict[str, Any]]) -> None:
        self.doc, self.pid, self.origin, self.ids, self.out = doc, pid, origin, ids, out
        self.title = _Titles(doc)
        # The main thread is the process's own track (tid = pid).
        self.tid_map: Dict[int, int] = {doc["pid"]: pid}
        if pid != doc["pid"]:
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": pid,
                        "args": {"name": f"thread {doc['pid']}"}})

    def emit(self) -> None:
        self.counters()
        self.tensor_counters()
        self.history()
        self.steps()
        self.ooms()
        self.tags()
        d = self.doc
        self.out.append({"name": f"snapshot ({d['reason']})", "cat": "snapshot", "ph": "i", "s": "p",
                         "ts": self.ts(d["time_ns"]), "pid": self.pid, "tid": self.pid,
                         "args": {"reason": d["reason"], "seq": d["seq"],
                                  "live_bytes": d["summary"]["live_bytes"],
                                  "peak_bytes": d["summary"]["peak_bytes"]}})

    def ts(self, t_ns: int) -> Any:
        return _us(t_ns, self.origin)

    def _thread(self, real: int) -> int:
        """The trace tid of a real thread id, unique in the whole trace (two
        snapshots of one process, or two hosts, have the same thread ids)."""
        t = self.tid_map.get(real)
        if t is None:
            t = self.tid_map[real] = _unique_id(real, self.ids)
            if t != real:
                self.out.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": t,
                                 "args": {"name": f"thread {real}"}})
        return t

    def counters(self) -> None:
        """One counter event per series point and device, with one arg per kind.
        NOTE: chrome://tracing stacks the args of one counter into one chart
        (the device's total shows); Perfetto makes a track per arg, named
        "GPU 0 live bytes device", "GPU 0 live bytes async"
        (json_trace_parser_impl.cc, case 'C'). One event per (device, kind)
        would lose the stacked total in chrome://tracing and gain nothing."""
        s = self.doc["series"]
        by_dev: Dict[int, List[Dict[str, Any]]] = {}
        for col in s["columns"]:
            by_dev.setdefault(col["device"], []).append(col)
        times = s["time_ns"]
        if not by_dev:
            # No series (an older or empty snapshot): the devices' totals now.
            for dv in self.doc["devices"]:
                if dv["kinds"]:
                    self.out.append({"name": _counter_name(dv["index"]), "ph": "C",
                                     "ts": self.ts(self.doc["time_ns"]), "pid": self.pid, "tid": self.pid,
                                     "args": dict(dv["kinds"])})
            return
        for dev in sorted(by_dev):
            cols = sorted(by_dev[dev], key=lambda c: _kind_rank(c["kind"]))
            name = _counter_name(dev)
            start = s.get("start_ns")
            if start is not None and times and start < times[0]:
                # Nothing was live before the first event.
                self.out.append({"name": name, "ph": "C", "ts": self.ts(start), "pid": self.pid,
                                 "tid": self.pid, "args": {c["kind"]: 0 for c in cols}})
            for j, t in enumerate(times):
                self.out.append({"name": name, "ph": "C", "ts": self.ts(t), "pid": self.pid,
                                 "tid": self.pid, "args": {c["kind"]: c["live_bytes"][j] for c in cols}})

    def tensor_counters(self) -> None:
        """The framework's tensors over its replayed history (tensors.series,
        format minor 6): one counter per device, "GPU 0 tensor bytes (torch)",
        beside the driver's live bytes — the segments' — of the same device."""
        t = self.doc.get("tensors") or {}
        s = t.get("series")
        if not s:
            return
        name = t.get("framework") or "framework"
        for col in s["columns"]:
            counter = f"GPU {col['device']} tensor bytes ({name})"
            for j, ts in enumerate(s["time_ns"]):
                self.out.append({"name": counter, "ph": "C", "ts": self.ts(ts), "pid": self.pid, "tid": self.pid,
                                 "args": {"tensors": col["live_bytes"][j]}})

    def steps(self) -> None:
        """The program's steps (gmt_step): process-wide instants."""
        for s in self.doc["history"]["steps"]:
            self.out.append({"name": f"step {s['step']}", "cat": "step", "ph": "i", "s": "p",
                             "ts": self.ts(s["time_ns"]), "pid": self.pid, "tid": self.pid,
                             "args": _args(step=s["step"], seq=s.get("seq"))})

    def history(self) -> None:
        """Allocations and frees as instants on the thread that made them."""
        for e in self.doc["history"]["events"]:
            if e["op"] == "oom":
                continue
            thread = e.get("thread")
            tid = self._thread(thread) if thread is not None else self.pid
            self.out.append({"name": e["op"], "cat": "memory", "ph": "i", "s": "t",
                             "ts": self.ts(e["time_ns"]), "pid": self.pid, "tid": tid,
                             "args": _args(size=e["size"], bytes=model.fmt_bytes(e["size"]),
                                           kind=e.get("kind"), device=e["device"],
                                           address=e.get("address"), api=e.get("api"),
                                           thread=thread, seq=e.get("seq"),
                                           site=self.title(e["stack"]))})

    def ooms(self) -> None:
        """Each out-of-memory result as a process instant; the one the snapshot
        was taken for carries the diagnosis."""
        d = self.doc
        fr, dg = d.get("failed_request"), d.get("diagnosis")
        ooms = [e for e in d["history"]["events"] if e["op"] == "oom"]
        match = None
        if fr is not None:
            for e in ooms:
                if fr.get("failure") is not None and e.get("seq") == fr["failure"]:
                    match = e
            if match is None and fr.get("failure") is None and ooms:
                match = ooms[-1]
        for e in ooms:
            self._oom(e["time_ns"], e["size"], e.get("api"), e.get("kind"), e["device"], e["stack"],
                      e.get("seq"), e.get("thread"), dg if e is match else None)
        if fr is not None and match is None:
            self._oom(d["time_ns"], fr["size"], fr["api"], fr.get("kind"), fr["device"], fr["stack"],
                      fr.get("failure"), None, dg)

    def _oom(self, t: int, size: int, api: Optional[str], kind: Optional[str], device: int, stack: int,
             failure: Optional[int], thread: Optional[int], dg: Optional[Dict[str, Any]]) -> None:
        args = _args(size=size, bytes=model.fmt_bytes(size), api=api, kind=kind, device=device,
                     failure=failure, thread=thread, site=self.title(stack))
        if dg is not None:
            nums = dg.get("numbers") or {}
            args.update(_args(verdict=dg["verdict"], diagnosis=dg["summary"],
                              free_bytes=nums.get("free_bytes"), total_bytes=nums.get("total_bytes")))
        where = "host" if device < 0 else f"GPU {device}"
        self.out.append({"name": f"out of memory: {model.fmt_bytes(size)} on {where}", "cat": "oom",
                         "ph": "i", "s": "p", "ts": self.ts(t), "pid": self.pid, "tid": self.pid,
                         "args": args})

    def tags(self) -> None:
        """Region tags as slices. The snapshot has no tag push or pop times, only
        the tags open at each allocation: a tag (by its path: "train/forward")
        is drawn from the first to the last allocation or out-of-memory made
        under it on a thread. Frees are left out: a free carries the
        allocation's stack, not the tags open when it was freed. A slice may
        therefore start late, end early, and cover gaps where the tag was
        closed; slices that overlap without nesting go to separate lanes."""
        spans: Dict[Tuple[int, Tuple[str, ...]], List[int]] = {}
        by_id = self.doc["_stack_by_id"]

        def add(t: Optional[int], thread: Optional[int], sid: int, size: int) -> None:
            st = by_id.get(sid) if sid else None
            if t is None or st is None or not st["tags"]:
                return
            th = self.doc["pid"] if thread is None else thread
            tags = st["tags"]
            for k in range(1, len(tags) + 1):
                key = (th, tuple(tags[:k]))
                sp = spans.get(key)
                if sp is None:
                    spans[key] = [t, t, 1, size]
                else:
                    if t < sp[0]:
                        sp[0] = t
                    if t > sp[1]:
                        sp[1] = t
                    sp[2] += 1
                    sp[3] += size

        seen = set()
        for e in self.doc["history"]["events"]:
            if e["op"] == "free":
                continue
            if e["op"] == "alloc" and e.get("seq") is not None:
                seen.add(e["seq"])
            add(e["time_ns"], e.get("thread"), e["stack"], e["size"])
        for a in self.doc["allocations"]:
            if a.get("seq") is None or a["seq"] not in seen:
                add(a["time_ns"], a.get("thread"), a["stack"], a["size"])
        fr = self.doc.get("failed_request")
        if fr is not None and not any(e["op"] == "oom" for e in self.doc["history"]["events"]):
            add(self.doc["time_ns"], None, fr["stack"], fr["size"])

        threads = sorted({th for th, _ in spans})
        for th in threads:
            items = sorted(((sp[0], sp[1], path, sp[2], sp[3]) for (t2, path), sp in spans.items() if t2 == th),
                           key=lambda x: (x[0], -x[1], x[2]))
            # Per lane, the open slices (end, path), outermost first. A slice
            # nests only in its own enclosing tag, so that a tag is never
            # drawn inside a sibling whose span happens to cover it.
            lanes: List[List[Tuple[int, Tuple[str, ...]]]] = []
            lane_tids: List[int] = []
            for first, last, path, count, nbytes in items:
                for li, stack in enumerate(lanes):
                    # Slices ended by now are closed for every later one too.
                    while stack and stack[-1][0] <= first:
                        stack.pop()
                    if not stack or (stack[-1][0] >= last and path[:len(stack[-1][1])] == stack[-1][1]):
                        break
                else:
                    lanes.append([])
                    li = len(lanes) - 1
                    tid = _unique_id(_LANE_TID, self.ids)
                    lane_tids.append(tid)
                    name = f"tags of thread {th}" + (f" ({li + 1})" if li else "")
                    self.out.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                                     "args": {"name": name}})
                    self.out.append({"name": "thread_sort_index", "ph": "M", "pid": self.pid, "tid": tid,
                                     "args": {"sort_index": -1000 + li}})
                lanes[li].append((last, path))
                self.out.append({"name": path[-1], "cat": "tag", "ph": "X", "ts": self.ts(first),
                                 "dur": _us(last, first), "pid": self.pid, "tid": lane_tids[li],
                                 "args": {"path": "/".join(path), "thread": th, "events": count,
                                          "bytes": nbytes, "first_ns": first, "last_ns": last}})


def _kind_rank(kind: str) -> Tuple[int, str]:
    order = tuple(k for k in KINDS if k not in HOST_KINDS) + HOST_KINDS
    return (order.index(kind) if kind in order else len(order), kind)


# ---------------------------------------------------------------------------
# speedscope


def speedscope(docs: Sequence[Doc]) -> Dict[str, Any]:
    """The snapshots as speedscope "sampled" profiles, one per document: a
    sample per allocation site whose weight is its live bytes (every kind and
    device), its frames outermost first; a shared frame table of
    {name, file, line}. A document with a framework's tensors (format minor
    6) has two: its tensor level first (model.tensor_level: the tensors and
    the memory outside the framework's segments), then the driver's
    allocations."""
    order = _order(docs)
    labels = _labels(docs)
    frames: List[Dict[str, Any]] = []
    index: Dict[Tuple[Any, ...], int] = {}

    def frame_index(name: str, file: Optional[str], line: Optional[int]) -> int:
        key = (name, file, line)
        ix = index.get(key)
        if ix is None:
            ix = index[key] = len(frames)
            fr: Dict[str, Any] = {"name": name}
            if file is not None:
                fr["file"] = file
            if line is not None:
                fr["line"] = line
            frames.append(fr)
        return ix

    profiles = []
    for i in order:
        lv = model.tensor_level(docs[i])
        for doc, what in ((lv, " (tensors)"), (docs[i], " (driver's allocations)" if lv else "")):
            if doc is not None:
                profiles.append(_profile(doc, f"{labels[i]}: {docs[i]['reason']} snapshot {docs[i]['seq']}{what}",
                                         frame_index))
    name = profiles[0]["name"] if len(profiles) == 1 else f"gpumemtrace: {len(profiles)} profiles"
    return {"$schema": SPEEDSCOPE_SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": name, "activeProfileIndex": 0, "exporter": GENERATOR}


def _profile(doc: Doc, title: str, frame_index: Callable[[str, Optional[str], Optional[int]], int]) -> Dict[str, Any]:
    """One speedscope profile: doc's live bytes by stack, titled."""
    by_stack: Dict[int, int] = {}
    for a in doc["allocations"]:
        by_stack[a["stack"]] = by_stack.get(a["stack"], 0) + a["size"]
    samples, weights = [], []
    for sid, nbytes in sorted(by_stack.items(), key=lambda kv: (-kv[1], kv[0])):
        if nbytes <= 0:
            continue
        st = doc["_stack_by_id"].get(sid) if sid else None
        if st is None:
            stack = [frame_index("(no stack recorded)", None, None)]
        elif not st["frames"]:
            stack = [frame_index("(empty stack)", None, None)]
        else:
            stack = []
            for f in reversed(st["frames"]):
                name, file, line = _frame_parts(f)
                if f.get("inlined"):
                    name += " [inlined]"
                stack.append(frame_index(name, file, line))
        samples.append(stack)
        weights.append(nbytes)
    return {"type": "sampled", "name": title, "unit": "bytes", "startValue": 0, "endValue": sum(weights),
            "samples": samples, "weights": weights}


# ---------------------------------------------------------------------------
# PyTorch memory snapshot


def pytorch_snapshot(docs: Sequence[Doc]) -> Dict[str, Any]:
    """The snapshots as the dict torch.cuda.memory._snapshot() returns:
    "segments" (each live device-side allocation is a segment holding one
    active block — but where PyTorch's own state was handed over, its
    segments with their real blocks, free ones included, and streams) and
    "device_traces" (per device, the history: alloc as
    segment_alloc + alloc, free as free_requested + free_completed +
    segment_free, out of memory as oom). Pinned host memory is left out.

    One document: the device lists are indexed by the device ordinal (where
    each is below _ORDINAL_LISTS). Several: one list per (document, device)
    in rank order; "gpumemtrace" in the result says which is which. Values are dicts, lists, ints, strs, bools, None and
    2-tuples, so the standard pickle module loads the pickle without torch."""
    order = _order(docs)
    labels = _labels(docs)
    slots: Dict[Tuple[int, int], int] = {}
    listed = []
    by_ordinal = len(docs) == 1 and all(dev < _ORDINAL_LISTS for dev in _devices_used(docs[0]))
    for i in order:
        for dev in _devices_used(docs[i]):
            slot = dev if by_ordinal else len(slots)
            slots[(i, dev)] = slot
            listed.append({"index": slot, "process": labels[i], "pid": docs[i]["pid"],
                           "rank": docs[i]["process"].get("rank"), "device": dev,
                           "reason": docs[i]["reason"], "seq": docs[i]["seq"]})
    n = max(slots.values()) + 1 if slots else 1
    segments: List[Dict[str, Any]] = []
    traces: List[List[Dict[str, Any]]] = [[] for _ in range(n)]
    dropped = 0
    for i in order:
        conv = _TorchDoc(docs[i])
        segments.extend(conv.segments(slots, i))
        for (j, dev), slot in slots.items():
            if j == i:
                evs, bad = conv.trace(dev)
                traces[slot] = evs
                dropped += bad
    segments.sort(key=lambda s: (s["device"], s["address"]))
    return {"segments": segments, "device_traces": traces,
            "gpumemtrace": {"generator": GENERATOR, "devices": listed,
                            "left_out": "pinned host memory (host, registered)",
                            "history_events_dropped": dropped}}


def _stream(a: Dict[str, Any]) -> int:
    """A stream-ordered allocation's stream as PyTorch names streams (the
    cudaStream_t's value); 0 where the snapshot says none (format minor 5)."""
    return int(a["stream"], 16) if a.get("stream") else 0


def _devices_used(doc: Doc) -> List[int]:
    devs = {a["device"] for a in doc["allocations"] if a["kind"] not in HOST_KINDS}
    devs.update(e["device"] for e in doc["history"]["events"] if e.get("kind") not in HOST_KINDS)
    devs.update(d["index"] for d in doc["devices"])
    return sorted(d for d in devs if d >= 0)


class _TorchDoc:
    """One document in PyTorch's terms."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.frames_cache: Dict[int, List[Dict[str, Any]]] = {}
        self.meta_cache: Dict[Tuple[int, str, str], str] = {}
        # PyTorch's own segments, by (device, address), where its state was
        # handed over and the segment joined a live driver allocation.
        fw = doc.get("framework")
        self.torch: Dict[Tuple[int, int], Dict[str, Any]] = {}
        if fw and fw.get("name") == "torch":
            self.torch = {(sg["device"], sg["address"]): sg for sg in fw["segments"] if sg.get("allocation")}

    def frames(self, sid: int) -> List[Dict[str, Any]]:
        """The stack's frames, innermost first as PyTorch has them; one list
        per stack, shared by every segment and event (the pickle stores it once)."""
        fr = self.frames_cache.get(sid)
        if fr is None:
            st = self.doc["_stack_by_id"].get(sid) if sid else None
            fr = []
            for f in (st["frames"] if st else []):
                name, file, line = _frame_parts(f)
                fr.append({"filename": file or "??", "line": line if line is not None else 0, "name": name})
            self.frames_cache[sid] = fr
        return fr

    def meta(self, sid: int, kind: Optional[str], api: Optional[str]) -> str:
        """What PyTorch's viewer shows as "User Metadata" (newer MemoryViz.js):
        the kind, the driver call and the region tags."""
        key = (sid, kind or "", api or "")
        m = self.meta_cache.get(key)
        if m is None:
            st = self.doc["_stack_by_id"].get(sid) if sid else None
            parts = [f"kind={kind or '?'}", f"api={api or '?'}"]
            if st and st.get("runtime_call"):
                parts.append(f"runtime={st['runtime_call']}")
            if st and st["tags"]:
                parts.append("tags=" + "/".join(st["tags"]))
            m = self.meta_cache[key] = " ".join(parts)
        return m

    def segments(self, slots: Dict[Tuple[int, int], int], i: int) -> List[Dict[str, Any]]:
        out = []
        for a in self.doc["allocations"]:
            if a["device"] < 0 or a["kind"] in HOST_KINDS:
                continue
            addr, size = int(a["address"], 16), a["size"]
            frames = self.frames(a["stack"])
            meta = self.meta(a["stack"], a["kind"], a.get("api"))
            own = self.torch.get((a["device"], addr)) if a["kind"] == "device" else None
            if own is not None:
                out.append(self._torch_segment(own, slots[(i, a["device"])], frames, meta))
                continue
            block = {"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                     "frames": frames, "user_metadata": meta}
            # NOTE: PyTorch's small pool holds requests of at most 1 MiB
            # (CUDACachingAllocator's kSmallSize); the segment type mirrors that.
            out.append({"device": slots[(i, a["device"])], "address": addr, "total_size": size,
                        "allocated_size": size, "active_size": size, "requested_size": size,
                        "stream": _stream(a), "segment_type": "small" if size <= (1 << 20) else "large",
                        "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
                        "user_metadata": meta, "blocks": [block]})
        return out

    @staticmethod
    def _torch_segment(sg: Dict[str, Any], device: int, frames: List[Dict[str, Any]], meta: str) -> Dict[str, Any]:
        """PyTorch's own segment, as its state was handed over: its blocks
        (active or free inside it, requested sizes, their Python frames) and
        its stream; the frames of the segment are the driver allocation's."""
        blocks = []
        for b in sg["blocks"]:
            blocks.append({"address": b["address"], "size": b["size"],
                           "requested_size": b.get("requested_size", b["size"]), "state": b["state"],
                           "frames": [{"filename": f.get("filename") or "??", "line": f.get("line") or 0,
                                       "name": f.get("name") or "??"} for f in b.get("frames") or []]})
        active = [b for b in blocks if b["state"].startswith("active")]
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        return {"device": device, "address": sg["address"], "total_size": sg["total_size"],
                "allocated_size": allocated, "active_size": sum(b["size"] for b in active),
                "requested_size": sum(b["requested_size"] for b in active), "stream": sg.get("stream") or 0,
                "segment_type": sg.get("segment_type") or ("small" if sg["total_size"] <= (2 << 20) else "large"),
                "segment_pool_id": (0, 0), "is_expandable": bool(sg.get("is_expandable")), "frames": frames,
                "user_metadata": meta, "blocks": blocks}

    def trace(self, dev: int) -> Tuple[List[Dict[str, Any]], int]:
        """The device's history as PyTorch trace entries, and how many events
        were dropped because they disagree with the live allocations.

        NOTE: pytorch.org/memory_viz replays the trace backwards from the
        segments (MemoryViz.js, simulate_memory) and fails when a block lies in
        no segment; the history is checked against the live set the same way
        first, so that a history that disagrees with the allocations (a lost
        event) cannot break the view."""
        doc = self.doc
        live = {int(a["address"], 16) for a in doc["allocations"]
                if a["device"] == dev and a["kind"] not in HOST_KINDS}
        # NOTE: the history at the address of one of PyTorch's own segments
        # is left out: its blocks were allocated inside it after it came, and
        # their events are PyTorch's (the pickle saved beside the snapshot),
        # so a replay would meet the segment's alloc under live blocks.
        evs = [e for e in doc["history"]["events"]
               if e["device"] == dev and e.get("kind") not in HOST_KINDS
               and not (e.get("address") is not None and (dev, int(e["address"], 16)) in self.torch)]
        keep = [False] * len(evs)
        for k in range(len(evs) - 1, -1, -1):
            e = evs[k]
            if e["op"] == "oom":
                keep[k] = True
            elif e.get("address") is not None:
                addr = int(e["address"], 16)
                if e["op"] == "alloc" and addr in live:
                    live.discard(addr)
                    keep[k] = True
                elif e["op"] == "free" and addr not in live:
                    live.add(addr)
                    keep[k] = True
        out: List[Dict[str, Any]] = []
        # A free's stream is its allocation's: PyTorch frees a block on the
        # stream it was allocated on.
        streams = {int(a["address"], 16): _stream(a) for a in doc["allocations"] if a["device"] == dev}
        free_now = self._device_free(dev)
        for e, ok in zip(evs, keep):
            if not ok:
                continue
            frames = self.frames(e["stack"])
            meta = self.meta(e["stack"], e.get("kind"), e.get("api"))
            t_us = e["time_ns"] // 1000
            if e["op"] == "oom":
                # NOTE: PyTorch's oom entry has device_free where others have
                # addr (memory_snapshot.cpp); the driver's free bytes are known
                # only at the snapshot, so earlier failures show those (or 0).
                out.append({"action": "oom", "device_free": free_now, "size": e["size"], "stream": 0,
                            "frames": frames, "time_us": t_us, "user_metadata": meta})
                continue
            addr, size = int(e["address"], 16), e["size"]
            actions = (("segment_alloc", "alloc") if e["op"] == "alloc"
                       else ("free_requested", "free_completed", "segment_free"))
            stream = _stream(e) if e["op"] == "alloc" else streams.get(addr, 0)
            if e["op"] == "alloc":
                streams[addr] = stream
            for act in actions:
                out.append({"action": act, "addr": addr, "size": size, "stream": stream, "frames": frames,
                            "time_us": t_us, "user_metadata": meta})
        return out, keep.count(False)

    def _device_free(self, dev: int) -> int:
        for d in self.doc["devices"]:
            if d["index"] == dev and d.get("free_bytes") is not None:
                return d["free_bytes"]
        dg = self.doc.get("diagnosis")
        if dg:
            nums = dg.get("numbers") or {}
            if nums.get("device") == dev and nums.get("free_bytes") is not None:
                return nums["free_bytes"]
        return 0


__all__ = ["dumps", "chrome_trace", "speedscope", "pytorch_snapshot"]
