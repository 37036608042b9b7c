"""A deferring allocator over libcuda.so.1, shaped like numba.cuda's memory
manager (oom_caught.py's): frees are queued, and an allocation that fails
flushes the queue and asks once more from another line
(Context._attempt_allocation); the second failure is raised. Library code for
the site rule when GPUMEMTRACE_SITE_LIBRARIES names this file."""

import ctypes
import os
from typing import Callable, List

CUDA_ERROR_OUT_OF_MEMORY = 2


class OutOfMemory(Exception):
    pass


class Pool:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
        self.lib.cuMemAlloc_v2.restype = ctypes.c_int
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemFree_v2.restype = ctypes.c_int
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.pending: List[int] = []

    def _allocate(self, size: int) -> int:
        ptr = ctypes.c_uint64(0)
        r = self.lib.cuMemAlloc_v2(ctypes.byref(ptr), size)
        if r == CUDA_ERROR_OUT_OF_MEMORY:
            raise OutOfMemory(f"cuMemAlloc_v2({size}) ran out of memory")
        if r != 0:
            raise RuntimeError(f"cuMemAlloc_v2({size}) returned {r}")
        return ptr.value

    def _attempt(self, allocate: Callable[[], int]) -> int:
        try:
            return allocate()
        except OutOfMemory:
            self.flush()
            return allocate()

    def alloc(self, size: int) -> int:
        return self._attempt(lambda: self._allocate(size))

    def free(self, ptr: int) -> None:
        """Deferred, as numba's deallocations."""
        self.pending.append(ptr)

    def flush(self) -> None:
        while self.pending:
            r = self.lib.cuMemFree_v2(self.pending.pop())
            if r != 0:
                raise RuntimeError(f"cuMemFree_v2 returned {r}")
