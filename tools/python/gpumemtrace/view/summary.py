"""The terminal summary of one snapshot, no wider than a given width,
coloured with ANSI codes only when asked: facts() returns the data,
summary() prints it (through text.Text). The diff of two snapshots is
diff_view.py's, the merged report of several processes merge_view.py's."""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import model
from .model import fmt_bytes
from .text import (Doc, Span, Text, clean, cut, device_name, fmt_duration, fmt_time, kinds_list, kinds_text,
                   label_frames, percent, places_by_stack, plural, site_frames, site_title, sorted_kinds, text_width)

_REASONS = {"oom": "out of memory", "exit": "at exit", "peak": "at a new peak",
            "signal": "on a signal", "api": "asked for by gmt_dump()"}
# Tracer counters that mean the record may be incomplete or wrong, or that
# the program's stderr missed what the tracer said (src/tracer/tracer.h,
# GMT_STATS, says what each counts).
_WARN_STATS = {
    "ring_full": "times a thread found its ring full",
    "gaps_skipped": "events given up on after waiting (their order may be lost)",
    "late_events": "events applied after their place in the order was given up",
    "unknown_frees": "frees, releases and unmaps of nothing the tracer knew",
    "debts_dropped": "late frees forgotten: too many open at one address set",
    "handles_forgotten": "released VMM handles forgotten with a record still to come",
    "untracked_calls": "intercepted calls not recorded (tracer off or out of memory)",
    "device_unknown": "allocations whose device could not be asked",
    "snapshot_errors": "snapshots that could not be written",
    "log_lines_dropped": "lines of the tracer not written: its stderr was full (nobody read it)",
}


# ---------------------------------------------------------------------------
# One snapshot

def facts(doc: Doc, top: int = 10, frames: int = 3, level: str = "tensors") -> Dict[str, Any]:
    """What the summary of one snapshot shows, as data (bytes as ints); the
    three largest sites with `frames` frames each, the others with one. The
    sites, suspects and tags are those of the level asked for: "tensors"
    (model.tensor_level: a framework's tensors and the memory outside its
    segments, where the snapshot has them) or "driver"."""
    lv = model.level(doc, level)
    by_stack, host = places_by_stack(lv)
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
            # PyTorch's history replayed with expandable segments: where it
            # could not answer, why (where it did, the verdict or the
            # remedy says what).
            "replay_why": (f"{dg['replay']['setting']}: {dg['replay'].get('why') or '?'}"
                           if dg.get("replay") and not dg["replay"]["replayed"] else None),
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
                     "live": d["live_bytes"], "kinds": sorted_kinds(d["kinds"]),
                     "pools": d.get("pools"), "other": d.get("other_processes"),
                     "pages": d.get("pages"), "fragmentation": d.get("fragmentation")})
    out["devices"] = devs
    out["host"] = sorted_kinds(host)

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
                      "share": percent(x["live_bytes"], live_total),
                      "places": [(dev, kind, b) for (dev, kind), b in places],
                      "runtime_call": ", ".join(calls) or None,
                      "tags": list(st["tags"]) if st else [],
                      "growing": x["growing"], "suspect": x["suspect"], "growth_bytes": x["growth_bytes"],
                      "frames": label_frames(doc, x["stack"], frames if rank < 3 else 1)})
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
            "joined": fw["segments_joined"], "truncated": bool(fw.get("truncated")), "by_free": segs,
            "pending": pending_frees_text(fw.get("pending_frees"), fw.get("reason") == "oom")}


def pending_frees_text(p: Any, at_oom: bool) -> Optional[str]:
    """The frees a framework deferred (numba's pending deallocations), in
    the views' words; None where it said nothing of them."""
    if not isinstance(p, dict):
        return None
    held = f"{plural(p['count'], 'pending free')} ({fmt_bytes(p['bytes'])})"
    if not at_oom:
        return f"{held} not yet given back to the driver"
    if p["count"] == 0:
        return "no pending free to flush when the allocation failed"
    flushed = (f"it flushed {'all' if p['flushed_count'] == p['count'] else p['flushed_count']} "
               f"({fmt_bytes(p['flushed_bytes'])}) before its retry, which failed")
    if p["flushed_count"] == 0:
        flushed = "it flushed none before its retry (cleanup deferred), which failed"
    return f"{held} held when the allocation failed; {flushed}"


