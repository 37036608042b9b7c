/* `gpumemtrace check [options] -- command...`, the CI leak gate: checks its
 * options and inputs, runs the command traced as a child process, reads the
 * exit snapshots its processes wrote and judges them against the limits. The
 * exit statuses and their precedence: --help, docs/ci.md. */
#define _GNU_SOURCE
#include "cli/check.h"

#include "cli/launcher.h"
#include "tracer/options.h"
#include "util/parse.h"
#include "analyze/suppress.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SNAPSHOT_ON "GPUMEMTRACE_SNAPSHOT_ON"
#define SUPPRESSIONS "GPUMEMTRACE_SUPPRESSIONS"
#define LEAK_CLASSES "GPUMEMTRACE_LEAK_CLASSES"

struct args {
	struct cli_limits limits;
	const char *suppressions; /* --suppressions, else the environment's */
	const char *snapshot_on;  /* --snapshot-on, else the environment's */
	const char *leak_classes; /* --leak-classes or --strict, else the environment's */
	const char *junit;
	const char *dir; /* --dir; NULL: a temporary one */
	int command;     /* argv index of the command */
};

struct names {
	char **v;
	size_t n, cap;
};

static uint64_t size_arg(const char *flag, const char *v)
{
	uint64_t out;

	if (gmt__parse_size(v, 0, UINT64_MAX, &out) < 0)
		cli_die(GMT_EXIT_USAGE,
			"%s '%s' is invalid: expected bytes, with an optional suffix K, M, G or T "
			"(powers of 1024)",
			flag, v);
	return out;
}

static uint64_t count_arg(const char *flag, const char *v)
{
	uint64_t out;

	if (gmt__parse_u64(v, 0, UINT64_MAX, &out) < 0)
		cli_die(GMT_EXIT_USAGE, "%s '%s' is invalid: expected a non-negative integer", flag, v);
	return out;
}

/* BYTES or PCT% */
static void growth_arg(const char *v, struct cli_limits *l)
{
	size_t n = strlen(v);
	char pct[32];

	if (n == 0 || v[n - 1] != '%') {
		l->growth_is_pct = false;
		l->max_growth = size_arg("--max-growth", v);
		return;
	}
	if (n - 1 < sizeof(pct)) {
		memcpy(pct, v, n - 1);
		pct[n - 1] = '\0';
	} else {
		pct[0] = '\0'; /* too long to be one of the numbers taken */
	}
	if (gmt__parse_u64(pct, 0, 1000000, &l->max_growth) < 0)
		cli_die(GMT_EXIT_USAGE,
			"--max-growth '%s' is invalid: expected bytes (with an optional suffix K, M, "
			"G or T) or an integer percent from 0%% to 1000000%%",
			v);
	l->growth_is_pct = true;
}

