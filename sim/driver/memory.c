/* The simulated GPU's memory model: 2 MiB physical pages per device, address
 * windows reserved in the process (unified addressing), sub-allocation of small
 * requests inside pages, stream-ordered pools, virtual memory management, pinned
 * and registered host memory, arrays — and every allocation entry point. */
#define _GNU_SOURCE
#include "sim.h"

#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_UNITS_PER_PAGE ((unsigned)(SIM_PAGE_SIZE / SIM_ALIGN))
#define SIM_LEGACY_WINDOW ((uint64_t)64 << 20)
#define SIM_HOST_PAGE ((uint64_t)4096)

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

static uint64_t pages_for(uint64_t bytes)
{
	return round_up(bytes, SIM_PAGE_SIZE) / SIM_PAGE_SIZE;
}

/* --- free ranges of addresses: first fit, coalescing -------------------------- */

struct sim_range {
	uint64_t start, len;
};

/* Sorted, disjoint, never adjacent (adjacent ranges are merged). */
struct sim_ranges {
	struct sim_range *v;
	size_t n, cap;
};

static int ranges_init(struct sim_ranges *r, uint64_t start, uint64_t len)
{
	r->v = malloc(16 * sizeof(*r->v));
	if (r->v == NULL)
		return -ENOMEM;
	r->cap = 16;
	r->n = 1;
	r->v[0] = (struct sim_range){ start, len };
	return 0;
}

static void ranges_fini(struct sim_ranges *r)
{
	free(r->v);
	*r = (struct sim_ranges){ 0 };
}

/* Lowest-addressed fit, as the real driver reuses the lowest free address.
 * Returns 0 and *out, or -ENOMEM. */
static int ranges_alloc(struct sim_ranges *r, uint64_t len, uint64_t align, uint64_t *out)
{
	for (size_t i = 0; i < r->n; i++) {
		struct sim_range *g = &r->v[i];
		uint64_t a = round_up(g->start, align);
		uint64_t end = g->start + g->len;

		if (a + len > end || a < g->start)
			continue;
		if (a > g->start && a + len < end) {
			/* Split in three: keep the head here, insert the tail after it. */
			if (r->n == r->cap) {
				struct sim_range *nv = realloc(r->v, 2 * r->cap * sizeof(*nv));
				if (nv == NULL)
					return -ENOMEM;
				r->v = nv;
				r->cap *= 2;
				g = &r->v[i];
			}
			memmove(&r->v[i + 2], &r->v[i + 1], (r->n - i - 1) * sizeof(*r->v));
			r->v[i + 1] = (struct sim_range){ a + len, end - (a + len) };
			r->n++;
			g->len = a - g->start;
		} else if (a > g->start) {
			g->len = a - g->start;
		} else if (a + len < end) {
			g->start = a + len;
			g->len = end - g->start;
		} else {
			memmove(g, g + 1, (r->n - i - 1) * sizeof(*r->v));
			r->n--;
		}
		*out = a;
		return 0;
	}
	return -ENOMEM;
}

/* Returns 0, or -ENOMEM when the list cannot grow (the range is then lost to
 * the simulator, never handed out twice). */
static int ranges_free(struct sim_ranges *r, uint64_t start, uint64_t len)
{
	size_t lo = 0, hi = r->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (r->v[mid].start < start)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* lo: first range after `start`. Merge with the one before and/or after. */
	bool prev = lo > 0 && r->v[lo - 1].start + r->v[lo - 1].len == start;
	bool next = lo < r->n && start + len == r->v[lo].start;

	if (prev && next) {
		r->v[lo - 1].len += len + r->v[lo].len;
		memmove(&r->v[lo], &r->v[lo + 1], (r->n - lo - 1) * sizeof(*r->v));
		r->n--;
	} else if (prev) {
		r->v[lo - 1].len += len;
	} else if (next) {
		r->v[lo].start = start;
		r->v[lo].len += len;
	} else {
		if (r->n == r->cap) {
			struct sim_range *nv = realloc(r->v, 2 * r->cap * sizeof(*nv));
			if (nv == NULL)
				return -ENOMEM;
			r->v = nv;
			r->cap *= 2;
		}
		memmove(&r->v[lo + 1], &r->v[lo], (r->n - lo) * sizeof(*r->v));
		r->v[lo] = (struct sim_range){ start, len };
		r->n++;
	}
	return 0;
}

/* --- state ----------------------------------------------------------------------- */

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

static struct {
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
	struct sim_totals totals;
	bool forgotten;
} g;

/* Range comparators: two entries are "equal" when their ranges overlap, so a
 * lookup with a one-byte key finds the entry that contains an address. */
static int cmp_range(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	if (a + (alen ? alen : 1) <= b)
		return -1;
	if (b + (blen ? blen : 1) <= a)
		return 1;
	return 0;
}

static int cmp_alloc(const void *x, const void *y)
{
	const struct sim_alloc *a = x, *b = y;
	return cmp_range(a->addr, a->span, b->addr, b->span);
}

static int cmp_map(const void *x, const void *y)
{
	const struct sim_map *a = x, *b = y;
	return cmp_range(a->addr, a->size, b->addr, b->size);
}

static int cmp_reservation(const void *x, const void *y)
{
	const struct sim_reservation *a = x, *b = y;
	return cmp_range(a->addr, a->size, b->addr, b->size);
}

static int cmp_handle(const void *x, const void *y)
{
	const struct sim_handle *a = x, *b = y;
	return a->id < b->id ? -1 : a->id > b->id;
}

static void *find(void *const *root, void *key, int (*cmp)(const void *, const void *))
{
	void *const *node = tfind(key, root, cmp);
	return node != NULL ? *node : NULL;
}

static struct sim_alloc *alloc_at(uint64_t addr)
{
	struct sim_alloc key = { .addr = addr, .span = 1 };
	return find(&g.allocs, &key, cmp_alloc);
}

static uint64_t pages_free(const struct sim_dev *d)
{
	return d->pages_total - d->pages_other - d->pages_context - d->pages_used;
}

