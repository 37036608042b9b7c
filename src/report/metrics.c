/* The metrics exposition (metrics.h). Every family has its HELP and TYPE
 * lines; every sample the process's labels (pid, host, job, rank,
 * local_rank, world_size, command: those known), then its own. Names and
 * units follow Prometheus' conventions: the gpumemtrace_ prefix, _bytes,
 * _seconds, _total for counters. */
#define _GNU_SOURCE
#include "report/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of the UTF-8 character at s, 0 when it is not a valid one. */
static size_t utf8_char(const unsigned char *s)
{
	unsigned char c = s[0];
	size_t n;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	}
	/* Overlong forms, surrogates, past U+10FFFF. */
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0) || (c == 0xf0 && s[1] < 0x90) ||
	    (c == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

const char *gmt__metrics_label(const char *value, char *buf)
{
	const unsigned char *v = (const unsigned char *)(value != NULL ? value : "");
	size_t kept = 0;
	char *p = buf;

	while (*v != '\0') {
		size_t n = utf8_char(v);
		unsigned char c = n == 0 ? '?' : *v;

		if (kept + (n == 0 ? 1 : n) > GMT_METRICS_LABEL_MAX) {
			memcpy(p, "\xe2\x80\xa6", 3); /* … */
			p += 3;
			break;
		}
		if (n > 1) {
			memcpy(p, v, n);
			p += n;
		} else if (c == '\\' || c == '"') {
			*p++ = '\\';
			*p++ = (char)c;
		} else if (c == '\n') {
			*p++ = '\\';
			*p++ = 'n';
		} else {
			*p++ = c < 0x20 || c == 0x7f ? '?' : (char)c;
		}
		kept += n == 0 ? 1 : n;
		v += n == 0 ? 1 : n;
	}
	*p = '\0';
	return buf;
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP gpumemtrace_%s %s\n# TYPE gpumemtrace_%s %s\n", name, help, name, type);
}

/* The process's labels, comma-separated, without braces. Every one is
 * written, empty when not known (Prometheus reads an empty label as none):
 * node_exporter's textfile collector refuses a family whose samples, from
 * all the files of its directory, have different label names. */
static void process_labels(FILE *f, const struct gmt__metrics_process *p)
{
	char buf[GMT_METRICS_ESCAPED_MAX];

	fprintf(f, "pid=\"%d\"", p->pid);
	fprintf(f, ",host=\"%s\"", gmt__metrics_label(p->host, buf));
	fprintf(f, ",job_id=\"%s\"", gmt__metrics_label(p->job, buf));
	if (p->rank >= 0)
		fprintf(f, ",rank=\"%" PRId64 "\"", p->rank);
	else
		fprintf(f, ",rank=\"\"");
	if (p->local_rank >= 0)
		fprintf(f, ",local_rank=\"%" PRId64 "\"", p->local_rank);
	else
		fprintf(f, ",local_rank=\"\"");
	if (p->world_size >= 0)
		fprintf(f, ",world_size=\"%" PRId64 "\"", p->world_size);
	else
		fprintf(f, ",world_size=\"\"");
	fprintf(f, ",command=\"%s\"", gmt__metrics_label(p->command, buf));
}

/* One sample: name{process labels[,extra]} value. */
static void sample(FILE *f, const char *labels, const char *name, const char *extra, uint64_t value)
{
	fprintf(f, "gpumemtrace_%s{%s%s%s} %" PRIu64 "\n", name, labels, extra[0] != '\0' ? "," : "", extra, value);
}

static void counter(FILE *f, const char *labels, const char *name, const char *help, uint64_t value)
{
	family(f, name, "counter", help);
	sample(f, labels, name, "", value);
}

static void gauge(FILE *f, const char *labels, const char *name, const char *help, uint64_t value)
{
	family(f, name, "gauge", help);
	sample(f, labels, name, "", value);
}

static void device_label(const struct gmt__metrics_device *d, char *buf, size_t len)
{
	if (d->device < 0)
		snprintf(buf, len, "device=\"host\"");
	else
		snprintf(buf, len, "device=\"%d\"", d->device);
}

/* One family of per (device, kind) samples: bytes, or allocations. */
static void by_kind(FILE *f, const char *labels, const struct gmt__metrics *m, const char *name, const char *help,
		    bool count)
{
	char dev[32], extra[64];

	family(f, name, "gauge", help);
	for (size_t i = 0; i < m->ndevices; i++) {
		device_label(&m->devices[i], dev, sizeof(dev));
		for (int k = 0; k < GMT_KIND_COUNT; k++) {
			if (m->devices[i].count[k] == 0)
				continue;
			snprintf(extra, sizeof(extra), "%s,kind=\"%s\"", dev, gmt__kind_name((enum gmt__kind)k));
			sample(f, labels, name, extra, count ? m->devices[i].count[k] : m->devices[i].bytes[k]);
		}
	}
}

static void devices(FILE *f, const char *labels, const struct gmt__metrics *m)
{
	char dev[32];

	by_kind(f, labels, m, "live_bytes",
		"Bytes of the process's live allocations, by device (host: pinned host memory) and kind.", false);
	by_kind(f, labels, m, "live_allocations", "The process's live allocations, by device and kind.", true);
	family(f, "peak_bytes", "gauge", "The most bytes the process had live on the device at once, since it started.");
	for (size_t i = 0; i < m->ndevices; i++) {
		device_label(&m->devices[i], dev, sizeof(dev));
		sample(f, labels, "peak_bytes", dev, m->devices[i].peak_bytes);
	}
}

/* A site's series: its label escaped and bounded, numbers added up over
 * sites whose bounded labels are equal (a series appears once). */
struct series {
	char label[GMT_METRICS_ESCAPED_MAX];
	uint64_t bytes, count, growth;
};

static int by_bytes(const void *a, const void *b)
{
	const struct series *x = a, *y = b;

	return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : strcmp(x->label, y->label);
}

static int by_growth(const void *a, const void *b)
{
	const struct series *x = a, *y = b;

	return x->growth != y->growth ? (x->growth < y->growth ? 1 : -1) : strcmp(x->label, y->label);
}

/* The series of v's sites, equal labels added up, the `top` largest by
 * `cmp` (all when top is 0), largest first. */
static struct series *merge_sites(const struct gmt__metrics_site *v, size_t n, size_t top,
				  int (*cmp)(const void *, const void *), size_t *out_n)
{
	struct series *s = calloc(n > 0 ? n : 1, sizeof(*s));
	size_t k = 0;

	if (s == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		char buf[GMT_METRICS_ESCAPED_MAX];
		size_t j;

		gmt__metrics_label(v[i].label, buf);
		for (j = 0; j < k && strcmp(s[j].label, buf) != 0; j++)
			;
		if (j == k)
			memcpy(s[k++].label, buf, sizeof(buf));
		s[j].bytes += v[i].bytes;
		s[j].count += v[i].count;
		s[j].growth += v[i].growth;
	}
	qsort(s, k, sizeof(*s), cmp);
	*out_n = top > 0 && k > top ? top : k;
	return s;
}

/* The names and helps of a level's site families. */
struct site_families {
	const char *live_bytes, *live_bytes_help;
	const char *live_count, *live_count_help;
	const char *growth, *growth_help;
};

static const struct site_families driver_families = {
	"site_live_bytes",
	"Live bytes of the allocation sites holding the most (GPUMEMTRACE_METRICS_TOP of them), by site.",
	"site_live_allocations", "Live allocations of those sites.",
	"growth_suspect_bytes",
	"Bytes the growth suspects (sites whose live bytes keep rising) gained since they began to grow.",
};

static const struct site_families tensor_families = {
	"tensor_site_live_bytes",
	"Live bytes of the tensor sites holding the most (GPUMEMTRACE_METRICS_TOP of them), by site, as of the "
	"framework's latest hand-over (gpumemtrace_tensor_timestamp_seconds).",
	"tensor_site_live_tensors", "Live tensors of those sites.",
	"tensor_growth_suspect_bytes",
	"Bytes the tensor sites that keep growing gained since they began to grow, as of that hand-over.",
};

static int sites(FILE *f, const char *labels, const struct site_families *fam, const struct gmt__metrics_site *v,
		 size_t n, const struct gmt__metrics_site *sus, size_t nsus, size_t max)
{
	struct series *top, *growing;
	size_t ntop = 0, ngrowing = 0;
	char extra[GMT_METRICS_ESCAPED_MAX + 16];

	top = merge_sites(v, n, max, by_bytes, &ntop);
	growing = merge_sites(sus, nsus, max, by_growth, &ngrowing);
	if (top == NULL || growing == NULL) {
		free(top);
		free(growing);
		return -ENOMEM;
	}
	family(f, fam->live_bytes, "gauge", fam->live_bytes_help);
	for (size_t i = 0; i < ntop; i++) {
		snprintf(extra, sizeof(extra), "site=\"%s\"", top[i].label);
		sample(f, labels, fam->live_bytes, extra, top[i].bytes);
	}
	family(f, fam->live_count, "gauge", fam->live_count_help);
	for (size_t i = 0; i < ntop; i++) {
		snprintf(extra, sizeof(extra), "site=\"%s\"", top[i].label);
		sample(f, labels, fam->live_count, extra, top[i].count);
	}
	family(f, fam->growth, "gauge", fam->growth_help);
	for (size_t i = 0; i < ngrowing; i++) {
		snprintf(extra, sizeof(extra), "site=\"%s\"", growing[i].label);
		sample(f, labels, fam->growth, extra, growing[i].growth);
	}
	free(top);
	free(growing);
	return 0;
}

/* A time sample: seconds since the epoch, to the millisecond. */
static void seconds(FILE *f, const char *labels, const char *name, uint64_t ns)
{
	fprintf(f, "gpumemtrace_%s{%s} %" PRIu64 ".%03" PRIu64 "\n", name, labels, ns / 1000000000u,
		ns / 1000000u % 1000u);
}

/* The tensor level of the latest hand-over: its time, its tensors by
 * device, its sites. Families without samples before the first. */
static int tensors(FILE *f, const char *labels, const struct gmt__metrics *m)
{
	static const struct gmt__metrics_tensors none;
	const struct gmt__metrics_tensors *t = m->tensors != NULL ? m->tensors : &none;
	char dev[32];

	family(f, "tensor_timestamp_seconds", "gauge",
	       "When the framework (PyTorch) last handed its tensors over, at a snapshot, seconds since the epoch: "
	       "the tensor_* families are as of then.");
	if (m->tensors != NULL)
		seconds(f, labels, "tensor_timestamp_seconds", t->time_ns);
	/* NOTE: a family's samples follow its HELP and TYPE, together. */
	family(f, "tensor_live_bytes", "gauge", "Bytes of the framework's live tensors on the device, as of that hand-over.");
	for (int i = 0; i < t->ndev; i++) {
		snprintf(dev, sizeof(dev), "device=\"%d\"", t->dev[i].device);
		sample(f, labels, "tensor_live_bytes", dev, t->dev[i].bytes);
	}
	family(f, "tensor_live_tensors", "gauge", "The framework's live tensors on the device, as of that hand-over.");
	for (int i = 0; i < t->ndev; i++) {
		snprintf(dev, sizeof(dev), "device=\"%d\"", t->dev[i].device);
		sample(f, labels, "tensor_live_tensors", dev, t->dev[i].count);
	}
	return sites(f, labels, &tensor_families, t->sites, t->nsites, t->suspects, t->nsuspects, m->top);
}

int gmt__metrics_text(const struct gmt__metrics *m, char **text, size_t *len)
{
	char *labels = NULL, version[GMT_METRICS_ESCAPED_MAX];
	size_t labels_len = 0;
	FILE *f, *lf;
	int r = 0;

	*text = NULL;
	*len = 0;
	lf = open_memstream(&labels, &labels_len);
	if (lf == NULL)
		return -ENOMEM;
	process_labels(lf, &m->process);
	if (fclose(lf) != 0 || labels == NULL) {
		free(labels);
		return -ENOMEM;
	}
	f = open_memstream(text, len);
	if (f == NULL) {
		free(labels);
		return -ENOMEM;
	}
	family(f, "running", "gauge", "1 while the process runs; 0 in the last write, at its exit.");
	sample(f, labels, "running", "", m->running);
	family(f, "build_info", "gauge", "The tracer's version, as a label; always 1.");
	gmt__metrics_label(m->version, version);
	fprintf(f, "gpumemtrace_build_info{%s,version=\"%s\"} 1\n", labels, version);
	family(f, "metrics_timestamp_seconds", "gauge",
	       "When these numbers were taken, seconds since the epoch (a file not rewritten for several intervals "
	       "is a process's that is gone).");
	seconds(f, labels, "metrics_timestamp_seconds", m->time_ns);
	gauge(f, labels, "metrics_interval_seconds", "GPUMEMTRACE_METRICS_INTERVAL: seconds between writes.",
	      m->interval_s);
	devices(f, labels, m);
	counter(f, labels, "allocations_total", "Allocations the process made (every kind), since it started.",
		m->allocs);
	counter(f, labels, "frees_total", "Allocations the process freed, since it started.", m->frees);
	counter(f, labels, "oom_failures_total", "Allocations that failed with out-of-memory (every retry counts).",
		m->oom_failures);
	counter(f, labels, "oom_episodes_total",
		"Out-of-memory episodes: the failures of one need of memory, a caching allocator's retries included.",
		m->oom_episodes);
	counter(f, labels, "oom_recovered_total",
		"Out-of-memory episodes a framework's allocator recovered from (the program was never told).",
		m->oom_recovered);
	counter(f, labels, "snapshots_written_total", "Snapshot files written.", m->snapshots);
	counter(f, labels, "snapshot_errors_total", "Snapshots that could not be written.", m->snapshot_errors);
	counter(f, labels, "events_recorded_total", "Allocation events the hooks recorded.", m->events_recorded);
	counter(f, labels, "events_applied_total",
		"Of those, applied by the background thread to the live set (recorded - applied: in flight; none is "
		"ever dropped).",
		m->events_applied);
	gauge(f, labels, "tracer_memory_bytes",
	      "Memory the tracer holds for its own records (live table, stacks, history, rings).", m->tracer_bytes);
	r = sites(f, labels, &driver_families, m->sites, m->nsites, m->suspects, m->nsuspects, m->top);
	if (r == 0)
		r = tensors(f, labels, m);
	if (ferror(f))
		r = -ENOMEM;
	if (fclose(f) != 0)
		r = -ENOMEM;
	free(labels);
	if (r != 0) {
		free(*text);
		*text = NULL;
		*len = 0;
	}
	return r;
}
