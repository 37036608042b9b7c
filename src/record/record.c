/* The record path: from a hook into the calling thread's ring — counting
 * once, the stack, the device, the global sequence number. What runs here
 * runs inside the program's CUDA calls: no lock but in a full ring's
 * fallback, no allocation (record/record.h). */
#define _GNU_SOURCE
#include "record/record.h"

#include "record/modules.h"
#include "record/pystack.h"
#include "record/streams.h"
#include "record/tags.h"
#include "record/unwind.h"
#include "tracer/tracer.h"
#include "util/log.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

_Thread_local struct gmt__thread gmt__tls __attribute__((tls_model("initial-exec")));

static struct gmt__ring *thread_ring(void)
{
	struct gmt__ring *r;

	if (gmt__tls.ring != NULL)
		return gmt__tls.ring;
	if (gmt__tls.tid == 0)
		gmt__tls.tid = (uint32_t)syscall(SYS_gettid);
	r = gmt__ring_new((uint32_t)gmt__core.opt->ring_events, gmt__tls.tid);
	if (r == NULL)
		return NULL;
	gmt__rings_add(r);
	/* The key's destructor marks the ring dead when this thread exits. */
	pthread_setspecific(gmt__core.ring_key, r);
	gmt__tls.ring = r;
	return r;
}

/* The ring is full: apply events ourselves when the consumer lock is free, else
 * let whoever holds it make progress. Never drops an event. */
static void make_room(struct gmt__ring *r)
{
	STAT_ADD(ring_full, 1);
	while (!gmt__ring_has_room(r)) {
		if (gmt__core_trylock()) {
			STAT_ADD(producer_drains, 1);
			gmt__core.in_hook = true;
			gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
			gmt__core.in_hook = false;
			gmt__core_unlock();
		} else {
			sched_yield();
		}
	}
}

/* How many of the innermost frames ips[0..n) are the tracer's own (the walk,
 * capture, record, the gmt__on_* caller, the hook): by address, which no
 * inlining or sibling call can make wrong. */
static int own_prefix(const uintptr_t *ips, int n)
{
	int first = 0;

	while (first < n && ips[first] >= gmt__core.text_start && ips[first] < gmt__core.text_end)
		first++;
	return first;
}

/* Raises own_frames to `seen`; relaxed (a hint, see gmt__core.own_frames). */
static void own_frames_seen(int seen)
{
	int own = atomic_load_explicit(&gmt__core.own_frames, memory_order_relaxed);

	while (own < seen && !atomic_compare_exchange_weak_explicit(&gmt__core.own_frames, &own, seen, memory_order_relaxed,
								    memory_order_relaxed))
		;
}

/* The calling thread's stack, interned: its native frames without the
 * tracer's own, its Python frames, its open region tags. 0 when nothing is
 * recorded. */
static uint32_t capture(void)
{
	uintptr_t ips[GMT_STACK_MAX_FRAMES];
	struct gmt__py_capture_info pyinfo = { 0 };
	int n = 0, first = 0, py;

	if (gmt__core.depth == 0 && gmt__tls.ntags == 0)
		return 0;
	if (gmt__core.depth > 0) {
		int own = atomic_load_explicit(&gmt__core.own_frames, memory_order_relaxed);
		int want = gmt__core.depth + own < GMT_STACK_MAX_DEPTH ? gmt__core.depth + own : GMT_STACK_MAX_DEPTH;

		n = gmt__stack_walk(ips, want);
		first = own_prefix(ips, n);
		if (first > own) {
			/* A path with more frames of ours than any before: walk
			 * again if this walk stopped short of the program's. */
			own_frames_seen(first);
			if (n == want && want < GMT_STACK_MAX_DEPTH) {
				want = gmt__core.depth + first < GMT_STACK_MAX_DEPTH ? gmt__core.depth + first : GMT_STACK_MAX_DEPTH;
				n = gmt__stack_walk(ips, want);
				first = own_prefix(ips, n);
			}
		}
		if (n - first > gmt__core.depth)
			n = first + gmt__core.depth;
	}
	/* The Python frames follow the native ones (pystack.h). */
	py = gmt__core.python ? gmt__py_capture(ips + n, gmt__core.depth, &pyinfo) : 0;
	if (py > 0)
		STAT_ADD(python_stacks, 1);
	if (pyinfo.nogil)
		STAT_ADD(python_stacks_nogil, 1);
	if (pyinfo.dropped > 0)
		STAT_ADD(python_frames_dropped, pyinfo.dropped);
	/* Then the open region tags (stacks.h). */
	for (int t = 0; t < gmt__tls.ntags && t < GMT_STACK_MAX_TAGS; t++)
		ips[n + py++] = GMT_WORD_TAG | gmt__tls.tags[t];
	return gmt__stack_intern_at(ips + first, n + py - first, gmt__modules_epoch());
}

