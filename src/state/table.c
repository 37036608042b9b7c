/* The live table (table.h): entries stored densely in mmap'd chunks, found
 * through an open-addressing index keyed by (space, addr) — linear probing,
 * deletion by backward shift (no tombstones), grown x2 at 70% load. */
#define _GNU_SOURCE
#include "state/table.h"

#include "util/map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* NOTE: why an index over dense entries rather than entries in the slots: a
 * slot array of entries is 56 bytes a slot, and open addressing keeps 30-65%
 * of its slots empty (x2 at 70% load), so 80 to 160 bytes per live entry —
 * over the target of 96 (docs/internals.md). Here empty index slots cost 8 bytes, entries sit
 * packed, and the table holds 67 to 79 bytes per live entry (plus at most two
 * part-empty chunks: below 0.2 bytes an entry at 1M live). A lookup touches
 * the index line and one entry; the walk for a snapshot reads entries in
 * order. Removal moves the last entry into the hole (pointers are valid only
 * until the next insert or remove, table.h). */
#define GMT_TABLE_PAGE ((size_t)4096)
#define GMT_CHUNK_ENTRIES ((size_t)1024)
#define GMT_CHUNK_BYTES                                                                 \
	((GMT_CHUNK_ENTRIES * sizeof(struct gmt__entry) + GMT_TABLE_PAGE - 1) &          \
	 ~(GMT_TABLE_PAGE - 1))
#define GMT_INDEX_MIN_SLOTS ((size_t)1024)
#define GMT_DIR_MIN ((size_t)(GMT_TABLE_PAGE / sizeof(struct gmt__entry *)))
/* Positions are stored in 32 bits, off by one (0 is a free slot). */
#define GMT_TABLE_MAX_ENTRIES ((size_t)UINT32_MAX - 1)

struct gmt__table {
	/* Index slots: 0 free, else hash << 32 | (position + 1). The home of a
	 * slot is hash & mask, so neither probing nor resizing reads entries
	 * except to compare a key whose 32-bit hash matched. */
	uint64_t *index;
	size_t mask;
	/* Entry at position p: chunks[p / GMT_CHUNK_ENTRIES][p % ...];
	 * positions 0..count-1 are all in use. */
	struct gmt__entry **chunks;
	size_t nchunks, dir_cap;
	size_t count;
	size_t counts[GMT_SPACE_COUNT];
};

static size_t page_round(size_t len)
{
	return (len + GMT_TABLE_PAGE - 1) & ~(GMT_TABLE_PAGE - 1);
}

/* The splitmix64 finaliser (Steele, Lea, Flood 2014): every input bit
 * reaches the upper half kept here, so aligned addresses (low bits zero)
 * and consecutive handles spread alike. */
static uint32_t key_hash(unsigned space, uint64_t addr)
{
	uint64_t x = addr + (uint64_t)(space + 1) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (uint32_t)(x >> 32);
}

static struct gmt__entry *entry_at(const struct gmt__table *t, size_t pos)
{
	return &t->chunks[pos / GMT_CHUNK_ENTRIES][pos % GMT_CHUNK_ENTRIES];
}

static size_t slot_pos(uint64_t v)
{
	return (size_t)(uint32_t)v - 1;
}

/* --- the index ----------------------------------------------------------------- */

/* The index slot holding (space, addr) (*found true), or the free slot that
 * ends its probe run. The index always has a free slot. */
static size_t index_probe(const struct gmt__table *t, unsigned space, uint64_t addr, uint32_t h,
			  bool *found)
{
	size_t i;

	for (i = h & t->mask;; i = (i + 1) & t->mask) {
		uint64_t v = t->index[i];

		if (v == 0) {
			*found = false;
			return i;
		}
		if ((uint32_t)(v >> 32) == h) {
			const struct gmt__entry *e = entry_at(t, slot_pos(v));

			if (e->addr == addr && e->space == space) {
				*found = true;
				return i;
			}
		}
	}
}

/* Moves the index into `slots` slots (a power of two, more than count).
 * Returns 0, or -ENOMEM leaving it as it was. */
static int index_resize(struct gmt__table *t, size_t slots)
{
	uint64_t *index = gmt__map(slots * sizeof(*index)), v;
	size_t i, j, mask = slots - 1;

	if (index == NULL)
		return -ENOMEM;
	for (i = 0; i <= t->mask; i++) {
		v = t->index[i];
		if (v == 0)
			continue;
		for (j = (v >> 32) & mask; index[j] != 0; j = (j + 1) & mask)
			;
		index[j] = v;
	}
	munmap(t->index, (t->mask + 1) * sizeof(*t->index));
	t->index = index;
	t->mask = mask;
	return 0;
}

