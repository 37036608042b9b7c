/* The tracer's state, shared by its stages: the process-wide record of what
 * the tracer is doing (gmt__core) and each thread's own (gmt__tls), and the
 * functions the stages call across files. Who owns what: the fields above
 * `lock` are the record path's (atomics, or set once by init); the fields
 * below it are the consumer's, read and written only with `lock` held
 * (state/apply.c, state/consumer.c, tracer/snapshots.c). docs/internals.md
 * draws the stages and threads. */
#ifndef GMT_TRACER_H
#define GMT_TRACER_H

#include "analyze/capture.h"
#include "analyze/suppress.h"
#include "intercept/device.h"
#include "intercept/hooks.h"
#include "record/event.h"
#include "record/ring.h"
#include "record/stacks.h"
#include "report/snapshot.h"
#include "state/history.h"
#include "state/table.h"
#include "tracer/options.h"
#include "util/check.h"

#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define GMT_MAX_DEVICES 64
/* How long the consumer waits for an event whose sequence number was taken but
 * which is not in its ring yet (a thread preempted between the two, or killed
 * there) before it gives up on the order of that one event. */
#define GMT_GAP_TIMEOUT_NS (2 * 1000000000ull)
/* Out-of-memory episodes (tracer/episode.c): a failure more than this long
 * after the one before — counted from the end of the snapshot written at it,
 * which can take seconds (PyTorch's libraries to symbolise) — starts a new
 * episode; the first GMT_EPISODE_WRITES
 * failures of an episode each rewrite its snapshot, later ones at most once
 * per GMT_EPISODE_REWRITE_NS (a retry storm). */
#define GMT_EPISODE_GAP_NS (5 * 1000000000ull)
/* How long the exit waits for a snapshot the background thread is writing
 * (a peak's, a signal's) before the process goes on to end without it: a
 * write that long is stuck (a hung file system), and the program's exit
 * comes first. */
#define GMT_EXIT_WRITE_WAIT_MS 30000
#define GMT_EPISODE_WRITES 8
/* A storm of episodes (a server refusing requests too big for it): a
 * process's first GMT_STORM_EPISODES episodes are written and reported one
 * by one; of the later ones, only the latest, written once the storm has
 * been quiet for GMT_EPISODE_GAP_NS, or at exit, with one line that says how
 * many were left out (tracer/episode.c). */
#define GMT_STORM_EPISODES 8
#define GMT_EPISODE_REWRITE_NS 1000000000ull
/* Peak snapshots (tracer/peak.c): a top less than GPUMEMTRACE_PEAK_STEP
 * above the one kept replaces it only GMT_PEAK_INTERVAL_NS after it; a top
 * kept is written once the live bytes fell GMT_PEAK_FALL_PERCENT below it, or
 * GMT_PEAK_QUIET_NS after it with no higher one, or at exit. */
#define GMT_PEAK_INTERVAL_NS 1000000000ull
#define GMT_PEAK_FALL_PERCENT 25
#define GMT_PEAK_QUIET_NS (5 * 1000000000ull)
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
	X(put_back, "VMM handles counted freed too soon and put back (a late map or retain)") \
	X(handles_forgotten, "released VMM handles forgotten with a record still to come")    \
	X(failed_frees, "frees, releases and unmaps the driver refused (not recorded)")        \
	X(untracked_calls, "intercepted calls not recorded (tracer off or out of memory)")    \
	X(device_unknown, "allocations whose device could not be asked")                      \
	X(python_stacks, "allocations recorded with Python frames")                           \
	X(python_stacks_nogil, "of those, read from memory on a thread without the GIL")      \
	X(python_frames_dropped, "Python frames left out: not readable consistently without the GIL") \
	X(oom_suppressed, "out-of-memory results no snapshot was taken at (a storm in an episode)") \
	X(oom_recovered, "out-of-memory episodes the watching framework recovered from (not reported)") \
	X(snapshots, "snapshots written")                                                     \
	X(snapshot_errors, "snapshots that could not be written")                             \
	X(oom_episodes_left_out, "out-of-memory episodes past a process's first 8, neither written nor reported one by one") \
	X(log_lines_dropped, "lines of the tracer not written: its stderr was full (nobody read it)")

