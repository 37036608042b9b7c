"""The HTML report: one self-contained page (inline CSS, script and data, no
network) of one snapshot, a diff of two, or a merge of several processes.
report() returns the page; the static sections (diagnosis, leaks,
fragmentation) are written here, the interactive ones (timeline, flame graph,
address map, tables) are drawn by assets/report.js from the embedded data.

The data goes into a <script type="application/json"> block with <, > and &
escaped, so no name can end the block; the script inserts every name as text.
A Content-Security-Policy lets only the page's own script (by hash) run.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html as _html
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import axis, model, summary
from .load import ViewError
from .text import fmt_duration, fmt_time
from .vocab import KINDS

Doc = Dict[str, Any]
ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")
# Integers a JavaScript number holds exactly.
SAFE_INT = (1 << 53) - 1
# Control and bidirectional-override characters are shown as \uXXXX: a name
# must not reorder the text around it or hide in the page.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# The addresses a leak group lists in the page; the rest are counted.
LEAK_ADDRESSES = 8
# Spans of one region tag kept for the timeline (closer ones are joined).
MAX_TAG_SPANS = 400
MAX_TAGS = 12


# --- Text ------------------------------------------------------------------------

def clean(s: Any) -> str:
    """s as it may be shown: controls as visible \\uXXXX, lone surrogates
    (which UTF-8 cannot encode) as U+FFFD. assets/report.js does the same."""
    t = "" if s is None else str(s)
    t = _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", t)
    return _SURROGATE.sub("\ufffd", t)


def esc(s: Any) -> str:
    """s as HTML text or attribute value."""
    return _html.escape(clean(s), quote=True)


def json_for_script(data: Any) -> str:
    """data as JSON that can sit inside <script type="application/json">: no <,
    > or & (so no "</script>" or "<!--"), no U+2028/2029, nothing but ASCII."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    # Outside strings JSON holds none of these, so replacing them everywhere only
    # rewrites characters in strings, into escapes JSON.parse reads back.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@functools.lru_cache(maxsize=None)
def _asset(name: str) -> str:
    path = os.path.join(ASSETS, name)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ViewError(f"{path}: cannot read the report's {name}: {e.strerror or e}") from None
    end = "</script" if name.endswith(".js") else "</style"
    if end in text.lower():
        raise ViewError(f"{path}: holds '{end}', which would end the inline block")
    return text


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _b(n: Optional[int], unknown: str = "?") -> str:
    if n is None:
        return f'<span class="muted">{unknown}</span>'
    return esc(model.fmt_bytes(n))


def _site_changes(n: int, total: int, verb: str) -> str:
    """"3 sites grew by 12.0 MiB", "1 site shrank by 4.00 MiB", "no site
    shrank"."""
    if n == 0:
        return f"no site {verb}"
    return f"{_n(n)} site{'s' if n != 1 else ''} {verb} by {_b(total)}"


def _n(n: Optional[int]) -> str:
    return "?" if n is None else f"{n:,}"


