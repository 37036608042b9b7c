/* The live metrics file (report/metrics.h, docs/fleet.md): with
 * GPUMEMTRACE_METRICS_DIR set, the background thread writes
 * DIR/gpumemtrace.<pid>.prom every GPUMEMTRACE_METRICS_INTERVAL seconds, on
 * its next pass after an out-of-memory, and the exit path writes it a last
 * time — each by rename of a file node_exporter's textfile collector does not
 * read (its name ends in .tmp), so a scrape sees one whole write or the one
 * before. Never from a hook: the numbers are copied under the consumer's
 * lock, the sites named and the file written without it.
 *
 * The file is named for the process, its pid namespace and its machine's
 * boot (report/metrics_file.h): containers sharing a directory never write
 * one file. It stays after the process exits, with gpumemtrace_running 0,
 * so that the last numbers are scraped; the first write of a process
 * removes the files it can prove were left by gone processes (of its boot
 * and its pid namespace, their pid running no more or running a process
 * started later, and not rewritten for three intervals, or a minute), so
 * that a directory does not fill with dead ranks. */
#define _GNU_SOURCE
#include "tracer/tracer.h"

#include "analyze/frames.h"
#include "analyze/sites.h"
#include "report/metrics.h"
#include "report/metrics_file.h"
#include "util/fdwrite.h"
#include "util/log.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <gpumemtrace.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Stacks looked at for the top sites: several stacks may be one site. */
#define STACKS_PER_SITE 4

