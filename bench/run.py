#!/usr/bin/env python3
"""gpumemtrace's benchmark suite: what the tracer costs, against the simulated
driver, each figure paired with its baseline measured in this same invocation.

- the time added to each allocation+free pair, stacks off and at depths 16 and
  64, with 1, 2, 4 and 8 threads (untraced and traced runs alternate; medians);
- the events per second the tracer records and applies with stacks off, beside
  the calls per second of the untraced program, and how often a producer found
  its ring full or applied events itself;
- no lost events: 8 threads traced, the exit snapshot equal to the simulator's
  ledger (the suite fails otherwise);
- the tracer's memory per live allocation and per unique stack (resident pages,
  measured in a process linking the core);
- writing a snapshot of 10k, 100k and 1M live allocations, beside writing as
  many bytes to a plain file; an exit snapshot symbolising 10k unique stacks,
  beside the same traced run without it;
- the viewer's HTML report of 100k and 1M allocations, beside reading and
  writing the same JSON;
- one stack capture beside an untraced pair; Python frames; the PyTorch
  bootstrap on the PyTorch double (its step hook, the hand-over of its state
  and a dump with the tensor level); the exit leak scan (of filled heaps, of
  a Python process that imported numba, of one that maps 1 GiB of generated
  libraries);
- heaptrack on the same workload, where bench/heaptrack.py and heaptrack are
  present.

It prints one table (what, baseline, traced, added, ratio, note) and writes it,
with every figure behind it, to --json. --quick: small sizes and one run each,
a smoke test whose numbers are rough. Exit status 1 when an event was lost.

Usage: bench/run.py [--build DIR] [--quick] [--pairs N] [--repeat N] [--json FILE]
                    [--no-heaptrack]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "preload"))
import check_trace  # noqa: E402  (the ledger comparison of the preload tests)

THREADS = (1, 2, 4, 8)
DEPTHS = (0, 16, 64)
# The figures the tracer must meet (docs/internals.md, "Targets").
BAR_PAIR_NS = {0: 150.0, 64: 1000.0}
BAR_BYTES_PER_LIVE = 96.0
BAR_SNAPSHOT_1M_S = 2.0
# The exit leak scan of a process that imported numba, and of one that maps
# 1 GiB of libraries.
BAR_SCAN_NUMBA_S = 0.5
BAR_SCAN_LIBS_S = 1.0
STATS = ("ring_full", "producer_drains", "consumer_wakeups", "gap_waits", "gaps_skipped")
# Untimed pairs before each thread's timed ones (bench/alloc_free's WARMUP):
# the timings are of the steady state, after the tracer's consumer has learnt
# the unwinding rules of the loop's frames (src/record/unwind.h).
WARMUP = 2000


# --- running the programs ----------------------------------------------------------

def bench_env(build: str, traced: bool = False, **extra: str) -> dict[str, str]:
    """The environment of one run: nothing inherited of the simulator or the
    tracer, the simulated driver first on the library path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "sim", "driver")
    env["GPUMEMTRACE_DIR"] = tempfile.gettempdir()
    if traced:
        env["LD_PRELOAD"] = os.path.join(build, "src", "libgpumemtrace.so")
    env.update(extra)
    return env


def program(build: str, name: str, *args: Any, env: dict[str, str], timeout: int = 1800) -> str:
    """Runs build/bench/NAME; its standard output. A failure raises."""
    r = subprocess.run([os.path.join(build, "bench", name)] + [str(a) for a in args], env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"bench/{name} {' '.join(map(str, args))} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


def numbers(out: str) -> dict[str, float]:
    """The "name value" lines a benchmark program printed."""
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if len(line.split()) == 2}


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def snapshot_stats(directory: str) -> dict[str, int]:
    """The "stats" of the exit snapshot in directory."""
    snaps = glob.glob(os.path.join(directory, "*.exit.*.json"))
    if len(snaps) != 1:
        raise RuntimeError(f"expected one exit snapshot in {directory}, found {len(snaps)}")
    return check_trace.load(snaps[0])["stats"]


def alloc_free(build: str, threads: int, pairs: int, depth: int | None,
               env: dict[str, str] | None = None) -> tuple[float, dict[str, int] | None]:
    """One run of bench/alloc_free; depth None = untraced; env: more
    settings. Returns the ns per pair and, traced, the exit snapshot's stats
    (the snapshot is written after the timed loops)."""
    with tempfile.TemporaryDirectory(prefix="gmt-bench-") as d:
        extra = {"GMTSIM_MEMORY": "64G", **(env or {})}
        if depth is not None:
            extra.update({"GPUMEMTRACE_STACK_DEPTH": str(depth), "GPUMEMTRACE_SNAPSHOT_ON": "exit",
                          "GPUMEMTRACE_DIR": d})
        out = program(build, "alloc_free", threads, pairs, 70, 1024, 2, WARMUP,
                      env=bench_env(build, depth is not None, **extra))
        ns = [float(line.split()[1]) for line in out.splitlines() if line.startswith("ns_per_pair ")]
        if len(ns) != 1:
            raise RuntimeError(f"no timing in the output of bench/alloc_free: {out!r}")
        return ns[0], snapshot_stats(d) if depth is not None else None


# --- the measurements: each returns data ---------------------------------------------

