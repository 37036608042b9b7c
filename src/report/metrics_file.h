/* The metrics file's name (docs/fleet.md, "The metrics file"): who wrote it,
 * told apart from every other process that may share the directory, and
 * when a file is provably one a process left that is gone. Pure functions
 * of what tracer/metrics.c reads from /proc, so that the rule is tested on
 * made-up processes. */
#ifndef GMT_METRICS_FILE_H
#define GMT_METRICS_FILE_H

#include <stdbool.h>
#include <stdint.h>

/* A process as its file's name gives it:
 * gpumemtrace.<pid>.<boot>-<pidns>-<start>.prom, with the boot the kernel's
 * boot id (its 32 hex digits: one per machine and boot), the pid namespace
 * the inode of /proc/self/ns/pid, the start time /proc/self/stat's (clock
 * ticks since boot). Processes of one machine in different containers
 * differ in their namespace, machines in their boot, a pid used again in
 * its start time: no two names can be the same. */
struct gmt__metrics_writer {
	long pid;
	char boot[33];
	uint64_t pidns, start;
};

/* Bytes of a name (its NUL included) at the most. */
#define GMT_METRICS_NAME_MAX 128

/* The name of w's file into buf (GMT_METRICS_NAME_MAX bytes). Returns buf. */
const char *gmt__metrics_name(const struct gmt__metrics_writer *w, char *buf);

/* The writer a directory entry's name gives, into *w: 0, or -EINVAL for any
 * other name (an earlier version's gpumemtrace.<pid>.prom, a name made
 * where /proc could not say who the process was, another file). */
int gmt__metrics_name_parse(const char *name, struct gmt__metrics_writer *w);

/* Whether the file of w was provably left by a process that is gone, as
 * `self` sees it: of the same boot and the same pid namespace (another
 * machine's or another container's pids mean nothing here), not self's, and
 * no process has its pid (`running` false) or the one that has it started
 * at another time (`start_now`, 0 when not known: then it may be w's). */
bool gmt__metrics_gone(const struct gmt__metrics_writer *self, const struct gmt__metrics_writer *w, bool running,
		       uint64_t start_now);

#endif /* GMT_METRICS_FILE_H */
