/* The tracking core: lazy initialisation and the process lifecycle (fork,
 * exit), the record path from a hook into the calling thread's ring, the
 * consumer that applies events to the live table in global order, and the
 * snapshots. Everything the hooks report arrives here (core.h). */
#define _GNU_SOURCE
#include "tracer/core.h"

#include "intercept/device.h"
#include "state/history.h"
#include "util/log.h"
#include "record/modules.h"
#include "tracer/options.h"
#include "record/pystack.h"
#include "record/ring.h"
#include "report/snapshot.h"
#include "record/stacks.h"
#include "analyze/suppress.h"
#include "state/table.h"
#include "record/tags.h"
#include "record/unwind.h"

#include <dlfcn.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <errno.h>
#include <link.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GMT_MAX_DEVICES 64
/* How long the consumer waits for an event whose sequence number was taken but
 * which is not in its ring yet (a thread preempted between the two, or killed
 * there) before it gives up on the order of that one event. */
#define GMT_GAP_TIMEOUT_NS (2 * 1000000000ull)
/* Snapshot rate limits: an out-of-memory result starts a new episode (a new
 * snapshot) only after an allocation succeeded since the last one and this
 * long has passed; peak snapshots are at least this far apart. */
#define GMT_OOM_EPISODE_NS 1000000000ull
#define GMT_PEAK_INTERVAL_NS 1000000000ull
#define GMT_UNDO_SLOTS 1024
#define GMT_UNDO_ENTRIES 4
/* The background thread's sleep when a pass found nothing, paced by what the
 * last sleep let gather: halved when it gathered more than a quarter of a
 * ring (or the doorbell had to wake the thread), doubled when less than a
 * sixteenth, within these bounds. It wakes on its own timer, which costs the
 * producers nothing, before a flooding thread's ring is half full and rings
 * the doorbell (ring.h): that wake-up is a system call on the producer's time,
 * a costly one in some virtual machines (34 us measured on the development
 * VM, docs/performance.md), so it stays the backstop. */
#define GMT_IDLE_MIN_NS 20000ull
#define GMT_IDLE_START_NS 1000000ull
#define GMT_IDLE_MAX_NS 16000000ull

/* The tracer's own counters: X(name, meaning). One list for the struct, the
 * snapshot's "stats" and the verbose report. */
#define GMT_STATS(X)                                                                          \
	X(ring_full, "times a thread found its ring full")                                    \
	X(producer_drains, "times a thread with a full ring applied the events itself")       \
	X(consumer_events, "events the background thread applied (the rest: full rings, snapshots)") \
	X(consumer_wakeups, "times the sleeping background thread was woken (a ring half full, a signal)") \
	X(gap_waits, "times the consumer waited for an event in flight")                      \
	X(gaps_skipped, "events given up on after waiting (their order may be lost)")         \
	X(late_events, "events applied after their place in the order was given up")          \
	X(unknown_frees, "frees, releases and unmaps of nothing the tracer knew")             \
	X(replaced, "allocations at an address already live (its free recorded later or unseen)") \
	X(debts_dropped, "late frees forgotten: too many open at one address set")             \
	X(undone, "records undone because the real call failed")                              \
	X(undo_lost, "failed calls whose record could no longer be undone")                   \
	X(failed_frees, "frees the driver refused (not recorded: nothing was freed)")           \
	X(untracked_calls, "intercepted calls not recorded (tracer off or out of memory)")    \
	X(device_unknown, "allocations whose device could not be asked")                      \
	X(python_stacks, "allocations recorded with Python frames")                           \
	X(python_stacks_nogil, "of those, read from memory on a thread without the GIL")      \
	X(python_frames_dropped, "Python frames left out: not readable consistently without the GIL") \
	X(oom_suppressed, "out-of-memory results in an episode already written")             \
	X(snapshots, "snapshots written")                                                     \
	X(snapshot_errors, "snapshots that could not be written")

struct gmt__stats {
#define GMT_X_STAT(name, help) _Atomic uint64_t name;
	GMT_STATS(GMT_X_STAT)
#undef GMT_X_STAT
};

/* Relaxed: statistics publish nothing; they are read for snapshots. */
#define STAT_ADD(name, n) atomic_fetch_add_explicit(&core.stats.name, (n), memory_order_relaxed)

enum { GMT_UNINIT, GMT_INITIALISING, GMT_READY, GMT_OFF };

/* What a removal did, so that a failed real call can put it back. */
struct gmt__undo {
	uint64_t seq;
	int nremoved, ndec;
	struct gmt__entry removed[GMT_UNDO_ENTRIES];
	uint64_t dec_handle[GMT_UNDO_ENTRIES]; /* handles whose refs (RELEASE) or maps (UNMAP) dropped */
	uint8_t dec_op[GMT_UNDO_ENTRIES];
};

static struct {
	_Atomic int state;
	const struct gmt__options *opt;
	int depth; /* stack depth in frames, 0: no stacks */
	bool python; /* Python frames wanted (found or not yet) */
	pthread_key_t ring_key;
	_Atomic bool consumer_running;
	_Atomic bool gate_marked; /* gate_mark(true) done in this process */
	uintptr_t text_start, text_end; /* the tracer's own code (no stack frames from it) */
	/* The most frames of the tracer's own seen at the top of a captured
	 * stack (the walk's, capture's, record's, the gmt__on_* caller's, the
	 * hook's): each capture walks this many more than it keeps. Relaxed: a
	 * hint; capture() re-walks when it finds more. */
	_Atomic int own_frames;
	/* Each device's primary context, learned from cuDevicePrimaryCtxRetain, and
	 * a counter of context teardowns that invalidates every thread's cached
	 * (context → device). Relaxed/acq-rel as commented where used. */
	_Atomic uintptr_t primary_ctx[GMT_MAX_DEVICES];
	_Atomic uint64_t ctx_generation;
	_Atomic bool stopping;
	/* SIGUSR2 arrived: the handler sets it, the consumer writes the
	 * snapshot. Lock-free (asserted in init), as a handler needs. */
	_Atomic bool signal_pending;
	struct sigaction signal_old; /* the program's SIGUSR2 action before ours */
	/* Next sequence number to hand out, on a line of its own: every event
	 * writes it, and nothing else should move with it. Relaxed fetch_add:
	 * uniqueness and the modification order are all the order relies on (see
	 * drain_until); events recorded = next_seq - first_seq. */
	_Alignas(64) _Atomic uint64_t next_seq;
	_Alignas(64) struct gmt__stats stats;
	uint64_t first_seq; /* the first number of this process (a fork child's differs) */

	/* Everything below is the consumer's, guarded by `lock`. */
	_Alignas(64) pthread_mutex_t lock;
	uint64_t expected; /* the next seq to apply */
	struct gmt__table *table;
	struct gmt__history hist;
	struct gmt__hist_cause cause; /* of the changes being applied */
	bool have_hist;
	uint64_t live_bytes, live_count, peak_bytes, total_allocs, total_frees;
	uint64_t device_live[GMT_MAX_DEVICES + 1]; /* [0]: host, [d + 1]: device d */
	uint64_t snapshot_seq;
	/* Out-of-memory episodes: when the last oom snapshot was written, and
	 * total_allocs then. */
	bool oom_written;
	uint64_t oom_failures, oom_last_ns, oom_last_allocs;
	/* Peak snapshots: armed (by the consumer, once the interval has passed)
	 * means a new high-water mark past peak_next_bytes is due; the consumer
	 * stops applying events there (stop_at_peak) and writes it. */
	bool peak_armed, peak_due, stop_at_peak;
	uint64_t peak_next_bytes, peak_next_ns;
	struct gmt__undo undo[GMT_UNDO_SLOTS];
	struct gmt__snapshot_process process; /* rank and friends from init; host and ppid per snapshot */
	/* The leak check: the status the program passed to exit() (on_exit;
	 * -1 until then), the suppression rules, and why the file's were refused. */
	_Atomic int exit_status;
	_Atomic uintptr_t consumer_stack_lo, consumer_stack_hi; /* its locals hold addresses */
	struct gmt__supp supp;
	char supp_error[512];
} core = {
	.exit_status = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_seq = 1,
	.first_seq = 1,
	.expected = 1,
};

struct gmt__thread {
	int depth;           /* intercepted calls on the stack of this thread */
	bool initialising;   /* this thread runs init(): pass everything through */
	uint32_t tid;
	struct gmt__ring *ring;
	/* The device of the last current context seen, valid while no context was
	 * torn down since (ctx_generation). */
	CUcontext ctx;
	uint64_t ctx_generation;
	int16_t ctx_device;
	/* The region tags open on this thread (gmt_tag_push), outermost first;
	 * ntags counts deeper ones too, which are not recorded. */
	int ntags;
	uint32_t tags[GMT_STACK_MAX_TAGS];
	/* A free between gmt__on_free and gmt__on_result. */
	uint64_t free_addr;
	uint8_t free_kind;
};

