/* Test program for secure execution (tests/preload/check_secure.py): linked
 * against libgpumemtrace.so with absolute run paths, so that the tracer and
 * the simulated driver load even where the loader ignores LD_PRELOAD and
 * LD_LIBRARY_PATH (a set-user-ID program run by another user). Prints
 * "AT_SECURE <n>", allocates 1 MiB of device memory and never frees it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/auxv.h>

#include <cuda.h>

#include "gpumemtrace.h"

extern const struct gmt_api_v1 gmt_api_v1;

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	char path[4096];

	printf("AT_SECURE %lu\n", getauxval(AT_SECURE));
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) {
		fprintf(stderr, "secure_prog: the driver failed\n");
		return 1;
	}
	/* The public API says whether the tracer is on; the table's address
	 * makes the link need the library. */
	printf("TRACED %d (%p)\n", gmt_dump(path, sizeof(path)) == 0, (const void *)&gmt_api_v1);
	return 0;
}