/* Frees index slot i by backward shift (Knuth, TAOCP 6.4, Algorithm R):
 * later slots of the run move into the hole unless that would put one before
 * its home. */
static void index_delete(struct gmt__table *t, size_t i)
{
	size_t j = i, k;
	uint64_t v;

	for (;;) {
		j = (j + 1) & t->mask;
		v = t->index[j];
		if (v == 0)
			break;
		k = (v >> 32) & t->mask;
		/* Home k cyclically in (i, j]: the slot at j must stay. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		t->index[i] = v;
		i = j;
	}
	t->index[i] = 0;
}

/* --- the chunks ---------------------------------------------------------------- */

static int chunk_add(struct gmt__table *t)
{
	struct gmt__entry *c;

	if (t->nchunks == t->dir_cap) {
		size_t cap = 2 * t->dir_cap;
		struct gmt__entry **dir = gmt__map(cap * sizeof(*dir));

		if (dir == NULL)
			return -ENOMEM;
		memcpy(dir, t->chunks, t->nchunks * sizeof(*dir));
		munmap(t->chunks, t->dir_cap * sizeof(*dir));
		t->chunks = dir;
		t->dir_cap = cap;
	}
	c = gmt__map(GMT_CHUNK_BYTES);
	if (c == NULL)
		return -ENOMEM;
	t->chunks[t->nchunks++] = c;
	return 0;
}

/* Unmaps chunks past the one holding the last entry, keeping one spare so
 * that a live set hovering at a chunk boundary does not map and unmap. */
static void chunks_trim(struct gmt__table *t)
{
	while (t->nchunks >= 2 && t->count <= (t->nchunks - 2) * GMT_CHUNK_ENTRIES)
		munmap(t->chunks[--t->nchunks], GMT_CHUNK_BYTES);
}

/* --- the interface --------------------------------------------------------------- */

struct gmt__table *gmt__table_new(void)
{
	struct gmt__table *t = gmt__map(GMT_TABLE_PAGE);

	if (t == NULL)
		return NULL;
	t->index = gmt__map(GMT_INDEX_MIN_SLOTS * sizeof(*t->index));
	t->mask = GMT_INDEX_MIN_SLOTS - 1;
	t->chunks = gmt__map(GMT_DIR_MIN * sizeof(*t->chunks));
	t->dir_cap = GMT_DIR_MIN;
	if (t->index == NULL || t->chunks == NULL) {
		gmt__table_free(t);
		return NULL;
	}
	return t;
}

void gmt__table_free(struct gmt__table *t)
{
	size_t i;

	if (t == NULL)
		return;
	for (i = 0; i < t->nchunks; i++)
		munmap(t->chunks[i], GMT_CHUNK_BYTES);
	if (t->chunks != NULL)
		munmap(t->chunks, t->dir_cap * sizeof(*t->chunks));
	if (t->index != NULL)
		munmap(t->index, (t->mask + 1) * sizeof(*t->index));
	munmap(t, GMT_TABLE_PAGE);
}

struct gmt__entry *gmt__table_find(struct gmt__table *t, enum gmt__space space, uint64_t addr)
{
	size_t i;
	bool found;

	if ((unsigned)space >= GMT_SPACE_COUNT)
		return NULL;
	i = index_probe(t, space, addr, key_hash(space, addr), &found);
	return found ? entry_at(t, slot_pos(t->index[i])) : NULL;
}

struct gmt__entry *gmt__table_insert(struct gmt__table *t, const struct gmt__entry *e,
				     struct gmt__entry *replaced)
{
	uint32_t h;
	size_t i, pos;
	bool found;

	if (e->space >= GMT_SPACE_COUNT) {
		errno = EINVAL;
		return NULL;
	}
	h = key_hash(e->space, e->addr);
	i = index_probe(t, e->space, e->addr, h, &found);
	if (found) {
		struct gmt__entry *old = entry_at(t, slot_pos(t->index[i]));

		if (replaced != NULL)
			*replaced = *old;
		*old = *e;
		return old;
	}
	if (t->count >= GMT_TABLE_MAX_ENTRIES)
		goto nomem;
	if ((t->count + 1) * 10 > (t->mask + 1) * 7) {
		/* When growth fails, fill on while a free slot remains (probes
		 * slow down, nothing is lost); refuse only the last one. */
		if (index_resize(t, 2 * (t->mask + 1)) == 0)
			i = index_probe(t, e->space, e->addr, h, &found);
		else if (t->count + 2 > t->mask + 1)
			goto nomem;
	}
	pos = t->count;
	if (pos == t->nchunks * GMT_CHUNK_ENTRIES && chunk_add(t) < 0)
		goto nomem;
	*entry_at(t, pos) = *e;
	t->index[i] = (uint64_t)h << 32 | (uint64_t)(pos + 1);
	t->count++;
	t->counts[e->space]++;
	return entry_at(t, pos);
nomem:
	errno = ENOMEM;
	return NULL;
}

bool gmt__table_remove(struct gmt__table *t, enum gmt__space space, uint64_t addr,
		       struct gmt__entry *out)
{
	struct gmt__entry *e;
	size_t i, pos, last;
	bool found;

	if ((unsigned)space >= GMT_SPACE_COUNT)
		return false;
	i = index_probe(t, space, addr, key_hash(space, addr), &found);
	if (!found)
		return false;
	pos = slot_pos(t->index[i]);
	e = entry_at(t, pos);
	if (out != NULL)
		*out = *e;
	last = t->count - 1;
	if (pos != last) {
		/* The last entry fills the hole; its index slot follows it. */
		const struct gmt__entry *l = entry_at(t, last);
		uint32_t lh = key_hash(l->space, l->addr);
		size_t j;

		for (j = lh & t->mask; slot_pos(t->index[j]) != last; j = (j + 1) & t->mask)
			;
		t->index[j] = (uint64_t)lh << 32 | (uint64_t)(pos + 1);
		*e = *l;
	}
	t->count--;
	t->counts[space]--;
	index_delete(t, i);
	chunks_trim(t);
	/* Halve the index below 17.5% load (back to 35%); a failure keeps the
	 * larger one, which still works. */
	if (t->mask + 1 > GMT_INDEX_MIN_SLOTS && t->count * 40 < (t->mask + 1) * 7)
		(void)index_resize(t, (t->mask + 1) / 2);
	return true;
}

size_t gmt__table_count(const struct gmt__table *t)
{
	return t->count;
}

size_t gmt__table_count_space(const struct gmt__table *t, enum gmt__space space)
{
	return (unsigned)space < GMT_SPACE_COUNT ? t->counts[space] : 0;
}

int gmt__table_each(struct gmt__table *t, int (*fn)(void *ctx, const struct gmt__entry *e), void *ctx)
{
	size_t pos;
	int r;

	for (pos = 0; pos < t->count; pos++) {
		r = fn(ctx, entry_at(t, pos));
		if (r != 0)
			return r;
	}
	return 0;
}

int gmt__table_copy(const struct gmt__table *t, struct gmt__entry **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (t->count == 0)
		return 0;
	*out = malloc(t->count * sizeof(**out));
	if (*out == NULL)
		return -ENOMEM;
	for (size_t pos = 0; pos < t->count; pos++)
		(*out)[pos] = *entry_at((struct gmt__table *)t, pos);
	*n = t->count;
	return 0;
}

size_t gmt__table_bytes(const struct gmt__table *t)
{
	return GMT_TABLE_PAGE + page_round(t->dir_cap * sizeof(*t->chunks)) +
	       page_round((t->mask + 1) * sizeof(*t->index)) + t->nchunks * GMT_CHUNK_BYTES;
}

void gmt__table_clear(struct gmt__table *t)
{
	struct gmt__entry **dir = NULL;
	uint64_t *small = NULL;
	size_t s;

	while (t->nchunks > 0)
		munmap(t->chunks[--t->nchunks], GMT_CHUNK_BYTES);
	if (t->dir_cap > GMT_DIR_MIN)
		dir = gmt__map(GMT_DIR_MIN * sizeof(*dir));
	if (dir != NULL) {
		munmap(t->chunks, t->dir_cap * sizeof(*dir));
		t->chunks = dir;
		t->dir_cap = GMT_DIR_MIN;
	}
	/* Back to the smallest index; when that cannot be had, empty this one. */
	if (t->mask + 1 > GMT_INDEX_MIN_SLOTS)
		small = gmt__map(GMT_INDEX_MIN_SLOTS * sizeof(*small));
	if (small != NULL) {
		munmap(t->index, (t->mask + 1) * sizeof(*t->index));
		t->index = small;
		t->mask = GMT_INDEX_MIN_SLOTS - 1;
	} else {
		memset(t->index, 0, (t->mask + 1) * sizeof(*t->index));
	}
	t->count = 0;
	for (s = 0; s < GMT_SPACE_COUNT; s++)
		t->counts[s] = 0;
}

void gmt__table_regions(const struct gmt__table *t, gmt__region_fn *fn, void *ctx)
{
	if (t == NULL)
		return;
	fn(ctx, t, GMT_TABLE_PAGE);
	if (t->index != NULL)
		fn(ctx, t->index, (t->mask + 1) * sizeof(*t->index));
	if (t->chunks != NULL)
		fn(ctx, t->chunks, t->dir_cap * sizeof(*t->chunks));
	for (size_t i = 0; i < t->nchunks; i++)
		fn(ctx, t->chunks[i], GMT_CHUNK_BYTES);
}
