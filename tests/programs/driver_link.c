/* Test program for the -lcuda row of the matrix: calls the versioned driver
 * entry points through the PLT (cuMemAlloc is cuMemAlloc_v2 by cuda.h's macro)
 * on two devices, so the ledger must attribute each allocation to its device.
 * Run with GMTSIM_DEVICES=2 GMTSIM_MEMORY=1G,2G GMTSIM_CONTEXT_BYTES=3M. */
#define _GNU_SOURCE
#include <stdlib.h>

#include <cuda.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

static void *registered_kept;	/* reachable at exit: still registered */

/* Free and total bytes of the current context's device. */
static void check_mem_info(size_t want_free, size_t want_total)
{
	size_t free_bytes, total_bytes;

	PROG_OK(cuMemGetInfo(&free_bytes, &total_bytes));
	PROG_CHECK_EQ_U(total_bytes, want_total);
	PROG_CHECK_EQ_U(free_bytes, want_free);
}

int main(void)
{
	CUdevice dev0, dev1;
	CUcontext ctx0, ctx1;
	CUdeviceptr d0_1m, d0_4m, d0_pitched, d0_managed;
	CUdeviceptr d1_6m, d1_512, d1_managed, untouched;
	void *host_alloc, *host_small, *unknown;
	size_t pitch;
	int count;

	/* Before cuInit every call fails with CUDA_ERROR_NOT_INITIALIZED. */
	PROG_CHECK_EQ(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);

	PROG_OK(cuInit(0));
	PROG_OK(cuDeviceGetCount(&count));
	PROG_CHECK_EQ(count, 2);
	PROG_OK(cuDeviceGet(&dev0, 0));
	PROG_OK(cuDeviceGet(&dev1, 1));

	/* No current context yet: allocations fail, the pointer stays as set. */
	untouched = 0x1234;
	PROG_CHECK_EQ(cuMemAlloc(&untouched, MIB), CUDA_ERROR_INVALID_CONTEXT);
	PROG_CHECK_EQ_U(untouched, 0x1234);

	PROG_OK(cuDevicePrimaryCtxRetain(&ctx0, dev0));
	PROG_OK(cuDevicePrimaryCtxRetain(&ctx1, dev1));

	/* Device 0 (1 GiB; its context costs 3M, rounded up to 2 pages). */
	PROG_OK(cuCtxSetCurrent(ctx0));
	PROG_OK(cuMemAlloc(&d0_1m, 1 * MIB));
	PROG_OK(cuMemAlloc(&d0_4m, 4 * MIB));
	PROG_OK(cuMemAllocPitch(&d0_pitched, &pitch, 4096, 16, 4));
	PROG_CHECK_EQ(pitch, 4096);
	PROG_OK(cuMemAllocManaged(&d0_managed, 2 * MIB, CU_MEM_ATTACH_GLOBAL));
	PROG_OK(cuMemFree(d0_4m));
	/* 1 MiB and 64 KiB share one sub-allocated page; managed memory holds
	 * no resident page. */
	check_mem_info(1024 * MIB - 4 * MIB - 2 * MIB, 1024 * MIB);

	/* Device 1 (2 GiB). */
	PROG_OK(cuCtxSetCurrent(ctx1));
	PROG_OK(cuMemAlloc(&d1_6m, 6 * MIB));
	PROG_OK(cuMemAlloc(&d1_512, 512));
	PROG_OK(cuMemAllocManaged(&d1_managed, 1 * MIB, CU_MEM_ATTACH_GLOBAL));
	PROG_OK(cuMemFree(d1_managed));
	check_mem_info(2048 * MIB - 4 * MIB - 6 * MIB - 2 * MIB, 2048 * MIB);

	/* Host kinds belong to no device (-1 in the ledger). */
	PROG_OK(cuMemHostAlloc(&host_alloc, 4096, CU_MEMHOSTALLOC_PORTABLE));
	PROG_OK(cuMemAllocHost(&host_small, 10000));
	PROG_OK(cuMemFreeHost(host_small));
	registered_kept = aligned_alloc(4096, 8192);
	PROG_CHECK(registered_kept != NULL);
	PROG_OK(cuMemHostRegister(registered_kept, 8192, 0));
	PROG_CHECK_EQ(cuMemHostRegister((char *)registered_kept + 4096, 4096, 0),
		      CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	unknown = &count;
	PROG_CHECK_EQ(cuMemHostUnregister(unknown), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

	prog_report_begin("main");
	prog_report_live(d0_1m, 1 * MIB, "device", 0);
	prog_report_live(d0_pitched, 4096 * 16, "device", 0);
	prog_report_live(d0_managed, 2 * MIB, "managed", 0);
	prog_report_live(d1_6m, 6 * MIB, "device", 1);
	prog_report_live(d1_512, 512, "device", 1);
	prog_report_live(PROG_ADDR(host_alloc), 4096, "host", -1);
	prog_report_live(PROG_ADDR(registered_kept), 8192, "registered", -1);
	prog_report_end();
	return 0;
}