def _tag(tag: str, body: str, cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f"<{tag}{c}>{body}</{tag}>"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "", num: Sequence[int] = (),
           nowrap: Sequence[int] = ()) -> str:
    """A static table; head and cells are HTML already; columns in num align
    right, those in nowrap (names such as allocator_fragmentation) never break."""
    th = "".join(f'<th class="num">{h}</th>' if i in num else f"<th>{h}</th>" for i, h in enumerate(head))
    td = {**{i: ' class="num"' for i in num}, **{i: ' class="nowrap"' for i in nowrap}}
    body = ["<tr>" + "".join(f"<td{td.get(i, '')}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows]
    c = f' class="{cls}"' if cls else ""
    return f"<table{c}><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _dl(pairs: Sequence[Tuple[str, str]]) -> str:
    return "<dl class=\"kv\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _device_name(ix: int) -> str:
    return "host" if ix < 0 else f"device {ix}"


# --- Static sections -------------------------------------------------------------------

def _stack_html(doc: Doc, sid: int) -> str:
    """The whole stack, innermost first, as a list (Python frames marked)."""
    st = doc["_stack_by_id"].get(sid) if sid else None
    if st is None:
        return '<p class="muted">no stack recorded</p>'
    items = []
    for f in st["frames"]:
        cls = "cuda" if f["role"] == "cuda" else "py" if f["python"] else "native"
        if f["role"] == "library":
            cls += " lib"
        items.append(f'<li class="{cls}">{esc(model.frame_text(f))}</li>')
    extra = []
    if st.get("runtime_call"):
        extra.append(f"runtime call {esc(st['runtime_call'])}")
    if st["tags"]:
        extra.append("tags " + " \u203a ".join(f'<span class="tagname">{esc(t)}</span>' for t in st["tags"]))
    head = f'<p class="muted">{"; ".join(extra)}</p>' if extra else ""
    return f'{head}<ol class="frames">{"".join(items)}</ol>'


def _site_cell(doc: Doc, sid: int) -> str:
    return (f'<details class="site"><summary>{esc(model.stack_title(doc, sid))}</summary>'
            f"{_stack_html(doc, sid)}</details>")


def _overview(doc: Doc, name: str) -> str:
    s, p = doc["summary"], doc["process"]
    pairs = [("process", esc(model.process_label(doc))),
             ("file", esc(name)),
             ("snapshot", f"{esc(doc['reason'])} #{doc['seq']}"),
             ("command", esc(" ".join(doc["argv"])) or '<span class="muted">unknown</span>'),
             ("live", f"{_b(s['live_bytes'])} in {_n(s['live_count'])} allocations"),
             ("peak", _b(s["peak_bytes"])),
             ("allocations, frees", f"{_n(s['total_allocs'])}, {_n(s['total_frees'])}")]
    if p.get("world_size") is not None:
        pairs.append(("world size", _n(p["world_size"])))
    if p.get("ppid") is not None:
        pairs.append(("parent", f"pid {p['ppid']}"))
    return _dl(pairs)


def _devices_table(doc: Doc) -> str:
    rows = []
    t = doc.get("tensors")
    levels = {x["device"]: x for x in (t or {}).get("devices") or []}
    name = esc((t or {}).get("framework") or "framework")
    for d in doc["devices"]:
        kinds = ", ".join(f"{esc(k)} {_b(v)}" for k, v in sorted(d["kinds"].items()))
        x = levels.get(d["index"])
        if x is not None:
            # The same live bytes by level: they add up (tensors.h).
            kinds += (f"<br>by level: {name}'s tensors {_b(x['tensor_bytes'])}, free inside its segments "
                      f"{_b(x['cached_bytes'])}, not {name}'s {_b(x['other_bytes'])}")
        pools = d.get("pools")
        pool = (f"{_b(pools['used_bytes'])} used of {_b(pools['reserved_bytes'])}" if pools
                else '<span class="muted">not asked</span>')
        op = d.get("other_processes")
        if op is None:
            other = '<span class="muted">not asked</span>'
        elif op["known"]:
            other = f"{_b(op['bytes'])} in {_n(op['count'])}"
        else:
            other = f'<span class="muted">unknown: {esc(op.get("why") or "")}</span>'
        rows.append([esc(_device_name(d["index"])), _b(d.get("total_bytes"), "not asked"),
                     _b(d.get("free_bytes"), "not asked"),
                     _b(d["live_bytes"]), kinds, pool, other])
    if not rows:
        return '<p class="muted">no device memory</p>'
    return _table(["device", "total", "free", "this process", "by kind", "pools", "other processes"],
                  rows, "static", num=(1, 2, 3))


def _oom_html(doc: Doc) -> str:
    fr = doc.get("failed_request")
    if fr is None:
        return ""
    out = ['<div class="oom-box">']
    kind = f" of {esc(fr['kind'])} memory" if fr.get("kind") else ""
    res = f" (CUresult {fr['result']})" if fr.get("result") is not None else ""
    nth = f"; out-of-memory #{fr['failure']}" if fr.get("failure") is not None else ""
    if fr.get("refused_by") == "framework":
        out.append(f'<p class="failed"><strong>Out of memory:</strong> {esc(fr["api"])}\'s own allocator refused '
                   f'<strong>{_b(fr["size"])}</strong> on {esc(_device_name(fr["device"]))} '
                   f"(no driver call failed){nth}.</p>")
    else:
        out.append(f'<p class="failed"><strong>Out of memory:</strong> {esc(fr["api"])} of '
                   f'<strong>{_b(fr["size"])}</strong>{kind} on {esc(_device_name(fr["device"]))} '
                   f"failed{res}{nth}.</p>")
    out.append(f'<div class="asked">Asked from {_site_cell(doc, fr["stack"])}</div>')
    dg = doc.get("diagnosis")
    if dg is not None:
        out.append(f'<p class="verdict"><span class="badge v-{esc(_ident(dg["verdict"]))}">'
                   f'{esc(dg["verdict"])}</span> {esc(dg["summary"])}</p>')
        rows = []
        for v in dg["verdicts"]:
            rows.append([("<strong>primary</strong> " if v["primary"] else "") + esc(v["name"]),
                         _b(v.get("bytes")), esc(v.get("detail") or ""),
                         esc(", ".join(clean(x) for x in v.get("rests_on") or [] if isinstance(x, str)))])
        if rows:
            # The verdict's name on one line; a window too narrow for it scrolls the table.
            out.append('<div class="tbl-scroll">' + _table(["verdict", "bytes", "detail", "rests on"], rows,
                                                           "static verdicts", num=(1,), nowrap=(0,)) + "</div>")
        tries = []
        for r in dg.get("remedies") or []:
            where = f'<div class="muted">at {_site_cell(doc, r["stack"])}</div>' if r.get("stack") else ""
            tries.append(f'<li><strong>{esc(r["name"])}</strong>: {esc(r["text"])}{where}</li>')
        if tries:
            out.append(f'<div class="remedies"><strong>What to try</strong> '
                       f'<span class="muted">(each offered because the numbers above support it)</span>'
                       f'<ul>{"".join(tries)}</ul></div>')
        rp = dg.get("replay")
        if rp and not rp["replayed"]:
            out.append(f'<p class="muted">Not replayed ({esc(rp["setting"])}): {esc(rp.get("why") or "?")}</p>')
        nums = dg["numbers"]
        if nums:
            cells = []
            for k, v in nums.items():
                if k == "growth_stacks" and isinstance(v, list):
                    val = "<br>".join(esc(model.stack_title(doc, s)) for s in v) or "none"
                elif k in ("growth_top_stack", "largest_stack") and isinstance(v, int) and v:
                    val = esc(model.stack_title(doc, v))
                elif k == "tracked_bytes" and isinstance(v, dict):
                    val = ", ".join(f"{esc(kk)} {_b(vv) if isinstance(vv, int) else esc(vv)}"
                                    for kk, vv in v.items())
                elif isinstance(v, int) and not isinstance(v, bool) and k.endswith("_bytes"):
                    val = f"{_b(v)} <span class=\"muted\">({v:,})</span>"
                elif v is None:
                    val = '<span class="muted">unknown</span>'
                else:
                    val = esc(json.dumps(v) if not isinstance(v, str) else v)
                cells.append((esc(k), val))
            out.append(f"<details><summary>the numbers the verdicts read</summary>{_dl(cells)}</details>")
    out.append(_episode_html(doc))
    out.append("</div>")
    return "".join(out)


def _episode_html(doc: Doc) -> str:
    """The out-of-memory episode: its failures, what was freed between them
    and by which sites (docs/viewer.md)."""
    ep = doc.get("episode")
    if ep is None:
        return ""
    f = summary.episode_facts(ep)
    n = f["failures"]
    if f["described"] == 0:
        which = (f"taken when the episode ended ({esc(f['end'])}), after {n} failures of which "
                 f"{f['not_written']} had no snapshot of their own")
    else:
        which = f"of failure {f['described']} of {n}" + (", the last the program was told of"
                                                         if f["described"] == n and n > 1 else "")
    out = [f'<h4>Out-of-memory episode #{f["id"]}: {n} failure{"s" if n != 1 else ""} over '
           f'{esc(fmt_duration(f["span_ns"]))}</h4><p>This snapshot is {which}.</p>']
    rows = []
    for fl in f["listed"]:
        rows.append([str(fl["failure"]), esc("first" if fl["since_ns"] == 0 and fl is f["listed"][0]
                                             else "+" + fmt_duration(fl["since_ns"])),
                     _b(fl["size"]), esc(fl["api"]), _b(fl["live_bytes"]),
                     f"{_b(fl['freed_bytes'])} in {_n(fl['freed_count'])}" if fl["freed_bytes"] else "",
                     _site_cell(doc, fl["stack"])])
    head = ["failure", "when", "asked", "by", "live then", "freed before it", "asked from"]
    out.append(f'<div class="tbl-scroll">{_table(head, rows, "static episode", num=(0, 2, 4), nowrap=(3,))}</div>')
    fd = f["freed"]
    if fd["bytes"]:
        out.append(f"<p>The program freed <strong>{_b(fd['bytes'])}</strong> in {_n(fd['count'])} allocations "
                   "during the episode and still failed: what is left is live.</p>")
        rows = [[_b(x["bytes"]), _n(x["count"]), esc(x["kind"]), _site_cell(doc, x["stack"])] for x in fd["sites"]]
        if fd["other_bytes"]:
            rows.append([_b(fd["other_bytes"]), _n(fd["other_count"]), "", "other sites"])
        out.append(_table(["freed", "allocations", "kind", "allocated at"], rows, "static", num=(0, 1)))
    return "".join(out)


def _framework_html(doc: Doc) -> str:
    """The framework allocator's own view: its counters per device, and its
    segments, most free bytes first, each opening to its blocks."""
    fw = doc.get("framework")
    if not fw:
        return ""
    f = summary.framework_facts(fw)
    out = [f'<h3>Framework\'s allocator <span class="muted">{esc(f["name"])} {esc(f["version"])}</span></h3>']
    if f["segments"]:
        out.append(f"<p>{_n(f['joined'])} of {_n(f['segments'])} segments joined to the driver's allocations.</p>")
    if not f["devices"]:
        out.append("<p>No counters: its allocator keeps no pool (the request alone was handed over).</p>")
    rows = []
    for d in f["devices"]:
        rows.append([esc(_device_name(d["device"])), _b(d["allocated_bytes"]), _b(d["reserved_bytes"]),
                     f"<strong>{_b(d['reserved_unallocated_bytes'])}</strong>",
                     _b(d.get("largest_free_block_bytes"), "not said"), _b(d.get("limit_bytes"), "none")])
    out.append(_table(["device", "allocated", "reserved", "reserved but unallocated", "largest free block", "limit"],
                      rows, "static framework", num=(1, 2, 3, 4, 5)))
    if f["pending"]:
        out.append(f"<p>{esc(f['pending'][0].upper() + f['pending'][1:])}.</p>")
    # The segments, one click away: the tensors are what the program holds.
    segs = []
    for s in f["by_free"][:50]:
        head = (f"{_b(s['size'])} at <code>{s['address']:#x}</code> on {esc(_device_name(s['device']))} "
                f"({esc(s['type'] or 'segment')}, stream {esc(s['stream'])}{', expandable' if s['expandable'] else ''}): "
                f"{_b(s['active_bytes'])} in {_n(s['active_count'])} active, "
                f"<strong>{_b(s['free_bytes'])}</strong> free in {_n(s['free_count'])}"
                + ("" if s["joined"] else ' <span class="bad">no driver allocation starts there</span>'))
        rows = [[f"<code>{b['address']:#x}</code>" if isinstance(b["address"], int) else "", _b(b["size"]),
                 _b(b["requested"], "") if summary.block_state(b["state"]) != "free" else "",
                 esc(summary.block_state(b["state"])),
                 esc(b["frame"] or "") if summary.block_state(b["state"]) != "free" else ""] for b in s["blocks"]]
        segs.append(f"<details><summary>{head}</summary>"
                    + _table(["block", "size", "requested", "state", "allocated at"], rows, "static blocks",
                             num=(1, 2)) + "</details>")
    if len(f["by_free"]) > 50:
        segs.append(f'<p class="muted">{_n(len(f["by_free"]) - 50)} more segments: the snapshot has them.</p>')
    if segs:
        out.append(f'<details class="segments"><summary>its {_n(f["segments"])} segments, most free first, '
                   f"each with its blocks</summary>{''.join(segs)}</details>")
    if f["file"]:
        out.append(f'<p>Its own snapshot: <code>{esc(f["file"])}</code></p>')
    return "".join(out)


def _ident(s: str) -> str:
    return re.sub(r"[^a-z_]", "", s.lower())[:40] or "other"


def _leak_totals(doc: Doc) -> str:
    lk = doc.get("leaks")
    if lk is None:
        return ""
    t = lk["totals"]
    counted = t["counted"]
    cls = "leak-box bad" if counted["bytes"] else "leak-box good"
    status = "" if lk.get("exit_status") is None else f" The program's exit status: {lk['exit_status']}."
    parts = ", ".join(f"{k} {_b(t[k]['bytes'])} in {_n(t[k]['count'])}"
                      for k in ("leaked", "referenced", "cached", "suppressed"))
    return (f'<div class="{cls}"><p><strong>Leaks at exit: {_b(counted["bytes"])} in '
            f'{_n(counted["count"])} allocations</strong> (the classes that count: '
            f'{esc(", ".join(clean(c) for c in lk["classes"])) or "none"}).{status}</p>'
            f"<p>{parts}.</p></div>")


def _diagnosis_section(docs: Sequence[Doc], mode: str, files: Sequence[str]) -> str:
    out = ['<section id="diagnosis"><h2>Diagnosis</h2>']
    if mode == "single":
        d = docs[0]
        out.append(_oom_html(d) + _leak_totals(d))
        out.append(_overview(d, files[0]))
        out.append("<h3>Devices</h3>" + _devices_table(d))
        out.append(_framework_html(d))
    elif mode == "diff":
        old, new = docs
        rows = model.diff(old, new)
        grew = sum(r["delta_bytes"] for r in rows if r["delta_bytes"] > 0)
        fell = sum(r["delta_bytes"] for r in rows if r["delta_bytes"] < 0)
        delta = new["summary"]["live_bytes"] - old["summary"]["live_bytes"]
        out.append(f'<p class="lead">From the older to the newer snapshot live memory changed by '
                   f'<strong>{esc(model.fmt_delta(delta))}</strong> '
                   f'({_b(old["summary"]["live_bytes"])} \u2192 {_b(new["summary"]["live_bytes"])}): '
                   f'{_site_changes(sum(1 for r in rows if r["delta_bytes"] > 0), grew, "grew")}, '
                   f'{_site_changes(sum(1 for r in rows if r["delta_bytes"] < 0), -fell, "shrank")}.</p>')
        out.append('<div class="two">')
        for label, d, f in (("older", old, files[0]), ("newer", new, files[1])):
            out.append(f'<div><h3>{label}</h3>{_oom_html(d)}{_leak_totals(d)}{_overview(d, f)}'
                       f"{_devices_table(d)}</div>")
        out.append("</div>")
    else:
        m = model.merge(docs)
        out.append(f'<p class="lead">{_n(len(docs))} processes hold <strong>{_b(m["live_bytes"])}</strong> '
                   f"live in all.</p>")
        rows = []
        for pos, (p, i) in enumerate(zip(m["processes"], m["order"])):
            oom = p["oom"]
            rows.append([esc(p["label"]), esc(files[i]), esc(p["reason"]), _b(p["live_bytes"]),
                         _n(p["live_count"]), _b(p["peak_bytes"]),
                         (f'<span class="bad">{esc(oom["api"])} of {_b(oom["size"])} on '
                          f'{esc(_device_name(oom["device"]))}</span>') if oom else ""])
        out.append(_table(["process", "file", "snapshot", "live", "allocations", "peak", "out of memory"],
                          rows, "static processes", num=(3, 4, 5)))
        out.append(_ranks_html(m, [docs[i] for i in m["order"]]))
        first = True
        for i in m["order"]:
            d = docs[i]
            body = _oom_html(d) + _leak_totals(d)
            if not body:
                continue
            out.append(f'<details{" open" if first else ""}><summary>{esc(model.process_label(d))}</summary>'
                       f"{body}{_overview(d, files[i])}{_devices_table(d)}</details>")
            first = False
    out.append("</section>")
    return "".join(out)


def _ranks_html(m: Dict[str, Any], docs: Sequence[Doc]) -> str:
    """Many ranks at a glance (model.fleet), as the terminal's "Ranks": the
    skew, the outliers, the first to run out, the ranks by dominant site."""
    fl = model.fleet(m, docs)
    procs = m["processes"]

    def name(i: int) -> str:
        p = procs[i]
        return f"rank {p['rank']}" if p["rank"] is not None else f"pid {p['pid']}"
    out = ['<div class="ranks"><h3>Ranks at a glance</h3>']
    for what in ("live", "peak"):
        k = fl[what]
        out.append(f"<p>{what}: max <strong>{_b(k['max'])}</strong> ({esc(name(k['max_index']))}), "
                   f"median {_b(k['median'])}, min {_b(k['min'])} ({esc(name(k['min_index']))})</p>")
    med = fl["peak"]["median"]
    out_idx = sorted(set(fl["live"]["outliers"] + fl["peak"]["outliers"]),
                     key=lambda i: -abs(procs[i]["peak_bytes"] - med))
    if out_idx:
        out.append("<p>outliers: " + ", ".join(
            f'<span class="bad">{esc(name(i))}</span> (peak {_b(procs[i]["peak_bytes"])}, '
            f'{"+" if procs[i]["peak_bytes"] >= med else "-"}{_b(abs(procs[i]["peak_bytes"] - med))} from the median)'
            for i in out_idx) + "</p>")
    else:
        out.append(f"<p>outliers: {esc(model.no_outliers_text(fl, len(procs)))}</p>")
    first = fl["first_oom"]
    if first is not None:
        after = (f"; the next {esc(fmt_duration(first['next_ns'] - first['time_ns']))} later"
                 if first["next_ns"] is not None else "")
        out.append(f'<p>first out of memory: <span class="bad">{esc(name(first["index"]))}</span> at '
                   f"{esc(fmt_time(first['time_ns']))}{after}</p>")
        if first["stack"]:
            out.append(f'<div class="asked">Asked from {_site_cell(docs[first["index"]], first["stack"])}</div>')
    rows = []
    for g in fl["groups"]:
        if g["site"] < 0:
            continue
        site = m["sites"][g["site"]]
        ranks = sorted(procs[i]["rank"] for i in g["processes"] if procs[i]["rank"] is not None)
        who = (model.ranges(ranks) if len(ranks) == len(g["processes"])
               else ", ".join(name(i) for i in g["processes"]))
        rows.append([_n(len(g["processes"])), esc(who), _site_cell(docs[site["doc"]], site["stack"])])
    if rows:
        out.append(_table(["ranks", "which", "dominant site (most of their live bytes)"], rows,
                          "static ranks-by-site", num=(0,)))
    out.append("</div>")
    return "".join(out)


def _leaks_section(docs: Sequence[Doc], mode: str) -> str:
    shown = [d for d in (docs[-1:] if mode == "diff" else docs) if d.get("leaks") is not None]
    if not shown:
        return ""
    out = ['<section id="leaks"><h2>Leaks</h2>']
    for d in shown:
        lk = d["leaks"]
        if len(docs) > 1:
            out.append(f"<h3>{esc(model.process_label(d))}</h3>")
        out.append(_leak_totals(d))
        scan = lk["scan"]
        if not scan["done"]:
            why = esc(scan.get("why") or "")
            out.append(f'<p class="bad">The scan for references was not done: {why}</p>')
        else:
            out.append(f'<p class="muted">Scanned {_n(scan.get("mappings"))} mappings, '
                       f'{_b(scan.get("bytes"))} in {scan.get("seconds") or 0:.3f} s.</p>')
        if lk.get("suppressions_error"):
            out.append(f'<p class="bad">Suppressions not applied: {esc(lk["suppressions_error"])}</p>')
        rows = []
        for s in lk["sites"]:
            addrs = s["addresses"]
            shown_a = ", ".join(esc(a) for a in addrs[:LEAK_ADDRESSES])
            if len(addrs) > LEAK_ADDRESSES:
                shown_a += f" \u2026 and {_n(len(addrs) - LEAK_ADDRESSES)} more"
            rf = s.get("referenced_from")
            ref = ""
            if rf:
                ref = esc(rf.get("what") or rf.get("region") or "")
                if rf.get("address"):
                    ref += f' <span class="muted">at {esc(rf["address"])}</span>'
            rule = s.get("suppressed_by") or s.get("rule")
            if rule:
                rule = esc(rule) + (f' <span class="muted">({esc(s["rule_source"])})</span>'
                                    if s.get("rule_source") else "")
            cls = esc(s["class"]) + ("" if s["counted"] else ' <span class="muted">(not counted)</span>')
            rows.append([cls, _b(s["bytes"]), _n(s["count"]), _site_cell(d, s["stack"]),
                         ", ".join(f"{esc(k)} {_b(v)}" for k, v in sorted(s["kinds"].items())),
                         ref, rule or "", shown_a])
        if rows:
            out.append(_table(["class", "bytes", "count", "site", "kinds", "referenced from", "rule",
                               "addresses"], rows, "static leaks", num=(1, 2)))
        if lk["suspects"]:
            rows = [[_site_cell(d, s["stack"]), _b(s["live_bytes"]), _b(s["peak_bytes"]),
                     _b(s["growth_bytes"]), f"{_n(s['rising_windows'])} / {_n(s['falling_windows'])}"]
                    for s in lk["suspects"]]
            out.append("<h4>Suspects: sites that kept growing</h4>"
                       "<p class=\"muted\">growth: what the site added after its first round (a round: a step "
                       "the program marks, else a stretch of its allocations and frees); what it held by then "
                       "is not growth</p>" +
                       _table(["site", "live", "peak", "growth", "rounds rising / falling"], rows, "static",
                              num=(1, 2, 3)))
        if lk["suppressions"]:
            rows = [[esc(r["rule"]), esc(r.get("source") or "") + (f":{r['line']}" if r.get("line") else ""),
                     _n(r["hits"]), _b(r["bytes"])] for r in lk["suppressions"]]
            out.append("<h4>Suppressions that matched</h4>" +
                       _table(["rule", "source", "hits", "bytes"], rows, "static", num=(2, 3)))
    out.append("</section>")
    return "".join(out)


def _fragmentation_section(docs: Sequence[Doc], mode: str) -> str:
    shown = docs[-1:] if mode == "diff" else docs
    out = ['<section id="fragmentation"><h2>Fragmentation</h2>']
    any_dev = False
    for d in shown:
        for dev in d["devices"]:
            pg, fr = dev.get("pages"), dev.get("fragmentation")
            if pg is None and fr is None:
                continue
            any_dev = True
            title = esc(_device_name(dev["index"]))
            if len(shown) > 1:
                title = f"{esc(model.process_label(d))}, {title}"
            out.append(f"<h3>{title}</h3>")
            pairs = []
            if pg is not None:
                occ = pg["occupancy"]
                buckets = zip(("below 25%", "below 50%", "below 75%", "below 100%", "full"), occ)
                pairs += [("pages", f"{_n(pg['pages'])} of {_b(pg['granularity'])}"
                                    + ("" if pg.get("granularity_known", True) else " (assumed)")),
                          ("partly used", _n(pg["partial"])),
                          ("stranded in them", _b(pg["stranded_bytes"])),
                          ("occupancy", " ".join(f'<span class="occ occ{i}">{lab}: {_n(c)}</span>'
                                                 for i, (lab, c) in enumerate(buckets)))]
            if fr is not None:
                pairs += [("driver free", _b(fr.get("free_bytes"), "not asked")),
                          ("free in whole pages", _b(fr.get("free_in_whole_pages"), "not asked")),
                          ("largest hole in a page", _b(fr["largest_hole_bytes"])),
                          ("largest fit", _b(fr.get("largest_fit_bytes"), "not asked")),
                          ("pools reserve unused", _b(fr.get("pool_unused_bytes"), "not asked"))]
            out.append(_dl(pairs))
            if fr is not None and fr["size_classes"]:
                total = max(1, max(c["bytes"] for c in fr["size_classes"]))
                rows = [[f"{_b(c['min'])} \u2013 {_b(c['max'] + 1)}", _n(c["count"]), _b(c["bytes"]),
                         f'<meter min="0" max="{total}" value="{c["bytes"]}"></meter>']
                        for c in fr["size_classes"]]
                out.append(_table(["size class", "count", "bytes", ""], rows, "static", num=(1, 2)))
    if not any_dev:
        return ""
    out.append("</section>")
    return "".join(out)


def _stats_section(docs: Sequence[Doc]) -> str:
    out = ['<section id="stats"><h2>The tracer\u2019s counters</h2>']
    for d in docs:
        warn = [k for k in ("ring_full", "gaps_skipped", "late_events", "unknown_frees", "handles_forgotten",
                            "snapshot_errors", "oom_suppressed", "log_lines_dropped") if d["stats"].get(k)]
        note = (f'<p class="bad">Non-zero: {esc(", ".join(warn))} (some events may be missing or late; '
                "GPUMEMTRACE_VERBOSE=1 explains each).</p>") if warn else ""
        pairs = [(esc(k), _n(v)) for k, v in d["stats"].items()]
        h = esc(model.process_label(d)) if len(docs) > 1 else "counters"
        out.append(f"<details><summary>{h}</summary>{note}{_dl(pairs)}</details>")
    out.append("</section>")
    return "".join(out)


# --- Embedded data ---------------------------------------------------------------------

class _Frames:
    """Frames deduplicated across all documents: text, kind (0 native, 1 Python,
    2 the CUDA call itself), lib (1: library code, by the tracer's site rule)
    and where (file, module), one column each."""

    def __init__(self) -> None:
        self.ids: Dict[Tuple[str, int, int, str], int] = {}
        self.text: List[str] = []
        self.kind: List[int] = []
        self.lib: List[int] = []
        self.where: List[str] = []

    def add(self, f: Dict[str, Any]) -> int:
        kind = 2 if f["role"] == "cuda" else 1 if f["python"] else 0
        lib = 1 if f["role"] == "library" else 0
        key = (model.frame_text(f), kind, lib, _where(f))
        i = self.ids.get(key)
        if i is None:
            i = self.ids[key] = len(self.text)
            self.text.append(key[0])
            self.kind.append(kind)
            self.lib.append(lib)
            self.where.append(key[3])
        return i

    def data(self) -> Dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "lib": self.lib, "where": self.where}


def _where(f: Dict[str, Any]) -> str:
    parts = []
    if f.get("file"):
        parts.append(f["file"] + (f":{f['line']}" if f.get("line") is not None else ""))
    if not f["python"]:
        if f.get("module"):
            parts.append(f["module"] + (f"+{f['offset']}" if f.get("offset") else ""))
        elif f.get("address"):
            parts.append(f["address"])
    return " \u2014 ".join(parts)


def _stacks_data(doc: Doc, frames: _Frames) -> Dict[str, Any]:
    ids, fr, titles, tags, calls = [], [], [], [], []
    for st in doc["stacks"]:
        ids.append(st["id"])
        fr.append([frames.add(f) for f in st["frames"]])
        titles.append(model.stack_title(doc, st["id"]))
        tags.append(st["tags"])
        calls.append(st.get("runtime_call"))
    return {"id": ids, "frames": fr, "title": titles, "tags": tags, "call": calls}


def _time_base(doc: Doc) -> int:
    s = doc["series"]
    if s.get("start_ns") is not None:
        return s["start_ns"]
    times = list(s["time_ns"][:1]) + [e["time_ns"] for e in doc["history"]["events"][:1]]
    return min(times) if times else doc["time_ns"]


def _allocs_data(doc: Doc, base: int, kind_ix: Dict[str, int]) -> Dict[str, Any]:
    allocs = doc["allocations"]
    addrs = [int(a["address"], 16) for a in allocs]
    if addrs and max(addrs) > SAFE_INT:
        # Beyond what a JavaScript number holds exactly: hex text instead.
        addr: List[Any] = [a["address"][2:] for a in allocs]
        enc = "hex"
    else:
        # Sorted by address, so the differences are small numbers.
        addr = [b - a for a, b in zip([0] + addrs, addrs)]
        enc = "delta"
    apis: Dict[Optional[str], int] = {}
    api_col = [apis.setdefault(a["api"], len(apis)) for a in allocs]
    return {"n": len(allocs), "addr_enc": enc, "addr": addr,
            "size": [a["size"] for a in allocs],
            "kind": [kind_ix[a["kind"]] for a in allocs],
            "dev": [a["device"] for a in allocs],
            "stack": [a["stack"] for a in allocs],
            "t": [None if a["time_ns"] is None else a["time_ns"] - base for a in allocs],
            "api": api_col, "apis": list(apis)}


def _sites_data(doc: Doc, per_stack: bool = False) -> Dict[str, Any]:
    """The sites table's columns: one row per allocation site (stacks of one
    site added up; per_stack: one row per stack, for the flame graph)."""
    sites = doc["sites"]
    if not sites and doc["allocations"]:
        # No sites section: gather the allocations by stack instead.
        by: Dict[int, List[int]] = {}
        for a in doc["allocations"]:
            r = by.setdefault(a["stack"], [0, 0])
            r[0] += a["size"]
            r[1] += 1
        sites = [{"stack": k, "live_bytes": b, "live_count": c, "peak_bytes": b, "growth_bytes": 0,
                  "allocs": c, "alloc_bytes": b, "rising_windows": 0, "falling_windows": 0,
                  "growing": False, "suspect": False}
                 for k, (b, c) in sorted(by.items(), key=lambda kv: -kv[1][0])]
    elif not per_stack:
        sites = [dict(g, rising_windows=g["rising"], falling_windows=g["falling"])
                 for g in model.site_groups(doc)]
    cols = {"stack": "stack", "live": "live_bytes", "count": "live_count", "peak": "peak_bytes",
            "growth": "growth_bytes", "allocs": "allocs", "alloc_bytes": "alloc_bytes",
            "rising": "rising_windows", "falling": "falling_windows"}
    out: Dict[str, Any] = {k: [s[v] for s in sites] for k, v in cols.items()}
    # Growth only where the site was judged to grow (the terminal's one
    # definition): a site that took its memory once has none, whenever
    # that was.
    out["growth"] = [s["growth_bytes"] if s["growing"] or s["suspect"] else None for s in sites]
    out["growing"] = [1 if s["growing"] else 0 for s in sites]
    out["suspect"] = [1 if s["suspect"] else 0 for s in sites]
    return out


# A series of fewer points than this is a short run: the timeline is drawn
# from the history's events instead, each change at its time.
_FINE_BELOW = 64


def _series_data(doc: Doc, base: int) -> Dict[str, Any]:
    """The timeline's points: the snapshot's series (windows of time, with
    the highest value within each), or for a short run — a few windows, too
    coarse to show it — every change of the history, exact. The history is
    walked back from the series' last point (the snapshot's live bytes), so
    that it is exact also when older events fell out of it; before its first
    event, the values are those it implies then (zero when nothing fell out
    and the series starts there)."""
    s = doc["series"]
    coarse = {"t": [t - base for t in s["time_ns"]], "interval_ns": s["interval_ns"],
              "dropped": s["columns_dropped"], "fine": False,
              "cols": [{"device": c["device"], "kind": c["kind"], "live": c["live_bytes"],
                        "max": c["max_bytes"]} for c in s["columns"]]}
    events = axis.changes(doc)
    if len(s["time_ns"]) >= _FINE_BELOW or not events or not s["columns"]:
        return coarse
    keys = [(c["device"], c["kind"]) for c in s["columns"]]
    at = {k: i for i, k in enumerate(keys)}
    now = [c["live_bytes"][-1] if c["live_bytes"] else 0 for c in s["columns"]]
    # Back from the end: the values after each event, oldest first.
    after: List[List[int]] = []
    for e in reversed(events):
        after.append(list(now))
        i = at.get((e["device"], e.get("kind")))
        if i is not None:
            now[i] += -e["size"] if e["op"] == "alloc" else e["size"]
            now[i] = max(now[i], 0)
    after.reverse()
    start = s.get("start_ns") if s.get("start_ns") is not None else events[0]["time_ns"]
    t = [min(start, events[0]["time_ns"]) - base] + [e["time_ns"] - base for e in events]
    t.append(max(doc["time_ns"], events[-1]["time_ns"]) - base)
    cols = []
    for i, (dev, kind) in enumerate(keys):
        vals = [now[i]] + [a[i] for a in after] + [after[-1][i]]
        cols.append({"device": dev, "kind": kind, "live": vals, "max": vals})
    return {"t": t, "interval_ns": s["interval_ns"], "dropped": s["columns_dropped"], "fine": True,
            "cols": cols}


_STEP_MARKS = 200


def _marks(doc: Doc, base: int, order: Optional[axis.EventOrder]) -> Dict[str, Any]:
    """What the timeline marks: out-of-memory results, the program's steps and
    region tag spans; with order (a timeline drawn from events), each mark's
    place in event order too (its last field; None without)."""
    events = doc["history"]["events"]
    ooms = [[e["time_ns"] - base, e["device"], e["size"], e.get("api"), e["stack"], e.get("seq"),
             order and order.event(i)] for i, e in enumerate(events) if e["op"] == "oom"]
    fr = doc.get("failed_request")
    if fr is not None and not any(o[5] == fr.get("failure") and o[1] == fr["device"] for o in ooms):
        ooms.append([doc["time_ns"] - base, fr["device"], fr["size"], fr["api"], fr["stack"],
                     fr.get("failure"), order and order.at(doc["time_ns"] - base)])
    # The program's steps (gmt_step), at most _STEP_MARKS of them, evenly.
    steps = doc["history"]["steps"]
    every = max(1, -(-len(steps) // _STEP_MARKS))
    kept = steps[::every]
    if steps and kept[-1] is not steps[-1]:
        kept.append(steps[-1])
    tags = _tag_spans(doc, base)
    return {"oom": [o[:5] + o[6:] for o in ooms],
            "tags": [sp + [order.first(sp[1]), order.last(sp[2])] if order else sp for sp in tags],
            "steps": [[s["time_ns"] - base, s["step"], order and order.step(s.get("seq"), s["time_ns"] - base)]
                      for s in kept]}


def align_on_steps(docs: Sequence[Doc]) -> bool:
    """Whether the merged timeline can put the processes on one axis of
    steps: every process marked at least two (gmt_step), each later one in
    time with a higher number. Else the processes share one clock."""
    for d in docs:
        steps = d["history"]["steps"]
        if len(steps) < 2:
            return False
        if any(b["time_ns"] <= a["time_ns"] or b["step"] <= a["step"] for a, b in zip(steps, steps[1:])):
            return False
    return True


def _tag_spans(doc: Doc, base: int) -> List[List[Any]]:
    """[tag, start, end, events]: the stretches of the history in which each
    thread's allocations carried the tag (a tag is open until that thread
    allocates without it). Only the history's events tell this."""
    by_id = doc["_stack_by_id"]
    open_: Dict[Tuple[str, Optional[int]], List[int]] = {}
    spans: Dict[str, List[List[int]]] = {}
    for e in doc["history"]["events"]:
        if e["op"] == "free":
            continue
        st = by_id.get(e["stack"]) if e["stack"] else None
        tags = set(st["tags"]) if st else set()
        t = e["time_ns"] - base
        th = e.get("thread")
        for key in [k for k in open_ if k[1] == th and k[0] not in tags]:
            s = open_.pop(key)
            spans.setdefault(key[0], []).append(s)
        for tag in tags:
            s = open_.get((tag, th))
            if s is None:
                open_[(tag, th)] = [t, t, 1]
            else:
                s[1] = max(s[1], t)
                s[2] += 1
    for key, s in open_.items():
        spans.setdefault(key[0], []).append(s)
    out = []
    ranked = sorted(spans.items(), key=lambda kv: -sum(s[2] for s in kv[1]))[:MAX_TAGS]
    for tag, ss in ranked:
        ss.sort()
        merged: List[List[int]] = []
        for s in ss:
            if merged and s[0] <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], s[1])
                merged[-1][2] += s[2]
            else:
                merged.append(list(s))
        while len(merged) > MAX_TAG_SPANS:
            # Join the spans closest together until few enough are left.
            gaps = sorted(merged[i + 1][0] - merged[i][1] for i in range(len(merged) - 1))
            cut = gaps[len(merged) - MAX_TAG_SPANS - 1]
            joined = [merged[0]]
            for s in merged[1:]:
                if s[0] - joined[-1][1] <= cut:
                    joined[-1][1] = max(joined[-1][1], s[1])
                    joined[-1][2] += s[2]
                else:
                    joined.append(s)
            merged = joined
        out += [[tag, s[0], s[1], s[2]] for s in merged]
    return out


def _tensors_data(doc: Doc, base: int, kind_ix: Dict[str, int],
                  order: Optional[axis.EventOrder]) -> Optional[Dict[str, Any]]:
    """The framework's level of a document (model.tensor_level), the one the
    page shows first: its sites, per site and per stack, and its allocations
    (the tensors and the memory outside the framework's segments), its
    series' points in event order too where the timeline is drawn in it
    (order); None without a tensors section."""
    lv = model.tensor_level(doc)
    if lv is None:
        return None
    ts = doc["tensors"].get("series")
    series = None
    if ts and ts["time_ns"]:
        series = {"t": [t - base for t in ts["time_ns"]],
                  "cols": [{"device": c["device"], "live": c["live_bytes"]} for c in ts["columns"]]}
        if order:
            series["at"] = [order.last(t) for t in series["t"]]
    return {"framework": doc["tensors"]["framework"], "sites": _sites_data(lv),
            "stack_sites": _sites_data(lv, per_stack=True), "allocs": _allocs_data(lv, base, kind_ix),
            "devices": doc["tensors"]["devices"], "series": series}


def _doc_data(doc: Doc, name: str, frames: _Frames, kind_ix: Dict[str, int]) -> Dict[str, Any]:
    base = _time_base(doc)
    fr = doc.get("failed_request")
    series = _series_data(doc, base)
    order = axis.EventOrder(doc, base) if series["fine"] else None
    marks = _marks(doc, base, order)
    series["axis"] = axis.axis(series, marks, doc["time_ns"] - base)
    return {
        "label": model.process_label(doc), "file": name, "reason": doc["reason"], "seq": doc["seq"],
        "pid": doc["pid"], "rank": doc["process"].get("rank"),
        # Epoch nanoseconds exceed what a JavaScript number holds: as text.
        "time_ns": str(doc["time_ns"]), "base_ns": str(base), "end": doc["time_ns"] - base,
        "summary": doc["summary"],
        "devices": [{"index": d["index"], "live": d["live_bytes"], "total": d.get("total_bytes"),
                     "kinds": d["kinds"],
                     "granularity": (d.get("pages") or {}).get("granularity") or 2 << 20,
                     "pages": d.get("pages")} for d in doc["devices"]],
        "failed": None if fr is None else {"device": fr["device"], "size": fr["size"], "api": fr["api"],
                                           "stack": fr["stack"]},
        "stacks": _stacks_data(doc, frames),
        "sites": _sites_data(doc),
        "stack_sites": _sites_data(doc, per_stack=True),
        "allocs": _allocs_data(doc, base, kind_ix),
        "tensors": _tensors_data(doc, base, kind_ix, order),
        "series": series,
        "history": {"events": len(doc["history"]["events"]), "dropped": doc["history"]["dropped"]},
        "marks": marks,
    }


def payload(docs: Sequence[Doc], mode: str, files: Sequence[str]) -> Dict[str, Any]:
    """Everything report.js draws, compact: allocations and sites as columns,
    frames deduplicated across documents, times relative to each document's
    series start (base_ns)."""
    frames = _Frames()
    kinds = list(KINDS)
    for d in docs:
        for a in d["allocations"]:
            if a["kind"] not in kinds:
                kinds.append(a["kind"])
        if d.get("tensors") and model.TENSOR_KIND not in kinds:
            kinds.append(model.TENSOR_KIND)
    kind_ix = {k: i for i, k in enumerate(kinds)}
    data: Dict[str, Any] = {"version": 1, "mode": mode, "files": list(files), "kinds": kinds,
                            "docs": [_doc_data(d, f, frames, kind_ix) for d, f in zip(docs, files)]}
    # A diff or a merge compares the tensor level where every document has it.
    leveled, _ = model.levels(docs)
    if mode == "diff":
        rows = model.diff(leveled[0], leveled[1])
        data["diff"] = {"title": [r["title"] for r in rows], "stack": [r["stack"] for r in rows],
                        "doc": [1 if r["in"] == "new" else 0 for r in rows],
                        **{k: [r[k] for r in rows] for k in ("old_bytes", "new_bytes", "delta_bytes",
                                                             "old_count", "new_count", "delta_count")}}
    elif mode == "merge":
        m = model.merge(leveled)
        # Each document's times count from its own base: where those lie
        # relative to the earliest, for one time axis across processes.
        bases = [int(x["base_ns"]) for x in data["docs"]]
        data["merge"] = {
            "align": "step" if align_on_steps(docs) else "time",
            "processes": [{"label": p["label"], "doc": i, "live": p["live_bytes"], "peak": p["peak_bytes"],
                           "count": p["live_count"], "reason": p["reason"], "offset": bases[i] - min(bases)}
                          for p, i in zip(m["processes"], m["order"])],
            "title": [s["title"] for s in m["sites"]], "stack": [s["stack"] for s in m["sites"]],
            "doc": [s["doc"] for s in m["sites"]], "live": [s["live_bytes"] for s in m["sites"]],
            "count": [s["live_count"] for s in m["sites"]],
            "by": [s["by_process"] for s in m["sites"]]}
    data["frames"] = frames.data()
    return data


# --- The page --------------------------------------------------------------------------

def _title(docs: Sequence[Doc], mode: str) -> str:
    if mode == "single":
        d = docs[0]
        return f"{d['reason']} snapshot of {model.process_label(d)}"
    if mode == "diff":
        return f"diff: {model.process_label(docs[0])} \u2192 {model.process_label(docs[1])}"
    return f"merge of {len(docs)} processes"


_JS_SECTIONS = (
    ("timeline", "Timeline", "Live bytes over time per device and kind, with the out-of-memory, "
     "the peak and the region tags of the last events."),
    ("flame", "Live bytes by stack", "An icicle graph: the outermost frame at the top. Click a frame to "
     "zoom into it, click the top bar to zoom out; the search box highlights matching frames."),
    ("sites", "Allocation sites", "Click a column to sort, type to filter (column:text to filter one "
     "column), click a row for its whole stack."),
    ("allocations", "Allocations", "Every live allocation, a page at a time."),
    ("addrmap", "Address space", "Each cell is a page at the allocation granularity, coloured by how much "
     "of it live allocations cover: partly used pages strand the rest."),
)


def report(docs: Sequence[Doc], mode: str, files: Sequence[str]) -> str:
    """The self-contained HTML report of docs (load.load() documents): mode
    "single" (one), "diff" (older, newer) or "merge" (several processes);
    files: their names as given, in the same order."""
    if mode not in ("single", "diff", "merge"):
        raise ValueError(f"unknown mode {mode!r}")
    if not docs or len(files) != len(docs) or (mode == "single" and len(docs) != 1) \
            or (mode == "diff" and len(docs) != 2):
        raise ValueError(f"mode {mode}: {len(docs)} documents, {len(files)} names")
    js, css = _asset("report.js"), _asset("report.css")
    csp = (f"default-src 'none'; script-src {_csp_hash(js)}; style-src {_csp_hash(css)}; "
           "base-uri 'none'; form-action 'none'")
    title = _title(docs, mode)
    nav = ['<a href="#diagnosis">diagnosis</a>']
    body = [_diagnosis_section(docs, mode, files)]
    for sid, head, note in _JS_SECTIONS:
        if mode == "diff" and sid == "sites":
            head = "Growth by site"
            note = "What each site gained from the older snapshot to the newer. " + note
        if mode == "merge" and sid == "sites":
            head, note = "Sites by process", "Live bytes of each site in each process. " + note
        nav.append(f'<a href="#{sid}">{esc(head.lower())}</a>')
        body.append(f'<section id="{sid}" class="dyn"><h2>{esc(head)}</h2><p class="note">{esc(note)}</p>'
                    f'<div class="body" id="{sid}-body"><p class="muted needs-js">This section is drawn by '
                    "the page's script: allow JavaScript to see it.</p></div></section>")
    for part, label in ((_leaks_section(docs, mode), "leaks"),
                        (_fragmentation_section(docs, mode), "fragmentation"),
                        (_stats_section(docs), "counters")):
        if part:
            nav.append(f'<a href="#{part.split(chr(34), 2)[1]}">{label}</a>')
            body.append(part)
    files_html = ", ".join(f"<code>{esc(f)}</code>" for f in files)
    data = json_for_script(payload(docs, mode, files))
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n",
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n',
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n',
        '<meta name="generator" content="gpumemtrace view">\n',
        f"<title>gpumemtrace: {esc(title)}</title>\n<style>{css}</style>\n</head>\n",
        f'<body class="mode-{mode}">\n<header><h1>gpumemtrace <span class="muted">{esc(title)}</span></h1>',
        f'<p class="files">{files_html}</p><nav>{" ".join(nav)}</nav></header>\n',
        '<div id="gmt-error" class="error" hidden></div>\n',
        '<div id="levels" class="levels" hidden></div>\n<main>\n' if any(d.get("tensors") for d in docs)
        else "<main>\n",
        "\n".join(body),
        '\n</main>\n<div id="tip" class="tip" hidden></div>\n',
        f'<script type="application/json" id="gmt-data">{data}</script>\n',
        f"<script>{js}</script>\n</body></html>\n",
    ])
