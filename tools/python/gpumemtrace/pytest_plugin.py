"""GPU memory limits per test for pytest, in the spirit of pytest-memray's
limit_memory and limit_leaks:

    @pytest.mark.gpu_limit_memory("1 GiB")  # its peak above what was live when it started
    @pytest.mark.gpu_limit_leaks("0")       # what it allocated and left live

Load the plugin with `-p gpumemtrace.pytest_plugin` (or `pytest_plugins =
["gpumemtrace.pytest_plugin"]` in conftest.py) and run pytest traced:
`gpumemtrace run -- python -m pytest -p gpumemtrace.pytest_plugin tests/`. A
test over its limit fails with what it used or left and where it allocated
most (the allocation sites of an "api" snapshot written then). Without the
tracer the marked tests run unchecked, and one warning says so. A test's own
failure is reported as it is.

Where PyTorch is imported and the bootstrap records it, the limits read its
tensors (the tensor level, docs/ci.md "pytest: limits per test"): the peak
is PyTorch's own (max_memory_allocated(), its peak statistics reset at the
test's start), what the test left is the tensors it allocated and did not
free (its allocator history replayed) — not the segments PyTorch keeps
cached. `level="driver"` (or "tensors") in a marker chooses."""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

import pytest

import gpumemtrace as gmt

_KEY = "_gpumemtrace_problem"
_warned = False


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "gpu_limit_memory(limit, level=None): fail when the test's GPU memory "
                            "peak, above what was live when it started, exceeds limit (bytes, or \"512 MiB\", "
                            "\"1G\"); PyTorch's tensors where it is traced, level=\"driver\" for the driver's "
                            "allocations")
    config.addinivalue_line("markers", "gpu_limit_leaks(limit, level=None): fail when the GPU memory the test "
                            "allocated and left live exceeds limit (bytes, or \"1 MiB\"; \"0\": none); "
                            "PyTorch's tensors where it is traced, level=\"driver\" for the driver's allocations")


def _fmt(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    v = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        v /= 1024
        if v < 1024 or unit == "EiB":
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n} B"


LEVELS = ("tensors", "driver")


def _limit(item: Any, name: str) -> Tuple[Optional[int], Optional[str]]:
    """The marker's limit (None: not marked) and its level (None: not said)."""
    marker = item.get_closest_marker(name)
    if marker is None:
        return None, None
    if len(marker.args) != 1 or set(marker.kwargs) - {"level"}:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} takes one limit and an optional level, "
                                f"e.g. {name}(\"1 GiB\") or {name}(\"1 GiB\", level=\"driver\")")
    level = marker.kwargs.get("level")
    if level is not None and level not in LEVELS:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: level {level!r} is not "
                                f"{' or '.join(LEVELS)}")
    try:
        return gmt.parse_bytes(marker.args[0]), level
    except ValueError as e:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: {e}") from None


