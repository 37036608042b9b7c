/* Allocations from many distinct call paths: at each of LEVELS levels the call
 * goes down through one of two call sites, so 2^LEVELS allocations kept live
 * have 2^LEVELS distinct stacks. bench/run.py times the exit snapshot that
 * symbolises them all. Usage: stacks [LEVELS] */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static int levels;

static int down_a(int level, unsigned path);
static int down_b(int level, unsigned path);

/* Two call sites per level: bit `level` of `path` picks one. */
__attribute__((noinline)) static int step(int level, unsigned path)
{
	CUdeviceptr p;

	if (level == levels)
		return cuMemAlloc(&p, 256) == CUDA_SUCCESS ? 0 : -1;
	if (path & (1u << level))
		return down_a(level + 1, path);
	return down_b(level + 1, path);
}

__attribute__((noinline)) static int down_a(int level, unsigned path)
{
	int r = step(level, path);

	__asm__ volatile("" : : "r"(r) : "memory");
	return r;
}

/* NOTE: a body of its own, or GCC folds it into down_a (identical code
 * folding) and the two call sites become one. */
__attribute__((noinline)) static int down_b(int level, unsigned path)
{
	int r = step(level, path ^ 0);

	__asm__ volatile("" : : "r"(r), "r"(level) : "memory");
	return r;
}

int main(int argc, char **argv)
{
	CUcontext ctx;

	levels = argc > 1 ? atoi(argv[1]) : 14;
	if (levels < 1 || levels > 20 || cuInit(0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	for (unsigned path = 0; path < (1u << levels); path++)
		if (step(0, path) != 0)
			return 1;
	printf("stacks %u\n", 1u << levels);
	return 0;
}
