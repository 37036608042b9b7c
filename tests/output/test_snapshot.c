/* The snapshot writer (src/report/snapshot.c): a live table and interned stacks built
 * by hand are written, read back with jansson and compared key by key with
 * what went in (docs/snapshot-format.md); then the file safety rules: mode 0600, never
 * replace a file, never follow a symlink, no file left behind on failure; and
 * a timing print for a large live set (argv[1] entries, not asserted). With
 * GMT_TEST_KEEP_DIR set, a copy of every snapshot written goes there, for
 * tests/schema to check against docs/snapshot.schema.json. */
#define _GNU_SOURCE
#include "report/snapshot.h"

#include "record/stacks.h"
#include "state/table.h"

#include "check.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

/* NOTE: the test executable is linked with -rdynamic so that dladdr finds
 * this function by name. */
__attribute__((noinline)) void gmt_test_known_function(void);
__attribute__((noinline)) void gmt_test_known_function(void)
{
	__asm__ volatile("");
}

static const char *const api_names[] = { "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemCreate",
					 "cuMemAddressReserve", "cuMemMap", "cuArrayCreate_v2",
					 "weird \"name\"" };

struct fixture {
	struct gmt__table *table;
	struct gmt__entry entries[16];
	int nentries;
	uint32_t stack_a, stack_b;
	uintptr_t frames_a[3], frames_b[2];
};

static void add(struct fixture *f, enum gmt__space space, enum gmt__kind kind, uint64_t addr,
		uint64_t size, int device, unsigned api, uint32_t stack)
{
	struct gmt__entry e;

	memset(&e, 0, sizeof(e));
	e.addr = addr;
	e.size = size;
	e.space = (uint8_t)space;
	e.kind = (uint8_t)kind;
	e.device = (int16_t)device;
	e.api = (uint16_t)api;
	e.stack = stack;
	e.tid = 1000 + (uint32_t)f->nentries;
	e.time_ns = 1700000000000000000ull + (uint64_t)f->nentries;
	if (space == GMT_SPACE_HANDLE) {
		e.refs = 2;
		e.aux = 3; /* mappings */
	} else if (space == GMT_SPACE_MAPPING) {
		e.link = 0x42; /* the handle */
		e.aux = 4096 * (uint64_t)f->nentries; /* offset */
	} else {
		e.link = 10 + (uint64_t)f->nentries; /* seq */
	}
	f->entries[f->nentries++] = e;
	if (gmt__table_insert(f->table, &e, NULL) == NULL) {
		fprintf(stderr, "gmt__table_insert failed\n");
		exit(1);
	}
}

static void fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	f->table = gmt__table_new();
	if (f->table == NULL) {
		fprintf(stderr, "gmt__table_new failed\n");
		exit(1);
	}
	/* return addresses: one past a call into the function, in this
	 * executable; one in libc; one nobody knows */
	f->frames_a[0] = (uintptr_t)gmt_test_known_function + 1;
	/* (getpid: a libc function no sanitizer runtime intercepts) */
	f->frames_a[1] = (uintptr_t)dlsym(RTLD_DEFAULT, "getpid") + 1;
	f->frames_a[2] = 0x10;
	f->frames_b[0] = (uintptr_t)gmt_test_known_function + 1;
	f->frames_b[1] = (uintptr_t)gmt_test_known_function + 2;
	f->stack_a = gmt__stack_intern(f->frames_a, 3);
	f->stack_b = gmt__stack_intern(f->frames_b, 2);
	CHECK(f->stack_a != 0);
	CHECK(f->stack_b != 0);
	CHECK(f->stack_a != f->stack_b);

	/* out of order on purpose; one address in two spaces */
	add(f, GMT_SPACE_MEMORY, GMT_KIND_DEVICE, 0x7f0000300000ull, 1 << 20, 0, 0, f->stack_a);
	add(f, GMT_SPACE_MEMORY, GMT_KIND_ASYNC, 0x7f0000100000ull, 4096, 1, 1, f->stack_b);
	add(f, GMT_SPACE_MEMORY, GMT_KIND_HOST, 0x5500000000ull, 100, -1, 0, 0);
	add(f, GMT_SPACE_ARRAY, GMT_KIND_ARRAY, 0x7f0000100000ull, 65536, 0, 5, f->stack_a);
	add(f, GMT_SPACE_MEMORY, GMT_KIND_MANAGED, 0xabcdef000ull, 8192, 0, 6, f->stack_a);
	add(f, GMT_SPACE_HANDLE, GMT_KIND_VMM, 0x42, 2 << 20, 0, 2, f->stack_b);
	add(f, GMT_SPACE_RESERVATION, GMT_KIND_VMM, 0x7e0000000000ull, 1ull << 30, 0, 3, 0);
	add(f, GMT_SPACE_MAPPING, GMT_KIND_VMM, 0x7e0000200000ull, 2 << 20, 0, 4, f->stack_b);
	add(f, GMT_SPACE_MAPPING, GMT_KIND_VMM, 0x7e0000000000ull, 2 << 20, 0, 4, 0);
}

