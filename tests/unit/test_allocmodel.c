/* The model of PyTorch's caching allocator (src/analyze/allocmodel.c): one
 * made-up trace per rule, each number derived by hand from PyTorch's rules
 * (c10/cuda/CUDACachingAllocator.cpp) in the comment beside it. */
#include "analyze/allocmodel.h"

#include "../output/check.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

struct want_event {
	enum gmt__am_op op;
	uint64_t size;
};

static const char *op_name(enum gmt__am_op op)
{
	static const char *const names[] = { "alloc", "free", "map", "unmap", "va-reserve", "va-free" };

	return (unsigned)op < sizeof(names) / sizeof(names[0]) ? names[op] : "?";
}

/* The driver's events, in order, as (operation, size). */
static void check_events(const char *what, const struct gmt__allocmodel *m, const struct want_event *w,
			 size_t nw)
{
	size_t n;
	const struct gmt__am_event *e = gmt__am_events(m, &n);
	bool same = n == nw;

	for (size_t i = 0; same && i < n; i++)
		same = e[i].op == w[i].op && e[i].size == w[i].size;
	if (same)
		return;
	fprintf(stderr, "%s: the driver's events differ\n  got:     ", what);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %s %llu MiB%s", op_name(e[i].op),
			(unsigned long long)(e[i].size / MiB), e[i].size % MiB ? "+" : "");
	fprintf(stderr, "\n  expected:");
	for (size_t i = 0; i < nw; i++)
		fprintf(stderr, " %s %llu MiB%s", op_name(w[i].op),
			(unsigned long long)(w[i].size / MiB), w[i].size % MiB ? "+" : "");
	fprintf(stderr, "\n");
	check_failed++;
}

#define EVENTS(what, m, ...)                                                                  \
	do {                                                                                  \
		static const struct want_event w_[] = { __VA_ARGS__ };                        \
		check_events(what, m, w_, sizeof(w_) / sizeof(w_[0]));                        \
	} while (0)

static struct gmt__allocmodel *model(const char *conf, uint64_t device_total)
{
	struct gmt__am_config c;
	struct gmt__allocmodel *m = NULL;
	char err[160];

	if (gmt__am_config_parse(conf, &c, err, sizeof(err)) != 0) {
		fprintf(stderr, "config \"%s\": %s\n", conf, err);
		check_failed++;
		gmt__am_config_default(&c);
	}
	if (gmt__am_create(&c, device_total, &m) != 0) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return m;
}

static uint32_t alloc(struct gmt__allocmodel *m, uint64_t size, uint64_t stream)
{
	uint32_t id = UINT32_MAX;
	int rc = gmt__am_malloc(m, size, stream, &id);

	if (rc != 0) {
		fprintf(stderr, "malloc(%llu) on stream %llu: %d\n", (unsigned long long)size,
			(unsigned long long)stream, rc);
		check_failed++;
	}
	return id;
}

static uint64_t addr_of(const struct gmt__allocmodel *m, uint32_t id)
{
	uint64_t a = 0, s = 0;

	CHECK(gmt__am_block(m, id, &a, &s) == 0);
	return a;
}

static uint64_t size_of(const struct gmt__allocmodel *m, uint32_t id)
{
	uint64_t a = 0, s = 0;

	CHECK(gmt__am_block(m, id, &a, &s) == 0);
	return s;
}

/* ---- rounding ---------------------------------------------------------------------- */

static void test_rounding(void)
{
	struct gmt__am_config c;

	gmt__am_config_default(&c);
	/* round_size: below kMinBlockSize (512) everything is 512; above, up to
	 * a multiple of 512 (no divisions configured). */
	CHECK_U64(gmt__am_round_size(&c, 1), 512);
	CHECK_U64(gmt__am_round_size(&c, 512), 512);
	CHECK_U64(gmt__am_round_size(&c, 513), 1024);
	/* 1000000 / 512 = 1953.1 -> 1954 * 512 */
	CHECK_U64(gmt__am_round_size(&c, 1000000), 1000448);

	/* get_allocation_size: <= 1 MiB takes a 2 MiB small segment; up to
	 * 10 MiB a 20 MiB one (kLargeBuffer), to pack several; from 10 MiB
	 * the request itself rounded up to 2 MiB. */
	CHECK_U64(gmt__am_segment_size(512), 2 * MiB);
	CHECK_U64(gmt__am_segment_size(1 * MiB), 2 * MiB);
	CHECK_U64(gmt__am_segment_size(1 * MiB + 512), 20 * MiB);
	CHECK_U64(gmt__am_segment_size(10 * MiB - 512), 20 * MiB);
	CHECK_U64(gmt__am_segment_size(10 * MiB), 10 * MiB);
	CHECK_U64(gmt__am_segment_size(11 * MiB + 512), 12 * MiB);

	/* Through malloc: 11 MiB + 1 rounds to 11 MiB + 512 and takes a 12 MiB
	 * segment; the rest (1 MiB - 512) is not > kSmallSize: no split, the
	 * block is the whole segment. */
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a = alloc(m, 11 * MiB + 1, 0);

	CHECK_U64(size_of(m, a), 12 * MiB);
	CHECK_U64(gmt__am_stats(m)->allocated, 12 * MiB);
	EVENTS("rounding", m, { GMT_AM_SEGMENT_ALLOC, 12 * MiB });
	gmt__am_destroy(m);
}

/* ---- the small and large pools ---------------------------------------------------- */

