/* The out-of-memory diagnosis (diagnose.h). The rules, in order:
 *
 * 0. With a framework allocator's own state: its request (what it asked of
 *    itself, which it may ask of the driver in pieces) counts for rule 1.
 * 1. A request larger than all this process could ever have of the device —
 *    what is free plus its own footprint, i.e. the device less other
 *    processes' memory and the untracked (the context) — never_fits: nothing
 *    the process frees makes room.
 * 1a. The framework's allocated bytes and its request past its own limit
 *    (JAX's bytes_limit, a CuPy pool's set_limit): framework_limit — its
 *    allocator refused without asking the driver.
 * 1b. With the framework's tensors known, growing sites whose growth covers
 *    the shortfall: growth, whatever else the request met — what the
 *    program kept is the cause; the allocator's fragmentation, released
 *    cache and the rest are listed beside it with their numbers.
 * 1c. The free bytes inside the framework's segments cover its request but
 *    no free block is that large: allocator_fragmentation — its segments are
 *    fragmented (PyTorch: expandable segments).
 * 2. A request no larger than what the driver reports free: fragmentation (the
 *    free bytes are not usable in one piece).
 * 3. Otherwise the request fell `shortfall` bytes short. Each candidate names
 *    memory that, given back, would have made room: fragmentation (bytes
 *    stranded in partly used pages), pool_reservation (pool memory reserved
 *    and unused), other_processes, growth (what growing sites added), untracked
 *    (used memory nobody tracked: context, modules, heaps, or allocations the
 *    tracer did not see). A candidate applies when it alone covers the
 *    shortfall; it is primary when it also holds at least a quarter as much
 *    as this process's other live memory, the largest such one winning.
 * 4. Otherwise exhaustion: this process's own live memory fills the device.
 *
 * Beside any of them, cache_released: in an episode of several failures the
 * program freed memory on the device between the first and this one (a
 * caching allocator releasing its cache) and the request still did not fit —
 * what is left is live, and releasing more cache will not help. */
#define _GNU_SOURCE
#include "analyze/diagnose.h"
#include "analyze/remedy.h"
#include "analyze/replay.h"
#include "util/parse.h"
#include "util/xlist.h"

#include <stdio.h>
#include <string.h>

static const char *const names[GMT_VERDICT_COUNT] = { GMT_VERDICTS(GMT_X_WORD) };

uint64_t gmt__fw_held_by_limit(const struct gmt__diag_input *in)
{
	return in->fw_torch && in->fw_known ? in->fw_allocated + in->fw_reserved_unallocated : in->fw_allocated;
}

const char *gmt__verdict_name(enum gmt__verdict v)
{
	return GMT_X_NAME(names, GMT_VERDICT_COUNT, v, "unknown");
}

static void rests(struct gmt__diag_verdict *v, const char *a, const char *b, const char *c, const char *d,
		  const char *e)
{
	v->rests_on[0] = a;
	v->rests_on[1] = b;
	v->rests_on[2] = c;
	v->rests_on[3] = d;
	v->rests_on[4] = e;
	v->rests_on[5] = NULL;
}

/* What the replay of the run under expandable segments (replay.h) says of
 * the allocator's fragmentation where they would not have served the
 * request: the verdict's detail says so (the remedy is then not offered). */
static void replay_clause(const struct gmt__diag_input *in, struct gmt__diag_verdict *v)
{
	const struct gmt__rp_expandable *rp = in->replay;
	size_t at = strlen(v->detail), k = 0;
	char a[32], b[32];

	if (rp == NULL || !rp->replayed || rp->fits)
		return;
	while (k < 4 && v->rests_on[k] != NULL)
		k++;
	v->rests_on[k] = "replay_fits";
	v->rests_on[k + 1] = NULL;
	if (rp->failed && rp->fail_no == 0)
		snprintf(v->detail + at, sizeof(v->detail) - at,
			 "; replayed with expandable segments it would not have helped: a tensor live before the "
			 "history (%s) does not fit",
			 gmt__human_bytes(a, sizeof(a), rp->fail_size));
	else if (rp->failed && rp->fail_no < rp->request_no)
		snprintf(v->detail + at, sizeof(v->detail) - at,
			 "; replayed with expandable segments it would not have helped: request #%llu (%s) fails "
			 "before it",
			 (unsigned long long)rp->fail_no, gmt__human_bytes(a, sizeof(a), rp->fail_size));
	else
		snprintf(v->detail + at, sizeof(v->detail) - at,
			 "; replayed with expandable segments it would not have helped: the request still fails, "
			 "%s reserved of the %s PyTorch could hold",
			 gmt__human_bytes(a, sizeof(a), rp->fail_reserved), gmt__human_bytes(b, sizeof(b), rp->device_bytes));
}

