/* Pinned and registered host memory in the driver double (docs/simulator.md,
 * "Memory model"): real, writable, page-aligned memory that takes no device
 * pages, and registrations that refuse overlaps and unknown ranges. */
#define _GNU_SOURCE
#include "simtest.h"

#include <cudaTypedefs.h>
#include <sys/mman.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define ALREADY CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
#define NOT_REGISTERED CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED

static bool overlap(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
	return a < b + blen && b < a + alen;
}

/* Writes a pattern over the whole block and reads it back. */
static void check_writable(void *p, size_t size, unsigned char seed)
{
	unsigned char *c = p;
	size_t bad = 0;

	for (size_t i = 0; i < size; i++)
		c[i] = (unsigned char)(seed + i * 7);
	for (size_t i = 0; i < size; i++)
		bad += c[i] != (unsigned char)(seed + i * 7);
	CHECK_U64(bad, ==, 0);
}

static void run_pinned(void)
{
	static const struct {
		size_t size;
		unsigned int flags; /* cuMemHostAlloc flags; ~0u: cuMemAllocHost_v2 */
	} blocks[] = {
		{ 10000, 0 },
		{ 1, ~0u },
		{ 4096, CU_MEMHOSTALLOC_PORTABLE },
		{ 3 << 20, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED },
		{ 16 << 20, ~0u }, /* more than the device has: host memory */
	};
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	void *p[N(blocks)];
	uint64_t free0;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	for (size_t i = 0; i < N(blocks); i++) {
		p[i] = NULL;
		if (blocks[i].flags == ~0u)
			REQUIRE_OK(cuMemAllocHost_v2(&p[i], blocks[i].size));
		else
			REQUIRE_OK(cuMemHostAlloc(&p[i], blocks[i].size, blocks[i].flags));
		CHECK_PTR(p[i], !=, NULL);
		CHECK_X((uintptr_t)p[i] % page, ==, 0);
		check_writable(p[i], blocks[i].size, (unsigned char)i);
		for (size_t j = 0; j < i; j++)
			CHECK(!overlap((uintptr_t)p[i], blocks[i].size, (uintptr_t)p[j],
				       blocks[j].size));
	}
	CHECK_U64(simtest_free_bytes(), ==, free0);
	for (size_t i = 0; i < N(blocks); i++)
		CHECK_CU(cuMemFreeHost(p[i]), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
}

typedef CUresult (*legacy_register_fn)(void *p, size_t bytesize, unsigned int flags);

static void run_registered(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	CUdriverProcAddressQueryResult status;
	legacy_register_fn register_v1 = NULL;
	uint64_t free0;
	char *buf;

	simtest_init_context(0);
	free0 = simtest_free_bytes();
	buf = mmap(NULL, 6 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE_INT(buf != MAP_FAILED, ==, 1);

	CHECK_CU(cuMemHostRegister_v2(buf, 2 * pg, 0), CUDA_SUCCESS);
	/* any overlap with a registered range */
	CHECK_CU(cuMemHostRegister_v2(buf, 2 * pg, 0), ALREADY);
	CHECK_CU(cuMemHostRegister_v2(buf + pg, 2 * pg, 0), ALREADY);
	CHECK_CU(cuMemHostRegister_v2(buf + pg + 100, 10, 0), ALREADY);
	/* adjacent is no overlap */
	CHECK_CU(cuMemHostRegister_v2(buf + 2 * pg, pg, 0), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);

	/* unknown ranges: never registered, or not the base of a registration */
	CHECK_CU(cuMemHostUnregister(buf + 3 * pg), NOT_REGISTERED);
	CHECK_CU(cuMemHostUnregister(buf + pg), NOT_REGISTERED);
	CHECK_CU(cuMemHostUnregister(buf), CUDA_SUCCESS);
	CHECK_CU(cuMemHostUnregister(buf), NOT_REGISTERED);
	/* the range is free to register again */
	CHECK_CU(cuMemHostRegister_v2(buf + pg, pg, 0), CUDA_SUCCESS);

	/* the legacy ABI (CUDA 4.0) shares the same records */
	REQUIRE_OK(cuGetProcAddress_v2("cuMemHostRegister", (void **)&register_v1, 4000, 0, &status));
	CHECK_CU(register_v1(buf + 2 * pg, pg, 0), ALREADY);
	CHECK_CU(register_v1(buf + 4 * pg, 2 * pg, 0), CUDA_SUCCESS);
	CHECK_CU(cuMemHostRegister_v2(buf + 5 * pg, pg, 0), ALREADY);

	CHECK_CU(cuMemHostUnregister(buf + pg), CUDA_SUCCESS);
	CHECK_CU(cuMemHostUnregister(buf + 2 * pg), CUDA_SUCCESS);
	CHECK_CU(cuMemHostUnregister(buf + 4 * pg), CUDA_SUCCESS);
	CHECK_U64(simtest_free_bytes(), ==, free0);
	munmap(buf, 6 * pg);
}

static const char *const env_8m[] = { "GMTSIM_MEMORY=8M", NULL };

static const struct simtest_case cases[] = {
	{ "pinned", env_8m, run_pinned, false },
	{ "registered", env_8m, run_registered, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
