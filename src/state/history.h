/* What the consumer remembers beyond the live set, for snapshots to tell how
 * memory got where it is: the last allocations and frees (a bounded history,
 * like PyTorch's max_entries), a time series of live bytes per device and kind,
 * and aggregates per allocation site (an interned stack) with the rises and
 * falls that growth detection reads. Only the consumer side touches it, under
 * the core's lock; memory comes from mmap, never malloc, because a producer
 * draining its own full ring applies events inside a hook. */
#ifndef GMT_HISTORY_H
#define GMT_HISTORY_H

#include "state/table.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Points the series keeps. When full, neighbours merge two by two and the
 * interval doubles: a run of any length keeps its whole shape. */
#define GMT_SERIES_POINTS 1024
/* The first interval between points. */
#define GMT_SERIES_INTERVAL_NS (10 * 1000000ull)
/* (device, kind) pairs the series tells apart; more are left out of it. */
#define GMT_SERIES_COLUMNS 64

/* Growth is judged at several scales at once, since the program's rhythm
 * (the length of one step of its loop) is not known: by time (a round
 * ends at each pause of the program, GMT_PAUSE_NS without an allocation or
 * a free) and by the program's own sequence, in rounds of at least 4, 32
 * and 256 allocations and frees; at every scale a round holds a free (a
 * burst of allocations alone — weights loaded, the device filled — is one
 * round, wherever a busy machine's scheduler stops the thread). At each scale a site rises or falls in a round when
 * its live bytes ended the round above or below where they began. A site
 * grew (a leak suspect) at a scale when it rose in at least
 * GMT_GROWTH_MIN_RISES rounds, fell in at most one round in four of those,
 * and rose for at least a quarter of the rounds since it first rose (not a
 * burst of allocations at start-up followed by a long flat run); it grows
 * still when besides it has been flat since its last rise no longer than it
 * was rising. It grows when it does at some scale: a leak is
 * found however fast the loop runs, while a step's allocations and frees
 * meet within one round of a scale that is long enough. A program that marks
 * its steps (gmt_step) has a fifth scale, exactly its own: one round a step;
 * once it marked GMT_GROWTH_MIN_RISES steps, growth is judged there alone. */
#define GMT_GROWTH_MIN_RISES 4
#define GMT_SCALES 5
#define GMT_SCALE_STEPS 4                     /* the scale of gmt_step's steps */
#define GMT_SCALE_EVENTS { 0, 4, 32, 256, 0 } /* 0: time (the program's pauses), or steps */
/* A pause of the program that ends a round of time: no allocation or free
 * for this long. Not the series' windows: where a window's edge falls in a
 * loop that allocates without pause depends on how fast the machine runs
 * it, and the same program must get the same verdict on a busy machine. */
#define GMT_PAUSE_NS (10 * 1000000ull)

/* What a history event is, X(ID, "word"): an allocation became live; it went
 * away (a free, a release, its context destroyed); an allocation failed with
 * out-of-memory; the program marked a step (gmt_step). tests/unit/
 * test_vocabulary.py holds the viewer's and the schema's copies to this list. */
#define GMT_HIST_OPS(X) X(ALLOC, "alloc") X(FREE, "free") X(OOM, "oom") X(STEP, "step")

enum gmt__hist_op {
#define GMT_X(id, word) GMT_HIST_##id,
	GMT_HIST_OPS(GMT_X)
#undef GMT_X
	GMT_HIST_OP_COUNT
};

const char *gmt__hist_op_name(enum gmt__hist_op op);

/* 48 bytes. For a free, `stack` is the allocation's (what was freed) and api,
 * tid, time and seq the freeing call's; for a step, addr is the step's
 * number. */
struct gmt__hist_event {
	uint64_t seq;     /* the event that caused it; an oom's failure ordinal */
	uint64_t time_ns; /* CLOCK_REALTIME */
	uint64_t addr;
	uint64_t size;
	uint32_t stack;
	uint32_t tid;
	uint16_t api;
	uint8_t op;   /* enum gmt__hist_op */
	uint8_t kind; /* enum gmt__kind */
	int16_t device;
	uint16_t stream; /* an alloc of kind async: its stream's id (record/streams.h), 0: not known */
};

/* One allocation site: an interned stack id (0: allocations without a stack). */
struct gmt__site {
	uint64_t live_bytes, live_count;
	uint64_t allocs, alloc_bytes; /* every allocation made there, and their bytes */
	uint64_t peak_bytes;          /* its highest live_bytes */
	struct gmt__site_scale {
		uint64_t base_bytes;  /* live_bytes when its first round closed (the round it began in: based_at) */
		uint64_t mark_bytes;  /* live_bytes when its round `round` began */
		uint32_t round;       /* the round (of this scale) mark_bytes belongs to */
		uint32_t rises, falls; /* closed rounds in which live_bytes rose, fell */
		uint32_t first_rise, last_rise; /* the first and last of those rises (rises > 0) */
		uint32_t based_at;    /* 1 + the round at whose start base_bytes was taken; 0: not yet */
	} scale[GMT_SCALES];
};

/* A stack of a history's per-stack sites, and its live bytes. */
struct gmt__site_ref {
	uint32_t id;
	uint64_t live;
};

/* What happened to memory, for the history and the series. */
struct gmt__hist_cause {
	uint64_t seq, time_ns;
	uint32_t tid;
	uint16_t api;
	bool put_back; /* not new: a VMM handle counted freed too soon (state/apply.c), a tensor seeded */
};