static void test_pools(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b, c, d;

	/* 1000 bytes -> 1024, small pool, a new 2 MiB segment split at 1024
	 * (remaining 2 MiB - 1024 >= 512). */
	a = alloc(m, 1000, 0);
	CHECK_U64(size_of(m, a), 1024);
	/* The second request takes the remainder, right after the first. */
	b = alloc(m, 1000, 0);
	CHECK_U64(addr_of(m, b), addr_of(m, a) + 1024);
	CHECK_U64(gmt__am_stats(m)->reserved, 2 * MiB);
	CHECK_U64(gmt__am_stats(m)->allocated, 2048);

	/* 5 MiB is large: a 20 MiB segment of the large pool, though the
	 * small one has 2 MiB - 2 KiB free. */
	c = alloc(m, 5 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 22 * MiB);
	gmt__am_free(m, c);
	/* And a small request never takes the large pool's 20 MiB: after two
	 * more small blocks the small segment still serves (2 MiB - 2 KiB
	 * left), and 1 MiB then needs a second small segment. */
	d = alloc(m, 1 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 22 * MiB);
	(void)d;
	alloc(m, 1 * MiB, 0); /* 2 MiB - 2 KiB - 1 MiB left: too small */
	CHECK_U64(gmt__am_stats(m)->reserved, 24 * MiB);
	EVENTS("pools", m, { GMT_AM_SEGMENT_ALLOC, 2 * MiB }, { GMT_AM_SEGMENT_ALLOC, 20 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 2 * MiB });

	/* Free both 1 KiB blocks: they merge, but d still holds the first
	 * small segment's middle. */
	gmt__am_free(m, a);
	gmt__am_free(m, b);
	gmt__am_empty_cache(m);
	/* The 20 MiB large segment is whole and cached: freed; the small
	 * segments each hold a 1 MiB block: kept. */
	CHECK_U64(gmt__am_stats(m)->reserved, 4 * MiB);
	CHECK_U64(gmt__am_stats(m)->peak_reserved, 24 * MiB);
	gmt__am_destroy(m);
}

/* ---- splitting ------------------------------------------------------------------ */

static void test_split_large(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b, c;

	/* 5 MiB: a 20 MiB segment, split (remaining 15 MiB > 1 MiB). */
	a = alloc(m, 5 * MiB, 0);
	CHECK_U64(size_of(m, a), 5 * MiB);
	/* 5 MiB again from the 15 MiB rest: split, 10 MiB left. */
	b = alloc(m, 5 * MiB, 0);
	CHECK_U64(addr_of(m, b), addr_of(m, a) + 5 * MiB);
	/* 9 MiB from the 10 MiB rest: remaining 1 MiB is not > kSmallSize
	 * (1 MiB), so no split: the block is all 10 MiB. */
	c = alloc(m, 9 * MiB, 0);
	CHECK_U64(size_of(m, c), 10 * MiB);
	CHECK_U64(gmt__am_stats(m)->allocated, 20 * MiB);
	CHECK_U64(gmt__am_stats(m)->reserved, 20 * MiB);
	EVENTS("split-large", m, { GMT_AM_SEGMENT_ALLOC, 20 * MiB });
	gmt__am_destroy(m);
}

static void test_split_small(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b, c;

	/* 1 MiB is small: a 2 MiB segment, 1 MiB left. */
	a = alloc(m, 1 * MiB, 0);
	/* 1 MiB - 512 from that rest leaves 512: the small pool splits at
	 * remaining >= kMinBlockSize, so 512 stays cached... */
	b = alloc(m, 1 * MiB - 512, 0);
	CHECK_U64(size_of(m, b), 1 * MiB - 512);
	/* ...and serves a 512-byte request without a new segment. */
	c = alloc(m, 100, 0);
	CHECK_U64(addr_of(m, c), addr_of(m, a) + 2 * MiB - 512);
	CHECK_U64(gmt__am_stats(m)->reserved, 2 * MiB);
	EVENTS("split-small", m, { GMT_AM_SEGMENT_ALLOC, 2 * MiB });
	gmt__am_destroy(m);
}

/* Freeing merges a block with free neighbours; best fit picks the
 * smallest block, then the lowest address. */
static void test_merge_and_best_fit(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b, c, x, y, z;

	/* Three 5 MiB blocks from one 20 MiB segment, 5 MiB left. */
	a = alloc(m, 5 * MiB, 0);
	b = alloc(m, 5 * MiB, 0);
	c = alloc(m, 5 * MiB, 0);
	/* Free the middle (alone: both neighbours in use), then the first:
	 * they merge into 10 MiB at the segment's start. */
	gmt__am_free(m, b);
	gmt__am_free(m, a);
	/* 9 MiB: the free blocks are 10 MiB (merged) and 5 MiB (the tail);
	 * best fit takes the 10 MiB, whole (1 MiB left is not > 1 MiB). */
	x = alloc(m, 9 * MiB, 0);
	CHECK_U64(size_of(m, x), 10 * MiB);
	CHECK_U64(addr_of(m, x), addr_of(m, c) - 10 * MiB);
	EVENTS("merge", m, { GMT_AM_SEGMENT_ALLOC, 20 * MiB });
	gmt__am_destroy(m);

	/* Two free 15 MiB blocks, in segments A and B (B's address higher):
	 * the tie breaks by address. */
	m = model("", 80 * GiB);
	a = alloc(m, 5 * MiB, 0);  /* A: 5 used, 15 free at A + 5 */
	x = alloc(m, 15 * MiB, 0); /* takes A + 5 whole */
	y = alloc(m, 5 * MiB, 0);  /* B: 5 used, 15 free at B + 5 */
	gmt__am_free(m, x);
	z = alloc(m, 15 * MiB, 0);
	CHECK_U64(addr_of(m, z), addr_of(m, a) + 5 * MiB);
	CHECK(addr_of(m, y) > addr_of(m, a));
	gmt__am_destroy(m);
}

/* ---- max_split_size_mb ------------------------------------------------------------- */

