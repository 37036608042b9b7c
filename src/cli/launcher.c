/* The gpumemtrace command: `gpumemtrace run [options] -- cmd...` finds
 * libgpumemtrace.so beside itself (build tree or installed tree), turns its
 * options into GPUMEMTRACE_* variables checked with the tracer's own parsers,
 * puts the library into LD_PRELOAD and execs the command. Also what `check`
 * (check.c) shares with it (launcher.h), the help, and the dispatch. */
#define _GNU_SOURCE
#include "cli/launcher.h"

#include "tracer/options.h"
#include "util/log.h"

#include <gpumemtrace.h>

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Absolute fallbacks: the configured libdir, and where the Python package
 * (the viewer, the module, the bootstrap) is: this source tree's, the
 * installed one. A relocatable build (meson -Drelocatable=true, what
 * scripts/gpu-bundle and the wheel make) has none: it finds everything
 * relative to itself and never reaches into the machine it was built on. */
#ifdef GMT_RELOCATABLE
#undef GMT_LIBDIR
#undef GMT_PYTHON_SRC
#undef GMT_PYTHON_INSTALLED
#define GMT_LIBDIR ""
#define GMT_PYTHON_SRC ""
#define GMT_PYTHON_INSTALLED ""
#endif
#ifndef GMT_LIBDIR
#define GMT_LIBDIR "/usr/local/lib"
#endif
#ifndef GMT_LIBDIR_REL
#define GMT_LIBDIR_REL "lib"
#endif
#ifndef GMT_MULTIARCH
#define GMT_MULTIARCH ""
#endif
#ifndef GMT_PYTHON_SRC
#define GMT_PYTHON_SRC "/usr/local/share/gpumemtrace/python"
#endif
#ifndef GMT_PYTHON_INSTALLED
#define GMT_PYTHON_INSTALLED "/usr/local/share/gpumemtrace/python"
#endif
#ifndef GMT_DATADIR_REL
#define GMT_DATADIR_REL "share"
#endif

/* Where the Python package is relative to this program's directory: in a
 * wheel (GMT_WHEEL), the launcher is <site-packages>/gpumemtrace/_native/bin,
 * the package's parent three levels up; in an installed tree,
 * <datadir>/gpumemtrace/python. */
#ifdef GMT_WHEEL
#define GMT_PYTHON_REL "../../.."
#else
#define GMT_PYTHON_REL "../" GMT_DATADIR_REL "/gpumemtrace/python"
#endif

#define LIBNAME GMT_LIBNAME

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpumemtrace run [options] -- command [argument...]\n"
		"  or:  gpumemtrace check [options] -- command [argument...]\n"
		"  or:  gpumemtrace view [options] FILE...\n"
		"  or:  gpumemtrace whatif SNAPSHOT [--alloc-conf CONF]... [--device-bytes N]\n"
		"  or:  gpumemtrace --help | --version\n");
}

