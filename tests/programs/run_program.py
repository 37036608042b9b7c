#!/usr/bin/env python3
"""Runs one test program against the simulated GPU and compares the simulator's
ledgers (ground truth, docs/simulator.md) with the program's expectation file
and with the LIVE lines the program printed.

Usage: run_program.py PROGRAM EXPECT.json [--python PYTHON] [--keep]

PROGRAM is an executable, or a .py file run with PYTHON (default: this
interpreter). In a sanitizer build (GMT_TEST_ASAN_RUNTIME set) a .py program gets
LD_PRELOAD of the ASan runtime and detect_leaks=0: python3 is not instrumented
but loads the instrumented libcuda.so.1.

The program prints, per process, a line "PID <pid> <role>" (role "main" for the
process started here, e.g. "child-a" for a fork child), then one line
"LIVE <address-hex> <size> <kind> <device>" per allocation that process still
holds when it ends. Its exit ledger must list exactly those allocations.

Expectation file format (JSON object):

    {
      "description": str,             # what the program does, for people
      "env": {VAR: str, ...},         # GMTSIM_* settings for the run (every
                                      # inherited GMTSIM_* variable is dropped;
                                      # GMTSIM_LEDGER_DIR is a fresh temp dir)
      "exit_code": int,               # default 0
      "processes": {
        ROLE: {                       # "main", and the roles fork children print
          "ledgers": {                # exactly the ledger files this process
                                      # must leave: "exit", "oom.1", "oom.2", ...
            NAME: {
              "notes": str,           # optional: how the numbers were derived
              "live": [               # the live set, an exact multiset of
                {"kind": str, "device": int, "size": int, "api": str,
                 "count": int}        # count: how many such entries (default 1)
              ],
              "totals": {"allocs": int, "frees": int, "oom": int},
              "failed_request": {...},  # oom ledgers: exact
              "calls": {ENTRY_POINT: MATCH},       # optional, selected counts
              "devices": [{"index": int, FIELD: MATCH}],   # optional; the
                                      # listed fields of the listed devices
              "pools": [{FIELD: MATCH}],           # optional; every pool in
                                      # the ledger matches exactly one entry
              "vmm": {"reservations": [{FIELD: MATCH}],
                      "mappings": [{FIELD: MATCH}]}  # optional, same rule
            }
          }
        }
      }
    }

MATCH is an int or bool (exact), or {"min": int, "max": int} (either bound may be
left out). Unknown keys are an error, so that a misspelt check cannot pass
silently. A call count of 0 means "never called": the name is absent from
"calls" or counted 0.

Beyond the expectation, every ledger must be well-formed: format
"gmtsim-ledger", version 1, its pid and reason matching its file name, "live"
sorted by address, totals.allocs - totals.frees == len(live), device -1 exactly
for host kinds, failed_request exactly in oom ledgers.

Exit status: 0 when everything matches, 1 with a report of every mismatch.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

HOST_KINDS = {"host", "registered"}
LEDGER_NAME = re.compile(r"^ledger\.(\d+)\.(exit|oom\.\d+|api)\.json$")
LIVE_LINE = re.compile(r"^LIVE (0x[0-9a-fA-F]+) (\d+) ([a-z]+) (-?\d+)$")
PID_LINE = re.compile(r"^PID (\d+)(?: (\S+))?$")
TIMEOUT_S = 100  # below the meson test timeout (120 s), so the harness reports first


@dataclass
class Report:
    """What one process printed: its pid and its LIVE lines."""
    pid: int
    role: str
    live: List[Tuple[int, int, str, int]] = field(default_factory=list)


@dataclass
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    pid: int
    ledger_dir: str


# --- running -------------------------------------------------------------------

def program_command(program: str, python: str) -> List[str]:
    if program.endswith(".py"):
        return [python, program]
    return [program]


def program_env(program: str, expect_env: Dict[str, str], ledger_dir: str,
                base: Dict[str, str]) -> Dict[str, str]:
    """The environment for the run: the inherited one without GMTSIM_*, plus
    the expectation's settings and a fresh ledger directory."""
    env = {k: v for k, v in base.items() if not k.startswith("GMTSIM_")}
    env.update(expect_env)
    env["GMTSIM_LEDGER_DIR"] = ledger_dir
    asan = env.get("GMT_TEST_ASAN_RUNTIME", "")
    if program.endswith(".py") and asan:
        # NOTE: python3 is not instrumented; ASan must be the first DSO loaded,
        # and python's own allocations would read as leaks.
        env["LD_PRELOAD"] = " ".join(x for x in (asan, env.get("LD_PRELOAD", "")) if x)
        opts = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "detect_leaks=0"
    return env