/* NOTE: initial-exec TLS needs no allocation on first access; the library is
 * always loaded at start-up (LD_PRELOAD), where static TLS space is reserved. */
static _Thread_local struct gmt__thread tls __attribute__((tls_model("initial-exec")));

static uint64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- the consumer: events → live table ------------------------------------------- */

static bool counts_as_memory(enum gmt__space space)
{
	return space == GMT_SPACE_MEMORY || space == GMT_SPACE_ARRAY || space == GMT_SPACE_HANDLE;
}

static uint64_t *device_slot(int device)
{
	return device >= -1 && device < GMT_MAX_DEVICES ? &core.device_live[device + 1] : NULL;
}

static void account(const struct gmt__entry *e, bool add)
{
	uint64_t *slot;

	if (!counts_as_memory(e->space))
		return;
	slot = device_slot(e->device);
	if (core.have_hist)
		gmt__history_change(&core.hist, e, add, &core.cause);
	if (add) {
		core.live_bytes += e->size;
		core.live_count++;
		if (slot != NULL)
			*slot += e->size;
		if (core.live_bytes > core.peak_bytes) {
			core.peak_bytes = core.live_bytes;
			if (core.peak_armed && core.live_bytes >= core.peak_next_bytes)
				core.peak_due = true;
		}
	} else {
		core.live_bytes -= e->size;
		core.live_count--;
		if (slot != NULL)
			*slot -= e->size;
	}
}

static struct gmt__undo *undo_begin(uint64_t seq)
{
	struct gmt__undo *u = &core.undo[seq % GMT_UNDO_SLOTS];

	u->seq = seq;
	u->nremoved = u->ndec = 0;
	return u;
}

static void undo_removed(struct gmt__undo *u, const struct gmt__entry *e)
{
	if (u->nremoved < GMT_UNDO_ENTRIES)
		u->removed[u->nremoved++] = *e;
	else
		u->seq = 0; /* too much to put back: a later undo reports it lost */
}

static void undo_dec(struct gmt__undo *u, uint64_t handle, uint8_t op)
{
	if (u->ndec < GMT_UNDO_ENTRIES) {
		u->dec_handle[u->ndec] = handle;
		u->dec_op[u->ndec++] = op;
	} else {
		u->seq = 0;
	}
}

/* The bookkeeping of an entry that left the table. */
static void removed(const struct gmt__entry *e, struct gmt__undo *u)
{
	account(e, false);
	if (counts_as_memory(e->space))
		core.total_frees++;
	if (u != NULL)
		undo_removed(u, e);
}

static void remove_entry(struct gmt__entry *e, struct gmt__undo *u)
{
	struct gmt__entry copy = *e;

	gmt__table_remove(core.table, copy.space, copy.addr, NULL);
	removed(&copy, u);
}

/* Removes (space, addr) in one probe; false when it was not there. */
static bool remove_key(enum gmt__space space, uint64_t addr, struct gmt__undo *u)
{
	struct gmt__entry e;

	if (!gmt__table_remove(core.table, space, addr, &e))
		return false;
	removed(&e, u);
	return true;
}

/* A handle with no reference and no mapping left holds no memory. */
static void handle_settle(struct gmt__entry *h, struct gmt__undo *u)
{
	if (h->refs == 0 && h->aux == 0)
		remove_entry(h, u);
}

/* cuMemUnmap: the range is made of whole mappings, each dropping one mapping of
 * its handle. */
static void apply_unmap(const struct gmt__event *ev, struct gmt__undo *u)
{
	uint64_t at = ev->addr, end = ev->addr + ev->size;

	while (at < end) {
		struct gmt__entry *m = gmt__table_find(core.table, GMT_SPACE_MAPPING, at);
		struct gmt__entry *h;
		uint64_t handle;

		if (m == NULL) {
			STAT_ADD(unknown_frees, 1);
			return;
		}
		handle = m->link;
		at += m->size;
		remove_entry(m, u);
		h = gmt__table_find(core.table, GMT_SPACE_HANDLE, handle);
		if (h != NULL && h->aux > 0) {
			h->aux--;
			undo_dec(u, handle, GMT_OP_UNMAP);
			handle_settle(h, u);
		}
	}
}

struct gone {
	uintptr_t ctx;
	int device;
	bool primary;
	struct gmt__entry *v;
	size_t n, cap;
	bool failed;
};

static int collect_gone(void *arg, const struct gmt__entry *e)
{
	struct gone *g = arg;

	if (e->space != GMT_SPACE_MEMORY && e->space != GMT_SPACE_ARRAY)
		return 0;
	if (!((g->ctx != 0 && e->aux == g->ctx) ||
	      (g->primary && e->kind == GMT_KIND_ASYNC && e->device == g->device)))
		return 0;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 256;
		struct gmt__entry *v = realloc(g->v, cap * sizeof(*v));

		if (v == NULL) {
			g->failed = true;
			return 1;
		}
		g->v = v;
		g->cap = cap;
	}
	g->v[g->n++] = *e;
	return 0;
}

/* A context went away: the driver freed everything allocated in it, and with a
 * device's primary context its stream-ordered memory too. VMM handles and
 * reservations are not a context's and stay. */
static void apply_context_gone(uintptr_t ctx, int device, bool primary)
{
	struct gone g = { .ctx = ctx, .device = device, .primary = primary };

	gmt__table_each(core.table, collect_gone, &g);
	if (g.failed) {
		static bool once;
		gmt__warn_once(&once, "out of memory while dropping a destroyed context's allocations");
	}
	for (size_t i = 0; i < g.n; i++)
		remove_key((enum gmt__space)g.v[i].space, g.v[i].addr, NULL);
	free(g.v);
}

/* Frees are recorded after their real call, and only when the driver
 * honoured it: two frees of one address racing (a program's double free)
 * then record exactly the one that freed. Every free and allocation record
 * carries its window's start (link: next_seq when its call began), and two
 * orders the records can invert are put right here:
 *
 * - An allocation recorded at an address the table still holds: the driver
 *   never gives out a live address, so a free of the old entry ran and has
 *   not recorded yet. The old entry leaves now (freed at the allocation's
 *   number), and the address owes one free (a debt, with the allocation's
 *   number). A free of the address whose call began no later than that
 *   number pays the debt and changes nothing else — every free that made
 *   room for the allocation began before it recorded, and a free begun
 *   after it cannot pay. The debt outlives the entry: the new allocation
 *   may be freed, and the address given out again, before the late free
 *   records. NOTE: a stale free that really freed the new entry, begun
 *   before its record, pays the debt, and the late free of the old one then
 *   removes the new entry: the same live set, the frees named the other way
 *   round.
 * - A free the driver honoured of an address the table does not hold freed
 *   either memory the tracer never saw, or an allocation whose call had
 *   returned the address but not yet recorded it — a stale free racing
 *   another thread's allocation of the same address. The second is told by
 *   the allocation's window: a free of its address that found nothing,
 *   recorded inside [link, seq), came after the driver gave the address out.
 *   NOTE: a free of memory the tracer never saw, overlapping in time a new
 *   allocation of the same address, would be taken for the second: a rarer
 *   conjunction than either. The table is direct-mapped: a slot lost to a
 *   collision loses a kill, never makes a wrong one (the address is
 *   compared). */

/* The debts: 4-way sets by address. Open debts are few (at most one per
 * free in flight, plus frees the tracer never saw), so a full set gives up
 * its oldest (stats.debts_dropped): that late free, if it still comes,
 * removes what then lives at the address. */
#define DEBT_SETS 512
#define DEBT_WAYS 4
static struct gmt__debt {
	uint64_t addr, seq;
	uint32_t count;
	uint8_t space;
} debts[DEBT_SETS][DEBT_WAYS];
static size_t debts_open; /* ways in use: none, nothing to look up */

static struct gmt__debt *debt_set(uint64_t addr)
{
	return debts[(size_t)((addr >> 6) * 0x9e3779b97f4a7c15ull >> 55) % DEBT_SETS];
}

static void debt_add(enum gmt__space space, uint64_t addr, uint64_t seq)
{
	struct gmt__debt *set = debt_set(addr), *slot = NULL;

	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count > 0 && d->addr == addr && d->space == (uint8_t)space) {
			/* Paid by frees begun before the latest allocation. */
			d->count++;
			d->seq = seq;
			return;
		}
		if (slot == NULL || (slot->count > 0 && (d->count == 0 || d->seq < slot->seq)))
			slot = d;
	}
	if (slot->count > 0)
		STAT_ADD(debts_dropped, 1);
	else
		debts_open++;
	*slot = (struct gmt__debt){ .addr = addr, .seq = seq, .count = 1, .space = (uint8_t)space };
}

