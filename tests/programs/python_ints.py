"""Test program for the leak check in a Python process: device memory whose
addresses the program keeps only as Python ints in a list (what ctypes,
cuda-python and numba hand out). A Python int keeps its value in 30-bit
digits, never as the 64-bit word of an address, so the pointer scan cannot
see the list: the memory is classed leaked, and the report must say what the
scan cannot see. Prints the PID/LIVE report."""

import ctypes
import os
import sys

from cudactx import CudaError, check, make_current, report_live

MIB = 1024 * 1024
HELD: list = []  # the addresses, as ints, until exit


def run() -> None:
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
    lib.cuMemAlloc_v2.restype = ctypes.c_int
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    make_current(lib)
    for size in (2 * MIB, 4 * MIB):
        ptr = ctypes.c_uint64(0)
        check(lib.cuMemAlloc_v2(ctypes.byref(ptr), size), f"cuMemAlloc_v2({size})")
        HELD.append((ptr.value, size))
        # No 64-bit copy of the address left in the ctypes object.
        ptr.value = 0


def main() -> int:
    try:
        run()
    except CudaError as err:
        print(f"python_ints: {err}", file=sys.stderr)
        return 1
    report_live(HELD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
