/* Test program for the private-loader row of the matrix (XLA/JAX, TensorFlow
 * stubs, cuFFT): dlopen("libcuda.so.1", RTLD_LOCAL) and dlsym(handle, ...) by
 * versioned name. It links only libdl: no -lcuda, no runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

struct driver {
	PFN_cuInit_v2000 init;
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
	PFN_cuCtxSetCurrent_v4000 ctx_set_current;
	PFN_cuMemAlloc_v3020 mem_alloc;
	PFN_cuMemFree_v3020 mem_free;
	PFN_cuMemAllocAsync_v11020 mem_alloc_async;
	PFN_cuMemFreeAsync_v11020 mem_free_async;
	PFN_cuMemPoolCreate_v11020 mem_pool_create;
	PFN_cuMemAllocFromPoolAsync_v11020 mem_alloc_from_pool_async;
	PFN_cuStreamSynchronize_v2000 stream_synchronize;
};

static void *must_dlsym(void *handle, const char *name)
{
	void *sym = dlsym(handle, name);

	if (sym == NULL)
		PROG_FAIL("dlsym(libcuda.so.1, \"%s\"): %s", name, dlerror());
	return sym;
}

/* NOTE: ISO C forbids converting void * to a function pointer; POSIX requires
 * it to work for dlsym, hence the memcpy. */
#define LOAD(handle, field, name)                                               \
	do {                                                                    \
		void *sym_ = must_dlsym((handle), (name));                      \
		memcpy(&(field), &sym_, sizeof(sym_));                          \
	} while (0)

static void load_driver(void *handle, struct driver *d)
{
	LOAD(handle, d->init, "cuInit");
	LOAD(handle, d->device_get, "cuDeviceGet");
	LOAD(handle, d->primary_ctx_retain, "cuDevicePrimaryCtxRetain");
	LOAD(handle, d->ctx_set_current, "cuCtxSetCurrent");
	LOAD(handle, d->mem_alloc, "cuMemAlloc_v2");
	LOAD(handle, d->mem_free, "cuMemFree_v2");
	LOAD(handle, d->mem_alloc_async, "cuMemAllocAsync");
	LOAD(handle, d->mem_free_async, "cuMemFreeAsync");
	LOAD(handle, d->mem_pool_create, "cuMemPoolCreate");
	LOAD(handle, d->mem_alloc_from_pool_async, "cuMemAllocFromPoolAsync");
	LOAD(handle, d->stream_synchronize, "cuStreamSynchronize");
}

int main(void)
{
	struct driver d;
	CUdevice dev;
	CUcontext ctx;
	CUmemoryPool pool;
	CUmemPoolProps props;
	CUdeviceptr plain, plain_small, async, async_freed, pooled, pooled_small;
	void *handle, *global;
	Dl_info where;

	handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL)
		PROG_FAIL("dlopen(libcuda.so.1): %s", dlerror());
	/* RTLD_LOCAL: the driver's symbols are not in the global scope, which is
	 * why an interposer's dlsym(RTLD_NEXT, ...) finds nothing here. (A
	 * preloaded tracer may export the name itself: only libcuda's own
	 * definition must be out of sight.) */
	global = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	if (global != NULL && (dladdr(global, &where) == 0 || where.dli_fname == NULL ||
			       strstr(where.dli_fname, "libcuda.so") != NULL))
		PROG_FAIL("libcuda's cuMemAlloc_v2 is globally visible despite RTLD_LOCAL");
	load_driver(handle, &d);

	PROG_OK(d.init(0));
	PROG_OK(d.device_get(&dev, 0));
	PROG_OK(d.primary_ctx_retain(&ctx, dev));
	PROG_OK(d.ctx_set_current(ctx));

	PROG_OK(d.mem_alloc(&plain, 2 * MIB));
	PROG_OK(d.mem_alloc(&plain_small, 1024));
	PROG_OK(d.mem_free(plain_small));

	/* Stream-ordered on the legacy default stream (0), default pool. */
	PROG_OK(d.mem_alloc_async(&async, 1 * MIB, 0));
	PROG_OK(d.mem_alloc_async(&async_freed, 3 * MIB, 0));
	PROG_OK(d.mem_free_async(async_freed, 0));

	/* An explicit pool, as XLA's stream-ordered allocator makes. */
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	PROG_OK(d.mem_pool_create(&pool, &props));
	PROG_OK(d.mem_alloc_from_pool_async(&pooled, 4 * MIB, pool, 0));
	PROG_OK(d.mem_alloc_from_pool_async(&pooled_small, 256, pool, 0));
	PROG_OK(d.mem_free_async(pooled_small, 0));
	PROG_OK(d.stream_synchronize(0));

	prog_report_begin("main");
	prog_report_live(plain, 2 * MIB, "device", 0);
	prog_report_live(async, 1 * MIB, "async", 0);
	prog_report_live(pooled, 4 * MIB, "async", 0);
	prog_report_end();
	return 0;
}
