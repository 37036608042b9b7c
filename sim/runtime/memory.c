/* Memory of the simulated CUDA runtime: device, pitched, managed, pinned and
 * registered host allocations, stream-ordered allocations (with their _ptsz
 * exports) and memory pools, each forwarded to its driver entry point.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"

/* The _ptsz exports are declared by cuda_runtime_api.h only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM, which would rename the plain ones too. */
GMTRT_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
GMTRT_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
GMTRT_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
		cudaMemPool_t memPool, cudaStream_t stream);

/* The runtime passes these through unchanged: same values, same layout. */
_Static_assert(cudaMemAttachGlobal == CU_MEM_ATTACH_GLOBAL &&
	       cudaMemAttachHost == CU_MEM_ATTACH_HOST, "attach flags");
_Static_assert(cudaHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE &&
	       cudaHostAllocMapped == CU_MEMHOSTALLOC_DEVICEMAP &&
	       cudaHostAllocWriteCombined == CU_MEMHOSTALLOC_WRITECOMBINED, "host alloc flags");
_Static_assert(cudaHostRegisterPortable == CU_MEMHOSTREGISTER_PORTABLE &&
	       cudaHostRegisterMapped == CU_MEMHOSTREGISTER_DEVICEMAP &&
	       cudaHostRegisterIoMemory == CU_MEMHOSTREGISTER_IOMEMORY &&
	       cudaHostRegisterReadOnly == CU_MEMHOSTREGISTER_READ_ONLY, "host register flags");
_Static_assert(cudaMemPoolAttrUsedMemHigh == (int)CU_MEMPOOL_ATTR_USED_MEM_HIGH &&
	       cudaMemPoolReuseFollowEventDependencies ==
	       (int)CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, "pool attributes");
_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "pool props");
_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "64-bit device pointers");

/* cudart asks the driver for pitched memory with its widest element size. */
#define GMTRT_PITCH_ELEMENT_BYTES 16

GMTRT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	if (!devPtr)
		return gmtrt__fail(cudaErrorInvalidValue);
	/* cudart answers a zero-byte request itself (cuMemAlloc would refuse). */
	if (size == 0) {
		*devPtr = NULL;
		return cudaSuccess;
	}
	GMTRT_REQUIRE(cuMemAlloc);
	r = gmtrt__drv.cuMemAlloc(&dptr, size);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)(uintptr_t)dptr;
	return gmtrt__result(r);
}

GMTRT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	if (!devPtr || !pitch)
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemAllocPitch);
	r = gmtrt__drv.cuMemAllocPitch(&dptr, pitch, width, height, GMTRT_PITCH_ELEMENT_BYTES);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)(uintptr_t)dptr;
	return gmtrt__result(r);
}

/* A 3D block is a pitched 2D block of height × depth rows. */
GMTRT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	size_t rows, pitch;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	if (!pitchedDevPtr || __builtin_mul_overflow(extent.height, extent.depth, &rows))
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemAllocPitch);
	r = gmtrt__drv.cuMemAllocPitch(&dptr, &pitch, extent.width, rows,
				       GMTRT_PITCH_ELEMENT_BYTES);
	if (r == CUDA_SUCCESS) {
		pitchedDevPtr->ptr = (void *)(uintptr_t)dptr;
		pitchedDevPtr->pitch = pitch;
		pitchedDevPtr->xsize = extent.width;
		pitchedDevPtr->ysize = extent.height;
	}
	return gmtrt__result(r);
}

/* cudaFree(NULL) is the idiom that initialises the runtime and the context;
 * NVIDIA's cudart passes it on to the driver as cuMemFree_v2(0) (seen on an
 * H100), which frees nothing. */
GMTRT_API cudaError_t cudaFree(void *devPtr)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemFree);
	return gmtrt__result(gmtrt__drv.cuMemFree((CUdeviceptr)(uintptr_t)devPtr));
}

GMTRT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	/* The reference requires exactly one attach flag and a nonzero size. */
	if (!devPtr || size == 0 ||
	    (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemAllocManaged);
	r = gmtrt__drv.cuMemAllocManaged(&dptr, size, flags);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)(uintptr_t)dptr;
	return gmtrt__result(r);
}

GMTRT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	if (!ptr)
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemAllocHost);
	return gmtrt__result(gmtrt__drv.cuMemAllocHost(ptr, size));
}

GMTRT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	if (!pHost)
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemHostAlloc);
	return gmtrt__result(gmtrt__drv.cuMemHostAlloc(pHost, size, flags));
}

GMTRT_API cudaError_t cudaFreeHost(void *ptr)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	/* Like free(NULL), and like cudaFree(NULL). */
	if (!ptr)
		return cudaSuccess;
	GMTRT_REQUIRE(cuMemFreeHost);
	return gmtrt__result(gmtrt__drv.cuMemFreeHost(ptr));
}

GMTRT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemHostRegister);
	return gmtrt__result(gmtrt__drv.cuMemHostRegister(ptr, size, flags));
}

GMTRT_API cudaError_t cudaHostUnregister(void *ptr)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemHostUnregister);
	return gmtrt__result(gmtrt__drv.cuMemHostUnregister(ptr));
}

/* --- stream-ordered allocation ------------------------------------------------
 * The _ptsz exports are what code built with per-thread default streams calls;
 * they differ only in the driver variant, which treats stream 0 as per-thread. */

