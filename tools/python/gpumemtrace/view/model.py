"""What the views share: byte formatting, frame and stack labels, the key that
matches one allocation site across processes, and the diff and merge of several
snapshots. Functions return data; the views print it.

Documents are those of load.load() (every key present, checked types).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

Doc = Dict[str, Any]


def fmt_bytes(n: Optional[int]) -> str:
    """n bytes the way the tracer writes them: "0 B", "512 B", "4.00 MiB", "32.0 MiB"."""
    if n is None:
        return "?"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        n /= 1024.0
        if n < 1024 or unit == "EiB":
            digits = 2 if n < 10 else 1 if n < 100 else 0
            return f"{sign}{n:.{digits}f} {unit}"
    return f"{sign}{n} B"  # not reached


def fmt_delta(n: int) -> str:
    return ("+" if n > 0 else "") + fmt_bytes(n)


def module_name(path: Optional[str]) -> str:
    return os.path.basename(path) if path else "?"


def frame_text(f: Dict[str, Any]) -> str:
    """One frame in one line: "device_alloc (train_loop.c:101)", "step (train.py:49)",
    "libfoo.so+0x1f7a" when nothing better is known."""
    fn = f.get("function")
    where = ""
    if f.get("file"):
        where = os.path.basename(f["file"]) + (f":{f['line']}" if f.get("line") is not None else "")
    if fn:
        text = fn
    elif f.get("python"):
        text = "<python>"
    else:
        text = module_name(f.get("module")) + ("+" + f["offset"] if f.get("offset") else "")
    if where:
        text += f" ({where})"
    elif fn and not f.get("python") and f.get("module"):
        text += f" in {module_name(f['module'])}"
    return text + (" [inlined]" if f.get("inlined") else "")


def user_frames(stack: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The stack's frames from its site's frame outwards (the tracer decided
    which frame that is: stacks[].site), innermost first."""
    if not stack or stack["site"]["frame"] is None:
        return []
    return stack["frames"][stack["site"]["frame"]:]


def stack_title(doc: Doc, sid: int) -> str:
    """A site's name in one line: the label the tracer gave its site, and the
    runtime call made there ("device_alloc (train_loop.c:101) via cudaMalloc")."""
    st = doc["_stack_by_id"].get(sid) if sid else None
    if st is None:
        return "(no stack recorded)"
    title = st["site"]["label"]
    if st.get("runtime_call"):
        title += f" via {st['runtime_call']}"
    return title


def frame_key(f: Dict[str, Any]) -> Tuple[Any, ...]:
    """What identifies a frame across processes: names, not addresses (ASLR)."""
    if f.get("python"):
        return ("py", f.get("function"), f.get("file"), f.get("line"))
    if f.get("function"):
        return ("c", f["function"], module_name(f.get("module")), f.get("file"), f.get("line"))
    return ("c", None, module_name(f.get("module")), f.get("offset"))


def stack_key(doc: Doc, sid: int) -> Tuple[Any, ...]:
    """The identity of stack sid's site across snapshots of different
    processes: what the tracer's site ids stand for within one (the chain of
    the program's own frames from the site's frame outwards, by name, not
    address), or the site's frame alone when it is not the program's."""
    st = doc["_stack_by_id"].get(sid) if sid else None
    if st is None:
        return ("none",)
    site = st["site"]
    if site["frame"] is None:
        return ("empty",)
    frames = st["frames"][site["frame"]:]
    if not site["user"]:
        return ("library", frame_key(frames[0]))
    return ("user",) + tuple(frame_key(f) for f in frames if f["role"] == "user")


def process_label(doc: Doc) -> str:
    """"rank 3 (pid 412 on node7)", or "pid 412" outside a distributed job."""
    p = doc["process"]
    host = f" on {p['host']}" if p.get("host") else ""
    if p.get("rank") is not None:
        return f"rank {p['rank']} (pid {doc['pid']}{host})"
    return f"pid {doc['pid']}{host}"


