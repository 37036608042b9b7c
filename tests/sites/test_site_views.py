#!/usr/bin/env python3
"""Sites named by the program's own code, in every view: a C program whose
allocations all come through a framework-like library (libtorch_gmttest.so,
library code by the built-in rule) and a C++ program allocating through a
library of its own (libgmttest_arena.so, the program's code). Each runs
traced on the simulated GPU; the named site must be the program's innermost
frame — the framework's frames skipped, the program's own library kept, two
call chains through one function two sites — in the snapshot, the stderr
report, the terminal summary, the HTML report, the Perfetto export and the
gate's report.

usage: test_site_views.py LAUNCHER FRAMEWORK_PROGRAM [OWN_LIB_PROGRAM]
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Tuple

DATA_RE = re.compile(r'<script type="application/json" id="gmt-data">(.*?)</script>', re.S)
FAILURES: List[str] = []


def check(ok: bool, what: str, got: Any = None) -> None:
    if not ok:
        FAILURES.append(f"{what}" + (f": {got!r}" if got is not None else ""))
        print(f"FAIL {what}" + (f": {got!r}" if got is not None else ""))


def env_for(extra: Dict[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
    # A sanitizer build: the runtime must come first in every process (the
    # launcher keeps it first, before the tracer).
    if os.environ.get("GMT_TEST_ASAN_RUNTIME"):
        env["LD_PRELOAD"] = os.environ["GMT_TEST_ASAN_RUNTIME"]
    env.update(extra)
    return env


def run(cmd: List[str], env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def printed(out: str, word: str) -> int:
    m = re.search(rf"^{word} (\d+)$", out, re.M)
    if m is None:
        raise SystemExit(f"the program printed no {word}:\n{out}")
    return int(m.group(1))


def traced(launcher: str, prog: str, work: str, env: Dict[str, str]) -> Tuple[str, str, List[Dict[str, Any]]]:
    """Runs prog traced (out-of-memory and exit snapshots); its stdout, the
    tracer's stderr lines, and the snapshots (out-of-memory first)."""
    r = run([launcher, "run", "--dir", work, "--snapshot-on", "exit", "--", prog], env)
    check(r.returncode == 0, f"{os.path.basename(prog)} exit status", r.returncode)
    paths = sorted(glob.glob(os.path.join(work, "gpumemtrace.*.json")), key=lambda p: ".oom." not in p)
    docs = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            docs.append(dict(json.load(f), _path=p))
    return r.stdout, r.stderr, docs


