/* Test program for the stream-ordered row of the matrix: cudaMallocAsync and
 * cudaFreeAsync on the default pool with PyTorch's release threshold
 * (UINT64_MAX), so freed memory stays reserved until cudaMemPoolTrimTo, and an
 * explicit pool with the default threshold (0), whose last block is made on a
 * stream the program creates. Built twice: plain, and with
 * CUDA_API_PER_THREAD_DEFAULT_STREAM (the _ptsz entry points). Run with
 * GMTSIM_MEMORY=1G. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define BLOCKS 4

struct pool_state {
	uint64_t reserved;
	uint64_t used;
	size_t device_free;
};

static struct pool_state pool_state(cudaMemPool_t pool)
{
	struct pool_state s;
	size_t total;

	PROG_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &s.reserved));
	PROG_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &s.used));
	PROG_OK(cudaMemGetInfo(&s.device_free, &total));
	return s;
}

/* The default pool keeps everything it reserved across frees and
 * synchronisations; only a trim gives it back. Returns a block kept live. */
static void *default_pool(size_t free_at_start)
{
	cudaMemPool_t pool;
	uint64_t threshold = UINT64_MAX, got = 0;
	struct pool_state grown, after_free, trimmed;
	void *blocks[BLOCKS], *kept;
	int i;

	PROG_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
	PROG_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	PROG_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
	PROG_CHECK_EQ_U(got, UINT64_MAX);

	for (i = 0; i < BLOCKS; i++)
		PROG_OK(cudaMallocAsync(&blocks[i], 4 * MIB, 0));
	PROG_OK(cudaStreamSynchronize(0));
	grown = pool_state(pool);
	PROG_CHECK_EQ_U(grown.used, BLOCKS * 4 * MIB);
	PROG_CHECK(grown.reserved >= grown.used);
	PROG_CHECK_EQ_U(grown.reserved % (2 * MIB), 0);
	/* The device's free bytes drop by exactly what the pool reserved. */
	PROG_CHECK_EQ_U(grown.device_free, free_at_start - grown.reserved);

	for (i = 0; i < BLOCKS; i++)
		PROG_OK(cudaFreeAsync(blocks[i], 0));
	PROG_OK(cudaStreamSynchronize(0));
	after_free = pool_state(pool);
	PROG_CHECK_EQ_U(after_free.used, 0);
	PROG_CHECK_EQ_U(after_free.reserved, grown.reserved);
	PROG_CHECK_EQ_U(after_free.device_free, grown.device_free);

	PROG_OK(cudaMemPoolTrimTo(pool, 0));
	trimmed = pool_state(pool);
	PROG_CHECK_EQ_U(trimmed.reserved, 0);
	PROG_CHECK_EQ_U(trimmed.used, 0);
	PROG_CHECK_EQ_U(trimmed.device_free, free_at_start);

	PROG_OK(cudaMallocAsync(&kept, 6 * MIB, 0));
	PROG_OK(cudaStreamSynchronize(0));
	return kept;
}

/* An explicit pool with the default threshold 0: a synchronisation gives its
 * unused segments back. Returns a block kept live. */
static void *explicit_pool(size_t free_at_start)
{
	struct cudaMemPoolProps props;
	cudaMemPool_t pool;
	uint64_t threshold = 1;
	struct pool_state grown, after_free;
	cudaStream_t stream;
	void *big, *small, *kept;

	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	PROG_OK(cudaMemPoolCreate(&pool, &props));
	PROG_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	PROG_CHECK_EQ_U(threshold, 0);

	PROG_OK(cudaMallocFromPoolAsync(&big, 8 * MIB, pool, 0));
	PROG_OK(cudaMallocFromPoolAsync(&small, 2 * MIB, pool, 0));
	PROG_OK(cudaStreamSynchronize(0));
	grown = pool_state(pool);
	PROG_CHECK_EQ_U(grown.used, 10 * MIB);
	PROG_CHECK(grown.reserved >= grown.used);
	PROG_CHECK_EQ_U(grown.device_free, free_at_start - grown.reserved);

	PROG_OK(cudaFreeAsync(big, 0));
	PROG_OK(cudaFreeAsync(small, 0));
	PROG_OK(cudaStreamSynchronize(0));
	after_free = pool_state(pool);
	PROG_CHECK_EQ_U(after_free.used, 0);
	PROG_CHECK_EQ_U(after_free.reserved, 0);
	PROG_CHECK_EQ_U(after_free.device_free, free_at_start);

	/* The block kept is made on a stream of the program's own: the
	 * tracer names the stream of each stream-ordered allocation. */
	PROG_OK(cudaStreamCreate(&stream));
	PROG_OK(cudaMallocFromPoolAsync(&kept, 2 * MIB, pool, stream));
	PROG_OK(cudaStreamSynchronize(stream));
	return kept;
}

int main(void)
{
	size_t free_at_start, total;
	void *from_default, *from_explicit;

	PROG_OK(cudaMemGetInfo(&free_at_start, &total));
	PROG_CHECK_EQ_U(total, 1024 * MIB);
	PROG_CHECK_EQ_U(free_at_start, total);

	from_default = default_pool(free_at_start);
	PROG_OK(cudaMemGetInfo(&free_at_start, &total));
	from_explicit = explicit_pool(free_at_start);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(from_default), 6 * MIB, "async", 0);
	prog_report_live(PROG_ADDR(from_explicit), 2 * MIB, "async", 0);
	prog_report_end();
	return 0;
}
