/* Stack capture and interning (src/record/stacks.c): a capture from three known
 * nested functions, interning's equal-in equal-out rule, eight threads
 * interning shared and private stacks while the set grows, and the memory
 * per unique stack at 100k stacks. */
#define _GNU_SOURCE
#include "record/stacks.h"

#include "check.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* --- capture ---------------------------------------------------------------------- */

/* Exported (the executable links with -rdynamic) so that dladdr names them;
 * noinline and a barrier after each call so that no frame is inlined or
 * turned into a tail call. */
void gmt_test_level1(void);
void gmt_test_level2(void);
void gmt_test_level3(void);

static uintptr_t got[3][16];
static int got_n[3];
static uintptr_t ret_into_level2, ret_into_level1, ret_into_caller;

__attribute__((noinline)) void gmt_test_level3(void)
{
	ret_into_level2 = (uintptr_t)__builtin_return_address(0);
	got_n[0] = gmt__stack_capture(got[0], 16, 0);
	got_n[1] = gmt__stack_capture(got[1], 16, 1);
	got_n[2] = gmt__stack_capture(got[2], 2, 0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void gmt_test_level2(void)
{
	ret_into_level1 = (uintptr_t)__builtin_return_address(0);
	gmt_test_level3();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void gmt_test_level1(void)
{
	ret_into_caller = (uintptr_t)__builtin_return_address(0);
	gmt_test_level2();
	__asm__ volatile("" ::: "memory");
}

/* The name of the function holding return address ip (ip - 1 is the call). */
static const char *function_at(uintptr_t ip)
{
	Dl_info info;

	if (dladdr((void *)(ip - 1), &info) == 0 || info.dli_sname == NULL)
		return "?";
	return info.dli_sname;
}

static void expect_in(uintptr_t ip, const char *fn)
{
	const char *at = function_at(ip);

	if (strcmp(at, fn) != 0)
		fprintf(stderr, "frame %#lx is in %s, expected %s\n", (unsigned long)ip, at, fn);
	CHECK(strcmp(at, fn) == 0);
}

static void test_capture(void)
{
	gmt_test_level1();
	CHECK(got_n[0] >= 4);
	if (got_n[0] < 4)
		return;
	/* skip 0: the first frame is the capture's caller */
	expect_in(got[0][0], "gmt_test_level3");
	expect_in(got[0][1], "gmt_test_level2");
	expect_in(got[0][2], "gmt_test_level1");
	expect_in(got[0][3], "main");
	/* the return addresses the functions saw themselves */
	CHECK_EQ(got[0][1], ret_into_level2);
	CHECK_EQ(got[0][2], ret_into_level1);
	CHECK_EQ(got[0][3], ret_into_caller);
	/* skip 1 drops level3's frame; the rest is the same stack */
	CHECK_EQ(got_n[1], got_n[0] - 1);
	CHECK_EQ(got[1][0], got[0][1]);
	CHECK_EQ(got[1][1], got[0][2]);
	CHECK_EQ(got[1][2], got[0][3]);
	/* max is obeyed */
	CHECK_EQ(got_n[2], 2);
	CHECK_EQ(got[2][1], got[0][1]);
	CHECK_EQ(gmt__stack_capture(got[2], 0, 0), 0);
	printf("capture: %d frames, level3 %s, level2 %s, level1 %s\n", got_n[0],
	       function_at(got[0][0]), function_at(got[0][1]), function_at(got[0][2]));
}

/* --- interning -------------------------------------------------------------------- */

static bool frames_are(uint32_t id, const uintptr_t *ips, int n)
{
	int m = -1;
	const uintptr_t *f = gmt__stack_get(id, &m);

	return f != NULL && m == n && memcmp(f, ips, (size_t)n * sizeof(*ips)) == 0;
}

static void test_intern(void)
{
	uintptr_t a[] = { 0x401000, 0x402000, 0x403000, 0x404000 };
	uintptr_t b[] = { 0x401000, 0x402000, 0x403000, 0x404001 }; /* one bit apart */
	uintptr_t copy[4];
	uint32_t ia, ib, ic, id;
	int n = -1;

	memcpy(copy, a, sizeof(a));
	ia = gmt__stack_intern(a, 4);
	CHECK(ia != 0);
	CHECK_EQ(gmt__stack_intern(copy, 4), ia); /* equal content, other memory */
	ib = gmt__stack_intern(b, 4);
	CHECK(ib != 0 && ib != ia);
	ic = gmt__stack_intern(a, 3); /* a prefix is another stack */
	CHECK(ic != 0 && ic != ia && ic != ib);
	id = gmt__stack_intern(a + 1, 3);
	CHECK(id != 0 && id != ic);
	CHECK_EQ(gmt__stack_intern(a, 0), 0);
	CHECK_EQ(gmt__stack_intern(a, -1), 0);
	CHECK(frames_are(ia, a, 4));
	CHECK(frames_are(ib, b, 4));
	CHECK(frames_are(ic, a, 3));
	CHECK(frames_are(id, a + 1, 3));
	CHECK(gmt__stack_get(0, &n) == NULL);
	CHECK(gmt__stack_get(ia + 1000, &n) == NULL);
	CHECK(gmt__stack_get(UINT32_MAX, &n) == NULL);
	CHECK_EQ(gmt__stack_count(), 4);

	/* A real captured stack interns and comes back. */
	{
		uintptr_t ips[64];
		int k = gmt__stack_capture(ips, 64, 0);
		uint32_t i1 = gmt__stack_intern(ips, k);

		CHECK(k > 0 && i1 != 0);
		CHECK_EQ(gmt__stack_intern(ips, k), i1);
		CHECK(frames_are(i1, ips, k));
	}
}

/* --- eight threads ---------------------------------------------------------------- */

#define THREADS 8
#define SHARED 3001 /* prime: every stride walks all of them */
#define PRIVATE 1500
#define DEPTH 12

/* Stack number s (shared) or THREADS.. (private, by thread): frames that
 * differ from their neighbours' in a few words only, like real stacks. */
static void make_stack(uintptr_t *ips, unsigned s)
{
	int i;

	for (i = 0; i < DEPTH; i++)
		ips[i] = 0x400000 + (uintptr_t)i * 0x40;
	ips[0] += s;
	ips[DEPTH - 1] += (uintptr_t)(s % 7) * 0x1000;
}

struct worker {
	unsigned index;
	uint32_t shared_ids[SHARED];
	uint32_t private_ids[PRIVATE];
	int bad;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	uintptr_t ips[DEPTH];
	int pass;
	unsigned i;

	/* Two passes: the second must find everything (lock-free path) and agree
	 * with the first. Threads walk the shared stacks in different orders. */
	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < SHARED; i++) {
			unsigned s = (i * (2 * w->index + 1) + w->index * 97) % SHARED;
			uint32_t id;

			make_stack(ips, s);
			id = gmt__stack_intern(ips, DEPTH);
			if (id == 0 || (pass == 1 && id != w->shared_ids[s]) || !frames_are(id, ips, DEPTH))
				w->bad++;
			w->shared_ids[s] = id;
			if (i % 2 == 0 && i / 2 < PRIVATE) {
				unsigned p = i / 2;

				make_stack(ips, SHARED + w->index * PRIVATE + p);
				id = gmt__stack_intern(ips, DEPTH);
				if (id == 0 || (pass == 1 && id != w->private_ids[p]) ||
				    !frames_are(id, ips, DEPTH))
					w->bad++;
				w->private_ids[p] = id;
			}
		}
	}
	return NULL;
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

static void test_threads(void)
{
	static struct worker w[THREADS];
	static uint32_t all[SHARED + THREADS * PRIVATE];
	uint32_t before = gmt__stack_count();
	pthread_t th[THREADS];
	size_t n = 0, i, j, disagree = 0, dup = 0;

	for (i = 0; i < THREADS; i++) {
		w[i].index = (unsigned)i;
		pthread_create(&th[i], NULL, worker, &w[i]);
	}
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < THREADS; i++)
		CHECK_EQ(w[i].bad, 0);
	/* Everyone agrees on the shared stacks' ids... */
	for (j = 0; j < SHARED; j++) {
		for (i = 1; i < THREADS; i++)
			if (w[i].shared_ids[j] != w[0].shared_ids[j])
				disagree++;
		all[n++] = w[0].shared_ids[j];
	}
	for (i = 0; i < THREADS; i++)
		for (j = 0; j < PRIVATE; j++)
			all[n++] = w[i].private_ids[j];
	/* ...and distinct stacks have distinct ids. */
	qsort(all, n, sizeof(all[0]), cmp_u32);
	for (i = 1; i < n; i++)
		if (all[i] == all[i - 1])
			dup++;
	printf("threads: %u stacks interned by %d threads\n", gmt__stack_count() - before, THREADS);
	CHECK_EQ(disagree, 0);
	CHECK_EQ(dup, 0);
	CHECK_EQ(gmt__stack_count() - before, SHARED + THREADS * PRIVATE);
}

/* --- memory ----------------------------------------------------------------------- */

static void test_memory(void)
{
	static const int depths[] = { 16, 64 };
	uintptr_t ips[64];
	size_t d;

	for (d = 0; d < sizeof(depths) / sizeof(depths[0]); d++) {
		uint32_t count0 = gmt__stack_count(), i;
		size_t bytes0 = gmt__stack_bytes(), lost = 0;
		int depth = depths[d], k;
		double per;

		for (i = 0; i < 100000; i++) {
			for (k = 0; k < depth; k++)
				ips[k] = 0x7f0000000000 + (uintptr_t)k * 0x1000 + (uintptr_t)d;
			ips[0] += i; /* distinct, sharing a long suffix, as real stacks do */
			ips[depth / 2] += i / 3;
			if (gmt__stack_intern(ips, depth) == 0)
				lost++;
		}
		CHECK_EQ(lost, 0);
		CHECK_EQ(gmt__stack_count() - count0, 100000);
		/* every one is found again and reads back */
		for (i = 0; i < 100000; i += 7) {
			uint32_t id;

			for (k = 0; k < depth; k++)
				ips[k] = 0x7f0000000000 + (uintptr_t)k * 0x1000 + (uintptr_t)d;
			ips[0] += i;
			ips[depth / 2] += i / 3;
			id = gmt__stack_intern(ips, depth);
			if (!frames_are(id, ips, depth))
				lost++;
		}
		CHECK_EQ(lost, 0);
		CHECK_EQ(gmt__stack_count() - count0, 100000);
		per = (double)(gmt__stack_bytes() - bytes0) / 100000.0;
		printf("memory: 100000 stacks of depth %d: %.1f bytes each (frames alone %d); "
		       "in all %u stacks, %zu bytes\n", depth, per, 8 * depth, gmt__stack_count(),
		       gmt__stack_bytes());
		/* the record (16 + 8d), directory and set (at most 88, stacks.c) */
		CHECK_LE(per, 16 + 8 * depth + 88);
	}
}

int main(void)
{
	CHECK_EQ(gmt__stack_init(), 0);
	test_capture();
	test_intern();
	test_threads();
	test_memory();
	return check_done("stacks");
}
