/* The tracer's lifecycle: initialisation on first use, fork, the signal
 * trigger, exit (the exit snapshot and the leak check's verdict), and the
 * public API's functions (gpumemtrace.h through api.c). The state it sets up
 * is tracer/tracer.h's; the stages it starts are record/, state/ and
 * tracer/snapshots.c (docs/internals.md). */
#define _GNU_SOURCE
#include "tracer/tracer.h"

#include "record/modules.h"
#include "record/pystack.h"
#include "record/record.h"
#include "record/tags.h"
#include "record/unwind.h"
#include "report/framework_form.h"
#include "util/loader.h"
#include "util/log.h"

#include <dlfcn.h>
#include <jansson.h>
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <errno.h>
#include <link.h>
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

struct gmt__core gmt__core = {
	.exit_status = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_seq = 1,
	.first_seq = 1,
	.expected = 1,
};

/* --- lifecycle ------------------------------------------------------------------------ */

static void ring_exit(void *ring)
{
	gmt__ring_mark_dead(ring);
	gmt__unwind_thread_exit();
}

/* At load, before the program can close its stderr and open a file of its
 * own there: the file the tracer's lines go to (log.h); and before it can
 * change its working directory: the directory relative option values are
 * read against (options.h). The rest of the start waits for the first hook. */
__attribute__((constructor)) static void keep_stderr_at_load(void)
{
	gmt__log_keep_stderr();
	gmt__options_at_load();
}

/* The log's count when this process began (its parent's, in a fork child). */
static unsigned long long log_dropped_base;

void gmt__stats_sync(void)
{
	atomic_store_explicit(&gmt__core.stats.log_lines_dropped, gmt__log_dropped() - log_dropped_base,
			      memory_order_relaxed);
}

/* A fork waits for what the tracer's threads do that a child could not
 * finish: a snapshot's write under the episode's lock, the core's lock, a
 * call into the loader (util/loader.h), the unloaded modules' list. In that
 * order; the last two are taken alone, never with another inside. */
static void fork_prepare(void)
{
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) == GMT_READY) {
		gmt__episode_fork_prepare();
		gmt__core_lock();
	}
	gmt__loader_fork_prepare();
	gmt__modules_fork_prepare();
}

static void fork_parent(void)
{
	gmt__modules_fork_parent();
	gmt__loader_fork_parent();
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) == GMT_READY) {
		gmt__core_unlock();
		gmt__episode_fork_parent();
	}
}

/* The child keeps tracing under its own pid, from an empty table: the parent's
 * memory is not the child's, and the other threads (the consumer among them)
 * do not exist in it. */
static void fork_child(void)
{
	gmt__modules_fork_child();
	gmt__loader_fork_child();
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) != GMT_READY)
		return;
	gmt__core_unlock();
	gmt__stack_after_fork();
	gmt__unwind_after_fork();
	gmt__py_after_fork();
	gmt__tags_after_fork();
	gmt__rings_after_fork(gmt__tls.ring);
	gmt__tls.tid = (uint32_t)syscall(SYS_gettid);
	gmt__table_clear(gmt__core.table);
	if (gmt__core.have_hist)
		gmt__history_clear(&gmt__core.hist);
	gmt__core.live_bytes = gmt__core.live_count = gmt__core.peak_bytes = 0;
	gmt__core.total_allocs = gmt__core.total_frees = gmt__core.snapshot_seq = 0;
	gmt__episode_fork_child();
	gmt__metrics_after_fork();
	gmt__peak_fork_child();
	gmt__core.oom_failures = 0;
	atomic_store_explicit(&gmt__core.signal_pending, false, memory_order_relaxed);
	/* A write the parent's background thread had under way goes on there:
	 * the child's exit has none to wait for. */
	atomic_store_explicit(&gmt__core.writes_in_flight, 0, memory_order_relaxed);
	memset(gmt__core.kind_live, 0, sizeof(gmt__core.kind_live));
	memset(gmt__core.kind_count, 0, sizeof(gmt__core.kind_count));
	memset(gmt__core.device_peak, 0, sizeof(gmt__core.device_peak));
	memset(gmt__core.api_peak, 0, sizeof(gmt__core.api_peak));
#define GMT_X_ZERO(name, help) atomic_store_explicit(&gmt__core.stats.name, 0, memory_order_relaxed);
	GMT_STATS(GMT_X_ZERO)
