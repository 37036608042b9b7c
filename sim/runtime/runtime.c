/* Loading and lifecycle of the simulated CUDA runtime: finds the driver the way
 * cudart does (dlopen, one dlsym, the self-lookup, every entry point by base
 * name), the exit handler, the version queries and cudaGetDriverEntryPoint*.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"

/* The _ptsz variants are declared by cuda_runtime_api.h only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, which would rename the plain ones too. */
GMTRT_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
		unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus);
GMTRT_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol,
		void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
		enum cudaDriverEntryPointQueryResult *driverStatus);

struct gmtrt__driver gmtrt__drv;
int gmtrt__device_count;
CUdevice gmtrt__devices[GMTRT_MAX_DEVICES];

/* The self-lookup answer: every lookup after the probe goes through it. */
static PFN_cuGetProcAddress_v12000 lookup;
/* What cuDriverGetVersion said; 0 when no driver could be loaded. */
static int driver_version;
static cudaError_t init_error;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* Set by the exit handler; from then on no call reaches the driver. */
static atomic_int unloading;

static void runtime_exit(void)
{
	atomic_store_explicit(&unloading, 1, memory_order_relaxed);
}

static void *resolve(const char *name, int version, cuuint64_t flags)
{
	CUdriverProcAddressQueryResult status;
	void *pfn = NULL;

	if (lookup(name, &pfn, version, flags, &status) != CUDA_SUCCESS)
		return NULL;
	return pfn;
}

static cudaError_t load_driver(void)
{
	PFN_cuGetProcAddress_v12000 by_name;
	CUdriverProcAddressQueryResult status;
	void *handle, *self = NULL;
	CUresult r;
	int count;

	/* NOTE: a missing libcuda.so.1 is cudaErrorInsufficientDriver (35) in
	 * cudart too, not cudaErrorNoDevice. */
	handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!handle)
		return cudaErrorInsufficientDriver;
	/* The only symbol fetched by name (docs/tracing.md, "What is intercepted"); a driver older than
	 * CUDA 12.0 lacks it. The handle stays open for the process's life. */
	by_name = (PFN_cuGetProcAddress_v12000)dlsym(handle, "cuGetProcAddress_v2");
	if (!by_name)
		return cudaErrorInsufficientDriver;
	r = by_name("cuGetProcAddress", &self, 12000, 0, &status);
	if (r != CUDA_SUCCESS || !self)
		return cudaErrorInsufficientDriver;
	lookup = (PFN_cuGetProcAddress_v12000)self;

#define GMTRT_RESOLVE_BOOT(field, name, type, version) \
	gmtrt__drv.field = (type)resolve(name, version, 0);
	GMTRT_BOOT_ENTRY_POINTS(GMTRT_RESOLVE_BOOT)
#undef GMTRT_RESOLVE_BOOT
	if (!gmtrt__drv.cuInit || !gmtrt__drv.cuDriverGetVersion)
		return cudaErrorInsufficientDriver;

	r = gmtrt__drv.cuInit(0);
	/* Asked even when cuInit failed: cudaDriverGetVersion reports it. */
	if (gmtrt__drv.cuDriverGetVersion(&driver_version) != CUDA_SUCCESS)
		driver_version = 0;
	if (r != CUDA_SUCCESS)
		return gmtrt__from_cu(r);
	if (driver_version < CUDART_VERSION)
		return cudaErrorInsufficientDriver;

#define GMTRT_RESOLVE(field, name, type, flags) \
	gmtrt__drv.field = (type)resolve(name, CUDART_VERSION, flags);
	GMTRT_DRIVER_ENTRY_POINTS(GMTRT_RESOLVE)
#undef GMTRT_RESOLVE
	if (!gmtrt__drv.cuDeviceGetCount || !gmtrt__drv.cuDeviceGet ||
	    !gmtrt__drv.cuDevicePrimaryCtxRetain || !gmtrt__drv.cuCtxSetCurrent)
		return cudaErrorInsufficientDriver;

	r = gmtrt__drv.cuDeviceGetCount(&count);
	if (r != CUDA_SUCCESS)
		return gmtrt__from_cu(r);
	if (count > GMTRT_MAX_DEVICES)
		count = GMTRT_MAX_DEVICES;
	for (int i = 0; i < count; i++) {
		r = gmtrt__drv.cuDeviceGet(&gmtrt__devices[i], i);
		if (r != CUDA_SUCCESS)
			return gmtrt__from_cu(r);
	}
	gmtrt__device_count = count;
	return count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

