#!/usr/bin/env python3
"""gpumemtrace's benchmark: what the tracer adds to each allocation+free pair on
the simulated driver, with stacks off and at depths 16 and 64, on 1 and 8
threads; what one stack capture costs beside an untraced call; what Python
frames add. Every configuration runs untraced and traced, alternating, in this one
invocation; the table gives medians, the nanoseconds added and the ratio. The
8-thread traced run at full size also proves that no event is lost: its exit
snapshot must equal the simulator's ledger.

Usage: bench/run.py [--build DIR] [--quick] [--pairs N] [--repeat N] [--json FILE]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "preload"))
import check_trace  # noqa: E402  (the ledger comparison of the preload tests)


def run_once(build: str, threads: int, pairs: int, depth: int | None, workdir: str | None) -> float:
    """One run; depth None = untraced. Returns ns per pair."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "sim", "driver")
    env["GMTSIM_MEMORY"] = "64G"
    if depth is not None:
        env["LD_PRELOAD"] = os.path.join(build, "src", "libgpumemtrace.so")
        env["GPUMEMTRACE_STACK_DEPTH"] = str(depth)
        env["GPUMEMTRACE_SNAPSHOT_ON"] = "exit" if workdir else "oom"
        env["GPUMEMTRACE_DIR"] = os.path.join(workdir, "snapshots") if workdir else tempfile.gettempdir()
    if workdir:
        env["GMTSIM_LEDGER_DIR"] = os.path.join(workdir, "ledgers")
    out = subprocess.run([os.path.join(build, "bench", "alloc_free"), str(threads), str(pairs), "70"],
                         env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, check=True, timeout=1800).stdout
    for line in out.splitlines():
        if line.startswith("ns_per_pair "):
            return float(line.split()[1])
    raise RuntimeError(f"no timing in the output: {out!r}")


def measure(build: str, threads: int, pairs: int, depth: int, repeat: int) -> dict[str, Any]:
    base, traced = [], []
    for _ in range(repeat):
        base.append(run_once(build, threads, pairs, None, None))
        traced.append(run_once(build, threads, pairs, depth, None))
    b, t = statistics.median(base), statistics.median(traced)
    return {"threads": threads, "stack_depth": depth, "pairs_per_thread": pairs, "repeat": repeat,
            "untraced_ns": round(b, 1), "traced_ns": round(t, 1),
            "added_ns": round(t - b, 1), "ratio": round(t / b, 2)}


def no_loss(build: str, threads: int, pairs: int) -> dict[str, Any]:
    """A traced run whose exit snapshot must equal the ledger."""
    workdir = tempfile.mkdtemp(prefix="gmt-bench-")
    os.makedirs(os.path.join(workdir, "snapshots"))
    os.makedirs(os.path.join(workdir, "ledgers"))
    run_once(build, threads, pairs, 64, workdir)
    problems, compared = check_trace.check(workdir)
    snap = check_trace.load(glob.glob(os.path.join(workdir, "snapshots", "*.exit.*.json"))[0])
    subprocess.run(["rm", "-rf", workdir], check=False)
    return {"threads": threads, "pairs_per_thread": pairs, "equal_to_ledger": not problems and compared > 0,
            "problems": problems, "events": snap["stats"].get("events"),
            "ring_full": snap["stats"].get("ring_full"), "producer_drains": snap["stats"].get("producer_drains"),
            "gaps_skipped": snap["stats"].get("gaps_skipped")}


