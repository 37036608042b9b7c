/* Calls that fail, and calls that succeed, with errno set to a marker before
 * each: prints every result, whether errno and the output argument were left
 * alone. Run with and without the tracer, the output must be the same. One of
 * the failing frees is of a live device pointer (cuMemFreeHost on it): the
 * tracer records a free only when the driver honoured it, so the exit snapshot
 * still lists it (tests/preload compares with the ledger). The harness also
 * counts: every refused free in stats.failed_frees (nine), and no free the
 * tracer could not match in stats.unknown_frees: a free of NULL (cudaFree(0),
 * the idiom that makes a context) frees nothing and is not recorded. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MARK 4242
#define UNTOUCHED 0x5a5a5a5aull

static void show(const char *what, CUresult r, unsigned long long out)
{
	printf("%-44s -> %3d errno %s out %s\n", what, (int)r, errno == MARK ? "kept" : "CHANGED",
	       out == UNTOUCHED ? "untouched" : "set");
}

#define CALL(what, expr, outvar)                    \
	do {                                        \
		CUresult r_;                        \
		errno = MARK;                       \
		r_ = (expr);                        \
		show(what, r_, (outvar));           \
	} while (0)

int main(void)
{
	CUdeviceptr p = UNTOUCHED, live = 0, freed = 0;
	CUmemGenericAllocationHandle h = UNTOUCHED;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUdriverProcAddressQueryResult status;
	CUcontext ctx;
	CUarray arr = (CUarray)0x1234;
	void *pfn = (void *)UNTOUCHED;
	unsigned long long none = UNTOUCHED;

	CALL("cuMemAlloc_v2 before cuInit", cuMemAlloc(&p, 4096), p);
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	CALL("cuMemAlloc_v2 of 0 bytes", cuMemAlloc(&p, 0), p);
	CALL("cuMemAlloc_v2 of 1 TiB (out of memory)", cuMemAlloc(&p, 1ull << 40), p);
	CALL("cuMemFree_v2 of an unknown pointer", cuMemFree((CUdeviceptr)0x1234), none);
	CALL("cuMemAlloc_v2 of 1 MiB", cuMemAlloc(&live, 1 << 20), none);
	CALL("cuMemFreeHost of a live device pointer", cuMemFreeHost((void *)(uintptr_t)live), none);
	CALL("cuMemAlloc_v2 of 2 MiB", cuMemAlloc(&freed, 2 << 20), none);
	CALL("cuMemFree_v2 of it", cuMemFree(freed), none);
	CALL("cuMemFree_v2 of it again", cuMemFree(freed), none);
	CALL("cuMemFree_v2 of NULL", cuMemFree(0), none);
	CALL("cuMemHostUnregister of an unknown range", cuMemHostUnregister(&none), none);
	CALL("cuMemAllocAsync of 0 bytes", cuMemAllocAsync(&p, 0, 0), p);
	CALL("cuMemFreeAsync of an unknown pointer", cuMemFreeAsync((CUdeviceptr)0x1234, 0), none);
	CALL("cuMemCreate of 1000 bytes", cuMemCreate(&h, 1000, &prop, 0), h);
	CALL("cuMemRelease of an unknown handle", cuMemRelease((CUmemGenericAllocationHandle)0x77), none);
	CALL("cuMemRetainAllocationHandle of a cuMemAlloc pointer",
	     cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)live), h);
	CALL("cuMemUnmap of nothing mapped", cuMemUnmap((CUdeviceptr)0x200000, 2 << 20), none);
	CALL("cuMemAddressFree of nothing reserved", cuMemAddressFree((CUdeviceptr)0x200000, 2 << 20), none);
	CALL("cuArrayDestroy of an unknown array", cuArrayDestroy(arr), none);
	CALL("cuGetProcAddress_v2 of an unknown name",
	     cuGetProcAddress("cuNoSuchEntryPoint", &pfn, 13000, 0, &status), (unsigned long long)(uintptr_t)pfn);
	printf("%-44s    status %d\n", "", (int)status);
	CALL("cuGetProcAddress_v2 newer than the driver",
	     cuGetProcAddress("cuMemAlloc", &pfn, 99999, 0, &status), (unsigned long long)(uintptr_t)pfn);
	printf("PID %d main\n", (int)getpid());
	return 0;
}
