#!/usr/bin/env python3
"""Tests of the viewer's terminal views (tools/python/gpumemtrace/view/summary.py,
diff_view.py and merge_view.py, over text.py): the numbers printed are
those the synthetic snapshots were built with, no line is wider
than asked, colour only when asked, names from a hostile snapshot cannot
reach the terminal as control characters, and the diff and merge show the
right deltas and per-rank bytes. With a build directory, the same on the demo
program's snapshots from the simulated GPU.

    python3 tests/view/test_summary.py [BUILD_DIR]

Exits non-zero when a test fails (meson suite 'viewer')."""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import sys
import tempfile
import unicodedata
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "tools", "python"), HERE]

import fixtures  # noqa: E402
from gpumemtrace.view import diff_view, load, merge_view, model, summary, text  # noqa: E402
from gpumemtrace.view.model import fmt_bytes, fmt_delta  # noqa: E402
from gpumemtrace.view.text import clean, site_title, text_width  # noqa: E402

Doc = Dict[str, Any]
SGR = re.compile(r"\x1b\[[0-9;]*m")
# Every way a name could try to drive a terminal: CSI and OSC sequences, a
# one-byte C1 CSI, bidi overrides and isolates, zero-width and line
# separators, NUL, DEL, a lone surrogate (which cannot even be encoded).
EVIL = ("\x1b[31mRED\x1b[0m\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\u2066\u200b\u2028\u2029"
        "\x00\x7f\ud800\r\n\t")
TESTS: List[Callable[[], None]] = []
BUILD_DIR: Optional[str] = None


def test(fn: Callable[[], None]) -> Callable[[], None]:
    TESTS.append(fn)
    return fn


def eq(got: Any, want: Any, what: str) -> None:
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def has(text: str, part: str, what: str) -> None:
    if part not in text:
        raise AssertionError(f"{what}: {part!r} not in:\n{text}")


def checked(doc: Doc, name: str = "synthetic") -> Doc:
    """doc as the viewer reads it: through JSON and load's checks."""
    return load.parse(json.dumps(doc), name)


def synthetic(**kw: Any) -> Tuple[Doc, Dict[str, Any]]:
    doc, truth = fixtures.synthetic(**kw)
    return checked(doc), truth


def cols(line: str) -> int:
    """Terminal columns of line, counted apart from text.text_width."""
    n = 0
    for ch in SGR.sub("", line):
        if unicodedata.category(ch) in ("Mn", "Me"):
            continue
        n += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return n


def check_width(text: str, width: int, what: str) -> None:
    for i, line in enumerate(text.split("\n")):
        if cols(line) > width:
            raise AssertionError(f"{what}: line {i + 1} is {cols(line)} columns, more than {width}:\n{line}")


def check_safe(text: str, color: bool, what: str) -> None:
    """No character a terminal acts on, except newlines and, with colour,
    SGR sequences; and the text can be written as UTF-8."""
    plain = SGR.sub("", text) if color else text
    for i, ch in enumerate(plain):
        if ch == "\n":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            ctx = plain[max(0, i - 30):i + 10]
            raise AssertionError(f"{what}: raw {ch!r} at {i} in the output: …{ctx!r}…")
    text.encode("utf-8")


def load_groups(doc: Doc) -> List[Dict[str, Any]]:
    return model.site_groups(doc)


def section(text: str, title: str) -> str:
    """The lines from the heading title to the next heading (a line that
    starts without a space) or the end."""
    out: List[str] = []
    inside = False
    for line in text.split("\n"):
        if line.startswith(title):
            inside = True
            out.append(line)
            continue
        if inside:
            if line and not line.startswith(" "):
                break
            out.append(line)
    if not out:
        raise AssertionError(f"no section {title!r} in:\n{text}")
    return "\n".join(out)