static void test_max_split(void)
{
	struct gmt__allocmodel *m = model("max_split_size_mb:100", 80 * GiB);
	uint32_t a, b, c;

	/* 150 MiB: its own segment (>= 10 MiB: rounded to 2 MiB). */
	a = alloc(m, 150 * MiB, 0);
	gmt__am_free(m, a);
	/* 50 MiB may not take the cached 150 MiB block: it is oversize
	 * (>= 100 MiB) and 50 MiB is not. A new 50 MiB segment. */
	b = alloc(m, 50 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 200 * MiB);
	gmt__am_free(m, b);
	/* 140 MiB is oversize: it takes the 150 MiB block, within 20 MiB
	 * (max_non_split_rounding's default, kLargeBuffer), unsplit. */
	c = alloc(m, 140 * MiB, 0);
	CHECK_U64(size_of(m, c), 150 * MiB);
	gmt__am_free(m, c);
	/* 120 MiB: 150 >= 120 + 20, too much waste: a new 120 MiB segment. */
	alloc(m, 120 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 320 * MiB);
	EVENTS("max-split", m, { GMT_AM_SEGMENT_ALLOC, 150 * MiB }, { GMT_AM_SEGMENT_ALLOC, 50 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 120 * MiB });
	gmt__am_destroy(m);

	/* max_non_split_rounding_mb:40: 150 < 120 + 40, so the block serves. */
	m = model("max_split_size_mb:100,max_non_split_rounding_mb:40", 80 * GiB);
	a = alloc(m, 150 * MiB, 0);
	gmt__am_free(m, a);
	c = alloc(m, 120 * MiB, 0);
	CHECK_U64(size_of(m, c), 150 * MiB);
	CHECK_U64(gmt__am_stats(m)->reserved, 150 * MiB);
	gmt__am_destroy(m);

	/* Without a max_split_size the 150 MiB block is split for 50 MiB
	 * (remaining 100 MiB > 1 MiB). */
	m = model("", 80 * GiB);
	a = alloc(m, 150 * MiB, 0);
	gmt__am_free(m, a);
	b = alloc(m, 50 * MiB, 0);
	CHECK_U64(size_of(m, b), 50 * MiB);
	CHECK_U64(gmt__am_stats(m)->reserved, 150 * MiB);
	gmt__am_destroy(m);
}

/* ---- roundup_power2_divisions ----------------------------------------------------- */

static void test_divisions(void)
{
	struct gmt__am_config c;
	char err[160];

	/* A number: 4 divisions everywhere. 5 MiB + 1 lies in [4, 8) MiB, cut in
	 * steps of 1 MiB: up to 6 MiB. 5 MiB is a step: kept. 1.3 MiB lies in
	 * [1, 2) MiB, steps of 256 KiB: 1.5 MiB. A power of two stays. */
	CHECK_INT(gmt__am_config_parse("roundup_power2_divisions:4", &c, err, sizeof(err)), 0);
	CHECK_U64(gmt__am_round_size(&c, 5 * MiB + 1), 6 * MiB);
	CHECK_U64(gmt__am_round_size(&c, 5 * MiB), 5 * MiB);
	CHECK_U64(gmt__am_round_size(&c, 1363149), 1536 * KiB);
	CHECK_U64(gmt__am_round_size(&c, 8 * MiB), 8 * MiB);
	/* Only above 512 * divisions (2048): 1200 rounds to 512s (1536), 3000
	 * in [2048, 4096) by steps of 512 to 3072. */
	CHECK_U64(gmt__am_round_size(&c, 1200), 1536);
	CHECK_U64(gmt__am_round_size(&c, 3000), 3072);

	/* A list: [256:1,512:2,>:4]. Intervals are powers of two in MiB: 256
	 * names [256, 512) MiB and, being first, every interval below it; 512
	 * names [512, 1024); > every one above. */
	CHECK_INT(gmt__am_config_parse("roundup_power2_divisions:[256:1,512:2,>:4]", &c, err,
				       sizeof(err)),
		  0);
	CHECK_U64(gmt__am_round_size(&c, 300 * MiB + 1), 300 * MiB + 512); /* 1: none */
	CHECK_U64(gmt__am_round_size(&c, 5 * MiB + 1), 5 * MiB + 512);     /* below 256: 1 */
	CHECK_U64(gmt__am_round_size(&c, 600 * MiB), 768 * MiB);           /* 2: steps of 256 MiB */
	CHECK_U64(gmt__am_round_size(&c, 1100 * MiB), 1280 * MiB);         /* 4: steps of 256 MiB */

	/* Through malloc: 600 MiB takes a 768 MiB segment. */
	struct gmt__allocmodel *m = model("roundup_power2_divisions:[256:1,512:2,>:4]", 80 * GiB);

	alloc(m, 600 * MiB, 0);
	EVENTS("divisions", m, { GMT_AM_SEGMENT_ALLOC, 768 * MiB });
	gmt__am_destroy(m);
}

/* ---- expandable segments ---------------------------------------------------------- */

