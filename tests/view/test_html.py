#!/usr/bin/env python3
"""Unit test of the HTML report (tools/python/gpumemtrace/view/html.py) without a browser: the
pages of one snapshot, a diff and a merge hold the fixtures' known contents in
their embedded data; nothing is fetched from the network or another file; a
hostile snapshot's names never appear as markup and cannot end the data block;
100,000 allocations are written quickly. Run directly (exit 1 on failure) or by
meson (suite 'viewer'); tests/view/test_browser.py renders the pages."""

from __future__ import annotations

import json
import os
import re
import sys
import time
import unittest
from html.parser import HTMLParser
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
sys.path.insert(0, HERE)

import fixtures  # noqa: E402
from gpumemtrace.view import axis, html, load, model  # noqa: E402

MiB = 1 << 20
DATA_RE = re.compile(r'<script type="application/json" id="gmt-data">(.*?)</script>', re.S)
# The one URL the page may hold: the SVG namespace, a name, not a resource.
ALLOWED_URLS = {"http://www.w3.org/2000/svg"}


def doc_of(d: Dict[str, Any], name: str = "t.json") -> Dict[str, Any]:
    """d through the loader, as the cli hands it to report()."""
    return load.parse(json.dumps(d), name)


def _later(o: Any, dt: int) -> None:
    """Every time of a fixture document (start_ns, time_ns: a value or a
    list) dt ns later, in place."""
    for k, v in (o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()):
        if k in ("start_ns", "time_ns") and isinstance(v, int):
            o[k] = v + dt
        elif k == "time_ns" and isinstance(v, list):
            o[k] = [x + dt for x in v]
        else:
            _later(v, dt)


def embedded(page: str) -> Dict[str, Any]:
    found = DATA_RE.findall(page)
    assert len(found) == 1, f"{len(found)} data blocks"
    return json.loads(found[0])


def addresses(a: Dict[str, Any]) -> List[int]:
    """The allocations' addresses back from the data's encoding."""
    if a["addr_enc"] == "hex":
        return [int(x, 16) for x in a["addr"]]
    out, acc = [], 0
    for x in a["addr"]:
        acc += x
        out.append(acc)
    return out