def _source_line(path: str, needle: str) -> int:
    """The line of the project's source file `path` holding `needle`."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if needle in text:
                return n
    raise AssertionError(f"{path}: no line holds {needle!r}")


def site_entries(text: str, title: str = "Top sites by live bytes") -> List[str]:
    """The numbered entries of the section `title` (the summary's top
    sites unless told), one string per entry."""
    entries: List[str] = []
    for line in section(text, title).split("\n")[1:]:
        if re.match(r"^\s+\d+\. ", line):
            entries.append(line)
        elif entries and line.strip():
            entries[-1] += "\n" + line
    return entries


# --------------------------------------------------------------------------
# One snapshot

@test
def facts_equal_truth() -> None:
    doc, truth = synthetic(devices=2, seed=3, n=800, sites=12)
    f = summary.facts(doc, top=12)
    want_sites = sorted(((b, c, s) for s, (b, c) in truth["sites"].items()), key=lambda x: (-x[0], x[2]))
    eq([(x["live_bytes"], x["live_count"], x["stack"]) for x in f["sites"]], want_sites, "sites in order")
    for d in f["devices"]:
        eq(dict(d["kinds"]), truth["devices"][d["index"]], f"device {d['index']} by kind")
    eq(dict(f["host"]), truth["devices"].get(-1, {}), "host memory by kind")
    eq(f["summary"]["live_bytes"], truth["live_bytes"], "live bytes")
    eq(f["summary"]["live_count"], truth["live_count"], "live count")
    for x in f["sites"]:
        eq(sum(b for _, _, b in x["places"]), truth["sites"][x["stack"]][0], f"site {x['stack']} places")


@test
def printed_numbers_equal_truth() -> None:
    doc, truth = synthetic(devices=2, seed=5, n=600, sites=10)
    text = summary.summary(doc, width=80, top=5)
    has(text, f"live:    {fmt_bytes(truth['live_bytes'])} in {truth['live_count']} allocations", "header")
    ranked = sorted(truth["sites"].items(), key=lambda kv: (-kv[1][0], kv[0]))
    entries = site_entries(text)
    eq(len(entries), 5, "sites listed with top=5")
    for (sid, (b, c)), entry in zip(ranked, entries):
        first = entry.split("\n")[0]
        has(first, f" {fmt_bytes(b)}  ", f"site {sid}'s bytes")
        has(entry, f"{c} allocs", f"site {sid}'s count")
        has(entry, f"site_{sid} (", f"site {sid}'s frame")
    devices = section(text, "Devices")
    for dev in (0, 1):
        block = devices.split(f"GPU {dev}:")[1].split("GPU ")[0].split("  host:")[0]
        for kind, b in truth["devices"][dev].items():
            has(block, f"{kind} {fmt_bytes(b)}", f"GPU {dev} {kind}")
    host = truth["devices"][-1]
    has(devices, f"host: {fmt_bytes(sum(host.values()))} live", "host memory")
    # The synthetic oom: the growth verdict and the failed request.
    why = section(text, "Why it failed")
    has(why, "verdict: growth", "verdict")
    has(why, "request: 96.0 MiB of device memory by cuMemAlloc_v2 on GPU 0", "failed request")
    has(why, "at site_2 (model2.c:10)", "failed request's frame")
    # The snapshot's remedy, then the site it names.
    gained = doc["diagnosis"]["remedies"][0]["bytes"]
    has(" ".join(why.split()), f"try: drop what this growing site keeps by mistake: it gained {gained} bytes",
        "the remedy")
    has(why.split("try: ")[1], "\n       at site_1 (model1.c:10)", "the remedy's site")
    has(section(text, "Leak suspects"), "site_1 (model1.c:10)", "suspect")
    # Growth is defined where it is shown, and "rounds" with it.
    sus = " ".join(section(text, "Leak suspects").split())
    has(sus, "+N: what a site added after its first round", "growth explained")
    has(sus, "of its rounds (", "rounds explained")
    has(section(text, "Fragmentation on GPU 0"), "3.00 MiB stranded", "stranded bytes")
    tags = section(text, "Region tags")
    tag_bytes: Dict[str, int] = {}
    for sid, (b, _) in truth["sites"].items():
        if sid % 2:
            for t in ("train", f"layer{sid % 4}"):
                tag_bytes[t] = tag_bytes.get(t, 0) + b
    for t, b in tag_bytes.items():
        if not re.search(rf"^  {t} +{re.escape(fmt_bytes(b))}$", tags, re.M):
            raise AssertionError(f"tag {t}: {fmt_bytes(b)} not in:\n{tags}")


@test
def leaks_of_an_exit_snapshot() -> None:
    doc, truth = synthetic(oom=False, leaks=True, seed=7)
    lk = doc["leaks"]
    text = summary.summary(doc, width=80)
    s = section(text, "Leak check")
    c = lk["totals"]["counted"]
    has(s, f"{fmt_bytes(c['bytes'])} in {c['count']} allocations count as leaks", "counted total")
    flat = " ".join(s.split())
    for i, g in enumerate(lk["sites"]):
        word = {"leaked": "leaked", "referenced": "still referenced"}[g["class"]]
        has(flat, f"{i + 1}. {word} {fmt_bytes(g['bytes'])} in {g['count']} allocation", f"leak site {g['stack']}")
    has(s, "held by global 'kept' (app)", "referenced_from")
    has(s, "no host memory holds its address", "a leaked site")
    has(s, "scan: 10 mappings, 1.00 MiB read", "scan note")
    if "Why it failed" in text:
        raise AssertionError("an exit snapshot has no diagnosis section")
    # Rules, a suppressed site and a scan that did not run.
    d2 = copy.deepcopy(doc)
    d2["leaks"]["suppressions"] = [{"rule": "cached:CUDACachingAllocator", "source": "built-in", "line": None,
                                    "hits": 3, "bytes": 12 << 20}]
    d2["leaks"]["sites"].append({"stack": 4, "class": "cached", "counted": False, "suppressed_by": None,
                                 "rule": "cached:CUDACachingAllocator", "rule_source": "built-in", "count": 3,
                                 "bytes": 12 << 20, "kinds": {"device": 12 << 20}, "devices": [0],
                                 "addresses": [], "referenced_from": None})
    d2["leaks"]["scan"] = {"done": False, "why": "process_vm_readv and /proc/self/mem both refused"}
    d2.pop("_stack_by_id")
    s2 = section(summary.summary(checked(d2), width=80), "Leak check")
    has(s2, "cached:CUDACachingAllocator (built-in): 3 hits, 12.0 MiB", "rule")
    has(s2, "not counted: cached 12.0 MiB in 3", "not counted site")
    has(s2, "no scan", "scan not done")


@test
def widths_are_respected() -> None:
    long_name = "ns::" * 40 + "very_long_function_name_" * 6
    wide = "\u8a13\u7df4\u30eb\u30fc\u30d7\u306e\u95a2\u6570\u540d" * 4  # CJK: two columns each
    combining = "e\u0301" * 30
    docs = {
        "oom": synthetic(devices=2)[0],
        "exit": synthetic(oom=False, leaks=True)[0],
        "hostile": checked(fixtures.hostile(devices=2)[0]),
        "evil": checked(fixtures.hostile(evil=EVIL)[0]),
        "long": checked(fixtures.synthetic(evil=long_name, leaks=True)[0]),
        "wide": checked(fixtures.synthetic(evil=wide, leaks=True)[0]),
        "combining": checked(fixtures.synthetic(evil=combining)[0]),
    }
    for name, doc in docs.items():
        for width in (80, 40, 100, 24, 1):
            for color in (False, True):
                check_width(summary.summary(doc, width=width, color=color, top=5), width,
                            f"{name} at {width}{' in colour' if color else ''}")
    for width in (80, 40):
        a, b = docs["long"], checked(fixtures.synthetic(evil=wide, seed=9, n=700)[0])
        check_width(diff_view.diff_text(a, b, width=width, top=5), width, f"diff at {width}")
        ranks = [checked(fixtures.synthetic(rank=r, pid=100 + r, seed=r, evil=long_name, n=200)[0])
                 for r in range(10)]
        check_width(merge_view.merge_text(ranks, width=width, top=5), width, f"merge of 10 at {width}")
        check_width(merge_view.merge_text(ranks[:4], width=width, top=5), width, f"merge of 4 at {width}")


@test
def colour_only_when_asked() -> None:
    doc = synthetic(leaks=True)[0]
    a, b = synthetic(seed=1)[0], synthetic(seed=2)[0]
    ranks = [synthetic(rank=r, pid=200 + r, seed=r)[0] for r in range(3)]
    for what, make in (("summary", lambda c: summary.summary(doc, color=c)),
                       ("diff", lambda c: diff_view.diff_text(a, b, color=c)),
                       ("merge", lambda c: merge_view.merge_text(ranks, color=c))):
        plain = make(False)
        if "\x1b" in plain:
            raise AssertionError(f"{what}: an escape character without colour")
        coloured = make(True)
        if not SGR.search(coloured):
            raise AssertionError(f"{what}: no colour with color=True")
        if "\x1b" in SGR.sub("", coloured):
            raise AssertionError(f"{what}: an escape that is not a colour")
        eq([l.rstrip() for l in SGR.sub("", coloured).split("\n")], plain.split("\n"),
           f"{what}: the coloured text less its colour is the plain text")


@test
def hostile_names_are_escaped() -> None:
    for evil in (fixtures.HOSTILE, EVIL):
        doc = checked(fixtures.hostile(evil=evil, devices=2)[0])
        old = checked(fixtures.hostile(evil=evil, seed=2, n=400)[0])
        ranks = [checked(fixtures.hostile(evil=evil, rank=r, pid=300 + r, seed=r, n=200)[0]) for r in range(3)]
        for color in (False, True):
            texts = {"summary": summary.summary(doc, color=color, width=200, top=20),
                     "diff": diff_view.diff_text(old, doc, color=color, width=200),
                     "merge": merge_view.merge_text(ranks, color=color, width=200)}
            for what, text in texts.items():
                check_safe(text, color, f"{what} (colour {color})")
    # The escapes are visible: a reader sees that the name held them.
    text = summary.summary(checked(fixtures.hostile(evil=EVIL)[0]), width=300)
    for visible in ("\\x1b[31mRED", "\\x1b]0;pwned\\x07", "\\x9b31m", "\\u202eevil", "\\u2066", "\\u200b",
                    "\\u2028", "\\x00", "\\x7f", "\\ud800", "\\r\\n\\t"):
        has(text, visible, "an escaped name")
    eq(clean("plain \u00e9t\u00e9 \u8a13"), "plain \u00e9t\u00e9 \u8a13", "printable text kept")
    eq(clean("a\x1bb\u202ec\U000e0001"), "a\\x1bb\\u202ec\\U000e0001", "clean()")


@test
def minimal_and_empty_snapshots() -> None:
    minimal = {"format": "gpumemtrace-snapshot", "version": 1, "reason": "signal", "seq": 1,
               "time_ns": 0, "pid": 1,
               "summary": {"live_bytes": 0, "live_count": 0, "peak_bytes": 0, "total_allocs": 0,
                           "total_frees": 0}}
    doc = checked(minimal)
    text = summary.summary(doc)
    has(text, "snapshot on a signal", "header")
    has(text, "(command line not known)", "no argv")
    diff_view.diff_text(doc, doc)
    merge_view.merge_text([doc, checked(dict(minimal, pid=2))])
    # A site without a stack, a snapshot at the end of time.
    d = copy.deepcopy(minimal)
    d.update(time_ns=(1 << 64) - 1, summary=dict(minimal["summary"], live_bytes=4096, live_count=1),
             allocations=[{"address": "0x1000", "size": 4096, "device": 0, "kind": "device", "stack": 0}],
             sites=[{"stack": 0, "live_bytes": 4096, "live_count": 1}])
    has(summary.summary(checked(d)), "(no stack recorded)", "site without a stack")


@test
def tracer_warnings_and_host_oom() -> None:
    doc, _ = fixtures.synthetic(n=50)
    doc["stats"].update(ring_full=3, unknown_frees=2, put_back=5, python_stacks=7, snapshots=1)
    # Pinned host memory that failed: a failed request and no diagnosis.
    del doc["diagnosis"]
    doc["failed_request"].update(device=-1, kind="host", api="cuMemHostAlloc")
    text = summary.summary(checked(doc))
    warn = section(text, "Tracer warnings")
    has(warn, "ring_full = 3", "ring_full")
    has(warn, "unknown_frees = 2", "unknown_frees")
    for quiet in ("put_back", "python_stacks", "snapshots", "events"):
        if quiet in warn:
            raise AssertionError(f"{quiet} is no warning:\n{warn}")
    if "Tracer warnings" in summary.summary(synthetic(n=50)[0]):
        raise AssertionError("warnings without a counter that warns")
    failed = section(text, "Failed request")
    has(" ".join(failed.split()), "96.0 MiB of pinned host memory by cuMemHostAlloc (CUresult 2", "host request")


@test
def top_controls_length() -> None:
    doc = synthetic(n=2000, sites=60, leaks=True)[0]
    short = summary.summary(doc, top=1).count("\n")
    long = summary.summary(doc, top=40).count("\n")
    if not short < long:
        raise AssertionError(f"top=1 gives {short} lines, top=40 {long}")
    eq(len(site_entries(summary.summary(doc, top=3))), 3, "sites listed with top=3")


@test
def stacks_of_one_site_are_one_entry() -> None:
    """Stacks the tracer put in one site (stacks[].site.id) are one entry,
    their bytes added up, named by the site's label; --frames shows the
    site's frame and more of its callers in the program's code."""
    raw = synthetic(n=600, sites=6, oom=False)[0]
    # Stack 2: stack 1's frames of the program's own, reached through
    # another frame of CUDA's.
    merged = raw["stacks"][1]
    merged["frames"] = copy.deepcopy(raw["stacks"][0]["frames"])
    merged["frames"][0].update(address="0x7f0000009990", offset="0x9990", function="cudaMallocAsync")
    merged["site"] = dict(raw["stacks"][0]["site"])
    doc = checked(raw)
    by_stack = {x["stack"]: x["live_bytes"] for x in doc["sites"]}
    groups = [g for g in load_groups(doc) if g["site"] == raw["stacks"][0]["site"]["id"]]
    eq(len(groups), 1, "one group for the two stacks")
    eq(sorted(groups[0]["stacks"]), [1, 2], "its stacks")
    eq(groups[0]["live_bytes"], by_stack.get(1, 0) + by_stack.get(2, 0), "its bytes")
    text = summary.summary(doc, width=200, top=20)
    entries = site_entries(text)
    eq(len(entries), len({s["site"]["id"] for s in raw["stacks"]}), "entries: one per site")
    label = raw["stacks"][0]["site"]["label"]
    eq(sum(1 for e in entries if label in e), 1, "the label once")
    has(text, fmt_bytes(groups[0]["live_bytes"]), "the summed bytes")
    top = site_entries(summary.summary(doc, width=200, top=1, frames=6))[0]
    few = site_entries(summary.summary(doc, width=200, top=1, frames=1))[0]
    eq(len(few.split("\n")), 2, "--frames 1: the site's frame only")
    eq(len(top.split("\n")), 7, "--frames 6: six frames of the program's code")


@test
def an_older_snapshot_without_sites() -> None:
    """A snapshot written before the tracer named sites: each stack its own
    site, named by its innermost frame with a file and a line."""
    raw = synthetic(n=200, sites=4, oom=False)[0]
    for st in raw["stacks"]:
        del st["site"]
        for f in st["frames"]:
            del f["role"]
    doc = checked(raw)
    st = doc["_stack_by_id"][1]
    eq(st["site"]["id"], -1, "a site of its own")
    eq(st["site"]["frame"], 1, "the innermost frame with a file and a line")
    eq(st["frames"][0]["role"], "user", "no roles: every frame the program's")
    text = summary.summary(doc, width=200)
    has(text, "site_1 (model1.c:10)", "named by that frame")


@test
def frames_for_the_three_largest_sites() -> None:
    """--frames applies to the three largest sites; the others show their
    site's frame alone (facts())."""
    doc, _ = synthetic(n=600, sites=10, oom=False)
    entries = site_entries(summary.summary(doc, width=200, top=5, frames=3))
    eq([len(e.split("\n")) for e in entries], [4, 4, 4, 2, 2], "lines per entry: the site's, then its frames")