/* Fills the verdict's detail and the numbers it rests on. */
static void describe(const struct gmt__diag_input *in, const struct gmt__diagnosis *d,
		     struct gmt__diag_verdict *v)
{
	char a[32], b[32], c[32];

	switch (v->verdict) {
	case GMT_VERDICT_NEVER_FITS: {
		/* The framework's own request when it is the larger: PyTorch's
		 * expandable segments ask the driver a page at a time. */
		bool fw = in->fw_requested > d->needed;
		uint64_t asked = fw ? in->fw_requested : in->requested;
		const char *what = fw ? "the framework's request" : "the request";

		rests(v, fw ? "framework_requested_bytes" : "requested_bytes", "capacity_bytes", "total_bytes",
		      "other_processes_bytes", "untracked_bytes");
		if ((fw ? in->fw_requested : d->needed) > in->state->total_bytes)
			snprintf(v->detail, sizeof(v->detail), "%s alone (%s) is larger than the device (%s)", what,
				 gmt__human_bytes(a, sizeof(a), asked), gmt__human_bytes(b, sizeof(b), in->state->total_bytes));
		else
			snprintf(v->detail, sizeof(v->detail),
				 "%s (%s) is larger than all this process could have of the device (%s: "
				 "its %s less what other processes and untracked use hold), even with nothing of its own live",
				 what, gmt__human_bytes(a, sizeof(a), asked), gmt__human_bytes(b, sizeof(b), d->capacity),
				 gmt__human_bytes(c, sizeof(c), in->state->total_bytes));
		break;
	}
	case GMT_VERDICT_ALLOCATOR_FRAGMENTATION:
		rests(v, "framework_requested_bytes", "reserved_unallocated_bytes", "largest_free_block_bytes", NULL, NULL);
		snprintf(v->detail, sizeof(v->detail),
			 "the framework's allocator holds %s free inside its segments, enough for the %s it needed, but its "
			 "largest free block is %s: its segments are fragmented",
			 gmt__human_bytes(a, sizeof(a), in->fw_reserved_unallocated),
			 gmt__human_bytes(b, sizeof(b), in->fw_requested), gmt__human_bytes(c, sizeof(c), in->fw_largest_free));
		if (v != &d->v[0] && d->v[0].verdict == GMT_VERDICT_GROWTH) {
			/* What the growing site kept would be free too. */
			size_t at = strlen(v->detail);

			rests(v, "framework_requested_bytes", "reserved_unallocated_bytes", "largest_free_block_bytes",
			      "growth_top_bytes", NULL);
			snprintf(v->detail + at, sizeof(v->detail) - at, "; without what %s kept (%s), %s of them would be free",
				 in->growth_top_label != NULL ? in->growth_top_label : "the growing site",
				 gmt__human_bytes(a, sizeof(a), in->growth_top_bytes),
				 gmt__human_bytes(b, sizeof(b), in->fw_reserved_unallocated + in->growth_top_bytes));
		}
		replay_clause(in, v);
		break;
	case GMT_VERDICT_FRAMEWORK_LIMIT:
		/* PyTorch's reserved bytes: its allocated and the free inside its
		 * segments. */
		rests(v, "framework_requested_bytes", "framework_allocated_bytes", "framework_limit_bytes", "free_bytes",
		      in->fw_torch && in->fw_known ? "reserved_unallocated_bytes" : NULL);
		snprintf(v->detail, sizeof(v->detail),
			 "%s's allocator refused it on its own: the %s it %s and the %s asked exceed its limit of %s",
			 in->fw_name != NULL ? in->fw_name : "the framework",
			 gmt__human_bytes(a, sizeof(a), gmt__fw_held_by_limit(in)), in->fw_torch ? "reserves" : "holds",
			 gmt__human_bytes(b, sizeof(b), in->fw_requested), gmt__human_bytes(c, sizeof(c), in->fw_limit));
		if (d->have_mem) {
			size_t at = strlen(v->detail);

			snprintf(v->detail + at, sizeof(v->detail) - at, " (the device has %s free)",
				 gmt__human_bytes(a, sizeof(a), in->state->free_bytes));
		}
		break;
	case GMT_VERDICT_CACHE_RELEASED:
		rests(v, "released_bytes", "released_count", "episode_failures", "tracked_total_bytes", NULL);
		snprintf(v->detail, sizeof(v->detail),
			 "over the episode's %llu failures the program freed %s in %llu allocation%s and the request "
			 "still did not fit: the %s left is live (freeing cache will not help)",
			 (unsigned long long)in->episode_failures, gmt__human_bytes(a, sizeof(a), in->released_bytes),
			 (unsigned long long)in->released_count, in->released_count == 1 ? "" : "s",
			 gmt__human_bytes(b, sizeof(b), d->tracked_total));
		break;
	case GMT_VERDICT_EXHAUSTION:
		if (d->have_mem && v != &d->v[0] && v->bytes < d->tracked_total) {
			/* Beside another verdict: the rest of this process's memory,
			 * which alone would have made room too. */
			rests(v, "tracked_total_bytes", "growth_bytes", "shortfall_bytes", NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "this process's live memory besides what growing sites gained (%s of %s) is more than "
				 "the %s the request fell short",
				 gmt__human_bytes(a, sizeof(a), v->bytes), gmt__human_bytes(b, sizeof(b), d->tracked_total),
				 gmt__human_bytes(c, sizeof(c), d->shortfall));
		} else if (d->have_mem && v != &d->v[0]) {
			rests(v, "tracked_total_bytes", "shortfall_bytes", NULL, NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "this process holds %s live on the device, more than the %s the request fell short",
				 gmt__human_bytes(a, sizeof(a), v->bytes), gmt__human_bytes(b, sizeof(b), d->shortfall));
		} else if (d->have_mem) {
			rests(v, "requested_bytes", "free_bytes", "tracked_total_bytes", NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "this process holds %s live on the device; %s free is less than the %s asked for",
				 gmt__human_bytes(a, sizeof(a), v->bytes), gmt__human_bytes(b, sizeof(b), in->state->free_bytes),
				 gmt__human_bytes(c, sizeof(c), in->requested));
			if (in->step_tensors && in->fw_known && in->fw_allocated >= in->step_live_bytes) {
				/* What the step needs against what earlier steps left. */
				size_t at = strlen(v->detail);

				rests(v, "requested_bytes", "free_bytes", "tracked_total_bytes", "step_live_bytes",
				      "framework_allocated_bytes");
				snprintf(v->detail + at, sizeof(v->detail) - at,
					 "; of the framework's tensors, step %llu's own hold %s and earlier steps left %s",
					 (unsigned long long)in->step, gmt__human_bytes(a, sizeof(a), in->step_live_bytes),
					 gmt__human_bytes(b, sizeof(b), in->fw_allocated - in->step_live_bytes));
			}
		} else {
			rests(v, "requested_bytes", "tracked_total_bytes", NULL, NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "this process holds %s live on the device (the driver did not say what is free)",
				 gmt__human_bytes(a, sizeof(a), v->bytes));
		}
		break;
	case GMT_VERDICT_FRAGMENTATION:
		if (d->have_mem && d->needed <= in->state->free_bytes) {
			rests(v, "requested_bytes", "free_bytes", NULL, NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "the driver reports %s free, enough for %s, yet the allocation failed: the free memory is not usable in one piece",
				 gmt__human_bytes(a, sizeof(a), in->state->free_bytes), gmt__human_bytes(b, sizeof(b), in->requested));
		} else {
			rests(v, "shortfall_bytes", "stranded_bytes", "pages_partial", NULL, NULL);
			snprintf(v->detail, sizeof(v->detail),
				 "%s lie unused in %llu partly used pages of %s, pinned by small live allocations; the request fell %s short",
				 gmt__human_bytes(a, sizeof(a), in->pages.stranded_bytes), (unsigned long long)in->pages.partial,
				 gmt__human_bytes(b, sizeof(b), in->pages.granularity), gmt__human_bytes(c, sizeof(c), d->shortfall));
		}
		break;
	case GMT_VERDICT_POOL:
		rests(v, "pool_reserved_bytes", "pool_used_bytes", "shortfall_bytes", NULL, NULL);
		snprintf(v->detail, sizeof(v->detail),
			 "stream-ordered pools hold %s reserved but unused (trim them, or lower their release threshold); the request fell %s short",
			 gmt__human_bytes(a, sizeof(a), v->bytes), gmt__human_bytes(b, sizeof(b), d->shortfall));
		break;
	case GMT_VERDICT_OTHERS:
		rests(v, "other_processes_bytes", "shortfall_bytes", NULL, NULL, NULL);
		snprintf(v->detail, sizeof(v->detail), "other processes hold %s of the device; the request fell %s short",
			 gmt__human_bytes(a, sizeof(a), v->bytes), gmt__human_bytes(b, sizeof(b), d->shortfall));
		break;
	case GMT_VERDICT_GROWTH: {
		size_t at;

		rests(v, "growth_bytes", "growth_sites", "shortfall_bytes", NULL, NULL);
		at = (size_t)snprintf(v->detail, sizeof(v->detail), "%d allocation site%s kept growing and added %s (%s)",
				      in->growth_sites, in->growth_sites == 1 ? "" : "s",
				      gmt__human_bytes(a, sizeof(a), v->bytes),
				      in->growth_sites == 1 ? "a leak suspect" : "leak suspects");
		/* Which site, and at what pace. */
		if (in->growth_top_label != NULL && at < sizeof(v->detail)) {
			rests(v, "growth_bytes", "growth_sites", "shortfall_bytes", "growth_top_stack", "growth_top_bytes");
			if (in->growth_sites == 1)
				at += (size_t)snprintf(v->detail + at, sizeof(v->detail) - at, ": %s", in->growth_top_label);
			else
				at += (size_t)snprintf(v->detail + at, sizeof(v->detail) - at, ", the most at %s (%s)",
						       in->growth_top_label,
						       gmt__human_bytes(a, sizeof(a), in->growth_top_bytes));
			if (in->growth_top_steps > 0 && at < sizeof(v->detail))
				at += (size_t)snprintf(v->detail + at, sizeof(v->detail) - at, ", %s a step over %llu steps",
						       gmt__human_bytes(a, sizeof(a),
									in->growth_top_step_bytes / in->growth_top_steps),
						       (unsigned long long)in->growth_top_steps);
		}
		if (at < sizeof(v->detail))
			snprintf(v->detail + at, sizeof(v->detail) - at, "; the request fell %s short",
				 gmt__human_bytes(b, sizeof(b), d->shortfall));
		break;
	}
	case GMT_VERDICT_UNTRACKED:
		rests(v, "used_bytes", "footprint_bytes", "other_processes_bytes", "untracked_bytes", NULL);
		snprintf(v->detail, sizeof(v->detail),
			 "%s of used memory is not this process's tracked memory (the CUDA context, modules, heaps, or allocations not seen)%s; the request fell %s short",
			 gmt__human_bytes(a, sizeof(a), v->bytes),
			 in->state != NULL && !in->state->have_others ? ", other processes' memory included" : "",
			 gmt__human_bytes(b, sizeof(b), d->shortfall));
		break;
	case GMT_VERDICT_COUNT:
		break;
	}
}

