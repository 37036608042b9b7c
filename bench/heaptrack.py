#!/usr/bin/env python3
"""gpumemtrace beside heaptrack (issue 8): the cost each tracer adds to one
allocation+free pair of the same workload shape, measured in one invocation.

heaptrack (Debian's `heaptrack` package) traces malloc/free; gpumemtrace traces
the simulated driver's cuMemAlloc_v2/cuMemFree_v2. bench/malloc_free and
bench/alloc_free make the same pairs from the same 70-frame call chain, each
timing its own loop. Every configuration runs untraced and traced, alternating,
`repeat` times; the tables give medians:

- heaptrack as its launcher runs it: libheaptrack_preload.so in the program,
  writing to a named pipe read by heaptrack_interpret, whose output a
  compressor writes to a file. The program's loop pays the unwinding, the
  trace-tree lookup, the text lines and the write(2) into the pipe (blocking
  when the interpreter falls behind); the interpreter and the compressor run
  beside it, on the other core, and are reported separately (their CPU time
  per pair, and how long they go on after the program has exited).
- gpumemtrace with stacks at heaptrack's depth (the frames heaptrack records,
  read back from its own output) and with stacks off. Its background thread
  runs beside the program too; its CPU time is in the process's.

Beside the wall time per pair, "added CPU" counts every CPU second the traced
run used over the untraced one (program, threads, helper processes) per pair.
Unless --quick or --no-callgrind, instructions per pair as well (callgrind),
repeatable where the timings are not: the whole traced process and, for
heaptrack, the interpreter on the same data.

Target (issue 8): gpumemtrace's added cost at most half of heaptrack's at
equal stack depth.

Usage: bench/heaptrack.py [--build DIR] [--quick] [--pairs N] [--repeat N]
                          [--threads N,...] [--no-callgrind] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
CHAIN = 70          # frames below the allocating call, as in bench/run.py
SIZE = 1024         # bytes per allocation, alloc_free's default
WARMUP = 20000      # untimed pairs first in both programs: past each tracer's start-up
TARGET = 0.5        # gpumemtrace added / heaptrack added, issue 8


class HeaptrackMissing(RuntimeError):
    """heaptrack (or a part of it) is not installed."""


def find_heaptrack() -> dict[str, str]:
    """Where the launcher, its preload library and its interpreter are, found as
    the launcher itself finds them (../lib/heaptrack relative to it), its
    version, and the compressor the launcher would use."""
    launcher = shutil.which("heaptrack")
    if not launcher:
        raise HeaptrackMissing("heaptrack is not installed: install Debian's `heaptrack` package "
                               "(apt-get install heaptrack)")
    lib = os.path.join(os.path.dirname(os.path.realpath(launcher)), "..", "lib", "heaptrack")
    found = {"launcher": launcher,
             "preload": os.path.realpath(os.path.join(lib, "libheaptrack_preload.so")),
             "interpret": os.path.realpath(os.path.join(lib, "libexec", "heaptrack_interpret"))}
    for what in ("preload", "interpret"):
        if not os.path.isfile(found[what]):
            raise HeaptrackMissing(f"heaptrack's {os.path.basename(found[what])} is missing (looked in {lib}): "
                                   "install Debian's `heaptrack` package (apt-get install heaptrack)")
    out = subprocess.run([launcher, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, check=False).stdout
    m = re.search(r"heaptrack\s+(\S+)", out)
    found["version"] = m.group(1) if m else "unknown"
    # The launcher compresses with zstd when it has it, else gzip.
    found["compressor"] = shutil.which("zstd") or shutil.which("gzip") or ""
    return found


def base_env(build: str, memory: str = "64G") -> dict[str, str]:
    """The environment of an untraced run: the simulated driver with `memory`
    of device memory (valgrind cannot map the default 64 GiB arena)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD", "DUMP_HEAPTRACK"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "sim", "driver")
    env["GMTSIM_MEMORY"] = memory
    return env


