/* Benchmark and stress program: THREADS threads each make PAIRS
 * cuMemAlloc_v2/cuMemFree_v2 pairs of SIZE bytes from a call chain DEPTH frames
 * deep (so that the tracer's stack capture has frames to walk), and keep KEEP
 * allocations live to the end. Prints the wall time per pair. Run traced and
 * untraced by bench/run.py; under tests/preload it checks that no event is lost.
 *
 * Usage: alloc_free THREADS PAIRS [DEPTH [SIZE [KEEP]]] */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long pairs, size, keep;
static int depth;
static CUcontext ctx;
static pthread_barrier_t start;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int loop(void)
{
	CUdeviceptr p;

	for (long i = 0; i < pairs; i++) {
		if (cuMemAlloc(&p, (size_t)size) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS)
			return -1;
	}
	for (long i = 0; i < keep; i++)
		if (cuMemAlloc(&p, (size_t)size) != CUDA_SUCCESS)
			return -1;
	return 0;
}

/* Recursion the compiler may not flatten, so the stacks really are deep. */
__attribute__((noinline)) static int nest(int n)
{
	int r = n > 0 ? nest(n - 1) : loop();

	__asm__ volatile("" : : "r"(n) : "memory");
	return r;
}

/* Each thread times its own loop: a clock read by main around the joins
 * could start after the workers are done (main may not run first). */
static void *worker(void *arg)
{
	uint64_t *ns = arg, t0;
	int r;

	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return (void *)1;
	pthread_barrier_wait(&start);
	t0 = now_ns();
	r = nest(depth);
	*ns = now_ns() - t0;
	return r == 0 ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	pthread_t t[64];
	uint64_t ns[64], sum = 0;
	void *ret;
	int failed = 0;

	pairs = argc > 2 ? atol(argv[2]) : 100000;
	depth = argc > 3 ? atoi(argv[3]) : 70;
	size = argc > 4 ? atol(argv[4]) : 1024;
	keep = argc > 5 ? atol(argv[5]) : 2;
	if (threads < 1 || threads > 64 || pairs < 1 || size < 1 || depth < 0 || keep < 0) {
		fprintf(stderr, "usage: alloc_free THREADS(1-64) PAIRS [DEPTH [SIZE [KEEP]]]\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) {
		fprintf(stderr, "alloc_free: no CUDA device\n");
		return 1;
	}
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, &ns[i]);
	pthread_barrier_wait(&start);
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], &ret);
		failed |= ret != NULL;
		sum += ns[i];
	}
	if (failed) {
		fprintf(stderr, "alloc_free: a CUDA call failed\n");
		return 1;
	}
	/* Mean wall time per pair of one thread: what each thread pays per pair
	 * while all of them run (with more threads than cores, waiting included;
	 * the keep allocations are a negligible part). */
	printf("ns_per_pair %.1f threads %d pairs %ld\n", (double)sum / threads / (double)pairs, threads, pairs);
	printf("PID %d main\n", (int)getpid());
	return 0;
}