static void initialise(void)
{
	/* Like cudart: registered at initialisation, so a program's own
	 * handler registered before the first CUDA call runs after this one
	 * and sees cudaErrorCudartUnloading from its late frees. */
	atexit(runtime_exit);
	init_error = load_driver();
}

int gmtrt__unloading(void)
{
	return atomic_load_explicit(&unloading, memory_order_relaxed);
}

cudaError_t gmtrt__enter(void)
{
	if (gmtrt__unloading())
		return gmtrt__fail(cudaErrorCudartUnloading);
	pthread_once(&init_once, initialise);
	return gmtrt__fail(init_error);
}

GMTRT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (gmtrt__unloading())
		return gmtrt__fail(cudaErrorCudartUnloading);
	if (!driverVersion)
		return gmtrt__fail(cudaErrorInvalidValue);
	/* Not an error without a driver: cudart documents 0 then. */
	pthread_once(&init_once, initialise);
	*driverVersion = driver_version;
	return cudaSuccess;
}

GMTRT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (gmtrt__unloading())
		return gmtrt__fail(cudaErrorCudartUnloading);
	if (!runtimeVersion)
		return gmtrt__fail(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

/* cudaEnableDefault means the per-thread variants for code built with
 * per-thread default streams (the _ptsz exports), the legacy ones otherwise. */
static int lookup_flags(unsigned long long flags, int ptsz, cuuint64_t *out)
{
	switch (flags) {
	case cudaEnableDefault:
		*out = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
			    : CU_GET_PROC_ADDRESS_DEFAULT;
		return 0;
	case cudaEnableLegacyStream:
		*out = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
		return 0;
	case cudaEnablePerThreadDefaultStream:
		*out = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
		return 0;
	default:
		return -1;
	}
}

static enum cudaDriverEntryPointQueryResult query_result(CUdriverProcAddressQueryResult s)
{
	switch (s) {
	case CU_GET_PROC_ADDRESS_SUCCESS:
		return cudaDriverEntryPointSuccess;
	case CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT:
		return cudaDriverEntryPointVersionNotSufficent;
	default:
		return cudaDriverEntryPointSymbolNotFound;
	}
}

/*
 * NOTE: cudart returns cudaSuccess with *funcPtr NULL when the driver does not
 * have the symbol; only driverStatus tells (CUDA runtime API reference,
 * "Driver Entry Point Access"). NCCL, cuBLAS and PyTorch check driverStatus.
 */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned int version,
			       unsigned long long flags, int ptsz,
			       enum cudaDriverEntryPointQueryResult *driverStatus)
{
	CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	cuuint64_t cu_flags;
	cudaError_t err;
	CUresult r;

	err = gmtrt__enter();
	if (err != cudaSuccess)
		return err;
	if (!symbol || !funcPtr || lookup_flags(flags, ptsz, &cu_flags) < 0)
		return gmtrt__fail(cudaErrorInvalidValue);
	if (version > (unsigned int)driver_version)
		return gmtrt__fail(cudaErrorInvalidValue);
	*funcPtr = NULL;
	r = lookup(symbol, funcPtr, (int)version, cu_flags, &status);
	if (r == CUDA_ERROR_NOT_FOUND)
		r = CUDA_SUCCESS;
	else if (r != CUDA_SUCCESS)
		*funcPtr = NULL;
	if (driverStatus)
		*driverStatus = query_result(status);
	return gmtrt__result(r);
}

GMTRT_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
		unsigned int cudaVersion, unsigned long long flags,
		enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, cudaVersion, flags, 0, driverStatus);
}

GMTRT_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol,
		void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
		enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, cudaVersion, flags, 1, driverStatus);
}

/* Deprecated since 12.5: the runtime's own version picks the ABI. */
GMTRT_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
		unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, CUDART_VERSION, flags, 0, driverStatus);
}

GMTRT_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
		unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return entry_point(symbol, funcPtr, CUDART_VERSION, flags, 1, driverStatus);
}