static const struct gmt__device_state device0 = {
	.index = 0, .have_mem = true, .total_bytes = 16ull << 30, .free_bytes = 1 << 20,
	.others_why = "NVML is not available",
};

static const struct gmt__snapshot_device devices[] = {
	{ .index = 0, .state = &device0, .live_bytes = 5 << 20 },
	{ .index = 1, .state = NULL, .live_bytes = 4096 },
};

static const struct gmt__snapshot_stat stats[] = {
	{ "events", 123 },
	{ "ring_full_waits", 4 },
};

static const struct gmt__snapshot_request failed = {
	.api = "cuMemAlloc_v2", .size = 1ull << 34, .device = 0, .result = 2, .failure = 3, .tid = 4242,
	.thread = "loader-3",
};

static char *const test_argv[] = { "prog", "quote \" and\nnewline", "caf\xc3\xa9", "bad\xff", NULL };

static struct gmt__snapshot base_snapshot(struct fixture *f)
{
	struct gmt__snapshot s = {
		.reason = GMT_REASON_OOM,
		.seq = 1,
		.time_ns = 1700000000123456789ull,
		.pid = getpid(),
		.argc = 4,
		.argv = test_argv,
		.live_bytes = 111,
		.live_count = 5,
		.peak_bytes = 222,
		.total_allocs = 333,
		.total_frees = 444,
		.devices = devices,
		.ndevices = 2,
		.failed = &failed,
		.entries = f ? f->entries : NULL,
		.nentries = f ? (size_t)f->nentries : 0,
		.api_names = api_names,
		.napi = (int)(sizeof(api_names) / sizeof(api_names[0])),
		.stats = stats,
		.nstats = 2,
	};
	return s;
}

/* Names in dir, except "." and ".."; returns the count, the names joined in
 * out. */
static int list_dir(const char *dir, char *out, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	out[0] = '\0';
	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		n++;
		strncat(out, de->d_name, len - strlen(out) - 2);
		strcat(out, " ");
	}
	closedir(d);
	return n;
}

static void empty_dir(const char *dir)
{
	char names[4096], path[512], *tok, *save = NULL;

	list_dir(dir, names, sizeof(names));
	for (tok = strtok_r(names, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
		snprintf(path, sizeof(path), "%s/%s", dir, tok);
		unlink(path);
	}
}

static const char *jstr(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static long long jint(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v)) {
		fprintf(stderr, "  key \"%s\" is not an integer\n", key);
		check_failed++;
		return -999;
	}
	return json_integer_value(v);
}

static uint64_t jhex(json_t *o, const char *key)
{
	const char *s = jstr(o, key);

	if (s == NULL || strncmp(s, "0x", 2) != 0) {
		fprintf(stderr, "  key \"%s\" is not a \"0x\" string\n", key);
		check_failed++;
		return 0;
	}
	for (const char *p = s + 2; *p; p++) {
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
			fprintf(stderr, "  \"%s\" is not lowercase hex\n", s);
			check_failed++;
		}
	}
	return strtoull(s + 2, NULL, 16);
}

static int section_of(const struct gmt__entry *e)
{
	return e->space == GMT_SPACE_RESERVATION ? 1 : e->space == GMT_SPACE_MAPPING ? 2 : 0;
}

static int by_address(const void *x, const void *y)
{
	const struct gmt__entry *a = x, *b = y;

	if (section_of(a) != section_of(b))
		return section_of(a) - section_of(b);
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return a->space - b->space;
}

/* Compares one record of the file with the entry it came from. */
static void check_record(json_t *r, const struct gmt__entry *e)
{
	CHECK_U64(jhex(r, "address"), e->addr);
	CHECK_U64(jint(r, "size"), e->size);
	CHECK_INT(jint(r, "device"), e->device);
	CHECK_STR(jstr(r, "api"), api_names[e->api]);
	CHECK_INT(jint(r, "thread"), e->tid);
	CHECK_U64(jint(r, "time_ns"), e->time_ns);
	CHECK_INT(jint(r, "stack"), e->stack);
	if (section_of(e) == 0)
		CHECK_STR(jstr(r, "kind"), gmt__kind_name(e->kind));
	if (e->space == GMT_SPACE_HANDLE) {
		CHECK_INT(jint(r, "refs"), e->refs);
		CHECK_INT(jint(r, "mappings"), e->aux);
	} else if (e->space == GMT_SPACE_MAPPING) {
		CHECK_U64(jhex(r, "handle"), e->link);
		CHECK_U64(jint(r, "offset"), e->aux);
	} else {
		CHECK_U64(jint(r, "seq"), e->link);
	}
}

/* Each address as one or more frames (inlined code: its source frames,
 * innermost first, the last one the real function), each with what dladdr
 * says of the address; where libdw knows nothing, the loader's function name
 * and no file or line. */
