/* Test program for the pool_reservation verdict: the default pool keeps what
 * it reserved (PyTorch's release threshold, UINT64_MAX), so after 128 MiB of
 * stream-ordered blocks are freed the device still has only 96 MiB free, and a
 * plain 160 MiB cudaMalloc fails although nothing but 32 MiB is live. Trimming
 * the pool makes the same request succeed. Run with GMTSIM_MEMORY=256M. */
#define _GNU_SOURCE
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define BLOCKS 8

int main(void)
{
	cudaMemPool_t pool;
	uint64_t threshold = UINT64_MAX, reserved = 0;
	void *blocks[BLOCKS], *live, *big = (void *)(uintptr_t)0xdead0000;
	size_t free_bytes, total;
	int i;

	PROG_OK(cudaMalloc(&live, 32 * MIB));
	PROG_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
	PROG_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	for (i = 0; i < BLOCKS; i++)
		PROG_OK(cudaMallocAsync(&blocks[i], 16 * MIB, 0));
	for (i = 0; i < BLOCKS; i++)
		PROG_OK(cudaFreeAsync(blocks[i], 0));
	PROG_OK(cudaStreamSynchronize(0));
	PROG_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
	PROG_CHECK_EQ_U(reserved, BLOCKS * 16 * MIB);
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 96 * MIB);

	PROG_CHECK_EQ(cudaMalloc(&big, 160 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(big), 0xdead0000);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);

	/* What the diagnosis advises: give the reserve back. */
	PROG_OK(cudaMemPoolTrimTo(pool, 0));
	PROG_OK(cudaMalloc(&big, 160 * MIB));
	PROG_OK(cudaFree(big));

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(live), 32 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