static void test_expandable(void)
{
	/* An 8 GiB device: each expandable segment reserves 1 1/8 of it, 9216
	 * MiB, in whole pages: 461 pages of 20 MiB (9220 MiB) for the large
	 * pool, 4608 of 2 MiB (9216 MiB) for the small. */
	struct gmt__allocmodel *m = model("expandable_segments:True", 8 * GiB);
	uint32_t a, b, s;

	/* 5 MiB: a new segment, one 20 MiB page mapped; split (expandable:
	 * remaining >= 512), 15 MiB left. */
	a = alloc(m, 5 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 20 * MiB);
	/* 30 MiB: no free block is that large; the lowest place that can grow
	 * to it is the free 15 MiB before the unmapped rest. 15 MiB more
	 * needs one more page: 40 MiB mapped, the block 35 MiB, split: 30
	 * used, 5 free. (Without expandable segments: 20 + 30 MiB.) */
	b = alloc(m, 30 * MiB, 0);
	CHECK_U64(addr_of(m, b), addr_of(m, a) + 5 * MiB);
	CHECK_U64(gmt__am_stats(m)->reserved, 40 * MiB);
	CHECK_U64(gmt__am_stats(m)->segments, 0);
	/* Small requests have their own segment, of 2 MiB pages. */
	s = alloc(m, 1000, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 42 * MiB);
	EVENTS("expandable", m, { GMT_AM_VA_RESERVE, 9220 * MiB }, { GMT_AM_SEGMENT_MAP, 20 * MiB },
	       { GMT_AM_SEGMENT_MAP, 20 * MiB }, { GMT_AM_VA_RESERVE, 9216 * MiB },
	       { GMT_AM_SEGMENT_MAP, 2 * MiB });

	/* Free all: the large segment's 40 MiB is one free block again;
	 * empty_cache unmaps its pages and, nothing being mapped, frees the
	 * reservation; then the small segment's. */
	gmt__am_free(m, a);
	gmt__am_free(m, b);
	gmt__am_free(m, s);
	gmt__am_empty_cache(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 0);
	EVENTS("expandable-release", m, { GMT_AM_VA_RESERVE, 9220 * MiB }, { GMT_AM_SEGMENT_MAP, 20 * MiB },
	       { GMT_AM_SEGMENT_MAP, 20 * MiB }, { GMT_AM_VA_RESERVE, 9216 * MiB },
	       { GMT_AM_SEGMENT_MAP, 2 * MiB }, { GMT_AM_SEGMENT_UNMAP, 40 * MiB },
	       { GMT_AM_VA_FREE, 9220 * MiB }, { GMT_AM_SEGMENT_UNMAP, 2 * MiB },
	       { GMT_AM_VA_FREE, 9216 * MiB });
	gmt__am_destroy(m);

	/* Only whole pages go back: with 5 MiB still used at the start, the
	 * free 35 MiB after it keeps its first page's 15 MiB mapped and
	 * unmaps the second page (20 MiB). */
	m = model("expandable_segments:True", 8 * GiB);
	a = alloc(m, 5 * MiB, 0);
	b = alloc(m, 30 * MiB, 0);
	gmt__am_free(m, b);
	gmt__am_empty_cache(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 20 * MiB);
	/* And the next 30 MiB maps that page again, at the same place. */
	b = alloc(m, 30 * MiB, 0);
	CHECK_U64(addr_of(m, b), addr_of(m, a) + 5 * MiB);
	CHECK_U64(gmt__am_stats(m)->reserved, 40 * MiB);
	EVENTS("expandable-pages", m, { GMT_AM_VA_RESERVE, 9220 * MiB }, { GMT_AM_SEGMENT_MAP, 20 * MiB },
	       { GMT_AM_SEGMENT_MAP, 20 * MiB }, { GMT_AM_SEGMENT_UNMAP, 20 * MiB },
	       { GMT_AM_SEGMENT_MAP, 20 * MiB });
	gmt__am_destroy(m);

	/* A mapping fails where the driver will not grant its pages: 40 MiB
	 * granted in all, 50 MiB needs three pages (60 MiB). */
	m = model("expandable_segments:True", 8 * GiB);
	gmt__am_set_limit(m, 40 * MiB);
	uint32_t id;

	CHECK_INT(gmt__am_malloc(m, 50 * MiB, 0, &id), -ENOMEM);
	CHECK_U64(gmt__am_stats(m)->reserved, 0);
	CHECK_INT(gmt__am_malloc(m, 40 * MiB, 0, &id), 0);
	gmt__am_destroy(m);

	/* What the cache would serve, asked without taking it: a small request
	 * from the small pool only, a large one from the large. */
	m = model("", 8 * GiB);
	id = alloc(m, 40 * MiB, 0);
	gmt__am_free(m, id);
	CHECK(gmt__am_cache_serves(m, 30 * MiB, 0));
	CHECK(!gmt__am_cache_serves(m, 30 * MiB, 1));
	CHECK(!gmt__am_cache_serves(m, 512 * 1024, 0));
	CHECK(!gmt__am_cache_serves(m, 50 * MiB, 0));
	id = alloc(m, 100, 0);
	gmt__am_free(m, id);
	CHECK(gmt__am_cache_serves(m, 512 * 1024, 0));
	CHECK_U64(gmt__am_stats(m)->reserved, 42 * MiB);
	gmt__am_destroy(m);

	/* A request larger than a whole reservation (1 1/8 of a 1 GiB device:
	 * 1160 MiB in 58 pages) where the driver would grant more: it does
	 * not fit, once every page is mapped. */
	m = model("expandable_segments:True", 1 * GiB);
	gmt__am_set_limit(m, 100 * GiB);
	CHECK_INT(gmt__am_malloc(m, 2 * GiB, 0, &id), -ENOMEM);
	gmt__am_destroy(m);
}

/* ---- what a request would first ask of the driver ----------------------------------- */

