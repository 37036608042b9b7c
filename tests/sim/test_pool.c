/* Stream-ordered pools in the driver double (docs/simulator.md, "Memory model"):
 * freed blocks stay reserved in the pool until a synchronisation releases what
 * lies above the release threshold, or cuMemPoolTrimTo; a full device makes a
 * pool give back its own unused segments before it fails. */
#define _GNU_SOURCE
#include "simtest.h"

#include <stdio.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
	cuuint64_t v = 0;

	REQUIRE_OK(cuMemPoolGetAttribute(pool, attr, &v));
	return v;
}

static uint64_t reserved(CUmemoryPool pool)
{
	return pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

static uint64_t used(CUmemoryPool pool)
{
	return pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}

static void set_threshold(CUmemoryPool pool, cuuint64_t threshold)
{
	REQUIRE_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	CHECK_U64(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), ==, threshold);
}

/* The device's free bytes must be what the pool does not reserve, in whole pages. */
static void check_accounting(CUmemoryPool pool, uint64_t free0)
{
	uint64_t r = reserved(pool);

	CHECK_X(r % SIM_PAGE, ==, 0);
	CHECK_U64(r, >=, used(pool));
	CHECK_U64(simtest_free_bytes(), ==, free0 - r);
}

static CUmemoryPool default_pool(void)
{
	CUmemoryPool pool = NULL, current = NULL;
	CUdevice dev;

	REQUIRE_OK(cuCtxGetDevice(&dev));
	REQUIRE_OK(cuDeviceGetDefaultMemPool(&pool, dev));
	CHECK_PTR(pool, !=, NULL);
	CHECK_CU(cuDeviceGetMemPool(&current, dev), CUDA_SUCCESS);
	CHECK_PTR(current, ==, pool);
	return pool;
}

/* Release threshold UINT64_MAX (what PyTorch sets): nothing goes back on sync. */
static void run_keep_reserved(void)
{
	CUmemoryPool pool;
	CUstream stream;
	CUdeviceptr p, q;
	uint64_t free0, r;

	simtest_init_context(0);
	pool = default_pool();
	REQUIRE_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	free0 = simtest_free_bytes();
	CHECK_U64(reserved(pool), ==, 0);
	CHECK_U64(pool_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), ==, 0); /* CUDA's default */
	set_threshold(pool, UINT64_MAX);

	REQUIRE_OK(cuMemAllocAsync(&p, 4 * SIM_MiB, stream));
	r = reserved(pool);
	CHECK_U64(r, >=, 4 * SIM_MiB);
	CHECK_U64(used(pool), ==, 4 * SIM_MiB);
	check_accounting(pool, free0);

	REQUIRE_OK(cuMemFreeAsync(p, stream));
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(used(pool), ==, 0);
	CHECK_U64(reserved(pool), ==, r);
	CHECK_U64(simtest_free_bytes(), ==, free0 - r);
	REQUIRE_OK(cuCtxSynchronize());
	CHECK_U64(reserved(pool), ==, r);
	CHECK_U64(simtest_free_bytes(), ==, free0 - r);

	/* the reserved memory serves the next request without growing */
	REQUIRE_OK(cuMemAllocAsync(&q, 4 * SIM_MiB, stream));
	CHECK_U64(reserved(pool), ==, r);
	CHECK_U64(used(pool), ==, 4 * SIM_MiB);
	REQUIRE_OK(cuMemFreeAsync(q, stream));

	/* threshold 0: the next synchronisation releases it all */
	set_threshold(pool, 0);
	CHECK_U64(reserved(pool), ==, r);
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(reserved(pool), ==, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0);
	REQUIRE_OK(cuStreamDestroy(stream));
}

/* The default threshold 0: a free stays reserved until the synchronisation. */
static void run_release_on_sync(void)
{
	CUmemoryPool pool;
	CUstream stream;
	CUdeviceptr p;
	uint64_t free0, r;

	simtest_init_context(0);
	pool = default_pool();
	REQUIRE_OK(cuStreamCreate(&stream, 0));
	free0 = simtest_free_bytes();

	/* cuStreamSynchronize */
	REQUIRE_OK(cuMemAllocAsync(&p, 6 * SIM_MiB, stream));
	r = reserved(pool);
	CHECK_U64(r, >=, 6 * SIM_MiB);
	REQUIRE_OK(cuMemFreeAsync(p, stream));
	CHECK_U64(used(pool), ==, 0);
	CHECK_U64(reserved(pool), ==, r);
	check_accounting(pool, free0);
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(reserved(pool), ==, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0);

	/* cuCtxSynchronize, and the legacy default stream */
	REQUIRE_OK(cuMemAllocAsync(&p, 1000, NULL));
	CHECK_U64(used(pool), >=, 1000);
	check_accounting(pool, free0);
	REQUIRE_OK(cuMemFreeAsync(p, NULL));
	CHECK_U64(reserved(pool), >, 0);
	REQUIRE_OK(cuCtxSynchronize());
	CHECK_U64(reserved(pool), ==, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0);

	/* a live block keeps its segment through a synchronisation */
	REQUIRE_OK(cuMemAllocAsync(&p, 2 * SIM_MiB, stream));
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(reserved(pool), >=, 2 * SIM_MiB);
	CHECK_U64(used(pool), ==, 2 * SIM_MiB);
	check_accounting(pool, free0);
	REQUIRE_OK(cuMemFreeAsync(p, stream));
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(reserved(pool), ==, 0);
}

