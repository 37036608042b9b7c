/* The ledger: the simulator's exact live set, pools, virtual memory state,
 * totals and call counts, written as JSON (format in docs/simulator.md) at exit,
 * at each out-of-memory result, and on request. Ground truth for the tests; and
 * each device's usage, the ground truth the NVML double reports. */
#define _GNU_SOURCE
#include "sim.h"

#include "gmtsim.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sim_pool_row {
	uint64_t handle, reserved, used, threshold;
	int device;
	bool is_default;
};

struct sim_range_row {
	uint64_t address, size, handle, offset;
};

#define SIM_VEC(type) struct { type *v; size_t n, cap; bool failed; }

struct collect {
	SIM_VEC(struct sim_ledger_entry) live;
	SIM_VEC(struct sim_pool_row) pools;
	SIM_VEC(struct sim_range_row) reservations;
	SIM_VEC(struct sim_range_row) mappings;
};

/* NOTE: the ledger is the test double's instrumentation, which no real
 * driver has; the copies of addresses it makes must not outlive it in freed
 * heap memory, where the tracer's leak check (which reads the process's
 * memory at exit, after this runs) would take them for the program's own
 * references. So vectors grow by copy and every buffer is cleared before it
 * is freed. */
static void vec_release(void *v, size_t bytes)
{
	if (v != NULL)
		explicit_bzero(v, bytes);
	free(v);
}

/* Appends to a vector; on allocation failure marks it failed (the write then
 * reports -ENOMEM rather than a ledger that silently lacks entries). */
#define SIM_PUSH(vec, item)                                                          \
	do {                                                                         \
		if ((vec).n == (vec).cap) {                                          \
			size_t cap_ = (vec).cap ? 2 * (vec).cap : 64;                \
			void *v_ = malloc(cap_ * sizeof(*(vec).v));                  \
			if (v_ == NULL) {                                            \
				(vec).failed = true;                                 \
				break;                                               \
			}                                                            \
			if ((vec).n > 0)                                             \
				memcpy(v_, (vec).v, (vec).n * sizeof(*(vec).v));     \
			vec_release((vec).v, (vec).cap * sizeof(*(vec).v));          \
			(vec).v = v_;                                                \
			(vec).cap = cap_;                                            \
		}                                                                    \
		(vec).v[(vec).n++] = (item);                                         \
	} while (0)

static void on_entry(void *ctx, const struct sim_ledger_entry *e)
{
	struct collect *c = ctx;
	SIM_PUSH(c->live, *e);
}

static void on_pool(void *ctx, uint64_t handle, int device, bool is_default, uint64_t reserved,
		    uint64_t used, uint64_t threshold)
{
	struct collect *c = ctx;
	struct sim_pool_row row = { handle, reserved, used, threshold, device, is_default };
	SIM_PUSH(c->pools, row);
}

static void on_reservation(void *ctx, uint64_t address, uint64_t size)
{
	struct collect *c = ctx;
	struct sim_range_row row = { address, size, 0, 0 };
	SIM_PUSH(c->reservations, row);
}

static void on_mapping(void *ctx, uint64_t address, uint64_t size, uint64_t handle, uint64_t offset)
{
	struct collect *c = ctx;
	struct sim_range_row row = { address, size, handle, offset };
	SIM_PUSH(c->mappings, row);
}

static int by_address(const void *x, const void *y)
{
	const struct sim_ledger_entry *a = x, *b = y;
	if (a->address != b->address)
		return a->address < b->address ? -1 : 1;
	return (int)a->kind - (int)b->kind;
}

