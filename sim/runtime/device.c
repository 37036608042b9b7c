/* Devices, primary contexts and streams of the simulated CUDA runtime: the
 * per-thread current device, the lazily retained primary context made current
 * on each thread that needs one, device queries, and stream create/sync.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "internal.h"

GMTRT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

/*
 * One primary context per device, retained on first use and released by
 * cudaDeviceReset. epoch changes on every retain and release so that a thread
 * whose cached binding predates it makes the context current again.
 */
struct primary {
	CUcontext ctx;		/* under primary_lock */
	atomic_uint epoch;	/* written under primary_lock */
};

static struct primary primaries[GMTRT_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

/* cudart's current device is per host thread, 0 until cudaSetDevice. */
static _Thread_local int tls_device;
/* The device whose primary context this thread made current, and the epoch it
 * saw then; -1 while none. */
static _Thread_local int tls_bound_device = -1;
static _Thread_local unsigned int tls_bound_epoch;
static _Thread_local CUcontext tls_bound_ctx;

cudaError_t gmtrt__device(int ordinal, CUdevice *dev)
{
	if (ordinal < 0 || ordinal >= gmtrt__device_count)
		return gmtrt__fail(cudaErrorInvalidDevice);
	*dev = gmtrt__devices[ordinal];
	return cudaSuccess;
}

static cudaError_t bind_primary(int ordinal)
{
	CUresult r = CUDA_SUCCESS;
	unsigned int epoch;
	CUcontext ctx;

	pthread_mutex_lock(&primary_lock);
	if (!primaries[ordinal].ctx) {
		r = gmtrt__drv.cuDevicePrimaryCtxRetain(&ctx, gmtrt__devices[ordinal]);
		if (r == CUDA_SUCCESS) {
			primaries[ordinal].ctx = ctx;
			atomic_fetch_add_explicit(&primaries[ordinal].epoch, 1,
						  memory_order_relaxed);
		}
	}
	ctx = primaries[ordinal].ctx;
	epoch = atomic_load_explicit(&primaries[ordinal].epoch, memory_order_relaxed);
	pthread_mutex_unlock(&primary_lock);
	if (r != CUDA_SUCCESS)
		return gmtrt__result(r);

	r = gmtrt__drv.cuCtxSetCurrent(ctx);
	if (r != CUDA_SUCCESS)
		return gmtrt__result(r);
	tls_bound_device = ordinal;
	tls_bound_epoch = epoch;
	tls_bound_ctx = ctx;
	return cudaSuccess;
}

cudaError_t gmtrt__enter_ctx(void)
{
	cudaError_t err = gmtrt__enter();
	int ordinal = tls_device;

	if (err != cudaSuccess)
		return err;
	if (ordinal >= gmtrt__device_count)
		return gmtrt__fail(cudaErrorInvalidDevice);
	/* Relaxed is enough: the epoch publishes nothing but itself, and a
	 * thread racing cudaDeviceReset is misuse in cudart too. */
	if (ordinal == tls_bound_device &&
	    tls_bound_epoch == atomic_load_explicit(&primaries[ordinal].epoch,
						    memory_order_relaxed))
		return cudaSuccess;
	return bind_primary(ordinal);
}

GMTRT_API cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t err;

	if (!count)
		return gmtrt__fail(cudaErrorInvalidValue);
	err = gmtrt__enter();
	/* Frameworks read the count even on failure: cudart leaves 0 there. */
	*count = err == cudaSuccess ? gmtrt__device_count : 0;
	return err;
}

/* Since CUDA 12.0 cudaSetDevice also initialises the device's primary context. */
GMTRT_API cudaError_t cudaSetDevice(int device)
{
	cudaError_t err = gmtrt__enter();

	if (err != cudaSuccess)
		return err;
	if (device < 0 || device >= gmtrt__device_count)
		return gmtrt__fail(cudaErrorInvalidDevice);
	tls_device = device;
	return gmtrt__enter_ctx();
}

GMTRT_API cudaError_t cudaGetDevice(int *device)
{
	cudaError_t err = gmtrt__enter();

	if (err != cudaSuccess)
		return err;
	if (!device)
		return gmtrt__fail(cudaErrorInvalidValue);
	*device = tls_device;
	return cudaSuccess;
}

GMTRT_API cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuCtxSynchronize);
	return gmtrt__result(gmtrt__drv.cuCtxSynchronize(tls_bound_ctx));
}

/* Releases this process's reference on the current device's primary context;
 * the next call that needs a context retains it afresh. */
GMTRT_API cudaError_t cudaDeviceReset(void)
{
	cudaError_t err = gmtrt__enter();
	int ordinal = tls_device;
	CUresult r = CUDA_SUCCESS;

	if (err != cudaSuccess)
		return err;
	if (ordinal >= gmtrt__device_count)
		return gmtrt__fail(cudaErrorInvalidDevice);
	GMTRT_REQUIRE(cuDevicePrimaryCtxRelease);
	pthread_mutex_lock(&primary_lock);
	if (primaries[ordinal].ctx) {
		r = gmtrt__drv.cuDevicePrimaryCtxRelease(gmtrt__devices[ordinal]);
		primaries[ordinal].ctx = NULL;
		atomic_fetch_add_explicit(&primaries[ordinal].epoch, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&primary_lock);
	return gmtrt__result(r);
}

GMTRT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	cudaError_t err = gmtrt__enter();
	CUdevice dev = 0;

	if (err != cudaSuccess)
		return err;
	if (!value)
		return gmtrt__fail(cudaErrorInvalidValue);
	err = gmtrt__device(device, &dev);
	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuDeviceGetAttribute);
	/* The runtime's attribute numbers are the driver's. */
	return gmtrt__result(gmtrt__drv.cuDeviceGetAttribute(value,
					(CUdevice_attribute)attr, dev));
}

GMTRT_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuMemGetInfo);
	return gmtrt__result(gmtrt__drv.cuMemGetInfo(free, total));
}

GMTRT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	if (!pStream || (flags & ~(unsigned int)cudaStreamNonBlocking))
		return gmtrt__fail(cudaErrorInvalidValue);
	GMTRT_REQUIRE(cuStreamCreate);
	/* cudaStreamNonBlocking is CU_STREAM_NON_BLOCKING. */
	return gmtrt__result(gmtrt__drv.cuStreamCreate(pStream, flags));
}

GMTRT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

GMTRT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuStreamDestroy);
	return gmtrt__result(gmtrt__drv.cuStreamDestroy(stream));
}

GMTRT_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuStreamSynchronize);
	return gmtrt__result(gmtrt__drv.cuStreamSynchronize(stream));
}

GMTRT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	cudaError_t err = gmtrt__enter_ctx();

	if (err != cudaSuccess)
		return err;
	GMTRT_REQUIRE(cuStreamSynchronize_ptsz);
	return gmtrt__result(gmtrt__drv.cuStreamSynchronize_ptsz(stream));
}