def block_state(state: str) -> str:
    """A block's state in the views' words."""
    return "active" if state in _ACTIVE else "free" if state in _FREE else state


def summary(doc: Doc, width: int = 80, color: bool = False, top: int = 10, frames: int = 3,
            level: str = "tensors") -> str:
    """The terminal summary of one snapshot, its sites at the level asked
    for (facts())."""
    f = facts(doc, top, frames, level)
    f["frames_shown"] = frames
    t = Text(width, color)
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


def _header(t: Text, doc: Doc, f: Dict[str, Any]) -> None:
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
                            f"in {plural(s['live_count'], 'allocation')};",
                            f"peak {fmt_bytes(s['peak_bytes'])};",
                            f"{plural(s['total_allocs'], 'allocation')} and "
                            f"{plural(s['total_frees'], 'free')} so far"], hang=11, sep=" ")


def _diagnosis(t: Text, doc: Doc, f: Dict[str, Any]) -> None:
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
        if dg.get("replay_why"):
            t.wrap(dg["replay_why"], indent=2, hang=4, first=[("not replayed: ", "dim")])
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


def _episode(t: Text, doc: Doc, ep: Dict[str, Any], top: int) -> None:
    n = ep["failures"]
    t.heading("Out-of-memory episode",
              f"#{ep['id']}: {plural(n, 'failure')} over {fmt_duration(ep['span_ns'])}")
    if ep["described"] == 0:
        t.wrap(f"this snapshot was taken when the episode ended ({ep['end']}), after "
               f"{plural(ep['not_written'], 'failure')} no snapshot was taken at", indent=2, hang=4)
    elif n > 1:
        t.wrap(f"this snapshot is of failure {ep['described']} of {n}, the last the program was told of"
               if ep["described"] == n else f"this snapshot is of failure {ep['described']} of {n}",
               indent=2, hang=4)
    for i, fl in enumerate(ep["listed"]):
        if i == len(ep["listed"]) - 1 and n > len(ep["listed"]):
            t.add(f"  … {plural(n - len(ep['listed']), 'failure')} more, then")
        when = "first" if i == 0 else f"+{fmt_duration(fl['since_ns'])}"
        freed = (f"after {fmt_bytes(fl['freed_bytes'])} in {plural(fl['freed_count'], 'allocation')} freed"
                 if fl["freed_bytes"] else "nothing freed since" if i else "")
        t.flow(f"  #{fl['failure']:<4}", [f"{when:>10}", (fmt_bytes(fl["size"]), "bold"), f"by {fl['api']}",
                                       f"live {fmt_bytes(fl['live_bytes'])}"] + ([freed] if freed else []),
               hang=8)
    fd = ep["freed"]
    if fd["bytes"]:
        t.wrap(f"the program freed {fmt_bytes(fd['bytes'])} in {plural(fd['count'], 'allocation')} during "
               "the episode and still failed: what is left is live", indent=2, hang=4)
        for x in fd["sites"][:top]:
            t.add("    ", (fmt_bytes(x["bytes"]), "bold"), f"  {plural(x['count'], 'alloc')}  {x['kind']}")
            t.add("      ", site_title(doc, x["stack"], t.width - 6))
        if fd["other_bytes"]:
            t.add(f"    {fmt_bytes(fd['other_bytes'])} in {plural(fd['other_count'], 'allocation')} of other sites")


# Segments and blocks of each segment the summary lists at most.
SEGMENTS_SHOWN = 5
BLOCKS_SHOWN = 6


