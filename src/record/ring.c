/* The per-thread SPSC event ring (ring.h): one mmap'd block holding the
 * producer's and the consumer's counters on cache lines of their own, then the
 * slots; the registry, a lock-free list of every thread's ring; and the
 * doorbell, the futex on which the consumer sleeps while the rings are quiet. */
#define _GNU_SOURCE
#include "record/ring.h"

#include "util/check.h"
#include "util/map.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GMT_CACHE_LINE 64

/* Memory ordering at a glance (each pair is named at both of its halves):
 *   R1 push's release of tail        -> A1 peek's acquire of tail:  the event's bytes
 *   R2 pop's release of head         -> A2 push's acquire of head:  the slot is free
 *                                                                    to overwrite
 *   R3 add's release CAS of the list -> A3 first's acquire:         the ring's fields
 *   R4 reap's release of prev->next  -> A4 next's acquire:          (the same)
 *   R5 mark_dead's release           -> A5 is_dead's/reap's acquire: the owner's last
 *                                                                    push
 *   F1 check's fence, half full      <-> F2 may_sleep's fence:       nothing; they
 *      (after R1)                           (after `sleeping` = 1)   keep a wake-up
 *      either the consumer's last look at the rings sees the push, or the
 *      producer sees `sleeping` and wakes it (store buffering: two stores,
 *      each followed by a full fence and a load of the other's word). No
 *      data rides on them, only the wake-up: ThreadSanitizer, which does not
 *      model fences (GCC says so, -Wtsan), misses nothing it could check.
 * The consumer role passes between threads only under the consumer lock
 * (tracer/tracer.h), which orders the consumer-private fields (head, tail_seen). */
struct gmt__ring {
	/* Written by the producer only. */
	alignas(GMT_CACHE_LINE) _Atomic uint64_t tail; /* next slot to fill */
	uint64_t head_seen;	/* producer's last view of head: pushes read the
				 * consumer's line only when the ring looks full */

	/* Written by the consumer only. */
	alignas(GMT_CACHE_LINE) _Atomic uint64_t head; /* next slot to read */
	uint64_t tail_seen;	/* consumer's last view of tail */

	/* Set at creation; next and dead change rarely. */
	alignas(GMT_CACHE_LINE) uint64_t mask;
	size_t map_bytes;
	uint32_t tid;
	atomic_bool dead;
	_Atomic(struct gmt__ring *) next; /* registry link */

	alignas(GMT_CACHE_LINE) struct gmt__event slots[];
};

/* The registry: newest ring first. Only gmt__rings_add changes the head
 * (by CAS); only the consumer (lock held) changes a linked ring's next. */
static _Atomic(struct gmt__ring *) rings_head;

/* The doorbell, and the futex word: 1 from the consumer's announcement that
 * it sleeps (may_sleep) until it wakes or a waker clears it, else 0. Read by
 * producers only at checks of rings half full, written when the consumer
 * sleeps and wakes: it needs no cache line of its own. */
static _Atomic uint32_t sleeping;

_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && sizeof(sleeping) == sizeof(uint32_t),
	       "the doorbell is a lock-free 32-bit word: a futex, rung from signal handlers");

/* The doorbell's thresholds, in events. A check every eighth of the
 * capacity (every push for rings under 8): the tail is a multiple of
 * check_every. The producer rings from half full; the consumer stays up from
 * a check's worth below that, so that the check at which a sleeping
 * consumer's ring first holds half is the one that rings (may_sleep). */
static uint64_t check_every(const struct gmt__ring *r)
{
	return (r->mask >> 3) + 1;
}

static uint64_t ring_from(const struct gmt__ring *r)
{
	return (r->mask >> 1) + 1;
}

static uint64_t stay_up_from(const struct gmt__ring *r)
{
	uint64_t n = ring_from(r) - check_every(r);

	return n > 0 ? n : 1;
}

