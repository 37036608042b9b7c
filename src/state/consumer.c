/* The consumer's second half: the events of every thread's ring applied in
 * global order, by the background thread or by whoever holds the lock, and
 * the background thread itself. */
#define _GNU_SOURCE
#include "tracer/tracer.h"

#include "record/pystack.h"
#include "record/unwind.h"
#include "util/log.h"

#include <sched.h>
#include <string.h>
#include <sys/syscall.h>

uint64_t gmt__drain_until(uint64_t target)
{
	uint64_t applied = 0, wait_start = 0;

	GMT_CHECK(gmt__core_held());
	while ((int64_t)(target - gmt__core.expected) > 0) {
		struct gmt__ring *best = NULL;
		const struct gmt__event *ev;
		uint64_t best_seq = UINT64_MAX;

		for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
			ev = gmt__ring_peek(r);
			if (ev != NULL && ev->seq < best_seq) {
				best = r;
				best_seq = ev->seq;
			}
		}
		if (best != NULL && best_seq <= gmt__core.expected) {
			if (best_seq < gmt__core.expected)
				STAT_ADD(late_events, 1);
			else
				gmt__core.expected++;
			gmt__apply(gmt__ring_peek(best));
			gmt__ring_pop(best);
			applied++;
			/* A thread's events come in runs: follow this ring while it
			 * holds the next number. */
			while ((ev = gmt__ring_peek(best)) != NULL && ev->seq == gmt__core.expected) {
				gmt__apply(ev);
				gmt__ring_pop(best);
				gmt__core.expected++;
				applied++;
			}
			wait_start = 0;
			continue;
		}
		if (wait_start == 0) {
			wait_start = gmt__now_ns(CLOCK_MONOTONIC);
			STAT_ADD(gap_waits, 1);
		} else if (gmt__now_ns(CLOCK_MONOTONIC) - wait_start > GMT_GAP_TIMEOUT_NS) {
			static bool once;
			gmt__warn_once(&once, "an event never reached its ring; going on without it");
			STAT_ADD(gaps_skipped, 1);
			gmt__core.expected = best != NULL ? best_seq : target;
			wait_start = 0;
			continue;
		}
		sched_yield();
	}
	return applied;
}

/* The background consumer's pass: applies what the rings hold, in order, and
 * returns when they are empty — without reading next_seq, which every event
 * writes (reading it would pull that line away from the producers each time).
 * A ring whose head is past the expected number while none holds it means the
 * event is in flight: drain_until waits for it. Lock held. */
static uint64_t drain_visible(void)
{
	uint64_t applied = 0;

	for (;;) {
		uint64_t lowest = UINT64_MAX;

		for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
			const struct gmt__event *ev = gmt__ring_peek(r);

			if (ev != NULL && ev->seq < lowest)
				lowest = ev->seq;
		}
		if (lowest == UINT64_MAX)
			return applied;
		/* Everything below `lowest` + 1 has its number taken: apply it. */
		applied += gmt__drain_until(lowest + 1);
	}
}

static void *consumer_main(void *arg)
{
	uint64_t next_probe = 0, idle_ns = GMT_IDLE_START_NS, ring = (uint64_t)gmt__core.opt->ring_events;
	enum { AWAKE, TIMED_OUT, WOKEN } slept = AWAKE;
	pthread_attr_t attr;
	void *stack;
	size_t size;

	(void)arg;
	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &stack, &size) == 0) {
			atomic_store_explicit(&gmt__core.consumer_stack_lo, (uintptr_t)stack, memory_order_relaxed);
			atomic_store_explicit(&gmt__core.consumer_stack_hi, (uintptr_t)stack + size, memory_order_relaxed);
		}
		pthread_attr_destroy(&attr);
	}
	while (!atomic_load_explicit(&gmt__core.stopping, memory_order_relaxed)) {
		bool sleep = false;
		uint64_t n;

		/* An interpreter may be loaded later than the tracer started (a
		 * program embedding Python): look for one again every second. */
		if (gmt__core.python && gmt__now_ns(CLOCK_MONOTONIC) >= next_probe) {
			next_probe = gmt__py_probe() ? UINT64_MAX : gmt__now_ns(CLOCK_MONOTONIC) + 1000000000ull;
			if (next_probe == UINT64_MAX)
				gmt__info("Python interpreter found: recording Python frames");
		}
		/* The unwinding rules of frames the producers met first (unwind.h):
		 * until then libunwind walks stacks through them. */
		if (gmt__core.depth > 0)
			(void)gmt__unwind_learn();

		gmt__core_lock();
		n = drain_visible();
		gmt__rings_reap();
		/* An out-of-memory episode that an allocation or the gap ended:
		 * its report (and a snapshot at its end after a storm). */
		gmt__episode_settle(false);
		if (gmt__peak_settle(false)) {
			/* a peak snapshot written; the lock released */
		} else if (!atomic_load_explicit(&gmt__core.stopping, memory_order_relaxed) &&
			   atomic_exchange_explicit(&gmt__core.signal_pending, false, memory_order_relaxed)) {
			/* Everything completed before the signal has its number.
			 * (Once the program exits, its exit snapshot stands for
			 * it.) */
			n += gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
			atomic_fetch_add_explicit(&gmt__core.writes_in_flight, 1, memory_order_relaxed);
			gmt__snapshot_take(GMT_REASON_SIGNAL, NULL, NULL, NULL, 0); /* releases the lock */
			atomic_fetch_sub_explicit(&gmt__core.writes_in_flight, 1, memory_order_release);
		} else {
			/* Nothing left: sleep, unless a ring filled up since the
			 * pass looked (ring.h, the doorbell). */
			sleep = n == 0 && gmt__rings_may_sleep();
			gmt__core_unlock();
		}
		if (n > 0)
			STAT_ADD(consumer_events, n);
		gmt__metrics_tick();
		/* The pace: what the last sleep let gather (above). */
		if (slept == WOKEN || n > ring / 4)
			idle_ns = idle_ns / 2 > GMT_IDLE_MIN_NS ? idle_ns / 2 : GMT_IDLE_MIN_NS;
		else if (slept == TIMED_OUT && n < ring / 16)
			idle_ns = 2 * idle_ns < GMT_IDLE_MAX_NS ? 2 * idle_ns : GMT_IDLE_MAX_NS;
		slept = AWAKE;
		if (sleep) {
			slept = gmt__rings_sleep(idle_ns) ? WOKEN : TIMED_OUT;
			if (slept == WOKEN)
				STAT_ADD(consumer_wakeups, 1);
		}
	}
	return NULL;
}

/* The background consumer blocks every signal: a handler of the program must
 * never run on it (docs/internals.md, "Stages and threads"). Without it
 * (thread creation failed) the producers drain their own rings when full,
 * and snapshots drain everything. */
void gmt__consumer_start(void)
{
	sigset_t all, old;
	pthread_t t;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t, NULL, consumer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		static bool once;
		gmt__warn_once(&once, "cannot start the background thread (%s); events are applied by the program's threads",
			       strerror(r));
		return;
	}
	pthread_setname_np(t, "gpumemtrace");
	pthread_detach(t);
}

