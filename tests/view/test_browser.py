#!/usr/bin/env python3
"""Browser test of the HTML report (tools/python/gpumemtrace/view/html.py): headless Chromium,
driven over the DevTools protocol on a pipe (standard library only), loads the
reports of a simulator out-of-memory snapshot, a PyTorch one (the tensor
level first, the segments one click away), a hostile snapshot and a
100,000-allocation snapshot, and checks that each renders without a script
error or console error, that the drawn sections hold the expected data, that
hostile names stay text, and that 100k allocations render in under 3 s. It
also proves that it sees errors: a page whose script throws must fail.

usage: test_browser.py BUILD_DIR
Screenshots and the reports go to BUILD_DIR/tests/view/. Without Chromium
(/usr/bin/chromium, or $GMT_CHROMIUM) it fails, unless GMT_TEST_NO_BROWSER=1,
which skips it (exit 77).
"""

from __future__ import annotations

import base64
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools", "python"))
sys.path.insert(0, HERE)

import fixtures  # noqa: E402
from gpumemtrace.view import html, load, model  # noqa: E402

SKIP = 77
RENDER_LIMIT_MS = 3000.0
BUILD = ""  # set from the command line
OUT = ""


def chromium_path() -> Optional[str]:
    """$GMT_CHROMIUM when set (and only it), else Debian's, else one on PATH."""
    given = os.environ.get("GMT_CHROMIUM")
    cands = [given] if given else ["/usr/bin/chromium", shutil.which("chromium"),
                                   shutil.which("chromium-browser"), shutil.which("google-chrome")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


class BrowserError(Exception):
    pass


class Browser:
    """Headless Chromium with --remote-debugging-pipe: it reads DevTools
    commands from fd 3 and writes replies and events to fd 4, each a JSON
    message ended by a NUL byte."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="gmt-chromium.")
        # Our ends; the child's ends are dup'ed onto 3 and 4 before exec.
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # NOTE: moved above 10 first, so that dup2() onto 3 and 4 in the child
        # cannot overwrite one of them before it is copied.
        hi_r = _fd_above(to_child_r, 10)
        hi_w = _fd_above(from_child_w, 10)
        os.close(to_child_r)
        os.close(from_child_w)

        def child_fds() -> None:
            os.dup2(hi_r, 3)  # dup2 leaves the copies inheritable
            os.dup2(hi_w, 4)

        args = [binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--mute-audio", "--hide-scrollbars",
                f"--user-data-dir={self.profile}", "--window-size=1400,2000", "about:blank"]
        self.log = tempfile.TemporaryFile()
        # NOTE: Chromium stays in this process group, so that a harness that
        # kills the group on a timeout (meson test does) ends it too.
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     preexec_fn=child_fds, close_fds=False)
        os.close(hi_r)
        os.close(hi_w)
        self.buf = b""
        self.next_id = 0
        self.events: List[Dict[str, Any]] = []
        self.session: Optional[str] = None

    # -- the protocol --
    def send(self, method: str, params: Optional[Dict[str, Any]] = None, session: Optional[str] = None,
             timeout: float = 30.0) -> Dict[str, Any]:
        self.next_id += 1
        mid = self.next_id
        msg: Dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self.to_child, data)
            data = data[n:]
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline, f"the reply to {method}")
            if m.get("id") == mid:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def _read(self, deadline: float, what: str) -> Dict[str, Any]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"timed out waiting for {what}")
            r, _, _ = select.select([self.from_child], [], [], left)
            if not r:
                continue
            chunk = os.read(self.from_child, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium closed the pipe while waiting for {what}: {self.stderr_tail()}")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def pump(self, seconds: float) -> None:
        """Collect events for a while."""
        deadline = time.monotonic() + seconds
        while True:
            if b"\0" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                r, _, _ = select.select([self.from_child], [], [], left)
                if not r:
                    return
                chunk = os.read(self.from_child, 1 << 20)
                if not chunk:
                    return
                self.buf += chunk
                continue
            raw, self.buf = self.buf.split(b"\0", 1)
            self.events.append(json.loads(raw))

    def stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-2000:]

    # -- pages --
    def open_page(self) -> None:
        """A fresh tab with Runtime, Log and Page events on."""
        if self.session:
            self.send("Target.closeTarget", {"targetId": self.target})
        self.target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": self.target, "flatten": True})["sessionId"]
        for dom in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.send(dom, session=self.session)
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
                  session=self.session)
        self.events = []

    def load(self, path: str, ready: str = "document.body && document.body.dataset.ready === '1'",
             timeout: float = 60.0) -> None:
        """Navigate to the file and wait until ready is true (or an error)."""
        self.send("Page.navigate", {"url": "file://" + os.path.abspath(path)}, session=self.session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.eval(ready):
                self.pump(0.2)  # late console messages
                return
            if self.errors():
                return
            self.pump(0.1)
        raise BrowserError(f"{path}: not ready after {timeout} s; errors: {self.errors()}")

    def eval(self, expr: str) -> Any:
        r = self.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=self.session)
        if "exceptionDetails" in r:
            what = r["exceptionDetails"].get("exception", {}).get("description")
            raise BrowserError(f"evaluating {expr[:80]}: {what}")
        return r["result"].get("value")

    def errors(self) -> List[str]:
        """Uncaught exceptions, console.error/assert calls and error log
        entries (CSP violations, failed loads) seen so far in this page."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append("exception: " + str(d.get("exception", {}).get("description") or d.get("text")))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console." + p["type"] + ": " + " ".join(str(a.get("value", a.get("description")))
                                                                   for a in p.get("args", [])))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append("log: " + p["entry"].get("text", ""))
        return out

    def dialogs(self) -> List[str]:
        return [e["params"].get("message", "") for e in self.events
                if e.get("method") == "Page.javascriptDialogOpening"]

    def screenshot(self, path: str, full: bool = False) -> None:
        params: Dict[str, Any] = {"format": "png", "captureBeyondViewport": full}
        if full:
            size = self.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        r = self.send("Page.captureScreenshot", params, session=self.session, timeout=60)
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def _fd_above(fd: int, low: int) -> int:
    import fcntl
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, low)