static bool debt_pay(enum gmt__space space, uint64_t addr, uint64_t began)
{
	struct gmt__debt *set;

	if (debts_open == 0 || began == 0)
		return false;
	set = debt_set(addr);
	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count == 0 || d->addr != addr || d->space != (uint8_t)space || began > d->seq)
			continue;
		if (--d->count == 0)
			debts_open--;
		return true;
	}
	return false;
}

#define UNKNOWN_FREES 1024
static struct {
	uint64_t addr, seq;
	uint8_t space;
} unknown_frees_seen[UNKNOWN_FREES];

static size_t unknown_slot(uint64_t addr)
{
	return (size_t)((addr >> 6) * 0x9e3779b97f4a7c15ull >> 54) % UNKNOWN_FREES;
}

static bool unknown_any; /* some slot was ever filled: else nothing to look up */

static void unknown_free(enum gmt__space space, uint64_t addr, uint64_t seq)
{
	size_t i = unknown_slot(addr);

	unknown_any = true;
	unknown_frees_seen[i].addr = addr;
	unknown_frees_seen[i].seq = seq;
	unknown_frees_seen[i].space = (uint8_t)space;
}

static bool freed_in_flight(enum gmt__space space, uint64_t addr, uint64_t began, uint64_t seq)
{
	size_t i = unknown_slot(addr);

	if (!unknown_any || began == 0 || unknown_frees_seen[i].addr != addr || unknown_frees_seen[i].space != (uint8_t)space ||
	    unknown_frees_seen[i].seq < began || unknown_frees_seen[i].seq > seq)
		return false;
	unknown_frees_seen[i].addr = 0;
	return true;
}

/* Inserts *e. An entry already at its key is replaced: with debt_seq (an
 * allocation's number) it was freed by a free not yet recorded, which the
 * address now owes (debts above); without, it was lost track of. */
static bool insert(const struct gmt__entry *e, uint64_t debt_seq)
{
	size_t before = gmt__table_count(core.table);
	struct gmt__entry old;

	if (gmt__table_insert(core.table, e, &old) == NULL) {
		static bool once;
		gmt__warn_once(&once, "out of memory for the live table; some allocations are not tracked");
		return false;
	}
	/* One probe: the count tells a replaced entry from a new one. */
	if (gmt__table_count(core.table) == before) {
		STAT_ADD(replaced, 1);
		if (debt_seq != 0) {
			removed(&old, NULL);
			debt_add((enum gmt__space)e->space, e->addr, debt_seq);
		} else {
			account(&old, false);
		}
	}
	account(e, true);
	return true;
}

/* Puts back what the removal with sequence number `seq` took away: its real
 * call failed, so nothing was freed. */
static void apply_undo(uint64_t seq)
{
	struct gmt__undo *u = &core.undo[seq % GMT_UNDO_SLOTS];

	if (u->seq != seq) {
		STAT_ADD(undo_lost, 1);
		return;
	}
	for (int i = 0; i < u->nremoved; i++) {
		if (gmt__table_find(core.table, u->removed[i].space, u->removed[i].addr) == NULL &&
		    insert(&u->removed[i], 0) && counts_as_memory(u->removed[i].space))
			core.total_frees--;
	}
	for (int i = 0; i < u->ndec; i++) {
		struct gmt__entry *h = gmt__table_find(core.table, GMT_SPACE_HANDLE, u->dec_handle[i]);

		if (h == NULL)
			continue;
		if (u->dec_op[i] == GMT_OP_RELEASE)
			h->refs++;
		else
			h->aux++;
	}
	if (u->nremoved > 0 || u->ndec > 0)
		STAT_ADD(undone, 1);
	u->seq = 0;
}

static void apply(const struct gmt__event *ev)
{
	enum gmt__space space = gmt__kind_space((enum gmt__kind)ev->kind);
	struct gmt__entry e = {
		.addr = ev->addr, .size = ev->size, .time_ns = ev->time_ns, .link = ev->seq,
		.stack = ev->stack, .tid = ev->tid, .api = ev->api, .kind = ev->kind,
		.space = (uint8_t)space, .device = ev->device,
	};
	struct gmt__entry *found;
	struct gmt__undo *u;

	core.cause = (struct gmt__hist_cause){
		.seq = ev->seq, .time_ns = ev->time_ns, .tid = ev->tid, .api = ev->api,
		.undo = ev->op == GMT_OP_FREE_FAILED,
	};
	if (core.have_hist)
		gmt__history_tick(&core.hist, ev->time_ns);
	switch ((enum gmt__op)ev->op) {
	case GMT_OP_ALLOC:
		if (ev->kind == GMT_KIND_VMM)
			e.refs = 1;
		else
			e.aux = ev->extra; /* the context it belongs to */
		/* A handle replaced was lost track of; an address replaced
		 * owes the free that made room (debts, "Frees are recorded"). */
		if (insert(&e, ev->kind == GMT_KIND_VMM ? 0 : ev->seq) && counts_as_memory(space))
			core.total_allocs++;
		/* Freed already: a free that found nothing, recorded while this
		 * allocation's call was under way, freed it (freed_in_flight). */
		if (freed_in_flight(space, ev->addr, ev->link, ev->seq))
			remove_key(space, ev->addr, NULL);
		break;
	case GMT_OP_FREE:
		/* Recorded after the driver honoured it: nothing to undo. A
		 * free that made room for a later allocation was applied then. */
		if (debt_pay(space, ev->addr, ev->link))
			break;
		if (!remove_key(space, ev->addr, NULL)) {
			STAT_ADD(unknown_frees, 1);
			unknown_free(space, ev->addr, ev->seq);
		}
		break;
	case GMT_OP_FREE_FAILED:
		apply_undo(ev->link);
		break;
	case GMT_OP_RETAIN:
		found = gmt__table_find(core.table, GMT_SPACE_HANDLE, ev->addr);
		if (found == NULL)
			STAT_ADD(unknown_frees, 1);
		else
			found->refs++;
		break;
	case GMT_OP_RELEASE:
		u = undo_begin(ev->seq);
		found = gmt__table_find(core.table, GMT_SPACE_HANDLE, ev->addr);
		if (found == NULL || found->refs == 0) {
			STAT_ADD(unknown_frees, 1);
			break;
		}
		found->refs--;
		undo_dec(u, ev->addr, GMT_OP_RELEASE);
		handle_settle(found, u);
		break;
	case GMT_OP_MAP:
		e.space = GMT_SPACE_MAPPING;
		e.link = ev->link;
		e.aux = ev->extra;
		found = gmt__table_find(core.table, GMT_SPACE_HANDLE, ev->link);
		if (found != NULL) {
			found->aux++;
			e.device = found->device;
		}
		insert(&e, 0);
		break;
	case GMT_OP_UNMAP:
		apply_unmap(ev, undo_begin(ev->seq));
		break;
	case GMT_OP_RESERVE:
		e.space = GMT_SPACE_RESERVATION;
		insert(&e, 0);
		break;
	case GMT_OP_CONTEXT_GONE:
		apply_context_gone(ev->addr, ev->device, ev->link != 0);
		break;
	case GMT_OP_UNRESERVE:
		if (!remove_key(GMT_SPACE_RESERVATION, ev->addr, undo_begin(ev->seq)))
			STAT_ADD(unknown_frees, 1);
		break;
	case GMT_OP_COUNT:
		break;
	}
}

/* Applies, in sequence order, every event with a sequence number below
 * `target`. Lock held. Returns how many were applied.
 *
 * Why the order is exact: a thread takes its number (one fetch_add on
 * next_seq) only once its ring has room, and pushes right after, so every
 * number below `target` is in some ring or about to be. When the event with
 * the expected number is not visible yet, its thread is between those two
 * steps: wait for it. A free's number is taken after its real call, so an
 * address freed and given out again can be numbered in either order; apply
 * puts that right (owed frees, "Frees are recorded after"). */
