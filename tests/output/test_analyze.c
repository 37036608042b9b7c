/* The analysis of a snapshot on made-up states, apart from any document:
 * page occupancy and size classes (src/analyze/view.c), the leak check's
 * rules, classes, groups and totals (src/analyze/leakcheck.c) and the sites
 * of resolved stacks (src/analyze/sites.c; tests/output/test_sites.c tests
 * the rule on made-up frames). Stacks are made of return addresses in this
 * program's own functions, which it exports (export_dynamic) so that the
 * loader and the debug information name them. */
#define _GNU_SOURCE
#include "check.h"

#include "analyze/frames.h"
#include "analyze/leakcheck.h"
#include "analyze/sites.h"
#include "analyze/view.h"
#include "record/event.h"
#include "record/stacks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1ull << 20)

/* Functions a stack names: a CUDA-looking entry point, the program's code
 * around it, and the two that the suppression file's rules name. */
void cudaMallocLookalike(void);
void analyze_test_user(void);
void analyze_test_cache_alloc(void);
void analyze_test_suppressed(void);

__attribute__((noinline)) void cudaMallocLookalike(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void analyze_test_user(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void analyze_test_cache_alloc(void)
{
	__asm__ volatile("");
}

__attribute__((noinline)) void analyze_test_suppressed(void)
{
	__asm__ volatile("");
}

static struct gmt__entry entry(uint64_t addr, uint64_t size, int device, uint32_t stack)
{
	return (struct gmt__entry){ .addr = addr, .size = size, .device = (int16_t)device, .stack = stack,
				    .kind = GMT_KIND_DEVICE, .space = GMT_SPACE_MEMORY };
}

/* Pages of 2 MiB (the default granularity) from 0x10000000 on device 0:
 *   page 0: A, 1 MiB at its start             half used, a 1 MiB hole after
 *   page 1: B's first half, from 3 MiB         half used
 *   page 2: B's second half, to 5 MiB          half used
 *   pages 4, 5: C, 4 MiB                      full
 * and D on device 1, which device 0's pages must not see. */
static void test_pages(void)
{
	const uint64_t base = 0x10000000;
	struct gmt__entry e[4] = {
		entry(base, 1 * MiB, 0, 0),
		entry(base + 3 * MiB, 2 * MiB, 0, 0),
		entry(base + 8 * MiB, 4 * MiB, 0, 0),
		entry(base + 64 * MiB, 512 << 10, 1, 0),
	};
	const struct gmt__entry *v[4] = { &e[0], &e[1], &e[2], &e[3] };
	struct gmt__snapshot_device devs[2] = { { .index = 0 }, { .index = 1 } };
	struct gmt__snapshot s = { .reason = GMT_REASON_API, .devices = devs, .ndevices = 2 };
	struct gmt__view *view = malloc(sizeof(*view));
	struct gmt__tensors none = { 0 };

	CHECK(view != NULL);
	if (view == NULL)
		return;
	gmt__view_build(&s, v, 4, NULL, &none, NULL, view);
	CHECK_U64(view->pages[0].granularity, 2 * MiB);
	CHECK(!view->pages[0].granularity_known);
	CHECK_U64(view->pages[0].pages, 5);
	CHECK_U64(view->pages[0].partial, 3);
	CHECK_U64(view->pages[0].stranded_bytes, 3 * MiB);
	CHECK_U64(view->pages[0].largest_hole, 1 * MiB);
	CHECK_U64(view->pages[0].histogram[2], 3); /* 50% used: [50%, 75%) */
	CHECK_U64(view->pages[0].histogram[4], 2);
	CHECK_U64(view->kinds[0][GMT_KIND_DEVICE], 7 * MiB);
	CHECK_U64(view->class_count[0][20], 1);
	CHECK_U64(view->class_count[0][21], 1);
	CHECK_U64(view->class_bytes[0][22], 4 * MiB);
	CHECK_U64(view->pages[1].pages, 1);
	CHECK_U64(view->pages[1].partial, 1);
	CHECK_U64(view->kinds[1][GMT_KIND_DEVICE], 512 << 10);
	CHECK(!view->have_diagnosis); /* not an out-of-memory snapshot */
	free(view);
}

/* A stack of the given functions, innermost first, as return addresses. */
static uint32_t stack_of(void (*const *fns)(void), int n)
{
	uintptr_t ips[8];

	for (int i = 0; i < n; i++)
		ips[i] = (uintptr_t)fns[i] + 1;
	return gmt__stack_intern(ips, n);
}

/* With the scan off, every allocation is "leaked" unless a rule says
 * otherwise: cached: makes it cached (never counted), leak: suppresses it
 * (counted nowhere); the rest group by stack, largest counted first. */
static void test_leak_classes(void)
{
	void (*const user[])(void) = { cudaMallocLookalike, analyze_test_user };
	void (*const cache[])(void) = { analyze_test_cache_alloc, analyze_test_user };
	void (*const supp[])(void) = { analyze_test_suppressed, analyze_test_user };
	uint32_t s_user = stack_of(user, 2), s_cache = stack_of(cache, 2), s_supp = stack_of(supp, 2);
	struct gmt__entry e[6] = {
		entry(0x20000000, 1 * MiB, 0, s_user),   entry(0x20100000, 2 * MiB, 0, s_user),
		entry(0x20300000, 8 * MiB, 0, s_cache),  entry(0x20b00000, 4 * MiB, 0, s_supp),
		entry(0x20f00000, 16 << 10, 0, s_user),  entry(0x21000000, 1 * MiB, 0, 0),
	};
	const struct gmt__entry *v[6] = { &e[0], &e[1], &e[2], &e[3], &e[4], &e[5] };
	char path[] = "/tmp/gmt-analyze-XXXXXX", err[256];
	struct gmt__supp rules = { 0 };
	struct gmt__snapshot_leaks in = { .supp = &rules, .classes = GMT_CLASS_LEAKED | GMT_CLASS_REFERENCED };
	struct gmt__snapshot s = { .reason = GMT_REASON_EXIT, .leaks = &in };
	struct gmt__leak_work lw = { .in = &in };
	struct gmt__frame_cache fc;
	struct gmt__idset ids = { 0 };
	size_t nids;
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	CHECK(f != NULL);
	if (f == NULL)
		return;
	fputs("# the test's rules\nleak:analyze_test_suppressed\ncached:analyze_test_cache_alloc\n", f);
	fclose(f);
	CHECK_INT(gmt__supp_load(&rules, path, err, sizeof(err)), 0);
	unlink(path);

	CHECK_INT(gmt__leakcheck_collect(&lw, v, 6, NULL, 0, NULL, NULL, &ids), 0);
	gmt__leakcheck_scan(&lw, &s); /* off: says why */
	CHECK(!lw.scan.done && lw.scan.why != NULL);
	gmt__frames_open(&fc);
	nids = gmt__idset_sorted(&ids);
	CHECK_INT(nids, 3); /* the three stacks; stack 0 is none */
	for (size_t i = 0; i < nids; i++) {
		int depth = 0;
		const uintptr_t *ips = gmt__stack_get(ids.v[i], &depth);

		fc.epoch = gmt__stack_epoch(ids.v[i]);
		gmt__leakcheck_stack_seen(&lw, &fc, ids.v[i], ips, depth, "a site");
	}
	CHECK_INT(gmt__leakcheck_classify(&lw), 0);

	/* Groups: user stack (leaked, counted, 3 items), no stack (leaked,
	 * counted), suppressed (counted nowhere), cache (cached). */
	CHECK_INT(lw.ngroups, 4);
	CHECK(lw.ngroups > 0 && lw.groups[0].stack == s_user && lw.groups[0].cls == GMT_LEAK_LEAKED &&
	      lw.groups[0].counted);
	CHECK_U64(lw.ngroups > 0 ? lw.groups[0].count : 0, 3);
	CHECK_U64(lw.ngroups > 0 ? lw.groups[0].bytes : 0, 3 * MiB + (16 << 10));
	CHECK_U64(lw.total_count[GMT_LEAK_CACHED], 1);
	CHECK_U64(lw.total_bytes[GMT_LEAK_CACHED], 8 * MiB);
	CHECK_U64(lw.total_count[TOTAL_SUPPRESSED], 1);
	CHECK_U64(lw.total_bytes[TOTAL_SUPPRESSED], 4 * MiB);
	CHECK_U64(lw.total_count[TOTAL_COUNTED], 4);
	CHECK_U64(lw.total_bytes[TOTAL_COUNTED], 4 * MiB + (16 << 10));
	CHECK_U64(in.counted_count, 4);
	for (size_t g = 0; g < lw.ngroups; g++) {
		if (lw.groups[g].stack == s_supp)
			CHECK(!lw.groups[g].counted && gmt__leakcheck_suppresses(&lw, lw.groups[g].rule));
		if (lw.groups[g].stack == s_cache)
			CHECK(!lw.groups[g].counted && lw.groups[g].cls == GMT_LEAK_CACHED);
	}
	gmt__frames_close(&fc);
	gmt__leakcheck_free(&lw);
	gmt__supp_free(&rules);
	free(ids.v);
}

/* Sites of real stacks: the frames resolved through the loader and the
 * debug information, a CUDA-named entry point skipped, the program's own
 * function named with its file and line, and the roles written per frame. */
static void test_sites_resolved(void)
{
	void (*const a[])(void) = { cudaMallocLookalike, analyze_test_user, analyze_test_cache_alloc };
	void (*const b[])(void) = { cudaMallocLookalike, analyze_test_suppressed, analyze_test_cache_alloc };
	uint32_t ids[2] = { stack_of(a, 3), stack_of(b, 3) };
	struct gmt__site_rules rules;
	struct gmt__frame_cache fc;
	struct gmt__sites sites;

	if (ids[0] > ids[1]) {
		uint32_t t = ids[0];

		ids[0] = ids[1];
		ids[1] = t;
	}
	CHECK_INT(gmt__site_rules_init(&rules, NULL), 0);
	gmt__frames_open(&fc);
	CHECK_INT(gmt__sites_build(&sites, &fc, ids, 2, &rules, NULL), 0);
	CHECK_INT(sites.nsites, 2);
	for (size_t i = 0; i < sites.n; i++) {
		const struct gmt__stack_site *s = gmt__sites_of(&sites, ids, ids[i]);
		const char *want = ids[i] == stack_of(a, 3) ? "analyze_test_user (" : "analyze_test_suppressed (";

		CHECK(s == &sites.v[i]);
		CHECK(s->user && s->frame == 1 && s->nframes == 3);
		CHECK(s->roles[0] == GMT_ROLE_CUDA && s->roles[1] == GMT_ROLE_USER && s->roles[2] == GMT_ROLE_USER);
		/* With the debug information "analyze_test_user (test_analyze.c:N)";
		 * without, the loader's name and the module. */
		CHECK(strncmp(s->label, want, strlen(want)) == 0);
		if (strncmp(s->label, want, strlen(want)) != 0)
			fprintf(stderr, "site label: %s\n", s->label);
	}
	CHECK(gmt__sites_of(&sites, ids, 0) == NULL);
	gmt__sites_free(&sites);
	gmt__frames_close(&fc);
	gmt__site_rules_free(&rules);
}

int main(void)
{
	CHECK_INT(gmt__stack_init(), 0);
	test_pages();
	test_leak_classes();
	test_sites_resolved();
	if (check_failed == 0)
		printf("analyze: ok\n");
	return check_failed != 0;
}
