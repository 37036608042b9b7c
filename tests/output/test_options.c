/* The options (src/tracer/options.c), table-driven: each environment of the table is
 * parsed in a child process of its own (so the warning cap of the log never
 * hides a warning) and must give exactly the expected options and warnings:
 * a bad value warns once, naming the variable and the value, and keeps the
 * default; an unknown GPUMEMTRACE_* name warns; the verbose listing names
 * every option, its value and where it came from. */
#define _GNU_SOURCE
#include "util/log.h"
#include "tracer/options.h"

#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOPTIONS 22
#define MAX_ENV 4
#define MAX_WANT 3

struct option_case {
	const char *env[MAX_ENV + 1]; /* NULL-terminated */
	struct gmt__options want;     /* field values; unset ones: see `set` */
	unsigned set;                 /* bit per field of want that differs from the default */
	int lines;                    /* log lines expected */
	const char *say[MAX_WANT];    /* each must appear in the log */
	const char *never;            /* must not appear in the log */
};

enum { F_DIR = 1, F_SNAP = 2, F_DEPTH = 4, F_RING = 8, F_VERBOSE = 16, F_PYTHON = 32, F_HISTORY = 64, F_FRAMEWORKS = 128,
       F_METRICS = 256, F_TORCH = 512 };

#define BAD(var, value, shown)                                                          \
	{ .env = { var "=" value }, .lines = 1,                                         \
	  .say = { var "=\"" shown "\" is invalid", "keeping the default" } }

