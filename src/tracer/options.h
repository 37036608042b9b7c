/* Configuration: one table of GPUMEMTRACE_* options, read from the environment
 * once. An invalid value warns once (naming the variable and the value) and
 * keeps the default; with GPUMEMTRACE_VERBOSE=1 the whole table is printed. */
#ifndef GMT_OPTIONS_H
#define GMT_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The words of the lists below: X(ID, "word"), one list each, the order
 * in which reports and help texts name them. tests/unit/test_vocabulary.py
 * holds the viewer's copies and the snapshot schema's enums to these. */

/* Snapshot triggers (GPUMEMTRACE_SNAPSHOT_ON). oom is on whatever the list
 * adds, unless it says GMT_TRIGGER_NO_OOM (or is "none"). */
#define GMT_TRIGGERS(X) X(OOM, "oom") X(EXIT, "exit") X(PEAK, "peak") X(SIGNAL, "signal")
#define GMT_TRIGGER_NO_OOM "no-oom"

/* Leak classes (GPUMEMTRACE_LEAK_CLASSES: which count as leaks): no reference
 * to it found; referenced from the program's memory; matched a caching rule. */
#define GMT_LEAK_CLASSES(X) X(LEAKED, "leaked") X(REFERENCED, "referenced") X(CACHED, "cached")

/* What of PyTorch's allocation history the Python bootstrap turns on
 * (GPUMEMTRACE_TORCH_HISTORY; docs/guide.md "PyTorch's own view"): one word.
 * alloc: every event, the Python frames of each allocation; all: the frees'
 * frames too; events: no frames; off: no history. */
#define GMT_TORCH_HISTORIES(X) X(ALLOC, "alloc") X(ALL, "all") X(EVENTS, "events") X(OFF, "off")

/* "oom, exit, peak, signal, ": a list's words for a help text. */
#define GMT_WORD_COMMA(id, word) word ", "

enum gmt__trigger_index {
#define GMT_X(id, word) GMT_TRIGGER_INDEX_##id,
	GMT_TRIGGERS(GMT_X)
#undef GMT_X
	GMT_TRIGGER_COUNT
};

/* A trigger's bit in the option's value. */
enum gmt__trigger {
#define GMT_X(id, word) GMT_TRIGGER_##id = 1u << GMT_TRIGGER_INDEX_##id,
	GMT_TRIGGERS(GMT_X)
#undef GMT_X
};

/* A leak class, as the leak check assigns it. */
enum gmt__leak_class {
#define GMT_X(id, word) GMT_LEAK_##id,
	GMT_LEAK_CLASSES(GMT_X)
#undef GMT_X
	GMT_LEAK_CLASS_COUNT
};

/* A word of GPUMEMTRACE_TORCH_HISTORY. */
enum gmt__torch_history {
#define GMT_X(id, word) GMT_TORCH_HISTORY_##id,
	GMT_TORCH_HISTORIES(GMT_X)
#undef GMT_X
	GMT_TORCH_HISTORY_COUNT
};

/* A class's bit in GPUMEMTRACE_LEAK_CLASSES. */
enum gmt__leak_class_bit {
#define GMT_X(id, word) GMT_CLASS_##id = 1u << GMT_LEAK_##id,
	GMT_LEAK_CLASSES(GMT_X)
#undef GMT_X
};

/* The words, by index. */
extern const char *const gmt__trigger_names[GMT_TRIGGER_COUNT];
extern const char *const gmt__leak_class_names[GMT_LEAK_CLASS_COUNT];
extern const char *const gmt__torch_history_names[GMT_TORCH_HISTORY_COUNT];

/* X(field, variable, type, default, help). Types: BOOL, INT (a range in the
 * parser table of options.c), SIZE (K/M/G suffixes), STRING, TRIGGERS,
 * CLASSES (comma lists of the words above), CHOICE (one word of a list, in
 * the parser table of options.c). One list,
 * three uses: the struct, the parser, the verbose listing. */
