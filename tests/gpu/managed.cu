/* The managed-memory row: cudaMallocManaged of 64 MiB and 1 MiB, listed as
 * kind managed, which takes no device memory until a kernel touches it. Built
 * by nvcc, a kernel then touches the 64 MiB (resident on the device: the
 * program says so with an EXTRA line, since a snapshot's footprint never
 * counts managed memory); on the simulated GPU no kernel runs and nothing
 * becomes resident. Never more managed memory than the device has free.
 * Static cudart. Checkpoints: start, allocated, touched, end. */
#include "gpu_runtime.h"

#define MANAGED_BYTES (64 * GT_MIB)

int main(void)
{
	void *big, *small;
	size_t free_bytes, total;
	int touched;

	gt_begin("managed");
	gt_rt_init(0);
	GT_OK(cudaMemGetInfo(&free_bytes, &total));
	if (free_bytes < 4 * MANAGED_BYTES) {
		gt_skip("less than 256 MiB free on device 0");
		return 0;
	}
	gt_rt_checkpoint("start");

	GT_OK(cudaMallocManaged(&big, MANAGED_BYTES, cudaMemAttachGlobal));
	gt_add(GT_ADDR(big), MANAGED_BYTES, "managed", 0);
	GT_OK(cudaMallocManaged(&small, 1 * GT_MIB, cudaMemAttachGlobal));
	gt_add(GT_ADDR(small), 1 * GT_MIB, "managed", 0);
	gt_rt_checkpoint("allocated");

	touched = gt_touch(big, MANAGED_BYTES);
	gt_note("managed memory touched by a kernel: %s", touched ? "yes" : "no (no kernel here)");
	gt_rt_checkpoint("touched");
	gt_extra("touched", 0, touched ? MANAGED_BYTES : 0);

	gt_remove(GT_ADDR(big), "managed");
	GT_OK(cudaFree(big));
	gt_remove(GT_ADDR(small), "managed");
	GT_OK(cudaFree(small));
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
