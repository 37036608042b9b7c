"""Benchmark program for the exit leak scan of a Python process that imported
numba and numba.cuda (the modules, libraries and heap they bring): makes LIVE
device allocations of 4 KiB through ctypes on libcuda.so.1, keeps the
addresses of half of them in a malloc'd array (still referenced) and drops the
other half (leaked), then exits. bench/run.py runs it under an interpreter
that imports numba (Debian's python3-numba is for /usr/bin/python3), untraced
and traced with GPUMEMTRACE_LEAK_CHECK, and reads the scan's figures from the
exit snapshot. It prints "imported numba VERSION". Standard library and numba
only; numba itself never touches the device here.

Usage: leak_scan_numba.py [LIVE]"""

import ctypes
import os
import sys

import numba  # noqa: F401  (imported for what it maps and allocates)
import numba.cuda  # noqa: F401


def main() -> int:
    live = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
    libc = ctypes.CDLL(None)
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    libc.malloc.restype = ctypes.c_void_p
    ctx = ctypes.c_void_p(0)
    if lib.cuInit(0) or lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) or lib.cuCtxSetCurrent(ctx):
        print("leak_scan_numba: cannot start", file=sys.stderr)
        return 1
    # A C array, not Python ints (which keep no 64-bit word of the value).
    kept = (ctypes.c_uint64 * (live // 2)).from_address(libc.malloc(8 * (live // 2)))
    ptr = ctypes.c_uint64(0)
    for i in range(live):
        if lib.cuMemAlloc_v2(ctypes.byref(ptr), 4096):
            print("leak_scan_numba: cuMemAlloc_v2 failed", file=sys.stderr)
            return 1
        if i % 2 == 0:
            kept[i // 2] = ptr.value
    ptr.value = 0
    print("imported numba", numba.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
