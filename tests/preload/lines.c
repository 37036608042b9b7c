/* A program built with debug information whose one allocation sits on a known
 * line: the exit snapshot must name this file and that line in a frame (and
 * list the program, with its build-id, among the modules). Prints
 * "ALLOC_LINE <n>" for the harness (check_trace.py --frame-has). */
#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

/* noinline: the allocating call keeps a frame of its own. */
__attribute__((noinline)) static CUresult allocate(CUdeviceptr *p, int *line)
{
	CUresult r = cuMemAlloc(p, 2 << 20); *line = __LINE__; /* ALLOC_LINE: the call and __LINE__ share it */

	return r;
}

int main(void)
{
	CUcontext ctx;
	CUdeviceptr p;
	int line = 0;

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || allocate(&p, &line) != CUDA_SUCCESS) {
		fprintf(stderr, "lines: failed\n");
		return 1;
	}
	printf("PID %d main\nALLOC_LINE %d\n", (int)getpid(), line);
	return 0;
}