static struct {
	uint64_t next_ns;  /* the next write (CLOCK_MONOTONIC); 0: the first */
	_Atomic bool due;  /* an out-of-memory asked for one */
	bool warned, cleaned;
	/* One write at a time (the background thread's, the exit's: one
	 * temporary file); taken before the consumer's lock, never after. */
	pthread_mutex_t lock;
} metrics = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The tensor level of the latest snapshot that had one (report/metrics.h),
 * kept for the writes until the next: a lock of its own, taken alone
 * (never with the consumer's). */
static struct {
	pthread_mutex_t lock;
	struct gmt__metrics_tensors t;
	bool have;
} tensors = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A site of the history's picked under the lock: its stack, its numbers. */
struct picked {
	uint32_t stack;
	uint64_t bytes, count, growth;
};

/* The largest `max` of what is offered, by `key`: kept unordered, with the
 * smallest of them known, so that an offer smaller than it (most, once the
 * set is full) costs one comparison, and a kept one a scan of `max`. */
struct largest {
	struct picked *v;
	size_t n, max, low; /* low: the index of the smallest, once full */
	uint64_t (*key)(const struct picked *);
};

static void offer(struct largest *l, const struct picked *p)
{
	uint64_t k = l->key(p);

	if (l->n < l->max) {
		l->v[l->n++] = *p;
		if (l->n < l->max)
			return;
	} else if (k > l->key(&l->v[l->low])) {
		l->v[l->low] = *p;
	} else {
		return;
	}
	l->low = 0;
	for (size_t i = 1; i < l->n; i++) {
		if (l->key(&l->v[i]) < l->key(&l->v[l->low]))
			l->low = i;
	}
}

static uint64_t by_bytes(const struct picked *p)
{
	return p->bytes;
}

static uint64_t by_growth(const struct picked *p)
{
	return p->growth;
}

static int cmp_bytes(const void *a, const void *b)
{
	const struct picked *x = a, *y = b;

	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : (x->stack > y->stack) - (x->stack < y->stack);
}

static int cmp_growth(const void *a, const void *b)
{
	const struct picked *x = a, *y = b;

	return x->growth < y->growth ? 1 : x->growth > y->growth ? -1 : (x->stack > y->stack) - (x->stack < y->stack);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* What the numbers are taken into (the lock held while they are). */
struct capture {
	struct gmt__metrics m;
	struct gmt__metrics_device devices[GMT_MAX_DEVICES + 1];
	struct picked *top, *growing;
	size_t ntop, ngrowing, max;
};

static size_t history_bytes(const struct gmt__history *h)
{
	return h->cap * sizeof(struct gmt__hist_event) + h->nsites * sizeof(struct gmt__site) +
	       (h->pt_time != NULL ? GMT_SERIES_POINTS * (1 + 2 * GMT_SERIES_COLUMNS) * sizeof(uint64_t) : 0);
}

/* Lock held. */
static void take(struct capture *c)
{
	struct gmt__metrics *m = &c->m;
	const struct gmt__history *h = &gmt__core.hist;
	size_t own = gmt__table_bytes(gmt__core.table) + gmt__stack_bytes();

	for (struct gmt__ring *r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r))
		own += gmt__ring_bytes(r);
	for (int d = -1; d < GMT_MAX_DEVICES; d++) {
		struct gmt__metrics_device *md = &c->devices[m->ndevices];
		bool any = false;

		for (int k = 0; k < GMT_KIND_COUNT; k++) {
			md->bytes[k] = gmt__core.kind_live[d + 1][k];
			md->count[k] = gmt__core.kind_count[d + 1][k];
			any |= md->count[k] > 0;
		}
		md->peak_bytes = gmt__core.device_peak[d + 1];
		if (any || md->peak_bytes > 0) {
			md->device = d;
			m->ndevices++;
		}
	}
	m->allocs = gmt__core.total_allocs;
	m->frees = gmt__core.total_frees;
	m->oom_failures = gmt__core.oom_failures;
	m->oom_episodes = gmt__core.episode.doc.id;
	m->oom_recovered = atomic_load_explicit(&gmt__core.stats.oom_recovered, memory_order_relaxed);
	m->snapshots = atomic_load_explicit(&gmt__core.stats.snapshots, memory_order_relaxed);
	m->snapshot_errors = atomic_load_explicit(&gmt__core.stats.snapshot_errors, memory_order_relaxed);
	m->events_recorded = atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed) - gmt__core.first_seq;
	m->events_applied = gmt__core.expected - gmt__core.first_seq;
	if (gmt__core.have_hist && c->top != NULL) {
		struct largest top = { c->top, 0, c->max * STACKS_PER_SITE, 0, by_bytes };
		struct largest growing = { c->growing, 0, c->max * STACKS_PER_SITE, 0, by_growth };

		own += history_bytes(h);
		for (size_t id = 0; id < h->nsites; id++) {
			const struct gmt__site *s = &h->sites[id];
			struct picked p = { .stack = (uint32_t)id, .bytes = s->live_bytes, .count = s->live_count };
			uint32_t rises, falls;

			if (s->live_count == 0 && s->allocs == 0)
				continue;
			if (s->live_bytes > 0)
				offer(&top, &p);
			if (gmt__site_growing(h, s, &rises, &falls, &p.growth) && p.growth > 0)
				offer(&growing, &p);
		}
		c->ntop = top.n;
		c->ngrowing = growing.n;
	} else if (gmt__core.have_hist) {
		own += history_bytes(h);
	}
	m->tracer_bytes = own;
}

/* The label of each picked stack's site (analyze/sites.h: sites built for
 * ids) into names[i] for v[i], pointing into *sites. */
static void name_sites(const struct gmt__sites *sites, const uint32_t *ids, const struct picked *v, size_t n,
		       const char **names)
{
	for (size_t i = 0; i < n; i++) {
		const struct gmt__stack_site *ss = sites->n > 0 ? gmt__sites_of(sites, ids, v[i].stack) : NULL;

		names[i] = ss != NULL && ss->site > 0 ? sites->labels[ss->site - 1]
			   : v[i].stack == 0          ? "no stack recorded"
						      : "an unknown place";
	}
}

/* Who this process is, for its file's name (report/metrics_file.h): taken
 * at its first write, and again in a fork's child (another pid). Without
 * /proc (`known` false) the name is made unique with random digits,
 * gpumemtrace.<pid>.r<16 hex>.prom, which no process can prove gone, and
 * this process removes nothing. `proc_ours`: /proc shows this process's pid
 * namespace, so that another pid's start time can be read there. Under
 * metrics.lock. */
static struct {
	struct gmt__metrics_writer self;
	bool known, proc_ours;
	char name[GMT_METRICS_NAME_MAX];
} who;

