"""The terminal views: the summary of one snapshot, the diff of two and the
merged report of several processes, as text no wider than a given width,
coloured with ANSI codes only when asked. facts(), diff_facts() and
merge_facts() return the data; summary(), diff_text() and merge_text() print
it. Every string printed passes through one place (_Text) that makes control
and format characters visible, so a snapshot cannot drive the terminal."""

from __future__ import annotations

import datetime
import os
import shlex
import unicodedata
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import model
from .model import fmt_bytes, fmt_delta

Doc = Dict[str, Any]

# ---------------------------------------------------------------------------
# Safe text: escaping, display width, cutting, wrapping, colour

# Categories a terminal may act on or draw unpredictably: controls (C0, DEL,
# C1 — \x9b is a one-byte CSI for some terminals), format characters (bidi
# overrides such as U+202E, zero-width joiners), lone surrogates (which
# cannot even be encoded), private use, unassigned, line and paragraph
# separators.
_UNSAFE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def clean(s: str) -> str:
    """s with every unsafe character written as a visible escape: "\\x1b",
    "\\u202e", "\\U000e0001" (tab, newline, return as "\\t", "\\n", "\\r")."""
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if unicodedata.category(ch) not in _UNSAFE:
            out.append(ch)
        elif ch in _NAMED:
            out.append(_NAMED[ch])
        else:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


def _char_width(ch: str) -> int:
    if unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_width(s: str) -> int:
    """Columns s takes on a terminal (after clean(): no control characters)."""
    if s.isascii():
        return len(s)
    return sum(_char_width(ch) for ch in s)


def _head(s: str, cols: int) -> Tuple[str, int]:
    """The longest start of s that fits in cols, and its width."""
    w = 0
    for i, ch in enumerate(s):
        cw = _char_width(ch)
        if w + cw > cols:
            return s[:i], w
        w += cw
    return s, w


def cut(s: str, cols: int) -> str:
    """s, or its start and "…" when it is wider than cols."""
    if text_width(s) <= cols:
        return s
    if cols <= 0:
        return ""
    return _head(s, cols - 1)[0] + "…"


def cut_middle(s: str, cols: int) -> str:
    """s, or its start and end around "…" when wider than cols (a long C++
    name keeps its namespace and its function)."""
    if text_width(s) <= cols:
        return s
    if cols < 8:
        return cut(s, cols)
    left = (cols - 1) // 2
    start, _ = _head(s, left)
    end_rev, _ = _head(s[::-1], cols - 1 - left)
    return start + "…" + end_rev[::-1]


_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "magenta": "35", "cyan": "36"}

Span = Union[str, Tuple[str, str]]


class _Text:
    """Lines of spans (text, style), each cut to the width; styles become
    ANSI SGR codes when colour is on. Every span is clean()ed here."""

    def __init__(self, width: int, color: bool) -> None:
        self.width = max(1, width)
        self.color = color
        self.lines: List[str] = []

    def _style(self, text: str, style: str) -> str:
        if not self.color or not style or not text:
            return text
        codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
        return f"\x1b[{codes}m{text}\x1b[0m" if codes else text

    def add(self, *spans: Span, style: str = "") -> None:
        parts = [(clean(s), style) if isinstance(s, str) else (clean(s[0]), s[1] or style) for s in spans]
        if sum(text_width(p) for p, _ in parts) <= self.width:
            out = [self._style(p, st) for p, st in parts]
        else:
            # Cut where the line overflows; "…" says so.
            room = self.width - 1
            out = []
            for p, st in parts:
                w = text_width(p)
                if w <= room:
                    out.append(self._style(p, st))
                    room -= w
                    continue
                out.append(self._style(_head(p, room)[0], st))
                break
            out.append("…")
        line = "".join(out)
        self.lines.append(line.rstrip() if not self.color else line)

    def flow(self, lead: str, spans: Sequence[Span], hang: int, sep: str = "  ") -> None:
        """spans after lead on as many lines as they need, each line after
        the first indented by hang; a span is never broken (only cut when it
        is wider than a whole line)."""
        line: List[Span] = [lead]
        lw = text_width(clean(lead))
        first = True
        mark = sep.rstrip()
        for n, sp in enumerate(spans):
            text, st = (sp, "") if isinstance(sp, str) else sp
            w = text_width(clean(text))
            gap = 0 if first else len(sep)
            # Room for the separator's mark that ends a wrapped line.
            need = w + (len(mark) if n < len(spans) - 1 else 0)
            if not first and lw + gap + need > self.width:
                if mark:
                    line.append(mark)
                self.add(*line)
                line, lw, gap = [" " * hang], hang, 0
            if gap:
                line.append(sep)
            line.append((text, st))
            lw += gap + w
            first = False
        self.add(*line)

    def blank(self) -> None:
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def heading(self, text: str, note: str = "") -> None:
        self.blank()
        if note:
            self.add((text, "bold"), ("  " + note, "dim"))
        else:
            self.add((text, "bold"))

    def wrap(self, text: str, indent: int = 0, hang: Optional[int] = None, style: str = "",
             first: Sequence[Span] = ()) -> None:
        """text in words over as many lines as it needs; the first line after
        the spans of first (when given), the others indented by hang."""
        hang = indent if hang is None else hang
        lead: List[Span] = [" " * indent] + list(first)
        used = indent + sum(text_width(clean(s if isinstance(s, str) else s[0])) for s in first)
        words = clean(text).split()
        line: List[str] = []
        lw = used
        for word in words:
            ww = text_width(word)
            sep = 1 if line else 0
            if line and lw + sep + ww > self.width:
                self.add(*lead, (" ".join(line), style))
                lead, lw, line = [" " * hang], hang, []
                sep = 0
            # A word longer than a whole line is broken where it must be.
            while lw + sep + ww > self.width and self.width - lw - sep > 8:
                head, hw = _head(word, self.width - lw - sep)
                line.append(head)
                self.add(*lead, (" ".join(line), style))
                lead, lw, line = [" " * hang], hang, []
                word, ww, sep = word[len(head):], ww - hw, 0
            line.append(word)
            lw += sep + ww
        if line or first:
            self.add(*lead, (" ".join(line), style))

    def text(self) -> str:
        while self.lines and self.lines[-1] == "":
            self.lines.pop()
        return "\n".join(self.lines) + "\n"


# ---------------------------------------------------------------------------
# Shared pieces

_REASONS = {"oom": "out of memory", "exit": "at exit", "peak": "at a new peak",
            "signal": "on a signal", "api": "asked for by gmt_dump()"}
# Tracer counters that mean the record may be incomplete or wrong
# (src/tracer/tracer.h, GMT_STATS, says what each counts).
_WARN_STATS = {
    "ring_full": "times a thread found its ring full",
    "gaps_skipped": "events given up on after waiting (their order may be lost)",
    "late_events": "events applied after their place in the order was given up",
    "unknown_frees": "frees, releases and unmaps of nothing the tracer knew",
    "debts_dropped": "late frees forgotten: too many open at one address set",
    "undo_lost": "failed calls whose record could no longer be undone",
    "untracked_calls": "intercepted calls not recorded (tracer off or out of memory)",
    "device_unknown": "allocations whose device could not be asked",
    "snapshot_errors": "snapshots that could not be written",
}


