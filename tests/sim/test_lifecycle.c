/* Lifecycle and configuration of the driver double (docs/simulator.md,
 * "Lifecycle" and "Configuration"): calls before cuInit, allocations without a
 * current context, and invalid GMTSIM_* values reported once by cuInit. */
#define _GNU_SOURCE
#include "simtest.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void run_before_init(void)
{
	CUdeviceptr dptr = SIM_SENTINEL;
	size_t free_bytes, total, pitch;
	CUmemGenericAllocationHandle handle;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUmemoryPool pool;
	CUcontext ctx;
	CUdevice dev;
	void *host;
	char buf[4096];
	int count = -1;

	CHECK_CU(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuCtxCreate(&ctx, NULL, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemAlloc_v2(&dptr, 1024), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_X(dptr, ==, SIM_SENTINEL);
	CHECK_CU(cuMemAllocPitch_v2(&dptr, &pitch, 100, 10, 4), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemAllocManaged(&dptr, 1024, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemAllocAsync(&dptr, 1024, NULL), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemFree_v2(0x1000), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemHostAlloc(&host, 4096, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemAllocHost_v2(&host, 4096), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemHostRegister_v2(buf, sizeof(buf), 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemCreate(&handle, SIM_PAGE, &prop, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuMemAddressReserve(&dptr, SIM_PAGE, 0, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
	CHECK_CU(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_INITIALIZED);

	/* and once initialised, the same calls work */
	REQUIRE_OK(cuInit(0));
	CHECK_CU(cuDeviceGetCount(&count), CUDA_SUCCESS);
	CHECK_INT(count, ==, 1);
	REQUIRE_OK(cuDeviceGet(&dev, 0));
	REQUIRE_OK(cuCtxCreate(&ctx, NULL, 0, dev));
	CHECK_CU(cuMemAlloc_v2(&dptr, 1024), CUDA_SUCCESS);
	CHECK_CU(cuMemFree_v2(dptr), CUDA_SUCCESS);
}

/* Every allocation call, each expected to give `expected`. */
static void check_allocations(CUresult expected)
{
	CUdeviceptr dptr;
	size_t pitch;
	void *host;

	dptr = SIM_SENTINEL;
	CHECK_CU(cuMemAlloc_v2(&dptr, 1024), expected);
	if (expected != CUDA_SUCCESS)
		CHECK_X(dptr, ==, SIM_SENTINEL);
	else
		CHECK_CU(cuMemFree_v2(dptr), CUDA_SUCCESS);
	CHECK_CU(cuMemAlloc_v2(&dptr, 8 * SIM_MiB), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFree_v2(dptr), CUDA_SUCCESS);
	CHECK_CU(cuMemAllocPitch_v2(&dptr, &pitch, 100, 10, 4), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFree_v2(dptr), CUDA_SUCCESS);
	CHECK_CU(cuMemAllocManaged(&dptr, 1024, CU_MEM_ATTACH_GLOBAL), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFree_v2(dptr), CUDA_SUCCESS);
	CHECK_CU(cuMemAllocAsync(&dptr, 1024, NULL), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFreeAsync(dptr, NULL), CUDA_SUCCESS);
	CHECK_CU(cuMemHostAlloc(&host, 4096, 0), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFreeHost(host), CUDA_SUCCESS);
	CHECK_CU(cuMemAllocHost_v2(&host, 4096), expected);
	if (expected == CUDA_SUCCESS)
		CHECK_CU(cuMemFreeHost(host), CUDA_SUCCESS);
}

static void run_no_context(void)
{
	CUcontext ctx = (CUcontext)&ctx, popped;
	CUdevice dev;

	REQUIRE_OK(cuInit(0));
	CHECK_CU(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
	CHECK_PTR(ctx, ==, NULL);
	check_allocations(CUDA_ERROR_INVALID_CONTEXT);

	REQUIRE_OK(cuDeviceGet(&dev, 0));
	REQUIRE_OK(cuCtxCreate(&ctx, NULL, 0, dev));
	check_allocations(CUDA_SUCCESS);

	/* popped: no current context again */
	REQUIRE_OK(cuCtxPopCurrent(&popped));
	CHECK_PTR(popped, ==, ctx);
	check_allocations(CUDA_ERROR_INVALID_CONTEXT);
	REQUIRE_OK(cuCtxPushCurrent(ctx));
	check_allocations(CUDA_SUCCESS);

	/* destroyed: it is no longer current */
	REQUIRE_OK(cuCtxDestroy(ctx));
	check_allocations(CUDA_ERROR_INVALID_CONTEXT);
}

/* The child of run_invalid_config: its exit status says what cuInit returned,
 * and it writes nothing itself on stderr. */
enum { INIT_INVALID = 10, INIT_OK = 11, INIT_OTHER = 12, INIT_NO_DEVICE = 13 };

static void run_init_child(void)
{
	CUresult r = cuInit(0);

	printf("cuInit returned %d (%s)\n", (int)r, simtest_result_name(r));
	fflush(stdout);
	exit(r == CUDA_ERROR_INVALID_VALUE ? INIT_INVALID
	     : r == CUDA_SUCCESS	   ? INIT_OK
	     : r == CUDA_ERROR_NO_DEVICE  ? INIT_NO_DEVICE
					  : INIT_OTHER);
}

struct config_case {
	const char *env[3];   /* the variables set (NULL-terminated) */
	const char *name;     /* the variable the message must name; NULL: valid */
	const char *value;    /* the value the message must show */
	bool no_device;       /* valid, and no device: cuInit says CUDA_ERROR_NO_DEVICE */
};

static const struct config_case config_cases[] = {
	{ { "GMTSIM_MEMORY=12Q" }, "GMTSIM_MEMORY", "12Q", false },
	{ { "GMTSIM_MEMORY=" }, "GMTSIM_MEMORY", "", false },
	{ { "GMTSIM_MEMORY=-1G" }, "GMTSIM_MEMORY", "-1G", false },
	{ { "GMTSIM_MEMORY=8G,8G" }, "GMTSIM_MEMORY", "8G,8G", false },
	{ { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=1G,2G,3G" }, "GMTSIM_MEMORY", "1G,2G,3G", false },
	{ { "GMTSIM_DEVICES=-1" }, "GMTSIM_DEVICES", "-1", false },
	{ { "GMTSIM_DEVICES=17" }, "GMTSIM_DEVICES", "17", false },
	{ { "GMTSIM_DEVICES=two" }, "GMTSIM_DEVICES", "two", false },
	{ { "GMTSIM_OTHER_PROCESSES=lots" }, "GMTSIM_OTHER_PROCESSES", "lots", false },
	{ { "GMTSIM_CONTEXT_BYTES=1X" }, "GMTSIM_CONTEXT_BYTES", "1X", false },
	{ { "GMTSIM_DRIVER_VERSION=13.0" }, "GMTSIM_DRIVER_VERSION", "13.0", false },
	{ { "GMTSIM_OTHER_PID=0" }, "GMTSIM_OTHER_PID", "0", false },
	{ { "GMTSIM_OTHER_PID=4294967296" }, "GMTSIM_OTHER_PID", "4294967296", false },
	{ { "GMTSIM_OTHER_PID=12x" }, "GMTSIM_OTHER_PID", "12x", false },
	/* valid ones, so that the checks below are seen to tell them apart */
	{ { "GMTSIM_MEMORY=12G" }, NULL, NULL, false },
	{ { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=1G,3GiB" }, NULL, NULL, false },
	{ { "GMTSIM_DEVICES=16", "GMTSIM_OTHER_PROCESSES=1M" }, NULL, NULL, false },
	{ { "GMTSIM_OTHER_PID=4294967295" }, NULL, NULL, false },
	/* no device (all hidden): the per-device sizes are not read */
	{ { "GMTSIM_DEVICES=0" }, NULL, NULL, true },
	{ { "GMTSIM_DEVICES=0", "GMTSIM_MEMORY=1G,2G" }, NULL, NULL, true },
};

/* Reads all of `fd` from its start into buf (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	ssize_t n;

	lseek(fd, 0, SEEK_SET);
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	return len;
}

static void check_config_case(const struct config_case *c)
{
	FILE *err = tmpfile();
	char text[4096];
	size_t len, lines = 0;
	int status;
	unsigned before = simtest_failures();

	REQUIRE_INT(err != NULL, ==, 1);
	status = simtest_spawn("init-child", c->env, fileno(err), NULL);
	len = read_all(fileno(err), text, sizeof(text));
	fclose(err);
	for (size_t i = 0; i < len; i++)
		lines += text[i] == '\n';

	CHECK_INT(WIFEXITED(status), ==, 1);
	if (!c->name) {
		CHECK_INT(WEXITSTATUS(status), ==, c->no_device ? INIT_NO_DEVICE : INIT_OK);
		CHECK_U64(len, ==, 0);
	} else {
		CHECK_INT(WEXITSTATUS(status), ==, INIT_INVALID);
		/* exactly one line, naming the variable and its value */
		CHECK_U64(lines, ==, 1);
		CHECK(len > 0 && text[len - 1] == '\n');
		CHECK(strstr(text, c->name) != NULL);
		CHECK(strstr(text, c->value) != NULL);
	}
	if (simtest_failures() != before)
		fprintf(stderr, "  with %s %s: stderr was \"%s\"\n", c->env[0],
			c->env[1] ? c->env[1] : "", text);
}

static void run_invalid_config(void)
{
	for (size_t i = 0; i < N(config_cases); i++)
		check_config_case(&config_cases[i]);
}

static const struct simtest_case cases[] = {
	{ "before-init", NULL, run_before_init, false },
	{ "no-context", NULL, run_no_context, false },
	{ "invalid-config", NULL, run_invalid_config, false },
	{ "init-child", NULL, run_init_child, true },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
