/* The per-thread event ring: a bounded single-producer single-consumer queue of
 * struct gmt__event, and the registry of every thread's ring.
 *
 * Contract (in the manner of ck_ring / rte_ring):
 * - one producer: the thread that owns the ring, and only from outside a signal
 *   handler that interrupted a push on the same thread (the hooks guarantee it);
 * - one consumer at a time: whoever holds the consumer lock (core.c) — the
 *   background thread, or a producer draining because its ring is full;
 * - push is wait-free while the ring is not full; when it is full push fails and
 *   the caller drains (takes the consumer role) or waits; nothing is ever dropped
 *   by the ring itself;
 * - head and tail are free-running 64-bit counters on separate cache lines,
 *   compared only by unsigned difference; capacity is a power of two.
 */
#ifndef GMT_RING_H
#define GMT_RING_H

#include "event.h"

#include <stdbool.h>
#include <stdint.h>

struct gmt__ring;

/* A ring of `capacity` events (a power of two, at least 2), from mmap — never
 * malloc, which may be the very thing being traced or be unsafe here. Returns
 * NULL when memory cannot be had. */
struct gmt__ring *gmt__ring_new(uint32_t capacity, uint32_t tid);

/* Unmaps a ring that is empty and no longer in the registry. */
void gmt__ring_free(struct gmt__ring *r);

/* Producer: appends a copy of *ev. Returns false, changing nothing, when full. */
bool gmt__ring_push(struct gmt__ring *r, const struct gmt__event *ev);

/* Consumer: the oldest event, or NULL when empty. Valid until gmt__ring_pop. */
const struct gmt__event *gmt__ring_peek(struct gmt__ring *r);

/* Consumer: discards the event gmt__ring_peek returned. */
void gmt__ring_pop(struct gmt__ring *r);

/* Either side: events currently held (a snapshot; may change at once). */
uint32_t gmt__ring_count(const struct gmt__ring *r);
uint32_t gmt__ring_capacity(const struct gmt__ring *r);
uint32_t gmt__ring_tid(const struct gmt__ring *r);

/* The bytes the ring's mapping spans, from r. */
size_t gmt__ring_bytes(const struct gmt__ring *r);

/* For tests: moves both counters of a new, unshared ring to `pos` (to cross
 * the 2^32 and 2^64 boundaries), discarding what it holds. */
void gmt__ring_test_seek(struct gmt__ring *r, uint64_t pos);

/* --- the registry: every ring of the process ------------------------------- */

/* Adds a ring (its thread's first event). Lock-free, async-signal-safe; rings
 * are never removed while a consumer may walk the list, only marked dead. */
void gmt__rings_add(struct gmt__ring *r);

/* The owner thread has exited: the consumer frees the ring once it is empty. */
void gmt__ring_mark_dead(struct gmt__ring *r);
bool gmt__ring_is_dead(const struct gmt__ring *r);

/* Walks the registry: first ring, then each next; NULL at the end. A consumer
 * may call gmt__rings_reap() meanwhile only while holding the consumer lock. */
struct gmt__ring *gmt__rings_first(void);
struct gmt__ring *gmt__ring_next(const struct gmt__ring *r);

/* Consumer (lock held): unlinks and frees dead, empty rings. Returns how many. */
unsigned gmt__rings_reap(void);

/* After fork(), in the child: forget every ring but `keep` (the forking
 * thread's, emptied); the other threads do not exist in the child. */
void gmt__rings_after_fork(struct gmt__ring *keep);

#endif /* GMT_RING_H */