def snapshot_cost(build: str, levels: int, repeat: int) -> dict[str, Any]:
    """Wall time of an exit snapshot that symbolises 2^levels distinct stacks:
    the same traced run with and without the exit snapshot, medians."""
    import time
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD"))}
    env.update({"LD_LIBRARY_PATH": os.path.join(build, "sim", "driver"), "GMTSIM_MEMORY": "8G",
                "LD_PRELOAD": os.path.join(build, "src", "libgpumemtrace.so"),
                "GPUMEMTRACE_STACK_DEPTH": "64"})
    times: dict[str, list[float]] = {"oom": [], "exit": []}
    workdir = tempfile.mkdtemp(prefix="gmt-bench-stacks-")
    size = 0
    for _ in range(repeat):
        for trigger in ("oom", "exit"):
            env["GPUMEMTRACE_SNAPSHOT_ON"] = trigger
            env["GPUMEMTRACE_DIR"] = workdir
            t0 = time.monotonic()
            subprocess.run([os.path.join(build, "bench", "stacks"), str(levels)], env=env, check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=600)
            times[trigger].append(time.monotonic() - t0)
    snaps = glob.glob(os.path.join(workdir, "*.exit.*.json"))
    nstacks = len(check_trace.load(snaps[0])["stacks"]) if snaps else 0
    size = os.path.getsize(snaps[0]) if snaps else 0
    subprocess.run(["rm", "-rf", workdir], check=False)
    return {"unique_stacks": nstacks, "snapshot_bytes": size,
            "seconds": round(statistics.median(times["exit"]) - statistics.median(times["oom"]), 3)}


