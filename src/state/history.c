/* The bounded event history, the series of live bytes and the per-site
 * aggregates (history.h). */
#define _GNU_SOURCE
#include "state/history.h"

#include "record/event.h"
#include "util/map.h"
#include "util/xlist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SITES_FIRST 4096

int gmt__history_init(struct gmt__history *h, size_t max_events)
{
	memset(h, 0, sizeof(*h));
	h->interval_ns = GMT_SERIES_INTERVAL_NS;
	if (max_events > 0) {
		h->events = gmt__map(max_events * sizeof(*h->events));
		if (h->events == NULL)
			return -ENOMEM;
		h->cap = max_events;
	}
	/* Untouched pages cost nothing: columns never used stay unbacked. */
	h->pt_time = gmt__map(GMT_SERIES_POINTS * sizeof(uint64_t));
	h->pt_val = gmt__map((size_t)GMT_SERIES_COLUMNS * GMT_SERIES_POINTS * sizeof(uint64_t));
	h->pt_max = gmt__map((size_t)GMT_SERIES_COLUMNS * GMT_SERIES_POINTS * sizeof(uint64_t));
	h->sites = gmt__map(SITES_FIRST * sizeof(*h->sites));
	h->nsites = h->sites != NULL ? SITES_FIRST : 0;
	if (h->pt_time == NULL || h->pt_val == NULL || h->pt_max == NULL || h->sites == NULL)
		return -ENOMEM;
	return 0;
}

void gmt__history_destroy(struct gmt__history *h)
{
	if (h->events != NULL)
		munmap(h->events, h->cap * sizeof(*h->events));
	if (h->pt_time != NULL)
		munmap(h->pt_time, GMT_SERIES_POINTS * sizeof(uint64_t));
	if (h->pt_val != NULL)
		munmap(h->pt_val, (size_t)GMT_SERIES_COLUMNS * GMT_SERIES_POINTS * sizeof(uint64_t));
	if (h->pt_max != NULL)
		munmap(h->pt_max, (size_t)GMT_SERIES_COLUMNS * GMT_SERIES_POINTS * sizeof(uint64_t));
	if (h->sites != NULL)
		munmap(h->sites, h->nsites * sizeof(*h->sites));
	memset(h, 0, sizeof(*h));
}

void gmt__history_clear(struct gmt__history *h)
{
	h->head = h->count = 0;
	h->dropped = 0;
	h->interval_ns = GMT_SERIES_INTERVAL_NS;
	h->start_ns = h->next_ns = 0;
	h->window = 0;
	memset(h->round, 0, sizeof(h->round));
	h->last_change_ns = 0;
	memset(h->round_events, 0, sizeof(h->round_events));
	memset(h->round_freed, 0, sizeof(h->round_freed));
	h->ncols = 0;
	memset(h->cur, 0, sizeof(h->cur));
	memset(h->max, 0, sizeof(h->max));
	h->npoints = 0;
	h->overflow = 0;
	if (h->sites != NULL)
		memset(h->sites, 0, h->nsites * sizeof(*h->sites));
	h->sites_failed = false;
	h->stepped = false;
	h->step = h->step_seq = h->step_ns = h->first_step_seq = 0;
}

/* --- the series ------------------------------------------------------------ */

static uint64_t *col_of(uint64_t *base, int col)
{
	return base + (size_t)col * GMT_SERIES_POINTS;
}

/* Halves the points: each pair becomes one point at the later time, with the
 * later value and the higher maximum. */
static void series_merge(struct gmt__history *h)
{
	size_t half = h->npoints / 2;

	for (size_t i = 0; i < half; i++) {
		h->pt_time[i] = h->pt_time[2 * i + 1];
		for (int c = 0; c < h->ncols; c++) {
			uint64_t *v = col_of(h->pt_val, c), *m = col_of(h->pt_max, c);

			v[i] = v[2 * i + 1];
			m[i] = m[2 * i] > m[2 * i + 1] ? m[2 * i] : m[2 * i + 1];
		}
	}
	/* An odd last point stays on its own. */
	if (h->npoints % 2 != 0) {
		h->pt_time[half] = h->pt_time[h->npoints - 1];
		for (int c = 0; c < h->ncols; c++) {
			col_of(h->pt_val, c)[half] = col_of(h->pt_val, c)[h->npoints - 1];
			col_of(h->pt_max, c)[half] = col_of(h->pt_max, c)[h->npoints - 1];
		}
		half++;
	}
	h->npoints = half;
	h->interval_ns *= 2;
}