def pair_cost(build: str, threads: int, pairs: int, depth: int, repeat: int) -> dict[str, Any]:
    """ns per allocation+free pair untraced and traced (medians), and from the
    traced runs' exit snapshots the events recorded per second of the loops
    and the producers' waits."""
    base, traced, rates, calls, waits = [], [], [], [], {k: [] for k in STATS}
    for _ in range(repeat):
        b, _ = alloc_free(build, threads, pairs, None)
        t, stats = alloc_free(build, threads, pairs, depth)
        base.append(b)
        traced.append(t)
        assert stats is not None
        # Each thread timed its own loop of `pairs` pairs; they ran together.
        # The warm-up's events are not of the timed loops.
        rates.append((stats["events"] - 2 * threads * WARMUP) / (t * pairs * 1e-9))
        calls.append(2 * threads / (b * 1e-9))
        for k in STATS:
            waits[k].append(stats[k] / stats["events"] * 1e6)
    b, t = statistics.median(base), statistics.median(traced)
    return {"threads": threads, "stack_depth": depth, "pairs_per_thread": pairs, "repeat": repeat,
            "untraced_ns": round(b, 1), "traced_ns": round(t, 1), "added_ns": round(t - b, 1),
            "ratio": round(t / b, 2),
            "untraced_calls_per_s": round(statistics.median(calls)),
            "traced_events_per_s": round(statistics.median(rates)),
            **{f"{k}_per_million_events": round(statistics.median(v), 2) for k, v in waits.items()}}


def metrics_cost(build: str, pairs: int, repeat: int) -> dict[str, Any]:
    """ns per pair traced (one thread, stacks of depth 64) without and with
    the live metrics file, written by the background thread every second
    while the loop runs (docs/fleet.md): the writer is off the hooks' path."""
    off, on, seconds = [], [], []
    for _ in range(repeat):
        off.append(alloc_free(build, 1, pairs, 64)[0])
        with tempfile.TemporaryDirectory(prefix="gmt-bench-metrics-") as m:
            ns, _ = alloc_free(build, 1, pairs, 64, {"GPUMEMTRACE_METRICS_DIR": m, "GPUMEMTRACE_METRICS_INTERVAL": "1"})
            if not [f for f in os.listdir(m) if f.endswith(".prom")]:
                raise RuntimeError("the metrics file was not written")
        on.append(ns)
        seconds.append(ns * pairs * 1e-9)
    a, b = statistics.median(off), statistics.median(on)
    return {"pairs": pairs, "repeat": repeat, "interval_s": 1, "loop_seconds": round(statistics.median(seconds), 2),
            "without_ns": round(a, 1), "with_ns": round(b, 1), "added_ns": round(b - a, 1), "ratio": round(b / a, 2)}


def consumer_throughput(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stacks-off rows seen as the consumer's load: every thread floods
    pairs, and the tracer records and applies each call as an event."""
    return [{"threads": r["threads"], "untraced_calls_per_s": r["untraced_calls_per_s"],
             "traced_events_per_s": r["traced_events_per_s"],
             "ratio": round(r["traced_events_per_s"] / r["untraced_calls_per_s"], 2),
             **{f"{k}_per_million_events": r[f"{k}_per_million_events"] for k in STATS}}
            for r in pairs if r["stack_depth"] == 0]


def no_loss(build: str, threads: int, pairs: int) -> dict[str, Any]:
    """A traced run whose exit snapshot must equal the simulator's ledger."""
    workdir = tempfile.mkdtemp(prefix="gmt-bench-loss-")
    try:
        snaps, ledgers = os.path.join(workdir, "snapshots"), os.path.join(workdir, "ledgers")
        os.makedirs(snaps)
        os.makedirs(ledgers)
        env = bench_env(build, True, GMTSIM_MEMORY="64G", GMTSIM_LEDGER_DIR=ledgers, GPUMEMTRACE_STACK_DEPTH="64",
                        GPUMEMTRACE_SNAPSHOT_ON="exit", GPUMEMTRACE_DIR=snaps)
        program(build, "alloc_free", threads, pairs, 70, env=env)
        problems, compared = check_trace.check(workdir)
        stats = snapshot_stats(snaps)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"threads": threads, "pairs_per_thread": pairs, "equal_to_ledger": not problems and compared > 0,
            "problems": problems, "events": stats.get("events"),
            **{k: stats.get(k) for k in STATS}}


def memory_cost(build: str, stacks: int, lives: list[int]) -> dict[str, Any]:
    """bench/memory: resident bytes per live allocation at each size, per
    unique stack at depths 16 and 64, per allocation site; beside each, what
    the structure counts as mapped. One run: the figures repeat exactly."""
    n = numbers(program(build, "memory", stacks, *lives, env=bench_env(build)))
    return {"live": [{"live": live, "bytes_per_live": n[f"table_{live}_rss_per_live"],
                      "counted_bytes_per_live": n[f"table_{live}_own_per_live"]} for live in lives],
            "stacks": [{"depth": d, "unique_stacks": stacks, "bytes_per_stack": n[f"stack_{d}_rss_per_stack"],
                        "counted_bytes_per_stack": n[f"stack_{d}_own_per_stack"]} for d in (16, 64)],
            "sites": {"bytes_per_site": n["site_rss_per_site"], "site_struct_bytes": int(n["site_size"])}}