@test
def suspects_largest_growth_first() -> None:
    raw, _ = fixtures.synthetic(n=400, sites=8, oom=False)
    growth = {1: 2 << 20, 3: 5 << 20, 5: 9 << 20, 6: 1 << 20}
    for row in raw["sites"]:
        if row["stack"] in growth:
            row.update(suspect=True, growth_bytes=growth[row["stack"]])
    want = sorted(growth, key=lambda sid: -growth[sid])
    doc = checked(raw)
    eq([x["stack"] for x in summary.facts(doc)["suspects"]], want, "suspects, most growth first")
    sus = section(summary.summary(doc, width=200), "Leak suspects")
    eq([int(m.group(1)) for m in re.finditer(r"^  \+\S+ \S+  site_(\d+) \(", sus, re.M)], want, "their order shown")


@test
def a_tag_counts_once_per_site() -> None:
    """A region pushed again inside itself (train › step › train) holds the
    site's bytes once."""
    raw, truth = fixtures.synthetic(n=400, sites=8, oom=False)
    for st in raw["stacks"]:
        if st["tags"]:
            st["tags"] = ["train", "step", "train"]
    tagged = sum(b for sid, (b, _) in truth["sites"].items() if sid % 2)
    f = summary.facts(checked(raw))
    eq(dict(f["tags"]), {"train": tagged, "step": tagged}, "bytes by tag")
    eq(f["untagged_bytes"], truth["live_bytes"] - tagged, "untagged bytes")