/* Closes the open window at time t. */
static void series_point(struct gmt__history *h, uint64_t t)
{
	if (h->npoints == GMT_SERIES_POINTS)
		series_merge(h);
	h->pt_time[h->npoints] = t;
	for (int c = 0; c < h->ncols; c++) {
		col_of(h->pt_val, c)[h->npoints] = h->cur[c];
		col_of(h->pt_max, c)[h->npoints] = h->max[c];
		h->max[c] = h->cur[c];
	}
	h->npoints++;
	h->window++;
}

void gmt__history_tick(struct gmt__history *h, uint64_t now_ns)
{
	if (h->pt_time == NULL)
		return;
	if (h->next_ns == 0) {
		h->start_ns = now_ns;
		h->next_ns = now_ns + h->interval_ns;
		return;
	}
	if (now_ns < h->next_ns)
		return;
	series_point(h, h->next_ns);
	/* A quiet stretch: one flat point at its last boundary stands for it. */
	if (now_ns >= h->next_ns + h->interval_ns) {
		h->next_ns += (now_ns - h->next_ns) / h->interval_ns * h->interval_ns;
		series_point(h, h->next_ns);
	}
	h->next_ns += h->interval_ns;
}

static int column(struct gmt__history *h, int device, int kind)
{
	for (int c = 0; c < h->ncols; c++) {
		if (h->col_device[c] == device && h->col_kind[c] == kind)
			return c;
	}
	if (h->ncols == GMT_SERIES_COLUMNS)
		return -1;
	/* A new column was 0 at every earlier point (the mapping is zero-filled). */
	h->col_device[h->ncols] = (int16_t)device;
	h->col_kind[h->ncols] = (uint8_t)kind;
	return h->ncols++;
}

uint64_t gmt__history_live(const struct gmt__history *h, int device, int kind)
{
	for (int c = 0; c < h->ncols; c++) {
		if (h->col_device[c] == device && h->col_kind[c] == kind)
			return h->cur[c];
	}
	return 0;
}

/* --- sites ----------------------------------------------------------------- */

static struct gmt__site *site_of(struct gmt__history *h, uint32_t id)
{
	if (h->sites == NULL)
		return NULL;
	if (id >= h->nsites) {
		size_t n = h->nsites;
		struct gmt__site *bigger;

		while (n <= id)
			n *= 2;
		bigger = mremap(h->sites, h->nsites * sizeof(*h->sites), n * sizeof(*h->sites), MREMAP_MAYMOVE);
		if (bigger == MAP_FAILED) {
			h->sites_failed = true;
			return NULL;
		}
		h->sites = bigger;
		h->nsites = n;
	}
	return &h->sites[id];
}

/* Closes the site's round of scale k when the history's moved on since it
 * began. */
static void site_roll(struct gmt__site *s, int k, uint32_t round)
{
	struct gmt__site_scale *c = &s->scale[k];

	if (c->round == round)
		return;
	if (s->live_bytes > c->mark_bytes) {
		if (c->rises++ == 0)
			c->first_rise = c->round;
		c->last_rise = c->round;
	} else if (s->live_bytes < c->mark_bytes) {
		c->falls++;
	}
	if (c->based_at == 0) {
		c->base_bytes = s->live_bytes;
		c->based_at = round + 1;
	}
	c->mark_bytes = s->live_bytes;
	c->round = round;
}

const struct gmt__site *gmt__history_site(const struct gmt__history *h, uint32_t id)
{
	if (h->sites == NULL || id >= h->nsites || (h->sites[id].allocs == 0 && h->sites[id].live_count == 0))
		return NULL;
	return &h->sites[id];
}

