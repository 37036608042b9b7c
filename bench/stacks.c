/* Allocations from many distinct call paths: at each level the call goes down
 * through one of two call sites, so the COUNT allocations kept live, one per
 * path, have COUNT distinct stacks (as many levels as COUNT - 1 has bits).
 * bench/run.py times the exit snapshot that symbolises them all.
 * Usage: stacks [COUNT]   (1 to 2^20; default 16384) */
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
	long count = argc > 1 ? atol(argv[1]) : 16384;
	CUcontext ctx;

	if (count < 1 || count > (1l << 20)) {
		fprintf(stderr, "usage: stacks [COUNT] (1 to %ld)\n", 1l << 20);
		return 2;
	}
	/* At least one level, so that every path has a call site of its own. */
	for (levels = 1; (1l << levels) < count; levels++)
		;
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	for (unsigned path = 0; path < (unsigned)count; path++)
		if (step(0, path) != 0)
			return 1;
	printf("stacks %ld levels %d\n", count, levels);
	return 0;
}
