/* Unit test of the history (history.h): the event ring keeps the last N in
 * order and counts what fell out; the series closes windows at the right times,
 * stands for quiet stretches with one flat point, merges when full and keeps
 * the maxima; sites count allocations, peaks, and rises and falls per window,
 * and growth is called only on steady rises. */
#define _GNU_SOURCE
#include "check.h"
#include "state/history.h"

#include <stdio.h>
#include <string.h>

#define MS 1000000ull
#define T0 1700000000000000000ull

static struct gmt__entry entry(uint64_t addr, uint64_t size, uint32_t stack, int kind, int device)
{
	struct gmt__entry e = {
		.addr = addr, .size = size, .stack = stack, .kind = (uint8_t)kind, .device = (int16_t)device,
	};
	return e;
}

static struct gmt__hist_cause at(uint64_t t, uint64_t seq)
{
	struct gmt__hist_cause c = { .seq = seq, .time_ns = t, .tid = 7, .api = 3 };
	return c;
}

/* Applies one change at time t, as the core does: tick, then change. */
static void change(struct gmt__history *h, uint64_t t, const struct gmt__entry *e, bool add)
{
	static uint64_t seq;
	struct gmt__hist_cause c = at(t, ++seq);

	gmt__history_tick(h, t);
	gmt__history_change(h, e, add, &c);
}

static void test_events(void)
{
	struct gmt__history h;
	struct gmt__hist_cause c = at(T0, 99);

	CHECK(gmt__history_init(&h, 3) == 0);
	for (int i = 0; i < 5; i++) {
		struct gmt__entry e = entry(0x1000 * (uint64_t)(i + 1), 100, 1, GMT_KIND_DEVICE, 0);

		change(&h, T0, &e, true);
	}
	gmt__history_oom(&h, &c, 4096, GMT_KIND_ASYNC, 1, 2);
	CHECK_INT(h.count, 3);
	CHECK_INT(h.dropped, 3);
	CHECK_INT(gmt__history_event(&h, 0)->addr, 0x4000);
	CHECK_INT(gmt__history_event(&h, 1)->addr, 0x5000);
	CHECK_INT(gmt__history_event(&h, 2)->op, GMT_HIST_OOM);
	CHECK_INT(gmt__history_event(&h, 2)->size, 4096);
	CHECK_INT(gmt__history_event(&h, 2)->device, 1);
	CHECK_INT(gmt__history_event(&h, 2)->seq, 99);

	/* No ring: nothing kept, the rest still works. */
	CHECK(gmt__history_init(&h, 0) == 0);
	{
		struct gmt__entry e = entry(0x1000, 100, 1, GMT_KIND_DEVICE, 0);

		change(&h, T0, &e, true);
	}
	CHECK_INT(h.count, 0);
	CHECK_U64(gmt__history_live(&h, 0, GMT_KIND_DEVICE), 100);
}

