/* Copies and memsets (cuMemcpy{HtoD,DtoH,DtoD}, cuMemsetD{8,16,32}, their
 * asynchronous and per-thread-stream forms), pointer attributes and mapped host
 * pointers. Device and managed memory hold addresses, not bytes: a copy checks
 * its ranges, moves the bytes the host can see (pinned and registered memory)
 * and reads device memory as zeros (docs/simulator.md, "Fidelity"). */
#define _GNU_SOURCE
#include "model.h"

#include <string.h>

/* Where a range that device code may address lies. */
struct sim_place {
	uint64_t base, size;          /* the allocation or mapping holding it */
	void *bytes;                  /* the host's view (pinned, registered memory), else NULL */
	const struct sim_alloc *alloc; /* NULL: a VMM mapping */
	const struct sim_map *map;
	int device;                   /* -1: host memory */
};

/* Finds the place of [p, p + len) (len at least 1): inside one allocation's
 * requested bytes, or covered by VMM mappings. CUDA_ERROR_INVALID_VALUE for any
 * other range, as the driver answers a pointer it does not know. Lock held. */
static CUresult place_of(uint64_t p, uint64_t len, struct sim_place *pl)
{
	const struct sim_alloc *a = gmtsim__alloc_at(p);

	if (p + len < p)
		return CUDA_ERROR_INVALID_VALUE;
	if (a != NULL) {
		if (p + len > a->addr + a->size)
			return CUDA_ERROR_INVALID_VALUE;
		*pl = (struct sim_place){ .base = a->addr, .size = a->size, .alloc = a, .device = a->device };
		if (a->kind == SIM_KIND_HOST || a->kind == SIM_KIND_REGISTERED)
			pl->bytes = (void *)(uintptr_t)p;
		return CUDA_SUCCESS;
	}
	pl->map = gmtsim__vmm_cover(p, len);
	if (pl->map == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pl->base = pl->map->addr;
	pl->size = pl->map->size;
	pl->bytes = NULL;
	pl->alloc = NULL;
	pl->device = pl->map->handle->device;
	return CUDA_SUCCESS;
}

/* The calling thread's context for a synchronous call, `stream`'s for an
 * asynchronous one. Lock held. */
static CUresult issuer(bool async, CUstream stream)
{
	int dev;

	return async ? gmtsim__stream_device(stream, &dev) : gmtsim__current_device(&dev, NULL);
}

/* --- copies --------------------------------------------------------------------- */

enum sim_way { SIM_HTOD, SIM_DTOH, SIM_DTOD };

/* One copy of n bytes, done when it is issued (streams run synchronously). The
 * host side of HtoD and DtoH is any host pointer; the device side must be a
 * place. */
static CUresult copy(enum sim_way way, uint64_t dst, uint64_t src, size_t n, bool async, CUstream stream)
{
	struct sim_place from, to;
	void *in = (void *)(uintptr_t)src, *out = (void *)(uintptr_t)dst;
	CUresult r;

	gmtsim__lock();
	r = issuer(async, stream);
	if (r != CUDA_SUCCESS || n == 0)
		goto out;
	if (way != SIM_HTOD) {
		r = place_of(src, n, &from);
		in = from.bytes;
	} else if (in == NULL) {
		r = CUDA_ERROR_INVALID_VALUE;
	}
	if (r != CUDA_SUCCESS)
		goto out;
	if (way != SIM_DTOH) {
		r = place_of(dst, n, &to);
		out = to.bytes;
	} else if (out == NULL) {
		r = CUDA_ERROR_INVALID_VALUE;
	}
	if (r != CUDA_SUCCESS || out == NULL)
		goto out;
	if (in != NULL)
		memmove(out, in, n);
	else
		memset(out, 0, n);
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyHtoD_v2);
	return copy(SIM_HTOD, dstDevice, (uint64_t)(uintptr_t)srcHost, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyHtoD_v2_ptds);
	return copy(SIM_HTOD, dstDevice, (uint64_t)(uintptr_t)srcHost, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoH_v2);
	return copy(SIM_DTOH, (uint64_t)(uintptr_t)dstHost, srcDevice, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoH_v2_ptds);
	return copy(SIM_DTOH, (uint64_t)(uintptr_t)dstHost, srcDevice, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoD_v2);
	return copy(SIM_DTOD, dstDevice, srcDevice, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoD_v2_ptds);
	return copy(SIM_DTOD, dstDevice, srcDevice, ByteCount, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
						    CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyHtoDAsync_v2);
	return copy(SIM_HTOD, dstDevice, (uint64_t)(uintptr_t)srcHost, ByteCount, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
							 size_t ByteCount, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyHtoDAsync_v2_ptsz);
	return copy(SIM_HTOD, dstDevice, (uint64_t)(uintptr_t)srcHost, ByteCount, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
						    CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoHAsync_v2);
	return copy(SIM_DTOH, (uint64_t)(uintptr_t)dstHost, srcDevice, ByteCount, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
							 CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoHAsync_v2_ptsz);
	return copy(SIM_DTOH, (uint64_t)(uintptr_t)dstHost, srcDevice, ByteCount, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
						    CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoDAsync_v2);
	return copy(SIM_DTOD, dstDevice, srcDevice, ByteCount, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
							 size_t ByteCount, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemcpyDtoDAsync_v2_ptsz);
	return copy(SIM_DTOD, dstDevice, srcDevice, ByteCount, true, hStream);
}