static uint64_t drain_until(uint64_t target)
{
	uint64_t applied = 0, wait_start = 0;

	while ((int64_t)(target - core.expected) > 0 && !(core.stop_at_peak && core.peak_due)) {
		struct gmt__ring *best = NULL;
		const struct gmt__event *ev;
		uint64_t best_seq = UINT64_MAX;

		for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
			ev = gmt__ring_peek(r);
			if (ev != NULL && ev->seq < best_seq) {
				best = r;
				best_seq = ev->seq;
			}
		}
		if (best != NULL && best_seq <= core.expected) {
			if (best_seq < core.expected)
				STAT_ADD(late_events, 1);
			else
				core.expected++;
			apply(gmt__ring_peek(best));
			gmt__ring_pop(best);
			applied++;
			/* At a due peak the consumer stops (the loop conditions)
			 * and writes the peak snapshot with the table as it is. */
			/* A thread's events come in runs: follow this ring while it
			 * holds the next number. */
			while (!(core.stop_at_peak && core.peak_due) && (ev = gmt__ring_peek(best)) != NULL &&
			       ev->seq == core.expected) {
				apply(ev);
				gmt__ring_pop(best);
				core.expected++;
				applied++;
			}
			wait_start = 0;
			continue;
		}
		if (wait_start == 0) {
			wait_start = now_ns(CLOCK_MONOTONIC);
			STAT_ADD(gap_waits, 1);
		} else if (now_ns(CLOCK_MONOTONIC) - wait_start > GMT_GAP_TIMEOUT_NS) {
			static bool once;
			gmt__warn_once(&once, "an event never reached its ring; going on without it");
			STAT_ADD(gaps_skipped, 1);
			core.expected = best != NULL ? best_seq : target;
			wait_start = 0;
			continue;
		}
		sched_yield();
	}
	return applied;
}

/* The background consumer's pass: applies what the rings hold, in order, and
 * returns when they are empty — without reading next_seq, which every event
 * writes (reading it would pull that line away from the producers each time).
 * A ring whose head is past the expected number while none holds it means the
 * event is in flight: drain_until waits for it. Lock held. */
static uint64_t drain_visible(void)
{
	uint64_t applied = 0;

	for (;;) {
		uint64_t lowest = UINT64_MAX;

		for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
			const struct gmt__event *ev = gmt__ring_peek(r);

			if (ev != NULL && ev->seq < lowest)
				lowest = ev->seq;
		}
		if (lowest == UINT64_MAX || (core.stop_at_peak && core.peak_due))
			return applied;
		/* Everything below `lowest` + 1 has its number taken: apply it. */
		applied += drain_until(lowest + 1);
	}
}

static int snapshot(const char *reason, const struct gmt__snapshot_request *failed,
		    const struct gmt__device_state *state, char *out, size_t outlen);

static void *consumer_main(void *arg)
{
	uint64_t next_probe = 0, idle_ns = GMT_IDLE_START_NS, ring = (uint64_t)core.opt->ring_events;
	enum { AWAKE, TIMED_OUT, WOKEN } slept = AWAKE;
	pthread_attr_t attr;
	void *stack;
	size_t size;

	(void)arg;
	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		if (pthread_attr_getstack(&attr, &stack, &size) == 0) {
			atomic_store_explicit(&core.consumer_stack_lo, (uintptr_t)stack, memory_order_relaxed);
			atomic_store_explicit(&core.consumer_stack_hi, (uintptr_t)stack + size, memory_order_relaxed);
		}
		pthread_attr_destroy(&attr);
	}
	while (!atomic_load_explicit(&core.stopping, memory_order_relaxed)) {
		bool sleep = false;
		uint64_t n;

		/* An interpreter may be loaded later than the tracer started (a
		 * program embedding Python): look for one again every second. */
		if (core.python && now_ns(CLOCK_MONOTONIC) >= next_probe) {
			next_probe = gmt__py_probe() ? UINT64_MAX : now_ns(CLOCK_MONOTONIC) + 1000000000ull;
			if (next_probe == UINT64_MAX)
				gmt__info("Python interpreter found: recording Python frames");
		}
		/* The unwinding rules of frames the producers met first (unwind.h):
		 * until then libunwind walks stacks through them. */
		if (core.depth > 0)
			(void)gmt__unwind_learn();

		pthread_mutex_lock(&core.lock);
		if ((core.opt->snapshot_on & GMT_TRIGGER_PEAK) && !core.peak_armed &&
		    now_ns(CLOCK_MONOTONIC) >= core.peak_next_ns)
			core.peak_armed = true;
		core.stop_at_peak = true;
		n = drain_visible();
		core.stop_at_peak = false;
		gmt__rings_reap();
		if (core.peak_due) {
			core.peak_due = core.peak_armed = false;
			core.peak_next_bytes = core.peak_bytes + core.peak_bytes / 100 * (uint64_t)core.opt->peak_step;
			core.peak_next_ns = now_ns(CLOCK_MONOTONIC) + GMT_PEAK_INTERVAL_NS;
			snapshot("peak", NULL, NULL, NULL, 0); /* releases the lock */
		} else if (atomic_exchange_explicit(&core.signal_pending, false, memory_order_relaxed)) {
			/* Everything completed before the signal has its number. */
			n += drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
			snapshot("signal", NULL, NULL, NULL, 0); /* releases the lock */
		} else {
			/* Nothing left: sleep, unless a ring filled up since the
			 * pass looked (ring.h, the doorbell). */
			sleep = n == 0 && gmt__rings_may_sleep();
			pthread_mutex_unlock(&core.lock);
		}
		if (n > 0)
			STAT_ADD(consumer_events, n);
		/* The pace: what the last sleep let gather (above). */
		if (slept == WOKEN || n > ring / 4)
			idle_ns = idle_ns / 2 > GMT_IDLE_MIN_NS ? idle_ns / 2 : GMT_IDLE_MIN_NS;
		else if (slept == TIMED_OUT && n < ring / 16)
			idle_ns = 2 * idle_ns < GMT_IDLE_MAX_NS ? 2 * idle_ns : GMT_IDLE_MAX_NS;
		slept = AWAKE;
		if (sleep) {
			slept = gmt__rings_sleep(idle_ns) ? WOKEN : TIMED_OUT;
			if (slept == WOKEN)
				STAT_ADD(consumer_wakeups, 1);
		}
	}
	return NULL;
}

/* The background consumer blocks every signal: a handler of the program must
 * never run on it (DESIGN.md §2). Without it (thread creation failed) the
 * producers drain their own rings when full, and snapshots drain everything. */
static void start_consumer(void)
{
	sigset_t all, old;
	pthread_t t;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t, NULL, consumer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		static bool once;
		gmt__warn_once(&once, "cannot start the background thread (%s); events are applied by the program's threads",
			       strerror(r));
		return;
	}
	pthread_setname_np(t, "gpumemtrace");
	pthread_detach(t);
}

/* --- snapshots ------------------------------------------------------------------ */

/* The command line, from /proc/self/cmdline (read on the consumer side). */
static int read_argv(char ***argv_out)
{
	static char buf[16384];
	static char *argv[256];
	ssize_t n, len = 0;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC), argc = 0;

	if (fd < 0)
		return 0;
	while (len < (ssize_t)sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	for (ssize_t i = 0; i < len && argc < 256; i += (ssize_t)strlen(buf + i) + 1)
		argv[argc++] = buf + i;
	*argv_out = argv;
	return argc;
}

static void unlock_core(void *arg)
{
	(void)arg;
	pthread_mutex_unlock(&core.lock);
}

/* One warning per cause of a failed write: a full disk or a read-only
 * directory stays so, and every later snapshot would say it again. Called
 * without the core's lock (the writer released it), from any thread. */
static void warn_write_error(int r)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static int warned[8];
	bool seen = false;
	int k;

	pthread_mutex_lock(&lock);
	for (k = 0; k < 8 && warned[k] != 0 && !seen; k++)
		seen = warned[k] == r;
	if (!seen && k < 8)
		warned[k] = r;
	pthread_mutex_unlock(&lock);
	if (!seen)
		gmt__warn("cannot write a snapshot into %s: %s (snapshots that fail the same way are counted, not reported)",
			  core.opt->dir, strerror(-r));
}

/* The oom report, a line at a time, and where the snapshot is — or that it
 * could not be written (r: the writer's error). A report, not a warning: one
 * per episode, never capped. */
static void oom_report(char *report, const char *path, int r)
{
	char *line = report, *next;

	for (; line != NULL && *line != '\0'; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		gmt__report("%s%s", line == report ? "" : "  ", line);
	}
	if (r < 0)
		gmt__report("  snapshot: not written (%s)", strerror(-r));
	else
		gmt__report("  snapshot: %s", path);
}

/* Writes one snapshot. Called with the lock held and everything before it
 * applied; returns with the lock RELEASED: the writer lets go of it as soon as
 * it has read the table and the history, before it resolves frames under the
 * loader's lock. `state`: what the driver said of the device the caller could
 * ask (device.h), or NULL. Returns 0 and the file's path in out (when not
 * NULL), or a negative errno. */
