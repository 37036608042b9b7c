/* The runtime programs' half of gpu_test.h: setting up a device, checkpoints
 * with cudaMemGetInfo, and — built by nvcc — a kernel that touches memory.
 * Built by g++ against the simulated cudart there is no kernel (the simulated
 * GPU runs none): gt_touch says so and the program expects accordingly. */
#ifndef GMT_GPU_RUNTIME_H
#define GMT_GPU_RUNTIME_H

#include <cuda_runtime_api.h>

#include "gpu_test.h"

#ifdef __CUDACC__
/* Writes one byte in every 4 KiB of p[0, n): enough to make every page of
 * managed memory resident on the device. */
__global__ void gt_touch_kernel(unsigned char *p, size_t n)
{
	size_t stride = (size_t)gridDim.x * blockDim.x * 4096;

	for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4096; i < n; i += stride)
		p[i] = 1;
}
#endif

/* Touches p[0, n) from the device; 1 when it did, 0 where no kernel can run. */
static inline int gt_touch(void *p, size_t n)
{
#ifdef __CUDACC__
	gt_touch_kernel<<<64, 256>>>((unsigned char *)p, n);
	GT_OK(cudaGetLastError());
	GT_OK(cudaDeviceSynchronize());
	return 1;
#else
	(void)p;
	(void)n;
	return 0;
#endif
}

/* Makes device current and creates its context (cudaFree(NULL)). Built by
 * nvcc, also runs the program's kernel once: loading a module takes device
 * memory, which must be taken before the first checkpoint, not between two. */
static inline void gt_rt_init(int device)
{
	GT_OK(cudaSetDevice(device));
	GT_OK(cudaFree(NULL));
#ifdef __CUDACC__
	gt_touch_kernel<<<1, 1>>>(NULL, 0);
	GT_OK(cudaGetLastError());
	GT_OK(cudaDeviceSynchronize());
#endif
}

static inline void gt_rt_meminfo(const char *label)
{
	size_t free_bytes, total_bytes;
	int device;

	GT_OK(cudaGetDevice(&device));
	GT_OK(cudaMemGetInfo(&free_bytes, &total_bytes));
	gt_meminfo(label, device, free_bytes, total_bytes);
}

/* A checkpoint on the current device: the snapshot, what it must hold, and
 * the device's free bytes right after it. */
static inline void gt_rt_checkpoint(const char *label)
{
	gt_checkpoint(label);
	gt_rt_meminfo(label);
}

/* The reserved bytes of a stream-ordered pool. */
static inline unsigned long long gt_rt_pool_reserved(cudaMemPool_t pool)
{
	unsigned long long reserved = 0;

	GT_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
	return reserved;
}

#endif
