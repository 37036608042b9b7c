/* Snapshot writing: one JSON document (DESIGN.md §5's required keys, and more)
 * built from the live table, the interned stacks and the numbers the core hands
 * over, written atomically into GPUMEMTRACE_DIR as
 * gpumemtrace.<pid>.<reason>.<seq>.json. Runs on the consumer side with the
 * consumer lock held; never from a signal handler. */
#ifndef GMT_SNAPSHOT_H
#define GMT_SNAPSHOT_H

#include "table.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gmt__snapshot_device {
	int index;
	bool have_info;        /* total/free known (cuMemGetInfo_v2 answered) */
	uint64_t total_bytes;
	uint64_t free_bytes;
	uint64_t live_bytes;   /* tracked, this process */
};

struct gmt__snapshot_request {
	const char *api;       /* the entry point that failed, e.g. "cuMemAlloc_v2" */
	uint64_t size;
	int device;
	int result;            /* the CUresult it returned */
	uint64_t failure;      /* its ordinal among the process's out-of-memory results, from 1 */
};

struct gmt__snapshot_stat {
	const char *name;
	uint64_t value;
};

struct gmt__snapshot {
	const char *reason;    /* "oom", "exit", "peak", "signal", "api" */
	uint64_t seq;          /* this process's snapshot number, from 1 */
	uint64_t time_ns;      /* CLOCK_REALTIME */
	int pid;
	int argc;
	char *const *argv;     /* may be NULL (argc 0) */
	uint64_t live_bytes, live_count, peak_bytes, total_allocs, total_frees;
	const struct gmt__snapshot_device *devices;
	int ndevices;
	const struct gmt__snapshot_request *failed; /* reason "oom" only, else NULL */
	struct gmt__table *table;
	const char *const *api_names; /* api label index → name */
	int napi;
	const struct gmt__snapshot_stat *stats; /* the tracer's own counters */
	int nstats;
	/* Called exactly once, on every path, as soon as the writer no longer reads
	 * `table` — before it resolves stack frames, which takes the dynamic
	 * loader's lock: the caller releases its own lock here, so that a thread
	 * waiting for it while holding the loader's lock (an allocation in a
	 * library constructor) cannot deadlock with the snapshot. May be NULL. */
	void (*table_done)(void *arg);
	void *table_done_arg;
};

/* Writes the snapshot into `dir`, atomically (a temporary file in the same
 * directory, then a rename that never replaces an existing file), mode 0600,
 * never through a symlink. On success stores the final path in path[0..len)
 * (path may be NULL) and returns 0; otherwise returns a negative errno, sets
 * path to "" and leaves no file behind: -EEXIST when the name is taken (by
 * anything, a symlink included: the caller may try the next seq), -EINVAL for
 * a reason that is not one lowercase word, -ENAMETOOLONG when the path does not
 * fit in len, else the errno of the failing call (-ENOSPC, -EACCES, ...).
 * errno is left as it was. dir NULL or "" means ".".
 * Live entries of GMT_SPACE_MEMORY, _ARRAY and _HANDLE are the "allocations";
 * reservations and mappings go under "vmm". Frames are resolved after
 * table_done, at dump time: function, file, line and inlined frames from the
 * debug information through libdw when it can be loaded (symbols.h), else the
 * loader's name (dladdr) with file and line null; "modules" lists each module a
 * frame names, with its load base and build-id, for exact offline symbolisation. */
int gmt__snapshot_write(const struct gmt__snapshot *s, const char *dir, char *path, size_t len);

#endif /* GMT_SNAPSHOT_H */
