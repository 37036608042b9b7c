#!/usr/bin/env python3
"""The leak check on tests/preload/leak_classes.c, against ground truth: the
EXPECT lines the program prints (address, class, bytes, what) and the
simulator's exit ledger (the live set). Modes:

- default: GPUMEMTRACE_LEAK_CHECK=1 and a suppressions file naming the
  workspace: exit status 23; the exit snapshot's "leaks" has every live
  allocation of the ledger exactly once, each in its expected class (the
  global, the allocation only a global's pointer into its middle refers to
  (from global 'inner'), the heap block, the overwritten device and managed pointers, the
  caching allocator's segment by the built-in rule, the workspace suppressed
  by the file's rule at its line); totals and counted bytes add up; the growth
  loop is the one suspect; the stderr report says each (the referenced ones
  do not count: LeakSanitizer's default) and the SUMMARY numbers; in every
  mode that scans, the walk of the driver's
  bookkeeping starts from the driver's and runtime's data alone (libcuda*,
  never the tracer's) and reads no byte twice (walked_bytes <=
  excluded_bytes);
- exitcode: GPUMEMTRACE_LEAK_EXITCODE=42 → 42;
- status-kept: the program exits with 3 → 3, and the report says it is kept;
- snapshot-only: no GPUMEMTRACE_LEAK_CHECK: status 0, no report, the exit
  snapshot has the same classes;
- classes-leaked: GPUMEMTRACE_LEAK_CLASSES=leaked, the default spelled out
  (LeakSanitizer's reading): only the leaked bytes count — in every mode but
  strict;
- strict: GPUMEMTRACE_LEAK_CLASSES=leaked,referenced: the global and the heap
  block count too, and the report names the global;
- no-scan: GPUMEMTRACE_LEAK_SCAN=0: everything not cached is 'leaked', the
  scan says why it did not run;
- bad-suppressions: a malformed file: one warning naming FILE:LINE, the
  report says the rules were not applied, the workspace counts;
- fifo-suppressions: GPUMEMTRACE_SUPPRESSIONS names a FIFO nobody writes to:
  the program must not hang in its first CUDA call; one warning says it is
  not a regular file, and the rest is as for bad-suppressions;
- no-builtins: GPUMEMTRACE_LEAK_BUILTINS=0: the segment counts as referenced;
- no-file-dir, no-file-limit: the exit snapshot cannot be written (no such
  directory; a 1 KiB file-size limit, SIGXFSZ at its default action): the
  report and the exit status as when it can, one warning, nothing left;
- clean: the program frees everything that would count (only the cache and
  the suspect stay): status 0, the report lists no leak but names the suspect.

Usage: check_leaks.py PROGRAM --lib LIBGPUMEMTRACE --mode MODE
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "schema"))
import schema_check  # noqa: E402

MIB = 1024 * 1024


def limit_file_size(limit: int) -> None:
    """In the child: RLIMIT_FSIZE with SIGXFSZ at its default action (as
    `ulimit -f` leaves it; Python itself ignores it)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def run(program: str, lib: str, workdir: str, env_extra: dict[str, str],
        args: list[str], fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GMTSIM_") and not k.startswith("GPUMEMTRACE_")}
    env["GMTSIM_LEDGER_DIR"] = os.path.join(workdir, "ledgers")
    env["GPUMEMTRACE_DIR"] = os.path.join(workdir, "snapshots")
    env["GPUMEMTRACE_SNAPSHOT_ON"] = "exit"
    os.makedirs(env["GMTSIM_LEDGER_DIR"])
    os.makedirs(env["GPUMEMTRACE_DIR"])
    preload = [lib]
    asan = os.environ.get("GMT_TEST_ASAN_RUNTIME", "")
    if asan:
        preload.insert(0, asan)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    env["LD_PRELOAD"] = " ".join(preload)
    env.update(env_extra)
    proc = subprocess.Popen([program] + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=None if fsize is None else lambda: limit_file_size(fsize))
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        where = hang_report(proc.pid)
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(killed after {TIMEOUT_S} s; where its threads were:)\n{where}"
        return subprocess.CompletedProcess(proc.args, -9, out, err)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


TIMEOUT_S = 100  # below the meson test timeout (120 s), so that a hang is reported with its place


def hang_report(pid: int) -> str:
    """Where each thread of a hung process is: the kernel's view (its system
    call and wait channel), and the stacks gdb gives where gdb is installed."""
    lines = []
    for task in sorted(glob.glob(f"/proc/{pid}/task/*")):
        def read(name: str) -> str:
            try:
                with open(os.path.join(task, name), encoding="utf-8", errors="replace") as f:
                    return f.read().strip()
            except OSError as e:
                return f"({e.strerror})"
        lines.append(f"thread {os.path.basename(task)} {read('comm')}: wchan {read('wchan')}, syscall {read('syscall')}")
    gdb = shutil.which("gdb")
    if gdb is not None:
        r = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60, check=False)
        lines += [line for line in r.stdout.splitlines() if line.startswith(("Thread", "#"))]
    return "\n".join(lines)


