"""The terminal view of two snapshots: what changed from the first to the
second, by site, device and kind. diff_facts() returns the data,
diff_text() prints it (through text.Text)."""

from __future__ import annotations

from typing import Any, Dict, List

from . import model
from .model import fmt_bytes, fmt_delta
from .text import Doc, Text, device_name, fmt_duration, fmt_time, kind_bytes, site_title_lines, text_width

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
    t = Text(width, color)
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