static int snapshot_leaks(const char *reason, const struct gmt__snapshot_request *failed,
			  const struct gmt__device_state *state, char *out, size_t outlen,
			  struct gmt__snapshot_leaks *leaks, bool no_file)
{
	char path[PATH_MAX], host[256], report[1024];
	struct gmt__snapshot_device devs[GMT_SNAPSHOT_MAX_DEVICES];
	struct gmt__snapshot_stat stats[] = {
		{ "events", atomic_load_explicit(&core.next_seq, memory_order_relaxed) - core.first_seq },
#define GMT_X_SNAP(name, help) { #name, 0 },
		GMT_STATS(GMT_X_SNAP)
#undef GMT_X_SNAP
	};
	struct gmt__snapshot s = {
		.reason = reason,
		.time_ns = now_ns(CLOCK_REALTIME),
		.pid = getpid(),
		.live_bytes = core.live_bytes,
		.live_count = core.live_count,
		.peak_bytes = core.peak_bytes,
		.total_allocs = core.total_allocs,
		.total_frees = core.total_frees,
		.devices = devs,
		.failed = failed,
		.table = core.table,
		.api_names = gmt__api_names,
		.napi = GMT_API_COUNT,
		.stats = stats,
		.nstats = (int)(sizeof(stats) / sizeof(stats[0])),
		.table_done = unlock_core,
		.process = &core.process,
		.history = core.have_hist ? &core.hist : NULL,
		.report = failed != NULL ? report : NULL,
		.report_len = sizeof(report),
		.leaks = leaks,
		.no_file = no_file,
	};
	char **argv = NULL;
	int r, i = 1;

	s.argc = read_argv(&argv);
	s.argv = argv;
#define GMT_X_READ(name, help) stats[i++].value = atomic_load_explicit(&core.stats.name, memory_order_relaxed);
	GMT_STATS(GMT_X_READ)
#undef GMT_X_READ
	for (int d = 0; d < GMT_MAX_DEVICES && s.ndevices < GMT_SNAPSHOT_MAX_DEVICES; d++) {
		bool asked = state != NULL && state->index == d;

		if (core.device_live[d + 1] == 0 && !asked && (failed == NULL || failed->device != d))
			continue;
		devs[s.ndevices++] = (struct gmt__snapshot_device){
			.index = d, .live_bytes = core.device_live[d + 1], .state = asked ? state : NULL,
		};
	}
	if (gethostname(host, sizeof(host)) == 0) {
		host[sizeof(host) - 1] = '\0';
		core.process.host = host;
	} else {
		core.process.host = NULL;
	}
	core.process.ppid = getppid();
	/* A name already taken (a file of another run with a recycled pid, or
	 * one planted there) is never replaced: the writer takes the next
	 * number, and says which into snapshot_seq while the lock is held. */
	s.seq = core.snapshot_seq + 1;
	s.seq_out = &core.snapshot_seq;
	report[0] = '\0';
	r = gmt__snapshot_write(&s, core.opt->dir, path, sizeof(path)); /* the lock is released */
	/* The report first, the file second: what the program ran into does
	 * not depend on whether the file could be written. */
	if (failed != NULL && report[0] != '\0')
		oom_report(report, path, r);
	if (r < 0) {
		STAT_ADD(snapshot_errors, 1);
		warn_write_error(r);
		return r;
	}
	if (no_file)
		return 0;
	STAT_ADD(snapshots, 1);
	if (out != NULL && outlen > 0)
		snprintf(out, outlen, "%s", path);
	if (failed == NULL)
		gmt__info("%s snapshot %s", reason, path);
	return 0;
}

static int snapshot(const char *reason, const struct gmt__snapshot_request *failed,
		    const struct gmt__device_state *state, char *out, size_t outlen)
{
	return snapshot_leaks(reason, failed, state, out, outlen, NULL, false);
}

/* Under the gate (GPUMEMTRACE_GATE, set by gpumemtrace check): an empty
 * file gpumemtrace.<pid>.pending in the snapshot directory from the process's
 * first recorded event until its exit snapshot is written. One left behind
 * tells the gate of a process it cannot judge (it ended by _exit or a
 * signal, or its snapshot could not be written). A process that recorded
 * nothing (a fork child that only reads data, as a data loader's workers do)
 * has nothing to judge and leaves no mark. */
static void gate_mark(bool on)
{
	char path[PATH_MAX];
	int fd;

	if (!core.opt->gate ||
	    snprintf(path, sizeof(path), "%s/gpumemtrace.%d.pending", core.opt->dir, (int)getpid()) >= (int)sizeof(path))
		return;
	if (!on) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd >= 0)
		close(fd);
}

/* --- lifecycle ------------------------------------------------------------------------ */

static void ring_exit(void *ring)
{
	gmt__ring_mark_dead(ring);
	gmt__unwind_thread_exit();
}

static void fork_prepare(void)
{
	if (atomic_load_explicit(&core.state, memory_order_acquire) == GMT_READY)
		pthread_mutex_lock(&core.lock);
}

static void fork_parent(void)
{
	if (atomic_load_explicit(&core.state, memory_order_acquire) == GMT_READY)
		pthread_mutex_unlock(&core.lock);
}

/* The child keeps tracing under its own pid, from an empty table: the parent's
 * memory is not the child's, and the other threads (the consumer among them)
 * do not exist in it. */
static void fork_child(void)
{
	if (atomic_load_explicit(&core.state, memory_order_acquire) != GMT_READY)
		return;
	pthread_mutex_unlock(&core.lock);
	gmt__stack_after_fork();
	gmt__unwind_after_fork();
	gmt__py_after_fork();
	gmt__tags_after_fork();
	gmt__rings_after_fork(tls.ring);
	tls.tid = (uint32_t)syscall(SYS_gettid);
	gmt__table_clear(core.table);
	if (core.have_hist)
		gmt__history_clear(&core.hist);
	core.live_bytes = core.live_count = core.peak_bytes = 0;
	core.total_allocs = core.total_frees = core.snapshot_seq = 0;
	core.oom_written = core.peak_armed = core.peak_due = false;
	core.oom_failures = core.peak_next_bytes = core.peak_next_ns = 0;
	atomic_store_explicit(&core.signal_pending, false, memory_order_relaxed);
	memset(core.device_live, 0, sizeof(core.device_live));
	memset(core.undo, 0, sizeof(core.undo));
#define GMT_X_ZERO(name, help) atomic_store_explicit(&core.stats.name, 0, memory_order_relaxed);
	GMT_STATS(GMT_X_ZERO)
#undef GMT_X_ZERO
	core.expected = core.first_seq = atomic_load_explicit(&core.next_seq, memory_order_relaxed);
	atomic_store_explicit(&core.consumer_running, false, memory_order_relaxed);
	atomic_store_explicit(&core.gate_marked, false, memory_order_relaxed);
	memset(unknown_frees_seen, 0, sizeof(unknown_frees_seen));
	unknown_any = false;
	memset(debts, 0, sizeof(debts));
	debts_open = 0;
}

/* The executable segment of the object holding this code. */
static int find_text(struct dl_phdr_info *info, size_t size, void *base)
{
	(void)size;
	if (info->dlpi_addr != (uintptr_t)base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			core.text_start = info->dlpi_addr + ph->p_vaddr;
			core.text_end = core.text_start + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

/* SIGUSR2: only marks the request and wakes the background thread, which
 * writes the snapshot (nothing else is safe in a handler; a request that
 * comes just before the thread goes to sleep waits for its timeout,
 * GMT_IDLE_MAX_NS at most). The program's own handler, installed before
 * ours, still runs. */
static void on_signal(int sig, siginfo_t *info, void *uctx)
{
	int saved = errno;

	atomic_store_explicit(&core.signal_pending, true, memory_order_relaxed);
	gmt__rings_wake(); /* a futex wake: async-signal-safe */
	if (core.signal_old.sa_flags & SA_SIGINFO) {
		if (core.signal_old.sa_sigaction != NULL)
			core.signal_old.sa_sigaction(sig, info, uctx);
	} else if (core.signal_old.sa_handler != SIG_DFL && core.signal_old.sa_handler != SIG_IGN) {
		core.signal_old.sa_handler(sig);
	}
	errno = saved;
}

_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "the signal handler needs a lock-free flag");

static void install_signal(void)
{
	struct sigaction sa = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART };

	sigfillset(&sa.sa_mask);
	if (sigaction(SIGUSR2, &sa, &core.signal_old) != 0) {
		gmt__warn("cannot handle SIGUSR2 (%s); no signal snapshots", strerror(errno));
		return;
	}
	/* The thread that writes it must exist before any event does. */
	if (!atomic_exchange_explicit(&core.consumer_running, true, memory_order_relaxed))
		start_consumer();
}

/* A rank variable's value: a non-negative integer, else -1. */
static int64_t env_rank(const char *name)
{
	const char *v = getenv(name);
	char *end;
	long long n;

	if (v == NULL || *v < '0' || *v > '9')
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	return errno == 0 && *end == '\0' && n <= INT32_MAX ? n : -1;
}

