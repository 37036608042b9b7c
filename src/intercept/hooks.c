/* The exported hooks: the dlsym override, the cuGetProcAddress wrappers and the
 * versioned driver entry points. Each forwards to the real function and reports
 * what happened to the core; nothing else (policy lives behind record/record.h, variant
 * selection in resolve.c). */
#define _GNU_SOURCE
#include "record/record.h"
#include "intercept/hooks.h"
#include "record/modules.h"
#include "util/log.h"

#include <dlfcn.h>
#include <errno.h>

#define GMT_EXPORT __attribute__((visibility("default")))
#define GMT_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

/* The real function behind a hook, typed as the hook itself (which has the
 * driver's ABI: abi.c checks every hook against cudaTypedefs.h). */
#define REAL(sym) ((__typeof__(&sym))gmt__real_get(GMT_API_##sym))

/* The end of an allocating hook: report the result (the address is read only
 * on success), leave, return the real result unchanged. */
static CUresult alloc_done(struct gmt__call *c, CUresult r, enum gmt__kind kind, uint64_t addr,
			   uint64_t size, int device)
{
	if (r == CUDA_SUCCESS)
		gmt__on_alloc(c, kind, addr, size, device);
	else
		gmt__on_failure(c, r, kind, size, device);
	gmt__call_leave(c);
	return r;
}

/* The end of a hook that noted its operation before the real call: recorded
 * now, when the driver honoured it. */
static CUresult free_done(struct gmt__call *c, uint64_t token, CUresult r)
{
	gmt__on_result(c, token, r);
	gmt__call_leave(c);
	return r;
}

/* --- dlsym ------------------------------------------------------------------ */

/* Private loaders (XLA, TensorFlow stubs, cuFFT, ctypes) and cudart itself fetch
 * driver functions with dlsym(handle, name), which never sees LD_PRELOAD. The
 * override answers those with hooks; everything else passes through.
 * NOTE: the pass-through must stay a tail call, so that glibc's dlsym sees our
 * caller's return address and RTLD_NEXT keeps its meaning for that caller
 * (tests/preload checks it). Sanitizers are off: ASan calls dlsym while it is
 * still setting itself up. */
GMT_EXPORT GMT_NO_SANITIZE void *dlsym(void *handle, const char *symbol)
{
	void *hook = gmt__dlsym_hook(handle, symbol);

	if (hook != NULL)
		return hook;
	return gmt__real_dlsym(handle, symbol);
}

/* A module unloaded: frames captured while it was there keep its name
 * (modules.h). */
GMT_EXPORT GMT_NO_SANITIZE int dlclose(void *handle)
{
	return gmt__modules_dlclose(handle);
}

/* --- cuGetProcAddress: how cudart, NCCL and cuBLAS reach the driver ------------ */

GMT_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
						cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	__typeof__(&cuGetProcAddress_v2) real = REAL(cuGetProcAddress_v2);
	int saved = errno;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
	if (r == CUDA_SUCCESS && pfn != NULL)
		*pfn = gmt__wrap_lookup(symbol, *pfn, cudaVersion, flags, real, NULL);
	errno = saved;
	return r;
}

GMT_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
					     cuuint64_t flags)
{
	__typeof__(&cuGetProcAddress) real = REAL(cuGetProcAddress);
	int saved = errno;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = real(symbol, pfn, cudaVersion, flags);
	if (r == CUDA_SUCCESS && pfn != NULL)
		*pfn = gmt__wrap_lookup(symbol, *pfn, cudaVersion, flags, NULL, real);
	errno = saved;
	return r;
}

/* --- device memory -------------------------------------------------------------- */