static const struct option_case cases[] = {
	/* nothing set: the defaults, silently */
	{ .env = { "PATH=/bin", "HOME=/root" }, .lines = 0 },
	{ .env = { "GPUMEMTRACEX=1", "gpumemtrace_dir=x", "XGPUMEMTRACE_DIR=y" }, .lines = 0 },

	/* good values */
	{ .env = { "GPUMEMTRACE_DIR=/tmp/snaps" }, .want.dir = "/tmp/snaps", .set = F_DIR },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=oom,exit" },
	  .want.snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_EXIT, .set = F_SNAP },
	/* oom stays on whatever the list adds, unless it says no-oom. */
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=EXIT" }, .want.snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_EXIT, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=peak" }, .want.snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_PEAK, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=exit, no-oom" }, .want.snapshot_on = GMT_TRIGGER_EXIT, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=No-OOM" }, .want.snapshot_on = 0, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON= oom , peak\t" },
	  .want.snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_PEAK, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=signal,oom,exit,peak" },
	  .want.snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_EXIT | GMT_TRIGGER_PEAK | GMT_TRIGGER_SIGNAL,
	  .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=oom,oom" }, .want.snapshot_on = GMT_TRIGGER_OOM, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=none" }, .want.snapshot_on = 0, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_SNAPSHOT_ON=None" }, .want.snapshot_on = 0, .set = F_SNAP },
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=0" }, .want.stack_depth = 0, .set = F_DEPTH },
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=12" }, .want.stack_depth = 12, .set = F_DEPTH },
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=256" }, .want.stack_depth = 256, .set = F_DEPTH },
	{ .env = { "GPUMEMTRACE_HISTORY=0" }, .want.history = 0, .set = F_HISTORY },
	{ .env = { "GPUMEMTRACE_HISTORY=10000000" }, .want.history = 10000000, .set = F_HISTORY },
	{ .env = { "GPUMEMTRACE_RING_EVENTS=64" }, .want.ring_events = 64, .set = F_RING },
	{ .env = { "GPUMEMTRACE_RING_EVENTS=1048576" }, .want.ring_events = 1048576, .set = F_RING },
	{ .env = { "GPUMEMTRACE_PYTHON_STACKS=0" }, .want.python_stacks = false, .set = F_PYTHON },
	/* Read by the Python bootstrap; known here, so that it is checked and
	 * never called unknown. */
	{ .env = { "GPUMEMTRACE_FRAMEWORKS=0" }, .want.frameworks = false, .set = F_FRAMEWORKS },
	{ .env = { "GPUMEMTRACE_FRAMEWORKS=off" }, .want.frameworks = false, .set = F_FRAMEWORKS },
	{ .env = { "GPUMEMTRACE_PYTHON_STACKS=on" }, .want.python_stacks = true, .set = F_PYTHON },
	{ .env = { "GPUMEMTRACE_TORCH_HISTORY=events" }, .want.torch_history = GMT_TORCH_HISTORY_EVENTS,
	  .set = F_TORCH },
	{ .env = { "GPUMEMTRACE_TORCH_HISTORY=OFF" }, .want.torch_history = GMT_TORCH_HISTORY_OFF, .set = F_TORCH },
	{ .env = { "GPUMEMTRACE_TORCH_HISTORY=all" }, .want.torch_history = GMT_TORCH_HISTORY_ALL, .set = F_TORCH },
	{ .env = { "GPUMEMTRACE_TORCH_HISTORY=alloc", "GPUMEMTRACE_VERBOSE=1" },
	  .want = { .torch_history = GMT_TORCH_HISTORY_ALLOC, .verbose = true }, .set = F_TORCH | F_VERBOSE,
	  .lines = NOPTIONS, .say = { "option GPUMEMTRACE_TORCH_HISTORY=alloc (environment)" } },
	/* The live metrics: a directory, an interval in seconds, a number of sites. */
	{ .env = { "GPUMEMTRACE_METRICS_DIR=/var/lib/node_exporter", "GPUMEMTRACE_METRICS_INTERVAL=1",
		   "GPUMEMTRACE_METRICS_TOP=1000" },
	  .want = { .metrics_dir = "/var/lib/node_exporter", .metrics_interval = 1, .metrics_top = 1000 },
	  .set = F_METRICS },
	{ .env = { "GPUMEMTRACE_VERBOSE=0" }, .want.verbose = false, .set = F_VERBOSE },
	{ .env = { "GPUMEMTRACE_VERBOSE=false" }, .want.verbose = false, .set = F_VERBOSE },
	{ .env = { "GPUMEMTRACE_VERBOSE=No" }, .want.verbose = false, .set = F_VERBOSE },
	{ .env = { "GPUMEMTRACE_VERBOSE=OFF" }, .want.verbose = false, .set = F_VERBOSE },
	/* verbose: the listing, one line per option */
	{ .env = { "GPUMEMTRACE_VERBOSE=1" }, .want.verbose = true, .set = F_VERBOSE, .lines = NOPTIONS,
	  .say = { "option GPUMEMTRACE_VERBOSE=1 (environment)", "option GPUMEMTRACE_DIR=. (default)",
		   "option GPUMEMTRACE_SNAPSHOT_ON=oom (default)" } },
	{ .env = { "GPUMEMTRACE_VERBOSE=TRUE" }, .want.verbose = true, .set = F_VERBOSE, .lines = NOPTIONS },
	{ .env = { "GPUMEMTRACE_VERBOSE=yes" }, .want.verbose = true, .set = F_VERBOSE, .lines = NOPTIONS },
	{ .env = { "GPUMEMTRACE_VERBOSE=on" }, .want.verbose = true, .set = F_VERBOSE, .lines = NOPTIONS },
	{ .env = { "GPUMEMTRACE_VERBOSE=1", "GPUMEMTRACE_STACK_DEPTH=12", "GPUMEMTRACE_RING_EVENTS=100",
		   "GPUMEMTRACE_SNAPSHOT_ON=exit,oom" },
	  .want = { .verbose = true, .stack_depth = 12,
		    .snapshot_on = GMT_TRIGGER_OOM | GMT_TRIGGER_EXIT },
	  .set = F_VERBOSE | F_DEPTH | F_SNAP, .lines = 1 + NOPTIONS,
	  .say = { "option GPUMEMTRACE_STACK_DEPTH=12 (environment)",
		   "option GPUMEMTRACE_RING_EVENTS=4096 (default; the environment's value is invalid)",
		   "option GPUMEMTRACE_SNAPSHOT_ON=oom,exit (environment)" } },

	/* bad values: one warning each, the default kept */
	BAD("GPUMEMTRACE_DIR", "", ""),
	BAD("GPUMEMTRACE_LEAK_CLASSES", "leaked,bogus", "leaked,bogus"),
	BAD("GPUMEMTRACE_LEAK_CLASSES", "none,leaked", "none,leaked"),
	BAD("GPUMEMTRACE_TORCH_HISTORY", "stacks", "stacks"),
	BAD("GPUMEMTRACE_TORCH_HISTORY", "alloc,events", "alloc,events"),
	BAD("GPUMEMTRACE_TORCH_HISTORY", " alloc", " alloc"),
	BAD("GPUMEMTRACE_TORCH_HISTORY", "", ""),
	BAD("GPUMEMTRACE_LEAK_EXITCODE", "0", "0"),
	BAD("GPUMEMTRACE_LEAK_EXITCODE", "256", "256"),
	BAD("GPUMEMTRACE_LEAK_SCAN", "maybe", "maybe"),
	BAD("GPUMEMTRACE_SUPPRESSIONS", "", ""),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "", ""),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oom,", "oom,"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", ",oom", ",oom"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oom,,exit", "oom,,exit"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oom;exit", "oom;exit"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "bogus", "bogus"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oomx", "oomx"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "none,oom", "none,oom"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oom,none", "oom,none"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "oom,no-oom", "oom,no-oom"),
	BAD("GPUMEMTRACE_SNAPSHOT_ON", "none,no-oom", "none,no-oom"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "", ""),
	BAD("GPUMEMTRACE_STACK_DEPTH", "-1", "-1"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "257", "257"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "12x", "12x"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "1K", "1K"),
	BAD("GPUMEMTRACE_STACK_DEPTH", " 12", " 12"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "99999999999999999999999", "99999999999999999999999"),
	BAD("GPUMEMTRACE_STACK_DEPTH", "1\n2", "1\\x0a2"),
	BAD("GPUMEMTRACE_HISTORY", "-1", "-1"),
	BAD("GPUMEMTRACE_HISTORY", "10000001", "10000001"),
	BAD("GPUMEMTRACE_HISTORY", "lots", "lots"),
	BAD("GPUMEMTRACE_RING_EVENTS", "63", "63"),
	BAD("GPUMEMTRACE_RING_EVENTS", "100", "100"),
	BAD("GPUMEMTRACE_RING_EVENTS", "0", "0"),
	BAD("GPUMEMTRACE_RING_EVENTS", "2097152", "2097152"),
	BAD("GPUMEMTRACE_RING_EVENTS", "4k", "4k"),
	BAD("GPUMEMTRACE_PYTHON_STACKS", "python", "python"),
	BAD("GPUMEMTRACE_FRAMEWORKS", "maybe", "maybe"),
	BAD("GPUMEMTRACE_METRICS_DIR", "", ""),
	BAD("GPUMEMTRACE_METRICS_INTERVAL", "0", "0"),
	BAD("GPUMEMTRACE_METRICS_INTERVAL", "86401", "86401"),
	BAD("GPUMEMTRACE_METRICS_INTERVAL", "10s", "10s"),
	BAD("GPUMEMTRACE_METRICS_INTERVAL", "-5", "-5"),
	BAD("GPUMEMTRACE_METRICS_TOP", "0", "0"),
	BAD("GPUMEMTRACE_METRICS_TOP", "1001", "1001"),
	BAD("GPUMEMTRACE_METRICS_TOP", "99999999999999999999", "99999999999999999999"),
	BAD("GPUMEMTRACE_VERBOSE", "", ""),
	BAD("GPUMEMTRACE_VERBOSE", "2", "2"),
	BAD("GPUMEMTRACE_VERBOSE", "y", "y"),
	BAD("GPUMEMTRACE_VERBOSE", "maybe", "maybe"),
	/* what the warning says the option accepts */
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=300" }, .lines = 1, .say = { "an integer from 0 to 256" } },
	{ .env = { "GPUMEMTRACE_RING_EVENTS=100" }, .lines = 1, .say = { "a power of two from 64 to 1048576" } },
	{ .env = { "GPUMEMTRACE_METRICS_INTERVAL=0" }, .lines = 1, .say = { "an integer from 1 to 86400 (seconds)" } },
	{ .env = { "GPUMEMTRACE_METRICS_TOP=0" }, .lines = 1, .say = { "an integer from 1 to 1000 (sites)" } },

	/* unknown names: one warning each, with a suggestion when one is close */
	{ .env = { "GPUMEMTRACE_STAK_DEPTH=12" }, .lines = 1,
	  .say = { "GPUMEMTRACE_STAK_DEPTH is not a gpumemtrace option",
		   "did you mean GPUMEMTRACE_STACK_DEPTH?" } },
	{ .env = { "GPUMEMTRACE_FROBNICATE=1" }, .lines = 1,
	  .say = { "GPUMEMTRACE_FROBNICATE is not a gpumemtrace option, ignored\n" } },
	{ .env = { "GPUMEMTRACE_=1", "GPUMEMTRACE_DIRS=x" }, .lines = 2,
	  .say = { "GPUMEMTRACE_ is not", "GPUMEMTRACE_DIRS is not" } },
	/* several at once; a variable named twice counts once, the first (getenv's) */
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=8", "GPUMEMTRACE_STACK_DEPTH=9", "GPUMEMTRACE_DIR=d",
		   "GPUMEMTRACE_RING_EVENTS=128" },
	  .want = { .stack_depth = 8, .dir = "d", .ring_events = 128 }, .set = F_DEPTH | F_DIR | F_RING },
	{ .env = { "GPUMEMTRACE_STACK_DEPTH=x", "GPUMEMTRACE_RING_EVENTS=y", "GPUMEMTRACE_VERBOSE=z" },
	  .lines = 3, .never = "option " },
};

