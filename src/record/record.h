/* The tracking core as the hooks see it: enter and leave an intercepted call,
 * and report what it did. All policy (initialisation, counting once, stacks,
 * rings, the consumer, snapshots) lives behind these calls: record/record.c
 * and the stages it feeds (docs/internals.md). */
#ifndef GMT_CORE_H
#define GMT_CORE_H

#include "record/event.h"
#include "intercept/hooks.h"

#include <stdbool.h>
#include <stdint.h>

/* Device numbers the hooks may pass instead of an ordinal. */
#define GMT_DEVICE_HOST (-1)    /* host memory: no device */
#define GMT_DEVICE_CURRENT (-2) /* the device of the calling thread's context */

/* One intercepted call, from the hook's entry to its return. */
struct gmt__call {
	enum gmt__api api;
	bool record;    /* outermost intercepted call on this thread, and tracing on */
	bool on_stream; /* a stream-ordered allocation: `stream` is its CUstream */
	uint64_t began; /* the global sequence number when it began (record only) */
	uint64_t stream;
};

/* Entry of every hook: counts call depth (only the outermost call records,
 * docs/tracing.md: counted once) and initialises the tracer on first use. Never
 * fails; with tracing off the call is simply not recorded. */
void gmt__call_enter(struct gmt__call *c, enum gmt__api api);

/* Exit of every hook, before returning the real result. Every gmt__ function
 * leaves errno as it found it, so the caller sees the real call's errno. */
void gmt__call_leave(struct gmt__call *c);

/* After a successful allocation of `size` bytes at `addr` (a handle for VMM and
 * arrays). */
void gmt__on_alloc(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr, uint64_t size,
		   int device);

/* Before the real free of `addr`: notes it for gmt__on_result, which records
 * the free when it succeeded (state/apply.c, "Frees are recorded after"). Returns a
 * token for gmt__on_result (0 when nothing will be recorded). The caller
 * must call gmt__on_result with it on every path. */
uint64_t gmt__on_free(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr);

/* VMM operations: after success for retain, map and reserve; release, unmap
 * and unreserve are noted before the real call, as frees are (returning a
 * token for gmt__on_result), and recorded after it only when the driver
 * honoured them (state/apply.c, "VMM handles"). */
void gmt__on_retain(const struct gmt__call *c, uint64_t handle);
uint64_t gmt__on_release(const struct gmt__call *c, uint64_t handle);
void gmt__on_map(const struct gmt__call *c, uint64_t addr, uint64_t size, uint64_t handle, uint64_t offset);
uint64_t gmt__on_unmap(const struct gmt__call *c, uint64_t addr, uint64_t size);
void gmt__on_reserve(const struct gmt__call *c, uint64_t addr, uint64_t size);
uint64_t gmt__on_unreserve(const struct gmt__call *c, uint64_t addr, uint64_t size);

/* After the real call (`token` from gmt__on_free, _release, _unmap,
 * _unreserve): the operation is recorded now when it succeeded, or answered
 * CUDA_ERROR_DEINITIALIZED, which at teardown means the driver has already
 * released the memory; a refused one is counted (stats.failed_frees) and
 * changes nothing. */
void gmt__on_result(const struct gmt__call *c, uint64_t token, CUresult r);

/* Contexts: a device's primary context was retained (`ctx` is its handle); a
 * context was destroyed, or a device's primary context went away (released
 * for the last time, or reset) — the driver freed what was allocated in it,
 * and with a primary context the device's stream-ordered memory too. After
 * the real call succeeded. */
void gmt__on_primary_retained(const struct gmt__call *c, int device, CUcontext ctx);
void gmt__on_context_destroyed(const struct gmt__call *c, CUcontext ctx);
void gmt__on_primary_gone(const struct gmt__call *c, int device);

/* After a failed allocation of `kind`: on CUDA_ERROR_OUT_OF_MEMORY, an entry
 * in the history and an "oom" snapshot holding everything completed before the
 * call, and the failed request with its stack. */
void gmt__on_failure(const struct gmt__call *c, CUresult r, enum gmt__kind kind, uint64_t size, int device);

/* A framework's out-of-memory error, handed over from Python (gmt_framework
 * "oom"; json taken over): joined to the driver failure that awaits it, or,
 * with none, a failure of the framework's own allocator — `size` on `device`
 * (GMT_DEVICE_CURRENT: the thread's), labelled `label` (tracer.h), with the
 * thread's Python stack. Not from a hook. */
void gmt__on_framework_oom(char *json, uint16_t label, uint64_t size, int device);

/* The public API behind gmt_api_v1 (api.c, gpumemtrace.h documents them):
 * each returns -ENOSYS when tracing is off or from inside a hook. */
int gmt__api_dump(char *path, size_t len);
int gmt__api_tag_push(const char *tag);
int gmt__api_tag_pop(void);
int gmt__api_live_bytes(int device, unsigned long long *bytes);
int gmt__api_peak_bytes(int device, unsigned long long *bytes);
int gmt__api_peak_reset(void);
int gmt__api_mark(unsigned long long *mark);
int gmt__api_live_since(unsigned long long mark, int device, unsigned long long *bytes, unsigned long long *count);
int gmt__api_step(unsigned long long step);
int gmt__api_framework(const char *json);

#endif /* GMT_CORE_H */
