/* Variant selection by cuGetProcAddress_v2 and the 4-argument cuGetProcAddress
 * (docs/simulator.md, "Loading paths"): every answer is compared with what the
 * driver double exports under the versioned name the spec says must win. */
#define _GNU_SOURCE
#include "simtest.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
#define LEGACY CU_GET_PROC_ADDRESS_LEGACY_STREAM
#define STATUS_ANY (-1) /* the spec names no symbolStatus for this failure */

/* What one ABI must answer: the result, and the versioned name of the winner
 * (NULL: *pfn must be NULL). */
struct answer {
	CUresult result;
	const char *expect;
};

struct lookup_case {
	const char *symbol;
	int version;
	cuuint64_t flags;
	struct answer v2;   /* cuGetProcAddress_v2 and the self-lookup */
	int v2_status;      /* CUdriverProcAddressQueryResult, or STATUS_ANY */
	struct answer v1;   /* the 4-argument cuGetProcAddress */
};

/* Found by both ABIs. */
#define FOUND(sym, ver, fl, name) \
	{ sym, ver, fl, { CUDA_SUCCESS, name }, CU_GET_PROC_ADDRESS_SUCCESS, { CUDA_SUCCESS, name } }
/* Not found: the 5-argument ABI says why in symbolStatus, the 4-argument one
 * returns CUDA_ERROR_NOT_FOUND. */
#define MISSING(sym, ver, fl, st) \
	{ sym, ver, fl, { CUDA_SUCCESS, NULL }, st, { CUDA_ERROR_NOT_FOUND, NULL } }
#define BAD_FLAGS(sym, ver, fl) \
	{ sym, ver, fl, { CUDA_ERROR_INVALID_VALUE, NULL }, STATUS_ANY, \
	  { CUDA_ERROR_INVALID_VALUE, NULL } }
/* cudaVersion newer than the driver: refused by the 5-argument ABI only. */
#define NEWER_THAN_DRIVER(sym, ver, fl, v1name) \
	{ sym, ver, fl, { CUDA_ERROR_INVALID_VALUE, NULL }, STATUS_ANY, { CUDA_SUCCESS, v1name } }

