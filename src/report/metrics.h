/* The live metrics of one process in Prometheus' text exposition format
 * (version 0.0.4), the file node_exporter's textfile collector reads: what
 * the tracer's background thread writes every GPUMEMTRACE_METRICS_INTERVAL
 * seconds (tracer/metrics.c). A pure function of the numbers it is given, so
 * that every rule — names, units, escaping, the bounds on labels — is tested
 * on made-up ones; docs/fleet.md lists the metrics. */
#ifndef GMT_METRICS_H
#define GMT_METRICS_H

#include "record/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of a label value kept (a site's label, the host, the command): cut
 * at a whole UTF-8 character, "…" added. */
#define GMT_METRICS_LABEL_MAX 120

/* Devices of a tensor level the metrics carry (as a snapshot's). */
#define GMT_METRICS_MAX_DEVICES 64

/* Who the process is: the labels of every sample. */
struct gmt__metrics_process {
	int pid;
	const char *host, *command, *job;     /* NULL: not known */
	int64_t rank, local_rank, world_size; /* -1: not set */
};

/* One device's memory ("host" for device -1: pinned and registered). */
struct gmt__metrics_device {
	int device;
	uint64_t bytes[GMT_KIND_COUNT], count[GMT_KIND_COUNT];
	uint64_t peak_bytes; /* the most live there at once, since the start */
};

/* An allocation site: its label, its live memory, and for a growth
 * suspect what it gained since it began to grow. */
struct gmt__metrics_site {
	const char *label;
	uint64_t bytes, count, growth;
};

/* The tensor level as the latest snapshot with one saw it (a framework
 * handed its tensors over): the metrics carry it until the next
 * (docs/fleet.md). Its labels are its own (malloc'd). */
struct gmt__metrics_tensor_device {
	int device;
	uint64_t bytes, count;
};

struct gmt__metrics_tensors {
	uint64_t time_ns; /* the snapshot's */
	struct gmt__metrics_tensor_device dev[GMT_METRICS_MAX_DEVICES];
	int ndev;
	struct gmt__metrics_site *sites, *suspects; /* by site; the text keeps the `top` largest */
	size_t nsites, nsuspects;
};

struct gmt__model;

/* The tensor level of a snapshot's model into *out (zeroed first; time_ns
 * the snapshot's). 0; -ENOENT when the model has no tensor level; -ENOMEM
 * (out then holds nothing to free). */
int gmt__metrics_tensors_of(const struct gmt__model *m, uint64_t time_ns, struct gmt__metrics_tensors *out);
void gmt__metrics_tensors_free(struct gmt__metrics_tensors *t);

struct gmt__metrics {
	struct gmt__metrics_process process;
	const char *version;
	uint64_t time_ns;        /* CLOCK_REALTIME of the numbers */
	uint64_t interval_s;
	bool running;            /* false: the last write, at exit */
	const struct gmt__metrics_device *devices;
	size_t ndevices;
	uint64_t allocs, frees;  /* since the start */
	uint64_t oom_failures, oom_episodes, oom_recovered;
	uint64_t snapshots, snapshot_errors;
	uint64_t events_recorded, events_applied;
	uint64_t tracer_bytes;
	/* Sites by live bytes, and growth suspects by growth: more may be
	 * given than are written (several stacks of one site, the stacks of
	 * the largest few sites); the text adds up those of one label and
	 * writes the `top` largest of each (GPUMEMTRACE_METRICS_TOP; 0: all). */
	const struct gmt__metrics_site *sites, *suspects;
	size_t nsites, nsuspects, top;
	const struct gmt__metrics_tensors *tensors; /* NULL: no hand-over yet */
};

/* The exposition into *text (malloc'd, NUL-terminated) and its length into
 * *len. Label values are escaped and bounded; sites whose labels are equal
 * once bounded are one series (their numbers added). 0, or -ENOMEM. */
int gmt__metrics_text(const struct gmt__metrics *m, char **text, size_t *len);

/* A label value as the exposition writes it between quotes, into buf (at
 * least 4 * GMT_METRICS_LABEL_MAX + 8 bytes): invalid UTF-8 and control
 * characters become '?', backslash, double quote and newline are escaped,
 * and it is cut after GMT_METRICS_LABEL_MAX bytes of the value. Returns buf. */
#define GMT_METRICS_ESCAPED_MAX (4 * GMT_METRICS_LABEL_MAX + 8)
const char *gmt__metrics_label(const char *value, char *buf);

#endif /* GMT_METRICS_H */