struct gmt__history {
	/* the event ring: the last `cap` events, oldest at (head - count) */
	struct gmt__hist_event *events;
	size_t cap, head, count;
	uint64_t dropped; /* events that fell out of the ring */

	/* the series: points[0..npoints) close windows of `interval_ns`; the
	 * open window ends at next_ns */
	uint64_t interval_ns, start_ns, next_ns;
	uint32_t window; /* windows closed since the start (never merged) */
	/* rounds closed since the start at each scale (GMT_SCALES; scale 0:
	 * the program's pauses), and the allocations and frees applied in its
	 * open one; the latest change's time (the pauses') */
	uint32_t round[GMT_SCALES], round_events[GMT_SCALES];
	uint64_t last_change_ns;
	bool round_freed[GMT_SCALES];
	int ncols;
	int16_t col_device[GMT_SERIES_COLUMNS];
	uint8_t col_kind[GMT_SERIES_COLUMNS];
	uint64_t cur[GMT_SERIES_COLUMNS], max[GMT_SERIES_COLUMNS];
	size_t npoints;
	uint64_t *pt_time; /* [GMT_SERIES_POINTS] */
	uint64_t *pt_val;  /* [GMT_SERIES_COLUMNS][GMT_SERIES_POINTS]: live at the point */
	uint64_t *pt_max;  /* the same: the highest live within the window */
	uint64_t overflow; /* changes of a (device, kind) without a column */

	/* the latest step marked (gmt_step), when stepped: its number, the
	 * seq of the first event after it, and its time; the same seq of the
	 * first step marked (what was allocated before it is the program's
	 * set-up: a model's weights) */
	bool stepped;
	uint64_t step, step_seq, step_ns, first_step_seq;

	/* the sites, indexed by stack id */
	struct gmt__site *sites;
	size_t nsites; /* capacity in ids */
	bool sites_failed;
};

/* Sets up an empty history keeping `max_events` events (0: none). Returns 0
 * or -ENOMEM (then nothing is kept, and every call below is harmless). */
int gmt__history_init(struct gmt__history *h, size_t max_events);

/* Gives back the memory of a history made by gmt__history_init (h itself
 * is the caller's). */
void gmt__history_destroy(struct gmt__history *h);

/* Forgets everything, keeping the memory (a fork child starts afresh). */
void gmt__history_clear(struct gmt__history *h);

/* Time passes: call before applying an event of time `now_ns`. Closes the
 * windows that ended before it. */
void gmt__history_tick(struct gmt__history *h, uint64_t now_ns);

/* Live entry e (memory: not a reservation or a mapping) was added or removed,
 * because of `cause`. */
void gmt__history_change(struct gmt__history *h, const struct gmt__entry *e, bool add,
			 const struct gmt__hist_cause *cause);

/* An allocation of `size` bytes of `kind` on `device` failed with
 * out-of-memory (failure: its ordinal). */
void gmt__history_oom(struct gmt__history *h, const struct gmt__hist_cause *cause, uint64_t size,
		      uint8_t kind, int device, uint32_t stack);

/* The program marked step `step` (gmt_step): in the history, and a round of
 * the steps' scale ends. */
void gmt__history_step(struct gmt__history *h, const struct gmt__hist_cause *cause, uint64_t step);

/* What site s gained over whole steps (bytes), and in *steps how many: from
 * the start of the step its base was taken at (its first, or the first after
 * it appeared) to the start of its open one, so that what the open step's
 * own temporaries add is left out. 0 and 0 when no step was marked, it never
 * rose in a closed step, or no whole step passed. */
uint64_t gmt__site_step_growth(const struct gmt__history *h, const struct gmt__site *s, uint64_t *steps);

/* The site of stack `id`, or NULL when it has none (never allocated). */
const struct gmt__site *gmt__history_site(const struct gmt__history *h, uint32_t id);

/* Rises and falls of a site of h counting its open round (live now against
 * where the round began), at the scale it grows at (else the scale of time),
 * and whether it is a growth suspect growing still (GMT_GROWTH_MIN_RISES);
 * *growth gets the bytes it rose by after its first round. */
bool gmt__site_growing(const struct gmt__history *h, const struct gmt__site *s, uint32_t *rises, uint32_t *falls,
		       uint64_t *growth);

/* Whether the site kept growing during the run, at some scale, even if it
 * stopped or fell back since (a loop that leaks per iteration and frees
 * everything at the end): the rises and falls as above, with *growth its
 * peak above its first round. The exit report's "leak suspects". */
bool gmt__site_suspect(const struct gmt__history *h, const struct gmt__site *s, uint32_t *rises, uint32_t *falls,
		       uint64_t *growth);

/* A copy of h for a snapshot to read without the consumer's lock: every
 * function above that reads works on it; nothing may change it. malloc'd;
 * NULL when memory cannot be had. Freed by gmt__history_copy_free. */
struct gmt__history *gmt__history_copy(const struct gmt__history *h);
void gmt__history_copy_free(struct gmt__history *copy);

/* Every region of memory the history owns that holds addresses, to fn. */
void gmt__history_regions(const struct gmt__history *h, gmt__region_fn *fn, void *ctx);

/* The i-th event of the ring, oldest first (i < h->count). */
const struct gmt__hist_event *gmt__history_event(const struct gmt__history *h, size_t i);

/* The live bytes of (device, kind) now, 0 when it never had any. */
uint64_t gmt__history_live(const struct gmt__history *h, int device, int kind);

#endif /* GMT_HISTORY_H */