const char *gmtsim__kind_name(enum sim_kind kind)
{
	static const char *const names[] = {
		[SIM_KIND_DEVICE] = "device", [SIM_KIND_ASYNC] = "async",
		[SIM_KIND_MANAGED] = "managed", [SIM_KIND_HOST] = "host",
		[SIM_KIND_REGISTERED] = "registered", [SIM_KIND_VMM] = "vmm",
		[SIM_KIND_ARRAY] = "array",
	};
	return names[kind];
}

/* --- setup ------------------------------------------------------------------------ */

/* Reserve `len` bytes of the process's address space, aligned to a page, so that
 * no host allocation can ever take a simulated device address (what the real
 * driver does for unified addressing). */
static int reserve_window(uint64_t len, int extra_flags, uint64_t *out)
{
	void *p = mmap(NULL, len + SIM_PAGE_SIZE, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | extra_flags, -1, 0);

	if (p == MAP_FAILED)
		return -errno;
	*out = round_up((uint64_t)(uintptr_t)p, SIM_PAGE_SIZE);
	return 0;
}

static int arena_init(struct sim_arena *a, uint64_t len, int extra_flags)
{
	uint64_t base = 0;
	int r = reserve_window(len, extra_flags, &base);

	if (r < 0)
		return r;
	r = ranges_init(&a->va, base, len);
	if (r == 0)
		a->ready = true;
	return r;
}