/* Who this process is in a distributed job: the launchers' variables
 * (torchrun, Open MPI, Slurm), first found wins. Read once, at start-up. */
static void read_ranks(struct gmt__snapshot_process *p)
{
	static const char *const ranks[] = { "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK" };
	static const char *const local[] = { "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID" };
	static const char *const sizes[] = { "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE" };

	p->rank = p->local_rank = p->world_size = -1;
	p->rank_variable = NULL;
	for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]) && p->rank < 0; i++) {
		p->rank = env_rank(ranks[i]);
		if (p->rank >= 0)
			p->rank_variable = ranks[i];
	}
	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]) && p->local_rank < 0; i++)
		p->local_rank = env_rank(local[i]);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && p->world_size < 0; i++)
		p->world_size = env_rank(sizes[i]);
}

static void note_exit_status(int status, void *arg)
{
	(void)arg;
	atomic_store_explicit(&core.exit_status, status & 0xff, memory_order_relaxed);
}

/* The leak check's rules: the file's first (they win), then the built-in. A
 * file that cannot be used is reported now and named again in the report. */
static void load_rules(void)
{
	const char *path = core.opt->suppressions;

	if (path != NULL && path[0] != '\0' &&
	    gmt__supp_load(&core.supp, path, core.supp_error, sizeof(core.supp_error)) < 0)
		gmt__warn("GPUMEMTRACE_SUPPRESSIONS: %s; the leak check applies none of its rules", core.supp_error);
	if (core.opt->leak_builtins && gmt__supp_add_builtins(&core.supp) < 0)
		gmt__warn("out of memory for the built-in leak rules; the leak check applies none");
}

static int init(void)
{
	Dl_info self;
	int r;

	core.opt = gmt__options();
	gmt__log_set_verbose(core.opt->verbose);
	if (gmt__secure()) {
		gmt__warn("secure execution (set-user-ID, set-group-ID or capabilities): not tracing; every call "
			  "passes through");
		return -EPERM;
	}
	read_ranks(&core.process);
	core.table = gmt__table_new();
	if (core.table == NULL) {
		gmt__warn("cannot allocate the live table; not tracing");
		return -ENOMEM;
	}
	r = gmt__history_init(&core.hist, (size_t)core.opt->history);
	if (r < 0)
		gmt__warn("cannot allocate the event history (%s); snapshots will have none", strerror(-r));
	core.have_hist = r == 0;
	core.depth = (int)core.opt->stack_depth;
	if (dladdr((void *)&find_text, &self) != 0)
		dl_iterate_phdr(find_text, self.dli_fbase);
	/* The consumer learns unwinding rules (unwind.h): a walk that needs one
	 * wakes it as a full ring does. */
	gmt__unwind_set_waker(gmt__rings_wake);
	if (core.depth > 0 && gmt__stack_init() < 0) {
		gmt__warn("cannot start the unwinder; recording without stacks");
		core.depth = 0;
	}
	core.python = core.depth > 0 && core.opt->python_stacks;
	if (core.python && gmt__py_probe())
		gmt__info("Python interpreter found: recording Python frames");
	r = pthread_key_create(&core.ring_key, ring_exit);
	if (r != 0) {
		gmt__warn("cannot create a thread key (%s); not tracing", strerror(r));
		return -r;
	}
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	/* NOTE: on_exit, not atexit: its handler gets the status, which the leak
	 * check keeps when it is not 0 (the program's failure wins). */
	if (on_exit(note_exit_status, NULL) != 0)
		gmt__info("cannot register an exit handler: the leak check will not know the exit status");
	load_rules();
	if (core.opt->snapshot_on & GMT_TRIGGER_SIGNAL)
		install_signal();
	gmt__info("tracing pid %d: stacks %d frames, rings of %lld events, snapshots into %s",
		  (int)getpid(), core.depth, (long long)core.opt->ring_events, core.opt->dir);
	return 0;
}

/* True once the tracer is initialised and on. Initialises on first use, from
 * whichever hook comes first — possibly before our constructor, from another
 * library's. NOTE: not pthread_once: init() may re-enter a hook (dlsym, an
 * allocation by a library it loads) on the same thread, which must then pass
 * through instead of waiting for itself. */
static bool ready(void)
{
	/* A1 pairs with R1: a thread that sees READY sees what init() set up. */
	int s = atomic_load_explicit(&core.state, memory_order_acquire);

	if (s == GMT_READY)
		return true;
	if (s == GMT_OFF || tls.initialising)
		return false;
	s = GMT_UNINIT;
	if (atomic_compare_exchange_strong_explicit(&core.state, &s, GMT_INITIALISING,
						    memory_order_acq_rel, memory_order_acquire)) {
		int r;

		tls.initialising = true;
		r = init();
		tls.initialising = false;
		/* R1: publishes everything init() wrote. */
		atomic_store_explicit(&core.state, r == 0 ? GMT_READY : GMT_OFF, memory_order_release);
		return r == 0;
	}
	/* Another thread initialises; it takes microseconds. Bounded, so that a
	 * lock the initialising thread waits for (the loader's) can never make
	 * this thread wait forever: past the bound the call is not recorded. */
	for (int i = 0; i < 100000 && s == GMT_INITIALISING; i++) {
		sched_yield();
		s = atomic_load_explicit(&core.state, memory_order_acquire);
	}
	return s == GMT_READY;
}

/* The tracer's own memory that holds the program's addresses, for the leak
 * check's scan to leave alone. */
struct own_regions {
	struct gmt__range *v;
	size_t n, cap;
};

static void own_region(void *ctx, const void *addr, size_t len)
{
	struct own_regions *o = ctx;

	if (o->n == o->cap) {
		size_t cap = o->cap ? 2 * o->cap : 64;
		struct gmt__range *v = realloc(o->v, cap * sizeof(*v));

		if (v == NULL)
			return;
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = (struct gmt__range){ (uintptr_t)addr, (uintptr_t)addr + len };
}

static void own_regions_collect(struct own_regions *o)
{
	uintptr_t lo, hi;

	gmt__table_regions(core.table, own_region, o);
	if (core.have_hist)
		gmt__history_regions(&core.hist, own_region, o);
	for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r))
		own_region(o, r, gmt__ring_bytes(r));
	lo = atomic_load_explicit(&core.consumer_stack_lo, memory_order_relaxed);
	hi = atomic_load_explicit(&core.consumer_stack_hi, memory_order_relaxed);
	if (hi > lo)
		own_region(o, (const void *)lo, hi - lo);
}

/* Where the live frames of the exiting thread begin: the stack pointer of
 * exit()'s caller. Below it lie exit()'s own frames and, in their gaps, dead
 * words of functions that returned (main's, when it returned) — stale copies
 * of pointers the program no longer has. 0 when exit() is not on the stack
 * (a destructor run otherwise): then the caller scans from its own frame. */
static uintptr_t exit_caller_sp(void)
{
	uintptr_t exit_fn = (uintptr_t)dlsym(RTLD_DEFAULT, "exit");
	unw_context_t uc;
	unw_cursor_t cur;

	if (exit_fn == 0 || unw_getcontext(&uc) != 0 || unw_init_local(&cur, &uc) != 0)
		return 0;
	for (int i = 0; i < 64 && unw_step(&cur) > 0; i++) {
		unw_proc_info_t pi;
		unw_word_t sp;

		if (unw_get_proc_info(&cur, &pi) != 0 || pi.start_ip != exit_fn)
			continue;
		if (unw_step(&cur) <= 0 || unw_get_reg(&cur, UNW_REG_SP, &sp) != 0)
			return 0;
		return (uintptr_t)sp;
	}
	return 0;
}

/* The leak report (lines), and the status to exit with: the leak exit code
 * when leaks count and the program was about to exit with 0, else -1. */
static int leak_verdict(struct gmt__snapshot_leaks *lk)
{
	int status = atomic_load_explicit(&core.exit_status, memory_order_relaxed);
	char *line = lk->report, *next;

	if (line == NULL) {
		gmt__warn("leak check: no report (out of memory)");
		return -1;
	}
	if (lk->counted_count == 0 && lk->suspects == 0 && lk->supp_error == NULL) {
		gmt__info("leak check: no leaks, no suspects"); /* silent unless verbose */
		return -1;
	}
	for (; line != NULL && *line != '\0'; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		gmt__report("%s", line);
	}
	if (lk->counted_count == 0)
		return -1;
	if (status > 0) {
		gmt__report("leak check: the program's exit status %d is kept", status);
		return -1;
	}
	gmt__report("leak check: exiting with status %d (GPUMEMTRACE_LEAK_EXITCODE)", (int)core.opt->leak_exitcode);
	return (int)core.opt->leak_exitcode;
}

