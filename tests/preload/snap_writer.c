/* Test program for snapshot atomicity (tests/preload/check_atomic.py): keeps
 * COUNT allocations of 4 KiB live (a snapshot of a few megabytes), then asks
 * for api snapshots (gmt_dump) one after another, ROUNDS times (0: until it
 * is killed), printing "DUMPED <n>" after each. Arguments: COUNT ROUNDS. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>

#include "gpumemtrace.h"

int main(int argc, char **argv)
{
	long count = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
	long rounds = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
	CUdevice dev;
	CUcontext ctx;
	char path[4096];

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "snap_writer: the driver failed\n");
		return 1;
	}
	for (long i = 0; i < count; i++) {
		CUdeviceptr p;

		if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS) {
			fprintf(stderr, "snap_writer: allocation %ld failed\n", i);
			return 1;
		}
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	for (long n = 1; rounds == 0 || n <= rounds; n++) {
		if (gmt_dump(path, sizeof(path)) != 0) {
			fprintf(stderr, "snap_writer: gmt_dump failed\n");
			return 1;
		}
		printf("DUMPED %ld\n", n);
	}
	return 0;
}