def fmt_time(ns: int) -> str:
    try:
        t = datetime.datetime.fromtimestamp(ns // 1_000_000_000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns after the epoch"
    return t.strftime("%Y-%m-%d %H:%M:%S") + f".{ns // 1_000_000 % 1000:03d} UTC"


def fmt_duration(ns: int) -> str:
    s = abs(ns) / 1e9
    if s < 1:
        return f"{s * 1000:.3g} ms"
    if s < 60:
        return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {s} s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h {m} min"
    d, h = divmod(h, 24)
    return f"{d} d {h} h"


def _plural(n: int, word: str, many: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def _percent(part: int, whole: int) -> str:
    if whole <= 0:
        return ""
    p = 100.0 * part / whole
    return f"{p:.0f}%" if p >= 10 or p == 0 else f"{p:.1f}%"


def device_name(index: int) -> str:
    return "host" if index < 0 else f"GPU {index}"


def _kinds_list(kinds: Sequence[Tuple[str, int]]) -> List[Span]:
    return [f"{k} {fmt_bytes(b)}" for k, b in kinds] or ["nothing live"]


def _kinds_text(kinds: Sequence[Tuple[str, int]]) -> str:
    return ", ".join(f"{k} {fmt_bytes(b)}" for k, b in kinds) or "nothing live"


def _sorted_kinds(kinds: Dict[str, int]) -> List[Tuple[str, int]]:
    return sorted(((k, b) for k, b in kinds.items() if b), key=lambda kb: (-kb[1], kb[0]))


def _frame(f: Dict[str, Any]) -> str:
    return model.frame_text(dict(f, inlined=False))


def site_frames(doc: Doc, sid: int, depth: int) -> List[str]:
    """The frames that name a site, innermost first: the site's frame, then
    its callers in the program's own code (the frames the tracer marked
    "user"), `depth` frames in all; "…" where library frames are left out
    between them. A site outside the program's code shows its frame and the
    frames beyond it as they are."""
    st = doc["_stack_by_id"].get(sid) if sid else None
    if st is None:
        return ["(no stack recorded)"]
    frames = model.user_frames(st)
    if not frames:
        return ["(empty stack)"]
    if not st["site"]["user"]:
        return [_frame(f) for f in frames[:max(1, depth)]]
    out = [_frame(frames[0])]
    shown, skipped = 1, False
    for f in frames[1:]:
        if shown >= depth:
            break
        if f["role"] != "user":
            skipped = True
            continue
        if skipped:
            out.append("…")
            skipped = False
        out.append(_frame(f))
        shown += 1
    return out


def site_title(doc: Doc, sid: int, cols: int) -> str:
    """model.stack_title() made to fit cols: drop the runtime call, then
    shorten each frame's function in the middle, then cut."""
    # Measured and cut escaped: an escape is wider than the character.
    title = clean(model.stack_title(doc, sid))
    if text_width(title) <= cols:
        return title
    st = doc["_stack_by_id"].get(sid) if sid else None
    if st is not None and st.get("runtime_call"):
        tail = clean(f" via {st['runtime_call']}")
        if title.endswith(tail):
            title = title[:-len(tail)]
    if text_width(title) <= cols:
        return title
    pieces = title.split(" \u2190 ")
    per = max(12, (cols - 3 * (len(pieces) - 1)) // len(pieces))
    short = []
    for p in pieces:
        # "function (file:line)": keep the place, shorten the function.
        fn, sep, where = p.partition(" (")
        if sep and text_width(p) > per:
            room = per - text_width(sep + where)
            p = (cut_middle(fn, room) + sep + where) if room >= 8 else cut_middle(p, per)
        short.append(p)
    return " \u2190 ".join(short)


def site_title_lines(doc: Doc, sid: int, cols: int) -> List[str]:
    """model.stack_title() in lines of at most cols: whole when it fits,
    else broken before each caller ("← main (train.c:168)"), continuation
    lines indented two more; only a frame wider than a line is shortened."""
    title = clean(model.stack_title(doc, sid))
    if text_width(title) <= cols:
        return [title]
    lines: List[str] = []
    for i, piece in enumerate(title.split(" \u2190 ")):
        text = piece if i == 0 else "\u2190 " + piece
        width = cols if i == 0 else cols - 2
        if text_width(text) > width:
            fn, sep, where = text.partition(" (")
            room = width - text_width(sep + where)
            text = (cut_middle(fn, room) + sep + where) if sep and room >= 8 else cut_middle(text, width)
        lines.append(text if i == 0 else "  " + text)
    return lines


def _places(doc: Doc) -> Tuple[Dict[int, Dict[Tuple[int, str], int]], Dict[str, int]]:
    """Live bytes by stack and (device, kind), and pinned host memory by kind:
    the devices[] entries hold GPUs only."""
    by_stack: Dict[int, Dict[Tuple[int, str], int]] = {}
    host: Dict[str, int] = {}
    for a in doc["allocations"]:
        kind = a.get("kind") or "?"
        dev = a.get("device")
        dev = -1 if dev is None else dev
        m = by_stack.setdefault(a.get("stack") or 0, {})
        m[(dev, kind)] = m.get((dev, kind), 0) + a["size"]
        if dev < 0:
            host[kind] = host.get(kind, 0) + a["size"]
    return by_stack, host


def kind_bytes(doc: Doc) -> Dict[Tuple[int, str], int]:
    """Live bytes by (device, kind): devices[].kinds, and host memory (device
    -1) from the allocations (a lean document's "_host_bytes")."""
    out: Dict[Tuple[int, str], int] = {}
    for d in doc["devices"]:
        for k, b in d["kinds"].items():
            if b:
                out[(d["index"], k)] = out.get((d["index"], k), 0) + b
    host = doc["_host_bytes"] if doc.get("_lean") else _places(doc)[1]
    for k, b in host.items():
        out[(-1, k)] = out.get((-1, k), 0) + b
    return out


# ---------------------------------------------------------------------------
# One snapshot

def facts(doc: Doc, top: int = 10, frames: int = 3, level: str = "tensors") -> Dict[str, Any]:
    """What the summary of one snapshot shows, as data (bytes as ints); the
    three largest sites with `frames` frames each, the others with one. The
    sites, suspects and tags are those of the level asked for: "tensors"
    (model.tensor_level: a framework's tensors and the memory outside its
    segments, where the snapshot has them) or "driver"."""
    lv = model.level(doc, level)
    by_stack, host = _places(lv)
    s = doc["summary"]
    out: Dict[str, Any] = {
        "reason": doc["reason"], "seq": doc["seq"], "time_ns": doc["time_ns"],
        "label": model.process_label(doc), "argv": list(doc["argv"]),
        "summary": dict(s),
    }

    dg = doc.get("diagnosis")
    if dg:
        primary = dg["verdict"]
        out["diagnosis"] = {
            "verdict": primary, "summary": dg["summary"],
            # What to try: the snapshot's own, each backed by its numbers.
            "remedies": [{"name": r["name"], "text": r["text"], "stack": r.get("stack") or 0}
                         for r in dg.get("remedies") or []],
            "others": [{"name": v["name"], "bytes": v.get("bytes"), "detail": v.get("detail") or ""}
                       for v in dg["verdicts"]
                       if v["name"] not in (primary, "cache_released") and not v.get("primary")],
            # Beside the verdict: the episode's release of memory did not help.
            "released": next((v.get("detail") or "" for v in dg["verdicts"]
                              if v["name"] == "cache_released" and not v.get("primary")), None),
            "growth_stacks": list(dg["numbers"].get("growth_stacks") or [])[:3],
        }
    fr = doc.get("failed_request")
    if fr:
        out["failed"] = dict(fr)
    ep = doc.get("episode")
    if ep:
        out["episode"] = episode_facts(ep)
    fw = doc.get("framework")
    if fw:
        out["framework"] = framework_facts(fw)

    devs = []
    for d in sorted(doc["devices"], key=lambda d: d["index"]):
        devs.append({"index": d["index"], "total": d.get("total_bytes"), "free": d.get("free_bytes"),
                     "live": d["live_bytes"], "kinds": _sorted_kinds(d["kinds"]),
                     "pools": d.get("pools"), "other": d.get("other_processes"),
                     "pages": d.get("pages"), "fragmentation": d.get("fragmentation")})
    out["devices"] = devs
    out["host"] = _sorted_kinds(host)

    tensors = doc.get("tensors") if lv is not doc else None
    out["level"] = {"name": "tensors" if tensors else "driver", "framework": (tensors or {}).get("framework"),
                    "other": bool(doc.get("tensors")) and not tensors,
                    "devices": [dict(x) for x in (doc.get("tensors") or {}).get("devices") or []]}
    live_total = s["live_bytes"]
    sites = []
    live_sites = [g for g in model.site_groups(lv) if g["live_bytes"] or g["live_count"]]
    for rank, x in enumerate(live_sites[:top]):
        st = doc["_stack_by_id"].get(x["stack"]) if x["stack"] else None
        where: Dict[Tuple[int, str], int] = {}
        calls: List[str] = []
        for sid in x["stacks"]:
            for k, b in by_stack.get(sid, {}).items():
                where[k] = where.get(k, 0) + b
            call = (doc["_stack_by_id"].get(sid) or {}).get("runtime_call")
            if call and call not in calls:
                calls.append(call)
        places = sorted(where.items(), key=lambda kv: (-kv[1], kv[0]))
        sites.append({"stack": x["stack"], "live_bytes": x["live_bytes"], "live_count": x["live_count"],
                      "tensors": bool(places) and all(k == model.TENSOR_KIND for (_, k), _ in places),
                      "share": _percent(x["live_bytes"], live_total),
                      "places": [(dev, kind, b) for (dev, kind), b in places],
                      "runtime_call": ", ".join(calls) or None,
                      "tags": list(st["tags"]) if st else [],
                      "growing": x["growing"], "suspect": x["suspect"], "growth_bytes": x["growth_bytes"],
                      "frames": site_frames(doc, x["stack"], frames if rank < 3 else 1)})
    out["sites"] = sites
    out["sites_live"] = len(live_sites)

    lk = doc.get("leaks")
    if lk:
        counted = [g for g in lk["sites"] if g["counted"]]
        out["leaks"] = {
            "totals": lk["totals"], "classes": lk["classes"], "exit_status": lk.get("exit_status"),
            "scan": lk["scan"], "suppressions_error": lk.get("suppressions_error"),
            "counted": counted[:top], "counted_sites": len(counted),
            "not_counted": [g for g in lk["sites"] if not g["counted"]][:top],
            "not_counted_sites": sum(1 for g in lk["sites"] if not g["counted"]),
            "rules": lk["suppressions"],
        }

    suspects: Dict[int, Dict[str, Any]] = {}
    for x in lv["sites"]:
        if x["suspect"] or x["growing"]:
            suspects[x["stack"]] = {"stack": x["stack"], "live_bytes": x["live_bytes"],
                                    "peak_bytes": x["peak_bytes"], "growth_bytes": x["growth_bytes"],
                                    "rising": x["rising_windows"], "falling": x["falling_windows"],
                                    "growing": x["growing"]}
    for x in (lk["suspects"] if lk else []):
        suspects.setdefault(x["stack"], {"stack": x["stack"], "live_bytes": x["live_bytes"],
                                         "peak_bytes": x["peak_bytes"], "growth_bytes": x["growth_bytes"],
                                         "rising": x["rising_windows"], "falling": x["falling_windows"],
                                         "growing": False})
    out["suspects"] = sorted(suspects.values(), key=lambda x: (-x["growth_bytes"], -x["live_bytes"]))

    tags: Dict[str, int] = {}
    untagged = 0
    for x in lv["sites"]:
        st = doc["_stack_by_id"].get(x["stack"]) if x["stack"] else None
        if st and st["tags"]:
            for t in dict.fromkeys(st["tags"]):
                tags[t] = tags.get(t, 0) + x["live_bytes"]
        else:
            untagged += x["live_bytes"]
    out["tags"] = sorted(tags.items(), key=lambda tb: (-tb[1], tb[0]))
    out["untagged_bytes"] = untagged

    warnings = [(k, doc["stats"][k], why) for k, why in _WARN_STATS.items() if doc["stats"].get(k)]
    if doc["series"].get("columns_dropped"):
        warnings.append(("columns_dropped", doc["series"]["columns_dropped"],
                         "series changes not shown (more than 64 device and kind pairs)"))
    out["warnings"] = warnings
    return out


def episode_facts(ep: Dict[str, Any]) -> Dict[str, Any]:
    """An oom snapshot's episode (docs/snapshot-format.md, "episode"): its
    failures with the time since the first and what was freed before each,
    and the memory freed during it by stack, largest first."""
    first = ep["first_ns"]
    return {
        "id": ep["id"], "device": ep["device"], "failures": ep["failures"], "described": ep["described"],
        "end": ep["end"], "span_ns": ep["last_ns"] - first, "not_written": ep["not_written"],
        "listed": [dict(f, since_ns=f["time_ns"] - first) for f in ep["listed"]],
        "freed": {"bytes": ep["freed"]["bytes"], "count": ep["freed"]["count"],
                  "other_bytes": ep["freed"]["other_bytes"], "other_count": ep["freed"]["other_count"],
                  "sites": [dict(x) for x in ep["freed"]["sites"]]},
    }


# Block states PyTorch's allocator reports (torch.cuda.memory._snapshot()):
# what is handed out, and what is free inside a segment.
_ACTIVE = ("active_allocated", "active_pending_free")
_FREE = ("inactive",)


def _block_frame(b: Dict[str, Any], package: str) -> Optional[str]:
    """A block's innermost frame outside the framework's own package (its
    modules' forward, its autograd), else its innermost: `name (file:line)`."""
    frames = [f for f in b.get("frames") or [] if isinstance(f, dict) and (f.get("name") or f.get("filename"))]
    inside = (f"/{package}/", f"\\{package}\\")
    own = [f for f in frames if not any(x in str(f.get("filename") or "") for x in inside)]
    for f in own[:1] or frames[:1]:
        where = os.path.basename(str(f.get("filename") or "")) or "?"
        return f"{f.get('name') or '?'} ({where}:{f.get('line') or 0})"
    return None


def framework_facts(fw: Dict[str, Any]) -> Dict[str, Any]:
    """A snapshot's framework section (docs/snapshot-format.md,
    "framework"): its counters per device, and its segments with their
    blocks — most free bytes first, the fragmentation inside the allocator —
    each with its active and free bytes and largest free block."""
    segs = []
    for s in fw["segments"]:
        blocks = [b for b in s.get("blocks") or [] if isinstance(b, dict)]
        active = [b["size"] for b in blocks if b.get("state") in _ACTIVE]
        free = [b["size"] for b in blocks if b.get("state") in _FREE]
        segs.append({"device": s["device"], "address": s["address"], "size": s["total_size"],
                     "stream": s.get("stream"), "type": s.get("segment_type") or "",
                     "expandable": bool(s.get("is_expandable")), "joined": s["allocation"],
                     "active_bytes": sum(active), "active_count": len(active),
                     "free_bytes": sum(free), "free_count": len(free), "largest_free": max(free, default=0),
                     "blocks": [{"address": b.get("address"), "size": b["size"], "state": b.get("state") or "",
                                 "requested": b.get("requested_size"), "frame": _block_frame(b, fw["name"])} for b in blocks]})
    segs.sort(key=lambda x: (-x["free_bytes"], -x["size"], x["address"]))
    return {"name": fw["name"], "version": fw.get("version") or "", "file": fw.get("file"),
            "devices": [dict(x) for x in fw["devices"]], "segments": len(fw["segments"]),
            "joined": fw["segments_joined"], "truncated": bool(fw.get("truncated")), "by_free": segs}


def block_state(state: str) -> str:
    """A block's state in the views' words."""
    return "active" if state in _ACTIVE else "free" if state in _FREE else state


def summary(doc: Doc, width: int = 80, color: bool = False, top: int = 10, frames: int = 3,
            level: str = "tensors") -> str:
    """The terminal summary of one snapshot, its sites at the level asked
    for (facts())."""
    f = facts(doc, top, frames, level)
    f["frames_shown"] = frames
    t = _Text(width, color)
    _header(t, doc, f)
    if "diagnosis" in f or "failed" in f:
        _diagnosis(t, doc, f)
    if "episode" in f:
        _episode(t, doc, f["episode"], top)
    if "framework" in f:
        _framework(t, f["framework"], top)
    _devices(t, f)
    _sites(t, doc, f)
    if "leaks" in f:
        _leaks(t, doc, f["leaks"], top)
    _suspects(t, doc, f["suspects"], top)
    _fragmentation(t, f, top)
    _tags(t, f, top)
    _warnings(t, f)
    return t.text()


def _header(t: _Text, doc: Doc, f: Dict[str, Any]) -> None:
    oom = f["reason"] == "oom"
    what = "OUT OF MEMORY" if oom else f"snapshot {_REASONS.get(f['reason'], f['reason'])}"
    t.add(("gpumemtrace: ", "bold"), (what, "bold red" if oom else "bold"), (" \u2014 ", ""),
          (f["label"], "bold"))
    cmd = shlex.join(f["argv"]) if f["argv"] else "(command line not known)"
    t.add("  command: ", (cmd, "cyan"))
    t.wrap(f"{fmt_time(f['time_ns'])} (snapshot {f['seq']} of this process, reason {f['reason']})",
           indent=0, hang=11, first=["  taken:   "])
    s = f["summary"]
    t.flow("  live:    ", [(fmt_bytes(s["live_bytes"]), "bold"),
                            f"in {_plural(s['live_count'], 'allocation')};",
                            f"peak {fmt_bytes(s['peak_bytes'])};",
                            f"{_plural(s['total_allocs'], 'allocation')} and "
                            f"{_plural(s['total_frees'], 'free')} so far"], hang=11, sep=" ")


def _diagnosis(t: _Text, doc: Doc, f: Dict[str, Any]) -> None:
    dg = f.get("diagnosis")
    if dg:
        t.heading("Why it failed")
        t.add("  verdict: ", (dg["verdict"], "bold red"))
        t.wrap(dg["summary"], indent=2, hang=2)
        for r in dg["remedies"]:
            t.wrap(r["text"], indent=2, hang=7, style="green", first=[("try: ", "green")])
            if r["stack"]:
                t.add("       at ", site_title(doc, r["stack"], t.width - 10))
        # A growing site a remedy named above is not named again.
        named = {r["stack"] for r in dg["remedies"] if r["stack"]}
        for sid in dg["growth_stacks"]:
            if sid not in named:
                t.add("  growing: ", site_title(doc, sid, t.width - 11))
        if dg.get("released"):
            t.wrap(dg["released"], indent=2, hang=4, first=[("cache released: ", "yellow")])
        if dg["others"]:
            t.wrap("other causes that alone would have made room:", indent=2, hang=4)
            for v in dg["others"]:
                head = f"    {v['name']} ({fmt_bytes(v['bytes'])}): "
                t.wrap(v["detail"], indent=0, hang=6, first=[head])
    fr = f.get("failed")
    if fr:
        if not dg:
            t.heading("Failed request")
        if fr.get("refused_by") == "framework":
            what = f"refused by {fr['api']}'s own allocator on {device_name(fr['device'])}"
        elif fr["device"] < 0:
            what = f"of pinned host memory by {fr['api']}"
        else:
            kind = f"{fr['kind']} memory " if fr.get("kind") else ""
            what = f"of {kind}by {fr['api']} on {device_name(fr['device'])}"
        extra = []
        if fr.get("refused_by") == "framework":
            extra.append("no driver call failed")
        elif fr.get("result") is not None:
            extra.append(f"CUresult {fr['result']}")
        if fr.get("failure") is not None:
            extra.append(f"failure #{fr['failure']}")
        t.wrap(what + (f" ({', '.join(extra)})" if extra else ""),
               indent=0, hang=11, first=["  request: ", (fmt_bytes(fr["size"]), "bold"), " "])
        shown = site_frames(doc, fr["stack"], f.get("frames_shown", 3))
        for i, ft in enumerate(shown):
            t.add("    " + ("at " if i == 0 else "\u2190  " if ft != "…" else "   "), ft)


def _episode(t: _Text, doc: Doc, ep: Dict[str, Any], top: int) -> None:
    n = ep["failures"]
    t.heading("Out-of-memory episode",
              f"#{ep['id']}: {_plural(n, 'failure')} over {fmt_duration(ep['span_ns'])}")
    if ep["described"] == 0:
        t.wrap(f"this snapshot was taken when the episode ended ({ep['end']}), after "
               f"{_plural(ep['not_written'], 'failure')} no snapshot was taken at", indent=2, hang=4)
    elif n > 1:
        t.wrap(f"this snapshot is of failure {ep['described']} of {n}, the last the program was told of"
               if ep["described"] == n else f"this snapshot is of failure {ep['described']} of {n}",
               indent=2, hang=4)
    for i, fl in enumerate(ep["listed"]):
        if i == len(ep["listed"]) - 1 and n > len(ep["listed"]):
            t.add(f"  … {_plural(n - len(ep['listed']), 'failure')} more, then")
        when = "first" if i == 0 else f"+{fmt_duration(fl['since_ns'])}"
        freed = (f"after {fmt_bytes(fl['freed_bytes'])} in {_plural(fl['freed_count'], 'allocation')} freed"
                 if fl["freed_bytes"] else "nothing freed since" if i else "")
        t.flow(f"  #{fl['failure']:<4}", [f"{when:>10}", (fmt_bytes(fl["size"]), "bold"), f"by {fl['api']}",
                                       f"live {fmt_bytes(fl['live_bytes'])}"] + ([freed] if freed else []),
               hang=8)
    fd = ep["freed"]
    if fd["bytes"]:
        t.wrap(f"the program freed {fmt_bytes(fd['bytes'])} in {_plural(fd['count'], 'allocation')} during "
               "the episode and still failed: what is left is live", indent=2, hang=4)
        for x in fd["sites"][:top]:
            t.add("    ", (fmt_bytes(x["bytes"]), "bold"), f"  {_plural(x['count'], 'alloc')}  {x['kind']}")
            t.add("      ", site_title(doc, x["stack"], t.width - 6))
        if fd["other_bytes"]:
            t.add(f"    {fmt_bytes(fd['other_bytes'])} in {_plural(fd['other_count'], 'allocation')} of other sites")


# Segments and blocks of each segment the summary lists at most.
SEGMENTS_SHOWN = 5
BLOCKS_SHOWN = 6


def _framework(t: _Text, fw: Dict[str, Any], top: int) -> None:
    """The framework allocator's own counters (PyTorch: memory_allocated,
    memory_reserved), how its segments joined the driver's memory, and its
    two levels: the segments with most free bytes, each with its blocks."""
    t.heading("Framework's allocator", f"{fw['name']} {fw['version']}")
    if fw["segments"]:
        t.wrap(f"{fw['joined']} of {_plural(fw['segments'], 'segment')} joined to the driver's allocations",
               indent=2, hang=4)
    if not fw["devices"]:
        t.wrap("no counters: its allocator keeps no pool (the request alone was handed over)", indent=2, hang=4)
    for d in fw["devices"]:
        words: List[Any] = [f"allocated {fmt_bytes(d['allocated_bytes'])},", f"reserved {fmt_bytes(d['reserved_bytes'])},",
                            ("reserved but unallocated " + fmt_bytes(d["reserved_unallocated_bytes"]), "bold")]
        if d.get("largest_free_block_bytes") is not None:
            words.append(f"(largest free block {fmt_bytes(d['largest_free_block_bytes'])})")
        if d.get("limit_bytes"):
            words.append(f"of a limit of {fmt_bytes(d['limit_bytes'])}")
        if d.get("peak_allocated_bytes") is not None:
            words.append(f"(peak allocated {fmt_bytes(d['peak_allocated_bytes'])})")
        t.flow(f"  {device_name(d['device'])}: ", words, hang=4, sep=" ")
    segs = fw["by_free"]
    shown = segs[:min(top, SEGMENTS_SHOWN)]
    if shown:
        t.add(f"  segments, most free first ({len(shown)} of {fw['segments']}):")
    for s in shown:
        t.flow(f"    {fmt_bytes(s['size'])} at {s['address']:#x} on {device_name(s['device'])} ",
               [f"({s['type'] or 'segment'}, stream {s['stream'] if s['stream'] is not None else '?'}"
                + (", expandable)" if s["expandable"] else "):"),
                f"{fmt_bytes(s['active_bytes'])} in {_plural(s['active_count'], 'active block')},",
                (f"{fmt_bytes(s['free_bytes'])} free in {s['free_count']}", "bold") if s["free_count"]
                else "no free block"]
               + ([f"(largest {fmt_bytes(s['largest_free'])})"] if s["free_count"] > 1 else [])
               + ([] if s["joined"] else ["— no driver allocation starts there"]), hang=6, sep=" ")
        for b in s["blocks"][:BLOCKS_SHOWN]:
            t.add(f"      {fmt_bytes(b['size']):>9}  {block_state(b['state']):<7}"
                  + (f"  {b['frame']}" if b["frame"] and block_state(b["state"]) != "free" else ""))
        if len(s["blocks"]) > BLOCKS_SHOWN:
            t.add(f"      … {_plural(len(s['blocks']) - BLOCKS_SHOWN, 'more block')}")
    if fw.get("file"):
        t.wrap(fw["file"], indent=2, hang=4, first=["its own snapshot: "])


def _devices(t: _Text, f: Dict[str, Any]) -> None:
    if not f["devices"] and not f["host"]:
        return
    t.heading("Devices")
    for d in f["devices"]:
        head = f"  {device_name(d['index'])}: "
        if d["total"] is not None and d["free"] is not None:
            used = d["total"] - d["free"]
            t.flow(head, [(fmt_bytes(d["live"]), "bold"), "live here;", f"{fmt_bytes(d['total'])} total,",
                          f"{fmt_bytes(used)} used,",
                          (f"{fmt_bytes(d['free'])} free", "bold" if d["free"] < d["total"] // 20 else "")],
                   hang=4, sep=" ")
        else:
            t.flow(head, [(fmt_bytes(d["live"]), "bold"), "live here", "(free and total not asked)"],
                   hang=4, sep=" ")
        t.flow("    by kind: ", _kinds_list(d["kinds"]), hang=6, sep=", ")
        for x in f["level"]["devices"]:
            if x["device"] == d["index"]:
                # The same live bytes, by level: they add up (tensors.h).
                name = f["level"]["framework"] or "framework"
                t.flow("    by level: ", [f"{name}'s tensors {fmt_bytes(x['tensor_bytes'])}",
                                          f"free inside its segments {fmt_bytes(x['cached_bytes'])}",
                                          f"not {name}'s {fmt_bytes(x['other_bytes'])}"], hang=6, sep=", ")
        p = d["pools"]
        if p:
            unused = p["reserved_bytes"] - p["used_bytes"]
            t.wrap(f"{fmt_bytes(p['reserved_bytes'])} reserved, {fmt_bytes(p['used_bytes'])} used"
                   + (f", {fmt_bytes(unused)} unused" if unused > 0 else ""),
                   indent=4, hang=6, first=[f"pools ({p['count']}): "])
        o = d["other"]
        if o is not None:
            if o.get("known"):
                procs = ", ".join(f"pid {p['pid']} {fmt_bytes(p['bytes'])}" for p in o.get("processes", [])[:3])
                t.wrap(f"{fmt_bytes(o['bytes'])} in {o['count']}"
                       + (f" ({procs}{', …' if len(o.get('processes', [])) > 3 else ''})" if procs else ""),
                       indent=4, hang=6, first=["other processes: "])
            else:
                t.wrap(o.get("why") or "not known", indent=4, hang=6, first=["other processes: unknown: "])
    if f["host"]:
        t.add("  host: ", (fmt_bytes(sum(b for _, b in f["host"])), "bold"),
              " live (" + _kinds_text([("pinned" if k == "host" else k, b) for k, b in f["host"]]) + ")")


def place_text(dev: int, kind: str) -> str:
    """Where memory lies: "async on GPU 0", "pinned host", "registered host",
    "tensors on GPU 0"."""
    if dev < 0:
        return "pinned host" if kind == "host" else f"{kind} host"
    return f"{kind + 's' if kind == model.TENSOR_KIND else kind} on {device_name(dev)}"


def _places_text(places: Sequence[Tuple[int, str, int]]) -> str:
    """"async on GPU 0", "device on GPUs 0, 1", "pinned host and 2 more"."""
    kinds = {k for _, k, _ in places}
    gpus = sorted({d for d, _, _ in places if d >= 0})
    if len(kinds) == 1 and (not gpus or len(gpus) == len(places)):
        kind = places[0][1]
        if not gpus:
            return place_text(-1, kind)
        kind = kind + "s" if kind == model.TENSOR_KIND else kind
        return f"{kind} on GPU {gpus[0]}" if len(gpus) == 1 else \
            f"{kind} on GPUs {', '.join(str(g) for g in gpus)}"
    dev, kind, _ = places[0]
    return f"{place_text(dev, kind)} and {len(places) - 1} more"


def _site_head(x: Dict[str, Any]) -> List[Span]:
    spans: List[Span] = [(fmt_bytes(x["live_bytes"]), "bold")]
    if x["share"]:
        spans.append(x["share"])
    spans.append(_plural(x["live_count"], "tensor" if x.get("tensors") else "alloc"))
    if x["places"]:
        spans.append(_places_text(x["places"]))
    if x["runtime_call"]:
        spans.append((x["runtime_call"], "cyan"))
    if x["growing"]:
        spans.append((f"growing +{fmt_bytes(x['growth_bytes'])}", "yellow"))
    elif x["suspect"]:
        spans.append(("leak suspect", "yellow"))
    if x["tags"]:
        spans.append(("[" + " \u203a ".join(x["tags"]) + "]", "magenta"))
    return spans


def _level_note(t: _Text, lv: Dict[str, Any]) -> None:
    """Which level the sites are of, and where the other one is."""
    name = lv["framework"] or "the framework"
    if lv["name"] == "tensors":
        cached = sum(d["cached_bytes"] for d in lv["devices"])
        t.wrap(f"{name}'s tensors, and the memory outside its segments; {fmt_bytes(cached)} more lie free "
               f"inside its segments (its cache). Its segments as the driver sees them: --level driver",
               indent=2, hang=2, style="dim")
    elif lv["other"]:
        t.wrap(f"the driver's allocations: {name}'s segments, not its tensors (--level tensors)",
               indent=2, hang=2, style="dim")


def _sites(t: _Text, doc: Doc, f: Dict[str, Any]) -> None:
    if not f["sites"]:
        t.heading("Top sites by live bytes", "none live")
        _level_note(t, f["level"])
        return
    shown = len(f["sites"])
    t.heading("Top sites by live bytes",
              f"{shown} of {f['sites_live']}" if shown < f["sites_live"] else _plural(shown, "site"))
    _level_note(t, f["level"])
    num_w = len(str(shown)) + 1
    for i, x in enumerate(f["sites"]):
        pad = " " * (num_w + 4)
        t.flow(f"  {i + 1:>{num_w - 1}}. ", _site_head(x), hang=len(pad))
        for j, ft in enumerate(x["frames"]):
            lead = "" if j == 0 else "\u2190 " if ft != "…" else "  "
            t.add(pad, (lead + ft, "" if j == 0 else "dim"))


def _leaks(t: _Text, doc: Doc, lk: Dict[str, Any], top: int) -> None:
    tot = lk["totals"]
    c = tot["counted"]
    if c["count"]:
        t.heading("Leak check", "at exit")
        t.add("  ", (f"{fmt_bytes(c['bytes'])} in {_plural(c['count'], 'allocation')}", "bold red"),
              f" count as leaks (classes: {', '.join(lk['classes']) or 'none'})")
    else:
        t.heading("Leak check", "at exit")
        t.add("  ", ("no leaks count", "green"), f" (classes: {', '.join(lk['classes']) or 'none'})")
    parts = [f"{name} {fmt_bytes(tot[k]['bytes'])} in {tot[k]['count']}"
             for k, name in (("leaked", "leaked"), ("referenced", "still referenced"),
                             ("cached", "cached"), ("suppressed", "suppressed"))]
    t.wrap(" \u00b7 ".join(parts), indent=2, hang=4)
    if lk["exit_status"] is not None:
        t.add(f"  the program exited with status {lk['exit_status']}")
    for i, g in enumerate(lk["counted"]):
        cls = "leaked" if g["class"] == "leaked" else "still referenced" if g["class"] == "referenced" else g["class"]
        kinds = [k for k, _ in _sorted_kinds(g["kinds"])]
        gpus = [d for d in g["devices"] if d >= 0]
        where = ", ".join("pinned host" if k == "host" else k for k in kinds)
        if gpus:
            where += " on " + ", ".join(device_name(d) for d in gpus)
        t.flow(f"  {i + 1}. ", [(cls, "red"), (fmt_bytes(g["bytes"]), "bold"),
                                f"in {_plural(g['count'], 'allocation')}" + (f" ({where})" if where else "")],
               hang=5, sep=" ")
        t.add("     at ", site_title(doc, g["stack"], t.width - 8))
        rf = g.get("referenced_from")
        if rf:
            held = rf.get("what") or rf.get("region") or "host memory"
            t.add("     held by ", held, f" at {rf['address']}" if rf.get("address") and rf.get("what")
                  and rf["address"] not in rf["what"] else "")
        elif g["class"] == "leaked":
            t.add("     no host memory holds its address", style="dim")
    if lk["counted_sites"] > len(lk["counted"]):
        t.add(f"  … {lk['counted_sites'] - len(lk['counted'])} more sites count", style="dim")
    for g in lk["not_counted"]:
        why = g.get("suppressed_by") or g.get("rule") or f"class {g['class']} does not count"
        src = f" ({g['rule_source']})" if g.get("rule_source") else ""
        t.add(f"  not counted: {g['class']} {fmt_bytes(g['bytes'])} in {g['count']} at ",
              site_title(doc, g["stack"], max(20, t.width // 2)), f": {why}{src}")
    if lk["not_counted_sites"] > len(lk["not_counted"]):
        t.add(f"  … {lk['not_counted_sites'] - len(lk['not_counted'])} more not counted", style="dim")
    if lk["rules"]:
        t.add("  rules that matched:")
        for r in lk["rules"][:top]:
            src = r.get("source") or "?"
            if r.get("line") is not None:
                src += f":{r['line']}"
            t.add(f"    {r['rule']} ({src}): {_plural(r['hits'], 'hit')}, {fmt_bytes(r['bytes'])}")
    if lk["suppressions_error"]:
        t.wrap(lk["suppressions_error"], indent=2, hang=4, style="yellow",
               first=[("suppressions file not applied: ", "yellow")])
    sc = lk["scan"]
    if sc.get("done"):
        secs = sc.get("seconds")
        t.wrap(f"scan: {_plural(sc.get('mappings') or 0, 'mapping')}, {fmt_bytes(sc.get('bytes'))} read"
               + (f" in {secs:.2f} s" if secs is not None else "")
               + (f"; {fmt_bytes(sc['excluded_bytes'])} of driver bookkeeping left out"
                  if sc.get("excluded_bytes") else ""), indent=2, hang=4, style="dim")
    else:
        t.wrap(sc.get("why") or "reason not given", indent=2, hang=4, style="yellow",
               first=[("no scan (everything not cached counts as leaked): ", "yellow")])


def _suspects(t: _Text, doc: Doc, sus: List[Dict[str, Any]], top: int) -> None:
    if not sus:
        return
    t.heading("Leak suspects", "sites whose live bytes kept rising")
    for x in sus[:top]:
        t.add("  ", (f"+{fmt_bytes(x['growth_bytes'])}", "yellow bold"), "  ",
              site_title(doc, x["stack"], t.width - 4 - text_width(fmt_bytes(x["growth_bytes"])) - 3))
        now = "still growing; " if x["growing"] else ""
        t.add(f"      {now}rose in {x['rising']} rounds, fell in {x['falling']}; "
              f"peak {fmt_bytes(x['peak_bytes'])}, {fmt_bytes(x['live_bytes'])} live", style="dim")
    if len(sus) > top:
        t.add(f"  … {len(sus) - top} more", style="dim")


def _p2(n: int) -> str:
    """A size class bound: "512 B", "32 MiB", "1 GiB"."""
    for i, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")):
        if n < 1024 ** (i + 1) or unit == "EiB":
            v = n / 1024 ** i
            return f"{v:.0f} {unit}" if v == int(v) else fmt_bytes(n)
    return fmt_bytes(n)


def _fragmentation(t: _Text, f: Dict[str, Any], top: int) -> None:
    for d in f["devices"]:
        pg, fr = d["pages"], d["fragmentation"]
        if not pg and not fr:
            continue
        gran = pg["granularity"] if pg else None
        t.heading(f"Fragmentation on {device_name(d['index'])}",
                  f"pages of {fmt_bytes(gran)}" if gran else "")
        if pg:
            t.add(f"  {_plural(pg['pages'], 'page')} hold device memory, {pg['partial']} partly used: ",
                  (f"{fmt_bytes(pg['stranded_bytes'])} stranded", "bold" if pg["stranded_bytes"] else ""))
            occ = pg["occupancy"]
            t.add("  pages by use: " + ", ".join(
                f"{label} {n}" for label, n in zip(("<25%", "<50%", "<75%", "<100%", "full"), occ)), style="dim")
        if fr:
            parts = []
            if fr.get("largest_fit_bytes") is not None:
                whole = fr.get("free_in_whole_pages")
                free = fr.get("free_bytes")
                parts.append(f"largest fit {fmt_bytes(fr['largest_fit_bytes'])}"
                             + (f" of {fmt_bytes(free)} free" if free is not None else "")
                             + (f" ({fmt_bytes(whole)} in whole pages)" if whole is not None else ""))
            parts.append(f"largest hole in a used page {fmt_bytes(fr['largest_hole_bytes'])}")
            if fr.get("pool_unused_bytes") is not None:
                parts.append(f"pools leave {fmt_bytes(fr['pool_unused_bytes'])} unused")
            t.wrap("; ".join(parts), indent=2, hang=4)
            classes = fr["size_classes"]
            if classes:
                _histogram(t, classes, top)


def _histogram(t: _Text, classes: List[Dict[str, Any]], top: int) -> None:
    """Live allocations by size class, a bar per class (by bytes)."""
    shown = classes
    if len(classes) > top:
        keep = sorted(sorted(classes, key=lambda c: -c["bytes"])[:top], key=lambda c: c["min"])
        shown = keep
    labels = [f"{_p2(c['min'])}\u2013{_p2(c['max'] + 1)}" for c in shown]
    counts = [str(c["count"]) for c in shown]
    sizes = [fmt_bytes(c["bytes"]) for c in shown]
    lw, cw, sw = (max(len(x) for x in col) for col in (labels, counts, sizes))
    bar_room = max(0, min(40, t.width - (4 + lw + 2 + cw + 2 + sw + 2)))
    most = max(c["bytes"] for c in shown) or 1
    t.add("  size classes (count, bytes):", style="dim")
    for c, lab, n, sz in zip(shown, labels, counts, sizes):
        bar = "\u2588" * max(1 if c["bytes"] else 0, round(bar_room * c["bytes"] / most)) if bar_room else ""
        t.add(f"    {lab:>{lw}}  {n:>{cw}}  {sz:>{sw}}  ", (bar, "blue"))
    if len(shown) < len(classes):
        t.add(f"    … {len(classes) - len(shown)} smaller classes", style="dim")


def _tags(t: _Text, f: Dict[str, Any], top: int) -> None:
    if not f["tags"]:
        return
    t.heading("Region tags", "live bytes allocated under each (gmt_tag_push)")
    w = max([text_width(clean(name)) for name, _ in f["tags"][:top]] + [len("(no tag)")])
    w = min(w, max(10, t.width // 2))
    for name, b in f["tags"][:top]:
        n = clean(name)
        n = cut(n, w)
        t.add("  ", (n, "magenta"), " " * (w - text_width(n) + 2), fmt_bytes(b))
    if len(f["tags"]) > top:
        t.add(f"  … {len(f['tags']) - top} more tags", style="dim")
    t.add("  ", "(no tag)".ljust(w + 2), fmt_bytes(f["untagged_bytes"]), style="dim")


def _warnings(t: _Text, f: Dict[str, Any]) -> None:
    if not f["warnings"]:
        return
    t.heading("Tracer warnings", "the record may be incomplete")
    for k, n, why in f["warnings"]:
        t.wrap(why, indent=2, hang=6, style="", first=[(f"{k} = {n}: ", "yellow")])


# ---------------------------------------------------------------------------
# Two snapshots

def diff_facts(old: Doc, new: Doc, top: int = 10, level: str = "tensors") -> Dict[str, Any]:
    """What changed from old to new, as data; the sites at the level asked
    for where both snapshots have it (model.levels)."""
    (lo, ln), level_name = model.levels([old, new], level)
    rows = model.diff(lo, ln)
    old_keys = {model.stack_key(lo, s["stack"]) for s in lo["sites"]}
    new_keys = {model.stack_key(ln, s["stack"]) for s in ln["sites"]}
    grew, added, shrank, gone = [], [], [], []
    for r in rows:
        if r["key"] not in old_keys:
            added.append(r)
        elif r["key"] not in new_keys or (r["new_bytes"] == 0 and r["new_count"] == 0):
            gone.append(r)
        elif r["delta_bytes"] > 0 or (r["delta_bytes"] == 0 and r["delta_count"] > 0):
            grew.append(r)
        else:
            shrank.append(r)
    shrank.sort(key=lambda r: (r["delta_bytes"], r["delta_count"], r["title"]))
    gone.sort(key=lambda r: (r["delta_bytes"], r["title"]))
    ok, nk = kind_bytes(old), kind_bytes(new)
    kinds = [{"device": dev, "kind": kind, "old": ok.get((dev, kind), 0), "new": nk.get((dev, kind), 0),
              "delta": nk.get((dev, kind), 0) - ok.get((dev, kind), 0)}
             for dev, kind in sorted(set(ok) | set(nk), key=lambda dk: (dk[0] < 0, dk))]
    same = (old["pid"] == new["pid"] and old["process"].get("host") == new["process"].get("host"))
    return {
        "old": {"label": model.process_label(old), "reason": old["reason"], "seq": old["seq"],
                "time_ns": old["time_ns"]},
        "new": {"label": model.process_label(new), "reason": new["reason"], "seq": new["seq"],
                "time_ns": new["time_ns"]},
        "reversed": old["time_ns"] > new["time_ns"],
        "same_process": same,
        "totals": {k: (old["summary"][k], new["summary"][k], new["summary"][k] - old["summary"][k])
                   for k in ("live_bytes", "live_count", "peak_bytes", "total_allocs", "total_frees")},
        "kinds": kinds,
        "grew": grew, "new_sites": added, "shrank": shrank, "gone": gone,
        "unchanged_sites": len(old_keys & new_keys) - len(grew) - len(shrank) - len(gone),
        "level": level_name, "framework": (new.get("tensors") or {}).get("framework"),
    }


def _delta_style(n: int) -> str:
    return "red" if n > 0 else "green" if n < 0 else "dim"


def diff_text(old: Doc, new: Doc, width: int = 80, color: bool = False, top: int = 10,
              level: str = "tensors") -> str:
    """What grew from old to new (the order given), by site, device and kind."""
    f = diff_facts(old, new, top, level)
    t = _Text(width, color)
    o, n = f["old"], f["new"]
    t.add(("gpumemtrace diff: ", "bold"), (o["label"] if f["same_process"] else
                                           f"{o['label']} \u2192 {n['label']}", "bold"))
    gap = n["time_ns"] - o["time_ns"]
    t.add(f"  first:  {o['reason']} #{o['seq']}, {fmt_time(o['time_ns'])}"
          + ("" if f["same_process"] else f" ({o['label']})"))
    t.add(f"  second: {n['reason']} #{n['seq']}, {fmt_time(n['time_ns'])}"
          + ("" if f["same_process"] else f" ({n['label']})"))
    if f["reversed"]:
        t.wrap(f"the first snapshot is the newer one ({fmt_duration(gap)} after the second): "
               "changes are shown from the first to the second as given; swap them for what grew "
               "over time", indent=2, hang=4, style="yellow", first=[("NOTE: ", "bold yellow")])
    else:
        t.add(f"  the second is {fmt_duration(gap)} later; changes are from the first (older) to the second")
    if not f["same_process"]:
        t.wrap("different processes: sites are matched by their frames, not their addresses",
               indent=2, hang=4, style="dim")
    if f["level"] == "tensors":
        t.wrap(f"sites: {f['framework'] or 'the framework'}'s tensors, and the memory outside its segments "
               "(--level driver: the driver's allocations)", indent=2, hang=4, style="dim")

    t.heading("Totals")
    names = {"live_bytes": "live", "peak_bytes": "peak", "live_count": "live allocations",
             "total_allocs": "allocations made", "total_frees": "frees"}
    for k in ("live_bytes", "peak_bytes", "live_count", "total_allocs", "total_frees"):
        a, b, d = f["totals"][k]
        if k.endswith("bytes"):
            t.add(f"  {names[k]:<17}{fmt_bytes(a):>10} \u2192 {fmt_bytes(b):>10}  ",
                  (fmt_delta(d) if d else "=", _delta_style(d)))
        else:
            t.add(f"  {names[k]:<17}{a:>10} \u2192 {b:>10}  ",
                  (("+" if d > 0 else "") + str(d) if d else "=",
                   _delta_style(d) if k == "live_count" else "dim"))
    if f["kinds"]:
        t.heading("By device and kind")
        for r in f["kinds"]:
            kind = "pinned" if r["device"] < 0 and r["kind"] == "host" else r["kind"]
            t.add(f"  {device_name(r['device']):<7}{kind:<11}{fmt_bytes(r['old']):>10} \u2192 "
                  f"{fmt_bytes(r['new']):>10}  ", (fmt_delta(r["delta"]) if r["delta"] else "=",
                                                    _delta_style(r["delta"])))

    def rows(title: str, rs: List[Dict[str, Any]], note: str) -> None:
        if not rs:
            return
        t.heading(title, f"{len(rs)}" + (f", top {top}" if len(rs) > top else "") + note)
        for r in rs[:top]:
            d = fmt_delta(r["delta_bytes"])
            counts = f"{r['old_count']}\u2192{r['new_count']}"
            head = f"  {d:>11}  {fmt_bytes(r['old_bytes']):>9} \u2192 {fmt_bytes(r['new_bytes']):<9} {counts:>9}  "
            doc = new if r["in"] == "new" else old
            room = t.width - text_width(head)
            title = site_title_lines(doc, r["stack"], room)
            if len(title) == 1:
                t.add((head[:13], _delta_style(r["delta_bytes"])), head[13:], title[0])
            else:
                # One site per block: the numbers, then the site on lines of its own.
                t.add((head[:13], _delta_style(r["delta_bytes"])), head[13:])
                for line in site_title_lines(doc, r["stack"], t.width - 4):
                    t.add("    ", line)
        if len(rs) > top:
            rest = sum(r["delta_bytes"] for r in rs[top:])
            t.add(f"  … {len(rs) - top} more, {fmt_delta(rest)} together", style="dim")

    rows("Grew", f["grew"], " (delta, bytes before \u2192 after, allocations)")
    rows("New sites", f["new_sites"], "")
    rows("Shrank", f["shrank"], "")
    rows("Gone", f["gone"], " (nothing live there now)")
    if not (f["grew"] or f["new_sites"] or f["shrank"] or f["gone"]):
        t.blank()
        t.add("  no site changed")
    return t.text()


# ---------------------------------------------------------------------------
# Several processes

# Above this many processes a site's line names the smallest and the largest
# rank rather than each.
_PER_RANK_MAX = 8


def merge_facts(docs: Sequence[Doc], top: int = 10, level: str = "tensors") -> Dict[str, Any]:
    """The merged report's data: model.merge() plus totals by kind, the
    out-of-memory processes and, per site, the smallest and largest
    process; the sites at the level asked for where every process has it
    (model.levels)."""
    leveled, level_name = model.levels(docs, level)
    m = model.merge(leveled)
    procs = m["processes"]
    ordered = [docs[i] for i in m["order"]]
    kinds: Dict[str, int] = {}
    for d in ordered:
        for (dev, kind), b in kind_bytes(d).items():
            kinds[kind] = kinds.get(kind, 0) + b
    ooms = []
    for p, d in zip(procs, ordered):
        if p["oom"]:
            dg = d.get("diagnosis")
            ooms.append({"label": p["label"], "request": p["oom"], "verdict": dg["verdict"] if dg else None,
                         "summary": dg["summary"] if dg else None})
    sites = []
    for s in m["sites"][:top]:
        per = s["by_process"][:len(procs)]
        having = [i for i, b in enumerate(per) if b]
        lo = min(range(len(per)), key=lambda i: (per[i], i)) if per else 0
        hi = max(range(len(per)), key=lambda i: (per[i], -i)) if per else 0
        sites.append(dict(s, by_process=per, processes_with=len(having), min_index=lo, max_index=hi))
    return {"processes": procs, "docs": ordered, "live_bytes": m["live_bytes"],
            "live_count": sum(p["live_count"] for p in procs),
            "peak_sum": sum(p["peak_bytes"] for p in procs),
            "kinds": sorted(kinds.items(), key=lambda kb: (-kb[1], kb[0])),
            "ooms": ooms, "sites": sites, "site_count": len(m["sites"]), "fleet": model.fleet(m, ordered),
            "all_sites": m["sites"], "level": level_name}


def _short_label(p: Dict[str, Any]) -> str:
    return f"rank {p['rank']}" if p["rank"] is not None else f"pid {p['pid']}"


# Processes named one by one in a group of the "Ranks" section, at most.
_GROUP_NAMED = 12


def _group_label(procs: List[Dict[str, Any]], idx: List[int]) -> str:
    """The processes of a group: "ranks 0-6, 8" when all have ranks."""
    ranks = sorted(procs[i]["rank"] for i in idx if procs[i]["rank"] is not None)
    if len(ranks) == len(idx):
        return f"rank{'s' if len(ranks) > 1 else ''} {model.ranges(ranks)}"
    names = [_short_label(procs[i]) for i in idx[:_GROUP_NAMED]]
    more = f" and {len(idx) - _GROUP_NAMED} more" if len(idx) > _GROUP_NAMED else ""
    return ", ".join(names) + more


def _ranks(t: "_Text", f: Dict[str, Any], docs: Sequence[Doc], top: int) -> None:
    """Many ranks at a glance (model.fleet): the skew, the outliers, the
    first to run out, the ranks grouped by their dominant site."""
    procs, fl = f["processes"], f["fleet"]
    t.heading("Ranks", "skew, first out of memory, dominant sites")
    for what in ("live", "peak"):
        k = fl[what]
        t.flow(f"  {what}: ", [(f"max {fmt_bytes(k['max'])} ({_short_label(procs[k['max_index']])}),", "bold"),
                               f"median {fmt_bytes(k['median'])},",
                               f"min {fmt_bytes(k['min'])} ({_short_label(procs[k['min_index']])})"], hang=4, sep=" ")
    out = sorted(set(fl["live"]["outliers"][:top] + fl["peak"]["outliers"][:top]),
                 key=lambda i: -abs(procs[i]["peak_bytes"] - fl["peak"]["median"]))
    if out:
        words = []
        for i in out[:top]:
            d = procs[i]["peak_bytes"] - fl["peak"]["median"]
            words.append((f"{_short_label(procs[i])} (peak {fmt_bytes(procs[i]['peak_bytes'])}, "
                          f"{'+' if d >= 0 else '-'}{fmt_bytes(abs(d))} from the median)", "yellow"))
        t.flow("  outliers: ", words, hang=4, sep=", ")
    else:
        t.add("  outliers: none (every rank within 5 % of the median, or three deviations)")
    first = fl["first_oom"]
    if first is not None:
        p = procs[first["index"]]
        doc = docs[first["index"]]
        after = (f"; the next {fmt_duration(first['next_ns'] - first['time_ns'])} later"
                 if first["next_ns"] is not None else "")
        t.flow("  first out of memory: ", [(_short_label(p), "bold red"),
                                           f"at {fmt_time(first['time_ns'])}{after}"], hang=4, sep=" ")
        if first["stack"]:
            t.add("    at ", site_title(doc, first["stack"], t.width - 7))
    groups = [g for g in fl["groups"] if g["site"] >= 0]
    if groups:
        t.add("  ranks by dominant site (the site holding most of each one's live bytes):")
        for g in groups[:top]:
            site = f["all_sites"][g["site"]]
            t.flow("    ", [(f"{len(g['processes'])}:", "bold"), _group_label(procs, g["processes"])],
                   hang=6, sep=" ")
            t.add("      ", site_title(docs[site["doc"]], site["stack"], t.width - 6))
        if len(groups) > top:
            t.add(f"    … and {len(groups) - top} more groups")


def merge_text(docs: Sequence[Doc], width: int = 80, color: bool = False, top: int = 10,
               level: str = "tensors") -> str:
    """One report of several processes (ranks): each process, the totals,
    the out-of-memory ones and the sites across them (at the level asked
    for, where every process has it)."""
    f = merge_facts(docs, top, level)
    t = _Text(width, color)
    procs = f["processes"]
    hosts = {p["host"] for p in procs if p["host"]}
    t.add(("gpumemtrace merge: ", "bold"), (f"{len(procs)} processes", "bold"),
          f" on {_plural(len(hosts), 'host')}" if hosts else "",
          (f", {len(f['ooms'])} out of memory" if f["ooms"] else ", none out of memory",
           "bold red" if f["ooms"] else ""))
    if f["level"] == "tensors":
        t.wrap("sites: the framework's tensors, and the memory outside its segments (--level driver: the "
               "driver's allocations)", indent=2, hang=4, style="dim")

    # The table: every process up to a limit; beyond it the out-of-memory
    # ones and the largest, in rank order.
    limit = max(top, 16)
    idx = list(range(len(procs)))
    if len(idx) > limit:
        pick = {i for i in idx if procs[i]["oom"]}
        for i in sorted(idx, key=lambda i: -procs[i]["live_bytes"]):
            if len(pick) >= limit:
                break
            pick.add(i)
        idx = sorted(pick)
    t.heading("Processes", "" if len(idx) == len(procs) else f"{len(idx)} of {len(procs)}: "
              "out of memory and largest")
    cols = [("rank", 0), ("pid", 1), ("host", 3), ("reason", 0), ("live", 0), ("peak", 2),
            ("allocs", 4), ("out of memory", 0)]
    cells = []
    for i in idx:
        p = procs[i]
        oom = ""
        if p["oom"]:
            r = p["oom"]
            oom = f"OOM: {fmt_bytes(r['size'])} on {'host' if r['device'] < 0 else device_name(r['device'])}"
        cells.append([("-" if p["rank"] is None else str(p["rank"])), str(p["pid"]), clean(p["host"] or "-"),
                      p["reason"], fmt_bytes(p["live_bytes"]), fmt_bytes(p["peak_bytes"]),
                      str(p["live_count"]), oom])
    widths = [max([len(c[0])] + [text_width(r[j]) for r in cells]) for j, c in enumerate(cols)]
    widths[2] = min(widths[2], 20)
    keep = list(range(len(cols)))

    def total(ks: List[int]) -> int:
        return 2 + sum(widths[k] for k in ks) + 2 * (len(ks) - 1)
    # Drop the columns that matter least until the table fits (the last one
    # may still be cut).
    for prio in (4, 3, 2, 1):
        if total(keep) <= t.width:
            break
        keep = [k for k in keep if cols[k][1] != prio]
    right = {1, 4, 5, 6}

    def row(vals: List[str], style: str = "") -> None:
        spans: List[Span] = ["  "]
        for n, k in enumerate(keep):
            v = cut(vals[k], widths[k])
            pad = " " * (widths[k] - text_width(v))
            cell = pad + v if k in right else (v if n == len(keep) - 1 else v + pad)
            spans.append((cell, "bold red" if k == 7 and v else style))
            if n < len(keep) - 1:
                spans.append("  ")
        t.add(*spans)
    row([c[0] for c in cols], "bold")
    for vals in cells:
        row(vals)

    if len(procs) > 1:
        _ranks(t, f, docs, top)

    t.heading("Totals")
    t.flow("  live: ", [(fmt_bytes(f["live_bytes"]), "bold"), f"in {_plural(f['live_count'], 'allocation')}",
                        f"across {_plural(len(procs), 'process', 'processes')}"], hang=4, sep=" ")
    if f["kinds"]:
        t.flow("  by kind: ", _kinds_list(f["kinds"]), hang=4, sep=", ")
    t.add(f"  peaks added up: {fmt_bytes(f['peak_sum'])}")

    if f["ooms"]:
        t.heading("Out of memory")
        for o in f["ooms"]:
            r = o["request"]
            where = "pinned host memory" if r["device"] < 0 else device_name(r["device"])
            t.flow("  ", [(o["label"] + ":", "bold red"), fmt_bytes(r["size"]), f"by {r['api']}", f"on {where}"],
                   hang=4, sep=" ")
            if o["summary"]:
                t.wrap(o["summary"], indent=4, hang=6)

    if f["sites"]:
        many = len(procs) > _PER_RANK_MAX
        t.heading("Top sites across processes",
                  f"{len(f['sites'])} of {f['site_count']}" if len(f["sites"]) < f["site_count"] else "")
        num_w = len(str(len(f["sites"])))
        for i, s in enumerate(f["sites"]):
            doc = docs[s["doc"]]
            pad = " " * (num_w + 4)
            t.flow(f"  {i + 1:>{num_w}}. ", [(fmt_bytes(s["live_bytes"]), "bold"),
                                             f"in {_plural(s['live_count'], 'allocation')},",
                                             f"in {s['processes_with']} of {len(procs)} processes"],
                   hang=len(pad), sep=" ")
            t.add(pad, site_title(doc, s["stack"], t.width - len(pad)))
            per = s["by_process"]
            if many:
                lo, hi = procs[s["min_index"]], procs[s["max_index"]]
                mean = sum(per) // len(per)
                t.flow(pad, [(f"largest: {_short_label(hi)} ({fmt_bytes(per[s['max_index']])})", "dim"),
                             (f"smallest: {_short_label(lo)} ({fmt_bytes(per[s['min_index']])})", "dim"),
                             (f"mean: {fmt_bytes(mean)}", "dim")], hang=len(pad), sep=" \u00b7 ")
            else:
                t.flow(pad, [(f"{_short_label(p)}: {fmt_bytes(b)}", "dim") for p, b in zip(procs, per)],
                       hang=len(pad), sep=" \u00b7 ")
    return t.text()
