"""Test program: the garbage collector runs finalisers that free device
memory, and collection falls due at each point of an allocation call in turn. Reading Python
frames inside the tracer's hook creates frame objects (3.11 and later); were
the collector to run there, its frees would happen inside the hook and go
unrecorded. The exit snapshot must still equal the simulator's ledger.

Prints the PID/LIVE report of the other test programs (run_program.py)."""

import ctypes
import gc
import os
import sys

from cudactx import check, make_current, report_live

MIB = 1024 * 1024
ROUNDS = 40


lib = ctypes.PyDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]


def alloc(size: int) -> int:
    ptr = ctypes.c_uint64(0)
    check(lib.cuMemAlloc_v2(ctypes.byref(ptr), size), f"cuMemAlloc_v2({size})")
    return ptr.value


class Cycle:
    """Device memory owned by an object only the collector can free."""

    def __init__(self) -> None:
        self.ptr = alloc(4096)
        self.me = self

    def __del__(self) -> None:
        check(lib.cuMemFree_v2(self.ptr), "cuMemFree_v2")


def deep(n: int, ref: object, size: int) -> int:
    """Calls the allocation n + 1 Python frames down, none of whose frame
    objects exists yet: reading them in the hook creates them."""
    return lib.cuMemAlloc_v2(ref, size) if n == 0 else deep(n - 1, ref, size)


def round_with_garbage(due: int, size: int) -> int:
    """One allocation with a cycle waiting and collection due at the
    due-th allocation of a tracked object from now."""
    ptr = ctypes.c_uint64(0)
    ref = ctypes.byref(ptr)
    gc.disable()
    Cycle()
    gc.set_threshold(gc.get_count()[0] + due)
    gc.enable()
    result = deep(6, ref, size)
    gc.disable()
    check(result, f"cuMemAlloc_v2({size})")
    return ptr.value


def main() -> int:
    make_current(lib)

    # NOTE: which allocation of a tracked object falls inside the hook depends
    # on the interpreter's version; trying every one of the first ROUNDS
    # makes some collection fall due there.
    kept = [(round_with_garbage(due, MIB + due), MIB + due) for due in range(ROUNDS)]
    gc.set_threshold(700, 10, 10)
    gc.enable()
    gc.collect()

    report_live(kept)
    return 0


if __name__ == "__main__":
    sys.exit(main())