#undef GMT_X_ZERO
	log_dropped_base = gmt__log_dropped();
	gmt__core.expected = gmt__core.first_seq = atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed);
	atomic_store_explicit(&gmt__core.consumer_running, false, memory_order_relaxed);
	atomic_store_explicit(&gmt__core.gate_marked, false, memory_order_relaxed);
	gmt__apply_after_fork();
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
			gmt__core.text_start = info->dlpi_addr + ph->p_vaddr;
			gmt__core.text_end = gmt__core.text_start + ph->p_memsz;
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

	atomic_store_explicit(&gmt__core.signal_pending, true, memory_order_relaxed);
	gmt__rings_wake(); /* a futex wake: async-signal-safe */
	if (gmt__core.signal_old.sa_flags & SA_SIGINFO) {
		if (gmt__core.signal_old.sa_sigaction != NULL)
			gmt__core.signal_old.sa_sigaction(sig, info, uctx);
	} else if (gmt__core.signal_old.sa_handler != SIG_DFL && gmt__core.signal_old.sa_handler != SIG_IGN) {
		gmt__core.signal_old.sa_handler(sig);
	}
	errno = saved;
}

_Static_assert(ATOMIC_BOOL_LOCK_FREE == 2, "the signal handler needs a lock-free flag");

static void install_signal(void)
{
	struct sigaction sa = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO | SA_RESTART };

	sigfillset(&sa.sa_mask);
	if (sigaction(SIGUSR2, &sa, &gmt__core.signal_old) != 0) {
		gmt__warn("cannot handle SIGUSR2 (%s); no signal snapshots", strerror(errno));
		return;
	}
	/* The thread that writes it must exist before any event does. */
	if (!atomic_exchange_explicit(&gmt__core.consumer_running, true, memory_order_relaxed))
		gmt__consumer_start();
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
	atomic_store_explicit(&gmt__core.exit_status, status & 0xff, memory_order_relaxed);
}

/* The leak check's rules: the file's first (they win), then the built-in. A
 * file that cannot be used is reported now and named again in the report. */
static void load_rules(void)
{
	const char *path = gmt__core.opt->suppressions;

	if (path != NULL && path[0] != '\0' &&
	    gmt__supp_load(&gmt__core.supp, path, gmt__core.supp_error, sizeof(gmt__core.supp_error)) < 0)
		gmt__warn("GPUMEMTRACE_SUPPRESSIONS: %s; the leak check applies none of its rules", gmt__core.supp_error);
	if (gmt__core.opt->leak_builtins && gmt__supp_add_builtins(&gmt__core.supp) < 0)
		gmt__warn("out of memory for the built-in leak rules; the leak check applies none");
}

static int init(void)
{
	Dl_info self;
	int r;

	gmt__core.opt = gmt__options();
	gmt__log_set_verbose(gmt__core.opt->verbose);
	if (gmt__secure()) {
		gmt__warn("secure execution (set-user-ID, set-group-ID or capabilities): not tracing; every call "
			  "passes through");
		return -EPERM;
	}
	read_ranks(&gmt__core.process);
	/* jansson seeds its hash tables at its first object, once per process:
	 * a fork in the middle of that (on the writer's thread) would leave a
	 * child waiting forever for a seed. Seeded here instead, on the first
	 * hook's thread. */
	json_object_seed(0);
	gmt__core.table = gmt__table_new();
	if (gmt__core.table == NULL) {
		gmt__warn("cannot allocate the live table; not tracing");
		return -ENOMEM;
	}
	r = gmt__history_init(&gmt__core.hist, (size_t)gmt__core.opt->history);
	if (r < 0)
		gmt__warn("cannot allocate the event history (%s); snapshots will have none", strerror(-r));
	gmt__core.have_hist = r == 0;
	gmt__core.depth = (int)gmt__core.opt->stack_depth;
	if (dladdr((void *)&find_text, &self) != 0)
		dl_iterate_phdr(find_text, self.dli_fbase);
	/* The consumer learns unwinding rules (unwind.h): a walk that needs one
	 * wakes it as a full ring does. */
	gmt__unwind_set_waker(gmt__rings_wake);
	if (gmt__core.depth > 0 && gmt__stack_init() < 0) {
		gmt__warn("cannot start the unwinder; recording without stacks");
		gmt__core.depth = 0;
	}
	gmt__core.python = gmt__core.depth > 0 && gmt__core.opt->python_stacks;
	if (gmt__core.python && gmt__py_probe())
		gmt__info("Python interpreter found: recording Python frames");
	r = pthread_key_create(&gmt__core.ring_key, ring_exit);
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
	if (gmt__core.opt->snapshot_on & GMT_TRIGGER_SIGNAL)
		install_signal();
	gmt__info("tracing pid %d: stacks %d frames, rings of %lld events, snapshots into %s",
		  (int)getpid(), gmt__core.depth, (long long)gmt__core.opt->ring_events, gmt__core.opt->dir);
	return 0;
}