@test
def devices_used_is_total_less_free() -> None:
    """Memory used on a device is what the driver says (total - free), more
    than the tracer's live bytes where another process or the context holds
    some."""
    raw, truth = fixtures.synthetic(n=400, sites=8)
    d = raw["devices"][0]
    d["free_bytes"] -= 3 << 30
    live = sum(truth["devices"][0].values())
    text = " ".join(section(summary.summary(checked(raw), width=200), "Devices").split())
    has(text, f"GPU 0: {fmt_bytes(live)} live here; {fmt_bytes(d['total_bytes'])} total, "
        f"{fmt_bytes(live + (3 << 30))} used, {fmt_bytes(d['free_bytes'])} free", "GPU 0's line")


@test
def size_classes_largest_kept() -> None:
    """Beyond --top classes the histogram keeps those of most bytes, in
    size order, each bound a power of two in binary units."""
    raw, _ = fixtures.synthetic(n=400, sites=8)
    MiB = 1 << 20
    raw["devices"][0]["fragmentation"]["size_classes"] = [
        {"min": 512, "max": 1023, "count": 2, "bytes": 1536},
        {"min": 1024, "max": 2047, "count": 1, "bytes": 1024},
        {"min": MiB, "max": 2 * MiB - 1, "count": 5, "bytes": 8 * MiB},
        {"min": 4 * MiB, "max": 8 * MiB - 1, "count": 4, "bytes": 20 * MiB}]
    frag = section(summary.summary(checked(raw), width=80, top=2), "Fragmentation on GPU 0")
    rows = re.findall(r"^ +(\d+ \S+\u2013\d+ \S+) +(\d+) ", frag, re.M)
    eq(rows, [("1 MiB\u20132 MiB", "5"), ("4 MiB\u20138 MiB", "4")], "the classes shown")
    has(frag, "\u2026 2 smaller classes", "the classes left out")


# --------------------------------------------------------------------------
# Two snapshots

def _pair() -> Tuple[Doc, Doc, Dict[str, Any], Dict[str, Any]]:
    old, t_old = fixtures.synthetic(seed=1, n=500, sites=20)
    new, t_new = fixtures.synthetic(seed=2, n=900, sites=24)
    new["time_ns"] = old["time_ns"] + 5_000_000_000
    return checked(old, "old"), checked(new, "new"), t_old, t_new


@test
def diff_shows_the_deltas() -> None:
    old, new, t_old, t_new = _pair()
    f = diff_view.diff_facts(old, new, top=10)
    eq(f["totals"]["live_bytes"], (t_old["live_bytes"], t_new["live_bytes"],
                                   t_new["live_bytes"] - t_old["live_bytes"]), "live bytes")
    eq(f["reversed"], False, "order")
    for group in ("grew", "new_sites", "shrank", "gone"):
        for r in f[group]:
            sid = r["stack"]
            ob, oc = t_old["sites"].get(sid, (0, 0))
            nb, nc = t_new["sites"].get(sid, (0, 0))
            eq((r["old_bytes"], r["new_bytes"], r["delta_bytes"]), (ob, nb, nb - ob), f"{group} site {sid}")
            eq(r["delta_count"], nc - oc, f"{group} site {sid} count")
    eq(sorted(r["stack"] for r in f["new_sites"]), [21, 22, 23, 24], "new sites")
    eq(f["gone"], [], "gone sites")
    for r in f["kinds"]:
        want_old = t_old["devices"].get(r["device"], {}).get(r["kind"], 0)
        want_new = t_new["devices"].get(r["device"], {}).get(r["kind"], 0)
        eq((r["old"], r["new"]), (want_old, want_new), f"device {r['device']} {r['kind']}")

    text = diff_view.diff_text(old, new, width=80, top=5)
    has(text, "changes are from the first (older) to the second", "order note")
    has(section(text, "Totals"), f"{fmt_bytes(t_old['live_bytes']):>10} \u2192 "
        f"{fmt_bytes(t_new['live_bytes']):>10}  {fmt_delta(t_new['live_bytes'] - t_old['live_bytes'])}",
        "live totals")
    grew = section(text, "Grew").split("\n")
    top_row = f["grew"][0]
    has(grew[1], fmt_delta(top_row["delta_bytes"]), "largest growth")
    has(grew[1], f"site_{top_row['stack']} (", "largest growth's site")
    added = section(text, "New sites")
    for sid in (21, 22, 23, 24):
        has(added, f"site_{sid} (", f"new site {sid}")
        has(added, fmt_delta(t_new["sites"][sid][0]), f"new site {sid}'s bytes")
    kinds = section(text, "By device and kind")
    for dev, kinds_new in t_new["devices"].items():
        for kind, b in kinds_new.items():
            d = b - t_old["devices"].get(dev, {}).get(kind, 0)
            label = "host   pinned" if dev < 0 else f"GPU {dev}  {kind}"
            if not re.search(rf"^  {re.escape(label)} .*{re.escape(fmt_delta(d))}$", kinds, re.M):
                raise AssertionError(f"{label} {fmt_delta(d)} not in:\n{kinds}")


@test
def diff_fits_80_columns_without_cutting_names() -> None:
    """A site too long for the line beside its numbers goes on lines of its
    own, broken before each caller: at 80 columns every frame's name and
    place is there whole."""
    label = ("device_alloc_with_a_long_name (train_loop_long_file.c:101) \u2190 "
             "main (train_loop_long_file.c:168)")
    raws = [fixtures.synthetic(seed=1, n=300, sites=8)[0], fixtures.synthetic(seed=2, n=500, sites=10)[0]]
    for raw in raws:
        for st in raw["stacks"]:
            st["site"]["label"] = label
    text = diff_view.diff_text(checked(raws[0], "old"), checked(raws[1], "new"), width=80)
    check_width(text, 80, "diff at 80 columns")
    grew = section(text, "Grew")
    has(grew, "    device_alloc_with_a_long_name (train_loop_long_file.c:101)\n", "the site's frame whole")
    has(grew, "      \u2190 main (train_loop_long_file.c:168)", "its caller whole, on a line of its own")
    if "\u2026" in grew.replace("\u2026 ", ""):
        raise AssertionError(f"a name was shortened:\n{grew}")