static void check_frames(json_t *frames, const uintptr_t *ips, int n, const char *self)
{
	Dl_info me;
	void *self_base = dladdr((void *)gmt_test_known_function, &me) ? me.dli_fbase : NULL;
	size_t at = 0, total = json_array_size(frames);
	int i;

	for (i = 0; i < n; i++) {
		Dl_info info;
		bool known = dladdr((void *)(ips[i] - 1), &info) != 0;
		json_t *fr = NULL;

		CHECK(at < total);
		for (; at < total; at++) {
			fr = json_array_get(frames, at);
			CHECK_U64(jhex(fr, "address"), ips[i]);
			if (!json_is_true(json_object_get(fr, "inlined")))
				break;
			CHECK(json_is_string(json_object_get(fr, "file")));
		}
		if (at++ >= total)
			break;
		CHECK(json_is_false(json_object_get(fr, "inlined")));
		CHECK(json_is_false(json_object_get(fr, "python")));
		if (!known) {
			CHECK_STR(jstr(fr, "module"), "?");
			CHECK(json_is_null(json_object_get(fr, "function")));
			CHECK(json_is_null(json_object_get(fr, "file")));
			CHECK(json_is_null(json_object_get(fr, "line")));
			continue;
		}
		/* the main program by its real path, not argv[0] as dladdr says */
		CHECK_STR(jstr(fr, "module"), info.dli_fbase == self_base ? self : info.dli_fname);
		CHECK_U64(jhex(fr, "offset"), ips[i] - (uintptr_t)info.dli_fbase);
		if (json_is_null(json_object_get(fr, "file"))) {
			CHECK(json_is_null(json_object_get(fr, "line")));
			if (info.dli_sname != NULL)
				CHECK_STR(jstr(fr, "function"), info.dli_sname);
		}
	}
	CHECK_INT(at, total);
	/* the ground truth itself: dladdr and libdw name the function we planted,
	 * libdw with this file */
	if (ips[0] == (uintptr_t)gmt_test_known_function + 1) {
		json_t *fr = json_array_get(frames, 0);
		const char *file = jstr(fr, "file");

		CHECK_STR(jstr(fr, "function"), "gmt_test_known_function");
		CHECK_STR(jstr(fr, "module"), self);
		CHECK(file != NULL && strstr(file, "test_snapshot.c") != NULL);
		CHECK(jint(fr, "line") > 0);
	}
}

