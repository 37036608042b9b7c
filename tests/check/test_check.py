#!/usr/bin/env python3
"""gpumemtrace check, the CI leak gate (src/cli/check.c).

The gate runs fake_command.py under the real library; the fake command writes
exit snapshots crafted here (made-up pids from 4000000) so that each test sets
the leaks and peaks exactly, and ends with the status asked for. The library
may add an exit snapshot of its own for the Python process, with nothing in
it; the gate must cope with that. Covered: the child's environment, every
limit at and one past it, size suffixes, percent growth, the exit statuses and
their precedence, --leak-classes, --dir and the temporary directory, JUnit XML
(parsed with xml.etree), GitHub annotations, signals passed on."""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import stat
import threading
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_command.py")
PREFIX = "gpumemtrace: check: "
KiB, MiB = 1024, 1024 * 1024


class Checker:
    def __init__(self) -> None:
        self.failures = 0
        self.checks = 0

    def eq(self, what: str, got: object, want: object, detail: str = "") -> bool:
        self.checks += 1
        if got != want:
            print(f"FAIL {what}: got {got!r}, expected {want!r}" + (f"\n{detail}" if detail else ""),
                  file=sys.stderr)
            self.failures += 1
            return False
        return True

    def true(self, what: str, cond: bool, detail: str = "") -> bool:
        self.checks += 1
        if not cond:
            print(f"FAIL {what}" + (f": {detail}" if detail else ""), file=sys.stderr)
            self.failures += 1
        return cond


# --- Crafted snapshots --------------------------------------------------------

def native(function: str | None, file: str | None = None, line: int | None = None,
           module: str | None = "/work/app/bin/app") -> dict[str, Any]:
    return {"address": "0x401234", "module": module, "function": function, "file": file,
            "line": line, "inlined": False, "python": False}


def pyframe(function: str, file: str, line: int) -> dict[str, Any]:
    return {"address": None, "module": None, "function": function, "file": file, "line": line,
            "inlined": False, "python": True}


