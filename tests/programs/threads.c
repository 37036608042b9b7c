/* Test program for the multi-thread row of the matrix: 8 threads, each doing a
 * known number of cudaMalloc/cudaFree pairs and keeping 3 allocations. Threads
 * 0-3 start before any CUDA call and race through the runtime's lazy
 * initialisation; threads 4-7 start after the main thread's first call. */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define THREADS 8
#define EARLY_THREADS 4
#define PAIRS 500
#define KEPT 3
#define MIB ((size_t)1024 * 1024)

struct worker {
	int index;
	pthread_barrier_t *start;
	void *kept[KEPT];
	size_t kept_size[KEPT];
	int error;	/* first failing CUDA result, 0 if none */
	int error_at;	/* the iteration it happened in */
};

/* Sizes the expectation file lists: thread t keeps 1000 * (t + 1) bytes,
 * 3 MiB + 256 * t bytes and 128 KiB. */
static size_t kept_size(int thread, int slot)
{
	switch (slot) {
	case 0:
		return 1000 * (size_t)(thread + 1);
	case 1:
		return 3 * MIB + 256 * (size_t)thread;
	default:
		return 128 * 1024;
	}
}

/* Pair sizes: mostly sub-allocated, every 50th a multi-page request. */
static size_t pair_size(int thread, int i)
{
	if (i % 50 == 0)
		return 2 * MIB + 4096 * (size_t)thread;
	return 256 * (size_t)(1 + (thread * 7 + i) % 4096);
}

static void *work(void *arg)
{
	struct worker *w = arg;
	int i, slot;

	if (w->start != NULL)
		pthread_barrier_wait(w->start);
	for (i = 0; i < PAIRS; i++) {
		void *p;

		w->error_at = i;
		w->error = cudaMalloc(&p, pair_size(w->index, i));
		if (w->error != cudaSuccess)
			return NULL;
		w->error = cudaFree(p);
		if (w->error != cudaSuccess)
			return NULL;
		if (i != PAIRS / 2)
			continue;
		for (slot = 0; slot < KEPT; slot++) {
			w->kept_size[slot] = kept_size(w->index, slot);
			w->error = cudaMalloc(&w->kept[slot], w->kept_size[slot]);
			if (w->error != cudaSuccess)
				return NULL;
		}
	}
	return NULL;
}

static void start(pthread_t *thread, struct worker *w)
{
	int err = pthread_create(thread, NULL, work, w);

	if (err != 0)
		PROG_FAIL("pthread_create: %s", strerror(err));
}

int main(void)
{
	struct worker workers[THREADS];
	pthread_t threads[THREADS];
	pthread_barrier_t early;
	void *first;
	int t, slot;

	memset(workers, 0, sizeof(workers));
	PROG_CHECK_EQ(pthread_barrier_init(&early, NULL, EARLY_THREADS), 0);
	for (t = 0; t < THREADS; t++)
		workers[t].index = t;
	for (t = 0; t < EARLY_THREADS; t++) {
		workers[t].start = &early;
		start(&threads[t], &workers[t]);
	}

	/* The main thread's first CUDA call: one pair of its own. */
	PROG_OK(cudaMalloc(&first, 512));
	PROG_OK(cudaFree(first));
	for (t = EARLY_THREADS; t < THREADS; t++)
		start(&threads[t], &workers[t]);

	for (t = 0; t < THREADS; t++) {
		PROG_CHECK_EQ(pthread_join(threads[t], NULL), 0);
		if (workers[t].error != cudaSuccess)
			PROG_FAIL("thread %d: a CUDA call failed with %d in iteration %d",
				  t, workers[t].error, workers[t].error_at);
	}
	pthread_barrier_destroy(&early);

	prog_report_begin("main");
	for (t = 0; t < THREADS; t++)
		for (slot = 0; slot < KEPT; slot++)
			prog_report_live(PROG_ADDR(workers[t].kept[slot]),
					 workers[t].kept_size[slot], "device", 0);
	prog_report_end();
	return 0;
}