def site_of_size(doc: Dict[str, Any], size: int) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The stack and site of the live allocations of `size` bytes (all of one site)."""
    stacks = {s["id"]: s for s in doc["stacks"]}
    ids = {a["stack"] for a in doc["allocations"] if a["size"] == size}
    sites = {stacks[i]["site"]["id"] for i in ids}
    check(len(sites) == 1, f"allocations of {size} bytes in one site", sorted(sites))
    st = stacks[min(ids)]
    return st, st["site"]


def check_views(launcher: str, work: str, doc: Dict[str, Any], labels: List[str], env: Dict[str, str]) -> None:
    """The labels in the terminal summary, the HTML report and the Perfetto export."""
    html, trace = os.path.join(work, "r.html"), os.path.join(work, "t.json")
    # The viewer is Python: no sanitizer runtime preloaded into it.
    plain = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    r = run([launcher, "view", "--width", "250", "--frames", "3", "--summary", "--html", html, "--perfetto", trace,
             doc["_path"]], plain)
    check(r.returncode == 0, "view status", r.stderr)
    heads = [lab.split(" \u2190 ")[0] for lab in labels]
    for lab, head in zip(labels, heads):
        check(head in r.stdout, f"summary names {head}", r.stdout[-2000:])
        for caller in lab.split(" \u2190 ")[1:]:
            check(f"\u2190 {caller}" in r.stdout, f"summary shows the caller {caller}")
    with open(html, encoding="utf-8") as f:
        data = json.loads(DATA_RE.findall(f.read())[0])
    titles = data["docs"][0]["stacks"]["title"]
    for lab in labels:
        check(any(t == lab or t.startswith(lab + " via ") for t in titles), f"HTML titles hold {lab}", titles)
    with open(trace, encoding="utf-8") as f:
        text = f.read()
    for lab in labels:
        check(json.dumps(lab)[1:-1] in text or lab in text, f"the Perfetto export names {lab}")


def test_framework(launcher: str, prog: str, tmp: str) -> None:
    work = os.path.join(tmp, "framework")
    os.makedirs(work)
    env = env_for({"GMTSIM_MEMORY": "512M"})
    out, err, docs = traced(launcher, prog, work, env)
    w, f = printed(out, "WEIGHTS_LINE"), printed(out, "FORWARD_LINE")
    want_w, want_f = f"make_weights (framework_user.c:{w})", f"forward (framework_user.c:{f})"
    check(len(docs) == 2 and ".oom." in docs[0]["_path"], "an out-of-memory and an exit snapshot",
          [d["_path"] for d in docs])
    for doc in docs:
        for size, want in ((16 << 20, want_w), (32 << 20, want_f)):
            st, site = site_of_size(doc, size)
            check(site["label"] == want and site["user"], f"site of {size} bytes", site)
            libs = [fr for fr in st["frames"][:site["frame"]] if "libtorch_gmttest" in (fr["module"] or "")]
            check(len(libs) >= 2 and all(fr["role"] == "library" for fr in libs),
                  "the framework's frames are library code", [(fr["function"], fr["role"]) for fr in libs])
            check(all(fr["role"] != "user" for fr in st["frames"][:site["frame"]]),
                  "no frame of the program's before the site's")
    # The top sites: the line "top sites:", then one line each.
    lines = err.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.rstrip().endswith("top sites:")), len(lines))
    top = "\n".join(ln for ln in lines[at + 1:at + 4] if ln.startswith("gpumemtrace:     "))
    check(f"at {want_f}" in top and f"at {want_w}" in top and top.index(want_f) < top.index(want_w),
          "the stderr report's top sites, largest first", top)
    check_views(launcher, work, docs[0], [want_f, want_w], env)
    # The gate's report: the same labels for what is left at exit. Strict:
    # whether an allocation is leaked or still referenced depends on what
    # the scan finds left in host memory, not on the labels tested here.
    r = run([launcher, "check", "--strict", "--", prog], env)
    check(r.returncode == 23, "the gate fails on the leaks", r.returncode)
    for want in (want_w, want_f):
        check(f"at {want}, pid" in r.stderr, f"the gate names {want}", r.stderr)


def test_own_library(launcher: str, prog: str, tmp: str) -> None:
    work = os.path.join(tmp, "own")
    os.makedirs(work)
    env = env_for({})
    out, _, docs = traced(launcher, prog, work, env)
    g, w, f = printed(out, "GROW_LINE"), printed(out, "WEIGHTS_LINE"), printed(out, "FORWARD_LINE")
    check(len(docs) == 1, "one exit snapshot", [d["_path"] for d in docs])
    doc = docs[-1]
    labels = []
    for size, caller, line in ((8 << 20, "make_weights", w), (4 << 20, "forward", f)):
        st, site = site_of_size(doc, size)
        pattern = (rf"^Arena::grow\(.*\) \(own_lib\.cpp:{g}\) \u2190 {caller}(\(.*\))? \(own_lib_main\.cpp:{line}\)$")
        check(re.match(pattern, site["label"]) is not None and site["user"], f"site of {size} bytes", site["label"])
        check("libgmttest_arena" in (st["frames"][site["frame"]]["module"] or ""),
              "the site's frame is in the program's own library", st["frames"][site["frame"]])
        labels.append(site["label"])
    check(labels[0] != labels[1], "two call chains through Arena::grow are two sites", labels)
    check_views(launcher, work, doc, labels, env)
    r = run([launcher, "check", "--strict", "--", prog], env)
    for lab in labels:
        check(f"at {lab}, pid" in r.stderr, f"the gate names {lab}", r.stderr)


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    launcher, framework = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="gmt-sites-") as tmp:
        test_framework(launcher, framework, tmp)
        if len(sys.argv) > 3:
            test_own_library(launcher, sys.argv[3], tmp)
        else:
            print("no C++ compiler: the C++ program's test is left out")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
