/* Test program for the episode rule's call sites (docs/guide.md, "The
 * episode rule"; issue 36): out-of-memory failures with nothing allocated
 * between them, from one call of the program or from another. Its
 * allocator is libsite_pool.so (site_pool.h), shaped like numba.cuda's:
 * frees queued, and at a failure the queue flushed and the request asked
 * again from another line. Run with GMTSIM_MEMORY=1G; sizes in MiB.
 *
 * Set-up: 500 held, 100 spare, 150 and 200 more (950 live); the 150 queued.
 * Phase three: 300 fails (#1), the flush frees the 150, 300 fails again (#2)
 *   and the error reaches the program, which handles it: it queues the 200.
 * Phase four: 250 fails (#3), the flush frees the 200, and the retry
 *   succeeds. Nothing succeeded between #2 and #3 and nothing was freed,
 *   but #3 is another call of the program: #1-#2 and #3 are two episodes,
 *   the first described at #2 with phase three's call.
 * Phase five: 400 fails (#4), nothing to flush, fails again (#5): one call
 *   of the program, one episode — when the site rule calls the pool library
 *   code (GPUMEMTRACE_SITE_LIBRARIES); else the pool's two lines are two
 *   call sites of the program's own, nothing freed between: two episodes.
 * Phase six: the program's own release and retry: 500 fails (#6), it frees
 *   the 250 and asks for 500 again from another line (#7): one episode.
 * Phase seven: it frees the spare 100 and asks for 600 (#8): another call
 *   site, another request: a new episode, though memory was freed.
 *
 * Prints each call's line ("PHASE_THREE 57") for the harness's site labels. */
#define _GNU_SOURCE
#include <stdio.h>

#include <cuda.h>

#include "prog.h"
#include "site_pool.h"

#define MIB ((size_t)1024 * 1024)

static __attribute__((noinline)) void phase_three(void)
{
	CUdeviceptr x;
	CUresult r = pool_alloc(&x, 300 * MIB); int line = __LINE__;

	printf("PHASE_THREE %d\n", line);
	PROG_CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
}

static __attribute__((noinline)) CUdeviceptr phase_four(void)
{
	CUdeviceptr d;
	CUresult r = pool_alloc(&d, 250 * MIB); int line = __LINE__;

	printf("PHASE_FOUR %d\n", line);
	PROG_OK(r);
	return d;
}

static __attribute__((noinline)) void phase_five(void)
{
	CUdeviceptr x;
	CUresult r = pool_alloc(&x, 400 * MIB); int line = __LINE__;

	printf("PHASE_FIVE %d\n", line);
	PROG_CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
}

static __attribute__((noinline)) void phase_six(CUdeviceptr d)
{
	CUdeviceptr x;
	CUresult r = cuMemAlloc(&x, 500 * MIB); int line = __LINE__;

	printf("PHASE_SIX %d\n", line);
	PROG_CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
	PROG_OK(cuMemFree(d));
	r = cuMemAlloc(&x, 500 * MIB); line = __LINE__;
	printf("PHASE_SIX_AGAIN %d\n", line);
	PROG_CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
}

static __attribute__((noinline)) void phase_seven(CUdeviceptr spare)
{
	CUdeviceptr x;
	CUresult r;
	int line;

	PROG_OK(cuMemFree(spare));
	r = cuMemAlloc(&x, 600 * MIB); line = __LINE__;
	printf("PHASE_SEVEN %d\n", line);
	PROG_CHECK_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr held, spare, a, c, d;

	PROG_OK(cuInit(0));
	PROG_OK(cuDeviceGet(&dev, 0));
	PROG_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	PROG_OK(cuCtxSetCurrent(ctx));

	PROG_OK(pool_alloc(&held, 500 * MIB));
	PROG_OK(pool_alloc(&spare, 100 * MIB));
	PROG_OK(pool_alloc(&a, 150 * MIB));
	PROG_OK(pool_alloc(&c, 200 * MIB));
	pool_free(a);

	phase_three();
	pool_free(c);
	d = phase_four();
	phase_five();
	phase_six(d);
	phase_seven(spare);

	prog_report_begin("main");
	prog_report_live(held, 500 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
