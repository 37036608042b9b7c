/* Memory the driver frees with a context: allocations in a created context go
 * when it is destroyed; releasing the primary context for the last time takes
 * its allocations (device, pinned host, stream-ordered) along. The tracer must
 * see them freed: its exit snapshot equals the ledger, which lists only what
 * was allocated afterwards. */
#include <cuda.h>
#include <stdio.h>
#include <unistd.h>

#define CK(x)                                                                             \
	do {                                                                              \
		CUresult r_ = (x);                                                        \
		if (r_ != CUDA_SUCCESS) {                                                 \
			fprintf(stderr, "contexts: %s returned %d\n", #x, (int)r_);       \
			return 1;                                                         \
		}                                                                         \
	} while (0)

int main(void)
{
	CUcontext primary, created, popped;
	CUdeviceptr a, b, c, s, d, kept;
	void *host;

	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&primary, 0));
	CK(cuCtxSetCurrent(primary));
	CK(cuMemAlloc(&a, 1 << 20));
	CK(cuMemAllocHost(&host, 1 << 16));
	CK(cuMemAllocAsync(&s, 3 << 20, NULL));

	/* A created context is pushed on the thread's stack; its memory dies with it. */
	CK(cuCtxCreate(&created, NULL, 0, 0));
	CK(cuMemAlloc(&b, 2 << 20));
	CK(cuMemAlloc(&c, 4096));
	CK(cuCtxDestroy(created));
	(void)popped;

	CK(cuCtxSetCurrent(primary));
	CK(cuMemAlloc(&d, 5 << 20));
	/* The last reference: the primary context and a, host, s, d go. */
	CK(cuDevicePrimaryCtxRelease(0));

	CK(cuDevicePrimaryCtxRetain(&primary, 0));
	CK(cuCtxSetCurrent(primary));
	CK(cuMemAlloc(&kept, 6 << 20));
	printf("PID %d main\nLIVE 0x%llx %d device 0\n", (int)getpid(), (unsigned long long)kept, 6 << 20);
	return 0;
}
