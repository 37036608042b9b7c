/* Benchmark: the tracer's memory per live allocation and per unique stack,
 * measured (docs/internals.md, "Targets": at most 96 bytes per live allocation). With the
 * tracer's own core (no preload) it fills a live table with N allocations, and
 * interns N distinct stacks at depths 16 and 64 and gives each its allocation
 * site, and reads the process's resident memory before and after each: the
 * pages those structures really touched, the index's and the arenas' slack
 * included. Beside each, what the structure itself counts as mapped
 * (gmt__table_bytes, gmt__stack_bytes, the sites' array). Prints "name value"
 * lines for bench/run.py.
 *
 * Usage: memory [STACKS [LIVE...]]   (defaults: 100000; 10000 100000 1000000) */
#define _GNU_SOURCE
#include "state/history.h"
#include "record/stacks.h"
#include "state/table.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Resident bytes of this process now (/proc/self/statm, second field). */
static long long resident(void)
{
	long long size, pages;
	FILE *f = fopen("/proc/self/statm", "re");
	int n;

	if (f == NULL)
		return -1;
	n = fscanf(f, "%lld %lld", &size, &pages);
	fclose(f);
	return n == 2 ? pages * sysconf(_SC_PAGESIZE) : -1;
}

/* N live device allocations at scattered, distinct 512-byte-aligned
 * addresses: i times an odd number, modulo 2^40, visits every value once. */
static int table_memory(long n)
{
	struct gmt__table *t = gmt__table_new();
	long long before, after;

	if (t == NULL)
		return -1;
	before = resident();
	for (long i = 0; i < n; i++) {
		struct gmt__entry e;

		memset(&e, 0, sizeof(e));
		e.addr = 0x7f0000000000ull + ((((uint64_t)i * 0x9e3779b97f4a7c15ull) & 0xffffffffffull) << 9);
		e.size = 512;
		e.link = (uint64_t)i + 1;
		e.stack = 1 + (uint32_t)(i % 1024);
		e.space = GMT_SPACE_MEMORY;
		e.kind = GMT_KIND_DEVICE;
		if (gmt__table_insert(t, &e, NULL) == NULL)
			return -1;
	}
	after = resident();
	if (before < 0 || after < 0 || gmt__table_count(t) != (size_t)n)
		return -1;
	printf("table_%ld_rss_per_live %.1f\n", n, (double)(after - before) / (double)n);
	printf("table_%ld_own_per_live %.1f\n", n, (double)gmt__table_bytes(t) / (double)n);
	gmt__table_free(t);
	return 0;
}

/* N distinct stacks of `depth` frames sharing a long suffix, as real stacks
 * do (a loop's call sites under one main). */
static int stack_memory(long n, int depth, uint32_t *first, uint32_t *last)
{
	uintptr_t ips[64];
	size_t own = gmt__stack_bytes();
	long long before = resident(), after;

	for (long i = 0; i < n; i++) {
		uint32_t id;

		for (int k = 0; k < depth; k++)
			ips[k] = 0x555500001000 + (uintptr_t)k * 0x40 + (uintptr_t)depth;
		ips[0] += (uintptr_t)i * 16;
		ips[depth / 2] += (uintptr_t)(i / 7) * 16;
		id = gmt__stack_intern(ips, depth);
		if (id == 0)
			return -1;
		if (i == 0)
			*first = id;
		*last = id;
	}
	after = resident();
	if (before < 0 || after < 0 || gmt__stack_count() < (uint32_t)n)
		return -1;
	printf("stack_%d_rss_per_stack %.1f\n", depth, (double)(after - before) / (double)n);
	printf("stack_%d_own_per_stack %.1f\n", depth, (double)(gmt__stack_bytes() - own) / (double)n);
	return 0;
}

/* Each of the stacks first..last allocates once: one site each, in the
 * history's array indexed by stack id (no event ring: its pages are not the
 * sites'). */
static int site_memory(uint32_t first, uint32_t last)
{
	struct gmt__history h;
	long long before, after;
	uint32_t n = last - first + 1;

	if (gmt__history_init(&h, 0) < 0)
		return -1;
	before = resident();
	for (uint32_t id = first; id <= last; id++) {
		struct gmt__entry e;
		struct gmt__hist_cause cause = { .seq = id, .time_ns = 1000 + id, .tid = 1 };

		memset(&e, 0, sizeof(e));
		e.addr = 0x7f0000000000ull + (uint64_t)id * 512;
		e.size = 512;
		e.stack = id;
		e.space = GMT_SPACE_MEMORY;
		e.kind = GMT_KIND_DEVICE;
		gmt__history_change(&h, &e, true, &cause);
	}
	after = resident();
	if (before < 0 || after < 0 || h.sites_failed || gmt__history_site(&h, last) == NULL)
		return -1;
	printf("site_rss_per_site %.1f\n", (double)(after - before) / (double)n);
	printf("site_size %zu\n", sizeof(struct gmt__site));
	return 0;
}

int main(int argc, char **argv)
{
	static const long default_live[] = { 10000, 100000, 1000000 };
	long stacks = argc > 1 ? atol(argv[1]) : 100000;
	uint32_t first = 0, last = 0, first64, last64;

	if (stacks < 1 || stacks > 4000000) {
		fprintf(stderr, "usage: memory [STACKS [LIVE...]]\n");
		return 2;
	}
	if (argc > 2) {
		for (int i = 2; i < argc; i++)
			if (atol(argv[i]) < 1 || table_memory(atol(argv[i])) < 0)
				goto fail;
	} else {
		for (size_t i = 0; i < sizeof(default_live) / sizeof(default_live[0]); i++)
			if (table_memory(default_live[i]) < 0)
				goto fail;
	}
	if (stack_memory(stacks, 16, &first, &last) < 0 || stack_memory(stacks, 64, &first64, &last64) < 0 ||
	    site_memory(first, last) < 0)
		goto fail;
	printf("stacks %ld\n", stacks);
	return 0;
fail:
	fprintf(stderr, "memory: out of memory or a count came out wrong\n");
	return 1;
}