/* Whether a Python frame's file is one of the tracer's own package
 * (gpumemtrace/__init__.py, gpumemtrace/frameworks.py): the frames that hand
 * a framework's state over. */
static bool own_python(uintptr_t word)
{
	static const char *const own[] = { "/gpumemtrace/__init__.py", "/gpumemtrace/frameworks.py" };
	const char *function, *file;
	size_t n;
	int line;

	if (gmt__py_frame(word, &function, &file, &line) != 0 || file == NULL)
		return false;
	n = strlen(file);
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		size_t k = strlen(own[i]);

		if (n >= k && strcmp(file + n - k, own[i]) == 0)
			return true;
	}
	return false;
}

/* The stack of a failure a framework reported from Python: the thread's
 * Python frames without the tracer's own (its native frames are the
 * interpreter's and ctypes'), and its open region tags. */
static uint32_t capture_python(void)
{
	uintptr_t words[GMT_STACK_MAX_DEPTH + GMT_STACK_MAX_TAGS];
	struct gmt__py_capture_info pyinfo = { 0 };
	int n = 0, first = 0;

	if (gmt__core.depth == 0 && gmt__tls.ntags == 0)
		return 0;
	if (gmt__core.depth > 0 && gmt__core.python)
		n = gmt__py_capture(words, GMT_STACK_MAX_DEPTH, &pyinfo);
	while (first < n && own_python(words[first]))
		first++;
	if (n - first > gmt__core.depth)
		n = first + gmt__core.depth;
	for (int t = 0; t < gmt__tls.ntags && t < GMT_STACK_MAX_TAGS; t++)
		words[n++] = GMT_WORD_TAG | gmt__tls.tags[t];
	return gmt__stack_intern_at(words + first, n - first, gmt__modules_epoch());
}

/* Stamps and pushes one event; returns its sequence number, 0 when not
 * recorded. */
static uint64_t record(const struct gmt__call *c, struct gmt__event *ev)
{
	struct gmt__ring *r;

	if (!c->record)
		return 0;
	r = thread_ring();
	if (r == NULL) {
		STAT_ADD(untracked_calls, 1);
		return 0;
	}
	/* Exactly one thread starts the consumer (again in the child of a fork). */
	if (!atomic_load_explicit(&gmt__core.consumer_running, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&gmt__core.consumer_running, true, memory_order_relaxed))
		gmt__consumer_start();
	/* Under the gate, the process's first event: it has memory to judge. */
	if (gmt__core.opt->gate && !atomic_load_explicit(&gmt__core.gate_marked, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&gmt__core.gate_marked, true, memory_order_relaxed))
		gmt__gate_mark(true);
	if (ev->op == GMT_OP_ALLOC || ev->op == GMT_OP_MAP || ev->op == GMT_OP_RESERVE)
		ev->stack = capture();
	ev->time_ns = gmt__now_ns(CLOCK_REALTIME);
	ev->tid = gmt__tls.tid;
	ev->api = (uint16_t)c->api;
	/* Room first, then the number: a number once taken is pushed at once, so
	 * the consumer never waits for a thread that waits for the consumer. */
	if (!gmt__ring_has_room(r))
		make_room(r);
	ev->seq = atomic_fetch_add_explicit(&gmt__core.next_seq, 1, memory_order_relaxed);
	if (ev->op == GMT_OP_MAP)
		ev->span = ev->seq - c->began < UINT32_MAX ? (uint32_t)(ev->seq - c->began) : UINT32_MAX;
	gmt__ring_push(r, ev);
	return ev->seq;
}

/* The calling thread's current context (into *ctx, 0 when none) and its
 * device. One driver call in the common case: the device is asked only when
 * the context changed or some context was torn down since (acquire pairs with
 * the release in context_gone: a thread that sees the new generation does not
 * trust a device cached before it). */
int16_t gmt__current_device(uintptr_t *ctx)
{
	uint64_t gen = atomic_load_explicit(&gmt__core.ctx_generation, memory_order_acquire);
	CUcontext c = NULL;
	int d;

	*ctx = 0;
	if (gmt__driver_ctx_current(&c) != CUDA_SUCCESS || c == NULL) {
		STAT_ADD(device_unknown, 1);
		return 0;
	}
	*ctx = (uintptr_t)c;
	if (c == gmt__tls.ctx && gen == gmt__tls.ctx_generation)
		return gmt__tls.ctx_device;
	if (gmt__driver_ctx_device(&d) != CUDA_SUCCESS) {
		STAT_ADD(device_unknown, 1);
		return 0;
	}
	gmt__tls.ctx = c;
	gmt__tls.ctx_generation = gen;
	gmt__tls.ctx_device = (int16_t)d;
	return (int16_t)d;
}

