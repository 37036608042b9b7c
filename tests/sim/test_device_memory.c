/* The device-memory model of the driver double (docs/simulator.md, "Memory
 * model"): pages and sub-allocation, fragmentation, out-of-memory, alignment,
 * address reuse, several devices, other processes, contexts, managed memory and
 * the legacy 32-bit entry points. */
#define _GNU_SOURCE
#include "simtest.h"

#include <cudaTypedefs.h>
#include <stdio.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

static bool overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

/* cuMemGetInfo_v2's total for the current context. */
static uint64_t total_bytes(void)
{
	size_t free_bytes = 0, total = 0;

	REQUIRE_OK(cuMemGetInfo_v2(&free_bytes, &total));
	return total;
}

/* An allocation that must fail with out-of-memory and leave *dptr alone. */
static void check_oom(size_t size)
{
	CUdeviceptr dptr = SIM_SENTINEL;

	CHECK_CU(cuMemAlloc_v2(&dptr, size), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(dptr, ==, SIM_SENTINEL);
}

/* 1 MiB blocks until the device is full, every other one freed: every page is
 * half empty, so nothing of a page or more fits although half the bytes do. */
static void run_fragmentation(void)
{
	CUdeviceptr blocks[128], p = SIM_SENTINEL, lowest = ~(CUdeviceptr)0, next = ~(CUdeviceptr)0;
	size_t n = 0;
	CUresult r;

	simtest_init_context(0);
	CHECK_U64(total_bytes(), ==, 64 * SIM_MiB);
	CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);
	for (;;) {
		p = SIM_SENTINEL;
		r = cuMemAlloc_v2(&p, SIM_MiB);
		if (r != CUDA_SUCCESS || n == N(blocks))
			break;
		blocks[n++] = p;
	}
	CHECK_CU(r, CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(p, ==, SIM_SENTINEL);
	REQUIRE_U64(n, ==, 64); /* two 1 MiB blocks per 2 MiB page, nothing lost */
	CHECK_U64(simtest_free_bytes(), ==, 0);

	for (size_t i = 1; i < n; i += 2) {
		REQUIRE_OK(cuMemFree_v2(blocks[i]));
		if (blocks[i] < lowest) {
			next = lowest;
			lowest = blocks[i];
		} else if (blocks[i] < next) {
			next = blocks[i];
		}
	}
	/* 32 MiB are unused, but no page is free */
	CHECK_U64(simtest_free_bytes(), ==, 0);
	check_oom(4 * SIM_MiB);
	check_oom(2 * SIM_MiB);
	check_oom(SIM_MiB + 256);

	/* a block of the freed size fits, at the lowest freed address first */
	p = SIM_SENTINEL;
	CHECK_CU(cuMemAlloc_v2(&p, SIM_MiB), CUDA_SUCCESS);
	CHECK_X(p, ==, lowest);
	blocks[1] = p;
	CHECK_CU(cuMemAlloc_v2(&p, SIM_MiB), CUDA_SUCCESS);
	CHECK_X(p, ==, next);
	blocks[3] = p;
	CHECK_U64(simtest_free_bytes(), ==, 0);

	/* Each page had one hole, so the two new blocks sit in two pages: with the
	 * 32 blocks kept from the start gone, exactly those two pages are held. */
	for (size_t i = 0; i < n; i += 2)
		REQUIRE_OK(cuMemFree_v2(blocks[i]));
	CHECK_U64(simtest_free_bytes(), ==, 60 * SIM_MiB);
	REQUIRE_OK(cuMemFree_v2(blocks[1]));
	REQUIRE_OK(cuMemFree_v2(blocks[3]));
	CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);

	/* the whole device in one piece, after all that */
	CHECK_CU(cuMemAlloc_v2(&p, 64 * SIM_MiB), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(p), CUDA_SUCCESS);
}