# --- What the pages must show -------------------------------------------------------

def write_report(docs: List[Dict[str, Any]], mode: str, files: List[str], name: str) -> str:
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html.report(docs, mode, files))
    return path


def flame_nodes(page_data: Dict[str, Any], which: List[int]) -> int:
    """The nodes of the icicle over the sites of the documents which: the root
    and every distinct prefix of the frame paths, outermost first (as the
    page's buildTree())."""
    prefixes = set()
    for di in which:
        d = page_data["docs"][di]
        ix = {sid: j for j, sid in enumerate(d["stacks"]["id"])}
        for sid, live in zip(d["sites"]["stack"], d["sites"]["live"]):
            if live <= 0:
                continue
            path = tuple(reversed(d["stacks"]["frames"][ix[sid]])) if sid in ix else (-2,)
            for k in range(1, len(path) + 1):
                prefixes.add(path[:k])
    return 1 + len(prefixes)


def page_pages(doc: Dict[str, Any], dev: int, granularity: int) -> Tuple[int, int, int]:
    """(pages, partly used, stranded bytes) of the device-kind allocations on dev."""
    used: Dict[int, int] = {}
    for a in doc["allocations"]:
        if a["device"] != dev or a["kind"] != "device" or a["size"] == 0:
            continue
        start, end = int(a["address"], 16), int(a["address"], 16) + a["size"]
        p = start // granularity
        while p * granularity < end:
            lo, hi = max(start, p * granularity), min(end, (p + 1) * granularity)
            used[p] = used.get(p, 0) + hi - lo
            p += 1
    partial = [u for u in used.values() if u < granularity]
    return len(used), len(partial), sum(granularity - u for u in partial)


JS_TABLE = """(() => {
  const t = document.getElementById(%s);
  if (!t) return null;
  const rows = [...t.querySelectorAll('tbody tr')].map(tr => [...tr.cells].map(td => td.textContent));
  return {rows: rows, total: +t.dataset.rows, matched: +t.dataset.matched,
          head: [...t.querySelectorAll('th')].map(th => th.textContent)};
})()"""


# Each chart's box, its peak label's and its step labels' (left, top, right,
# bottom, as the page lays them out), the labels from left to right.
JS_STEP_LABELS = """[...document.querySelectorAll('#timeline-body svg.chart')].map(svg => {
  const r = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const peak = svg.querySelector('g.peak text');
  const labels = [...svg.querySelectorAll('g.step text')].map(t => ({text: t.textContent, box: r(t)}))
    .sort((a, b) => a.box[0] - b.box[0]);
  return {svg: r(svg), peak: peak ? r(peak) : null, labels: labels};
})"""

# Per chart: its axis, the x of its out-of-memory lines, the x of the last
# change of its series (where the live bytes last moved) and the plot's
# left and right edges, in the chart's own units.
JS_AXIS = """[...document.querySelectorAll('#timeline-body svg.chart')].map(svg => {
  const pts = svg.querySelector('polyline.ln').getAttribute('points').trim().split(' ')
    .map(p => p.split(',').map(Number));
  let last = pts[0][0];
  for (let i = 1; i < pts.length; i++) if (pts[i][1] !== pts[i - 1][1]) last = pts[i][0];
  const hover = svg.querySelector('rect.hover');
  return {axis: svg.dataset.axis, oom: [...svg.querySelectorAll('g.oom line')].map(l => +l.getAttribute('x1')),
          lastChange: last, left: +hover.getAttribute('x'),
          right: +hover.getAttribute('x') + +hover.getAttribute('width'),
          ticks: [...svg.querySelectorAll('.grid text')].map(t => t.textContent)};
})"""


