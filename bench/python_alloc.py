"""Benchmark workload: PAIRS cuMemAlloc_v2 + cuMemFree_v2 pairs from a Python
call chain DEPTH frames deep, through ctypes.PyDLL (GIL "held": the tracer
walks the frames through the C API) or ctypes.CDLL (GIL "released": the
tracer reads them from memory, as for PyTorch's allocations). Prints
"ns_per_pair N". bench/run.py runs each untraced, traced without Python
frames and traced with them.

Usage: python_alloc.py [PAIRS [DEPTH [held|released]]]"""

import ctypes
import os
import sys
import time


def main() -> int:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    depth = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    gil = sys.argv[3] if len(sys.argv) > 3 else "held"
    lib = (ctypes.PyDLL if gil == "held" else ctypes.CDLL)("libcuda.so.1", mode=os.RTLD_LOCAL)
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    ctx = ctypes.c_void_p(0)
    if (lib.cuInit(0) or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
            or lib.cuCtxSetCurrent(ctx)):
        print("python_alloc: cannot start", file=sys.stderr)
        return 1
    ptr = ctypes.c_uint64(0)
    ref = ctypes.byref(ptr)
    alloc, free = lib.cuMemAlloc_v2, lib.cuMemFree_v2

    def loop() -> float:
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            if alloc(ref, 1024) or free(ptr.value):
                raise RuntimeError("a call failed")
        return (time.perf_counter_ns() - t0) / pairs

    def nest(n: int) -> float:
        return loop() if n <= 1 else nest(n - 1)

    print(f"ns_per_pair {nest(depth):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
