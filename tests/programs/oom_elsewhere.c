/* Test program for memory held outside this process's allocations: with
 * GMTSIM_OTHER_PROCESSES=192M (or GMTSIM_CONTEXT_BYTES=192M) of a 256 MiB
 * device, 32 MiB live leave 32 MiB free, and a 64 MiB request fails. Run with
 * GMTSIM_MEMORY=256M and one of the two. */
#define _GNU_SOURCE
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

int main(void)
{
	void *live, *big = (void *)(uintptr_t)0xdead0000;
	size_t free_bytes, total;

	PROG_OK(cudaMalloc(&live, 32 * MIB));
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 32 * MIB);
	PROG_CHECK_EQ(cudaMalloc(&big, 64 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(big), 0xdead0000);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(live), 32 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