void cli_help(void)
{
	struct gmt__options defaults;
	char value[64];

	gmt__options_defaults(&defaults);
	printf("gpumemtrace %s: GPU memory tracing for unmodified CUDA programs.\n\n",
	       GMT_BUILD_VERSION);
	usage(stdout);
	printf("\n"
	       "gpumemtrace run runs the command with " LIBNAME " preloaded: every\n"
	       "allocation and free of device, managed, stream-ordered, VMM and pinned host\n"
	       "memory is recorded with its stack, and JSON snapshots of the live memory are\n"
	       "written as gpumemtrace.<pid>.<reason>.<seq>.json (mode 0600) when an allocation\n"
	       "runs out of memory, and at the other triggers chosen.\n"
	       "\n"
	       "Options of run (each sets the variable named; invalid values are refused):\n"
	       "  --dir DIR            GPUMEMTRACE_DIR: where snapshots go, made if missing\n"
	       "                       (default: the command's working directory)\n"
	       "  --snapshot-on LIST   GPUMEMTRACE_SNAPSHOT_ON: snapshots besides the one at\n"
	       "                       an out of memory, which is always written: comma list\n"
	       "                       of exit, peak, signal (SIGUSR2); no-oom leaves that\n"
	       "                       one out, none writes no snapshot (default: oom only)\n"
	       "  --metrics-dir DIR    GPUMEMTRACE_METRICS_DIR: write live metrics for\n"
	       "                       Prometheus there (node_exporter's textfile directory),\n"
	       "                       made if missing; every GPUMEMTRACE_METRICS_INTERVAL s\n"
	       "  --depth N            GPUMEMTRACE_STACK_DEPTH: native frames per allocation,\n"
	       "                       0 to 256, 0 turns stacks off (default: 64)\n"
	       "  --no-python-stacks   GPUMEMTRACE_PYTHON_STACKS=0: native frames only, no\n"
	       "                       Python frames (default: recorded, whether or not the\n"
	       "                       allocating thread holds the GIL)\n"
	       "  --verbose            GPUMEMTRACE_VERBOSE=1: print the options and progress\n"
	       "  -h, --help           this text\n"
	       "  --                   ends the options; the command follows\n"
	       "\n"
	       "Options may also be written --dir=DIR. Variables already in the environment\n"
	       "are kept unless an option sets them; LD_PRELOAD keeps its entries, after the\n"
	       "library (after a sanitizer runtime that must come first).\n"
	       "\n"
	       "Environment variables read by the library (also without this launcher, as in\n"
	       "LD_PRELOAD=" LIBNAME " command); an invalid value is reported and ignored:\n");
#define HELP_X(field, var, type, def, text)                                   \
	gmt__options_format(&defaults, var, value, sizeof(value));            \
	printf("  %-24s %s (default: %s)\n", var, text, value);
	GMT_OPTIONS(HELP_X)
#undef HELP_X
	printf("\n"
	       "gpumemtrace check, the CI leak gate, runs the command traced as a child\n"
	       "process (signals INT and TERM are passed on to it), then reads the exit\n"
	       "snapshot of each traced process of the run and fails when a limit is\n"
	       "exceeded, with a short report on stderr (docs/ci.md).\n"
	       "\n"
	       "Options of check (--depth, --no-python-stacks, --verbose and --snapshot-on\n"
	       "as for run; exit is always added to the triggers):\n"
	       "  --max-leak-bytes N   counted leaked bytes allowed, summed over the run's\n"
	       "                       processes\n"
	       "  --max-leaks N        counted leaked allocations allowed; a leak limit given\n"
	       "                       alone is the only one (the other is not limited);\n"
	       "                       neither given: any counted leak fails\n"
	       "  --leak-classes LIST  the leak classes that count: comma list of leaked,\n"
	       "                       referenced, cached (default: leaked, as LeakSanitizer\n"
	       "                       reads it: still referenced memory does not fail);\n"
	       "                       suppressed leaks never count\n"
	       "  --strict             still referenced memory counts too: --leak-classes\n"
	       "                       leaked,referenced (GPUMEMTRACE_LEAK_CLASSES)\n"
	       "  --suppressions FILE  GPUMEMTRACE_SUPPRESSIONS: leak:PATTERN and\n"
	       "                       cached:PATTERN rules, checked before the command runs\n"
	       "  --max-peak BYTES     each process's peak of live memory allowed\n"
	       "  --baseline SNAPSHOT  a snapshot of an earlier run, for --max-growth\n"
	       "  --max-growth LIMIT   how far the run's peak (its processes' largest) may\n"
	       "                       exceed the baseline's: BYTES, or PCT%% of the\n"
	       "                       baseline's peak (10%%); --baseline and --max-growth\n"
	       "                       go together\n"
	       "  --level LEVEL        tensors: where a framework (PyTorch) handed its\n"
	       "                       tensors over, judge them: the peak is its peak of\n"
	       "                       tensors, its growing tensor sites still live at exit\n"
	       "                       count as leaks, its segments do not; driver (the\n"
	       "                       default): the driver's allocations\n"
	       "  --junit FILE         also write the verdict as JUnit XML\n"
	       "  --dir DIR            keep the snapshots in DIR (created if missing; files\n"
	       "                       already there are ignored); default: a private\n"
	       "                       temporary directory, removed when the check passes\n"
	       "Sizes are integers with an optional suffix K, M, G, T (or Ki, KiB, KB...),\n"
	       "all powers of 1024. Under GitHub Actions (GITHUB_ACTIONS=true) each counted\n"
	       "leak site is also an annotation: a ::error line on stdout (::warning when\n"
	       "the leaks stay within the limits).\n"
	       "\n"
	       "gpumemtrace view reads snapshots: a terminal summary of one, what grew\n"
	       "between two of one process, or one report of several processes (ranks);\n"
	       "--html OUT writes a self-contained HTML report, --perfetto, --speedscope and\n"
	       "--pytorch export for those viewers (gpumemtrace view --help, docs/viewer.md).\n"
	       "It is Python (3.9 or newer), run with the python3 on PATH.\n"
	       "\n"
	       "gpumemtrace whatif replays the PyTorch run a snapshot recorded (its\n"
	       "allocator's history, snapshot minor 14) through a model of PyTorch's caching\n"
	       "allocator: first under the run's own settings, which must reproduce every\n"
	       "segment the run allocated and freed (sizes, order) or nothing is answered;\n"
	       "then under each --alloc-conf. For each setting it prints the peak reserved\n"
	       "bytes, the reserved but unallocated bytes at the failing request, whether\n"
	       "that request fits on the device, and the first request that fails\n"
	       "(docs/whatif.md).\n"
	       "  --alloc-conf CONF    a PYTORCH_CUDA_ALLOC_CONF to replay under\n"
	       "                       (expandable_segments:True, max_split_size_mb:N,\n"
	       "                       roundup_power2_divisions:N, ...); repeatable\n"
	       "  --device-bytes N     answer for a device where PyTorch can hold N bytes in\n"
	       "                       all (default: the run's, its reserved bytes plus the\n"
	       "                       device's free bytes when its out-of-memory was\n"
	       "                       reported: the device less the context, other\n"
	       "                       processes and memory outside PyTorch); the faithful\n"
	       "                       check keeps the run's where the snapshot says them\n"
	       "Exit status of whatif: 0 the replay reproduced the run; 1 it did not (or\n"
	       "could not start from the run's state), nothing answered; 2 bad input (not\n"
	       "a snapshot, no PyTorch history, a bad CONF).\n"
	       "\n"
	       "The library is looked for beside this program: in its directory and the\n"
	       "one above (build tree), in ../lib, ../" GMT_LIBDIR_REL ", ../lib/<multiarch>,\n"
	       "../lib64 (installed tree)%s%s.\n"
	       "\n"
	       "Exit status of run: the command's; 2 for a usage error, 125 when\n"
	       LIBNAME " cannot be found, 127 when the command cannot be executed.\n"
	       "\n"
	       "Exit status of check, the first that applies:\n"
	       "  2    a usage error (also: a malformed suppressions or baseline file)\n"
	       "  125  " LIBNAME " cannot be found\n"
	       "  127  the command cannot be executed\n"
	       "  N    the command failed: its status (128+S when killed by signal S); the\n"
	       "       report still says what was found\n"
	       "  125  no exit snapshot was written, or one cannot be read\n"
	       "  23   a leak limit (--max-leak-bytes, --max-leaks) is exceeded\n"
	       "  24   a peak limit (--max-peak, --max-growth) is exceeded\n"
	       "  0    every limit holds\n"
	       "\n"
	       "Messages are one line each on stderr, prefixed 'gpumemtrace:'.\n"
	       "\n"
	       "Documentation: " GMT_DOCDIR " (docs/ of the source tree):\n"
	       "guide.md (the user's guide: the options, snapshots, allocation sites, the\n"
	       "leak check, the API), ci.md (check), viewer.md (view), whatif.md (whatif),\n"
	       "snapshot-format.md,\n"
	       "tracing.md (how every allocation is seen); and\n"
	       "man gpumemtrace.\n",
	       GMT_LIBDIR[0] != '\0' ? ", and in " : "", GMT_LIBDIR);
}