def site_groups(doc: Doc) -> List[Dict[str, Any]]:
    """The document's per-stack sites (doc["sites"]) gathered into allocation
    sites (the tracer's stacks[].site.id), most live bytes first: {"site",
    "stack" (the stack holding most of it: its title and frames stand for the
    site), "stacks" (every stack id, most live bytes first), "live_bytes",
    "live_count", "allocs", "alloc_bytes", "peak_bytes" (the sum of its
    stacks' peaks: exact for one stack, at most that for several),
    "growth_bytes" (summed), "rising", "falling" (its top stack's windows),
    "growing", "suspect" (any of its stacks)}. Stack 0 (no stack recorded) is
    a site of its own."""
    groups: Dict[Any, Dict[str, Any]] = {}
    for x in doc["sites"]:
        st = doc["_stack_by_id"].get(x["stack"]) if x["stack"] else None
        key = ("site", st["site"]["id"]) if st is not None else ("stack", x["stack"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"site": key[1] if key[0] == "site" else None, "stack": x["stack"], "stacks": [],
                               "live_bytes": 0, "live_count": 0, "allocs": 0, "alloc_bytes": 0,
                               "peak_bytes": 0, "growth_bytes": 0, "rising": x["rising_windows"],
                               "falling": x["falling_windows"], "growing": False, "suspect": False}
        g["stacks"].append(x["stack"])
        for k in ("live_bytes", "live_count", "allocs", "alloc_bytes", "peak_bytes", "growth_bytes"):
            g[k] += x[k]
        g["growing"] = g["growing"] or bool(x["growing"])
        g["suspect"] = g["suspect"] or bool(x["suspect"])
    # doc["sites"] comes most live bytes first: each group's first stack is its largest.
    return sorted(groups.values(), key=lambda g: (-g["live_bytes"], -g["live_count"], g["stack"]))


# What the kind of a tensor reads as in the views: it is no kind of the
# driver's (vocab.KINDS) but the framework's.
TENSOR_KIND = "tensor"


def tensor_level(doc: Doc) -> Optional[Doc]:
    """The document at the framework's level (docs/guide.md, "Two levels of
    memory"), or None when it has no tensors section: a view of doc whose
    allocations are the framework's live tensors (kind "tensor") and the
    driver's allocations that are not the framework's (no framework_segment),
    and whose sites are the tensor sites and those of the driver's stacks
    that hold no memory of the framework's segments — nor, holding nothing
    now, share an allocation site with them: segments the framework has
    released (its cache emptied at an out-of-memory), whose rise and fall
    are the allocator's, not a leak of the program's. With the memory cached
    free inside the segments (tensors.devices[].cached_bytes), they add up to
    the device's live bytes: the tracer decided which is which, this only
    puts them side by side. Everything else is the document's own."""
    t = doc.get("tensors")
    if not t:
        return None
    segment_stacks = doc.get("_segment_stacks")
    if segment_stacks is None:
        segment_stacks = {a["stack"] for a in doc["allocations"] if a.get("framework_segment")}
    allocations = [dict(a, kind=TENSOR_KIND, api=t["framework"] or "framework", thread=0)
                   for a in t["allocations"]]
    allocations += [a for a in doc["allocations"] if not a.get("framework_segment")]
    by_id = doc.get("_stack_by_id") or {}

    def site_of(stack: int) -> Any:
        return ((by_id.get(stack) or {}).get("site") or {}).get("id")

    segment_sites = {site_of(k) for k in segment_stacks} - {None}
    sites = list(t["sites"]) + [s for s in doc["sites"] if s["stack"] not in segment_stacks and not (
        s["live_bytes"] == 0 and site_of(s["stack"]) in segment_sites)]
    sites.sort(key=lambda s: -s["live_bytes"])
    return dict(doc, allocations=allocations, sites=sites, _level="tensors")


def level(doc: Doc, which: str = "tensors") -> Doc:
    """doc at the level asked for: "tensors" (tensor_level, when it has one)
    or "driver" (the driver's allocations: doc itself)."""
    return (tensor_level(doc) if which == "tensors" else None) or doc


def levels(docs: Sequence[Doc], which: str = "tensors") -> Tuple[List[Doc], str]:
    """Several documents at one level, to be compared or merged: the tensor
    level when asked for and every one of them has it (a framework's tensors
    beside another's segments would compare tensors with segments), else
    the driver's; and which it is."""
    if which == "tensors" and docs and all(d.get("tensors") for d in docs):
        return [tensor_level(d) or d for d in docs], "tensors"
    return list(docs), "driver"


def diff(old: Doc, new: Doc) -> List[Dict[str, Any]]:
    """Growth by site from old to new, most growth first: one row per site in
    either, {"key", "title", "old_bytes", "new_bytes", "delta_bytes",
    "old_count", "new_count", "delta_count", "stack" (the id in new, or in old
    when gone: "in" says which)}. Sites unchanged in bytes and count are left out."""
    rows: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
    for which, doc in (("old", old), ("new", new)):
        for s in doc["sites"]:
            key = stack_key(doc, s["stack"])
            r = rows.get(key)
            if r is None:
                r = rows[key] = {"key": key, "title": stack_title(doc, s["stack"]),
                                 "old_bytes": 0, "new_bytes": 0, "old_count": 0, "new_count": 0,
                                 "stack": s["stack"], "in": which}
            elif which == "new":
                r["stack"], r["in"], r["title"] = s["stack"], "new", stack_title(doc, s["stack"])
            r[f"{which}_bytes"] += s["live_bytes"]
            r[f"{which}_count"] += s["live_count"]
    out = []
    for r in rows.values():
        r["delta_bytes"] = r["new_bytes"] - r["old_bytes"]
        r["delta_count"] = r["new_count"] - r["old_count"]
        if r["delta_bytes"] or r["delta_count"]:
            out.append(r)
    out.sort(key=lambda r: (-r["delta_bytes"], -r["delta_count"], r["title"]))
    return out


def merge(docs: Sequence[Doc]) -> Dict[str, Any]:
    """Snapshots of several processes (ranks) as one: {"processes": [{"label",
    "pid", "rank", "host", "reason", "live_bytes", "peak_bytes", "live_count",
    "oom" (the failed request or None)}] in rank order, "sites": [{"key",
    "title", "live_bytes", "live_count", "by_process": [bytes per process, in
    the order of "processes"], "doc", "stack" (where the title came from)}],
    most live bytes first, "live_bytes" (the sum)}."""
    order = sorted(range(len(docs)), key=lambda i: (
        docs[i]["process"].get("rank") is None, docs[i]["process"].get("rank") or 0,
        docs[i]["process"].get("host") or "", docs[i]["pid"], docs[i]["time_ns"]))
    procs = []
    sites: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
    for pos, i in enumerate(order):
        d = docs[i]
        procs.append({"label": process_label(d), "pid": d["pid"], "rank": d["process"].get("rank"),
                      "host": d["process"].get("host"), "reason": d["reason"],
                      "live_bytes": d["summary"]["live_bytes"], "peak_bytes": d["summary"]["peak_bytes"],
                      "live_count": d["summary"]["live_count"], "oom": d.get("failed_request")})
        for s in d["sites"]:
            key = stack_key(d, s["stack"])
            m = sites.get(key)
            if m is None:
                m = sites[key] = {"key": key, "title": stack_title(d, s["stack"]), "live_bytes": 0,
                                  "live_count": 0, "by_process": [0] * len(docs), "doc": i,
                                  "stack": s["stack"]}
            m["live_bytes"] += s["live_bytes"]
            m["live_count"] += s["live_count"]
            m["by_process"][pos] += s["live_bytes"]
    merged = sorted(sites.values(), key=lambda m: (-m["live_bytes"], m["title"]))
    return {"processes": procs, "order": order, "sites": merged,
            "live_bytes": sum(p["live_bytes"] for p in procs)}


def no_outliers_text(fl: Dict[str, Any], n: int) -> str:
    """What "outliers" says when skew() found none among n processes (the
    terminal's and the HTML report's words): with two, nothing is judged
    (the median lies between them, each as far from it as the other) and
    their difference is given; else the limits the rule used."""
    if n < 3:
        return (f"not judged among {n} processes; their peaks differ by "
                f"{fmt_bytes(fl['peak']['max'] - fl['peak']['min'])}")
    return (f"none (every process within {fmt_bytes(fl['live']['limit'])} of the median live and "
            f"{fmt_bytes(fl['peak']['limit'])} of the median peak: three median deviations, at least 5 %)")


def skew(values: Sequence[int]) -> Dict[str, Any]:
    """The spread of one number over processes: max, median and min (with
    the index of the max and the min) and the outliers — the processes whose
    value lies further from the median than three median absolute
    deviations, and than 5 % of the median (the larger is "limit") —
    furthest first."""
    n = len(values)
    if n == 0:
        return {"max": 0, "max_index": None, "median": 0, "min": 0, "min_index": None, "outliers": [], "limit": 0}
    s = sorted(values)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) // 2
    dev = sorted(abs(v - med) for v in values)
    mad = dev[n // 2] if n % 2 else (dev[n // 2 - 1] + dev[n // 2]) // 2
    limit = max(3 * mad, med // 20)
    out = sorted((i for i, v in enumerate(values) if abs(v - med) > limit), key=lambda i: (-abs(values[i] - med), i))
    hi = max(range(n), key=lambda i: (values[i], -i))
    lo = min(range(n), key=lambda i: (values[i], i))
    return {"max": values[hi], "max_index": hi, "median": med, "min": values[lo], "min_index": lo, "outliers": out,
            "limit": limit}


def first_failure_ns(doc: Doc) -> int:
    """When a process first ran out of memory in the episode its snapshot
    describes: the episode's first failure, else the snapshot's time."""
    ep = doc.get("episode")
    return ep["first_ns"] if ep and ep.get("first_ns") else doc["time_ns"]


def fleet(m: Dict[str, Any], docs: Sequence[Doc]) -> Dict[str, Any]:
    """Many ranks at a glance, from merge(m) and its documents in the order of
    its processes: the skew of live and peak bytes, the first process to run
    out of memory (and the site of its failed request), and the processes
    grouped by the site holding most of their live bytes (their dominant
    site), the largest groups first."""
    procs = m["processes"]
    out: Dict[str, Any] = {"live": skew([p["live_bytes"] for p in procs]),
                           "peak": skew([p["peak_bytes"] for p in procs]), "first_oom": None, "groups": []}
    ooms = sorted((first_failure_ns(d), i) for i, (p, d) in enumerate(zip(procs, docs)) if p["oom"])
    if ooms:
        t, i = ooms[0]
        out["first_oom"] = {"index": i, "time_ns": t, "stack": procs[i]["oom"].get("stack", 0),
                            "next_ns": ooms[1][0] if len(ooms) > 1 else None}
    best = [(0, -1)] * len(procs)
    for k, site in enumerate(m["sites"]):
        for j, b in enumerate(site["by_process"][:len(procs)]):
            if b > best[j][0]:
                best[j] = (b, k)
    groups: Dict[int, List[int]] = {}
    for j, (_, k) in enumerate(best):
        groups.setdefault(k, []).append(j)
    out["groups"] = [{"site": k, "processes": v} for k, v in
                     sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))]
    return out


def ranges(numbers: Sequence[int]) -> str:
    """"0-3, 5, 7-9" of ascending integers."""
    parts: List[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        parts.append(str(numbers[i]) if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    return ", ".join(parts)