def snapshot_write_cost(build: str, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """bench/snapshot: an oom snapshot of N live allocations (every section,
    the diagnosis, 1,024 stacks), beside writing as many bytes to a plain
    file in the same process; medians."""
    rows = []
    for n in sizes:
        med = medians([numbers(program(build, "snapshot", n, env=bench_env(build), timeout=600))
                       for _ in range(repeat)])
        rows.append({"live": n, "seconds": round(med["snapshot_s"], 4), "bytes": int(med["snapshot_bytes"]),
                     "plain_write_seconds": round(med["plain_write_s"], 4),
                     "ratio_to_plain_write": round(med["snapshot_s"] / max(med["plain_write_s"], 1e-6), 2)})
    return rows


def symbolised_snapshot_cost(build: str, count: int, repeat: int) -> dict[str, Any]:
    """An exit snapshot that symbolises `count` distinct stacks (bench/stacks):
    the same traced run with and without it, wall time, medians."""
    times: dict[str, list[float]] = {"oom": [], "exit": []}
    workdir = tempfile.mkdtemp(prefix="gmt-bench-stacks-")
    try:
        for _ in range(repeat):
            for trigger in ("oom", "exit"):
                env = bench_env(build, True, GMTSIM_MEMORY="8G", GPUMEMTRACE_STACK_DEPTH="64",
                                GPUMEMTRACE_SNAPSHOT_ON=trigger, GPUMEMTRACE_DIR=workdir)
                t0 = time.monotonic()
                program(build, "stacks", count, env=env, timeout=600)
                times[trigger].append(time.monotonic() - t0)
        snaps = glob.glob(os.path.join(workdir, "*.exit.*.json"))
        nstacks = len(check_trace.load(snaps[0])["stacks"])
        size = os.path.getsize(snaps[0])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    without, with_ = statistics.median(times["oom"]), statistics.median(times["exit"])
    return {"distinct_paths": count, "unique_stacks": nstacks, "snapshot_bytes": size,
            "without_snapshot_seconds": round(without, 3), "with_snapshot_seconds": round(with_, 3),
            "seconds": round(with_ - without, 3), "ratio": round(with_ / without, 2)}


def report_cost(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """bench/view_report.py: the viewer's parse + HTML report of a synthetic
    snapshot of N allocations, beside json.loads + json.dumps of it; medians."""
    rows = []
    for n in sizes:
        med = medians([numbers(subprocess.run([sys.executable, os.path.join(HERE, "view_report.py"), str(n)],
                                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                              check=True, timeout=1800).stdout) for _ in range(repeat)])
        rows.append({"allocations": n, "sites": int(med["sites"]), "snapshot_bytes": int(med["snapshot_bytes"]),
                     "report_bytes": int(med["report_bytes"]),
                     "json_roundtrip_seconds": round(med["json_roundtrip_s"], 3),
                     "seconds": round(med["report_s"], 3),
                     "ratio": round(med["report_s"] / max(med["json_roundtrip_s"], 1e-6), 2)})
    return rows


def merge_cost(ranks: int, n: int, repeat: int) -> dict[str, Any]:
    """bench/view_merge.py: `gpumemtrace view` of the snapshots of many ranks
    (the terminal summary of their merge), beside json.loads of the files."""
    med = numbers(subprocess.run([sys.executable, os.path.join(HERE, "view_merge.py"), str(ranks), str(n), str(repeat)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, check=True,
                                 timeout=3600).stdout)
    return {"ranks": ranks, "allocations": n, "snapshot_bytes": int(med["snapshot_bytes"]),
            "workers": int(med["workers"]), "json_loads_seconds": round(med["json_loads_s"], 2),
            "seconds": round(med["view_s"], 2), "peak_rss_bytes": int(med["view_peak_rss"]),
            "json_loads_peak_rss_bytes": int(med["json_loads_peak_rss"]),
            "ratio": round(med["view_s"] / max(med["json_loads_s"], 1e-6), 2)}


def capture_cost(build: str, iterations: int, repeat: int) -> dict[str, Any]:
    """bench/capture: one capture at depths 16 and 64 (alone and interned),
    beside an untraced allocation+free pair, in the same process; medians."""
    med = {k: round(v, 1) for k, v in medians([numbers(program(build, "capture", iterations, env=bench_env(build),
                                                               timeout=600)) for _ in range(repeat)]).items()}
    med["ratio_16"] = round(med["capture_intern_16_ns"] / med["call_ns"], 2)
    med["ratio_64"] = round(med["capture_intern_64_ns"] / med["call_ns"], 2)
    return med


def python_cost(build: str, pairs: int, repeat: int) -> dict[str, Any]:
    """bench/python_alloc.py: pairs through ctypes from 20 Python frames,
    untraced, traced without Python frames and with them, with the GIL held
    in the call (frames through the C API) and released (frames read from
    memory); medians."""
    configs = {"untraced_ns": (False, {}), "traced_native_ns": (True, {"GPUMEMTRACE_PYTHON_STACKS": "0"}),
               "traced_python_ns": (True, {"GPUMEMTRACE_PYTHON_STACKS": "1"})}
    med: dict[str, Any] = {"python_frames": 20}
    for gil in ("held", "released"):
        times: dict[str, list[float]] = {k: [] for k in configs}
        for _ in range(repeat):
            for name, (traced, extra) in configs.items():
                out = subprocess.run([sys.executable, os.path.join(HERE, "python_alloc.py"), str(pairs), "20", gil],
                                     env=bench_env(build, traced, **extra), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, text=True, check=True, timeout=600).stdout
                times[name].append(numbers(out)["ns_per_pair"])
        m = {k: round(statistics.median(v), 1) for k, v in times.items()}
        m["added_by_python_ns"] = round(m["traced_python_ns"] - m["traced_native_ns"], 1)
        med["gil_" + gil] = m
    return med


def torch_cost(build: str, steps: int, entries: int, blocks: int, repeat: int) -> dict[str, Any]:
    """bench/torch_handover.py under `gpumemtrace run` on the PyTorch double,
    the bootstrap off (GPUMEMTRACE_FRAMEWORKS=0) and on: an optimizer step
    (the step hook's mark), the hand-over of a history of `entries` entries
    and `blocks` live tensors, gpumemtrace.dump() (the hand-over and the
    tensor level's analysis and document) and an out-of-memory (the same,
    and the replay the diagnosis cites); medians."""
    doubles = os.path.join(HERE, "..", "tests", "frameworks")
    path = os.pathsep.join(os.path.join(doubles, d, "site-packages") for d in ("fake_torch", "fake_common"))
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(repeat):
        for mode in runs:
            with tempfile.TemporaryDirectory(prefix="gmt-bench-torch-") as d:
                out = subprocess.run([os.path.join(build, "src", "cli", "gpumemtrace"), "run", "--dir", d, "--",
                                      sys.executable, os.path.join(HERE, "torch_handover.py"), str(steps),
                                      str(entries), str(blocks)],
                                     env=bench_env(build, GMTSIM_MEMORY="4G", PYTHONPATH=path,
                                                   GPUMEMTRACE_FRAMEWORKS="1" if mode == "on" else "0"),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, check=True, timeout=600).stdout
                runs[mode].append(numbers(out))
    off, on = medians(runs["off"]), medians(runs["on"])
    return {"steps": steps, "entries": entries, "blocks": blocks, "step_off_ns": round(off["step_ns"], 1),
            "step_on_ns": round(on["step_ns"], 1), "handover_s": round(on["handover_s"], 4),
            "handover_bytes": int(on["handover_bytes"]), "trace_events": int(on["trace_events"]),
            "dump_off_s": round(off["dump_s"], 4), "dump_on_s": round(on["dump_s"], 4),
            "oom_off_s": round(off["oom_s"], 4), "oom_on_s": round(on["oom_s"], 4)}


def scan_runs(build: str, cmd: list[str], repeat: int) -> dict[str, Any]:
    """cmd run untraced and traced with the exit leak check, alternating,
    repeat times each: the scan's own time, the bytes it read, the driver's
    bookkeeping it left out and what of that it read to find it (from the exit
    snapshot's "leaks"), medians, beside the whole untraced run. (The traced
    run's wall time is given too, but it ends in the leak verdict's _exit and
    skips the program's teardown: not a fair ratio.)"""
    scans, untraced, traced = [], [], []
    for _ in range(repeat):
        for leak_check in (False, True):
            with tempfile.TemporaryDirectory(prefix="gmt-bench-scan-") as d:
                env = bench_env(build, leak_check, GMTSIM_MEMORY="64G")
                if leak_check:
                    env.update({"GPUMEMTRACE_DIR": d, "GPUMEMTRACE_SNAPSHOT_ON": "exit",
                                "GPUMEMTRACE_LEAK_CHECK": "1", "GPUMEMTRACE_LEAK_EXITCODE": "23"})
                t0 = time.monotonic()
                r = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, timeout=1800)
                wall = time.monotonic() - t0
                name = " ".join(os.path.basename(c) for c in cmd[:2])
                if not leak_check:
                    if r.returncode != 0:
                        raise RuntimeError(f"{name} failed: {r.stderr[-2000:]}")
                    untraced.append(wall)
                    continue
                if r.returncode != 23:
                    raise RuntimeError(f"{name} traced ended with {r.returncode}, not 23: {r.stderr[-2000:]}")
                traced.append(wall)
                scans.append(check_trace.load(glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))[0])["leaks"])
    secs = statistics.median(s["scan"]["seconds"] for s in scans)
    read = statistics.median(s["scan"]["bytes"] for s in scans)
    last = scans[-1]
    return {"scan_seconds": round(secs, 4), "scan_bytes": int(read),
            "scan_gb_per_s": round(read / max(secs, 1e-9) / 1e9, 2),
            "excluded_bytes": int(statistics.median(s["scan"]["excluded_bytes"] for s in scans)),
            "walked_bytes": int(statistics.median(s["scan"]["walked_bytes"] for s in scans)),
            "bookkeeping_modules": last["scan"]["bookkeeping_modules"],
            "leaked": last["totals"]["leaked"]["count"], "referenced": last["totals"]["referenced"]["count"],
            "untraced_seconds": round(statistics.median(untraced), 3),
            "traced_seconds": round(statistics.median(traced), 3),
            "scan_ratio_to_run": round(secs / max(statistics.median(untraced), 1e-9), 2)}


