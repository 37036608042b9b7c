#!/usr/bin/env python3
"""PyTorch's own memory tools on the viewer's PyTorch export of a real
snapshot (docs/gpu-suite.md, torch-memviz): loads PICKLE (written by
`gpumemtrace view --pytorch PICKLE SNAPSHOT`) and runs
torch.cuda._memory_viz's `stats` (segsum) and `trace` on it, as
`python -m torch.cuda._memory_viz stats|trace PICKLE` would, then checks
what they print against SNAPSHOT itself:

- stats: one segment per live device-side allocation of the snapshot (pinned
  host memory is left out of the export), total_reserved their bytes;
  segsum's own assertion (allocated + free = reserved) holds;
- trace: each device's entry count is that of the export, and an
  out-of-memory snapshot's trace shows the failure (raise OutOfMemoryError).

Run by the bundle's runner with the interpreter whose torch imports. Prints
one line per check ("ok ..." or "FAIL ..."); SKIP and exit 77 when torch or
its _memory_viz module does not import; exit 1 when a check fails.
Usage: memviz_check.py SNAPSHOT PICKLE
"""
from __future__ import annotations

import json
import pickle
import re
import sys
from typing import Any

HOST_KINDS = ("host", "registered")


def checks(doc: dict[str, Any], data: dict[str, Any], mv: Any) -> list[tuple[bool, str]]:
    """(passed, what) for each check; mv is torch.cuda._memory_viz."""
    out: list[tuple[bool, str]] = []
    live = [a for a in doc["allocations"] if a["device"] >= 0 and a["kind"] not in HOST_KINDS]
    try:
        stats = mv.segsum(data)
    except Exception as e:  # noqa: BLE001 - PyTorch's code on our data: any failure is the finding
        return [(False, f"_memory_viz stats raised {type(e).__name__}: {e}")]
    m = re.search(r"^segments: (\d+)$", stats, re.M)
    got = int(m.group(1)) if m else None
    out.append((got == len(live), f"stats: {got} segments, the snapshot has {len(live)} live device allocations"))
    want_total = f"total_reserved: {mv.Bytes(sum(a['size'] for a in live))}"
    out.append((want_total in stats, f"stats: '{want_total}' in its output"))
    try:
        trace = mv.trace(data)
    except Exception as e:  # noqa: BLE001
        return out + [(False, f"_memory_viz trace raised {type(e).__name__}: {e}")]
    counts = [int(n) for n in re.findall(r"^(\d+) entries$", trace, re.M)]
    want = [len(t) for t in data["device_traces"] if t]
    out.append((counts == want, f"trace: entries per device {counts}, the export has {want}"))
    if doc["reason"] == "oom":
        # older PyTorch writes "raise OutOfMemoryError() # …", 2.11 "raise OutOfMemoryError # …"
        shown = re.search(r"^raise OutOfMemoryError(\(\))? # .* requested", trace, re.M)
        other = [line for line in trace.splitlines() if "OutOfMemory" in line or "oom" in line]
        out.append((shown is not None, "trace: the out-of-memory is shown"
                    + ("" if shown else f" (its lines naming it: {other[:3]})")))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("TEST torch-memviz")
    try:
        import torch.cuda._memory_viz as mv
    except Exception as e:  # noqa: BLE001 - any import failure means: not here
        print(f"SKIP torch.cuda._memory_viz does not import ({type(e).__name__}: {e})")
        return 77
    with open(argv[0], encoding="utf-8") as f:
        doc = json.load(f)
    with open(argv[1], "rb") as f:
        data = pickle.load(f)
    results = checks(doc, data, mv)
    for ok, what in results:
        print(("ok " if ok else "FAIL ") + what)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