def bench_env(build: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GMTSIM_", "GPUMEMTRACE_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = os.path.join(build, "sim", "driver")
    env["GPUMEMTRACE_DIR"] = tempfile.gettempdir()
    return env


def numbers(out: str) -> dict[str, float]:
    """The "name value" lines a benchmark program printed."""
    return {line.split()[0]: float(line.split()[1]) for line in out.splitlines() if len(line.split()) == 2}


def capture_cost(build: str, iterations: int, repeat: int) -> dict[str, Any]:
    """bench/capture: one capture at depths 16 and 64 (alone and interned),
    beside an untraced allocation+free pair, in the same process; medians."""
    runs = [numbers(subprocess.run([os.path.join(build, "bench", "capture"), str(iterations)],
                                   env=bench_env(build), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   text=True, check=True, timeout=600).stdout) for _ in range(repeat)]
    med = {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}
    med["ratio_16"] = round(med["capture_intern_16_ns"] / med["call_ns"], 2)
    med["ratio_64"] = round(med["capture_intern_64_ns"] / med["call_ns"], 2)
    return med


def snapshot_write_cost(build: str, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """bench/snapshot: an oom snapshot of N live allocations (every section,
    the diagnosis, 1,024 stacks), beside writing as many bytes to a plain
    file in the same process; medians."""
    rows = []
    for n in sizes:
        runs = [numbers(subprocess.run([os.path.join(build, "bench", "snapshot"), str(n)],
                                       env=bench_env(build), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       text=True, check=True, timeout=600).stdout) for _ in range(repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        rows.append({"live": n, "seconds": round(med["snapshot_s"], 4), "bytes": int(med["snapshot_bytes"]),
                     "plain_write_seconds": round(med["plain_write_s"], 4),
                     "ratio_to_plain_write": round(med["snapshot_s"] / max(med["plain_write_s"], 1e-6), 2)})
    return rows


def python_cost(build: str, pairs: int, repeat: int) -> dict[str, Any]:
    """bench/python_alloc.py: pairs through ctypes from 20 Python frames,
    untraced, traced without Python frames and with them; medians."""
    lib = os.path.join(build, "src", "libgpumemtrace.so")
    configs = {"untraced_ns": {}, "traced_native_ns": {"LD_PRELOAD": lib, "GPUMEMTRACE_PYTHON_STACKS": "0"},
               "traced_python_ns": {"LD_PRELOAD": lib, "GPUMEMTRACE_PYTHON_STACKS": "1"}}
    times: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(repeat):
        for name, extra in configs.items():
            env = bench_env(build)
            env.update(extra)
            out = subprocess.run([sys.executable, os.path.join(HERE, "python_alloc.py"), str(pairs), "20"],
                                 env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True,
                                 check=True, timeout=600).stdout
            times[name].append(numbers(out)["ns_per_pair"])
    med = {k: round(statistics.median(v), 1) for k, v in times.items()}
    med["python_frames"] = 20
    med["added_by_python_ns"] = round(med["traced_python_ns"] - med["traced_native_ns"], 1)
    return med


def leak_scan_cost(build: str, sizes: list[tuple[int, int]], repeat: int) -> list[dict[str, Any]]:
    """bench/leak_scan: the exit leak check of a process with N live
    allocations and H MiB of filled heap: the scan's own time and bytes read
    (from the exit snapshot's "leaks") beside the whole untraced run of the
    same program; medians. (The traced run's wall time is given too, but it
    ends in the leak verdict's _exit and skips the program's teardown: not a
    fair ratio.)"""
    import time
    rows = []
    for live, host_mib in sizes:
        scans, untraced, traced = [], [], []
        for _ in range(repeat):
            for leak_check in (False, True):
                env = bench_env(build)
                env["GMTSIM_MEMORY"] = "64G"
                with tempfile.TemporaryDirectory(prefix="gmt-bench-scan-") as d:
                    if leak_check:
                        env.update({"LD_PRELOAD": os.path.join(build, "src", "libgpumemtrace.so"),
                                    "GPUMEMTRACE_DIR": d, "GPUMEMTRACE_SNAPSHOT_ON": "exit",
                                    "GPUMEMTRACE_LEAK_CHECK": "1", "GPUMEMTRACE_LEAK_EXITCODE": "23"})
                    t0 = time.monotonic()
                    r = subprocess.run([os.path.join(build, "bench", "leak_scan"), str(live), str(host_mib)],
                                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True, timeout=1800)
                    wall = time.monotonic() - t0
                    if not leak_check:
                        if r.returncode != 0:
                            raise RuntimeError(f"leak_scan failed: {r.stderr}")
                        untraced.append(wall)
                        continue
                    if r.returncode != 23:
                        raise RuntimeError(f"leak_scan traced ended with {r.returncode}, not 23: {r.stderr[-2000:]}")
                    traced.append(wall)
                    snap = json.load(open(glob.glob(os.path.join(d, "gpumemtrace.*.exit.*.json"))[0],
                                          encoding="utf-8"))
                    scans.append(snap["leaks"])
        secs = statistics.median(s["scan"]["seconds"] for s in scans)
        read = statistics.median(s["scan"]["bytes"] for s in scans)
        last = scans[-1]["totals"]
        rows.append({"live": live, "host_mib": host_mib, "scan_seconds": round(secs, 4),
                     "scan_bytes": int(read), "scan_gb_per_s": round(read / max(secs, 1e-9) / 1e9, 2),
                     "leaked": last["leaked"]["count"], "referenced": last["referenced"]["count"],
                     "untraced_seconds": round(statistics.median(untraced), 3),
                     "traced_seconds": round(statistics.median(traced), 3),
                     "scan_ratio_to_run": round(secs / max(statistics.median(untraced), 1e-9), 2)})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'threads':>7} {'stacks':>6} {'untraced ns':>12} {'traced ns':>10} {'added ns':>9} {'ratio':>6}"]
    for r in rows:
        depth = "off" if r["stack_depth"] == 0 else str(r["stack_depth"])
        lines.append(f"{r['threads']:>7} {depth:>6} {r['untraced_ns']:>12.1f} {r['traced_ns']:>10.1f} "
                     f"{r['added_ns']:>9.1f} {r['ratio']:>6.2f}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke test, numbers are rough")
    ap.add_argument("--pairs", type=int, help="pairs per thread for the timings")
    ap.add_argument("--repeat", type=int, help="runs of each configuration (median taken)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    build = os.path.abspath(args.build)
    pairs = args.pairs or (2000 if args.quick else 200000)
    repeat = args.repeat or (1 if args.quick else 5)
    rows = [measure(build, threads, pairs, depth, repeat) for threads in (1, 8) for depth in (0, 16, 64)]
    loss = no_loss(build, 8, 5000 if args.quick else 1000000)
    stacks = snapshot_cost(build, 10 if args.quick else 14, repeat)
    capture = capture_cost(build, 2000 if args.quick else 200000, repeat)
    python = python_cost(build, 2000 if args.quick else 100000, repeat)
    writes = snapshot_write_cost(build, [10000] if args.quick else [10000, 100000, 1000000], repeat)
    scan = leak_scan_cost(build, [(1000, 16)] if args.quick else [(1000, 16), (10000, 256), (100000, 2048)], repeat)
    result = {"snapshot_write": writes, "machine": os.uname().nodename, "cpus": os.cpu_count(), "timings": rows, "no_loss": loss,
              "symbolised_snapshot": stacks, "capture": capture, "python_frames": python, "leak_scan": scan}
    print("ns per allocation+free pair (cuMemAlloc_v2 + cuMemFree_v2 of 1 KiB, simulated driver, "
          "call chain 70 deep; median of", repeat, "runs)")
    print(table(rows))
    print(f"no lost events: 8 threads x {loss['pairs_per_thread']} pairs traced; exit snapshot "
          f"{'equals' if loss['equal_to_ledger'] else 'DIFFERS FROM'} the simulator's ledger "
          f"({loss['events']} events, ring full {loss['ring_full']} times, "
          f"{loss['producer_drains']} drains by producers, {loss['gaps_skipped']} gaps skipped)")
    for p in loss["problems"]:
        print("  ", p)
    print(f"exit snapshot symbolising {stacks['unique_stacks']} unique stacks (64 frames max, libdw): "
          f"{stacks['seconds']:.3f} s ({stacks['snapshot_bytes'] / 2**20:.1f} MiB)")
    print(f"one stack capture from 70 frames deep (libunwind, interned), beside an untraced "
          f"allocation+free pair of {capture['call_ns']:.1f} ns:")
    for d in (16, 64):
        print(f"  depth {d}: {capture[f'capture_{d}_ns']:.1f} ns to capture, "
              f"{capture[f'capture_intern_{d}_ns']:.1f} ns with interning, ratio {capture[f'ratio_{d}']:.2f}")
    print(f"Python frames (20, through ctypes): pair untraced {python['untraced_ns']:.1f} ns, traced "
          f"{python['traced_native_ns']:.1f} ns native frames only, {python['traced_python_ns']:.1f} ns with "
          f"Python frames: {python['added_by_python_ns']:.1f} ns added by them")
    print("oom snapshot of N live allocations (all sections, diagnosis, 1,024 stacks), beside writing "
          "as many bytes to a plain file:")
    for w in writes:
        print(f"  {w['live']:>9,} live: {w['seconds']:.3f} s, {w['bytes'] / 2**20:.1f} MiB "
              f"(plain write {w['plain_write_seconds']:.3f} s, ratio {w['ratio_to_plain_write']:.2f})")
    print("exit leak check (GPUMEMTRACE_LEAK_CHECK=1) of a process with N live 4 KiB allocations, half "
          "referenced from the heap, and H MiB of filled heap; the scan beside the whole untraced run:")
    for w in scan:
        print(f"  {w['live']:>7,} live, {w['host_mib']:>5} MiB heap: scan {w['scan_seconds']:.3f} s for "
              f"{w['scan_bytes'] / 2**20:.0f} MiB read ({w['scan_gb_per_s']:.2f} GB/s; {w['leaked']} leaked, "
              f"{w['referenced']} referenced); untraced run {w['untraced_seconds']:.3f} s, "
              f"ratio {w['scan_ratio_to_run']:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0 if loss["equal_to_ledger"] else 1


if __name__ == "__main__":
    sys.exit(main())
