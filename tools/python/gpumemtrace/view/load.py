"""Reading snapshots for the viewer: parse, check every key the viewer reads,
and fill in what an older or partial snapshot leaves out, so that the views can
index the document without checks of their own.

The contract of load(): it returns the document (a dict) in which every key
below is present with the type docs/snapshot-format.md gives it; sections a
snapshot may lack (failed_request, diagnosis, leaks, fragmentation, pools…)
are None. Anything else — no file, no JSON, a truncated document, a wrong type,
a number out of range, a stack id that names no stack — raises ViewError with
one line naming the file and the place ("FILE: /allocations/3/size: …").
Strings are kept as they are: views escape them where they print them.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import model
from .vocab import EPISODE_ENDS, FRAME_ROLES, HIST_OPS, KINDS, LEAK_CLASSES, REASONS

U64 = 1 << 64
_KIND_SET = frozenset(KINDS)
# What one document may hold: a snapshot of 10 million allocations is ~3 GB of
# JSON, more than a viewer in Python should try to hold.
MAX_ITEMS = 10_000_000
# The gate's rule for a snapshot it reads (src/util/input.h,
# GMT_SNAPSHOT_MAX_BYTES; tests/unit/test_vocabulary.py holds the two equal):
# a regular file of at most this many bytes, opened without blocking. "-"
# (standard input) may be a pipe too, read up to the same cap.
MAX_BYTES = 16 << 30
_CHUNK_BYTES = 1 << 20


class ViewError(Exception):
    """Bad input, in one line (naming the file and the place in it)."""


class _Checker:
    """Checks values at JSON Pointer paths; raises ViewError at the first problem."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, path: str, msg: str) -> None:
        raise ViewError(f"{self.name}: {path or '/'}: {msg}")

    def obj(self, v: Any, path: str) -> Dict[str, Any]:
        if not isinstance(v, dict):
            self.fail(path, f"expected an object, got {_type(v)}")
        return v

    def arr(self, v: Any, path: str) -> List[Any]:
        if not isinstance(v, list):
            self.fail(path, f"expected an array, got {_type(v)}")
        if len(v) > MAX_ITEMS:
            self.fail(path, f"{len(v)} items: more than this viewer reads ({MAX_ITEMS})")
        return v

    def int_(self, v: Any, path: str, lo: int = 0, hi: int = U64 - 1) -> int:
        # bool is an int in Python, never in a snapshot.
        if isinstance(v, bool) or not isinstance(v, int):
            self.fail(path, f"expected an integer, got {_type(v)}")
        if not lo <= v <= hi:
            self.fail(path, f"{v} is out of range ({lo}..{hi})")
        return v

    def num(self, v: Any, path: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            self.fail(path, f"expected a non-negative number, got {_short(v)}")
        return float(v)

    def str_(self, v: Any, path: str) -> str:
        if not isinstance(v, str):
            self.fail(path, f"expected a string, got {_type(v)}")
        return v

    def bool_(self, v: Any, path: str) -> bool:
        if not isinstance(v, bool):
            self.fail(path, f"expected true or false, got {_type(v)}")
        return v

    def hex_(self, v: Any, path: str) -> str:
        s = self.str_(v, path)
        if not (s.startswith("0x") and 2 < len(s) <= 18):
            self.fail(path, f"expected a hex address \"0x…\", got {_short(s)}")
        try:
            int(s, 16)
        except ValueError:
            self.fail(path, f"expected a hex address \"0x…\", got {_short(s)}")
        return s

    def opt(self, d: Dict[str, Any], key: str, path: str, check: Callable[[Any, str], Any]) -> Any:
        """d[key] checked, or None when absent or null."""
        v = d.get(key)
        if v is None:
            d[key] = None
            return None
        return check(v, f"{path}/{key}")

    def req(self, d: Dict[str, Any], key: str, path: str, check: Callable[[Any, str], Any]) -> Any:
        if key not in d:
            self.fail(path, f"missing key '{key}'")
        return check(d[key], f"{path}/{key}")


def _type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "an integer",
            float: "a number"}.get(type(v), type(v).__name__)


def _short(v: Any) -> str:
    # NOTE: json.dumps of a value nested near the recursion limit raises
    # RecursionError: containers are named by type only.
    if isinstance(v, (list, dict)):
        return _type(v)
    s = json.dumps(v) if not isinstance(v, str) else json.dumps(v[:40] + ("…" if len(v) > 40 else ""))
    return s if len(s) <= 60 else s[:57] + "…"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _no_duplicates(pairs: List[Any]) -> Dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: Dict[str, Any] = {}
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"key {_short(k)} twice in one object")
            seen[k] = None
    return d