/* Capacities stay at or below 2^31 so that a count fits in uint32_t. */
#define GMT_RING_MAX_CAPACITY ((uint32_t)1 << 31)

struct gmt__ring *gmt__ring_new(uint32_t capacity, uint32_t tid)
{
	struct gmt__ring *r;
	size_t bytes, page = 4096;
	void *p;

	if (capacity < 2 || capacity > GMT_RING_MAX_CAPACITY || (capacity & (capacity - 1)))
		return NULL;
	bytes = offsetof(struct gmt__ring, slots) + (size_t)capacity * sizeof(struct gmt__event);
	bytes = (bytes + page - 1) & ~(page - 1);
	p = gmt__map(bytes);
	if (p == NULL)
		return NULL;
	/* mmap gives zeroed memory: counters, flags and links start at 0. */
	r = p;
	r->mask = capacity - 1;
	r->map_bytes = bytes;
	r->tid = tid;
	return r;
}

void gmt__ring_free(struct gmt__ring *r)
{
	if (r != NULL)
		munmap(r, r->map_bytes);
}

/* Producer: room for the slot at `tail`, by the last view of head, renewed
 * only when that view says full. */
static bool room_at(struct gmt__ring *r, uint64_t tail)
{
	if (tail - r->head_seen <= r->mask)
		return true;
	/* A2: acquire of head; pairs with R2 in pop. The consumer's reads of the
	 * slots it released happen before our overwrite of them. */
	r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
	return tail - r->head_seen <= r->mask;
}

/* Producer, at a check, after R1 of `tail`: rings the doorbell when the ring
 * is half full or more and the consumer sleeps. */
static void check(struct gmt__ring *r, uint64_t tail)
{
	/* A2 (as in room_at): a fresh view of head, one read of the consumer's
	 * line per check. A stale one could only make the count larger: a
	 * needless ring, never a missed one. */
	r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
	if (tail - r->head_seen < ring_from(r))
		return;
	/* F1: a full fence between R1 and the load of `sleeping`; pairs with F2
	 * in may_sleep. NOTE: ThreadSanitizer does not model fences, and needs
	 * no variant here: F1 and F2 order atomic accesses only (a missed
	 * wake-up is what they prevent, not a race), while every plain access
	 * between threads (the slots) is ordered by R1/A1 and R2/A2, which it
	 * does see (build-tsan, scripts/test). */
	atomic_thread_fence(memory_order_seq_cst);
	/* Relaxed: F1 orders it; gmt__rings_wake re-reads by exchange. */
	if (atomic_load_explicit(&sleeping, memory_order_relaxed) != 0)
		gmt__rings_wake();
}

bool gmt__ring_has_room(struct gmt__ring *r)
{
	/* Relaxed: only this thread writes tail. */
	return room_at(r, atomic_load_explicit(&r->tail, memory_order_relaxed));
}

bool gmt__ring_push(struct gmt__ring *r, const struct gmt__event *ev)
{
	/* Relaxed: only this thread writes tail. */
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);

	if (!room_at(r, tail))
		return false;
	/* The head never passes the tail, and a slot is free before it is
	 * written. */
	GMT_CHECK(tail - r->head_seen <= r->mask);
	r->slots[tail & r->mask] = *ev;
	/* R1: release of tail publishes the event just written; pairs with A1 in
	 * peek. */
	atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
	if (((tail + 1) & (check_every(r) - 1)) == 0)
		check(r, tail + 1);
	return true;
}

const struct gmt__event *gmt__ring_peek(struct gmt__ring *r)
{
	/* Relaxed: only the consumer writes head (the lock orders consumers). */
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	if (head == r->tail_seen) {
		/* A1: acquire of tail; pairs with R1 in push. The slots below tail
		 * hold complete events. */
		r->tail_seen = atomic_load_explicit(&r->tail, memory_order_acquire);
		if (head == r->tail_seen)
			return NULL;
	}
	return &r->slots[head & r->mask];
}