/* True once the tracer is initialised and on. Initialises on first use, from
 * whichever hook comes first — possibly before our constructor, from another
 * library's. NOTE: not pthread_once: init() may re-enter a hook (dlsym, an
 * allocation by a library it loads) on the same thread, which must then pass
 * through instead of waiting for itself. */
bool gmt__ready_slow(void)
{
	/* A1 pairs with R1: a thread that sees READY sees what init() set up. */
	int s = atomic_load_explicit(&gmt__core.state, memory_order_acquire);

	if (s == GMT_READY)
		return true;
	if (s == GMT_OFF || gmt__tls.initialising)
		return false;
	s = GMT_UNINIT;
	if (atomic_compare_exchange_strong_explicit(&gmt__core.state, &s, GMT_INITIALISING,
						    memory_order_acq_rel, memory_order_acquire)) {
		int r;

		gmt__tls.initialising = true;
		r = init();
		gmt__tls.initialising = false;
		/* R1: publishes everything init() wrote. */
		atomic_store_explicit(&gmt__core.state, r == 0 ? GMT_READY : GMT_OFF, memory_order_release);
		return r == 0;
	}
	/* Another thread initialises; it takes microseconds. Bounded, so that a
	 * lock the initialising thread waits for (the loader's) can never make
	 * this thread wait forever: past the bound the call is not recorded. */
	for (int i = 0; i < 100000 && s == GMT_INITIALISING; i++) {
		sched_yield();
		s = atomic_load_explicit(&gmt__core.state, memory_order_acquire);
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

	gmt__table_regions(gmt__core.table, own_region, o);
	if (gmt__core.have_hist)
		gmt__history_regions(&gmt__core.hist, own_region, o);
	for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r))
		own_region(o, r, gmt__ring_bytes(r));
	lo = atomic_load_explicit(&gmt__core.consumer_stack_lo, memory_order_relaxed);
	hi = atomic_load_explicit(&gmt__core.consumer_stack_hi, memory_order_relaxed);
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
	int status = atomic_load_explicit(&gmt__core.exit_status, memory_order_relaxed);
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
	gmt__report("leak check: exiting with status %d (GPUMEMTRACE_LEAK_EXITCODE)", (int)gmt__core.opt->leak_exitcode);
	return (int)gmt__core.opt->leak_exitcode;
}

/* Under gpumemtrace run (GPUMEMTRACE_EXIT_NOTE): a process that recorded
 * allocations and wrote no snapshot says so, once, instead of ending in
 * silence; one that recorded none (a shell, a helper) stays quiet, and so
 * does one that wrote metrics (its output) or ran the leak check. */
static void exit_note(void)
{
	uint64_t events = atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed) - gmt__core.first_seq;

	if (!gmt__core.opt->exit_note || events == 0 || gmt__core.opt->leak_check || gmt__core.opt->metrics_dir[0] != '\0' ||
	    atomic_load_explicit(&gmt__core.stats.snapshots, memory_order_relaxed) != 0 ||
	    atomic_load_explicit(&gmt__core.stats.snapshot_errors, memory_order_relaxed) != 0)
		return;
	gmt__report("no snapshot written: no allocation ran out of memory (%llu allocations and frees recorded); "
		    "--snapshot-on exit writes one at exit, peak one of the run's peak",
		    (unsigned long long)events);
}

/* Whether a loaded object is a CUDA runtime (libcudart.so.N, shared). */
static int is_cudart(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *slash = strrchr(info->dlpi_name, '/');

	return strncmp(slash != NULL ? slash + 1 : info->dlpi_name, "libcudart.so", 12) == 0;
}

