/* When and how the tracer writes a snapshot: under the lock, everything
 * before it applied, the document handed to report/snapshot.c; the
 * out-of-memory report; the gate's mark. */
#define _GNU_SOURCE
#include "tracer/tracer.h"

#include "report/metrics.h"

#include "intercept/hooks.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* --- snapshots ------------------------------------------------------------------ */

/* The command line, from /proc/self/cmdline (read on the consumer side): its
 * first ARGV_MAX arguments within ARGV_BYTES; *truncated when it had more
 * (the last argument kept may then be cut). */
#define ARGV_BYTES 16384
#define ARGV_MAX 256
static int read_argv(char ***argv_out, bool *truncated)
{
	static char buf[ARGV_BYTES];
	static char *argv[ARGV_MAX];
	ssize_t n, len = 0, i;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC), argc = 0;
	char more;

	*truncated = false;
	if (fd < 0)
		return 0;
	while (len < (ssize_t)sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += n;
	if (len == (ssize_t)sizeof(buf) - 1 && read(fd, &more, 1) > 0)
		*truncated = true;
	close(fd);
	buf[len] = '\0';
	for (i = 0; i < len && argc < ARGV_MAX; i += (ssize_t)strlen(buf + i) + 1)
		argv[argc++] = buf + i;
	if (i < len)
		*truncated = true;
	*argv_out = argv;
	return argc;
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
			  gmt__core.opt->dir, strerror(-r));
}

/* The oom report, a line at a time, and where the snapshot is — or that it
 * could not be written (r: the writer's error). A report, not a warning: one
 * per episode, never capped. */
void gmt__oom_report(const char *report, const char *path, int r)
{
	const char *line = report, *next;

	for (; line != NULL && *line != '\0'; line = next) {
		next = strchr(line, '\n');
		gmt__report("%s%.*s", line == report ? "" : "  ",
			    (int)(next != NULL ? (size_t)(next - line) : strlen(line)), line);
		if (next != NULL)
			next++;
	}
	if (r < 0)
		gmt__report("  snapshot: not written (%s)", strerror(-r));
	else
		gmt__report("  snapshot: %s", path);
}

/* What one snapshot is taken with (gmt__snapshot_take and friends). */
struct take {
	enum gmt__reason reason;
	const struct gmt__snapshot_request *failed;
	const struct gmt__device_state *state;
	char *out;
	size_t outlen;
	struct gmt__snapshot_leaks *leaks;
	bool no_file;
	const struct gmt__episode *episode;
	const char *framework;       /* a framework's state (oom: the episode's; exit: gmt__core's) */
	bool exit_framework;         /* take a copy of the state handed over for exit */
	bool api_framework;          /* take the state handed over for gmt_dump() */
	uint64_t replace_seq;        /* rewrite this number's file (an episode's) */
	struct gmt__oom_write *oom;  /* keep the oom report here instead of printing it */
};

#define GMT_X_ONE(name, help) +1
enum { NSTATS = 1 GMT_STATS(GMT_X_ONE) };
#undef GMT_X_ONE

/* A snapshot's capture: what its document is made of, copied under the lock
 * (capture), written without it (publish) — at once, or later for an
 * episode of a storm (gmt__snapshot_keep_oom): then everything it points to
 * is its own. */
struct gmt__capture {
	struct gmt__snapshot s;
	struct gmt__snapshot_device devs[GMT_SNAPSHOT_MAX_DEVICES];
	struct gmt__snapshot_stat stats[NSTATS];
	struct gmt__snapshot_process process;
	char host[256];
	struct gmt__snapshot_request failed;
	struct gmt__device_state state;
	struct gmt__episode episode;
	char report[sizeof(((struct gmt__oom_write *)0)->report)];
	struct gmt__entry *entries;
	struct gmt__history *hist;
	char *framework; /* its own copy, or NULL */
	int result;      /* of the capture: 0, or a negative errno */
};

