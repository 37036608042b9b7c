/* Test program for racing frees of one address (a program's own double
 * frees), against the simulator's ledger: each round the main thread
 * allocates BLOCKS blocks, then FREERS threads each free every block, in an
 * order of their own, all at once — every block is freed FREERS times
 * concurrently and the driver honours one — while an allocator thread
 * allocates and frees blocks of the same sizes, getting the addresses just
 * freed back, and keeps one in four. The tracer's live set and totals must
 * equal the ledger's whatever the interleaving. Arguments: SEED ROUNDS
 * FREERS. Prints "PID <pid> main". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

#include "shuffle.h"

#define BLOCKS 32
#define MAX_FREERS 8
#define ALLOCS 48

static CUcontext ctx;
static CUdeviceptr blocks[BLOCKS];
static size_t sizes[BLOCKS];
static pthread_barrier_t start;

struct freer {
	pthread_t t;
	unsigned seed;
};

static size_t size_of(unsigned *seed)
{
	/* From 4 KiB to 2 MiB: small ones share the simulator's pages. */
	return (size_t)4096 << (rand_r(seed) % 10);
}

static void *free_all(void *arg)
{
	struct freer *f = arg;
	int order[BLOCKS];

	cuCtxSetCurrent(ctx);
	shuffle(order, BLOCKS, &f->seed);
	pthread_barrier_wait(&start);
	for (int i = 0; i < BLOCKS; i++)
		(void)cuMemFree(blocks[order[i]]); /* all but one fail: the program's bug */
	return NULL;
}

static void *allocate(void *arg)
{
	unsigned *seed = arg;

	cuCtxSetCurrent(ctx);
	pthread_barrier_wait(&start);
	for (int i = 0; i < ALLOCS; i++) {
		CUdeviceptr p;

		if (cuMemAlloc(&p, size_of(seed)) != CUDA_SUCCESS)
			continue;
		if (rand_r(seed) % 4 != 0)
			(void)cuMemFree(p); /* may fail: a freer's stale free may have taken it */
	}
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1;
	int rounds = argc > 2 ? atoi(argv[2]) : 20, nfreers = argc > 3 ? atoi(argv[3]) : 2;
	struct freer freers[MAX_FREERS];
	CUdevice dev;

	if (nfreers < 2 || nfreers > MAX_FREERS || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	for (int r = 0; r < rounds; r++) {
		unsigned alloc_seed = seed * 7919u + (unsigned)r;
		pthread_t a;

		for (int i = 0; i < BLOCKS; i++) {
			sizes[i] = size_of(&seed);
			if (cuMemAlloc(&blocks[i], sizes[i]) != CUDA_SUCCESS)
				return 1;
		}
		pthread_barrier_init(&start, NULL, (unsigned)nfreers + 1);
		for (int k = 0; k < nfreers; k++) {
			freers[k].seed = seed + 101u * (unsigned)k + (unsigned)r;
			pthread_create(&freers[k].t, NULL, free_all, &freers[k]);
		}
		pthread_create(&a, NULL, allocate, &alloc_seed);
		for (int k = 0; k < nfreers; k++)
			pthread_join(freers[k].t, NULL);
		pthread_join(a, NULL);
		pthread_barrier_destroy(&start);
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