def leak_scan_cost(build: str, sizes: list[tuple[int, int]], repeat: int) -> list[dict[str, Any]]:
    """bench/leak_scan: the exit leak check of a process with N live
    allocations and H MiB of filled heap (scan_runs)."""
    return [{"live": live, "host_mib": host_mib,
             **scan_runs(build, [os.path.join(build, "bench", "leak_scan"), str(live), str(host_mib)], repeat)}
            for live, host_mib in sizes]


def numba_python() -> str | None:
    """An interpreter that imports numba (Debian's python3-numba is for
    /usr/bin/python3), or None."""
    for exe in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import numba, numba.cuda"], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL, timeout=300).returncode == 0:
            return exe
    return None


def leak_scan_numba_cost(build: str, live: int, repeat: int) -> dict[str, Any]:
    """bench/leak_scan_numba.py: the exit leak check of a Python process that
    imported numba and numba.cuda, with `live` allocations (scan_runs); or
    why it was skipped."""
    exe = numba_python()
    if exe is None:
        return {"skipped": "no interpreter here imports numba (Debian: apt-get install python3-numba)"}
    return {"live": live, "python": exe,
            **scan_runs(build, [exe, os.path.join(HERE, "leak_scan_numba.py"), str(live)], repeat)}


def c_compiler(build: str) -> list[str]:
    """The C compiler the build used for bench/leak_scan (meson-info), or $CC."""
    try:
        with open(os.path.join(build, "meson-info", "intro-targets.json"), encoding="utf-8") as f:
            for t in json.load(f):
                if t["name"] == "leak_scan":
                    return list(t["target_sources"][0]["compiler"])
    except (OSError, ValueError, KeyError, IndexError):
        pass
    return [os.environ.get("CC", "cc")]


