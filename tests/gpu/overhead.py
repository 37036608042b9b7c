#!/usr/bin/env python3
"""Overhead of the tracer on real work (docs/gpu-suite.md): each workload run
untraced, traced (stacks of 64 frames, the default) and traced without
stacks (GPUMEMTRACE_STACK_DEPTH=0), REPS times each, the median of each
timing shown with its overhead against the untraced run:

  overhead_alloc     cudaMalloc/cudaFree, cudaMallocAsync/cudaFreeAsync and
                     cudaMallocHost/cudaFreeHost pairs (ns per pair)
  overhead_torch.py  a PyTorch training step (ms per step), where torch
                     imports and sees a GPU

--mode gpu takes the nvcc build (BUILD/tests/gpu/overhead_alloc) on the real
GPU; --mode sim the simulated GPU's (a smoke run: its timings say nothing
about a GPU). --bundle DIR takes them from a bundle of scripts/gpu-bundle
instead of a build directory. Exit status 0 when every run worked.
Usage: overhead.py --mode gpu|sim [--build-dir BUILD | --bundle DIR] [--pairs N]
         [--steps N] [--reps N] [--python PY] [--no-torch]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_suite  # noqa: E402

SETUPS = [("untraced", None), ("traced", {}), ("traced, no stacks", {"GPUMEMTRACE_STACK_DEPTH": "0"})]


def run_once(cmd: list[str], env: dict[str, str], launcher: str, traced: dict[str, str] | None
             ) -> tuple[dict[str, float], str | None]:
    """The OVERHEAD lines of one run (what: value), or why it failed."""
    with tempfile.TemporaryDirectory(prefix="gmt-overhead-") as workdir:
        run_env = dict(env)
        if traced is not None:
            run_env.update(traced)
            cmd = [launcher, "run", "--dir", workdir, "--snapshot-on", "none", "--"] + cmd
        proc = subprocess.run(cmd, env=run_env, cwd=workdir, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if proc.returncode != 0:
        return {}, f"exit status {proc.returncode}: {proc.stderr.strip()[-300:]}"
    values = {}
    for line in proc.stdout.splitlines():
        f = line.split()
        if f and f[0] == "SKIP":
            return {}, "skip: " + line[5:]
        if len(f) == 4 and f[0] == "OVERHEAD":
            values[f[1]] = float(f[3])
    return values, None


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["gpu", "sim"], required=True)
    gpu_suite.add_location_args(ap)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args(argv)

    paths = gpu_suite.location(args)
    base = gpu_suite.Case("overhead", "overhead_alloc")
    env = gpu_suite.case_env(base, args.mode, paths, dict(os.environ))
    env.pop("CUDA_MODULE_LOADING", None)
    workloads = [("overhead_alloc", [os.path.join(paths.programs, paths.prefix + "overhead_alloc"),
                                     str(args.pairs)], "ns/pair")]
    if not args.no_torch and args.mode == "gpu":
        workloads.append(("overhead_torch", [args.python, os.path.join(HERE, "overhead_torch.py"),
                                             str(args.steps)], "ms/step"))

    results: dict[str, dict[str, list[float]]] = {}
    units: dict[str, str] = {}
    problems = []
    for name, cmd, unit in workloads:
        for setup, traced in SETUPS:
            for _ in range(args.reps):
                values, why = run_once(cmd, env, paths.launcher, traced)
                if why is not None:
                    if why.startswith("skip: "):
                        print(f"{name}: {why}")
                    else:
                        problems.append(f"{name} ({setup}): {why}")
                    break
                for what, v in values.items():
                    results.setdefault(what, {}).setdefault(setup, []).append(v)
                    units[what] = unit
            else:
                continue
            break

    width = max([len("workload")] + [len(w) + len(units[w]) + 3 for w in results])
    head = f"{'workload':<{width}}" + "".join(f"  {s:>18}" for s, _ in SETUPS)
    print(head)
    for what, by_setup in results.items():
        cells = []
        plain = statistics.median(by_setup["untraced"]) if by_setup.get("untraced") else None
        for setup, _ in SETUPS:
            if not by_setup.get(setup):
                cells.append(f"  {'-':>18}")
                continue
            m = statistics.median(by_setup[setup])
            extra = "" if setup == "untraced" or not plain else f" ({(m / plain - 1) * 100:+.0f}%)"
            cells.append(f"  {f'{m:.1f}{extra}':>18}")
        print(f"{what + ' (' + units[what] + ')':<{width}}" + "".join(cells))
    if args.mode == "sim":
        print("(simulated GPU: these timings say nothing about a real one)")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