/* Copies what the document needs of the live table, the history and the
 * process into c. Called with the lock held and everything before it
 * applied; returns with the lock RELEASED (here and only here): resolving
 * frames takes the loader's lock, and a document of a million allocations
 * takes a while. `kept`: c outlives the call (its framework state copied,
 * its number claimed when it is published). capture_held: the same, with
 * the lock still held on return (a peak's copy, taken while the events
 * are applied). */
static void capture_held(const struct take *t, struct gmt__capture *c, bool kept)
{
	struct gmt__snapshot *s = &c->s;
	char **argv = NULL;
	int r, i = 1;

	GMT_CHECK(gmt__core_held());
	memset(c, 0, sizeof(*c));
	c->process = gmt__core.process;
	c->stats[0] = (struct gmt__snapshot_stat){
		"events", atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed) - gmt__core.first_seq
	};
	gmt__stats_sync();
#define GMT_X_READ(name, help) \
	c->stats[i++] = (struct gmt__snapshot_stat){ #name, atomic_load_explicit(&gmt__core.stats.name, memory_order_relaxed) };
	GMT_STATS(GMT_X_READ)
#undef GMT_X_READ
	if (t->failed != NULL)
		c->failed = *t->failed;
	if (t->state != NULL)
		c->state = *t->state;
	if (t->episode != NULL)
		c->episode = *t->episode;
	*s = (struct gmt__snapshot){
		.reason = t->reason,
		.time_ns = gmt__now_ns(CLOCK_REALTIME),
		.pid = getpid(),
		.live_bytes = gmt__core.live_bytes,
		.live_count = gmt__core.live_count,
		.peak_bytes = gmt__core.peak_bytes,
		.total_allocs = gmt__core.total_allocs,
		.total_frees = gmt__core.total_frees,
		.devices = c->devs,
		.failed = t->failed != NULL ? &c->failed : NULL,
		.episode = t->episode != NULL ? &c->episode : NULL,
		.framework = t->framework,
		.api_names = gmt__labels,
		.napi = GMT_LABEL_COUNT,
		.stats = c->stats,
		.nstats = NSTATS,
		.process = &c->process,
		.report = t->failed != NULL ? c->report : NULL,
		.report_len = sizeof(c->report),
		.leaks = t->leaks,
		.site_libraries = gmt__core.opt->site_libraries,
		.no_file = t->no_file,
	};
	s->argc = read_argv(&argv, &s->argv_truncated);
	s->argv = argv;
	for (int d = 0; d < GMT_MAX_DEVICES && s->ndevices < GMT_SNAPSHOT_MAX_DEVICES; d++) {
		bool asked = t->state != NULL && t->state->index == d;
		uint64_t live = gmt__slot_live(d + 1);

		if (live == 0 && !asked && (t->failed == NULL || t->failed->device != d))
			continue;
		c->devs[s->ndevices++] = (struct gmt__snapshot_device){
			.index = d, .live_bytes = live, .state = asked ? &c->state : NULL,
		};
	}
	if (gethostname(c->host, sizeof(c->host)) == 0) {
		c->host[sizeof(c->host) - 1] = '\0';
		c->process.host = c->host;
	} else {
		c->process.host = NULL;
	}
	c->process.ppid = getppid();
	/* A name already taken (a file of another run with a recycled pid, or
	 * one planted there) is never replaced: the writer takes the next
	 * number, and says which (seq_out). This one's number is claimed now,
	 * or when a kept capture is published. */
	if (t->replace_seq != 0) {
		s->seq = t->replace_seq;
		s->replace = true;
	} else if (!kept) {
		s->seq = ++gmt__core.snapshot_seq;
	}
	/* The capture: the snapshot's own copy of the live entries and of the
	 * history. */
	r = gmt__table_copy(gmt__core.table, &c->entries, &s->nentries);
	s->entries = c->entries;
	/* The exit snapshot's framework state, copied: another thread may hand
	 * over a newer one while this is written; a kept episode's, which the
	 * next episode frees. */
	if (r == 0 && (t->exit_framework || kept)) {
		const char *from = t->exit_framework ? gmt__core.framework_exit : t->framework;

		c->framework = from != NULL ? strdup(from) : NULL;
		r = from != NULL && c->framework == NULL ? -ENOMEM : 0;
		s->framework = c->framework;
	}
	/* A gmt_dump()'s: handed over just before it, for it alone. */
	if (r == 0 && t->api_framework && gmt__core.framework_api != NULL) {
		c->framework = gmt__core.framework_api;
		gmt__core.framework_api = NULL;
		s->framework = c->framework;
	}
	if (r == 0 && gmt__core.have_hist) {
		c->hist = gmt__history_copy(&gmt__core.hist);
		r = c->hist != NULL ? 0 : -ENOMEM;
		s->history = c->hist;
	}
	c->result = r;
}