def overlap(a: List[float], b: List[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


class BrowserTest(unittest.TestCase):
    browser: Browser

    @classmethod
    def setUpClass(cls) -> None:
        cls.browser = Browser(BINARY)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.browser.close()

    def show(self, path: str) -> float:
        """Load the page in a fresh tab; fail on any error; the wall time."""
        b = self.browser
        b.open_page()
        t = time.monotonic()
        b.load(path)
        wall = time.monotonic() - t
        self.assertEqual(b.errors(), [], f"{path}: errors in the page")
        self.assertTrue(b.eval("document.getElementById('gmt-error').hidden"), "the page shows an error")
        self.assertEqual(b.eval("document.querySelectorAll('.needs-js').length"), 0,
                         "a section was not drawn")
        return wall

    def table(self, tid: str) -> Dict[str, Any]:
        t = self.browser.eval(JS_TABLE % json.dumps(tid))
        self.assertIsNotNone(t, f"no table #{tid}")
        return t

    def click(self, selector: str, settle: float = 0.0) -> None:
        ok = self.browser.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                               f"if (!e) return false; e.click(); return true; }})()")
        self.assertTrue(ok, f"nothing to click at {selector}")
        if settle:
            time.sleep(settle)

    def check_step_labels(self) -> int:
        """Every step label of the timeline lies wholly inside its chart,
        clear of the peak's label and of the other labels; how many there are."""
        charts = self.browser.eval(JS_STEP_LABELS)
        for c in charts:
            box = c["svg"]
            for lab in c["labels"]:
                self.assertTrue(box[0] <= lab["box"][0] and lab["box"][2] <= box[2],
                                f"{lab['text']!r} clipped by its chart: {lab['box']} outside {box}")
                if c["peak"]:
                    self.assertFalse(overlap(lab["box"], c["peak"]),
                                     f"{lab['text']!r} {lab['box']} over the peak's label {c['peak']}")
            for a, b in zip(c["labels"], c["labels"][1:]):
                self.assertFalse(overlap(a["box"], b["box"]), f"{a['text']!r} over {b['text']!r}")
        return sum(len(c["labels"]) for c in charts)

    def type_into(self, selector: str, text: str, settle: float = 0.5) -> None:
        self.browser.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                          f"e.value = {json.dumps(text)}; e.dispatchEvent(new Event('input')); }})()")
        time.sleep(settle)


class TestDetectsErrors(BrowserTest):
    """The checks above must be able to fail: pages that go wrong must."""

    def expect_error(self, path: str, why: str) -> None:
        b = self.browser
        b.open_page()
        try:
            b.load(path, timeout=10)
        except BrowserError:
            pass
        self.assertNotEqual(b.errors(), [], f"{why}: no error seen")

    def test_throwing_script(self) -> None:
        path = os.path.join(OUT, "broken-throw.html")
        with open(path, "w") as f:
            f.write("<!DOCTYPE html><title>x</title><script>undefinedFunction();</script>")
        self.expect_error(path, "a script calling an undefined function")

    def test_console_error(self) -> None:
        path = os.path.join(OUT, "broken-console.html")
        with open(path, "w") as f:
            f.write("<!DOCTYPE html><title>x</title><script>console.error('boom');</script>")
        self.expect_error(path, "console.error()")

    def test_report_with_broken_data(self) -> None:
        # The real report's script, on data it cannot read: JSON.parse throws.
        raw, _ = fixtures.synthetic(n=50)
        page = html.report([load.parse(json.dumps(raw), "x")], "single", ["x"])
        start = page.index('id="gmt-data">') + len('id="gmt-data">')
        broken = page[:start] + "{" + page[page.index("</script>", start):]
        path = os.path.join(OUT, "broken-data.html")
        with open(path, "w") as f:
            f.write(broken)
        self.expect_error(path, "a report whose data is not JSON")
        self.assertFalse(self.browser.eval("document.getElementById('gmt-error').hidden"))

    def test_blocked_inline_script(self) -> None:
        # A script the policy does not name is refused, and that is seen.
        raw, _ = fixtures.synthetic(n=50)
        page = html.report([load.parse(json.dumps(raw), "x")], "single", ["x"])
        page = page.replace("<main>", "<main><script>window.injected = 1;</script>", 1)
        path = os.path.join(OUT, "broken-csp.html")
        with open(path, "w") as f:
            f.write(page)
        self.expect_error(path, "an inline script outside the policy")
        self.assertIsNone(self.browser.eval("window.injected"))


