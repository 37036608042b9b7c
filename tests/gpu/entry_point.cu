/* The cudaGetDriverEntryPoint row (NCCL, cuBLAS, PyTorch's expandable
 * segments): driver functions fetched through the runtime and called
 * directly — cudaGetDriverEntryPoint (deprecated in CUDA 13, still used by
 * builds against older toolkits) and cudaGetDriverEntryPointByVersion, with
 * the default flags and with the per-thread default stream (the _ptsz
 * variant of cuMemAllocAsync). Static cudart. Checkpoints: start, allocated,
 * freed, end. */
#include <cuda.h>
#include <cudaTypedefs.h>

#include "gpu_runtime.h"

static void *by_version(const char *name, unsigned version, unsigned long long flags)
{
	enum cudaDriverEntryPointQueryResult status;
	void *fn = NULL;

	GT_OK(cudaGetDriverEntryPointByVersion(name, &fn, version, flags, &status));
	GT_CHECK_EQ(status, cudaDriverEntryPointSuccess);
	GT_CHECK(fn != NULL);
	return fn;
}

/* NOTE: the deprecation warning is an error under -Werror all-warnings; the
 * call is the point of this test. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void *unversioned(const char *name)
{
	enum cudaDriverEntryPointQueryResult status;
	void *fn = NULL;

	GT_OK(cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &status));
	GT_CHECK_EQ(status, cudaDriverEntryPointSuccess);
	GT_CHECK(fn != NULL);
	return fn;
}
#pragma GCC diagnostic pop

/* A void * from the runtime as the function pointer it is (POSIX lets it
 * round-trip; ISO C++ has no cast for it). */
#define AS(type, ptr)                                                           \
	__extension__({                                                         \
		void *as_p_ = (ptr);                                            \
		type as_f_;                                                     \
		memcpy(&as_f_, &as_p_, sizeof(as_f_));                          \
		as_f_;                                                          \
	})

int main(void)
{
	PFN_cuMemAlloc_v3020 mem_alloc_default, mem_alloc_12000;
	PFN_cuMemFree_v3020 mem_free;
	PFN_cuMemAllocAsync_v11020 mem_alloc_async_ptsz;
	PFN_cuMemFreeAsync_v11020 mem_free_async_ptsz;
	PFN_cuStreamSynchronize_v2000 stream_sync_ptsz;
	CUdeviceptr a_4m, a_6m, a_1m, async_2m;

	gt_begin("entry_point");
	gt_rt_init(0);
	mem_alloc_default = AS(PFN_cuMemAlloc_v3020, unversioned("cuMemAlloc"));
	mem_alloc_12000 = AS(PFN_cuMemAlloc_v3020, by_version("cuMemAlloc", 12000, cudaEnableDefault));
	mem_free = AS(PFN_cuMemFree_v3020, by_version("cuMemFree", 12000, cudaEnableDefault));
	mem_alloc_async_ptsz = AS(PFN_cuMemAllocAsync_v11020,
				  by_version("cuMemAllocAsync", 12000, cudaEnablePerThreadDefaultStream));
	mem_free_async_ptsz = AS(PFN_cuMemFreeAsync_v11020,
				 by_version("cuMemFreeAsync", 12000, cudaEnablePerThreadDefaultStream));
	stream_sync_ptsz = AS(PFN_cuStreamSynchronize_v2000,
			      by_version("cuStreamSynchronize", 12000, cudaEnablePerThreadDefaultStream));
	gt_rt_checkpoint("start");

	GT_OK(mem_alloc_default(&a_4m, 4 * GT_MIB));
	gt_add(a_4m, 4 * GT_MIB, "device", 0);
	GT_OK(mem_alloc_12000(&a_6m, 6 * GT_MIB));
	gt_add(a_6m, 6 * GT_MIB, "device", 0);
	GT_OK(mem_alloc_12000(&a_1m, 1 * GT_MIB));
	gt_add(a_1m, 1 * GT_MIB, "device", 0);
	/* The per-thread default stream (the null stream of a _ptsz call). */
	GT_OK(mem_alloc_async_ptsz(&async_2m, 2 * GT_MIB, NULL));
	GT_OK(stream_sync_ptsz(NULL));
	gt_add(async_2m, 2 * GT_MIB, "async", 0);
	gt_rt_checkpoint("allocated");

	gt_remove(a_6m, "device");
	GT_OK(mem_free(a_6m));
	/* The default pool's release threshold is 0: a synchronisation gives
	 * the freed memory back to the device. */
	gt_remove(async_2m, "async");
	GT_OK(mem_free_async_ptsz(async_2m, NULL));
	GT_OK(stream_sync_ptsz(NULL));
	gt_rt_checkpoint("freed");

	gt_remove(a_4m, "device");
	GT_OK(mem_free(a_4m));
	gt_remove(a_1m, "device");
	GT_OK(mem_free(a_1m));
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
