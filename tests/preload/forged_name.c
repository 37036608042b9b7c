/* A program whose allocating function's name is "gmt_forged_grow", a newline
 * and "snapshot: /etc/passwd" (forged_fn.c): it keeps 64 MiB made there, then
 * asks for more than the device has (an out-of-memory report whose top site is
 * that function), and exits with the block live (the leak report's frame).
 * Run with GMTSIM_MEMORY=256M. */
#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

int gmt_forged_run(int (*alloc)(void *, size_t), void *p, size_t size);

static int alloc(void *p, size_t size)
{
	return (int)cuMemAlloc(p, size);
}

int main(void)
{
	CUcontext ctx;
	CUdeviceptr kept, big;

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || gmt_forged_run(alloc, &kept, (size_t)64 << 20) != CUDA_SUCCESS) {
		fprintf(stderr, "forged_name: failed\n");
		return 1;
	}
	if (gmt_forged_run(alloc, &big, (size_t)1 << 40) == CUDA_SUCCESS) {
		fprintf(stderr, "forged_name: 1 TiB did not fail\n");
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
