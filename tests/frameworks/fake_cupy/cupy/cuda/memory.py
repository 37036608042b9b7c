"""cupy.cuda.memory of the test double: the toy pool over libcuda through
ctypes, and the out-of-memory error CuPy's pool raises."""

import gc
import threading

from gmt_sim_driver import Driver

ROUND = 512
_lock = threading.Lock()
_drv = None


class OutOfMemoryError(MemoryError):
    """As CuPy's: OutOfMemoryError(size, total, limit=0)."""

    def __init__(self, size, total, limit=0):
        if limit == 0:
            msg = f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes)."
        else:
            msg = (f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                   f"limit set to: {limit:,} bytes).")
        super().__init__(msg)


def _driver():
    global _drv
    with _lock:
        if _drv is None:
            _drv = Driver()
        return _drv


class MemoryPointer:
    """An array's memory: its chunk goes back to the pool when the last
    reference goes."""

    def __init__(self, pool, ptr, size):
        self._pool, self.ptr, self.size = pool, ptr, size

    def __del__(self):
        self._pool._give_back(self.ptr, self.size)


class _Direct:
    """A chunk straight from the driver, freed with its last reference."""

    def __init__(self, ptr, size):
        self.ptr, self.size = ptr, size

    def __del__(self):
        _driver().free(self.ptr)


def malloc_direct(size):
    """An allocator that is no pool's (as cupy.cuda.set_allocator(None)
    makes CuPy's): each array its own driver allocation."""
    ptr = _driver().malloc(size)
    if ptr is None:
        raise OutOfMemoryError(size, 0)
    return _Direct(ptr, size)


class MemoryPool:
    def __init__(self):
        self._used = {}   # address -> size
        self._free = {}   # rounded size -> [addresses]
        self._limit = 0

    def malloc(self, size):
        size = max(ROUND, (size + ROUND - 1) // ROUND * ROUND)
        cached = self._free.get(size)
        if cached:
            ptr = cached.pop()
        else:
            if self._limit and self.total_bytes() + size > self._limit:
                self.free_all_blocks()
                if self.total_bytes() + size > self._limit:
                    raise OutOfMemoryError(size, self.total_bytes(), self._limit)
            ptr = _driver().malloc(size)
            if ptr is None:
                self.free_all_blocks()
                ptr = _driver().malloc(size)
            if ptr is None:
                gc.collect()
                self.free_all_blocks()
                ptr = _driver().malloc(size)
            if ptr is None:
                raise OutOfMemoryError(size, self.total_bytes(), self._limit)
        self._used[ptr] = size
        return MemoryPointer(self, ptr, size)

    def _give_back(self, ptr, size):
        if self._used.pop(ptr, None) is not None:
            self._free.setdefault(size, []).append(ptr)

    def free_all_blocks(self, stream=None):
        for size, ptrs in self._free.items():
            for p in ptrs:
                _driver().free(p)
        self._free.clear()

    def used_bytes(self):
        return sum(self._used.values())

    def free_bytes(self):
        return sum(size * len(ptrs) for size, ptrs in self._free.items())

    def total_bytes(self):
        return self.used_bytes() + self.free_bytes()

    def set_limit(self, size=None, fraction=None):
        self._limit = int(size or 0)

    def get_limit(self):
        return self._limit


class MemoryAsyncPool(MemoryPool):
    """Shaped like CuPy's MemoryAsyncPool where the bootstrap reads it: its
    set_limit/get_limit are the CUDA pool's release threshold (what it keeps
    cached), which refuses nothing — a program may set it to 2**64 - 1 to
    keep everything."""

    def __init__(self):
        super().__init__()
        self._threshold = 0

    def malloc(self, size):
        limit, self._limit = self._limit, 0
        try:
            return super().malloc(size)
        finally:
            self._limit = limit

    def set_limit(self, size=None, fraction=None):
        self._threshold = int(size or 0)

    def get_limit(self):
        return self._threshold
