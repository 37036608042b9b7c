/* The driver double's ledger (docs/simulator.md, "The ledger"): a child process
 * allocates every kind of memory on two devices and compares the api and oom
 * ledgers with what it allocated; the parent then compares the exit ledger with
 * what the child said it left behind. */
#define _GNU_SOURCE
#include "simtest.h"

#include "gmtsim.h"

#include <cudaTypedefs.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_ENTRIES 32
#define MAX_CALLS 16

struct entry {
	uint64_t address, size;
	char kind[16];
	int device;
	char api[48];
};

struct call_count {
	char name[48];
	uint64_t n;
};

/* What a ledger must say: the live set and some counters. */
struct expect {
	long pid;
	struct entry live[MAX_ENTRIES];
	size_t nlive;
	uint64_t allocs, frees, oom;
	struct call_count calls[MAX_CALLS];
	size_t ncalls;
};

static void add_live(struct expect *e, uint64_t address, uint64_t size, const char *kind, int device,
		     const char *api)
{
	struct entry *x;

	REQUIRE_U64(e->nlive, <, MAX_ENTRIES);
	x = &e->live[e->nlive++];
	*x = (struct entry){ .address = address, .size = size, .device = device };
	snprintf(x->kind, sizeof(x->kind), "%s", kind);
	snprintf(x->api, sizeof(x->api), "%s", api);
	e->allocs++;
}

static void drop_live(struct expect *e, uint64_t address)
{
	for (size_t i = 0; i < e->nlive; i++) {
		if (e->live[i].address == address) {
			e->live[i] = e->live[--e->nlive];
			e->frees++;
			return;
		}
	}
	simtest_fail(__FILE__, __LINE__, true, "0x%jx is not in the expected live set",
		     (uintmax_t)address);
}

static void set_calls(struct expect *e, const char *name, uint64_t n)
{
	for (size_t i = 0; i < e->ncalls; i++) {
		if (strcmp(e->calls[i].name, name) == 0) {
			e->calls[i].n = n;
			return;
		}
	}
	REQUIRE_U64(e->ncalls, <, MAX_CALLS);
	snprintf(e->calls[e->ncalls].name, sizeof(e->calls[0].name), "%s", name);
	e->calls[e->ncalls++].n = n;
}

static int by_address(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return x->address < y->address ? -1 : x->address > y->address;
}

/* --- reading a ledger ---------------------------------------------------- */

static json_t *load(const char *path)
{
	json_error_t err;
	json_t *root = json_load_file(path, 0, &err);

	if (!root)
		simtest_fail(__FILE__, __LINE__, true, "%s: %s (line %d)", path, err.text, err.line);
	return root;
}

/* An integer member; a missing or non-integer one is a failure (and reads -1). */
static int64_t int_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v)) {
		simtest_fail(__FILE__, __LINE__, false, "member \"%s\" is missing or not an integer", key);
		return -1;
	}
	return json_integer_value(v);
}

static const char *str_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_string(v)) {
		simtest_fail(__FILE__, __LINE__, false, "member \"%s\" is missing or not a string", key);
		return "";
	}
	return json_string_value(v);
}

/* A "0x…" member as a number. */
static uint64_t hex_of(json_t *o, const char *key)
{
	const char *s = str_of(o, key);
	char *end;
	uint64_t v;

	if (strncmp(s, "0x", 2) != 0) {
		simtest_fail(__FILE__, __LINE__, false, "\"%s\" is \"%s\", not 0x-prefixed", key, s);
		return 0;
	}
	errno = 0;
	v = strtoull(s + 2, &end, 16);
	if (errno || end == s + 2 || *end)
		simtest_fail(__FILE__, __LINE__, false, "\"%s\" is \"%s\", not a hex number", key, s);
	return v;
}