GMT_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	__typeof__(&cuMemAlloc_v2) real = REAL(cuMemAlloc_v2);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAlloc_v2);
	r = real(dptr, bytesize);
	return alloc_done(&c, r, GMT_KIND_DEVICE, r == CUDA_SUCCESS ? *dptr : 0, bytesize, GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	__typeof__(&cuMemAlloc) real = REAL(cuMemAlloc);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAlloc);
	r = real(dptr, bytesize);
	return alloc_done(&c, r, GMT_KIND_DEVICE, r == CUDA_SUCCESS ? *dptr : 0, bytesize, GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
					       size_t Height, unsigned int ElementSizeBytes)
{
	__typeof__(&cuMemAllocPitch_v2) real = REAL(cuMemAllocPitch_v2);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAllocPitch_v2);
	r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	/* Pitched: pitch × height on success, the rows asked for on failure. */
	return alloc_done(&c, r, GMT_KIND_DEVICE, r == CUDA_SUCCESS ? *dptr : 0,
			  (uint64_t)(r == CUDA_SUCCESS ? *pPitch : WidthInBytes) * Height, GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
					    unsigned int Height, unsigned int ElementSizeBytes)
{
	__typeof__(&cuMemAllocPitch) real = REAL(cuMemAllocPitch);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAllocPitch);
	r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	/* Pitched: pitch × height on success, the rows asked for on failure. */
	return alloc_done(&c, r, GMT_KIND_DEVICE, r == CUDA_SUCCESS ? *dptr : 0,
			  (uint64_t)(r == CUDA_SUCCESS ? *pPitch : WidthInBytes) * Height, GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	__typeof__(&cuMemFree_v2) real = REAL(cuMemFree_v2);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemFree_v2);
	token = gmt__on_free(&c, GMT_KIND_DEVICE, dptr);
	return free_done(&c, token, real(dptr));
}

GMT_EXPORT CUresult CUDAAPI cuMemFree(unsigned int dptr)
{
	__typeof__(&cuMemFree) real = REAL(cuMemFree);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemFree);
	token = gmt__on_free(&c, GMT_KIND_DEVICE, dptr);
	return free_done(&c, token, real(dptr));
}

GMT_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	__typeof__(&cuMemAllocManaged) real = REAL(cuMemAllocManaged);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAllocManaged);
	r = real(dptr, bytesize, flags);
	return alloc_done(&c, r, GMT_KIND_MANAGED, r == CUDA_SUCCESS ? *dptr : 0, bytesize, GMT_DEVICE_CURRENT);
}

/* --- pinned and registered host memory ----------------------------------------- */

GMT_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	__typeof__(&cuMemHostAlloc) real = REAL(cuMemHostAlloc);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemHostAlloc);
	r = real(pp, bytesize, Flags);
	return alloc_done(&c, r, GMT_KIND_HOST, r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, bytesize, GMT_DEVICE_HOST);
}

GMT_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	__typeof__(&cuMemAllocHost_v2) real = REAL(cuMemAllocHost_v2);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAllocHost_v2);
	r = real(pp, bytesize);
	return alloc_done(&c, r, GMT_KIND_HOST, r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, bytesize, GMT_DEVICE_HOST);
}

GMT_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
	__typeof__(&cuMemAllocHost) real = REAL(cuMemAllocHost);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAllocHost);
	r = real(pp, bytesize);
	return alloc_done(&c, r, GMT_KIND_HOST, r == CUDA_SUCCESS ? (uintptr_t)*pp : 0, bytesize, GMT_DEVICE_HOST);
}

GMT_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	__typeof__(&cuMemFreeHost) real = REAL(cuMemFreeHost);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemFreeHost);
	token = gmt__on_free(&c, GMT_KIND_HOST, (uintptr_t)p);
	return free_done(&c, token, real(p));
}

GMT_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	__typeof__(&cuMemHostRegister_v2) real = REAL(cuMemHostRegister_v2);
	struct gmt__call c;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemHostRegister_v2);
	return alloc_done(&c, real(p, bytesize, Flags), GMT_KIND_REGISTERED, (uintptr_t)p, bytesize,
			  GMT_DEVICE_HOST);
}

