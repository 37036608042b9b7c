/* Test program for out-of-memory by fragmentation: fill the device with 1 MiB
 * blocks (two per 2 MiB page), free every other one, and a 4 MiB request fails
 * although half the capacity is not live, because every page is half used.
 * Run with GMTSIM_MEMORY=64M. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define MAX_BLOCKS 1024

int main(void)
{
	void *blocks[MAX_BLOCKS], *p = (void *)(uintptr_t)0xdead0000, *again;
	size_t free_bytes, total, n, i;
	unsigned long long lowest_freed = ~0ULL;

	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(total, 64 * MIB);
	PROG_CHECK_EQ_U(free_bytes, total);

	n = total / MIB;
	PROG_CHECK(n <= MAX_BLOCKS);
	for (i = 0; i < n; i++)
		PROG_OK(cudaMalloc(&blocks[i], MIB));
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 0);

	for (i = 0; i < n; i += 2) {
		if (PROG_ADDR(blocks[i]) < lowest_freed)
			lowest_freed = PROG_ADDR(blocks[i]);
		PROG_OK(cudaFree(blocks[i]));
	}
	/* Half the bytes are free, yet no page is. */
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 0);

	PROG_CHECK_EQ(cudaMalloc(&p, 4 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(p), 0xdead0000);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ(cudaGetLastError(), cudaSuccess);

	/* A block that fits a hole still succeeds, at the lowest free address. */
	PROG_OK(cudaMalloc(&again, MIB));
	PROG_CHECK_EQ_U(PROG_ADDR(again), lowest_freed);

	prog_report_begin("main");
	for (i = 1; i < n; i += 2)
		prog_report_live(PROG_ADDR(blocks[i]), MIB, "device", 0);
	prog_report_live(PROG_ADDR(again), MIB, "device", 0);
	prog_report_end();
	return 0;
}
