/* The intercepted driver entry points, as one list, and what hooks.c, resolve.c
 * and record/record.c share about them: api label indices, the real functions behind
 * each hook, and the lookup of a hook by (base name, version, flags). */
#ifndef GMT_HOOKS_H
#define GMT_HOOKS_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* NOTE: cuda.h maps unversioned names to their newest ABI (cuMemAlloc →
 * cuMemAlloc_v2). The legacy entry points are hooked under their own names, as
 * the driver exports them, so those macros must go. */
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemAllocHost
#undef cuMemHostRegister
#undef cuGetProcAddress
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

/* X(symbol, base name, version, ptsz): every hooked entry point. The version is
 * the one cudaTypedefs.h gives its PFN type (PFN_<base>_v<version>[_ptsz]). */
#define GMT_HOOKS(X)                                                          \
	X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                       \
	X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                    \
	X(cuMemAlloc, cuMemAlloc, 2000, 0)                                    \
	X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                 \
	X(cuMemAllocPitch, cuMemAllocPitch, 2000, 0)                          \
	X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                       \
	X(cuMemFree, cuMemFree, 2000, 0)                                      \
	X(cuMemFree_v2, cuMemFree, 3020, 0)                                   \
	X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                      \
	X(cuMemAllocHost, cuMemAllocHost, 2000, 0)                            \
	X(cuMemAllocHost_v2, cuMemAllocHost, 3020, 0)                         \
	X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0)                            \
	X(cuMemFreeHost, cuMemFreeHost, 2000, 0)                              \
	X(cuMemHostRegister, cuMemHostRegister, 4000, 0)                      \
	X(cuMemHostRegister_v2, cuMemHostRegister, 6050, 0)                   \
	X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0)                  \
	X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                         \
	X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                    \
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)         \
	X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)    \
	X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                           \
	X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                      \
	X(cuMemCreate, cuMemCreate, 10020, 0)                                 \
	X(cuMemRelease, cuMemRelease, 10020, 0)                               \
	X(cuMemMap, cuMemMap, 10020, 0)                                       \
	X(cuMemUnmap, cuMemUnmap, 10020, 0)                                   \
	X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                 \
	X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                       \
	X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0) \
	X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                           \
	X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                       \
	X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                            \
	X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)        \
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)      \
	X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0)  \
	X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)          \
	X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0)      \
	X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                             \
	X(cuInit, cuInit, 2000, 0)

/* Driver entry points the tracer calls itself, never hooked: X(symbol, base, version). */
#define GMT_DRIVER_CALLS(X)                                         \
	X(cuCtxGetDevice, cuCtxGetDevice, 2000)                     \
	X(cuCtxGetCurrent, cuCtxGetCurrent, 4000)                   \
	X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000) \
	X(cuMemGetInfo_v2, cuMemGetInfo, 3020)                     \
	X(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000)             \
	X(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000)               \
	X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020) \
	X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020) \
	X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020)           \
	X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020)     \
	X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010)          \
	X(cuDeviceGetName, cuDeviceGetName, 2000)                 \
	X(cuGetErrorName, cuGetErrorName, 6000)

enum gmt__api {
#define GMT_X_ENUM(sym, base, ver, ptsz) GMT_API_##sym,
	GMT_HOOKS(GMT_X_ENUM)
#undef GMT_X_ENUM
	GMT_API_COUNT
};

/* Legacy prototypes cuda.h only declares for NVIDIA's own build, and the
 * per-thread-stream variants it declares only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM (which would rename the plain ones). */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
				 unsigned int Height, unsigned int ElementSizeBytes);
CUresult CUDAAPI cuMemFree(unsigned int dptr);
CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize);
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					      CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);

/* --- resolve.c: the real functions ------------------------------------------ */

/* The api label of each hook: its versioned name ("cuMemAlloc_v2"). */
extern const char *const gmt__api_names[GMT_API_COUNT];

/* The real function behind hook `api`, or NULL. Filled from the first lookup
 * that returned it (cuGetProcAddress, dlsym on a libcuda handle) or, for a call
 * through the exported symbol, from libcuda itself. Acquire pairs with the
 * release in gmt__real_set (the function is published whole). */
extern void *_Atomic gmt__real[GMT_API_COUNT];

/* The real function for `api`, resolving it from the loaded libcuda when no
 * lookup has supplied it yet. NULL when there is no driver to call. */
void *gmt__real_get(enum gmt__api api);

/* The real dlsym (glibc's), for the dlsym override's pass-through; set by
 * gmt__dlsym_hook before it returns. */
extern void *(*gmt__real_dlsym)(void *, const char *);

/* The dlsym override's decision: for a lookup of a hooked driver entry point by
 * name on an explicit handle (a private loader's libcuda handle), the hook that
 * stands in for the real function; NULL to pass the call through. Safe before
 * any initialisation; no malloc. */
void *gmt__dlsym_hook(void *handle, const char *symbol);

/* What a cuGetProcAddress wrapper hands out for the real answer `p` to
 * (symbol, version, flags): the hook of the variant the driver chose, or `p`
 * itself when the symbol is not hooked, when `p` is NULL, or when the request
 * is newer than the headers we were built with and the driver does not give the
 * same function at our version (then no variant can be proven to match). One of
 * v2 and v1 is the real lookup function, used for that proof. */
void *gmt__wrap_lookup(const char *symbol, void *p, int version, cuuint64_t flags,
		       PFN_cuGetProcAddress_v12000 v2, PFN_cuGetProcAddress_v11030 v1);

/* The tracer's own driver calls (CUDA_ERROR_NOT_INITIALIZED when unavailable). */
CUresult gmt__driver_ctx_device(int *device);
CUresult gmt__driver_ctx_current(CUcontext *ctx);
CUresult gmt__driver_primary_active(int device, bool *active);
/* cuMemGetInfo_v2 for `device`: in the calling thread's context when that is
 * the device's, else in the device's primary context when it is active
 * (retained, made current and put back for the call; never created: a new
 * context would take the device's memory). CUDA_ERROR_INVALID_CONTEXT when the
 * thread has no context of the device and its primary context is not active. */
CUresult gmt__driver_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
/* The device memory allocation granularity (the minimum, as the driver
 * reports it for pinned device memory on `device`). */
CUresult gmt__driver_granularity(int device, size_t *bytes);
/* The device's default and current stream-ordered pools. */
CUresult gmt__driver_pools(int device, CUmemoryPool *default_pool, CUmemoryPool *current_pool);
/* A pool's reserved and used bytes now. */
CUresult gmt__driver_pool_usage(CUmemoryPool pool, uint64_t *reserved, uint64_t *used);
CUresult gmt__driver_pci_bus_id(int device, char *id, int len);
/* The device's name (the simulated GPU's begins "gpumemtrace simulated GPU"). */
CUresult gmt__driver_device_name(int device, char *name, int len);
/* The name of a driver result ("CUDA_ERROR_NO_DEVICE"), or NULL. */
const char *gmt__driver_error_name(CUresult r);

#endif /* GMT_HOOKS_H */
