"""Benchmark workload: what gpumemtrace's PyTorch bootstrap costs, on the
PyTorch double (tests/frameworks/fake_torch) over the simulated GPU, run
under `gpumemtrace run` (or untraced) by bench/run.py:

- step_ns: an optimizer step with the bootstrap's step hook (its mark: the
  tracer's gmt_step, the step's time kept, memory_allocated()) — or without
  it, GPUMEMTRACE_FRAMEWORKS=0 or untraced; the difference is the hook's.
- handover_s: the state handed over at a snapshot: torch.cuda.memory.
  _snapshot() and state_of() (segments, blocks, the history's tensor events
  as trace_of() packs them, each stack once, the steps) as JSON, for a
  history of ENTRIES entries and BLOCKS live tensors;
- dump_s: gpumemtrace.dump() with that state (the hand-over, and the tracer's
  analysis: the tensors, the document) — or without it; the difference is
  the tensor level's;
- oom_s: an out-of-memory with that history (a request past the device):
  the tracer's snapshot, and with the bootstrap the hand-over and the
  snapshot made again with it, the replay of the history through
  the allocator model that the diagnosis cites included.

Prints "name value" lines. The double's own history (Python frames taken by
traceback at each allocation) stands in for PyTorch's, whose cost per
allocation is PyTorch's own: measured on a GPU (docs/gpu-suite.md).

Usage: torch_handover.py [STEPS [ENTRIES [BLOCKS]]]"""

import json
import os
import sys
import time

MIB = 1 << 20


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    entries = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    blocks = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    os.environ["GPUMEMTRACE_HISTORY"] = str(entries)
    import torch

    weights = torch.empty(64 * MIB)
    opt = torch.optim.Optimizer([weights])
    # The history filled: tensors made and freed, and BLOCKS kept.
    kept = [torch.empty(4096) for _ in range(blocks)]
    for _ in range(max(0, entries - 2 * blocks) // 3):
        t = torch.empty(8192)
        del t

    t0 = time.perf_counter_ns()
    for _ in range(steps):
        opt.step()
    print(f"step_ns {(time.perf_counter_ns() - t0) / steps:.1f}")

    frameworks = sys.modules.get("gpumemtrace.frameworks")
    if frameworks is not None and frameworks.enabled():
        t0 = time.perf_counter()
        state = frameworks.state_of(torch.cuda.memory._snapshot(), "api", None, None, torch.__version__)
        text = json.dumps(state)
        print(f"handover_s {time.perf_counter() - t0:.4f}")
        print(f"handover_bytes {len(text)}")
        print(f"trace_events {sum(len(t['events']) for t in state['traces'])}")
    import gpumemtrace
    if gpumemtrace.available():
        t0 = time.perf_counter()
        gpumemtrace.dump()
        print(f"dump_s {time.perf_counter() - t0:.4f}")
    # An out-of-memory with that history: the tracer's snapshot at the
    # driver's failure and, with the bootstrap, the hand-over at PyTorch's
    # observer and the snapshot made again with it (the tensors, the
    # replay of the history the diagnosis cites, the document).
    t0 = time.perf_counter()
    try:
        torch.empty(8 << 30)  # past the 4 GiB device bench/run.py gives
    except torch.cuda.OutOfMemoryError:
        print(f"oom_s {time.perf_counter() - t0:.4f}")
    del kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