static void write_json(FILE *f, const char *reason, const struct sim_failed_request *failed,
		       const struct collect *c)
{
	struct sim_totals t;
	const char *sep = "";
	int ndev = gmtsim__device_count();

	fprintf(f, "{\"format\": \"gmtsim-ledger\", \"version\": 1, \"pid\": %ld, \"reason\": \"%s\",\n",
		(long)getpid(), reason);
	fprintf(f, " \"driver_version\": %d,\n \"devices\": [", gmtsim__driver_version());
	for (int i = 0; i < ndev; i++) {
		struct sim_device_state s;

		gmtsim__device_state(i, &s);
		fprintf(f,
			"%s\n  {\"index\": %d, \"total_bytes\": %" PRIu64 ", \"free_bytes\": %" PRIu64
			", \"page_size\": %" PRIu64 ", \"pages_total\": %" PRIu64 ", \"pages_free\": %" PRIu64
			", \"pages_other_processes\": %" PRIu64 ", \"pages_context\": %" PRIu64
			", \"pool_reserved_bytes\": %" PRIu64 ", \"pool_used_bytes\": %" PRIu64 "}",
			i ? "," : "", i, s.total_bytes, s.free_bytes, SIM_PAGE_SIZE, s.pages_total,
			s.pages_free, s.pages_other, s.pages_context, s.pool_reserved, s.pool_used);
	}
	fprintf(f, "],\n \"live\": [");
	for (size_t i = 0; i < c->live.n; i++) {
		const struct sim_ledger_entry *e = &c->live.v[i];
		fprintf(f,
			"%s\n  {\"address\": \"0x%" PRIx64 "\", \"size\": %" PRIu64
			", \"kind\": \"%s\", \"device\": %d, \"api\": \"%s\"",
			i ? "," : "", e->address, e->size, gmtsim__kind_name(e->kind), e->device,
			gmtsim__call_name(e->api));
		if (e->kind == SIM_KIND_ASYNC)
			fprintf(f, ", \"stream\": \"0x%" PRIx64 "\"", e->stream);
		fprintf(f, "}");
	}
	fprintf(f, "],\n \"pools\": [");
	for (size_t i = 0; i < c->pools.n; i++) {
		const struct sim_pool_row *p = &c->pools.v[i];
		fprintf(f,
			"%s\n  {\"handle\": \"0x%" PRIx64 "\", \"device\": %d, \"default\": %s"
			", \"reserved_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64
			", \"release_threshold\": %" PRIu64 "}",
			i ? "," : "", p->handle, p->device, p->is_default ? "true" : "false", p->reserved,
			p->used, p->threshold);
	}
	fprintf(f, "],\n \"vmm\": {\"reservations\": [");
	for (size_t i = 0; i < c->reservations.n; i++)
		fprintf(f, "%s{\"address\": \"0x%" PRIx64 "\", \"size\": %" PRIu64 "}", i ? ", " : "",
			c->reservations.v[i].address, c->reservations.v[i].size);
	fprintf(f, "],\n  \"mappings\": [");
	for (size_t i = 0; i < c->mappings.n; i++) {
		const struct sim_range_row *m = &c->mappings.v[i];
		fprintf(f,
			"%s{\"address\": \"0x%" PRIx64 "\", \"size\": %" PRIu64 ", \"handle\": \"0x%" PRIx64
			"\", \"offset\": %" PRIu64 "}",
			i ? ", " : "", m->address, m->size, m->handle, m->offset);
	}
	gmtsim__totals(&t);
	fprintf(f, "]},\n \"totals\": {\"allocs\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"oom\": %" PRIu64 "},\n",
		t.allocs, t.frees, t.oom);
	fprintf(f, " \"calls\": {");
	for (int i = 0; i < SIM_CALL_COUNT; i++) {
		uint64_t n = gmtsim__calls((enum sim_call)i);
		if (n == 0)
			continue;
		fprintf(f, "%s\"%s\": %" PRIu64, sep, gmtsim__call_name((enum sim_call)i), n);
		sep = ", ";
	}
	fprintf(f, "}");
	if (failed != NULL)
		fprintf(f,
			",\n \"failed_request\": {\"api\": \"%s\", \"size\": %" PRIu64
			", \"device\": %d, \"result\": %d}",
			gmtsim__call_name(failed->api), failed->size, failed->device, (int)failed->result);
	fprintf(f, "}\n");
}

int gmtsim__ledger_write_locked(const char *path, const char *reason,
				const struct sim_failed_request *failed)
{
	struct collect c = { 0 };
	struct sim_ledger_visitor v = { on_entry, on_pool, on_reservation, on_mapping, &c };
	char tmp[PATH_MAX];
	FILE *f = NULL;
	int r = 0;

	gmtsim__memory_visit(&v);
	if (c.live.failed || c.pools.failed || c.reservations.failed || c.mappings.failed) {
		r = -ENOMEM;
		goto out;
	}
	if (c.live.n > 1)
		qsort(c.live.v, c.live.n, sizeof(*c.live.v), by_address);
	/* Written whole to a temporary file, then renamed: a reader never sees half
	 * a ledger. */
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
		r = -ENAMETOOLONG;
		goto out;
	}
	f = fopen(tmp, "w");
	if (f == NULL) {
		r = -errno;
		goto out;
	}
	write_json(f, reason, failed, &c);
	if (fflush(f) != 0 || ferror(f)) {
		r = -errno;
		fclose(f);
		unlink(tmp);
		goto out;
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		r = -errno;
		unlink(tmp);
	}
out:
	vec_release(c.live.v, c.live.cap * sizeof(*c.live.v));
	vec_release(c.pools.v, c.pools.cap * sizeof(*c.pools.v));
	vec_release(c.reservations.v, c.reservations.cap * sizeof(*c.reservations.v));
	vec_release(c.mappings.v, c.mappings.cap * sizeof(*c.mappings.v));
	if (r < 0)
		errno = -r;
	return r;
}

void gmtsim__ledger_oom(const struct sim_failed_request *failed)
{
	static uint64_t seq;
	const char *dir = gmtsim__config()->ledger_dir;
	char path[PATH_MAX];

	if (dir == NULL)
		return;
	snprintf(path, sizeof(path), "%s/ledger.%ld.oom.%" PRIu64 ".json", dir, (long)getpid(), ++seq);
	if (gmtsim__ledger_write_locked(path, "oom", failed) < 0)
		fprintf(stderr, "gmtsim: cannot write %s: %s\n", path, strerror(errno));
}

GMTSIM_EXPORT int gmtsim_ledger_write(const char *path)
{
	int r;

	if (path == NULL)
		return -EINVAL;
	gmtsim__lock();
	r = gmtsim__ledger_write_locked(path, "api", NULL);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT int gmtsim_device_usage(int device, struct gmtsim_usage *out)
{
	struct sim_device_state st;
	int r = 0;

	if (out == NULL)
		return -EINVAL;
	gmtsim__lock();
	/* Under the lock: cuInit, the fork handler and the teardown change the
	 * state while holding it. */
	if (gmtsim__initialised() != CUDA_SUCCESS) {
		r = -ESRCH;
	} else if (device < 0 || device >= gmtsim__device_count()) {
		r = -EINVAL;
	} else {
		gmtsim__device_state(device, &st);
		*out = (struct gmtsim_usage){
			.total_bytes = st.total_bytes,
			.free_bytes = st.free_bytes,
			/* Every page is free, other processes', or this process's. */
			.self_bytes = (st.pages_total - st.pages_free - st.pages_other) * SIM_PAGE_SIZE,
			.other_bytes = st.pages_other * SIM_PAGE_SIZE,
		};
	}
	gmtsim__unlock();
	return r;
}