static bool same_bool(bool a, bool b)
{
	return a == b;
}
static bool same_int(int64_t a, int64_t b)
{
	return a == b;
}
static bool same_triggers(unsigned a, unsigned b)
{
	return a == b;
}
static bool same_string(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}
#define same_BOOL same_bool
#define same_INT same_int
#define same_SIZE same_int
#define same_STRING same_string
#define same_TRIGGERS same_triggers
#define same_CLASSES same_triggers
#define same_CHOICE same_triggers

/* Compares every field through the options table itself; prints the ones that
 * differ with both values. */
static int compare(const struct gmt__options *got, const struct gmt__options *want)
{
	char g[128], w[128];
	int bad = 0;

#define CMP(field, var, type, def, help)                                                   \
	if (!same_##type(got->field, want->field)) {                                       \
		gmt__options_format(got, var, g, sizeof(g));                               \
		gmt__options_format(want, var, w, sizeof(w));                              \
		fprintf(stderr, "  %s is \"%s\", expected \"%s\"\n", var, g, w);           \
		bad++;                                                                     \
	}
	GMT_OPTIONS(CMP)
#undef CMP
	return bad;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static char *read_all(int fd)
{
	static char buf[1 << 16];
	size_t n = 0;
	ssize_t r;

	while (n < sizeof(buf) - 1 && (r = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	return buf;
}

/* Runs one case in this (child) process; returns the number of failures. */
static int run_case(const struct option_case *c, int log_rd)
{
	struct gmt__options got, want;
	const char *log;
	int bad = 0, i;

	gmt__options_defaults(&want);
	if (c->set & F_DIR)
		want.dir = c->want.dir;
	if (c->set & F_SNAP)
		want.snapshot_on = c->want.snapshot_on;
	if (c->set & F_DEPTH)
		want.stack_depth = c->want.stack_depth;
	if (c->set & F_RING)
		want.ring_events = c->want.ring_events;
	if (c->set & F_VERBOSE)
		want.verbose = c->want.verbose;
	if (c->set & F_PYTHON)
		want.python_stacks = c->want.python_stacks;
	if (c->set & F_HISTORY)
		want.history = c->want.history;
	if (c->set & F_FRAMEWORKS)
		want.frameworks = c->want.frameworks;
	if (c->set & F_TORCH)
		want.torch_history = c->want.torch_history;
	if (c->set & F_METRICS) {
		want.metrics_dir = c->want.metrics_dir;
		want.metrics_interval = c->want.metrics_interval;
		want.metrics_top = c->want.metrics_top;
	}

	gmt__options_parse(&got, (char *const *)c->env);
	bad += compare(&got, &want);
	log = read_all(log_rd);
	if (count_lines(log) != c->lines) {
		fprintf(stderr, "  %d log lines, expected %d\n", count_lines(log), c->lines);
		bad++;
	}
	for (i = 0; i < MAX_WANT && c->say[i] != NULL; i++) {
		if (strstr(log, c->say[i]) == NULL) {
			fprintf(stderr, "  the log lacks \"%s\"\n", c->say[i]);
			bad++;
		}
	}
	if (c->never != NULL && strstr(log, c->never) != NULL) {
		fprintf(stderr, "  the log has \"%s\"\n", c->never);
		bad++;
	}
	if (bad)
		fprintf(stderr, "  log was:\n%s", log);
	return bad;
}

/* Runs fn(arg, log_rd) in a child whose log goes to a pipe; returns its
 * failure count. */
static int in_child(int (*fn)(const void *arg, int log_rd), const void *arg)
{
	int fds[2], status;
	pid_t pid;

	if (pipe2(fds, O_NONBLOCK) != 0) {
		perror("pipe2");
		return 1;
	}
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		gmt__log_set_fd(fds[1]);
		_exit(fn(arg, fds[0]) > 0);
	}
	close(fds[0]);
	close(fds[1]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static int case_child(const void *arg, int log_rd)
{
	return run_case(arg, log_rd);
}

static int test_cases(void)
{
	size_t i, j;
	int failed = 0;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (in_child(case_child, &cases[i]) == 0)
			continue;
		fprintf(stderr, "case %zu failed: environment", i);
		for (j = 0; j < MAX_ENV && cases[i].env[j] != NULL; j++)
			fprintf(stderr, " '%s'", cases[i].env[j]);
		fprintf(stderr, "\n");
		failed++;
	}
	return failed;
}

/* The values the launcher checks with gmt__options_set, and the formatter. */
static void test_set_and_format(void)
{
	struct gmt__options o;
	const char *expected = NULL;
	char buf[64];

	gmt__options_defaults(&o);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_STACK_DEPTH", "12", &expected), 0);
	CHECK_INT(o.stack_depth, 12);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_STACK_DEPTH", "257", &expected), -ERANGE);
	CHECK_STR(expected, "an integer from 0 to 256");
	CHECK_INT(o.stack_depth, 12);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_STACK_DEPTH", "x", NULL), -EINVAL);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_RING_EVENTS", "96", &expected), -EINVAL);
	CHECK_STR(expected, "a power of two from 64 to 1048576");
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_NOPE", "1", &expected), -ENOENT);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_SNAPSHOT_ON", "peak,signal", NULL), 0);
	CHECK_INT(gmt__options_format(&o, "GPUMEMTRACE_SNAPSHOT_ON", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "oom,peak,signal");
	/* The text parses back to the value: without oom, it says so. */
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_SNAPSHOT_ON", "peak,no-oom", NULL), 0);
	CHECK_INT(o.snapshot_on, GMT_TRIGGER_PEAK);
	CHECK_INT(gmt__options_format(&o, "GPUMEMTRACE_SNAPSHOT_ON", buf, sizeof(buf)), 0);
	CHECK_STR(buf, "peak,no-oom");
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_SNAPSHOT_ON", buf, NULL), 0);
	CHECK_INT(o.snapshot_on, GMT_TRIGGER_PEAK);
	CHECK_INT(gmt__options_set(&o, "GPUMEMTRACE_SNAPSHOT_ON", "none", NULL), 0);
	gmt__options_format(&o, "GPUMEMTRACE_SNAPSHOT_ON", buf, sizeof(buf));
	CHECK_STR(buf, "none");
	gmt__options_format(&o, "GPUMEMTRACE_VERBOSE", buf, sizeof(buf));
	CHECK_STR(buf, "0");
	gmt__options_format(&o, "GPUMEMTRACE_DIR", buf, sizeof(buf));
	CHECK_STR(buf, ".");
	CHECK_INT(gmt__options_format(&o, "GPUMEMTRACE_NOPE", buf, sizeof(buf)), -ENOENT);
	/* cut to fit, NUL terminated */
	gmt__options_set(&o, "GPUMEMTRACE_SNAPSHOT_ON", "oom,exit,peak,signal", NULL);
	gmt__options_format(&o, "GPUMEMTRACE_SNAPSHOT_ON", buf, 6);
	CHECK_STR(buf, "oom,e");
}

