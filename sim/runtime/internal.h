/* Internal interface of the simulated CUDA runtime (a cudart test double): the
 * driver entry points resolved at initialisation, the device table and the
 * helpers every exported cuda* function goes through. Nothing here is exported.
 */
#ifndef GMTRT_INTERNAL_H
#define GMTRT_INTERNAL_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

/* Only the cuda* API leaves the library; the build compiles with
 * -fvisibility=hidden and marks each exported function with GMTRT_API. */
#define GMTRT_API __attribute__((visibility("default")))
#define GMTRT_HIDDEN __attribute__((visibility("hidden")))

/* Enough for GMTSIM_DEVICES (at most 16) and for any real machine. */
#define GMTRT_MAX_DEVICES 64

/*
 * Every driver entry point the runtime calls, resolved by base name through the
 * self-lookup pointer and typed with the PFN of the variant the lookup selects.
 *
 * GMTRT_BOOT_ENTRY_POINTS, X(field, base name, PFN type, version), are resolved
 * and called first: cuInit, then the version check. NOTE: they are asked for
 * at the version that introduced them, as cudart does, because cuGetProcAddress
 * refuses a cudaVersion above the driver's own (CUDA_ERROR_INVALID_VALUE,
 * cuda.h) and an old driver must still tell cudaDriverGetVersion its version.
 *
 * GMTRT_DRIVER_ENTRY_POINTS, X(field, base name, PFN type, lookup flags), are
 * resolved once the driver is known to be new enough, all with cudaVersion
 * CUDART_VERSION (docs/simulator.md, "Loading paths").
 */
#define GMTRT_PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

#define GMTRT_BOOT_ENTRY_POINTS(X) \
	X(cuInit, "cuInit", PFN_cuInit_v2000, 2000) \
	X(cuDriverGetVersion, "cuDriverGetVersion", PFN_cuDriverGetVersion_v2020, 2020)

#define GMTRT_DRIVER_ENTRY_POINTS(X) \
	X(cuDeviceGetCount, "cuDeviceGetCount", PFN_cuDeviceGetCount_v2000, 0) \
	X(cuDeviceGet, "cuDeviceGet", PFN_cuDeviceGet_v2000, 0) \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute", PFN_cuDeviceGetAttribute_v2000, 0) \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", PFN_cuDevicePrimaryCtxRetain_v7000, 0) \
	X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", PFN_cuDevicePrimaryCtxRelease_v11000, 0) \
	X(cuCtxSetCurrent, "cuCtxSetCurrent", PFN_cuCtxSetCurrent_v4000, 0) \
	X(cuCtxSynchronize, "cuCtxSynchronize", PFN_cuCtxSynchronize_v13000, 0) \
	X(cuMemGetInfo, "cuMemGetInfo", PFN_cuMemGetInfo_v3020, 0) \
	X(cuMemAlloc, "cuMemAlloc", PFN_cuMemAlloc_v3020, 0) \
	X(cuMemAllocPitch, "cuMemAllocPitch", PFN_cuMemAllocPitch_v3020, 0) \
	X(cuMemFree, "cuMemFree", PFN_cuMemFree_v3020, 0) \
	X(cuMemAllocManaged, "cuMemAllocManaged", PFN_cuMemAllocManaged_v6000, 0) \
	X(cuMemAllocHost, "cuMemAllocHost", PFN_cuMemAllocHost_v3020, 0) \
	X(cuMemHostAlloc, "cuMemHostAlloc", PFN_cuMemHostAlloc_v2020, 0) \
	X(cuMemFreeHost, "cuMemFreeHost", PFN_cuMemFreeHost_v2000, 0) \
	X(cuMemHostRegister, "cuMemHostRegister", PFN_cuMemHostRegister_v6050, 0) \
	X(cuMemHostUnregister, "cuMemHostUnregister", PFN_cuMemHostUnregister_v4000, 0) \
	X(cuMemAllocAsync, "cuMemAllocAsync", PFN_cuMemAllocAsync_v11020, 0) \
	X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", PFN_cuMemAllocAsync_v11020_ptsz, GMTRT_PTDS) \
	X(cuMemFreeAsync, "cuMemFreeAsync", PFN_cuMemFreeAsync_v11020, 0) \
	X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", PFN_cuMemFreeAsync_v11020_ptsz, GMTRT_PTDS) \
	X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", PFN_cuMemAllocFromPoolAsync_v11020, 0) \
	X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", PFN_cuMemAllocFromPoolAsync_v11020_ptsz, GMTRT_PTDS) \
	X(cuMemPoolCreate, "cuMemPoolCreate", PFN_cuMemPoolCreate_v11020, 0) \
	X(cuMemPoolDestroy, "cuMemPoolDestroy", PFN_cuMemPoolDestroy_v11020, 0) \
	X(cuMemPoolTrimTo, "cuMemPoolTrimTo", PFN_cuMemPoolTrimTo_v11020, 0) \
	X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", PFN_cuMemPoolSetAttribute_v11020, 0) \
	X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", PFN_cuMemPoolGetAttribute_v11020, 0) \
	X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", PFN_cuDeviceGetDefaultMemPool_v11020, 0) \
	X(cuDeviceGetMemPool, "cuDeviceGetMemPool", PFN_cuDeviceGetMemPool_v11020, 0) \
	X(cuDeviceSetMemPool, "cuDeviceSetMemPool", PFN_cuDeviceSetMemPool_v11020, 0) \
	X(cuStreamCreate, "cuStreamCreate", PFN_cuStreamCreate_v2000, 0) \
	X(cuStreamDestroy, "cuStreamDestroy", PFN_cuStreamDestroy_v4000, 0) \
	X(cuStreamSynchronize, "cuStreamSynchronize", PFN_cuStreamSynchronize_v2000, 0) \
	X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", PFN_cuStreamSynchronize_v7000_ptsz, GMTRT_PTDS)