GMT_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	__typeof__(&cuMemHostRegister) real = REAL(cuMemHostRegister);
	struct gmt__call c;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemHostRegister);
	return alloc_done(&c, real(p, bytesize, Flags), GMT_KIND_REGISTERED, (uintptr_t)p, bytesize,
			  GMT_DEVICE_HOST);
}

GMT_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	__typeof__(&cuMemHostUnregister) real = REAL(cuMemHostUnregister);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemHostUnregister);
	token = gmt__on_free(&c, GMT_KIND_REGISTERED, (uintptr_t)p);
	return free_done(&c, token, real(p));
}

/* --- stream-ordered memory --------------------------------------------------------- */

/* The plain and per-thread-stream variants differ only in which real function
 * they call: one body each, as a macro. */
#define GMT_ALLOC_ASYNC_HOOK(sym)                                                                 \
	GMT_EXPORT CUresult CUDAAPI sym(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)     \
	{                                                                                         \
		__typeof__(&sym) real = REAL(sym);                                                \
		struct gmt__call c;                                                               \
		CUresult r;                                                                       \
                                                                                                  \
		if (real == NULL)                                                                 \
			return CUDA_ERROR_NOT_INITIALIZED;                                        \
		gmt__call_enter(&c, GMT_API_##sym);                                               \
		c.on_stream = true;                                                               \
		c.stream = (uintptr_t)hStream;                                                    \
		r = real(dptr, bytesize, hStream);                                                \
		return alloc_done(&c, r, GMT_KIND_ASYNC, r == CUDA_SUCCESS ? *dptr : 0, bytesize,  \
				  GMT_DEVICE_CURRENT);                                            \
	}
GMT_ALLOC_ASYNC_HOOK(cuMemAllocAsync)
GMT_ALLOC_ASYNC_HOOK(cuMemAllocAsync_ptsz)

#define GMT_ALLOC_POOL_HOOK(sym)                                                                  \
	GMT_EXPORT CUresult CUDAAPI sym(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,    \
					CUstream hStream)                                         \
	{                                                                                         \
		__typeof__(&sym) real = REAL(sym);                                                \
		struct gmt__call c;                                                               \
		CUresult r;                                                                       \
                                                                                                  \
		if (real == NULL)                                                                 \
			return CUDA_ERROR_NOT_INITIALIZED;                                        \
		gmt__call_enter(&c, GMT_API_##sym);                                               \
		c.on_stream = true;                                                               \
		c.stream = (uintptr_t)hStream;                                                    \
		r = real(dptr, bytesize, pool, hStream);                                          \
		return alloc_done(&c, r, GMT_KIND_ASYNC, r == CUDA_SUCCESS ? *dptr : 0, bytesize,  \
				  GMT_DEVICE_CURRENT);                                            \
	}
GMT_ALLOC_POOL_HOOK(cuMemAllocFromPoolAsync)
GMT_ALLOC_POOL_HOOK(cuMemAllocFromPoolAsync_ptsz)

#define GMT_FREE_ASYNC_HOOK(sym)                                                                  \
	GMT_EXPORT CUresult CUDAAPI sym(CUdeviceptr dptr, CUstream hStream)                       \
	{                                                                                         \
		__typeof__(&sym) real = REAL(sym);                                                \
		struct gmt__call c;                                                               \
		uint64_t token;                                                                   \
                                                                                                  \
		if (real == NULL)                                                                 \
			return CUDA_ERROR_NOT_INITIALIZED;                                        \
		gmt__call_enter(&c, GMT_API_##sym);                                               \
		token = gmt__on_free(&c, GMT_KIND_ASYNC, dptr);                                   \
		return free_done(&c, token, real(dptr, hStream));                                 \
	}
GMT_FREE_ASYNC_HOOK(cuMemFreeAsync)
GMT_FREE_ASYNC_HOOK(cuMemFreeAsync_ptsz)

/* --- virtual memory management --------------------------------------------------------- */

GMT_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
					const CUmemAllocationProp *prop, unsigned long long flags)
{
	__typeof__(&cuMemCreate) real = REAL(cuMemCreate);
	int device = prop != NULL && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id
											 : GMT_DEVICE_CURRENT;
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemCreate);
	r = real(handle, size, prop, flags);
	return alloc_done(&c, r, GMT_KIND_VMM, r == CUDA_SUCCESS ? *handle : 0, size, device);
}

GMT_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	__typeof__(&cuMemRelease) real = REAL(cuMemRelease);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemRelease);
	token = gmt__on_release(&c, handle);
	return free_done(&c, token, real(handle));
}

