/* Virtual memory management in the driver double (docs/simulator.md, "Memory
 * model"): physical handles in whole pages with a reference count, address
 * reservations without pages, and memory that stays used while it is mapped. */
#define _GNU_SOURCE
#include "simtest.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const CUmemAllocationProp device0_prop = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};

/* The spec names no error for an unmapped range: any failure will do. */
static void set_access(CUdeviceptr va, size_t size, bool mapped)
{
	CUmemAccessDesc desc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};

	if (mapped)
		CHECK_CU(cuMemSetAccess(va, size, &desc, 1), CUDA_SUCCESS);
	else
		CHECK(cuMemSetAccess(va, size, &desc, 1) != CUDA_SUCCESS);
}

static void run_granularity(void)
{
	static const size_t bad_sizes[] = { 1, SIM_MiB, 3 * SIM_MiB, 2 * SIM_PAGE + 4096 };
	CUmemGenericAllocationHandle h = 0x5eed;
	size_t g = 0;

	simtest_init_context(0);
	CHECK_CU(cuMemGetAllocationGranularity(&g, &device0_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
		 CUDA_SUCCESS);
	CHECK_U64(g, ==, SIM_PAGE);
	g = 0;
	CHECK_CU(cuMemGetAllocationGranularity(&g, &device0_prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
		 CUDA_SUCCESS);
	CHECK_U64(g, ==, SIM_PAGE);
	for (size_t i = 0; i < N(bad_sizes); i++) {
		CHECK_CU(cuMemCreate(&h, bad_sizes[i], &device0_prop, 0), CUDA_ERROR_INVALID_VALUE);
		CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);
	}
	/* more pages than the device has */
	CHECK_CU(cuMemCreate(&h, 66 * SIM_MiB, &device0_prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_U64(h, ==, 0x5eed);
}

static void run_map_retain_release(void)
{
	CUmemGenericAllocationHandle h, again;
	CUdeviceptr va;
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemCreate(&h, 4 * SIM_MiB, &device0_prop, 0));
	CHECK_U64(simtest_free_bytes(), ==, free0 - 4 * SIM_MiB);

	/* a reservation is addresses only */
	REQUIRE_OK(cuMemAddressReserve(&va, 8 * SIM_MiB, 0, 0, 0));
	CHECK_X(va, !=, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0 - 4 * SIM_MiB);
	set_access(va, 4 * SIM_MiB, false); /* not mapped yet */

	REQUIRE_OK(cuMemMap(va, 4 * SIM_MiB, 0, h, 0));
	set_access(va, 4 * SIM_MiB, true);
	set_access(va + 4 * SIM_MiB, 4 * SIM_MiB, false);
	set_access(va, 8 * SIM_MiB, false);
	CHECK_U64(simtest_free_bytes(), ==, free0 - 4 * SIM_MiB);

	/* any address inside the mapping adds a reference to its handle */
	REQUIRE_OK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + SIM_MiB + 17)));
	CHECK_X(again, ==, h);
	CHECK_CU(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0 - 4 * SIM_MiB);
	CHECK_CU(cuMemRelease(again), CUDA_SUCCESS);
	/* no reference left, but still mapped: still used */
	CHECK_U64(simtest_free_bytes(), ==, free0 - 4 * SIM_MiB);
	CHECK_CU(cuMemUnmap(va, 4 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
	CHECK_CU(cuMemAddressFree(va, 8 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* One handle mapped twice counts once, and lives until both mappings go. */
static void run_two_mappings(void)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va1, va2;
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemCreate(&h, 2 * SIM_MiB, &device0_prop, 0));
	REQUIRE_OK(cuMemAddressReserve(&va1, 2 * SIM_MiB, 0, 0, 0));
	REQUIRE_OK(cuMemAddressReserve(&va2, 4 * SIM_MiB, 0, 0, 0));
	CHECK(va1 + 2 * SIM_MiB <= va2 || va2 + 4 * SIM_MiB <= va1);
	REQUIRE_OK(cuMemMap(va1, 2 * SIM_MiB, 0, h, 0));
	REQUIRE_OK(cuMemMap(va2 + 2 * SIM_MiB, 2 * SIM_MiB, 0, h, 0));
	CHECK_U64(simtest_free_bytes(), ==, free0 - 2 * SIM_MiB);
	REQUIRE_OK(cuMemRelease(h));
	CHECK_CU(cuMemUnmap(va1, 2 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0 - 2 * SIM_MiB);
	CHECK_CU(cuMemUnmap(va2 + 2 * SIM_MiB, 2 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
	CHECK_CU(cuMemAddressFree(va1, 2 * SIM_MiB), CUDA_SUCCESS);
	CHECK_CU(cuMemAddressFree(va2, 4 * SIM_MiB), CUDA_SUCCESS);

	/* released before it was ever mapped: freed at once */
	REQUIRE_OK(cuMemCreate(&h, 6 * SIM_MiB, &device0_prop, 0));
	CHECK_U64(simtest_free_bytes(), ==, free0 - 6 * SIM_MiB);
	CHECK_CU(cuMemRelease(h), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* XLA probes ordinary pointers with cuMemRetainAllocationHandle: it must fail
 * and change nothing. */
static void run_retain_foreign(void)
{
	CUmemGenericAllocationHandle h = 0x5eed;
	CUdeviceptr d, va;
	uint64_t free0, free1;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemAlloc_v2(&d, 4 * SIM_MiB));
	free1 = simtest_free_bytes();
	CHECK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)d) != CUDA_SUCCESS);
	CHECK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(d + 4096)) != CUDA_SUCCESS);
	REQUIRE_OK(cuMemAddressReserve(&va, 2 * SIM_MiB, 0, 0, 0));
	CHECK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)va) != CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free1);
	CHECK_CU(cuMemFree_v2(d), CUDA_SUCCESS);
	CHECK_CU(cuMemAddressFree(va, 2 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

static const char *const env_64m[] = { "GMTSIM_MEMORY=64M", NULL };

static const struct simtest_case cases[] = {
	{ "granularity", env_64m, run_granularity, false },
	{ "map-retain-release", env_64m, run_map_retain_release, false },
	{ "two-mappings", env_64m, run_two_mappings, false },
	{ "retain-foreign", env_64m, run_retain_foreign, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