static const char *context = "";

/* A message longer than this (two paths and words) is cut and ends in "...". */
#define CLI_LINE_MAX 10240

void cli_set_context(const char *c)
{
	context = c;
}

/* One line, whatever the arguments, paths or suppression lines in it hold:
 * escaped as the library's log escapes them (gmt__log_escape). */
static void vsay(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static void vsay(const char *fmt, va_list ap)
{
	char text[CLI_LINE_MAX], line[CLI_LINE_MAX];
	int len = vsnprintf(text, sizeof(text), fmt, ap);

	if (len < 0)
		return;
	gmt__log_escape(line, sizeof(line), text, (size_t)len >= sizeof(text));
	fprintf(stderr, "gpumemtrace: %s%s\n", context, line);
}

void cli_say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
}

void cli_die(int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	exit(status);
}

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void cli_find_library(char *out)
{
	const char *rel[] = {
		LIBNAME,              /* build tree: beside the launcher */
		"../" LIBNAME,        /* build tree: src/cli/ under src/ */
		"../lib/" LIBNAME,
		"../" GMT_LIBDIR_REL "/" LIBNAME,
		GMT_MULTIARCH[0] ? "../lib/" GMT_MULTIARCH "/" LIBNAME : NULL,
		"../lib64/" LIBNAME,
	};
	char exe[PATH_MAX], path[PATH_MAX + 64], tried[4096] = "";
	char *slash;
	ssize_t n;
	size_t i;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot find %s: /proc/self/exe: %s", LIBNAME, strerror(errno));
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash != NULL)
		*slash = '\0';

	for (i = 0; i < sizeof(rel) / sizeof(rel[0]) + 1; i++) {
		if (i < sizeof(rel) / sizeof(rel[0])) {
			if (rel[i] == NULL)
				continue;
			snprintf(path, sizeof(path), "%s/%s", exe, rel[i]);
		} else if (GMT_LIBDIR[0] != '\0') {
			snprintf(path, sizeof(path), "%s/%s", GMT_LIBDIR, LIBNAME);
		} else {
			continue;
		}
		if (is_file(path) && realpath(path, out) != NULL)
			return;
		if (strstr(tried, path) == NULL && strlen(tried) + strlen(path) + 3 < sizeof(tried)) {
			strcat(tried, tried[0] ? ", " : "");
			strcat(tried, path);
		}
	}
	cli_die(GMT_EXIT_NO_LIBRARY, "cannot find %s (looked for %s); is gpumemtrace installed completely?",
		LIBNAME, tried);
}

