/* The private-loader row (XLA/JAX, TensorFlow stubs, cuFFT, ctypes):
 * dlopen("libcuda.so.1", RTLD_LOCAL) and dlsym(handle, ...) by versioned
 * name — the driver's symbols are never in the global scope, so an
 * interposer's dlsym(RTLD_NEXT) finds nothing. Plain, stream-ordered (default
 * pool) and explicit-pool allocations. nvcc links its static cudart too; it
 * is never called. Checkpoints: start, allocated, freed, end. */
#include <dlfcn.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "gpu_test.h"

struct driver {
	PFN_cuInit_v2000 init;
	PFN_cuDeviceGet_v2000 device_get;
	PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
	PFN_cuCtxSetCurrent_v4000 ctx_set_current;
	PFN_cuMemGetInfo_v3020 mem_get_info;
	PFN_cuMemAlloc_v3020 mem_alloc;
	PFN_cuMemFree_v3020 mem_free;
	PFN_cuMemAllocAsync_v11020 mem_alloc_async;
	PFN_cuMemFreeAsync_v11020 mem_free_async;
	PFN_cuMemPoolCreate_v11020 mem_pool_create;
	PFN_cuMemPoolDestroy_v11020 mem_pool_destroy;
	PFN_cuMemPoolGetAttribute_v11020 mem_pool_get_attribute;
	PFN_cuMemAllocFromPoolAsync_v11020 mem_alloc_from_pool_async;
	PFN_cuDeviceGetDefaultMemPool_v11020 device_get_default_mem_pool;
	PFN_cuStreamSynchronize_v2000 stream_synchronize;
};

static struct driver d;

/* NOTE: ISO C++ has no cast from void * to a function pointer; POSIX requires
 * the round trip to work for dlsym, hence the memcpy. */
#define LOAD(handle, field, name)                                               \
	do {                                                                    \
		void *sym_ = dlsym((handle), (name));                           \
		if (sym_ == NULL)                                               \
			GT_FAIL("dlsym(libcuda.so.1, \"%s\"): %s", (name), dlerror()); \
		memcpy(&(field), &sym_, sizeof(sym_));                          \
	} while (0)

static void load_driver(void *handle)
{
	LOAD(handle, d.init, "cuInit");
	LOAD(handle, d.device_get, "cuDeviceGet");
	LOAD(handle, d.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
	LOAD(handle, d.ctx_set_current, "cuCtxSetCurrent");
	LOAD(handle, d.mem_get_info, "cuMemGetInfo_v2");
	LOAD(handle, d.mem_alloc, "cuMemAlloc_v2");
	LOAD(handle, d.mem_free, "cuMemFree_v2");
	LOAD(handle, d.mem_alloc_async, "cuMemAllocAsync");
	LOAD(handle, d.mem_free_async, "cuMemFreeAsync");
	LOAD(handle, d.mem_pool_create, "cuMemPoolCreate");
	LOAD(handle, d.mem_pool_destroy, "cuMemPoolDestroy");
	LOAD(handle, d.mem_pool_get_attribute, "cuMemPoolGetAttribute");
	LOAD(handle, d.mem_alloc_from_pool_async, "cuMemAllocFromPoolAsync");
	LOAD(handle, d.device_get_default_mem_pool, "cuDeviceGetDefaultMemPool");
	LOAD(handle, d.stream_synchronize, "cuStreamSynchronize");
}

static unsigned long long reserved(CUmemoryPool pool)
{
	cuuint64_t bytes = 0;

	GT_OK(d.mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &bytes));
	return bytes;
}

static CUmemoryPool default_pool, explicit_pool;

/* The snapshot, what it holds, the free bytes; the default pool's
 * reservation (which the tracer asks too) and the explicit pool's (which it
 * does not: neither the device's default nor its current pool). */
static void checkpoint(const char *label)
{
	size_t free_bytes, total_bytes;

	gt_checkpoint(label);
	GT_OK(d.mem_get_info(&free_bytes, &total_bytes));
	gt_meminfo(label, 0, free_bytes, total_bytes);
	gt_pool(label, 0, reserved(default_pool));
	gt_extra(label, 0, explicit_pool != NULL ? reserved(explicit_pool) : 0);
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmemPoolProps props;
	CUdeviceptr plain_4m, plain_1m, async_2m, pooled_2m;
	void *handle, *global;
	Dl_info where;

	gt_begin("dlopen_loader");
	handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (handle == NULL)
		GT_FAIL("dlopen(libcuda.so.1): %s", dlerror());
	/* RTLD_LOCAL: libcuda's own definition is out of the global scope (a
	 * preloaded tracer may export the name itself). */
	global = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	if (global != NULL && (dladdr(global, &where) == 0 || where.dli_fname == NULL ||
			       strstr(where.dli_fname, "libcuda.so") != NULL))
		GT_FAIL("libcuda's cuMemAlloc_v2 is in the global scope");
	load_driver(handle);

	GT_OK(d.init(0));
	GT_OK(d.device_get(&dev, 0));
	GT_OK(d.primary_ctx_retain(&ctx, dev));
	GT_OK(d.ctx_set_current(ctx));
	GT_OK(d.device_get_default_mem_pool(&default_pool, dev));
	checkpoint("start");

	GT_OK(d.mem_alloc(&plain_4m, 4 * GT_MIB));
	gt_add(plain_4m, 4 * GT_MIB, "device", 0);
	GT_OK(d.mem_alloc(&plain_1m, 1 * GT_MIB));
	gt_add(plain_1m, 1 * GT_MIB, "device", 0);
	GT_OK(d.mem_alloc_async(&async_2m, 2 * GT_MIB, NULL));
	gt_add(async_2m, 2 * GT_MIB, "async", 0);
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	GT_OK(d.mem_pool_create(&explicit_pool, &props));
	GT_OK(d.mem_alloc_from_pool_async(&pooled_2m, 2 * GT_MIB, explicit_pool, NULL));
	gt_add(pooled_2m, 2 * GT_MIB, "async", 0);
	GT_OK(d.stream_synchronize(NULL));
	checkpoint("allocated");

	gt_remove(plain_4m, "device");
	GT_OK(d.mem_free(plain_4m));
	gt_remove(pooled_2m, "async");
	GT_OK(d.mem_free_async(pooled_2m, NULL));
	GT_OK(d.stream_synchronize(NULL));
	checkpoint("freed");

	gt_remove(plain_1m, "device");
	GT_OK(d.mem_free(plain_1m));
	gt_remove(async_2m, "async");
	GT_OK(d.mem_free_async(async_2m, NULL));
	GT_OK(d.stream_synchronize(NULL));
	GT_OK(d.mem_pool_destroy(explicit_pool));
	explicit_pool = NULL;
	checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