void gmt__ring_pop(struct gmt__ring *r)
{
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);

	/* Only a peeked event is popped: the head stays at or below the tail. */
	GMT_CHECK(head != r->tail_seen);
	/* R2: release of head hands the slot back: our reads of it happen before
	 * the producer overwrites it; pairs with A2 in push. */
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

uint32_t gmt__ring_count(const struct gmt__ring *r)
{
	/* Head first: head never passes tail, so a tail read later is at least
	 * the head read here and the difference cannot underflow; it may exceed
	 * the capacity when the two sides move in between, hence the clamp. Only
	 * a snapshot is promised: relaxed. */
	uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t n = tail - head;

	return n > r->mask + 1 ? (uint32_t)(r->mask + 1) : (uint32_t)n;
}

uint32_t gmt__ring_capacity(const struct gmt__ring *r)
{
	return (uint32_t)(r->mask + 1);
}

uint32_t gmt__ring_tid(const struct gmt__ring *r)
{
	return r->tid;
}

/* Both counters to pos, discarding what the ring holds. Only when neither
 * side can run: before the ring is shared, or in the child of a fork. */
static void reset_counters(struct gmt__ring *r, uint64_t pos)
{
	atomic_store_explicit(&r->head, pos, memory_order_relaxed);
	atomic_store_explicit(&r->tail, pos, memory_order_relaxed);
	r->head_seen = pos;
	r->tail_seen = pos;
}

void gmt__ring_test_seek(struct gmt__ring *r, uint64_t pos)
{
	reset_counters(r, pos);
}

/* --- the registry ------------------------------------------------------------ */

void gmt__rings_add(struct gmt__ring *r)
{
	struct gmt__ring *old = atomic_load_explicit(&rings_head, memory_order_relaxed);

	/* Async-signal-safe: no lock, only a CAS loop on the list head. */
	do {
		/* Relaxed: published by the CAS below. */
		atomic_store_explicit(&r->next, old, memory_order_relaxed);
		/* R3: release CAS publishes the ring's fields and its next; pairs
		 * with A3 in first. Every add is a read-modify-write of the head, so
		 * one acquire of the head synchronises with every add before it (a
		 * release sequence): a walker sees each ring it reaches complete. */
	} while (!atomic_compare_exchange_weak_explicit(&rings_head, &old, r, memory_order_release,
							memory_order_relaxed));
}

void gmt__ring_mark_dead(struct gmt__ring *r)
{
	/* R5: release publishes every push the owner made; pairs with A5. */
	atomic_store_explicit(&r->dead, true, memory_order_release);
}

bool gmt__ring_is_dead(const struct gmt__ring *r)
{
	/* A5: acquire; pairs with R5 in mark_dead. Once true, the owner pushes no
	 * more, and a tail read after this sees its last push. */
	return atomic_load_explicit(&r->dead, memory_order_acquire);
}

struct gmt__ring *gmt__rings_first(void)
{
	/* A3: acquire of the head; pairs with R3 in add. */
	return atomic_load_explicit(&rings_head, memory_order_acquire);
}

struct gmt__ring *gmt__ring_next(const struct gmt__ring *r)
{
	/* A4: acquire of next; pairs with R4 in reap (and, for links set at add
	 * time, with R3 through the head that led here). */
	return atomic_load_explicit(&r->next, memory_order_acquire);
}

/* Dead (A5, read first) and then empty: the owner will push no more, and all
 * it pushed has been consumed. */
static bool reapable(struct gmt__ring *r)
{
	return gmt__ring_is_dead(r) && gmt__ring_count(r) == 0;
}

/* NOTE: the ring at the head of the list is never unlinked, dead or not. Adds
 * CAS the head and write only their own new ring's next; reap writes only the
 * next of a ring already behind the head it loaded. The two never store to the
 * same word, so no add can be lost and no CAS can succeed on a stale head (an
 * ABA on the head would need reap to free the head, which it never does). A
 * dead head is reaped by a later call, once a newer ring stands before it; at
 * most one dead ring lingers. Walkers hold the consumer lock (ring.h), as reap
 * does, so none stands on a ring while it is unmapped; lock-free adders never
 * touch a ring already linked. */