class TestSimulatorReport(BrowserTest):
    """The report of the demo's out-of-memory on the simulated GPU."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        sim_dir = os.path.join(OUT, "sim")
        shutil.rmtree(sim_dir, ignore_errors=True)
        cls.snaps = fixtures.simulator_snapshots(BUILD, sim_dir)
        cls.oom = load.load(cls.snaps["oom"])
        cls.exit = load.load(cls.snaps["exit"])
        cls.path = write_report([cls.oom], "single", [cls.snaps["oom"]], "report.html")
        cls.data = html.payload([cls.oom], "single", [cls.snaps["oom"]])

    def test_renders_the_oom(self) -> None:
        b = self.browser
        self.show(self.path)
        b.screenshot(os.path.join(OUT, "report.png"))
        fr, dg = self.oom["failed_request"], self.oom["diagnosis"]
        text = b.eval("document.body.innerText")
        self.assertIn(f"Out of memory: {fr['api']} of {model.fmt_bytes(fr['size'])}", text)
        self.assertIn(dg["summary"], text)

        # Timeline: a chart per device of the series, the OOM on the failing one.
        devs = sorted({c["device"] for c in self.oom["series"]["columns"]}, key=lambda d: (d < 0, d))
        charts = b.eval("[...document.querySelectorAll('#timeline-body figure.chart-box')]"
                        ".map(f => [+f.dataset.device, +f.dataset.oom, f.textContent])")
        self.assertEqual([c[0] for c in charts], devs)
        failing = [c for c in charts if c[0] == fr["device"]][0]
        self.assertGreaterEqual(failing[1], 1)
        self.assertIn(f"out of memory: {model.fmt_bytes(fr['size'])}", failing[2])
        self.assertIn("peak ", failing[2])
        # A long run (its series in windows) keeps the time axis; its step
        # labels (the last falls just before the out-of-memory, at the right
        # edge) are not cut off and stay clear of the peak's label.
        self.assertEqual({c["axis"] for c in b.eval(JS_AXIS)}, {"time"})
        self.assertGreater(self.check_step_labels(), 1)

        # Flame graph: every node of the tree, the root holding all live bytes.
        fg = b.eval("(() => { const g = document.querySelector('.fg'); "
                    "const nodes = [...g.querySelectorAll('.fg-node')]; "
                    "return {nodes: +g.dataset.nodes, shown: +g.dataset.shown, bytes: +g.dataset.bytes, "
                    "els: nodes.length, root: g.querySelector('.fk-root').textContent, "
                    "kinds: [...new Set(nodes.map(e => e.className.split(' ')[1]))]}; })()")
        self.assertEqual(fg["nodes"], flame_nodes(self.data, [0]))
        self.assertEqual(fg["els"], fg["shown"])
        self.assertEqual(fg["shown"], fg["nodes"])  # nothing here is too narrow to draw
        self.assertEqual(fg["bytes"], sum(s["live_bytes"] for s in self.oom["sites"]))
        self.assertEqual(fg["root"], "all live memory")
        self.assertIn("fk-native", fg["kinds"])
        self.assertIn("fk-cuda", fg["kinds"])

        # Sites: the top site first, with its bytes.
        top = self.oom["sites"][0]
        t = self.table("sites-table")
        self.assertEqual(t["total"], len(self.oom["sites"]))
        self.assertEqual(t["rows"][0][0], model.stack_title(self.oom, top["stack"]))
        self.assertEqual(t["rows"][0][1], model.fmt_bytes(top["live_bytes"]))
        self.assertEqual(t["rows"][0][2], str(top["live_count"]))

        # Allocations: all of them, largest first.
        t = self.table("alloc-table")
        self.assertEqual(t["total"], len(self.oom["allocations"]))
        biggest = max(self.oom["allocations"], key=lambda a: a["size"])
        self.assertEqual(t["rows"][0][1], model.fmt_bytes(biggest["size"]))

        # Address map: the pages the page counts are the tracer's own.
        for dev in self.oom["devices"]:
            if not dev["kinds"].get("device"):
                continue
            sel = f".map-box[data-device='{dev['index']}']"
            got = b.eval(f"(() => {{ const m = document.querySelector({json.dumps(sel)}); "
                         "return m && [+m.dataset.pages, +m.dataset.partial, +m.dataset.stranded]; })()")
            pg = dev["pages"]
            self.assertEqual(got, [pg["pages"], pg["partial"], pg["stranded_bytes"]])
            self.assertEqual(tuple(got), page_pages(self.oom, dev["index"], pg["granularity"]))

    def test_interaction(self) -> None:
        b = self.browser
        self.show(self.path)
        # Zoom into the first frame under the root, then back out.
        before = b.eval("+document.querySelector('.fg').dataset.shown")
        self.click(".fg-node[data-i='1']")
        self.assertEqual(b.eval("document.querySelector('.fg').dataset.focus"), "1")
        last = b.eval("(() => { const n = [...document.querySelectorAll('.fg-node')]; "
                      "return n[n.length - 1].dataset.i; })()")
        self.click(f".fg-node[data-i='{last}']")
        self.assertEqual(b.eval("document.querySelector('.fg').dataset.focus"), last)
        self.assertLessEqual(b.eval("+document.querySelector('.fg').dataset.shown"), before)
        self.click(".controls button")  # reset zoom
        self.assertEqual(b.eval("+document.querySelector('.fg').dataset.shown"), before)
        # Search highlights the frames that match.
        self.type_into("#flame-body .search", "stream_alloc")
        matches = b.eval("document.querySelectorAll('.fg-node.match').length")
        self.assertGreater(matches, 0)
        self.assertIn("frames match", b.eval("document.querySelector('.found').textContent"))
        # Sorting and filtering the sites.
        self.click("#sites-table th[data-col='2']")
        t = self.table("sites-table")
        counts = [int(r[2].replace(",", "")) for r in t["rows"]]
        self.assertEqual(counts, sorted(counts, reverse=True))
        self.type_into("#sites-table .filter", "suspect:leak")
        t = self.table("sites-table")
        self.assertEqual(t["matched"], sum(1 for s in self.oom["sites"] if s["suspect"]))
        # A row shows its whole stack.
        self.click("#sites-table tbody tr")
        frames = b.eval("document.querySelectorAll('#sites-table .stack-panel li').length")
        top = self.oom["_stack_by_id"][[s for s in self.oom["sites"] if s["suspect"]][0]["stack"]]
        self.assertEqual(frames, len(top["frames"]))
        self.assertEqual(b.errors(), [])

    def test_diff_and_exit(self) -> None:
        path = write_report([self.oom, self.exit], "diff", [self.snaps["oom"], self.snaps["exit"]],
                            "diff.html")
        self.show(path)
        self.assertIsNotNone(self.table("diff-table"))
        self.assertEqual(self.browser.eval(
            "document.querySelectorAll('#timeline-body .timeline-doc').length"), 2)
        path = write_report([self.exit], "single", [self.snaps["exit"]], "exit.html")
        self.show(path)
        text = self.browser.eval("document.getElementById('leaks').innerText")
        counted = self.exit["leaks"]["totals"]["counted"]["bytes"]
        self.assertIn("Leaks at exit: " + model.fmt_bytes(counted), text)

    def test_formatting_matches_python(self) -> None:
        self.show(self.path)
        values = [0, 1, 512, 1023, 1024, 1152, 1536, 10 * 1024 - 1, 10240, 99 * 1024, 102400, 1 << 20,
                  (1 << 20) + (1 << 17) * 9 // 8, 33554432, 671088640, 3288334336, 4294967296, 1 << 40,
                  123456789012, -4096, -1]
        got = self.browser.eval(f"{json.dumps(values)}.map(v => window.gmtReport.fmtBytes(v))")
        self.assertEqual(got, [model.fmt_bytes(v) for v in values])
        got = self.browser.eval("window.gmtReport.clean('a\\u0001b\\u202ec\\u007f')")
        self.assertEqual(got, html.clean("a\x01b\u202ec\x7f"))


class TestHostileReport(BrowserTest):
    def test_names_stay_text(self) -> None:
        raw, truth = fixtures.hostile(n=300)
        doc = load.parse(json.dumps(raw), "hostile")
        path = write_report([doc], "single", [fixtures.HOSTILE + ".json"], "hostile.html")
        b = self.browser
        b.open_page()
        # Anything that would run an injected alert() is caught here.
        b.send("Page.addScriptToEvaluateOnNewDocument", {"source": (
            "window.__alerts = []; ['alert', 'confirm', 'prompt'].forEach(f => "
            "{ window[f] = m => { window.__alerts.push(String(m)); }; });")}, session=b.session)
        b.load(path)
        self.assertEqual(b.errors(), [])
        self.assertEqual(b.dialogs(), [])
        self.assertEqual(b.eval("window.__alerts"), [])
        self.assertEqual(b.eval("document.querySelectorAll('img, iframe, object, embed').length"), 0)
        self.assertEqual(b.eval("document.scripts.length"), 2)
        on = b.eval("[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))"
                    ".filter(n => n.startsWith('on'))")
        self.assertEqual(on, [])
        shown = html.clean(truth["titles"][1])
        text = b.eval("document.body.innerText")
        self.assertIn(shown, text)
        self.assertIn('<script>alert("x")</script><img src=x onerror=alert(1)>&amp;\\u202e\\u0001', text)
        # In the drawn parts too: the sites table, the flame graph, the timeline's tags.
        t = self.table("sites-table")
        self.assertTrue(any(shown in r[0] for r in t["rows"]))
        self.assertGreater(b.eval(f"[...document.querySelectorAll('.fg-node')]"
                                  f".filter(e => e.textContent.includes({json.dumps(shown)})).length"), 0)
        self.assertIn("train<scri\u2026", b.eval("document.getElementById('timeline-body').textContent"))
        b.screenshot(os.path.join(OUT, "hostile.png"))


class TestStepsReport(BrowserTest):
    def test_steps_on_the_timeline(self) -> None:
        """The program's steps (gmt_step) are drawn on the timeline, labelled."""
        raw, _ = fixtures.synthetic(n=300, sites=4)
        t0 = raw["history"]["events"][0]["time_ns"]
        raw["history"]["events"][:0] = [
            {"op": "step", "seq": k, "time_ns": t0 + k * 1000, "address": None, "size": 0, "step": k + 1,
             "kind": None, "device": -1, "api": None, "thread": 1, "stack": 0} for k in range(5)]
        doc = load.parse(json.dumps(raw), "steps")
        path = write_report([doc], "single", ["steps.json"], "steps.html")
        self.show(path)
        ticks = self.browser.eval("document.querySelectorAll('#timeline-body g.step').length")
        self.assertEqual(ticks % 5, 0)
        self.assertGreater(ticks, 0)
        self.assertIn("step 5", self.browser.eval("document.getElementById('timeline-body').textContent"))