/* NOTE: AddressSanitizer and ThreadSanitizer insist that their runtime be
 * the first object loaded ("ASan runtime does not come first in initial
 * library list"), so a runtime that leads LD_PRELOAD stays in front. */
static bool is_sanitizer_runtime(const char *entry, size_t n)
{
	static const char *const names[] = { "libasan", "libtsan", "libubsan", "liblsan",
					     "libclang_rt." };
	const char *base = entry;
	size_t i;

	for (i = 0; i < n; i++) {
		if (entry[i] == '/')
			base = entry + i + 1;
	}
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strncmp(base, names[i], strlen(names[i])) == 0)
			return true;
	}
	return false;
}

/* Whether the file dir/name exists and is another file than st. */
static bool other_file(const char *dir, size_t dirlen, const char *name, const struct stat *st)
{
	char path[PATH_MAX];
	struct stat other;

	if (snprintf(path, sizeof(path), "%.*s/%s", (int)dirlen, dir, name) >= (int)sizeof(path))
		return false;
	return stat(path, &other) == 0 && (other.st_dev != st->st_dev || other.st_ino != st->st_ino);
}

/* LD_LIBRARY_PATH with dir in it, where the bare name `name` finds lib (st):
 * at the end — the program's own directories keep their place —, or first
 * when an earlier directory holds another file of that name. */
static void add_library_path(const char *dir, const char *name, const struct stat *st)
{
	const char *old = getenv("LD_LIBRARY_PATH"), *p;
	bool first = false;
	char *value;

	for (p = old != NULL ? old : ""; *p != '\0';) {
		size_t n = strcspn(p, ":;");

		if (n == strlen(dir) && strncmp(p, dir, n) == 0)
			break;
		first = first || (n > 0 && other_file(p, n, name, st));
		p += n + (p[n] != '\0');
	}
	if (old != NULL && *p != '\0' && !first)
		return; /* there already, and nothing before it in the way */
	if (old == NULL || old[0] == '\0') {
		value = strdup(dir);
	} else {
		value = malloc(strlen(old) + strlen(dir) + 2);
		if (value != NULL)
			sprintf(value, first ? "%2$s:%1$s" : "%1$s:%2$s", old, dir);
	}
	if (value == NULL)
		cli_die(GMT_EXIT_NO_LIBRARY, "out of memory");
	if (setenv("LD_LIBRARY_PATH", value, 1) != 0)
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot set LD_LIBRARY_PATH: %s", strerror(errno));
	free(value);
}

