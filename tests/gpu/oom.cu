/* Out of memory by over-allocation of plain device memory (never managed
 * memory, which a driver may let grow past the device): cudaMalloc of chunks
 * of a sixteenth of the free memory (whole 2 MiB pages, 1 GiB at most) until
 * one fails. The tracer's out-of-memory snapshot must hold every chunk, name
 * the failed request (cuMemAlloc_v2, its size, device 0), agree with
 * cudaMemGetInfo asked right after the failure, and call it exhaustion.
 * Everything is freed afterwards. Static cudart. Checkpoints: start, oom
 * (the tracer's own), end. */
#include "gpu_runtime.h"

#define PAGE (2 * GT_MIB)

int main(void)
{
	static void *chunks[GT_MAX_ALLOCS];
	size_t free_bytes, total, chunk, n = 0;
	cudaError_t err;

	gt_begin("oom_exhaust");
	gt_rt_init(0);
	GT_OK(cudaMemGetInfo(&free_bytes, &total));
	chunk = gt_round_down(free_bytes / 16, PAGE);
	if (chunk < PAGE)
		chunk = PAGE;
	if (chunk > 1024 * GT_MIB)
		chunk = 1024 * GT_MIB;
	gt_note("chunk %zu bytes of %zu free", chunk, free_bytes);
	gt_rt_checkpoint("start");

	for (;;) {
		void *p = NULL;

		if (n == GT_MAX_ALLOCS)
			GT_FAIL("%zu chunks and still no out-of-memory", n);
		err = cudaMalloc(&p, chunk);
		if (err != cudaSuccess)
			break;
		chunks[n++] = p;
		gt_add(GT_ADDR(p), chunk, "device", 0);
	}
	GT_CHECK_EQ(err, cudaErrorMemoryAllocation);
	/* The error is not sticky; clear the runtime's last error. */
	(void)cudaGetLastError();
	gt_checkpoint_at("oom", "@oom");
	gt_rt_meminfo("oom");
	gt_oom("oom", "cuMemAlloc_v2", chunk, 0);
	gt_verdict("oom", "exhaustion", 1);
	gt_note("%zu chunks held at the failure", n);

	while (n > 0) {
		n--;
		gt_remove(GT_ADDR(chunks[n]), "device");
		GT_OK(cudaFree(chunks[n]));
	}
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