static void parse_args(int argc, char **argv, struct args *a)
{
	const char *v, *growth = NULL;
	bool strict = false;
	int i;

	*a = (struct args){ 0 };
	for (i = 2; i < argc; i++) {
		const char *arg = argv[i];

		if (strcmp(arg, "--") == 0)
			break;
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			cli_help();
			exit(0);
		}
		if ((v = cli_option_value(argc, argv, &i, "--max-leak-bytes")) != NULL) {
			a->limits.max_leak_bytes = size_arg("--max-leak-bytes", v);
			a->limits.has_max_leak_bytes = true;
		} else if ((v = cli_option_value(argc, argv, &i, "--max-leaks")) != NULL) {
			a->limits.max_leaks = count_arg("--max-leaks", v);
			a->limits.has_max_leaks = true;
		} else if ((v = cli_option_value(argc, argv, &i, "--max-peak")) != NULL) {
			a->limits.max_peak = size_arg("--max-peak", v);
			a->limits.has_max_peak = true;
		} else if ((v = cli_option_value(argc, argv, &i, "--baseline")) != NULL) {
			if (v[0] == '\0')
				cli_die(GMT_EXIT_USAGE, "--baseline '' is invalid: expected a snapshot file");
			a->limits.baseline = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--max-growth")) != NULL) {
			growth_arg(v, &a->limits);
			growth = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--level")) != NULL) {
			if (strcmp(v, "tensors") == 0)
				a->limits.tensors = true;
			else if (strcmp(v, "driver") != 0)
				cli_die(GMT_EXIT_USAGE, "--level '%s' is invalid: expected tensors or driver", v);
		} else if ((v = cli_option_value(argc, argv, &i, "--leak-classes")) != NULL) {
			if (strict)
				cli_die(GMT_EXIT_USAGE, "--strict and --leak-classes both name the classes that count");
			a->leak_classes = v;
		} else if (strcmp(arg, "--strict") == 0) {
			/* Still referenced memory counts too: what LeakSanitizer
			 * reports only when asked (docs/ci.md). */
			if (a->leak_classes != NULL)
				cli_die(GMT_EXIT_USAGE, "--strict and --leak-classes both name the classes that count");
			strict = true;
			a->leak_classes = "leaked,referenced";
		} else if ((v = cli_option_value(argc, argv, &i, "--suppressions")) != NULL) {
			if (v[0] == '\0')
				cli_die(GMT_EXIT_USAGE, "--suppressions '' is invalid: expected a file");
			a->suppressions = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--junit")) != NULL) {
			if (v[0] == '\0')
				cli_die(GMT_EXIT_USAGE, "--junit '' is invalid: expected a file");
			a->junit = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--dir")) != NULL) {
			if (v[0] == '\0')
				cli_die(GMT_EXIT_USAGE, "--dir '' is invalid: expected a directory");
			a->dir = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--snapshot-on")) != NULL) {
			a->snapshot_on = v;
		} else if ((v = cli_option_value(argc, argv, &i, "--depth")) != NULL) {
			cli_set_option("--depth", "GPUMEMTRACE_STACK_DEPTH", v);
		} else if (strcmp(arg, "--no-python-stacks") == 0) {
			cli_set_option("--no-python-stacks", "GPUMEMTRACE_PYTHON_STACKS", "0");
		} else if (strcmp(arg, "--verbose") == 0) {
			cli_set_option("--verbose", "GPUMEMTRACE_VERBOSE", "1");
		} else if (arg[0] == '-') {
			cli_die(GMT_EXIT_USAGE, "unknown option '%s' (see gpumemtrace --help)", arg);
		} else {
			cli_die(GMT_EXIT_USAGE,
				"'--' must come before the command, as in: gpumemtrace check "
				"[options] -- %s ...",
				arg);
		}
	}
	if (i >= argc)
		cli_die(GMT_EXIT_USAGE, "no command (gpumemtrace check [options] -- command ...)");
	if (i + 1 >= argc)
		cli_die(GMT_EXIT_USAGE, "no command after '--'");
	a->command = i + 1;
	if (growth != NULL && a->limits.baseline == NULL)
		cli_die(GMT_EXIT_USAGE, "--max-growth needs --baseline SNAPSHOT to grow from");
	if (growth == NULL && a->limits.baseline != NULL)
		cli_die(GMT_EXIT_USAGE, "--baseline needs --max-growth BYTES or PCT%% to check it");
	/* A leak limit given alone is the only leak limit (pytest-memray's
	 * limit_leaks reads so); none given: any counted leak fails. */
	if (a->limits.has_max_leak_bytes != a->limits.has_max_leaks) {
		if (!a->limits.has_max_leak_bytes)
			a->limits.max_leak_bytes = UINT64_MAX;
		if (!a->limits.has_max_leaks)
			a->limits.max_leaks = UINT64_MAX;
	}
	if (a->snapshot_on == NULL)
		a->snapshot_on = getenv(SNAPSHOT_ON);
	if (a->leak_classes == NULL)
		a->leak_classes = getenv(LEAK_CLASSES);
	if (a->suppressions == NULL && getenv(SUPPRESSIONS) != NULL && getenv(SUPPRESSIONS)[0])
		a->suppressions = getenv(SUPPRESSIONS);
}