static void run_trim(void)
{
	CUmemoryPool pool;
	CUdeviceptr a, b;
	uint64_t free0, r;

	simtest_init_context(0);
	pool = default_pool();
	set_threshold(pool, UINT64_MAX);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemAllocAsync(&a, 4 * SIM_MiB, NULL));
	REQUIRE_OK(cuMemAllocAsync(&b, 4 * SIM_MiB, NULL));
	REQUIRE_OK(cuMemFreeAsync(b, NULL));
	REQUIRE_OK(cuCtxSynchronize());
	r = reserved(pool);
	CHECK_U64(r, >=, 8 * SIM_MiB);

	/* keeping more than is reserved releases nothing */
	REQUIRE_OK(cuMemPoolTrimTo(pool, 1024 * SIM_MiB));
	CHECK_U64(reserved(pool), ==, r);
	/* a live block's memory cannot be trimmed */
	REQUIRE_OK(cuMemPoolTrimTo(pool, 0));
	CHECK_U64(reserved(pool), >=, 4 * SIM_MiB);
	CHECK_U64(used(pool), ==, 4 * SIM_MiB);
	check_accounting(pool, free0);

	REQUIRE_OK(cuMemFreeAsync(a, NULL));
	REQUIRE_OK(cuCtxSynchronize());
	CHECK_U64(reserved(pool), >=, 4 * SIM_MiB);
	REQUIRE_OK(cuMemPoolTrimTo(pool, 0));
	CHECK_U64(reserved(pool), ==, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* GMTSIM_MEMORY=64M: 40 MiB kept reserved, then 48 MiB asked for. */
static void run_grow_when_full(void)
{
	CUmemoryPool pool;
	CUdeviceptr p, d;
	uint64_t free0;

	simtest_init_context(0);
	pool = default_pool();
	set_threshold(pool, UINT64_MAX);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemAllocAsync(&p, 40 * SIM_MiB, NULL));
	REQUIRE_OK(cuMemFreeAsync(p, NULL));
	REQUIRE_OK(cuCtxSynchronize());
	CHECK_U64(reserved(pool), >=, 40 * SIM_MiB);
	CHECK_U64(simtest_free_bytes(), <=, 24 * SIM_MiB);

	/* The pool cannot grow by 48 MiB: it drops its unused segments and
	 * tries once more. */
	REQUIRE_OK(cuMemAllocAsync(&p, 48 * SIM_MiB, NULL));
	CHECK_U64(used(pool), ==, 48 * SIM_MiB);
	CHECK_U64(reserved(pool), >=, 48 * SIM_MiB);
	check_accounting(pool, free0);

	/* more than that cannot be had: out-of-memory, output untouched, not sticky */
	d = SIM_SENTINEL;
	CHECK_CU(cuMemAllocAsync(&d, 32 * SIM_MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(d, ==, SIM_SENTINEL);
	REQUIRE_OK(cuMemFreeAsync(p, NULL));
	CHECK_CU(cuMemAllocAsync(&d, 32 * SIM_MiB, NULL), CUDA_SUCCESS);
	CHECK_U64(used(pool), ==, 32 * SIM_MiB);
	check_accounting(pool, free0);
	REQUIRE_OK(cuMemFreeAsync(d, NULL));

	/* the device memory a pool keeps is not free to cuMemAlloc */
	REQUIRE_OK(cuMemAllocAsync(&p, 64 * SIM_MiB, NULL));
	REQUIRE_OK(cuMemFreeAsync(p, NULL));
	REQUIRE_OK(cuCtxSynchronize());
	CHECK_U64(simtest_free_bytes(), ==, 0);
	d = SIM_SENTINEL;
	CHECK_CU(cuMemAlloc_v2(&d, 2 * SIM_MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(d, ==, SIM_SENTINEL);
	REQUIRE_OK(cuMemPoolTrimTo(pool, 0));
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* A pool of one's own, as XLA and PyTorch create them. */
static void run_created_pool(void)
{
	CUmemPoolProps props = {
		.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
		.handleTypes = CU_MEM_HANDLE_TYPE_NONE,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUmemoryPool pool, dflt;
	CUstream stream;
	CUdeviceptr p, q;
	uint64_t free0, r;

	simtest_init_context(0);
	dflt = default_pool();
	REQUIRE_OK(cuStreamCreate(&stream, 0));
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemPoolCreate(&pool, &props));
	CHECK_PTR(pool, !=, dflt);
	CHECK_U64(reserved(pool), ==, 0);
	set_threshold(pool, UINT64_MAX);

	REQUIRE_OK(cuMemAllocFromPoolAsync(&p, 6 * SIM_MiB, pool, stream));
	REQUIRE_OK(cuMemAllocFromPoolAsync(&q, 1000, pool, stream));
	CHECK_X(q % 256, ==, 0);
	r = reserved(pool);
	CHECK_U64(r, >=, 6 * SIM_MiB + 1000);
	CHECK_U64(reserved(dflt), ==, 0);
	check_accounting(pool, free0);

	REQUIRE_OK(cuMemFreeAsync(p, stream));
	REQUIRE_OK(cuMemFreeAsync(q, stream));
	REQUIRE_OK(cuStreamSynchronize(stream));
	CHECK_U64(reserved(pool), ==, r);
	CHECK_U64(used(pool), ==, 0);
	/* destroying the pool gives its memory back */
	REQUIRE_OK(cuMemPoolDestroy(pool));
	CHECK_U64(simtest_free_bytes(), ==, free0);
	REQUIRE_OK(cuStreamDestroy(stream));
}

static const char *const env_64m[] = { "GMTSIM_MEMORY=64M", NULL };

static const struct simtest_case cases[] = {
	{ "keep-reserved", env_64m, run_keep_reserved, false },
	{ "release-on-sync", env_64m, run_release_on_sync, false },
	{ "trim", env_64m, run_trim, false },
	{ "grow-when-full", env_64m, run_grow_when_full, false },
	{ "created-pool", env_64m, run_created_pool, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
