/* The pinned and registered host memory rows: cudaMallocHost, cudaHostAlloc
 * (portable, mapped), cudaHostRegister of malloc'd memory, and the frees.
 * Listed with device -1 and kinds host and registered; none of it takes
 * device memory, so the device's free bytes must not move. Static cudart.
 * Checkpoints: start, allocated, freed, end. */
#include "gpu_runtime.h"

int main(void)
{
	void *pinned, *portable, *mapped, *reg_a, *reg_b;

	gt_begin("host_memory");
	gt_rt_init(0);
	gt_rt_checkpoint("start");

	GT_OK(cudaMallocHost(&pinned, 1 * GT_MIB));
	gt_add(GT_ADDR(pinned), 1 * GT_MIB, "host", -1);
	GT_OK(cudaHostAlloc(&portable, 12345, cudaHostAllocPortable));
	gt_add(GT_ADDR(portable), 12345, "host", -1);
	GT_OK(cudaHostAlloc(&mapped, 64 * 1024, cudaHostAllocMapped));
	gt_add(GT_ADDR(mapped), 64 * 1024, "host", -1);
	reg_a = aligned_alloc(4096, 256 * 1024);
	reg_b = aligned_alloc(4096, 16 * 1024);
	GT_CHECK(reg_a != NULL && reg_b != NULL);
	GT_OK(cudaHostRegister(reg_a, 256 * 1024, cudaHostRegisterDefault));
	gt_add(GT_ADDR(reg_a), 256 * 1024, "registered", -1);
	GT_OK(cudaHostRegister(reg_b, 16 * 1024, cudaHostRegisterDefault));
	gt_add(GT_ADDR(reg_b), 16 * 1024, "registered", -1);
	gt_rt_checkpoint("allocated");

	gt_remove(GT_ADDR(portable), "host");
	GT_OK(cudaFreeHost(portable));
	gt_remove(GT_ADDR(reg_b), "registered");
	GT_OK(cudaHostUnregister(reg_b));
	free(reg_b);
	gt_rt_checkpoint("freed");

	gt_remove(GT_ADDR(pinned), "host");
	GT_OK(cudaFreeHost(pinned));
	gt_remove(GT_ADDR(mapped), "host");
	GT_OK(cudaFreeHost(mapped));
	gt_remove(GT_ADDR(reg_a), "registered");
	GT_OK(cudaHostUnregister(reg_a));
	free(reg_a);
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