def _framework(t: Text, fw: Dict[str, Any], top: int) -> None:
    """The framework allocator's own counters (PyTorch: memory_allocated,
    memory_reserved), how its segments joined the driver's memory, and its
    two levels: the segments with most free bytes, each with its blocks."""
    t.heading("Framework's allocator", f"{fw['name']} {fw['version']}")
    if fw["segments"]:
        t.wrap(f"{fw['joined']} of {plural(fw['segments'], 'segment')} joined to the driver's allocations",
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
    if fw["pending"]:
        t.wrap(fw["pending"], indent=2, hang=4)
    segs = fw["by_free"]
    shown = segs[:min(top, SEGMENTS_SHOWN)]
    if shown:
        t.add(f"  segments, most free first ({len(shown)} of {fw['segments']}):")
    for s in shown:
        t.flow(f"    {fmt_bytes(s['size'])} at {s['address']:#x} on {device_name(s['device'])} ",
               [f"({s['type'] or 'segment'}, stream {s['stream'] if s['stream'] is not None else '?'}"
                + (", expandable)" if s["expandable"] else "):"),
                f"{fmt_bytes(s['active_bytes'])} in {plural(s['active_count'], 'active block')},",
                (f"{fmt_bytes(s['free_bytes'])} free in {s['free_count']}", "bold") if s["free_count"]
                else "no free block"]
               + ([f"(largest {fmt_bytes(s['largest_free'])})"] if s["free_count"] > 1 else [])
               + ([] if s["joined"] else ["— no driver allocation starts there"]), hang=6, sep=" ")
        for b in s["blocks"][:BLOCKS_SHOWN]:
            t.add(f"      {fmt_bytes(b['size']):>9}  {block_state(b['state']):<7}"
                  + (f"  {b['frame']}" if b["frame"] and block_state(b["state"]) != "free" else ""))
        if len(s["blocks"]) > BLOCKS_SHOWN:
            t.add(f"      … {plural(len(s['blocks']) - BLOCKS_SHOWN, 'more block')}")
    if fw.get("file"):
        t.wrap(fw["file"], indent=2, hang=4, first=["its own snapshot: "])


def _devices(t: Text, f: Dict[str, Any]) -> None:
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
        t.flow("    by kind: ", kinds_list(d["kinds"]), hang=6, sep=", ")
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
              " live (" + kinds_text([("pinned" if k == "host" else k, b) for k, b in f["host"]]) + ")")


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
    spans.append(plural(x["live_count"], "tensor" if x.get("tensors") else "alloc"))
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


def _level_note(t: Text, lv: Dict[str, Any]) -> None:
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


def _sites(t: Text, doc: Doc, f: Dict[str, Any]) -> None:
    if not f["sites"]:
        t.heading("Top sites by live bytes", "none live")
        _level_note(t, f["level"])
        return
    shown = len(f["sites"])
    t.heading("Top sites by live bytes",
              f"{shown} of {f['sites_live']}" if shown < f["sites_live"] else plural(shown, "site"))
    _level_note(t, f["level"])
    num_w = len(str(shown)) + 1
    for i, x in enumerate(f["sites"]):
        pad = " " * (num_w + 4)
        t.flow(f"  {i + 1:>{num_w - 1}}. ", _site_head(x), hang=len(pad))
        for j, ft in enumerate(x["frames"]):
            lead = "" if j == 0 else "\u2190 " if ft != "…" else "  "
            t.add(pad, (lead + ft, "" if j == 0 else "dim"))


