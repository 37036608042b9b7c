/* The gpumemtrace command: `gpumemtrace run [options] -- cmd...` finds
 * libgpumemtrace.so beside itself (build tree or installed tree), turns its
 * options into GPUMEMTRACE_* variables checked with the tracer's own parsers,
 * puts the library into LD_PRELOAD and execs the command. */
#define _GNU_SOURCE
#include "options.h"

#include <gpumemtrace.h>

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef GMT_LIBDIR
#define GMT_LIBDIR "/usr/local/lib"
#endif
#ifndef GMT_LIBDIR_REL
#define GMT_LIBDIR_REL "lib"
#endif
#ifndef GMT_MULTIARCH
#define GMT_MULTIARCH ""
#endif

#define LIBNAME "libgpumemtrace.so"

/* Exit statuses of the launcher itself; otherwise the command's own. */
enum {
	EXIT_USAGE = 2,      /* bad arguments */
	EXIT_NO_LIBRARY = 125, /* the library is not where it should be */
	EXIT_NO_COMMAND = 127, /* the command cannot be executed */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: gpumemtrace run [options] -- command [argument...]\n"
		"       gpumemtrace check [options] -- command [argument...]   (not in this version)\n"
		"       gpumemtrace view FILE...                            (not in this version)\n"
		"       gpumemtrace --help | --version\n");
}

static void help(void)
{
	struct gmt__options defaults;
	char value[64];

	gmt__options_defaults(&defaults);
	printf("gpumemtrace %s: GPU memory tracing for unmodified CUDA programs.\n\n",
	       GMT_VERSION_STRING);
	usage(stdout);
	printf("\n"
	       "gpumemtrace run runs the command with " LIBNAME " preloaded: every\n"
	       "allocation and free of device, managed, stream-ordered, VMM and pinned host\n"
	       "memory is recorded with its stack, and JSON snapshots of the live memory are\n"
	       "written as gpumemtrace.<pid>.<reason>.<seq>.json (mode 0600) when an allocation\n"
	       "runs out of memory, and at the other triggers chosen.\n"
	       "\n"
	       "Options of run (each sets the variable named; invalid values are refused):\n"
	       "  --dir DIR            GPUMEMTRACE_DIR: where snapshots go (default: the\n"
	       "                       command's working directory); must exist\n"
	       "  --snapshot-on LIST   GPUMEMTRACE_SNAPSHOT_ON: comma list of oom, exit, peak,\n"
	       "                       signal (SIGUSR2), or none (default: oom)\n"
	       "  --depth N            GPUMEMTRACE_STACK_DEPTH: native frames per allocation,\n"
	       "                       0 to 256, 0 turns stacks off (default: 64)\n"
	       "  --no-python-stacks   GPUMEMTRACE_PYTHON_STACKS=0: native frames only, no\n"
	       "                       Python frames (default: recorded where the GIL is held)\n"
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
	       "The library is looked for beside this program: in its directory and the\n"
	       "one above (build tree), in ../lib, ../" GMT_LIBDIR_REL ", ../lib/<multiarch>,\n"
	       "../lib64 (installed tree), and in " GMT_LIBDIR ".\n"
	       "\n"
	       "Exit status: the command's; 2 for a usage error, 125 when " LIBNAME "\n"
	       "cannot be found, 127 when the command cannot be executed.\n"
	       "\n"
	       "Messages are one line each on stderr, prefixed 'gpumemtrace:'.\n");
}