/* The first bytes of a file of /proc into buf (NUL-terminated); their
 * number, or -1. */
static ssize_t read_proc(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* The start time of `pid` (clock ticks since boot: field 22 of
 * /proc/PID/stat; 0 for "self") as /proc shows it, and the pid /proc gives
 * it into *shown (its field 1). 0 when not known. */
static uint64_t proc_start(long pid, long *shown)
{
	char path[64], buf[1024], *p, *end;
	uint64_t start;

	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/stat");
	else
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	/* The command (field 2) is in parentheses and may hold anything:
	 * the fields after it follow the last ')'. */
	if (read_proc(path, buf, sizeof(buf)) <= 0 || (p = strrchr(buf, ')')) == NULL)
		return 0;
	*shown = strtol(buf, NULL, 10);
	for (int field = 2; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (p == NULL)
			return 0;
	}
	start = strtoull(p + 1, &end, 10);
	return end != p + 1 && (*end == ' ' || *end == '\n' || *end == '\0') ? start : 0;
}

/* Fills `who` for this process (unless done for its pid already). */
static void who_am_i(void)
{
	pid_t pid = getpid();
	char boot[64];
	struct stat st;
	long shown = 0;
	int n = 0;

	if (who.self.pid == (long)pid)
		return;
	memset(&who, 0, sizeof(who));
	who.self.pid = (long)pid;
	/* 36 characters, dashes left out. */
	if (read_proc("/proc/sys/kernel/random/boot_id", boot, sizeof(boot)) >= 36) {
		for (int i = 0; i < 36 && n < 32; i++) {
			if ((boot[i] >= '0' && boot[i] <= '9') || (boot[i] >= 'a' && boot[i] <= 'f'))
				who.self.boot[n++] = boot[i];
		}
	}
	/* NOTE: the system call: glibc's stat is versioned anew in 2.33. */
	if (syscall(SYS_newfstatat, AT_FDCWD, "/proc/self/ns/pid", &st, 0) == 0)
		who.self.pidns = (uint64_t)st.st_ino;
	who.self.start = proc_start(0, &shown);
	who.proc_ours = shown == (long)pid;
	who.known = n == 32 && who.self.pidns != 0 && who.self.start != 0;
	if (who.known) {
		gmt__metrics_name(&who.self, who.name);
	} else {
		uint64_t salt = 0;

		/* NOTE: the system call: glibc has getrandom() from 2.25 only. */
		if (syscall(SYS_getrandom, &salt, sizeof(salt), 0) != (long)sizeof(salt))
			salt = gmt__now_ns(CLOCK_REALTIME) ^ ((uint64_t)(uintptr_t)&salt << 16);
		snprintf(who.name, sizeof(who.name), "gpumemtrace.%ld.r%016" PRIx64 ".prom", (long)pid, salt);
	}
}

/* Removes the files this process can prove were left by gone processes
 * (file comment), once they were not rewritten for three intervals. */
static void clean_stale(const char *dir, uint64_t interval_s)
{
	DIR *d;
	struct dirent *e;
	time_t now = time(NULL);
	time_t stale = (time_t)(3 * interval_s > 60 ? 3 * interval_s : 60);

	if (!who.known || (d = opendir(dir)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		struct gmt__metrics_writer w;
		char path[4096];
		struct stat st;
		uint64_t start_now = 0;
		long shown = 0;
		bool running;

		if (gmt__metrics_name_parse(e->d_name, &w) != 0)
			continue;
		/* NOTE: the system call: glibc's lstat is versioned anew in 2.33. */
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path) ||
		    syscall(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid() || now - st.st_mtime < stale)
			continue;
		/* Asked only of a pid of this namespace (gmt__metrics_gone). */
		if (strcmp(w.boot, who.self.boot) != 0 || w.pidns != who.self.pidns)
			continue;
		running = kill((pid_t)w.pid, 0) == 0 || errno != ESRCH;
		if (running && who.proc_ours && w.pid != who.self.pid)
			start_now = proc_start(w.pid, &shown);
		else if (w.pid == who.self.pid)
			start_now = who.self.start;
		if (gmt__metrics_gone(&who.self, &w, running, start_now) && unlink(path) == 0)
			gmt__info("metrics: removed %s (process %ld of this pid namespace is gone)", path, w.pid);
	}
	closedir(d);
}

/* Writes text to DIR/<who.name> through a temporary file. 0 or a negative
 * errno. */
static int write_file(const char *dir, const char *text, size_t len)
{
	char path[4096], tmp[4096];
	int fd, r = 0;

	if (snprintf(path, sizeof(path), "%s/%s", dir, who.name) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, who.name) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* A temporary of an earlier write that failed, or one planted there:
	 * never written through (O_EXCL, no link followed). */
	(void)unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	r = gmt__write_full(fd, text, len);
	if (close(fd) != 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) != 0)
		r = -errno;
	if (r != 0)
		unlink(tmp);
	return r;
}