/* The defaults with the user's value of `var` (from its flag or the
 * environment) parsed by the tracer's parser; a bad value is a usage error. */
static void parse_option(struct gmt__options *o, const char *flag, const char *var, const char *user)
{
	const char *expected = "?";

	gmt__options_defaults(o);
	if (user != NULL && gmt__options_set(o, var, user, &expected) < 0)
		cli_die(GMT_EXIT_USAGE, "%s or %s '%s' is invalid: expected %s", flag, var, user, expected);
}

/* Puts o's value of `var` into the environment, for the traced command. */
static void put_option(const struct gmt__options *o, const char *var)
{
	char value[64];

	gmt__options_format(o, var, value, sizeof(value));
	if (setenv(var, value, 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set %s: %s", var, strerror(errno));
}

/* The user's triggers plus exit (unset: the default, oom). */
static void set_triggers(const char *user)
{
	struct gmt__options o;

	parse_option(&o, "--snapshot-on", SNAPSHOT_ON, user);
	o.snapshot_on |= GMT_TRIGGER_EXIT;
	put_option(&o, SNAPSHOT_ON);
}

/* The classes that count, with the tracer's parser; the tracer gets them too,
 * so that its snapshots' "counted" agree with the gate. */
static unsigned set_classes(const char *user)
{
	struct gmt__options o;

	parse_option(&o, "--leak-classes", LEAK_CLASSES, user);
	put_option(&o, LEAK_CLASSES);
	return o.leak_classes;
}

/* Loads the file as the tracer will (a malformed one is a usage error
 * naming FILE:LINE), then hands the tracer its absolute path. */
static void set_suppressions(const char *path)
{
	struct gmt__supp s = { 0 };
	char err[512], abs[PATH_MAX];

	if (gmt__supp_load(&s, path, err, sizeof(err)) < 0)
		cli_die(GMT_EXIT_USAGE, "--suppressions: %s", err);
	gmt__supp_free(&s);
	if (realpath(path, abs) == NULL)
		cli_die(GMT_EXIT_USAGE, "--suppressions: %s: %s", path, strerror(errno));
	if (setenv(SUPPRESSIONS, abs, 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set " SUPPRESSIONS ": %s", strerror(errno));
}

/* --junit's directory must take the file: found now, not after the run.
 * Standard output ("-"), a FIFO and a character device are written into;
 * another file that is not a regular one is refused. */
static void check_junit_path(const char *path)
{
	struct stat st;
	char *dir, *slash;

	if (strcmp(path, "-") == 0)
		return;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))
			return;
		cli_die(GMT_EXIT_USAGE, "--junit '%s': not a regular file (%s)", path,
			S_ISDIR(st.st_mode) ? "a directory" : S_ISSOCK(st.st_mode) ? "a socket" : "a block device");
	}
	dir = strdup(path);

	if (dir == NULL)
		cli_die(GMT_EXIT_USAGE, "out of memory");
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = '\0';
	else if (slash != NULL)
		*slash = '\0';
	else
		strcpy(dir, ".");
	if (access(dir, W_OK | X_OK) != 0)
		cli_die(GMT_EXIT_USAGE, "--junit '%s': cannot write in %s: %s", path, dir,
			strerror(errno));
	free(dir);
}

/* The snapshot directory, absolute, into abs[PATH_MAX]: --dir (made when
 * missing, its parent must exist), or a fresh private one. Returns whether
 * it is a temporary one. */
static bool make_dir(const char *dir, char *abs)
{
	const char *tmp;

	if (dir != NULL) {
		cli_make_dir("--dir", dir, abs);
		return false;
	}
	tmp = getenv("TMPDIR");
	if (tmp == NULL || tmp[0] == '\0')
		tmp = "/tmp";
	if ((size_t)snprintf(abs, PATH_MAX, "%s/gpumemtrace-check.XXXXXX", tmp) >= PATH_MAX)
		cli_die(GMT_EXIT_NO_SNAPSHOT, "TMPDIR '%s' is too long", tmp);
	if (mkdtemp(abs) == NULL)
		cli_die(GMT_EXIT_NO_SNAPSHOT, "cannot make a temporary directory in %s: %s", tmp,
			strerror(errno));
	return true;
}

static int compare_names(const void *a, const void *b)
{
	return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* The names in dir that match pattern, sorted (pids in numeric order). */
static void list_names(const char *dir, const char *pattern, struct names *out)
{
	struct dirent *e;
	DIR *d = opendir(dir);

	*out = (struct names){ 0 };
	if (d == NULL)
		cli_die(GMT_EXIT_NO_SNAPSHOT, "cannot read %s: %s", dir, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		if (fnmatch(pattern, e->d_name, 0) != 0)
			continue;
		if (out->n == out->cap) {
			size_t cap = out->cap ? 2 * out->cap : 16;
			char **v = realloc(out->v, cap * sizeof(*v));

			if (v == NULL)
				cli_die(GMT_EXIT_NO_SNAPSHOT, "out of memory");
			out->v = v;
			out->cap = cap;
		}
		if ((out->v[out->n++] = strdup(e->d_name)) == NULL)
			cli_die(GMT_EXIT_NO_SNAPSHOT, "out of memory");
	}
	closedir(d);
	if (out->n > 0)
		qsort(out->v, out->n, sizeof(*out->v), compare_names);
}

static bool names_have(const struct names *n, const char *name)
{
	return n->n > 0 && bsearch(&name, n->v, n->n, sizeof(*n->v), compare_names) != NULL;
}

static void names_free(struct names *n)
{
	for (size_t i = 0; i < n->n; i++)
		free(n->v[i]);
	free(n->v);
	*n = (struct names){ 0 };
}

/* The exit snapshots, and the marks of processes still owing theirs (the
 * library's gate_mark, GPUMEMTRACE_GATE). */
#define EXIT_SNAPSHOTS "gpumemtrace.*.exit.*.json"
#define PENDING_MARKS "gpumemtrace.*.pending"

/* The processes of this run that were traced and wrote no exit snapshot:
 * their marks are removed, and the first one and the count go into msg.
 * Returns whether there was one. */
static bool unjudged(const char *dir, const struct names *before, char *msg, size_t len)
{
	struct names marks;
	size_t n = 0;

	list_names(dir, PENDING_MARKS, &marks);
	for (size_t i = 0; i < marks.n; i++) {
		char path[PATH_MAX + 256];
		int pid = 0;

		if (names_have(before, marks.v[i]))
			continue;
		sscanf(marks.v[i], "gpumemtrace.%d.pending", &pid);
		if (n++ == 0)
			snprintf(msg, len, "process %d", pid);
		snprintf(path, sizeof(path), "%s/%s", dir, marks.v[i]);
		unlink(path);
	}
	names_free(&marks);
	if (n > 1)
		snprintf(msg + strlen(msg), len - strlen(msg), " and %zu more", n - 1);
	if (n > 0)
		snprintf(msg + strlen(msg), len - strlen(msg),
			 " wrote no exit snapshot: it ended through _exit or a signal, or its snapshot could not "
			 "be written (its warning says why); the run cannot be judged");
	return n > 0;
}

static bool dir_is_empty(const char *dir)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	bool empty = true;

	if (d == NULL)
		return false;
	while (empty && (e = readdir(d)) != NULL)
		empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
	closedir(d);
	return empty;
}

/* Removes the temporary directory and what the run left in it; false (with a
 * message) when something stays. */
static bool remove_dir(const char *dir)
{
	struct dirent *e;
	DIR *d = opendir(dir);
	int fd;

	if (d == NULL)
		goto fail;
	fd = dirfd(d);
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			unlinkat(fd, e->d_name, 0); /* rmdir says what could not go */
	}
	closedir(d);
	if (rmdir(dir) == 0)
		return true;
fail:
	cli_say("cannot remove %s: %s", dir, strerror(errno));
	return false;
}