def parse(text: str, name: str, lean: bool = False) -> Dict[str, Any]:
    """The checked document in text (see the module's contract); lean: without
    its device allocations (check())."""
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
            raise ViewError(f"{name}: not a complete JSON document (truncated? it ends at line "
                            f"{text.count(chr(10)) + 1})") from None
        raise ViewError(f"{name}: not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except (ValueError, RecursionError) as e:
        raise ViewError(f"{name}: not JSON: {e}") from None
    return check(doc, name, lean)


def _kind_of(mode: int) -> str:
    """What a file that is not a regular one is, in the gate's words."""
    for test, words in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "not a plain file"


def _read_capped(fd: int, path: str) -> bytes:
    """All of fd, refused past MAX_BYTES (a file that grows, a pipe that never
    ends)."""
    chunks: List[bytes] = []
    n = 0
    while True:
        chunk = os.read(fd, _CHUNK_BYTES)
        if not chunk:
            return b"".join(chunks)
        n += len(chunk)
        if n > MAX_BYTES:
            raise ViewError(f"{path}: cannot read: larger than {MAX_BYTES} bytes")
        chunks.append(chunk)


def read_input(path: str) -> bytes:
    """The bytes of the snapshot file at path ("-": standard input), by the
    gate's rule (MAX_BYTES): a FIFO, a device, a directory or a larger file is
    one ViewError naming it, never a wait or an endless read."""
    if path == "-":
        fd = sys.stdin.fileno()
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            raise ViewError(f"-: cannot read: standard input is {_kind_of(mode)}, not a file or a pipe")
        return _read_capped(fd, path)
    # NOTE: O_NONBLOCK: opening a FIFO for reading waits for a writer; nothing
    # is read before the type is known (as src/util/input.c opens).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ViewError(f"{path}: cannot read: not a regular file ({_kind_of(st.st_mode)})")
        if st.st_size > MAX_BYTES:
            raise ViewError(f"{path}: cannot read: larger than {MAX_BYTES} bytes ({st.st_size})")
        return _read_capped(fd, path)
    finally:
        os.close(fd)


def load(path: str, lean: bool = False) -> Dict[str, Any]:
    """The checked snapshot in the file at path ("-": standard input; read by
    read_input's rule); lean: without its device allocations (check())."""
    try:
        raw = read_input(path)
    except OSError as e:
        raise ViewError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ViewError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse(text, path, lean)


def _load_lean(path: str) -> Dict[str, Any]:
    return load(path, lean=True)


# Files from which load_all reads in parallel, and how many at a time a
# worker takes.
PARALLEL_FROM = 8
_CHUNK = 4


def load_all(paths: Sequence[str], lean_docs: bool = False, jobs: Optional[int] = None) -> List[Dict[str, Any]]:
    """The checked snapshots of paths, in order; lean_docs: each lean
    (check()). Many lean ones (PARALLEL_FROM or more files, none of them standard
    input) are read by one worker process per CPU (jobs), each handing back
    its lean documents; the first file that fails fails the whole, with its
    one-line error, as when read one by one."""
    if not lean_docs:
        return [load(p) for p in paths]
    n = jobs if jobs is not None else (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                       else os.cpu_count() or 1)
    if n < 2 or len(paths) < PARALLEL_FROM or "-" in paths:
        return [_load_lean(p) for p in paths]
    import multiprocessing
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ctx.Pool(min(n, len(paths))) as pool:
        return pool.map(_load_lean, paths, chunksize=_CHUNK)


def check(doc: Any, name: str, lean: bool = False) -> Dict[str, Any]:
    """doc, checked and completed in place (see the module's contract).
    lean: only what a terminal merge of many processes reads of it, checked
    as always — every section but the allocations, the VMM ranges, the
    series, the history, the modules and the leaks, which are left empty
    (the leaks out), and of the allocations their device, kind and size:
    devices[] hold the GPUs' bytes by kind, "_host_bytes" the pinned host
    memory's ({kind: bytes}); "_lean" is true."""
    c = _Checker(name)
    d = c.obj(doc, "")
    if d.get("format") != "gpumemtrace-snapshot":
        c.fail("/format", f"not a gpumemtrace snapshot (format {_short(d.get('format'))})")
    version = c.req(d, "version", "", c.int_)
    if version != 1:
        c.fail("/version", f"version {version} is not one this viewer reads (1)")
    reason = c.req(d, "reason", "", c.str_)
    if reason not in REASONS:
        c.fail("/reason", f"unknown reason {_short(reason)}")
    c.req(d, "seq", "", c.int_)
    c.req(d, "time_ns", "", c.int_)
    c.req(d, "pid", "", lambda v, p: c.int_(v, p, 0, 1 << 32))
    argv = c.opt(d, "argv", "", c.arr)
    d["argv"] = [c.str_(a, f"/argv/{i}") for i, a in enumerate(argv or [])]

    s = c.req(d, "summary", "", c.obj)
    for k in ("live_bytes", "live_count", "peak_bytes", "total_allocs", "total_frees"):
        c.req(s, k, "/summary", c.int_)

    _process(c, d)
    stack_ids = _stacks(c, d)

    def stack_ref(v: Any, path: str) -> int:
        sid = c.int_(v, path)
        if sid and sid not in stack_ids:
            c.fail(path, f"stack {sid} is not in /stacks")
        return sid

    _devices(c, d)
    _failed_request(c, d, stack_ref)
    _diagnosis(c, d, stack_ref)
    _episode(c, d, stack_ref)
    _framework(c, d)
    _tensors(c, d, stack_ref)
    st = c.opt(d, "stats", "", c.obj) or {}
    d["stats"] = {k: c.int_(v, f"/stats/{k}") for k, v in st.items()}
    if lean:
        # What a terminal merge reads of the rest: the sites, and of the
        # allocations the pinned host memory's bytes by kind; of the
        # tensors their sites and devices.
        _lean_allocations(c, d, stack_ref)
        if d.get("tensors"):
            d["tensors"]["allocations"] = []
        _sites(c, d, stack_ref)
        d["vmm"] = {"reservations": [], "mappings": []}
        # The series' start stays: when the process began (cli.separate_runs).
        series = d.get("series")
        start = series.get("start_ns") if isinstance(series, dict) else None
        if start is not None:
            c.int_(start, "/series/start_ns")
        d["series"] = {"interval_ns": 0, "start_ns": start, "columns_dropped": 0, "time_ns": [], "columns": []}
        d["history"] = {"capacity": 0, "dropped": 0, "events": [], "steps": []}
        d["modules"] = []
        d.pop("leaks", None)
        d["_lean"] = True
        return d
    _allocations(c, d, stack_ref, stack_ids)
    _vmm(c, d, stack_ref)
    _sites(c, d, stack_ref)
    _series(c, d)
    _history(c, d, stack_ref, stack_ids)
    mods = c.opt(d, "modules", "", c.arr) or []
    for i, m in enumerate(mods):
        p = f"/modules/{i}"
        c.obj(m, p)
        c.req(m, "path", p, c.str_)
        c.req(m, "base", p, c.hex_)
        c.opt(m, "build_id", p, c.str_)
    d["modules"] = mods
    _leaks(c, d, stack_ref)
    return d


def _process(c: _Checker, d: Dict[str, Any]) -> None:
    p = c.opt(d, "process", "", c.obj)
    if p is None:
        p = d["process"] = {}
    p.setdefault("pid", d["pid"])
    c.int_(p["pid"], "/process/pid", 0, 1 << 32)
    c.opt(p, "ppid", "/process", c.int_)
    c.opt(p, "host", "/process", c.str_)
    for k in ("rank", "local_rank", "world_size"):
        c.opt(p, k, "/process", c.int_)
    c.opt(p, "rank_variable", "/process", c.str_)


def _stacks(c: _Checker, d: Dict[str, Any]) -> Dict[int, Dict[str, Any]]:
    stacks = c.opt(d, "stacks", "", c.arr) or []
    d["stacks"] = stacks
    ids: Dict[int, Dict[str, Any]] = {}
    for i, s in enumerate(stacks):
        p = f"/stacks/{i}"
        c.obj(s, p)
        sid = c.req(s, "id", p, lambda v, q: c.int_(v, q, 1))
        if sid in ids:
            c.fail(f"{p}/id", f"stack {sid} twice")
        ids[sid] = s
        c.opt(s, "runtime_call", p, c.str_)
        tags = c.opt(s, "tags", p, c.arr) or []
        s["tags"] = [c.str_(t, f"{p}/tags/{j}") for j, t in enumerate(tags)]
        frames = c.req(s, "frames", p, c.arr)
        for j, f in enumerate(frames):
            q = f"{p}/frames/{j}"
            c.obj(f, q)
            f["python"] = bool(c.opt(f, "python", q, c.bool_))
            f["inlined"] = bool(c.opt(f, "inlined", q, c.bool_))
            for k in ("function", "file", "module"):
                c.opt(f, k, q, c.str_)
            c.opt(f, "line", q, c.int_)
            if not f["python"]:
                c.opt(f, "address", q, c.hex_)
                c.opt(f, "offset", q, c.hex_)
            else:
                f.setdefault("address", None)
                f.setdefault("offset", None)
            role = c.opt(f, "role", q, c.str_)
            if role is not None and role not in FRAME_ROLES:
                c.fail(f"{q}/role", f"{_short(role)} is not one of {', '.join(FRAME_ROLES)}")
            f["role"] = role or "user"
        site = c.opt(s, "site", p, c.obj)
        if site is None:
            s["site"] = _older_site(sid, frames)
        else:
            q = f"{p}/site"
            c.req(site, "id", q, lambda v, r: c.int_(v, r, 1))
            at = c.req(site, "frame", q, lambda v, r: v if v is None else c.int_(v, r, 0, max(0, len(frames) - 1)))
            if at is None and frames:
                c.fail(f"{q}/frame", "null, but the stack has frames")
            c.req(site, "user", q, c.bool_)
            c.req(site, "label", q, c.str_)
    d["_stack_by_id"] = ids
    return ids


def _older_site(sid: int, frames: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The site of a stack in a snapshot written before the tracer named sites
    (format minor 1): the stack is a site of its own (id: minus the stack's),
    named by its innermost frame with a file and a line, else its innermost
    frame — the gate's reading of such a snapshot too (docs/snapshot-format.md)."""
    if not frames:
        return {"id": -sid, "frame": None, "user": False, "label": "(no frames)"}
    at = next((i for i, f in enumerate(frames) if f.get("file") and f.get("line") is not None), 0)
    return {"id": -sid, "frame": at, "user": True, "label": model.frame_text(dict(frames[at], inlined=False))}


def _kinds_map(c: _Checker, v: Any, path: str) -> Dict[str, int]:
    m = c.obj(v, path)
    for k, n in m.items():
        c.int_(n, f"{path}/{k}")
    return m


def _devices(c: _Checker, d: Dict[str, Any]) -> None:
    devs = c.opt(d, "devices", "", c.arr) or []
    d["devices"] = devs
    for i, v in enumerate(devs):
        p = f"/devices/{i}"
        c.obj(v, p)
        c.req(v, "index", p, c.int_)
        c.opt(v, "total_bytes", p, c.int_)
        c.opt(v, "free_bytes", p, c.int_)
        c.req(v, "live_bytes", p, c.int_)
        v["kinds"] = c.opt(v, "kinds", p, lambda x, q: _kinds_map(c, x, q)) or {}
        pools = c.opt(v, "pools", p, c.obj)
        if pools is not None:
            for k in ("count", "reserved_bytes", "used_bytes"):
                c.req(pools, k, f"{p}/pools", c.int_)
        pages = c.opt(v, "pages", p, c.obj)
        if pages is not None:
            for k in ("granularity", "pages", "partial", "stranded_bytes"):
                c.req(pages, k, f"{p}/pages", c.int_)
            occ = c.opt(pages, "occupancy", f"{p}/pages", c.arr) or [0, 0, 0, 0, 0]
            if len(occ) != 5:
                c.fail(f"{p}/pages/occupancy", f"expected 5 counts, got {len(occ)}")
            pages["occupancy"] = [c.int_(n, f"{p}/pages/occupancy/{j}") for j, n in enumerate(occ)]
        fr = c.opt(v, "fragmentation", p, c.obj)
        if fr is not None:
            q = f"{p}/fragmentation"
            for k in ("free_bytes", "free_in_whole_pages", "largest_fit_bytes", "pool_unused_bytes"):
                c.opt(fr, k, q, c.int_)
            for k in ("stranded_bytes", "largest_hole_bytes"):
                c.req(fr, k, q, c.int_)
            classes = c.opt(fr, "size_classes", q, c.arr) or []
            fr["size_classes"] = classes
            for j, sc in enumerate(classes):
                r = f"{q}/size_classes/{j}"
                c.obj(sc, r)
                for k in ("min", "max", "count", "bytes"):
                    c.req(sc, k, r, c.int_)
        op = c.opt(v, "other_processes", p, c.obj)
        if op is not None:
            q = f"{p}/other_processes"
            if c.req(op, "known", q, c.bool_):
                c.req(op, "bytes", q, c.int_)
                c.req(op, "count", q, c.int_)
                procs = c.opt(op, "processes", q, c.arr) or []
                op["processes"] = procs
                for j, pr in enumerate(procs):
                    c.obj(pr, f"{q}/processes/{j}")
                    c.req(pr, "pid", f"{q}/processes/{j}", c.int_)
                    c.req(pr, "bytes", f"{q}/processes/{j}", c.int_)
            else:
                c.opt(op, "why", q, c.str_)


def _failed_request(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    fr = c.opt(d, "failed_request", "", c.obj)
    if fr is None:
        return
    p = "/failed_request"
    c.req(fr, "api", p, c.str_)
    c.req(fr, "size", p, c.int_)
    c.req(fr, "device", p, lambda v, q: c.int_(v, q, -1))
    c.opt(fr, "kind", p, c.str_)
    c.opt(fr, "result", p, c.int_)
    c.opt(fr, "failure", p, c.int_)
    c.opt(fr, "refused_by", p, c.str_)
    fr["stack"] = c.opt(fr, "stack", p, stack_ref) or 0


def _episode(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    """An oom snapshot's out-of-memory episode (format minor 2)."""
    ep = c.opt(d, "episode", "", c.obj)
    if ep is None:
        return
    p = "/episode"
    for k in ("id", "failures", "described", "first_ns", "last_ns", "not_written"):
        c.req(ep, k, p, c.int_)
    c.req(ep, "device", p, lambda v, q: c.int_(v, q, -1))
    end = c.req(ep, "end", p, c.str_)
    if end not in EPISODE_ENDS:
        c.fail(f"{p}/end", f"{end!r} is none of {', '.join(EPISODE_ENDS)}")
    if ep["last_ns"] < ep["first_ns"]:
        c.fail(f"{p}/last_ns", "before first_ns")
    fd = c.req(ep, "freed", p, c.obj)
    for k in ("bytes", "count", "other_bytes", "other_count"):
        c.req(fd, k, f"{p}/freed", c.int_)
    for i, x in enumerate(c.req(fd, "sites", f"{p}/freed", c.arr)):
        q = f"{p}/freed/sites/{i}"
        c.obj(x, q)
        x["stack"] = c.req(x, "stack", q, stack_ref)
        c.req(x, "kind", q, c.str_)
        c.req(x, "bytes", q, c.int_)
        c.req(x, "count", q, c.int_)
    listed = c.req(ep, "listed", p, c.arr)
    if not listed:
        c.fail(f"{p}/listed", "no failure listed")
    for i, f in enumerate(listed):
        q = f"{p}/listed/{i}"
        c.obj(f, q)
        for k in ("failure", "time_ns", "size", "live_bytes", "freed_bytes", "freed_count"):
            c.req(f, k, q, c.int_)
        c.req(f, "api", q, c.str_)
        c.req(f, "kind", q, c.str_)
        f["stack"] = c.req(f, "stack", q, stack_ref)
        if f["time_ns"] < ep["first_ns"]:
            c.fail(f"{q}/time_ns", "before the episode's first failure")


def _framework(c: _Checker, d: Dict[str, Any]) -> None:
    """A framework allocator's own state (format minor 2): what the views
    read of it."""
    fw = c.opt(d, "framework", "", c.obj)
    if fw is None:
        return
    p = "/framework"
    c.req(fw, "name", p, c.str_)
    c.opt(fw, "version", p, c.str_)
    c.opt(fw, "file", p, lambda v, q: None if v is None else c.str_(v, q))
    for i, x in enumerate(c.req(fw, "devices", p, c.arr)):
        q = f"{p}/devices/{i}"
        c.obj(x, q)
        for k in ("device", "allocated_bytes", "reserved_bytes", "reserved_unallocated_bytes"):
            c.req(x, k, q, c.int_)
        # null where the framework does not say (CuPy: format minor 4)
        for k in ("largest_free_block_bytes", "limit_bytes"):
            c.opt(x, k, q, c.int_)
    segs = c.req(fw, "segments", p, c.arr)
    for i, s in enumerate(segs):
        q = f"{p}/segments/{i}"
        c.obj(s, q)
        c.req(s, "address", q, c.int_)
        c.req(s, "total_size", q, c.int_)
        c.req(s, "allocation", q, c.bool_)
        c.req(s, "blocks", q, c.arr)
    c.req(fw, "segments_joined", p, c.int_)


def _diagnosis(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    dg = c.opt(d, "diagnosis", "", c.obj)
    if dg is None:
        return
    p = "/diagnosis"
    c.req(dg, "verdict", p, c.str_)
    c.req(dg, "summary", p, c.str_)
    verdicts = c.opt(dg, "verdicts", p, c.arr) or []
    dg["verdicts"] = verdicts
    for i, v in enumerate(verdicts):
        q = f"{p}/verdicts/{i}"
        c.obj(v, q)
        c.req(v, "name", q, c.str_)
        v["primary"] = bool(c.opt(v, "primary", q, c.bool_))
        c.opt(v, "bytes", q, c.int_)
        c.opt(v, "detail", q, c.str_)
    remedies = c.opt(dg, "remedies", p, c.arr) or []
    dg["remedies"] = remedies
    for i, r in enumerate(remedies):
        q = f"{p}/remedies/{i}"
        c.obj(r, q)
        c.req(r, "name", q, c.str_)
        c.req(r, "text", q, c.str_)
        c.opt(r, "verdict", q, c.str_)
        c.opt(r, "bytes", q, c.int_)
        r["stack"] = stack_ref(r.get("stack", 0), f"{q}/stack")
    rp = c.opt(dg, "replay", p, c.obj)
    if rp is not None:
        q = f"{p}/replay"
        c.req(rp, "setting", q, c.str_)
        c.req(rp, "replayed", q, c.bool_)
        c.opt(rp, "why", q, c.str_)
        c.opt(rp, "fits", q, c.bool_)
    nums = c.opt(dg, "numbers", p, c.obj)
    dg["numbers"] = nums or {}
    for key in ("growth_top_stack", "largest_stack"):
        if key in dg["numbers"]:
            dg["numbers"][key] = stack_ref(dg["numbers"][key], f"{p}/numbers/{key}")
    gs = dg["numbers"].get("growth_stacks")
    if gs is not None:
        dg["numbers"]["growth_stacks"] = [stack_ref(s, f"{p}/numbers/growth_stacks/{i}")
                                          for i, s in enumerate(c.arr(gs, f"{p}/numbers/growth_stacks"))]


_HEX = re.compile(r"0x[0-9a-fA-F]{1,16}")


def _ints_ok(vals: List[Any], lo: int, hi: int) -> bool:
    # type(), not isinstance: a bool is an int in Python, never in a snapshot.
    return not vals or (set(map(type, vals)) == {int} and lo <= min(vals) and max(vals) <= hi)


def _hexes_ok(vals: List[Any]) -> bool:
    return not vals or (set(map(type, vals)) == {str} and all(map(_HEX.fullmatch, vals)))


def _allocations_ok(allocs: List[Any], stack_ids: Dict[int, Any]) -> bool:
    """True when every allocation is as the checks of _allocations want it,
    asked column by column without naming a path (a snapshot's bulk:
    millions of fields). False sends the caller to those checks, which name
    the first wrong field."""
    if not allocs:
        return True
    try:
        if set(map(type, allocs)) != {dict}:
            return False
        stacks = [a.get("stack", 0) for a in allocs]
        if not (_hexes_ok([a["address"] for a in allocs]) and _ints_ok([a["size"] for a in allocs], 0, U64 - 1)
                and _ints_ok([a["device"] for a in allocs], -1, U64 - 1)
                and set(a["kind"] for a in allocs) <= _KIND_SET
                and _ints_ok(stacks, 0, U64 - 1) and (set(stacks) - {0}).issubset(stack_ids)
                and all(_ints_ok([a.get(k, 0) for a in allocs], 0, U64 - 1) for k in ("seq", "time_ns", "thread"))
                and set(type(a.get("api", "")) for a in allocs) == {str}
                and _hexes_ok([a["stream"] for a in allocs if "stream" in a])):
            return False
    except (KeyError, TypeError):  # a field missing, a kind not hashable
        return False
    return True


def _allocations(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int],
                 stack_ids: Dict[int, Any]) -> None:
    allocs = c.opt(d, "allocations", "", c.arr) or []
    if not _allocations_ok(allocs, stack_ids):
        _allocations_one_by_one(c, allocs, stack_ref)
    d["allocations"] = allocs
    for a in allocs:
        if "stack" not in a:
            a["stack"] = 0
        for k in ("time_ns", "api", "thread"):
            if k not in a:
                a[k] = None


def _lean_allocations(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    """A lean document's allocations: their device, kind and size checked,
    the pinned host memory's bytes by kind kept ("_host_bytes"), the list
    dropped. A wrong one is named by the whole check."""
    allocs = c.opt(d, "allocations", "", c.arr) or []
    try:
        ok = set(map(type, allocs)) <= {dict}
        devs = [a["device"] for a in allocs] if ok else []
        kinds = [a["kind"] for a in allocs] if ok else []
        sizes = [a["size"] for a in allocs] if ok else []
        ok = ok and _ints_ok(devs, -1, U64 - 1) and set(kinds) <= _KIND_SET and _ints_ok(sizes, 0, U64 - 1)
    except (KeyError, TypeError):  # a field missing, a kind not hashable
        ok = False
    if not ok:
        _allocations_one_by_one(c, allocs, stack_ref)  # names the first wrong field
    rows = zip(devs, kinds, sizes) if ok else ((a["device"], a["kind"], a["size"]) for a in allocs)
    host: Dict[str, int] = {}
    for dev, kind, size in rows:
        if dev < 0:
            host[kind] = host.get(kind, 0) + size
    d["_host_bytes"] = host
    # The stacks of a framework's segments: what the tensor level leaves to
    # its tensors (model.tensor_level).
    d["_segment_stacks"] = {a.get("stack", 0) for a in allocs if isinstance(a, dict) and a.get("framework_segment")}
    d["allocations"] = []


def _allocations_one_by_one(c: _Checker, allocs: List[Any], stack_ref: Callable[[Any, str], int]) -> None:
    int_, hex_, str_ = c.int_, c.hex_, c.str_
    for i, a in enumerate(allocs):
        p = f"/allocations/{i}"
        if not isinstance(a, dict):
            c.obj(a, p)
        hex_(a.get("address"), f"{p}/address")
        int_(a.get("size"), f"{p}/size")
        int_(a.get("device"), f"{p}/device", -1)
        kind = str_(a.get("kind"), f"{p}/kind")
        if kind not in KINDS:
            c.fail(f"{p}/kind", f"unknown kind {_short(kind)}")
        a["stack"] = stack_ref(a.get("stack", 0), f"{p}/stack")
        if "seq" in a:
            int_(a["seq"], f"{p}/seq")
        if "stream" in a:
            hex_(a["stream"], f"{p}/stream")
        if "time_ns" in a:
            int_(a["time_ns"], f"{p}/time_ns")
        else:
            a["time_ns"] = None
        if "api" in a:
            str_(a["api"], f"{p}/api")
        else:
            a["api"] = None
        if "thread" in a:
            int_(a["thread"], f"{p}/thread")
        else:
            a["thread"] = None


def _vmm(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    v = c.opt(d, "vmm", "", c.obj) or {}
    d["vmm"] = v
    for key in ("reservations", "mappings"):
        items = c.opt(v, key, "/vmm", c.arr) or []
        v[key] = items
        for i, m in enumerate(items):
            p = f"/vmm/{key}/{i}"
            c.obj(m, p)
            c.req(m, "address", p, c.hex_)
            c.req(m, "size", p, c.int_)
            c.opt(m, "device", p, lambda x, q: c.int_(x, q, -1))
            m["stack"] = c.opt(m, "stack", p, stack_ref) or 0
            if key == "mappings":
                c.opt(m, "handle", p, c.hex_)
                c.opt(m, "offset", p, c.int_)


def _sites(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int], path: str = "") -> None:
    sites = c.opt(d, "sites", path, c.arr) or []
    d["sites"] = sites
    for i, s in enumerate(sites):
        p = f"{path}/sites/{i}"
        c.obj(s, p)
        c.req(s, "stack", p, stack_ref)
        for k in ("live_bytes", "live_count"):
            c.req(s, k, p, c.int_)
        for k in ("allocs", "alloc_bytes", "peak_bytes", "rising_windows", "falling_windows", "growth_bytes",
                  "step_growth_bytes", "growth_steps"):
            if c.opt(s, k, p, c.int_) is None:
                s[k] = 0
        s["growing"] = bool(c.opt(s, "growing", p, c.bool_))
        s["suspect"] = bool(c.opt(s, "suspect", p, c.bool_))


def _tensors(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    """The framework's level (format minor 6): its tensors, by level each
    device's bytes, the tensor sites. What model.tensor_level() reads."""
    t = c.opt(d, "tensors", "", c.obj)
    if t is None:
        return
    p = "/tensors"
    c.opt(t, "framework", p, c.str_)
    c.req(t, "stack_base", p, c.int_)
    h = c.opt(t, "history", p, c.obj)
    if h is not None:
        for k in ("events", "seeded", "steps"):
            c.req(h, k, f"{p}/history", c.int_)
        c.req(h, "complete", f"{p}/history", c.bool_)
        for k in ("first_ns", "last_ns"):
            c.opt(h, k, f"{p}/history", c.int_)
    st = c.opt(t, "step", p, c.obj)
    if st is not None:
        for k in ("step", "time_ns", "tensor_bytes", "tensor_count"):
            c.req(st, k, f"{p}/step", c.int_)
    for i, x in enumerate(c.req(t, "devices", p, c.arr)):
        q = f"{p}/devices/{i}"
        c.obj(x, q)
        c.req(x, "device", q, c.int_)
        for k in ("tensor_bytes", "tensor_count", "cached_bytes", "reserved_bytes", "segment_bytes",
                  "other_bytes", "live_bytes"):
            c.req(x, k, q, c.int_)
    for i, a in enumerate(c.req(t, "allocations", p, c.arr)):
        q = f"{p}/allocations/{i}"
        c.obj(a, q)
        c.req(a, "address", q, c.hex_)
        c.req(a, "segment", q, c.hex_)
        c.opt(a, "stream", q, c.hex_)
        for k in ("size", "requested_size", "device"):
            c.req(a, k, q, c.int_)
        c.opt(a, "time_ns", q, c.int_)
        c.req(a, "stack", q, stack_ref)
    _sites(c, t, stack_ref, p)
    if t.get("series") is not None:
        _series(c, t, p)


def _series(c: _Checker, d: Dict[str, Any], path: str = "") -> None:
    s = c.opt(d, "series", path, c.obj)
    if s is None:
        s = d["series"] = {}
    p = f"{path}/series"
    if c.opt(s, "interval_ns", p, c.int_) is None:
        s["interval_ns"] = 0
    c.opt(s, "start_ns", p, c.int_)
    if c.opt(s, "columns_dropped", p, c.int_) is None:
        s["columns_dropped"] = 0
    times = c.opt(s, "time_ns", p, c.arr) or []
    s["time_ns"] = times
    for i, t in enumerate(times):
        c.int_(t, f"{p}/time_ns/{i}")
    cols = c.opt(s, "columns", p, c.arr) or []
    s["columns"] = cols
    for i, col in enumerate(cols):
        q = f"{p}/columns/{i}"
        c.obj(col, q)
        c.req(col, "device", q, lambda v, r: c.int_(v, r, -1))
        c.req(col, "kind", q, c.str_)
        for k in ("live_bytes", "max_bytes"):
            vals = c.opt(col, k, q, c.arr)
            if vals is None:
                vals = col[k] = list(col.get("live_bytes") or [0] * len(times))
            if len(vals) != len(times):
                c.fail(f"{q}/{k}", f"{len(vals)} values for {len(times)} points of {p}/time_ns")
            for j, n in enumerate(vals):
                c.int_(n, f"{q}/{k}/{j}")


_EVENT_OPTIONAL = ("seq", "address", "kind", "api", "thread", "stream", "stack")
_MEMORY_OPS = frozenset(HIST_OPS) - {"step"}


def _events_ok(events: List[Any], stack_ids: Dict[int, Any]) -> bool:
    """True when every event (steps aside) is as _history's checks want it,
    asked column by column (as _allocations_ok)."""
    if not events:
        return True

    def given(k: str) -> List[Any]:
        return [e[k] for e in events if e.get(k) is not None]
    try:
        if set(map(type, events)) != {dict} or not set(e["op"] for e in events) <= _MEMORY_OPS:
            return False
        stacks = given("stack")
        return (_ints_ok(given("seq"), 0, U64 - 1) and _ints_ok([e["time_ns"] for e in events], 0, U64 - 1)
                and _hexes_ok(given("address")) and _ints_ok([e["size"] for e in events], 0, U64 - 1)
                and set(map(type, given("kind"))) <= {str} and set(map(type, given("api"))) <= {str}
                and _ints_ok([e["device"] for e in events], -1, U64 - 1) and _ints_ok(given("thread"), 0, U64 - 1)
                and _hexes_ok(given("stream")) and _ints_ok(stacks, 0, U64 - 1)
                and (set(stacks) - {0}).issubset(stack_ids))
    except (KeyError, TypeError):
        return False


def _history(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int],
             stack_ids: Dict[int, Any]) -> None:
    h = c.opt(d, "history", "", c.obj)
    if h is None:
        h = d["history"] = {}
    p = "/history"
    for k in ("capacity", "dropped"):
        if c.opt(h, k, p, c.int_) is None:
            h[k] = 0
    events = c.opt(h, "events", p, c.arr) or []
    # The steps the program marked (gmt_step) go aside, in "steps": "events"
    # holds what happened to memory.
    h["events"] = [e for e in events if not (isinstance(e, dict) and e.get("op") == "step")]
    h["steps"] = []
    pending: Iterable[Tuple[int, Any]] = enumerate(events)
    if _events_ok(h["events"], stack_ids):
        for e in h["events"]:
            for k in _EVENT_OPTIONAL:
                if k not in e:
                    e[k] = None
            e["stack"] = e["stack"] or 0
        pending = [(i, e) for i, e in enumerate(events) if isinstance(e, dict) and e.get("op") == "step"]
    for i, e in pending:
        q = f"{p}/events/{i}"
        c.obj(e, q)
        op = c.req(e, "op", q, c.str_)
        if op not in HIST_OPS:
            c.fail(f"{q}/op", f"unknown op {_short(op)}")
        if op == "step":
            h["steps"].append({"step": c.req(e, "step", q, c.int_), "seq": c.opt(e, "seq", q, c.int_),
                               "time_ns": c.req(e, "time_ns", q, c.int_), "thread": c.opt(e, "thread", q, c.int_)})
            continue
        c.opt(e, "seq", q, c.int_)
        c.req(e, "time_ns", q, c.int_)
        c.opt(e, "address", q, c.hex_)
        c.req(e, "size", q, c.int_)
        c.opt(e, "kind", q, c.str_)
        c.req(e, "device", q, lambda v, r: c.int_(v, r, -1))
        c.opt(e, "api", q, c.str_)
        c.opt(e, "thread", q, c.int_)
        c.opt(e, "stream", q, c.hex_)
        e["stack"] = c.opt(e, "stack", q, stack_ref) or 0


def _leaks(c: _Checker, d: Dict[str, Any], stack_ref: Callable[[Any, str], int]) -> None:
    lk = c.opt(d, "leaks", "", c.obj)
    if lk is None:
        return
    p = "/leaks"
    scan = c.opt(lk, "scan", p, c.obj) or {"done": False, "why": None}
    lk["scan"] = scan
    scan["done"] = bool(c.opt(scan, "done", f"{p}/scan", c.bool_))
    c.opt(scan, "why", f"{p}/scan", c.str_)
    c.opt(scan, "unseen", f"{p}/scan", c.str_)
    for k in ("mappings", "bytes", "excluded_bytes", "walked_bytes"):
        c.opt(scan, k, f"{p}/scan", c.int_)
    modules = c.opt(scan, "bookkeeping_modules", f"{p}/scan", c.arr) or []
    scan["bookkeeping_modules"] = [c.str_(x, f"{p}/scan/bookkeeping_modules/{i}") for i, x in enumerate(modules)]
    c.opt(scan, "seconds", f"{p}/scan", c.num)
    classes = c.opt(lk, "classes", p, c.arr) or []
    lk["classes"] = [c.str_(x, f"{p}/classes/{i}") for i, x in enumerate(classes)]
    c.opt(lk, "exit_status", p, lambda v, q: c.int_(v, q, -(1 << 31), (1 << 31) - 1))
    c.opt(lk, "suppressions_error", p, c.str_)
    totals = c.opt(lk, "totals", p, c.obj) or {}
    lk["totals"] = totals
    for k in ("leaked", "referenced", "cached", "suppressed", "counted"):
        t = totals.get(k)
        if t is None:
            totals[k] = {"count": 0, "bytes": 0}
            continue
        q = f"{p}/totals/{k}"
        c.obj(t, q)
        c.req(t, "count", q, c.int_)
        c.req(t, "bytes", q, c.int_)
    sites = c.opt(lk, "sites", p, c.arr) or []
    lk["sites"] = sites
    for i, s in enumerate(sites):
        q = f"{p}/sites/{i}"
        c.obj(s, q)
        s["stack"] = c.opt(s, "stack", q, stack_ref) or 0
        cls = c.req(s, "class", q, c.str_)
        if cls not in LEAK_CLASSES:
            c.fail(f"{q}/class", f"unknown class {_short(cls)}")
        s["counted"] = bool(c.opt(s, "counted", q, c.bool_))
        for k in ("suppressed_by", "rule", "rule_source"):
            c.opt(s, k, q, c.str_)
        c.req(s, "count", q, c.int_)
        c.req(s, "bytes", q, c.int_)
        s["kinds"] = c.opt(s, "kinds", q, lambda v, r: _kinds_map(c, v, r)) or {}
        devs = c.opt(s, "devices", q, c.arr) or []
        s["devices"] = [c.int_(x, f"{q}/devices/{j}", -1) for j, x in enumerate(devs)]
        addrs = c.opt(s, "addresses", q, c.arr) or []
        s["addresses"] = [c.hex_(x, f"{q}/addresses/{j}") for j, x in enumerate(addrs)]
        rf = c.opt(s, "referenced_from", q, c.obj)
        if rf is not None:
            r = f"{q}/referenced_from"
            c.opt(rf, "address", r, c.hex_)
            c.opt(rf, "value", r, c.hex_)
            c.opt(rf, "region", r, c.str_)
            c.opt(rf, "what", r, c.str_)
    sus = c.opt(lk, "suspects", p, c.arr) or []
    lk["suspects"] = sus
    for i, s in enumerate(sus):
        q = f"{p}/suspects/{i}"
        c.obj(s, q)
        c.req(s, "stack", q, stack_ref)
        for k in ("live_bytes", "peak_bytes", "growth_bytes", "rising_windows", "falling_windows"):
            if c.opt(s, k, q, c.int_) is None:
                s[k] = 0
    rules = c.opt(lk, "suppressions", p, c.arr) or []
    lk["suppressions"] = rules
    for i, r in enumerate(rules):
        q = f"{p}/suppressions/{i}"
        c.obj(r, q)
        c.req(r, "rule", q, c.str_)
        c.opt(r, "source", q, c.str_)
        c.opt(r, "line", q, c.int_)
        for k in ("hits", "bytes"):
            if c.opt(r, k, q, c.int_) is None:
                r[k] = 0


def stack(doc: Dict[str, Any], sid: int) -> Optional[Dict[str, Any]]:
    """The stack with id sid, or None (0, or none recorded)."""
    return doc["_stack_by_id"].get(sid) if sid else None