static void write_metrics(bool running)
{
	const struct gmt__options *opt = gmt__core.opt;
	struct capture c = { .max = (size_t)opt->metrics_top };
	struct gmt__metrics_site *sites = NULL, *suspects = NULL;
	const char **names = NULL;
	uint32_t *ids = NULL;
	size_t nids = 0;
	struct gmt__sites stack_sites = { 0 };
	struct gmt__frame_cache cache;
	struct gmt__site_rules rules;
	char host[256] = "", command[256] = "", *text = NULL;
	size_t len = 0;
	int r;

	c.top = calloc(c.max * STACKS_PER_SITE, sizeof(*c.top));
	c.growing = calloc(c.max * STACKS_PER_SITE, sizeof(*c.growing));
	if (c.top == NULL || c.growing == NULL) {
		free(c.top);
		free(c.growing);
		c.top = c.growing = NULL;
	}
	c.m.devices = c.devices;
	gmt__core_lock();
	/* The file's time is its state's: taken before the events are counted
	 * out, so that everything recorded before it is in the file, however
	 * long this thread waits between the two on a busy machine. */
	c.m.time_ns = gmt__now_ns(CLOCK_REALTIME);
	gmt__drain_until(atomic_load_explicit(&gmt__core.next_seq, memory_order_relaxed));
	take(&c);
	gmt__core_unlock();
	c.m.running = running;
	c.m.interval_s = (uint64_t)opt->metrics_interval;
	c.m.version = GMT_BUILD_VERSION;
	if (gethostname(host, sizeof(host)) == 0)
		host[sizeof(host) - 1] = '\0';
	{
		FILE *f = fopen("/proc/self/comm", "re");

		if (f != NULL && fgets(command, sizeof(command), f) != NULL)
			command[strcspn(command, "\n")] = '\0';
		if (f != NULL)
			fclose(f);
	}
	c.m.process = (struct gmt__metrics_process){
		.pid = getpid(), .host = host[0] != '\0' ? host : NULL, .command = command[0] != '\0' ? command : NULL,
		.job = getenv("SLURM_JOB_ID") != NULL ? getenv("SLURM_JOB_ID") : getenv("TORCHELASTIC_RUN_ID"),
		.rank = gmt__core.process.rank, .local_rank = gmt__core.process.local_rank,
		.world_size = gmt__core.process.world_size,
	};
	/* The sites: the stacks picked, named by the site rule. */
	qsort(c.top, c.ntop, sizeof(*c.top), cmp_bytes);
	qsort(c.growing, c.ngrowing, sizeof(*c.growing), cmp_growth);
	ids = malloc((c.ntop + c.ngrowing + 1) * sizeof(*ids));
	names = calloc(c.ntop + c.ngrowing + 1, sizeof(*names));
	sites = calloc(c.ntop + 1, sizeof(*sites));
	suspects = calloc(c.ngrowing + 1, sizeof(*suspects));
	if (ids != NULL && names != NULL && sites != NULL && suspects != NULL) {
		for (size_t i = 0; i < c.ntop; i++)
			ids[nids++] = c.top[i].stack;
		for (size_t i = 0; i < c.ngrowing; i++)
			ids[nids++] = c.growing[i].stack;
		qsort(ids, nids, sizeof(*ids), cmp_u32);
		{
			size_t k = 0;

			for (size_t i = 0; i < nids; i++) {
				if (ids[i] != 0 && (k == 0 || ids[k - 1] != ids[i]))
					ids[k++] = ids[i];
			}
			nids = k;
		}
		gmt__frames_open(&cache);
		(void)gmt__site_rules_init(&rules, opt->site_libraries);
		(void)gmt__sites_build(&stack_sites, &cache, ids, nids, &rules, NULL);
		gmt__site_rules_free(&rules);
		name_sites(&stack_sites, ids, c.top, c.ntop, names);
		name_sites(&stack_sites, ids, c.growing, c.ngrowing, names + c.ntop);
		/* The K largest sites: stacks of one site add up in the text. */
		for (size_t i = 0; i < c.ntop; i++)
			sites[i] = (struct gmt__metrics_site){ names[i], c.top[i].bytes, c.top[i].count, 0 };
		for (size_t i = 0; i < c.ngrowing; i++)
			suspects[i] = (struct gmt__metrics_site){ names[c.ntop + i], c.growing[i].bytes, c.growing[i].count,
								  c.growing[i].growth };
		c.m.sites = sites;
		c.m.nsites = c.ntop;
		c.m.suspects = suspects;
		c.m.nsuspects = c.ngrowing;
		c.m.top = c.max;
		pthread_mutex_lock(&tensors.lock);
		c.m.tensors = tensors.have ? &tensors.t : NULL;
		r = gmt__metrics_text(&c.m, &text, &len);
		pthread_mutex_unlock(&tensors.lock);
		gmt__sites_free(&stack_sites);
		gmt__frames_close(&cache);
	} else {
		r = -ENOMEM;
	}
	if (r == 0) {
		who_am_i();
		if (!metrics.cleaned) {
			metrics.cleaned = true;
			clean_stale(opt->metrics_dir, (uint64_t)opt->metrics_interval);
		}
		r = write_file(opt->metrics_dir, text, len);
	}
	if (r != 0)
		gmt__warn_once(&metrics.warned, "cannot write the metrics file in %s: %s (the program goes on; "
				"later failures are not reported)", opt->metrics_dir, strerror(-r));
	free(text);
	free(ids);
	free(names);
	free(sites);
	free(suspects);
	free(c.top);
	free(c.growing);
}