static volatile sig_atomic_t child_pid;

/* SIGINT and SIGTERM are passed on to the command, which decides. */
static void forward(int sig, siginfo_t *info, void *context)
{
	int saved = errno;

	/* NOTE: a signal from the terminal (Ctrl-C, si_code SI_KERNEL) went to
	 * the whole foreground process group, the command included: passing it
	 * on would deliver it twice. */
	if (child_pid > 0 && info->si_code != SI_KERNEL)
		kill((pid_t)child_pid, sig);
	errno = saved;
}

/* Runs cmd as a child with stdin, stdout and stderr inherited. Returns its
 * exit status, 128+N when signal N killed it (N into *killed_by, else 0), or
 * -errno when it cannot be executed. */
static int run_command(char **cmd, int *killed_by)
{
	struct sigaction sa = { 0 }, old_int, old_term;
	sigset_t fwd, old_mask;
	int pipefd[2], err = 0, status;
	siginfo_t si;
	ssize_t n;
	pid_t pid;

	/* The child says through this pipe why its exec failed; a successful
	 * exec closes it (O_CLOEXEC). */
	if (pipe2(pipefd, O_CLOEXEC) != 0)
		cli_die(GMT_EXIT_NO_COMMAND, "cannot run '%s': pipe: %s", cmd[0], strerror(errno));
	sigemptyset(&fwd);
	sigaddset(&fwd, SIGINT);
	sigaddset(&fwd, SIGTERM);
	/* Blocked until child_pid is set: a signal in between is passed on
	 * too, not lost. */
	sigprocmask(SIG_BLOCK, &fwd, &old_mask);
	sa.sa_sigaction = forward;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sigaction(SIGINT, &old_int, NULL);
		sigaction(SIGTERM, &old_term, NULL);
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		close(pipefd[0]);
		execvp(cmd[0], cmd);
		err = errno;
		if (write(pipefd[1], &err, sizeof(err)) < 0)
			_exit(GMT_EXIT_NO_COMMAND);
		_exit(GMT_EXIT_NO_COMMAND);
	}
	if (pid < 0)
		cli_die(GMT_EXIT_NO_COMMAND, "cannot run '%s': fork: %s", cmd[0], strerror(errno));
	child_pid = pid;
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	close(pipefd[1]);
	do
		n = read(pipefd[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(pipefd[0]);

	/* NOTE: waited for without reaping (WNOWAIT), so that its pid cannot be
	 * reused while the handler may still signal it; forwarding stops before
	 * the reaping. */
	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) != 0) {
		if (errno != EINTR)
			cli_die(GMT_EXIT_NO_SNAPSHOT, "waiting for '%s': %s", cmd[0], strerror(errno));
	}
	sigprocmask(SIG_BLOCK, &fwd, NULL);
	child_pid = 0;
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			cli_die(GMT_EXIT_NO_SNAPSHOT, "waiting for '%s': %s", cmd[0], strerror(errno));
	}
	if (n == (ssize_t)sizeof(err))
		return err > 0 ? -err : -ENOEXEC;
	*killed_by = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

