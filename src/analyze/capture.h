/* A snapshot as captured: what the tracer copied under the consumer's lock
 * (the live entries, the history) and the numbers it handed over, released
 * before analysis starts. The input of analysis (model.h) and of the writer
 * (report/snapshot.h); nothing here changes while they run. */
#ifndef GMT_CAPTURE_H
#define GMT_CAPTURE_H

#include "analyze/leaks.h"
#include "analyze/suppress.h"
#include "intercept/device.h"
#include "state/history.h"
#include "state/table.h"
#include "tracer/options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Devices one snapshot describes at most. */
#define GMT_SNAPSHOT_MAX_DEVICES 64

struct gmt__snapshot_device {
	int index;
	uint64_t live_bytes;   /* tracked, this process */
	const struct gmt__device_state *state; /* what the driver said; NULL: not asked */
};

/* Who the process is: its host and, in a distributed job, its rank. */
struct gmt__snapshot_process {
	int ppid;
	const char *host;
	int64_t rank, local_rank, world_size; /* -1: not set */
	const char *rank_variable;           /* the variable rank came from, or NULL */
};

struct gmt__snapshot_request {
	const char *api;       /* the entry point that failed, e.g. "cuMemAlloc_v2"; or the framework */
	bool by_framework;     /* a framework's allocator refused it without a driver failure (api: its name) */
	uint64_t size;
	int device;
	int result;            /* the CUresult it returned */
	int kind;              /* enum gmt__kind it asked for */
	uint32_t stack;        /* the asking thread's stack (0: none) */
	uint64_t failure;      /* its ordinal among the process's out-of-memory results, from 1 */
	uint32_t tid;          /* the thread it failed on (gettid), 0: not known */
	char thread[16];       /* that thread's name (PR_GET_NAME), "" when not known */
};

/* An out-of-memory episode (docs/snapshot-format.md "episode"): the
 * failures a program saw for one need of memory — a caching allocator's
 * first failure, its release of cache, its retries — from the first to the
 * one the program was told of. Failures belong to one episode while no
 * allocation of device memory succeeded on that device since the last of
 * them, each comes within GMT_EPISODE_GAP_NS (5 s) of the one before
 * or of the end of the snapshot written at it, and each comes from the same
 * call site as the one before or asks for the same after memory was freed
 * (tracer/episode.c has the whole rule). */
#define GMT_EPISODE_LISTED 32  /* failures listed: the first 31 and the latest */
#define GMT_EPISODE_SITES 64   /* sites of freed memory kept; the rest add to "other" */

/* How an episode ended, when it has. */
#define GMT_EPISODE_ENDS(X)                                                          \
	X(OPEN, "open")       /* still going on when the snapshot was taken */        \
	X(SUCCESS, "success") /* an allocation of device memory succeeded there */    \
	X(GAP, "gap")         /* no further failure within GMT_EPISODE_GAP_NS */      \
	X(OTHER_DEVICE, "other_device") /* a failure on another device began one */   \
	X(OTHER_SITE, "other_site") /* one from another call site (no release and retry) began one */ \
	X(REPORTED, "reported") /* its framework told the program; another failure came */ \
	X(EXIT, "exit")       /* the process exited */

enum gmt__episode_end {
#define GMT_X(id, word) GMT_EPISODE_##id,
	GMT_EPISODE_ENDS(GMT_X)
#undef GMT_X
	GMT_EPISODE_END_COUNT
};

const char *gmt__episode_end_name(enum gmt__episode_end end);

struct gmt__episode_failure {
	uint64_t failure;       /* the process's ordinal of out-of-memory results */
	uint64_t time_ns;       /* CLOCK_REALTIME */
	uint64_t size;
	uint64_t live_bytes;    /* the process's tracked live bytes then */
	uint64_t freed_bytes, freed_count; /* freed since the episode's failure before it */
	uint32_t stack;
	uint16_t api;           /* index into the snapshot's api_names */
	uint8_t kind;
	uint32_t tid;           /* the thread it failed on, and its name (gmt__snapshot_request's) */
	char thread[16];
};

/* Memory freed during the episode, by the stack that had allocated it. */
struct gmt__episode_site {
	uint32_t stack;
	uint8_t kind;
	uint64_t bytes, count;
};