static void test_first_ask(void)
{
	struct gmt__allocmodel *m = model("", 8 * GiB);
	uint32_t a, b, id;

	/* Without expandable segments: a new segment of the request's size
	 * (rounded to 2 MiB from 10 MiB on; 20 MiB below; 2 MiB when small). */
	CHECK_U64(gmt__am_first_ask(m, 5 * MiB, 0), 20 * MiB);
	CHECK_U64(gmt__am_first_ask(m, 30 * MiB + 1, 0), 32 * MiB);
	CHECK_U64(gmt__am_first_ask(m, 1000, 0), 2 * MiB);
	gmt__am_destroy(m);

	/* With them: pages of the lowest place that can grow to the request.
	 * 5 MiB then 30 MiB map [0, 40): 5 free at [35, 40) before the
	 * unmapped rest. 30 MiB more: 25 beyond it, two pages (40 MiB); 5 MiB:
	 * the free block holds it, nothing asked; nothing mapped in the small
	 * pool: a new reservation's first 2 MiB page. */
	m = model("expandable_segments:True", 8 * GiB);
	a = alloc(m, 5 * MiB, 0);
	b = alloc(m, 30 * MiB, 0);
	CHECK_U64(addr_of(m, b), addr_of(m, a) + 5 * MiB);
	CHECK_U64(gmt__am_first_ask(m, 30 * MiB, 0), 40 * MiB);
	CHECK_U64(gmt__am_first_ask(m, 5 * MiB, 0), 0);
	CHECK_U64(gmt__am_first_ask(m, 1000, 0), 2 * MiB);
	/* Another stream has no reservation: a new one, 30 MiB in two pages. */
	CHECK_U64(gmt__am_first_ask(m, 30 * MiB, 1), 40 * MiB);
	/* Asking changed nothing. */
	CHECK_U64(gmt__am_stats(m)->reserved, 40 * MiB);
	id = alloc(m, 30 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 80 * MiB);
	CHECK_U64(addr_of(m, id), addr_of(m, b) + 30 * MiB);
	/* id took [35, 65) of [35, 80): 15 MiB free before the unmapped rest.
	 * 10 MiB: that free block holds it, nothing asked. b freed: 30 MiB free
	 * at [5, 35), closed in by a and id; the ask is of new memory (only
	 * made where no cached block serves): 31 MiB grows the 15 at the end
	 * by one page. */
	CHECK_U64(gmt__am_first_ask(m, 10 * MiB, 0), 0);
	gmt__am_free(m, b);
	CHECK_U64(gmt__am_first_ask(m, 31 * MiB, 0), 20 * MiB);
	CHECK_U64(gmt__am_first_ask(m, 56 * MiB, 0), 60 * MiB);
	gmt__am_destroy(m);
}

/* The address handed for a reservation the next call makes (a replay's,
 * where a release may free one and the retry make another: a driver gives
 * freed addresses again): taken by that call's reservation, dropped by a
 * call that makes none. */
static void test_hint(void)
{
	struct gmt__allocmodel *m = model("expandable_segments:True", 1 * GiB);
	uint32_t a, id;

	gmt__am_hint_addr(m, 0x7f8000000000ull);
	a = alloc(m, 60 * MiB, 0);
	CHECK_U64(addr_of(m, a), 0x7f8000000000ull);
	gmt__am_free(m, a);
	/* Served by the 60 MiB cached: no reservation, the hint is gone. */
	gmt__am_hint_addr(m, 0x100000000ull);
	id = alloc(m, 50 * MiB, 0);
	CHECK_U64(addr_of(m, id), 0x7f8000000000ull);
	/* Another stream's reservation follows the first (1160 MiB, 58 pages
	 * of 20 MiB, on 2 MiB steps), not the dropped hint. */
	id = alloc(m, 10 * MiB, 1);
	CHECK_U64(addr_of(m, id), 0x7f8000000000ull + 1160 * MiB);
	gmt__am_destroy(m);
}

/* Addresses a driver gives again: segments of 30, 20 and 40 MiB at B, B +
 * 30, B + 50 (B the model's first address); the 30 and the 40 freed and
 * returned. A 24 MiB segment takes the lowest clear address, B; a 12 MiB
 * one finds [24, 30) too small and [30, 50) held: B + 50. Without
 * gmt__am_reuse_addrs each takes the next after the last: B + 90, B + 114. */
static void test_reuse_addrs(void)
{
	for (int reuse = 0; reuse < 2; reuse++) {
		struct gmt__allocmodel *m = model("", 80 * GiB);
		uint32_t a, b, c;
		uint64_t base;

		if (reuse)
			gmt__am_reuse_addrs(m);
		a = alloc(m, 30 * MiB, 0);
		b = alloc(m, 20 * MiB, 0);
		c = alloc(m, 40 * MiB, 0);
		base = addr_of(m, a);
		CHECK_U64(addr_of(m, b), base + 30 * MiB);
		CHECK_U64(addr_of(m, c), base + 50 * MiB);
		gmt__am_free(m, a);
		gmt__am_free(m, c);
		gmt__am_empty_cache(m);
		CHECK_U64(addr_of(m, alloc(m, 24 * MiB, 0)), reuse ? base : base + 90 * MiB);
		CHECK_U64(addr_of(m, alloc(m, 12 * MiB, 0)), reuse ? base + 50 * MiB : base + 114 * MiB);
		gmt__am_destroy(m);
	}
}

/* ---- garbage_collection_threshold --------------------------------------------------- */

/* The trace of the garbage collection's cases: 74 MiB reserved, all
 * cached, then 40 MiB. Ages count the large pool's searches
 * (get_free_block calls) since a block was cached. */
static void gc_trace(struct gmt__allocmodel *m)
{
	uint32_t a, b, e;

	a = alloc(m, 20 * MiB, 0); /* search 1; a 20 MiB segment */
	b = alloc(m, 30 * MiB, 0); /* search 2; 30 MiB (sizes from 10 MiB: even MiB, whole segments) */
	gmt__am_free(m, a);        /* a cached at 2 */
	e = alloc(m, 24 * MiB, 0); /* search 3: a too small; 50 <= 60, no collection; 24 MiB */
	gmt__am_free(m, b);        /* cached at 3 */
	gmt__am_free(m, e);        /* cached at 3 */
	CHECK_U64(gmt__am_stats(m)->reserved, 74 * MiB);
	alloc(m, 40 * MiB, 0);     /* search 4: nothing fits */
}