static int compare_counted(const void *a, const void *b)
{
	const struct cli_leak_site *x = *(const struct cli_leak_site *const *)a;
	const struct cli_leak_site *y = *(const struct cli_leak_site *const *)b;

	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	if (x->count != y->count)
		return x->count < y->count ? 1 : -1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->place.label, y->place.label);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Counted leaks, peaks and growth of the snapshots read, against the limits. */
static void judge(struct cli_verdict *v)
{
	const struct cli_limits *l = v->limits;
	size_t i, j;

	v->counted = calloc(1, sizeof(*v->counted));
	for (i = 0; i < v->nsnaps && v->counted != NULL; i++) {
		struct cli_snapshot *s = &v->snaps[i];
		const struct cli_leak_site **c;

		c = realloc(v->counted, (v->ncounted + s->nleaks + 1) * sizeof(*c));
		if (c == NULL)
			cli_die(GMT_EXIT_NO_SNAPSHOT, "out of memory");
		v->counted = c;
		for (j = 0; j < s->nleaks; j++) {
			struct cli_leak_site *site = &s->leaks[j];

			/* At the tensor level the framework's segments are
			 * containers of tensors: the tensors are judged. */
			if (site->framework)
				continue;
			/* NOTE: the tracer's own "counted" followed its classes;
			 * the gate's follow --leak-classes. A tensor site that kept
			 * growing counts whatever the classes. */
			site->counted = site->suppressed_by == NULL &&
					(site->cls == CLI_CLASS_GROWING || (l->classes & site->cls));
			if (site->suppressed_by != NULL) {
				v->suppressed_bytes = add_sat(v->suppressed_bytes, site->bytes);
				v->suppressed_count = add_sat(v->suppressed_count, site->count);
			}
			if (!site->counted)
				continue;
			v->counted[v->ncounted++] = site;
			v->leak_bytes = add_sat(v->leak_bytes, site->bytes);
			v->leak_count = add_sat(v->leak_count, site->count);
		}
		if (v->peak_snap == NULL || s->peak_bytes > v->peak) {
			v->peak = s->peak_bytes;
			v->peak_snap = s;
		}
	}
	if (v->counted == NULL)
		cli_die(GMT_EXIT_NO_SNAPSHOT, "out of memory");
	if (v->ncounted > 1)
		qsort(v->counted, v->ncounted, sizeof(*v->counted), compare_counted);

	v->leaks_failed = v->leak_bytes > l->max_leak_bytes || v->leak_count > l->max_leaks;
	v->peak_failed = l->has_max_peak && v->peak > l->max_peak;
	if (v->baseline != NULL) {
		uint64_t base = v->baseline->peak_bytes;

		if (v->peak >= base)
			v->growth = v->peak - base > INT64_MAX ? INT64_MAX : (int64_t)(v->peak - base);
		else
			v->growth = base - v->peak > INT64_MAX ? INT64_MIN : -(int64_t)(base - v->peak);
		/* PCT% of the baseline, rounded down, without overflow */
		if (l->growth_is_pct)
			v->growth_limit = add_sat(base / 100 * l->max_growth, base % 100 * l->max_growth / 100);
		else
			v->growth_limit = l->max_growth;
		v->growth_failed = v->growth > 0 && (uint64_t)v->growth > v->growth_limit;
	}
}

