/* Native stacks (stacks.h): capture with libunwind's fast path, and interning
 * in a hash set that finds a known stack without a lock or an allocation.
 * Records live in an mmap'd append-only arena; ids index a directory of them. */
#define _GNU_SOURCE
#include "record/stacks.h"

#include "record/unwind.h"
#include "util/map.h"

#include <errno.h>
#include <libunwind.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* Memory ordering at a glance (each pair is named at both of its halves):
 *   R1 insert's release of a set slot    -> A1 lookup's acquire:  the record and
 *                                                                  its directory entry
 *   R2 grow's release of the set pointer -> A2 lookup's acquire:  the new array
 *   R3 release of a directory leaf       -> A3 dir_get's acquire: the (zeroed) leaf
 *   R4 release of a directory entry      -> A4 dir_get's acquire: the record
 * Everything else is written under `lock`, by inserters only.
 *
 * Memory per unique stack of depth d: the record, 16 + 8d bytes (arena chunks
 * waste at most one record's worth each); the directory, 8 bytes; the set,
 * 8 bytes a slot at a load between 1/4 and 1/2, so 16 to 32 bytes, plus the
 * arrays it outgrew (below), as much again at most: 40 to 88 + 8d in all,
 * 552 to 600 bytes at depth 64 (tests/recording/test_stacks.c measures it). */

#define GMT_STACK_SKIP_MAX 32

/* --- the arena: records, never freed ------------------------------------------ */

struct stack_rec {
	uint64_t hash;
	uint32_t n;
	uint32_t id;
	uint32_t epoch; /* modules.h: the module epoch of its capture */
	uintptr_t ips[];
};

#define GMT_ARENA_CHUNK ((size_t)1 << 20)

static char *arena_next, *arena_end; /* under lock */

/* --- the directory: id -> record ---------------------------------------------- */

/* Two levels, so it grows without moving: leaves of 2^14 entries (128 KiB)
 * mmap'd on demand under a fixed top of 1024. Ids run from 1 to 2^24 - 1. */
#define GMT_DIR_LEAF_BITS 14
#define GMT_DIR_LEAF ((uint32_t)1 << GMT_DIR_LEAF_BITS)
#define GMT_DIR_TOP 1024u
#define GMT_STACK_MAX_IDS (GMT_DIR_TOP * GMT_DIR_LEAF)

typedef _Atomic(struct stack_rec *) dir_leaf[GMT_DIR_LEAF];
static _Atomic(dir_leaf *) dir[GMT_DIR_TOP];

/* --- the set: (hash tag, id) pairs, open addressing ------------------------- */

/* A slot is 0 (free) or tag << 32 | id with the upper half of the stack's
 * hash as tag: most probes of other stacks end at the tag compare.
 *
 * NOTE: growth never frees the array it replaces: a lock-free reader may
 * still be probing it (it finds every stack inserted before the swap there,
 * and misses newer ones into the locked path, which re-checks the current
 * array). Arrays double, so the ones outgrown together take less than the
 * current one: at most 2x the set's memory, and no reader ever needs to be
 * counted or waited for. */
struct stack_set {
	uint64_t mask;
	size_t map_bytes;
	_Atomic uint64_t slots[];
};

#define GMT_SET_MIN_SLOTS 4096u

static _Atomic(struct stack_set *) cur_set;

/* --- state under the lock ----------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_id = 1;  /* under lock */
static uint32_t set_used;     /* under lock: slots taken in cur_set */
static _Atomic uint32_t count; /* stacks stored; statistics only */
static _Atomic size_t bytes;   /* every byte mapped here; statistics only */

static void *map(size_t len)
{
	void *p = gmt__map(len);

	if (p == NULL)
		return NULL;
	atomic_fetch_add_explicit(&bytes, len, memory_order_relaxed);
	return p;
}

/* --- capture -------------------------------------------------------------------- */

int gmt__stack_init(void)
{
	void *warm[4];

	/* NOTE: libunwind's first use in a process and in each thread sets up its
	 * caches (a thread key, a per-thread trace cache); do it here, not inside
	 * the first hook. unwind.c's walk needs no warming: what it learns, the
	 * consumer learns. */
	return unw_backtrace(warm, 4) > 0 ? 0 : -ENOTSUP;
}

int gmt__stack_walk(uintptr_t *ips, int max)
{
	if (max <= 0)
		return 0;
	if (max > GMT_STACK_MAX_DEPTH)
		max = GMT_STACK_MAX_DEPTH;
	/* unwind.c's walk, or libunwind's where that cannot: the two give the
	 * same addresses (tests/recording/test_unwind.c). */
	return gmt__unwind_walk(ips, max);
}

/* noinline: the frame dropped below must be this function's own. */
__attribute__((noinline)) int gmt__stack_capture(uintptr_t *ips, int max, int skip)
{
	uintptr_t buf[1 + GMT_STACK_SKIP_MAX + GMT_STACK_MAX_DEPTH];
	int got, drop;

	if (max <= 0)
		return 0;
	if (max > GMT_STACK_MAX_DEPTH)
		max = GMT_STACK_MAX_DEPTH;
	if (skip < 0)
		skip = 0;
	if (skip > GMT_STACK_SKIP_MAX)
		skip = GMT_STACK_SKIP_MAX;
	/* The walk's first address lies in its caller: this function. */
	drop = 1 + skip;
	got = gmt__unwind_walk(buf, drop + max);
	if (got <= drop)
		return 0;
	memcpy(ips, buf + drop, (size_t)(got - drop) * sizeof(*ips));
	return got - drop;
}

/* --- interning ------------------------------------------------------------------ */

static uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Multiply-rotate over the words in four independent lanes (so that the
 * multiplies overlap: about 4x faster on 64 frames than one chain), then the
 * splitmix64 finaliser, so that stacks differing in one low bit of one frame
 * land far apart. Lanes start and merge differently: swapping two frames
 * changes the hash. */
static uint64_t stack_hash(const uintptr_t *ips, int n)
{
	const uint64_t k = 0x87c37b91114253d5ull;
	uint64_t a = 0x9e3779b97f4a7c15ull ^ (uint64_t)n, b = 0xc2b2ae3d27d4eb4full,
		 c = 0x165667b19e3779f9ull, d = 0x27d4eb2f165667c5ull, h;
	int i;

	for (i = 0; i + 4 <= n; i += 4) {
		a = rotl64((a ^ (uint64_t)ips[i]) * k, 31);
		b = rotl64((b ^ (uint64_t)ips[i + 1]) * k, 31);
		c = rotl64((c ^ (uint64_t)ips[i + 2]) * k, 31);
		d = rotl64((d ^ (uint64_t)ips[i + 3]) * k, 31);
	}
	for (; i < n; i++)
		a = rotl64((a ^ (uint64_t)ips[i]) * k, 31);
	h = a ^ rotl64(b, 16) ^ rotl64(c, 32) ^ rotl64(d, 48);
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 31;
	return h;
}

static struct stack_rec *dir_get(uint32_t id)
{
	dir_leaf *leaf;

	if (id == 0 || id >= GMT_STACK_MAX_IDS)
		return NULL;
	/* A3: acquire of the leaf pointer; pairs with R3 in dir_set. */
	leaf = atomic_load_explicit(&dir[id >> GMT_DIR_LEAF_BITS], memory_order_acquire);
	if (leaf == NULL)
		return NULL;
	/* A4: acquire of the entry; pairs with R4 in dir_set: the record's
	 * contents are complete. */
	return atomic_load_explicit(&(*leaf)[id & (GMT_DIR_LEAF - 1)], memory_order_acquire);
}

/* Under lock. Returns 0 or -ENOMEM. */
static int dir_set(uint32_t id, struct stack_rec *rec)
{
	_Atomic(dir_leaf *) *top = &dir[id >> GMT_DIR_LEAF_BITS];
	dir_leaf *leaf = atomic_load_explicit(top, memory_order_relaxed);

	if (leaf == NULL) {
		leaf = map(sizeof(*leaf));
		if (leaf == NULL)
			return -ENOMEM;
		/* R3: release of the leaf pointer publishes the zeroed leaf;
		 * pairs with A3 in dir_get. */
		atomic_store_explicit(top, leaf, memory_order_release);
	}
	/* R4: release of the entry publishes the record written before it;
	 * pairs with A4 in dir_get. */
	atomic_store_explicit(&(*leaf)[id & (GMT_DIR_LEAF - 1)], rec, memory_order_release);
	return 0;
}

/* The id of ips[0..n) in set s, or 0. Lock-free; allocates nothing. */
static uint32_t set_lookup(struct stack_set *s, uint64_t h, const uintptr_t *ips, int n, uint32_t epoch)
{
	uint32_t tag = (uint32_t)(h >> 32);
	uint64_t i, v;

	if (s == NULL)
		return 0;
	for (i = h & s->mask;; i = (i + 1) & s->mask) {
		struct stack_rec *rec;

		/* A1: acquire of the slot; pairs with R1 in set_put: the record
		 * and its directory entry are visible. */
		v = atomic_load_explicit(&s->slots[i], memory_order_acquire);
		if (v == 0)
			return 0;
		if ((uint32_t)(v >> 32) != tag)
			continue;
		rec = dir_get((uint32_t)v);
		if (rec != NULL && rec->hash == h && rec->n == (uint32_t)n && rec->epoch == epoch &&
		    memcmp(rec->ips, ips, (size_t)n * sizeof(*ips)) == 0)
			return (uint32_t)v;
	}
}

/* Under lock: the pair into the first free slot (s has one). */
static void set_put(struct stack_set *s, uint64_t h, uint32_t id)
{
	uint64_t i;

	for (i = h & s->mask; atomic_load_explicit(&s->slots[i], memory_order_relaxed) != 0;)
		i = (i + 1) & s->mask;
	/* R1: release of the slot publishes the record and its directory entry;
	 * pairs with A1 in set_lookup. */
	atomic_store_explicit(&s->slots[i], (h >> 32) << 32 | id, memory_order_release);
}

static struct stack_set *set_new(uint64_t slots)
{
	size_t len = sizeof(struct stack_set) + slots * sizeof(uint64_t);
	struct stack_set *s;

	s = map(len);
	if (s == NULL)
		return NULL;
	s->mask = slots - 1;
	s->map_bytes = len;
	return s;
}

/* Under lock: a set for one more stack (at most half full), or NULL. */
static struct stack_set *set_reserve(void)
{
	struct stack_set *s = atomic_load_explicit(&cur_set, memory_order_relaxed), *bigger;
	uint32_t id;

	if (s != NULL && 2 * ((uint64_t)set_used + 1) <= s->mask + 1)
		return s;
	bigger = set_new(s == NULL ? GMT_SET_MIN_SLOTS : 2 * (s->mask + 1));
	if (bigger == NULL) {
		/* Carry on fuller: a free slot is all a probe needs. */
		return s != NULL && (uint64_t)set_used + 2 <= s->mask + 1 ? s : NULL;
	}
	for (id = 1; id < next_id; id++) {
		struct stack_rec *rec = dir_get(id);

		if (rec != NULL)
			set_put(bigger, rec->hash, id);
	}
	/* R2: release of the set pointer publishes the filled array; pairs with
	 * A2 in gmt__stack_intern. The old array stays mapped (see above). */
	atomic_store_explicit(&cur_set, bigger, memory_order_release);
	return bigger;
}

/* Under lock: room for a record of `len` bytes, or NULL. */
static struct stack_rec *arena_alloc(size_t len)
{
	char *p;

	len = (len + 7) & ~(size_t)7;
	if ((size_t)(arena_end - arena_next) < len) {
		p = map(GMT_ARENA_CHUNK);
		if (p == NULL)
			return NULL;
		/* The tail of the old chunk (less than one record) is left. */
		arena_next = p;
		arena_end = p + GMT_ARENA_CHUNK;
	}
	p = arena_next;
	arena_next += len;
	return (struct stack_rec *)p;
}

uint32_t gmt__stack_intern(const uintptr_t *ips, int n)
{
	return gmt__stack_intern_at(ips, n, 0);
}

uint32_t gmt__stack_intern_at(const uintptr_t *ips, int n, uint32_t epoch)
{
	struct stack_set *s;
	struct stack_rec *rec;
	uint64_t h;
	uint32_t id;

	if (n <= 0)
		return 0;
	if (n > GMT_STACK_MAX_FRAMES)
		n = GMT_STACK_MAX_FRAMES;
	h = stack_hash(ips, n) ^ (uint64_t)epoch * 0x9e3779b97f4a7c15ull;

	/* A2: acquire of the set pointer; pairs with R2 in set_reserve. */
	id = set_lookup(atomic_load_explicit(&cur_set, memory_order_acquire), h, ips, n, epoch);
	if (id != 0)
		return id;

	/* A new stack (or one inserted meanwhile, or into a newer set). The
	 * steps below are ordered so that a fork in the middle of them leaves a
	 * state the child can use after gmt__stack_after_fork: record, id,
	 * directory, then set; an interrupted insert costs at most a duplicate. */
	pthread_mutex_lock(&lock);
	id = set_lookup(atomic_load_explicit(&cur_set, memory_order_relaxed), h, ips, n, epoch);
	if (id != 0 || next_id >= GMT_STACK_MAX_IDS)
		goto out;
	s = set_reserve();
	if (s == NULL)
		goto out;
	rec = arena_alloc(sizeof(*rec) + (size_t)n * sizeof(*ips));
	if (rec == NULL)
		goto out;
	/* The id is taken first: no two records can ever share one. */
	id = next_id++;
	rec->hash = h;
	rec->n = (uint32_t)n;
	rec->id = id;
	rec->epoch = epoch;
	memcpy(rec->ips, ips, (size_t)n * sizeof(*ips));
	if (dir_set(id, rec) < 0) {
		id = 0; /* burnt: its directory entry stays NULL */
		goto out;
	}
	set_used++;
	set_put(s, h, id);
	atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
out:
	pthread_mutex_unlock(&lock);
	return id;
}

const uintptr_t *gmt__stack_get(uint32_t id, int *n)
{
	struct stack_rec *rec = dir_get(id);

	if (rec == NULL)
		return NULL;
	*n = (int)rec->n;
	return rec->ips;
}

uint32_t gmt__stack_epoch(uint32_t id)
{
	struct stack_rec *rec = dir_get(id);

	return rec != NULL ? rec->epoch : 0;
}

uint32_t gmt__stack_count(void)
{
	return atomic_load_explicit(&count, memory_order_relaxed);
}

size_t gmt__stack_bytes(void)
{
	return atomic_load_explicit(&bytes, memory_order_relaxed);
}

void gmt__stack_after_fork(void)
{
	/* Another thread may have held the lock at the fork; it does not exist
	 * in the child. Every step of an insert leaves the structure usable
	 * (see gmt__stack_intern), so re-initialising the lock is enough. */
	pthread_mutex_init(&lock, NULL);
}

int gmt__stack_frames(const uintptr_t *ips, int depth)
{
	int ntags = 0;

	while (ips != NULL && ntags < depth && gmt__word_is_tag(ips[depth - 1 - ntags]))
		ntags++;
	return ips != NULL ? depth - ntags : 0;
}