/* A one-line error, then exit. */
static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("gpumemtrace: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The absolute path of the library into out[PATH_MAX], or exits. */
static void find_library(char *out)
{
	const char *rel[] = {
		LIBNAME,              /* build tree: beside the launcher */
		"../" LIBNAME,        /* build tree: src/launcher/ under src/ */
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
		die(EXIT_NO_LIBRARY, "cannot find %s: /proc/self/exe: %s", LIBNAME, strerror(errno));
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash != NULL)
		*slash = '\0';

	for (i = 0; i < sizeof(rel) / sizeof(rel[0]) + 1; i++) {
		if (i < sizeof(rel) / sizeof(rel[0])) {
			if (rel[i] == NULL)
				continue;
			snprintf(path, sizeof(path), "%s/%s", exe, rel[i]);
		} else {
			snprintf(path, sizeof(path), "%s/%s", GMT_LIBDIR, LIBNAME);
		}
		if (is_file(path) && realpath(path, out) != NULL)
			return;
		if (strstr(tried, path) == NULL && strlen(tried) + strlen(path) + 3 < sizeof(tried)) {
			strcat(tried, tried[0] ? ", " : "");
			strcat(tried, path);
		}
	}
	die(EXIT_NO_LIBRARY, "cannot find %s (looked for %s); is gpumemtrace installed completely?",
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

/* LD_PRELOAD with the library in it: first, or right after the sanitizer
 * runtimes that lead the list; never twice. */
static void set_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD"), *p;
	size_t lead = 0, liblen = strlen(lib);
	char *value;

	if (old == NULL || old[strspn(old, " :")] == '\0') {
		if (setenv("LD_PRELOAD", lib, 1) != 0)
			die(EXIT_NO_LIBRARY, "cannot set LD_PRELOAD: %s", strerror(errno));
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
		die(EXIT_NO_LIBRARY, "out of memory");
	if (lead > 0)
		sprintf(value, "%.*s:%s%s%s", (int)lead, old, lib, old[lead] ? ":" : "",
			old + lead + strspn(old + lead, " :"));
	else
		sprintf(value, "%s:%s", lib, old + strspn(old, " :"));
	if (setenv("LD_PRELOAD", value, 1) != 0)
		die(EXIT_NO_LIBRARY, "cannot set LD_PRELOAD: %s", strerror(errno));
	free(value);
}

/* Checks value with the tracer's parser for `var` and puts it into the
 * environment; a bad value is a usage error naming the option. */
static void set_option(const char *flag, const char *var, const char *value)
{
	struct gmt__options scratch;
	const char *expected = "?";
	int r;

	gmt__options_defaults(&scratch);
	r = gmt__options_set(&scratch, var, value, &expected);
	if (r < 0)
		die(EXIT_USAGE, "%s '%s' is invalid: expected %s", flag, value, expected);
	if (setenv(var, value, 1) != 0)
		die(EXIT_USAGE, "cannot set %s: %s", var, strerror(errno));
}

/* --dir: made absolute now, so that a command that changes directory still
 * writes where it was asked to; it must exist. */
static void set_dir(const char *value)
{
	char abs[PATH_MAX];
	struct stat st;

	if (value[0] == '\0')
		die(EXIT_USAGE, "--dir '' is invalid: expected a directory");
	if (realpath(value, abs) == NULL)
		die(EXIT_USAGE, "--dir '%s': %s", value, strerror(errno));
	if (stat(abs, &st) != 0 || !S_ISDIR(st.st_mode))
		die(EXIT_USAGE, "--dir '%s': not a directory", value);
	set_option("--dir", "GPUMEMTRACE_DIR", abs);
}

/* If arg is `--name` or `--name=value`: the value (the next argument in the
 * first form, advancing *i), else NULL. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
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
		die(EXIT_USAGE, "%s needs a value (see gpumemtrace --help)", name);
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
			help();
			return 0;
		}
		if ((v = option_value(argc, argv, &i, "--dir")) != NULL)
			set_dir(v);
		else if ((v = option_value(argc, argv, &i, "--snapshot-on")) != NULL)
			set_option("--snapshot-on", "GPUMEMTRACE_SNAPSHOT_ON", v);
		else if ((v = option_value(argc, argv, &i, "--depth")) != NULL)
			set_option("--depth", "GPUMEMTRACE_STACK_DEPTH", v);
		else if (strcmp(arg, "--no-python-stacks") == 0)
			set_option("--no-python-stacks", "GPUMEMTRACE_PYTHON_STACKS", "0");
		else if (strcmp(arg, "--verbose") == 0)
			set_option("--verbose", "GPUMEMTRACE_VERBOSE", "1");
		else if (arg[0] == '-')
			die(EXIT_USAGE, "run: unknown option '%s' (see gpumemtrace --help)", arg);
		else
			die(EXIT_USAGE, "run: '--' must come before the command, as in: "
					"gpumemtrace run [options] -- %s ...", arg);
	}
	if (i >= argc)
		die(EXIT_USAGE, "run: no command (gpumemtrace run [options] -- command ...)");
	if (i + 1 >= argc)
		die(EXIT_USAGE, "run: no command after '--'");

	find_library(lib);
	set_preload(lib);
	execvp(argv[i + 1], argv + i + 1);
	die(EXIT_NO_COMMAND, "cannot run '%s': %s", argv[i + 1], strerror(errno));
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (cmd == NULL) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		help();
		return 0;
	}
	if (strcmp(cmd, "--version") == 0) {
		printf("gpumemtrace %s\n", GMT_VERSION_STRING);
		return 0;
	}
	if (strcmp(cmd, "run") == 0)
		return run(argc, argv);
	if (strcmp(cmd, "view") == 0 || strcmp(cmd, "check") == 0)
		die(EXIT_USAGE, "'%s' is not available in this version (%s)", cmd, GMT_VERSION_STRING);
	die(EXIT_USAGE, "unknown command '%s' (see gpumemtrace --help)", cmd);
}
