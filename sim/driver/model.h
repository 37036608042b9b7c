/* Internal interface of the memory model, shared by the files that hold it:
 * memory.c (ranges, pages, records, device and managed memory), host.c, pool.c,
 * vmm.c and array.c. Its state, and the helpers each of them gives the others. */
#ifndef GMTSIM_MODEL_H
#define GMTSIM_MODEL_H

#include "sim.h"

#include <stdbool.h>
#include <stdint.h>

/* 256-byte units in a 2 MiB page: the bits of struct sim_chunk. */
#define SIM_UNITS_PER_PAGE ((unsigned)(SIM_PAGE_SIZE / SIM_ALIGN))

/* v rounded up to a multiple of `to` (nonzero). */
static inline uint64_t gmtsim__round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

/* The number of whole 2 MiB pages that hold `bytes`. */
static inline uint64_t gmtsim__pages_for(uint64_t bytes)
{
	return gmtsim__round_up(bytes, SIM_PAGE_SIZE) / SIM_PAGE_SIZE;
}

/* --- memory.c: free ranges of addresses: first fit, coalescing ------------------ */

struct sim_range {
	uint64_t start, len;
};

/* Sorted, disjoint, never adjacent (adjacent ranges are merged). */
struct sim_ranges {
	struct sim_range *v;
	size_t n, cap;
};

/* Starts `r` as the one free range [start, start + len). Returns 0 or -ENOMEM. */
int gmtsim__ranges_init(struct sim_ranges *r, uint64_t start, uint64_t len);

/* Frees the list itself (what is in it is forgotten). */
void gmtsim__ranges_fini(struct sim_ranges *r);

/* Takes `len` bytes aligned to `align` at the lowest address that fits, as the
 * real driver reuses the lowest free address. Returns 0 and *out, or -ENOMEM. */
int gmtsim__ranges_alloc(struct sim_ranges *r, uint64_t len, uint64_t align, uint64_t *out);

/* Gives [start, start + len) back, merged with its neighbours. Returns 0, or
 * -ENOMEM when the list cannot grow (the range is then lost, never handed out twice). */
int gmtsim__ranges_free(struct sim_ranges *r, uint64_t start, uint64_t len);

/* --- memory.c: state ---------------------------------------------------------- */

/* A 2 MiB page holding small allocations, one bit per 256-byte unit. */
struct sim_chunk {
	uint64_t base;
	unsigned used;
	uint64_t bits[SIM_UNITS_PER_PAGE / 64];
	struct sim_chunk *next;
};

/* Device addresses of one window: the ordinary one, or the legacy one below
 * 4 GiB for the 32-bit entry points. */
struct sim_arena {
	struct sim_ranges va;
	struct sim_chunk *chunks;
	bool ready;
};

struct sim_segment {
	uint64_t base, bytes, used;
	struct sim_ranges free;
	struct sim_segment *next;
};

struct CUmemPoolHandle_st {
	int device;
	bool is_default, alive;
	uint64_t threshold, reserved, used, reserved_high, used_high;
	int reuse[3];
	struct sim_segment *segments;
	struct CUmemPoolHandle_st *next;
};

struct CUarray_st {
	uint64_t bytes, pages;
	int device;
	enum sim_call api;
	struct CUctx_st *ctx;
	struct CUarray_st *next;
};

struct sim_dev {
	uint64_t pages_total, pages_other, pages_context, pages_used;
	int contexts;
	struct sim_arena arena, legacy;
	struct sim_ranges managed;
	struct CUmemPoolHandle_st default_pool, *current_pool;
};

/* One allocation in the address tree (device, async, managed, host, registered). */
struct sim_alloc {
	uint64_t addr, size;  /* size: what the caller asked for */
	uint64_t span;        /* address bytes held: units, pages or host pages */
	enum sim_kind kind;
	int device;
	enum sim_call api;
	uint64_t stream;      /* SIM_KIND_ASYNC: the CUstream it was allocated on */
	struct CUctx_st *ctx; /* owning context; NULL for pool memory */
	struct sim_arena *arena;
	struct sim_chunk *chunk;
	struct CUmemPoolHandle_st *pool;
	struct sim_segment *segment;
};

/* A physical allocation of the virtual memory management API. */
struct sim_handle {
	uint64_t id, size;
	int device;
	unsigned refs, maps;
};

struct sim_map {
	uint64_t addr, size, offset;
	struct sim_handle *handle;
};

struct sim_reservation {
	uint64_t addr, size;
	unsigned maps;
};

/* The memory model's state, one instance (defined in memory.c). Every access
 * holds the lock (gmtsim__lock), but `ndevices`, set once by cuInit, is read
 * without it. */
