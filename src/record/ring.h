/* The per-thread event ring: a bounded single-producer single-consumer queue of
 * struct gmt__event, and the registry of every thread's ring.
 *
 * Contract (in the manner of ck_ring / rte_ring):
 * - one producer: the thread that owns the ring, and only from outside a signal
 *   handler that interrupted a push on the same thread (the hooks guarantee it);
 * - one consumer at a time: whoever holds the consumer lock (tracer/tracer.h) — the
 *   background thread, or a producer draining because its ring is full;
 * - push is wait-free while the ring is not full; when it is full push fails and
 *   the caller drains (takes the consumer role) or waits; nothing is ever dropped
 *   by the ring itself;
 * - a consumer that finds the rings empty may sleep (the doorbell, below). A
 *   push that ends an eighth of the ring (a check) reads the consumer's
 *   counter; from half full it also loads the doorbell word and, only when
 *   the consumer sleeps, wakes it with a futex wake, a system call that never
 *   waits. Every other push makes no system call and touches no shared line
 *   but the slot's;
 * - head and tail are free-running 64-bit counters on separate cache lines,
 *   compared only by unsigned difference; capacity is a power of two.
 */
#ifndef GMT_RING_H
#define GMT_RING_H

#include "record/event.h"

#include <stdbool.h>
#include <stdint.h>

struct gmt__ring;

/* A ring of `capacity` events (a power of two, at least 2), from mmap — never
 * malloc, which may be the very thing being traced or be unsafe here. Returns
 * NULL when memory cannot be had. */
struct gmt__ring *gmt__ring_new(uint32_t capacity, uint32_t tid);

/* Unmaps a ring that is empty and no longer in the registry. */
void gmt__ring_free(struct gmt__ring *r);

/* Producer: true when the next push will succeed. Reads the consumer's counter
 * only when the ring looks full from the producer's last view of it. */
bool gmt__ring_has_room(struct gmt__ring *r);

/* Producer: appends a copy of *ev. Returns false, changing nothing, when full.
 * At a check with the ring half full or more it rings the doorbell (a sleeping
 * consumer wakes). Async-signal-safe (the doorbell is a futex). */
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
 * thread's, emptied); the other threads do not exist in the child, and no
 * consumer sleeps. */
void gmt__rings_after_fork(struct gmt__ring *keep);

/* --- the doorbell: the consumer sleeps while the rings are quiet ------------ */

/* The one consumer thread, under the consumer lock, having found the rings
 * empty: announces that it is about to sleep, then looks at every ring once
 * more. True when it may sleep: every ring is under half full by more than a
 * check's worth of events (3/8 of the capacity; 1 event for rings under 8),
 * so that a producer that pushes on wakes it at a check before its ring is
 * 5/8 full. False (the announcement withdrawn) when some ring is fuller:
 * drain again instead. The doorbell is a backstop: a consumer that sleeps
 * with a timeout paced to the producers (state/consumer.c) wakes on its own first, and
 * costs them no system call. */
bool gmt__rings_may_sleep(void);

/* The consumer, after gmt__rings_may_sleep said true and without the lock:
 * sleeps until the doorbell rings, gmt__rings_wake, or `timeout_ns` passes
 * (0: no timeout), then withdraws the announcement. True when woken (also
 * spuriously), false when the timeout passed or a signal interrupted. */
bool gmt__rings_sleep(uint64_t timeout_ns);

/* Anyone: wakes the consumer if it sleeps (a snapshot is wanted). Async-signal-
 * safe; keeps errno. */
void gmt__rings_wake(void);

#endif /* GMT_RING_H */