/* NOTE: ld.so splits LD_PRELOAD at spaces and colons and has no way to quote
 * one: an install path with a space ran the program untraced, with two ld.so
 * errors (issue 35). Such a library is preloaded by its bare name, its
 * directory added to LD_LIBRARY_PATH (split at colons and semicolons only,
 * searched before the system's directories); a directory with either of
 * those, or a name with a space, cannot be named at all: refused. Returns
 * what LD_PRELOAD names lib by. */
static const char *preload_name(const char *lib)
{
	const char *slash = strrchr(lib, '/');
	static char dir[PATH_MAX];
	struct stat st;

	if (strpbrk(lib, " :") == NULL)
		return lib;
	if (slash == NULL || strpbrk(slash + 1, " :;") != NULL || (size_t)(slash - lib) >= sizeof(dir) ||
	    memchr(lib, ':', (size_t)(slash - lib)) != NULL || memchr(lib, ';', (size_t)(slash - lib)) != NULL)
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot preload %s: the loader cannot name a library whose directory "
			"holds ':' or ';' (install gpumemtrace under another path)", lib);
	if (stat(lib, &st) != 0)
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot preload %s: %s", lib, strerror(errno));
	memcpy(dir, lib, (size_t)(slash - lib));
	dir[slash - lib] = '\0';
	add_library_path(dir, slash + 1, &st);
	return slash + 1;
}

void cli_set_preload(const char *path)
{
	const char *old = getenv("LD_PRELOAD"), *p, *lib = preload_name(path);
	size_t lead = 0, liblen = strlen(lib);
	char *value;

	if (old == NULL || old[strspn(old, " :")] == '\0') {
		if (setenv("LD_PRELOAD", lib, 1) != 0)
			cli_die(GMT_EXIT_NO_LIBRARY, "cannot set LD_PRELOAD: %s", strerror(errno));
		return;
	}
	/* ld.so splits the list at spaces and colons */
	for (p = old; *p != '\0';) {
		size_t sep = strspn(p, " :"), n;

		p += sep;
		n = strcspn(p, " :");
		if (n == liblen && strncmp(p, lib, n) == 0)
			return; /* already there */
		p += n;
	}
	for (p = old; *p != '\0';) {
		size_t sep = strspn(p, " :"), n = strcspn(p + sep, " :");

		if (n == 0 || !is_sanitizer_runtime(p + sep, n))
			break;
		p += sep + n;
		lead = (size_t)(p - old);
	}
	value = malloc(strlen(old) + liblen + 2);
	if (value == NULL)
		cli_die(GMT_EXIT_NO_LIBRARY, "out of memory");
	if (lead > 0)
		sprintf(value, "%.*s:%s%s%s", (int)lead, old, lib, old[lead] ? ":" : "",
			old + lead + strspn(old + lead, " :"));
	else
		sprintf(value, "%s:%s", lib, old + strspn(old, " :"));
	if (setenv("LD_PRELOAD", value, 1) != 0)
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot set LD_PRELOAD: %s", strerror(errno));
	free(value);
}