@test
def diff_in_the_wrong_order() -> None:
    old, new, t_old, t_new = _pair()
    f = diff_view.diff_facts(new, old)
    eq(f["reversed"], True, "order")
    eq(f["totals"]["live_bytes"][2], t_old["live_bytes"] - t_new["live_bytes"], "computed as given")
    eq(sorted(r["stack"] for r in f["gone"]), [21, 22, 23, 24], "gone sites")
    text = diff_view.diff_text(new, old, width=80)
    has(text, "NOTE: the first snapshot is the newer one (5.00 s after the second)", "order note")
    gone = section(text, "Gone")
    for sid in (21, 22, 23, 24):
        has(gone, f"site_{sid} (", f"gone site {sid}")


@test
def diff_of_different_processes_and_no_change() -> None:
    a = synthetic(pid=11)[0]
    b = synthetic(pid=12)[0]
    text = diff_view.diff_text(a, b)
    has(text, "different processes", "note")
    has(text, "no site changed", "same sites")


@test
def diff_sorts_sites_by_what_changed() -> None:
    """Sites of known changes: one whose memory is all freed is gone, one
    with an allocation more (and the same bytes) grew, those that shrank are
    listed most shrink first, and the rows past --top are summed."""
    old = synthetic(n=400, sites=8, oom=False, seed=3)[0]
    new = copy.deepcopy(old)
    new["time_ns"] += 1_000_000_000
    rows = {r["stack"]: r for r in new["sites"]}
    big = [sid for sid, r in sorted(rows.items()) if r["live_bytes"] > 8 << 20][:5]
    if len(big) < 5:
        raise AssertionError(f"the fixture has too few sites above 8 MiB: {rows}")
    gone, more = big[0], big[1]
    shrink = {big[2]: 1 << 20, big[3]: 5 << 20, big[4]: 3 << 20}
    rows[gone].update(live_bytes=0, live_count=0)
    rows[more]["live_count"] += 1
    for sid, b in shrink.items():
        rows[sid]["live_bytes"] -= b
    f = diff_view.diff_facts(old, new)
    eq([r["stack"] for r in f["gone"]], [gone], "gone: nothing live there now")
    eq([(r["stack"], r["delta_bytes"], r["delta_count"]) for r in f["grew"]], [(more, 0, 1)], "grew by a count")
    want = sorted(shrink, key=lambda sid: -shrink[sid])
    eq([(r["stack"], r["delta_bytes"]) for r in f["shrank"]], [(sid, -shrink[sid]) for sid in want],
       "shrank, most first")
    text = diff_view.diff_text(old, new, width=120, top=2)
    shrank = section(text, "Shrank")
    has(shrank.split("\n")[0], "3, top 2", "the heading")
    has(shrank, f"\u2026 1 more, {fmt_delta(-shrink[want[2]])} together", "the rows past the top")
    has(section(text, "Gone"), f"site_{gone} (", "the gone site")


@test
def diff_one_process_is_its_pid_on_its_host() -> None:
    old = synthetic(n=200, sites=6, oom=False, pid=77)[0]
    new = copy.deepcopy(old)
    new["time_ns"] += 1_000_000_000
    eq(diff_view.diff_facts(old, new)["same_process"], True, "the same pid on the same host")
    new["process"]["host"] = "node8"
    eq(diff_view.diff_facts(old, new)["same_process"], False, "the same pid on another host")
    has(diff_view.diff_text(old, new), "different processes", "the note")


# --------------------------------------------------------------------------
# Several processes

def _ranks(n: int, oom_rank: int = 2) -> Tuple[List[Doc], List[Dict[str, Any]]]:
    docs, truths = [], []
    # Given out of order: the report orders by rank.
    for r in reversed(range(n)):
        d, t = fixtures.synthetic(seed=r + 10, rank=r, pid=5000 + r, oom=(r == oom_rank), n=300)
        docs.append(checked(d, f"rank{r}"))
        truths.append(t)
    return docs, list(reversed(truths))


@test
def merge_of_four_ranks() -> None:
    docs, truths = _ranks(4)
    f = merge_view.merge_facts(docs, top=5)
    eq([p["rank"] for p in f["processes"]], [0, 1, 2, 3], "rank order")
    eq(f["live_bytes"], sum(t["live_bytes"] for t in truths), "total live")
    for s in f["sites"]:
        sid = s["stack"]
        eq(s["by_process"], [t["sites"].get(sid, (0, 0))[0] for t in truths], f"site {sid} per rank")
    text = merge_view.merge_text(docs, width=80, top=5)
    procs = section(text, "Processes")
    for r, t in enumerate(truths):
        row = next((l for l in procs.split("\n") if re.match(rf"^  {r} ", l)), None)
        if row is None:
            raise AssertionError(f"no row for rank {r} in:\n{procs}")
        has(row, str(5000 + r), f"rank {r}'s pid")
        has(row, fmt_bytes(t["live_bytes"]), f"rank {r}'s live bytes")
        if r == 2:
            has(row, "OOM: 96.0 MiB on GPU 0", "the out-of-memory rank")
        elif "OOM" in row:
            raise AssertionError(f"rank {r} is not out of memory: {row}")
    has(section(text, "Out of memory"), "rank 2 (pid 5002 on node7):", "which rank")
    has(section(text, "Totals"), f"live: {fmt_bytes(f['live_bytes'])} in 1200 allocations", "totals")
    has(section(text, "Totals"), f"peaks added up: {fmt_bytes(sum(t['live_bytes'] + (64 << 20) for t in truths))}",
        "the peaks added up")
    sites = section(text, "Top sites across processes")
    for s in f["sites"]:
        for r, b in enumerate(s["by_process"]):
            has(sites, f"rank {r}: {fmt_bytes(b)}", f"site {s['stack']} on rank {r}")


@test
def merge_of_many_ranks() -> None:
    docs, truths = _ranks(12, oom_rank=7)
    f = merge_view.merge_facts(docs, top=3)
    text = merge_view.merge_text(docs, width=80, top=3)
    sites = section(text, "Top sites across processes")
    for s in f["sites"]:
        per = [t["sites"].get(s["stack"], (0, 0))[0] for t in truths]
        hi = max(range(12), key=lambda r: (per[r], -r))
        lo = min(range(12), key=lambda r: (per[r], r))
        has(sites, f"largest: rank {hi} ({fmt_bytes(per[hi])})", f"site {s['stack']}'s largest rank")
        has(sites, f"smallest: rank {lo} ({fmt_bytes(per[lo])})", f"site {s['stack']}'s smallest rank")
    if "rank 5: " in sites:
        raise AssertionError("twelve ranks: one line per site, not a cell per rank")
    has(section(text, "Out of memory"), "rank 7 (pid 5007", "which rank")
    # More processes than the table shows: the out-of-memory one stays.
    many, _ = _ranks(40, oom_rank=0)
    procs = section(merge_view.merge_text(many, width=80, top=3), "Processes")
    has(procs, "16 of 40", "table limit")
    if not re.search(r"^  0 .*OOM", procs, re.M):
        raise AssertionError(f"the out-of-memory rank 0 left out:\n{procs}")