static void test_gc(void)
{
	/* A 1000 MiB device at fraction 0.1: 100 MiB allowed; collection above
	 * 0.6 of it, 60 MiB. */
	struct gmt__allocmodel *m = model("garbage_collection_threshold:0.6,per_process_memory_fraction:0.1",
					  1000 * MiB);

	/* At the 40 MiB: 74 > 60, collect 14 MiB. Ages: a 2, e 1, b 1;
	 * average 4/3. Only a is that old: freed (20 >= 14), done. 54 + 40 =
	 * 94 <= 100: a new segment. */
	gc_trace(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 94 * MiB);
	CHECK_U64(gmt__am_stats(m)->retries, 0);
	EVENTS("gc", m, { GMT_AM_SEGMENT_ALLOC, 20 * MiB }, { GMT_AM_SEGMENT_ALLOC, 30 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 24 * MiB }, { GMT_AM_SEGMENT_FREE, 20 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 40 * MiB });
	gmt__am_destroy(m);

	/* The same without a threshold: 74 + 40 > 100 fails, everything
	 * cached goes back (smallest first), the retry fits. */
	m = model("per_process_memory_fraction:0.1", 1000 * MiB);
	gc_trace(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 40 * MiB);
	CHECK_U64(gmt__am_stats(m)->retries, 1);
	EVENTS("gc-off", m, { GMT_AM_SEGMENT_ALLOC, 20 * MiB }, { GMT_AM_SEGMENT_ALLOC, 30 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 24 * MiB }, { GMT_AM_SEGMENT_FREE, 20 * MiB },
	       { GMT_AM_SEGMENT_FREE, 24 * MiB }, { GMT_AM_SEGMENT_FREE, 30 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 40 * MiB });
	gmt__am_destroy(m);

	/* And without a memory fraction PyTorch never collects: the threshold
	 * alone changes nothing (74 + 40 fits the 1000 MiB device). */
	m = model("garbage_collection_threshold:0.6", 1000 * MiB);
	gc_trace(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 114 * MiB);
	gmt__am_destroy(m);
}

/* ---- streams -------------------------------------------------------------------- */

static void test_streams(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b, c;

	/* A block freed on stream 1 serves stream 1 only. */
	a = alloc(m, 1000, 1);
	gmt__am_free(m, a);
	b = alloc(m, 1000, 2);
	CHECK_U64(gmt__am_stats(m)->reserved, 4 * MiB);
	c = alloc(m, 1000, 1);
	CHECK_U64(addr_of(m, c), addr_of(m, b) - 2 * MiB); /* stream 1's segment came first */
	CHECK_U64(gmt__am_stats(m)->reserved, 4 * MiB);
	/* A large request on stream 0 does not take stream 1's free large
	 * block, smaller stream id or not. */
	a = alloc(m, 30 * MiB, 1);
	gmt__am_free(m, a);
	alloc(m, 30 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 64 * MiB);
	EVENTS("streams", m, { GMT_AM_SEGMENT_ALLOC, 2 * MiB }, { GMT_AM_SEGMENT_ALLOC, 2 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 30 * MiB }, { GMT_AM_SEGMENT_ALLOC, 30 * MiB });
	gmt__am_destroy(m);
}

/* ---- empty_cache ----------------------------------------------------------------- */

static void test_empty_cache(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	uint32_t a, b;

	a = alloc(m, 5 * MiB, 0);  /* 20 MiB segment, split */
	b = alloc(m, 30 * MiB, 0); /* 30 MiB segment */
	gmt__am_free(m, b);
	/* Only whole cached segments go back: the 30 MiB; the 20 MiB one holds a. */
	gmt__am_empty_cache(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 20 * MiB);
	gmt__am_free(m, a);
	gmt__am_empty_cache(m);
	CHECK_U64(gmt__am_stats(m)->reserved, 0);
	CHECK_U64(gmt__am_stats(m)->peak_reserved, 50 * MiB);
	CHECK_U64(gmt__am_stats(m)->allocated, 0);
	CHECK_U64(gmt__am_stats(m)->peak_allocated, 35 * MiB);
	EVENTS("empty-cache", m, { GMT_AM_SEGMENT_ALLOC, 20 * MiB }, { GMT_AM_SEGMENT_ALLOC, 30 * MiB },
	       { GMT_AM_SEGMENT_FREE, 30 * MiB }, { GMT_AM_SEGMENT_FREE, 20 * MiB });
	gmt__am_destroy(m);
}

/* ---- release and retry at a failed cudaMalloc -------------------------------------- */