unsigned gmt__rings_reap(void)
{
	struct gmt__ring *prev = gmt__rings_first(), *r, *next;
	unsigned reaped = 0;

	if (prev == NULL)
		return 0;
	for (r = gmt__ring_next(prev); r != NULL; r = next) {
		next = gmt__ring_next(r);
		if (!reapable(r)) {
			prev = r;
			continue;
		}
		/* R4: release of prev->next; pairs with A4 in next. `next` was
		 * published to us by R3/R4 already; the release keeps that true for
		 * whoever reads this link. */
		atomic_store_explicit(&prev->next, next, memory_order_release);
		gmt__ring_free(r);
		reaped++;
	}
	return reaped;
}

void gmt__rings_after_fork(struct gmt__ring *keep)
{
	struct gmt__ring *r, *next;
	bool kept = false;

	/* The child has one thread: plain walks are safe; relaxed throughout. */
	for (r = atomic_load_explicit(&rings_head, memory_order_relaxed); r != NULL; r = next) {
		next = atomic_load_explicit(&r->next, memory_order_relaxed);
		if (r == keep)
			kept = true;
		else
			gmt__ring_free(r);
	}
	if (kept) {
		/* Its events belong to the parent's history. */
		uint64_t tail = atomic_load_explicit(&keep->tail, memory_order_relaxed);

		reset_counters(keep, tail);
		atomic_store_explicit(&keep->dead, false, memory_order_relaxed);
		atomic_store_explicit(&keep->next, NULL, memory_order_relaxed);
	}
	atomic_store_explicit(&rings_head, kept ? keep : NULL, memory_order_relaxed);
	/* The parent's consumer may have been asleep; the child has none yet. */
	atomic_store_explicit(&sleeping, 0, memory_order_relaxed);
}

/* --- the doorbell ------------------------------------------------------------ */

bool gmt__rings_may_sleep(void)
{
	/* Relaxed: F2 orders it before the looks below. */
	atomic_store_explicit(&sleeping, 1, memory_order_relaxed);
	/* F2: a full fence between the store above and the loads of the list and
	 * of every tail below; pairs with F1 in check. While we sleep no head
	 * moves (but for a producer that drains itself, which only makes room):
	 * the first check at which a ring holds half of it finds us asleep, or
	 * this look (which reads every ring, one added since too, after F2) sees
	 * its push and the ring at least that full. */
	atomic_thread_fence(memory_order_seq_cst);
	for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
		if (gmt__ring_count(r) >= stay_up_from(r)) {
			atomic_store_explicit(&sleeping, 0, memory_order_relaxed);
			return false;
		}
	}
	return true;
}

bool gmt__rings_sleep(uint64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u) };
	bool woken;

	/* Returns at once when a waker cleared the word already (EAGAIN). Woken
	 * or not, the caller looks at the rings again. */
	woken = syscall(SYS_futex, &sleeping, FUTEX_WAIT_PRIVATE, 1u, timeout_ns != 0 ? &ts : NULL, NULL, 0) == 0 ||
		errno == EAGAIN;
	/* Relaxed: the word orders nothing; the events come through A1. */
	atomic_store_explicit(&sleeping, 0, memory_order_relaxed);
	return woken;
}

void gmt__rings_wake(void)
{
	int saved;

	/* Relaxed: the wake-up publishes nothing (events come through R1/A1).
	 * The exchange: of several wakers, only the first makes the call. */
	if (atomic_exchange_explicit(&sleeping, 0, memory_order_relaxed) == 0)
		return;
	saved = errno;
	syscall(SYS_futex, &sleeping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	errno = saved;
}

size_t gmt__ring_bytes(const struct gmt__ring *r)
{
	return r->map_bytes;
}
