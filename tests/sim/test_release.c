/* The driver double built as each release (docs/simulator.md, "Older
 * drivers"): the library found through LD_LIBRARY_PATH exports exactly the entry
 * points its release has, reports that release, and lets GMTSIM_DRIVER_VERSION
 * present an older one but never a newer one. The program is linked against
 * libcuda.so.1 by soname and calls only entry points every release has. */
#define _GNU_SOURCE
#include "simtest.h"
#include "sim.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

struct entry {
	const char *symbol, *base;
	int version;
};

static const struct entry entries[] = {
#define SIM_X_ENTRY(sym, base, ver, pt) { #sym, #base, ver },
	SIM_ENTRY_POINTS(SIM_X_ENTRY)
#undef SIM_X_ENTRY
};

/* The release the test expects of the library it loaded (GMT_TEST_RELEASE),
 * found in GMT_TEST_DRIVER_DIR. */
static int expected_release(void)
{
	const char *s = getenv("GMT_TEST_RELEASE");

	if (s == NULL)
		simtest_fail(__FILE__, __LINE__, true, "GMT_TEST_RELEASE is not set");
	return atoi(s);
}

static void run_exports(void)
{
	int release = expected_release(), version = 0;
	void *lib = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
	PFN_cuGetProcAddress_v12000 lookup;
	CUdriverProcAddressQueryResult status;
	void *fn;

	REQUIRE_INT(lib != NULL, ==, 1);
	/* by name, as ctypes and private loaders look them up */
	for (size_t i = 0; i < N(entries); i++) {
		bool has = dlsym(lib, entries[i].symbol) != NULL;

		if (has != (entries[i].version <= release))
			simtest_fail(__FILE__, __LINE__, false, "%s (CUDA %d) %s by the %d release", entries[i].symbol,
				     entries[i].version, has ? "exported" : "not exported", release);
	}
	CHECK(dlsym(lib, "gmtsim_ledger_write") != NULL);
	CHECK(dlsym(lib, "gmtsim__release") == NULL);

	REQUIRE_OK(cuInit(0));
	REQUIRE_OK(cuDriverGetVersion(&version));
	CHECK_INT(version, ==, release);
	/* and through cuGetProcAddress, entry by entry */
	*(void **)&lookup = dlsym(lib, "cuGetProcAddress_v2");
	REQUIRE_INT(lookup != NULL, ==, 1);
	for (size_t i = 0; i < N(entries); i++) {
		fn = NULL;
		CHECK_CU(lookup(entries[i].base, &fn, entries[i].version, 0, &status),
			 entries[i].version <= release ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
	}
}

static void run_older_asked(void)
{
	int version = 0;

	REQUIRE_OK(cuInit(0));
	REQUIRE_OK(cuDriverGetVersion(&version));
	CHECK_INT(version, ==, 11080);
}

static void run_newer_refused(void)
{
	int version = 0;

	CHECK_CU(cuInit(0), CUDA_ERROR_INVALID_VALUE);
	REQUIRE_OK(cuDriverGetVersion(&version));
	CHECK_INT(version, ==, expected_release());
}

static const char *const env_older[] = { "GMTSIM_DRIVER_VERSION=11080", NULL };
static const char *const env_newer[] = { "GMTSIM_DRIVER_VERSION=13000", NULL };

static const struct simtest_case cases[] = {
	{ "exports", NULL, run_exports, false },
	{ "older-asked", env_older, run_older_asked, false },
	{ "newer-refused", env_newer, run_newer_refused, false },
};

int main(int argc, char **argv)
{
	const char *dir = getenv("GMT_TEST_DRIVER_DIR"), *path = getenv("LD_LIBRARY_PATH");

	/* NOTE: meson puts the directories of the libraries a test links first on
	 * LD_LIBRARY_PATH; the release under test must be the only one there. */
	if (dir != NULL && (path == NULL || strcmp(path, dir) != 0)) {
		setenv("LD_LIBRARY_PATH", dir, 1);
		execv("/proc/self/exe", argv);
		simtest_fail(__FILE__, __LINE__, true, "cannot re-execute with LD_LIBRARY_PATH=%s", dir);
	}
	return simtest_main(argc, argv, cases, N(cases));
}
