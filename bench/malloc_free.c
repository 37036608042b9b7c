/* Benchmark program: alloc_free's workload on the host heap, for tracers of
 * malloc (bench/heaptrack.py runs it under heaptrack). THREADS threads each
 * make PAIRS malloc/free pairs of SIZE bytes from a call chain DEPTH frames
 * deep, each thread timing its own loop, and print the wall time per pair.
 * WARMUP untimed pairs from the same chain come first: a tracer's one-off
 * start-up (heaptrack's interpreter reads the modules' symbols while the
 * program blocks on the full pipe) is then kept out of the per-pair figure,
 * and printed apart as warmup_s.
 *
 * Usage: malloc_free THREADS PAIRS [DEPTH [SIZE [WARMUP]]] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long pairs, size, warmup;
static int depth;
static pthread_barrier_t start;
/* Every block is written through a volatile access and escapes through this
 * store, so the compiler may not pair the malloc with its free and drop both
 * (GCC and Clang do, for a block that never escapes). */
static void *volatile sink;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int loop(long count)
{
	for (long i = 0; i < count; i++) {
		char *p = malloc((size_t)size);

		if (!p)
			return -1;
		*(volatile char *)p = (char)i;
		sink = p;
		free(p);
	}
	return 0;
}

/* Recursion the compiler may not flatten, so the stacks really are deep:
 * noinline, and the asm after the call keeps it from being a tail call. */
__attribute__((noinline)) static int nest(int n, long count)
{
	int r = n > 0 ? nest(n - 1, count) : loop(count);

	__asm__ volatile("" : : "r"(n) : "memory");
	return r;
}

/* Each thread times its own loop, as in alloc_free. The warm-up's frames
 * differ from the timed loop's only in worker's return address: with DEPTH
 * 64 or more, beyond the innermost 64 frames that the tracers record. */
static void *worker(void *arg)
{
	uint64_t *ns = arg, t0;
	int r;

	pthread_barrier_wait(&start);
	t0 = now_ns();
	r = warmup > 0 ? nest(depth, warmup) : 0;
	ns[1] = now_ns() - t0;
	t0 = now_ns();
	r |= nest(depth, pairs);
	ns[0] = now_ns() - t0;
	return r == 0 ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 1;
	pthread_t t[64];
	uint64_t ns[64][2], sum = 0, warm = 0;
	void *ret;
	int failed = 0;

	pairs = argc > 2 ? atol(argv[2]) : 100000;
	depth = argc > 3 ? atoi(argv[3]) : 70;
	size = argc > 4 ? atol(argv[4]) : 1024;
	warmup = argc > 5 ? atol(argv[5]) : 0;
	if (threads < 1 || threads > 64 || pairs < 1 || size < 1 || depth < 0 || warmup < 0) {
		fprintf(stderr, "usage: malloc_free THREADS(1-64) PAIRS [DEPTH [SIZE [WARMUP]]]\n");
		return 2;
	}
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&t[i], NULL, worker, ns[i]) != 0) {
			fprintf(stderr, "malloc_free: cannot create a thread\n");
			return 1;
		}
	}
	pthread_barrier_wait(&start);
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], &ret);
		failed |= ret != NULL;
		sum += ns[i][0];
		warm += ns[i][1];
	}
	if (failed) {
		fprintf(stderr, "malloc_free: malloc failed\n");
		return 1;
	}
	printf("ns_per_pair %.1f threads %d pairs %ld\n", (double)sum / threads / (double)pairs, threads, pairs);
	printf("warmup_s %.3f pairs %ld\n", (double)warm / threads / 1e9, warmup);
	return 0;
}