GMT_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	__typeof__(&cuMemRetainAllocationHandle) real = REAL(cuMemRetainAllocationHandle);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemRetainAllocationHandle);
	r = real(handle, addr);
	/* XLA probes ordinary pointers with it: only success changes anything. */
	if (r == CUDA_SUCCESS)
		gmt__on_retain(&c, *handle);
	gmt__call_leave(&c);
	return r;
}

GMT_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
				     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	__typeof__(&cuMemMap) real = REAL(cuMemMap);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemMap);
	r = real(ptr, size, offset, handle, flags);
	if (r == CUDA_SUCCESS)
		gmt__on_map(&c, ptr, size, handle, offset);
	gmt__call_leave(&c);
	return r;
}

GMT_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	__typeof__(&cuMemUnmap) real = REAL(cuMemUnmap);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemUnmap);
	token = gmt__on_unmap(&c, ptr, size);
	return free_done(&c, token, real(ptr, size));
}

GMT_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
						CUdeviceptr addr, unsigned long long flags)
{
	__typeof__(&cuMemAddressReserve) real = REAL(cuMemAddressReserve);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAddressReserve);
	r = real(ptr, size, alignment, addr, flags);
	if (r == CUDA_SUCCESS)
		gmt__on_reserve(&c, *ptr, size);
	gmt__call_leave(&c);
	return r;
}

GMT_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	__typeof__(&cuMemAddressFree) real = REAL(cuMemAddressFree);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuMemAddressFree);
	token = gmt__on_unreserve(&c, ptr, size);
	return free_done(&c, token, real(ptr, size));
}

/* --- arrays ------------------------------------------------------------------------------ */

static uint64_t format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	default:
		return 4;
	}
}

/* Width × height × depth × channels × element size; 0 height or depth (1D, 2D
 * arrays) count as 1. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned channels, CUarray_format f)
{
	return w * (h ? h : 1) * (d ? d : 1) * channels * format_bytes(f);
}

GMT_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
	__typeof__(&cuArrayCreate_v2) real = REAL(cuArrayCreate_v2);
	struct gmt__call c;
	uint64_t bytes;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuArrayCreate_v2);
	r = real(pHandle, desc);
	bytes = desc != NULL ? array_bytes(desc->Width, desc->Height, 0, desc->NumChannels, desc->Format) : 0;
	return alloc_done(&c, r, GMT_KIND_ARRAY, r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0, bytes,
			  GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
	__typeof__(&cuArray3DCreate_v2) real = REAL(cuArray3DCreate_v2);
	struct gmt__call c;
	uint64_t bytes;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuArray3DCreate_v2);
	r = real(pHandle, desc);
	bytes = desc != NULL ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
					   desc->Format)
			     : 0;
	return alloc_done(&c, r, GMT_KIND_ARRAY, r == CUDA_SUCCESS ? (uintptr_t)*pHandle : 0, bytes,
			  GMT_DEVICE_CURRENT);
}

GMT_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
	__typeof__(&cuArrayDestroy) real = REAL(cuArrayDestroy);
	struct gmt__call c;
	uint64_t token;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuArrayDestroy);
	token = gmt__on_free(&c, GMT_KIND_ARRAY, (uintptr_t)hArray);
	return free_done(&c, token, real(hArray));
}

/* --- contexts: what the driver frees with them ---------------------------------------- */