def gmt_env(build: str, depth: int, snapshot_dir: str | None = None, memory: str = "64G") -> dict[str, str]:
    env = base_env(build, memory)
    env["LD_PRELOAD"] = os.path.join(build, "src", "libgpumemtrace.so")
    env["GPUMEMTRACE_STACK_DEPTH"] = str(depth)
    env["GPUMEMTRACE_SNAPSHOT_ON"] = "exit" if snapshot_dir else "oom"
    env["GPUMEMTRACE_DIR"] = snapshot_dir or tempfile.gettempdir()
    return env


def timing(out: str) -> dict[str, float]:
    """ns_per_pair (and malloc_free's warmup_s) from a program's output."""
    got = {line.split()[0]: float(line.split()[1]) for line in out.splitlines()
           if line.startswith(("ns_per_pair ", "warmup_s "))}
    if "ns_per_pair" not in got:
        raise RuntimeError(f"no timing in the output: {out!r}")
    return {"ns": got["ns_per_pair"], "warmup_s": got.get("warmup_s", 0.0)}


def reap(p: subprocess.Popen) -> tuple[float, float]:
    """Waits for p; returns (CPU seconds it and its waited-for children used,
    monotonic time it was reaped)."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime, time.monotonic()


def start(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, Any]:
    """Starts a benchmark program, its output going to one temporary file
    (read after reap(): a pipe could fill and stop it)."""
    out = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT), out


def finish(p: subprocess.Popen, out: Any) -> tuple[float, float, str]:
    """Reaps a program start() started: (CPU seconds, time reaped, output)."""
    cpu, when = reap(p)
    out.seek(0)
    text = out.read()
    out.close()
    return cpu, when, text


def run_program(cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run of a benchmark program alone: its ns per pair and CPU seconds."""
    p, f = start(cmd, env)
    cpu, _, out = finish(p, f)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({p.returncode}): {out[-2000:]}")
    return {**timing(out), "cpu_s": cpu, "helper_cpu_s": 0.0, "drain_s": 0.0, "bytes": 0}


def run_heaptrack(ht: dict[str, str], cmd: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run under heaptrack, set up as heaptrack's launcher (1.4) sets it up:
    a named pipe, `heaptrack_interpret < pipe | compressor > file` started
    first, the program with LD_PRELOAD and DUMP_HEAPTRACK_OUTPUT naming the
    pipe. Done here rather than through the launcher so that the program's
    CPU time and the interpreter's can be told apart."""
    with tempfile.TemporaryDirectory(prefix="gmt-bench-heaptrack-") as d:
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        with open(os.path.join(d, "heaptrack.out"), "wb") as sink:
            # The shell opens the pipe for the interpreter and blocks there
            # until the program opens it for writing, as the launcher's
            # `"$INTERPRETER" < $pipe` does.
            interp = subprocess.Popen(["sh", "-c", 'exec "$0" < "$1"', ht["interpret"], fifo],
                                      stdout=subprocess.PIPE if ht["compressor"] else sink,
                                      stderr=subprocess.DEVNULL)
            comp = None
            if ht["compressor"]:
                comp = subprocess.Popen([ht["compressor"], "-c"], stdin=interp.stdout, stdout=sink,
                                        stderr=subprocess.DEVNULL)
                interp.stdout.close()
            penv = dict(env)
            penv["LD_PRELOAD"] = ht["preload"]
            penv["DUMP_HEAPTRACK_OUTPUT"] = fifo
            prog, f = start(cmd, penv)
            cpu, exited, out = finish(prog, f)
            # Should the program never have opened the pipe, open it once
            # so the interpreter's shell is not left blocked (ENXIO when no
            # reader waits any more).
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            icpu, done = reap(interp)
            ccpu, done = reap(comp) if comp else (0.0, done)
        size = os.path.getsize(os.path.join(d, "heaptrack.out"))
    if prog.returncode != 0 or interp.returncode != 0:
        raise RuntimeError(f"{cmd} under heaptrack failed ({prog.returncode}, interpreter "
                           f"{interp.returncode}): {out[-2000:]}")
    return {**timing(out), "cpu_s": cpu, "helper_cpu_s": icpu + ccpu,
            "drain_s": done - exited, "bytes": size}


def heaptrack_depth(build: str, ht: dict[str, str]) -> int:
    """The frames heaptrack records for bench/malloc_free's allocation, read
    back from its raw output: `t IP PARENT` lines build its trace tree (one
    node per new address, numbered from 1), `+ SIZE NODE PTR` lines name the
    innermost node of each allocation's trace."""
    with tempfile.TemporaryDirectory(prefix="gmt-bench-heaptrack-") as d:
        raw = os.path.join(d, "raw")
        env = base_env(build)
        env.update({"LD_PRELOAD": ht["preload"], "DUMP_HEAPTRACK_OUTPUT": raw})
        subprocess.run([os.path.join(build, "bench", "malloc_free"), "1", "200", str(CHAIN)], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True, timeout=120)
        with open(raw, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    parent: dict[int, int] = {}
    for line in lines:
        if line.startswith("t "):
            parent[len(parent) + 1] = int(line.split()[2], 16)
    nodes = collections.Counter(line.split()[2] for line in lines if line.startswith("+ "))
    if not nodes:
        raise RuntimeError("heaptrack recorded no allocation")
    node, depth = int(nodes.most_common(1)[0][0], 16), 0
    while node:
        node, depth = parent[node], depth + 1
    return depth


def gmt_depth(build: str, depth: int) -> int:
    """The frames gpumemtrace records for bench/alloc_free's allocation at
    GPUMEMTRACE_STACK_DEPTH=depth (raw addresses: inlined frames not counted),
    read back from an exit snapshot."""
    with tempfile.TemporaryDirectory(prefix="gmt-bench-heaptrack-") as d:
        subprocess.run([os.path.join(build, "bench", "alloc_free"), "1", "100", str(CHAIN)],
                       env=gmt_env(build, depth, d), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       check=True, timeout=120)
        with open(glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))[0], encoding="utf-8") as f:
            snap = json.load(f)
    return max(sum(1 for fr in s["frames"] if not fr["inlined"]) for s in snap["stacks"])


