"""The terminal view of several processes (ranks): the processes, the ranks
at a glance, the totals, the out-of-memory ones and the sites across them.
merge_facts() returns the data, merge_text() prints it (through
text.Text)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from . import model
from .model import fmt_bytes
from .text import (Doc, Span, Text, clean, cut, device_name, fmt_duration, fmt_time, kind_bytes, kinds_list, plural,
                   site_title, text_width)

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
    # A site that holds nothing live in any process (a site of the other
    # level, or one whose memory is all gone) is not a top site.
    live_sites = [s for s in m["sites"] if s["live_bytes"] > 0]
    for s in live_sites[:top]:
        per = s["by_process"][:len(procs)]
        having = [i for i, b in enumerate(per) if b]
        lo = min(range(len(per)), key=lambda i: (per[i], i)) if per else 0
        hi = max(range(len(per)), key=lambda i: (per[i], -i)) if per else 0
        sites.append(dict(s, by_process=per, processes_with=len(having), min_index=lo, max_index=hi))
    return {"processes": procs, "docs": ordered, "live_bytes": m["live_bytes"],
            "live_count": sum(p["live_count"] for p in procs),
            "peak_sum": sum(p["peak_bytes"] for p in procs),
            "kinds": sorted(kinds.items(), key=lambda kb: (-kb[1], kb[0])),
            "ooms": ooms, "sites": sites, "site_count": len(live_sites), "fleet": model.fleet(m, ordered),
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


def _ranks(t: "Text", f: Dict[str, Any], docs: Sequence[Doc], top: int) -> None:
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
    n = len(procs)
    if out:
        words = []
        for i in out[:top]:
            d = procs[i]["peak_bytes"] - fl["peak"]["median"]
            words.append((f"{_short_label(procs[i])} (peak {fmt_bytes(procs[i]['peak_bytes'])}, "
                          f"{'+' if d >= 0 else '-'}{fmt_bytes(abs(d))} from the median)", "yellow"))
        t.flow("  outliers: ", words, hang=4, sep=", ")
    else:
        t.add("  outliers: " + model.no_outliers_text(fl, n))
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
        t.add("  processes by dominant site (the site holding most of each one's live bytes):")
        for g in groups[:top]:
            site = f["all_sites"][g["site"]]
            t.flow("    ", [(plural(len(g["processes"]), "process", "processes") + ":", "bold"),
                                _group_label(procs, g["processes"])], hang=6, sep=" ")
            t.add("      ", site_title(docs[site["doc"]], site["stack"], t.width - 6))
        if len(groups) > top:
            t.add(f"    … and {len(groups) - top} more groups")


def merge_text(docs: Sequence[Doc], width: int = 80, color: bool = False, top: int = 10,
               level: str = "tensors") -> str:
    """One report of several processes (ranks): each process, the totals,
    the out-of-memory ones and the sites across them (at the level asked
    for, where every process has it)."""
    f = merge_facts(docs, top, level)
    t = Text(width, color)
    procs = f["processes"]
    hosts = {p["host"] for p in procs if p["host"]}
    t.add(("gpumemtrace merge: ", "bold"), (f"{len(procs)} processes", "bold"),
          f" on {plural(len(hosts), 'host')}" if hosts else "",
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
    t.flow("  live: ", [(fmt_bytes(f["live_bytes"]), "bold"), f"in {plural(f['live_count'], 'allocation')}",
                        f"across {plural(len(procs), 'process', 'processes')}"], hang=4, sep=" ")
    if f["kinds"]:
        t.flow("  by kind: ", kinds_list(f["kinds"]), hang=4, sep=", ")
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
                                             f"in {plural(s['live_count'], 'allocation')},",
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