def sparse_copy(src: str, dst: str, block: int = 1 << 20) -> None:
    """Copies src to dst, leaving runs of zeros as holes: many copies of a
    large library cost the disk one."""
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while True:
            b = fi.read(block)
            if not b:
                break
            if b.count(0) == len(b):
                fo.seek(len(b), os.SEEK_CUR)
            else:
                fo.write(b)
        fo.truncate()
    shutil.copymode(src, dst)


def leak_scan_libs_cost(build: str, live: int, libs: int, lib_mib: int, repeat: int) -> dict[str, Any]:
    """bench/leak_scan with `libs` copies of bench/scan_lib.c (each a
    lib_mib MiB read-only blob, 64 KiB of data; the allocations made through
    them in turn): the exit leak check of a process that maps a framework's
    worth of libraries (scan_runs)."""
    with tempfile.TemporaryDirectory(prefix="gmt-bench-libs-") as d:
        one = os.path.join(d, "libscan.so")
        subprocess.run(c_compiler(build) + ["-shared", "-fPIC", "-O2", f"-DSCAN_LIB_MIB={lib_mib}", "-o", one,
                                            os.path.join(HERE, "scan_lib.c")], check=True, timeout=600)
        paths = []
        for i in range(libs):
            paths.append(os.path.join(d, f"libscan_{i}.so"))
            sparse_copy(one, paths[-1])
        mapped = libs * os.path.getsize(one)
        return {"live": live, "libs": libs, "lib_mib": lib_mib, "mapped_bytes": mapped,
                **scan_runs(build, [os.path.join(build, "bench", "leak_scan"), str(live), "16"] + paths, repeat)}


def heaptrack_comparison(build: str, quick: bool, repeat: int) -> tuple[dict[str, Any] | None, list[Any], str]:
    """bench/heaptrack.py's comparison and its table rows, or None, no rows
    and why it was not made."""
    if not os.path.exists(os.path.join(HERE, "heaptrack.py")):
        return None, [], "bench/heaptrack.py is not there: no comparison with heaptrack"
    if shutil.which("heaptrack") is None:
        return None, [], ("heaptrack is not installed: no comparison with it "
                          "(apt-get install heaptrack; scripts/bench installs it)")
    sys.path.insert(0, HERE)
    import heaptrack  # noqa: E402  (bench/heaptrack.py)
    result = heaptrack.compare(build, quick, repeat)
    return result, heaptrack.rows(result), ""


# --- the table ---------------------------------------------------------------------

AUTO: Any = object()


def row(section: str, what: str, unit: str, baseline: float | None, traced: float | str | None,
        added: Any = AUTO, ratio: Any = AUTO, note: str = "") -> dict[str, Any]:
    """One line of the table. added and ratio, unless given (None: none),
    are traced - baseline and traced / baseline where both are numbers."""
    numeric = isinstance(baseline, (int, float)) and isinstance(traced, (int, float))
    if added is AUTO:
        added = round(traced - baseline, 4) if numeric else None
    if ratio is AUTO:
        ratio = traced / baseline if numeric and baseline else None
    return {"section": section, "what": what, "unit": unit, "baseline": baseline, "traced": traced,
            "added": added, "ratio": None if ratio is None else round(ratio, 2), "note": note}


def bar(value: float, limit: float, unit: str) -> str:
    return f"target ≤ {limit:g} {unit}: {'met' if value <= limit else 'NOT MET'}"