static void test_series(void)
{
	struct gmt__history h;
	struct gmt__entry a = entry(0x1000, 1000, 1, GMT_KIND_DEVICE, 0);
	struct gmt__entry b = entry(0x2000, 500, 2, GMT_KIND_HOST, -1);
	const uint64_t *dev0;

	CHECK(gmt__history_init(&h, 16) == 0);
	change(&h, T0, &a, true);               /* window [T0, T0+10ms) */
	change(&h, T0 + 2 * MS, &a, false);     /* max 1000, ends at 0 */
	change(&h, T0 + 3 * MS, &b, true);
	change(&h, T0 + 12 * MS, &a, true);     /* closes the first window */
	CHECK_INT(h.npoints, 1);
	CHECK_INT(h.ncols, 2);
	CHECK_U64(h.pt_time[0], T0 + 10 * MS);
	dev0 = h.pt_val; /* column 0: device 0, kind device */
	CHECK_U64(dev0[0], 0);
	CHECK_U64(h.pt_max[0], 1000);
	CHECK_U64(h.pt_val[GMT_SERIES_POINTS], 500); /* column 1: host */
	/* A quiet second: one point closing the window the quiet began in, one
	 * flat point at the last boundary before the next event. */
	change(&h, T0 + 1012 * MS, &a, false);
	CHECK_INT(h.npoints, 3);
	CHECK_U64(h.pt_time[1], T0 + 20 * MS);
	CHECK_U64(h.pt_time[2], T0 + 1010 * MS);
	CHECK_U64(dev0[1], 1000);
	CHECK_U64(dev0[2], 1000);
	CHECK_U64(h.window, 3);

	/* Full: neighbours merge, the interval doubles, maxima survive. */
	CHECK(gmt__history_init(&h, 0) == 0);
	for (uint64_t i = 0; i <= GMT_SERIES_POINTS + 1; i++) {
		struct gmt__entry e = entry(0x1000 + i, 10, 1, GMT_KIND_DEVICE, 0);

		change(&h, T0 + i * 10 * MS, &e, true);
		if (i == 5) {
			struct gmt__entry spike = entry(0x900000, 1000000, 1, GMT_KIND_DEVICE, 0);

			change(&h, T0 + i * 10 * MS + 1, &spike, true);
			change(&h, T0 + i * 10 * MS + 2, &spike, false);
		}
	}
	CHECK_INT(h.npoints, GMT_SERIES_POINTS / 2 + 1);
	CHECK_U64(h.interval_ns, 20 * MS);
	CHECK_U64(h.pt_time[0], T0 + 20 * MS);
	CHECK_U64(h.pt_val[0], 20);
	/* The spike in window 5 (points 4 and 5 merged into point 2). */
	CHECK_U64(h.pt_max[2], 60 + 1000000);
	CHECK_U64(h.pt_val[2], 60);
}