#define GMT_OPTIONS(X)                                                                        \
	X(dir, "GPUMEMTRACE_DIR", STRING, ".", "directory for snapshot files")                \
	X(snapshot_on, "GPUMEMTRACE_SNAPSHOT_ON", TRIGGERS, GMT_TRIGGER_OOM,                  \
	  "when to write snapshots besides oom: comma list of " GMT_TRIGGERS(GMT_WORD_COMMA)          \
	  GMT_TRIGGER_NO_OOM " (without oom), or none")                                           \
	X(peak_step, "GPUMEMTRACE_PEAK_STEP", INT, 10,                                        \
	  "peak snapshots: percent a top must exceed the last one copied")                    \
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
	X(leak_classes, "GPUMEMTRACE_LEAK_CLASSES", CLASSES, GMT_CLASS_LEAKED,                \
	  "which live memory at exit counts as a leak: comma list of " GMT_LEAK_CLASSES(GMT_WORD_COMMA) "or none") \
	X(suppressions, "GPUMEMTRACE_SUPPRESSIONS", STRING, "",                               \
	  "file of leak suppressions, leak:PATTERN or cached:PATTERN per line")               \
	X(site_libraries, "GPUMEMTRACE_SITE_LIBRARIES", STRING, "",                           \
	  "library code besides the built-in list, never named as a site: comma list of glob " \
	  "patterns of modules and Python files; !PATTERN is the program's own; nobuiltin") \
	X(leak_builtins, "GPUMEMTRACE_LEAK_BUILTINS", BOOL, true,                             \
	  "apply the built-in rules (framework caches, NVIDIA libraries' workspaces)")        \
	X(leak_scan, "GPUMEMTRACE_LEAK_SCAN", BOOL, true,                                     \
	  "at exit, scan host memory for references to live allocations")                    \
	X(metrics_dir, "GPUMEMTRACE_METRICS_DIR", STRING, "",                                 \
	  "directory for the live metrics file (Prometheus' text format, "                   \
	  "gpumemtrace.<pid>.<boot>-<pidns>-<start>.prom; "                                    \
	  "node_exporter's textfile directory); none when empty")                            \
	X(metrics_interval, "GPUMEMTRACE_METRICS_INTERVAL", INT, 10,                          \
	  "seconds between metrics writes, 1 to 86400 (also at each out-of-memory and at exit)") \
	X(metrics_top, "GPUMEMTRACE_METRICS_TOP", INT, 10,                                    \
	  "allocation sites and growth suspects in the metrics, 1 to 1000")                   \
	X(exit_note, "GPUMEMTRACE_EXIT_NOTE", BOOL, false,                                    \
	  "at exit, one line when the process recorded allocations but wrote no snapshot "   \
	  "(set by gpumemtrace run)")                                                         \
	X(gate, "GPUMEMTRACE_GATE", BOOL, false,                                              \
	  "set by gpumemtrace check: mark each process pending until its exit snapshot is written") \
	X(frameworks, "GPUMEMTRACE_FRAMEWORKS", BOOL, true,                                   \
	  "read by the Python bootstrap: record PyTorch's, CuPy's and JAX's allocators")     \
	X(torch_history, "GPUMEMTRACE_TORCH_HISTORY", CHOICE, GMT_TORCH_HISTORY_ALLOC,       \
	  "read by the Python bootstrap: PyTorch's allocation history, one of "              \
	  GMT_TORCH_HISTORIES(GMT_WORD_COMMA) "(what each costs and loses: docs/guide.md)")   \
	X(verbose, "GPUMEMTRACE_VERBOSE", BOOL, false, "print the options and progress")

#define GMT_OPTION_TYPE_BOOL bool
#define GMT_OPTION_TYPE_INT int64_t
#define GMT_OPTION_TYPE_SIZE uint64_t
#define GMT_OPTION_TYPE_STRING const char *
#define GMT_OPTION_TYPE_TRIGGERS unsigned
#define GMT_OPTION_TYPE_CLASSES unsigned
#define GMT_OPTION_TYPE_CHOICE unsigned

struct gmt__options {
#define GMT_X_FIELD(field, var, type, def, help) GMT_OPTION_TYPE_##type field;
	GMT_OPTIONS(GMT_X_FIELD)
#undef GMT_X_FIELD
};

/* The options, parsed from `environ` on first call (thread-safe; no malloc:
 * strings point into the environment). Sets gmt__log_set_verbose() from them.
 * A relative `dir` or `metrics_dir` comes back absolute, against the working
 * directory noted by gmt__options_at_load (else the current one). */
const struct gmt__options *gmt__options(void);

/* Notes the working directory: called at load, before the program can
 * chdir(). */
void gmt__options_at_load(void);

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
