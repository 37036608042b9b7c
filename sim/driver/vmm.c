/* Virtual memory management: physical handles (cuMemCreate, cuMemRelease,
 * cuMemRetainAllocationHandle), address reservations, and mapping handles into
 * them (cuMemMap, cuMemUnmap, cuMemSetAccess). */
#define _GNU_SOURCE
#include "model.h"

#include <search.h>
#include <stdlib.h>
#include <string.h>

/* Tree orders of the VMM's objects: mappings and reservations by address range
 * (equal when they overlap, see gmtsim__cmp_range), handles by id. */
static int cmp_map(const void *x, const void *y)
{
	const struct sim_map *a = x, *b = y;
	return gmtsim__cmp_range(a->addr, a->size, b->addr, b->size);
}

static int cmp_reservation(const void *x, const void *y)
{
	const struct sim_reservation *a = x, *b = y;
	return gmtsim__cmp_range(a->addr, a->size, b->addr, b->size);
}

static int cmp_handle(const void *x, const void *y)
{
	const struct sim_handle *a = x, *b = y;
	return a->id < b->id ? -1 : a->id > b->id;
}

static CUresult check_prop(const CUmemAllocationProp *prop, int *device)
{
	if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	return gmtsim__check_device_location(&prop->location, device);
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

/* A freed handle's value, for the next cuMemCreate; when there is no room to
 * keep it, it is simply not given out again. Lock held. */
static void handle_id_free(uint64_t id)
{
	struct sim_model *m = &gmtsim__model;

	if (m->nfree_handles == m->free_handles_cap) {
		size_t cap = m->free_handles_cap ? 2 * m->free_handles_cap : 64;
		uint64_t *v = realloc(m->free_handles, cap * sizeof(*v));

		if (v == NULL)
			return;
		m->free_handles = v;
		m->free_handles_cap = cap;
	}
	m->free_handles[m->nfree_handles++] = id;
}

/* NOTE: the driver's handles are its own objects' addresses, and a value
 * freed comes back from a later cuMemCreate; so do the simulator's (the
 * latest freed first): a tracer must tell a handle from an earlier one of
 * the same value. Lock held. */
static uint64_t handle_id_new(void)
{
	uint64_t id;

	if (gmtsim__model.nfree_handles > 0)
		return gmtsim__model.free_handles[--gmtsim__model.nfree_handles];
	id = gmtsim__model.next_handle;
	gmtsim__model.next_handle += 0x10;
	return id;
}

static void handle_maybe_free(struct sim_handle *h)
{
	if (h->refs > 0 || h->maps > 0)
		return;
	gmtsim__model.dev[h->device].pages_used -= h->size / SIM_PAGE_SIZE;
	tdelete(h, &gmtsim__model.handles, cmp_handle);
	gmtsim__model.totals.frees++;
	handle_id_free(h->id);
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
	if (size / SIM_PAGE_SIZE > gmtsim__pages_free(&gmtsim__model.dev[dev])) {
		r = gmtsim__oom(SIM_CALL_cuMemCreate, size, dev);
		goto out;
	}
	h = malloc(sizeof(*h));
	if (h == NULL) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*h = (struct sim_handle){ .id = handle_id_new(), .size = size, .device = dev, .refs = 1 };
	if (tsearch(h, &gmtsim__model.handles, cmp_handle) == NULL) {
		handle_id_free(h->id);
		free(h);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	gmtsim__model.dev[dev].pages_used += size / SIM_PAGE_SIZE;
	gmtsim__model.totals.allocs++;
	*handle = h->id;
out:
	gmtsim__unlock();
	return r;
}

static struct sim_handle *handle_find(CUmemGenericAllocationHandle id)
{
	struct sim_handle key = { .id = id };
	return gmtsim__find(&gmtsim__model.handles, &key, cmp_handle);
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
	if (gmtsim__ranges_alloc(&gmtsim__model.vmm_va, size,
				 alignment > SIM_PAGE_SIZE ? alignment : SIM_PAGE_SIZE, &at) < 0) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	*res = (struct sim_reservation){ .addr = at, .size = size };
	if (tsearch(res, &gmtsim__model.reservations, cmp_reservation) == NULL) {
		gmtsim__ranges_free(&gmtsim__model.vmm_va, at, size);
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
	res = gmtsim__find(&gmtsim__model.reservations, &key, cmp_reservation);
	/* The whole reservation, and nothing still mapped inside it. */
	if (res == NULL || res->addr != ptr || res->size != size || res->maps != 0) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		tdelete(res, &gmtsim__model.reservations, cmp_reservation);
		gmtsim__ranges_free(&gmtsim__model.vmm_va, res->addr, res->size);
		free(res);
	}
	gmtsim__unlock();
	return r;
}

static struct sim_reservation *reservation_holding(uint64_t ptr, uint64_t size)
{
	struct sim_reservation key = { .addr = ptr, .size = 1 };
	struct sim_reservation *res = gmtsim__find(&gmtsim__model.reservations, &key, cmp_reservation);

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
	if (gmtsim__find(&gmtsim__model.maps, &key, cmp_map) != NULL) {
		r = CUDA_ERROR_ALREADY_MAPPED;
		goto out;
	}
	*m = (struct sim_map){ .addr = ptr, .size = size, .offset = offset, .handle = h };
	if (tsearch(m, &gmtsim__model.maps, cmp_map) == NULL) {
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
		struct sim_map key = { .addr = at, .size = 1 },
			       *m = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
		if (m == NULL || m->addr != at || m->addr + m->size > ptr + size) {
			r = CUDA_ERROR_INVALID_VALUE;
			goto out;
		}
		at += m->size;
	}
	for (at = ptr; at < ptr + size;) {
		struct sim_map key = { .addr = at, .size = 1 },
			       *m = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
		struct sim_handle *h = m->handle;

		at += m->size;
		reservation_holding(m->addr, m->size)->maps--;
		tdelete(m, &gmtsim__model.maps, cmp_map);
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
		r = gmtsim__check_device_location(&desc[i].location, &dev);
		if (r != CUDA_SUCCESS)
			return r;
	}
	gmtsim__lock();
	for (at = ptr; at < ptr + size;) {
		struct sim_map key = { .addr = at, .size = 1 },
			       *m = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
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
	m = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
	if (m == NULL) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		m->handle->refs++;
		*handle = m->handle->id;
	}
	gmtsim__unlock();
	return r;
}

const struct sim_map *gmtsim__vmm_cover(uint64_t addr, uint64_t len)
{
	struct sim_map key = { .addr = addr, .size = 1 };
	const struct sim_map *first = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
	const struct sim_map *m = first;

	/* Mappings may sit end to end (a growing segment maps its pages one
	 * handle after another): walk them until the range is covered. */
	while (m != NULL && addr + len > m->addr + m->size) {
		key.addr = m->addr + m->size;
		m = gmtsim__find(&gmtsim__model.maps, &key, cmp_map);
	}
	return m != NULL ? first : NULL;
}