# --- instructions (callgrind) -------------------------------------------------

def valgrind_tool(tool: str) -> tuple[str, str] | None:
    """The tool binary and library directory of an installed valgrind."""
    launcher = shutil.which("valgrind")
    if not launcher:
        return None
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    root = os.path.dirname(os.path.dirname(os.path.realpath(launcher)))
    for libdir in (os.path.join(root, "libexec", "valgrind"), os.path.join(root, "lib", "valgrind")):
        binary = os.path.join(libdir, f"{tool}-{arch}-linux")
        if os.path.isfile(binary):
            return binary, libdir
    return None


def callgrind_ir(cmd: list[str], env: dict[str, str], stdin_path: str | None = None) -> int:
    """Instructions the whole process executed (every thread), under callgrind.

    NOTE: the tool binary is started directly, not through the `valgrind`
    launcher. The launcher is a dynamically linked program, so an LD_PRELOAD
    meant for the client is loaded into it first; heaptrack's preload library
    unsets LD_PRELOAD in any process it starts in (so that children are not
    traced: heaptrack_preload.cpp), and the client would then run without it.
    The tool is static: LD_PRELOAD reaches only the client. VALGRIND_LAUNCHER
    and VALGRIND_LIB are what the launcher would have set; --tool= must still
    be given (without it the core preloads memcheck's malloc replacement, and
    the client's malloc breaks). --fair-sched=yes: valgrind runs one thread at
    a time, and by default a thread that never blocks may keep the CPU; then
    gpumemtrace's consumer never learns the unwinding rules during the warm-up
    and every walk of the counted pairs is libunwind's."""
    found = valgrind_tool("callgrind")
    if not found:
        raise RuntimeError("valgrind is not installed (Debian's `valgrind` package)")
    binary, libdir = found
    with tempfile.TemporaryDirectory(prefix="gmt-bench-cg-") as d:
        out = os.path.join(d, "callgrind.out")
        venv = dict(env)
        venv.update({"VALGRIND_LAUNCHER": shutil.which("valgrind") or "valgrind", "VALGRIND_LIB": libdir})
        with open(stdin_path or os.devnull, "rb") as stdin:
            r = subprocess.run([binary, "--tool=callgrind", "--fair-sched=yes", f"--callgrind-out-file={out}", *cmd], env=venv,
                               stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               timeout=1800)
        if r.returncode != 0:
            raise RuntimeError(f"{cmd} under callgrind failed ({r.returncode}): {r.stderr[-2000:]}")
        with open(out, encoding="utf-8") as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise RuntimeError("no instruction total in callgrind's output")