/* --- memsets -------------------------------------------------------------------- */

/* Sets n elements of `width` bytes (1, 2 or 4) at dst to `value`: the address
 * aligned to the width, the range a place; only host-visible bytes change. */
static CUresult fill(uint64_t dst, uint32_t value, size_t n, unsigned width, bool async, CUstream stream)
{
	struct sim_place pl;
	unsigned char *out;
	CUresult r;

	if (dst % width != 0 || n > SIZE_MAX / width)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = issuer(async, stream);
	if (r != CUDA_SUCCESS || n == 0)
		goto out;
	r = place_of(dst, (uint64_t)n * width, &pl);
	if (r != CUDA_SUCCESS || pl.bytes == NULL)
		goto out;
	out = pl.bytes;
	if (width == 1) {
		memset(out, (int)(value & 0xff), n);
	} else {
		uint16_t v16 = (uint16_t)value;

		for (size_t i = 0; i < n; i++)
			memcpy(out + i * width, width == 2 ? (const void *)&v16 : (const void *)&value, width);
	}
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD8_v2);
	return fill(dstDevice, uc, N, 1, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD8_v2_ptds);
	return fill(dstDevice, uc, N, 1, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD16_v2);
	return fill(dstDevice, us, N, 2, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD16_v2_ptds);
	return fill(dstDevice, us, N, 2, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD32_v2);
	return fill(dstDevice, ui, N, 4, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	gmtsim__count(SIM_CALL_cuMemsetD32_v2_ptds);
	return fill(dstDevice, ui, N, 4, false, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD8Async);
	return fill(dstDevice, uc, N, 1, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
						    CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD8Async_ptsz);
	return fill(dstDevice, uc, N, 1, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
						CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD16Async);
	return fill(dstDevice, us, N, 2, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
						     CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD16Async_ptsz);
	return fill(dstDevice, us, N, 2, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD32Async);
	return fill(dstDevice, ui, N, 4, true, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
						     CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemsetD32Async_ptsz);
	return fill(dstDevice, ui, N, 4, true, hStream);
}

/* --- pointer attributes, mapped host memory ------------------------------------- */

/* One attribute of the place of `ptr`, written as cuda.h documents its type.
 * Attributes the simulator does not model give CUDA_ERROR_NOT_SUPPORTED. */
static CUresult attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr, const struct sim_place *pl)
{
	const struct sim_alloc *a = pl->alloc;
	bool host = pl->bytes != NULL, managed = a != NULL && a->kind == SIM_KIND_MANAGED;
	struct CUctx_st *ctx = a != NULL ? a->ctx : NULL;
	int dev;

	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		if (ctx == NULL && gmtsim__current_device(&dev, &ctx) != CUDA_SUCCESS)
			ctx = NULL;
		*(CUcontext *)data = ctx;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && !managed)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(bool *)data = managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (pl->device >= 0)
			*(int *)data = pl->device;
		else if (ctx != NULL)
			*(int *)data = ctx->device;
		else
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = pl->base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = pl->size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(bool *)data = true;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = a != NULL && a->kind == SIM_KIND_ASYNC ? a->pool : NULL;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

GMTSIM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr)
{
	struct sim_place pl;
	CUresult r;

	gmtsim__count(SIM_CALL_cuPointerGetAttribute);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = place_of(ptr, 1, &pl);
	if (r == CUDA_SUCCESS)
		r = attribute(data, attribute_, ptr, &pl);
	gmtsim__unlock();
	return r;
}

/* With unified addressing a pinned or registered host pointer is also its
 * device pointer. */
GMTSIM_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	struct sim_place pl;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemHostGetDevicePointer_v2);
	if (pdptr == NULL || Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS)
		r = place_of((uint64_t)(uintptr_t)p, 1, &pl);
	if (r == CUDA_SUCCESS && pl.bytes == NULL)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)p;
	gmtsim__unlock();
	return r;
}
