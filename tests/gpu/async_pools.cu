/* The stream-ordered row: cudaMallocAsync/cudaFreeAsync on the default pool
 * with PyTorch's release threshold (UINT64_MAX: freed memory stays reserved
 * until cudaMemPoolTrimTo), and an explicit pool with the default threshold
 * (0: a synchronisation gives unused memory back) through
 * cudaMallocFromPoolAsync. Built twice: plain, and with the per-thread
 * default stream (nvcc --default-stream per-thread: the _ptsz entry points).
 * Static cudart. Checkpoints: start, grown, freed (reserved, nothing live),
 * trimmed, explicit, explicit-freed, end. */
#include <stdint.h>

#include "gpu_runtime.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define NAME "async_pools_ptsz"
#else
#define NAME "async_pools"
#endif

#define BLOCKS 4

static cudaMemPool_t default_pool, explicit_pool;

/* The snapshot, what it holds, the free bytes, the default pool's
 * reservation, and the explicit pool's (not the device's default or current
 * pool: the tracer does not ask it). */
static void checkpoint(const char *label)
{
	gt_rt_checkpoint(label);
	gt_pool(label, 0, gt_rt_pool_reserved(default_pool));
	gt_extra(label, 0, explicit_pool != NULL ? gt_rt_pool_reserved(explicit_pool) : 0);
}

static void *async_alloc(size_t size, cudaMemPool_t pool)
{
	void *p = NULL;

	if (pool != NULL)
		GT_OK(cudaMallocFromPoolAsync(&p, size, pool, 0));
	else
		GT_OK(cudaMallocAsync(&p, size, 0));
	gt_add(GT_ADDR(p), size, "async", 0);
	return p;
}

static void async_free(void *p)
{
	gt_remove(GT_ADDR(p), "async");
	GT_OK(cudaFreeAsync(p, 0));
}

int main(void)
{
	struct cudaMemPoolProps props;
	uint64_t threshold = UINT64_MAX;
	void *blocks[BLOCKS], *kept, *big, *small, *pooled;
	int i;

	gt_begin(NAME);
	gt_rt_init(0);
	GT_OK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
	GT_OK(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	checkpoint("start");

	for (i = 0; i < BLOCKS; i++)
		blocks[i] = async_alloc(4 * GT_MIB, NULL);
	GT_OK(cudaStreamSynchronize(0));
	checkpoint("grown");

	/* Nothing live, and every byte still reserved: the snapshot's pools say
	 * what cudaMemGetInfo sees. */
	for (i = 0; i < BLOCKS; i++)
		async_free(blocks[i]);
	GT_OK(cudaStreamSynchronize(0));
	checkpoint("freed");

	GT_OK(cudaMemPoolTrimTo(default_pool, 0));
	kept = async_alloc(6 * GT_MIB, NULL);
	GT_OK(cudaStreamSynchronize(0));
	checkpoint("trimmed");

	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	GT_OK(cudaMemPoolCreate(&explicit_pool, &props));
	big = async_alloc(8 * GT_MIB, explicit_pool);
	small = async_alloc(2 * GT_MIB, explicit_pool);
	GT_OK(cudaStreamSynchronize(0));
	checkpoint("explicit");

	async_free(big);
	async_free(small);
	pooled = async_alloc(2 * GT_MIB, explicit_pool);
	GT_OK(cudaStreamSynchronize(0));
	checkpoint("explicit-freed");

	async_free(pooled);
	async_free(kept);
	GT_OK(cudaStreamSynchronize(0));
	GT_OK(cudaMemPoolTrimTo(default_pool, 0));
	GT_OK(cudaMemPoolDestroy(explicit_pool));
	explicit_pool = NULL;
	checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