void cli_set_option(const char *flag, const char *var, const char *value)
{
	struct gmt__options scratch;
	const char *expected = "?";
	int r;

	gmt__options_defaults(&scratch);
	r = gmt__options_set(&scratch, var, value, &expected);
	if (r < 0)
		cli_die(GMT_EXIT_USAGE, "%s '%s' is invalid: expected %s", flag, value, expected);
	if (setenv(var, value, 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set %s: %s", var, strerror(errno));
}

void cli_make_dir(const char *flag, const char *dir, char *abs)
{
	struct stat st;

	if (dir[0] == '\0')
		cli_die(GMT_EXIT_USAGE, "%s '' is invalid: expected a directory", flag);
	if (mkdir(dir, 0777) != 0 && errno != EEXIST)
		cli_die(GMT_EXIT_USAGE, "%s '%s': %s", flag, dir, strerror(errno));
	if (realpath(dir, abs) == NULL)
		cli_die(GMT_EXIT_USAGE, "%s '%s': %s", flag, dir, strerror(errno));
	if (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))
		cli_die(GMT_EXIT_USAGE, "%s '%s': not a directory", flag, dir);
}

static void set_dir(const char *value)
{
	char abs[PATH_MAX];

	cli_make_dir("--dir", value, abs);
	cli_set_option("--dir", "GPUMEMTRACE_DIR", abs);
}

static void set_metrics_dir(const char *value)
{
	char abs[PATH_MAX];

	cli_make_dir("--metrics-dir", value, abs);
	cli_set_option("--metrics-dir", "GPUMEMTRACE_METRICS_DIR", abs);
}

const char *cli_option_value(int argc, char **argv, int *i, const char *name)
{
	const char *arg = argv[*i];
	size_t n = strlen(name);

	if (strncmp(arg, name, n) != 0)
		return NULL;
	if (arg[n] == '=')
		return arg + n + 1;
	if (arg[n] != '\0')
		return NULL;
	if (*i + 1 >= argc || strcmp(argv[*i + 1], "--") == 0)
		cli_die(GMT_EXIT_USAGE, "%s needs a value (see gpumemtrace --help)", name);
	return argv[++*i];
}

static int run(int argc, char **argv)
{
	char lib[PATH_MAX];
	const char *v;
	int i;

	for (i = 2; i < argc; i++) {
		const char *arg = argv[i];

		if (strcmp(arg, "--") == 0)
			break;
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			cli_help();
			return 0;
		}
		if ((v = cli_option_value(argc, argv, &i, "--dir")) != NULL)
			set_dir(v);
		else if ((v = cli_option_value(argc, argv, &i, "--snapshot-on")) != NULL)
			cli_set_option("--snapshot-on", "GPUMEMTRACE_SNAPSHOT_ON", v);
		else if ((v = cli_option_value(argc, argv, &i, "--metrics-dir")) != NULL)
			set_metrics_dir(v);
		else if ((v = cli_option_value(argc, argv, &i, "--depth")) != NULL)
			cli_set_option("--depth", "GPUMEMTRACE_STACK_DEPTH", v);
		else if (strcmp(arg, "--no-python-stacks") == 0)
			cli_set_option("--no-python-stacks", "GPUMEMTRACE_PYTHON_STACKS", "0");
		else if (strcmp(arg, "--verbose") == 0)
			cli_set_option("--verbose", "GPUMEMTRACE_VERBOSE", "1");
		else if (arg[0] == '-')
			cli_die(GMT_EXIT_USAGE, "run: unknown option '%s' (see gpumemtrace --help)", arg);
		else
			cli_die(GMT_EXIT_USAGE, "run: '--' must come before the command, as in: "
				"gpumemtrace run [options] -- %s ...", arg);
	}
	if (i >= argc)
		cli_die(GMT_EXIT_USAGE, "run: no command (gpumemtrace run [options] -- command ...)");
	if (i + 1 >= argc)
		cli_die(GMT_EXIT_USAGE, "run: no command after '--'");

	cli_find_library(lib);
	cli_set_preload(lib);
	cli_set_pythonpath();
	/* A run that wrote nothing says so at exit (the user's own setting
	 * wins). */
	if (getenv("GPUMEMTRACE_EXIT_NOTE") == NULL)
		cli_set_option("run", "GPUMEMTRACE_EXIT_NOTE", "1");
	execvp(argv[i + 1], argv + i + 1);
	cli_die(GMT_EXIT_NO_COMMAND, "cannot run '%s': %s", argv[i + 1], strerror(errno));
}

/* The directory that holds the Python package gpumemtrace (its
 * __init__.py, the viewer gpumemtrace/view, the bootstrap gpumemtrace/_boot):
 * relative to this program (GMT_PYTHON_REL), else the source tree it was built
 * from, else the configured datadir; into root, "" when none has it. The
 * places looked at go into tried (for a message). */
