/* The live table (src/state/table.c): table-driven insert/find/replace/remove across
 * key spaces, a million random operations against a direct-indexed reference,
 * and the memory it holds per live entry as it grows and shrinks. */
#define _GNU_SOURCE
#include "state/table.h"

#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct gmt__entry entry(enum gmt__space space, uint64_t addr, uint64_t size)
{
	struct gmt__entry e;

	memset(&e, 0, sizeof(e));
	e.space = (uint8_t)space;
	e.addr = addr;
	e.size = size;
	e.link = size * 7;
	e.aux = ~addr;
	e.time_ns = size ^ addr;
	e.stack = (uint32_t)size;
	e.tid = 100 + (uint32_t)space;
	e.api = (uint16_t)(size * 3);
	e.kind = (uint8_t)(size % GMT_KIND_COUNT);
	e.device = (int16_t)(size % 5) - 1;
	e.refs = (uint16_t)(size >> 3);
	return e;
}

static bool same(const struct gmt__entry *a, const struct gmt__entry *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* --- table-driven ---------------------------------------------------------------- */

enum op { INSERT, FIND, REMOVE };

struct step {
	enum op op;
	enum gmt__space space;
	uint64_t addr;
	uint64_t size;     /* INSERT: the new size; FIND/REMOVE: the size expected */
	bool present;      /* before the step */
	uint64_t old_size; /* INSERT over a present key: the replaced size */
	size_t count;      /* after the step */
};

#define DEV 0x7f0000200000ull
static const struct step steps[] = {
	{ FIND, GMT_SPACE_MEMORY, DEV, 0, false, 0, 0 },
	{ REMOVE, GMT_SPACE_MEMORY, DEV, 0, false, 0, 0 },
	{ INSERT, GMT_SPACE_MEMORY, DEV, 100, false, 0, 1 },
	{ FIND, GMT_SPACE_MEMORY, DEV, 100, true, 0, 1 },
	/* The same number in other spaces is another key. */
	{ FIND, GMT_SPACE_HANDLE, DEV, 0, false, 0, 1 },
	{ INSERT, GMT_SPACE_HANDLE, DEV, 200, false, 0, 2 },
	{ INSERT, GMT_SPACE_RESERVATION, DEV, 300, false, 0, 3 },
	{ INSERT, GMT_SPACE_MAPPING, DEV, 400, false, 0, 4 },
	{ INSERT, GMT_SPACE_ARRAY, DEV, 500, false, 0, 5 },
	{ FIND, GMT_SPACE_MEMORY, DEV, 100, true, 0, 5 },
	{ FIND, GMT_SPACE_HANDLE, DEV, 200, true, 0, 5 },
	{ FIND, GMT_SPACE_ARRAY, DEV, 500, true, 0, 5 },
	/* Replace: the old entry comes back, the count stays. */
	{ INSERT, GMT_SPACE_MEMORY, DEV, 101, true, 100, 5 },
	{ FIND, GMT_SPACE_MEMORY, DEV, 101, true, 0, 5 },
	{ FIND, GMT_SPACE_HANDLE, DEV, 200, true, 0, 5 },
	/* Neighbouring addresses and address 0 and ~0 are keys of their own. */
	{ INSERT, GMT_SPACE_MEMORY, DEV + 1, 1, false, 0, 6 },
	{ INSERT, GMT_SPACE_MEMORY, 0, 2, false, 0, 7 },
	{ INSERT, GMT_SPACE_MEMORY, UINT64_MAX, 3, false, 0, 8 },
	{ FIND, GMT_SPACE_MEMORY, 0, 2, true, 0, 8 },
	{ FIND, GMT_SPACE_MEMORY, UINT64_MAX, 3, true, 0, 8 },
	{ FIND, GMT_SPACE_MEMORY, DEV - 1, 0, false, 0, 8 },
	/* Remove one space's key; the others stay. */
	{ REMOVE, GMT_SPACE_MEMORY, DEV, 101, true, 0, 7 },
	{ FIND, GMT_SPACE_MEMORY, DEV, 0, false, 0, 7 },
	{ FIND, GMT_SPACE_HANDLE, DEV, 200, true, 0, 7 },
	{ FIND, GMT_SPACE_MAPPING, DEV, 400, true, 0, 7 },
	{ REMOVE, GMT_SPACE_MEMORY, DEV, 0, false, 0, 7 },
	{ REMOVE, GMT_SPACE_HANDLE, DEV, 200, true, 0, 6 },
	{ REMOVE, GMT_SPACE_RESERVATION, DEV, 300, true, 0, 5 },
	{ INSERT, GMT_SPACE_MEMORY, DEV, 102, false, 0, 6 },
	{ FIND, GMT_SPACE_MEMORY, DEV, 102, true, 0, 6 },
};

static void test_steps(void)
{
	struct gmt__table *t = gmt__table_new();
	size_t i;

	if (t == NULL) {
		CHECK(t != NULL);
		return;
	}
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		const struct step *s = &steps[i];
		struct gmt__entry e = entry(s->space, s->addr, s->size), old, *p;
		int bad = atomic_load(&failed);

		switch (s->op) {
		case INSERT:
			memset(&old, 0xab, sizeof(old));
			p = gmt__table_insert(t, &e, &old);
			CHECK(p != NULL && same(p, &e));
			if (s->present)
				CHECK_EQ(old.size, s->old_size);
			else
				CHECK_EQ(old.size, 0xababababababababull); /* untouched */
			break;
		case FIND:
			p = gmt__table_find(t, s->space, s->addr);
			CHECK((p != NULL) == s->present);
			if (p != NULL && s->present)
				CHECK(same(p, &e));
			break;
		case REMOVE:
			memset(&old, 0, sizeof(old));
			CHECK(gmt__table_remove(t, s->space, s->addr, &old) == s->present);
			if (s->present)
				CHECK(same(&old, &e));
			break;
		}
		CHECK_EQ(gmt__table_count(t), s->count);
		if (atomic_load(&failed) != bad)
			fprintf(stderr, "  at step %zu\n", i);
	}
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_MEMORY), 4);
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_HANDLE), 0);
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_MAPPING), 1);
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_ARRAY), 1);
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_COUNT), 0);

	/* A key space out of range is refused. */
	{
		struct gmt__entry bad = entry(GMT_SPACE_COUNT, 1, 1);

		errno = 0;
		CHECK(gmt__table_insert(t, &bad, NULL) == NULL);
		CHECK_EQ(errno, EINVAL);
		CHECK(gmt__table_find(t, GMT_SPACE_COUNT, 1) == NULL);
		CHECK(!gmt__table_remove(t, GMT_SPACE_COUNT, 1, NULL));
		CHECK_EQ(gmt__table_count(t), 6);
	}
	gmt__table_clear(t);
	CHECK_EQ(gmt__table_count(t), 0);
	CHECK_EQ(gmt__table_count_space(t, GMT_SPACE_MEMORY), 0);
	CHECK(gmt__table_find(t, GMT_SPACE_MAPPING, DEV) == NULL);
	gmt__table_free(t);
}

