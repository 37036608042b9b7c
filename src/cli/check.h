/* `gpumemtrace check`, the CI leak gate: what its three files share. check.c
 * runs the command and judges; check_read.c reads snapshots into the structs
 * below; check_report.c says the verdict (stderr, JUnit XML, GitHub
 * annotations). */
#ifndef GMT_CHECK_H
#define GMT_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tracer/options.h"

/* Exit statuses of a judged run (launcher.h has the others). */
enum {
	GMT_EXIT_LEAKS = 23, /* a leak limit is exceeded */
	GMT_EXIT_PEAK = 24,  /* a peak or growth limit is exceeded */
	GMT_EXIT_NO_SNAPSHOT = 125, /* none written, or one unreadable */
};

/* The leak classes of a snapshot's leaks.sites (docs/guide.md, "Leak
 * check") are the GMT_CLASS_* bits of options.h, and at the tensor level
 * (--level tensors) CLI_CLASS_GROWING: a tensor site that kept growing
 * (leaks.suspects), its tensors still live at exit. Their names: */
#define CLI_CLASS_GROWING (1u << 31)
const char *cli_class_name(unsigned cls);

/* Where an allocation was made, for people: the innermost frame of its stack
 * outside CUDA (not in a module named libcuda* or libgpumemtrace*, and not a
 * function named cuda* or cu<Capital>*), preferring one with a file and a
 * line. */
struct cli_site_place {
	char *label; /* "function (file:line)", or what there is */
	char *file;  /* NULL unless the frame chosen has a file and a line */
	int64_t line;
};

/* One site of a snapshot's leaks.sites. */
struct cli_leak_site {
	unsigned cls;        /* one GMT_CLASS_* bit */
	char *suppressed_by; /* the rule, NULL when not suppressed */
	bool counted;        /* as the gate reads it (--leak-classes), not the tracer */
	bool framework;      /* the framework's segments (--level tensors: not judged) */
	uint64_t count, bytes;
	int64_t stack;
	int64_t pid;
	struct cli_site_place place;
};

/* One site of a snapshot's sites[] (peaks by site, for --max-growth's list
 * of what grew); sites with the same label are added up. */
struct cli_peak_site {
	char *label;
	uint64_t peak_bytes;
};

struct cli_snapshot {
	char *path;
	int64_t pid;
	/* At the tensor level, peak_bytes is the framework's peak of its
	 * tensors (the sum over its devices); driver_peak_bytes the process's
	 * peak of driver allocations (summary.peak_bytes) either way. */
	uint64_t peak_bytes, live_bytes, driver_peak_bytes;
	bool tensors; /* read at the tensor level (GMT_READ_TENSORS and a hand-over) */
	bool scan_done;
	char *scan_why; /* why the reference scan did not finish, or NULL */
	char *scan_unseen; /* references the scan cannot see in the process (leaks.scan.unseen), or NULL */
	struct cli_leak_site *leaks;
	size_t nleaks;
	struct cli_peak_site *peaks; /* empty when the snapshot has no sites[] */
	size_t npeaks;
};

/* What cli_snapshot_read requires besides format, version, pid, summary and
 * stacks. */
enum {
	GMT_READ_EXIT = 1u << 0,  /* reason "exit" and a leaks section */
	GMT_READ_PEAKS = 1u << 1, /* also sites[] into peaks, when it is there */
	/* The tensor level where the snapshot has one (docs/ci.md, "Levels"):
	 * the framework's peak, its growing tensor sites as leak sites, its
	 * segments' leak sites marked framework, tensors.sites[] into peaks. */
	GMT_READ_TENSORS = 1u << 2,
};

/* Reads the snapshot at path into *out (zeroed first). Returns 0; or -EINVAL
 * (not a snapshot this version reads: bad JSON, wrong format or version, a
 * required key missing or of the wrong type), -ENOMEM, or an errno of opening
 * it, with a one-line message naming the file in err[0..errlen). *out then
 * holds nothing to free. */
int cli_snapshot_read(const char *path, unsigned flags, struct cli_snapshot *out, char *err,
		      size_t errlen);

void cli_snapshot_free(struct cli_snapshot *s);

/* The limits of one run (--max-*, --baseline, --leak-classes). */
struct cli_limits {
	/* The leak limits: a limit given alone is the only one (the other is
	 * UINT64_MAX, no limit); none given, both are 0: any counted leak fails. */
	uint64_t max_leak_bytes, max_leaks;
	bool has_max_leak_bytes, has_max_leaks;
	bool has_max_peak;
	uint64_t max_peak;
	const char *baseline; /* its path, NULL for none */
	bool growth_is_pct;
	uint64_t max_growth; /* bytes, or percent of the baseline's peak */
	unsigned classes;    /* the GMT_CLASS_* bits that count */
	bool tensors;        /* --level tensors */
};

/* The leak limits in force, for the reports: "100 bytes (--max-leak-bytes),
 * 2 allocations (--max-leaks)", or the one given and "no limit on" the other,
 * or that none was given. Returns out. */
const char *cli_leak_limits_text(const struct cli_limits *l, char *out, size_t len);

/* The verdict on one run, computed by check.c, told by check_report.c. */
struct cli_verdict {
	const struct cli_limits *limits;
	struct cli_snapshot *snaps; /* the run's exit snapshots */
	size_t nsnaps;
	const struct cli_snapshot *baseline; /* NULL without --baseline */

	/* The command's exit status (128+signal when killed); 0 when it passed. */
	int command_status;
	int command_signal; /* the signal that killed it, or 0 */
	/* Why no verdict could be reached (no exit snapshot, or an unreadable
	 * one): one line; NULL when the snapshots were read. */
	const char *error;

	/* The counted leak sites of every process, most bytes first, and their
	 * totals. */
	const struct cli_leak_site **counted;
	size_t ncounted;
	uint64_t leak_bytes, leak_count;
	uint64_t suppressed_bytes, suppressed_count;

	/* The largest peak of a process, and which. */
	uint64_t peak;
	const struct cli_snapshot *peak_snap;

	/* --max-growth: the run's peak minus the baseline's, and the limit in
	 * bytes. */
	int64_t growth;
	uint64_t growth_limit;

	bool leaks_failed, peak_failed, growth_failed;
	int status; /* the exit status this verdict comes to */

	const char *dir; /* where the snapshots are */
	bool dir_kept;   /* it stays after the run */
};

/* The report on stderr: every line "gpumemtrace: check: ...". */
void cli_report_text(const struct cli_verdict *v);

/* The ::error (leak limit exceeded) or ::warning lines of GitHub Actions for
 * each counted leak site on f; file names relative to `workspace` when under
 * it (NULL: as they are). */
void cli_report_github(const struct cli_verdict *v, const char *workspace, FILE *f);

/* Writes the JUnit XML of the verdict to path, atomically (a temporary file
 * beside it, then rename). Returns 0 or a negative errno with a one-line
 * message in err[0..errlen). */
int cli_report_junit(const struct cli_verdict *v, const char *path, char *err, size_t errlen);

#endif /* GMT_CHECK_H */
