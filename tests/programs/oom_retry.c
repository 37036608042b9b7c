/* Test program for out-of-memory episodes: a program shaped like a caching
 * allocator, then two failures of other needs. Run with GMTSIM_MEMORY=1G.
 *
 * Episode 1: a busy 100 MiB segment, three cached 256 MiB segments, and a
 * 1 GiB request, which fails; the allocator frees one cached segment and
 * asks again (fails), frees the other two and asks a third time (fails) —
 * the program is told of the third failure only. Its snapshot must describe
 * that one: 100 MiB live, and the 768 MiB freed between the failures by the
 * site that had cached them.
 *
 * The program then recovers (a 64 MiB allocation succeeds: the episode is
 * over). Episode 2: it fills the device with 1 MiB blocks until one fails.
 * It frees every other block and allocates one 1 MiB block, which succeeds
 * (over again). Episode 3: a 4 MiB request fails — every page is half used.
 * Each failure is in the episode's snapshot, and no failure is suppressed. */
#define _GNU_SOURCE
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define MAX_BLOCKS 1024

static void *cached[3];

/* The allocator's segments: one function for all, as a caching allocator
 * has (the episode's freed memory is by this site). */
static void *segment(size_t bytes)
{
	void *p = NULL;

	PROG_OK(cudaMalloc(&p, bytes));
	return p;
}

/* A request the allocator cannot serve from its cache: ask the driver, and
 * on failure release cached segments and ask again, as PyTorch does. */
static cudaError_t request(void **p, size_t bytes)
{
	cudaError_t err = cudaMalloc(p, bytes);

	if (err != cudaErrorMemoryAllocation)
		return err;
	(void)cudaGetLastError();
	PROG_OK(cudaFree(cached[0]));
	err = cudaMalloc(p, bytes);
	if (err != cudaErrorMemoryAllocation)
		return err;
	(void)cudaGetLastError();
	PROG_OK(cudaFree(cached[1]));
	PROG_OK(cudaFree(cached[2]));
	err = cudaMalloc(p, bytes);
	(void)cudaGetLastError();
	return err;
}

int main(void)
{
	static void *blocks[MAX_BLOCKS];
	void *busy, *big = (void *)(uintptr_t)0xdead0000, *recovered, *one, *four = (void *)(uintptr_t)0xdead0000;
	size_t free_bytes, total, n = 0, i;

	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(total, 1024 * MIB);

	busy = segment(100 * MIB);
	for (i = 0; i < 3; i++)
		cached[i] = segment(256 * MIB);
	PROG_CHECK_EQ(request(&big, 1024 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(big), 0xdead0000);

	PROG_OK(cudaMalloc(&recovered, 64 * MIB));

	for (;;) {
		void *p = NULL;

		PROG_CHECK(n < MAX_BLOCKS);
		if (cudaMalloc(&p, MIB) != cudaSuccess)
			break;
		blocks[n++] = p;
	}
	(void)cudaGetLastError();
	for (i = 0; i < n; i += 2)
		PROG_OK(cudaFree(blocks[i]));
	PROG_OK(cudaMalloc(&one, MIB));
	PROG_CHECK_EQ(cudaMalloc(&four, 4 * MIB), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(four), 0xdead0000);
	(void)cudaGetLastError();

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(busy), 100 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(recovered), 64 * MIB, "device", 0);
	for (i = 1; i < n; i += 2)
		prog_report_live(PROG_ADDR(blocks[i]), MIB, "device", 0);
	prog_report_live(PROG_ADDR(one), MIB, "device", 0);
	prog_report_end();
	return 0;
}
