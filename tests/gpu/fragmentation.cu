/* Fragmentation: large chunks fill the device but for 32 MiB or so, 1 MiB
 * blocks fill the rest (two to a 2 MiB page where the driver sub-allocates),
 * every other block is freed — each page keeps one and cannot be given back
 * — and a 4 MiB request then fails with half of those pages' bytes unused.
 * The snapshot taken just before must count exactly the pages the driver
 * holds (cudaMemGetInfo), and the out-of-memory snapshot's diagnosis must
 * name fragmentation. A driver that gives each 1 MiB block a page of its own
 * fragments nothing: then the 4 MiB request succeeds, the program says so
 * (NOTE), and only the page count is checked. Static cudart. Checkpoints:
 * start, fragmented, oom (the tracer's own, when it fails), end. */
#include "gpu_runtime.h"

#define PAGE (2 * GT_MIB)
#define SMALL_REGION (32 * GT_MIB)

static void *held[GT_MAX_ALLOCS];
static size_t n_held;

static size_t device_free(void)
{
	size_t free_bytes, total;

	GT_OK(cudaMemGetInfo(&free_bytes, &total));
	return free_bytes;
}

static void *hold(size_t size)
{
	void *p = NULL;

	if (n_held == GT_MAX_ALLOCS)
		GT_FAIL("more than %zu allocations", n_held);
	GT_OK(cudaMalloc(&p, size));
	gt_add(GT_ADDR(p), size, "device", 0);
	held[n_held++] = p;
	return p;
}

int main(void)
{
	size_t chunk, first_small, i, kept;
	void *request = NULL;
	cudaError_t err;

	gt_begin("fragmentation");
	gt_rt_init(0);
	chunk = gt_round_down(device_free() / 16, PAGE);
	if (chunk < PAGE)
		chunk = PAGE;
	if (chunk > 1024 * GT_MIB)
		chunk = 1024 * GT_MIB;
	gt_rt_checkpoint("start");

	while (device_free() >= SMALL_REGION + chunk)
		hold(chunk);
	first_small = n_held;
	/* Stops with less than two pages free, never at a failed request (a
	 * driver may refuse the very last pages): the 4 MiB request below must
	 * be the process's first failure. */
	while (device_free() >= 2 * PAGE)
		hold(1 * GT_MIB);
	gt_note("%zu chunks of %zu bytes, %zu blocks of 1 MiB", first_small, chunk,
		n_held - first_small);
	GT_CHECK(n_held - first_small >= 8);

	/* The second block of each pair: the last block, alone in its page when
	 * their number is odd, stays too, so that every page keeps one. */
	kept = first_small;
	for (i = first_small; i < n_held; i++) {
		if ((i - first_small) % 2 == 1) {
			gt_remove(GT_ADDR(held[i]), "device");
			GT_OK(cudaFree(held[i]));
		} else {
			held[kept++] = held[i];
		}
	}
	n_held = kept;
	gt_rt_checkpoint("fragmented");

	err = cudaMalloc(&request, 4 * GT_MIB);
	if (err == cudaSuccess) {
		gt_note("the driver placed 4 MiB after every other 1 MiB block was freed: "
			"it gives small blocks pages of their own, nothing fragments");
		GT_OK(cudaFree(request));
	} else {
		GT_CHECK_EQ(err, cudaErrorMemoryAllocation);
		(void)cudaGetLastError();
		gt_note("the 4 MiB request failed: fragmented");
		gt_checkpoint_at("oom", "@oom");
		gt_rt_meminfo("oom");
		gt_oom("oom", "cuMemAlloc_v2", 4 * GT_MIB, 0);
		/* Not necessarily the primary verdict: the large chunks make it
		 * exhaustion too, with more bytes. */
		gt_verdict("oom", "fragmentation", 0);
	}

	while (n_held > 0) {
		n_held--;
		gt_remove(GT_ADDR(held[n_held]), "device");
		GT_OK(cudaFree(held[n_held]));
	}
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