static void test_document(void)
{
	struct fixture f;
	struct gmt__snapshot s;
	struct gmt__entry sorted[16];
	char path[512], want_path[512], self[512];
	json_t *doc, *v, *a;
	json_error_t err;
	struct stat st;
	size_t i;
	ssize_t n;
	static const char *const required[] = { "format", "version", "reason", "time_ns", "pid",
						"argv", "summary", "devices", "failed_request",
						"allocations", "stacks", "vmm", "stats" };

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	fixture_init(&f);
	s = base_snapshot(&f);
	errno = EXDEV;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	CHECK_INT(errno, EXDEV);
	check_keep(path);
	snprintf(want_path, sizeof(want_path), "%s/gpumemtrace.%d.oom.1.json", tmpdir, (int)getpid());
	CHECK_STR(path, want_path);
	CHECK(lstat(path, &st) == 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_INT(st.st_mode & 07777, 0600);

	doc = json_load_file(path, 0, &err);
	if (doc == NULL) {
		fprintf(stderr, "%s does not parse: %s (line %d)\n", path, err.text, err.line);
		check_failed++;
		return;
	}
	for (i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		if (json_object_get(doc, required[i]) == NULL) {
			fprintf(stderr, "  key \"%s\" missing\n", required[i]);
			check_failed++;
		}
	}
	CHECK_STR(jstr(doc, "format"), "gpumemtrace-snapshot");
	CHECK_INT(jint(doc, "version"), 1);
	CHECK_STR(jstr(doc, "reason"), "oom");
	CHECK_INT(jint(doc, "seq"), 1);
	CHECK_U64(jint(doc, "time_ns"), 1700000000123456789ull);
	CHECK_INT(jint(doc, "pid"), getpid());

	a = json_object_get(doc, "argv");
	CHECK_INT(json_array_size(a), 4);
	CHECK_STR(json_string_value(json_array_get(a, 0)), "prog");
	CHECK_STR(json_string_value(json_array_get(a, 1)), "quote \" and\nnewline");
	CHECK_STR(json_string_value(json_array_get(a, 2)), "caf\xc3\xa9");
	CHECK_STR(json_string_value(json_array_get(a, 3)), "bad?"); /* invalid UTF-8 */

	v = json_object_get(doc, "summary");
	CHECK_INT(json_object_size(v), 5);
	CHECK_INT(jint(v, "live_bytes"), 111);
	CHECK_INT(jint(v, "live_count"), 5);
	CHECK_INT(jint(v, "peak_bytes"), 222);
	CHECK_INT(jint(v, "total_allocs"), 333);
	CHECK_INT(jint(v, "total_frees"), 444);

	a = json_object_get(doc, "devices");
	CHECK_INT(json_array_size(a), 2);
	v = json_array_get(a, 0);
	CHECK_INT(jint(v, "index"), 0);
	CHECK_U64(jint(v, "total_bytes"), 16ull << 30);
	CHECK_INT(jint(v, "free_bytes"), 1 << 20);
	CHECK_INT(jint(v, "live_bytes"), 5 << 20);
	/* by kind, from the live entries of device 0 */
	CHECK_INT(jint(json_object_get(v, "kinds"), "device"), 1 << 20);
	CHECK_INT(jint(json_object_get(v, "kinds"), "managed"), 8192);
	CHECK_INT(jint(json_object_get(v, "kinds"), "array"), 65536);
	CHECK_INT(jint(json_object_get(v, "kinds"), "vmm"), 2 << 20);
	CHECK(json_object_get(json_object_get(v, "kinds"), "async") == NULL);
	/* one 2 MiB page (the default granularity) half used by the 1 MiB block */
	CHECK_INT(jint(json_object_get(v, "pages"), "granularity"), 2 << 20);
	CHECK(json_is_false(json_object_get(json_object_get(v, "pages"), "granularity_known")));
	CHECK_INT(jint(json_object_get(v, "pages"), "pages"), 1);
	CHECK_INT(jint(json_object_get(v, "pages"), "partial"), 1);
	CHECK_INT(jint(json_object_get(v, "pages"), "stranded_bytes"), 1 << 20);
	CHECK(json_is_null(json_object_get(v, "pools")));
	CHECK(json_is_false(json_object_get(json_object_get(v, "other_processes"), "known")));
	CHECK_STR(jstr(json_object_get(v, "other_processes"), "why"), "NVML is not available");
	v = json_array_get(a, 1);
	CHECK_INT(jint(v, "index"), 1);
	CHECK(json_is_null(json_object_get(v, "total_bytes")));
	CHECK(json_is_null(json_object_get(v, "free_bytes")));
	CHECK_INT(jint(v, "live_bytes"), 4096);

	v = json_object_get(doc, "failed_request");
	CHECK_STR(jstr(v, "api"), "cuMemAlloc_v2");
	CHECK_INT(json_object_size(v), 9);
	CHECK_STR(jstr(v, "refused_by"), "driver");
	/* the thread it failed on (minor 12) */
	CHECK_INT(jint(json_object_get(v, "thread"), "tid"), 4242);
	CHECK_STR(jstr(json_object_get(v, "thread"), "name"), "loader-3");
	CHECK_INT(jint(v, "failure"), 3);
	CHECK_STR(jstr(v, "kind"), "device");
	CHECK_INT(jint(v, "stack"), 0);
	CHECK_U64(jint(v, "size"), 1ull << 34);
	CHECK_INT(jint(v, "device"), 0);
	CHECK_INT(jint(v, "result"), 2);

	/* 16 GiB asked of a 16 GiB device with 1 MiB free: the rest is
	 * untracked, and freeing all this process holds would not make room. */
	v = json_object_get(doc, "diagnosis");
	CHECK_STR(jstr(v, "verdict"), "never_fits");
	CHECK_INT(json_array_size(json_object_get(v, "verdicts")), 1);
	CHECK_U64(jint(json_object_get(v, "numbers"), "shortfall_bytes"), (1ull << 34) - (1 << 20));
	CHECK_U64(jint(json_object_get(v, "numbers"), "footprint_bytes"), (2 << 20) + (2 << 20) + 65536);
	CHECK(json_is_null(json_object_get(json_object_get(v, "numbers"), "other_processes_bytes")));

	v = json_object_get(doc, "stats");
	CHECK_INT(json_object_size(v), 2);
	CHECK_INT(jint(v, "events"), 123);
	CHECK_INT(jint(v, "ring_full_waits"), 4);

	/* the records, in address order within each section */
	memcpy(sorted, f.entries, sizeof(f.entries[0]) * (size_t)f.nentries);
	qsort(sorted, (size_t)f.nentries, sizeof(sorted[0]), by_address);
	{
		json_t *sections[3] = {
			json_object_get(doc, "allocations"),
			json_object_get(json_object_get(doc, "vmm"), "reservations"),
			json_object_get(json_object_get(doc, "vmm"), "mappings"),
		};
		size_t k = 0, sec;

		CHECK_INT(json_array_size(sections[0]), 6);
		CHECK_INT(json_array_size(sections[1]), 1);
		CHECK_INT(json_array_size(sections[2]), 2);
		for (sec = 0; sec < 3; sec++) {
			for (i = 0; i < json_array_size(sections[sec]); i++, k++) {
				CHECK_INT(section_of(&sorted[k]), sec);
				check_record(json_array_get(sections[sec], i), &sorted[k]);
			}
		}
		CHECK_INT(k, f.nentries);
		/* the tie at one address: memory before array */
		CHECK_STR(jstr(json_array_get(sections[0], 3), "kind"), "async");
		CHECK_STR(jstr(json_array_get(sections[0], 4), "kind"), "array");
	}

	/* each referenced stack once, ascending; stack 0 never */
	a = json_object_get(doc, "stacks");
	CHECK_INT(json_array_size(a), 2);
	{
		uint32_t lo = f.stack_a < f.stack_b ? f.stack_a : f.stack_b;
		json_t *first = json_array_get(a, 0), *second = json_array_get(a, 1);

		CHECK_INT(jint(first, "id"), lo);
		CHECK_INT(jint(second, "id"), lo == f.stack_a ? f.stack_b : f.stack_a);
		if (lo != f.stack_a) {
			json_t *t = first;
			first = second;
			second = t;
		}
		check_frames(json_object_get(first, "frames"), f.frames_a, 3, self);
		check_frames(json_object_get(second, "frames"), f.frames_b, 2, self);
		CHECK(strstr(jstr(json_array_get(json_object_get(first, "frames"), 1), "module"),
			     "libc") != NULL);
	}

	/* the module map: this program (with its base and build-id) and libc */
	a = json_object_get(doc, "modules");
	CHECK_INT(json_array_size(a), 2);
	{
		Dl_info me;
		json_t *m = json_array_get(a, 0);

		CHECK(dladdr((void *)gmt_test_known_function, &me) != 0);
		CHECK_STR(jstr(m, "path"), self);
		CHECK_U64(jhex(m, "base"), (uintptr_t)me.dli_fbase);
		CHECK(json_is_string(json_object_get(m, "build_id")));
		CHECK(strstr(jstr(json_array_get(a, 1), "path"), "libc") != NULL);
	}
	json_decref(doc);

	/* the same name again: never replaced; the next number is taken, and
	 * the document says so */
	{
		struct stat st2;
		char next[512];
		uint64_t used = 0;

		s.seq_out = &used;
		CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
		s.seq_out = NULL;
		CHECK(stat(want_path, &st2) == 0 && st2.st_ino == st.st_ino && st2.st_size == st.st_size);
		snprintf(next, sizeof(next), "%s/gpumemtrace.%d.oom.2.json", tmpdir, (int)getpid());
		CHECK_STR(path, next);
		CHECK_INT(used, 2);
		doc = json_load_file(path, 0, &err);
		CHECK(doc != NULL && jint(doc, "seq") == 2);
		json_decref(doc);
		unlink(path);
	}

	/* an empty table, no failed request, umask 077 or 0: still 0600 */
	{
		struct gmt__snapshot e = base_snapshot(NULL);
		mode_t old = umask(0);
		char names[4096];

		e.reason = GMT_REASON_EXIT;
		e.seq = 7;
		e.failed = NULL;
		e.argc = 0;
		e.argv = NULL;
		e.nstats = 0;
		e.ndevices = 0;
		CHECK_INT(gmt__snapshot_write(&e, tmpdir, path, sizeof(path), NULL), 0);
		CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600);
		check_keep(path);
		umask(077);
		e.seq = 8;
		CHECK_INT(gmt__snapshot_write(&e, tmpdir, path, sizeof(path), NULL), 0);
		CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600);
		check_keep(path);
		umask(old);
		doc = json_load_file(path, 0, &err);
		CHECK(doc != NULL);
		CHECK(json_object_get(doc, "failed_request") == NULL);
		CHECK_INT(json_array_size(json_object_get(doc, "allocations")), 0);
		CHECK_INT(json_array_size(json_object_get(doc, "stacks")), 0);
		CHECK_INT(json_array_size(json_object_get(doc, "argv")), 0);
		CHECK_INT(json_array_size(json_object_get(doc, "devices")), 0);
		CHECK_INT(json_object_size(json_object_get(doc, "stats")), 0);
		CHECK_STR(jstr(doc, "reason"), "exit");
		json_decref(doc);
		/* nothing else in the directory: no temporary file left */
		CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 3);
	}
	empty_dir(tmpdir);
	gmt__table_free(f.table);
}