def table_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measurement as rows of (what, baseline, traced, added, ratio)."""
    rows = []
    sec = "allocation+free pair, ns per pair per thread (untraced → traced)"
    for r in result["pairs"]:
        depth = "stacks off" if r["stack_depth"] == 0 else f"stacks depth {r['stack_depth']}"
        note = ""
        if r["threads"] == 1 and r["stack_depth"] in BAR_PAIR_NS:
            note = bar(r["added_ns"], BAR_PAIR_NS[r["stack_depth"]], "ns added")
        rows.append(row(sec, f"{r['threads']} thread{'s' if r['threads'] > 1 else ''}, {depth}", "ns",
                        r["untraced_ns"], r["traced_ns"], r["added_ns"], r["ratio"], note))
    sec = "consumer, stacks off: calls/s untraced → events/s recorded and applied"
    for r in result["consumer"]:
        rows.append(row(sec, f"{r['threads']} thread{'s' if r['threads'] > 1 else ''} flooding pairs", "/s",
                        r["untraced_calls_per_s"], r["traced_events_per_s"], None, r["ratio"],
                        f"per 1M events: ring full {r['ring_full_per_million_events']:g}, "
                        f"producer drains {r['producer_drains_per_million_events']:g}, "
                        f"consumer wakeups {r['consumer_wakeups_per_million_events']:g}, "
                        f"gap waits {r['gap_waits_per_million_events']:g}"))
    mc = result["metrics"]
    rows.append(row("live metrics file (GPUMEMTRACE_METRICS_DIR), ns per pair: traced without → with",
                    f"1 thread, depth 64, a write every {mc['interval_s']} s", "ns", mc["without_ns"], mc["with_ns"],
                    mc["added_ns"], mc["ratio"], f"loops of {mc['loop_seconds']} s: the writer runs on the "
                                                 "background thread"))
    loss = result["no_loss"]
    rows.append(row("no lost events", f"{loss['threads']} threads x {loss['pairs_per_thread']:,} pairs, depth 64",
                    "", None, "equal" if loss["equal_to_ledger"] else "DIFFERENT",
                    note=f"exit snapshot vs the simulator's ledger; {loss['events']:,} events, ring full "
                         f"{loss['ring_full']}, producer drains {loss['producer_drains']}, "
                         f"gaps skipped {loss['gaps_skipped']}"))
    mem = result["memory"]
    sec = "tracer memory, resident bytes measured (the structure's own count in the note)"
    for r in mem["live"]:
        rows.append(row(sec, f"per live allocation, {r['live']:,} live", "B", None, r["bytes_per_live"],
                        r["bytes_per_live"],
                        note=f"table counts {r['counted_bytes_per_live']:g} B; "
                             + bar(r["bytes_per_live"], BAR_BYTES_PER_LIVE, "B")))
    for r in mem["stacks"]:
        rows.append(row(sec, f"per unique stack, depth {r['depth']}", "B", None, r["bytes_per_stack"],
                        r["bytes_per_stack"],
                        note=f"{r['unique_stacks']:,} stacks; interning counts {r['counted_bytes_per_stack']:g} B; "
                             f"frames alone {8 * r['depth']} B"))
    rows.append(row(sec, "per allocation site (a stack that allocated)", "B", None, mem["sites"]["bytes_per_site"],
                    mem["sites"]["bytes_per_site"], note=f"struct {mem['sites']['site_struct_bytes']} B"))
    sec = "snapshots, seconds"
    for w in result["snapshot_write"]:
        note = f"{w['bytes'] / 2**20:.1f} MiB; baseline: a plain write of as many bytes"
        if w["live"] == 1000000:
            note += "; " + bar(w["seconds"], BAR_SNAPSHOT_1M_S, "s")
        rows.append(row(sec, f"write, {w['live']:,} live allocations", "s", w["plain_write_seconds"], w["seconds"],
                        note=note))
    s = result["symbolised_snapshot"]
    rows.append(row(sec, f"exit snapshot symbolising {s['distinct_paths']:,} stacks", "s",
                    s["without_snapshot_seconds"], s["with_snapshot_seconds"],
                    note=f"baseline: the traced run without it; {s['unique_stacks']:,} stacks in it, "
                         f"{s['snapshot_bytes'] / 2**20:.1f} MiB"))
    sec = "HTML report (gpumemtrace view --html), seconds"
    for r in result["report"]:
        rows.append(row(sec, f"parse + report, {r['allocations']:,} allocations", "s",
                        r["json_roundtrip_seconds"], r["seconds"],
                        note=f"baseline: json.loads + json.dumps of the {r['snapshot_bytes'] / 2**20:.0f} MiB "
                             f"snapshot; report {r['report_bytes'] / 2**20:.1f} MiB"))
    m = result["merge"]
    rows.append(row("merge of many ranks (gpumemtrace view RANK_FILES...), seconds",
                    f"{m['ranks']} ranks of {m['allocations']:,} allocations", "s",
                    m["json_loads_seconds"], m["seconds"],
                    note=f"baseline: json.loads of the {m['snapshot_bytes'] / 2**30:.2f} GiB of snapshots in one "
                         f"process; {m['workers']} workers; peak memory {m['peak_rss_bytes'] / 2**20:.0f} MiB "
                         f"(json.loads alone {m['json_loads_peak_rss_bytes'] / 2**20:.0f} MiB)"))
    c = result["capture"]
    sec = "one stack capture from 70 frames deep, ns (baseline: an untraced pair)"
    for d in (16, 64):
        rows.append(row(sec, f"pair + capture and intern, depth {d}", "ns", c["call_ns"],
                        c["call_ns"] + c[f"capture_intern_{d}_ns"],
                        note=f"capture alone {c[f'capture_{d}_ns']:g} ns"))
    p = result["python_frames"]
    for gil, how in (("held", "GIL held, C API"), ("released", "GIL released, read from memory")):
        g = p["gil_" + gil]
        rows.append(row("Python frames, ns per pair through ctypes", f"{p['python_frames']} Python frames, {how}",
                        "ns", g["traced_native_ns"], g["traced_python_ns"],
                        note=f"baseline: traced, native frames only; untraced pair {g['untraced_ns']:g} ns"))
    t = result["torch"]
    sec = "PyTorch bootstrap on the double (bench/torch_handover.py), the bootstrap off → on"
    rows.append(row(sec, "optimizer step: the step hook's mark", "ns", t["step_off_ns"], t["step_on_ns"],
                    note=f"{t['steps']:,} steps of the double's optimizer; the hook: gmt_step, the step's time, "
                         "memory_allocated()"))
    rows.append(row(sec, f"hand-over: {t['entries']:,} history entries, {t['blocks']:,} live tensors", "s", None,
                    t["handover_s"], None, None,
                    note=f"_snapshot() and state_of() as JSON ({t['handover_bytes'] / 2**20:.1f} MiB, "
                         f"{t['trace_events']:,} tensor events); at a snapshot only"))
    rows.append(row(sec, "gpumemtrace.dump() with the tensor level", "s", t["dump_off_s"], t["dump_on_s"],
                    note="the hand-over, the replay of the history and the tensors section"))
    rows.append(row(sec, "an out-of-memory with that history", "s", t["oom_off_s"], t["oom_on_s"],
                    note="the tracer's snapshot; on: the hand-over at PyTorch's observer and the snapshot made "
                         "again, with the allocator model's replay the diagnosis cites"))
    sec = "exit leak scan (GPUMEMTRACE_LEAK_CHECK=1), seconds"
    for w in result["leak_scan"]:
        rows.append(row(sec, f"{w['live']:,} live, {w['host_mib']:,} MiB heap", "s", w["untraced_seconds"], None,
                        w["scan_seconds"], w["scan_ratio_to_run"],
                        note=f"baseline: the whole untraced run; ratio: scan / run; "
                             f"{w['scan_gb_per_s']:g} GB/s; {w['leaked']} leaked, {w['referenced']} referenced"))
    w = result["leak_scan_numba"]
    if "skipped" in w:
        rows.append(row(sec, "numba imported", "s", None, "skipped", note=w["skipped"]))
    else:
        rows.append(row(sec, f"numba imported, {w['live']:,} live", "s", w["untraced_seconds"], None,
                        w["scan_seconds"], w["scan_ratio_to_run"],
                        note=f"{scan_note(w)}; " + bar(w["scan_seconds"], BAR_SCAN_NUMBA_S, "s")))
    w = result["leak_scan_libs"]
    mapped = w["mapped_bytes"]
    mapped_text = f"{mapped / 2**30:.2f} GiB" if mapped >= 2**30 else f"{mapped / 2**20:.1f} MiB"
    rows.append(row(sec, f"{w['libs']} libraries, {mapped_text} mapped, {w['live']:,} live",
                    "s", w["untraced_seconds"], None, w["scan_seconds"], w["scan_ratio_to_run"],
                    note=f"{scan_note(w)}; " + bar(w["scan_seconds"], BAR_SCAN_LIBS_S, "s")))
    return rows


def scan_note(w: dict[str, Any]) -> str:
    """What a leak scan read, and of the driver's bookkeeping."""
    return (f"baseline: the whole untraced run; ratio: scan / run; read {w['scan_bytes'] / 2**20:.1f} MiB; "
            f"bookkeeping {w['excluded_bytes'] / 2**20:.2f} MiB, walked {w['walked_bytes'] / 2**20:.2f} MiB; "
            f"{w['leaked']} leaked, {w['referenced']} referenced")