@test
def merge_wording() -> None:
    """What the merge says is true: two processes are not judged for
    outliers (their difference is given); with many, "none" names the limits
    it used and every process is within them; no top site holds nothing;
    every count of processes says what it counts."""
    two, _ = _ranks(2, oom_rank=1)
    text = merge_view.merge_text(two, width=80)
    f = merge_view.merge_facts(two)
    peaks = [p["peak_bytes"] for p in f["processes"]]
    has(section(text, "Ranks"), "outliers: not judged among 2 processes; their peaks differ by "
        + fmt_bytes(max(peaks) - min(peaks)), "two processes")
    for n in (12, 512):
        many, _ = _ranks(n, oom_rank=1)
        f = merge_view.merge_facts(many)
        text = merge_view.merge_text(many, width=80)
        ranks = " ".join(section(text, "Ranks").split())
        fl = f["fleet"]
        if "outliers: none" in ranks:
            has(ranks, f"every process within {fmt_bytes(fl['live']['limit'])} of the median live", f"{n}: limits")
            for what in ("live", "peak"):
                k = fl[what]
                vals = [p[f"{what}_bytes"] for p in f["processes"]]
                if any(abs(v - k["median"]) > k["limit"] for v in vals):
                    raise AssertionError(f"{n} processes: 'none' but one lies beyond the limit")
        for m in re.finditer(r"^    (\S+ \S+:) ", section(text, "Ranks"), re.M):
            if not re.match(r"^\d+ process(es)?:$", m.group(1)):
                raise AssertionError(f"{n}: a count without its noun: {m.group(0)!r}")
        if re.search(r"\b0 B in 0 allocations\b|in 0 of \d+ processes", text):
            raise AssertionError(f"{n}: a top site that holds nothing:\n{section(text, 'Top sites across processes')}")
    # Sites of nothing live (all freed) are no top sites.
    docs, _ = _ranks(2, oom_rank=1)
    for d in docs:
        for st in d["sites"]:
            st["live_bytes"], st["live_count"] = 0, 0
    f = merge_view.merge_facts(docs)
    eq(f["sites"], [], "no site with nothing live")


@test
def merge_sites_of_known_spread() -> None:
    """Twelve identical ranks but for one site, which ranks 6 to 11 do not
    hold: its largest is rank 0 (the first of equals, as the skew names
    them), its smallest rank 6, its mean over all twelve."""
    ranks = [synthetic(seed=4, rank=r, pid=7000 + r, oom=False, n=300, sites=6)[0] for r in range(12)]
    row = ranks[0]["sites"][0]
    sid, b = row["stack"], row["live_bytes"]
    for d in ranks[6:]:
        next(r for r in d["sites"] if r["stack"] == sid).update(live_bytes=0, live_count=0)
    text = merge_view.merge_text(ranks, width=200, top=10)
    entry = next(e for e in site_entries(text, "Top sites across processes") if f"site_{sid} (" in e)
    has(" ".join(entry.split()), f"largest: rank 0 ({fmt_bytes(b)}) \u00b7 smallest: rank 6 (0 B) \u00b7 "
        f"mean: {fmt_bytes(b * 6 // 12)}", f"site {sid}'s spread")
    other = next(e for e in site_entries(text, "Top sites across processes") if f"site_{sid} (" not in e)
    has(other, "largest: rank 0 (", "a site all hold alike: the first rank named")


@test
def merge_table_keeps_the_largest() -> None:
    """Beyond the table's 16 rows: the out-of-memory process and the
    largest others by live bytes."""
    many, truths = _ranks(40, oom_rank=0)
    procs = section(merge_view.merge_text(many, width=80, top=3), "Processes")
    shown = sorted(int(m.group(1)) for m in re.finditer(r"^  (\d+) ", procs, re.M))
    largest = sorted(range(1, 40), key=lambda r: (-truths[r]["live_bytes"], r))[:15]
    eq(shown, sorted([0] + largest), "the ranks in the table")


@test
def episode_section() -> None:
    doc, _ = synthetic(episode=True, sites=6)
    text = summary.summary(doc, width=80)
    check_width(text, 80, "episode")
    ep = section(text, "Out-of-memory episode")
    has(ep, "#1: 3 failures over 3 ms", "heading")
    has(ep, "this snapshot is of failure 3 of 3, the last the program was told of", "which failure")
    has(ep, "#2      +1.5 ms  96.0 MiB  by cuMemAlloc_v2", "second failure")
    has(" ".join(ep.split()), "after 512 MiB in 2 allocations freed", "freed before the third")
    has(" ".join(ep.split()), "the program freed 768 MiB in 3 allocations during the episode", "freed in all")
    has(ep, "512 MiB  2 allocs  device\n      " + site_title(doc, 3, 74), "largest freed site first")
    f = summary.facts(doc)
    eq([x["since_ns"] for x in f["episode"]["listed"]], [0, 1_500_000, 3_000_000], "times since the first")
    # A snapshot taken when a storm's episode ended says so.
    raw, _ = fixtures.synthetic(episode=True, sites=6)
    raw["episode"].update(described=0, end="success", not_written=2, failures=12)
    text = summary.summary(checked(raw), width=80)
    has(" ".join(section(text, "Out-of-memory episode").split()),
        "taken when the episode ended (success), after 2 failures no snapshot was taken at", "end snapshot")
    has(section(text, "Out-of-memory episode"), "9 failures more, then", "failures past the list")
    # A snapshot without an episode (older than format minor 2) has no section.
    plain, _ = synthetic(sites=6)
    if "Out-of-memory episode" in summary.summary(plain, width=80):
        raise AssertionError("an episode section without an episode")


@test
def framework_two_levels() -> None:
    """The framework's counters, then its segments — most free bytes
    first — each with its blocks: active ones with the innermost frame
    outside the framework's package, free ones bare."""
    raw, _ = fixtures.synthetic(sites=6)
    seg, _ = fixtures.with_torch_state(raw, stream=7)
    seg["blocks"][0]["frames"].insert(0, {"name": "linear", "filename": "/v/site-packages/torch/nn/functional.py",
                                         "line": 5})
    small = {"device": seg["device"], "address": 1 << 40, "total_size": 2 << 20, "stream": 0,
             "segment_type": "small", "is_expandable": False, "allocation": False,
             "blocks": [{"address": 1 << 40, "size": 2 << 20, "requested_size": 100, "state": "active_allocated",
                         "frames": []}]}
    raw["framework"]["segments"].append(small)
    doc = checked(raw)
    text = summary.summary(doc, width=80)
    check_width(text, 80, "framework")
    fw = section(text, "Framework's allocator")
    third = seg["blocks"][1]["size"]
    has(fw, "segments, most free first (2 of 2):", "the segments' heading")
    flat = " ".join(fw.split())
    has(flat, f"{fmt_bytes(seg['total_size'])} at {seg['address']:#x} on GPU {seg['device']} (large, stream 7): "
              f"{fmt_bytes(seg['total_size'] - third)} in 2 active blocks, {fmt_bytes(third)} free in 1", "the segment")
    has(flat, f"{fmt_bytes(seg['blocks'][0]['size'])} active forward (model.py:12)", "an active block's own frame")
    has(flat, f"{fmt_bytes(third)} free", "a free block")
    has(flat, f"2.00 MiB at {1 << 40:#x} on GPU {seg['device']} (small, stream 0): 2.00 MiB in 1 active block, "
              "no free block — no driver allocation starts there", "an unjoined segment, after the one with free bytes")
    if fw.index(f"{seg['address']:#x}") > fw.index(f"{1 << 40:#x}"):
        raise AssertionError(f"the segment with free bytes not first:\n{fw}")
    # CuPy's pool: no segments, no largest free block.
    raw, _ = fixtures.synthetic(sites=6)
    fixtures.with_torch_state(raw, stream=0)
    raw["framework"].update(name="cupy", segments=[], segments_joined=0)
    raw["framework"]["devices"][0].update(largest_free_block_bytes=None, limit_bytes=1 << 30)
    fw = " ".join(section(summary.summary(checked(raw), width=80), "Framework's allocator").split())
    has(fw, "of a limit of 1.00 GiB", "the pool's limit")
    if "segments, most free first" in fw or "largest free block" in fw or "segments joined" in fw:
        raise AssertionError(f"segments or a largest free block CuPy does not say:\n{fw}")
    raw["framework"]["devices"] = []
    fw = " ".join(section(summary.summary(checked(raw), width=80), "Framework's allocator").split())
    has(fw, "no counters: its allocator keeps no pool", "an allocator of no pool's")