REPORT_LINE = re.compile(r"^gpumemtrace: (SUMMARY|Leaked|Referenced|Not counted|Suppressed|Leak suspect|leak check)")


def no_file_problems(a: argparse.Namespace) -> list[str]:
    """no-file-dir, no-file-limit: the exit snapshot cannot be written (its
    directory does not exist; a 1 KiB file-size limit): the leak verdict,
    the report and the exit status must be those of a run that could write
    it, beside one "cannot write a snapshot" warning."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="gmt-leaks-") as work:
        written = run(a.program, a.lib, os.path.join(work, "written"), {"GPUMEMTRACE_LEAK_CHECK": "1"}, [])
        env = {"GPUMEMTRACE_LEAK_CHECK": "1"}
        fsize = None
        if a.mode == "no-file-dir":
            env["GPUMEMTRACE_DIR"] = os.path.join(work, "absent")
        else:
            fsize = 1024
        # The simulator writes no ledger here: the limit is for the tracer.
        env["GMTSIM_LEDGER_DIR"] = ""
        failed = run(a.program, a.lib, os.path.join(work, "failed"), env, [], fsize=fsize)
        sys.stderr.write(failed.stderr)
        if written.returncode != 23:
            problems.append(f"the run that could write its snapshot exits {written.returncode}, 23 expected")
        if failed.returncode != written.returncode:
            problems.append(f"exit status {failed.returncode} without the file, {written.returncode} with it")
        want = [line for line in written.stderr.splitlines() if REPORT_LINE.match(line)]
        got = [line for line in failed.stderr.splitlines() if REPORT_LINE.match(line)]
        if not want or got != want:
            problems.append(f"the report differs without the file: {got[:3]}, expected {want[:3]}")
        warned = [line for line in failed.stderr.splitlines() if "cannot write a snapshot" in line]
        if len(warned) != 1:
            problems.append(f"{len(warned)} 'cannot write a snapshot' warnings, 1 expected")
        left = os.listdir(os.path.join(work, "failed", "snapshots"))
        if left:
            problems.append(f"left in the snapshot directory: {left}")
    return problems


def expectations(stdout: str) -> dict[int, tuple[str, int, str]]:
    out = {}
    for line in stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[0] == "EXPECT":
            out[int(f[1], 16)] = (f[2], int(f[3]), f[4])
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--lib", required=True)
    ap.add_argument("--mode", required=True)
    a = ap.parse_args()
    problems: list[str] = []

    def check(what: str, cond: bool, detail: str = "") -> None:
        if not cond:
            problems.append(what + (f": {detail}" if detail else ""))

    if a.mode in ("no-file-dir", "no-file-limit"):
        problems = no_file_problems(a)
        for prob in problems:
            print("FAIL " + prob, file=sys.stderr)
        if not problems:
            print(f"ok: {a.mode}")
        return 1 if problems else 0

    with tempfile.TemporaryDirectory(prefix="gmt-leaks-") as work:
        supp = os.path.join(work, "supp.txt")
        if a.mode == "fifo-suppressions":
            os.mkfifo(supp)
        else:
            with open(supp, "w", encoding="utf-8") as f:
                if a.mode == "bad-suppressions":
                    f.write("# rules\nleak:workspace_create\nleek:typo\n")
                else:
                    f.write("# the test's rules\n\n  leak:no_such_function_anywhere  \nleak:workspace_create\n")
        env = {"GPUMEMTRACE_LEAK_CHECK": "1", "GPUMEMTRACE_SUPPRESSIONS": supp}
        args: list[str] = []
        want_status = 23
        mode = a.mode
        if mode == "exitcode":
            env["GPUMEMTRACE_LEAK_EXITCODE"] = "42"
            want_status = 42
        elif mode == "status-kept":
            args = ["--status", "3"]
            want_status = 3
        elif mode == "snapshot-only":
            del env["GPUMEMTRACE_LEAK_CHECK"]
            want_status = 0
        elif mode == "classes-leaked":
            env["GPUMEMTRACE_LEAK_CLASSES"] = "leaked"
        elif mode == "strict":
            env["GPUMEMTRACE_LEAK_CLASSES"] = "leaked,referenced"
        elif mode == "no-scan":
            env["GPUMEMTRACE_LEAK_SCAN"] = "0"
        elif mode == "no-builtins":
            env["GPUMEMTRACE_LEAK_BUILTINS"] = "0"
        elif mode == "clean":
            args = ["--clean"]
            want_status = 0
        elif mode not in ("default", "bad-suppressions", "fifo-suppressions"):
            print(f"unknown mode {mode}", file=sys.stderr)
            return 2

        p = run(a.program, a.lib, work, env, args)
        sys.stderr.write(p.stderr)
        check("exit status", p.returncode == want_status, f"{p.returncode}, expected {want_status}")
        expect = expectations(p.stdout)
        snaps = glob.glob(os.path.join(work, "snapshots", "*.exit.*.json"))
        ledgers = glob.glob(os.path.join(work, "ledgers", "ledger.*.exit.json"))
        if len(snaps) != 1 or len(ledgers) != 1:
            print(f"FAIL: {len(snaps)} exit snapshots, {len(ledgers)} exit ledgers (expected 1 each)",
                  file=sys.stderr)
            return 1
        problems += schema_check.validate(snaps)
        with open(snaps[0], encoding="utf-8") as f:
            snap: dict[str, Any] = json.load(f)
        with open(ledgers[0], encoding="utf-8") as f:
            ledger = json.load(f)
        leaks = snap.get("leaks")
        if leaks is None:
            print("FAIL: the exit snapshot has no leaks section", file=sys.stderr)
            return 1

        # Every live allocation of the ledger exactly once among the sites.
        live = {int(e["address"], 16): e for e in ledger["live"]}
        seen: dict[int, dict[str, Any]] = {}
        for site in leaks["sites"]:
            for addr in site["addresses"]:
                a_ = int(addr, 16)
                check(f"{addr} in one site only", a_ not in seen)
                seen[a_] = site
        check("sites hold the ledger's live set", sorted(seen) == sorted(live),
              f"sites {sorted(map(hex, seen))}, ledger {sorted(map(hex, live))}")
        check("the program's expectations are live", set(expect) <= set(live),
              f"{sorted(map(hex, set(expect) - set(live)))} not in the ledger")
        check("one expectation per live allocation", set(expect) == set(live),
              f"expected {sorted(map(hex, expect))}, live {sorted(map(hex, live))}")

        counted_classes = {"leaked", "referenced"} if mode == "strict" else {"leaked"}
        check("classes listed", set(leaks["classes"]) == counted_classes, str(leaks["classes"]))
        scanned = mode != "no-scan"
        check("scan done", leaks["scan"]["done"] == scanned, json.dumps(leaks["scan"]))
        if not scanned:
            check("scan says why", "GPUMEMTRACE_LEAK_SCAN=0" in (leaks["scan"]["why"] or ""))
        else:
            # The driver's bookkeeping is found from the driver's data alone,
            # reading each byte of it once; never from the tracer's.
            sc = leaks["scan"]
            check("bookkeeping walked from the driver alone",
                  "libcuda.so.1" in sc["bookkeeping_modules"]
                  and all(m.startswith(("libcuda", "libnvidia-")) for m in sc["bookkeeping_modules"]),
                  json.dumps(sc))
            check("no byte of the bookkeeping read twice", 0 < sc["walked_bytes"] <= sc["excluded_bytes"],
                  json.dumps(sc))

        counted_bytes = counted_count = 0
        for addr, (cls, size, what) in expect.items():
            site = seen.get(addr)
            if site is None:
                continue
            want_cls, want_supp = cls, None
            if what == "suppressed" and mode not in ("bad-suppressions", "fifo-suppressions"):
                want_supp = "leak:workspace_create"
            if what == "cache" and mode == "no-builtins":
                want_cls = "referenced"
            if not scanned and want_cls == "referenced":
                want_cls = "leaked"
            check(f"{what} {addr:#x} class", site["class"] == want_cls, f"{site['class']}, expected {want_cls}")
            check(f"{what} {addr:#x} suppressed_by", site["suppressed_by"] == want_supp,
                  f"{site['suppressed_by']}, expected {want_supp}")
            check(f"{what} {addr:#x} size", live[addr]["size"] == size)
            counted = want_supp is None and want_cls in counted_classes
            check(f"{what} {addr:#x} counted", site["counted"] == counted)
            if counted:
                counted_bytes += size
                counted_count += 1
            if what == "global" and scanned:
                ref = site["referenced_from"] or {}
                check("global reference", ref.get("region") == "global" and "'kept'" in ref.get("what", ""),
                      json.dumps(ref))
            if what == "interior" and scanned:
                ref = site["referenced_from"] or {}
                check("interior reference", ref.get("region") == "global" and "'inner'" in ref.get("what", ""),
                      json.dumps(ref))
            if what == "heap" and scanned:
                ref = site["referenced_from"] or {}
                check("heap reference", ref.get("region") == "heap", json.dumps(ref))
            if what in ("device", "managed") and scanned:
                check(f"{what}: no reference", site["referenced_from"] is None, json.dumps(site["referenced_from"]))
            if what == "cache" and mode != "no-builtins":
                check("cache rule", site["rule"] == "cached:CUDACachingAllocator" and site["rule_source"] == "built-in",
                      f"{site['rule']} {site['rule_source']}")
            if what == "suppressed" and want_supp:
                check("suppression source", site["rule_source"] == f"{supp}:4", str(site["rule_source"]))
        tot = leaks["totals"]["counted"]
        check("counted total", (tot["count"], tot["bytes"]) == (counted_count, counted_bytes),
              f"{tot}, expected {counted_count} allocations, {counted_bytes} bytes")
        all_bytes = sum(leaks["totals"][k]["bytes"] for k in ("leaked", "referenced", "cached", "suppressed"))
        check("totals add up to the live bytes", all_bytes == sum(e["size"] for e in live.values()))
        check("leaks.exit_status", leaks["exit_status"] == (3 if mode == "status-kept" else 0),
              str(leaks["exit_status"]))

        # The growth loop: the one suspect (no other site kept growing),
        # never a leak.
        growth = [s for s in leaks["suspects"] if s["peak_bytes"] >= 16 * MIB and s["live_bytes"] == 0]
        check("growth suspect", len(growth) == 1 and len(leaks["suspects"]) == 1, json.dumps(leaks["suspects"]))
        sites = {s["stack"]: s for s in snap.get("sites", [])}
        for g in growth:
            check("growth site marked suspect", sites.get(g["stack"], {}).get("suspect") is True)

        # The report.
        err = p.stderr
        report = mode != "snapshot-only"
        if report and counted_count > 0:
            summary = re.search(r"^gpumemtrace: SUMMARY: .* in (\d+) allocations? count as leaks", err, re.M)
            check("SUMMARY line", summary is not None and int(summary.group(1)) == counted_count, err[-400:])
            if scanned and "referenced" in counted_classes:
                check("report names the global", "global 'kept'" in err)
                check("report: Leaked", re.search(r"^gpumemtrace: Leaked: 5\.00 MiB in 1 allocation of device memory", err, re.M) is not None)
            check("report has frames", re.search(r"^gpumemtrace:     #\d+ 0x[0-9a-f]+ in ", err, re.M) is not None)
        if report:
            check("report names the suspect", re.search(r"^gpumemtrace: Leak suspect: grow_step", err, re.M) is not None)
        if not report:
            check("no report without GPUMEMTRACE_LEAK_CHECK", "SUMMARY" not in err and "Leak suspect" not in err)
        if mode == "status-kept":
            check("status kept line", "the program's exit status 3 is kept" in err)
        if mode == "fifo-suppressions":
            check("fifo warning", re.search(r"GPUMEMTRACE_SUPPRESSIONS: .*supp\.txt: cannot read suppressions: "
                                            r"not a regular file \(a FIFO\)", err) is not None)
            check("report says not applied", "suppressions not applied" in err)
        if mode == "bad-suppressions":
            check("bad file warning", re.search(r"GPUMEMTRACE_SUPPRESSIONS: .*supp\.txt:3: expected leak:PATTERN or cached:PATTERN, got 'leek:typo'", err) is not None)
            check("report says not applied", "suppressions not applied" in err)
        if mode == "clean":
            check("clean: nothing counted", counted_count == 0 and re.search(r"^gpumemtrace: SUMMARY: 0 B in 0 allocations", err, re.M) is not None, err[-300:])

    for prob in problems:
        print("FAIL " + prob, file=sys.stderr)
    if not problems:
        print(f"ok: {a.mode}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
