/* Stream-ordered pools: each device's default pool and created ones, segments of
 * whole pages sub-allocated first fit, release at synchronisation or trim, and the
 * entry points cuMemAllocAsync, cuMemFreeAsync, cuMemPool* and cuDevice*MemPool. */
#include "model.h"

#include <stdlib.h>

static void pool_note(struct CUmemPoolHandle_st *pool)
{
	if (pool->reserved > pool->reserved_high)
		pool->reserved_high = pool->reserved;
	if (pool->used > pool->used_high)
		pool->used_high = pool->used;
}

static void segment_release(struct CUmemPoolHandle_st *pool, struct sim_segment *s)
{
	struct sim_dev *d = &gmtsim__model.dev[pool->device];

	for (struct sim_segment **p = &pool->segments; *p != NULL; p = &(*p)->next) {
		if (*p == s) {
			*p = s->next;
			break;
		}
	}
	gmtsim__ranges_free(&d->arena.va, s->base, s->bytes);
	d->pages_used -= s->bytes / SIM_PAGE_SIZE;
	pool->reserved -= s->bytes;
	gmtsim__ranges_fini(&s->free);
	free(s);
}

/* Release unused segments while the pool reserves more than `keep`. */
void gmtsim__pool_trim(struct CUmemPoolHandle_st *pool, uint64_t keep)
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
	struct CUmemPoolHandle_st *p = &gmtsim__model.dev[device].default_pool;

	gmtsim__pool_trim(p, p->threshold);
	for (p = gmtsim__model.pools; p != NULL; p = p->next)
		if (p->device == device)
			gmtsim__pool_trim(p, p->alive ? p->threshold : 0);
}

static CUresult pool_take(struct CUmemPoolHandle_st *pool, uint64_t size, struct sim_alloc *a)
{
	struct sim_dev *d = &gmtsim__model.dev[pool->device];
	uint64_t need = gmtsim__round_up(size, SIM_ALIGN), bytes, addr;
	struct sim_segment *s;

	for (s = pool->segments; s != NULL; s = s->next) {
		if (gmtsim__ranges_alloc(&s->free, need, SIM_ALIGN, &addr) == 0)
			goto found;
	}
	bytes = gmtsim__round_up(need, SIM_PAGE_SIZE);
	if (bytes / SIM_PAGE_SIZE > gmtsim__pages_free(d)) {
		/* A pool that cannot grow first gives back what it holds unused. */
		gmtsim__pool_trim(pool, 0);
		if (bytes / SIM_PAGE_SIZE > gmtsim__pages_free(d))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (gmtsim__ranges_alloc(&d->arena.va, bytes, SIM_PAGE_SIZE, &s->base) < 0) {
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (gmtsim__ranges_init(&s->free, s->base, bytes) < 0) {
		gmtsim__ranges_free(&d->arena.va, s->base, bytes);
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->bytes = bytes;
	s->next = pool->segments;
	pool->segments = s;
	pool->reserved += bytes;
	d->pages_used += bytes / SIM_PAGE_SIZE;
	gmtsim__ranges_alloc(&s->free, need, SIM_ALIGN, &addr);
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

void gmtsim__pool_give(struct sim_alloc *a)
{
	struct CUmemPoolHandle_st *pool = a->pool;
	struct sim_segment *s = a->segment;

	gmtsim__ranges_free(&s->free, a->addr, a->span);
	s->used -= a->span;
	pool->used -= a->span;
	/* A destroyed pool lets its memory go as soon as it is unused. */
	if (!pool->alive && s->used == 0)
		segment_release(pool, s);
}

static CUresult alloc_async(enum sim_call api, CUdeviceptr *dptr, size_t size,
			    struct CUmemPoolHandle_st *pool, CUstream stream)
{
	struct sim_alloc a = { .size = size, .kind = SIM_KIND_ASYNC, .api = api, .stream = (uintptr_t)stream };
	CUresult r;

	if (dptr == NULL || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__stream_device(stream, &a.device);
	if (r != CUDA_SUCCESS)
		goto out;
	if (pool == NULL) {
		pool = gmtsim__model.dev[a.device].current_pool;
	} else if (!pool->alive) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	a.device = pool->device;
	r = gmtsim__finish(pool_take(pool, size, &a), &a, gmtsim__pool_give);
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
		r = gmtsim__free_device_kind(dptr, true);
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

GMTSIM_EXPORT CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	struct CUmemPoolHandle_st *p;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuMemPoolCreate);
	if (pool == NULL || poolProps == NULL || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	r = gmtsim__check_device_location(&poolProps->location, &dev);
	if (r != CUDA_SUCCESS)
		return r;
	p = calloc(1, sizeof(*p));
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->device = dev;
	p->alive = true;
	gmtsim__lock();
	p->next = gmtsim__model.pools;
	gmtsim__model.pools = p;
	gmtsim__unlock();
	*pool = p;
	return CUDA_SUCCESS;
}

/* A pool handle is valid when it is a device's default pool or a live created
 * one. Lock held. */
static bool pool_valid(struct CUmemPoolHandle_st *pool)
{
	for (int i = 0; i < gmtsim__model.ndevices; i++)
		if (pool == &gmtsim__model.dev[i].default_pool)
			return true;
	for (struct CUmemPoolHandle_st *p = gmtsim__model.pools; p != NULL; p = p->next)
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
		gmtsim__pool_trim(pool, 0);
		for (int i = 0; i < gmtsim__model.ndevices; i++)
			if (gmtsim__model.dev[i].current_pool == pool)
				gmtsim__model.dev[i].current_pool = &gmtsim__model.dev[i].default_pool;
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
		gmtsim__pool_trim(pool, minBytesToKeep);
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
	if (dev < 0 || dev >= gmtsim__model.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	gmtsim__lock();
	*pool_out = current_one ? gmtsim__model.dev[dev].current_pool : &gmtsim__model.dev[dev].default_pool;
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
	if (dev < 0 || dev >= gmtsim__model.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	gmtsim__lock();
	if (pool == NULL || !pool_valid(pool) || pool->device != dev)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		gmtsim__model.dev[dev].current_pool = pool;
	gmtsim__unlock();
	return r;
}
