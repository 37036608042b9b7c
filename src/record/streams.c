/* Stream ids (streams.h): an open-addressed table of handle + 1 (0: an empty
 * slot), found by a hash of the handle and claimed by compare-and-swap. A
 * slot once claimed never changes, so a slot's index is the id for good. */
#include "record/streams.h"

#include <stdatomic.h>

/* A power of two past GMT_STREAMS_MAX: probing always ends at an empty slot
 * while the table is not full. */
#define SLOTS 4096

static _Atomic uint64_t slots[SLOTS];
static _Atomic unsigned used;

uint16_t gmt__stream_id(uint64_t handle)
{
	uint64_t key = handle + 1, seen;
	/* Fibonacci hashing: streams are pointers, aligned and clustered. */
	unsigned at = (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 52) & (SLOTS - 1);

	for (unsigned n = 0; n < SLOTS; n++, at = (at + 1) & (SLOTS - 1)) {
		/* Acquire pairs with the CAS's release: a slot seen taken is
		 * whole (a 64-bit word: always, but said). */
		seen = atomic_load_explicit(&slots[at], memory_order_acquire);
		if (seen == key)
			return (uint16_t)(at + 1);
		if (seen != 0)
			continue;
		if (atomic_fetch_add_explicit(&used, 1, memory_order_relaxed) >= GMT_STREAMS_MAX) {
			atomic_fetch_sub_explicit(&used, 1, memory_order_relaxed);
			return 0;
		}
		if (atomic_compare_exchange_strong_explicit(&slots[at], &seen, key, memory_order_release,
							    memory_order_acquire))
			return (uint16_t)(at + 1);
		/* Another thread took the slot first: its stream, or ours. */
		atomic_fetch_sub_explicit(&used, 1, memory_order_relaxed);
		if (seen == key)
			return (uint16_t)(at + 1);
	}
	return 0;
}

bool gmt__stream_handle(uint16_t id, uint64_t *handle)
{
	uint64_t key;

	if (id == 0 || id > SLOTS)
		return false;
	key = atomic_load_explicit(&slots[id - 1], memory_order_acquire);
	if (key == 0)
		return false;
	*handle = key - 1;
	return true;
}
