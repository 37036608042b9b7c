/* A free at exit, after the driver has shut down: an exit handler registered
 * before the first CUDA call runs after the driver's own (exit handlers run in
 * reverse order), and its cuMemFree_v2 gets CUDA_ERROR_DEINITIALIZED: the driver
 * released that memory with its context. The tracer must count it freed, not
 * live at exit, while the simulator's ledger, written at its teardown, still
 * lists it. Prints "RELEASED <address>" for the harness. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static CUdeviceptr late;

static void late_free(void)
{
	CUresult r = cuMemFree(late);

	if (r != CUDA_ERROR_DEINITIALIZED) {
		fprintf(stderr, "teardown: cuMemFree_v2 at exit returned %d, expected CUDA_ERROR_DEINITIALIZED\n",
			(int)r);
		_exit(1);
	}
}

int main(void)
{
	CUcontext ctx;
	CUdeviceptr kept;

	atexit(late_free);
	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&late, 3 << 20) != CUDA_SUCCESS ||
	    cuMemAlloc(&kept, 1 << 20) != CUDA_SUCCESS)
		return 1;
	printf("PID %d main\nRELEASED 0x%llx\n", (int)getpid(), (unsigned long long)late);
	return 0;
}