/* --- random operations against a reference --------------------------------------- */

/* A key universe small enough to index directly: KEYS numbers in each space.
 * Memory addresses are 512-aligned, as allocations are; handles are small
 * consecutive integers, as the simulator's are; the rest scattered. */
#define KEYS 40000u

static uint64_t key_addr(unsigned space, unsigned k)
{
	switch (space) {
	case GMT_SPACE_MEMORY:
		return 0x7f1200000000ull + (uint64_t)k * 512;
	case GMT_SPACE_HANDLE:
		return k + 1;
	default:
		return (uint64_t)k * 0x9e3779b97f4a7c15ull;
	}
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void)
{
	/* xorshift64*, fixed seed: the run is the same every time */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

struct check_each {
	const uint64_t (*ref)[KEYS];
	size_t seen, wrong;
};

static int each_entry(void *ctx, const struct gmt__entry *e)
{
	struct check_each *c = ctx;
	unsigned k;

	c->seen++;
	k = (unsigned)(e->size >> 32); /* the test stores k there */
	if (k >= KEYS || e->space >= GMT_SPACE_COUNT || e->addr != key_addr(e->space, k) ||
	    c->ref[e->space][k] != e->size)
		c->wrong++;
	return 0;
}

/* Every key of the universe looked up, and the table walked. */
static void full_check(struct gmt__table *t, uint64_t (*ref)[KEYS], size_t live,
		       const size_t *live_space, uint64_t op)
{
	struct check_each c = { .ref = (const uint64_t(*)[KEYS])ref };
	size_t wrong = 0;
	unsigned s, k;

	CHECK_EQ(gmt__table_count(t), live);
	for (s = 0; s < GMT_SPACE_COUNT; s++) {
		CHECK_EQ(gmt__table_count_space(t, s), live_space[s]);
		for (k = 0; k < KEYS; k++) {
			struct gmt__entry *e = gmt__table_find(t, s, key_addr(s, k));

			if (ref[s][k] == 0 ? e != NULL : (e == NULL || e->size != ref[s][k] ||
							  e->addr != key_addr(s, k) || e->space != s))
				wrong++;
		}
	}
	gmt__table_each(t, each_entry, &c);
	if (wrong || c.wrong || c.seen != live)
		fprintf(stderr, "after op %" PRIu64 ": %zu lookups wrong, walk saw %zu of %zu (%zu wrong)\n",
			op, wrong, c.seen, live, c.wrong);
	CHECK_EQ(wrong, 0);
	CHECK_EQ(c.wrong, 0);
	CHECK_EQ(c.seen, live);
}

static void test_random(void)
{
	static uint64_t ref[GMT_SPACE_COUNT][KEYS]; /* size, 0 = absent */
	size_t live = 0, live_space[GMT_SPACE_COUNT] = { 0 }, max_live = 0, bytes_at_max = 0;
	struct gmt__table *t = gmt__table_new();
	uint64_t op, ops = 1000000, mismatches = 0;

	if (t == NULL) {
		CHECK(t != NULL);
		return;
	}
	for (op = 0; op < ops; op++) {
		uint64_t r = rng();
		unsigned s = (unsigned)(r % GMT_SPACE_COUNT);
		unsigned k = (unsigned)((r >> 8) % KEYS);
		unsigned dice = (unsigned)((r >> 40) % 100);
		/* Three phases: fill up (inserts win), empty out (removes win),
		 * then churn; the table grows, shrinks and grows again. */
		unsigned insert_pct = op < ops * 4 / 10 ? 70 : op < ops * 7 / 10 ? 20 : 50;
		uint64_t addr = key_addr(s, k);
		struct gmt__entry *p;

		if (dice < insert_pct) {
			/* size carries k in its upper half for the walk's check */
			uint64_t size = ((uint64_t)k << 32) | (uint32_t)(op + 1);
			struct gmt__entry e = entry(s, addr, size), old;

			p = gmt__table_insert(t, &e, &old);
			if (p == NULL || p->size != size ||
			    (ref[s][k] != 0 && old.size != ref[s][k]))
				mismatches++;
			if (ref[s][k] == 0) {
				live++;
				live_space[s]++;
			}
			ref[s][k] = size;
		} else if (dice < 95) {
			struct gmt__entry old;
			bool had = gmt__table_remove(t, s, addr, &old);

			if (had != (ref[s][k] != 0) || (had && old.size != ref[s][k]))
				mismatches++;
			if (ref[s][k] != 0) {
				live--;
				live_space[s]--;
			}
			ref[s][k] = 0;
		} else {
			p = gmt__table_find(t, s, addr);
			if ((p != NULL) != (ref[s][k] != 0) || (p != NULL && p->size != ref[s][k]))
				mismatches++;
		}
		if (gmt__table_count(t) != live)
			mismatches++;
		if (live > max_live) {
			max_live = live;
			bytes_at_max = gmt__table_bytes(t);
		}
		if (mismatches == 1) {
			fprintf(stderr, "random: first mismatch at op %" PRIu64 "\n", op);
			mismatches++;
		}
		if (op % 100000 == 99999)
			full_check(t, ref, live, live_space, op);
	}
	printf("random: %" PRIu64 " ops, peak %zu live (%zu bytes), %zu live at the end (%zu bytes)\n",
	       ops, max_live, bytes_at_max, live, gmt__table_bytes(t));
	CHECK_EQ(mismatches, 0);
	full_check(t, ref, live, live_space, ops);
	gmt__table_free(t);
}

/* --- growth and memory -------------------------------------------------------------- */

static int stop_at_third(void *ctx, const struct gmt__entry *e)
{
	int *n = ctx;

	(void)e;
	return ++*n == 3 ? 77 : 0;
}

static void test_growth(void)
{
	static const size_t marks[] = { 10000, 100000, 250000, 500000, 750000, 1000000 };
	struct gmt__table *t = gmt__table_new();
	size_t i, m = 0, empty_bytes, missing = 0, worst_mark = 0;
	double worst = 0;
	int n = 0;

	if (t == NULL) {
		CHECK(t != NULL);
		return;
	}
	empty_bytes = gmt__table_bytes(t);
	for (i = 0; i < 1000000; i++) {
		struct gmt__entry e = entry(GMT_SPACE_MEMORY, 0x7f0000000000ull + i * 512, i + 1);

		if (gmt__table_insert(t, &e, NULL) == NULL)
			missing++;
		if (m < sizeof(marks) / sizeof(marks[0]) && i + 1 == marks[m]) {
			double per = (double)gmt__table_bytes(t) / (double)(i + 1);

			printf("growth: %zu live, %zu bytes, %.1f bytes per live entry\n", i + 1,
			       gmt__table_bytes(t), per);
			if (per > worst) {
				worst = per;
				worst_mark = i + 1;
			}
			m++;
		}
	}
	CHECK_EQ(missing, 0);
	CHECK_EQ(gmt__table_count(t), 1000000);
	for (i = 0; i < 1000000; i += 1) {
		struct gmt__entry *p = gmt__table_find(t, GMT_SPACE_MEMORY, 0x7f0000000000ull + i * 512);

		if (p == NULL || p->size != i + 1)
			missing++;
	}
	CHECK_EQ(missing, 0);
	/* docs/internals.md, "Targets": at most 96 bytes per live allocation. */
	printf("growth: worst %.1f bytes per live entry (at %zu live)\n", worst, worst_mark);
	CHECK_LE(worst, 96.0);
	CHECK_EQ(gmt__table_each(t, stop_at_third, &n), 77);
	CHECK_EQ(n, 3);

	/* Shrinks back as the live set goes: memory follows the live set. */
	for (i = 0; i < 1000000; i++)
		if (!gmt__table_remove(t, GMT_SPACE_MEMORY, 0x7f0000000000ull + i * 512, NULL))
			missing++;
	CHECK_EQ(missing, 0);
	CHECK_EQ(gmt__table_count(t), 0);
	/* small again: nothing like the million entries' bytes */
	printf("growth: emptied, %zu bytes (new table: %zu)\n", gmt__table_bytes(t), empty_bytes);
	CHECK_LE(gmt__table_bytes(t), 128 * 1024);

	/* clear of a big table returns to the smallest array */
	for (i = 0; i < 100000; i++) {
		struct gmt__entry e = entry(GMT_SPACE_HANDLE, i + 1, 1);

		gmt__table_insert(t, &e, NULL);
	}
	gmt__table_clear(t);
	CHECK_EQ(gmt__table_count(t), 0);
	CHECK_EQ(gmt__table_bytes(t), empty_bytes);
	CHECK(gmt__table_find(t, GMT_SPACE_HANDLE, 5) == NULL);
	gmt__table_free(t);
}

int main(void)
{
	test_steps();
	test_random();
	test_growth();
	return check_done("table");
}