static void test_release_retry(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	const struct gmt__am_stats *st;
	uint32_t a, id;

	/* 100 MiB granted. 40 + 40 reserved, one cached; 50 MiB: 80 + 50 > 100
	 * fails; no max_split_size, so no oversize release; every whole
	 * cached segment goes back (40), and the retry fits: 40 + 50. */
	gmt__am_set_limit(m, 100 * MiB);
	a = alloc(m, 40 * MiB, 0);
	alloc(m, 40 * MiB, 0);
	gmt__am_free(m, a);
	alloc(m, 50 * MiB, 0);
	st = gmt__am_stats(m);
	CHECK_U64(st->reserved, 90 * MiB);
	CHECK_U64(st->retries, 1);
	CHECK(!st->failed);
	EVENTS("retry", m, { GMT_AM_SEGMENT_ALLOC, 40 * MiB }, { GMT_AM_SEGMENT_ALLOC, 40 * MiB },
	       { GMT_AM_SEGMENT_FREE, 40 * MiB }, { GMT_AM_SEGMENT_ALLOC, 50 * MiB });
	gmt__am_destroy(m);

	/* Under max_split_size_mb:30 the first release is of oversize blocks
	 * only, just enough: cached are 60 MiB (oversize) and 24 MiB; 36 MiB
	 * may not take the 60 (60 >= 36 + 20); 96 + 36 > 100 fails; the
	 * smallest oversize block of at least 36 MiB, the 60, goes back, and
	 * the 24 stays. */
	m = model("max_split_size_mb:30", 80 * GiB);
	gmt__am_set_limit(m, 100 * MiB);
	a = alloc(m, 60 * MiB, 0);
	alloc(m, 12 * MiB, 0);
	id = alloc(m, 24 * MiB, 0);
	gmt__am_free(m, a);
	gmt__am_free(m, id);
	alloc(m, 36 * MiB, 0);
	st = gmt__am_stats(m);
	CHECK_U64(st->reserved, 72 * MiB);
	CHECK_U64(st->retries, 0);
	EVENTS("retry-oversize", m, { GMT_AM_SEGMENT_ALLOC, 60 * MiB }, { GMT_AM_SEGMENT_ALLOC, 12 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 24 * MiB }, { GMT_AM_SEGMENT_FREE, 60 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 36 * MiB });
	gmt__am_destroy(m);

	/* No oversize block is large enough alone: the largest go first,
	 * until the request's size went back. Cached 40 and 32 MiB (both
	 * oversize), 12 MiB in use; 50 MiB: 84 + 50 > 100; release 40 (not
	 * enough), then 32: 72 >= 50. */
	m = model("max_split_size_mb:30", 80 * GiB);
	gmt__am_set_limit(m, 100 * MiB);
	a = alloc(m, 40 * MiB, 0);
	id = alloc(m, 32 * MiB, 0);
	alloc(m, 12 * MiB, 0);
	gmt__am_free(m, a);
	gmt__am_free(m, id);
	alloc(m, 50 * MiB, 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 62 * MiB);
	EVENTS("retry-largest", m, { GMT_AM_SEGMENT_ALLOC, 40 * MiB }, { GMT_AM_SEGMENT_ALLOC, 32 * MiB },
	       { GMT_AM_SEGMENT_ALLOC, 12 * MiB }, { GMT_AM_SEGMENT_FREE, 40 * MiB },
	       { GMT_AM_SEGMENT_FREE, 32 * MiB }, { GMT_AM_SEGMENT_ALLOC, 50 * MiB });
	gmt__am_destroy(m);

	/* Out of memory: 60 MiB in use of 100, 50 more cannot come; the first
	 * failure is kept, a later one counted. A larger limit then serves. */
	m = model("", 80 * GiB);
	gmt__am_set_limit(m, 100 * MiB);
	alloc(m, 60 * MiB, 0);
	CHECK_INT(gmt__am_malloc(m, 50 * MiB + 1, 3, &id), -ENOMEM);
	CHECK_INT(gmt__am_malloc(m, 70 * MiB, 0, &id), -ENOMEM);
	st = gmt__am_stats(m);
	CHECK(st->failed);
	CHECK_U64(st->ooms, 2);
	CHECK_U64(st->first_oom.call, 1);
	CHECK_U64(st->first_oom.size, 50 * MiB + 1);
	CHECK_U64(st->first_oom.rounded, 50 * MiB + 512);
	CHECK_U64(st->first_oom.alloc_size, 52 * MiB);
	CHECK_U64(st->first_oom.stream, 3);
	CHECK_U64(st->first_oom.reserved, 60 * MiB);
	CHECK_U64(st->first_oom.allocated, 60 * MiB);
	CHECK_U64(st->first_oom.limit, 100 * MiB);
	gmt__am_set_limit(m, 200 * MiB);
	CHECK_INT(gmt__am_malloc(m, 70 * MiB, 0, &id), 0);
	CHECK_U64(gmt__am_stats(m)->first_oom.call, 1);
	gmt__am_destroy(m);
}

/* ---- the configuration ----------------------------------------------------------- */

struct conf_case {
	const char *conf;
	int rc;
	const char *in_err; /* a word the error must hold */
};

static const struct conf_case conf_cases[] = {
	{ "", 0, NULL },
	{ "max_split_size_mb:100, expandable_segments:True", 0, NULL },
	{ "expandable_segments:False", 0, NULL },
	{ "backend:native,garbage_collection_threshold:0.8", 0, NULL },
	{ "roundup_power2_divisions:[64:8,>:2]", 0, NULL },
	{ "pinned_num_register_threads:8,pinned_reserve_segment_size_mb:[1]", 0, NULL },
	{ "foo:1", -EINVAL, "'foo'" },
	{ "max_split_size_mb:100,not_a_key:True", -EINVAL, "'not_a_key'" },
	{ "max_split_size_mb:10", -EINVAL, "too small" },
	{ "max_split_size_mb:12x", -EINVAL, "max_split_size_mb" },
	{ "max_split_size_mb", -EINVAL, "max_split_size_mb" },
	{ "max_split_size_mb:", -EINVAL, "max_split_size_mb" },
	{ "max_non_split_rounding_mb:5", -EINVAL, "max_non_split_rounding_mb" },
	{ "garbage_collection_threshold:1.5", -EINVAL, "garbage_collection_threshold" },
	{ "garbage_collection_threshold:0", -EINVAL, "garbage_collection_threshold" },
	{ "per_process_memory_fraction:2", -EINVAL, "per_process_memory_fraction" },
	{ "roundup_power2_divisions:3", -EINVAL, "power of 2" },
	{ "roundup_power2_divisions:0", -EINVAL, "power of 2" },
	{ "roundup_power2_divisions:[256:3]", -EINVAL, "roundup_power2_divisions" },
	{ "roundup_power2_divisions:[100:2]", -EINVAL, "boundary" },
	{ "roundup_power2_divisions:[256:1", -EINVAL, "']'" },
	{ "expandable_segments:maybe", -EINVAL, "expandable_segments" },
	{ "backend:cudaMallocAsync", -ENOTSUP, "cudaMallocAsync" },
	{ "max_split_size_mb:100;expandable_segments:True", -EINVAL, "max_split_size_mb" },
};