/* Under gpumemtrace run: a process that never reached a hook, with a CUDA
 * runtime loaded and no driver — the runtime looked for libcuda.so.1 and
 * found none ("CUDA driver version is insufficient") — says why nothing was
 * traced. A shell or a helper (no CUDA runtime) stays quiet. */
static void no_driver_note(void)
{
	void *driver;

	if (!gmt__options()->exit_note || !dl_iterate_phdr(is_cudart, NULL))
		return;
	driver = gmt__dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (driver != NULL) {
		gmt__dlclose(driver);
		return;
	}
	gmt__report("no CUDA driver was loaded: the program's CUDA runtime found no libcuda.so.1 (the NVIDIA "
		    "driver), so nothing was traced; without a GPU, CUDA programs run on the simulated GPU of a "
		    "gpumemtrace build (docs/simulator.md)");
}

__attribute__((destructor)) static void core_exit(void)
{
	int saved = errno, exit_with = -1;
	bool write, check;

	/* A process that never reached a hook (a shell, a launcher script that
	 * only runs the real program) writes no exit snapshot, but under the
	 * gate: there it owes one (nothing live: a clean result, which the gate
	 * must see), and its leak check. */
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) == GMT_UNINIT &&
	    (gmt__options()->gate || gmt__options()->leak_check))
		(void)gmt__ready();
	if (atomic_load_explicit(&gmt__core.state, memory_order_acquire) != GMT_READY) {
		no_driver_note();
		errno = saved;
		return;
	}
	write = gmt__core.opt->snapshot_on & GMT_TRIGGER_EXIT;
	check = gmt__core.opt->leak_check;
	atomic_store_explicit(&gmt__core.stopping, true, memory_order_relaxed);
	gmt__core_lock();
	/* A snapshot the background thread began before the stop is finished
	 * before the process ends (none begins after: the lock orders the
	 * stop before its next look) — unless its write hangs: the program's
	 * exit comes first after GMT_EXIT_WRITE_WAIT_MS. */
	for (int waited = 0; atomic_load_explicit(&gmt__core.writes_in_flight, memory_order_acquire) != 0; waited++) {
		if (waited == GMT_EXIT_WRITE_WAIT_MS) {
			gmt__warn("a snapshot the background thread is writing is not done after %d s: the process exits "
				  "without it", GMT_EXIT_WRITE_WAIT_MS / 1000);
			break;
		}
		gmt__core_unlock();
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		gmt__core_lock();
	}
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	gmt__info("at exit: %llu live allocations, %llu bytes; peak %llu bytes; %llu events recorded",
		  (unsigned long long)gmt__core.live_count, (unsigned long long)gmt__core.live_bytes,
		  (unsigned long long)gmt__core.peak_bytes,
		  (unsigned long long)(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed) - gmt__core.first_seq));
	/* An out-of-memory episode still open ends here: its report. */
	gmt__episode_settle(true);
	/* The run's peak, before the exit snapshot. */
	if (gmt__peak_settle(true))
		gmt__core_lock();
	/* NOTE: no CUDA call from a destructor: the driver may be gone. */
	if (write || check) {
		struct own_regions own = { 0 };
		struct gmt__snapshot_leaks lk = {
			.supp = &gmt__core.supp,
			.supp_error = gmt__core.supp_error[0] != '\0' ? gmt__core.supp_error : NULL,
			.classes = gmt__core.opt->leak_classes,
			.scan = gmt__core.opt->leak_scan,
			/* the loader's lock: a destructor may take it */
			.python = gmt__core.python && gmt__py_probe(),
			.stack_from = exit_caller_sp(),
			.exit_status = atomic_load_explicit(&gmt__core.exit_status, memory_order_relaxed),
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
		if (gmt__snapshot_take_leaks(GMT_REASON_EXIT, NULL, NULL, NULL, 0, &lk, !write) == 0 && write) /* releases the lock */
			gmt__gate_mark(false);
		if (check && lk.judged)
			exit_with = leak_verdict(&lk);
		else if (check)
			gmt__warn("leak check: not judged (the tracer ran out of memory); the program's exit status "
				  "is kept");
		free(lk.report);
		free(own.v);
	} else {
		gmt__core_unlock();
	}
	gmt__metrics_exit();
	exit_note();
	gmt__stats_sync();
#define GMT_X_REPORT(name, help)                                                              \
	gmt__info("%s: %llu (%s)", #name,                                                     \
		  (unsigned long long)atomic_load_explicit(&gmt__core.stats.name, memory_order_relaxed), help);
	GMT_STATS(GMT_X_REPORT)
#undef GMT_X_REPORT
	errno = saved;
	if (exit_with >= 0) {
		/* NOTE: _exit skips stdio's flush at the end of exit(): flush first. */
		fflush(NULL);
		_exit(exit_with);
	}
}


