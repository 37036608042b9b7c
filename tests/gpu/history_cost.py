#!/usr/bin/env python3
"""What PyTorch's allocation history costs a training step (docs/gpu-suite.md,
docs/performance.md): the tracer's bootstrap turns the history on
(torch.cuda.memory._record_memory_history, Python frames, at most
GPUMEMTRACE_HISTORY entries) so that snapshots carry the tensor level; every
tensor allocation and free then records an entry and a Python stack.

The workload is overhead_torch.py's transformer (many small tensors a step),
run in five setups — untraced; traced without the bootstrap
(GPUMEMTRACE_FRAMEWORKS=0: the driver level alone); traced with each
GPUMEMTRACE_TORCH_HISTORY of off, events and alloc (the default) — REPS
rounds, the setups interleaved within each round and their order rotated
from round to round, so that a drift of the machine falls on all alike.
Printed: each setup's median, lowest and highest ms per step; for each
traced setup its cost against untraced and against traced without the
bootstrap (the history's own), each the median of the rounds' own ratios
with their range; the allocations a step makes. Exit status 0 when every
run worked.
Usage: history_cost.py --mode gpu|sim [--build-dir BUILD | --bundle DIR]
         [--steps N] [--reps N] [--python PY]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpu_suite  # noqa: E402
import overhead  # noqa: E402

NO_BOOT = "traced, no bootstrap"
SETUPS = [("untraced", None), (NO_BOOT, {"GPUMEMTRACE_FRAMEWORKS": "0"}),
          ("history off", {"GPUMEMTRACE_TORCH_HISTORY": "off"}),
          ("history events", {"GPUMEMTRACE_TORCH_HISTORY": "events"}),
          ("history alloc", {"GPUMEMTRACE_TORCH_HISTORY": "alloc"})]
WHAT = "torch-transformer-step"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def ratio_line(name: str, ratios: list[float]) -> str:
    pct = [(r - 1) * 100 for r in ratios]
    return f"{name}: {statistics.median(pct):+.1f}% (rounds {min(pct):+.1f}% to {max(pct):+.1f}%)"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["gpu", "sim"], required=True)
    gpu_suite.add_location_args(ap)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)

    paths = gpu_suite.location(args)
    env = gpu_suite.case_env(gpu_suite.Case("history", "overhead_torch.py"), args.mode, paths, dict(os.environ))
    cmd = [args.python, os.path.join(HERE, "overhead_torch.py"), str(args.steps), "transformer"]
    times: dict[str, list[float]] = {s: [] for s, _ in SETUPS}
    allocs: list[float] = []
    rounds: list[dict[str, float]] = []
    for rep in range(args.reps):
        order = SETUPS[rep % len(SETUPS):] + SETUPS[:rep % len(SETUPS)]
        got: dict[str, float] = {}
        for setup, traced in order:
            values, why = overhead.run_once(cmd, env, paths.launcher, traced)
            if why is not None:
                print(f"{setup}: {why}")
                return 0 if why.startswith("skip: ") else 1
            print(f"round {rep + 1}: {setup}: {values[WHAT]:.3f} ms/step", flush=True)
            got[setup] = values[WHAT]
            times[setup].append(values[WHAT])
            allocs.append(values.get(WHAT + "-allocations", 0.0))
        rounds.append(got)
    print(f"transformer training step, {args.steps} steps a run, {args.reps} rounds, "
          f"{statistics.median(allocs):.0f} allocations a step (PyTorch's count)")
    for setup, _ in SETUPS:
        print(f"  {setup:<22} {spread(times[setup])} ms/step")
    for setup, _ in SETUPS[1:]:
        print(ratio_line(f"{setup} against untraced", [r[setup] / r["untraced"] for r in rounds]))
        if setup != NO_BOOT:
            print(ratio_line(f"{setup} against {NO_BOOT}", [r[setup] / r[NO_BOOT] for r in rounds]))
    if args.mode == "sim":
        print("(simulated GPU: these timings say nothing about a real one)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