/* Checks the parts every ledger has against `e`, then the reason. */
static void check_ledger(json_t *root, const struct expect *e, const char *reason)
{
	struct entry sorted[MAX_ENTRIES];
	json_t *live = json_object_get(root, "live");
	json_t *totals = json_object_get(root, "totals");
	json_t *calls = json_object_get(root, "calls");

	CHECK_STR(str_of(root, "format"), "gmtsim-ledger");
	CHECK_INT(int_of(root, "version"), ==, 1);
	CHECK_INT(int_of(root, "pid"), ==, e->pid);
	CHECK_STR(str_of(root, "reason"), reason);
	CHECK_INT(int_of(root, "driver_version"), ==, 13000);

	memcpy(sorted, e->live, e->nlive * sizeof(sorted[0]));
	qsort(sorted, e->nlive, sizeof(sorted[0]), by_address);
	REQUIRE_INT(json_is_array(live), ==, 1);
	CHECK_U64(json_array_size(live), ==, e->nlive);
	for (size_t i = 0; i < e->nlive && i < json_array_size(live); i++) {
		json_t *x = json_array_get(live, i);
		unsigned before = simtest_failures();

		CHECK_X(hex_of(x, "address"), ==, sorted[i].address);
		CHECK_U64(int_of(x, "size"), ==, sorted[i].size);
		CHECK_STR(str_of(x, "kind"), sorted[i].kind);
		CHECK_INT(int_of(x, "device"), ==, sorted[i].device);
		CHECK_STR(str_of(x, "api"), sorted[i].api);
		if (simtest_failures() != before)
			fprintf(stderr, "  in live[%zu] of the %s ledger\n", i, reason);
	}

	REQUIRE_INT(json_is_object(totals), ==, 1);
	CHECK_U64(int_of(totals, "allocs"), ==, e->allocs);
	CHECK_U64(int_of(totals, "frees"), ==, e->frees);
	CHECK_U64(int_of(totals, "oom"), ==, e->oom);
	REQUIRE_INT(json_is_object(calls), ==, 1);
	for (size_t i = 0; i < e->ncalls; i++) {
		unsigned before = simtest_failures();

		if (e->calls[i].n == 0)
			CHECK_PTR(json_object_get(calls, e->calls[i].name), ==, NULL);
		else
			CHECK_U64(int_of(calls, e->calls[i].name), ==, e->calls[i].n);
		if (simtest_failures() != before)
			fprintf(stderr, "  calls[\"%s\"] of the %s ledger\n", e->calls[i].name, reason);
	}
}

/* The oom ledger's failed_request. */
static void check_failed(json_t *root, const char *api, uint64_t size, int device)
{
	json_t *f = json_object_get(root, "failed_request");

	REQUIRE_INT(json_is_object(f), ==, 1);
	CHECK_STR(str_of(f, "api"), api);
	CHECK_U64(int_of(f, "size"), ==, size);
	CHECK_INT(int_of(f, "device"), ==, device);
	CHECK_INT(int_of(f, "result"), ==, CUDA_ERROR_OUT_OF_MEMORY);
}

/* --- the expectation file the child leaves for the parent ---------------- */

static void write_expect(const char *path, const struct expect *e)
{
	FILE *f = fopen(path, "w");

	REQUIRE_INT(f != NULL, ==, 1);
	fprintf(f, "pid %ld\ntotals %ju %ju %ju\n", e->pid, (uintmax_t)e->allocs,
		(uintmax_t)e->frees, (uintmax_t)e->oom);
	for (size_t i = 0; i < e->nlive; i++)
		fprintf(f, "live %jx %ju %s %d %s\n", (uintmax_t)e->live[i].address,
			(uintmax_t)e->live[i].size, e->live[i].kind, e->live[i].device, e->live[i].api);
	for (size_t i = 0; i < e->ncalls; i++)
		fprintf(f, "calls %s %ju\n", e->calls[i].name, (uintmax_t)e->calls[i].n);
	REQUIRE_INT(fclose(f), ==, 0);
}

static void read_expect(const char *path, struct expect *e)
{
	FILE *f = fopen(path, "r");
	char line[256], kind[16], api[48], name[48];
	uintmax_t a, b, c, allocs = 0, frees = 0, oom = 0;
	int device;

	REQUIRE_INT(f != NULL, ==, 1);
	memset(e, 0, sizeof(*e));
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "pid %ld", &e->pid) == 1)
			continue;
		if (sscanf(line, "totals %ju %ju %ju", &a, &b, &c) == 3) {
			allocs = a;
			frees = b;
			oom = c;
		} else if (sscanf(line, "live %jx %ju %15s %d %47s", &a, &b, kind, &device, api) == 5) {
			add_live(e, a, b, kind, device, api);
		} else if (sscanf(line, "calls %47s %ju", name, &a) == 2) {
			set_calls(e, name, a);
		} else {
			simtest_fail(__FILE__, __LINE__, true, "%s: bad line \"%s\"", path, line);
		}
	}
	fclose(f);
	/* the totals the child counted, not the ones add_live() just did */
	e->allocs = allocs;
	e->frees = frees;
	e->oom = oom;
}

