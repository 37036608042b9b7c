"""The simulated GPU as the test doubles of PyTorch and CuPy reach it:
libcuda.so.1 through ctypes, RTLD_LOCAL, as a framework's private loader
would, on the primary context of device 0."""

import ctypes
import os


class Driver:
    def __init__(self):
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL)
        u64p = ctypes.POINTER(ctypes.c_uint64)
        for name, args in (("cuInit", [ctypes.c_uint]), ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                           ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
                           ("cuCtxSetCurrent", [ctypes.c_void_p]),
                           ("cuMemAlloc_v2", [u64p, ctypes.c_size_t]), ("cuMemFree_v2", [ctypes.c_uint64]),
                           ("cuMemGetInfo_v2", [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)])):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = args
        self.lib = lib
        self.ok(lib.cuInit(0), "cuInit")
        dev, ctx = ctypes.c_int(0), ctypes.c_void_p()
        self.ok(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ok(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.ok(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    @staticmethod
    def ok(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} returned {rc}")

    def malloc(self, size):
        p = ctypes.c_uint64(0)
        rc = self.lib.cuMemAlloc_v2(ctypes.byref(p), size)
        if rc == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            return None
        self.ok(rc, f"cuMemAlloc_v2({size})")
        return p.value

    def free(self, addr):
        self.ok(self.lib.cuMemFree_v2(addr), "cuMemFree_v2")

    def mem_info(self):
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self.ok(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo_v2")
        return free.value, total.value