void gmt__call_enter(struct gmt__call *c, enum gmt__api api)
{
	int saved = errno;

	c->api = api;
	c->on_stream = false;
	c->record = gmt__tls.depth++ == 0 && gmt__ready();
	/* Where this call's window begins in the global order (freed_in_flight). */
	c->began = c->record ? atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed) : 0;
	errno = saved;
}

void gmt__call_leave(struct gmt__call *c)
{
	(void)c;
	gmt__tls.depth--;
}

void gmt__on_alloc(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr, uint64_t size, int device)
{
	struct gmt__event ev = { .op = GMT_OP_ALLOC, .kind = (uint8_t)kind, .addr = addr, .size = size };
	int saved = errno;

	if (c->record) {
		uintptr_t ctx;
		int16_t current = gmt__current_device(&ctx);

		ev.device = device == GMT_DEVICE_CURRENT ? current : (int16_t)device;
		/* A VMM handle is no context's; everything else goes with the
		 * context it was allocated in. */
		ev.extra = kind == GMT_KIND_VMM ? 0 : ctx;
		ev.link = c->began;
		if (c->on_stream)
			ev.stream = gmt__stream_id(c->stream);
		record(c, &ev);
	}
	errno = saved;
}

static uint64_t record_op(const struct gmt__call *c, enum gmt__op op, enum gmt__kind kind, uint64_t addr,
			  uint64_t size, uint64_t link, uint64_t extra)
{
	struct gmt__event ev = { .op = (uint8_t)op, .kind = (uint8_t)kind, .addr = addr, .size = size,
				 .link = link, .extra = extra, .device = -1 };
	int saved = errno;
	uint64_t seq = record(c, &ev);

	errno = saved;
	return seq;
}

/* The token of a free whose record waits for its result (gmt__tls.free_*). */
#define FREE_PENDING UINT64_MAX

/* Notes a free-like call for gmt__on_result, which records it when the
 * driver honoured it. */
static uint64_t pend(const struct gmt__call *c, enum gmt__op op, enum gmt__kind kind, uint64_t addr, uint64_t size)
{
	if (!c->record)
		return 0;
	gmt__tls.free_op = (uint8_t)op;
	gmt__tls.free_kind = (uint8_t)kind;
	gmt__tls.free_addr = addr;
	gmt__tls.free_size = size;
	return FREE_PENDING;
}

uint64_t gmt__on_free(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr)
{
	/* A free of NULL frees nothing: cudaFree(0), the idiom that creates a
	 * context, reaches the driver as cuMemFree_v2(0). */
	if (addr == 0)
		return 0;
	return pend(c, GMT_OP_FREE, kind, addr, 0);
}

void gmt__on_retain(const struct gmt__call *c, uint64_t handle)
{
	record_op(c, GMT_OP_RETAIN, GMT_KIND_VMM, handle, 0, 0, 0);
}

uint64_t gmt__on_release(const struct gmt__call *c, uint64_t handle)
{
	return pend(c, GMT_OP_RELEASE, GMT_KIND_VMM, handle, 0);
}

void gmt__on_map(const struct gmt__call *c, uint64_t addr, uint64_t size, uint64_t handle, uint64_t offset)
{
	/* Its window goes in `span` (record). */
	record_op(c, GMT_OP_MAP, GMT_KIND_VMM, addr, size, handle, offset);
}

uint64_t gmt__on_unmap(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	return pend(c, GMT_OP_UNMAP, GMT_KIND_VMM, addr, size);
}

void gmt__on_reserve(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	record_op(c, GMT_OP_RESERVE, GMT_KIND_VMM, addr, size, c->began, 0);
}

uint64_t gmt__on_unreserve(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	return pend(c, GMT_OP_UNRESERVE, GMT_KIND_VMM, addr, size);
}

void gmt__on_primary_retained(const struct gmt__call *c, int device, CUcontext ctx)
{
	(void)c;
	/* Relaxed: read back only by this library's own teardown hooks. */
	if (device >= 0 && device < GMT_MAX_DEVICES)
		atomic_store_explicit(&gmt__core.primary_ctx[device], (uintptr_t)ctx, memory_order_relaxed);
}