static void test_config(void)
{
	struct gmt__am_config c;
	char err[160];

	for (size_t i = 0; i < sizeof(conf_cases) / sizeof(conf_cases[0]); i++) {
		const struct conf_case *k = &conf_cases[i];
		int rc = gmt__am_config_parse(k->conf, &c, err, sizeof(err));

		if (rc != k->rc || (k->in_err && !strstr(err, k->in_err))) {
			fprintf(stderr, "config \"%s\": %d \"%s\", expected %d with \"%s\"\n", k->conf, rc,
				err, k->rc, k->in_err ? k->in_err : "");
			check_failed++;
		}
	}

	CHECK_INT(gmt__am_config_parse("max_split_size_mb:100, expandable_segments:True", &c, err,
				       sizeof(err)),
		  0);
	CHECK_U64(c.max_split_size, 100 * MiB);
	CHECK(c.expandable_segments);
	CHECK_U64(c.max_non_split_rounding, 20 * MiB);
	CHECK(c.memory_fraction < 0);

	/* Keys of pinned memory and locking: accepted, listed as ignored. */
	CHECK_INT(gmt__am_config_parse("pinned_use_cuda_host_register:True,release_lock_on_cudamalloc:True",
				       &c, err, sizeof(err)),
		  0);
	CHECK_STR(c.ignored, "pinned_use_cuda_host_register, release_lock_on_cudamalloc");

	/* The list's first boundary also sets every interval below it. */
	CHECK_INT(gmt__am_config_parse("roundup_power2_divisions:[64:8,>:2]", &c, err, sizeof(err)), 0);
	CHECK_INT(c.divisions[0], 8);
	CHECK_INT(c.divisions[6], 8);
	CHECK_INT(c.divisions[7], 2);
	CHECK_INT(c.divisions[15], 2);
}

/* ---- seeding (a replay whose history starts late) --------------------------------- */

static void test_seed(void)
{
	struct gmt__allocmodel *m = model("", 80 * GiB);
	const uint64_t base = 0x10000000;
	uint32_t live = UINT32_MAX, id = UINT32_MAX, a;
	size_t n;

	/* A 20 MiB large segment with a 4 MiB tensor at +2 MiB: the segment
	 * reserved, the tensor allocated, no driver event (it was there). */
	CHECK_INT(gmt__am_seed_segment(m, base, 20 * MiB, 0, false), 0);
	CHECK_INT(gmt__am_seed_block(m, base + 2 * MiB, 4 * MiB, 4 * MiB - 100, &live), 0);
	CHECK_U64(gmt__am_stats(m)->reserved, 20 * MiB);
	CHECK_U64(gmt__am_stats(m)->allocated, 4 * MiB);
	CHECK_U64(addr_of(m, live), base + 2 * MiB);
	(void)gmt__am_events(m, &n);
	CHECK_U64(n, 0);
	/* Overlapping the segment, or a tensor where no free block is: refused. */
	CHECK_INT(gmt__am_seed_segment(m, base + 18 * MiB, 20 * MiB, 0, false), -EINVAL);
	CHECK_INT(gmt__am_seed_block(m, base + 3 * MiB, 512, 512, &id), -EINVAL);
	CHECK_INT(gmt__am_seed_block(m, base + 19 * MiB, 2 * MiB, 2 * MiB, &id), -EINVAL);
	/* The free parts either side are cached: 2 MiB before, 14 MiB after. A
	 * 2 MiB request takes the smaller, the front; 12 MiB the one after. */
	a = alloc(m, 2 * MiB, 0);
	CHECK_U64(addr_of(m, a), base);
	a = alloc(m, 12 * MiB, 0);
	CHECK_U64(addr_of(m, a), base + 6 * MiB);
	(void)gmt__am_events(m, &n);
	CHECK_U64(n, 0);
	/* Freed, its block (allocated neighbours both sides) serves 4 MiB again. */
	CHECK_INT(gmt__am_free(m, live), 0);
	a = alloc(m, 4 * MiB, 0);
	CHECK_U64(addr_of(m, a), base + 2 * MiB);
	gmt__am_destroy(m);

	/* The run's address for the next segment; the one after it follows. */
	m = model("", 80 * GiB);
	gmt__am_set_next_addr(m, 0x30000000);
	a = alloc(m, 11 * MiB, 0);
	CHECK_U64(addr_of(m, a), 0x30000000);
	a = alloc(m, 2 * MiB + 1, 0);
	CHECK_U64(addr_of(m, a), 0x30000000 + 12 * MiB);
	gmt__am_destroy(m);
}

int main(void)
{
	test_rounding();
	test_pools();
	test_split_large();
	test_split_small();
	test_merge_and_best_fit();
	test_max_split();
	test_divisions();
	test_expandable();
	test_first_ask();
	test_hint();
	test_reuse_addrs();
	test_gc();
	test_streams();
	test_empty_cache();
	test_release_retry();
	test_config();
	test_seed();
	if (check_failed)
		fprintf(stderr, "%d checks failed\n", check_failed);
	return check_failed != 0;
}