struct gmt__stats {
#define GMT_X_STAT(name, help) _Atomic uint64_t name;
	GMT_STATS(GMT_X_STAT)
#undef GMT_X_STAT
};

/* Relaxed: statistics publish nothing; they are read for snapshots. */
#define STAT_ADD(name, n) atomic_fetch_add_explicit(&gmt__core.stats.name, (n), memory_order_relaxed)

/* The counters kept outside the core (the log's lines not written) copied
 * into its stats, before they are read. */
void gmt__stats_sync(void);

enum { GMT_UNINIT, GMT_INITIALISING, GMT_READY, GMT_OFF };

/* What labels a failure, an allocation or a free (failed_request.api, the
 * history's and the episode's "api"): a hooked entry point's name, or the
 * name of the framework whose own allocator refused a request without a
 * driver failure (gmt_framework "oom" with none awaiting; tracer/episode.c),
 * "framework" for one of another name. Indices GMT_API_COUNT and up. */
#define GMT_FRAMEWORK_LABELS(X) X(torch) X(cupy) X(jax) X(framework)

enum gmt__label {
	GMT_LABEL_BEFORE_FRAMEWORKS = GMT_API_COUNT - 1,
#define GMT_X_LABEL(name) GMT_LABEL_##name,
	GMT_FRAMEWORK_LABELS(GMT_X_LABEL)
#undef GMT_X_LABEL
	GMT_LABEL_COUNT
};

/* Label index → name: the hooks' names, then the frameworks' (tracer/core.c). */
extern const char *const gmt__labels[GMT_LABEL_COUNT];

/* The label of framework `name` (GMT_LABEL_framework when it has none). */
enum gmt__label gmt__framework_label(const char *name);

/* What one out-of-memory snapshot of an episode left (gmt__snapshot_take_oom):
 * its report (printed when the episode ends), the file's path, its number
 * and the writer's result. */
struct gmt__oom_write {
	char report[4096];
	char path[4096];
	uint64_t seq;
	int result;
};

/* The out-of-memory episode going on, or the last one (capture.h: struct
 * gmt__episode is what its snapshots copy; tracer/episode.c decides). */
struct gmt__oom_episode {
	bool open;
	enum gmt__episode_end ended;       /* OPEN while it goes on; SUCCESS once an allocation ended it */
	bool mapped_after;                 /* a VMM page allocated on its device since its latest failure */
	struct gmt__episode doc;
	uint64_t last_mono, written_mono;  /* the latest failure, the latest write (CLOCK_MONOTONIC) */
	uint64_t mark_bytes, mark_count;   /* doc.freed_* at the latest failure */
	struct gmt__snapshot_request last; /* the latest failure, for a snapshot at the end */
	uint64_t site;                     /* its call site (tracer/episode.c), 0: not known */
	struct gmt__device_state last_state;
	bool have_state;
	/* A framework's allocator state handed over during the episode
	 * (gmt_framework, malloc'd), or NULL. */
	char *framework;
	/* No framework's state was handed over since its latest failure. */
	bool awaiting;
	/* A framework handed its state over at the episode's latest failure:
	 * the program was told of it, and a later failure is another need of
	 * memory (a new episode). */
	bool reported;
	/* The episode's file's number (0: none yet), and what its latest write
	 * left: filled by the writer without the core's lock, under
	 * tracer/episode.c's write lock, which every reader holds too. */
	uint64_t file_seq;
	struct gmt__oom_write out;
	/* Past the process's first GMT_STORM_EPISODES: captured, not written. */
	bool left_out;
};