def instructions(build: str, ht: dict[str, str], depth: int, small: int, large: int) -> dict[str, Any]:
    """Instructions per pair, one thread: runs of `small` and `large` pairs,
    the difference taken so that start-up and exit cancel out."""
    malloc_free = os.path.join(build, "bench", "malloc_free")
    alloc_free = os.path.join(build, "bench", "alloc_free")
    per: dict[str, float] = {}

    def argv(prog: str, n: int) -> list[str]:
        # The same warm-up before both programs' pairs (see WARMUP).
        if prog == alloc_free:
            return [prog, "1", str(n), str(CHAIN), str(SIZE), "2", str(WARMUP)]
        return [prog, "1", str(n), str(CHAIN), str(SIZE), str(WARMUP)]

    def diff(name: str, prog: str, env: dict[str, str]) -> None:
        ir = [callgrind_ir(argv(prog, n), env) for n in (small, large)]
        per[name] = (ir[1] - ir[0]) / (large - small)

    diff("malloc_untraced", malloc_free, base_env(build, "2G"))
    with tempfile.TemporaryDirectory(prefix="gmt-bench-cg-") as d:
        # The preload library writes its raw data to a plain file here (it
        # takes any path), which the interpreter then reads under callgrind.
        raws, ir = [], []
        for n in (small, large):
            env = base_env(build, "2G")
            raws.append(os.path.join(d, f"raw.{n}"))
            env.update({"LD_PRELOAD": ht["preload"], "DUMP_HEAPTRACK_OUTPUT": raws[-1]})
            ir.append(callgrind_ir(argv(malloc_free, n), env))
        per["heaptrack_program"] = (ir[1] - ir[0]) / (large - small)
        ir = [callgrind_ir([ht["interpret"]], base_env(build, "2G"), raw) for raw in raws]
        per["heaptrack_interpret"] = (ir[1] - ir[0]) / (large - small)
    diff("cuda_untraced", alloc_free, base_env(build, "2G"))
    diff("gmt_depth", alloc_free, gmt_env(build, depth, memory="2G"))
    diff("gmt_off", alloc_free, gmt_env(build, 0, memory="2G"))
    ht_added = per["heaptrack_program"] - per["malloc_untraced"]
    gmt_added = per["gmt_depth"] - per["cuda_untraced"]
    return {"pairs": [small, large], "depth": depth,
            **{k: round(v, 1) for k, v in per.items()},
            "heaptrack_added": round(ht_added, 1),
            "heaptrack_added_with_interpret": round(ht_added + per["heaptrack_interpret"], 1),
            "gmt_depth_added": round(gmt_added, 1),
            "gmt_off_added": round(per["gmt_off"] - per["cuda_untraced"], 1),
            "ratio": round(gmt_added / ht_added, 2) if ht_added > 0 else None,
            "ratio_with_interpret": round(gmt_added / (ht_added + per["heaptrack_interpret"]), 2)}


# --- the comparison -----------------------------------------------------------