__attribute__((destructor)) static void core_exit(void)
{
	int saved = errno, exit_with = -1;
	bool write, check;

	/* A process that never reached a hook still owes its exit snapshot and
	 * leak check (nothing live: a clean result, which a gate must see). */
	if (atomic_load_explicit(&core.state, memory_order_acquire) == GMT_UNINIT &&
	    ((gmt__options()->snapshot_on & GMT_TRIGGER_EXIT) || gmt__options()->leak_check))
		(void)ready();
	if (atomic_load_explicit(&core.state, memory_order_acquire) != GMT_READY)
		return;
	write = core.opt->snapshot_on & GMT_TRIGGER_EXIT;
	check = core.opt->leak_check;
	atomic_store_explicit(&core.stopping, true, memory_order_relaxed);
	pthread_mutex_lock(&core.lock);
	drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
	gmt__info("at exit: %llu live allocations, %llu bytes; peak %llu bytes; %llu events recorded",
		  (unsigned long long)core.live_count, (unsigned long long)core.live_bytes,
		  (unsigned long long)core.peak_bytes,
		  (unsigned long long)(atomic_load_explicit(&core.next_seq, memory_order_relaxed) - core.first_seq));
	/* NOTE: no CUDA call from a destructor: the driver may be gone. */
	if (write || check) {
		struct own_regions own = { 0 };
		struct gmt__snapshot_leaks lk = {
			.supp = &core.supp,
			.supp_error = core.supp_error[0] != '\0' ? core.supp_error : NULL,
			.classes = core.opt->leak_classes,
			.scan = core.opt->leak_scan,
			.stack_from = exit_caller_sp(),
			.exit_status = atomic_load_explicit(&core.exit_status, memory_order_relaxed),
			.want_report = check,
		};

		/* else the frames below this one are the tracer's */
		if (lk.stack_from == 0)
			lk.stack_from = (uintptr_t)__builtin_frame_address(0);
		own_regions_collect(&own);
		lk.skip = own.v;
		lk.nskip = own.n;
		/* Without the exit trigger the document goes nowhere: only the report. */
		/* The verdict does not depend on the file: a leak check is judged
		 * whether or not the exit snapshot could be written. */
		if (snapshot_leaks("exit", NULL, NULL, NULL, 0, &lk, !write) == 0 && write) /* releases the lock */
			gate_mark(false);
		if (check && lk.judged)
			exit_with = leak_verdict(&lk);
		else if (check)
			gmt__warn("leak check: not judged (the tracer ran out of memory); the program's exit status "
				  "is kept");
		free(lk.report);
		free(own.v);
	} else {
		pthread_mutex_unlock(&core.lock);
	}
#define GMT_X_REPORT(name, help)                                                              \
	gmt__info("%s: %llu (%s)", #name,                                                     \
		  (unsigned long long)atomic_load_explicit(&core.stats.name, memory_order_relaxed), help);
	GMT_STATS(GMT_X_REPORT)
#undef GMT_X_REPORT
	errno = saved;
	if (exit_with >= 0) {
		/* NOTE: _exit skips stdio's flush at the end of exit(): flush first. */
		fflush(NULL);
		_exit(exit_with);
	}
}

/* --- the record path ------------------------------------------------------------------- */

static struct gmt__ring *thread_ring(void)
{
	struct gmt__ring *r;

	if (tls.ring != NULL)
		return tls.ring;
	if (tls.tid == 0)
		tls.tid = (uint32_t)syscall(SYS_gettid);
	r = gmt__ring_new((uint32_t)core.opt->ring_events, tls.tid);
	if (r == NULL)
		return NULL;
	gmt__rings_add(r);
	/* The key's destructor marks the ring dead when this thread exits. */
	pthread_setspecific(core.ring_key, r);
	tls.ring = r;
	return r;
}

/* The ring is full: apply events ourselves when the consumer lock is free, else
 * let whoever holds it make progress. Never drops an event. */
