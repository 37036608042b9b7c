/* The -lcuda row: the versioned driver entry points called through the PLT
 * (cuMemAlloc is cuMemAlloc_v2 by cuda.h's macro), every kind the driver API
 * allocates directly — device, pitched, managed, pinned host (both calls),
 * registered host, a CUDA array — on the primary context. nvcc links its
 * static cudart too (it is never called). Checkpoints: start, allocated,
 * freed, end. */
#include <cuda.h>

#include "gpu_test.h"

static CUdevice dev;

static void checkpoint(const char *label)
{
	size_t free_bytes, total_bytes;

	gt_checkpoint(label);
	GT_OK(cuMemGetInfo(&free_bytes, &total_bytes));
	gt_meminfo(label, 0, free_bytes, total_bytes);
}

int main(void)
{
	CUcontext ctx;
	CUdeviceptr d_4m, d_2m1, pitched, managed;
	CUDA_ARRAY_DESCRIPTOR desc;
	CUmemAllocationProp prop;
	CUarray array;
	void *host, *host_portable, *registered;
	size_t pitch, gran;

	gt_begin("driver_api");
	GT_OK(cuInit(0));
	GT_OK(cuDeviceGet(&dev, 0));
	GT_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	GT_OK(cuCtxSetCurrent(ctx));
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	GT_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	printf("GRANULARITY 0 %zu\n", gran);
	checkpoint("start");

	GT_OK(cuMemAlloc(&d_4m, 4 * GT_MIB));
	gt_add(d_4m, 4 * GT_MIB, "device", 0);
	GT_OK(cuMemAlloc(&d_2m1, 2 * GT_MIB + 1));
	gt_add(d_2m1, 2 * GT_MIB + 1, "device", 0);
	GT_OK(cuMemAllocPitch(&pitched, &pitch, 4096, 16, 4));
	GT_CHECK(pitch >= 4096);
	gt_add(pitched, pitch * 16, "device", 0);
	/* Not resident until touched: no device memory taken. */
	GT_OK(cuMemAllocManaged(&managed, 2 * GT_MIB, CU_MEM_ATTACH_GLOBAL));
	gt_add(managed, 2 * GT_MIB, "managed", 0);
	GT_OK(cuMemAllocHost(&host, 64 * 1024));
	gt_add(GT_ADDR(host), 64 * 1024, "host", -1);
	GT_OK(cuMemHostAlloc(&host_portable, 12345, CU_MEMHOSTALLOC_PORTABLE));
	gt_add(GT_ADDR(host_portable), 12345, "host", -1);
	registered = aligned_alloc(4096, 256 * 1024);
	GT_CHECK(registered != NULL);
	GT_OK(cuMemHostRegister(registered, 256 * 1024, 0));
	gt_add(GT_ADDR(registered), 256 * 1024, "registered", -1);
	/* 1024 x 1024 floats: the snapshot counts width x height x channels x
	 * element size, 4 MiB. */
	memset(&desc, 0, sizeof(desc));
	desc.Width = 1024;
	desc.Height = 1024;
	desc.Format = CU_AD_FORMAT_FLOAT;
	desc.NumChannels = 1;
	GT_OK(cuArrayCreate(&array, &desc));
	gt_add(GT_ADDR(array), 4 * GT_MIB, "array", 0);
	checkpoint("allocated");

	gt_remove(d_2m1, "device");
	GT_OK(cuMemFree(d_2m1));
	gt_remove(GT_ADDR(host_portable), "host");
	GT_OK(cuMemFreeHost(host_portable));
	gt_remove(GT_ADDR(array), "array");
	GT_OK(cuArrayDestroy(array));
	checkpoint("freed");

	gt_remove(d_4m, "device");
	GT_OK(cuMemFree(d_4m));
	gt_remove(pitched, "device");
	GT_OK(cuMemFree(pitched));
	gt_remove(managed, "managed");
	GT_OK(cuMemFree(managed));
	gt_remove(GT_ADDR(host), "host");
	GT_OK(cuMemFreeHost(host));
	gt_remove(GT_ADDR(registered), "registered");
	GT_OK(cuMemHostUnregister(registered));
	free(registered);
	checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