/* Many distinct frames (the writer's address cache grows several times):
 * each frame of each stack still says what dladdr says. */
static void test_many_stacks(void)
{
	enum { NSTACKS = 300, DEPTH = 16 };
	static uintptr_t ips[NSTACKS][DEPTH];
	struct gmt__entry *copy = NULL;
	struct gmt__table *t = gmt__table_new();
	struct gmt__snapshot s = base_snapshot(NULL);
	char path[512], self[512];
	json_error_t err;
	json_t *doc, *stacks;
	uint32_t ids[NSTACKS];
	ssize_t n;
	int k, j;

	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	for (k = 0; k < NSTACKS && t != NULL; k++) {
		struct gmt__entry e;

		for (j = 0; j < DEPTH; j++)
			ips[k][j] = (uintptr_t)gmt_test_known_function + 1 + (uintptr_t)(k * DEPTH + j) * 3;
		ids[k] = gmt__stack_intern(ips[k], DEPTH);
		memset(&e, 0, sizeof(e));
		e.addr = 0x7f0000000000ull + (uint64_t)k * 4096;
		e.size = 4096;
		e.stack = ids[k];
		gmt__table_insert(t, &e, NULL);
	}
	CHECK(t != NULL);
	CHECK_INT(gmt__table_copy(t, &copy, &s.nentries), 0);
	s.entries = copy;
	s.seq = 50;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	free(copy);
	check_keep(path);
	doc = json_load_file(path, 0, &err);
	CHECK(doc != NULL);
	stacks = json_object_get(doc, "stacks");
	CHECK_INT(json_array_size(stacks), NSTACKS);
	for (k = 0; k < NSTACKS && k < (int)json_array_size(stacks); k++) {
		/* ids ascend in the file; find this one's frames */
		json_t *st = json_array_get(stacks, (size_t)k);
		int which;

		for (which = 0; which < NSTACKS && ids[which] != (uint32_t)jint(st, "id"); which++)
			;
		CHECK(which < NSTACKS);
		if (which < NSTACKS)
			check_frames(json_object_get(st, "frames"), ips[which], DEPTH, self);
		if (k > 0)
			CHECK(jint(st, "id") > jint(json_array_get(stacks, (size_t)k - 1), "id"));
	}
	json_decref(doc);
	unlink(path);
	gmt__table_free(t);
}

