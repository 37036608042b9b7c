"""The timeline's horizontal axis (html.py writes it, assets/report.js draws
it): the span of time it covers, and for a run drawn from its events whether
time says little there and where each point and mark falls in event order.
docs/viewer.md, "The HTML report", states the rule."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .text import fmt_duration

Doc = Dict[str, Any]

# Time says little when one stretch of the time axis with no event in it
# (no allocation, free, out-of-memory or step mark) takes more than this
# share of the axis: the events crowd into the rest, a sliver of the chart,
# as a run that allocates for 0.3 ms and fails 10 ms later draws them.
EMPTY_SHARE = 0.5


def changes(doc: Doc) -> List[Dict[str, Any]]:
    """The history's events that change the live bytes, oldest first: the
    points of a timeline drawn from events, one step of event order each."""
    return [e for e in doc["history"]["events"] if e["op"] in ("alloc", "free")]


class EventOrder:
    """Positions on an axis of event order, for a timeline drawn from the
    changes (html.py's short run): its point k at k (0 before the first
    change, k after the k-th, n + 1 at the snapshot); a mark (out-of-memory,
    step) after c changes and before the next at c + 0.5."""

    def __init__(self, doc: Doc, base: int) -> None:
        events = doc["history"]["events"]
        # How many changes come before each event of the history.
        self._before, c = [], 0
        for e in events:
            self._before.append(c)
            c += e["op"] in ("alloc", "free")
        mine = changes(doc)
        self.n = len(mine)
        # Sorted for bisect (a clock that stepped back leaves one out of order).
        self.times = sorted(e["time_ns"] - base for e in mine)
        seqs = [e.get("seq") for e in mine]
        self.seqs: Optional[List[int]] = None
        if all(isinstance(q, int) for q in seqs) and seqs == sorted(seqs):
            self.seqs = seqs  # type: ignore[assignment]

    def event(self, i: int) -> float:
        """Where the history's event i (an out-of-memory) falls: by its place
        in the history, which is in order (an out-of-memory's seq is the
        failure's ordinal, not a place in the sequence)."""
        return self._before[i] + 0.5

    def step(self, seq: Optional[int], t: int) -> float:
        """Where a step mark falls: before the change of its seq (where it
        fell in the sequence of events), else by its time (ns from the base)."""
        if self.seqs is not None and isinstance(seq, int):
            return bisect_left(self.seqs, seq) + 0.5
        return self.at(t)

    def at(self, t: int) -> float:
        """Where a mark at time t falls: after every change at t or before."""
        return bisect_right(self.times, t) + 0.5

    def first(self, t: int) -> int:
        """The first point at time t or after it (where a span starts)."""
        return min(bisect_left(self.times, t) + 1, self.n + 1)

    def last(self, t: int) -> int:
        """The last point at time t or before it (where a span ends, or where
        a point of another series falls)."""
        return bisect_right(self.times, t)


def extent(t: Sequence[int], end: int, ooms: Sequence[int]) -> Tuple[int, int]:
    """The time axis [lo, hi] (ns from the document's base): from the base,
    or the first point where it lies before, to the snapshot, the last point
    or the last out-of-memory, whichever is last."""
    return min(0, t[0]), max([t[-1], end] + list(ooms))


def says_little(times: Sequence[int], lo: int, hi: int) -> Optional[Dict[str, int]]:
    """{"empty_ns", "busy_ns", "span_ns"} when one stretch of [lo, hi]
    holding none of times takes more than EMPTY_SHARE of it (empty_ns that
    stretch, busy_ns the rest, in which the events fell); None when time
    says enough."""
    span = hi - lo
    if span <= 0 or not times:
        return None
    edges = [lo] + sorted(min(max(t, lo), hi) for t in times) + [hi]
    empty = max(b - a for a, b in zip(edges, edges[1:]))
    if empty <= EMPTY_SHARE * span:
        return None
    return {"empty_ns": empty, "busy_ns": span - empty, "span_ns": span}


def axis(series: Dict[str, Any], marks: Dict[str, Any], end: int) -> Dict[str, Any]:
    """The axis of a timeline: {"lo", "hi"} in time, and "order" for a series
    drawn from the changes (else None): {"events": how many,
    "points": the axis' length in points, "default": whether time says
    little (then the page opens on event order), and when it does
    "empty_ns", "busy_ns", "span_ns" and "why", those in words}."""
    t = series["t"]
    if not t:
        return {"lo": 0, "hi": 0, "order": None}
    lo, hi = extent(t, end, [o[0] for o in marks["oom"]])
    out: Dict[str, Any] = {"lo": lo, "hi": hi, "order": None}
    if series["fine"]:
        # The changes are the inner points (the first is the state before
        # them, the last the snapshot).
        times = list(t[1:-1]) + [o[0] for o in marks["oom"]] + [s[0] for s in marks["steps"]]
        little = says_little(times, lo, hi)
        n = len(t) - 2
        out["order"] = dict({"events": n, "points": len(t), "default": little is not None}, **(little or {}))
        if little:
            out["order"]["why"] = (f"no event in {fmt_duration(little['empty_ns'])} of this "
                                   f"{fmt_duration(little['span_ns'])} run: its {n:,} allocations and frees "
                                   f"fell within the other {fmt_duration(little['busy_ns'])}")
    return out