/* --- the public API (gpumemtrace.h) ----------------------------------------------- */

/* True when the API may act: traced, and not called from inside a hook. */
static bool api_ready(void)
{
	return gmt__tls.depth == 0 && gmt__ready();
}

int gmt__api_dump(char *path, size_t len)
{
	struct gmt__device_state state;
	uintptr_t ctx;
	int saved = errno, device, r;

	if (!api_ready())
		return -ENOSYS;
	device = gmt__current_device(&ctx);
	if (ctx != 0)
		gmt__device_query(device, &state);
	gmt__core_lock();
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	r = gmt__snapshot_take(GMT_REASON_API, NULL, ctx != 0 ? &state : NULL, path, len); /* releases the lock */
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
	if (gmt__tls.ntags < GMT_STACK_MAX_TAGS)
		gmt__tls.tags[gmt__tls.ntags] = id;
	gmt__tls.ntags++;
	return 0;
}

int gmt__api_tag_pop(void)
{
	if (!api_ready())
		return -ENOSYS;
	if (gmt__tls.ntags == 0)
		return -ENOENT;
	gmt__tls.ntags--;
	return 0;
}

/* A device's live bytes (or its peak since the last reset), every event
 * completed before the call applied. */
static int api_bytes(int device, unsigned long long *bytes, bool peak)
{
	if (!api_ready())
		return -ENOSYS;
	if (bytes == NULL || device < -2 || device >= GMT_MAX_DEVICES)
		return -EINVAL;
	gmt__core_lock();
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	if (peak)
		*bytes = gmt__core.api_peak[device + 2];
	else
		*bytes = device == -2 ? gmt__core.live_bytes : gmt__slot_live(device + 1);
	gmt__core_unlock();
	return 0;
}

int gmt__api_peak_bytes(int device, unsigned long long *bytes)
{
	return api_bytes(device, bytes, true);
}

int gmt__api_peak_reset(void)
{
	if (!api_ready())
		return -ENOSYS;
	gmt__core_lock();
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	gmt__core.api_peak[0] = gmt__core.live_bytes;
	for (int i = 0; i <= GMT_MAX_DEVICES; i++)
		gmt__core.api_peak[i + 1] = gmt__slot_live(i);
	gmt__core_unlock();
	return 0;
}

int gmt__api_mark(unsigned long long *mark)
{
	if (!api_ready())
		return -ENOSYS;
	if (mark == NULL)
		return -EINVAL;
	gmt__core_lock();
	*mark = atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed);
	gmt__drain_until(*mark);
	gmt__core_unlock();
	return 0;
}

/* Live memory entries made at or after a mark, on a device. */
struct since {
	uint64_t mark, bytes, count;
	int device;
};

static int add_since(void *ctx, const struct gmt__entry *e)
{
	struct since *s = ctx;

	if ((e->space == GMT_SPACE_MEMORY || e->space == GMT_SPACE_ARRAY || e->space == GMT_SPACE_HANDLE) &&
	    e->link >= s->mark && (s->device == -2 || e->device == s->device)) {
		s->bytes += e->size;
		s->count++;
	}
	return 0;
}

int gmt__api_live_since(unsigned long long mark, int device, unsigned long long *bytes, unsigned long long *count)
{
	struct since s = { .mark = mark, .device = device };

	if (!api_ready())
		return -ENOSYS;
	if (device < -2 || device >= GMT_MAX_DEVICES)
		return -EINVAL;
	gmt__core_lock();
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	(void)gmt__table_each(gmt__core.table, add_since, &s);
	gmt__core_unlock();
	if (bytes != NULL)
		*bytes = s.bytes;
	if (count != NULL)
		*count = s.count;
	return 0;
}

