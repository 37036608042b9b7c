/* A library whose constructor allocates device memory before main runs —
 * possibly before the tracer's own code has run at all — through a private
 * loader, as plugins do. The allocation stays live to the end. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

unsigned long long ctor_lib_pointer;

__attribute__((constructor)) static void allocate_early(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	PFN_cuInit_v2000 init;
	PFN_cuDevicePrimaryCtxRetain_v7000 retain;
	PFN_cuCtxSetCurrent_v4000 set_current;
	PFN_cuMemAlloc_v3020 mem_alloc;
	CUcontext ctx;
	CUdeviceptr p;

	if (h == NULL)
		goto fail;
	init = (PFN_cuInit_v2000)dlsym(h, "cuInit");
	retain = (PFN_cuDevicePrimaryCtxRetain_v7000)dlsym(h, "cuDevicePrimaryCtxRetain");
	set_current = (PFN_cuCtxSetCurrent_v4000)dlsym(h, "cuCtxSetCurrent");
	mem_alloc = (PFN_cuMemAlloc_v3020)dlsym(h, "cuMemAlloc_v2");
	if (!init || !retain || !set_current || !mem_alloc || init(0) != CUDA_SUCCESS ||
	    retain(&ctx, 0) != CUDA_SUCCESS || set_current(ctx) != CUDA_SUCCESS ||
	    mem_alloc(&p, 3 << 20) != CUDA_SUCCESS)
		goto fail;
	ctor_lib_pointer = p;
	return;
fail:
	fprintf(stderr, "ctor_lib: allocation in the constructor failed\n");
	exit(3);
}