def _recorded_torch() -> Any:
    """torch, when it is imported and the bootstrap records its allocator
    (its history on): the tensor level can be had; else None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        from gpumemtrace import frameworks
    except ImportError:
        return None
    if not frameworks.enabled() or frameworks._torch_history() == "off":
        return None
    try:
        return torch if str(torch.cuda.get_allocator_backend()) == "native" else None
    except Exception:  # noqa: BLE001 - a torch without a CUDA allocator: the driver's level
        return None


def _devices(torch: Any) -> List[int]:
    return list(range(int(torch.cuda.device_count()))) if torch.cuda.is_initialized() else []


class _Tensors:
    """A test at the tensor level: PyTorch's counters at its start, its
    peak statistics reset, and what its history says the test left."""

    def __init__(self, torch: Any, leaks: bool) -> None:
        self.torch = torch
        self.start_us = time.time_ns() // 1000
        self.before = {d: int(torch.cuda.memory_allocated(d)) for d in _devices(torch)}
        for d in self.before:
            torch.cuda.reset_peak_memory_stats(d)
        self.blocks_before = _active_blocks(torch.cuda.memory._snapshot()) if leaks and self.before else set()

    def used(self) -> int:
        """The test's peak of tensors above what was live at its start,
        summed over the devices."""
        cuda = self.torch.cuda
        return sum(max(0, int(cuda.max_memory_allocated(d)) - self.before.get(d, 0)) for d in _devices(self.torch))

    def left(self) -> Tuple[int, int, Set[Tuple[int, int]], bool]:
        """Bytes and count of the tensors the test allocated and did not
        free, their (device, address), and whether the history reached back
        to the test's start (else: the active blocks not live before)."""
        snap = self.torch.cuda.memory._snapshot()
        active = _active_blocks(snap)
        allocated: Dict[Tuple[int, int], bool] = {}
        complete = True
        for dev, entries in enumerate(snap.get("device_traces") or []):
            # A history that begins after the start: rotated (it keeps its
            # last entries), unless CUDA itself began in the test.
            if entries and (entries[0].get("time_us") or 0) > self.start_us and self.before:
                complete = False
            for e in entries:
                if (e.get("time_us") or 0) < self.start_us:
                    continue
                key = (dev, int(e.get("addr", 0)))
                if e.get("action") == "alloc":
                    allocated[key] = True
                elif e.get("action") in ("free_requested", "free_completed"):
                    allocated.pop(key, None)
        kept = set(allocated) if complete else set(active) - self.blocks_before
        kept &= set(active)
        return sum(active[k] for k in kept), len(kept), kept, complete


def _active_blocks(snap: Dict[str, Any]) -> Dict[Tuple[int, int], int]:
    """(device, address) -> size of every active block of a _snapshot()."""
    out: Dict[Tuple[int, int], int] = {}
    for seg in snap.get("segments") or []:
        at = int(seg.get("address", 0))
        for b in seg.get("blocks") or []:
            addr = int(b.get("address", at))
            at = addr + int(b.get("size", 0))
            if b.get("state") == "active_allocated":
                out[(int(seg.get("device", 0)), addr)] = int(b.get("size", 0))
    return out