CUresult gmtsim__memory_init(const struct sim_config *cfg)
{
	uint64_t total = 0, base = 0;

	g.ndevices = cfg->ndevices;
	g.next_handle = 0x1000;
	for (int i = 0; i < cfg->ndevices; i++) {
		struct sim_dev *d = &g.dev[i];

		d->pages_total = cfg->memory[i] / SIM_PAGE_SIZE;
		d->pages_other = pages_for(cfg->other[i]);
		if (d->pages_other > d->pages_total)
			d->pages_other = d->pages_total;
		/* NOTE: twice the capacity of addresses, so that holes left by frees
		 * never make a request fail that the pages could satisfy. */
		if (arena_init(&d->arena, 2 * cfg->memory[i] + ((uint64_t)1 << 30), 0) < 0 ||
		    reserve_window(2 * cfg->memory[i], 0, &base) < 0 ||
		    ranges_init(&d->managed, base, 2 * cfg->memory[i]) < 0) {
			fprintf(stderr, "gmtsim: cannot reserve address space for device %d\n", i);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		d->default_pool = (struct CUmemPoolHandle_st){
			.device = i, .is_default = true, .alive = true,
		};
		d->current_pool = &d->default_pool;
		total += cfg->memory[i];
	}
	if (reserve_window(2 * total + ((uint64_t)1 << 30), 0, &base) < 0 ||
	    ranges_init(&g.vmm_va, base, 2 * total + ((uint64_t)1 << 30)) < 0) {
		fprintf(stderr, "gmtsim: cannot reserve address space for virtual memory management\n");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

void gmtsim__memory_forget(void)
{
	g.forgotten = true;
}

CUresult gmtsim__context_created(int device)
{
	struct sim_dev *d = &g.dev[device];
	uint64_t pages = pages_for(gmtsim__config()->context_bytes);

	if (d->contexts == 0) {
		if (pages > pages_free(d))
			return CUDA_ERROR_OUT_OF_MEMORY;
		d->pages_context = pages;
	}
	d->contexts++;
	return CUDA_SUCCESS;
}

/* --- allocation records -------------------------------------------------------------- */

static CUresult oom(enum sim_call api, uint64_t size, int device)
{
	struct sim_failed_request f = { api, size, device, CUDA_ERROR_OUT_OF_MEMORY };

	g.totals.oom++;
	gmtsim__ledger_oom(&f);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult record(struct sim_alloc *a)
{
	struct sim_alloc *copy = malloc(sizeof(*copy));

	if (copy == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*copy = *a;
	if (tsearch(copy, &g.allocs, cmp_alloc) == NULL) {
		free(copy);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	g.totals.allocs++;
	return CUDA_SUCCESS;
}

static void unrecord(struct sim_alloc *a)
{
	tdelete(a, &g.allocs, cmp_alloc);
	g.totals.frees++;
	free(a);
}

/* The end of every allocation: an out-of-memory from the model is reported
 * as the driver reports it (and noted in the ledger); a success is recorded,
 * and memory whose record cannot be kept is given back. Lock held. */
static CUresult finish(CUresult took, struct sim_alloc *a, void (*give)(struct sim_alloc *))
{
	if (took == CUDA_ERROR_OUT_OF_MEMORY)
		return oom(a->api, a->size, a->device);
	if (took != CUDA_SUCCESS)
		return took;
	took = record(a);
	if (took != CUDA_SUCCESS)
		give(a);
	return took;
}

/* --- device memory: chunks for small requests, pages for large ones ------------------- */

static int find_run(const uint64_t *bits, unsigned k)
{
	unsigned run = 0, start = 0;

	for (unsigned w = 0; w < SIM_UNITS_PER_PAGE / 64; w++) {
		uint64_t word = bits[w];

		if (word == UINT64_MAX) {
			run = 0;
			continue;
		}
		for (unsigned b = 0; b < 64; b++) {
			if (word & ((uint64_t)1 << b)) {
				run = 0;
			} else {
				if (run++ == 0)
					start = w * 64 + b;
				if (run == k)
					return (int)start;
			}
		}
	}
	return -1;
}

static void set_bits(uint64_t *bits, unsigned from, unsigned k, bool on)
{
	for (unsigned i = from; i < from + k; i++) {
		if (on)
			bits[i / 64] |= (uint64_t)1 << (i % 64);
		else
			bits[i / 64] &= ~((uint64_t)1 << (i % 64));
	}
}

/* Take `size` bytes of device memory in `arena` of device `dev`: fills a->addr,
 * span, chunk. Returns CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult device_take(struct sim_dev *d, struct sim_arena *arena, uint64_t size, struct sim_alloc *a)
{
	uint64_t addr;

	if (size < SIM_PAGE_SIZE) {
		unsigned k = (unsigned)(round_up(size, SIM_ALIGN) / SIM_ALIGN);
		struct sim_chunk *c;
		int at = -1;

		for (c = arena->chunks; c != NULL; c = c->next) {
			if (SIM_UNITS_PER_PAGE - c->used >= k && (at = find_run(c->bits, k)) >= 0)
				break;
		}
		if (c == NULL) {
			if (pages_free(d) == 0)
				return CUDA_ERROR_OUT_OF_MEMORY;
			c = calloc(1, sizeof(*c));
			if (c == NULL)
				return CUDA_ERROR_OUT_OF_MEMORY;
			if (ranges_alloc(&arena->va, SIM_PAGE_SIZE, SIM_PAGE_SIZE, &c->base) < 0) {
				free(c);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			d->pages_used++;
			/* Sorted by address: small requests reuse the lowest free slot. */
			struct sim_chunk **link = &arena->chunks;
			while (*link != NULL && (*link)->base < c->base)
				link = &(*link)->next;
			c->next = *link;
			*link = c;
			at = 0;
		}
		set_bits(c->bits, (unsigned)at, k, true);
		c->used += k;
		a->addr = c->base + (uint64_t)at * SIM_ALIGN;
		a->span = (uint64_t)k * SIM_ALIGN;
		a->chunk = c;
		a->arena = arena;
		return CUDA_SUCCESS;
	}
	uint64_t pages = pages_for(size);
	if (pages > pages_free(d))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ranges_alloc(&arena->va, pages * SIM_PAGE_SIZE, SIM_PAGE_SIZE, &addr) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->pages_used += pages;
	a->addr = addr;
	a->span = pages * SIM_PAGE_SIZE;
	a->chunk = NULL;
	a->arena = arena;
	return CUDA_SUCCESS;
}

static void device_give(struct sim_alloc *a)
{
	struct sim_dev *d = &g.dev[a->device];
	struct sim_arena *arena = a->arena;
	struct sim_chunk *c = a->chunk;

	if (c == NULL) {
		ranges_free(&arena->va, a->addr, a->span);
		d->pages_used -= a->span / SIM_PAGE_SIZE;
		return;
	}
	unsigned k = (unsigned)(a->span / SIM_ALIGN);
	set_bits(c->bits, (unsigned)((a->addr - c->base) / SIM_ALIGN), k, false);
	c->used -= k;
	if (c->used == 0) {
		/* The last allocation unpins its page. */
		for (struct sim_chunk **p = &arena->chunks; *p != NULL; p = &(*p)->next) {
			if (*p == c) {
				*p = c->next;
				break;
			}
		}
		ranges_free(&arena->va, c->base, SIM_PAGE_SIZE);
		d->pages_used--;
		free(c);
	}
}

/* Managed memory holds addresses only; pinned host memory is real memory. */
static void managed_give(struct sim_alloc *a)
{
	ranges_free(&g.dev[a->device].managed, a->addr, a->span);
}

static void host_give(struct sim_alloc *a)
{
	munmap((void *)(uintptr_t)a->addr, a->span);
}

static CUresult current(int *device, struct CUctx_st **ctx)
{
	return gmtsim__current_device(device, ctx);
}

static CUresult legacy_arena(struct sim_dev *d, struct sim_arena **out)
{
#ifdef MAP_32BIT
	/* NOTE: MAP_32BIT (x86-64) places the window in the low 2 GiB, so that the
	 * 32-bit pointers of the legacy ABI are exact. Set up on first use only. */
	if (!d->legacy.ready && arena_init(&d->legacy, SIM_LEGACY_WINDOW, MAP_32BIT) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = &d->legacy;
	return CUDA_SUCCESS;
#else
	return CUDA_ERROR_NOT_SUPPORTED;
#endif
}

/* cuMemAlloc and its relatives: `size` is what the ledger records (pitch ×
 * height for pitched memory). */
static CUresult mem_alloc(enum sim_call api, uint64_t *out, uint64_t size, bool legacy)
{
	struct sim_alloc a = { .size = size, .kind = SIM_KIND_DEVICE, .api = api };
	struct sim_arena *arena;
	CUresult r;

	if (out == NULL || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = current(&a.device, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	arena = &g.dev[a.device].arena;
	if (legacy) {
		r = legacy_arena(&g.dev[a.device], &arena);
		if (r != CUDA_SUCCESS)
			goto out;
	}
	r = finish(device_take(&g.dev[a.device], arena, size, &a), &a, device_give);
	if (r == CUDA_SUCCESS)
		*out = a.addr;
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	uint64_t p;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAlloc_v2);
	r = mem_alloc(SIM_CALL_cuMemAlloc_v2, dptr ? &p : NULL, bytesize, false);
	if (r == CUDA_SUCCESS)
		*dptr = p;
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize)
{
	uint64_t p;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAlloc);
	r = mem_alloc(SIM_CALL_cuMemAlloc, dptr ? &p : NULL, bytesize, true);
	if (r == CUDA_SUCCESS)
		*dptr = (unsigned int)p;
	return r;
}

/* Pitch: the row width rounded up to 512 bytes, what the real driver gives for
 * the element sizes it accepts (4, 8, 16). */
static CUresult pitch_of(uint64_t width, uint64_t height, unsigned elem, uint64_t *pitch)
{
	if (width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	*pitch = round_up(width, 512);
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
						  size_t Height, unsigned int ElementSizeBytes)
{
	uint64_t pitch, p;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAllocPitch_v2);
	if (dptr == NULL || pPitch == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	r = pitch_of(WidthInBytes, Height, ElementSizeBytes, &pitch);
	if (r != CUDA_SUCCESS)
		return r;
	r = mem_alloc(SIM_CALL_cuMemAllocPitch_v2, &p, pitch * Height, false);
	if (r == CUDA_SUCCESS) {
		*dptr = p;
		*pPitch = pitch;
	}
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch,
					       unsigned int WidthInBytes, unsigned int Height,
					       unsigned int ElementSizeBytes)
{
	uint64_t pitch, p;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAllocPitch);
	if (dptr == NULL || pPitch == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	r = pitch_of(WidthInBytes, Height, ElementSizeBytes, &pitch);
	if (r != CUDA_SUCCESS)
		return r;
	if (pitch * Height > UINT32_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	r = mem_alloc(SIM_CALL_cuMemAllocPitch, &p, pitch * Height, true);
	if (r == CUDA_SUCCESS) {
		*dptr = (unsigned int)p;
		*pPitch = (unsigned int)pitch;
	}
	return r;
}

static void pool_give(struct sim_alloc *a);

/* Frees device, managed and stream-ordered memory (cuMemFree may free memory of
 * cuMemAllocAsync, as in CUDA). Lock held. */
static CUresult free_device_kind(uint64_t dptr, bool async_only)
{
	struct sim_alloc *a = alloc_at(dptr);

	if (a == NULL || a->addr != dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (async_only ? a->kind != SIM_KIND_ASYNC
		       : (a->kind != SIM_KIND_DEVICE && a->kind != SIM_KIND_ASYNC &&
			  a->kind != SIM_KIND_MANAGED))
		return CUDA_ERROR_INVALID_VALUE;
	switch (a->kind) {
	case SIM_KIND_DEVICE:
		device_give(a);
		break;
	case SIM_KIND_MANAGED:
		managed_give(a);
		break;
	default:
		pool_give(a);
		break;
	}
	unrecord(a);
	return CUDA_SUCCESS;
}

static CUresult mem_free(uint64_t dptr)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = current(&dev, NULL);
	if (r == CUDA_SUCCESS)
		r = free_device_kind(dptr, false);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	gmtsim__count(SIM_CALL_cuMemFree_v2);
	return mem_free(dptr);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFree(unsigned int dptr)
{
	gmtsim__count(SIM_CALL_cuMemFree);
	return mem_free(dptr);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct sim_alloc *a;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemGetAddressRange_v2);
	gmtsim__lock();
	r = current(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		a = alloc_at(dptr);
		if (a == NULL || a->kind == SIM_KIND_HOST || a->kind == SIM_KIND_REGISTERED ||
		    dptr >= a->addr + a->size) {
			r = CUDA_ERROR_NOT_FOUND;
		} else {
			if (pbase != NULL)
				*pbase = a->addr;
			if (psize != NULL)
				*psize = a->size;
		}
	}
	gmtsim__unlock();
	return r;
}

static CUresult mem_get_info(uint64_t *free_bytes, uint64_t *total)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = current(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		*free_bytes = pages_free(&g.dev[dev]) * SIM_PAGE_SIZE;
		*total = g.dev[dev].pages_total * SIM_PAGE_SIZE;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	uint64_t f, t;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemGetInfo_v2);
	if (free_bytes == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	r = mem_get_info(&f, &t);
	if (r == CUDA_SUCCESS) {
		*free_bytes = f;
		*total = t;
	}
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
	uint64_t f, t;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemGetInfo);
	if (free_bytes == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	r = mem_get_info(&f, &t);
	if (r == CUDA_SUCCESS) {
		*free_bytes = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
		*total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
	}
	return r;
}

/* --- managed memory: addresses, no resident pages ------------------------------------ */

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	struct sim_alloc a = { .size = bytesize, .kind = SIM_KIND_MANAGED,
			       .api = SIM_CALL_cuMemAllocManaged };
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAllocManaged);
	if (dptr == NULL || bytesize == 0 ||
	    (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = current(&a.device, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a.span = round_up(bytesize, SIM_ALIGN);
	r = finish(ranges_alloc(&g.dev[a.device].managed, a.span, SIM_ALIGN, &a.addr) < 0
			   ? CUDA_ERROR_OUT_OF_MEMORY
			   : CUDA_SUCCESS,
		   &a, managed_give);
	if (r == CUDA_SUCCESS)
		*dptr = a.addr;
out:
	gmtsim__unlock();
	return r;
}

/* --- pinned and registered host memory -------------------------------------------------- */

static CUresult host_alloc(enum sim_call api, void **pp, uint64_t size, unsigned int flags)
{
	struct sim_alloc a = { .size = size, .kind = SIM_KIND_HOST, .device = -1, .api = api };
	int dev;
	void *p;
	CUresult r;

	if (pp == NULL || size == 0 ||
	    (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				 CU_MEMHOSTALLOC_WRITECOMBINED)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = current(&dev, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a.span = round_up(size, SIM_HOST_PAGE);
	p = mmap(NULL, a.span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	a.addr = (uint64_t)(uintptr_t)p;
	r = finish(p == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, &a, host_give);
	if (r == CUDA_SUCCESS)
		*pp = p;
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostAlloc);
	return host_alloc(SIM_CALL_cuMemHostAlloc, pp, bytesize, Flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	gmtsim__count(SIM_CALL_cuMemAllocHost_v2);
	return host_alloc(SIM_CALL_cuMemAllocHost_v2, pp, bytesize, 0);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize)
{
	gmtsim__count(SIM_CALL_cuMemAllocHost);
	return host_alloc(SIM_CALL_cuMemAllocHost, pp, bytesize, 0);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	struct sim_alloc *a;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemFreeHost);
	gmtsim__lock();
	r = current(&dev, NULL);
	if (r != CUDA_SUCCESS)
		goto out;
	a = alloc_at((uint64_t)(uintptr_t)p);
	if (p == NULL || a == NULL || a->addr != (uint64_t)(uintptr_t)p || a->kind != SIM_KIND_HOST) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	host_give(a);
	unrecord(a);
out:
	gmtsim__unlock();
	return r;
}

static CUresult host_register(enum sim_call api, void *p, size_t size, unsigned int flags, bool legacy)
{
	struct sim_alloc a = { .addr = (uint64_t)(uintptr_t)p, .size = size, .span = size,
			       .kind = SIM_KIND_REGISTERED, .device = -1, .api = api };
	int dev;
	CUresult r;

	if (p == NULL || size == 0 ||
	    (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
				 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* NOTE: before CUDA 6.5 (the legacy entry point) pointer and size had to be
	 * page aligned; _v2 lifted that. */
	if (legacy && (a.addr % SIM_HOST_PAGE != 0 || size % SIM_HOST_PAGE != 0))
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = current(&dev, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	if (find(&g.allocs, &a, cmp_alloc) != NULL) {
		r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		goto out;
	}
	r = record(&a);
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostRegister_v2);
	return host_register(SIM_CALL_cuMemHostRegister_v2, p, bytesize, Flags, false);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuMemHostRegister);
	return host_register(SIM_CALL_cuMemHostRegister, p, bytesize, Flags, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	struct sim_alloc *a;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemHostUnregister);
	gmtsim__lock();
	r = current(&dev, NULL);
	if (r != CUDA_SUCCESS)
		goto out;
	a = alloc_at((uint64_t)(uintptr_t)p);
	if (p == NULL || a == NULL || a->addr != (uint64_t)(uintptr_t)p || a->kind != SIM_KIND_REGISTERED) {
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
		goto out;
	}
	unrecord(a);
out:
	gmtsim__unlock();
	return r;
}

/* --- stream-ordered pools ------------------------------------------------------------------ */

static void pool_note(struct CUmemPoolHandle_st *pool)
{
	if (pool->reserved > pool->reserved_high)
		pool->reserved_high = pool->reserved;
	if (pool->used > pool->used_high)
		pool->used_high = pool->used;
}

static void segment_release(struct CUmemPoolHandle_st *pool, struct sim_segment *s)
{
	struct sim_dev *d = &g.dev[pool->device];

	for (struct sim_segment **p = &pool->segments; *p != NULL; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	ranges_free(&d->arena.va, s->base, s->bytes);
	d->pages_used -= s->bytes / SIM_PAGE_SIZE;
	pool->reserved -= s->bytes;
	ranges_fini(&s->free);
	free(s);
}

/* Release unused segments while the pool reserves more than `keep`. */
static void pool_trim(struct CUmemPoolHandle_st *pool, uint64_t keep)
{
	struct sim_segment *s = pool->segments, *next;

	for (; s != NULL && pool->reserved > keep; s = next) {
		next = s->next;
		if (s->used == 0)
			segment_release(pool, s);
	}
}

void gmtsim__pools_sync(int device)
{
	struct CUmemPoolHandle_st *p = &g.dev[device].default_pool;

	pool_trim(p, p->threshold);
	for (p = g.pools; p != NULL; p = p->next)
		if (p->device == device)
			pool_trim(p, p->alive ? p->threshold : 0);
}

static CUresult pool_take(struct CUmemPoolHandle_st *pool, uint64_t size, struct sim_alloc *a)
{
	struct sim_dev *d = &g.dev[pool->device];
	uint64_t need = round_up(size, SIM_ALIGN), bytes, addr;
	struct sim_segment *s;

	for (s = pool->segments; s != NULL; s = s->next) {
		if (ranges_alloc(&s->free, need, SIM_ALIGN, &addr) == 0)
			goto found;
	}
	bytes = round_up(need, SIM_PAGE_SIZE);
	if (bytes / SIM_PAGE_SIZE > pages_free(d)) {
		/* A pool that cannot grow first gives back what it holds unused. */
		pool_trim(pool, 0);
		if (bytes / SIM_PAGE_SIZE > pages_free(d))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (ranges_alloc(&d->arena.va, bytes, SIM_PAGE_SIZE, &s->base) < 0) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (ranges_init(&s->free, s->base, bytes) < 0) {
		ranges_free(&d->arena.va, s->base, bytes);
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->bytes = bytes;
	s->next = pool->segments;
	pool->segments = s;
	pool->reserved += bytes;
	d->pages_used += bytes / SIM_PAGE_SIZE;
	ranges_alloc(&s->free, need, SIM_ALIGN, &addr);
found:
	s->used += need;
	pool->used += need;
	pool_note(pool);
	a->addr = addr;
	a->span = need;
	a->pool = pool;
	a->segment = s;
	return CUDA_SUCCESS;
}

static void pool_give(struct sim_alloc *a)
{
	struct CUmemPoolHandle_st *pool = a->pool;
	struct sim_segment *s = a->segment;

	ranges_free(&s->free, a->addr, a->span);
	s->used -= a->span;
	pool->used -= a->span;
	/* A destroyed pool lets its memory go as soon as it is unused. */
	if (!pool->alive && s->used == 0)
		segment_release(pool, s);
}

static CUresult alloc_async(enum sim_call api, CUdeviceptr *dptr, size_t size,
			    struct CUmemPoolHandle_st *pool, CUstream stream)
{
	struct sim_alloc a = { .size = size, .kind = SIM_KIND_ASYNC, .api = api };
	CUresult r;

	if (dptr == NULL || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__stream_device(stream, &a.device);
	if (r != CUDA_SUCCESS)
		goto out;
	if (pool == NULL) {
		pool = g.dev[a.device].current_pool;
	} else if (!pool->alive) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	a.device = pool->device;
	r = finish(pool_take(pool, size, &a), &a, pool_give);
	if (r == CUDA_SUCCESS)
		*dptr = a.addr;
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemAllocAsync);
	return alloc_async(SIM_CALL_cuMemAllocAsync, dptr, bytesize, NULL, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemAllocAsync_ptsz);
	return alloc_async(SIM_CALL_cuMemAllocAsync_ptsz, dptr, bytesize, NULL, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
						       CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemAllocFromPoolAsync);
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(SIM_CALL_cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
							    CUmemoryPool pool, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemAllocFromPoolAsync_ptsz);
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(SIM_CALL_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = gmtsim__stream_device(stream, &dev);
	if (r == CUDA_SUCCESS)
		r = free_device_kind(dptr, true);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemFreeAsync);
	return free_async(dptr, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuMemFreeAsync_ptsz);
	return free_async(dptr, hStream);
}

static CUresult check_device_location(const CUmemLocation *loc, int *device)
{
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (loc->id < 0 || loc->id >= g.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = loc->id;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	struct CUmemPoolHandle_st *p;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemPoolCreate);
	if (pool == NULL || poolProps == NULL || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_device_location(&poolProps->location, &dev);
	if (r != CUDA_SUCCESS)
		return r;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->device = dev;
	p->alive = true;
	gmtsim__lock();
	p->next = g.pools;
	g.pools = p;
	gmtsim__unlock();
	*pool = p;
	return CUDA_SUCCESS;
}

/* A pool handle is valid when it is a device's default pool or a live created
 * one. Lock held. */
static bool pool_valid(struct CUmemPoolHandle_st *pool)
{
	for (int i = 0; i < g.ndevices; i++)
		if (pool == &g.dev[i].default_pool)
			return true;
	for (struct CUmemPoolHandle_st *p = g.pools; p != NULL; p = p->next)
		if (p == pool)
			return p->alive;
	return false;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemPoolDestroy);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	if (pool == NULL || !pool_valid(pool) || pool->is_default) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		/* Outstanding allocations keep their segments until freed. */
		pool->alive = false;
		pool_trim(pool, 0);
		for (int i = 0; i < g.ndevices; i++)
			if (g.dev[i].current_pool == pool)
				g.dev[i].current_pool = &g.dev[i].default_pool;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemPoolTrimTo);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	if (pool == NULL || !pool_valid(pool))
		r = CUDA_ERROR_INVALID_VALUE;
	else
		pool_trim(pool, minBytesToKeep);
	gmtsim__unlock();
	return r;
}

static CUresult pool_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value, bool set)
{
	uint64_t *v64 = value;
	int *vi = value;
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	if (pool == NULL || !pool_valid(pool)) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		if (set)
			pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *vi;
		else
			*vi = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			pool->threshold = *v64;
		else
			*v64 = pool->threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			r = CUDA_ERROR_INVALID_VALUE;
		else
			*v64 = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? pool->used : pool->reserved;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
		uint64_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &pool->used_high
								       : &pool->reserved_high;
		uint64_t now = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? pool->used : pool->reserved;
		/* Setting it (to 0, the only value allowed) resets the watermark. */
		if (set && *v64 != 0)
			r = CUDA_ERROR_INVALID_VALUE;
		else if (set)
			*high = now;
		else
			*v64 = *high;
		break;
	}
	default:
		r = CUDA_ERROR_INVALID_VALUE;
		break;
	}
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	gmtsim__count(SIM_CALL_cuMemPoolSetAttribute);
	return pool_attribute(pool, attr, value, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	gmtsim__count(SIM_CALL_cuMemPoolGetAttribute);
	return pool_attribute(pool, attr, value, false);
}

static CUresult device_pool(CUmemoryPool *pool_out, CUdevice dev, bool current_one)
{
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (pool_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= g.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	gmtsim__lock();
	*pool_out = current_one ? g.dev[dev].current_pool : &g.dev[dev].default_pool;
	gmtsim__unlock();
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDeviceGetDefaultMemPool);
	return device_pool(pool_out, dev, false);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDeviceGetMemPool);
	return device_pool(pool, dev, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceSetMemPool);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (dev < 0 || dev >= g.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	gmtsim__lock();
	if (pool == NULL || !pool_valid(pool) || pool->device != dev)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		g.dev[dev].current_pool = pool;
	gmtsim__unlock();
	return r;
}

/* --- virtual memory management ------------------------------------------------------------ */

static CUresult check_prop(const CUmemAllocationProp *prop, int *device)
{
	if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	return check_device_location(&prop->location, device);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
							     CUmemAllocationGranularity_flags option)
{
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemGetAllocationGranularity);
	if (granularity == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
				    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop, &dev);
	if (r == CUDA_SUCCESS)
		*granularity = SIM_PAGE_SIZE;
	return r;
}

static void handle_maybe_free(struct sim_handle *h)
{
	if (h->refs > 0 || h->maps > 0)
		return;
	g.dev[h->device].pages_used -= h->size / SIM_PAGE_SIZE;
	tdelete(h, &g.handles, cmp_handle);
	g.totals.frees++;
	free(h);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
					   const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct sim_handle *h;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemCreate);
	if (handle == NULL || size == 0 || size % SIM_PAGE_SIZE != 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop, &dev);
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	if (size / SIM_PAGE_SIZE > pages_free(&g.dev[dev])) {
		r = oom(SIM_CALL_cuMemCreate, size, dev);
		goto out;
	}
	h = malloc(sizeof(*h));
	if (h == NULL) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*h = (struct sim_handle){ .id = g.next_handle, .size = size, .device = dev, .refs = 1 };
	if (tsearch(h, &g.handles, cmp_handle) == NULL) {
		free(h);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	g.next_handle += 0x10;
	g.dev[dev].pages_used += size / SIM_PAGE_SIZE;
	g.totals.allocs++;
	*handle = h->id;
out:
	gmtsim__unlock();
	return r;
}

static struct sim_handle *handle_find(CUmemGenericAllocationHandle id)
{
	struct sim_handle key = { .id = id };
	return find(&g.handles, &key, cmp_handle);
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct sim_handle *h;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemRelease);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	h = handle_find(handle);
	if (h == NULL || h->refs == 0) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		h->refs--;
		handle_maybe_free(h);
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
								      CUmemGenericAllocationHandle handle)
{
	struct sim_handle *h;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemGetAllocationPropertiesFromHandle);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	h = handle_find(handle);
	if (h == NULL) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		memset(prop, 0, sizeof(*prop));
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = h->device;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
						   CUdeviceptr addr, unsigned long long flags)
{
	struct sim_reservation *res;
	uint64_t at;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAddressReserve);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (ptr == NULL || size == 0 || size % SIM_PAGE_SIZE != 0 || flags != 0 ||
	    (alignment != 0 && (alignment & (alignment - 1)) != 0))
		return CUDA_ERROR_INVALID_VALUE;
	res = malloc(sizeof(*res));
	if (res == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gmtsim__lock();
	/* NOTE: `addr` is only a hint in CUDA; the simulator always picks the
	 * lowest free range, which the API allows. */
	(void)addr;
	if (ranges_alloc(&g.vmm_va, size, alignment > SIM_PAGE_SIZE ? alignment : SIM_PAGE_SIZE, &at) < 0) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*res = (struct sim_reservation){ .addr = at, .size = size };
	if (tsearch(res, &g.reservations, cmp_reservation) == NULL) {
		ranges_free(&g.vmm_va, at, size);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*ptr = at;
	res = NULL;
out:
	gmtsim__unlock();
	free(res);
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct sim_reservation key = { .addr = ptr, .size = 1 }, *res;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemAddressFree);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	res = find(&g.reservations, &key, cmp_reservation);
	/* The whole reservation, and nothing still mapped inside it. */
	if (res == NULL || res->addr != ptr || res->size != size || res->maps != 0) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		tdelete(res, &g.reservations, cmp_reservation);
		ranges_free(&g.vmm_va, res->addr, res->size);
		free(res);
	}
	gmtsim__unlock();
	return r;
}

static struct sim_reservation *reservation_holding(uint64_t ptr, uint64_t size)
{
	struct sim_reservation key = { .addr = ptr, .size = 1 };
	struct sim_reservation *res = find(&g.reservations, &key, cmp_reservation);

	if (res == NULL || ptr + size > res->addr + res->size)
		return NULL;
	return res;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
					CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	struct sim_map *m, key = { .addr = ptr, .size = size };
	struct sim_reservation *res;
	struct sim_handle *h;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemMap);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0 || size % SIM_PAGE_SIZE != 0 || ptr % SIM_PAGE_SIZE != 0 ||
	    offset % SIM_PAGE_SIZE != 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	m = malloc(sizeof(*m));
	if (m == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gmtsim__lock();
	h = handle_find(handle);
	res = reservation_holding(ptr, size);
	if (h == NULL || res == NULL || offset + size > h->size) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	if (find(&g.maps, &key, cmp_map) != NULL) {
		r = CUDA_ERROR_ALREADY_MAPPED;
		goto out;
	}
	*m = (struct sim_map){ .addr = ptr, .size = size, .offset = offset, .handle = h };
	if (tsearch(m, &g.maps, cmp_map) == NULL) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	h->maps++;
	res->maps++;
	m = NULL;
out:
	gmtsim__unlock();
	free(m);
	return r;
}

/* The range must consist of whole mappings (as the driver requires). */
GMTSIM_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uint64_t at;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemUnmap);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	for (at = ptr; at < ptr + size;) {
		struct sim_map key = { .addr = at, .size = 1 }, *m = find(&g.maps, &key, cmp_map);
		if (m == NULL || m->addr != at || m->addr + m->size > ptr + size) {
			r = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
		at += m->size;
	}
	for (at = ptr; at < ptr + size;) {
		struct sim_map key = { .addr = at, .size = 1 }, *m = find(&g.maps, &key, cmp_map);
		struct sim_handle *h = m->handle;

		at += m->size;
		reservation_holding(m->addr, m->size)->maps--;
		tdelete(m, &g.maps, cmp_map);
		free(m);
		h->maps--;
		handle_maybe_free(h);
	}
out:
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
					      size_t count)
{
	uint64_t at;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemSetAccess);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (size == 0 || desc == NULL || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		int dev;
		r = check_device_location(&desc[i].location, &dev);
		if (r != CUDA_SUCCESS)
			return r;
	}
	gmtsim__lock();
	for (at = ptr; at < ptr + size;) {
		struct sim_map key = { .addr = at, .size = 1 }, *m = find(&g.maps, &key, cmp_map);
		if (m == NULL) {
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		at = m->addr + m->size;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	struct sim_map key = { .addr = (uint64_t)(uintptr_t)addr, .size = 1 }, *m;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemRetainAllocationHandle);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	m = find(&g.maps, &key, cmp_map);
	if (m == NULL) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		m->handle->refs++;
		*handle = m->handle->id;
	}
	gmtsim__unlock();
	return r;
}

/* --- arrays ---------------------------------------------------------------------------------- */

static unsigned format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

static CUresult array_create(enum sim_call api, CUarray *out, uint64_t w, uint64_t h, uint64_t depth,
			     CUarray_format format, unsigned channels)
{
	struct CUarray_st *a;
	unsigned elem = format_bytes(format);
	int dev;
	CUresult r;

	if (out == NULL || w == 0 || elem == 0 || (channels != 1 && channels != 2 && channels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gmtsim__lock();
	r = current(&dev, &a->ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a->bytes = w * (h ? h : 1) * (depth ? depth : 1) * channels * elem;
	a->pages = pages_for(a->bytes);
	a->device = dev;
	a->api = api;
	if (a->pages > pages_free(&g.dev[dev])) {
		r = oom(api, a->bytes, dev);
		goto out;
	}
	g.dev[dev].pages_used += a->pages;
	a->next = g.arrays;
	g.arrays = a;
	g.totals.allocs++;
	*out = a;
	a = NULL;
out:
	gmtsim__unlock();
	free(a);
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	gmtsim__count(SIM_CALL_cuArrayCreate_v2);
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(SIM_CALL_cuArrayCreate_v2, pHandle, d->Width, d->Height, 0, d->Format,
			    d->NumChannels);
}

GMTSIM_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	gmtsim__count(SIM_CALL_cuArray3DCreate_v2);
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(SIM_CALL_cuArray3DCreate_v2, pHandle, d->Width, d->Height, d->Depth, d->Format,
			    d->NumChannels);
}

static void array_free(struct CUarray_st **link)
{
	struct CUarray_st *a = *link;

	*link = a->next;
	g.dev[a->device].pages_used -= a->pages;
	g.totals.frees++;
	free(a);
}

GMTSIM_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuArrayDestroy);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	r = CUDA_ERROR_INVALID_HANDLE;
	for (struct CUarray_st **p = &g.arrays; *p != NULL; p = &(*p)->next) {
		if (*p == hArray) {
			array_free(p);
			r = CUDA_SUCCESS;
			break;
		}
	}
	gmtsim__unlock();
	return r;
}

/* --- contexts going away, and the ledger's view -------------------------------------------- */

/* twalk has no user argument; these are only used with the lock held. */
static struct {
	struct sim_alloc **v;
	size_t n, cap;
	struct CUctx_st *ctx;
	const struct sim_ledger_visitor *visitor;
} walk;

static void collect_ctx(const void *node, VISIT which, int depth)
{
	struct sim_alloc *a = *(struct sim_alloc *const *)node;

	(void)depth;
	if (which != postorder && which != leaf)
		return;
	/* A primary context's reset (cudaDeviceReset) also takes the device's
	 * stream-ordered memory. */
	if (a->ctx != walk.ctx &&
	    !(walk.ctx->primary && a->kind == SIM_KIND_ASYNC && a->device == walk.ctx->device))
		return;
	if (walk.n == walk.cap) {
		size_t cap = walk.cap ? 2 * walk.cap : 64;
		struct sim_alloc **v = realloc(walk.v, cap * sizeof(*v));
		if (v == NULL)
			return;
		walk.v = v;
		walk.cap = cap;
	}
	walk.v[walk.n++] = a;
}

/* Everything a context owned goes with it, as on a real device (pool memory
 * belongs to the device and stays). */
void gmtsim__context_destroyed(struct CUctx_st *ctx)
{
	struct sim_dev *d = &g.dev[ctx->device];

	walk.ctx = ctx;
	walk.n = 0;
	twalk(g.allocs, collect_ctx);
	for (size_t i = 0; i < walk.n; i++) {
		struct sim_alloc *a = walk.v[i];

		switch (a->kind) {
		case SIM_KIND_DEVICE:
			device_give(a);
			break;
		case SIM_KIND_MANAGED:
			managed_give(a);
			break;
		case SIM_KIND_HOST:
			host_give(a);
			break;
		case SIM_KIND_ASYNC:
			pool_give(a);
			break;
		default:
			break;
		}
		unrecord(a);
	}
	if (ctx->primary) {
		pool_trim(&d->default_pool, 0);
		for (struct CUmemPoolHandle_st *p = g.pools; p != NULL; p = p->next)
			if (p->device == ctx->device)
				pool_trim(p, 0);
	}
	free(walk.v);
	walk.v = NULL;
	walk.cap = walk.n = 0;
	for (struct CUarray_st **p = &g.arrays; *p != NULL;) {
		if ((*p)->ctx == ctx)
			array_free(p);
		else
			p = &(*p)->next;
	}
	if (--d->contexts == 0)
		d->pages_context = 0;
}

static void visit_alloc(const void *node, VISIT which, int depth)
{
	const struct sim_alloc *a = *(struct sim_alloc *const *)node;
	struct sim_ledger_entry e = { a->addr, a->size, a->kind, a->device, a->api };

	(void)depth;
	if (which == postorder || which == leaf)
		walk.visitor->entry(walk.visitor->ctx, &e);
}

static void visit_handle(const void *node, VISIT which, int depth)
{
	const struct sim_handle *h = *(struct sim_handle *const *)node;
	struct sim_ledger_entry e = { h->id, h->size, SIM_KIND_VMM, h->device, SIM_CALL_cuMemCreate };

	(void)depth;
	if (which == postorder || which == leaf)
		walk.visitor->entry(walk.visitor->ctx, &e);
}

static void visit_reservation(const void *node, VISIT which, int depth)
{
	const struct sim_reservation *r = *(struct sim_reservation *const *)node;

	(void)depth;
	if (which == postorder || which == leaf)
		walk.visitor->reservation(walk.visitor->ctx, r->addr, r->size);
}

static void visit_map(const void *node, VISIT which, int depth)
{
	const struct sim_map *m = *(struct sim_map *const *)node;

	(void)depth;
	if (which == postorder || which == leaf)
		walk.visitor->mapping(walk.visitor->ctx, m->addr, m->size, m->handle->id, m->offset);
}

static void visit_pool(const struct sim_ledger_visitor *v, const struct CUmemPoolHandle_st *p)
{
	v->pool(v->ctx, (uint64_t)(uintptr_t)p, p->device, p->is_default, p->reserved, p->used,
		p->threshold);
}

void gmtsim__memory_visit(const struct sim_ledger_visitor *v)
{
	if (g.forgotten)
		return;
	walk.visitor = v;
	twalk(g.allocs, visit_alloc);
	twalk(g.handles, visit_handle);
	for (const struct CUarray_st *a = g.arrays; a != NULL; a = a->next) {
		struct sim_ledger_entry e = { (uint64_t)(uintptr_t)a, a->bytes, SIM_KIND_ARRAY,
					      a->device, a->api };
		v->entry(v->ctx, &e);
	}
	for (int i = 0; i < g.ndevices; i++)
		visit_pool(v, &g.dev[i].default_pool);
	for (const struct CUmemPoolHandle_st *p = g.pools; p != NULL; p = p->next)
		if (p->alive || p->reserved > 0)
			visit_pool(v, p);
	twalk(g.reservations, visit_reservation);
	twalk(g.maps, visit_map);
}

int gmtsim__device_count(void)
{
	return g.forgotten ? 0 : g.ndevices;
}

void gmtsim__device_state(int device, struct sim_device_state *out)
{
	const struct sim_dev *d = &g.dev[device];

	*out = (struct sim_device_state){
		.total_bytes = d->pages_total * SIM_PAGE_SIZE,
		.free_bytes = pages_free(d) * SIM_PAGE_SIZE,
		.pages_total = d->pages_total,
		.pages_free = pages_free(d),
		.pages_other = d->pages_other,
		.pages_context = d->pages_context,
	};
	out->pool_reserved = d->default_pool.reserved;
	out->pool_used = d->default_pool.used;
	for (const struct CUmemPoolHandle_st *p = g.pools; p != NULL; p = p->next) {
		if (p->device == device) {
			out->pool_reserved += p->reserved;
			out->pool_used += p->used;
		}
	}
}

void gmtsim__totals(struct sim_totals *out)
{
	if (g.forgotten)
		*out = (struct sim_totals){ 0 };
	else
		*out = g.totals;
}
