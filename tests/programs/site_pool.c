/* libsite_pool.so: a deferring allocator (site_pool.h), library code for
 * the site rule when GPUMEMTRACE_SITE_LIBRARIES names it. */
#include "site_pool.h"

#include <stdlib.h>

#define QUEUE_MAX 16

static CUdeviceptr queue[QUEUE_MAX];
static int queued;

CUresult pool_alloc(CUdeviceptr *p, size_t bytes)
{
	CUresult r = cuMemAlloc(p, bytes);

	if (r != CUDA_ERROR_OUT_OF_MEMORY)
		return r;
	/* numba's _attempt_allocation: flush the deallocations, try again. */
	if (pool_flush() < 0)
		return CUDA_ERROR_UNKNOWN;
	return cuMemAlloc(p, bytes);
}

void pool_free(CUdeviceptr p)
{
	if (queued == QUEUE_MAX)
		abort();
	queue[queued++] = p;
}

int pool_flush(void)
{
	int n = queued;

	while (queued > 0) {
		if (cuMemFree(queue[--queued]) != CUDA_SUCCESS)
			return -1;
	}
	return n;
}