def compare(build: str, quick: bool, repeat: int, pairs: int | None = None,
            threads: tuple[int, ...] | None = None, callgrind: bool | None = None) -> dict[str, Any]:
    """Runs the comparison; returns the data (see rows() and verdict()).
    quick: small sizes, one thread, no CPU times or instructions (a smoke
    test: the numbers are rough). Raises HeaptrackMissing when heaptrack is
    not installed."""
    build = os.path.abspath(build)
    ht = find_heaptrack()
    pairs = pairs or (5000 if quick else 200000)
    threads = threads or ((1,) if quick else (1, 2))
    if callgrind is None:
        callgrind = not quick and valgrind_tool("callgrind") is not None
    # Equal depth: gpumemtrace records as many frames as heaptrack does
    # (Trace::MAX_SIZE, 64, less the 2 of its own that it skips: 62).
    depth = recorded = heaptrack_depth(build, ht)
    gmt_recorded = gmt_depth(build, depth)
    malloc_free = os.path.join(build, "bench", "malloc_free")
    alloc_free = os.path.join(build, "bench", "alloc_free")

    def malloc_cmd(t: int, n: int) -> list[str]:
        return [malloc_free, str(t), str(n), str(CHAIN), str(SIZE), str(WARMUP)]

    def cuda_cmd(t: int, n: int) -> list[str]:
        return [alloc_free, str(t), str(n), str(CHAIN), str(SIZE), "2", str(WARMUP)]

    configs: dict[str, Callable[[int, int], dict[str, float]]] = {
        "malloc_untraced": lambda t, n: run_program(malloc_cmd(t, n), base_env(build)),
        "malloc_heaptrack": lambda t, n: run_heaptrack(ht, malloc_cmd(t, n), base_env(build)),
        "cuda_untraced": lambda t, n: run_program(cuda_cmd(t, n), base_env(build)),
        "cuda_gmt_depth": lambda t, n: run_program(cuda_cmd(t, n), gmt_env(build, depth)),
        "cuda_gmt_off": lambda t, n: run_program(cuda_cmd(t, n), gmt_env(build, 0)),
    }
    # Each configuration also runs with a fifth of the pairs: the CPU time
    # per pair is the difference of the two, so that start-up and exit
    # (heaptrack's interpreter reading symbols, ~0.2 s) cancel out.
    small = pairs // 5 if not quick else 0
    runs: dict[int, dict[str, list[dict[str, float]]]] = {t: {k: [] for k in configs} for t in threads}
    for _ in range(repeat):
        for t in threads:
            for name, run in configs.items():
                full = run(t, pairs)
                if small:
                    part = run(t, small)
                    per = 1e9 / (t * (pairs - small))
                    full["cpu_pair_ns"] = (full["cpu_s"] + full["helper_cpu_s"]
                                           - part["cpu_s"] - part["helper_cpu_s"]) * per
                    full["helper_pair_ns"] = (full["helper_cpu_s"] - part["helper_cpu_s"]) * per
                runs[t][name].append(full)

    def med(t: int, name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[t][name])

    def cpu(t: int, name: str, key: str, minus: str | None = None) -> float | None:
        if not small:
            return None
        return round(med(t, name, key) - (med(t, minus, key) if minus else 0.0), 1)

    timings = []
    for t in threads:
        for what, base, traced in (("heaptrack", "malloc_untraced", "malloc_heaptrack"),
                                   ("gpumemtrace", "cuda_untraced", "cuda_gmt_depth"),
                                   ("gpumemtrace", "cuda_untraced", "cuda_gmt_off")):
            b, tr = med(t, base, "ns"), med(t, traced, "ns")
            timings.append({
                "tracer": what, "threads": t, "stack_depth": 0 if traced == "cuda_gmt_off" else depth,
                "baseline_ns": round(b, 1), "traced_ns": round(tr, 1), "added_ns": round(tr - b, 1),
                "ratio": round(tr / b, 2),
                "added_cpu_ns": cpu(t, traced, "cpu_pair_ns", base),
                "helper_cpu_ns": cpu(t, traced, "helper_pair_ns"),
                "helper_cpu_s": round(med(t, traced, "helper_cpu_s"), 3),
                "helper_after_exit_s": round(med(t, traced, "drain_s"), 3),
                "startup_stall_s": round(med(t, traced, "warmup_s") - med(t, base, "warmup_s"), 3),
                "output_bytes": int(med(t, traced, "bytes"))})

    comparison = []
    single = {r["threads"]: r["baseline_ns"] for r in timings if r["tracer"] == "gpumemtrace"}
    for t in threads:
        by = {(r["tracer"], r["stack_depth"]): r for r in timings if r["threads"] == t}
        h, g = by[("heaptrack", depth)], by[("gpumemtrace", depth)]
        note = None
        if t > 1 and 1 in single and g["baseline_ns"] > 2 * single[1]:
            # The simulator serialises its threads on one lock: untraced,
            # they queue on it, and a tracer's work between calls shortens
            # the queue. The difference is then no cost per event.
            note = (f"not a cost per event: the simulated driver serialises threads (untraced pair "
                    f"{g['baseline_ns']:.0f} ns on {t} threads, {single[1]:.0f} ns on 1)")
        ratio = g["added_ns"] / h["added_ns"] if h["added_ns"] > 0 else None
        cpu_ratio = (g["added_cpu_ns"] / h["added_cpu_ns"]
                     if g["added_cpu_ns"] is not None and h["added_cpu_ns"] and h["added_cpu_ns"] > 0 else None)
        comparison.append({"threads": t, "stack_depth": depth, "heaptrack_added_ns": h["added_ns"],
                           "gpumemtrace_added_ns": g["added_ns"],
                           "ratio": round(ratio, 2) if ratio is not None else None,
                           "heaptrack_added_cpu_ns": h["added_cpu_ns"],
                           "gpumemtrace_added_cpu_ns": g["added_cpu_ns"],
                           "cpu_ratio": round(cpu_ratio, 2) if cpu_ratio is not None else None,
                           "target": TARGET, "met": None if note else ratio is not None and ratio <= TARGET,
                           "note": note})

    result: dict[str, Any] = {
        "heaptrack_version": ht["version"], "heaptrack_compressor": os.path.basename(ht["compressor"]),
        "stack_depth": depth, "heaptrack_recorded_frames": recorded,
        "gpumemtrace_recorded_frames": gmt_recorded, "call_chain": CHAIN, "size": SIZE,
        "pairs_per_thread": pairs, "warmup_pairs": WARMUP, "repeat": repeat, "cpus": os.cpu_count(),
        "quick": quick, "timings": timings, "comparison": comparison}
    if callgrind:
        result["instructions"] = instructions(build, ht, depth, 500 if quick else 2000, 2500 if quick else 12000)
    return result