def run_program(program: str, python: str, expect_env: Dict[str, str],
                ledger_dir: str) -> RunResult:
    env = program_env(program, expect_env, ledger_dir, dict(os.environ))
    proc = subprocess.Popen(program_command(program, python), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(killed after {TIMEOUT_S} s)"
    return RunResult(proc.returncode, out, err, proc.pid, ledger_dir)


# --- parsing -------------------------------------------------------------------

def parse_reports(stdout: str) -> Tuple[Dict[str, Report], List[str]]:
    """Reports by role, and complaints about lines that fit no report."""
    reports: Dict[str, Report] = {}
    problems: List[str] = []
    current: Optional[Report] = None
    for line in stdout.splitlines():
        m = PID_LINE.match(line)
        if m:
            role = m.group(2) or "main"
            if role in reports:
                problems.append(f"role {role!r} printed its report twice")
            current = Report(int(m.group(1)), role)
            reports[role] = current
            continue
        m = LIVE_LINE.match(line)
        if m:
            if current is None:
                problems.append(f"LIVE line before any PID line: {line}")
                continue
            current.live.append((int(m.group(1), 16), int(m.group(2)), m.group(3),
                                 int(m.group(4))))
            continue
        if line.startswith(("LIVE", "PID")):
            problems.append(f"malformed report line: {line!r}")
    return reports, problems


def load_ledgers(ledger_dir: str) -> Tuple[Dict[Tuple[int, str], Dict[str, Any]], List[str]]:
    """Ledgers by (pid, name), name being "exit", "oom.N" or "api"."""
    ledgers: Dict[Tuple[int, str], Dict[str, Any]] = {}
    problems: List[str] = []
    for entry in sorted(os.listdir(ledger_dir)):
        m = LEDGER_NAME.match(entry)
        if not m:
            problems.append(f"unexpected file in the ledger directory: {entry}")
            continue
        path = os.path.join(ledger_dir, entry)
        try:
            with open(path, encoding="utf-8") as f:
                ledgers[(int(m.group(1)), m.group(2))] = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{entry}: cannot read JSON: {e}")
    return ledgers, problems


# --- the expectation file ------------------------------------------------------

TOP_KEYS = {"description", "env", "exit_code", "processes"}
LEDGER_KEYS = {"notes", "live", "totals", "failed_request", "calls", "devices", "pools", "vmm"}
LIVE_KEYS = {"kind", "device", "size", "api", "count"}


def validate_expectation(expect: Dict[str, Any]) -> List[str]:
    """Mistakes in the expectation file itself."""
    problems = [f"unknown top-level key {k!r}" for k in sorted(set(expect) - TOP_KEYS)]
    if not expect.get("processes"):
        problems.append("no processes")
    for role, proc in sorted(expect.get("processes", {}).items()):
        if set(proc) != {"ledgers"}:
            problems.append(f"{role}: keys must be exactly ['ledgers'], not {sorted(proc)}")
        for name, want in sorted(proc.get("ledgers", {}).items()):
            where = f"{role}/{name}"
            if not LEDGER_NAME.match(f"ledger.1.{name}.json"):
                problems.append(f"{where}: not a ledger name (exit, oom.N, api)")
            problems += [f"{where}: unknown key {k!r}" for k in sorted(set(want) - LEDGER_KEYS)]
            for k in ("live", "totals"):
                if k not in want:
                    problems.append(f"{where}: {k!r} is required")
            for e in want.get("live", []):
                if set(e) - LIVE_KEYS or not {"kind", "device", "size", "api"} <= set(e):
                    problems.append(f"{where}: bad live entry {e}")
            if set(want.get("vmm", {})) - {"reservations", "mappings"}:
                problems.append(f"{where}: vmm takes reservations and mappings only")
    return problems


# --- comparing -----------------------------------------------------------------

def matches(actual: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if not isinstance(actual, int) or isinstance(actual, bool):
            return False
        return want.get("min", actual) <= actual <= want.get("max", actual)
    if isinstance(want, bool) or isinstance(actual, bool):
        return type(want) is type(actual) and want == actual
    return actual == want


def live_multiset(entries: List[Dict[str, Any]], expanded: bool) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for e in entries:
        key = (e.get("kind"), e.get("device"), e.get("size"), e.get("api"))
        out[key] += e.get("count", 1) if expanded else 1
    return out


def format_live(counter: collections.Counter) -> List[str]:
    return [f"    {n} x kind={k} device={d} size={s} api={a}"
            for (k, d, s, a), n in sorted(counter.items(), key=str)]


def compare_live(want: List[Dict[str, Any]], actual: List[Dict[str, Any]]) -> List[str]:
    w, a = live_multiset(want, True), live_multiset(actual, False)
    if w == a:
        return []
    lines = ["live set differs", "  expected:"] + format_live(w)
    lines += ["  actual:"] + format_live(a)
    lines += ["  missing:"] + format_live(w - a)
    lines += ["  unexpected:"] + format_live(a - w)
    return ["\n".join(lines)]


def assign(want: List[Dict[str, Any]], actual: List[Dict[str, Any]]) -> bool:
    """True if every actual entry matches a distinct wanted one (and the lists
    have the same length): a small bipartite matching by backtracking."""
    if len(want) != len(actual):
        return False

    def fits(w: Dict[str, Any], a: Dict[str, Any]) -> bool:
        return all(k in a and matches(a[k], v) for k, v in w.items())

    used = [False] * len(actual)

    def place(i: int) -> bool:
        if i == len(want):
            return True
        for j, a in enumerate(actual):
            if not used[j] and fits(want[i], a):
                used[j] = True
                if place(i + 1):
                    return True
                used[j] = False
        return False

    return place(0)


def compare_entries(what: str, want: List[Dict[str, Any]],
                    actual: List[Dict[str, Any]]) -> List[str]:
    if assign(want, actual):
        return []
    return [f"{what} differ\n  expected (partial entries, any order):\n"
            + "".join(f"    {json.dumps(w, sort_keys=True)}\n" for w in want)
            + "  actual:\n"
            + "".join(f"    {json.dumps(a, sort_keys=True)}\n" for a in actual)]


def check_well_formed(pid: int, name: str, ledger: Dict[str, Any]) -> List[str]:
    problems = []
    if ledger.get("format") != "gmtsim-ledger" or ledger.get("version") != 1:
        problems.append(f"format/version are {ledger.get('format')!r}/"
                        f"{ledger.get('version')!r}, expected 'gmtsim-ledger'/1")
    if ledger.get("pid") != pid:
        problems.append(f"pid is {ledger.get('pid')}, the file name says {pid}")
    reason = name.split(".")[0]
    if ledger.get("reason") != reason:
        problems.append(f"reason is {ledger.get('reason')!r}, the file name says {reason!r}")
    live = ledger.get("live", [])
    addresses = [int(e["address"], 16) for e in live]
    if addresses != sorted(addresses):
        problems.append("live is not sorted by address")
    totals = ledger.get("totals", {})
    if totals.get("allocs", 0) - totals.get("frees", 0) != len(live):
        problems.append(f"totals.allocs - totals.frees = {totals.get('allocs')} - "
                        f"{totals.get('frees')}, but live holds {len(live)} entries")
    for e in live:
        host = e.get("kind") in HOST_KINDS
        if host != (e.get("device") == -1):
            problems.append(f"entry {e} : device must be -1 exactly for host kinds")
    if ("failed_request" in ledger) != (reason == "oom"):
        problems.append("failed_request must be present exactly in oom ledgers")
    return problems


def compare_ledger(want: Dict[str, Any], ledger: Dict[str, Any]) -> List[str]:
    problems = compare_live(want.get("live", []), ledger.get("live", []))
    if "totals" in want and ledger.get("totals") != want["totals"]:
        problems.append(f"totals differ\n  expected: {json.dumps(want['totals'], sort_keys=True)}"
                        f"\n  actual:   {json.dumps(ledger.get('totals'), sort_keys=True)}")
    if "failed_request" in want and ledger.get("failed_request") != want["failed_request"]:
        problems.append("failed_request differs\n"
                        f"  expected: {json.dumps(want['failed_request'], sort_keys=True)}\n"
                        f"  actual:   {json.dumps(ledger.get('failed_request'), sort_keys=True)}")
    calls = ledger.get("calls", {})
    for name, count in sorted(want.get("calls", {}).items()):
        got = calls.get(name, 0)
        if not matches(got, count):
            problems.append(f"calls[{name}] is {got}, expected {json.dumps(count)}")
    devices = {d.get("index"): d for d in ledger.get("devices", [])}
    for wd in want.get("devices", []):
        d = devices.get(wd["index"])
        if d is None:
            problems.append(f"device {wd['index']} missing from devices")
            continue
        for k, v in sorted(wd.items()):
            if k != "index" and not matches(d.get(k), v):
                problems.append(f"devices[{wd['index']}].{k} is {d.get(k)}, "
                                f"expected {json.dumps(v)}")
    if "pools" in want:
        problems += compare_entries("pools", want["pools"], ledger.get("pools", []))
    for part in ("reservations", "mappings"):
        if part in want.get("vmm", {}):
            problems += compare_entries(f"vmm.{part}", want["vmm"][part],
                                        ledger.get("vmm", {}).get(part, []))
    return problems


def compare_reported_live(report: Report, ledger: Dict[str, Any]) -> List[str]:
    printed = collections.Counter(report.live)
    recorded = collections.Counter((int(e["address"], 16), e["size"], e["kind"], e["device"])
                                   for e in ledger.get("live", []))
    if printed == recorded:
        return []

    def fmt(c: collections.Counter) -> str:
        return "".join(f"    {n} x 0x{a:x} {s} {k} {d}\n"
                       for (a, s, k, d), n in sorted(c.items()))
    return ["the LIVE lines printed and the exit ledger differ\n"
            f"  printed, not in the ledger:\n{fmt(printed - recorded)}"
            f"  in the ledger, not printed:\n{fmt(recorded - printed)}"]


def check_run(expect: Dict[str, Any], run: RunResult) -> List[str]:
    """Every mismatch between the run and its expectation, as readable text."""
    problems: List[str] = []
    want_code = expect.get("exit_code", 0)
    if run.returncode != want_code:
        problems.append(f"exit code is {run.returncode}, expected {want_code}")
    reports, report_problems = parse_reports(run.stdout)
    problems += report_problems
    ledgers, ledger_problems = load_ledgers(run.ledger_dir)
    problems += ledger_problems

    processes = expect.get("processes", {})
    pids: Dict[str, int] = {}
    for role in processes:
        if role not in reports:
            problems.append(f"process {role!r} printed no PID line")
        else:
            pids[role] = reports[role].pid
    for role in reports:
        if role not in processes:
            problems.append(f"process {role!r} (pid {reports[role].pid}) is not in the expectation")
    if "main" in reports and reports["main"].pid != run.pid:
        problems.append(f"main printed pid {reports['main'].pid}, but the harness "
                        f"started pid {run.pid}")

    expected_files = {(pids[r], n) for r, p in processes.items() if r in pids
                      for n in p.get("ledgers", {})}
    for pid, name in sorted(set(ledgers) - expected_files):
        role = next((r for r, p in pids.items() if p == pid), "unknown process")
        problems.append(f"unexpected ledger ledger.{pid}.{name}.json ({role})")

    for role, proc in sorted(processes.items()):
        if role not in pids:
            continue
        pid = pids[role]
        for name, want in sorted(proc.get("ledgers", {}).items()):
            ledger = ledgers.get((pid, name))
            where = f"{role} (pid {pid}) ledger {name}"
            if ledger is None:
                problems.append(f"{where}: ledger.{pid}.{name}.json was not written")
                continue
            problems += [f"{where}: {p}" for p in check_well_formed(pid, name, ledger)]
            problems += [f"{where}: {p}" for p in compare_ledger(want, ledger)]
            if name == "exit":
                problems += [f"{where}: {p}"
                             for p in compare_reported_live(reports[role], ledger)]
    return problems


# --- command line --------------------------------------------------------------

def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", help="test program (executable or .py)")
    parser.add_argument("expect", help="its expectation file (.expect.json)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter for .py programs")
    parser.add_argument("--keep", action="store_true",
                        help="keep the ledger directory even on success")
    return parser.parse_args(argv)


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    with open(args.expect, encoding="utf-8") as f:
        expect = json.load(f)
    mistakes = validate_expectation(expect)
    if mistakes:
        print(f"ERROR {args.expect}: the expectation file is malformed")
        for m in mistakes:
            print(f"- {m}")
        return 1
    ledger_dir = tempfile.mkdtemp(prefix="gmt-ledgers-")
    run = run_program(args.program, args.python, expect.get("env", {}), ledger_dir)
    problems = check_run(expect, run)
    name = os.path.basename(args.expect)
    if problems:
        print(f"FAIL {name}: {len(problems)} problem(s)")
        for p in problems:
            print(f"- {p}")
        print(f"--- program stdout ---\n{run.stdout}--- program stderr ---\n{run.stderr}"
              f"--- ledgers kept in {ledger_dir}")
        return 1
    print(f"PASS {name} ({len(run.stdout.splitlines())} report lines)")
    if run.stderr:
        print(f"--- program stderr ---\n{run.stderr}")
    if args.keep:
        print(f"ledgers kept in {ledger_dir}")
    else:
        shutil.rmtree(ledger_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