struct gmt__core {
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
	/* Snapshots the background thread is writing (peak, signal): counted
	 * under the core's lock when one starts, released when its file is in
	 * place; none starts once stopping is set, and the exit waits for
	 * these (GMT_EXIT_WRITE_WAIT_MS at most), so that the process never
	 * ends in the middle of one. */
	_Atomic unsigned writes_in_flight;
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
	/* Live bytes and allocations by slot ([0]: host, [d + 1]: device d)
	 * and kind (gmt__slot_live sums a slot), and each slot's peak since the
	 * start. */
	uint64_t kind_live[GMT_MAX_DEVICES + 1][GMT_KIND_COUNT], kind_count[GMT_MAX_DEVICES + 1][GMT_KIND_COUNT];
	uint64_t device_peak[GMT_MAX_DEVICES + 1];
	/* The public API's peaks (gmt_peak_bytes), since the start or its last
	 * reset: [0] all, [1] host, [d + 2] device d. */
	uint64_t api_peak[GMT_MAX_DEVICES + 2];
	uint64_t snapshot_seq;
	/* Out-of-memory results so far, and the episode (tracer/episode.c). */
	uint64_t oom_failures;
	struct gmt__oom_episode episode;
	char *framework_exit; /* a framework's state for the exit snapshot (gmt_framework), or NULL */
	char *framework_api;  /* a framework's state for the next gmt_dump() snapshot, taken by it; or NULL */
	/* The frameworks whose out-of-memory errors are reported to the tracer
	 * (gmt_framework "watch": their observers are in), "torch/cupy", or "":
	 * an episode none reported, ended by a success, is one an allocator
	 * recovered from. */
	char watching[64];
	/* Peak snapshots (tracer/peak.c): peak_top when the live bytes stand at
	 * a high worth keeping (since peak_top_ns, event time), to be copied
	 * before the first event that may lower them; the copy kept (unwritten,
	 * or NULL), of peak_kept_bytes, the highest top copied so far, at
	 * peak_kept_ns; peak_written_bytes, the top of the last file written. */
	bool peak_top, in_hook; /* in_hook: a producer applies its full ring (no copy then) */
	uint64_t peak_top_ns;
	struct gmt__capture *peak_kept;
	uint64_t peak_kept_bytes, peak_kept_ns, peak_written_bytes;
	struct gmt__snapshot_process process; /* rank and friends from init; host and ppid per snapshot */
	/* The leak check: the status the program passed to exit() (on_exit;
	 * -1 until then), the suppression rules, and why the file's were refused. */
	_Atomic int exit_status;
	_Atomic uintptr_t consumer_stack_lo, consumer_stack_hi; /* its locals hold addresses */
	struct gmt__supp supp;
	char supp_error[512];
};

/* The one tracer of the process (tracer/core.c). */
extern struct gmt__core gmt__core;

/* The live bytes of slot `slot` of gmt__core.kind_live ([0]: host, [d + 1]:
 * device d), all kinds. Lock held. */
static inline uint64_t gmt__slot_live(int slot)
{
	uint64_t sum = 0;

	for (int k = 0; k < GMT_KIND_COUNT; k++)
		sum += gmt__core.kind_live[slot][k];
	return sum;
}

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
	/* A free, release, unmap or unreserve between its gmt__on_* and
	 * gmt__on_result: what it will record when the driver honours it. */
	uint64_t free_addr, free_size;
	uint8_t free_op, free_kind;
	bool holds_lock; /* this thread holds gmt__core.lock (for GMT_CHECK) */
};

/* The calling thread's (record/record.c). NOTE: initial-exec TLS needs no
 * allocation on first access; the library is always loaded at start-up
 * (LD_PRELOAD), where static TLS space is reserved. */
extern _Thread_local struct gmt__thread gmt__tls __attribute__((tls_model("initial-exec")));

static inline uint64_t gmt__now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The consumer's lock: everything below `lock` in gmt__core is read and
 * written only with it held, which GMT_CHECK(gmt__core_held()) asserts
 * where it matters (util/check.h). */
static inline void gmt__core_lock(void)
{
	pthread_mutex_lock(&gmt__core.lock);
	gmt__tls.holds_lock = true;
}

