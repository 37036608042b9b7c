/* gpumemtrace public header: the version of the interface, and the run-time
 * API a program can call while it is traced — write a snapshot now, tag a
 * region of code, read the live bytes the tracer counts.
 *
 * Nothing to link: every function is inline and finds libgpumemtrace.so's
 * table (`gmt_api_v1`) with dlsym the first time it is called. When the
 * library is not preloaded, or tracing is off, every call does nothing and
 * returns -ENOSYS, so a program built with this header runs unchanged without
 * it. (Before glibc 2.34 dlsym lives in libdl: link with -ldl, as
 * `pkg-config --libs gpumemtrace` says.) C99 or later, or C++. Thread-safe. */
#ifndef GPUMEMTRACE_H
#define GPUMEMTRACE_H

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#define GMT_VERSION_MAJOR 0
#define GMT_VERSION_MINOR 4
#define GMT_VERSION_PATCH 0
#define GMT_VERSION_STRING "0.4.0"

/* One number that orders versions: 10000 * major + 100 * minor + patch. */
#define GMT_VERSION (GMT_VERSION_MAJOR * 10000 + GMT_VERSION_MINOR * 100 + GMT_VERSION_PATCH)

/* Devices for gmt_live_bytes besides an ordinal. */
#define GMT_HOST (-1)        /* pinned and registered host memory */
#define GMT_ALL_DEVICES (-2) /* everything the process holds */

/* Region tags longer than this are cut. */
#define GMT_TAG_MAX 64

/* The library's table. Fields are only ever added at the end; `size` says how
 * many the library has. */
struct gmt_api_v1 {
	size_t size;
	int (*dump)(char *path, size_t len);
	int (*tag_push)(const char *tag);
	int (*tag_pop)(void);
	int (*live_bytes)(int device, unsigned long long *bytes);
	/* 0.3 */
	int (*peak_bytes)(int device, unsigned long long *bytes);
	int (*peak_reset)(void);
	int (*mark)(unsigned long long *mark);
	int (*live_since)(unsigned long long mark, int device, unsigned long long *bytes, unsigned long long *count);
	int (*step)(unsigned long long step);
	/* 0.4 */
	int (*framework)(const char *json);
};

#ifdef __cplusplus
extern "C" {
#endif

/* The table, or NULL when the library is not loaded. NOTE: RTLD_DEFAULT is
 * spelt as the null handle it is on glibc: the macro needs _GNU_SOURCE before
 * the first system header, which this header cannot ask of the program. */
static inline const struct gmt_api_v1 *gmt__api_v1(void)
{
	static const struct gmt_api_v1 *api;
	static int looked;

	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		__atomic_store_n(&api, (const struct gmt_api_v1 *)dlsym((void *)0, "gmt_api_v1"),
				 __ATOMIC_RELAXED);
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	return __atomic_load_n(&api, __ATOMIC_RELAXED);
}

#define GMT__HAS(api, field) \
	((api) != NULL && (api)->size >= offsetof(struct gmt_api_v1, field) + sizeof((api)->field))

/* Writes a snapshot of everything live now, reason "api", into
 * GPUMEMTRACE_DIR (whatever GPUMEMTRACE_SNAPSHOT_ON says). When path is not
 * NULL it gets the file's path (cut to len, NUL-terminated). Returns 0, or a
 * negative errno: -ENOSYS not traced, or why the file could not be written. */
static inline int gmt_dump(char *path, size_t len)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, dump) ? api->dump(path, len) : -ENOSYS;
}

/* Tags the calling thread's allocations until the matching gmt_tag_pop: each
 * allocation records the tags open on its thread, outermost first (16 at
 * most; deeper ones are counted but not recorded). The tag is copied (at most
 * GMT_TAG_MAX - 1 bytes). Returns 0, -EINVAL for a NULL or empty tag, -ENOMEM,
 * or -ENOSYS. */
