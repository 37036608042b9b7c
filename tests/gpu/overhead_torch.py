#!/usr/bin/env python3
"""Overhead on real work, the PyTorch half (tests/gpu/overhead.py and
tests/gpu/history_cost.py run it with and without the tracer;
docs/gpu-suite.md): a small training loop, the default caching allocator
unless PYTORCH_CUDA_ALLOC_CONF says otherwise, timed after a warm-up, as
"OVERHEAD <what> <steps> <value>" lines:

  mlp          an MLP, AdamW, random batches (ms per step);
  transformer  a small transformer encoder (6 layers, d_model 256, 8 heads,
               batch 32 of 128 tokens), AdamW: many small tensors a step —
               the case where PyTorch's allocation history (which the
               tracer's bootstrap turns on) costs most. Also prints the
               allocations a step makes (PyTorch's own count).

Without torch or a GPU: SKIP.
Usage: overhead_torch.py [STEPS] [mlp|transformer] (default 200 mlp)
"""
from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    steps = int(argv[0]) if argv else 200
    kind = argv[1] if len(argv) > 1 else "mlp"
    if kind not in ("mlp", "transformer"):
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (any import failure: no torch here)
        print(f"SKIP torch does not import: {type(e).__name__}: {e}")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP torch {torch.__version__} sees no CUDA device")
        return 0
    torch.manual_seed(0)
    if kind == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 4096), torch.nn.GELU(),
            torch.nn.Linear(4096, 1024)).cuda()

        def batch():
            return torch.randn(256, 1024, device="cuda")
    else:
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, num_layers=6, enable_nested_tensor=False).cuda()

        def batch():
            return torch.randn(32, 128, 256, device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step() -> None:
        loss = model(batch()).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    allocs = (torch.cuda.memory_stats().get("allocation.all.allocated", 0) - before) / steps
    name = "torch-train-step" if kind == "mlp" else "torch-transformer-step"
    print(f"OVERHEAD {name} {steps} {ms:.3f}")
    if kind == "transformer":
        print(f"OVERHEAD {name}-allocations {steps} {allocs:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