def _leaks(t: Text, doc: Doc, lk: Dict[str, Any], top: int) -> None:
    tot = lk["totals"]
    c = tot["counted"]
    if c["count"]:
        t.heading("Leak check", "at exit")
        t.add("  ", (f"{fmt_bytes(c['bytes'])} in {plural(c['count'], 'allocation')}", "bold red"),
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
        kinds = [k for k, _ in sorted_kinds(g["kinds"])]
        gpus = [d for d in g["devices"] if d >= 0]
        where = ", ".join("pinned host" if k == "host" else k for k in kinds)
        if gpus:
            where += " on " + ", ".join(device_name(d) for d in gpus)
        t.flow(f"  {i + 1}. ", [(cls, "red"), (fmt_bytes(g["bytes"]), "bold"),
                                f"in {plural(g['count'], 'allocation')}" + (f" ({where})" if where else "")],
               hang=5, sep=" ")
        t.add("     at ", site_title(doc, g["stack"], t.width - 8))
        rf = g.get("referenced_from")
        if rf:
            held = rf.get("what") or rf.get("region") or "host memory"
            t.add("     held by ", held, f" at {rf['address']}" if rf.get("address") and rf.get("what")
                  and rf["address"] not in rf["what"] else "")
        elif g["class"] == "leaked":
            unseen = (lk.get("scan") or {}).get("unseen")
            t.add("     no host memory holds its address" + (f" as a pointer ({unseen})" if unseen else ""),
                  style="dim")
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
            t.add(f"    {r['rule']} ({src}): {plural(r['hits'], 'hit')}, {fmt_bytes(r['bytes'])}")
    if lk["suppressions_error"]:
        t.wrap(lk["suppressions_error"], indent=2, hang=4, style="yellow",
               first=[("suppressions file not applied: ", "yellow")])
    sc = lk["scan"]
    if sc.get("done"):
        secs = sc.get("seconds")
        t.wrap(f"scan: {plural(sc.get('mappings') or 0, 'mapping')}, {fmt_bytes(sc.get('bytes'))} read"
               + (f" in {secs:.2f} s" if secs is not None else "")
               + (f"; {fmt_bytes(sc['excluded_bytes'])} of driver bookkeeping left out"
                  if sc.get("excluded_bytes") else ""), indent=2, hang=4, style="dim")
    else:
        t.wrap(sc.get("why") or "reason not given", indent=2, hang=4, style="yellow",
               first=[("no scan (everything not cached counts as leaked): ", "yellow")])


def _suspects(t: Text, doc: Doc, sus: List[Dict[str, Any]], top: int) -> None:
    if not sus:
        return
    # One definition, said where it is shown (guide.md, "Growth"): growth
    # is what a site added after its first round; a round is a step where
    # the program marks them, else a stretch of its allocations and frees.
    steps = bool(doc.get("history", {}).get("steps"))
    t.heading("Leak suspects", "+N: what a site added after its first round")
    for x in sus[:top]:
        t.add("  ", (f"+{fmt_bytes(x['growth_bytes'])}", "yellow bold"), "  ",
              site_title(doc, x["stack"], t.width - 4 - text_width(fmt_bytes(x["growth_bytes"])) - 3))
        now = "still growing; " if x["growing"] else ""
        rounds = "the program's steps" if steps else "stretches of its allocations and frees"
        t.wrap(f"{now}rose in {x['rising']} of its rounds ({rounds}), fell in {x['falling']}; "
               f"{fmt_bytes(x['live_bytes'])} live, peak {fmt_bytes(x['peak_bytes'])}", indent=6, hang=6, style="dim")
    if len(sus) > top:
        t.add(f"  … {len(sus) - top} more", style="dim")


def _p2(n: int) -> str:
    """A size class bound: "512 B", "32 MiB", "1 GiB"."""
    for i, unit in enumerate(("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")):
        if n < 1024 ** (i + 1) or unit == "EiB":
            v = n / 1024 ** i
            return f"{v:.0f} {unit}" if v == int(v) else fmt_bytes(n)
    return fmt_bytes(n)


def _fragmentation(t: Text, f: Dict[str, Any], top: int) -> None:
    for d in f["devices"]:
        pg, fr = d["pages"], d["fragmentation"]
        if not pg and not fr:
            continue
        gran = pg["granularity"] if pg else None
        t.heading(f"Fragmentation on {device_name(d['index'])}",
                  f"pages of {fmt_bytes(gran)}" if gran else "")
        if pg:
            t.add(f"  {plural(pg['pages'], 'page')} hold device memory, {pg['partial']} partly used: ",
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


def _histogram(t: Text, classes: List[Dict[str, Any]], top: int) -> None:
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


def _tags(t: Text, f: Dict[str, Any], top: int) -> None:
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


def _warnings(t: Text, f: Dict[str, Any]) -> None:
    if not f["warnings"]:
        return
    t.heading("Tracer warnings", "the record may be incomplete")
    for k, n, why in f["warnings"]:
        t.wrap(why, indent=2, hang=6, style="", first=[(f"{k} = {n}: ", "yellow")])