@test
def episode_bad_input() -> None:
    for change, part in [(lambda e: e.update(end="later"), "/episode/end: 'later' is none of"),
                         (lambda e: e["listed"][0].update(stack=999), "/episode/listed/0/stack: stack 999"),
                         (lambda e: e.update(listed=[]), "/episode/listed: no failure listed"),
                         (lambda e: e["freed"].update(bytes=-1), "/episode/freed/bytes"),
                         (lambda e: e.update(last_ns=e["first_ns"] - 1), "/episode/last_ns: before first_ns")]:
        raw, _ = fixtures.synthetic(episode=True, sites=6)
        change(raw["episode"])
        try:
            checked(raw, "bad.json")
        except load.ViewError as err:
            has(str(err), part, "the error names the key")
        else:
            raise AssertionError(f"accepted a broken episode ({part})")


# --------------------------------------------------------------------------
# The demo program on the simulated GPU

@test
def labels_cut_library_frames_first() -> None:
    """A label wider than its room loses its library frames first (a run of
    them one "…"), then the middles of functions: the program's file:line
    is always whole, and the title fits."""
    raw, _ = fixtures.synthetic(n=20, sites=2)
    st = raw["stacks"][0]
    lib = {"address": None, "module": None, "inlined": False, "python": True, "role": "library"}
    user = {"address": None, "module": None, "inlined": False, "python": True, "role": "user"}
    st["frames"] = ([dict(lib, function="Driver.memalloc_with_a_long_qualified_name", file="/venv/numba/driver.py",
                          line=35),
                     dict(lib, function="_AllocatorOfTheContextWithAnotherLongName.allocate",
                          file="/venv/numba/allocators.py", line=148),
                     dict(lib, function="DeviceNDArray.__init__", file="/venv/numba/devicearray.py", line=103),
                     dict(user, function="train_one_step_of_the_model", file="/src/train.py", line=22),
                     dict(user, function="main", file="/src/train.py", line=61)])
    st["site"] = {"id": st["site"]["id"], "frame": 0, "user": False,
                  "label": "Driver.memalloc_with_a_long_qualified_name (driver.py:35) \u2190 "
                           "_AllocatorOfTheContextWithAnotherLongName.allocate (allocators.py:148) \u2190 "
                           "DeviceNDArray.__init__ (devicearray.py:103) \u2190 "
                           "train_one_step_of_the_model (train.py:22) \u2190 main (train.py:61)"}
    st.pop("runtime_call", None)
    doc = checked(raw)
    for width in (69, 60, 50):
        title = text.site_title(doc, st["id"], width)
        if cols(title) > width:
            raise AssertionError(f"at {width} columns the title is wider: {title!r}")
        for place in ("train.py:22)", "train.py:61)"):
            has(title, place, f"at {width} columns the program's place stays whole")
        has(title, "\u2026", f"at {width} columns the library frames go first")
    wide = text.site_title(doc, st["id"], 400)
    has(wide, "allocators.py:148", "with room, every frame is shown")


@test
def simulator_snapshots() -> None:
    if not BUILD_DIR:
        print("  (no BUILD_DIR given: the simulator's snapshots are not tested)")
        return
    with tempfile.TemporaryDirectory(prefix="gmt-view-test.") as out:
        paths = fixtures.simulator_snapshots(BUILD_DIR, out)
        oom, ext = load.load(paths["oom"]), load.load(paths["exit"])
        # Strict: the demo's memory is still referenced at exit, which
        # counts only so (by default only leaked memory does).
        os.makedirs(os.path.join(out, "strict"))
        strict = load.load(fixtures.simulator_snapshots(
            BUILD_DIR, os.path.join(out, "strict"), env={"GPUMEMTRACE_LEAK_CLASSES": "leaked,referenced"})["exit"])
    text = summary.summary(oom, width=80)
    check_width(text, 80, "simulator oom")
    print(text, end="")
    has(section(text, "Why it failed"), "verdict: growth", "verdict")
    has(" ".join(text.split()), "1 allocation site kept growing and added 3.12 GiB", "diagnosis summary")
    first = site_entries(text)[0]
    line = _source_line("demo/train_loop.c", "cudaMallocAsync(&p")
    has(first.split("\n")[0], "3.12 GiB", "top site's bytes")
    has(first, f"stream_alloc (train_loop.c:{line})\n", "top site's first frame")
    has(first, "\u2190 train_step (train_loop.c:", "its caller")
    why = section(text, "Why it failed")
    has(" ".join(why.split()), f"(a leak suspect): stream_alloc (train_loop.c:{line}) \u2190 train_step",
        "growth site")
    # The remedy the numbers support, its site on the line after.
    has(" ".join(why.split()), "try: free what this site allocates once it is done with it", "the growth's remedy")
    has(" ".join(why.split()), "64.0 MiB a step over", "the leak's bytes per step")
    has(why, f"at stream_alloc (train_loop.c:{line})", "the remedy's site")
    if "try: a smaller batch" in why:
        raise AssertionError("a smaller batch offered beside a leak")
    # Advice in the words of the program's language: a C program is told
    # of buffers, never of a loss, tensors or torch.
    for word in ("loss", "tensor", "torch", "graph"):
        if word in why:
            raise AssertionError(f"the C demo's diagnosis speaks of {word!r}:\n{why}")
    has(section(text, "Why it failed"), "request: 32.0 MiB of async memory by cuMemAllocAsync on GPU 0",
        "failed request")
    # About a screen and a half: every site with its label's frames and
    # growth's rounds explained take a few lines more than the bare list.
    if len(text.split("\n")) > 72:
        raise AssertionError(f"the demo's summary is {len(text.split(chr(10)))} lines: more than a screen")
    # Every site shows the frames of its label (what tells it from the
    # others), the fourth and later too: the demo's three device_alloc sites
    # differ only in their caller in main.
    for sid, entry in zip((x["stack"] for x in summary.facts(oom)["sites"]), site_entries(text)):
        for piece in oom["_stack_by_id"][sid]["site"]["label"].split(" \u2190 "):
            has(entry, piece, f"site {sid}'s entry shows its label's frame")
    etext = summary.summary(ext, width=80)
    check_width(etext, 80, "simulator exit")
    print(etext, end="")
    has(section(etext, "Leak check"), "no leaks count (classes: leaked)", "no leak by default")
    has(section(etext, "Leak check"), "still referenced 3.75 GiB in 61", "referenced, listed")
    stext = summary.summary(strict, width=80)
    has(section(stext, "Leak check"), "3.75 GiB in 61 allocations count as leaks", "leaks, strict")
    has(section(stext, "Leak check"), "global 'layers' (train_loop)", "referenced from")
    dtext = diff_view.diff_text(oom, ext, width=80)
    has(dtext, "no site changed", "oom to exit")