def _cell(v: Any, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if unit == "/s":
        return f"{v / 1e6:.2f} M/s"
    if unit == "s":
        return f"{v:.3f} s"
    if unit in ("ns", "B"):
        return f"{v:.1f} {unit}"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:g}{(' ' + unit) if unit else ''}"


def foreign_rows(rows: list[Any], section: str) -> list[dict[str, Any]]:
    """Rows another module gives (bench/heaptrack.py rows()): dicts with the
    table's keys, or sequences (what, baseline, traced, added, ratio[, note])."""
    out = []
    for r in rows:
        if isinstance(r, dict):
            d = {"section": r.get("section", section), "unit": r.get("unit", ""), "note": r.get("note", "")}
            d.update({k: r.get(k) for k in ("what", "baseline", "traced", "added", "ratio")})
        else:
            cells = list(r) + [None] * (6 - len(r))
            d = dict(zip(("what", "baseline", "traced", "added", "ratio", "note"), cells[:6]))
            d.update({"section": section, "unit": "", "note": d["note"] or ""})
        out.append(d)
    return out


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ("what", "baseline", "traced", "added", "ratio", "note")
    cells = [(str(r["what"]), _cell(r["baseline"], r["unit"]), _cell(r["traced"], r["unit"]),
              _cell(r["added"], r["unit"]), _cell(r["ratio"], "x"), str(r["note"] or "")) for r in rows]
    w = [max(len(c[i]) for c in cells + [head]) for i in range(5)]

    def line(c: tuple[str, ...]) -> str:
        return "  ".join([c[0].ljust(w[0])] + [c[i].rjust(w[i]) for i in range(1, 5)] + [c[5]]).rstrip()

    out, section = [line(head)], None
    for r, c in zip(rows, cells):
        if r["section"] != section:
            section = r["section"]
            out.append(f"-- {section}")
        out.append(line(c))
    return "\n".join(out)


