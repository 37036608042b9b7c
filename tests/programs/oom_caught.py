"""Test program for the episode rule's call sites in Python (docs/guide.md,
"The episode rule"; issue 36), shaped as the numba.cuda program that found
the defect: its allocator (deferring_pool.py) queues frees and, at an
out-of-memory, flushes the queue and asks again from another line, then
raises. Run with GMTSIM_MEMORY=1G; sizes in MiB.

Set-up: 500 held, 100 spare, 150 and 200 more (950 live); the 150 queued.
Phase three: 300 fails (#1), the flush frees the 150, 300 fails again (#2);
  the error is raised, and the program catches it and queues the 200.
Phase four: 250 fails (#3), the flush frees the 200, and the retry
  succeeds: another call of the program, nothing freed or allocated since
  #2: #1-#2 and #3 are two episodes, the first described at #2.
Phase five: 400 fails (#4), nothing to flush, fails again (#5), raised:
  one call of the program, one episode (with the pool named library code).

Prints each call's line ("PHASE_THREE 40") for the harness's site labels,
then the PID/LIVE report of the C programs."""

import os
import sys

from cudactx import make_current
from deferring_pool import OutOfMemory, Pool

MIB = 1024 * 1024


def phase_three(pool: Pool) -> None:
    try:
        line = sys._getframe().f_lineno; pool.alloc(300 * MIB)  # noqa: E702 (the call's line)
    except OutOfMemory:
        print(f"PHASE_THREE {line}")
    else:
        raise SystemExit("phase three: 300 MiB fitted")


def phase_four(pool: Pool) -> int:
    line = sys._getframe().f_lineno; ptr = pool.alloc(250 * MIB)  # noqa: E702
    print(f"PHASE_FOUR {line}")
    return ptr


def phase_five(pool: Pool) -> None:
    try:
        line = sys._getframe().f_lineno; pool.alloc(400 * MIB)  # noqa: E702
    except OutOfMemory:
        print(f"PHASE_FIVE {line}")
    else:
        raise SystemExit("phase five: 400 MiB fitted")


def main() -> int:
    pool = Pool()
    make_current(pool.lib)
    held = pool.alloc(500 * MIB)
    spare = pool.alloc(100 * MIB)
    a = pool.alloc(150 * MIB)
    c = pool.alloc(200 * MIB)
    pool.free(a)
    phase_three(pool)
    pool.free(c)
    d = phase_four(pool)
    phase_five(pool)
    live = [(held, 500 * MIB), (spare, 100 * MIB), (d, 250 * MIB)]
    sys.stdout.write("\n".join([f"PID {os.getpid()} main"] +
                               [f"LIVE {ptr:#x} {size} device 0" for ptr, size in live]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