class Page(HTMLParser):
    """The page's elements and attributes, and each script's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: List[Tuple[str, Dict[str, Optional[str]]]] = []
        self.scripts: List[Tuple[Dict[str, Optional[str]], str]] = []
        self.styles: List[str] = []
        self._in: Optional[str] = None
        self._attrs: Dict[str, Optional[str]] = {}
        self._buf: List[str] = []
        self.text: List[str] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in ("script", "style"):
            self._in, self._attrs, self._buf = tag, a, []

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            if tag == "script":
                self.scripts.append((self._attrs, "".join(self._buf)))
            else:
                self.styles.append("".join(self._buf))
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self._buf.append(data)
        else:
            self.text.append(data)


def parse_page(page: str) -> Page:
    p = Page()
    p.feed(page)
    p.close()
    return p


def _run_of(span_ns: int) -> Tuple[Dict[str, Any], int, int]:
    """A snapshot of a run `span_ns` long: 40 allocations of 8 MiB spread
    over it, then 30 of them freed; its series in windows of 10 ms (the live
    bytes at each window's end and the highest within it), as the tracer
    keeps them. Returns (document, peak, final live bytes)."""
    raw, _ = fixtures.synthetic(n=10, sites=2, oom=False)
    t0, step, size = fixtures.T0, span_ns // 80, 8 * MiB
    events, live, peak = [], 0, 0
    for i in range(70):
        op = "alloc" if i < 40 else "free"
        addr = f"0x{0x7f0000000000 + (i if i < 40 else i - 40) * size:x}"
        live += size if op == "alloc" else -size
        peak = max(peak, live)
        events.append({"op": op, "seq": i + 1, "time_ns": t0 + i * step, "address": addr, "size": size,
                       "kind": "device", "device": 0, "api": "cuMemAlloc_v2", "thread": 1, "stack": 1})
    window, times, lives, maxes = 10_000_000, [], [], []
    end, cur, high, k = t0 + window, 0, 0, 0
    last = t0 + 69 * step
    while end <= last:
        while k < len(events) and events[k]["time_ns"] < end:
            cur += size if events[k]["op"] == "alloc" else -size
            high = max(high, cur)
            k += 1
        times.append(end)
        lives.append(cur)
        maxes.append(high)
        high = cur
        end += window
    for e in events[k:]:
        cur += size if e["op"] == "alloc" else -size
        high = max(high, cur)
    times.append(last + 1)
    lives.append(cur)
    maxes.append(high)
    raw["series"] = {"interval_ns": window, "start_ns": t0, "columns_dropped": 0, "time_ns": times,
                     "columns": [{"device": 0, "kind": "device", "live_bytes": lives, "max_bytes": maxes}]}
    raw["history"] = {"capacity": 10000, "dropped": 0, "events": events}
    raw["time_ns"] = last + 1
    return raw, peak, live


class TestSingle(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        raw, cls.truth = fixtures.synthetic(n=3000, sites=25, devices=2, seed=7)
        cls.doc = doc_of(raw)
        cls.page = html.report([cls.doc], "single", ["snap.json"])
        cls.data = embedded(cls.page)

    def test_sites_hold_the_truth(self) -> None:
        d = self.data["docs"][0]
        s = d["sites"]
        got = {sid: (b, c) for sid, b, c in zip(s["stack"], s["live"], s["count"]) if c}
        self.assertEqual(got, self.truth["sites"])
        # Most live bytes first, as the snapshot has them.
        self.assertEqual(s["live"], sorted(s["live"], reverse=True))

    def test_growth_only_where_judged(self) -> None:
        """The sites table's growth is the terminal's: a number only for a
        site judged growing (or a suspect), none for a site that took its
        memory once, whenever that was."""
        raw, _ = fixtures.synthetic(n=300, sites=8)
        doc = doc_of(raw, "g.json")
        data = embedded(html.report([doc], "single", ["g.json"]))["docs"][0]["sites"]
        groups = {g["stack"]: g for g in model.site_groups(doc)}
        for sid, growth in zip(data["stack"], data["growth"]):
            g = groups[sid]
            if g["growing"] or g["suspect"]:
                self.assertEqual(growth, g["growth_bytes"], f"site {sid}")
            else:
                self.assertIsNone(growth, f"site {sid} is not judged growing")
        self.assertTrue(any(v is None for v in data["growth"]) and any(v is not None for v in data["growth"]))

    def test_allocations_hold_the_truth(self) -> None:
        a = self.data["docs"][0]["allocs"]
        self.assertEqual(a["n"], self.truth["live_count"])
        self.assertEqual(a["addr_enc"], "delta")
        self.assertEqual(addresses(a), [int(x["address"], 16) for x in self.doc["allocations"]])
        self.assertEqual(sum(a["size"]), self.truth["live_bytes"])
        kinds = self.data["kinds"]
        by_dev: Dict[int, Dict[str, int]] = {}
        for k, dv, sz in zip(a["kind"], a["dev"], a["size"]):
            by_dev.setdefault(dv, {}).setdefault(kinds[k], 0)
            by_dev[dv][kinds[k]] += sz
        self.assertEqual(by_dev, self.truth["devices"])
        base = int(self.data["docs"][0]["base_ns"])
        self.assertEqual([t + base for t in a["t"]], [x["time_ns"] for x in self.doc["allocations"]])
        self.assertEqual([a["apis"][i] for i in a["api"]], [x["api"] for x in self.doc["allocations"]])

    def test_titles_and_frames(self) -> None:
        d = self.data["docs"][0]
        st = d["stacks"]
        fr = self.data["frames"]
        for sid, title in self.truth["titles"].items():
            j = st["id"].index(sid)
            self.assertTrue(st["title"][j].startswith(title + " ("), st["title"][j])
            self.assertEqual(st["title"][j], model.stack_title(self.doc, sid))
            # Frames innermost first, as in the snapshot, by their text.
            want = [model.frame_text(f) for f in self.doc["_stack_by_id"][sid]["frames"]]
            self.assertEqual([fr["text"][i] for i in st["frames"][j]], want)
        # Python frames are marked, the CUDA call too.
        kinds = {fr["text"][i]: fr["kind"][i] for i in range(len(fr["text"]))}
        self.assertEqual(kinds["<module> (train.py:1)"], 1)
        self.assertEqual(kinds["cudaMalloc in libcudart.so.13"], 2)
        self.assertEqual(kinds["__libc_start_main in libc.so.6"], 0)

    def test_series_and_marks(self) -> None:
        d = self.data["docs"][0]
        s = self.doc["series"]
        self.assertEqual([t + s["start_ns"] for t in d["series"]["t"]], s["time_ns"])
        self.assertEqual([(c["device"], c["kind"], c["live"]) for c in d["series"]["cols"]],
                         [(c["device"], c["kind"], c["live_bytes"]) for c in s["columns"]])
        ooms = d["marks"]["oom"]
        self.assertEqual(len(ooms), 1)
        self.assertEqual(ooms[0][1:3], [0, 96 * MiB])
        tags = {sp[0] for sp in d["marks"]["tags"]}
        self.assertIn("train", tags)
        for sp in d["marks"]["tags"]:
            self.assertLessEqual(sp[1], sp[2])
        self.assertEqual(d["time_ns"], str(self.doc["time_ns"]))

    def test_static_sections(self) -> None:
        p = self.page
        self.assertIn("Out of memory:", p)
        self.assertIn(html.esc(self.doc["diagnosis"]["summary"]), p)
        remedy = self.doc["diagnosis"]["remedies"][0]
        self.assertIn(f'<li><strong>free_growing_site</strong>: {html.esc(remedy["text"])}', p)
        self.assertIn(html.esc(model.stack_title(self.doc, remedy["stack"])), p.split("free_growing_site</strong>")[1])
        for sec in ("diagnosis", "timeline", "flame", "sites", "allocations", "addrmap", "fragmentation",
                    "stats"):
            self.assertIn(f'<section id="{sec}"', p)
        self.assertNotIn('<section id="leaks"', p)  # not an exit snapshot
        self.assertIn(model.fmt_bytes(self.truth["live_bytes"]), p)

    def test_self_contained(self) -> None:
        self.assert_self_contained(self.page)

    def assert_self_contained(self, page: str) -> None:
        pp = parse_page(page)
        for tag, attrs in pp.tags:
            self.assertNotIn(tag, ("link", "img", "iframe", "object", "embed", "base", "form", "audio",
                                   "video", "source", "frame"), f"<{tag}> in the page")
            self.assertNotIn("src", attrs, f"<{tag} src=…>")
            for k, v in attrs.items():
                self.assertFalse(k.startswith("on"), f"<{tag} {k}=…>")
                if k == "href":
                    self.assertTrue((v or "").startswith("#"), f"<{tag} href={v!r}>")
        self.assertEqual(set(re.findall(r"https?://[^\s\"'<>)]*", page)) - ALLOWED_URLS, set())
        css = "".join(pp.styles)
        self.assertNotIn("url(", css)
        self.assertNotIn("@import", css)
        js = [t for a, t in pp.scripts if a.get("type") != "application/json"]
        self.assertEqual(len(js), 1)
        for word in ("fetch(", "XMLHttpRequest", "WebSocket", "import(", "importScripts", "EventSource",
                     "sendBeacon", ".src =", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                     "eval(", "new Function"):
            self.assertNotIn(word, js[0], word)
        # The policy lets only this script and this style in.
        csp = [a["content"] for t, a in pp.tags
               if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
        self.assertEqual(len(csp), 1)
        self.assertIn("default-src 'none'", csp[0])
        self.assertIn(html._csp_hash(js[0]), csp[0])
        self.assertIn(html._csp_hash(css), csp[0])
        self.assertNotIn("unsafe-inline", csp[0])

    def test_assets_are_inlined(self) -> None:
        self.assertIn(html._asset("report.js"), self.page)
        self.assertIn(html._asset("report.css"), self.page)


class TestHostile(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        raw, cls.truth = fixtures.hostile(n=500)
        cls.doc = doc_of(raw, fixtures.HOSTILE + ".json")
        cls.page = html.report([cls.doc], "single", [fixtures.HOSTILE + ".json"])

    def test_no_markup_from_names(self) -> None:
        p = self.page
        for raw in ("<script>alert", "<img src=x", "onerror=alert(1)>", "\u202e", "\x01"):
            self.assertNotIn(raw, p)
        pp = parse_page(p)
        self.assertEqual([t for t, a in pp.tags if t == "script"], ["script", "script"])
        self.assertEqual([t for t, a in pp.tags if t == "img"], [])
        for tag, attrs in pp.tags:
            for k in attrs:
                self.assertFalse(k.startswith("on"), f"<{tag} {k}>")
        # The names are there, as text.
        text = "".join(pp.text)
        self.assertIn('site_2<script>alert("x")</script><img src=x onerror=alert(1)>&amp;\\u202e\\u0001"\'',
                      text)

    def test_data_block_cannot_end_early(self) -> None:
        m = DATA_RE.search(self.page)
        assert m is not None
        block = m.group(1)
        for c in "<>&\u2028\u2029":
            self.assertNotIn(c, block)
        # What the browser's parser takes as the block's text is the whole block,
        # and it reads back to the names as they were.
        pp = parse_page(self.page)
        data_blocks = [t for a, t in pp.scripts if a.get("type") == "application/json"]
        self.assertEqual(len(data_blocks), 1)
        data = json.loads(data_blocks[0])
        self.assertEqual(data["docs"][0]["label"], model.process_label(self.doc))
        self.assertIn(fixtures.HOSTILE, data["docs"][0]["label"])
        self.assertEqual(data["files"], [fixtures.HOSTILE + ".json"])

    def test_json_for_script(self) -> None:
        nasty = "</script><!--<script>\u2028\u2029&amp;</SCRIPT>\ud800"
        out = html.json_for_script({"k": nasty, "n": [1, 2]})
        for c in "<>&\u2028\u2029":
            self.assertNotIn(c, out)
        self.assertTrue(out.isascii())
        self.assertEqual(json.loads(out), {"k": nasty, "n": [1, 2]})

    def test_leaks_section(self) -> None:
        self.assertIn('<section id="leaks"', self.page)
        self.assertIn("Leaks at exit", self.page)
        self.assertIn(html.esc("global 'kept" + fixtures.HOSTILE), self.page)

    def test_lone_surrogate_encodes(self) -> None:
        raw, _ = fixtures.synthetic(n=20, evil="\ud800x")
        page = html.report([doc_of(raw)], "single", ["\udcffname.json"])
        page.encode("utf-8")  # would raise on a lone surrogate
        self.assertIn("\ufffdname.json", page)

    def test_clean(self) -> None:
        self.assertEqual(html.clean("a\x01b\u202ec\x7f"), "a\\u0001b\\u202ec\\u007f")
        self.assertEqual(html.esc('<a href="x">'), "&lt;a href=&quot;x&quot;&gt;")


class TestModes(unittest.TestCase):
    def test_diff(self) -> None:
        old_raw, _ = fixtures.synthetic(n=400, seed=3, oom=False)
        new_raw, _ = fixtures.synthetic(n=900, seed=3)
        old, new = doc_of(old_raw, "old.json"), doc_of(new_raw, "new.json")
        page = html.report([old, new], "diff", ["old.json", "new.json"])
        data = embedded(page)
        rows = model.diff(old, new)
        self.assertEqual(data["mode"], "diff")
        self.assertEqual(data["diff"]["title"], [r["title"] for r in rows])
        self.assertEqual(data["diff"]["delta_bytes"], [r["delta_bytes"] for r in rows])
        self.assertEqual(sum(data["diff"]["delta_bytes"]),
                         new["summary"]["live_bytes"] - old["summary"]["live_bytes"])
        self.assertEqual(len(data["docs"]), 2)
        self.assertIn("From the older to the newer snapshot", page)
        self.assertIn("Growth by site", page)
        TestSingle.assert_self_contained(self, page)
        # The lead sentence counts in words: one site, no site, plurals.
        grew = [r for r in rows if r["delta_bytes"] > 0]
        fell = [r for r in rows if r["delta_bytes"] < 0]
        lead = re.search(r'<p class="lead">(.*?)</p>', page, re.S).group(1)
        self.assertNotRegex(lead, r"\b1 sites\b|\b0 (sites|shrank)\b|by 0 B")
        if not fell:
            self.assertIn("no site shrank", lead)
        self.assertIn(f"{len(grew)} site{'s' if len(grew) != 1 else ''} grew by", lead)
        self.assertEqual(html._site_changes(1, 4 << 20, "grew"), "1 site grew by 4.00 MiB")
        self.assertEqual(html._site_changes(0, 0, "shrank"), "no site shrank")

    def test_merge(self) -> None:
        raws = [fixtures.synthetic(n=300 + 100 * r, seed=10 + r, pid=100 + r, rank=r, oom=r == 1)
                for r in (2, 0, 1)]
        _later(raws[0][0], 7_000_000)  # rank 2 started 7 ms after the others
        docs = [doc_of(r[0], f"rank{i}.json") for i, r in enumerate(raws)]
        files = ["r2.json", "r0.json", "r1.json"]
        page = html.report(docs, "merge", files)
        data = embedded(page)
        m = model.merge(docs)
        mg = data["merge"]
        self.assertEqual([p["label"] for p in mg["processes"]], [p["label"] for p in m["processes"]])
        self.assertEqual([p["doc"] for p in mg["processes"]], [1, 2, 0])  # rank order
        self.assertEqual(mg["by"], [s["by_process"] for s in m["sites"]])
        self.assertEqual(sum(mg["live"]), sum(t[1]["live_bytes"] for t in raws))
        # Ranks at a glance: the skew's largest rank, the first to run out,
        # every process in the table of dominant sites once.
        fl = model.fleet(m, [docs[i] for i in m["order"]])
        self.assertIn("Ranks at a glance", page)
        largest = m["processes"][fl["live"]["max_index"]]
        self.assertIn(f'max <strong>{html._b(largest["live_bytes"])}</strong> (rank {largest["rank"]})', page)
        self.assertIn('first out of memory: <span class="bad">rank 1</span>', page)
        self.assertEqual(sum(len(g["processes"]) for g in fl["groups"]), len(docs))
        self.assertIn('class="static ranks-by-site"', page)
        # Per site and rank, the truth of each fixture.
        for row, title in enumerate(mg["title"]):
            sid = mg["stack"][row]
            for pos, p in enumerate(mg["processes"]):
                want = raws[p["doc"]][1]["sites"].get(sid, (0, 0))[0]
                self.assertEqual(mg["by"][row][pos], want, (title, p["label"]))
        self.assertEqual(len(data["docs"]), 3)
        # One time axis: each process's times from the earliest base.
        bases = [int(d["base_ns"]) for d in data["docs"]]
        self.assertGreater(max(bases), min(bases))
        self.assertEqual([p["offset"] for p in mg["processes"]], [bases[p["doc"]] - min(bases) for p in mg["processes"]])
        self.assertIn("3 processes hold", page)
        TestSingle.assert_self_contained(self, page)

    def test_merge_aligned_on_steps(self) -> None:
        """Ranks that marked their steps share an axis of steps; one that
        marked none, steps out of order or marks back in time, puts them
        back on one clock, as do ranks that marked one step each."""
        raws = [fixtures.with_steps(fixtures.synthetic(n=200, seed=40 + r, pid=200 + r, rank=r)[0], 8, first=3)
                for r in range(3)]
        docs = [doc_of(r, f"rank{i}.json") for i, r in enumerate(raws)]
        data = embedded(html.report(docs, "merge", ["a", "b", "c"]))
        self.assertEqual(data["merge"]["align"], "step")
        for d in data["docs"]:
            self.assertEqual([s[1] for s in d["marks"]["steps"]], list(range(3, 11)))
        plain = doc_of(fixtures.synthetic(n=200, seed=44, pid=204, rank=3)[0], "rank3.json")
        data = embedded(html.report(docs + [plain], "merge", ["a", "b", "c", "d"]))
        self.assertEqual(data["merge"]["align"], "time")
        back = fixtures.with_steps(fixtures.synthetic(n=200, seed=45, pid=205, rank=4)[0], 4)
        for e, k in zip([e for e in back["history"]["events"] if e["op"] == "step"], (1, 2, 5, 4)):
            e["step"] = k
        data = embedded(html.report(docs + [doc_of(back, "rank4.json")], "merge", ["a", "b", "c", "e"]))
        self.assertEqual(data["merge"]["align"], "time")
        # A rank whose clock was set back between two marks: one clock.
        stepped = fixtures.with_steps(fixtures.synthetic(n=200, seed=46, pid=206, rank=5)[0], 4)
        marks = [e for e in stepped["history"]["events"] if e["op"] == "step"]
        marks[2]["time_ns"] = marks[1]["time_ns"] - 1
        data = embedded(html.report(docs + [doc_of(stepped, "rank5.json")], "merge", ["a", "b", "c", "f"]))
        self.assertEqual(data["merge"]["align"], "time")
        # One mark each tells no step's length: one clock.
        ones = [doc_of(fixtures.with_steps(fixtures.synthetic(n=200, seed=50 + r, pid=210 + r, rank=r)[0], 1, first=3),
                       f"one{r}.json") for r in range(3)]
        data = embedded(html.report(ones, "merge", ["a", "b", "c"]))
        self.assertEqual(data["merge"]["align"], "time")
        self.assertTrue(all(len(d["marks"]["steps"]) == 1 for d in data["docs"]))

    def test_bad_arguments(self) -> None:
        d = doc_of(fixtures.synthetic(n=5)[0])
        with self.assertRaises(ValueError):
            html.report([d], "sideways", ["a"])
        with self.assertRaises(ValueError):
            html.report([d], "diff", ["a"])
        with self.assertRaises(ValueError):
            html.report([d, d], "single", ["a", "b"])


class TestEdges(unittest.TestCase):
    def test_empty_snapshot(self) -> None:
        raw = {"format": "gpumemtrace-snapshot", "version": 1, "reason": "api", "seq": 1,
               "time_ns": fixtures.T0, "pid": 7,
               "summary": {"live_bytes": 0, "live_count": 0, "peak_bytes": 0, "total_allocs": 0,
                           "total_frees": 0}}
        page = html.report([doc_of(raw)], "single", ["empty.json"])
        data = embedded(page)
        self.assertEqual(data["docs"][0]["allocs"]["n"], 0)
        self.assertEqual(data["docs"][0]["series"]["t"], [])
        self.assertNotIn('<section id="fragmentation"', page)

    def test_high_addresses_as_hex(self) -> None:
        raw, _ = fixtures.synthetic(n=10)
        raw["allocations"][-1]["address"] = "0xfffffffffffff000"
        d = doc_of(raw)
        a = embedded(html.report([d], "single", ["x"]))["docs"][0]["allocs"]
        self.assertEqual(a["addr_enc"], "hex")
        self.assertEqual(addresses(a), [int(x["address"], 16) for x in d["allocations"]])

    def test_stacks_of_one_site_are_one_row(self) -> None:
        """Stacks the tracer put in one site are one row of the sites table,
        their bytes added up; the flame graph keeps them apart (its per-stack
        columns), since their frames differ."""
        raw, truth = fixtures.synthetic(n=400, sites=5)
        raw["stacks"][1]["site"] = dict(raw["stacks"][0]["site"])
        d = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]
        s, ps = d["sites"], d["stack_sites"]
        rows = {sid: b for sid, b in zip(s["stack"], s["live"])}
        one, two = truth["sites"].get(1, (0, 0))[0], truth["sites"].get(2, (0, 0))[0]
        self.assertEqual(len(s["stack"]), len(ps["stack"]) - 1)
        self.assertEqual(rows.get(1 if one >= two else 2), one + two)
        self.assertNotIn(2 if one >= two else 1, rows)
        self.assertEqual({k: b for k, b, c in zip(ps["stack"], ps["live"], ps["count"]) if c},
                         {k: v[0] for k, v in truth["sites"].items() if v[1]})

    def test_timeline_of_any_length(self) -> None:
        """A run of 1 ms, 100 ms or 10 s: the timeline's points reach the
        true peak (inside a window for the long run) and end at the live
        bytes of the snapshot; a short run is drawn from its events."""
        for span_ns in (1_000_000, 100_000_000, 10_000_000_000):
            with self.subTest(span_ms=span_ns / 1e6):
                raw, peak, final = _run_of(span_ns)
                s = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]["series"]
                self.assertGreaterEqual(len(s["t"]), 2)
                col = s["cols"][0]
                self.assertEqual(max(col["max"]), peak)
                self.assertEqual(col["live"][-1], final)
                self.assertEqual(s["fine"], span_ns < 64 * 10_000_000)
                self.assertEqual(s["t"], sorted(s["t"]))

    def test_axis_of_a_short_run(self) -> None:
        """A run drawn from its events opens on event order where one stretch
        without events takes more than half the time axis (axis.py): 70
        changes in 0.9 ms, then an out-of-memory 10 ms later. Each mark lies
        at its place among the changes: the out-of-memory right after the
        last, a step before the change its seq names. A run whose events
        spread over it keeps time; a long one (windows) has no event order."""
        raw, _, _ = _run_of(1_000_000)
        ax = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]["series"]["axis"]
        self.assertEqual((ax["order"]["default"], ax["order"]["events"], ax["order"]["points"]), (False, 70, 72))
        self.assertNotIn("why", ax["order"])
        raw, _, _ = _run_of(10_000_000_000)
        ax = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]["series"]["axis"]
        self.assertIsNone(ax["order"])

        raw, _, _ = _run_of(1_000_000)
        events = raw["history"]["events"]
        last = events[-1]["time_ns"]
        oom = last + 10_000_000
        events.append({"op": "oom", "seq": 1, "time_ns": oom, "address": None, "size": 8 * MiB, "kind": "device",
                       "device": 0, "api": "cuMemAlloc_v2", "thread": 1, "stack": 1})
        events.insert(5, {"op": "step", "seq": 6, "time_ns": events[5]["time_ns"], "address": None, "size": 0,
                          "step": 1, "kind": None, "device": -1, "api": None, "thread": 1, "stack": 0})
        raw["time_ns"] = oom + 1000
        d = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]
        ax = d["series"]["axis"]
        self.assertEqual((ax["lo"], ax["hi"]), (0, oom + 1000 - fixtures.T0))
        order = ax["order"]
        self.assertTrue(order["default"])
        self.assertEqual(order["empty_ns"], oom - last)
        self.assertEqual(order["busy_ns"] + order["empty_ns"], order["span_ns"])
        self.assertIn("no event in 10 ms of this 10.9 ms run: its 70 allocations and frees fell within the other 0.864 ms", order["why"])
        self.assertEqual([o[5] for o in d["marks"]["oom"]], [70.5])
        self.assertEqual([st[2] for st in d["marks"]["steps"]], [5.5])

    def test_says_little(self) -> None:
        """The rule alone: more than half the axis empty, not half or less."""
        self.assertIsNone(axis.says_little([0, 50], 0, 100))
        self.assertIsNone(axis.says_little([10, 40, 60, 90], 0, 100))
        self.assertEqual(axis.says_little([0, 10, 20, 29], 0, 100), {"empty_ns": 71, "busy_ns": 29, "span_ns": 100})
        self.assertEqual(axis.says_little([80], 0, 100)["empty_ns"], 80)  # before the first event
        self.assertIsNone(axis.says_little([], 0, 100))
        self.assertIsNone(axis.says_little([5], 5, 5))

    def test_extent_and_marks_at_a_change(self) -> None:
        """The time axis reaches an out-of-memory later than the last point
        and the snapshot; a mark at the very time of a change falls after
        it (the change happened by then), one before every change at 0.5."""
        self.assertEqual(axis.extent([5, 20], 30, [80]), (0, 80))
        self.assertEqual(axis.extent([-3, 20], 30, []), (-3, 30))
        doc = {"history": {"events": [
            {"op": op, "time_ns": t, "seq": q} for op, t, q in
            (("alloc", 100, 1), ("alloc", 200, 2), ("free", 200, 3), ("alloc", 300, 4))]}}
        order = axis.EventOrder(doc, 0)
        self.assertEqual(order.n, 4)
        self.assertEqual([order.at(t) for t in (50, 100, 200, 250, 300)], [0.5, 1.5, 3.5, 3.5, 4.5])

    def test_steps_marked(self) -> None:
        """The program's steps are marks of the timeline (200, evenly, and the
        last: a timeline aligned on steps reaches it)."""
        def marked(n: int) -> Tuple[Dict[str, Any], int]:
            raw, _ = fixtures.synthetic(n=50, sites=2)
            t0 = raw["history"]["events"][0]["time_ns"]
            raw["history"]["events"][:0] = [
                {"op": "step", "seq": k, "time_ns": t0 + k, "address": None, "size": 0, "step": k,
                 "kind": None, "device": -1, "api": None, "thread": 1, "stack": 0} for k in range(n)]
            return embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0], t0

        d, t0 = marked(1000)
        steps = d["marks"]["steps"]
        self.assertEqual(len(steps), 201)
        self.assertEqual([s[1] for s in steps[:3]] + [steps[-1][1]], [0, 5, 10, 999])
        base = int(d["base_ns"])
        self.assertEqual(steps[1][0], t0 + 5 - base)
        # 1199 steps: every sixth (not every fifth: 240), and the last.
        steps = marked(1199)[0]["marks"]["steps"]
        self.assertEqual([s[1] for s in steps], list(range(0, 1199, 6)) + [1198])

    def test_parent_pid_is_a_pid(self) -> None:
        """A process id is a name, not a quantity: no thousands separator."""
        raw, _ = fixtures.synthetic(n=20)
        raw["process"]["ppid"] = 21275
        page = html.report([doc_of(raw)], "single", ["x"])
        self.assertIn("pid 21275", page)
        self.assertNotIn("21,275", page)

    def test_episode(self) -> None:
        """The out-of-memory box holds the episode: each failure with what was
        freed before it, and the freed memory by site, largest first."""
        raw, _ = fixtures.synthetic(n=100, sites=6, episode=True)
        d = doc_of(raw)
        page = html.report([d], "single", ["x"])
        text = " ".join(" ".join(parse_page(page).text).split())
        self.assertIn("Out-of-memory episode #1: 3 failures over 3 ms", text)
        self.assertIn("This snapshot is of failure 3 of 3, the last the program was told of.", text)
        self.assertIn("+1.5 ms 96.0 MiB cuMemAlloc_v2", text)
        self.assertIn("256 MiB in 1", text)
        self.assertIn("The program freed 768 MiB in 3 allocations during the episode", text)
        self.assertLess(text.index("512 MiB 2 device"), text.index("256 MiB 1 device"))
        self.assertNotIn("Out-of-memory episode", html.report([doc_of(fixtures.synthetic(n=100)[0])], "single", ["x"]))

    def test_framework(self) -> None:
        """The framework's allocator: its counters, and each segment opening
        to its blocks (address, size, requested, state, frame)."""
        raw, _ = fixtures.synthetic(n=100, sites=6)
        seg, _ = fixtures.with_torch_state(raw, stream=7)
        page = html.report([doc_of(raw)], "single", ["x"])
        text = " ".join(" ".join(parse_page(page).text).split())
        fw = raw["framework"]["devices"][0]
        third = seg["blocks"][1]["size"]
        self.assertIn("Framework's allocator torch 2.11.0", text)
        self.assertIn(f"{model.fmt_bytes(fw['allocated_bytes'])} {model.fmt_bytes(fw['reserved_bytes'])} "
                      f"{model.fmt_bytes(third)} {model.fmt_bytes(third)} none", text)
        self.assertIn(f"{model.fmt_bytes(seg['total_size'])} at {seg['address']:#x} on device {seg['device']} "
                      f"(large, stream 7): {model.fmt_bytes(seg['total_size'] - third)} in 2 active, "
                      f"{model.fmt_bytes(third)} free in 1", text)
        b = seg["blocks"][0]
        self.assertIn(f"{b['address']:#x} {model.fmt_bytes(b['size'])} {model.fmt_bytes(b['requested_size'])} active "
                      "forward (model.py:12)", text)
        self.assertIn(f"{seg['blocks'][1]['address']:#x} {model.fmt_bytes(third)} free", text)
        self.assertNotIn("Framework's allocator", html.report([doc_of(fixtures.synthetic(n=100)[0])], "single", ["x"]))

    def test_no_sites_section(self) -> None:
        raw, truth = fixtures.synthetic(n=200)
        del raw["sites"]
        s = embedded(html.report([doc_of(raw)], "single", ["x"]))["docs"][0]["sites"]
        self.assertEqual({k: (b, c) for k, b, c in zip(s["stack"], s["live"], s["count"])}, truth["sites"])

    def test_tag_spans(self) -> None:
        raw, _ = fixtures.synthetic(n=50, sites=4, points=10)
        ev = raw["history"]["events"] = []
        # Thread 1: tagged, tagged, untagged (closes), tagged again.
        for i, st in enumerate((1, 3, 2, 1)):
            ev.append({"op": "alloc", "seq": i + 1, "time_ns": fixtures.T0 + (i + 1) * 1000,
                       "address": "0x1000", "size": 1, "kind": "device", "device": 0, "api": "x",
                       "thread": 1, "stack": st})
        d = doc_of(raw)
        spans = html._tag_spans(d, fixtures.T0)
        train = sorted(sp[1:] for sp in spans if sp[0] == "train")
        self.assertEqual(train, [[1000, 2000, 2], [4000, 4000, 1]])
        self.assertEqual(sorted(sp[1:] for sp in spans if sp[0] == "layer1"),
                         [[1000, 1000, 1], [4000, 4000, 1]])


class TestSpeed(unittest.TestCase):
    def test_100k_allocations(self) -> None:
        raw, truth = fixtures.synthetic(n=100_000, sites=200, devices=2, seed=5)
        d = doc_of(raw)
        t = time.perf_counter()
        page = html.report([d], "single", ["big.json"])
        secs = time.perf_counter() - t
        print(f"\n  100k allocations: report() {secs:.3f} s, {len(page) / 1e6:.1f} MB", file=sys.stderr)
        self.assertLess(secs, 2.0)
        # Compact: well under the snapshot's own JSON.
        self.assertLess(len(page), len(json.dumps(raw)) / 3)
        self.assertEqual(embedded(page)["docs"][0]["allocs"]["n"], 100_000)


if __name__ == "__main__":
    unittest.main(verbosity=2)
