/* A deferring allocator in a library of its own (libsite_pool.so), shaped like
 * numba.cuda's memory manager: frees are queued, and an allocation that
 * fails flushes the queue and asks once more, from another line. */
#ifndef GMT_TEST_SITE_POOL_H
#define GMT_TEST_SITE_POOL_H

#include <stddef.h>

#include <cuda.h>

/* cuMemAlloc; at CUDA_ERROR_OUT_OF_MEMORY the queue flushed and cuMemAlloc
 * again. Returns what the last call returned. */
CUresult pool_alloc(CUdeviceptr *p, size_t bytes);

/* Queues p for the next flush (at most 16 queued). */
void pool_free(CUdeviceptr p);

/* Frees what is queued; returns how many, or -1 when a free failed. */
int pool_flush(void);

#endif