static void run_exhaustion(void)
{
	CUdeviceptr a, c, p, pages[32];

	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc_v2(&a, 40 * SIM_MiB));
	CHECK_U64(simtest_free_bytes(), ==, 24 * SIM_MiB);
	check_oom(32 * SIM_MiB);
	check_oom(128 * SIM_MiB);
	check_oom(24 * SIM_MiB + 1);
	/* not sticky: what is left can still be had, to the last page */
	CHECK_CU(cuMemAlloc_v2(&c, 24 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, 0);
	check_oom(1);
	CHECK_CU(cuMemFree_v2(c), CUDA_SUCCESS);
	CHECK_CU(cuMemAlloc_v2(&p, 1), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(p), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(a), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);

	/* physical pages need not be contiguous: 16 scattered free pages hold 32 MiB */
	for (size_t i = 0; i < N(pages); i++)
		REQUIRE_OK(cuMemAlloc_v2(&pages[i], SIM_PAGE));
	check_oom(1);
	for (size_t i = 0; i < N(pages); i += 2)
		REQUIRE_OK(cuMemFree_v2(pages[i]));
	CHECK_U64(simtest_free_bytes(), ==, 32 * SIM_MiB);
	CHECK_CU(cuMemAlloc_v2(&p, 32 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, 0);
	CHECK_CU(cuMemFree_v2(p), CUDA_SUCCESS);
	for (size_t i = 1; i < N(pages); i += 2)
		REQUIRE_OK(cuMemFree_v2(pages[i]));
	CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);
}

