#!/usr/bin/env python3
"""Benchmark: the viewer's HTML report of a snapshot of N live allocations.

Builds a snapshot document of N allocations over SITES sites with the viewer
tests' generator (tests/view/fixtures.py, synthetic()) and, in this process,
times what `gpumemtrace view --html` does with it: gpumemtrace.view.load.parse (read
and check) and gpumemtrace.view.html.report. The baseline, in the same process: only
reading and writing the same document (json.loads + json.dumps), the least
any tool that reads the snapshot and writes a page of it must do. Prints
"name value" lines for bench/run.py.

Usage: bench/view_report.py N [SITES]
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "view"))
import fixtures  # noqa: E402
from gpumemtrace.view import html, load  # noqa: E402


def measure(n: int, sites: int) -> dict[str, float]:
    doc, _ = fixtures.synthetic(n=n, sites=sites, depth=16)
    text = json.dumps(doc)
    del doc
    gc.collect()

    t0 = time.perf_counter()
    out = json.dumps(json.loads(text))
    baseline = time.perf_counter() - t0
    del out
    gc.collect()

    t0 = time.perf_counter()
    page = html.report([load.parse(text, "bench.json")], "single", ["bench.json"])
    report = time.perf_counter() - t0
    return {"allocations": n, "sites": sites, "snapshot_bytes": len(text.encode()),
            "report_bytes": len(page.encode()), "json_roundtrip_s": baseline, "report_s": report}


def main() -> int:
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    sites = int(sys.argv[2]) if len(sys.argv) == 3 else 1024
    for k, v in measure(int(sys.argv[1]), sites).items():
        print(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
