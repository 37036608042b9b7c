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
failure is reported as it is."""

from __future__ import annotations

import json
import warnings
from typing import Any, Dict, List, Optional, Tuple

import pytest

import gpumemtrace as gmt

_KEY = "_gpumemtrace_problem"
_warned = False


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "gpu_limit_memory(limit): fail when the test's GPU memory peak, above "
                            "what was live when it started, exceeds limit (bytes, or \"512 MiB\", \"1G\")")
    config.addinivalue_line("markers", "gpu_limit_leaks(limit): fail when the GPU memory the test allocated "
                            "and left live exceeds limit (bytes, or \"1 MiB\"; \"0\": none)")


def _fmt(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    v = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        v /= 1024
        if v < 1024 or unit == "EiB":
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n} B"


def _limit(item: Any, name: str) -> Optional[int]:
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name} takes one limit, e.g. {name}(\"1 GiB\")")
    try:
        return gmt.parse_bytes(marker.args[0])
    except ValueError as e:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{name}: {e}") from None


def _sites(since: int, leaked: bool) -> str:
    """Where the test allocated most: from an "api" snapshot written now, the
    sites of its allocations still live (leaked) or of all it made."""
    path = gmt.dump()
    if path is None:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        labels = {s["id"]: (s.get("site") or {}).get("label") or "an unknown place" for s in doc["stacks"]}
        by: Dict[str, List[int]] = {}
        if leaked:
            items = [(a["stack"], a["size"]) for a in doc["allocations"] if a.get("seq", -1) >= since]
        else:
            items = [(e["stack"], e["size"]) for e in doc["history"]["events"]
                     if e["op"] == "alloc" and e["seq"] >= since]
        for sid, size in items:
            r = by.setdefault(labels.get(sid, "(no stack recorded)"), [0, 0])
            r[0] += size
            r[1] += 1
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"\n  (the snapshot {path} could not be read: {e})"
    top: List[Tuple[str, List[int]]] = sorted(by.items(), key=lambda kv: -kv[1][0])[:3]
    lines = [f"\n  {_fmt(b)} in {n} allocation{'s' if n != 1 else ''} at {label}" for label, (b, n) in top]
    return "".join(lines) + f"\n  snapshot: {path}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    global _warned
    memory, leaks = _limit(item, "gpu_limit_memory"), _limit(item, "gpu_limit_leaks")
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
    before = gmt.live_bytes() or 0
    gmt.peak_reset()
    since = gmt.mark() or 0
    outcome = yield
    if outcome.excinfo is not None:
        return  # the test's own failure is what it reports
    problems = []
    if memory is not None:
        used = (gmt.peak_bytes() or 0) - before
        if used > memory:
            problems.append(f"the test used {_fmt(used)} of GPU memory at its peak, more than its limit of "
                            f"{_fmt(memory)} (gpu_limit_memory); it allocated most at:" + _sites(since, False))
    if leaks is not None:
        left, count = gmt.live_since(since) or (0, 0)
        if left > leaks:
            problems.append(f"the test left {_fmt(left)} of GPU memory in {count} allocation"
                            f"{'s' if count != 1 else ''} live, more than its limit of {_fmt(leaks)} "
                            "(gpu_limit_leaks):" + _sites(since, True))
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