def cuda_frames() -> list[dict[str, Any]]:
    """What a stack holds inside CUDA, innermost first."""
    return [native("gmt_hook", "hooks.c", 10, "/opt/gpumemtrace/lib/libgpumemtrace.so"),
            native("cuMemAlloc_v2", "memory.c", 40, "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            native("malloc_helper", "memory.c", 52, "/usr/lib/x86_64-linux-gnu/libcudart.so.13"),
            native("cudaMalloc", "memory.c", 60, "/work/app/bin/app")]


def label_of(f: dict[str, Any]) -> str:
    """A frame in words, as the tracer labels a site (src/analyze/sites.c)."""
    fn = f["function"] or "?"
    if f["file"] and f["line"]:
        return f"{fn} ({os.path.basename(f['file'])}:{f['line']})"
    return f"{fn} ({os.path.basename(f['module'] or '?')})"


@dataclass
class Snap:
    pid: int
    peak: int = 0
    live: int = 0
    reason: str = "exit"
    stacks: list[dict[str, Any]] = field(default_factory=list)
    sites: list[dict[str, Any]] = field(default_factory=list)
    peak_sites: list[dict[str, Any]] = field(default_factory=list)

    def stack(self, frames: list[dict[str, Any]], at: int | None = None) -> int:
        """A stack whose site is frames[at] (by default the first beyond
        cuda_frames()), as the tracer writes it."""
        sid = len(self.stacks) + 1
        at = len(cuda_frames()) if at is None else at
        self.stacks.append({"id": sid, "runtime_call": None, "tags": [],
                            "site": {"id": sid, "frame": at, "user": True, "label": label_of(frames[at])},
                            "frames": frames})
        return sid

    def leak(self, nbytes: int, count: int = 1, cls: str = "leaked",
             function: str = "leaky", file: str | None = "/work/app/src/leak.c", line: int | None = 12,
             frames: list[dict[str, Any]] | None = None, suppressed_by: str | None = None,
             at: int | None = None) -> Snap:
        if frames is None:
            frames = cuda_frames() + [native(function, file, line), native("main", "main.c", 3)]
        sid = self.stack(frames, at)
        self.sites.append({
            "stack": sid, "class": cls,
            "counted": suppressed_by is None and cls != "cached",
            "suppressed_by": suppressed_by,
            "rule_source": "built-in" if suppressed_by else None,
            "count": count, "bytes": nbytes, "kinds": {"device": nbytes}, "devices": [0],
            "addresses": ["0x7f0000000000"], "referenced_from": None})
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        return self

    def grew(self, peak: int, function: str, line: int) -> Snap:
        """A site of sites[] (peaks per site, for the list of what grew)."""
        sid = self.stack(cuda_frames() + [native(function, "/work/app/src/model.c", line)])
        self.peak_sites.append({"stack": sid, "live_bytes": 0, "live_count": 0, "allocs": 1,
                                "alloc_bytes": peak, "peak_bytes": peak, "rising_windows": 1,
                                "falling_windows": 0, "growth_bytes": 0, "growing": False})
        return self

    def doc(self) -> dict[str, Any]:
        counted = [s for s in self.sites if s["counted"]]
        return {
            "format": "gpumemtrace-snapshot", "version": 1, "reason": self.reason, "seq": 1,
            "time_ns": 1700000000000000000, "pid": self.pid, "argv": ["app"],
            "summary": {"live_bytes": self.live, "live_count": len(self.sites),
                        "peak_bytes": self.peak, "total_allocs": len(self.sites),
                        "total_frees": 0},
            "sites": self.peak_sites,
            "stacks": self.stacks,
            "leaks": {
                "scan": {"done": True, "why": None, "mappings": 3, "bytes": 4096, "seconds": 0.01},
                "classes": ["leaked", "referenced"], "exit_status": 0,
                "totals": {"counted": {"count": sum(s["count"] for s in counted),
                                       "bytes": sum(s["bytes"] for s in counted)}},
                "sites": self.sites, "suspects": [], "suppressions": []},
        }

    def file(self, seq: int = 1) -> dict[str, Any]:
        return {"name": f"gpumemtrace.{self.pid}.{self.reason}.{seq}.json", "doc": self.doc()}


# --- Running the gate ---------------------------------------------------------

@dataclass
class Result:
    rc: int
    out: str
    err: str
    env: dict[str, str] | None
    work: str
    tmp_left: list[str]

    @property
    def lines(self) -> list[str]:
        return self.err.splitlines()

    def has(self, *words: str) -> bool:
        return all(w in self.err for w in words)


class Gate:
    def __init__(self, launcher: str, lib: str, tmp: str) -> None:
        self.launcher = launcher
        self.lib = lib
        self.tmp = tmp
        self.n = 0

    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GPUMEMTRACE_", "GITHUB_")) and k != "LD_PRELOAD"}
        env["LC_ALL"] = "C"
        asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
        if asan:
            # NOTE: python is not instrumented: the ASan runtime must lead
            # LD_PRELOAD, and its leak report is not this test's business.
            env["LD_PRELOAD"] = asan
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
        return env

    def run(self, args: list[str], files: list[dict[str, Any]] | None = None, exit: int = 0,
            env: dict[str, str] | None = None, spec: dict[str, Any] | None = None,
            cwd: str | None = None, command: list[str] | None = None,
            during: Callable[[subprocess.Popen, str], None] | None = None) -> Result:
        self.n += 1
        work = os.path.join(self.tmp, f"run{self.n}")
        tmpdir = os.path.join(work, "tmp")
        os.makedirs(tmpdir)
        full = dict(spec or {})
        full.setdefault("files", files or [])
        full.setdefault("exit", exit)
        full["env_out"] = os.path.join(work, "env.json")
        if full.get("ready"):
            full["ready"] = os.path.join(work, "ready")
        spec_path = os.path.join(work, "spec.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump(full, f)
        e = self.base_env()
        e["TMPDIR"] = tmpdir
        e.update(env or {})
        if command is None:
            command = [sys.executable, FAKE, spec_path]
        p = subprocess.Popen([self.launcher, "check"] + args + ["--"] + command,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e,
                             cwd=cwd or work)
        if during is not None:
            during(p, work)
        out, err = p.communicate(timeout=60)
        seen = None
        if os.path.exists(full["env_out"]):
            with open(full["env_out"], encoding="utf-8") as f:
                seen = json.load(f)
        return Result(p.returncode, out, err, seen, work, sorted(os.listdir(tmpdir)))


def report_lines_ok(c: Checker, what: str, r: Result) -> None:
    """Every line on stderr is the gate's."""
    for line in r.lines:
        if not c.true(f"{what}: stderr line prefix", line.startswith(PREFIX), r.err):
            break


def leaky(pid: int = 4000001, nbytes: int = 100, count: int = 1) -> Snap:
    return Snap(pid).leak(nbytes, count)


def clean(pid: int = 4000002, peak: int = 0) -> Snap:
    return Snap(pid, peak=peak)


# --- The tests ----------------------------------------------------------------

def test_environment(c: Checker, g: Gate) -> None:
    supp = os.path.join(g.tmp, "supp.txt")
    with open(supp, "w", encoding="utf-8") as f:
        f.write("# mine\nleak:libfoo\n")
    r = g.run(["--suppressions", supp, "--depth", "7", "--no-python-stacks"],
              files=[clean().file()])
    c.eq("environment: status", r.rc, 0, r.err)
    env = r.env or {}
    first = 1 if os.environ.get("GMT_TEST_ASAN_RUNTIME") else 0  # after the ASan runtime
    c.eq("LD_PRELOAD: the library first", env.get("LD_PRELOAD", "").split(":")[first:first + 1],
         [os.path.realpath(g.lib)])
    c.eq("GPUMEMTRACE_SNAPSHOT_ON unset: oom,exit", env.get("GPUMEMTRACE_SNAPSHOT_ON"), "oom,exit")
    c.true("GPUMEMTRACE_DIR: absolute, the temporary directory",
           env.get("GPUMEMTRACE_DIR", "").startswith(os.path.join(r.work, "tmp", "gpumemtrace-check.")),
           str(env.get("GPUMEMTRACE_DIR")))
    c.eq("GPUMEMTRACE_LEAK_CHECK", env.get("GPUMEMTRACE_LEAK_CHECK"), "0")
    c.eq("GPUMEMTRACE_SUPPRESSIONS absolute", env.get("GPUMEMTRACE_SUPPRESSIONS"),
         os.path.realpath(supp))
    c.eq("--depth", env.get("GPUMEMTRACE_STACK_DEPTH"), "7")
    c.eq("--no-python-stacks", env.get("GPUMEMTRACE_PYTHON_STACKS"), "0")
    c.eq("GPUMEMTRACE_LEAK_CLASSES: the gate's", env.get("GPUMEMTRACE_LEAK_CLASSES"), "leaked")
    c.true("no GPUMEMTRACE_VERBOSE unless asked", "GPUMEMTRACE_VERBOSE" not in env)

    # the suppressions file relative to the working directory
    r = g.run(["--suppressions", "../supp.txt", "--verbose"], files=[clean().file()],
              cwd=os.path.join(g.tmp, "run1"))
    c.eq("relative --suppressions: status", r.rc, 0, r.err)
    c.eq("relative --suppressions made absolute", (r.env or {}).get("GPUMEMTRACE_SUPPRESSIONS"),
         os.path.realpath(supp))
    c.eq("--verbose", (r.env or {}).get("GPUMEMTRACE_VERBOSE"), "1")

    # the triggers: the user's plus exit, oom kept unless the list says no-oom
    for user, args, want in [("peak", [], "oom,exit,peak"), ("none", [], "exit,no-oom"),
                             ("exit", [], "oom,exit"), (None, ["--snapshot-on", "signal"], "oom,exit,signal"),
                             ("oom", ["--snapshot-on=peak,oom"], "oom,exit,peak"),
                             (None, ["--snapshot-on", "peak,no-oom"], "exit,peak,no-oom")]:
        env = {"GPUMEMTRACE_SNAPSHOT_ON": user} if user is not None else {}
        r = g.run(args, files=[clean().file()], env=env)
        c.eq(f"triggers {user!r} {args}", (r.rc, (r.env or {}).get("GPUMEMTRACE_SNAPSHOT_ON")),
             (0, want), r.err)

    # LD_PRELOAD entries already there are kept, after the library
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    r = g.run([], files=[clean().file()],
              env={"LD_PRELOAD": (asan + ":" if asan else "") + "/nonexistent/other.so"})
    c.true("LD_PRELOAD kept", (r.env or {}).get("LD_PRELOAD", "").endswith(
        os.path.realpath(g.lib) + ":/nonexistent/other.so"), str((r.env or {}).get("LD_PRELOAD")))

    # the environment's suppressions file is checked and made absolute like --suppressions
    r = g.run([], files=[clean().file()], env={"GPUMEMTRACE_SUPPRESSIONS": "../supp.txt"},
              cwd=os.path.join(g.tmp, "run1"))
    c.eq("GPUMEMTRACE_SUPPRESSIONS from the environment", (r.rc, (r.env or {}).get(
        "GPUMEMTRACE_SUPPRESSIONS")), (0, os.path.realpath(supp)), r.err)


def test_leak_limits(c: Checker, g: Gate) -> None:
    one = [leaky(nbytes=100, count=2).file()]
    cases = [
        # (args, files, status)
        ([], [clean().file()], 0),
        ([], one, 23),  # the default: any counted leak fails
        (["--max-leak-bytes", "100", "--max-leaks", "2"], one, 0),  # at both limits
        (["--max-leak-bytes", "99", "--max-leaks", "2"], one, 23),
        (["--max-leak-bytes", "100", "--max-leaks", "1"], one, 23),
        (["--max-leak-bytes=100", "--max-leaks=2"], one, 0),
        # summed over the processes of the run
        (["--max-leak-bytes", "200", "--max-leaks", "4"],
         [leaky(4000001, 100, 2).file(), leaky(4000002, 100, 2).file()], 0),
        (["--max-leak-bytes", "199", "--max-leaks", "4"],
         [leaky(4000001, 100, 2).file(), leaky(4000002, 100, 2).file()], 23),
        (["--max-leak-bytes", "200", "--max-leaks", "3"],
         [leaky(4000001, 100, 2).file(), leaky(4000002, 100, 2).file()], 23),
        # a limit given alone is the only leak limit (40 MiB in 3 allocations)
        (["--max-leak-bytes", "100M"], [leaky(nbytes=40 * MiB, count=3).file()], 0),
        (["--max-leak-bytes", "40M"], [leaky(nbytes=40 * MiB, count=3).file()], 0),
        (["--max-leak-bytes", "30M"], [leaky(nbytes=40 * MiB, count=3).file()], 23),
        (["--max-leaks", "3"], [leaky(nbytes=40 * MiB, count=3).file()], 0),
        (["--max-leaks", "2"], [leaky(nbytes=40 * MiB, count=3).file()], 23),
    ]
    # size suffixes: all powers of 1024
    for suffix, mult in [("K", KiB), ("k", KiB), ("Ki", KiB), ("KiB", KiB), ("KB", KiB),
                         ("M", MiB), ("Mi", MiB), ("G", 1 << 30), ("Gi", 1 << 30)]:
        cases.append(([f"--max-leak-bytes=3{suffix}", "--max-leaks=9"],
                      [leaky(nbytes=3 * mult).file()], 0))
        cases.append(([f"--max-leak-bytes=3{suffix}", "--max-leaks=9"],
                      [leaky(nbytes=3 * mult + 1).file()], 23))
    for args, files, status in cases:
        r = g.run(args, files=files)
        sizes = [s["bytes"] for f in files for s in f["doc"]["leaks"]["sites"]]
        c.eq(f"leaks {args} {sizes}", r.rc, status, r.err)
        report_lines_ok(c, f"leaks {args}", r)
        if status == 0:
            c.eq(f"leaks {args}: one line on a pass", len(r.lines), 1, r.err)
            c.true(f"leaks {args}: passed", r.err.startswith(PREFIX + "passed: "), r.err)

    # the limits in force, in the report of a pass and of a failure
    big = [leaky(nbytes=40 * MiB, count=3).file()]
    for args, words in [(["--max-leak-bytes", "100M"], ["104857600 bytes (--max-leak-bytes; no limit on allocations)"]),
                        (["--max-leaks", "9"], ["9 allocations (--max-leaks; no limit on bytes)"]),
                        (["--max-leak-bytes", "30M"], ["FAILED", "31457280 bytes (--max-leak-bytes; no limit on allocations)"]),
                        ([], ["FAILED", "none given (--max-leak-bytes, --max-leaks): any counted leak fails"])]:
        r = g.run(args, files=big)
        c.true(f"leak limits in force {args}", r.has(*words), r.err)

    # the report of a failure: totals, the limit, the sites, where the
    # snapshots are (--strict: the referenced site counts too)
    snap = (Snap(4000007).leak(3 * MiB, 3, "referenced", "make_buffer", "/work/app/src/buf.c", 77)
            .leak(2048, 1, "leaked", "other", "/work/app/src/o.c", 5))
    r = g.run(["--strict"], files=[snap.file()])
    c.eq("leak report: status", r.rc, 23, r.err)
    c.true("leak report: totals", r.has("3147776 bytes", "4 allocations"), r.err)
    c.true("leak report: the limits", r.has("FAILED", "--max-leak-bytes", "--max-leaks", "any counted leak fails"),
           r.err)
    c.true("leak report: the site", r.has("3145728 bytes", "3 allocations", "referenced",
                                          "make_buffer (buf.c:77)", "pid 4000007"), r.err)
    site_lines = [l for l in r.lines if "leak: " in l]
    c.eq("leak report: a line per site", len(site_lines), 2, r.err)
    c.true("leak report: most bytes first", len(site_lines) == 2 and "make_buffer" in site_lines[0],
           r.err)
    c.true("leak report: where the snapshots are",
           r.has("snapshots are in " + os.path.join(r.work, "tmp")), r.err)


def test_classes(c: Checker, g: Gate) -> None:
    def mixed() -> dict[str, Any]:
        return (Snap(4000010).leak(100, 1, "leaked").leak(200, 1, "referenced")
                .leak(400, 1, "cached").leak(800, 1, "leaked", suppressed_by="leak:libcublas")
                .leak(1600, 1, "referenced", suppressed_by="leak:mine").file())

    # (classes, the bytes that count): at the limit passes, one below fails
    for classes, counted, n in [(None, 100, 1), ("leaked,referenced", 300, 2), ("leaked", 100, 1),
                                ("referenced", 200, 1), ("cached", 400, 1),
                                ("leaked,referenced,cached", 700, 3), ("cached, leaked", 500, 2)]:
        args = [f"--leak-classes={classes}"] if classes else []
        r = g.run(args + [f"--max-leak-bytes={counted}", f"--max-leaks={n}"], files=[mixed()])
        c.eq(f"classes {classes}: at the limit", r.rc, 0, r.err)
        r = g.run(args + [f"--max-leak-bytes={counted - 1}", f"--max-leaks={n}"], files=[mixed()])
        c.eq(f"classes {classes}: one byte over", r.rc, 23, r.err)
        c.true(f"classes {classes}: counted bytes", r.has(f"{counted} bytes"), r.err)
        c.true(f"classes {classes}: suppressed never count", r.has("suppressed: 2400 bytes"), r.err)

    # the environment's GPUMEMTRACE_LEAK_CLASSES when no --leak-classes
    r = g.run(["--max-leak-bytes=400", "--max-leaks=1"], files=[mixed()],
              env={"GPUMEMTRACE_LEAK_CLASSES": "cached"})
    c.eq("GPUMEMTRACE_LEAK_CLASSES from the environment", (r.rc, (r.env or {}).get(
        "GPUMEMTRACE_LEAK_CLASSES")), (0, "cached"), r.err)


def test_peak(c: Checker, g: Gate) -> None:
    two = lambda p1, p2: [clean(4000020, p1).file(), clean(4000021, p2).file()]  # noqa: E731
    cases = [
        (["--max-peak", "1M"], two(600 * KiB, MiB), 0),
        (["--max-peak", "1M"], two(600 * KiB, MiB + 1), 24),
        (["--max-peak", "1048576"], two(MiB, MiB), 0),
        (["--max-peak=1MiB"], two(MiB + 1, 10), 24),
        (["--max-peak=2Gi"], two(2 << 30, 10), 0),
        (["--max-peak=0"], two(0, 0), 0),
        (["--max-peak=0"], two(0, 1), 24),
    ]
    for args, files, status in cases:
        r = g.run(args, files=files)
        c.eq(f"peak {args} {[f['doc']['summary']['peak_bytes'] for f in files]}", r.rc, status, r.err)
    r = g.run(["--max-peak", "1M"], files=two(600 * KiB, MiB + 1))
    c.true("peak report: the process and the limit", r.has("FAILED", "pid 4000021", "1048577 bytes",
                                                          "--max-peak"), r.err)
    report_lines_ok(c, "peak report", r)


def test_growth(c: Checker, g: Gate) -> None:
    base_path = os.path.join(g.tmp, "baseline.json")
    base = Snap(3000000, peak=1000).grew(600, "stable", 10).grew(400, "growing", 20)
    with open(base_path, "w", encoding="utf-8") as f:
        json.dump(base.doc(), f)
    cases = [
        ("100", 1100, 0), ("100", 1101, 24), ("0", 1000, 0), ("0", 1001, 24), ("0", 900, 0),
        ("10%", 1100, 0), ("10%", 1101, 24), ("0%", 1000, 0), ("0%", 1001, 24),
        ("150%", 2500, 0), ("150%", 2501, 24), ("1K", 2024, 0), ("1K", 2025, 24),
    ]
    for limit, peak, status in cases:
        r = g.run(["--baseline", base_path, "--max-growth", limit],
                  files=[clean(4000030, peak).file(), clean(4000031, 10).file()])
        c.eq(f"growth {limit} peak {peak}", r.rc, status, r.err)
    # percent of a peak that does not divide by 100: rounded down
    odd = os.path.join(g.tmp, "odd.json")
    with open(odd, "w", encoding="utf-8") as f:
        json.dump(Snap(3000001, peak=1055).doc(), f)
    for peak, status in [(1160, 0), (1161, 24)]:  # 10% of 1055 = 105.5: 105
        r = g.run(["--baseline", odd, "--max-growth", "10%"], files=[clean(4000032, peak).file()])
        c.eq(f"growth 10% of 1055, peak {peak}", r.rc, status, r.err)

    # the report names the baseline, the numbers, and the sites that grew
    now = Snap(4000033, peak=1500).grew(600, "stable", 10).grew(850, "growing", 20).grew(50, "new", 30)
    r = g.run(["--baseline", base_path, "--max-growth", "10%"], files=[now.file()])
    c.eq("growth report: status", r.rc, 24, r.err)
    c.true("growth report: numbers",
           r.has("FAILED", "growth", "+500 bytes", "baseline.json", "100 bytes"), r.err)
    grew = [l for l in r.lines if "grew: " in l]
    c.eq("growth report: the sites that grew", len(grew), 2, r.err)
    c.true("growth report: most first", len(grew) == 2 and "+450 bytes" in grew[0]
           and "growing (model.c:20)" in grew[0] and "new (" in grew[1], r.err)
    r = g.run(["--baseline", base_path, "--max-growth", "10%"], files=[clean(4000034, 1000).file()])
    c.true("growth passed: one line with the growth",
           r.rc == 0 and len(r.lines) == 1 and r.has("growth +0 bytes"), r.err)


def test_precedence(c: Checker, g: Gate) -> None:
    base_path = os.path.join(g.tmp, "base-prec.json")
    with open(base_path, "w", encoding="utf-8") as f:
        json.dump(Snap(3000002, peak=10).doc(), f)
    big = lambda: Snap(4000040).leak(5 * MiB).file()  # noqa: E731
    cases = [
        ("command failure wins over leaks", [], [big()], {"exit": 3}, 3),
        ("command failure wins over a peak", ["--max-peak=1"], [big()], {"exit": 1}, 1),
        ("a signal: 128+N", [], [big()], {"signal": signal.SIGTERM}, 128 + signal.SIGTERM),
        ("command failure wins over no snapshot", [], [], {"exit": 4, "hard": True}, 4),
        ("command failure wins over bad JSON", [], [{"name": "gpumemtrace.4000041.exit.1.json",
                                                     "text": "{"}], {"exit": 5}, 5),
        ("leaks (23) over peak (24)", ["--max-peak=1K"], [big()], {}, 23),
        ("leaks (23) over growth (24)", ["--baseline", base_path, "--max-growth=1"], [big()], {}, 23),
        ("peak alone", ["--max-peak=1K", "--max-leak-bytes=10M", "--max-leaks=5"], [big()], {}, 24),
        ("growth alone", ["--baseline", base_path, "--max-growth=1", "--max-leak-bytes=10M",
                          "--max-leaks=5"], [big()], {}, 24),
    ]
    for what, args, files, spec, status in cases:
        r = g.run(args, files=files, spec=spec)
        c.eq(what, r.rc, status, r.err)
    r = g.run([], files=[big()], spec={"exit": 3})
    c.true("command failure: the report still says what was found",
           r.has("exit status 3", "5242880 bytes", "leaky (leak.c:12)"), r.err)
    report_lines_ok(c, "command failure report", r)
    r = g.run([], files=[big()], spec={"signal": signal.SIGTERM})
    c.true("killed: the report names the signal",
           r.has(f"killed by signal {int(signal.SIGTERM)}", f"is {128 + signal.SIGTERM}"), r.err)
    # a scan that did not finish is said
    doc = leaky(4000042).doc()
    doc["leaks"]["scan"] = {"done": False, "why": "process_vm_readv: EPERM", "mappings": 0,
                            "bytes": 0, "seconds": 0}
    r = g.run([], files=[{"name": "gpumemtrace.4000042.exit.1.json", "doc": doc}])
    c.true("scan not done: said", r.rc == 23 and r.has("pid 4000042", "did not finish",
                                                        "process_vm_readv: EPERM"), r.err)

    # no verdict: 125, one line naming the file
    r = g.run([], spec={"hard": True})
    c.eq("no exit snapshot: status", r.rc, 125, r.err)
    c.true("no exit snapshot: message", r.has("exited without writing an exit snapshot",
                                              "did it call _exit or exec?"), r.err)
    unreadable: list[tuple[Any, ...]] = [
        ("bad JSON", "{\"format\": ", "not valid JSON"),
        ("not an object", "[1, 2]", "not a gpumemtrace snapshot"),
        ("wrong format", json.dumps({**Snap(1).doc(), "format": "other"}), "not a gpumemtrace snapshot"),
        ("wrong version", json.dumps({**Snap(1).doc(), "version": 2}), "version 2"),
        ("no leaks section", json.dumps({k: v for k, v in Snap(1).doc().items() if k != "leaks"}),
         "older than this gpumemtrace"),
        ("no summary", json.dumps({k: v for k, v in Snap(1).doc().items() if k != "summary"}),
         "summary"),
        ("no stacks", json.dumps({k: v for k, v in leaky(1).doc().items() if k != "stacks"}), "stacks"),
        ("peak_bytes a string", json.dumps({**Snap(1).doc(), "summary": {"peak_bytes": "1",
                                                                           "live_bytes": 0}}),
         "summary.peak_bytes"),
        ("site bytes negative", json.dumps(_edit_site(leaky(1).doc(), "bytes", -1)),
         "leaks.sites[0].bytes"),
        ("site class unknown", json.dumps(_edit_site(leaky(1).doc(), "class", "lost")),
         "leaks.sites[0].class"),
        ("site without count", json.dumps(_edit_site(leaky(1).doc(), "count", None)),
         "leaks.sites[0].count"),
        ("site stack unknown", json.dumps(_edit_site(leaky(1).doc(), "stack", 99)), "no stack 99"),
        ("frame line a string", json.dumps(_edit_frame(leaky(1).doc(), "line", "12")), ".line"),
        ("sites not an array", json.dumps({**Snap(1).doc(), "leaks": {"sites": {}}}), "leaks.sites"),
        ("reason not exit", json.dumps({**Snap(1).doc(), "reason": "oom"}), "reason 'oom'"),
    ]
    # --level tensors reads the tensor level where a framework's peak is
    # given: its keys are checked too.
    def tensor_level(tensors: Any, devices: Any = None) -> str:
        doc = leaky(1).doc()
        doc["framework"] = {"devices": [{"device": 0, "peak_allocated_bytes": 100}] if devices is None
                            else devices}
        doc["tensors"] = tensors
        return json.dumps(doc)
    unreadable += [
        ("tensors.sites not an array", tensor_level({"stack_base": 1 << 30, "sites": {}}), "tensors.sites",
         ["--level", "tensors"]),
        ("no tensors.stack_base", tensor_level({"sites": []}), "tensors.stack_base", ["--level", "tensors"]),
        ("a suspect's live_bytes a string",
         json.dumps({**json.loads(tensor_level({"stack_base": 1 << 30, "sites": []})),
                     "leaks": {**leaky(1).doc()["leaks"],
                               "suspects": [{"stack": (1 << 30) + 1, "live_bytes": "1"}]}}),
         "leaks.suspects[0].live_bytes", ["--level", "tensors"]),
        ("a suspect's stack unknown",
         json.dumps({**json.loads(tensor_level({"stack_base": 1 << 30, "sites": []})),
                     "leaks": {**leaky(1).doc()["leaks"],
                               "suspects": [{"stack": (1 << 30) + 1, "live_bytes": 5}]}}),
         "no stack 1073741825", ["--level", "tensors"]),
    ]
    for what, text, word, *more in unreadable:
        name = "gpumemtrace.4000050.exit.1.json"
        r = g.run(more[0] if more else [], files=[leaky(4000049).file(), {"name": name, "text": text}])
        c.eq(f"unreadable snapshot ({what}): status", r.rc, 125, r.err)
        errs = [l for l in r.lines if name in l and "snapshots are in" not in l]
        c.eq(f"unreadable snapshot ({what}): one line naming the file", len(errs), 1, r.err)
        c.true(f"unreadable snapshot ({what}): says {word!r}", bool(errs) and word in errs[0], r.err)


def _edit_site(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    if value is None:
        del doc["leaks"]["sites"][0][key]
    else:
        doc["leaks"]["sites"][0][key] = value
    return doc


def _edit_frame(doc: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    doc["stacks"][0]["frames"][-1][key] = value
    return doc


def test_usage(c: Checker, g: Gate) -> None:
    bad_supp = os.path.join(g.tmp, "bad-supp.txt")
    with open(bad_supp, "w", encoding="utf-8") as f:
        f.write("# fine\nleak:libfoo\n\nfrobnicate:bar\n")
    bad_base = os.path.join(g.tmp, "bad-base.json")
    with open(bad_base, "w", encoding="utf-8") as f:
        f.write("{ not json")
    fifo = os.path.join(g.tmp, "fifo")
    os.mkfifo(fifo)
    wrong_base = os.path.join(g.tmp, "wrong-base.json")
    with open(wrong_base, "w", encoding="utf-8") as f:
        json.dump({"format": "gpumemtrace-snapshot", "version": 1, "reason": "exit"}, f)
    cases: list[tuple[list[str], list[str]]] = [
        (["--max-growth", "10%"], ["--max-growth needs --baseline"]),
        (["--baseline", bad_base], ["--baseline needs --max-growth"]),
        (["--max-leak-bytes", "12x"], ["--max-leak-bytes", "12x"]),
        (["--max-leak-bytes", "-1"], ["--max-leak-bytes", "-1"]),
        (["--max-leak-bytes", ""], ["--max-leak-bytes", "''"]),
        (["--max-leaks", "1K"], ["--max-leaks", "1K"]),
        (["--max-peak", "lots"], ["--max-peak", "lots"]),
        (["--max-peak"], ["--max-peak needs a value"]),
        (["--baseline", bad_base, "--max-growth", "10x%"], ["--max-growth", "10x%"]),
        (["--baseline", bad_base, "--max-growth", "%"], ["--max-growth", "'%'"]),
        (["--leak-classes", "leaked,lost"], ["--leak-classes", "leaked,lost"]),
        (["--leak-classes", ""], ["--leak-classes"]),
        (["--snapshot-on", "bogus"], ["--snapshot-on", "bogus"]),
        (["--depth", "300"], ["--depth", "300"]),
        (["--frob"], ["unknown option '--frob'"]),
        (["--suppressions", bad_supp], [bad_supp + ":4:", "frobnicate:bar"]),
        (["--suppressions", os.path.join(g.tmp, "missing.txt")], ["missing.txt"]),
        (["--baseline", bad_base, "--max-growth", "1"], ["--baseline", bad_base, "not valid JSON"]),
        (["--baseline", wrong_base, "--max-growth", "1"], ["--baseline", wrong_base, "pid"]),
        (["--baseline", os.path.join(g.tmp, "none.json"), "--max-growth", "1"],
         ["--baseline", "none.json"]),
        (["--junit", os.path.join(g.tmp, "no", "such", "dir", "j.xml")], ["--junit", "no/such/dir"]),
        # special files: refused at once, never read (a FIFO would hang, /dev/zero never end)
        (["--suppressions", fifo], ["--suppressions", fifo, "not a regular file (a FIFO)"]),
        (["--suppressions", "/dev/zero"], ["--suppressions", "/dev/zero", "not a regular file (a character device)"]),
        (["--baseline", fifo, "--max-growth", "1"], ["--baseline", fifo, "not a regular file (a FIFO)"]),
        (["--baseline", "/dev/zero", "--max-growth", "1"], ["--baseline", "not a regular file (a character device)"]),
    ]
    for args, words in cases:
        r = g.run(args, files=[clean().file()])
        c.eq(f"usage {args}: status", r.rc, 2, r.err)
        c.eq(f"usage {args}: one line", len(r.lines), 1, r.err)
        c.true(f"usage {args}: prefix", r.err.startswith(PREFIX), r.err)
        for w in words:
            c.true(f"usage {args}: names {w!r}", w in r.err, r.err)
        c.true(f"usage {args}: the command did not run", r.env is None)

    for argv, words in [(["check"], ["no command"]), (["check", "--"], ["no command after '--'"]),
                        (["check", "true"], ["'--' must come before the command"])]:
        p = subprocess.run([g.launcher] + argv, capture_output=True, text=True, env=g.base_env())
        c.eq(f"usage {argv}: status", p.returncode, 2, p.stderr)
        for w in words:
            c.true(f"usage {argv}: names {w!r}", w in p.stderr, p.stderr)

    r = g.run([], command=[os.path.join(g.tmp, "no-such-command")])
    c.eq("command not found: status", r.rc, 127, r.err)
    c.true("command not found: message", r.has("cannot run", "no-such-command"), r.err)
    c.eq("command not found: nothing left in TMPDIR", r.tmp_left, [])

    # the library missing: a copy of the launcher on its own
    lone = os.path.join(g.tmp, "lone", "bin")
    os.makedirs(lone)
    shutil.copy2(g.launcher, lone)
    p = subprocess.run([os.path.join(lone, os.path.basename(g.launcher)), "check", "--", "true"],
                       capture_output=True, text=True, env=g.base_env())
    if os.path.exists("/usr/local/lib/libgpumemtrace.so"):
        print("skip: an installed libgpumemtrace.so would be found")
    else:
        c.eq("library missing: status", p.returncode, 125, p.stderr)
        c.true("library missing: message", "cannot find libgpumemtrace.so" in p.stderr, p.stderr)


def test_dirs(c: Checker, g: Gate) -> None:
    # --dir: kept, made when missing, older files ignored
    d = os.path.join(g.tmp, "snaps")
    r = g.run(["--dir", d], files=[clean(4000060).file()])
    c.eq("--dir made: status", r.rc, 0, r.err)
    c.true("--dir made: the snapshot kept",
           os.path.exists(os.path.join(d, "gpumemtrace.4000060.exit.1.json")))
    c.eq("--dir: GPUMEMTRACE_DIR", (r.env or {}).get("GPUMEMTRACE_DIR"), os.path.realpath(d))
    c.true("--dir: passed names it", r.has("passed", os.path.realpath(d)), r.err)
    c.eq("--dir: nothing in TMPDIR", r.tmp_left, [])
    with open(os.path.join(d, "gpumemtrace.4000061.exit.1.json"), "w", encoding="utf-8") as f:
        json.dump(leaky(4000061, 5000).doc(), f)
    with open(os.path.join(d, "gpumemtrace.4000062.exit.1.json"), "w", encoding="utf-8") as f:
        f.write("not json: older files are not read")
    r = g.run(["--dir", d], files=[clean(4000063).file()])
    c.eq("--dir: older files ignored", r.rc, 0, r.err)
    r = g.run([f"--dir={d}"], files=[leaky(4000064, 7).file()])
    c.eq("--dir: a new leaky one counts", r.rc, 23, r.err)
    c.true("--dir: only the new leak", r.has("7 bytes in 1 allocation") and "5000" not in r.err, r.err)
    c.true("--dir: every file kept", len(glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))) >= 5)
    # other snapshot reasons are not exit snapshots
    r = g.run(["--dir", d], files=[Snap(4000065, reason="oom").leak(9).file(), clean(4000066).file()])
    c.eq("--dir: an oom snapshot is not judged", r.rc, 0, r.err)
    # a relative --dir: made absolute for a command that changes directory
    r = g.run(["--dir", "snaps-rel"], files=[clean(4000067).file()], cwd=g.tmp)
    c.eq("--dir relative: GPUMEMTRACE_DIR absolute", (r.rc, (r.env or {}).get("GPUMEMTRACE_DIR")),
         (0, os.path.realpath(os.path.join(g.tmp, "snaps-rel"))), r.err)
    r = g.run(["--dir", "/etc/passwd"], files=[clean().file()])
    c.eq("--dir on a file: status", r.rc, 2, r.err)

    # the temporary directory: removed after a pass, kept after a failure
    r = g.run([], files=[clean(4000070).file()])
    c.eq("temporary: pass", r.rc, 0, r.err)
    c.eq("temporary: removed after a pass", r.tmp_left, [])
    r = g.run([], files=[leaky(4000071).file()])
    c.eq("temporary: fail", r.rc, 23, r.err)
    c.eq("temporary: kept after a failure", len(r.tmp_left), 1, str(r.tmp_left))
    if r.tmp_left:
        kept = os.path.join(r.work, "tmp", r.tmp_left[0])
        c.true("temporary: the line says where", r.has("snapshots are in " + kept), r.err)
        c.true("temporary: the snapshot is there",
               os.path.exists(os.path.join(kept, "gpumemtrace.4000071.exit.1.json")))
        c.eq("temporary: private", os.stat(kept).st_mode & 0o777, 0o700)
    r = g.run([], spec={"hard": True, "exit": 0})
    c.eq("temporary: no snapshot", r.rc, 125, r.err)
    c.eq("temporary: an empty one is removed even so", r.tmp_left, [])
    c.true("temporary: no line about an empty directory", "snapshots are in" not in r.err, r.err)
    r = g.run([], files=[clean(4000072).file()], spec={"exit": 9})
    c.eq("temporary: command failed", r.rc, 9, r.err)
    c.eq("temporary: kept after a command failure", len(r.tmp_left), 1, str(r.tmp_left))


def junit_of(c: Checker, what: str, path: str) -> ET.Element | None:
    try:
        return ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        c.true(f"{what}: JUnit parses", False, str(e))
        return None


def test_junit(c: Checker, g: Gate) -> None:
    base_path = os.path.join(g.tmp, "base-junit.json")
    with open(base_path, "w", encoding="utf-8") as f:
        json.dump(Snap(3000003, peak=1000).doc(), f)
    hostile = '<a&"b>'
    snap = Snap(4000080).leak(4096, 2, "leaked", hostile, "/src/x'<y>&.c", 7)
    junit = os.path.join(g.tmp, "junit-1.xml")
    r = g.run(["--junit", junit, "--max-peak", "1K", "--baseline", base_path, "--max-growth", "0"],
              files=[snap.file()])
    c.eq("junit: status", r.rc, 23, r.err)
    root = junit_of(c, "junit", junit)
    if root is not None:
        c.eq("junit: root", (root.tag, root.get("name")), ("testsuite", "gpumemtrace"))
        cases = {tc.get("name"): tc for tc in root.findall("testcase")}
        c.eq("junit: testcases", sorted(cases), ["growth", "leaks", "peak"])
        c.eq("junit: counts", (root.get("tests"), root.get("failures"), root.get("errors")),
             ("3", "3", "0"))
        leaks = cases.get("leaks")
        fail = leaks.find("failure") if leaks is not None else None
        c.true("junit: leaks failed", fail is not None)
        if fail is not None:
            c.true("junit: leaks message", "4096 bytes in 2 allocations" in (fail.get("message") or ""),
                   str(fail.get("message")))
            c.true("junit: the hostile site comes through escaped",
                   f"{hostile} (x'<y>&.c:7)" in (fail.text or ""), str(fail.text))
        for name, word in [("peak", "4096 bytes"), ("growth", "+3096 bytes")]:
            f = cases[name].find("failure") if name in cases else None
            message = f.get("message") if f is not None else None
            c.true(f"junit: {name} failed naming {word}", word in (message or ""), str(message))
    with open(junit, encoding="utf-8") as f:
        text = f.read()
    c.true("junit: raw text escaped", "&lt;a&amp;&quot;b&gt;" in text and hostile not in text, text)
    c.eq("junit: no leftovers", [n for n in os.listdir(g.tmp) if n.startswith("junit-1.xml.")], [])

    # a pass: only leaks, no failure
    junit = os.path.join(g.tmp, "junit-2.xml")
    r = g.run([f"--junit={junit}"], files=[clean().file()])
    root = junit_of(c, "junit pass", junit)
    c.eq("junit pass: status", r.rc, 0, r.err)
    if root is not None:
        c.eq("junit pass: testcases", [tc.get("name") for tc in root.findall("testcase")], ["leaks"])
        c.eq("junit pass: no failure", root.findall(".//failure") + root.findall(".//error"), [])
        c.eq("junit pass: counts", (root.get("tests"), root.get("failures")), ("1", "0"))
    c.eq("junit pass: as readable as a new file", os.stat(junit).st_mode & 0o777,
         0o666 & ~_umask())

    # no verdict: errors; a failed command: its own testcase
    junit = os.path.join(g.tmp, "junit-3.xml")
    r = g.run(["--junit", junit, "--max-peak=1"], files=[{"name": "gpumemtrace.4000081.exit.1.json",
                                                          "text": "]"}], exit=7)
    c.eq("junit error: status", r.rc, 7, r.err)
    root = junit_of(c, "junit error", junit)
    if root is not None:
        cases = {tc.get("name"): tc for tc in root.findall("testcase")}
        c.eq("junit error: testcases", sorted(cases), ["command", "leaks", "peak"])
        cmd = cases.get("command")
        c.true("junit error: the command failed", cmd is not None and cmd.find("failure") is not None
               and "exit status 7" in (cmd.find("failure").get("message") or ""))
        err = cases["leaks"].find("error") if "leaks" in cases else None
        c.true("junit error: leaks is an error naming the file",
               err is not None and "gpumemtrace.4000081.exit.1.json" in (err.get("message") or ""))
        c.eq("junit error: counts", (root.get("failures"), root.get("errors")), ("1", "2"))

    # written atomically over an older file
    junit = os.path.join(g.tmp, "junit-4.xml")
    with open(junit, "w", encoding="utf-8") as f:
        f.write("old")
    g.run(["--junit", junit], files=[leaky().file()])
    c.true("junit: replaces an older file", junit_of(c, "junit replaced", junit) is not None)

    # standard output, and a FIFO (what /dev/stdout is behind a pipe): written
    # into, never replaced; a FIFO nobody reads: one line, never a wait
    r = g.run(["--junit", "-"], files=[clean().file()])
    c.true("junit -: the XML on standard output", r.rc == 0 and "<testsuite" in r.out, r.out[-300:] + r.err)
    fifo, link = os.path.join(g.tmp, "junit.fifo"), os.path.join(g.tmp, "junit.link")
    os.mkfifo(fifo)
    os.symlink(fifo, link)
    for target in (fifo, link):
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        r = g.run(["--junit", target], files=[clean().file()])
        reader.join(timeout=60)
        c.true(f"junit {os.path.basename(target)}: written into the FIFO, which stays one",
               r.rc == 0 and bool(got) and b"<testsuite" in got[0] and stat.S_ISFIFO(os.stat(fifo).st_mode)
               and os.path.islink(link), (r.rc, got[:1], r.err))
    r = g.run(["--junit", fifo], files=[clean().file()])
    c.true("junit: a FIFO nobody reads is one line, status 125", r.rc == 125 and "nobody reads it" in r.err
           and stat.S_ISFIFO(os.stat(fifo).st_mode), (r.rc, r.err))
    r = g.run(["--junit", g.tmp], files=[clean().file()])
    c.true("junit: a directory is a usage error", r.rc == 2 and "not a regular file (a directory)" in r.err,
           (r.rc, r.err))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def annotations(out: str) -> list[str]:
    return [l for l in out.splitlines() if l.startswith("::")]


def test_github(c: Checker, g: Gate) -> None:
    ws = os.path.join(g.tmp, "workspace")
    os.makedirs(os.path.join(ws, "src"), exist_ok=True)
    snap = (Snap(4000090)
            .leak(3000, 3, "leaked", "build_cache", os.path.join(ws, "src", "cache.c"), 41)
            .leak(2000, 1, "referenced", "odd%fn\r\nname", "/other/dir/we,ird:name.c", 9)
            .leak(1000, 1, "leaked", frames=cuda_frames() + [native("main", None, None)])
            .leak(500, 1, "leaked", frames=cuda_frames() + [
                pyframe("test_alloc", os.path.join(ws, "tests", "test_x.py"), 17),
                pyframe("<module>", "runner.py", 3)])
            .leak(9999, 1, "cached", "pool", "/src/pool.c", 3))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": ws + "/"}
    r = g.run(["--strict"], files=[snap.file()], env=env)
    c.eq("github: status", r.rc, 23, r.err)
    lines = annotations(r.out)
    c.eq("github: one annotation per counted site", len(lines), 4, r.out)
    if len(lines) == 4:
        c.true("github: relative to the workspace", lines[0].startswith(
            "::error file=src/cache.c,line=41,title=gpumemtrace leak::3000 bytes in 3 allocations"),
            lines[0])
        c.true("github: the message", "build_cache (" in lines[0] and "pid 4000090" in lines[0], lines[0])
        c.true("github: properties escaped", lines[1].startswith(
            "::error file=/other/dir/we%2Cird%3Aname.c,line=9,title=gpumemtrace leak::"), lines[1])
        c.true("github: data escaped",
               "odd%25fn%0D%0Aname (we,ird:name.c:9)" in lines[1], lines[1])
        c.true("github: no file or line known",
               lines[2].startswith("::error title=gpumemtrace leak::1000 bytes")
               and "main (app)" in lines[2], lines[2])
        c.true("github: Python frames", lines[3].startswith(
            "::error file=tests/test_x.py,line=17,title=gpumemtrace leak::500 bytes"), lines[3])
    c.true("github: nothing else on stdout", len(r.out.splitlines()) == len(lines), r.out)

    # relative file names (a build directory beside the sources) found in the workspace
    os.makedirs(os.path.join(ws, "lib", "core"), exist_ok=True)
    for name in ("src/rel.c", "lib/core/deep.c"):
        with open(os.path.join(ws, name), "w", encoding="utf-8"):
            pass
    rel = (Snap(4000092).leak(30, 1, "leaked", "a", "../src/rel.c", 1)
           .leak(20, 1, "leaked", "b", "../../elsewhere/ws/lib/core/deep.c", 2)
           .leak(10, 1, "leaked", "c", "../nowhere/gone.c", 3))
    r = g.run([], files=[rel.file()], env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": ws})
    c.eq("github: relative names", [l.split(",title=")[0] for l in annotations(r.out)],
         ["::error file=src/rel.c,line=1", "::error file=lib/core/deep.c,line=2",
          "::error file=../nowhere/gone.c,line=3"], r.out)

    # without GITHUB_ACTIONS=true: nothing
    for env in [{}, {"GITHUB_ACTIONS": "false"}, {"GITHUB_WORKSPACE": ws}]:
        r = g.run([], files=[snap.file()], env=env)
        c.eq(f"github {env}: no annotations", annotations(r.out), [])
    # leaks within the limits: warnings, not errors
    r = g.run(["--strict", "--max-leak-bytes=1M", "--max-leaks=10"], files=[snap.file()],
              env={"GITHUB_ACTIONS": "true"})
    lines = annotations(r.out)
    c.eq("github within limits: status", r.rc, 0, r.err)
    c.true("github within limits: warnings",
           len(lines) == 4 and all(l.startswith("::warning ") for l in lines), r.out)
    # without a workspace: paths as they are
    r = g.run([], files=[snap.file()], env={"GITHUB_ACTIONS": "true"})
    c.true("github without a workspace: as they are", f"::error file={ws}/src/cache.c,line=41," in r.out,
           r.out)
    # the site is the frame the snapshot names (the tracer decides it, not the gate)
    frames = [native("helper", "/work/app/src/helper.c", 5),
              native("cuMemAlloc_v2", "/cuda/driver.c", 7, "/work/app/bin/app"),
              native("cuinit_mine", "/work/app/src/mine.c", 8),
              native("main", "/work/app/src/main.c", 9)]
    inner = Snap(4000091).leak(64, frames=frames, at=2)
    r = g.run([], files=[inner.file()], env={"GITHUB_ACTIONS": "true"})
    c.true("github: the site's frame", "file=/work/app/src/mine.c,line=8," in r.out, r.out)
    c.true("report: the site's label", r.has("cuinit_mine (mine.c:8)"), r.err)
    # a site that is not the program's own code: its label, no file to point at
    lib = Snap(4000093).leak(64, frames=frames, at=1)
    lib.stacks[0]["site"]["user"] = False
    r = g.run([], files=[lib.file()], env={"GITHUB_ACTIONS": "true"})
    c.true("github: no file for a library's site", annotations(r.out) != []
           and annotations(r.out)[0].startswith("::error title=gpumemtrace leak::"), r.out)
    # a snapshot older than the site rule: its innermost frame with a file and line
    old = Snap(4000094).leak(64, frames=frames, at=0)
    del old.stacks[0]["site"]
    r = g.run([], files=[old.file()], env={"GITHUB_ACTIONS": "true"})
    c.true("github: an older snapshot", "file=/work/app/src/helper.c,line=5," in r.out, r.out)
    c.true("report: an older snapshot", r.has("helper (/work/app/src/helper.c:5)"), r.err)


def test_signals(c: Checker, g: Gate) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        def send(p: subprocess.Popen, work: str, sig: int = sig) -> None:
            ready = os.path.join(work, "ready")
            deadline = time.monotonic() + 20
            while not os.path.exists(ready) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.05)
            p.send_signal(sig)

        r = g.run([], files=[clean(4000100).file()], during=send, spec={"ready": True})
        c.eq(f"{signal.Signals(sig).name} passed on to the command", r.rc, 60 + sig, r.err)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("launcher")
    ap.add_argument("library")
    ap.add_argument("--only", action="append", default=[], help="run these tests only")
    a = ap.parse_args()

    tests = [test_environment, test_leak_limits, test_classes, test_peak, test_growth,
             test_precedence, test_usage, test_dirs, test_junit, test_github, test_signals]
    c = Checker()
    with tempfile.TemporaryDirectory(prefix="gmt-check-") as tmp:
        g = Gate(os.path.abspath(a.launcher), a.library, tmp)
        for t in tests:
            if a.only and t.__name__ not in a.only and t.__name__[5:] not in a.only:
                continue
            before = c.failures
            t(c, g)
            print(f"{t.__name__}: {'ok' if c.failures == before else 'FAILED'}")
    print(f"{c.checks} checks, {c.failures} failure(s)")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
