/* Test program for the leak check: one allocation of each class, whose
 * addresses and classes it prints ("EXPECT <address> <class> <bytes> <what>")
 * for tests/preload/check_leaks.py to compare with the exit snapshot and the
 * report:
 *   - a pointer kept in a global: referenced (global 'kept');
 *   - a pointer kept in a heap block a global points to: referenced (heap);
 *   - only a pointer into the middle of an allocation kept in a global (a
 *     view past a header): referenced (global 'inner');
 *   - a pointer overwritten: leaked (device and managed memory);
 *   - a PyTorch-like caching allocator (a function whose name holds
 *     CUDACachingAllocator keeps a segment and hands out pieces): cached;
 *   - a workspace whose stack the test's suppressions file names: suppressed;
 *   - a loop that grows by 2 MiB every 25 ms and frees it all at the end: a
 *     leak suspect, no leak;
 *   - an allocation freed properly: nothing.
 * NOTE: the scan is conservative: a stale copy of an address in memory the
 * program reuses (a stdio buffer over a freed block) would make it
 * "referenced". So stdout is unbuffered, and what is freed before the leaks
 * are made is whole 2 MiB pages (the simulator sub-allocates smaller
 * requests and keeps a record of each page's base it frees later).
 * Arguments: --clean (free everything that would count; only the suspect
 * stays), --referenced (free what would be leaked or suppressed: what stays
 * is referenced, from a global and the heap, and cached), --status N (exit with N), --growth-steps N (2 MiB steps of the
 * growth loop, 1 to 64; default 8: its peak is N × 2 MiB). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "../programs/prog.h"

#define MIB ((size_t)1024 * 1024)
#define GROWTH_STEPS_MAX 64
#define INNER_SIZE (6 * MIB)
#define INNER_OFFSET (3 * MIB + 16) /* where `inner` points into its allocation */

void *kept;                   /* referenced from a global */
struct holder {
	long tag;
	void *device;
};
struct holder *held;          /* referenced from the heap */
char *inner;                  /* into the middle: referenced */
void *volatile scratch;       /* overwritten: leaked */
void *workspace;              /* suppressed by the test's file */

/* The caching allocator: one segment, never given back. */
static char *cache_segment;
static size_t cache_used;

__attribute__((noinline)) static void *CUDACachingAllocator_malloc(size_t size)
{
	void *p;

	if (cache_segment == NULL) {
		PROG_OK(cudaMalloc(&p, 4 * MIB));
		cache_segment = p;
	}
	p = cache_segment + cache_used;
	cache_used += size;
	return p;
}

__attribute__((noinline)) static void workspace_create(void)
{
	PROG_OK(cudaMalloc(&workspace, MIB / 2));
}

/* The pointer is printed, then overwritten: no copy of it stays anywhere
 * the program can reach (with clean, freed instead). */
__attribute__((noinline)) static void lose(size_t size, int managed, int clean)
{
	void *p;

	if (managed)
		PROG_OK(cudaMallocManaged(&p, size, cudaMemAttachGlobal));
	else
		PROG_OK(cudaMalloc(&p, size));
	scratch = p;
	if (clean)
		PROG_OK(cudaFree(p));
	else
		printf("EXPECT 0x%llx leaked %zu %s\n", PROG_ADDR(p), size, managed ? "managed" : "device");
	scratch = NULL;
}

/* Keeps a pointer into the middle of a new allocation only; its base
 * leaves no copy the scan reads (this frame is gone by exit). */
__attribute__((noinline)) static void keep_inner(void)
{
	void *p;

	PROG_OK(cudaMalloc(&p, INNER_SIZE));
	inner = (char *)p + INNER_OFFSET;
}

/* One step of the growth loop: it keeps 2 MiB and, as a step of real work
 * does, allocates and frees a temporary (a loop of allocations alone is one
 * burst to the growth rounds, docs/guide.md). */
__attribute__((noinline)) static void grow_step(void **slot)
{
	void *tmp;

	PROG_OK(cudaMalloc(slot, 2 * MIB));
	PROG_OK(cudaMalloc(&tmp, MIB / 4));
	PROG_OK(cudaFree(tmp));
}

static void expect(const void *p, const char *cls, size_t bytes, const char *what)
{
	printf("EXPECT 0x%llx %s %zu %s\n", PROG_ADDR(p), cls, bytes, what);
}

int main(int argc, char **argv)
{
	void *grown[GROWTH_STEPS_MAX], *freed;
	int steps = 8;
	struct timespec step = { 0, 25 * 1000 * 1000 };
	int clean = 0, referenced = 0, status = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--clean") == 0)
			clean = 1;
		else if (strcmp(argv[i], "--referenced") == 0)
			referenced = 1;
		else if (strcmp(argv[i], "--status") == 0 && i + 1 < argc)
			status = atoi(argv[++i]);
		else if (strcmp(argv[i], "--growth-steps") == 0 && i + 1 < argc)
			steps = atoi(argv[++i]);
	}
	if (steps < 1 || steps > GROWTH_STEPS_MAX) {
		fprintf(stderr, "leak_classes: --growth-steps: 1 to %d\n", GROWTH_STEPS_MAX);
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	PROG_OK(cudaMalloc(&freed, 2 * MIB));
	PROG_OK(cudaFree(freed));
	for (int i = 0; i < steps; i++) {
		grow_step(&grown[i]);
		nanosleep(&step, NULL);
	}
	for (int i = 0; i < steps; i++)
		PROG_OK(cudaFree(grown[i]));

	PROG_OK(cudaMalloc(&kept, 3 * MIB));
	held = malloc(sizeof(*held));
	PROG_CHECK(held != NULL);
	held->tag = 42;
	PROG_OK(cudaMalloc(&held->device, 2 * MIB));
	lose(5 * MIB, 0, clean || referenced);
	lose(MIB, 1, clean || referenced);
	(void)CUDACachingAllocator_malloc(MIB);
	workspace_create();
	/* NOTE: the last allocation: made before lose(), its end (lose()'s
	 * base, the next range of addresses) was found in mapped memory, the
	 * driver double's, and made the lost block referenced. */
	keep_inner();

	if (clean) {
		PROG_OK(cudaFree(kept));
		PROG_OK(cudaFree(inner - INNER_OFFSET));
		PROG_OK(cudaFree(held->device));
		PROG_OK(cudaFree(workspace));
		printf("EXPECT 0x%llx cached %zu cache\n", PROG_ADDR(cache_segment), 4 * MIB);
	} else {
		expect(kept, "referenced", 3 * MIB, "global");
		expect(inner - INNER_OFFSET, "referenced", INNER_SIZE, "interior");
		expect(held->device, "referenced", 2 * MIB, "heap");
		expect(cache_segment, "cached", 4 * MIB, "cache");
		if (referenced)
			PROG_OK(cudaFree(workspace));
		else
			expect(workspace, "referenced", MIB / 2, "suppressed");
	}
	fflush(stdout);
	return status;
}
