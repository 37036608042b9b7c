/* Pinned and registered host memory: cuMemHostAlloc, cuMemAllocHost and
 * cuMemFreeHost (real host memory from mmap, page aligned), cuMemHostRegister and
 * cuMemHostUnregister (the range is only recorded). */
#define _GNU_SOURCE
#include "model.h"

#include <sys/mman.h>

#define SIM_HOST_PAGE ((uint64_t)4096)

/* Pinned host memory is real memory. */
void gmtsim__host_give(struct sim_alloc *a)
{
	munmap((void *)(uintptr_t)a->addr, a->span);
}

static CUresult host_alloc(enum sim_call api, void **pp, uint64_t size, unsigned int flags)
{
	struct sim_alloc a = { .size = size, .kind = SIM_KIND_HOST, .device = -1, .api = api };
	int dev;
	void *p;
	CUresult r;

	if (pp == NULL || size == 0 ||
	    (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				 CU_MEMHOSTALLOC_WRITECOMBINED)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a.span = gmtsim__round_up(size, SIM_HOST_PAGE);
	p = mmap(NULL, a.span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	a.addr = (uint64_t)(uintptr_t)p;
	r = gmtsim__finish(p == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, &a, gmtsim__host_give);
	if (r == CUDA_SUCCESS)
		*pp = p;
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostAlloc);
	return host_alloc(SIM_CALL_cuMemHostAlloc, pp, bytesize, Flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	gmtsim__count(SIM_CALL_cuMemAllocHost_v2);
	return host_alloc(SIM_CALL_cuMemAllocHost_v2, pp, bytesize, 0);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
	gmtsim__count(SIM_CALL_cuMemAllocHost);
	return host_alloc(SIM_CALL_cuMemAllocHost, pp, bytesize, 0);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	struct sim_alloc *a;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemFreeHost);
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r != CUDA_SUCCESS)
		goto out;
	a = gmtsim__alloc_at((uint64_t)(uintptr_t)p);
	if (p == NULL || a == NULL || a->addr != (uint64_t)(uintptr_t)p || a->kind != SIM_KIND_HOST) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	gmtsim__host_give(a);
	gmtsim__unrecord(a);
out:
	gmtsim__unlock();
	return r;
}

static CUresult host_register(enum sim_call api, void *p, size_t size, unsigned int flags, bool legacy)
{
	struct sim_alloc a = { .addr = (uint64_t)(uintptr_t)p, .size = size, .span = size,
			       .kind = SIM_KIND_REGISTERED, .device = -1, .api = api };
	int dev;
	CUresult r;

	if (p == NULL || size == 0 ||
	    (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
				 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* NOTE: before CUDA 6.5 (the legacy entry point) pointer and size had to be
	 * page aligned; _v2 lifted that. */
	if (legacy && (a.addr % SIM_HOST_PAGE != 0 || size % SIM_HOST_PAGE != 0))
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	if (gmtsim__find(&gmtsim__model.allocs, &a, gmtsim__cmp_alloc) != NULL) {
		r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		goto out;
	}
	r = gmtsim__record(&a);
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostRegister_v2);
	return host_register(SIM_CALL_cuMemHostRegister_v2, p, bytesize, Flags, false);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostRegister);
	return host_register(SIM_CALL_cuMemHostRegister, p, bytesize, Flags, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	struct sim_alloc *a;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemHostUnregister);
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r != CUDA_SUCCESS)
		goto out;
	a = gmtsim__alloc_at((uint64_t)(uintptr_t)p);
	if (p == NULL || a == NULL || a->addr != (uint64_t)(uintptr_t)p || a->kind != SIM_KIND_REGISTERED) {
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
		goto out;
	}
	gmtsim__unrecord(a);
out:
	gmtsim__unlock();
	return r;
}
