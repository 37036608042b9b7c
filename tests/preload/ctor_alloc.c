/* main() of the constructor test: links ctor_lib (whose constructor allocated
 * already) and allocates once more through the driver, by the PLT. */
#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

extern unsigned long long ctor_lib_pointer;

int main(void)
{
	CUdeviceptr p;
	CUcontext ctx;

	if (ctor_lib_pointer == 0 || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) {
		fprintf(stderr, "ctor_alloc: failed\n");
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
