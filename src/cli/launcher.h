/* What the subcommands of the gpumemtrace command share (launcher.c): finding
 * the library, preparing the traced command's environment, reading options,
 * and dying with a one-line message. Single-threaded code: the messages go
 * through stdio, and errors end the process. */
#ifndef GMT_LAUNCHER_H
#define GMT_LAUNCHER_H

#include <stdbool.h>

#define GMT_LIBNAME "libgpumemtrace.so"

/* Exit statuses of the launcher itself; otherwise the command's own (and, for
 * check, its verdict: check.h). */
enum {
	GMT_EXIT_USAGE = 2,        /* bad arguments */
	GMT_EXIT_NO_LIBRARY = 125, /* the library is not where it should be */
	GMT_EXIT_NO_COMMAND = 127, /* the command cannot be executed */
};

/* Words put after "gpumemtrace: " in every message of cli_die and the
 * subcommand's own ("check: "); "" (the default) for none. */
void cli_set_context(const char *context);

/* "gpumemtrace: <context>" and the message on stderr as one line, then exit. */
void cli_die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* The same line without exiting. */
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The absolute path of the library into out[PATH_MAX], or exits with
 * GMT_EXIT_NO_LIBRARY naming the places looked at. */
void cli_find_library(char *out);

/* LD_PRELOAD with the library at `path` in it: first, or right after the
 * sanitizer runtimes that lead the list; never twice. A path with a space
 * or a colon, which LD_PRELOAD cannot hold, is named by its file name, its
 * directory added to LD_LIBRARY_PATH (launcher.c, preload_name). */
void cli_set_preload(const char *path);

/* Checks value with the tracer's parser for the variable `var` and puts it
 * into the environment; a bad value is a usage error naming `flag`. */
void cli_set_option(const char *flag, const char *var, const char *value);

/* The directory of a --dir or --metrics-dir (flag) of run and check: made
 * when missing (the last component only, as mkdir makes it), and its
 * absolute path into abs (PATH_MAX bytes), so that a command that changes
 * directory still writes where it was asked to. A usage error naming the
 * flag and DIR when it cannot be made or is not a directory. */
void cli_make_dir(const char *flag, const char *dir, char *abs);

/* Puts the Python module (tools/python: `import gpumemtrace`, the pytest
 * plugin) first on PYTHONPATH, the installed copy or this source tree's;
 * nothing when neither is there. */
void cli_set_pythonpath(void);

/* If argv[*i] is `name` or `name=value`: the value (the next argument in the
 * first form, advancing *i; a usage error when there is none), else NULL. */
const char *cli_option_value(int argc, char **argv, int *i, const char *name);

/* The --help text on stdout. */
void cli_help(void);

/* `gpumemtrace check [options] -- command...` (check.c); argv[1] is "check".
 * Returns the exit status. */
int cli_check(int argc, char **argv);

/* `gpumemtrace whatif SNAPSHOT [--alloc-conf CONF]... [--device-bytes N]`
 * (whatif.c); argv[1] is "whatif". Returns the exit status: 0 when the
 * replay reproduced the run, 1 when it did not (no answers), 2 for bad
 * input. */
int cli_whatif(int argc, char **argv);

#endif /* GMT_LAUNCHER_H */