static void make_room(struct gmt__ring *r)
{
	STAT_ADD(ring_full, 1);
	while (!gmt__ring_has_room(r)) {
		if (pthread_mutex_trylock(&core.lock) == 0) {
			STAT_ADD(producer_drains, 1);
			drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
			pthread_mutex_unlock(&core.lock);
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

	while (first < n && ips[first] >= core.text_start && ips[first] < core.text_end)
		first++;
	return first;
}

/* Raises own_frames to `seen`; relaxed (a hint, see core.own_frames). */
static void own_frames_seen(int seen)
{
	int own = atomic_load_explicit(&core.own_frames, memory_order_relaxed);

	while (own < seen && !atomic_compare_exchange_weak_explicit(&core.own_frames, &own, seen, memory_order_relaxed,
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

	if (core.depth == 0 && tls.ntags == 0)
		return 0;
	if (core.depth > 0) {
		int own = atomic_load_explicit(&core.own_frames, memory_order_relaxed);
		int want = core.depth + own < GMT_STACK_MAX_DEPTH ? core.depth + own : GMT_STACK_MAX_DEPTH;

		n = gmt__stack_walk(ips, want);
		first = own_prefix(ips, n);
		if (first > own) {
			/* A path with more frames of ours than any before: walk
			 * again if this walk stopped short of the program's. */
			own_frames_seen(first);
			if (n == want && want < GMT_STACK_MAX_DEPTH) {
				want = core.depth + first < GMT_STACK_MAX_DEPTH ? core.depth + first : GMT_STACK_MAX_DEPTH;
				n = gmt__stack_walk(ips, want);
				first = own_prefix(ips, n);
			}
		}
		if (n - first > core.depth)
			n = first + core.depth;
	}
	/* The Python frames follow the native ones (pystack.h). */
	py = core.python ? gmt__py_capture(ips + n, core.depth, &pyinfo) : 0;
	if (py > 0)
		STAT_ADD(python_stacks, 1);
	if (pyinfo.nogil)
		STAT_ADD(python_stacks_nogil, 1);
	if (pyinfo.dropped > 0)
		STAT_ADD(python_frames_dropped, pyinfo.dropped);
	/* Then the open region tags (stacks.h). */
	for (int t = 0; t < tls.ntags && t < GMT_STACK_MAX_TAGS; t++)
		ips[n + py++] = GMT_WORD_TAG | tls.tags[t];
	return gmt__stack_intern_at(ips + first, n + py - first, gmt__modules_epoch());
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
	if (!atomic_load_explicit(&core.consumer_running, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&core.consumer_running, true, memory_order_relaxed))
		start_consumer();
	/* Under the gate, the process's first event: it has memory to judge. */
	if (core.opt->gate && !atomic_load_explicit(&core.gate_marked, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&core.gate_marked, true, memory_order_relaxed))
		gate_mark(true);
	if (ev->op == GMT_OP_ALLOC || ev->op == GMT_OP_MAP || ev->op == GMT_OP_RESERVE)
		ev->stack = capture();
	ev->time_ns = now_ns(CLOCK_REALTIME);
	ev->tid = tls.tid;
	ev->api = (uint16_t)c->api;
	/* Room first, then the number: a number once taken is pushed at once, so
	 * the consumer never waits for a thread that waits for the consumer. */
	if (!gmt__ring_has_room(r))
		make_room(r);
	ev->seq = atomic_fetch_add_explicit(&core.next_seq, 1, memory_order_relaxed);
	gmt__ring_push(r, ev);
	return ev->seq;
}

/* The calling thread's current context (into *ctx, 0 when none) and its
 * device. One driver call in the common case: the device is asked only when
 * the context changed or some context was torn down since (acquire pairs with
 * the release in context_gone: a thread that sees the new generation does not
 * trust a device cached before it). */
static int16_t current_device(uintptr_t *ctx)
{
	uint64_t gen = atomic_load_explicit(&core.ctx_generation, memory_order_acquire);
	CUcontext c = NULL;
	int d;

	*ctx = 0;
	if (gmt__driver_ctx_current(&c) != CUDA_SUCCESS || c == NULL) {
		STAT_ADD(device_unknown, 1);
		return 0;
	}
	*ctx = (uintptr_t)c;
	if (c == tls.ctx && gen == tls.ctx_generation)
		return tls.ctx_device;
	if (gmt__driver_ctx_device(&d) != CUDA_SUCCESS) {
		STAT_ADD(device_unknown, 1);
		return 0;
	}
	tls.ctx = c;
	tls.ctx_generation = gen;
	tls.ctx_device = (int16_t)d;
	return (int16_t)d;
}

void gmt__call_enter(struct gmt__call *c, enum gmt__api api)
{
	int saved = errno;

	c->api = api;
	c->record = tls.depth++ == 0 && ready();
	/* Where this call's window begins in the global order (freed_in_flight). */
	c->began = c->record ? atomic_load_explicit(&core.next_seq, memory_order_relaxed) : 0;
	errno = saved;
}

void gmt__call_leave(struct gmt__call *c)
{
	(void)c;
	tls.depth--;
}

void gmt__on_alloc(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr, uint64_t size, int device)
{
	struct gmt__event ev = { .op = GMT_OP_ALLOC, .kind = (uint8_t)kind, .addr = addr, .size = size };
	int saved = errno;

	if (c->record) {
		uintptr_t ctx;
		int16_t current = current_device(&ctx);

		ev.device = device == GMT_DEVICE_CURRENT ? current : (int16_t)device;
		/* A VMM handle is no context's; everything else goes with the
		 * context it was allocated in. */
		ev.extra = kind == GMT_KIND_VMM ? 0 : ctx;
		ev.link = c->began;
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

/* The token of a free whose record waits for its result (tls.free_*). */
#define FREE_PENDING UINT64_MAX

uint64_t gmt__on_free(const struct gmt__call *c, enum gmt__kind kind, uint64_t addr)
{
	if (!c->record)
		return 0;
	tls.free_addr = addr;
	tls.free_kind = (uint8_t)kind;
	return FREE_PENDING;
}

void gmt__on_retain(const struct gmt__call *c, uint64_t handle)
{
	record_op(c, GMT_OP_RETAIN, GMT_KIND_VMM, handle, 0, 0, 0);
}

uint64_t gmt__on_release(const struct gmt__call *c, uint64_t handle)
{
	return record_op(c, GMT_OP_RELEASE, GMT_KIND_VMM, handle, 0, 0, 0);
}

void gmt__on_map(const struct gmt__call *c, uint64_t addr, uint64_t size, uint64_t handle, uint64_t offset)
{
	record_op(c, GMT_OP_MAP, GMT_KIND_VMM, addr, size, handle, offset);
}

uint64_t gmt__on_unmap(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	return record_op(c, GMT_OP_UNMAP, GMT_KIND_VMM, addr, size, 0, 0);
}

void gmt__on_reserve(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	record_op(c, GMT_OP_RESERVE, GMT_KIND_VMM, addr, size, 0, 0);
}

uint64_t gmt__on_unreserve(const struct gmt__call *c, uint64_t addr, uint64_t size)
{
	return record_op(c, GMT_OP_UNRESERVE, GMT_KIND_VMM, addr, size, 0, 0);
}

void gmt__on_primary_retained(const struct gmt__call *c, int device, CUcontext ctx)
{
	(void)c;
	/* Relaxed: read back only by this library's own teardown hooks. */
	if (device >= 0 && device < GMT_MAX_DEVICES)
		atomic_store_explicit(&core.primary_ctx[device], (uintptr_t)ctx, memory_order_relaxed);
}

static void context_gone(const struct gmt__call *c, uintptr_t ctx, int device, bool primary)
{
	struct gmt__event ev = { .op = GMT_OP_CONTEXT_GONE, .kind = GMT_KIND_DEVICE, .addr = ctx,
				 .device = (int16_t)device, .link = primary };
	int saved = errno;

	/* Release pairs with the acquire in current_device: cached devices of
	 * contexts are no longer trusted (a new context may reuse the address). */
	atomic_fetch_add_explicit(&core.ctx_generation, 1, memory_order_release);
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
				? atomic_load_explicit(&core.primary_ctx[device], memory_order_relaxed)
				: 0;

	context_gone(c, ctx, device, true);
}

void gmt__on_result(const struct gmt__call *c, uint64_t token, CUresult r)
{
	/* NOTE: at teardown the driver answers CUDA_ERROR_DEINITIALIZED to frees of
	 * memory it has already released with the context: a release, not an
	 * error (DESIGN.md §2, "exit"). */
	bool done = r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED;

	if (token == FREE_PENDING) {
		/* The free's window begins with its call (owed frees, apply). */
		if (done)
			record_op(c, GMT_OP_FREE, (enum gmt__kind)tls.free_kind, tls.free_addr, 0, c->began, 0);
		else
			STAT_ADD(failed_frees, 1);
		return;
	}
	if (token == 0 || done)
		return;
	record_op(c, GMT_OP_FREE_FAILED, GMT_KIND_DEVICE, 0, 0, token, 0);
}

void gmt__on_failure(const struct gmt__call *c, CUresult r, enum gmt__kind kind, uint64_t size, int device)
{
	struct gmt__snapshot_request req;
	struct gmt__device_state state;
	uint64_t now;
	uint32_t stack;
	int saved = errno, d;
	bool asked;

	if (!c->record || r != CUDA_ERROR_OUT_OF_MEMORY)
		return;
	if (device == GMT_DEVICE_CURRENT) {
		uintptr_t ctx;

		d = current_device(&ctx);
	} else {
		d = device;
	}
	stack = capture();
	/* The device's state now, before the lock: loading NVML takes the
	 * loader's lock (device.h). Not during teardown: the driver may be gone. */
	asked = (core.opt->snapshot_on & GMT_TRIGGER_OOM) && device != GMT_DEVICE_HOST &&
		!atomic_load_explicit(&core.stopping, memory_order_relaxed);
	if (asked)
		gmt__device_query(d, &state);
	req = (struct gmt__snapshot_request){
		.api = gmt__api_names[c->api], .size = size, .device = d, .result = (int)r,
		.kind = kind, .stack = stack,
	};
	/* Everything this thread or any other completed before the failing call
	 * has its number already: apply up to the current one, then write. */
	pthread_mutex_lock(&core.lock);
	drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
	req.failure = ++core.oom_failures;
	if (core.have_hist) {
		struct gmt__hist_cause cause = {
			.seq = req.failure, .time_ns = now_ns(CLOCK_REALTIME), .tid = tls.tid, .api = (uint16_t)c->api,
		};

		gmt__history_oom(&core.hist, &cause, size, (uint8_t)kind, d, stack);
	}
	/* NOTE: frameworks retry after an out-of-memory result (PyTorch frees
	 * its cache and asks again, cuDNN tries smaller workspaces): a failure
	 * with no successful allocation since the last snapshot, or within
	 * GMT_OOM_EPISODE_NS of it, belongs to the same episode. */
	now = now_ns(CLOCK_MONOTONIC);
	if (!(core.opt->snapshot_on & GMT_TRIGGER_OOM) ||
	    (core.oom_written &&
	     (core.total_allocs == core.oom_last_allocs || now - core.oom_last_ns < GMT_OOM_EPISODE_NS))) {
		pthread_mutex_unlock(&core.lock);
		if (core.opt->snapshot_on & GMT_TRIGGER_OOM)
			STAT_ADD(oom_suppressed, 1);
		errno = saved;
		return;
	}
	core.oom_written = true;
	core.oom_last_ns = now;
	core.oom_last_allocs = core.total_allocs;
	snapshot("oom", &req, asked ? &state : NULL, NULL, 0); /* releases the lock */
	errno = saved;
}

/* --- the public API (gpumemtrace.h) ----------------------------------------------- */

/* True when the API may act: traced, and not called from inside a hook. */
static bool api_ready(void)
{
	return tls.depth == 0 && ready();
}

int gmt__api_dump(char *path, size_t len)
{
	struct gmt__device_state state;
	uintptr_t ctx;
	int saved = errno, device, r;

	if (!api_ready())
		return -ENOSYS;
	device = current_device(&ctx);
	if (ctx != 0)
		gmt__device_query(device, &state);
	pthread_mutex_lock(&core.lock);
	drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
	r = snapshot("api", NULL, ctx != 0 ? &state : NULL, path, len); /* releases the lock */
	errno = saved;
	return r;
}

int gmt__api_tag_push(const char *tag)
{
	uint32_t id;
	int r;

	if (!api_ready())
		return -ENOSYS;
	r = gmt__tag_id(tag, &id);
	if (r < 0)
		return r;
	if (tls.ntags < GMT_STACK_MAX_TAGS)
		tls.tags[tls.ntags] = id;
	tls.ntags++;
	return 0;
}

int gmt__api_tag_pop(void)
{
	if (!api_ready())
		return -ENOSYS;
	if (tls.ntags == 0)
		return -ENOENT;
	tls.ntags--;
	return 0;
}

int gmt__api_live_bytes(int device, unsigned long long *bytes)
{
	if (!api_ready())
		return -ENOSYS;
	if (bytes == NULL || device < -2 || device >= GMT_MAX_DEVICES)
		return -EINVAL;
	pthread_mutex_lock(&core.lock);
	drain_until(atomic_load_explicit(&core.next_seq, memory_order_relaxed));
	*bytes = device == -2 ? core.live_bytes : *device_slot(device);
	pthread_mutex_unlock(&core.lock);
	return 0;
}
