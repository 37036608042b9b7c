#!/usr/bin/env python3
"""A program that exits while the tracer's background thread writes a
snapshot: the exit waits for the file (docs/reliability.md, "An exit never
cuts a snapshot short").

The program (on the simulated GPU, through gmt_sim_driver) holds 100,000
small allocations and starts a snapshot the background thread writes:

- peak: a 1 GiB allocation made and freed — the live bytes fall well below
  the top, and the background thread writes the peak snapshot;
- signal: SIGUSR2, whose snapshot the background thread writes.

It watches the directory until the snapshot's temporary file appears (the
write under way), then returns at once: a normal exit, which must not end
the process before the file is in place. A double of a slow disk
(slow_writes.c, preloaded before the tracer: 20 ms more per write() to a
regular file on any thread but the main one, 1 s at most) makes the write
outlast the exit.
Checked: the snapshot exists, whole (it parses, its live count is the
program's: at the peak the 1 GiB allocation too), and no temporary file is
left. Before the exit waited, the file was lost (its temporary file left
behind). Where the program never saw the write under way (it finished
between two looks), the check of the file still holds, and the line says
so.

Usage: test_exit_writes.py LIBGPUMEMTRACE SLOW_WRITES SOURCE_ROOT"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_torch_double as td  # noqa: E402 - its environment and checks

check = td.check
SMALL = 100_000

PROGRAM = r'''
import os, signal, sys, time
from gmt_sim_driver import Driver
what = sys.argv[1]
d = Driver()
small = [d.malloc(4096) for _ in range(SMALL)]
if what == "peak":
    d.free(d.malloc(1 << 30))
else:
    os.kill(os.getpid(), signal.SIGUSR2)
began, seen = time.monotonic(), False
while time.monotonic() - began < 60:
    names = os.listdir(".")
    if any(n.startswith(".gpumemtrace.") and f".{what}." in n and n.endswith(".tmp") for n in names):
        seen = True
        break
    if any(n.startswith("gpumemtrace.") and f".{what}." in n and n.endswith(".json") for n in names):
        break
    time.sleep(0.0005)
print("WRITING" if seen else "WRITTEN", flush=True)
'''.replace("SMALL", str(SMALL))


def test_exit_during_write(lib: str, double: str, env: dict, what: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gmt-exit-writes-") as tmp:
        script = os.path.join(tmp, "exits.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(PROGRAM)
        run_env = dict(env, GMTSIM_MEMORY="8G", GPUMEMTRACE_DIR=tmp, GPUMEMTRACE_SNAPSHOT_ON=what,
                       LD_PRELOAD=" ".join(p for p in (env.get("LD_PRELOAD", ""), double, lib) if p))
        r = subprocess.run([sys.executable, script, what], env=run_env, cwd=tmp, capture_output=True, text=True,
                           timeout=600)
        files = glob.glob(os.path.join(tmp, f"gpumemtrace.*.{what}.*.json"))
        left = [n for n in os.listdir(tmp) if n.endswith(".tmp")]
        live = None
        if len(files) == 1:
            try:
                with open(files[0], encoding="utf-8") as f:
                    live = json.load(f)["summary"]["live_count"]
            except (OSError, ValueError, KeyError) as e:
                live = f"{type(e).__name__}: {e}"
        seen = "WRITING" in r.stdout
        # The peak's is of the top: the 1 GiB allocation live too.
        check(r.returncode == 0 and len(files) == 1 and live == SMALL + (what == "peak") and not left,
              f"{what}: the snapshot the background thread was writing at exit is whole"
              + ("" if seen else " (the write was not seen under way: it finished between two looks)"),
              (r.returncode, r.stdout, r.stderr[-600:], files, live, left))


def main(argv: list) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    lib, double, source = os.path.abspath(argv[0]), os.path.abspath(argv[1]), argv[2]
    env = td.base_env(source)
    for what in ("peak", "signal"):
        test_exit_during_write(lib, double, env, what)
    print(f"{'FAIL' if td.FAILURES else 'ok'}: {len(td.FAILURES)} failed")
    return 1 if td.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