static void run_alignment(void)
{
	/* all of these fit together in one page (first fit, 256-byte steps) */
	static const size_t small[] = { 1, 3, 255, 256, 257, 1000, 4095, 65537, 1048575 };
	static const size_t large[] = { 2 << 20, (2 << 20) + 1, 5 << 20, 6 << 20 };
	static CUdeviceptr tiny[SIM_PAGE / 256];
	CUdeviceptr sp[N(small)], lp[N(large)], p;
	uint64_t free0, expect;

	simtest_init_context(0);
	free0 = simtest_free_bytes();

	/* 256 bytes is all a 1-byte block takes: 8192 of them fill one page */
	for (size_t i = 0; i < N(tiny); i++)
		REQUIRE_OK(cuMemAlloc_v2(&tiny[i], 1));
	CHECK_U64(simtest_free_bytes(), ==, free0 - SIM_PAGE);
	REQUIRE_OK(cuMemAlloc_v2(&p, 1));
	CHECK_U64(simtest_free_bytes(), ==, free0 - 2 * SIM_PAGE);
	REQUIRE_OK(cuMemFree_v2(p));
	for (size_t i = 0; i < N(tiny); i++)
		REQUIRE_OK(cuMemFree_v2(tiny[i]));
	CHECK_U64(simtest_free_bytes(), ==, free0);

	for (size_t i = 0; i < N(small); i++) {
		REQUIRE_OK(cuMemAlloc_v2(&sp[i], small[i]));
		CHECK_X(sp[i] % 256, ==, 0);
		for (size_t j = 0; j < i; j++)
			CHECK(!overlap(sp[i], small[i], sp[j], small[j]));
		CHECK_U64(simtest_free_bytes(), ==, free0 - SIM_PAGE);
	}
	/* one more that does not fit beside them takes a second page */
	REQUIRE_OK(cuMemAlloc_v2(&p, 2 * SIM_MiB - 1));
	CHECK_X(p % 256, ==, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0 - 2 * SIM_PAGE);

	expect = free0 - 2 * SIM_PAGE;
	for (size_t i = 0; i < N(large); i++) {
		REQUIRE_OK(cuMemAlloc_v2(&lp[i], large[i]));
		CHECK_X(lp[i] % SIM_PAGE, ==, 0);
		expect -= round_up(large[i], SIM_PAGE);
		CHECK_U64(simtest_free_bytes(), ==, expect);
		for (size_t j = 0; j < N(small); j++)
			CHECK(!overlap(lp[i], large[i], sp[j], small[j]));
		for (size_t j = 0; j < i; j++)
			CHECK(!overlap(lp[i], large[i], lp[j], large[j]));
	}
	for (size_t i = 0; i < N(large); i++)
		REQUIRE_OK(cuMemFree_v2(lp[i]));
	for (size_t i = 0; i < N(small); i++)
		REQUIRE_OK(cuMemFree_v2(sp[i]));
	REQUIRE_OK(cuMemFree_v2(p));
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

static void run_reuse(void)
{
	CUdeviceptr a, b, c, d, e, s1, s2, s3;
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemAlloc_v2(&a, 4 * SIM_MiB));
	REQUIRE_OK(cuMemAlloc_v2(&b, 4 * SIM_MiB));
	REQUIRE_OK(cuMemAlloc_v2(&c, 4 * SIM_MiB));
	REQUIRE_OK(cuMemFree_v2(b));
	REQUIRE_OK(cuMemFree_v2(a));
	REQUIRE_OK(cuMemAlloc_v2(&d, 4 * SIM_MiB));
	CHECK_X(d, ==, a < b ? a : b);
	REQUIRE_OK(cuMemAlloc_v2(&e, 4 * SIM_MiB));
	CHECK_X(e, ==, a < b ? b : a);

	REQUIRE_OK(cuMemAlloc_v2(&s1, 1000));
	REQUIRE_OK(cuMemAlloc_v2(&s2, 1000));
	REQUIRE_OK(cuMemFree_v2(s1));
	REQUIRE_OK(cuMemAlloc_v2(&s3, 1000));
	CHECK_X(s3, ==, s1);

	/* a freed address is no longer valid */
	CHECK(cuMemFree_v2(s1 + 256) != CUDA_SUCCESS);
	REQUIRE_OK(cuMemFree_v2(s3));
	CHECK(cuMemFree_v2(s3) != CUDA_SUCCESS);
	REQUIRE_OK(cuMemFree_v2(s2));
	REQUIRE_OK(cuMemFree_v2(c));
	REQUIRE_OK(cuMemFree_v2(d));
	REQUIRE_OK(cuMemFree_v2(e));
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

struct range {
	CUdeviceptr address;
	size_t size;
};

static void run_two_devices(void)
{
	static const size_t sizes[] = { 256, 1000, 3 << 20, 8 << 20, 1 << 20 };
	struct range r[2][N(sizes) + 1];
	CUcontext ctx[2];
	CUdevice dev;
	size_t bytes;
	int count = 0;

	REQUIRE_OK(cuInit(0));
	CHECK_CU(cuDeviceGetCount(&count), CUDA_SUCCESS);
	CHECK_INT(count, ==, 2);
	CHECK_CU(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
	for (int d = 0; d < 2; d++) {
		REQUIRE_OK(cuDeviceGet(&dev, d));
		CHECK_CU(cuDeviceTotalMem_v2(&bytes, dev), CUDA_SUCCESS);
		CHECK_U64(bytes, ==, (d == 0 ? 64 : 32) * SIM_MiB);
		REQUIRE_OK(cuCtxCreate(&ctx[d], NULL, 0, dev));
		CHECK_U64(total_bytes(), ==, (d == 0 ? 64 : 32) * SIM_MiB);
		for (size_t i = 0; i < N(sizes); i++) {
			r[d][i].size = sizes[i];
			REQUIRE_OK(cuMemAlloc_v2(&r[d][i].address, sizes[i]));
		}
		r[d][N(sizes)].size = 4096;
		REQUIRE_OK(cuMemAllocManaged(&r[d][N(sizes)].address, 4096, CU_MEM_ATTACH_GLOBAL));
	}
	/* no address of one device lies in an allocation of the other */
	for (size_t i = 0; i <= N(sizes); i++)
		for (size_t j = 0; j <= N(sizes); j++)
			CHECK(!overlap(r[0][i].address, r[0][i].size, r[1][j].address, r[1][j].size));

	/* 7 pages each (256, 1000 and 1 MiB share one; 3 MiB takes 2, 8 MiB 4);
	 * device 1 running out does not touch device 0 */
	CHECK_U64(simtest_free_bytes(), ==, 18 * SIM_MiB);
	check_oom(20 * SIM_MiB);
	REQUIRE_OK(cuCtxSetCurrent(ctx[0]));
	CHECK_U64(simtest_free_bytes(), ==, 50 * SIM_MiB);
	CHECK_CU(cuMemAlloc_v2(&r[0][0].address, 24 * SIM_MiB), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, 26 * SIM_MiB);
}

/* GMTSIM_MEMORY=64M, GMTSIM_OTHER_PROCESSES=3M, GMTSIM_CONTEXT_BYTES=5M: both
 * round up to whole pages (4 MiB and 6 MiB). */
static void run_other_processes(void)
{
	CUcontext ctx, second;
	CUdevice dev;
	CUdeviceptr p;
	size_t bytes;

	ctx = simtest_init_context(0);
	REQUIRE_OK(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDeviceTotalMem_v2(&bytes, dev), CUDA_SUCCESS);
	CHECK_U64(bytes, ==, 64 * SIM_MiB);
	CHECK_U64(total_bytes(), ==, 64 * SIM_MiB);
	CHECK_U64(simtest_free_bytes(), ==, 54 * SIM_MiB);
	CHECK_CU(cuMemAlloc_v2(&p, 54 * SIM_MiB), CUDA_SUCCESS);
	check_oom(1);
	CHECK_CU(cuMemFree_v2(p), CUDA_SUCCESS);

	/* the context's share is held while one exists on the device, once */
	REQUIRE_OK(cuCtxCreate(&second, NULL, 0, dev));
	CHECK_U64(simtest_free_bytes(), ==, 54 * SIM_MiB);
	REQUIRE_OK(cuCtxDestroy(second));
	REQUIRE_OK(cuCtxSetCurrent(ctx));
	CHECK_U64(simtest_free_bytes(), ==, 54 * SIM_MiB);
	/* a context made after the last one went costs it again, not twice */
	REQUIRE_OK(cuCtxDestroy(ctx));
	REQUIRE_OK(cuCtxCreate(&ctx, NULL, 0, dev));
	CHECK_U64(simtest_free_bytes(), ==, 54 * SIM_MiB);
	CHECK_CU(cuMemAlloc_v2(&p, 54 * SIM_MiB), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(p), CUDA_SUCCESS);
}

/* Two devices, per-device lists: GMTSIM_MEMORY=64M,128M,
 * GMTSIM_OTHER_PROCESSES=2M,10M, GMTSIM_CONTEXT_BYTES=1 (one page). The primary
 * context costs the same as a created one. */
static void run_other_processes_list(void)
{
	static const uint64_t total[2] = { 64 * SIM_MiB, 128 * SIM_MiB };
	static const uint64_t other[2] = { 2 * SIM_MiB, 10 * SIM_MiB };
	CUcontext ctx;
	CUdevice dev;

	REQUIRE_OK(cuInit(0));
	for (int d = 0; d < 2; d++) {
		REQUIRE_OK(cuDeviceGet(&dev, d));
		REQUIRE_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
		REQUIRE_OK(cuCtxSetCurrent(ctx));
		CHECK_U64(total_bytes(), ==, total[d]);
		CHECK_U64(simtest_free_bytes(), ==, total[d] - other[d] - SIM_PAGE);
	}
}

static void run_managed(void)
{
	CUdeviceptr m, d;
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuMemAllocManaged(&m, 48 * SIM_MiB, CU_MEM_ATTACH_GLOBAL));
	CHECK_X(m, !=, 0);
	CHECK_U64(simtest_free_bytes(), ==, free0);
	/* the whole device is still there for device memory */
	CHECK_CU(cuMemAlloc_v2(&d, 64 * SIM_MiB), CUDA_SUCCESS);
	CHECK(!overlap(m, 48 * SIM_MiB, d, 64 * SIM_MiB));
	CHECK_CU(cuMemFree_v2(d), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(m), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* Arrays take whole pages for width × height × depth × channels × element size. */
static void run_arrays(void)
{
	CUDA_ARRAY_DESCRIPTOR d2 = { .Width = 100, .Height = 10, .Format = CU_AD_FORMAT_FLOAT,
				     .NumChannels = 4 }; /* 16000 bytes: one page */
	CUDA_ARRAY3D_DESCRIPTOR d3 = { .Width = 1000, .Height = 1000, .Depth = 3,
				       .Format = CU_AD_FORMAT_HALF,
				       .NumChannels = 4 }; /* 24e6 bytes: 12 pages */
	CUDA_ARRAY3D_DESCRIPTOR big = { .Width = 4096, .Height = 4096, .Depth = 1,
					.Format = CU_AD_FORMAT_UNSIGNED_INT32,
					.NumChannels = 1 }; /* 64 MiB: more than is left */
	CUarray a2, a3, none = (CUarray)&none;
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	REQUIRE_OK(cuArrayCreate_v2(&a2, &d2));
	CHECK_U64(simtest_free_bytes(), ==, free0 - SIM_PAGE);
	REQUIRE_OK(cuArray3DCreate_v2(&a3, &d3));
	CHECK_U64(simtest_free_bytes(), ==, free0 - 13 * SIM_PAGE);
	CHECK_PTR(a2, !=, a3);
	CHECK_CU(cuArray3DCreate_v2(&none, &big), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_PTR(none, ==, (CUarray)&none);
	CHECK_CU(cuArrayDestroy(a3), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0 - SIM_PAGE);
	CHECK_CU(cuArrayDestroy(a2), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

/* The legacy ABIs, as a CUDA 2.0 program gets them. */
typedef CUresult (*legacy_alloc_fn)(unsigned int *dptr, unsigned int bytesize);
typedef CUresult (*legacy_free_fn)(unsigned int dptr);
typedef CUresult (*legacy_info_fn)(unsigned int *free_bytes, unsigned int *total);

static void *lookup(const char *name, int version)
{
	CUdriverProcAddressQueryResult status;
	void *pfn = NULL;

	REQUIRE_OK(cuGetProcAddress_v2(name, &pfn, version, 0, &status));
	return pfn;
}

static void run_legacy(void)
{
	unsigned int small32 = 0, large32 = 0, free_bytes = 0, total = 0;
	legacy_alloc_fn alloc32;
	legacy_free_fn free32;
	legacy_info_fn info32;
	CUdeviceptr p;

	simtest_init_context(0);
	alloc32 = (legacy_alloc_fn)lookup("cuMemAlloc", 2000);
	free32 = (legacy_free_fn)lookup("cuMemFree", 2000);
	info32 = (legacy_info_fn)lookup("cuMemGetInfo", 2000);
	CHECK_CU(info32(&free_bytes, &total), CUDA_SUCCESS);
	CHECK_U64(free_bytes, ==, 64 * SIM_MiB);
	CHECK_U64(total, ==, 64 * SIM_MiB);

	CHECK_CU(alloc32(&small32, 1000), CUDA_SUCCESS);
	CHECK_X(small32, !=, 0);
	CHECK_X(small32 % 256, ==, 0);
	CHECK_CU(alloc32(&large32, 4 << 20), CUDA_SUCCESS);
	CHECK_X(large32 % SIM_PAGE, ==, 0);
	CHECK(!overlap(small32, 1000, large32, 4 << 20));
	CHECK_CU(info32(&free_bytes, &total), CUDA_SUCCESS);
	CHECK_U64(free_bytes, ==, 58 * SIM_MiB);
	CHECK_U64(simtest_free_bytes(), ==, 58 * SIM_MiB);

	/* a separate window: the 64-bit allocations do not land on these */
	REQUIRE_OK(cuMemAlloc_v2(&p, 1000));
	CHECK(!overlap(p, 1000, small32, 1000) && !overlap(p, 1000, large32, 4 << 20));
	REQUIRE_OK(cuMemFree_v2(p));

	CHECK_CU(free32(small32), CUDA_SUCCESS);
	CHECK_CU(free32(large32), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, 64 * SIM_MiB);
	/* out-of-memory as for the 64-bit call: the output left alone */
	large32 = 0x5eed;
	CHECK_CU(alloc32(&large32, 66 << 20), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(large32, ==, 0x5eed);
}

static const char *const env_64m[] = { "GMTSIM_MEMORY=64M", NULL };
static const char *const env_two[] = { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=64M,32M", NULL };
static const char *const env_other[] = { "GMTSIM_MEMORY=64M", "GMTSIM_OTHER_PROCESSES=3M",
					 "GMTSIM_CONTEXT_BYTES=5M", NULL };
static const char *const env_other_list[] = { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=64M,128M",
					      "GMTSIM_OTHER_PROCESSES=2M,10M",
					      "GMTSIM_CONTEXT_BYTES=1", NULL };

static const struct simtest_case cases[] = {
	{ "fragmentation", env_64m, run_fragmentation, false },
	{ "exhaustion", env_64m, run_exhaustion, false },
	{ "alignment", env_64m, run_alignment, false },
	{ "reuse", env_64m, run_reuse, false },
	{ "two-devices", env_two, run_two_devices, false },
	{ "other-processes", env_other, run_other_processes, false },
	{ "other-processes-list", env_other_list, run_other_processes_list, false },
	{ "managed", env_64m, run_managed, false },
	{ "arrays", env_64m, run_arrays, false },
	{ "legacy", env_64m, run_legacy, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