static void capture(const struct take *t, struct gmt__capture *c, bool kept)
{
	capture_held(t, c, kept);
	gmt__core_unlock();
}

static void capture_free(struct gmt__capture *c)
{
	free(c->entries);
	free(c->framework);
	gmt__history_copy_free(c->hist);
}

/* Writes the document of capture c (the lock not held), then the report and
 * the warnings; frees what c holds. Returns 0, or a negative errno. */
static int publish(const struct take *t, struct gmt__capture *c)
{
	struct gmt__snapshot *s = &c->s;
	char path[PATH_MAX];
	uint64_t used = 0;
	int r = c->result;

	if (s->seq == 0) {
		gmt__core_lock();
		s->seq = ++gmt__core.snapshot_seq;
		gmt__core_unlock();
	}
	s->seq_out = &used;
	c->report[0] = '\0';
	if (r == 0) {
		struct gmt__metrics_tensors mt = { 0 };
		bool metrics = gmt__core.opt->metrics_dir[0] != '\0';

		r = gmt__snapshot_write(s, gmt__core.opt->dir, path, sizeof(path), metrics ? &mt : NULL);
		if (metrics)
			gmt__metrics_tensors_keep(&mt);
	} else {
		path[0] = '\0';
	}
	capture_free(c);
	if (used > s->seq) {
		gmt__core_lock();
		if (used > gmt__core.snapshot_seq)
			gmt__core.snapshot_seq = used;
		gmt__core_unlock();
	}
	/* The report first, the file second: what the program ran into does
	 * not depend on whether the file could be written. An episode's report
	 * waits for its end (episode.c). */
	if (t->oom != NULL) {
		snprintf(t->oom->report, sizeof(t->oom->report), "%s", c->report);
		snprintf(t->oom->path, sizeof(t->oom->path), "%s", r == 0 ? path : "");
		t->oom->result = r;
		t->oom->seq = used;
	} else if (s->failed != NULL && c->report[0] != '\0') {
		gmt__oom_report(c->report, path, r);
	}
	if (r < 0) {
		STAT_ADD(snapshot_errors, 1);
		warn_write_error(r);
		return r;
	}
	if (t->no_file)
		return 0;
	if (t->replace_seq == 0)
		STAT_ADD(snapshots, 1);
	if (t->out != NULL && t->outlen > 0)
		snprintf(t->out, t->outlen, "%s", path);
	if (s->failed == NULL)
		gmt__info("%s snapshot %s", gmt__reason_name(s->reason), path);
	return 0;
}

/* Writes one snapshot. Called with the lock held and everything before it
 * applied; returns with the lock RELEASED (capture). `state`: what the
 * driver said of the device the caller could ask (device.h), or NULL.
 * Returns 0 and the file's path in out (when not NULL), or a negative
 * errno. */
static int take(const struct take *t)
{
	struct gmt__capture c;

	capture(t, &c, false);
	return publish(t, &c);
}