/* A site at one scale: rises and falls counting the open round, whether it
 * kept growing (the counts alone), and whether it grows still, now being
 * round `now`. */
struct scale_verdict {
	uint32_t rises, falls;
	bool grew, grows;
};

static struct scale_verdict judge_scale(const struct gmt__site *s, int k, uint32_t now)
{
	const struct gmt__site_scale *c = &s->scale[k];
	bool rising = s->live_bytes > c->mark_bytes;
	struct scale_verdict v = { c->rises + rising, c->falls + (s->live_bytes < c->mark_bytes), false, false };
	/* The open round is the site's: the one its last change fell in. */
	uint32_t first = c->rises > 0 ? c->first_rise : c->round, last = rising ? c->round : c->last_rise;
	uint32_t span = last - first > GMT_GROWTH_MIN_RISES ? last - first : GMT_GROWTH_MIN_RISES;

	/* Grew: rose steadily for at least a quarter of the rounds since its
	 * first rise (not a burst at start-up followed by a long flat run). */
	v.grew = v.rises >= GMT_GROWTH_MIN_RISES && v.falls * 4 <= v.rises && (now - first) <= 4 * span;
	v.grows = v.grew && now - last <= span;
	return v;
}

/* The scale a site grows (still: `still`) at — time first, then the
 * longest rounds — or -1; in a program that marked GMT_GROWTH_MIN_RISES
 * steps or more, its steps alone.
 * NOTE: the steps are the program's own rhythm, the same on any machine:
 * what rises within a step and falls by its end (a batch's activations) is
 * the step's, not a leak, however the pauses or the rounds of
 * changes happen to cut it. */
static int growing_scale(const struct gmt__history *h, const struct gmt__site *s, bool still)
{
	/* time, then 256, 32 and 4 changes; the steps before them */
	static const int order[GMT_SCALES] = { 0, GMT_SCALE_STEPS, 3, 2, 1 };

	if (h->round[GMT_SCALE_STEPS] >= GMT_GROWTH_MIN_RISES) {
		struct scale_verdict v = judge_scale(s, GMT_SCALE_STEPS, h->round[GMT_SCALE_STEPS]);

		return (still ? v.grows : v.grew) ? GMT_SCALE_STEPS : -1;
	}
	for (int i = 0; i < GMT_SCALES; i++) {
		int k = order[i];
		struct scale_verdict v = judge_scale(s, k, h->round[k]);

		if (still ? v.grows : v.grew)
			return k;
	}
	return -1;
}

/* What the site gained above the end of its first round of scale k, to
 * `bytes`. */
static uint64_t gained(const struct gmt__site *s, int k, uint64_t bytes)
{
	uint64_t base = s->scale[k].based_at ? s->scale[k].base_bytes : 0;

	return bytes > base ? bytes - base : 0;
}

/* The scale whose counts are shown for a site that grows at none: rounds of
 * changes, which the program's order alone decides, never the time scale,
 * whose pauses a busy machine's scheduler moves. */
#define GMT_SCALE_SHOWN 1

bool gmt__site_growing(const struct gmt__history *h, const struct gmt__site *s, uint32_t *rises, uint32_t *falls,
		       uint64_t *growth)
{
	int k = growing_scale(h, s, true);
	int shown = k >= 0 ? k : GMT_SCALE_SHOWN;
	struct scale_verdict v = judge_scale(s, shown, h->round[shown]);

	*rises = v.rises;
	*falls = v.falls;
	*growth = gained(s, shown, s->live_bytes);
	return k >= 0 && *growth > 0;
}

uint64_t gmt__site_step_growth(const struct gmt__history *h, const struct gmt__site *s, uint64_t *steps)
{
	const struct gmt__site_scale *c = &s->scale[GMT_SCALE_STEPS];

	*steps = 0;
	/* Whole steps only: from the start of the round its base was taken at
	 * to the start of its open one — what the open step's own temporaries
	 * add is left out. */
	if (h->round[GMT_SCALE_STEPS] == 0 || c->rises == 0 || c->based_at == 0 || c->round < c->based_at)
		return 0;
	*steps = c->round - (c->based_at - 1);
	return c->mark_bytes > c->base_bytes ? c->mark_bytes - c->base_bytes : 0;
}