struct sim_model {
	int ndevices;
	struct sim_dev dev[SIM_MAX_DEVICES];
	void *allocs;       /* tsearch tree of struct sim_alloc, by address range */
	void *handles;      /* tsearch tree of struct sim_handle, by id */
	void *maps;         /* tsearch tree of struct sim_map, by address range */
	void *reservations; /* tsearch tree of struct sim_reservation, by address range */
	struct sim_ranges vmm_va;
	struct CUmemPoolHandle_st *pools; /* created pools */
	struct CUarray_st *arrays;
	uint64_t next_handle;
	/* Values of freed handles, the latest last: cuMemCreate gives them
	 * out again before new ones, as the driver reuses its handles. */
	uint64_t *free_handles;
	size_t nfree_handles, free_handles_cap;
	struct sim_totals totals;
	bool forgotten;
};
extern struct sim_model gmtsim__model;

/* Free pages of a device: neither this process's, nor its contexts', nor other
 * processes'. Lock held. */
static inline uint64_t gmtsim__pages_free(const struct sim_dev *d)
{
	return d->pages_total - d->pages_other - d->pages_context - d->pages_used;
}

/* --- memory.c: trees, records, shared checks ------------------------------------ */

/* Orders two address ranges, equal when they overlap (a length of 0 counts as 1),
 * so that a lookup with a one-byte key finds the entry holding an address. */
int gmtsim__cmp_range(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen);

/* tsearch order of gmtsim__model.allocs: struct sim_alloc by [addr, addr + span). */
int gmtsim__cmp_alloc(const void *x, const void *y);

/* The entry of tree `root` equal to `key` under `cmp`, or NULL. */
void *gmtsim__find(void *const *root, void *key, int (*cmp)(const void *, const void *));

/* The allocation whose address range holds `addr`, or NULL. Lock held. */
struct sim_alloc *gmtsim__alloc_at(uint64_t addr);

/* Counts an out-of-memory result of `api` and writes the oom ledger when asked to;
 * returns CUDA_ERROR_OUT_OF_MEMORY. Lock held. */
CUresult gmtsim__oom(enum sim_call api, uint64_t size, int device);

/* Adds a copy of *a to the allocation tree and counts it. Returns CUDA_SUCCESS or
 * CUDA_ERROR_OUT_OF_MEMORY. Lock held. */
CUresult gmtsim__record(struct sim_alloc *a);

/* Removes `a` (a node of the tree) from the allocation tree, counts it and frees
 * it. The memory must already be given back. Lock held. */
void gmtsim__unrecord(struct sim_alloc *a);

/* The end of every allocation: `took` is the model's answer for *a; an
 * out-of-memory is reported as the driver reports it (and noted in the ledger), a
 * success is recorded, and memory whose record cannot be kept is handed to `give`.
 * Lock held. */
CUresult gmtsim__finish(CUresult took, struct sim_alloc *a, void (*give)(struct sim_alloc *));

/* Frees device, managed and stream-ordered memory at exactly `dptr` (only
 * stream-ordered memory when `async_only`); CUDA_ERROR_INVALID_VALUE for any
 * other address. Lock held. */
CUresult gmtsim__free_device_kind(uint64_t dptr, bool async_only);

/* Checks that `loc` names a device and sets *device. Returns CUDA_SUCCESS or the
 * driver's error (not initialised, not supported, invalid device). Lock not needed. */
CUresult gmtsim__check_device_location(const CUmemLocation *loc, int *device);

/* --- host.c ---------------------------------------------------------------------- */

/* Gives back pinned host memory (munmap); the record stays. Lock held. */
void gmtsim__host_give(struct sim_alloc *a);

/* --- pool.c ---------------------------------------------------------------------- */

/* Releases unused segments of `pool` while it reserves more than `keep` bytes.
 * Lock held. */
void gmtsim__pool_trim(struct CUmemPoolHandle_st *pool, uint64_t keep);

/* Gives a stream-ordered allocation back to its pool (a destroyed pool then lets
 * an unused segment go); the record stays. Lock held. */
void gmtsim__pool_give(struct sim_alloc *a);

/* --- vmm.c ---------------------------------------------------------------------- */

/* The mapping holding `addr` when mappings cover [addr, addr + len) (len at
 * least 1) end to end, else NULL. Lock held. */
const struct sim_map *gmtsim__vmm_cover(uint64_t addr, uint64_t len);

/* --- array.c --------------------------------------------------------------------- */

/* Destroys the array at *link, unlinking it from gmtsim__model.arrays and giving
 * its pages back. Lock held. */
void gmtsim__array_free(struct CUarray_st **link);

#endif /* GMTSIM_MODEL_H */
