"""The terminal's text, shared by the views of one snapshot (summary.py),
two (diff_view.py) and several processes (merge_view.py): every string
printed passes through one place (Text) that makes control and format
characters visible, so a snapshot cannot drive the terminal; widths, cuts and
wrapping by display columns; the formats and site titles the views share."""

from __future__ import annotations

import datetime
import unicodedata
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import model
from .model import fmt_bytes

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


class Text:
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


def plural(n: int, word: str, many: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def percent(part: int, whole: int) -> str:
    if whole <= 0:
        return ""
    p = 100.0 * part / whole
    return f"{p:.0f}%" if p >= 10 or p == 0 else f"{p:.1f}%"


def device_name(index: int) -> str:
    return "host" if index < 0 else f"GPU {index}"


def kinds_list(kinds: Sequence[Tuple[str, int]]) -> List[Span]:
    return [f"{k} {fmt_bytes(b)}" for k, b in kinds] or ["nothing live"]


def kinds_text(kinds: Sequence[Tuple[str, int]]) -> str:
    return ", ".join(f"{k} {fmt_bytes(b)}" for k, b in kinds) or "nothing live"


def sorted_kinds(kinds: Dict[str, int]) -> List[Tuple[str, int]]:
    return sorted(((k, b) for k, b in kinds.items() if b), key=lambda kb: (-kb[1], kb[0]))


def frame_line(f: Dict[str, Any]) -> str:
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
        return [frame_line(f) for f in frames[:max(1, depth)]]
    out = [frame_line(frames[0])]
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
        out.append(frame_line(f))
        shown += 1
    return out


def label_frames(doc: Doc, sid: int, depth: int) -> List[str]:
    """A site's frames as site_frames() gives them, `depth` of them at least
    and never fewer than its label names: the frames that tell it from the
    other sites (the label the tracer gave it) are always shown; where the
    program's frames do not hold them all, the label's own."""
    st = doc["_stack_by_id"].get(sid) if sid else None
    label = st["site"]["label"].split(" \u2190 ") if st is not None and st["site"].get("label") else []
    out = site_frames(doc, sid, max(depth, len(label)))
    shown = {clean(line) for line in out}
    return out if all(clean(piece) in shown for piece in label) else label


def _piece_roles(st: Optional[Dict[str, Any]], pieces: List[str]) -> List[str]:
    """The role of each piece of a label (its frame's: "user" for the
    program's own code), "library" for a piece no user frame prints as."""
    user = {clean(frame_line(f)) for f in (st or {}).get("frames") or [] if f.get("role") == "user"}
    return ["user" if p in user else "library" for p in pieces]


def site_title(doc: Doc, sid: int, cols: int) -> str:
    """model.stack_title() made to fit cols: drop the runtime call, then the
    library frames from the outermost in (each run of them one "…"), then
    shorten each function in the middle, keeping every frame's place: the
    program's file:line is what a reader looks for, cut last."""
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
    roles = _piece_roles(st, pieces)

    def joined(ps: List[str]) -> str:
        out: List[str] = []
        for p in ps:
            if not (p == "\u2026" and out and out[-1] == "\u2026"):
                out.append(p)
        return " \u2190 ".join(out)

    # Library frames out, outermost first; the site's own frame too where
    # a frame of the program's stays.
    keep_first = "user" not in roles
    for i in reversed(range(len(pieces))):
        if text_width(joined(pieces)) <= cols:
            return joined(pieces)
        if roles[i] != "user" and not (i == 0 and keep_first):
            pieces[i] = "\u2026"
    pieces = joined(pieces).split(" \u2190 ")
    title = " \u2190 ".join(pieces)
    if text_width(title) <= cols:
        return title
    # Then the functions, each keeping its place "(file:line)": the room the
    # places and arrows leave, shared out, the narrowest function first.
    parts = [p.partition(" (") if p != "\u2026" else ("", "", "") for p in pieces]
    named = [i for i, (fn, sep, _) in enumerate(parts) if sep]
    room = cols - 3 * (len(pieces) - 1) - sum(
        text_width(p) if i not in named else text_width(" (" + parts[i][2]) for i, p in enumerate(pieces))
    if named and room >= len(named):
        give: Dict[int, int] = {}
        left = len(named)
        for i in sorted(named, key=lambda j: text_width(parts[j][0])):
            give[i] = min(text_width(parts[i][0]), room // left)
            room -= give[i]
            left -= 1
        pieces = [cut_middle(parts[i][0], give[i]) + " (" + parts[i][2] if i in give else p
                  for i, p in enumerate(pieces)]
        title = " \u2190 ".join(pieces)
    # A place wider than the line itself: only then cut.
    return title if text_width(title) <= cols else cut(title, cols)


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


def places_by_stack(doc: Doc) -> Tuple[Dict[int, Dict[Tuple[int, str], int]], Dict[str, int]]:
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
    host = doc["_host_bytes"] if doc.get("_lean") else places_by_stack(doc)[1]
    for k, b in host.items():
        out[(-1, k)] = out.get((-1, k), 0) + b
    return out