/* NULL where the driver does not offer the entry point: the cuda* call that
 * needs it returns cudaErrorCallRequiresNewerDriver. */
struct gmtrt__driver {
#define GMTRT_FIELD(field, name, type, arg) type field;
	GMTRT_BOOT_ENTRY_POINTS(GMTRT_FIELD)
	GMTRT_DRIVER_ENTRY_POINTS(GMTRT_FIELD)
#undef GMTRT_FIELD
};

/* Written once by the initialisation (pthread_once), read-only afterwards. */
GMTRT_HIDDEN extern struct gmtrt__driver gmtrt__drv;
GMTRT_HIDDEN extern int gmtrt__device_count;
GMTRT_HIDDEN extern CUdevice gmtrt__devices[GMTRT_MAX_DEVICES];

/* runtime.c: loads the driver on the first call. Returns cudaSuccess, the
 * sticky initialisation error, or cudaErrorCudartUnloading once the exit
 * handler ran; records a failure as the thread's last error. */
GMTRT_HIDDEN cudaError_t gmtrt__enter(void);

/* runtime.c: nonzero once the exit handler ran. */
GMTRT_HIDDEN int gmtrt__unloading(void);

/* device.c: gmtrt__enter(), then makes the primary context of the thread's
 * current device current on the calling thread (retaining it on first use). */
GMTRT_HIDDEN cudaError_t gmtrt__enter_ctx(void);

/* device.c: the CUdevice of a device ordinal; cudaErrorInvalidDevice (recorded)
 * when out of range. Requires a successful gmtrt__enter(). */
GMTRT_HIDDEN cudaError_t gmtrt__device(int ordinal, CUdevice *dev);

/* errors.c: the runtime error for a driver result. */
GMTRT_HIDDEN cudaError_t gmtrt__from_cu(CUresult r);

/* errors.c: records err as the thread's last error unless it is cudaSuccess;
 * returns err. */
GMTRT_HIDDEN cudaError_t gmtrt__fail(cudaError_t err);

/* gmtrt__fail(gmtrt__from_cu(r)): the usual tail of a forwarding call. */
static inline cudaError_t gmtrt__result(CUresult r)
{
	return gmtrt__fail(gmtrt__from_cu(r));
}

/* Entry in a cuda* function whose driver entry point may be missing. */
#define GMTRT_REQUIRE(field) \
	do { \
		if (!gmtrt__drv.field) \
			return gmtrt__fail(cudaErrorCallRequiresNewerDriver); \
	} while (0)

#endif
