/* Overhead on real work, the cudaMalloc-heavy half (tests/gpu/overhead.py
 * runs it with and without the tracer; docs/gpu-suite.md): PAIRS
 * allocation/free pairs of each kind, timed, as "OVERHEAD <what> <pairs>
 * <ns per pair>" lines. The sizes cycle through 4 KiB, 1 MiB and 8 MiB, as
 * a framework's segments and workspaces do. Static cudart.
 * Usage: overhead_alloc [PAIRS] (default 20000). */
#include <time.h>

#include "gpu_runtime.h"

static const size_t sizes[] = {4096, 1 * GT_MIB, 8 * GT_MIB};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void report(const char *what, long pairs, double t0)
{
	printf("OVERHEAD %s %ld %.1f\n", what, pairs, (now_ns() - t0) / (double)pairs);
}

int main(int argc, char **argv)
{
	long pairs = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
	cudaMemPool_t pool;
	unsigned long long threshold = ~0ULL;
	double t0;
	void *p;

	if (pairs <= 0)
		GT_FAIL("PAIRS must be a positive number, not %s", argv[1]);
	gt_begin("overhead_alloc");
	gt_rt_init(0);

	t0 = now_ns();
	for (long i = 0; i < pairs; i++) {
		GT_OK(cudaMalloc(&p, sizes[i % N_SIZES]));
		GT_OK(cudaFree(p));
	}
	report("cudaMalloc+cudaFree", pairs, t0);

	/* Stream-ordered, the pool keeping its memory (as PyTorch sets it): the
	 * driver's cost per pair is small, so the tracer's shows. */
	GT_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
	GT_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	t0 = now_ns();
	for (long i = 0; i < pairs; i++) {
		GT_OK(cudaMallocAsync(&p, sizes[i % N_SIZES], 0));
		GT_OK(cudaFreeAsync(p, 0));
	}
	GT_OK(cudaStreamSynchronize(0));
	report("cudaMallocAsync+cudaFreeAsync", pairs, t0);

	t0 = now_ns();
	for (long i = 0; i < pairs; i++) {
		GT_OK(cudaMallocHost(&p, sizes[i % N_SIZES] / 4));
		GT_OK(cudaFreeHost(p));
	}
	report("cudaMallocHost+cudaFreeHost", pairs, t0);
	GT_OK(cudaMemPoolTrimTo(pool, 0));
	return 0;
}