bool gmt__site_suspect(const struct gmt__history *h, const struct gmt__site *s, uint32_t *rises, uint32_t *falls,
		       uint64_t *growth)
{
	int k = growing_scale(h, s, false);
	int shown = k >= 0 ? k : GMT_SCALE_SHOWN;
	struct scale_verdict v = judge_scale(s, shown, h->round[shown]);

	*rises = v.rises;
	*falls = v.falls;
	*growth = gained(s, shown, s->peak_bytes);
	return k >= 0 && *growth > 0;
}

/* --- the events ------------------------------------------------------------ */

static void remember(struct gmt__history *h, const struct gmt__hist_event *ev)
{
	if (h->cap == 0)
		return;
	h->events[h->head] = *ev;
	h->head = h->head + 1 == h->cap ? 0 : h->head + 1;
	if (h->count < h->cap)
		h->count++;
	else
		h->dropped++;
}

const struct gmt__hist_event *gmt__history_event(const struct gmt__history *h, size_t i)
{
	size_t at = (h->head + h->cap - h->count + i) % h->cap;

	return &h->events[at];
}

void gmt__history_change(struct gmt__history *h, const struct gmt__entry *e, bool add,
			 const struct gmt__hist_cause *cause)
{
	struct gmt__hist_event ev = {
		.seq = cause->seq, .time_ns = cause->time_ns, .addr = e->addr, .size = e->size,
		.stack = e->stack, .tid = cause->tid, .api = cause->api,
		.op = add ? GMT_HIST_ALLOC : GMT_HIST_FREE, .kind = e->kind, .device = e->device,
		.stream = e->space == GMT_SPACE_HANDLE ? 0 : e->stream,
	};
	struct gmt__site *s;
	int c;

	if (h->pt_time == NULL)
		return;
	c = column(h, e->device, e->kind);
	if (c < 0) {
		h->overflow++;
	} else if (add) {
		h->cur[c] += e->size;
		if (h->cur[c] > h->max[c])
			h->max[c] = h->cur[c];
	} else {
		h->cur[c] -= e->size;
	}
	/* A round of time ends before a change that comes GMT_PAUSE_NS or
	 * more after the one before — the program paused (a sleep, a wait for
	 * the device, a step's compute) — once a free fell in it, as the
	 * rounds of changes do. A stream of changes without pause is one round
	 * however slowly a busy machine runs it.
	 * NOTE: a busy machine's scheduler stops a thread for tens of
	 * milliseconds, which reads as a pause: a burst of allocations alone
	 * (the device filled) must stay one round wherever those fall. */
	if (!cause->put_back) {
		if (h->last_change_ns != 0 && cause->time_ns >= h->last_change_ns + GMT_PAUSE_NS &&
		    h->round_freed[0]) {
			h->round[0]++;
			h->round_freed[0] = false;
		}
		h->round_freed[0] |= !add;
		if (cause->time_ns > h->last_change_ns)
			h->last_change_ns = cause->time_ns;
	}
	/* The rounds of the program's sequence (GMT_SCALES): one ends before
	 * this change when it holds its count of changes, a free among them. */
	for (int k = 1; k < GMT_SCALE_STEPS && !cause->put_back; k++) {
		static const uint32_t events[GMT_SCALES] = GMT_SCALE_EVENTS;

		if (h->round_events[k] >= events[k] && h->round_freed[k]) {
			h->round[k]++;
			h->round_events[k] = 0;
			h->round_freed[k] = false;
		}
		h->round_events[k]++;
		h->round_freed[k] |= !add;
	}
	s = site_of(h, e->stack);
	if (s != NULL) {
		for (int k = 0; k < GMT_SCALES; k++)
			site_roll(s, k, h->round[k]);
		if (add) {
			s->live_bytes += e->size;
			s->live_count++;
			if (!cause->put_back) {
				s->allocs++;
				s->alloc_bytes += e->size;
			}
			if (s->live_bytes > s->peak_bytes)
				s->peak_bytes = s->live_bytes;
		} else if (s->live_count > 0) {
			s->live_bytes -= e->size < s->live_bytes ? e->size : s->live_bytes;
			s->live_count--;
		}
	}
	remember(h, &ev);
}

