/* The live table: every allocation, VMM handle, reservation and mapping the
 * tracer believes live, keyed by (space, address). Only the consumer touches it
 * (callers serialise with the consumer lock), so it has no locking of its own.
 * Open addressing with linear probing; memory stays proportional to the live
 * set (target: at most 96 bytes per live entry, docs/internals.md, "Targets", counting the
 * table's empty slots). */
#ifndef GMT_TABLE_H
#define GMT_TABLE_H

#include "record/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 56 bytes. `link` and `aux` depend on the space:
 * - GMT_SPACE_MAPPING: link = the handle mapped, aux = the offset into it;
 * - GMT_SPACE_HANDLE: aux = the number of mappings of it (as an int64_t),
 *   refs = references: both signed, each may be below zero for a while,
 *   their sum is above zero (state/apply.c, "VMM handles");
 * - otherwise: link = the seq of the event that made the entry, aux = the
 *   context it was allocated in (0 when not known), which takes it along when
 *   it is destroyed. */
struct gmt__entry {
	uint64_t addr;
	uint64_t size;
	uint64_t time_ns;
	uint64_t link;
	uint64_t aux;
	uint32_t stack;
	uint32_t tid;
	uint16_t api;
	uint8_t kind;
	uint8_t space;
	int16_t device;
	union {
		int16_t refs;    /* GMT_SPACE_HANDLE: references */
		uint16_t stream; /* kind async: its stream's id (record/streams.h), 0: not known */
	};
};

_Static_assert(sizeof(struct gmt__entry) == 56, "a live entry is 56 bytes");

struct gmt__table;

/* Every region of memory the table owns, to fn. */
void gmt__table_regions(const struct gmt__table *t, gmt__region_fn *fn, void *ctx);

/* An empty table, memory from mmap. Returns NULL when memory cannot be had. */
struct gmt__table *gmt__table_new(void);
void gmt__table_free(struct gmt__table *t);

/* The entry for (space, addr), or NULL. The pointer is valid until the next
 * insert or remove. */
struct gmt__entry *gmt__table_find(struct gmt__table *t, enum gmt__space space, uint64_t addr);

/* Inserts a copy of *e under (e->space, e->addr), replacing an entry with the
 * same key (the old one is copied to *replaced when not NULL). Returns a pointer
 * to the stored entry, valid until the next insert or remove; or NULL with
 * errno ENOMEM when memory cannot be had, EINVAL for an entry the table
 * cannot key. */
struct gmt__entry *gmt__table_insert(struct gmt__table *t, const struct gmt__entry *e,
				     struct gmt__entry *replaced);

/* Removes (space, addr); copies the removed entry to *out when not NULL.
 * Returns true when it was there. */
bool gmt__table_remove(struct gmt__table *t, enum gmt__space space, uint64_t addr,
		       struct gmt__entry *out);

/* Number of entries, in total and in one space. */
size_t gmt__table_count(const struct gmt__table *t);
size_t gmt__table_count_space(const struct gmt__table *t, enum gmt__space space);

/* Calls fn for every entry (any order); stops early when fn returns nonzero and
 * returns that value. fn must not insert or remove. */
int gmt__table_each(struct gmt__table *t, int (*fn)(void *ctx, const struct gmt__entry *e), void *ctx);

/* A copy of every entry (any order) into a malloc'd array *out of *n
 * entries (NULL when empty), for a snapshot to read without the table.
 * 0, or -ENOMEM. */
int gmt__table_copy(const struct gmt__table *t, struct gmt__entry **out, size_t *n);

/* Bytes of memory the table holds (for the per-allocation overhead figure). */
size_t gmt__table_bytes(const struct gmt__table *t);

/* Empties the table (the child of a fork starts afresh). */
void gmt__table_clear(struct gmt__table *t);

#endif /* GMT_TABLE_H */