int cli_check(int argc, char **argv)
{
	struct cli_snapshot baseline = { 0 };
	struct cli_verdict v = { 0 };
	struct names before = { 0 }, marked = { 0 }, after;
	char unjudged_msg[512];
	char lib[PATH_MAX], dir[PATH_MAX], err[1024], path[PATH_MAX + 256];
	const char *workspace;
	struct args a;
	bool temporary;
	size_t i;

	cli_set_context("check: ");
	parse_args(argc, argv, &a);
	v.limits = &a.limits;

	/* Everything that can be wrong with the arguments, before the run. */
	set_triggers(a.snapshot_on);
	a.limits.classes = set_classes(a.leak_classes);
	if (a.suppressions != NULL)
		set_suppressions(a.suppressions);
	if (a.limits.baseline != NULL) {
		if (cli_snapshot_read(a.limits.baseline, GMT_READ_PEAKS | (a.limits.tensors ? GMT_READ_TENSORS : 0),
				      &baseline, err, sizeof(err)) < 0)
			cli_die(GMT_EXIT_USAGE, "--baseline: %s", err);
		if (a.limits.tensors && !baseline.tensors)
			cli_die(GMT_EXIT_USAGE,
				"--baseline: %s has no tensor level (no framework handed its tensors and "
				"their peak over): --level tensors compares the framework's peaks",
				a.limits.baseline);
		v.baseline = &baseline;
	}
	if (a.junit != NULL)
		check_junit_path(a.junit);
	cli_find_library(lib);

	temporary = make_dir(a.dir, dir);
	if (!temporary) {
		list_names(dir, EXIT_SNAPSHOTS, &before);
		list_names(dir, PENDING_MARKS, &marked);
	}
	cli_set_option("--dir", "GPUMEMTRACE_DIR", dir);
	if (setenv("GPUMEMTRACE_GATE", "1", 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set GPUMEMTRACE_GATE: %s", strerror(errno));
	/* The gate judges: the library must not replace the exit status. */
	if (setenv("GPUMEMTRACE_LEAK_CHECK", "0", 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set GPUMEMTRACE_LEAK_CHECK: %s", strerror(errno));
	cli_set_preload(lib);
	cli_set_pythonpath();

	v.command_status = run_command(argv + a.command, &v.command_signal);
	if (v.command_status < 0) {
		if (temporary)
			remove_dir(dir);
		cli_die(GMT_EXIT_NO_COMMAND, "cannot run '%s': %s", argv[a.command],
			strerror(-v.command_status));
	}

	list_names(dir, EXIT_SNAPSHOTS, &after);
	v.snaps = calloc(after.n ? after.n : 1, sizeof(*v.snaps));
	if (v.snaps == NULL)
		cli_die(GMT_EXIT_NO_SNAPSHOT, "out of memory");
	for (i = 0; i < after.n; i++) {
		if (names_have(&before, after.v[i]))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, after.v[i]);
		if (cli_snapshot_read(path, GMT_READ_EXIT | (v.baseline ? GMT_READ_PEAKS : 0) |
					      (a.limits.tensors ? GMT_READ_TENSORS : 0),
				      &v.snaps[v.nsnaps], err, sizeof(err)) < 0) {
			v.error = err;
			break;
		}
		v.nsnaps++;
	}
	if (v.error == NULL && unjudged(dir, &marked, unjudged_msg, sizeof(unjudged_msg)))
		v.error = unjudged_msg;
	else if (v.error == NULL && v.nsnaps == 0 && v.command_status == 0)
		v.error = "the command exited without writing an exit snapshot: did it call _exit "
			  "or exec?";
	else if (v.error == NULL && v.nsnaps == 0)
		v.error = "no exit snapshot was written";
	judge(&v);

	if (v.command_status != 0)
		v.status = v.command_status;
	else if (v.error != NULL)
		v.status = GMT_EXIT_NO_SNAPSHOT;
	else if (v.leaks_failed)
		v.status = GMT_EXIT_LEAKS;
	else if (v.peak_failed || v.growth_failed)
		v.status = GMT_EXIT_PEAK;

	/* A passed run's temporary snapshots are of no further use; an empty
	 * directory neither. */
	v.dir = dir;
	v.dir_kept = !temporary || (v.status != 0 && !dir_is_empty(dir)) || !remove_dir(dir);

	workspace = getenv("GITHUB_WORKSPACE");
	if (getenv("GITHUB_ACTIONS") != NULL && strcmp(getenv("GITHUB_ACTIONS"), "true") == 0)
		cli_report_github(&v, workspace, stdout);
	fflush(stdout);
	cli_report_text(&v);
	if (a.junit != NULL && cli_report_junit(&v, a.junit, err, sizeof(err)) < 0) {
		cli_say("%s", err);
		if (v.status == 0)
			v.status = GMT_EXIT_NO_SNAPSHOT;
	}

	for (i = 0; i < v.nsnaps; i++)
		cli_snapshot_free(&v.snaps[i]);
	free(v.snaps);
	free(v.counted);
	cli_snapshot_free(&baseline);
	names_free(&before);
	names_free(&marked);
	names_free(&after);
	return v.status;
}