int gmt__snapshot_take_leaks(enum gmt__reason reason, const struct gmt__snapshot_request *failed,
			     const struct gmt__device_state *state, char *out, size_t outlen,
			     struct gmt__snapshot_leaks *leaks, bool no_file)
{
	struct take t = { .reason = reason, .failed = failed, .state = state, .out = out, .outlen = outlen,
			  .leaks = leaks, .no_file = no_file, .exit_framework = reason == GMT_REASON_EXIT,
			  .api_framework = reason == GMT_REASON_API };

	return take(&t);
}

int gmt__snapshot_take(enum gmt__reason reason, const struct gmt__snapshot_request *failed,
		       const struct gmt__device_state *state, char *out, size_t outlen)
{
	return gmt__snapshot_take_leaks(reason, failed, state, out, outlen, NULL, false);
}

void gmt__snapshot_take_oom(const struct gmt__snapshot_request *failed, const struct gmt__device_state *state,
			    const struct gmt__episode *episode, const char *framework, uint64_t replace_seq,
			    struct gmt__oom_write *out)
{
	struct take t = { .reason = GMT_REASON_OOM, .failed = failed, .state = state, .episode = episode,
			  .framework = framework, .replace_seq = replace_seq, .oom = out };

	out->report[0] = out->path[0] = '\0';
	out->result = 0;
	out->seq = 0;
	(void)take(&t);
}

struct gmt__capture *gmt__snapshot_keep_oom(const struct gmt__snapshot_request *failed,
					    const struct gmt__device_state *state,
					    const struct gmt__episode *episode, const char *framework)
{
	struct take t = { .reason = GMT_REASON_OOM, .failed = failed, .state = state, .episode = episode,
			  .framework = framework };
	struct gmt__capture *c = malloc(sizeof(*c));

	if (c == NULL) {
		gmt__core_unlock();
		return NULL;
	}
	capture(&t, c, true);
	return c;
}

void gmt__snapshot_publish_oom(struct gmt__capture *c, uint64_t replace_seq, struct gmt__oom_write *out)
{
	struct take t = { .reason = GMT_REASON_OOM, .failed = &c->failed, .replace_seq = replace_seq, .oom = out };

	out->report[0] = out->path[0] = '\0';
	out->result = 0;
	out->seq = 0;
	if (replace_seq != 0) {
		c->s.seq = replace_seq;
		c->s.replace = true;
	}
	(void)publish(&t, c);
	free(c);
}

struct gmt__capture *gmt__snapshot_keep_peak(void)
{
	struct take t = { .reason = GMT_REASON_PEAK };
	struct gmt__capture *c = malloc(sizeof(*c));

	if (c != NULL)
		capture_held(&t, c, true);
	return c;
}

void gmt__snapshot_publish_peak(struct gmt__capture *c)
{
	struct take t = { .reason = GMT_REASON_PEAK };

	(void)publish(&t, c);
	free(c);
}

void gmt__snapshot_drop(struct gmt__capture *c)
{
	if (c == NULL)
		return;
	capture_free(c);
	free(c);
}

/* Under the gate (GPUMEMTRACE_GATE, set by gpumemtrace check): an empty
 * file gpumemtrace.<pid>.pending in the snapshot directory from the process's
 * first recorded event until its exit snapshot is written. One left behind
 * tells the gate of a process it cannot judge (it ended by _exit or a
 * signal, or its snapshot could not be written). A process that recorded
 * nothing (a fork child that only reads data, as a data loader's workers do)
 * has nothing to judge and leaves no mark. */
void gmt__gate_mark(bool on)
{
	char path[PATH_MAX];
	int fd;

	if (!gmt__core.opt->gate ||
	    snprintf(path, sizeof(path), "%s/gpumemtrace.%d.pending", gmt__core.opt->dir, (int)getpid()) >= (int)sizeof(path))
		return;
	if (!on) {
		unlink(path);
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd >= 0)
		close(fd);
}
