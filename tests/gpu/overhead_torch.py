#!/usr/bin/env python3
"""Overhead on real work, the PyTorch half (tests/gpu/overhead.py runs it
with and without the tracer; docs/gpu-suite.md): a small training loop — an
MLP, AdamW, random batches, the default caching allocator unless
PYTORCH_CUDA_ALLOC_CONF says otherwise — timed after a warm-up, as one line
"OVERHEAD <what> <steps> <ms per step>". Without torch or a GPU: SKIP.
Usage: overhead_torch.py [STEPS] (default 200)
"""
from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    steps = int(argv[0]) if argv else 200
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure: no torch here)
        print(f"SKIP torch does not import: {type(e).__name__}: {e}")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP torch {torch.__version__} sees no CUDA device")
        return 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    print(f"OVERHEAD torch-train-step {steps} {ms:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
