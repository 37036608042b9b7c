#!/usr/bin/env python3
"""CuPy under the tracer (docs/gpu-suite.md), one pool per mode:

  default  cupy's MemoryPool: every new block is one cudaMalloc of the size
           rounded up to 512 bytes, kept (cached) when the array goes, given
           back by free_all_blocks(). The tracer's device-kind allocations
           are exactly the arrays' blocks (data.mem.ptr, data.mem.size), the
           cached ones included, and add up to pool.total_bytes();
  async    cupy's MemoryAsyncPool: cudaMallocAsync per block (rounded to
           512 bytes) from the device's current pool, whose release
           threshold it sets to UINT64_MAX: each array's block is an async
           allocation, and pool.total_bytes() (the pool's reserved bytes) is
           what the snapshot's pools say;
  oom      the default pool at its out-of-memory: 8 MiB kept, three 64 MiB
           blocks cached, then an array of twice the device. The pool frees
           its cache and asks again, then raises OutOfMemoryError: the
           episode's snapshot names the request and never_fits, and holds
           CuPy's state (the bootstrap's hand-over at the error) equal to
           what the program's pool says in its handler (FRAMEWORK).

Only cupy.empty: no kernel is compiled or run. Every mode also compares
cudaMemGetInfo with the snapshots' footprint between checkpoints. Without
CuPy, or without a GPU for it, the script says SKIP.
Usage: cupy_memory.py default|async|oom
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmt_probe as gp  # noqa: E402

MIB = 1 << 20
SIZES = [1000, 1 * MIB, 3 * MIB + 7, 64 * MIB]
DEV = 0


def report(cupy, label: str, mode: str, pool, blocks: list[tuple[int, int]]) -> None:
    kind = "device" if mode == "default" else "async"
    gp.checkpoint(label, [kind])
    free, total = cupy.cuda.runtime.memGetInfo()
    gp.meminfo(label, DEV, free, total)
    for ptr, size in blocks:
        gp.live(label, ptr, size, kind, DEV)
    if mode == "default":
        gp.live_bytes(label, DEV, ["device"], pool.total_bytes())
    else:
        gp.pool(label, DEV, pool.total_bytes())


def run_oom(cupy, pool) -> None:
    keep = cupy.empty(8 * MIB, dtype=cupy.uint8)
    cached = [cupy.empty(64 * MIB, dtype=cupy.uint8) for _ in range(3)]
    del cached
    cupy.cuda.Stream.null.synchronize()
    _, total = cupy.cuda.runtime.memGetInfo()
    try:
        cupy.empty(2 * total, dtype=cupy.uint8)
    except cupy.cuda.memory.OutOfMemoryError:
        used, reserved = pool.used_bytes(), pool.total_bytes()
    else:
        sys.exit("cupy_memory.py oom: no out-of-memory")
    gp.checkpoint_at("oom", "@oom")
    gp.oom("oom", "*", 2 * total, DEV, exact=False)
    gp.verdict("oom", "never_fits", primary=True)
    gp.framework("oom", DEV, used, reserved)
    gp.note(f"at the out-of-memory the pool held {used} bytes used of {reserved}")
    del keep


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("default", "async", "oom"):
        print(__doc__.rstrip(), file=sys.stderr)
        return 2
    mode = argv[0]
    gp.begin(f"cupy-{mode}")
    try:
        import cupy
    except Exception as e:  # noqa: BLE001 (any import failure: no CuPy here)
        gp.skip(f"cupy does not import: {type(e).__name__}: {e}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 (CUDARuntimeError without a driver)
        gp.skip(f"cupy {cupy.__version__} sees no CUDA device: {e}")
    if count == 0:
        gp.skip(f"cupy {cupy.__version__} sees no CUDA device")
    cupy.cuda.Device(DEV).use()
    if mode in ("default", "oom"):
        pool = cupy.get_default_memory_pool()
    else:
        pool = cupy.cuda.MemoryAsyncPool()
    cupy.cuda.set_allocator(pool.malloc)
    # The context before the first checkpoint.
    warm = cupy.empty(1, dtype=cupy.uint8)
    del warm
    cupy.cuda.Stream.null.synchronize()
    pool.free_all_blocks()
    report(cupy, "start", "default" if mode == "oom" else mode, pool, [])
    if mode == "oom":
        run_oom(cupy, pool)
        gp.checkpoint_at("exit", "@exit")
        return 0

    arrays = [cupy.empty(n, dtype=cupy.uint8) for n in SIZES]
    cupy.cuda.Stream.null.synchronize()
    blocks = [(a.data.mem.ptr, a.data.mem.size) for a in arrays]
    report(cupy, "allocated", mode, pool, blocks)

    # The default pool keeps the block (still a live cudaMalloc); the async
    # pool frees it (cudaFreeAsync) and keeps the memory reserved.
    del arrays[1]
    cupy.cuda.Stream.null.synchronize()
    if mode == "async":
        blocks.pop(1)
    report(cupy, "cached", mode, pool, blocks)
    pool.free_all_blocks()
    if mode == "default":
        blocks.pop(1)
    report(cupy, "emptied", mode, pool, blocks)

    del arrays[:]
    cupy.cuda.Stream.null.synchronize()
    pool.free_all_blocks()
    report(cupy, "end", mode, pool, [])
    gp.note(f"cupy {cupy.__version__}, {len(SIZES)} arrays")
    gp.checkpoint_at("exit", "@exit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