@test
def simulator_episode() -> None:
    """tests/programs/oom_retry (a caching allocator's release and two
    retries) on the simulated GPU: the summary of its first episode."""
    if not BUILD_DIR:
        print("  (no BUILD_DIR given: the simulator's episode is not tested)")
        return
    with tempfile.TemporaryDirectory(prefix="gmt-view-test.") as out:
        paths = fixtures.simulator_snapshots(BUILD_DIR, out, program=os.path.join("tests", "programs", "oom_retry"),
                                             env={"GMTSIM_MEMORY": "1G", "GMTSIM_CONTEXT_BYTES": "0"}, status=0)
        doc = load.load(paths["oom"])
    text = summary.summary(doc, width=80)
    check_width(text, 80, "simulator episode")
    print(text, end="")
    flat = " ".join(section(text, "Out-of-memory episode").split())
    has(flat, "#1: 3 failures over", "three failures")
    has(flat, "this snapshot is of failure 3 of 3", "the last one")
    has(flat, "the program freed 768 MiB in 3 allocations during the episode", "the cache freed")
    has(flat, "768 MiB 3 allocs device segment (oom_retry.c:", "by the allocator's segment function")
    has(" ".join(section(text, "Why it failed").split()), "cache released: over the episode's 3 failures",
        "the verdict beside")
    has(text, "live:    100 MiB in 1 allocation", "the live set of the last failure")


@test
def merge_ranks_at_a_glance() -> None:
    """Many ranks: the skew of live and peak bytes with the outlier, the first
    to run out (by its episode's first failure) and its site, every rank in
    exactly one group, under the site holding most of its live bytes."""
    ranks = []
    for r in range(20):
        doc, _ = fixtures.synthetic(rank=r, pid=300 + r, seed=r, n=600 if r == 7 else 200, oom=r in (3, 7),
                                    episode=r in (3, 7))
        if r in (3, 7):
            # Rank 7's episode began first, though its snapshot is later.
            doc["episode"]["first_ns"] = doc["time_ns"] - (5_000_000_000 if r == 7 else 1_000_000_000)
        ranks.append(checked(doc, f"rank{r}"))
    m = model.merge(ranks)
    docs = [ranks[i] for i in m["order"]]
    fl = model.fleet(m, docs)
    procs = m["processes"]
    eq(procs[fl["live"]["max_index"]]["rank"], 7, "the largest rank")
    eq([procs[i]["rank"] for i in fl["peak"]["outliers"]], [7], "the one outlier")
    peaks = sorted(p["peak_bytes"] for p in procs)
    eq(fl["peak"]["median"], (peaks[9] + peaks[10]) // 2, "the median of 20")
    eq(procs[fl["first_oom"]["index"]]["rank"], 7, "the first to run out, by its episode's first failure")
    members = sorted(i for g in fl["groups"] for i in g["processes"])
    eq(members, list(range(len(procs))), "every rank in one group")
    for g in fl["groups"]:
        for i in g["processes"]:
            own = {model.stack_key(docs[i], st["stack"]): st["live_bytes"] for st in docs[i]["sites"]}
            eq(own.get(m["sites"][g["site"]]["key"]), max(own.values()), f"rank {procs[i]['rank']}'s dominant site")
    text = merge_view.merge_text(ranks, width=120, top=5)
    flat = " ".join(section(text, "Ranks").split())
    seven = procs[fl["live"]["max_index"]]["peak_bytes"]
    has(flat, f"outliers: rank 7 (peak {fmt_bytes(seven)}, +{fmt_bytes(seven - fl['peak']['median'])} from the median)",
        "the outlier named, above the median")
    has(flat, "first out of memory: rank 7 at", "the first to run out named")
    has(flat, f"live: max {fmt_bytes(fl['live']['max'])} (rank 7), median", "the skew")


@test
def a_real_pytorch_out_of_memory() -> None:
    """A real PyTorch out-of-memory: the GPU suite's torch-train-oom on an
    H200 (torch 2.11.0+cu130, 2026-11-28), the snapshot as it was written.
    Its backward made segments from PyTorch's autograd thread (stacks with
    no Python frame, their site the allocator's alloc_block), which PyTorch
    released at the out-of-memory: at the tensor level they are the
    allocator's, never leak suspects of the program's (they read "+0 B",
    three times, before); the suspect is the line the batch grows at, and
    the levels add up to the device's live bytes."""
    path = os.path.join(HERE, "real", "h200-torch-train-oom.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = load.parse(f.read(), path)
    text = summary.summary(doc, width=100, top=8)
    sus = section(text, "Leak suspects")
    eq([ln.split(None, 2)[2] for ln in sus.splitlines()[1:] if ln.startswith("  +")],
       ["run_train_oom (torch_memory.py:203)"], "the leak suspects at the tensor level")
    has(section(text, "Why it failed"), "verdict: growth", "the verdict")
    lv = model.tensor_level(doc)
    released = [s for s in doc["sites"] if s["live_bytes"] == 0 and s["suspect"]]
    eq(len(released), 3, "the driver's suspects that hold nothing: the released segments' sites")
    eq([s for s in lv["sites"] if s in released], [], "none of them at the tensor level")
    segments = {a["stack"] for a in doc["allocations"] if a.get("framework_segment")}
    outside = [s["stack"] for s in doc["sites"] if s["live_bytes"] and s["stack"] not in segments]
    eq([s["stack"] for s in lv["sites"] if s["stack"] in outside], outside,
       "every driver's site holding memory outside the segments kept, those at a segment's line too "
       "(three at torch_memory.py:204, not PyTorch's segments)")
    live = sum(a["size"] for a in lv["allocations"] if a["device"] == 0)
    cached = sum(d["cached_bytes"] for d in doc["tensors"]["devices"] if d["device"] == 0)
    eq(live + cached, next(d["live_bytes"] for d in doc["devices"] if d["index"] == 0),
       "tensors, free inside the segments and the memory outside them: the device's live bytes")


def main(argv: List[str]) -> int:
    global BUILD_DIR
    BUILD_DIR = argv[1] if len(argv) > 1 else None
    return fixtures.run_tests(TESTS)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