# --- the command ---------------------------------------------------------------------

def git_commit() -> str | None:
    r = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, check=False)
    return r.stdout.strip() or None


def run_all(args: argparse.Namespace, progress: Callable[[str], None]) -> dict[str, Any]:
    """Every measurement, in this order; the result document."""
    build, quick = os.path.abspath(args.build), args.quick
    pairs = args.pairs or (2000 if quick else 200000)
    repeat = args.repeat or (1 if quick else 5)
    t0 = time.monotonic()
    result: dict[str, Any] = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "commit": git_commit(),
                              "quick": quick, "repeat": repeat, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    result["pairs"] = []
    for threads in THREADS:
        for depth in DEPTHS:
            progress(f"pairs: {threads} threads, stack depth {depth}")
            result["pairs"].append(pair_cost(build, threads, pairs, depth, repeat))
    result["consumer"] = consumer_throughput(result["pairs"])
    progress("metrics file")
    result["metrics"] = metrics_cost(build, 20000 if quick else 6000000, repeat)
    progress("no lost events")
    result["no_loss"] = no_loss(build, 8, 5000 if quick else 1000000)
    progress("memory")
    result["memory"] = memory_cost(build, 10000 if quick else 100000, [10000] if quick else [10000, 100000, 1000000])
    progress("snapshot writes")
    result["snapshot_write"] = snapshot_write_cost(build, [10000] if quick else [10000, 100000, 1000000], repeat)
    progress("symbolised snapshot")
    result["symbolised_snapshot"] = symbolised_snapshot_cost(build, 1000 if quick else 10000, repeat)
    progress("HTML report")
    result["report"] = report_cost([10000] if quick else [100000, 1000000], repeat)
    progress("merge of many ranks")
    result["merge"] = merge_cost(64 if quick else 512, 1000 if quick else 10000, 1 if quick else 3)
    progress("stack capture")
    result["capture"] = capture_cost(build, 2000 if quick else 200000, repeat)
    progress("Python frames")
    result["python_frames"] = python_cost(build, 2000 if quick else 100000, repeat)
    progress("PyTorch bootstrap")
    result["torch"] = torch_cost(build, 2000 if quick else 20000, 1000 if quick else 10000, 200 if quick else 2000,
                                 repeat)
    progress("leak scan")
    result["leak_scan"] = leak_scan_cost(build, [(1000, 16)] if quick else [(1000, 16), (10000, 256), (100000, 2048)],
                                         repeat)
    progress("leak scan, numba imported")
    result["leak_scan_numba"] = leak_scan_numba_cost(build, 100 if quick else 1000, repeat)
    progress("leak scan, 1 GiB of libraries")
    result["leak_scan_libs"] = leak_scan_libs_cost(build, 1000 if quick else 10000, 2 if quick else 32,
                                                   1 if quick else 32, repeat)
    rows = table_rows(result)
    if args.no_heaptrack:
        result["heaptrack_skipped"] = "--no-heaptrack"
    else:
        progress("heaptrack")
        ht, ht_rows, why = heaptrack_comparison(build, quick, repeat)
        if ht is None:
            result["heaptrack_skipped"] = why
        else:
            result["heaptrack"] = ht
            rows += foreign_rows(ht_rows, "heaptrack beside gpumemtrace (bench/heaptrack.py)")
    result["table"] = rows
    result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--quick", action="store_true", help="small sizes, one run each: a smoke test, numbers rough")
    ap.add_argument("--pairs", type=int, help="pairs per thread for the timings")
    ap.add_argument("--repeat", type=int, help="runs of each configuration (median taken)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--no-heaptrack", action="store_true", help="leave out the comparison with heaptrack")
    args = ap.parse_args()

    result = run_all(args, lambda what: print(f"bench: {what}", file=sys.stderr, flush=True))
    print(f"gpumemtrace benchmark: {result['machine']}, {result['cpus']} CPUs, commit {result['commit']}, "
          f"median of {result['repeat']} runs{' (quick: rough numbers)' if result['quick'] else ''}; "
          "simulated driver, cuMemAlloc_v2 + cuMemFree_v2 of 1 KiB from 70 frames deep")
    print(format_table(result["table"]))
    loss = result["no_loss"]
    for p in loss["problems"]:
        print("  lost or wrong:", p)
    if "heaptrack_skipped" in result:
        print(f"heaptrack: {result['heaptrack_skipped']}")
    print(f"took {result['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"results: {args.json}")
    return 0 if loss["equal_to_ledger"] else 1


if __name__ == "__main__":
    sys.exit(main())
