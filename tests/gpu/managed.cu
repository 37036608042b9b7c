/* The managed-memory row: cudaMallocManaged of 64 MiB and 1 MiB, listed as
 * kind managed, which takes no device memory until a kernel touches it. Built
 * by nvcc, a kernel then touches the 64 MiB; on the simulated GPU no kernel
 * runs and nothing becomes resident. Never more managed memory than the device
 * has free. Static cudart. Checkpoints: start, allocated, touched, end.
 *
 * The device's free bytes are compared (MEMINFO) only before the touch. What a
 * touch costs is the driver's to decide, outside any call the tracer sees: on
 * an H200 (driver 580) the first touch of 64 MiB took 128 MiB, and freeing it
 * gave back 64 MiB; a first touch of 2 MiB took 126 MiB, after which a touch
 * of 64 MiB took nothing more. The program prints how far the free bytes moved
 * (NOTE) and the allocations stay checked exactly. */
#include "gpu_runtime.h"

#define MANAGED_BYTES (64 * GT_MIB)

int main(void)
{
	void *big, *small;
	size_t free_bytes, total, free_touched, free_end;
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
	GT_OK(cudaMemGetInfo(&free_bytes, &total));

	touched = gt_touch(big, MANAGED_BYTES);
	gt_note("managed memory touched by a kernel: %s", touched ? "yes" : "no (no kernel here)");
	gt_checkpoint("touched");
	GT_OK(cudaMemGetInfo(&free_touched, &total));

	gt_remove(GT_ADDR(big), "managed");
	GT_OK(cudaFree(big));
	gt_remove(GT_ADDR(small), "managed");
	GT_OK(cudaFree(small));
	gt_checkpoint("end");
	GT_OK(cudaMemGetInfo(&free_end, &total));
	gt_note("the device's free bytes fell by %lld at the touch, by %lld from the allocations to the end",
		(long long)free_bytes - (long long)free_touched, (long long)free_bytes - (long long)free_end);
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
