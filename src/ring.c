/* The per-thread SPSC event ring (ring.h): one mmap'd block holding the
 * producer's and the consumer's counters on cache lines of their own, then the
 * slots; and the registry, a lock-free list of every thread's ring. */
#define _GNU_SOURCE
#include "ring.h"

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>

#define GMT_CACHE_LINE 64

/* Memory ordering at a glance (each pair is named at both of its halves):
 *   R1 push's release of tail        -> A1 peek's acquire of tail:  the event's bytes
 *   R2 pop's release of head         -> A2 push's acquire of head:  the slot is free
 *                                                                    to overwrite
 *   R3 add's release CAS of the list -> A3 first's acquire:         the ring's fields
 *   R4 reap's release of prev->next  -> A4 next's acquire:          (the same)
 *   R5 mark_dead's release           -> A5 is_dead's/reap's acquire: the owner's last
 *                                                                    push
 * The consumer role passes between threads only under the consumer lock
 * (core.c), which orders the consumer-private fields (head, tail_seen). */
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
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
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

bool gmt__ring_push(struct gmt__ring *r, const struct gmt__event *ev)
{
	/* Relaxed: only this thread writes tail. */
	uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);

	if (tail - r->head_seen > r->mask) {
		/* A2: acquire of head; pairs with R2 in pop. The consumer's reads of
		 * the slots it released happen before our overwrite of them. */
		r->head_seen = atomic_load_explicit(&r->head, memory_order_acquire);
		if (tail - r->head_seen > r->mask)
			return false;
	}
	r->slots[tail & r->mask] = *ev;
	/* R1: release of tail publishes the event just written; pairs with A1 in
	 * peek. */
	atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
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
}

size_t gmt__ring_bytes(const struct gmt__ring *r)
{
	return r->map_bytes;
}
