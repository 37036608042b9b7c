/* A program that changes its working directory (argv[2]) before its first
 * CUDA call ("before") or after its first allocation ("after"), then runs out
 * of memory with 64 MiB live and exits with it: its snapshots must land in
 * the GPUMEMTRACE_DIR it was started with, relative or not. Run with
 * GMTSIM_MEMORY=256M. */
#include <cuda.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	CUcontext ctx;
	CUdeviceptr kept, big;
	int before = argc == 3 && strcmp(argv[1], "before") == 0;

	if (argc != 3 || (before && chdir(argv[2]) != 0)) {
		fprintf(stderr, "usage: chdir_oom before|after DIR\n");
		return 2;
	}
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&kept, (size_t)64 << 20) != CUDA_SUCCESS) {
		fprintf(stderr, "chdir_oom: failed\n");
		return 1;
	}
	if (!before && chdir(argv[2]) != 0) {
		perror("chdir_oom: chdir");
		return 1;
	}
	if (cuMemAlloc(&big, (size_t)1 << 40) == CUDA_SUCCESS) {
		fprintf(stderr, "chdir_oom: 1 TiB did not fail\n");
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