struct gmt__episode {
	uint64_t id;            /* this process's episodes, from 1 */
	int device;
	uint64_t failures;      /* so far */
	uint64_t described;     /* the failure (1..failures) this snapshot was taken at; 0: at the episode's end */
	enum gmt__episode_end end;
	uint64_t first_ns, last_ns; /* CLOCK_REALTIME of the first and the latest failure */
	uint64_t not_written;   /* failures whose moment no snapshot was taken at (a storm) */
	uint64_t left_out;      /* episodes before this one with no snapshot or report of their own (a storm of episodes) */
	int nlisted;
	struct gmt__episode_failure listed[GMT_EPISODE_LISTED];
	uint64_t freed_bytes, freed_count; /* since the first failure */
	int nsites;
	struct gmt__episode_site sites[GMT_EPISODE_SITES];
	uint64_t other_bytes, other_count; /* freed memory of sites past the list */
};

struct gmt__snapshot_stat {
	const char *name;
	uint64_t value;
};

/* The leak check of an exit snapshot: what it is given, and what it found.
 * Every live allocation gets a class (leaked, referenced, cached) and may be
 * suppressed by a rule; docs/guide.md "Leak check" says what they mean. */
struct gmt__snapshot_leaks {
	/* In. */
	const struct gmt__supp *supp;   /* rules, first match wins; may be NULL */
	const char *supp_error;         /* the suppressions file was refused: why; or NULL */
	unsigned classes;               /* enum gmt__leak_class_bit: what counts */
	bool scan;                      /* run the pointer scan (leaks.h) */
	bool python;                    /* a Python interpreter runs in the process */
	uintptr_t stack_from;           /* the scan reads the calling thread's stack from here up */
	const struct gmt__range *skip;  /* the tracer's own memory, never read */
	size_t nskip;
	int exit_status;                /* what the program passed to exit(); -1: not known */
	bool want_report;               /* fill `report` */
	/* Out, valid when the writer returns with judged set — whether or not
	 * the file could be written. */
	bool judged;                    /* the allocations were classified */
	uint64_t counted_count, counted_bytes; /* unsuppressed allocations of counted classes */
	int suspects;                   /* growth suspects found */
	char *report;                   /* the report, lines without prefix, malloc'd; or NULL */
};

/* Why a snapshot is written: a trigger (options.h), or gmt_dump(). */
#define GMT_REASONS(X) GMT_TRIGGERS(X) X(API, "api")

enum gmt__reason {
#define GMT_X(id, word) GMT_REASON_##id,
	GMT_REASONS(GMT_X)
#undef GMT_X
	GMT_REASON_COUNT
};

/* "oom", "exit", ...; NULL for a value outside the list. */
const char *gmt__reason_name(enum gmt__reason reason);

struct gmt__snapshot {
	enum gmt__reason reason;
	uint64_t seq;          /* this process's snapshot number, from 1 */
	uint64_t time_ns;      /* CLOCK_REALTIME */
	int pid;
	int argc;
	char *const *argv;     /* may be NULL (argc 0) */
	bool argv_truncated;   /* the command line was longer than argv holds */
	uint64_t live_bytes, live_count, peak_bytes, total_allocs, total_frees;
	const struct gmt__snapshot_device *devices;
	int ndevices;
	const struct gmt__snapshot_request *failed; /* GMT_REASON_OOM only, else NULL */
	const struct gmt__episode *episode;         /* GMT_REASON_OOM: its episode; else NULL */
	/* A framework's allocator state as handed over (gmt_framework): a JSON
	 * object, checked, compact; or NULL. */
	const char *framework;
	/* The live entries (any order), and the history (events, series,
	 * sites; may be NULL): the snapshot's own, nothing else changes them
	 * while it is written (gmt__table_copy, gmt__history_copy). */
	const struct gmt__entry *entries;
	size_t nentries;
	const char *const *api_names; /* api label index → name */
	int napi;
	const struct gmt__snapshot_stat *stats; /* the tracer's own counters */
	int nstats;
	const struct gmt__snapshot_process *process; /* may be NULL */
	const struct gmt__history *history;
	/* GPUMEMTRACE_SITE_LIBRARIES (sites.h), or NULL. */
	const char *site_libraries;
	/* Out, may be NULL: the number the snapshot got (seq, or a later one
	 * when names were taken). */
	uint64_t *seq_out;
	/* Write over this process's own file of number seq (an episode's file,
	 * rewritten at a later failure) instead of taking a free name. */
	bool replace;
	/* Out: for an "oom" snapshot, a few lines for a human (requested, free,
	 * verdict, top sites; no path), NUL-terminated, whether or not the file
	 * could be written ("" when the diagnosis could not be made); may be
	 * NULL. */
	char *report;
	size_t report_len;
	/* The leak check (exit snapshots), or NULL. */
	struct gmt__snapshot_leaks *leaks;
	/* Write no file: build the document for the leak report only. */
	bool no_file;
};

#endif /* GMT_CAPTURE_H */