void gmt__metrics_tensors_keep(struct gmt__metrics_tensors *t)
{
	if (t->time_ns == 0)
		return;
	pthread_mutex_lock(&tensors.lock);
	if (tensors.have)
		gmt__metrics_tensors_free(&tensors.t);
	tensors.t = *t;
	tensors.have = true;
	pthread_mutex_unlock(&tensors.lock);
	memset(t, 0, sizeof(*t));
	gmt__metrics_due();
}

void gmt__metrics_after_fork(void)
{
	/* The parent's writer may have held either lock at the fork; its
	 * tensor level is not the child's (forgotten, not freed: it may have
	 * been half replaced). */
	pthread_mutex_init(&metrics.lock, NULL);
	pthread_mutex_init(&tensors.lock, NULL);
	memset(&tensors.t, 0, sizeof(tensors.t));
	tensors.have = false;
}

void gmt__metrics_due(void)
{
	atomic_store_explicit(&metrics.due, true, memory_order_relaxed);
}

void gmt__metrics_tick(void)
{
	uint64_t now;

	if (gmt__core.opt->metrics_dir[0] == '\0')
		return;
	now = gmt__now_ns(CLOCK_MONOTONIC);
	if (now < metrics.next_ns && !atomic_exchange_explicit(&metrics.due, false, memory_order_relaxed))
		return;
	metrics.next_ns = now + (uint64_t)gmt__core.opt->metrics_interval * 1000000000ull;
	pthread_mutex_lock(&metrics.lock);
	write_metrics(true);
	pthread_mutex_unlock(&metrics.lock);
}

void gmt__metrics_exit(void)
{
	if (gmt__core.opt->metrics_dir[0] == '\0')
		return;
	pthread_mutex_lock(&metrics.lock);
	write_metrics(false);
	pthread_mutex_unlock(&metrics.lock);
}
