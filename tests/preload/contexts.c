/* Memory the driver frees with a context: allocations in a created context go
 * when it is destroyed; releasing the primary context for the last time takes
 * its allocations (device, pinned host, stream-ordered) along, and the
 * device's stream-ordered memory allocated in another context that lives on
 * (the pool is the device's, not the context's). The tracer must
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
	CUcontext primary, created, other, popped;
	CUdeviceptr a, b, c, s, o, d, kept;
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

	/* Stream-ordered memory from a context that outlives the primary one. */
	CK(cuCtxCreate(&other, NULL, 0, 0));
	CK(cuMemAllocAsync(&o, 1 << 20, NULL));

	CK(cuCtxSetCurrent(primary));
	CK(cuMemAlloc(&d, 5 << 20));
	/* The last reference: the primary context and a, host, s, d go, and o
	 * with the device's pool. */
	CK(cuDevicePrimaryCtxRelease(0));

	CK(cuDevicePrimaryCtxRetain(&primary, 0));
	CK(cuCtxSetCurrent(primary));
	CK(cuMemAlloc(&kept, 6 << 20));
	printf("PID %d main\nLIVE 0x%llx %d device 0\n", (int)getpid(), (unsigned long long)kept, 6 << 20);
	return 0;
}