static inline bool gmt__core_trylock(void)
{
	if (pthread_mutex_trylock(&gmt__core.lock) != 0)
		return false;
	gmt__tls.holds_lock = true;
	return true;
}

static inline void gmt__core_unlock(void)
{
	GMT_CHECK(gmt__tls.holds_lock);
	gmt__tls.holds_lock = false;
	pthread_mutex_unlock(&gmt__core.lock);
}

static inline bool gmt__core_held(void)
{
	return gmt__tls.holds_lock;
}

/* --- across the stages -------------------------------------------------------------- */

/* True once the tracer is initialised and on; initialises on first use
 * (tracer/core.c), from whichever hook comes first. */
bool gmt__ready_slow(void);
static inline bool gmt__ready(void)
{
	/* A1 pairs with R1 (tracer/core.c): a thread that sees READY sees what
	 * init() set up. */
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) == GMT_READY)
		return true;
	return gmt__ready_slow();
}

/* record/record.c: the calling thread's current context (into *ctx, 0 when
 * none) and its device. */
int16_t gmt__current_device(uintptr_t *ctx);

/* state/apply.c: applies one event (lock held); forgets what it remembers
 * of frees in flight (the child of a fork). */
void gmt__apply(const struct gmt__event *ev);
void gmt__apply_after_fork(void);

/* state/consumer.c: applies, in sequence order, every event numbered below
 * `target` (lock held); returns how many. Starts the background thread. */
uint64_t gmt__drain_until(uint64_t target);
void gmt__consumer_start(void);

/* tracer/snapshots.c: writes one snapshot; called with the lock held and
 * everything before it applied, returns with the lock RELEASED. `state`:
 * what the driver said of the device the caller could ask, or NULL. 0 and
 * the file's path in out (when not NULL), or a negative errno. With `leaks`,
 * the leak classification too (and its report); with no_file, only that. */
int gmt__snapshot_take(enum gmt__reason reason, const struct gmt__snapshot_request *failed,
		       const struct gmt__device_state *state, char *out, size_t outlen);
int gmt__snapshot_take_leaks(enum gmt__reason reason, const struct gmt__snapshot_request *failed,
			     const struct gmt__device_state *state, char *out, size_t outlen,
			     struct gmt__snapshot_leaks *leaks, bool no_file);
/* An out-of-memory snapshot of an episode: as gmt__snapshot_take, with the
 * episode's copy; rewrites file number `replace_seq` when not 0 (the
 * episode's file). The report is not printed: it is left in `out`, with the
 * path, the number and the result, for the episode's end. */
void gmt__snapshot_take_oom(const struct gmt__snapshot_request *failed, const struct gmt__device_state *state,
			    const struct gmt__episode *episode, const char *framework, uint64_t replace_seq,
			    struct gmt__oom_write *out);
/* An out-of-memory snapshot captured now and written later (an episode of
 * a storm, past the ones a process writes: tracer/episode.c). keep: called
 * with the lock held, returns without it; NULL when out of memory. publish:
 * writes it (the lock not held; replace_seq as above), leaves its report in
 * `out`, and frees it; drop frees one never written. */
struct gmt__capture;
struct gmt__capture *gmt__snapshot_keep_oom(const struct gmt__snapshot_request *failed,
					    const struct gmt__device_state *state,
					    const struct gmt__episode *episode, const char *framework);
void gmt__snapshot_publish_oom(struct gmt__capture *c, uint64_t replace_seq, struct gmt__oom_write *out);
void gmt__snapshot_drop(struct gmt__capture *c);

/* A peak snapshot's capture, taken now and written later (tracer/peak.c).
 * keep: lock held on entry and on return; NULL when out of memory.
 * publish: writes it (the lock not held) and frees it. */
struct gmt__capture *gmt__snapshot_keep_peak(void);
void gmt__snapshot_publish_peak(struct gmt__capture *c);

