#!/usr/bin/env python3
"""Without a GPU, the real-GPU suite claims nothing (docs/gpu-suite.md):

- each framework script (PyTorch, CuPy, JAX, every mode) whose framework
  does not import, or has no GPU, prints its TEST line and one SKIP line and
  exits 0, and the checker calls that skipped, not passed;
- scripts/gpu-check, when nvidia-smi -L fails, prints one line saying so and
  exits 0, without building or running anything.

On a machine with a GPU this test is skipped (77): there the scripts run.
Usage: test_skips.py SOURCE-ROOT
"""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_gpu  # noqa: E402

SCRIPTS = [
    ("torch_memory.py", ["caching"], {}),
    ("torch_memory.py", ["expandable"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("torch_memory.py", ["async"], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    ("torch_memory.py", ["oom"], {}),
    ("torch_memory.py", ["train-oom"], {}),
    ("torch_memory.py", ["loss-kept"], {}),
    ("torch_memory.py", ["fragment"], {}),
    ("torch_memory.py", ["fragment-expandable"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("cupy_memory.py", ["default"], {}),
    ("cupy_memory.py", ["async"], {}),
    ("jax_memory.py", ["oom"], {}),
    ("jax_platform.py", [], {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}),
]


def have_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    # Neither the simulated driver nor a tracer: what a CI machine has.
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD") and not k.startswith(("GMTSIM_", "GPUMEMTRACE_"))}
    env.update(extra)
    return env


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[0]
    if have_gpu():
        print("a GPU is here: the framework scripts would run, not skip")
        return 77
    problems = []
    for script, args, env in SCRIPTS:
        name = " ".join([script] + args)
        proc = subprocess.run([sys.executable, os.path.join(HERE, script)] + args, env=clean_env(env),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=300)
        lines = proc.stdout.splitlines()
        words = [ln.split(" ", 1)[0] for ln in lines]
        if proc.returncode != 0 or words != ["TEST", "SKIP"]:
            problems.append(f"{name}: exit status {proc.returncode}, output {lines!r}, "
                            f"stderr {proc.stderr.strip()[-300:]!r}")
            continue
        out = check_gpu.check(check_gpu.parse(proc.stdout), "/nonexistent", 0, proc.returncode, 0, "")
        if out.status != "skip":
            problems.append(f"{name}: the checker calls it {out.status}, not skip: {out.problems}")
        print(f"{name}: {lines[1]}")

    gpu_check = os.path.join(root, "scripts", "gpu-check")
    env = clean_env({"GMT_NVIDIA_SMI": "false"})
    proc = subprocess.run([gpu_check], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 1 or "no GPU here" not in lines[0] or "passed" in lines[0]:
        problems.append(f"scripts/gpu-check without a GPU: exit status {proc.returncode}, output {lines!r}")
    else:
        print(f"scripts/gpu-check: {lines[0]}")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