static inline int gmt_tag_push(const char *tag)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, tag_push) ? api->tag_push(tag) : -ENOSYS;
}

/* Closes the innermost open tag of the calling thread. Returns 0, -ENOENT
 * when none is open, or -ENOSYS. */
static inline int gmt_tag_pop(void)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, tag_pop) ? api->tag_pop() : -ENOSYS;
}

/* Into *bytes, the bytes the process holds on `device` (an ordinal,
 * GMT_HOST or GMT_ALL_DEVICES) as the tracer counts them, every allocation
 * and free completed before the call included. Returns 0, -EINVAL for a
 * device out of range, or -ENOSYS. */
static inline int gmt_live_bytes(int device, unsigned long long *bytes)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, live_bytes) ? api->live_bytes(device, bytes) : -ENOSYS;
}

/* The highest live bytes of `device` (as for gmt_live_bytes) since the process
 * started or the last gmt_peak_reset(). Returns 0, -EINVAL, or -ENOSYS. */
static inline int gmt_peak_bytes(int device, unsigned long long *bytes)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, peak_bytes) ? api->peak_bytes(device, bytes) : -ENOSYS;
}

/* Starts the peaks of gmt_peak_bytes afresh at what is live now (for one
 * test, one step). Returns 0 or -ENOSYS. */
static inline int gmt_peak_reset(void)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, peak_reset) ? api->peak_reset() : -ENOSYS;
}

/* A mark in the process's sequence of allocations and frees: everything
 * completed before the call is before it. Returns 0 or -ENOSYS. */
static inline int gmt_mark(unsigned long long *mark)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, mark) ? api->mark(mark) : -ENOSYS;
}

/* The bytes and allocations of `device` (as for gmt_live_bytes) live now that
 * were made after `mark` (gmt_mark): what a test or a step left behind, not
 * hidden by frees of older memory. Returns 0, -EINVAL, or -ENOSYS. */
static inline int gmt_live_since(unsigned long long mark, int device, unsigned long long *bytes,
				 unsigned long long *count)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, live_since) ? api->live_since(mark, device, bytes, count) : -ENOSYS;
}

/* Marks step `step` of the program's loop (a training step, a request): the
 * history notes it, and growth is judged on these steps too, exactly the
 * program's rhythm. Call it at the start (or the end) of every step. Returns
 * 0 or -ENOSYS. */
static inline int gmt_step(unsigned long long step)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, step) ? api->step(step) : -ENOSYS;
}

/* Hands the tracer the state of a framework's allocator: a JSON object as
 * docs/snapshot-format.md ("framework") describes, with "reason" "oom" (at an
 * out-of-memory: the open episode's file is rewritten with it when a driver
 * failure awaits it; with none, the framework's own allocator refused, and
 * the request its "oom" object names is a failure of its own, with a
 * snapshot of its own) or "exit" (the exit snapshot takes it); or
 * {"name": NAME, "reason": "watch"}: from now on that framework hands over
 * its state at each out-of-memory it reports, so an episode it did not
 * report, ended by a successful allocation, is one its allocator recovered
 * from (a one-line report). The Python bootstrap calls it for PyTorch, CuPy
 * and JAX; a program rarely needs to. Reason "api" hands it over for the next
 * gmt_dump().
 * Returns 0, -EINVAL (not such an object: not JSON, another reason, a key
 * docs/snapshot.schema.json's "framework" requires missing, or a key it
 * names of another type or out of its range, such as a negative byte count
 * or device; the state is then not taken, and no snapshot gets it), -E2BIG
 * (over 256 MiB), -ENOMEM or -ENOSYS. */
static inline int gmt_framework(const char *json)
{
	const struct gmt_api_v1 *api = gmt__api_v1();

	return GMT__HAS(api, framework) ? api->framework(json) : -ENOSYS;
}

#ifdef __cplusplus
}
#endif

#endif /* GPUMEMTRACE_H */