void gmt__history_oom(struct gmt__history *h, const struct gmt__hist_cause *cause, uint64_t size,
		      uint8_t kind, int device, uint32_t stack)
{
	struct gmt__hist_event ev = {
		.seq = cause->seq, .time_ns = cause->time_ns, .size = size, .stack = stack,
		.tid = cause->tid, .api = cause->api, .op = GMT_HIST_OOM, .kind = kind,
		.device = (int16_t)device,
	};

	remember(h, &ev);
}

void gmt__history_step(struct gmt__history *h, const struct gmt__hist_cause *cause, uint64_t step)
{
	struct gmt__hist_event ev = {
		.seq = cause->seq, .time_ns = cause->time_ns, .addr = step, .tid = cause->tid,
		.op = GMT_HIST_STEP, .device = -1,
	};

	if (h->pt_time == NULL)
		return;
	h->round[GMT_SCALE_STEPS]++;
	if (!h->stepped)
		h->first_step_seq = cause->seq;
	h->stepped = true;
	h->step = step;
	h->step_seq = cause->seq;
	h->step_ns = cause->time_ns;
	remember(h, &ev);
}

const char *gmt__hist_op_name(enum gmt__hist_op op)
{
	static const char *const names[GMT_HIST_OP_COUNT] = { GMT_HIST_OPS(GMT_X_WORD) };

	return GMT_X_NAME(names, GMT_HIST_OP_COUNT, op, "alloc");
}

void gmt__history_regions(const struct gmt__history *h, gmt__region_fn *fn, void *ctx)
{
	if (h->events != NULL)
		fn(ctx, h->events, h->cap * sizeof(*h->events));
}

struct gmt__history *gmt__history_copy(const struct gmt__history *h)
{
	struct gmt__history *c = malloc(sizeof(*c));
	size_t cols = h->ncols > 0 ? (size_t)h->ncols : 1, series = cols * GMT_SERIES_POINTS * sizeof(uint64_t);

	if (c == NULL)
		return NULL;
	*c = *h;
	c->events = h->cap > 0 ? malloc(h->cap * sizeof(*h->events)) : NULL;
	c->pt_time = malloc(GMT_SERIES_POINTS * sizeof(uint64_t));
	/* Only the columns in use: the layout is [column][point]. */
	c->pt_val = malloc(series);
	c->pt_max = malloc(series);
	c->sites = h->nsites > 0 ? malloc(h->nsites * sizeof(*h->sites)) : NULL;
	if ((h->cap > 0 && c->events == NULL) || c->pt_time == NULL || c->pt_val == NULL || c->pt_max == NULL ||
	    (h->nsites > 0 && c->sites == NULL)) {
		gmt__history_copy_free(c);
		return NULL;
	}
	if (h->cap > 0)
		memcpy(c->events, h->events, h->cap * sizeof(*h->events));
	memcpy(c->pt_time, h->pt_time, GMT_SERIES_POINTS * sizeof(uint64_t));
	memcpy(c->pt_val, h->pt_val, (size_t)h->ncols * GMT_SERIES_POINTS * sizeof(uint64_t));
	memcpy(c->pt_max, h->pt_max, (size_t)h->ncols * GMT_SERIES_POINTS * sizeof(uint64_t));
	if (h->nsites > 0)
		memcpy(c->sites, h->sites, h->nsites * sizeof(*h->sites));
	return c;
}

void gmt__history_copy_free(struct gmt__history *copy)
{
	if (copy == NULL)
		return;
	free(copy->events);
	free(copy->pt_time);
	free(copy->pt_val);
	free(copy->pt_max);
	free(copy->sites);
	free(copy);
}