def _top_sites(noun: str, pick: Callable[[Dict[str, Any], Dict[int, str]], Iterable[Tuple[str, int]]]) -> str:
    """Where the test allocated most: an "api" snapshot written now, its
    stacks' site labels, and what pick(doc, labels) takes from it (label and
    bytes of each allocation or tensor), the three largest sites."""
    path = gmt.dump()
    if path is None:
        return ""
    by: Dict[str, List[int]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        labels = {s["id"]: (s.get("site") or {}).get("label") or "an unknown place" for s in doc["stacks"]}
        for label, size in pick(doc, labels):
            r = by.setdefault(label, [0, 0])
            r[0] += size
            r[1] += 1
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"\n  (the snapshot {path} could not be read: {e})"
    top: List[Tuple[str, List[int]]] = sorted(by.items(), key=lambda kv: -kv[1][0])[:3]
    lines = [f"\n  {_fmt(b)} in {n} {noun}{'s' if n != 1 else ''} at {label}" for label, (b, n) in top]
    return "".join(lines) + f"\n  snapshot: {path}"


def _sites(since: int, leaked: bool) -> str:
    """The sites of the test's allocations still live (leaked) or of all it
    made, by the driver's allocations."""
    def pick(doc: Dict[str, Any], labels: Dict[int, str]) -> Iterable[Tuple[str, int]]:
        if leaked:
            items = [(a["stack"], a["size"]) for a in doc["allocations"] if a.get("seq", -1) >= since]
        else:
            items = [(e["stack"], e["size"]) for e in doc["history"]["events"]
                     if e["op"] == "alloc" and e["seq"] >= since]
        return [(labels.get(sid, "(no stack recorded)"), size) for sid, size in items]
    return _top_sites("allocation", pick)


def _tensor_sites(torch: Any, kept: Optional[Set[Tuple[int, int]]], start_us: int) -> str:
    """The sites of the live tensors the test left (kept), or of every
    tensor its history says it allocated since start_us (matched to the
    snapshot's stacks by their frames)."""
    from gpumemtrace import frameworks

    def pick(doc: Dict[str, Any], labels: Dict[int, str]) -> Iterable[Tuple[str, int]]:
        if kept is not None:
            return [(labels.get(t["stack"], "(no stack recorded)"), int(t["size"]))
                    for t in (doc.get("tensors") or {}).get("allocations") or []
                    if (int(t["device"]), int(t["address"], 16)) in kept]
        by_frames = {tuple((fr.get("function"), fr.get("file"), fr.get("line")) for fr in s["frames"]):
                     labels[s["id"]] for s in doc["stacks"] if s.get("frames")}
        out = []
        for entries in torch.cuda.memory._snapshot().get("device_traces") or []:
            for e in entries:
                if e.get("action") == "alloc" and (e.get("time_us") or 0) >= start_us:
                    frames = frameworks.frames_of(e.get("frames"))
                    key = tuple((f["name"], f["filename"], f["line"]) for f in frames)
                    out.append((by_frames.get(key, "(no stack recorded)"), int(e.get("size", 0))))
        return out
    return _top_sites("tensor", pick)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    global _warned
    (memory, mlevel), (leaks, llevel) = _limit(item, "gpu_limit_memory"), _limit(item, "gpu_limit_leaks")
    if memory is None and leaks is None:
        yield
        return
    if not gmt.available():
        if not _warned:
            _warned = True
            warnings.warn("gpumemtrace: not traced (run pytest under `gpumemtrace run`): the GPU memory "
                          "limits of marked tests are not checked", RuntimeWarning)
        yield
        return
    torch = _recorded_torch()
    if "tensors" in (mlevel, llevel) and torch is None:
        raise pytest.UsageError(f"{item.nodeid}: level=\"tensors\": PyTorch's allocator is not recorded here "
                                "(torch not imported, GPUMEMTRACE_FRAMEWORKS=0 or GPUMEMTRACE_TORCH_HISTORY=off, "
                                "or another allocator backend)")
    on_tensors = {name: torch is not None and level != "driver" for name, level in
                  (("memory", mlevel), ("leaks", llevel))}
    tensors = _Tensors(torch, leaks is not None and on_tensors["leaks"]) if any(on_tensors.values()) else None
    before = gmt.live_bytes() or 0
    gmt.peak_reset()
    since = gmt.mark() or 0
    outcome = yield
    if outcome.excinfo is not None:
        return  # the test's own failure is what it reports
    problems = []
    if memory is not None:
        if on_tensors["memory"]:
            used, what = tensors.used(), "of PyTorch's tensors"
        else:
            used, what = (gmt.peak_bytes() or 0) - before, "of GPU memory"
        if used > memory:
            where = _tensor_sites(torch, None, tensors.start_us) if on_tensors["memory"] else _sites(since, False)
            problems.append(f"the test used {_fmt(used)} {what} at its peak, more than its limit of "
                            f"{_fmt(memory)} (gpu_limit_memory); it allocated most at:" + where)
    if leaks is not None:
        if on_tensors["leaks"]:
            left, count, kept, complete = tensors.left()
            noun = "tensor"
        else:
            left, count = gmt.live_since(since) or (0, 0)
            noun, kept, complete = "allocation", None, True
        if left > leaks:
            where = _tensor_sites(torch, kept, tensors.start_us) if on_tensors["leaks"] else _sites(since, True)
            problems.append(f"the test left {_fmt(left)} of GPU memory in {count} {noun}"
                            f"{'s' if count != 1 else ''} live, more than its limit of {_fmt(leaks)} "
                            "(gpu_limit_leaks)" + ("" if complete else " (PyTorch's history did not reach back to "
                                                   "the test's start: the tensors live now that were not before)")
                            + ":" + where)
    if problems:
        setattr(item, _KEY, "gpumemtrace: " + "\ngpumemtrace: ".join(problems))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    problem = getattr(item, _KEY, None)
    if call.when == "call" and problem and report.passed:
        report.outcome = "failed"
        report.longrepr = problem