static void context_gone(const struct gmt__call *c, uintptr_t ctx, int device, bool primary)
{
	struct gmt__event ev = { .op = GMT_OP_CONTEXT_GONE, .kind = GMT_KIND_DEVICE, .addr = ctx,
				 .device = (int16_t)device, .link = primary };
	int saved = errno;

	/* Release pairs with the acquire in current_device: cached devices of
	 * contexts are no longer trusted (a new context may reuse the address). */
	atomic_fetch_add_explicit(&gmt__core.ctx_generation, 1, memory_order_release);
	record(c, &ev);
	errno = saved;
}

void gmt__on_context_destroyed(const struct gmt__call *c, CUcontext ctx)
{
	context_gone(c, (uintptr_t)ctx, -1, false);
}

void gmt__on_primary_gone(const struct gmt__call *c, int device)
{
	uintptr_t ctx = device >= 0 && device < GMT_MAX_DEVICES
				? atomic_load_explicit(&gmt__core.primary_ctx[device], memory_order_relaxed)
				: 0;

	context_gone(c, ctx, device, true);
}

void gmt__on_result(const struct gmt__call *c, uint64_t token, CUresult r)
{
	/* NOTE: at teardown the driver answers CUDA_ERROR_DEINITIALIZED to frees of
	 * memory it has already released with the context: a release, not an
	 * error (docs/tracing.md: counted once). */
	bool done = r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED;

	if (token != FREE_PENDING)
		return;
	/* The call's window begins with it (state/apply.c: debts, counts). */
	if (done)
		record_op(c, (enum gmt__op)gmt__tls.free_op, (enum gmt__kind)gmt__tls.free_kind, gmt__tls.free_addr,
			  gmt__tls.free_size, c->began, 0);
	else
		STAT_ADD(failed_frees, 1);
}

void gmt__on_failure(const struct gmt__call *c, CUresult r, enum gmt__kind kind, uint64_t size, int device)
{
	struct gmt__snapshot_request req;
	struct gmt__device_state state;
	uint32_t stack;
	int saved = errno, d;
	bool asked;

	if (!c->record || r != CUDA_ERROR_OUT_OF_MEMORY)
		return;
	/* A thread whose first call fails has recorded nothing yet (its id is
	 * learnt with its ring): the failure names it all the same. */
	if (gmt__tls.tid == 0)
		gmt__tls.tid = (uint32_t)syscall(SYS_gettid);
	if (device == GMT_DEVICE_CURRENT) {
		uintptr_t ctx;

		d = gmt__current_device(&ctx);
	} else {
		d = device;
	}
	stack = capture();
	/* The device's state now, before the lock: loading NVML takes the
	 * loader's lock (device.h). Not during teardown: the driver may be gone. */
	asked = (gmt__core.opt->snapshot_on & GMT_TRIGGER_OOM) && device != GMT_DEVICE_HOST &&
		!atomic_load_explicit(&gmt__core.stopping, memory_order_relaxed);
	if (asked)
		gmt__device_query(d, &state);
	req = (struct gmt__snapshot_request){
		.api = gmt__api_names[c->api], .size = size, .device = d, .result = (int)r,
		.kind = kind, .stack = stack,
	};
	gmt__snapshot_oom(&req, asked ? &state : NULL, (uint16_t)c->api, gmt__tls.tid);
	errno = saved;
}

void gmt__on_framework_oom(char *json, uint16_t label, uint64_t size, int device)
{
	struct gmt__snapshot_request req;
	struct gmt__device_state state;
	int saved = errno;
	bool asked = false;

	if (gmt__tls.tid == 0)
		gmt__tls.tid = (uint32_t)syscall(SYS_gettid);
	if (device == GMT_DEVICE_CURRENT) {
		uintptr_t ctx;

		device = gmt__current_device(&ctx);
	}
	req = (struct gmt__snapshot_request){
		.api = gmt__labels[label], .by_framework = true, .size = size, .device = device,
		.result = CUDA_ERROR_OUT_OF_MEMORY, .kind = GMT_KIND_DEVICE,
	};
	/* Its own failure only: the state of one a driver failure awaits is
	 * that failure's. */
	if (!gmt__episode_awaits()) {
		req.stack = capture_python();
		asked = (gmt__core.opt->snapshot_on & GMT_TRIGGER_OOM) &&
			!atomic_load_explicit(&gmt__core.stopping, memory_order_relaxed);
		if (asked)
			gmt__device_query(device, &state);
	}
	gmt__episode_reported(json, &req, asked ? &state : NULL, label, gmt__tls.tid);
	errno = saved;
}