GMT_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	__typeof__(&cuDevicePrimaryCtxRetain) real = REAL(cuDevicePrimaryCtxRetain);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuDevicePrimaryCtxRetain);
	r = real(pctx, dev);
	if (r == CUDA_SUCCESS)
		gmt__on_primary_retained(&c, dev, *pctx);
	gmt__call_leave(&c);
	return r;
}

GMT_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	__typeof__(&cuCtxDestroy_v2) real = REAL(cuCtxDestroy_v2);
	struct gmt__call c;
	CUresult r;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	gmt__call_enter(&c, GMT_API_cuCtxDestroy_v2);
	r = real(ctx);
	if (r == CUDA_SUCCESS)
		gmt__on_context_destroyed(&c, ctx);
	gmt__call_leave(&c);
	return r;
}

/* Release and reset: the four take a device; a release frees the context (and
 * its memory) only when it was the last reference, which the driver's state
 * of the primary context tells afterwards. */
#define GMT_PRIMARY_HOOK(sym, always_gone)                                                        \
	GMT_EXPORT CUresult CUDAAPI sym(CUdevice dev)                                             \
	{                                                                                         \
		__typeof__(&sym) real = REAL(sym);                                                \
		struct gmt__call c;                                                               \
		bool active = false;                                                              \
		CUresult r;                                                                       \
                                                                                                  \
		if (real == NULL)                                                                 \
			return CUDA_ERROR_NOT_INITIALIZED;                                        \
		gmt__call_enter(&c, GMT_API_##sym);                                               \
		r = real(dev);                                                                    \
		if (r == CUDA_SUCCESS &&                                                          \
		    (always_gone || (gmt__driver_primary_active(dev, &active) == CUDA_SUCCESS && !active))) \
			gmt__on_primary_gone(&c, dev);                                            \
		gmt__call_leave(&c);                                                              \
		return r;                                                                         \
	}
GMT_PRIMARY_HOOK(cuDevicePrimaryCtxRelease, false)
GMT_PRIMARY_HOOK(cuDevicePrimaryCtxRelease_v2, false)
GMT_PRIMARY_HOOK(cuDevicePrimaryCtxReset, true)
GMT_PRIMARY_HOOK(cuDevicePrimaryCtxReset_v2, true)

/* Why cuInit failed, in the user's terms, for the known causes. */
static const char *init_failure_cause(CUresult r)
{
	switch ((int)r) {
	case CUDA_ERROR_NO_DEVICE:
		return "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, a container started without "
		       "GPUs); ";
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return "the CUDA driver does not match this program's CUDA (nvidia-smi shows the driver's version); ";
	case CUDA_ERROR_STUB_LIBRARY:
		return "the libcuda loaded is the toolkit's stub, not a driver; ";
	default:
		return "";
	}
}

/* cuInit: nothing to record. A failure leaves the process with no device to
 * trace, which the user is told once (docs/guide.md, "No CUDA device") —
 * otherwise the run would end with no snapshot and no word why. */
GMT_EXPORT CUresult CUDAAPI cuInit(unsigned int flags)
{
	__typeof__(&cuInit) real = REAL(cuInit);
	static atomic_bool told;
	const char *name;
	CUresult r;
	int saved;

	if (real == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = real(flags);
	if (r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE || atomic_exchange(&told, true))
		return r;
	saved = errno;
	name = gmt__driver_error_name(r);
	gmt__report("cuInit failed with %s: %snothing will be traced; without a GPU, CUDA programs run on the "
		    "simulated GPU of a gpumemtrace build (docs/simulator.md)",
		    name != NULL ? name : "an error", init_failure_cause(r));
	errno = saved;
	return r;
}