/* --- the child: allocate, compare, leave some behind ---------------------- */

static const char *ledger_dir(void)
{
	const char *dir = getenv("GMTSIM_LEDGER_DIR");

	if (!dir)
		simtest_fail(__FILE__, __LINE__, true, "GMTSIM_LEDGER_DIR is not set");
	return dir;
}

static void path_in(char *buf, size_t cap, const char *dir, const char *name)
{
	REQUIRE_INT(snprintf(buf, cap, "%s/%s", dir, name) < (int)cap, ==, 1);
}

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
	cuuint64_t v = 0;

	REQUIRE_OK(cuMemPoolGetAttribute(pool, attr, &v));
	return v;
}

typedef CUresult (*legacy_alloc_fn)(unsigned int *dptr, unsigned int bytesize);

static void run_ledger_child(void)
{
	static const CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	};
	CUDA_ARRAY_DESCRIPTOR adesc = { .Width = 100, .Height = 10,
					.Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4 };
	const char *dir = ledger_dir();
	static struct expect e;
	char path[4096], name[64];
	CUdeviceptr a, b, pitched, m, as0, as1, c, va, none;
	CUmemGenericAllocationHandle handle;
	CUdriverProcAddressQueryResult status;
	legacy_alloc_fn alloc32;
	unsigned int p32;
	CUmemoryPool pool0, pool1;
	CUcontext ctx[2];
	CUdevice dev;
	CUarray array;
	size_t pitch, free_bytes[2], total;
	void *h1, *h2, *reg;
	json_t *root, *devices, *pools, *vmm;

	e.pid = getpid();
	REQUIRE_OK(cuInit(0));
	for (int d = 0; d < 2; d++) {
		REQUIRE_OK(cuDeviceGet(&dev, d));
		REQUIRE_OK(cuCtxCreate(&ctx[d], NULL, 0, dev));
	}
	/* device 1 */
	REQUIRE_OK(cuMemAlloc_v2(&c, SIM_MiB));
	add_live(&e, c, SIM_MiB, "device", 1, "cuMemAlloc_v2");
	REQUIRE_OK(cuMemAllocAsync(&as1, 2048, NULL));
	add_live(&e, as1, 2048, "async", 1, "cuMemAllocAsync");
	REQUIRE_OK(cuDeviceGetDefaultMemPool(&pool1, 1));

	/* device 0 and the host */
	REQUIRE_OK(cuCtxSetCurrent(ctx[0]));
	REQUIRE_OK(cuMemAlloc_v2(&a, 1000));
	add_live(&e, a, 1000, "device", 0, "cuMemAlloc_v2");
	REQUIRE_OK(cuMemAlloc_v2(&b, 3 * SIM_MiB));
	add_live(&e, b, 3 * SIM_MiB, "device", 0, "cuMemAlloc_v2");
	REQUIRE_OK(cuMemAllocPitch_v2(&pitched, &pitch, 100, 10, 16));
	add_live(&e, pitched, pitch * 10, "device", 0, "cuMemAllocPitch_v2");
	REQUIRE_OK(cuMemAllocManaged(&m, 5000, CU_MEM_ATTACH_GLOBAL));
	add_live(&e, m, 5000, "managed", 0, "cuMemAllocManaged");
	REQUIRE_OK(cuMemHostAlloc(&h1, 8192, 0));
	add_live(&e, (uintptr_t)h1, 8192, "host", -1, "cuMemHostAlloc");
	REQUIRE_OK(cuMemAllocHost_v2(&h2, 100));
	add_live(&e, (uintptr_t)h2, 100, "host", -1, "cuMemAllocHost_v2");
	reg = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE_INT(reg != MAP_FAILED, ==, 1);
	REQUIRE_OK(cuMemHostRegister_v2(reg, 4096, 0));
	add_live(&e, (uintptr_t)reg, 4096, "registered", -1, "cuMemHostRegister_v2");
	REQUIRE_OK(cuMemAllocAsync(&as0, 4096, NULL));
	add_live(&e, as0, 4096, "async", 0, "cuMemAllocAsync");
	REQUIRE_OK(cuDeviceGetDefaultMemPool(&pool0, 0));
	REQUIRE_OK(cuMemCreate(&handle, 2 * SIM_MiB, &prop, 0));
	add_live(&e, handle, 2 * SIM_MiB, "vmm", 0, "cuMemCreate");
	REQUIRE_OK(cuMemAddressReserve(&va, 4 * SIM_MiB, 0, 0, 0));
	REQUIRE_OK(cuMemMap(va + 2 * SIM_MiB, 2 * SIM_MiB, 0, handle, 0));
	REQUIRE_OK(cuArrayCreate_v2(&array, &adesc));
	add_live(&e, (uintptr_t)array, 100 * 10 * 4 * 4, "array", 0, "cuArrayCreate_v2");
	REQUIRE_OK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc32, 2000, 0, &status));
	REQUIRE_OK(alloc32(&p32, 2048));
	add_live(&e, p32, 2048, "device", 0, "cuMemAlloc");
	REQUIRE_OK(cuMemFree_v2(a));
	drop_live(&e, a);

	set_calls(&e, "cuInit", 1);
	set_calls(&e, "cuMemAlloc_v2", 3);
	set_calls(&e, "cuMemAlloc", 1);
	set_calls(&e, "cuMemFree_v2", 1);
	set_calls(&e, "cuMemAllocAsync", 2);
	set_calls(&e, "cuMemAllocAsync_ptsz", 0);
	set_calls(&e, "cuMemAllocPitch_v2", 1);
	set_calls(&e, "cuMemCreate", 1);
	set_calls(&e, "cuGetProcAddress_v2", 1);
	set_calls(&e, "cuGetProcAddress", 0);
	set_calls(&e, "cuMemFreeHost", 0);

	/* the api ledger */
	REQUIRE_OK(cuMemGetInfo_v2(&free_bytes[0], &total));
	REQUIRE_OK(cuCtxSetCurrent(ctx[1]));
	REQUIRE_OK(cuMemGetInfo_v2(&free_bytes[1], &total));
	path_in(path, sizeof(path), dir, "api.json");
	CHECK_INT(gmtsim_ledger_write(path), ==, 0);
	CHECK_INT(gmtsim_ledger_write("/nonexistent-gmtsim-dir/ledger.json"), ==, -ENOENT);
	root = load(path);
	check_ledger(root, &e, "api");
	CHECK_PTR(json_object_get(root, "failed_request"), ==, NULL);

	devices = json_object_get(root, "devices");
	REQUIRE_INT(json_is_array(devices), ==, 1);
	REQUIRE_U64(json_array_size(devices), ==, 2);
	for (int d = 0; d < 2; d++) {
		json_t *x = json_array_get(devices, (size_t)d);
		CUmemoryPool pool = d == 0 ? pool0 : pool1;
		uint64_t capacity = (d == 0 ? 64 : 32) * SIM_MiB;

		CHECK_INT(int_of(x, "index"), ==, d);
		CHECK_U64(int_of(x, "total_bytes"), ==, capacity);
		CHECK_U64(int_of(x, "free_bytes"), ==, free_bytes[d]);
		CHECK_U64(int_of(x, "page_size"), ==, SIM_PAGE);
		CHECK_U64(int_of(x, "pages_total"), ==, capacity / SIM_PAGE);
		CHECK_U64(int_of(x, "pages_free"), ==, free_bytes[d] / SIM_PAGE);
		CHECK_U64(int_of(x, "pages_other_processes"), ==, d == 0 ? 1 : 0);
		CHECK_U64(int_of(x, "pages_context"), ==, 1);
		CHECK_U64(int_of(x, "pool_reserved_bytes"), ==,
			  pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
		CHECK_U64(int_of(x, "pool_used_bytes"), ==, d == 0 ? 4096 : 2048);
	}

	pools = json_object_get(root, "pools");
	REQUIRE_INT(json_is_array(pools), ==, 1);
	for (int d = 0; d < 2; d++) {
		CUmemoryPool pool = d == 0 ? pool0 : pool1;
		size_t found = 0;

		for (size_t i = 0; i < json_array_size(pools); i++) {
			json_t *x = json_array_get(pools, i);

			if (hex_of(x, "handle") != (uintptr_t)pool)
				continue;
			found++;
			CHECK_INT(int_of(x, "device"), ==, d);
			CHECK(json_is_true(json_object_get(x, "default")));
			CHECK_U64(int_of(x, "reserved_bytes"), ==,
				  pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
			CHECK_U64(int_of(x, "used_bytes"), ==, d == 0 ? 4096 : 2048);
			CHECK_U64(int_of(x, "release_threshold"), ==, 0);
		}
		CHECK_U64(found, ==, 1);
	}

	vmm = json_object_get(root, "vmm");
	REQUIRE_INT(json_is_object(vmm), ==, 1);
	{
		json_t *res = json_object_get(vmm, "reservations");
		json_t *maps = json_object_get(vmm, "mappings");

		REQUIRE_INT(json_is_array(res) && json_array_size(res) == 1, ==, 1);
		CHECK_X(hex_of(json_array_get(res, 0), "address"), ==, va);
		CHECK_U64(int_of(json_array_get(res, 0), "size"), ==, 4 * SIM_MiB);
		REQUIRE_INT(json_is_array(maps) && json_array_size(maps) == 1, ==, 1);
		CHECK_X(hex_of(json_array_get(maps, 0), "address"), ==, va + 2 * SIM_MiB);
		CHECK_U64(int_of(json_array_get(maps, 0), "size"), ==, 2 * SIM_MiB);
		CHECK_X(hex_of(json_array_get(maps, 0), "handle"), ==, handle);
		CHECK_U64(int_of(json_array_get(maps, 0), "offset"), ==, 0);
	}
	json_decref(root);

	/* out-of-memory on device 1 (current), then on device 0 */
	none = SIM_SENTINEL;
	CHECK_CU(cuMemAllocAsync(&none, 64 * SIM_MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(none, ==, SIM_SENTINEL);
	e.oom = 1;
	set_calls(&e, "cuMemAllocAsync", 3);
	snprintf(name, sizeof(name), "ledger.%ld.oom.1.json", e.pid);
	path_in(path, sizeof(path), dir, name);
	root = load(path);
	check_ledger(root, &e, "oom");
	check_failed(root, "cuMemAllocAsync", 64 * SIM_MiB, 1);
	json_decref(root);

	REQUIRE_OK(cuCtxSetCurrent(ctx[0]));
	CHECK_CU(cuMemAlloc_v2(&none, 128 * SIM_MiB), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_X(none, ==, SIM_SENTINEL);
	e.oom = 2;
	set_calls(&e, "cuMemAlloc_v2", 4);
	snprintf(name, sizeof(name), "ledger.%ld.oom.2.json", e.pid);
	path_in(path, sizeof(path), dir, name);
	root = load(path);
	check_ledger(root, &e, "oom");
	check_failed(root, "cuMemAlloc_v2", 128 * SIM_MiB, 0);
	json_decref(root);

	/* what the exit ledger must show: two more frees, the rest left live */
	REQUIRE_OK(cuMemFree_v2(b));
	drop_live(&e, b);
	REQUIRE_OK(cuMemFree_v2(m));
	drop_live(&e, m);
	set_calls(&e, "cuMemFree_v2", 3);
	path_in(path, sizeof(path), dir, "expect.txt");
	write_expect(path, &e);
}

static bool file_exists(const char *dir, const char *name)
{
	char path[4096];

	path_in(path, sizeof(path), dir, name);
	return access(path, F_OK) == 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names in `dir`, one string ("a b c"), sorted. */
static void list_dir(const char *dir, char *out, size_t cap)
{
	char *names[16];
	size_t n = 0, len = 0;
	struct dirent *d;
	DIR *dh = opendir(dir);

	out[0] = '\0';
	REQUIRE_INT(dh != NULL, ==, 1);
	while ((d = readdir(dh)) && n < N(names))
		if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
			names[n++] = strdup(d->d_name);
	closedir(dh);
	qsort(names, n, sizeof(names[0]), by_name);
	for (size_t i = 0; i < n; i++) {
		if (len < cap)
			len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? " " : "", names[i]);
		free(names[i]);
	}
}

static void remove_dir(const char *dir)
{
	char path[4096];
	struct dirent *d;
	DIR *dh = opendir(dir);

	while (dh && (d = readdir(dh))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		path_in(path, sizeof(path), dir, d->d_name);
		unlink(path);
	}
	if (dh)
		closedir(dh);
	rmdir(dir);
}

static char *make_temp_dir(char *buf, size_t cap)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(buf, cap, "%s/gmtsim-ledger-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(buf))
		simtest_fail(__FILE__, __LINE__, true, "mkdtemp %s: %s", buf, strerror(errno));
	return buf;
}

static void run_ledger(void)
{
	char dir[256], var[300], name[64], expect_path[4096], exit_path[4096], listing[1024],
		wanted[1024];
	const char *env[2] = { var, NULL };
	struct expect e;
	json_t *root;
	int status;

	make_temp_dir(dir, sizeof(dir));
	snprintf(var, sizeof(var), "GMTSIM_LEDGER_DIR=%s", dir);
	status = simtest_spawn("ledger-child", env, -1, NULL);
	CHECK_INT(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);

	path_in(expect_path, sizeof(expect_path), dir, "expect.txt");
	if (file_exists(dir, "expect.txt")) {
		read_expect(expect_path, &e);
		snprintf(name, sizeof(name), "ledger.%ld.exit.json", e.pid);
		path_in(exit_path, sizeof(exit_path), dir, name);
		root = load(exit_path);
		check_ledger(root, &e, "exit");
		CHECK_PTR(json_object_get(root, "failed_request"), ==, NULL);
		json_decref(root);

		/* and no other file */
		list_dir(dir, listing, sizeof(listing));
		snprintf(wanted, sizeof(wanted),
			 "api.json expect.txt ledger.%ld.exit.json ledger.%ld.oom.1.json "
			 "ledger.%ld.oom.2.json", e.pid, e.pid, e.pid);
		CHECK_STR(listing, wanted);
	} else {
		simtest_fail(__FILE__, __LINE__, false, "the child left no expect.txt in %s", dir);
	}
	if (!simtest_failures())
		remove_dir(dir);
	else
		fprintf(stderr, "  ledgers kept in %s\n", dir);
}

/* Without GMTSIM_LEDGER_DIR: only what the program asks for is written. */
static void run_quiet_child(void)
{
	CUdeviceptr x = SIM_SENTINEL;

	simtest_init_context(0);
	CHECK_CU(cuMemAlloc_v2(&x, 128 * SIM_MiB), CUDA_ERROR_OUT_OF_MEMORY);
	REQUIRE_OK(cuMemAlloc_v2(&x, 1000));
	CHECK_INT(gmtsim_ledger_write("asked.json"), ==, 0);
}

static void run_no_ledger_dir(void)
{
	char dir[256], listing[1024];
	int status;

	make_temp_dir(dir, sizeof(dir));
	status = simtest_spawn("quiet-child", NULL, -1, dir);
	CHECK_INT(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	list_dir(dir, listing, sizeof(listing));
	CHECK_STR(listing, "asked.json");
	remove_dir(dir);
}

/* Device 0 has one page of other processes' and each device a context of one
 * page (3 bytes, rounded up). */
static const char *const env_ledger[] = { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=64M,32M",
					  "GMTSIM_OTHER_PROCESSES=1M,0",
					  "GMTSIM_CONTEXT_BYTES=3", NULL };
static const char *const env_64m[] = { "GMTSIM_MEMORY=64M", NULL };

static const struct simtest_case cases[] = {
	{ "ledger", env_ledger, run_ledger, false },
	{ "ledger-child", env_ledger, run_ledger_child, true },
	{ "no-ledger-dir", env_64m, run_no_ledger_dir, false },
	{ "quiet-child", env_64m, run_quiet_child, true },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