static void *call_options(void *arg)
{
	return (void *)gmt__options();
}

/* gmt__options() itself: reads the real environment once, from any number of
 * racing threads, warns once, and switches the log's verbosity. */
static int options_child(const void *arg, int log_rd)
{
	const struct gmt__options *o;
	pthread_t t[4];
	void *ret[4];
	const char *log;
	int i, before = check_failed;

	setenv("GPUMEMTRACE_STACK_DEPTH", "7", 1);
	setenv("GPUMEMTRACE_RING_EVENTS", "huge", 1);
	setenv("GPUMEMTRACE_VERBOSE", "1", 1);
	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, call_options, NULL);
	o = gmt__options();
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], &ret[i]);
		CHECK(ret[i] == (void *)o);
	}
	CHECK(gmt__options() == o);
	CHECK_INT(o->stack_depth, 7);
	CHECK_INT(o->ring_events, 4096);
	CHECK(o->verbose);
	log = read_all(log_rd);
	CHECK_INT(count_lines(log), 1 + NOPTIONS);
	CHECK(strstr(log, "GPUMEMTRACE_RING_EVENTS=\"huge\" is invalid") != NULL);
	/* verbose is on: gmt__info prints */
	gmt__info("probe");
	CHECK_STR(read_all(log_rd), "gpumemtrace: probe\n");
	return check_failed - before;
}

int main(void)
{
	int failed;
	size_t n = 0;

#define COUNT(field, var, type, def, help) n++;
	GMT_OPTIONS(COUNT)
#undef COUNT
	CHECK_INT(n, NOPTIONS);

	failed = test_cases();
	test_set_and_format();
	if (in_child(options_child, NULL) != 0) {
		fprintf(stderr, "gmt__options() from the environment failed\n");
		failed++;
	}
	failed += check_failed;
	if (failed)
		fprintf(stderr, "%d failure(s)\n", failed);
	return failed != 0;
}