static void find_python(char root[PATH_MAX], char *tried, size_t triedlen)
{
	const char *at[] = { NULL, GMT_PYTHON_SRC, GMT_PYTHON_INSTALLED };
	char exe[PATH_MAX], dir[PATH_MAX + 64], init[PATH_MAX + 96];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t i;

	exe[n > 0 ? n : 0] = '\0';
	if (strrchr(exe, '/') != NULL)
		*strrchr(exe, '/') = '\0';
	tried[0] = '\0';
	for (i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		if (i == 0)
			snprintf(dir, sizeof(dir), "%s/" GMT_PYTHON_REL, exe);
		else if (at[i][0] != '\0')
			snprintf(dir, sizeof(dir), "%s", at[i]);
		else
			continue;
		snprintf(init, sizeof(init), "%s/gpumemtrace/__init__.py", dir);
		if (is_file(init) && realpath(dir, root) != NULL)
			return;
		if (strlen(tried) + strlen(dir) + 3 < triedlen) {
			strcat(tried, tried[0] ? ", " : "");
			strcat(tried, dir);
		}
	}
	root[0] = '\0';
}

/* PYTHONPATH: the bootstrap (sitecustomize.py, which chains to the
 * program's own) first, then the package's directory, then what the program
 * had. From a wheel, the package's directory is the site-packages of the
 * Python it was installed into: that Python has it already, and another
 * Python must not see that environment's packages (the bootstrap finds its
 * own package without it). */
void cli_set_pythonpath(void)
{
	char root[PATH_MAX], tried[4096], *value;
	const char *old = getenv("PYTHONPATH");
#ifdef GMT_WHEEL
	const bool with_root = false;
#else
	const bool with_root = true;
#endif

	find_python(root, tried, sizeof(tried));
	if (root[0] == '\0')
		return;
	if (asprintf(&value, "%s/gpumemtrace/_boot%s%s%s%s", root, with_root ? ":" : "", with_root ? root : "",
		     old != NULL && old[0] != '\0' ? ":" : "", old != NULL ? old : "") < 0)
		cli_die(GMT_EXIT_USAGE, "out of memory");
	if (setenv("PYTHONPATH", value, 1) != 0)
		cli_die(GMT_EXIT_USAGE, "cannot set PYTHONPATH: %s", strerror(errno));
	free(value);
}

/* `gpumemtrace view ARGS`: the viewer is Python (the package's view), run
 * by path with the python3 on PATH, isolated (-I: neither the working
 * directory nor PYTHON* variables change what it imports). */
static int view(int argc, char **argv)
{
	char root[PATH_MAX], tried[4096], path[PATH_MAX + 64];
	char **args;
	size_t i;

	cli_set_context("view: ");
	find_python(root, tried, sizeof(tried));
	if (root[0] == '\0')
		cli_die(GMT_EXIT_NO_LIBRARY, "cannot find the viewer (gpumemtrace/view in %s)", tried);
	snprintf(path, sizeof(path), "%s/gpumemtrace/view/__main__.py", root);

	args = calloc((size_t)argc + 3, sizeof(*args));
	if (args == NULL)
		cli_die(GMT_EXIT_NO_COMMAND, "out of memory");
	args[0] = "python3";
	args[1] = "-I";
	args[2] = path;
	for (i = 2; i < (size_t)argc; i++)
		args[i + 1] = argv[i];
	execvp(args[0], args);
	free(args);
	cli_die(GMT_EXIT_NO_COMMAND, "cannot run python3 (the viewer needs Python 3.9 or newer): %s",
		strerror(errno));
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (cmd == NULL) {
		usage(stderr);
		return GMT_EXIT_USAGE;
	}
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		cli_help();
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("gpumemtrace %s\n", GMT_BUILD_VERSION);
		return 0;
	}
	if (strcmp(cmd, "run") == 0)
		return run(argc, argv);
	if (strcmp(cmd, "check") == 0)
		return cli_check(argc, argv);
	if (strcmp(cmd, "view") == 0)
		return view(argc, argv);
	if (strcmp(cmd, "whatif") == 0)
		return cli_whatif(argc, argv);
	cli_die(GMT_EXIT_USAGE, "unknown command '%s' (see gpumemtrace --help)", cmd);
}
