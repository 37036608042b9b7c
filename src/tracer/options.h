/* Configuration: one table of GPUMEMTRACE_* options, read from the environment
 * once. An invalid value warns once (naming the variable and the value) and
 * keeps the default; with GPUMEMTRACE_VERBOSE=1 the whole table is printed. */
#ifndef GMT_OPTIONS_H
#define GMT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Snapshot triggers (GPUMEMTRACE_SNAPSHOT_ON), a bit each. */
enum gmt__trigger {
	GMT_TRIGGER_OOM = 1u << 0,
	GMT_TRIGGER_EXIT = 1u << 1,
	GMT_TRIGGER_PEAK = 1u << 2,
	GMT_TRIGGER_SIGNAL = 1u << 3,
};

/* Leak classes (GPUMEMTRACE_LEAK_CLASSES: which count as leaks), a bit each. */
enum gmt__leak_class_bit {
	GMT_CLASS_LEAKED = 1u << 0,
	GMT_CLASS_REFERENCED = 1u << 1,
	GMT_CLASS_CACHED = 1u << 2,
};

/* X(field, variable, type, default, help). Types: BOOL, INT (a range in the
 * parser table of options.c), SIZE (K/M/G suffixes), STRING, TRIGGERS,
 * CLASSES (comma lists of the words above). One list,
 * three uses: the struct, the parser, the verbose listing. */
#define GMT_OPTIONS(X)                                                                        \
	X(dir, "GPUMEMTRACE_DIR", STRING, ".", "directory for snapshot files")                \
	X(snapshot_on, "GPUMEMTRACE_SNAPSHOT_ON", TRIGGERS, GMT_TRIGGER_OOM,                  \
	  "when to write snapshots: comma list of oom, exit, peak, signal")                    \
	X(peak_step, "GPUMEMTRACE_PEAK_STEP", INT, 10,                                        \
	  "peak snapshots: percent a new high must exceed the last one's")                    \
	X(stack_depth, "GPUMEMTRACE_STACK_DEPTH", INT, 64,                                    \
	  "native frames recorded per allocation, 0 to 256 (0: no stacks)")                   \
	X(python_stacks, "GPUMEMTRACE_PYTHON_STACKS", BOOL, true,                             \
	  "also record the Python frames of a thread with a Python thread state (stacks on)") \
	X(history, "GPUMEMTRACE_HISTORY", INT, 10000,                                         \
	  "allocations and frees a snapshot's history keeps, 0 to 10000000 (0: none)")        \
	X(ring_events, "GPUMEMTRACE_RING_EVENTS", INT, 4096,                                  \
	  "events each thread's ring holds, a power of two from 64 to 1048576")               \
	X(leak_check, "GPUMEMTRACE_LEAK_CHECK", BOOL, false,                                  \
	  "at exit, print the leak report; exit with GPUMEMTRACE_LEAK_EXITCODE if leaks count") \
	X(leak_exitcode, "GPUMEMTRACE_LEAK_EXITCODE", INT, 23,                                \
	  "the exit status when the leak check finds leaks, 1 to 255")                        \
	X(leak_classes, "GPUMEMTRACE_LEAK_CLASSES", CLASSES, GMT_CLASS_LEAKED | GMT_CLASS_REFERENCED, \
	  "which live memory at exit counts as a leak: comma list of leaked, referenced, cached") \
	X(suppressions, "GPUMEMTRACE_SUPPRESSIONS", STRING, "",                               \
	  "file of leak suppressions, leak:PATTERN or cached:PATTERN per line")               \
	X(leak_builtins, "GPUMEMTRACE_LEAK_BUILTINS", BOOL, true,                             \
	  "apply the built-in rules (framework caches, NVIDIA libraries' workspaces)")        \
	X(leak_scan, "GPUMEMTRACE_LEAK_SCAN", BOOL, true,                                     \
	  "at exit, scan host memory for references to live allocations")                    \
	X(gate, "GPUMEMTRACE_GATE", BOOL, false,                                              \
	  "set by gpumemtrace check: mark each process pending until its exit snapshot is written") \
	X(verbose, "GPUMEMTRACE_VERBOSE", BOOL, false, "print the options and progress")

#define GMT_OPTION_TYPE_BOOL bool
#define GMT_OPTION_TYPE_INT int64_t
#define GMT_OPTION_TYPE_SIZE uint64_t
#define GMT_OPTION_TYPE_STRING const char *
#define GMT_OPTION_TYPE_TRIGGERS unsigned
#define GMT_OPTION_TYPE_CLASSES unsigned

struct gmt__options {
#define GMT_X_FIELD(field, var, type, def, help) GMT_OPTION_TYPE_##type field;
	GMT_OPTIONS(GMT_X_FIELD)
#undef GMT_X_FIELD
};

/* The options, parsed from `environ` on first call (thread-safe; no malloc:
 * strings point into the environment). Sets gmt__log_set_verbose() from them. */
const struct gmt__options *gmt__options(void);

/* Whether the process runs in secure-execution mode (AT_SECURE: set-user-ID,
 * set-group-ID or file capabilities): then gmt__options() reads nothing from
 * the environment (every option its default) and the tracer stays off. */
bool gmt__secure(void);

/* Parses the "NAME=value" list envp (NULL-terminated; NULL for none) into *out:
 * every option its default, then each GPUMEMTRACE_* variable of envp. Warns
 * through the log once for each invalid value (naming the variable and the
 * value; the default is kept) and once for each GPUMEMTRACE_* name that is not
 * an option. When the result has `verbose`, turns gmt__info on and prints the
 * table (each option, its value, where it came from). gmt__options() passes
 * environ; tests pass a list of their own. */
void gmt__options_parse(struct gmt__options *out, char *const *envp);

/* Parses one value for the option called `name` into its field of *out,
 * silently. Returns 0, -ENOENT when no option has that name, or -EINVAL /
 * -ERANGE for a value the option does not accept (the field keeps its value;
 * *expected, when not NULL, then gets a phrase saying what it accepts). For the
 * launcher, which checks its arguments with the tracer's own parsers. */
int gmt__options_set(struct gmt__options *out, const char *name, const char *value,
		     const char **expected);

/* Every option at its default. */
void gmt__options_defaults(struct gmt__options *out);

/* Writes the value of option `name` of *o as text into buf[0..len) (NUL
 * terminated, cut to fit). Returns 0 or -ENOENT. */
int gmt__options_format(const struct gmt__options *o, const char *name, char *buf, size_t len);

#endif /* GMT_OPTIONS_H */
