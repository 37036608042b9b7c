#!/usr/bin/env python3
"""Benchmark: `gpumemtrace view` merging the snapshots of RANKS ranks of N
live allocations each (docs/fleet.md, "Hundreds of ranks in the viewer").

Writes RANKS snapshot files with the viewer tests' generator
(tests/view/fixtures.py, synthetic(): N allocations over 50 sites, a rank,
pid and seed of their own, every 64th rank out of memory) into a temporary
directory, then times, as separate processes:

- the baseline: one Python process that reads every file with json.loads
  and nothing else, the least a Python tool reading them must do;
- the viewer: tools/gpumemtrace-view on all the files, its terminal summary
  of the merge to /dev/null.

Each run's memory is the peak (the largest of the runs) of the resident set summed over the process
and its children (the viewer's workers), sampled every 20 ms from /proc.
Prints "name value" lines for bench/run.py.

Each is run REPEAT times (default 1) on the same files; the medians are
printed.

Usage: bench/view_merge.py RANKS N [REPEAT]
"""
from __future__ import annotations

import json
import statistics
import os
import subprocess
import sys
import tempfile
import time
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "view"))
import fixtures  # noqa: E402

VIEWER = os.path.join(ROOT, "tools", "gpumemtrace-view")
READ_ALL = "import json, sys\nfor p in sys.argv[1:]:\n    with open(p, 'rb') as f:\n        json.loads(f.read())\n"


def write_ranks(where: str, ranks: int, n: int) -> Tuple[List[str], int]:
    paths, size = [], 0
    for r in range(ranks):
        doc, _ = fixtures.synthetic(n=n, sites=50, seed=r, pid=10_000 + r, rank=r, oom=r % 64 == 17)
        path = os.path.join(where, f"gpumemtrace.{10_000 + r}.{'oom' if r % 64 == 17 else 'exit'}.1.json")
        text = json.dumps(doc, separators=(",", ":"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
        size += len(text)
    return paths, size


def _tree_rss(pid: int) -> int:
    """Resident bytes of pid and its descendants, now (0 once gone)."""
    total, todo = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * page
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def timed(argv: List[str]) -> Tuple[float, int]:
    """Wall seconds and peak resident bytes (summed over the tree) of argv."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"view_merge: {argv[1]} failed ({proc.returncode}): {err.strip()[-400:]}")
    return wall, peak


def main() -> int:
    if len(sys.argv) not in (3, 4) or not all(a.isdigit() for a in sys.argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    ranks, n = int(sys.argv[1]), int(sys.argv[2])
    repeat = max(1, int(sys.argv[3])) if len(sys.argv) == 4 else 1
    with tempfile.TemporaryDirectory(prefix="gmt-merge-") as where:
        paths, size = write_ranks(where, ranks, n)
        base = [timed([sys.executable, "-c", READ_ALL] + paths) for _ in range(repeat)]
        view = [timed([sys.executable, VIEWER] + paths) for _ in range(repeat)]
    base_s, base_rss = statistics.median(b[0] for b in base), max(b[1] for b in base)
    view_s, view_rss = statistics.median(v[0] for v in view), max(v[1] for v in view)
    print(f"ranks {ranks}\nallocations {n}\nsnapshot_bytes {size}\nworkers {len(os.sched_getaffinity(0))}")
    print(f"json_loads_s {base_s:.4f}\njson_loads_peak_rss {base_rss}")
    print(f"view_s {view_s:.4f}\nview_peak_rss {view_rss}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