static void add(struct gmt__diagnosis *d, enum gmt__verdict verdict, uint64_t bytes)
{
	struct gmt__diag_verdict *v = &d->v[d->nverdicts++];

	memset(v, 0, sizeof(*v));
	v->verdict = verdict;
	v->bytes = bytes;
}

void gmt__diagnose(const struct gmt__diag_input *in, struct gmt__diagnosis *d)
{
	const struct gmt__device_state *st = in->state;
	uint64_t gran = in->pages.granularity > 0 ? in->pages.granularity : GMT_DEFAULT_GRANULARITY;
	uint64_t cand[GMT_VERDICT_COUNT] = { 0 }, own, others;
	bool applies[GMT_VERDICT_COUNT] = { false };
	int best = -1;
	bool fw_fragmented, growth_first;
	char a[32], b[32], c[32];

	memset(d, 0, sizeof(*d));
	d->needed = (in->requested + gran - 1) / gran * gran;
	if (d->needed < in->requested)
		d->needed = in->requested;
	for (int k = 0; k < GMT_KIND_COUNT; k++) {
		if (k != GMT_KIND_MANAGED)
			d->tracked_total += in->tracked[k];
	}
	own = d->tracked_total > in->growth_bytes ? d->tracked_total - in->growth_bytes : 0;
	d->have_mem = st != NULL && st->have_mem;
	d->have_pools = st != NULL && st->have_pools;
	if (d->have_pools)
		d->pool_unused = st->pool_reserved > st->pool_used ? st->pool_reserved - st->pool_used : 0;
	d->footprint = in->pages.pages * gran + (d->have_pools ? st->pool_reserved : in->tracked[GMT_KIND_ASYNC]) +
		       in->tracked[GMT_KIND_VMM] + in->tracked[GMT_KIND_ARRAY];
	others = st != NULL && st->have_others ? st->others_bytes : 0;

	if (d->have_mem) {
		d->used = st->total_bytes - st->free_bytes;
		d->shortfall = d->needed > st->free_bytes ? d->needed - st->free_bytes : 0;
		d->have_untracked = true;
		d->untracked = d->used > d->footprint + others ? d->used - d->footprint - others : 0;
		d->capacity = st->free_bytes + d->footprint;
		if (d->needed > d->capacity || in->fw_requested > d->capacity) {
			add(d, GMT_VERDICT_NEVER_FITS, d->needed > in->fw_requested ? d->needed : in->fw_requested);
			goto done;
		}
	}
	if (in->fw_limit > 0 && in->fw_requested > 0 && gmt__fw_held_by_limit(in) + in->fw_requested > in->fw_limit) {
		add(d, GMT_VERDICT_FRAMEWORK_LIMIT, in->fw_limit);
		goto done;
	}
	if (!d->have_mem) {
		/* Without the driver's numbers only growth can be judged. */
		if (in->growth_sites > 0 && in->growth_bytes > 0)
			add(d, GMT_VERDICT_GROWTH, in->growth_bytes);
		add(d, GMT_VERDICT_EXHAUSTION, own);
		goto done;
	}
	fw_fragmented = in->fw_known && in->fw_largest_known && in->fw_requested > 0 &&
			in->fw_reserved_unallocated >= in->fw_requested && in->fw_largest_free < in->fw_requested;
	growth_first = in->tensors && d->shortfall > 0 && in->growth_sites > 0 && in->growth_bytes >= d->shortfall;
	if (fw_fragmented && !growth_first) {
		add(d, GMT_VERDICT_ALLOCATOR_FRAGMENTATION, in->fw_reserved_unallocated);
		goto done;
	}
	if (d->shortfall == 0) {
		add(d, GMT_VERDICT_FRAGMENTATION, st->free_bytes);
		goto done;
	}
	cand[GMT_VERDICT_FRAGMENTATION] = in->pages.stranded_bytes;
	cand[GMT_VERDICT_POOL] = d->pool_unused;
	cand[GMT_VERDICT_OTHERS] = others;
	cand[GMT_VERDICT_GROWTH] = in->growth_sites > 0 ? in->growth_bytes : 0;
	cand[GMT_VERDICT_UNTRACKED] = d->untracked;
	for (int v = GMT_VERDICT_FRAGMENTATION; v <= GMT_VERDICT_UNTRACKED; v++) {
		applies[v] = cand[v] > 0 && cand[v] >= d->shortfall;
		if (applies[v] && cand[v] >= own / 4 &&
		    (best < 0 || cand[v] > cand[best]))
			best = v;
	}
	applies[GMT_VERDICT_EXHAUSTION] = own >= d->shortfall;
	cand[GMT_VERDICT_EXHAUSTION] = own;
	/* Beside a growth that comes first, the fragmentation it met. */
	applies[GMT_VERDICT_ALLOCATOR_FRAGMENTATION] = growth_first && fw_fragmented;
	cand[GMT_VERDICT_ALLOCATOR_FRAGMENTATION] = in->fw_reserved_unallocated;
	if (growth_first)
		best = GMT_VERDICT_GROWTH;
	if (best < 0)
		best = GMT_VERDICT_EXHAUSTION;
	/* Exhaustion as the verdict counts all this process holds; beside
	 * another, what it holds besides what growing sites gained. */
	add(d, (enum gmt__verdict)best, best == GMT_VERDICT_EXHAUSTION ? d->tracked_total : cand[best]);
	/* The others that alone would have made room, largest first. */
	for (;;) {
		int next = -1;

		for (int v = 0; v < GMT_VERDICT_COUNT; v++) {
			bool listed = false;

			for (int i = 0; i < d->nverdicts; i++)
				listed |= d->v[i].verdict == (enum gmt__verdict)v;
			if (!listed && applies[v] && (next < 0 || cand[v] > cand[next]))
				next = v;
		}
		if (next < 0)
			break;
		add(d, (enum gmt__verdict)next, cand[next]);
	}
done:
	if (in->episode_failures > 1 && in->released_bytes > 0)
		add(d, GMT_VERDICT_CACHE_RELEASED, in->released_bytes);
	d->primary = d->v[0].verdict;
	for (int i = 0; i < d->nverdicts; i++)
		describe(in, d, &d->v[i]);
	if (d->have_mem)
		snprintf(d->summary, sizeof(d->summary), "%s: %s requested with %s free of %s; %s",
			 gmt__verdict_name(d->primary), gmt__human_bytes(a, sizeof(a), in->requested),
			 gmt__human_bytes(b, sizeof(b), st->free_bytes), gmt__human_bytes(c, sizeof(c), st->total_bytes),
			 d->v[0].detail);
	else
		snprintf(d->summary, sizeof(d->summary), "%s: %s requested (free memory not known); %s",
			 gmt__verdict_name(d->primary), gmt__human_bytes(a, sizeof(a), in->requested), d->v[0].detail);
	gmt__remedies(in, d);
}