def judged(met: bool | None) -> str:
    return "not judged" if met is None else "met" if met else "NOT met"


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: one per traced configuration (what, baseline_ns,
    traced_ns, added_ns, ratio: ns per allocation+free pair, medians), then
    the comparison per thread count and in instructions (baseline: heaptrack's
    added cost, traced: gpumemtrace's, ratio: gpumemtrace / heaptrack; the
    note says whether the target is met). Each row also carries bench/run.py's
    keys: baseline, traced, added, unit, note."""
    out = []

    def row(what: str, base: float | None, traced: float | None, added: float | None, ratio: float | None,
            unit: str = "ns", note: str = "") -> None:
        ns = unit == "ns"
        out.append({"what": what, "baseline_ns": base if ns else None, "traced_ns": traced if ns else None,
                    "added_ns": added if ns else None, "ratio": ratio,
                    "baseline": base, "traced": traced, "added": added, "unit": unit, "note": note})

    for r in result["timings"]:
        stacks = "stacks off" if r["stack_depth"] == 0 else f"{r['stack_depth']} frames"
        call = "malloc+free" if r["tracer"] == "heaptrack" else "cuMemAlloc+cuMemFree, simulated"
        note = ""
        if r["tracer"] == "heaptrack":
            note = (f"interpreter+compressor {r['helper_cpu_s']:.2f} s CPU, start-up stall "
                    f"{r['startup_stall_s']:.2f} s (untimed)")
        row(f"{r['tracer']}, {stacks}, {r['threads']} thr ({call})", r["baseline_ns"], r["traced_ns"],
            r["added_ns"], r["ratio"], note=note)
    for c in result["comparison"]:
        met = f"target <= {c['target']}: {judged(c['met'])}"
        row(f"added: gpumemtrace / heaptrack, {c['stack_depth']} frames, {c['threads']} thr",
            c["heaptrack_added_ns"], c["gpumemtrace_added_ns"], None, c["ratio"],
            note=f"{met}; {c['note']}" if c["note"] else met)
    ins = result.get("instructions")
    if ins:
        row(f"added instructions: gpumemtrace / heaptrack, {ins['depth']} frames, 1 thr (callgrind)",
            ins["heaptrack_added"], ins["gmt_depth_added"], None, ins["ratio"], unit="instr",
            note=f"{ins['ratio_with_interpret']} with heaptrack's interpreter; stacks off: "
                 f"{ins['gmt_off_added']:.0f} instr")
    return out


def verdict(result: dict[str, Any]) -> list[str]:
    """The target, one line per thread count (and one for instructions)."""
    lines = []
    for c in result["comparison"]:
        line = (f"{c['threads']} thread(s), {c['stack_depth']} frames: gpumemtrace adds "
                f"{c['gpumemtrace_added_ns']:.1f} ns per pair, heaptrack {c['heaptrack_added_ns']:.1f} ns: "
                f"ratio {c['ratio']} (target <= {c['target']}: {judged(c['met'])})")
        if c["cpu_ratio"] is not None:
            line += (f"; added CPU, helpers included: {c['gpumemtrace_added_cpu_ns']:.1f} vs "
                     f"{c['heaptrack_added_cpu_ns']:.1f} ns, ratio {c['cpu_ratio']}")
        if c["note"]:
            line += f" ({c['note']})"
        lines.append(line)
    ins = result.get("instructions")
    if ins:
        lines.append(f"instructions per pair, 1 thread, {ins['depth']} frames: gpumemtrace adds "
                     f"{ins['gmt_depth_added']:.0f} (stacks off {ins['gmt_off_added']:.0f}), heaptrack's "
                     f"preload adds {ins['heaptrack_added']:.0f} and its interpreter "
                     f"{ins['heaptrack_interpret']:.0f} more: ratio {ins['ratio']} "
                     f"({ins['ratio_with_interpret']} counting the interpreter)")
    return lines


def table(result: dict[str, Any]) -> str:
    def f(v: float | None, spec: str) -> str:
        return format(v, spec) if v is not None else format("-", spec.split(".")[0] + "s")

    lines = [f"{'tracer':<12} {'thr':>3} {'stacks':>6} {'base ns':>8} {'traced ns':>9} {'added ns':>9} "
             f"{'ratio':>6} {'added CPU ns':>12} {'helper CPU ns':>13}"]
    for r in result["timings"]:
        stacks = "off" if r["stack_depth"] == 0 else str(r["stack_depth"])
        lines.append(f"{r['tracer']:<12} {r['threads']:>3} {stacks:>6} {r['baseline_ns']:>8.1f} "
                     f"{r['traced_ns']:>9.1f} {r['added_ns']:>9.1f} {r['ratio']:>6.2f} "
                     f"{f(r['added_cpu_ns'], '>12.1f')} {f(r['helper_cpu_ns'], '>13.1f') if r['tracer'] == 'heaptrack' else format('-', '>13s')}")
    for r in result["timings"]:
        if r["tracer"] == "heaptrack":
            lines.append(f"heaptrack, {r['threads']} thread(s): interpreter and compressor {r['helper_cpu_s']:.3f} s "
                         f"CPU in all, still running {r['helper_after_exit_s']:.3f} s after the program exited; "
                         f"the program stalled {r['startup_stall_s']:.3f} s at start-up (in its untimed "
                         f"warm-up), waiting for the interpreter to read symbols")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--quick", action="store_true", help="small sizes, one thread: a smoke test")
    ap.add_argument("--pairs", type=int, help="pairs per thread for the timings")
    ap.add_argument("--repeat", type=int, help="runs of each configuration (median taken)")
    ap.add_argument("--threads", help="thread counts, comma-separated (default 1,2; --quick 1)")
    ap.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    threads = tuple(int(t) for t in args.threads.split(",")) if args.threads else None
    try:
        result = compare(args.build, args.quick, args.repeat or (1 if args.quick else 5), pairs=args.pairs,
                         threads=threads, callgrind=False if args.no_callgrind else None)
    except HeaptrackMissing as e:
        print(f"bench/heaptrack.py: {e}", file=sys.stderr)
        return 2
    print(f"heaptrack {result['heaptrack_version']} (malloc+free) beside gpumemtrace (cuMemAlloc_v2+cuMemFree_v2, "
          f"simulated driver): {SIZE} B pairs from a call chain {CHAIN} deep, stacks of "
          f"{result['stack_depth']} frames (heaptrack records {result['heaptrack_recorded_frames']}, gpumemtrace "
          f"{result['gpumemtrace_recorded_frames']}); {result['pairs_per_thread']} pairs per thread, median of "
          f"{result['repeat']} runs; ns per pair")
    print(table(result))
    for line in verdict(result):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
