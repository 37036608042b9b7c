"""A test double for CuPy (tests/frameworks): what gpumemtrace's bootstrap
uses of it, over the simulated GPU through ctypes, with a toy memory pool
shaped like CuPy's default one (docs/guide.md, "CuPy's pool").

    cupy.empty(nbytes)                 an array of nbytes on the current device
    del array                          its chunk goes back to the pool
    cupy.get_default_memory_pool()     the pool: used_bytes(), total_bytes(),
                                       free_bytes(), free_all_blocks(),
                                       set_limit(size=), get_limit()
    cupy.cuda.get_allocator()          the pool's malloc (a bound method)
    cupy.cuda.set_allocator(fn)         fn: a pool's malloc, or
                                       cupy.cuda.memory.malloc_direct (no
                                       pool: each array a driver allocation)
    cupy.cuda.MemoryAsyncPool()        a pool whose set_limit/get_limit are
                                       a release threshold (refuses nothing)
    cupy.cuda.runtime.getDevice()      0
    cupy.cuda.memory.OutOfMemoryError  raised as CuPy's pool raises it: after
                                       a driver failure, its cached chunks
                                       freed and the driver asked again, then
                                       after a garbage collection once more;
                                       or at once when the request would pass
                                       the pool's limit (no driver failure)

Chunks are the request rounded up to 512 bytes; a freed chunk is kept and
given again to a request of the same rounded size. FAKE_CUPY_NO_ERROR=1
leaves OutOfMemoryError out (a CuPy the bootstrap cannot observe)."""

import os as _os

__version__ = "14.2.0+fake"

from . import cuda  # noqa: E402
from .cuda import memory as _memory  # noqa: E402

_default_pool = _memory.MemoryPool()
cuda.set_allocator(_default_pool.malloc)


def get_default_memory_pool():
    return _default_pool


class ndarray:
    def __init__(self, ptr):
        self.data = ptr

    @property
    def nbytes(self):
        return self.data.size


def empty(nbytes, dtype=None):
    return ndarray(cuda.get_allocator()(int(nbytes)))


if _os.environ.get("FAKE_CUPY_NO_ERROR") == "1":
    del cuda.memory.OutOfMemoryError