/* A symlink planted at the target name is neither followed nor replaced. */
static void test_symlink(void)
{
	struct gmt__snapshot s = base_snapshot(NULL);
	char target[512], victim[512], link_to[512], names[4096], path[512];
	struct stat st;
	ssize_t n;
	int fd;

	snprintf(victim, sizeof(victim), "%s.victim", tmpdir);
	fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, "precious\n", 9) == 9);
	close(fd);
	snprintf(target, sizeof(target), "%s/gpumemtrace.%d.oom.1.json", tmpdir, (int)getpid());
	CHECK(symlink(victim, target) == 0);

	/* written under the next number; the link and its target untouched */
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	CHECK(strstr(path, ".oom.2.json") != NULL);
	CHECK(lstat(target, &st) == 0 && S_ISLNK(st.st_mode));
	n = readlink(target, link_to, sizeof(link_to) - 1);
	link_to[n > 0 ? n : 0] = '\0';
	CHECK_STR(link_to, victim);
	CHECK(stat(victim, &st) == 0 && st.st_size == 9 && (st.st_mode & 0777) == 0644);
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 2);
	unlink(path);

	/* a dangling one: its target must not come into being */
	unlink(victim);
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	CHECK(access(victim, F_OK) != 0);
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 2);
	empty_dir(tmpdir);

	/* every name of GMT_SNAPSHOT_NAME_TRIES taken: -EEXIST, nothing written */
	for (int i = 1; i <= GMT_SNAPSHOT_NAME_TRIES; i++) {
		snprintf(target, sizeof(target), "%s/gpumemtrace.%d.oom.%d.json", tmpdir, (int)getpid(), i);
		CHECK(symlink(victim, target) == 0);
	}
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), -EEXIST);
	CHECK_STR(path, "");
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), GMT_SNAPSHOT_NAME_TRIES);
	empty_dir(tmpdir);
}

/* An oom snapshot of an episode: the "episode" section as captured, the
 * cache released beside the verdict, and a rewrite over the same name. */
static void test_episode(void)
{
	struct gmt__snapshot s = base_snapshot(NULL);
	struct gmt__episode ep = {
		.id = 2, .device = 0, .failures = 3, .described = 3, .end = GMT_EPISODE_OPEN,
		.first_ns = 1700000000000000000ull, .last_ns = 1700000000105000000ull,
		.nlisted = 3, .freed_bytes = 768ull << 20, .freed_count = 3, .nsites = 2,
		.sites = { { .stack = 0, .kind = GMT_KIND_ASYNC, .bytes = 256ull << 20, .count = 1 },
			   { .stack = 0, .kind = GMT_KIND_DEVICE, .bytes = 512ull << 20, .count = 2 } },
		.listed = { { .failure = 4, .size = 1ull << 34, .api = 1, .kind = GMT_KIND_DEVICE },
			    { .failure = 5, .size = 1ull << 34, .api = 1, .freed_bytes = 256ull << 20, .freed_count = 1 },
			    { .failure = 6, .size = 1ull << 34, .api = 1, .freed_bytes = 512ull << 20, .freed_count = 2,
			      .live_bytes = 111 } },
	};
	char path[512], again[512], names[4096];
	json_error_t err;
	json_t *doc, *e, *v;

	s.episode = &ep;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	doc = json_load_file(path, 0, &err);
	CHECK(doc != NULL);
	if (doc == NULL)
		return;
	CHECK_INT(jint(doc, "minor"), 18);
	CHECK_STR(jstr(doc, "producer"), "gpumemtrace " GMT_BUILD_VERSION);
	e = json_object_get(doc, "episode");
	CHECK_INT(jint(e, "id"), 2);
	CHECK_INT(jint(e, "failures"), 3);
	CHECK_INT(jint(e, "described"), 3);
	CHECK_STR(jstr(e, "end"), "open");
	CHECK_U64(jint(json_object_get(e, "freed"), "bytes"), 768ull << 20);
	/* the freed sites largest first */
	v = json_object_get(json_object_get(e, "freed"), "sites");
	CHECK_INT(json_array_size(v), 2);
	CHECK_STR(jstr(json_array_get(v, 0), "kind"), "device");
	CHECK_U64(jint(json_array_get(v, 0), "bytes"), 512ull << 20);
	v = json_object_get(e, "listed");
	CHECK_INT(json_array_size(v), 3);
	CHECK_INT(jint(json_array_get(v, 2), "failure"), 6);
	CHECK_STR(jstr(json_array_get(v, 2), "api"), api_names[1]);
	CHECK_U64(jint(json_array_get(v, 2), "freed_bytes"), 512ull << 20);
	CHECK_INT(jint(json_array_get(v, 2), "live_bytes"), 111);
	v = json_object_get(json_object_get(doc, "diagnosis"), "verdicts");
	CHECK_STR(jstr(json_array_get(v, json_array_size(v) - 1), "name"), "cache_released");
	CHECK_U64(jint(json_object_get(json_object_get(doc, "diagnosis"), "numbers"), "released_bytes"), 768ull << 20);
	json_decref(doc);

	/* A later failure rewrites the episode's file in place. */
	ep.failures = ep.described = 4;
	s.replace = true;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, again, sizeof(again), NULL), 0);
	CHECK_STR(again, path);
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 1);
	doc = json_load_file(path, 0, &err);
	CHECK(doc != NULL);
	if (doc != NULL)
		CHECK_INT(jint(json_object_get(doc, "episode"), "failures"), 4);
	json_decref(doc);
	empty_dir(tmpdir);
}

