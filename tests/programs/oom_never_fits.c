/* Test program for requests that could never fit: other processes hold
 * 192 MiB of a 256 MiB device. With 16 MiB live, a 96 MiB request fails —
 * and would fail with nothing of this process live (64 MiB is all it could
 * have). A 1 MiB allocation then succeeds (that episode is over), and a
 * 512 MiB request, larger than the device, fails. Run with GMTSIM_MEMORY=256M
 * GMTSIM_OTHER_PROCESSES=192M. */
#define _GNU_SOURCE
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

int main(void)
{
	void *live, *small, *big = (void *)(uintptr_t)0xdead0000;
	size_t free_bytes, total;

	PROG_OK(cudaMalloc(&live, 16 * MIB));
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 48 * MIB);
	PROG_CHECK_EQ(cudaMalloc(&big, 96 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(big), 0xdead0000);
	(void)cudaGetLastError();
	PROG_OK(cudaMalloc(&small, 1 * MIB));
	PROG_CHECK_EQ(cudaMalloc(&big, 512 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(big), 0xdead0000);
	(void)cudaGetLastError();

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(live), 16 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(small), 1 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
