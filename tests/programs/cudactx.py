"""Shared by the Python test programs: make device 0's primary context current
through a ctypes handle on libcuda.so.1."""

import ctypes
import os
import sys


class CudaError(Exception):
    pass


def check(result: int, what: str) -> None:
    if result != 0:
        raise CudaError(f"{what} returned {result}, expected 0")


def make_current(lib: ctypes.CDLL) -> ctypes.c_void_p:
    """cuInit, then device 0's primary context, current on this thread;
    returns the context (current on other threads with cuCtxSetCurrent)."""
    check(lib.cuInit(0), "cuInit")
    dev = ctypes.c_int(0)
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p(0)
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def report_live(kept: list) -> None:
    """The PID/LIVE report the harness reads: (address, size) of each device
    allocation the program keeps on device 0."""
    lines = [f"PID {os.getpid()} main"]
    lines += [f"LIVE {addr:#x} {size} device 0" for addr, size in kept]
    sys.stdout.write("\n".join(lines) + "\n")