/* The join of a framework's segments to the driver's memory, as
 * docs/snapshot-format.md states it: a segment is joined when a live
 * allocation, VMM reservation or mapping of the snapshot starts at its
 * address — a reservation whose first page is not mapped too — and not when
 * one only covers it. */
static void test_join(void)
{
	struct fixture f;
	struct gmt__snapshot s;
	char path[512], framework[512];
	json_error_t err;
	json_t *doc, *segs;

	memset(&f, 0, sizeof(f));
	f.table = gmt__table_new();
	CHECK(f.table != NULL);
	if (f.table == NULL)
		return;
	add(&f, GMT_SPACE_MEMORY, GMT_KIND_DEVICE, 0x7f0000000000ull, 64 << 20, 0, 0, 0);
	add(&f, GMT_SPACE_RESERVATION, GMT_KIND_VMM, 0x7e0000000000ull, 1ull << 30, 0, 3, 0);
	add(&f, GMT_SPACE_MAPPING, GMT_KIND_VMM, 0x7e0000200000ull, 2 << 20, 0, 4, 0);
	add(&f, GMT_SPACE_RESERVATION, GMT_KIND_VMM, 0x7d0000000000ull, 1ull << 30, 0, 3, 0);
	snprintf(framework, sizeof(framework),
		 "{\"name\": \"torch\", \"reason\": \"oom\", \"segments\": ["
		 "{\"device\": 0, \"address\": %llu, \"total_size\": 67108864, \"blocks\": []}, "
		 "{\"device\": 0, \"address\": %llu, \"total_size\": 2097152, \"blocks\": []}, "
		 "{\"device\": 0, \"address\": %llu, \"total_size\": 2097152, \"blocks\": []}, "
		 "{\"device\": 0, \"address\": %llu, \"total_size\": 2097152, \"blocks\": []}]}",
		 0x7f0000000000ull, 0x7e0000200000ull, 0x7d0000000000ull, 0x7e0000100000ull);
	s = base_snapshot(&f);
	s.framework = framework;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	doc = json_load_file(path, 0, &err);
	CHECK(doc != NULL);
	if (doc != NULL) {
		segs = json_object_get(json_object_get(doc, "framework"), "segments");
		CHECK_INT(json_array_size(segs), 4);
		/* an allocation, a mapping, a reservation start there; the last
		 * lies inside a reservation, before a mapping */
		CHECK(json_is_true(json_object_get(json_array_get(segs, 0), "allocation")));
		CHECK(json_is_true(json_object_get(json_array_get(segs, 1), "allocation")));
		CHECK(json_is_true(json_object_get(json_array_get(segs, 2), "allocation")));
		CHECK(json_is_false(json_object_get(json_array_get(segs, 3), "allocation")));
		CHECK_INT(jint(json_object_get(doc, "framework"), "segments_joined"), 3);
	}
	json_decref(doc);
	empty_dir(tmpdir);
	gmt__table_free(f.table);
}

/* Failures: a negative errno and nothing left behind. */
static void test_failures(void)
{
	struct gmt__snapshot s = base_snapshot(NULL);
	char path[512], names[4096], file[512];
	int fd;

	CHECK_INT(gmt__snapshot_write(&s, "/nonexistent/gpumemtrace", path, sizeof(path), NULL), -ENOENT);
	snprintf(file, sizeof(file), "%s/plain", tmpdir);
	fd = open(file, O_WRONLY | O_CREAT, 0600);
	close(fd);
	CHECK_INT(gmt__snapshot_write(&s, file, path, sizeof(path), NULL), -ENOTDIR);
	unlink(file);

	s.reason = GMT_REASON_COUNT;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), -EINVAL);
	s.reason = (enum gmt__reason)(GMT_REASON_COUNT + 7);
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), -EINVAL);
	s.reason = GMT_REASON_OOM;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, 10, NULL), -ENAMETOOLONG);
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 0);
}

/* Runs fn in a child; returns its exit status (0: all checks passed). */
static int in_child(void (*fn)(void))
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		check_failed = 0; /* count the child's own */
		fn();
		_exit(check_failed != 0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* A directory the writer may not write into. As root (DAC does not apply) the
 * child drops to an unprivileged user first. */
static void readonly_child(void)
{
	struct gmt__snapshot s = base_snapshot(NULL);
	char path[512], names[4096];
	int r;

	if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0) {
		perror("setresuid");
		check_failed++;
		return;
	}
	r = gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL);
	CHECK_INT(r, -EACCES);
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 0);
}

