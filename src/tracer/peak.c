/* The peak trigger: which high-water marks are tops worth keeping, a copy of
 * the state taken at a top (before the first event that may lower it), and
 * when a kept top is known to be the peak and is written. All of it under
 * the consumer's lock, on whichever thread applies the events. */
#include "tracer/tracer.h"

static bool peak_on(void)
{
	return (gmt__core.opt->snapshot_on & GMT_TRIGGER_PEAK) != 0;
}

/* `part` percent of `bytes`, rounded down. */
static uint64_t percent(uint64_t bytes, uint64_t part)
{
	return bytes / 100 * part + bytes % 100 * part / 100;
}

void gmt__peak_high(uint64_t time_ns)
{
	uint64_t kept = gmt__core.peak_kept_bytes;

	if (!peak_on())
		return;
	/* A top close above the one kept, soon after it, is not worth a copy
	 * of the whole state: a leak of a block a step over a large live set
	 * would copy it at every step. */
	if (gmt__core.peak_top || gmt__core.live_bytes >= kept + percent(kept, (uint64_t)gmt__core.opt->peak_step) ||
	    time_ns - gmt__core.peak_kept_ns >= GMT_PEAK_INTERVAL_NS) {
		gmt__core.peak_top = true;
		gmt__core.peak_top_ns = time_ns;
	}
}

/* The live bytes stand at a top: a copy of the state now, kept in place of
 * a lower one. Out of memory: this top goes uncopied, the one kept stays. */
static void keep(void)
{
	struct gmt__capture *c = gmt__snapshot_keep_peak();

	gmt__core.peak_top = false;
	if (c == NULL)
		return;
	gmt__snapshot_drop(gmt__core.peak_kept);
	gmt__core.peak_kept = c;
	gmt__core.peak_kept_bytes = gmt__core.live_bytes;
	gmt__core.peak_kept_ns = gmt__core.peak_top_ns;
}

void gmt__peak_before(uint8_t op)
{
	/* Only these take memory out of the table (an allocation replacing a
	 * stale entry of its address aside, state/apply.c). */
	if (op != GMT_OP_FREE && op != GMT_OP_RELEASE && op != GMT_OP_UNMAP && op != GMT_OP_CONTEXT_GONE)
		return;
	/* NOTE: a producer applying its full ring allocates nothing inside its
	 * hook (docs/internals.md, the folders' table): that top is lost, and
	 * the next one is copied. Rare: the background thread fell a whole
	 * ring behind one thread. */
	if (gmt__core.in_hook)
		gmt__core.peak_top = false;
	else
		keep();
}

bool gmt__peak_settle(bool exiting)
{
	uint64_t now, kept, written = gmt__core.peak_written_bytes;
	uint64_t step = (uint64_t)gmt__core.opt->peak_step;
	struct gmt__capture *c;
	bool counted;

	if (!peak_on() || (!gmt__core.peak_top && gmt__core.peak_kept == NULL && !exiting))
		return false;
	/* The exit writes the peak itself (the process must not end in the
	 * middle of a write here). */
	if (!exiting && atomic_load_explicit(&gmt__core.stopping, memory_order_relaxed))
		return false;
	now = gmt__now_ns(CLOCK_REALTIME);
	/* Standing at a top for a quiet stretch, or at the end: it is one. At
	 * the end, a top too close to the one kept to be copied (peak_high) is
	 * copied too: nothing is left to copy later. */
	if (gmt__core.peak_top ? exiting || now - gmt__core.peak_top_ns >= GMT_PEAK_QUIET_NS
			       : exiting && gmt__core.live_bytes == gmt__core.peak_bytes &&
					 gmt__core.peak_bytes > gmt__core.peak_kept_bytes)
		keep();
	c = gmt__core.peak_kept;
	if (c == NULL)
		return false;
	kept = gmt__core.peak_kept_bytes;
	if (exiting && kept <= written) {
		gmt__core.peak_kept = NULL;
		gmt__snapshot_drop(c);
		return false;
	}
	/* Known to be the peak: the live bytes fell well below it, or nothing
	 * higher came for a while, or the run ends. During the run a top is
	 * written only a step above the last one written, so that a program
	 * that grows writes a file per step, not per top. */
	if (!exiting && (kept < written + percent(written, step) ||
			 (gmt__core.live_bytes > kept - percent(kept, GMT_PEAK_FALL_PERCENT) &&
			  now - gmt__core.peak_kept_ns < GMT_PEAK_QUIET_NS)))
		return false;
	gmt__core.peak_kept = NULL;
	gmt__core.peak_written_bytes = kept;
	/* The background thread's write, which the exit waits for. */
	counted = !exiting;
	if (counted)
		atomic_fetch_add_explicit(&gmt__core.writes_in_flight, 1, memory_order_relaxed);
	gmt__core_unlock();
	gmt__snapshot_publish_peak(c);
	if (counted)
		atomic_fetch_sub_explicit(&gmt__core.writes_in_flight, 1, memory_order_release);
	return true;
}

void gmt__peak_fork_child(void)
{
	gmt__snapshot_drop(gmt__core.peak_kept);
	gmt__core.peak_kept = NULL;
	gmt__core.peak_top = gmt__core.in_hook = false;
	gmt__core.peak_top_ns = gmt__core.peak_kept_bytes = gmt__core.peak_kept_ns = gmt__core.peak_written_bytes = 0;
}