static cudaError_t malloc_async(PFN_cuMemAllocAsync_v11020 alloc, void **devPtr,
				size_t size, cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	if (!devPtr)
		return gmtrt__fail(cudaErrorInvalidValue);
	if (!alloc)
		return gmtrt__fail(cudaErrorCallRequiresNewerDriver);
	r = alloc(&dptr, size, stream);
	if (r == CUDA_SUCCESS)
		*devPtr = (void *)(uintptr_t)dptr;
	return gmtrt__result(r);
}

static cudaError_t free_async(PFN_cuMemFreeAsync_v11020 release, void *devPtr,
			      cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	if (!release)
		return gmtrt__fail(cudaErrorCallRequiresNewerDriver);
	return gmtrt__result(release((CUdeviceptr)(uintptr_t)devPtr, stream));
}

static cudaError_t malloc_from_pool(PFN_cuMemAllocFromPoolAsync_v11020 alloc, void **ptr,
				    size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdeviceptr dptr;
	CUresult r;

	if (err != cudaSuccess)
		return err;
	if (!ptr)
		return gmtrt__fail(cudaErrorInvalidValue);
	if (!alloc)
		return gmtrt__fail(cudaErrorCallRequiresNewerDriver);
	r = alloc(&dptr, size, pool, stream);
	if (r == CUDA_SUCCESS)
		*ptr = (void *)(uintptr_t)dptr;
	return gmtrt__result(r);
}

GMTRT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(gmtrt__drv.cuMemAllocAsync, devPtr, size, hStream);
}

GMTRT_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return malloc_async(gmtrt__drv.cuMemAllocAsync_ptsz, devPtr, size, hStream);
}

GMTRT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return free_async(gmtrt__drv.cuMemFreeAsync, devPtr, hStream);
}

GMTRT_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return free_async(gmtrt__drv.cuMemFreeAsync_ptsz, devPtr, hStream);
}

GMTRT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
					      cudaStream_t stream)
{
	return malloc_from_pool(gmtrt__drv.cuMemAllocFromPoolAsync, ptr, size, memPool, stream);
}

GMTRT_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
						   cudaMemPool_t memPool, cudaStream_t stream)
{
	return malloc_from_pool(gmtrt__drv.cuMemAllocFromPoolAsync_ptsz, ptr, size, memPool,
				stream);
}

/* --- memory pools ------------------------------------------------------------ */

GMTRT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
					const struct cudaMemPoolProps *poolProps)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUmemPoolProps props;

	if (err != cudaSuccess)
		return err;
	if (!memPool || !poolProps)
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuMemPoolCreate);
	/* Field by field: the enums have the driver's values, but the structs
	 * are distinct types. */
	memset(&props, 0, sizeof(props));
	props.allocType = (CUmemAllocationType)poolProps->allocType;
	props.handleTypes = (CUmemAllocationHandleType)poolProps->handleTypes;
	props.location.type = (CUmemLocationType)poolProps->location.type;
	props.location.id = poolProps->location.id;
	props.win32SecurityAttributes = poolProps->win32SecurityAttributes;
	props.maxSize = poolProps->maxSize;
	props.usage = poolProps->usage;
	_Static_assert(sizeof(props.reserved) == sizeof(poolProps->reserved), "reserved");
	memcpy(props.reserved, poolProps->reserved, sizeof(props.reserved));
	return gmtrt__result(gmtrt__drv.cuMemPoolCreate(memPool, &props));
}

GMTRT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemPoolDestroy);
	return gmtrt__result(gmtrt__drv.cuMemPoolDestroy(memPool));
}

GMTRT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemPoolTrimTo);
	return gmtrt__result(gmtrt__drv.cuMemPoolTrimTo(memPool, minBytesToKeep));
}

GMTRT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
					      void *value)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemPoolSetAttribute);
	return gmtrt__result(gmtrt__drv.cuMemPoolSetAttribute(memPool,
					(CUmemPool_attribute)attr, value));
}

GMTRT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
					      void *value)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemPoolGetAttribute);
	return gmtrt__result(gmtrt__drv.cuMemPoolGetAttribute(memPool,
					(CUmemPool_attribute)attr, value));
}

GMTRT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdevice dev = 0;

	if (err != cudaSuccess)
		return err;
	if (!memPool)
		return gmtrt__fail(cudaErrorInvalidValue);
	err = gmtrt__device(device, &dev);
	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuDeviceGetDefaultMemPool);
	return gmtrt__result(gmtrt__drv.cuDeviceGetDefaultMemPool(memPool, dev));
}

GMTRT_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdevice dev = 0;

	if (err != cudaSuccess)
		return err;
	if (!memPool)
		return gmtrt__fail(cudaErrorInvalidValue);
	err = gmtrt__device(device, &dev);
	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuDeviceGetMemPool);
	return gmtrt__result(gmtrt__drv.cuDeviceGetMemPool(memPool, dev));
}

GMTRT_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	cudaError_t err = gmtrt__enter_ctx();
	CUdevice dev = 0;

	if (err != cudaSuccess)
		return err;
	err = gmtrt__device(device, &dev);
	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuDeviceSetMemPool);
	return gmtrt__result(gmtrt__drv.cuDeviceSetMemPool(dev, memPool));
}
