"""The toy BFC allocator of the test double (jax/__init__.py says what it
models): regions from libcuda through ctypes, chunks inside them."""

import os
import threading

from gmt_sim_driver import Driver

from .errors import JaxRuntimeError

ROUND = 256
REGION = 2 << 20
_lock = threading.RLock()
_bfc = None


def human(n):
    """A size as XLA's HumanReadableNumBytes writes it."""
    if n < 1024:
        return f"{n}B"
    units = "KMGTPE"
    u = 0
    while n >= 1024 * 1024:
        n //= 1024
        u += 1
    return f"{n / 1024.0:.2f}{units[u]}iB"


class Chunk:
    """An array's memory: back to the allocator with the last reference."""

    def __init__(self, bfc, addr, size):
        self._bfc, self.addr, self.size = bfc, addr, size

    def __del__(self):
        self._bfc.release(self.addr)


class BFC:
    def __init__(self):
        self.drv = Driver()
        free, total = self.drv.mem_info()
        self.total = total
        self.limit = int(total * float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")))
        self.regions = []    # (address, size)
        self.free = {}       # address -> size, free chunks
        self.used = {}       # address -> size
        self.peak = 0
        self.allocs = 0
        if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() not in ("false", "0"):
            self._extend_exact(self.limit)

    def pool_bytes(self):
        return sum(size for _, size in self.regions)

    def in_use(self):
        return sum(self.used.values())

    def _extend_exact(self, size):
        addr = self.drv.malloc(size)
        if addr is None:
            return False
        self.regions.append((addr, size))
        self.free[addr] = size
        return True

    def _extend(self, size):
        if self.pool_bytes() + size > self.limit:
            return False
        grown = min((size + REGION - 1) // REGION * REGION, self.limit - self.pool_bytes())
        return self._extend_exact(grown) or (grown != size and self._extend_exact(size))

    def _best_fit(self, size):
        fits = [(s, a) for a, s in self.free.items() if s >= size]
        return min(fits)[1] if fits else None

    def allocate(self, nbytes):
        size = max(ROUND, (nbytes + ROUND - 1) // ROUND * ROUND)
        with _lock:
            addr = self._best_fit(size)
            if addr is None and self._extend(size):
                addr = self._best_fit(size)
            if addr is None:
                message = (f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {human(size)} "
                           f"with allocator GPU_0_bfc on device 0")
            else:
                chunk = self.free.pop(addr)
                if chunk > size:
                    self.free[addr + size] = chunk - size
                self.used[addr] = size
                self.allocs += 1
                self.peak = max(self.peak, self.in_use())
                return Chunk(self, addr, size)
        raise JaxRuntimeError(message)

    def release(self, addr):
        with _lock:
            size = self.used.pop(addr, None)
            if size is None:
                return
            # Merge with the free neighbours inside the same region.
            region = next(r for r in self.regions if r[0] <= addr < r[0] + r[1])
            after = addr + size
            if after in self.free and after < region[0] + region[1]:
                size += self.free.pop(after)
            before = next((a for a, s in self.free.items() if a + s == addr and a >= region[0]), None)
            if before is not None:
                addr, size = before, self.free.pop(before) + size
            self.free[addr] = size

    def stats(self):
        with _lock:
            pool = self.pool_bytes()
            return {"num_allocs": self.allocs, "bytes_in_use": self.in_use(), "peak_bytes_in_use": self.peak,
                    "largest_alloc_size": max(self.used.values(), default=0), "bytes_limit": self.limit,
                    "bytes_reserved": 0, "peak_bytes_reserved": 0,
                    "largest_free_block_bytes": max(self.free.values(), default=0),
                    "pool_bytes": pool, "peak_pool_bytes": pool}


def allocator():
    global _bfc
    with _lock:
        if _bfc is None:
            _bfc = BFC()
        return _bfc


class Device:
    platform = "gpu"

    def __init__(self, ordinal):
        self.id = ordinal
        self.local_hardware_id = ordinal

    def memory_stats(self):
        return allocator().stats()