/* tracer/peak.c, the peak trigger; lock held. high: the live bytes just
 * reached a new high, at event time time_ns (a top to keep, or too close to
 * the one kept). before: an event of operation `op` is about to be applied;
 * at a top, one that may lower the live bytes makes a copy of the state
 * first — unless a producer applies its full ring inside a hook, where
 * nothing is allocated: that top goes uncopied. settle: writes the top kept once it is known to be the peak (or
 * `exiting`: the run's last top); true when it wrote one, and then returns
 * with the lock RELEASED. fork_child: forgets them. */
void gmt__peak_high(uint64_t time_ns);
void gmt__peak_before(uint8_t op);
bool gmt__peak_settle(bool exiting);
void gmt__peak_fork_child(void);

/* Prints an out-of-memory report and where its snapshot is (or why not). */
void gmt__oom_report(const char *report, const char *path, int r);

/* tracer/episode.c. An out-of-memory result (req) seen by the record path on
 * thread `tid` in call `api`: in the history and its episode, and the
 * episode's snapshot (re)written. `state` as above. Takes the lock; returns
 * without it. */
void gmt__snapshot_oom(struct gmt__snapshot_request *req, const struct gmt__device_state *state, uint16_t api,
		       uint32_t tid);
/* Lock held: memory left the table (e) or came into it; the episode counts
 * the first, and ends at an allocation of device memory on its device. */
void gmt__episode_freed(const struct gmt__entry *e);
void gmt__episode_allocated(const struct gmt__entry *e);
/* Ends the episode when it is over (ended by an allocation, or the gap has
 * passed; `exiting`: whatever it is): its report printed, and a snapshot at
 * its end when failures came after the last one written. Lock held on entry
 * and on return (released in between when it writes). */
void gmt__episode_settle(bool exiting);
/* A framework's allocator state (gmt_framework; `json` checked, malloc'd,
 * taken over) for the exit snapshot. Takes the locks. */
void gmt__episode_framework_exit(char *json);
/* The same for the next gmt_dump() snapshot, which takes it (`json`
 * malloc'd, taken over). */
void gmt__episode_framework_api(char *json);
/* Whether the open episode's latest failure awaits a framework's hand-over
 * (a peek: the answer may be stale by the time it is used). */
bool gmt__episode_awaits(void);
/* A framework's out-of-memory error, as its bootstrap handed its state over
 * (json, taken over): joined to the open episode when a driver failure
 * awaits it — the file rewritten with it, of that failure; else the
 * framework's allocator refused on its own (its limit, memory it reserved
 * before), a failure of its own labelled `label` (req: the request its error
 * named, the thread's stack; state as above), in the history and an episode,
 * written at once. Takes the locks. */
void gmt__episode_reported(char *json, struct gmt__snapshot_request *req, const struct gmt__device_state *state,
			   uint16_t label, uint32_t tid);
/* Notes the framework whose out-of-memory errors are reported from now on
 * (gmt_framework "watch"). */
void gmt__episode_watch(const char *name);

/* tracer/metrics.c: the live metrics file (GPUMEMTRACE_METRICS_DIR). The
 * background thread's pass, without the lock: writes it when the interval
 * has passed or one is due. Due soon (an out-of-memory; any thread, any
 * lock). At exit, without the lock: the last write. */
void gmt__metrics_tick(void);
void gmt__metrics_due(void);
/* A snapshot's tensor level (metrics.h), kept for the metrics until the
 * next: taken over (*t emptied) when it has one, and a write asked for. */
struct gmt__metrics_tensors;
void gmt__metrics_tensors_keep(struct gmt__metrics_tensors *t);
/* In the child of a fork: the metrics' locks made anew, no tensor level. */
void gmt__metrics_after_fork(void);
void gmt__metrics_exit(void);
/* Around fork (before the core's lock is taken): no write in flight; the
 * child starts with no episode. */
void gmt__episode_fork_prepare(void);
void gmt__episode_fork_parent(void);
void gmt__episode_fork_child(void);
/* Under the gate: the process's pending mark made (on) or removed. */
void gmt__gate_mark(bool on);

#endif /* GMT_TRACER_H */
