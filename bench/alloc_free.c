/* Benchmark and stress program: THREADS threads each make PAIRS
 * cuMemAlloc_v2/cuMemFree_v2 pairs of SIZE bytes from a call chain DEPTH frames
 * deep (so that the tracer's stack capture has frames to walk), and keep KEEP
 * allocations live to the end. Prints the wall time per pair. Run traced and
 * untraced by bench/run.py; under tests/preload it checks that no event is lost.
 * WARMUP untimed pairs from the same chain come first, as in malloc_free: a
 * tracer's one-off start-up (gpumemtrace's consumer learning the unwinding
 * rules of frames it has not seen) is then kept out of the per-pair figure.
 *
 * Usage: alloc_free THREADS PAIRS [DEPTH [SIZE [KEEP [WARMUP]]]] */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long pairs, size, keep, warmup;
static int depth;
static CUcontext ctx;
static pthread_barrier_t start;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* count pairs, then (when keep_live) the KEEP allocations. */
static int loop(long count, int keep_live)
{
	CUdeviceptr p;

	for (long i = 0; i < count; i++) {
		if (cuMemAlloc(&p, (size_t)size) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS)
			return -1;
	}
	for (long i = 0; keep_live && i < keep; i++)
		if (cuMemAlloc(&p, (size_t)size) != CUDA_SUCCESS)
			return -1;
	return 0;
}

/* Recursion the compiler may not flatten, so the stacks really are deep. */
__attribute__((noinline)) static int nest(int n, long count, int keep_live)
{
	int r = n > 0 ? nest(n - 1, count, keep_live) : loop(count, keep_live);

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
	/* The warm-up's frames differ from the timed loop's only in worker's
	 * return address: with DEPTH 64 or more, beyond the frames recorded. */
	r = warmup > 0 ? nest(depth, warmup, 0) : 0;
	t0 = now_ns();
	r |= nest(depth, pairs, 1);
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
	warmup = argc > 6 ? atol(argv[6]) : 0;
	if (threads < 1 || threads > 64 || pairs < 1 || size < 1 || depth < 0 || keep < 0 || warmup < 0) {
		fprintf(stderr, "usage: alloc_free THREADS(1-64) PAIRS [DEPTH [SIZE [KEEP [WARMUP]]]]\n");
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
