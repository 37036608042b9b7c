/* The memory model's core: free address ranges, 2 MiB pages and address windows
 * per device, allocation records, device and managed memory, contexts going away
 * and the ledger's view. Host, pool, VMM and array memory have files of their own. */
#define _GNU_SOURCE
#include "model.h"

#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_LEGACY_WINDOW ((uint64_t)64 << 20)

/* --- free ranges of addresses: first fit, coalescing -------------------------- */

int gmtsim__ranges_init(struct sim_ranges *r, uint64_t start, uint64_t len)
{
	r->v = malloc(16 * sizeof(*r->v));
	if (r->v == NULL)
		return -ENOMEM;
	r->cap = 16;
	r->n = 1;
	r->v[0] = (struct sim_range){ start, len };
	return 0;
}

void gmtsim__ranges_fini(struct sim_ranges *r)
{
	free(r->v);
	*r = (struct sim_ranges){ 0 };
}

/* Lowest-addressed fit, as the real driver reuses the lowest free address.
 * Returns 0 and *out, or -ENOMEM. */
int gmtsim__ranges_alloc(struct sim_ranges *r, uint64_t len, uint64_t align, uint64_t *out)
{
	for (size_t i = 0; i < r->n; i++) {
		struct sim_range *g = &r->v[i];
		uint64_t a = gmtsim__round_up(g->start, align);
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
int gmtsim__ranges_free(struct sim_ranges *r, uint64_t start, uint64_t len)
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

struct sim_model gmtsim__model;

/* Range comparators: two entries are "equal" when their ranges overlap, so a
 * lookup with a one-byte key finds the entry that contains an address. */
int gmtsim__cmp_range(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	if (a + (alen ? alen : 1) <= b)
		return -1;
	if (b + (blen ? blen : 1) <= a)
		return 1;
	return 0;
}

int gmtsim__cmp_alloc(const void *x, const void *y)
{
	const struct sim_alloc *a = x, *b = y;
	return gmtsim__cmp_range(a->addr, a->span, b->addr, b->span);
}

void *gmtsim__find(void *const *root, void *key, int (*cmp)(const void *, const void *))
{
	void *const *node = tfind(key, root, cmp);
	return node != NULL ? *node : NULL;
}

struct sim_alloc *gmtsim__alloc_at(uint64_t addr)
{
	struct sim_alloc key = { .addr = addr, .span = 1 };
	return gmtsim__find(&gmtsim__model.allocs, &key, gmtsim__cmp_alloc);
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
	*out = gmtsim__round_up((uint64_t)(uintptr_t)p, SIM_PAGE_SIZE);
	return 0;
}

static int arena_init(struct sim_arena *a, uint64_t len, int extra_flags)
{
	uint64_t base = 0;
	int r = reserve_window(len, extra_flags, &base);

	if (r < 0)
		return r;
	r = gmtsim__ranges_init(&a->va, base, len);
	if (r == 0)
		a->ready = true;
	return r;
}

/* How many times its capacity of addresses each window gets: 2, so that holes
 * left by frees never make a request fail that the pages could satisfy; 1
 * where the process's address space cannot hold that (valgrind gives its
 * client tens of GiB: the default 16 GiB device needs 98 GiB at 2). */
static uint64_t window_factor(const struct sim_config *cfg)
{
	uint64_t need = (uint64_t)(cfg->ndevices + 1) << 30;
	void *p;

	for (int i = 0; i < cfg->ndevices; i++)
		need += 6 * cfg->memory[i];
	p = mmap(NULL, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	munmap(p, need);
	return 2;
}

/* The VMM window, where the process can reserve it (not under valgrind, see
 * window_factor): 16 times the devices' memory, else as the others. PyTorch's
 * expandable segments reserve 1 1/8 of the device per stream and pool, and
 * one more for each request that the unmapped end of the last does not hold
 * (never freed while nothing in it is mapped), which the real driver's
 * 256 TiB of addresses always grants. */
#define VMM_WINDOW_FACTOR 16

CUresult gmtsim__memory_init(const struct sim_config *cfg)
{
	uint64_t total = 0, base = 0, vmm, k = window_factor(cfg);
	int r;

	gmtsim__model.ndevices = cfg->ndevices;
	gmtsim__model.next_handle = 0x1000;
	for (int i = 0; i < cfg->ndevices; i++) {
		struct sim_dev *d = &gmtsim__model.dev[i];

		d->pages_total = cfg->memory[i] / SIM_PAGE_SIZE;
		d->pages_other = cfg->other[i] / SIM_PAGE_SIZE; /* whole pages, at most the capacity */
		if (arena_init(&d->arena, k * cfg->memory[i] + ((uint64_t)1 << 30), 0) < 0 ||
		    reserve_window(k * cfg->memory[i], 0, &base) < 0 ||
		    gmtsim__ranges_init(&d->managed, base, k * cfg->memory[i]) < 0) {
			fprintf(stderr, "gmtsim: cannot reserve address space for device %d\n", i);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		d->default_pool = (struct CUmemPoolHandle_st){
			.device = i, .is_default = true, .alive = true,
		};
		d->current_pool = &d->default_pool;
		total += cfg->memory[i];
	}
	vmm = (k > 1 ? VMM_WINDOW_FACTOR : k) * total + ((uint64_t)1 << 30);
	r = reserve_window(vmm, 0, &base);
	if (r < 0 && k > 1) {
		vmm = k * total + ((uint64_t)1 << 30);
		r = reserve_window(vmm, 0, &base);
	}
	if (r < 0 || gmtsim__ranges_init(&gmtsim__model.vmm_va, base, vmm) < 0) {
		fprintf(stderr, "gmtsim: cannot reserve address space for virtual memory management\n");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

void gmtsim__memory_forget(void)
{
	gmtsim__model.forgotten = true;
}

CUresult gmtsim__context_created(int device)
{
	struct sim_dev *d = &gmtsim__model.dev[device];
	uint64_t pages = gmtsim__pages_for(gmtsim__config()->context_bytes);

	if (d->contexts == 0) {
		if (pages > gmtsim__pages_free(d))
			return CUDA_ERROR_OUT_OF_MEMORY;
		d->pages_context = pages;
	}
	d->contexts++;
	return CUDA_SUCCESS;
}

/* --- allocation records -------------------------------------------------------------- */

CUresult gmtsim__oom(enum sim_call api, uint64_t size, int device)
{
	struct sim_failed_request f = { api, size, device, CUDA_ERROR_OUT_OF_MEMORY };

	gmtsim__model.totals.oom++;
	gmtsim__ledger_oom(&f);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult gmtsim__record(struct sim_alloc *a)
{
	struct sim_alloc *copy = malloc(sizeof(*copy));

	if (copy == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*copy = *a;
	if (tsearch(copy, &gmtsim__model.allocs, gmtsim__cmp_alloc) == NULL) {
		free(copy);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	gmtsim__model.totals.allocs++;
	return CUDA_SUCCESS;
}

void gmtsim__unrecord(struct sim_alloc *a)
{
	tdelete(a, &gmtsim__model.allocs, gmtsim__cmp_alloc);
	gmtsim__model.totals.frees++;
	free(a);
}

/* The end of every allocation: an out-of-memory from the model is reported
 * as the driver reports it (and noted in the ledger); a success is recorded,
 * and memory whose record cannot be kept is given back. Lock held. */
CUresult gmtsim__finish(CUresult took, struct sim_alloc *a, void (*give)(struct sim_alloc *))
{
	if (took == CUDA_ERROR_OUT_OF_MEMORY)
		return gmtsim__oom(a->api, a->size, a->device);
	if (took != CUDA_SUCCESS)
		return took;
	took = gmtsim__record(a);
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
		unsigned k = (unsigned)(gmtsim__round_up(size, SIM_ALIGN) / SIM_ALIGN);
		struct sim_chunk *c;
		int at = -1;

		for (c = arena->chunks; c != NULL; c = c->next) {
			if (SIM_UNITS_PER_PAGE - c->used >= k && (at = find_run(c->bits, k)) >= 0)
				break;
		}
		if (c == NULL) {
			if (gmtsim__pages_free(d) == 0)
				return CUDA_ERROR_OUT_OF_MEMORY;
			c = calloc(1, sizeof(*c));
			if (c == NULL)
				return CUDA_ERROR_OUT_OF_MEMORY;
			if (gmtsim__ranges_alloc(&arena->va, SIM_PAGE_SIZE, SIM_PAGE_SIZE, &c->base) < 0) {
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
	uint64_t pages = gmtsim__pages_for(size);
	if (pages > gmtsim__pages_free(d))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (gmtsim__ranges_alloc(&arena->va, pages * SIM_PAGE_SIZE, SIM_PAGE_SIZE, &addr) < 0)
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
	struct sim_dev *d = &gmtsim__model.dev[a->device];
	struct sim_arena *arena = a->arena;
	struct sim_chunk *c = a->chunk;

	if (c == NULL) {
		gmtsim__ranges_free(&arena->va, a->addr, a->span);
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
		gmtsim__ranges_free(&arena->va, c->base, SIM_PAGE_SIZE);
		d->pages_used--;
		free(c);
	}
}

/* Managed memory holds addresses only. */
static void managed_give(struct sim_alloc *a)
{
	gmtsim__ranges_free(&gmtsim__model.dev[a->device].managed, a->addr, a->span);
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
	r = gmtsim__current_device(&a.device, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	arena = &gmtsim__model.dev[a.device].arena;
	if (legacy) {
		r = legacy_arena(&gmtsim__model.dev[a.device], &arena);
		if (r != CUDA_SUCCESS)
			goto out;
	}
	r = gmtsim__finish(device_take(&gmtsim__model.dev[a.device], arena, size, &a), &a, device_give);
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
	*pitch = gmtsim__round_up(width, 512);
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

/* Frees device, managed and stream-ordered memory (cuMemFree may free memory of
 * cuMemAllocAsync, as in CUDA). Lock held. */
CUresult gmtsim__free_device_kind(uint64_t dptr, bool async_only)
{
	struct sim_alloc *a = gmtsim__alloc_at(dptr);

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
		gmtsim__pool_give(a);
		break;
	}
	gmtsim__unrecord(a);
	return CUDA_SUCCESS;
}

static CUresult mem_free(uint64_t dptr)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	/* A free of 0 frees nothing and succeeds, as the real driver's does. */
	if (r == CUDA_SUCCESS && dptr != 0)
		r = gmtsim__free_device_kind(dptr, false);
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
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		a = gmtsim__alloc_at(dptr);
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
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		*free_bytes = gmtsim__pages_free(&gmtsim__model.dev[dev]) * SIM_PAGE_SIZE;
		*total = gmtsim__model.dev[dev].pages_total * SIM_PAGE_SIZE;
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
	r = gmtsim__current_device(&a.device, &a.ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a.span = gmtsim__round_up(bytesize, SIM_ALIGN);
	r = gmtsim__finish(gmtsim__ranges_alloc(&gmtsim__model.dev[a.device].managed, a.span, SIM_ALIGN,
						&a.addr) < 0
				   ? CUDA_ERROR_OUT_OF_MEMORY
				   : CUDA_SUCCESS,
			   &a, managed_give);
	if (r == CUDA_SUCCESS)
		*dptr = a.addr;
out:
	gmtsim__unlock();
	return r;
}

/* --- memory locations (pools and virtual memory management) ----------------------- */

CUresult gmtsim__check_device_location(const CUmemLocation *loc, int *device)
{
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (loc->id < 0 || loc->id >= gmtsim__model.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = loc->id;
	return CUDA_SUCCESS;
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
	struct sim_dev *d = &gmtsim__model.dev[ctx->device];

	walk.ctx = ctx;
	walk.n = 0;
	twalk(gmtsim__model.allocs, collect_ctx);
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
			gmtsim__host_give(a);
			break;
		case SIM_KIND_ASYNC:
			gmtsim__pool_give(a);
			break;
		default:
			break;
		}
		gmtsim__unrecord(a);
	}
	if (ctx->primary) {
		gmtsim__pool_trim(&d->default_pool, 0);
		for (struct CUmemPoolHandle_st *p = gmtsim__model.pools; p != NULL; p = p->next)
			if (p->device == ctx->device)
				gmtsim__pool_trim(p, 0);
	}
	free(walk.v);
	walk.v = NULL;
	walk.cap = walk.n = 0;
	for (struct CUarray_st **p = &gmtsim__model.arrays; *p != NULL;) {
		if ((*p)->ctx == ctx)
			gmtsim__array_free(p);
		else
			p = &(*p)->next;
	}
	if (--d->contexts == 0)
		d->pages_context = 0;
}

static void visit_alloc(const void *node, VISIT which, int depth)
{
	const struct sim_alloc *a = *(struct sim_alloc *const *)node;
	struct sim_ledger_entry e = { a->addr, a->size, a->kind, a->device, a->api, a->stream };

	(void)depth;
	if (which == postorder || which == leaf)
		walk.visitor->entry(walk.visitor->ctx, &e);
}

static void visit_handle(const void *node, VISIT which, int depth)
{
	const struct sim_handle *h = *(struct sim_handle *const *)node;
	struct sim_ledger_entry e = { h->id, h->size, SIM_KIND_VMM, h->device, SIM_CALL_cuMemCreate, 0 };

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
	if (gmtsim__model.forgotten)
		return;
	walk.visitor = v;
	twalk(gmtsim__model.allocs, visit_alloc);
	twalk(gmtsim__model.handles, visit_handle);
	for (const struct CUarray_st *a = gmtsim__model.arrays; a != NULL; a = a->next) {
		struct sim_ledger_entry e = { (uint64_t)(uintptr_t)a, a->bytes, SIM_KIND_ARRAY,
					      a->device, a->api, 0 };
		v->entry(v->ctx, &e);
	}
	for (int i = 0; i < gmtsim__model.ndevices; i++)
		visit_pool(v, &gmtsim__model.dev[i].default_pool);
	for (const struct CUmemPoolHandle_st *p = gmtsim__model.pools; p != NULL; p = p->next)
		if (p->alive || p->reserved > 0)
			visit_pool(v, p);
	twalk(gmtsim__model.reservations, visit_reservation);
	twalk(gmtsim__model.maps, visit_map);
}

int gmtsim__device_count(void)
{
	return gmtsim__model.forgotten ? 0 : gmtsim__model.ndevices;
}

void gmtsim__device_state(int device, struct sim_device_state *out)
{
	const struct sim_dev *d = &gmtsim__model.dev[device];

	*out = (struct sim_device_state){
		.total_bytes = d->pages_total * SIM_PAGE_SIZE,
		.free_bytes = gmtsim__pages_free(d) * SIM_PAGE_SIZE,
		.pages_total = d->pages_total,
		.pages_free = gmtsim__pages_free(d),
		.pages_other = d->pages_other,
		.pages_context = d->pages_context,
	};
	out->pool_reserved = d->default_pool.reserved;
	out->pool_used = d->default_pool.used;
	for (const struct CUmemPoolHandle_st *p = gmtsim__model.pools; p != NULL; p = p->next) {
		if (p->device == device) {
			out->pool_reserved += p->reserved;
			out->pool_used += p->used;
		}
	}
}

void gmtsim__totals(struct sim_totals *out)
{
	if (gmtsim__model.forgotten)
		*out = (struct sim_totals){ 0 };
	else
		*out = gmtsim__model.totals;
}