/* A write that fails half way (the file size limit stands in for a full
 * disk): the temporary file goes away. */
static void fsize_child(void)
{
	struct fixture f;
	struct gmt__snapshot s;
	struct rlimit rl = { 1024, 1024 };
	char path[512], names[4096];

	fixture_init(&f);
	s = base_snapshot(&f);
	signal(SIGXFSZ, SIG_IGN);
	CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), -EFBIG);
	CHECK_STR(path, "");
	CHECK_INT(list_dir(tmpdir, names, sizeof(names)), 0);
	if (check_failed)
		fprintf(stderr, "  directory holds: %s\n", names);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n live allocations: timing printed, shape checked without a full parse. */
static void test_large(long n)
{
	struct gmt__table *t = gmt__table_new();
	struct gmt__snapshot s = base_snapshot(NULL);
	struct gmt__entry *copy = NULL;
	uintptr_t ips[16];
	uint32_t stacks[64];
	uint64_t x = 88172645463325252ull;
	char path[512], line[512];
	double t0, t1;
	struct stat st;
	long i, lines = 0;
	FILE *fp;
	int k, j;

	if (t == NULL) {
		check_failed++;
		return;
	}
	for (k = 0; k < 64; k++) {
		for (j = 0; j < 16; j++)
			ips[j] = (uintptr_t)gmt_test_known_function + 1 + (uintptr_t)(k * 16 + j);
		stacks[k] = gmt__stack_intern(ips, 16);
	}
	for (i = 0; i < n; i++) {
		struct gmt__entry e;

		memset(&e, 0, sizeof(e));
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		e.addr = 0x7f0000000000ull + ((x & 0xffffffffffull) << 8);
		e.size = 256 + (x >> 50);
		e.time_ns = 1700000000000000000ull + (uint64_t)i;
		e.link = (uint64_t)i + 1;
		e.stack = stacks[x % 64];
		e.tid = 4242;
		e.space = GMT_SPACE_MEMORY;
		e.kind = GMT_KIND_DEVICE;
		if (gmt__table_insert(t, &e, NULL) == NULL) {
			check_failed++;
			return;
		}
	}
	s.live_count = gmt__table_count(t);
	s.seq = 99;
	/* Timed as the tracer takes it: the capture (a copy), then the write. */
	t0 = now();
	CHECK_INT(gmt__table_copy(t, &copy, &s.nentries), 0);
	s.entries = copy;
	CHECK_INT(gmt__snapshot_write(&s, tmpdir, path, sizeof(path), NULL), 0);
	t1 = now();
	free(copy);
	CHECK(stat(path, &st) == 0);
	check_keep(path);
	printf("snapshot of %zu live allocations: %.3f s, %.1f MB (%.0f ns per allocation)\n",
	       gmt__table_count(t), t1 - t0, (double)st.st_size / 1e6,
	       (t1 - t0) * 1e9 / (double)gmt__table_count(t));

	/* one record per line: count them, and check the order holds */
	fp = fopen(path, "r");
	if (fp != NULL) {
		uint64_t prev = 0, addr;
		bool in = false;

		while (fgets(line, sizeof(line), fp) != NULL) {
			if (strncmp(line, " \"allocations\"", 14) == 0)
				in = true;
			else if (in && sscanf(line, "  {\"address\": \"0x%" SCNx64 "\"", &addr) == 1) {
				if (lines > 0 && addr <= prev) {
					fprintf(stderr, "  out of order: 0x%" PRIx64 " after 0x%" PRIx64 "\n",
						addr, prev);
					check_failed++;
					break;
				}
				prev = addr;
				lines++;
			} else if (in) {
				in = false;
			}
		}
		fclose(fp);
	}
	CHECK_INT(lines, (long)gmt__table_count(t));
	unlink(path);
	gmt__table_free(t);
}

int main(int argc, char **argv)
{
	long large = argc > 1 ? strtol(argv[1], NULL, 10) : 100000;

	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/gmt-snapshot-XXXXXX", base && *base ? base : "/tmp");
	if (mkdtemp(tmpdir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_document();
	test_many_stacks();
	test_symlink();
	test_episode();
	test_join();
	test_failures();

	chmod(tmpdir, 0555);
	if (in_child(readonly_child) != 0) {
		fprintf(stderr, "read-only directory: failed\n");
		check_failed++;
	}
	chmod(tmpdir, 0700);
	if (in_child(fsize_child) != 0) {
		fprintf(stderr, "write failing half way: failed\n");
		check_failed++;
	}
	test_large(large);

	empty_dir(tmpdir);
	rmdir(tmpdir);
	{
		char victim[300];

		snprintf(victim, sizeof(victim), "%s.victim", tmpdir);
		unlink(victim);
	}
	if (check_failed)
		fprintf(stderr, "%d check(s) failed\n", check_failed);
	return check_failed != 0;
}
