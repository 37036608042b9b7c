"""Test program for the Python row of the matrix: ctypes loads libcuda.so.1
RTLD_LOCAL (as Python extensions, ctypes and Numba do) and allocates and frees
through it. Prints the same PID/LIVE report as the C programs."""

import ctypes
import os
import sys

from cudactx import CudaError, check, make_current

MIB = 1024 * 1024


def load_driver() -> ctypes.CDLL:
    # RTLD_LOCAL is ctypes' default; spelled out because it is the point.
    lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
    for name in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocManaged"):
        getattr(lib, name).restype = ctypes.c_int
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    lib.cuMemAllocManaged.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.c_size_t, ctypes.c_uint]
    return lib


def alloc(lib: ctypes.CDLL, size: int) -> int:
    ptr = ctypes.c_uint64(0)
    check(lib.cuMemAlloc_v2(ctypes.byref(ptr), size), f"cuMemAlloc_v2({size})")
    return ptr.value


def run() -> list:
    """Allocates and frees; returns the (address, size, kind, device) kept."""
    lib = load_driver()
    make_current(lib)

    kept = []
    sizes = [512, 1 * MIB, 5 * MIB, 4096, 3 * MIB]
    ptrs = [alloc(lib, size) for size in sizes]
    # Free the second and the fourth; keep the others.
    for index in (1, 3):
        check(lib.cuMemFree_v2(ptrs[index]), "cuMemFree_v2")
    for index in (0, 2, 4):
        kept.append((ptrs[index], sizes[index], "device", 0))

    managed = ctypes.c_uint64(0)
    check(lib.cuMemAllocManaged(ctypes.byref(managed), 2 * MIB, 1), "cuMemAllocManaged")
    kept.append((managed.value, 2 * MIB, "managed", 0))
    return kept


def main() -> int:
    try:
        kept = run()
    except CudaError as err:
        print(f"ctypes_loader: {err}", file=sys.stderr)
        return 1
    lines = [f"PID {os.getpid()} main"]
    lines += [f"LIVE {addr:#x} {size} {kind} {device}" for addr, size, kind, device in kept]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
