"""A test double for JAX (tests/frameworks): what gpumemtrace's bootstrap
uses of it, over the simulated GPU through ctypes, with a toy allocator
shaped like XLA's BFC allocator (docs/guide.md, "JAX's allocator").

    jax.numpy.empty(nbytes)        an array on device 0; its chunk goes back
                                   to the allocator with its last reference
    jax.local_devices()            [device 0]: platform "gpu", id,
                                   local_hardware_id, memory_stats()
    jax.errors.JaxRuntimeError     raised as XLA's allocator raises it:
                                   "RESOURCE_EXHAUSTED: Out of memory while
                                   trying to allocate 1.00GiB with allocator
                                   GPU_0_bfc on device 0" (the size as XLA
                                   writes it)
    jax.fail(message)              raises JaxRuntimeError(message): an error
                                   that is no out-of-memory

The allocator (_bfc.py): at the first allocation its limit is
XLA_PYTHON_CLIENT_MEM_FRACTION (default 0.75) of the device's total, and,
unless XLA_PYTHON_CLIENT_PREALLOCATE=false, one region of that size is taken
from the driver at once; without preallocation a region is taken as a
request needs one (the request rounded up to 2 MiB, then the request alone
when the driver refuses). Chunks are multiples of 256 bytes, best fit, and
free neighbours merge."""

__version__ = "0.11.2+fake"

from . import errors  # noqa: E402,F401
from . import numpy  # noqa: E402,F401
from ._bfc import Device, allocator  # noqa: E402


def local_devices():
    return [Device(0)]


def devices():
    return local_devices()


def fail(message):
    raise errors.JaxRuntimeError(message)


__all__ = ["allocator", "devices", "errors", "fail", "local_devices", "numpy"]