/* With the default driver version (13000). */
static const struct lookup_case current_driver[] = {
	/* the highest version at or below the request wins */
	FOUND("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
	FOUND("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),
	FOUND("cuMemAlloc", 2000, 0, "cuMemAlloc"),
	FOUND("cuMemAlloc", 3010, 0, "cuMemAlloc"),
	FOUND("cuMemFree", 2000, 0, "cuMemFree"),
	FOUND("cuMemFree", 3020, 0, "cuMemFree_v2"),
	FOUND("cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"),
	FOUND("cuMemHostRegister", 6050, 0, "cuMemHostRegister_v2"),
	FOUND("cuMemHostRegister", 4000, 0, "cuMemHostRegister"),
	FOUND("cuMemHostRegister", 6000, 0, "cuMemHostRegister"),
	FOUND("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
	FOUND("cuGetProcAddress", 11080, 0, "cuGetProcAddress"),
	FOUND("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
	FOUND("cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"),
	FOUND("cuCtxCreate", 3020, 0, "cuCtxCreate_v2"),
	FOUND("cuCtxCreate", 11040, 0, "cuCtxCreate_v3"),
	FOUND("cuCtxCreate", 12000, 0, "cuCtxCreate_v3"),
	FOUND("cuCtxCreate", 12050, 0, "cuCtxCreate_v4"),
	FOUND("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"),
	/* the per-thread-stream flag picks _ptsz where one exists, else the
	 * ordinary entry; 0 and the legacy-stream flag pick the ordinary one */
	FOUND("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
	FOUND("cuMemAllocAsync", 11020, LEGACY, "cuMemAllocAsync"),
	FOUND("cuMemAllocAsync", 11020, PTDS, "cuMemAllocAsync_ptsz"),
	FOUND("cuMemAllocAsync", 13000, PTDS, "cuMemAllocAsync_ptsz"),
	FOUND("cuMemAllocFromPoolAsync", 11020, PTDS, "cuMemAllocFromPoolAsync_ptsz"),
	FOUND("cuMemFreeAsync", 12000, PTDS, "cuMemFreeAsync_ptsz"),
	FOUND("cuMemFreeAsync", 12000, 0, "cuMemFreeAsync"),
	FOUND("cuMemAlloc", 3020, PTDS, "cuMemAlloc_v2"),
	/* failures */
	MISSING("cuNoSuchEntryPoint", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
	MISSING("cuMemAlloc_v2", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
	MISSING("cuMemAllocAsync", 11000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
	MISSING("cuMemAllocAsync", 11000, PTDS, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
	MISSING("cuMemAlloc", 1000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
	MISSING("cuGetProcAddress", 11020, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
	BAD_FLAGS("cuMemAlloc", 3020, 4),
	BAD_FLAGS("cuMemAllocAsync", 11020, PTDS | LEGACY),
	BAD_FLAGS("cuMemAllocAsync", 11020, PTDS | 4),
	BAD_FLAGS("cuMemAlloc", 3020, (cuuint64_t)1 << 40),
	NEWER_THAN_DRIVER("cuMemAlloc", 13010, 0, "cuMemAlloc_v2"),
	NEWER_THAN_DRIVER("cuGetProcAddress", 14000, 0, "cuGetProcAddress_v2"),
};

/* With GMTSIM_DRIVER_VERSION=11080: entries newer than the driver do not exist,
 * whatever version the caller asks for. */
static const struct lookup_case old_driver[] = {
	FOUND("cuGetProcAddress", 11080, 0, "cuGetProcAddress"),
	FOUND("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
	FOUND("cuCtxCreate", 11080, 0, "cuCtxCreate_v3"),
	FOUND("cuMemAlloc", 11080, 0, "cuMemAlloc_v2"),
	FOUND("cuMemAllocAsync", 11080, PTDS, "cuMemAllocAsync_ptsz"),
	MISSING("cuMemAllocAsync", 11000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
	MISSING("cuNoSuchEntryPoint", 11080, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
	NEWER_THAN_DRIVER("cuGetProcAddress", 12000, 0, "cuGetProcAddress"),
	NEWER_THAN_DRIVER("cuGetProcAddress", 13000, 0, "cuGetProcAddress"),
	NEWER_THAN_DRIVER("cuCtxCreate", 13000, 0, "cuCtxCreate_v3"),
	NEWER_THAN_DRIVER("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),
};

static void *driver_handle(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);

	if (!h)
		simtest_fail(__FILE__, __LINE__, true, "libcuda.so.1 is not loaded: %s", dlerror());
	return h;
}

/* The driver's export under `name`; every expected winner must be exported. */
static void *exported(const char *name)
{
	void *p = dlsym(driver_handle(), name);

	if (!p)
		simtest_fail(__FILE__, __LINE__, false, "libcuda.so.1 does not export %s", name);
	return p;
}

static void report(const char *via, const struct lookup_case *c)
{
	fprintf(stderr, "  in: %s(\"%s\", %d, flags %llu)\n", via, c->symbol, c->version,
		(unsigned long long)c->flags);
}

/* One case through the 5-argument entry point `gpa` (cuGetProcAddress_v2 or
 * the pointer the self-lookup returned). */
static void check_v2(PFN_cuGetProcAddress_v12000 gpa, const char *via, const struct lookup_case *c)
{
	void *pfn = (void *)&pfn; /* a non-NULL value the driver must overwrite */
	CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)77;
	unsigned before = simtest_failures();

	CHECK_CU(gpa(c->symbol, &pfn, c->version, c->flags, &status), c->v2.result);
	CHECK_PTR(pfn, ==, c->v2.expect ? exported(c->v2.expect) : NULL);
	if (c->v2_status != STATUS_ANY)
		CHECK_INT(status, ==, c->v2_status);
	if (simtest_failures() != before)
		report(via, c);
}

/* One case through the 4-argument cuGetProcAddress (CUDA 11.3 ABI, no status). */
static void check_v1(PFN_cuGetProcAddress_v11030 gpa, const struct lookup_case *c)
{
	void *pfn = (void *)&pfn;
	unsigned before = simtest_failures();

	CHECK_CU(gpa(c->symbol, &pfn, c->version, c->flags), c->v1.result);
	CHECK_PTR(pfn, ==, c->v1.expect ? exported(c->v1.expect) : NULL);
	if (simtest_failures() != before)
		report("cuGetProcAddress", c);
}

/* Every case through both ABIs and, where the driver has one (12.0 and newer),
 * through the self-lookup: what cudart swaps in for every later lookup. */
static void check_table(const struct lookup_case *table, size_t n, bool self_lookup)
{
	PFN_cuGetProcAddress_v11030 v1 = (PFN_cuGetProcAddress_v11030)exported("cuGetProcAddress");
	PFN_cuGetProcAddress_v12000 self = NULL;
	CUdriverProcAddressQueryResult status;

	if (!v1)
		return;
	if (self_lookup) {
		REQUIRE_OK(cuGetProcAddress_v2("cuGetProcAddress", (void **)&self, 12000, 0, &status));
		REQUIRE_INT(self != NULL, ==, 1);
	}
	for (size_t i = 0; i < n; i++) {
		check_v2(cuGetProcAddress_v2, "cuGetProcAddress_v2", &table[i]);
		if (self)
			check_v2(self, "self-lookup", &table[i]);
		check_v1(v1, &table[i]);
	}
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void run_current_driver(void)
{
	int version = 0;

	/* The loading path (docs/simulator.md) looks up before cuInit... */
	check_table(current_driver, N(current_driver), true);
	/* ...and every later lookup comes after it. */
	REQUIRE_OK(cuInit(0));
	CHECK_CU(cuDriverGetVersion(&version), CUDA_SUCCESS);
	CHECK_INT(version, ==, 13000);
	check_table(current_driver, N(current_driver), true);
}

static void run_old_driver(void)
{
	int version = 0;

	check_table(old_driver, N(old_driver), false);
	REQUIRE_OK(cuInit(0));
	CHECK_CU(cuDriverGetVersion(&version), CUDA_SUCCESS);
	CHECK_INT(version, ==, 11080);
	check_table(old_driver, N(old_driver), false);
}

static const char *const old_driver_env[] = { "GMTSIM_DRIVER_VERSION=11080", NULL };

static const struct simtest_case cases[] = {
	{ "current-driver", NULL, run_current_driver, false },
	{ "old-driver", old_driver_env, run_old_driver, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