def fail_later(path: str, dt_ns: int) -> str:
    """A copy of the snapshot at path whose out-of-memory (its events, the
    snapshot, the series' points from then on) came dt_ns later."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    oom = min(e["time_ns"] for e in raw["history"]["events"] if e["op"] == "oom")
    for e in raw["history"]["events"]:
        if e["time_ns"] >= oom:
            e["time_ns"] += dt_ns
    raw["series"]["time_ns"] = [t + dt_ns if t >= oom else t for t in raw["series"]["time_ns"]]
    raw["time_ns"] += dt_ns
    out = path.replace(".json", ".later.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(raw, f)
    return out


class TestShortRun(BrowserTest):
    """A short program on the simulated GPU (tests/programs/oom_step: ten
    steps of growing batches within a fraction of a millisecond), its
    out-of-memory 10 ms later (moved there in the snapshot, so that the
    shape does not hang on the machine's speed): its timeline is drawn in
    event order and says so, the out-of-memory right after the growth; a
    program whose allocations spread over its run (oom_growth, one every
    25 ms) keeps time."""

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        env = {"GMTSIM_MEMORY": "256M", "GMTSIM_CONTEXT_BYTES": "0"}
        out = os.path.join(OUT, "short")
        shutil.rmtree(out, ignore_errors=True)
        snap = fixtures.simulator_snapshots(BUILD, os.path.join(out, "step"), env=env,
                                            program=os.path.join("tests", "programs", "oom_step"),
                                            status=0, reasons=("oom",))["oom"]
        snap = fail_later(snap, 10_000_000)
        cls.doc = load.load(snap)
        cls.path = write_report([cls.doc], "single", [snap], "short.html")
        snap = fixtures.simulator_snapshots(BUILD, os.path.join(out, "growth"), env=env,
                                            program=os.path.join("tests", "programs", "oom_growth"),
                                            status=0, reasons=("oom",))["oom"]
        cls.spread = write_report([load.load(snap)], "single", [snap], "spread.html")

    def test_event_order(self) -> None:
        b = self.browser
        self.show(self.path)
        b.screenshot(os.path.join(OUT, "short.png"))
        charts = b.eval(JS_AXIS)
        self.assertEqual([c["axis"] for c in charts], ["order"])
        c = charts[0]
        self.assertIn("event", c["ticks"])
        note = b.eval("document.querySelector('#timeline-body .axis-choice').textContent")
        self.assertIn("Axis: event order", note)
        # The failure was moved 10 ms later; the growth took what the machine
        # gave it, so the empty stretch is 10 ms and then some.
        empty = re.search(r"time says little here: no event in ([0-9.]+) ms of this", note)
        self.assertIsNotNone(empty, note)
        self.assertGreaterEqual(float(empty.group(1)), 10.0, note)
        # The out-of-memory next to the growth, not across an empty stretch.
        self.assertEqual(len(c["oom"]), 1)
        gap = (c["oom"][0] - c["lastChange"]) / (c["right"] - c["left"])
        self.assertGreaterEqual(gap, 0)
        self.assertLess(gap, 0.02, f"the out-of-memory at {c['oom'][0]}, the last change at {c['lastChange']}")
        # Steps 1 to 11, labels where they fit: the first and the last.
        self.assertEqual(b.eval("document.querySelectorAll('#timeline-body g.step').length"), 11)
        self.assertGreaterEqual(self.check_step_labels(), 2)
        labels = b.eval("[...document.querySelectorAll('#timeline-body g.step text')].map(t => t.textContent)")
        self.assertIn("step 11", labels)
        # Time, one click away: then the growth is a sliver at the left.
        self.click("#timeline-body .axis-choice input[value=time]")
        charts = b.eval(JS_AXIS)
        self.assertEqual([c["axis"] for c in charts], ["time"])
        self.assertEqual(b.eval("document.querySelector('#timeline-body .axis-choice').dataset.axis"), "time")
        self.assertIn("Axis: time", b.eval("document.querySelector('#timeline-body .axis-choice').textContent"))
        self.check_step_labels()
        self.assertEqual(b.errors(), [])

    def test_verdict_on_one_line(self) -> None:
        """The verdict's name never breaks, at a wide window or a narrow one,
        and the table stays inside the diagnosis."""
        b = self.browser
        for width in (1400, 400):
            with self.subTest(width=width):
                self.show(self.path)
                b.send("Emulation.setDeviceMetricsOverride",
                       {"width": width, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
                       session=b.session)
                self.cells_on_one_line("table.verdicts", 0)
                inside = b.eval("(() => { const t = document.querySelector('table.verdicts'); "
                                "const box = t.closest('.oom-box').getBoundingClientRect(); "
                                "const w = (t.closest('.tbl-scroll') || t).getBoundingClientRect(); "
                                "return [w.right, box.right]; })()")
                self.assertLessEqual(inside[0], inside[1])
                # The episode's API names whole too, its table inside the page.
                self.cells_on_one_line("table.episode", 3)
                wide = b.eval("(() => { const t = document.querySelector('table.episode'); "
                              "return [(t.closest('.tbl-scroll') || t).getBoundingClientRect().right, "
                              "document.documentElement.clientWidth]; })()")
                self.assertLessEqual(wide[0], wide[1])
                b.screenshot(os.path.join(OUT, f"short-{width}.png"))

    def cells_on_one_line(self, table: str, column: int) -> None:
        """Every cell of a column of the table is one line high."""
        cells = self.browser.eval(f"""[...document.querySelectorAll('{table} tbody tr')].map(tr => {{
          const td = tr.cells[{column}], r = document.createRange();
          r.selectNodeContents(td);
          return [td.textContent, r.getBoundingClientRect().height, parseFloat(getComputedStyle(td).lineHeight)];
        }})""")
        self.assertTrue(cells, table)
        for text, height, line in cells:
            self.assertLess(height, 1.5 * line, f"{text!r} takes {height} px, lines of {line} px")

    def test_spread_run_keeps_time(self) -> None:
        b = self.browser
        self.show(self.spread)
        self.assertEqual([c["axis"] for c in b.eval(JS_AXIS)], ["time"])
        self.assertEqual(b.eval("document.querySelector('#timeline-body .axis-choice').dataset.axis"), "time")
        self.click("#timeline-body .axis-choice input[value=order]")
        self.assertEqual([c["axis"] for c in b.eval(JS_AXIS)], ["order"])
        self.assertEqual(b.errors(), [])


class TestLargeReport(BrowserTest):
    def test_100k_allocations(self) -> None:
        raw, truth = fixtures.synthetic(n=100_000, sites=200, devices=2, seed=5)
        doc = load.parse(json.dumps(raw), "big")
        t = time.perf_counter()
        path = write_report([doc], "single", ["big.json"], "report-100k.html")
        gen = time.perf_counter() - t
        wall = self.show(path)
        b = self.browser
        render = float(b.eval("document.body.dataset.renderMs"))
        script = float(b.eval("document.body.dataset.scriptMs"))
        size = os.path.getsize(path)
        print(f"\n  100k allocations: HTML {size / 1e6:.1f} MB written in {gen:.2f} s; rendered in "
              f"{render:.0f} ms from navigation ({script:.0f} ms in the script; {wall:.2f} s wall)",
              file=sys.stderr)
        self.assertLess(render, RENDER_LIMIT_MS)
        t = self.table("alloc-table")
        self.assertEqual(t["total"], 100_000)
        self.assertEqual(len(t["rows"]), 50)  # a page of rows, not 100,000
        self.assertEqual(b.eval("document.querySelectorAll('#alloc-table tbody tr').length"), 50)
        biggest = max(a["size"] for a in raw["allocations"])
        self.assertEqual(t["rows"][0][1], model.fmt_bytes(biggest))
        # Filtering and sorting all of them stays quick.
        start = time.monotonic()
        self.type_into("#alloc-table .filter", "kind:async", settle=0.0)
        b.eval("new Promise(r => setTimeout(r, 300))")
        deadline = time.monotonic() + 10
        want = sum(1 for a in raw["allocations"] if a["kind"] == "async")
        while self.table("alloc-table")["matched"] != want and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.table("alloc-table")["matched"], want)
        self.click("#alloc-table th[data-col='5']")  # by time
        secs = time.monotonic() - start
        rows = self.table("alloc-table")["rows"]
        self.assertTrue(all(r[2] == "async" for r in rows))
        print(f"  filter and sort of 100k rows: {secs:.2f} s", file=sys.stderr)
        self.assertEqual(b.errors(), [])
        sites = self.table("sites-table")
        top = raw["sites"][0]
        self.assertEqual(sites["rows"][0][1], model.fmt_bytes(top["live_bytes"]))
        b.screenshot(os.path.join(OUT, "report-100k.png"))


class TestTensorLevel(BrowserTest):
    """A PyTorch snapshot (the double's loop that keeps each step's loss):
    the page shows the tensor level first — the loss line's site first, the
    tensors on the timeline — and the driver's allocations (the segments)
    one click away."""

    def test_levels(self) -> None:
        path = fixtures.torch_snapshot(BUILD, os.path.join(OUT, "torch"))
        doc = load.load(path)
        report = write_report([doc], "single", [path], "report-tensors.html")
        self.show(report)
        b = self.browser
        line = fixtures.TORCH_LOSS_KEPT.split("\n").index(
            next(x for x in fixtures.TORCH_LOSS_KEPT.split("\n") if "# LOSS" in x)) + 1
        self.assertEqual(b.eval("document.body.dataset.level"), "tensors")
        self.assertFalse(b.eval("document.getElementById('levels').hidden"))
        first = self.table("sites-table")["rows"][0]
        self.assertEqual(first[0], f"<module> (train.py:{line})")
        self.assertEqual(first[1], model.fmt_bytes(sum(a["size"] for a in doc["tensors"]["allocations"]
                                                       if doc["_stack_by_id"][a["stack"]]["site"]["label"]
                                                       == first[0])))
        self.assertEqual(b.eval("document.querySelectorAll('#timeline-body .ln.tensors').length"), 1)
        # The segments, one click away: the driver's top site is the line
        # whose requests made the segments grow, not the loss.
        self.click("input[name=level][value=driver]", settle=0.5)
        self.assertEqual(b.eval("document.body.dataset.level"), "driver")
        top = model.site_groups(doc)[0]
        self.assertEqual(self.table("sites-table")["rows"][0][0], model.stack_title(doc, top["stack"]))
        self.assertNotEqual(self.table("sites-table")["rows"][0][0], first[0])
        self.assertEqual(b.errors(), [])
        b.screenshot(os.path.join(OUT, "report-tensors.png"))


class TestMergeReport(BrowserTest):
    def test_merge(self) -> None:
        raws = [fixtures.synthetic(n=500, seed=20 + r, pid=300 + r, rank=r, oom=r == 2)[0] for r in range(4)]
        docs = [load.parse(json.dumps(r), f"r{i}") for i, r in enumerate(raws)]
        path = write_report(docs, "merge", [f"rank{i}.json" for i in range(4)], "merge.html")
        self.show(path)
        t = self.table("merge-table")
        self.assertEqual(t["head"][3:], ["rank 0", "rank 1", "rank 2", "rank 3"])
        m = model.merge(docs)
        self.assertEqual(t["rows"][0][0], m["sites"][0]["title"])
        self.assertEqual(t["rows"][0][1], model.fmt_bytes(m["sites"][0]["live_bytes"]))
        lines = self.browser.eval("document.querySelectorAll('figure.processes .ln.proc').length")
        self.assertEqual(lines, 4)
        self.assertEqual(self.table("alloc-table")["total"], 2000)
        self.browser.screenshot(os.path.join(OUT, "merge.png"))

    def test_merge_on_steps(self) -> None:
        """Ranks that marked their steps are drawn on one axis of steps:
        each ran out of memory half a step after its step 10, at its own
        time (they started apart and ran at different speeds), and each
        out-of-memory line stands at step 10.5."""
        raws = []
        for r in range(3):
            raw = fixtures.synthetic(n=300 + 150 * r, seed=30 + r, pid=400 + r, rank=r)[0]
            shift = r * 7_000_000_000
            raw["time_ns"] += shift
            raw["series"]["start_ns"] += shift
            raw["series"]["time_ns"] = [t + shift for t in raw["series"]["time_ns"]]
            for e in raw["history"]["events"]:
                e["time_ns"] += shift
            for a in raw["allocations"]:
                a["time_ns"] += shift
            raws.append(fixtures.with_steps(raw, 8, first=3))
        docs = [load.parse(json.dumps(r), f"s{i}") for i, r in enumerate(raws)]
        path = write_report(docs, "merge", [f"rank{i}.json" for i in range(3)], "merge-steps.html")
        self.show(path)
        b = self.browser
        self.assertEqual(b.eval("document.querySelector('figure.processes svg').dataset.align"), "step")
        at = b.eval("Array.from(document.querySelectorAll('figure.processes .oom-line')).map(e => +e.dataset.at)")
        self.assertEqual(len(at), 3)
        for x in at:
            self.assertAlmostEqual(x, 10.5, places=6)
        xs = b.eval("Array.from(document.querySelectorAll('figure.processes .oom-line')).map(e => +e.getAttribute('x1'))")
        self.assertLess(max(xs) - min(xs), 0.01)
        ticks = b.eval("Array.from(document.querySelectorAll('figure.processes .axis-step')).map(e => e.textContent)")
        self.assertIn("step 10", ticks)
        self.assertIn("aligned on their steps", b.eval("document.querySelector('figure.processes').textContent"))
        self.assertEqual(b.errors(), [])
        b.screenshot(os.path.join(OUT, "merge-steps.png"))


BINARY = ""


def main() -> int:
    global BUILD, OUT, BINARY
    if len(sys.argv) < 2:
        print("usage: test_browser.py BUILD_DIR [unittest arguments]", file=sys.stderr)
        return 2
    BUILD = os.path.abspath(sys.argv[1])
    if os.environ.get("GMT_TEST_NO_BROWSER") == "1":
        print("SKIP: GMT_TEST_NO_BROWSER=1: the HTML report is not rendered in a browser")
        return SKIP
    found = chromium_path()
    if not found:
        where = os.environ.get("GMT_CHROMIUM") or "/usr/bin/chromium"
        print(f"FAIL: Chromium not found ({where}): install the Debian package chromium "
              "(scripts/test does), set GMT_CHROMIUM to a Chromium binary, or set GMT_TEST_NO_BROWSER=1 "
              "to skip this test", file=sys.stderr)
        return 1
    BINARY = found
    OUT = os.path.join(BUILD, "tests", "view")
    os.makedirs(OUT, exist_ok=True)
    prog = unittest.main(argv=[sys.argv[0]] + sys.argv[2:], exit=False, verbosity=2)
    print(f"reports and screenshots in {OUT}", file=sys.stderr)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