static void test_sites(void)
{
	struct gmt__history h;
	struct gmt__entry keep = entry(0, 100, 5, GMT_KIND_DEVICE, 0);
	struct gmt__entry tmp = entry(0x900000, 50, 6, GMT_KIND_DEVICE, 0);
	const struct gmt__site *s;
	uint32_t rises, falls;
	uint64_t growth;

	CHECK(gmt__history_init(&h, 0) == 0);
	/* Site 5 keeps 100 bytes per 25 ms; site 6 allocates and frees. */
	for (int i = 0; i < 6; i++) {
		keep.addr = 0x1000 * (uint64_t)(i + 1);
		change(&h, T0 + (uint64_t)i * 25 * MS, &keep, true);
		change(&h, T0 + (uint64_t)i * 25 * MS + 1, &tmp, true);
		change(&h, T0 + (uint64_t)i * 25 * MS + 2, &tmp, false);
	}
	s = gmt__history_site(&h, 5);
	CHECK(s != NULL);
	CHECK_U64(s->live_bytes, 600);
	CHECK_U64(s->live_count, 6);
	CHECK_U64(s->allocs, 6);
	CHECK_U64(s->peak_bytes, 600);
	CHECK(gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK_INT(rises, 6);
	CHECK_INT(falls, 0);
	CHECK_U64(growth, 500); /* above the first window's 100 */

	s = gmt__history_site(&h, 6);
	CHECK(s != NULL);
	CHECK_U64(s->allocs, 6);
	CHECK_U64(s->live_bytes, 0);
	CHECK_U64(s->peak_bytes, 50);
	CHECK(!gmt__site_growing(&h, s, &rises, &falls, &growth));
	/* Its counts are those of rounds of 4 changes, which may cut a pair:
	 * as many rises as falls, give or take the open round. */
	CHECK(rises <= falls + 1 && falls <= rises + 1);

	/* Freeing all of site 5 at the end: one fall against six rises still
	 * counts as growth in the counters, but nothing is left to have grown. */
	for (int i = 0; i < 6; i++) {
		keep.addr = 0x1000 * (uint64_t)(i + 1);
		change(&h, T0 + 200 * MS, &keep, false);
	}
	s = gmt__history_site(&h, 5);
	CHECK(!gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK_INT(falls, 1);
	CHECK_U64(growth, 0);
	CHECK(gmt__history_site(&h, 77) == NULL);

	/* An allocation put back comes back without counting anew. */
	{
		struct gmt__hist_cause back = at(T0 + 300 * MS, 1000);

		back.put_back = true;
		gmt__history_change(&h, &keep, true, &back);
		s = gmt__history_site(&h, 5);
		CHECK_U64(s->allocs, 6);
		CHECK_U64(s->live_bytes, 100);
	}

	/* Sites far beyond the first mapping. */
	{
		struct gmt__entry far = entry(0x5000, 1, 100000, GMT_KIND_DEVICE, 0);

		change(&h, T0 + 400 * MS, &far, true);
		CHECK(gmt__history_site(&h, 100000) != NULL);
		CHECK(!h.sites_failed);
	}
	gmt__history_clear(&h);
	CHECK(gmt__history_site(&h, 5) == NULL);
	CHECK_INT(h.npoints, 0);
}

/* Growth judged on the program's own sequence: loops that run within one
 * window of time. */
static void test_rhythm(void)
{
	struct gmt__history h;
	struct gmt__entry w = entry(0, 1000, 10, GMT_KIND_DEVICE, 0);
	struct gmt__entry keep = entry(0, 100, 11, GMT_KIND_DEVICE, 0);
	struct gmt__entry tmp = entry(0x900000, 50, 12, GMT_KIND_DEVICE, 0);
	struct gmt__entry act[4];
	const struct gmt__site *s;
	uint32_t rises, falls;
	uint64_t growth;
	uint64_t t = T0;

	CHECK(gmt__history_init(&h, 0) == 0);
	/* Start-up: 100 weights in a row, then a fast loop (1 us a step) that
	 * keeps 100 bytes a step beside a temporary it frees. */
	for (int i = 0; i < 100; i++) {
		w.addr = 0x10000000 + 0x1000 * (uint64_t)i;
		change(&h, t++, &w, true);
	}
	for (int i = 0; i < 12; i++) {
		keep.addr = 0x20000000 + 0x1000 * (uint64_t)i;
		change(&h, t++, &keep, true);
		change(&h, t++, &tmp, true);
		change(&h, t++, &tmp, false);
	}
	CHECK_INT(h.window, 0); /* all within one window of time */
	s = gmt__history_site(&h, 11);
	CHECK(s != NULL && gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK(rises >= GMT_GROWTH_MIN_RISES && falls == 0);
	CHECK(growth > 0 && growth <= 1200);
	s = gmt__history_site(&h, 12);
	CHECK(s != NULL && !gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK(!gmt__site_suspect(&h, s, &rises, &falls, &growth));
	/* The weights came in a burst without frees at start-up: one round of
	 * changes, one rise at most (the round they rose in)... */
	s = gmt__history_site(&h, 10);
	CHECK(s != NULL && !gmt__site_growing(&h, s, &rises, &falls, &growth) && rises <= 1);
	/* ...then a long steady loop: neither growing nor a leak suspect. */
	for (int i = 0; i < 400; i++) {
		change(&h, t++, &tmp, true);
		change(&h, t++, &tmp, false);
	}
	CHECK(!gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK(!gmt__site_suspect(&h, s, &rises, &falls, &growth));
	/* The kept site, flat for as long now: no longer growing, still a
	 * suspect (it kept growing for a quarter of the run since). */
	s = gmt__history_site(&h, 11);
	CHECK(!gmt__site_growing(&h, s, &rises, &falls, &growth));
	gmt__history_clear(&h);

	/* A step that allocates four activations from one site and frees three
	 * of them (the demo's shape), 40 steps fast: its live bytes fall within
	 * every step, yet it grows by one a step at a longer scale. */
	for (int i = 0; i < 40; i++) {
		for (int k = 0; k < 4; k++) {
			act[k] = entry(0x30000000 + 0x100000 * (uint64_t)i + 0x1000 * (uint64_t)k, 64, 13,
				       GMT_KIND_DEVICE, 0);
			change(&h, t++, &act[k], true);
		}
		change(&h, t++, &tmp, true);
		change(&h, t++, &tmp, false);
		for (int k = 1; k < 4; k++)
			change(&h, t++, &act[k], false);
	}
	s = gmt__history_site(&h, 13);
	CHECK(s != NULL && s->live_count == 40);
	CHECK(gmt__site_growing(&h, s, &rises, &falls, &growth));
	CHECK(falls * 4 <= rises);
	gmt__history_clear(&h);

	/* A loop whose steps only allocate (nothing is ever freed, all within
	 * one window of time): the rounds of changes cannot tell its steps
	 * apart, marked steps can. */
	for (int pass = 0; pass < 2; pass++) {
		struct gmt__hist_cause mark = at(t, 0);

		for (int i = 0; i < 12; i++) {
			struct gmt__entry blk;

			if (pass == 1) {
				mark.time_ns = t;
				gmt__history_step(&h, &mark, (uint64_t)i);
			}
			for (int k = 0; k < 6; k++) {
				blk = entry(0x40000000 + 0x100000 * (uint64_t)i + 0x1000 * (uint64_t)k, 64, k == 0 ? 14 : 15,
					    GMT_KIND_DEVICE, 0);
				change(&h, t++, &blk, true);
			}
		}
		s = gmt__history_site(&h, 14);
		CHECK(s != NULL && s->live_count == 12);
		if (pass == 0)
			CHECK(!gmt__site_growing(&h, s, &rises, &falls, &growth));
		else
			CHECK(gmt__site_growing(&h, s, &rises, &falls, &growth) && rises >= 11 && falls == 0);
		gmt__history_clear(&h);
	}
}

/* Steps 1..40 marked; site 30 keeps 1000 bytes in each step whose entry of
 * `plan` is '+', frees 1000 in each '-', does nothing in the rest (and
 * past its end); the verdicts after each step into suspect[] and growing[]. */
static void steps_of(const char *plan, bool suspect[41], bool growing[41])
{
	struct gmt__history h;
	struct gmt__entry e = entry(0, 1000, 30, GMT_KIND_DEVICE, 0);
	struct gmt__entry tmp = entry(0x900000, 50, 31, GMT_KIND_DEVICE, 0);
	uint64_t kept[40], growth, t = T0;
	uint32_t rises, falls;
	int nkept = 0;

	CHECK(gmt__history_init(&h, 0) == 0);
	for (int i = 1; i <= 40; i++) {
		struct gmt__hist_cause mark = at(t, 0);
		char what = i <= (int)strlen(plan) ? plan[i - 1] : '.';
		const struct gmt__site *s;

		gmt__history_step(&h, &mark, (uint64_t)i);
		if (what == '+') {
			e.addr = kept[nkept++] = 0x50000000 + 0x1000 * (uint64_t)i;
			change(&h, t++, &e, true);
		} else if (what == '-' && nkept > 0) {
			e.addr = kept[--nkept];
			change(&h, t++, &e, false);
		}
		change(&h, t++, &tmp, true);
		change(&h, t++, &tmp, false);
		s = gmt__history_site(&h, 30);
		suspect[i] = s != NULL && gmt__site_suspect(&h, s, &rises, &falls, &growth);
		growing[i] = s != NULL && gmt__site_growing(&h, s, &rises, &falls, &growth);
	}
	gmt__history_clear(&h);
}

/* A site that rose only at start-up (a cache filled over its first marked
 * steps) and stayed flat since: it grows while flat for at most the span of
 * its rise (from its first rise to its last, at least GMT_GROWTH_MIN_RISES),
 * is a suspect while that span is at least a quarter of the steps since its
 * first rise, and neither once flat for longer (to step 40). Six rises: a
 * span of 5; four, the fewest that count: 3, floored to 4. */
static void test_startup_rise(void)
{
	static const struct {
		const char *plan;
		int grows_to, suspect_to;
	} cases[] = {
		{ "++++++", 11, 21 },
		{ "++++", 8, 17 },
	};
	bool suspect[41], growing[41];

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		int g = cases[c].grows_to, k = cases[c].suspect_to;

		steps_of(cases[c].plan, suspect, growing);
		if (!(growing[g] && !growing[g + 1] && suspect[k] && !suspect[k + 1] && !suspect[40]))
			fprintf(stderr, "%s: growing at %d, %d: %d %d; suspect at %d, %d, 40: %d %d %d\n", cases[c].plan,
				g, g + 1, growing[g], growing[g + 1], k, k + 1, suspect[k], suspect[k + 1], suspect[40]);
		CHECK(growing[g] && !growing[g + 1]);
		CHECK(suspect[k] && !suspect[k + 1] && !suspect[40]);
	}
}

/* A site that falls in some steps besides its rises: growth while it fell
 * in at most one of four steps it changed in (four rises, a fall), not when
 * more often (three rises, a fall: a working set that breathes). */
static void test_breathing(void)
{
	bool suspect[41], growing[41];

	steps_of("++++-++++-", suspect, growing);
	CHECK(growing[10] && suspect[10]);
	steps_of("+++-+++-+++-", suspect, growing);
	CHECK(!growing[12] && !suspect[12]);
}

/* The same program at any speed: a loop that fills the device (860
 * allocations, no free, no pause) is one round of time whether it runs in
 * 1 ms or, on a busy machine, in 300 ms with the scheduler stopping it for
 * up to 5 ms at a time: never growth, never a suspect. A program that
 * pauses 25 ms between its allocations grows at any speed. */
static void test_busy_machine(void)
{
	static const uint64_t step_ns[] = { 1000, 100000, 350000 };
	struct gmt__history h;
	struct gmt__entry e = entry(0, 1 << 20, 21, GMT_KIND_DEVICE, 0);
	const struct gmt__site *s;
	uint32_t rises, falls;
	uint64_t growth;

	CHECK(gmt__history_init(&h, 0) == 0);
	for (size_t speed = 0; speed < sizeof(step_ns) / sizeof(step_ns[0]); speed++) {
		uint64_t t = T0;

		for (int i = 0; i < 860; i++) {
			e.addr = 0x40000000 + ((uint64_t)i << 20);
			t += step_ns[speed] + (i % 50 == 49 ? 5 * MS : 0);
			change(&h, t, &e, true);
		}
		s = gmt__history_site(&h, 21);
		CHECK(s != NULL && !gmt__site_growing(&h, s, &rises, &falls, &growth));
		CHECK(!gmt__site_suspect(&h, s, &rises, &falls, &growth));
		CHECK(rises <= 1); /* the one round it all fell in */
		gmt__history_clear(&h);
		/* A burst the scheduler stopped for 15 to 40 ms at odd places:
		 * allocations alone, one round still, the same numbers. */
		for (int i = 0; i < 64; i++) {
			e.addr = 0x40000000 + ((uint64_t)i << 20);
			t += step_ns[speed] + (i % (7 + (int)speed) == 3 ? (15 + 5 * (uint64_t)(i % 6)) * MS : 0);
			change(&h, t, &e, true);
		}
		s = gmt__history_site(&h, 21);
		CHECK(s != NULL && !gmt__site_suspect(&h, s, &rises, &falls, &growth));
		CHECK(rises <= 1 && falls == 0);
		gmt__history_clear(&h);
		/* Paced, a free in each pause's round: the program's own pauses
		 * are rounds. */
		for (int i = 0; i < 8; i++) {
			struct gmt__entry tmp = entry(0x80000000, 1 << 20, 22, GMT_KIND_DEVICE, 0);

			e.addr = 0x40000000 + ((uint64_t)i << 20);
			t += 25 * MS + step_ns[speed];
			change(&h, t, &e, true);
			change(&h, t + 1000, &tmp, true);
			change(&h, t + 2000, &tmp, false);
		}
		s = gmt__history_site(&h, 21);
		CHECK(s != NULL && gmt__site_growing(&h, s, &rises, &falls, &growth));
		CHECK_U64(growth, 7u << 20);
		gmt__history_clear(&h);
	}
}

int main(void)
{
	test_events();
	test_series();
	test_sites();
	test_rhythm();
	test_busy_machine();
	test_startup_rise();
	test_breathing();
	printf("history: %d failed\n", check_failed);
	return check_failed != 0;
}