int gmt__api_step(unsigned long long step)
{
	struct gmt__hist_cause cause = { .time_ns = gmt__now_ns(CLOCK_REALTIME), .tid = gmt__tls.tid };

	if (!api_ready())
		return -ENOSYS;
	gmt__core_lock();
	cause.seq = atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed);
	gmt__drain_until(cause.seq);
	if (gmt__core.have_hist)
		gmt__history_step(&gmt__core.hist, &cause, step);
	gmt__core_unlock();
	return 0;
}

const char *const gmt__labels[GMT_LABEL_COUNT] = {
#define GMT_X_NAME(sym, base, ver, ptsz) [GMT_API_##sym] = #sym,
	GMT_HOOKS(GMT_X_NAME)
#undef GMT_X_NAME
#define GMT_X_LABEL(name) [GMT_LABEL_##name] = #name,
	GMT_FRAMEWORK_LABELS(GMT_X_LABEL)
#undef GMT_X_LABEL
};

enum gmt__label gmt__framework_label(const char *name)
{
	for (int i = GMT_API_COUNT; i < GMT_LABEL_COUNT; i++) {
		if (strcmp(gmt__labels[i], name) == 0)
			return (enum gmt__label)i;
	}
	return GMT_LABEL_framework;
}

/* The largest framework state taken: a snapshot's worth of blocks and
 * frames, never a program's memory. */
#define GMT_FRAMEWORK_MAX (256u << 20)

int gmt__api_framework(const char *json)
{
	enum gmt__label label = GMT_LABEL_framework;
	int device = GMT_DEVICE_CURRENT;
	uint64_t size = 0;
	json_error_t err;
	json_t *doc, *reason;
	char *text;
	bool exit, api;

	if (!api_ready())
		return -ENOSYS;
	if (json == NULL)
		return -EINVAL;
	if (strnlen(json, GMT_FRAMEWORK_MAX + 1) > GMT_FRAMEWORK_MAX)
		return -E2BIG;
	doc = json_loads(json, JSON_REJECT_DUPLICATES, &err);
	reason = doc != NULL ? json_object_get(doc, "reason") : NULL;
	if (json_is_string(reason) && strcmp(json_string_value(reason), "watch") == 0) {
		/* Its out-of-memory errors are reported from now on. */
		json_t *name = json_object_get(doc, "name");
		int r = json_is_string(name) && json_string_length(name) > 0 && json_string_length(name) < 24 &&
				strlen(json_string_value(name)) == json_string_length(name)
			? 0
			: -EINVAL;

		if (r == 0)
			gmt__episode_watch(json_string_value(name));
		json_decref(doc);
		return r;
	}
	if (!json_is_object(doc) || !json_is_string(reason) ||
	    (strcmp(json_string_value(reason), "oom") != 0 && strcmp(json_string_value(reason), "exit") != 0 &&
	     strcmp(json_string_value(reason), "api") != 0)) {
		json_decref(doc);
		return -EINVAL;
	}
	/* NOTE: a state out of the schema's form is refused whole, never written
	 * into a snapshot that fails docs/snapshot.schema.json (issue 35). */
	if (gmt__framework_form_check(doc) != 0) {
		json_decref(doc);
		return -EINVAL;
	}
	exit = strcmp(json_string_value(reason), "exit") == 0;
	api = strcmp(json_string_value(reason), "api") == 0;
	if (!exit && !api) {
		/* The request its error named, and where. */
		json_t *oom = json_object_get(doc, "oom"), *name = json_object_get(doc, "name");
		json_t *dev = json_object_get(oom, "device"), *req = json_object_get(oom, "requested_bytes");

		label = gmt__framework_label(json_is_string(name) ? json_string_value(name) : "");
		if (json_is_integer(dev) && json_integer_value(dev) >= 0 && json_integer_value(dev) < GMT_MAX_DEVICES)
			device = (int)json_integer_value(dev);
		if (json_is_integer(req) && json_integer_value(req) >= 0)
			size = (uint64_t)json_integer_value(req);
	}
	/* Written into the document as jansson writes it: valid JSON whatever
	 * the caller's spacing. */
	text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	if (text == NULL)
		return -ENOMEM;
	if (exit)
		gmt__episode_framework_exit(text);
	else if (api)
		gmt__episode_framework_api(text);
	else
		gmt__on_framework_oom(text, (uint16_t)label, size, device);
	return 0;
}

int gmt__api_live_bytes(int device, unsigned long long *bytes)
{
	return api_bytes(device, bytes, false);
}

