/* Unit test of the metrics exposition (report/metrics.h) on made-up numbers:
 * the families and their samples, the process's labels (every one, empty
 * when not known), label values escaped, made valid UTF-8 and bounded,
 * sites equal once bounded made one series. With an argument, the exposition
 * of hostile names is also written to that file (test_metrics.py checks it
 * with promtool). */
#define _GNU_SOURCE
#include "check.h"
#include "report/metrics.h"

#include <stdarg.h>

#define MIB (1ull << 20)

/* Whether text has the line (a whole line). */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return true;
	}
	return false;
}

static bool has_linef(const char *text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool has_linef(const char *text, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	return has_line(text, line);
}

static void test_label(void)
{
	char buf[GMT_METRICS_ESCAPED_MAX], long_name[300];

	CHECK_STR(gmt__metrics_label("forward (model.py:12)", buf), "forward (model.py:12)");
	CHECK_STR(gmt__metrics_label("a\"b\\c\nd", buf), "a\\\"b\\\\c\\nd");
	CHECK_STR(gmt__metrics_label(NULL, buf), "");
	/* Control characters and invalid UTF-8 (a lone continuation byte, an
	 * overlong form, a surrogate) become '?'; valid UTF-8 stays. */
	CHECK_STR(gmt__metrics_label("t\tx\x7f\x80\xc0\xaf\xed\xa0\x80", buf), "t?x???????");
	CHECK_STR(gmt__metrics_label("caf\xc3\xa9 \xe2\x86\x90 \xf0\x9f\x98\x80", buf), "caf\xc3\xa9 \xe2\x86\x90 \xf0\x9f\x98\x80");
	/* Bounded at a whole character, "…" added. */
	memset(long_name, 'x', sizeof(long_name));
	memcpy(long_name + GMT_METRICS_LABEL_MAX - 1, "\xc3\xa9", 2);
	long_name[sizeof(long_name) - 1] = '\0';
	gmt__metrics_label(long_name, buf);
	CHECK_U64(strlen(buf), GMT_METRICS_LABEL_MAX - 1 + 3);
	CHECK(strcmp(buf + GMT_METRICS_LABEL_MAX - 1, "\xe2\x80\xa6") == 0);
	/* Escapes count the value's bytes, not the written ones. */
	memset(long_name, '"', sizeof(long_name));
	long_name[sizeof(long_name) - 1] = '\0';
	gmt__metrics_label(long_name, buf);
	CHECK_U64(strlen(buf), 2 * GMT_METRICS_LABEL_MAX + 3);
}

static struct gmt__metrics sample(struct gmt__metrics_device *dev, struct gmt__metrics_site *sites,
				  struct gmt__metrics_site *suspects)
{
	struct gmt__metrics m = {
		.process = { .pid = 4242, .host = "node-7", .command = "python3", .job = NULL,
			     .rank = 3, .local_rank = -1, .world_size = 512 },
		.version = "0.4.0", .time_ns = 1795698745222000000ull, .interval_s = 10, .running = true,
		.devices = dev, .ndevices = 2, .allocs = 100, .frees = 90, .oom_failures = 3, .oom_episodes = 1,
		.events_recorded = 190, .events_applied = 190, .tracer_bytes = 4 * MIB,
		.sites = sites, .nsites = 3, .suspects = suspects, .nsuspects = 1,
	};

	dev[0] = (struct gmt__metrics_device){ .device = -1, .peak_bytes = 1 * MIB };
	dev[0].bytes[GMT_KIND_HOST] = 1 * MIB;
	dev[0].count[GMT_KIND_HOST] = 1;
	dev[1] = (struct gmt__metrics_device){ .device = 0, .peak_bytes = 96 * MIB };
	dev[1].bytes[GMT_KIND_DEVICE] = 64 * MIB;
	dev[1].count[GMT_KIND_DEVICE] = 8;
	dev[1].bytes[GMT_KIND_ASYNC] = 2 * MIB;
	dev[1].count[GMT_KIND_ASYNC] = 2;
	return m;
}

static void test_text(void)
{
	struct gmt__metrics_device dev[2];
	struct gmt__metrics_site sites[3] = {
		{ "Model.forward (model.py:12)", 48 * MIB, 6, 0 },
		{ "step (train.py:40)", 8 * MIB, 1, 0 },
		{ "step (train.py:40)", 8 * MIB, 1, 0 }, /* another stack of that site */
	};
	struct gmt__metrics_site suspects[1] = { { "cache.append (train.py:51)", 8 * MIB, 4, 6 * MIB } };
	struct gmt__metrics m = sample(dev, sites, suspects);
	const char *lb = "pid=\"4242\",host=\"node-7\",job_id=\"\",rank=\"3\",local_rank=\"\",world_size=\"512\","
			 "command=\"python3\"";
	char line[512], *text = NULL;
	size_t len = 0;

	CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
	if (text == NULL)
		return;
	CHECK_U64(strlen(text), len);
	CHECK(has_line(text, "# TYPE gpumemtrace_live_bytes gauge"));
	CHECK(has_line(text, "# TYPE gpumemtrace_allocations_total counter"));
	snprintf(line, sizeof(line), "gpumemtrace_live_bytes{%s,device=\"0\",kind=\"device\"} %llu", lb, 64 * MIB);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_live_allocations{%s,device=\"0\",kind=\"async\"} 2", lb);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_live_bytes{%s,device=\"host\",kind=\"host\"} %llu", lb, 1 * MIB);
	CHECK(has_line(text, line));
	/* Kinds with nothing live have no sample. */
	CHECK(strstr(text, "kind=\"managed\"") == NULL);
	snprintf(line, sizeof(line), "gpumemtrace_peak_bytes{%s,device=\"0\"} %llu", lb, 96 * MIB);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_oom_failures_total{%s} 3", lb);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_running{%s} 1", lb);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_metrics_timestamp_seconds{%s} 1795698745.222", lb);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_build_info{%s,version=\"0.4.0\"} 1", lb);
	CHECK(has_line(text, line));
	/* Two stacks of one site: one series, their bytes added. */
	snprintf(line, sizeof(line), "gpumemtrace_site_live_bytes{%s,site=\"step (train.py:40)\"} %llu", lb, 16 * MIB);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_site_live_allocations{%s,site=\"step (train.py:40)\"} 2", lb);
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "gpumemtrace_growth_suspect_bytes{%s,site=\"cache.append (train.py:51)\"} %llu", lb,
		 6 * MIB);
	CHECK(has_line(text, line));
	free(text);
}

/* Every label known, each its own value, as torchrun and Slurm set them:
 * rank 11 of 16 is the fourth process (LOCAL_RANK 3) of the second machine
 * of eight GPUs; rank 0 is the first of the first (0 is a rank, not none). */
static void test_labels_known(void)
{
	static const struct {
		int64_t rank, local_rank;
		const char *labels;
	} cases[] = {
		{ 11, 3, "rank=\"11\",local_rank=\"3\"" },
		{ 0, 0, "rank=\"0\",local_rank=\"0\"" },
	};
	struct gmt__metrics_device dev[2];
	struct gmt__metrics_site sites[3] = {
		{ "Model.forward (model.py:12)", 48 * MIB, 6, 0 },
		{ "step (train.py:40)", 8 * MIB, 1, 0 },
		{ "step (train.py:40)", 8 * MIB, 1, 0 },
	};
	struct gmt__metrics_site suspects[1] = { { "cache.append (train.py:51)", 8 * MIB, 4, 6 * MIB } };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gmt__metrics m = sample(dev, sites, suspects);
		char *text = NULL;
		size_t len = 0;

		m.process.rank = cases[i].rank;
		m.process.local_rank = cases[i].local_rank;
		m.process.world_size = 16;
		m.process.job = "77031";
		CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
		if (text == NULL)
			continue;
		CHECK(has_linef(text, "gpumemtrace_running{pid=\"4242\",host=\"node-7\",job_id=\"77031\",%s,"
			       "world_size=\"16\",command=\"python3\"} 1", cases[i].labels));
		free(text);
	}
}

/* More stacks given than sites written: those of one label added up first,
 * then the `top` largest by bytes (suspects by growth), largest first. */
static void test_top(void)
{
	struct gmt__metrics_device dev[2];
	struct gmt__metrics_site sites[5] = {
		{ "a (x.py:1)", 30 * MIB, 1, 0 }, { "b (x.py:2)", 20 * MIB, 1, 0 }, { "c (x.py:3)", 12 * MIB, 1, 0 },
		{ "c (x.py:3)", 12 * MIB, 1, 0 }, /* c: 24 MiB in all, above b */
		{ "d (x.py:4)", 10 * MIB, 1, 0 },
	};
	struct gmt__metrics_site suspects[3] = {
		{ "g (x.py:7)", 1, 1, 1 * MIB }, { "h (x.py:8)", 1, 1, 3 * MIB }, { "i (x.py:9)", 1, 1, 2 * MIB },
	};
	struct gmt__metrics m = sample(dev, sites, suspects);
	char *text = NULL, *a, *c;
	size_t len = 0;

	m.nsites = 5;
	m.nsuspects = 3;
	m.top = 2;
	CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
	if (text == NULL)
		return;
	a = strstr(text, "site_live_bytes{pid");
	c = a != NULL ? strstr(a, "site=\"c (x.py:3)\"} 25165824") : NULL;
	CHECK(a != NULL && strstr(a, "site=\"a (x.py:1)\"} 31457280") != NULL && c != NULL);
	CHECK(strstr(text, "site=\"b (x.py:2)\"") == NULL && strstr(text, "site=\"d (x.py:4)\"") == NULL);
	CHECK(strstr(text, "site=\"h (x.py:8)\"} 3145728") != NULL && strstr(text, "site=\"i (x.py:9)\"} 2097152") != NULL);
	CHECK(strstr(text, "site=\"g (x.py:7)\"") == NULL);
	/* Largest first. */
	CHECK(c != NULL && strstr(a, "site=\"a (x.py:1)\"") < c);
	free(text);
}

/* Names a hostile program could give its functions and files, and a host. */
static void test_hostile(const char *out)
{
	struct gmt__metrics_device dev[2];
	char long_site[400];
	struct gmt__metrics_site sites[3] = {
		{ "evil\"} 1\ngpumemtrace_running{pid=\"1\"} 0 #", 1, 1, 0 },
		{ long_site, 2, 1, 0 },
		{ "\xff\xfe\\\\", 3, 1, 0 },
	};
	struct gmt__metrics m = sample(dev, sites, sites);
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	memset(long_site, 'y', sizeof(long_site));
	long_site[sizeof(long_site) - 1] = '\0';
	m.process.host = "h\"o\\s\nt";
	m.process.command = "\x1b[31mred";
	m.nsuspects = 3;
	CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
	if (text == NULL)
		return;
	/* The injected line stays inside its label value. */
	CHECK(strstr(text, "\ngpumemtrace_running{pid=\"1\"}") == NULL);
	CHECK(strstr(text, "host=\"h\\\"o\\\\s\\nt\"") != NULL);
	CHECK(strstr(text, "command=\"?[31mred\"") != NULL);
	if (out != NULL) {
		f = fopen(out, "w");
		CHECK(f != NULL);
		if (f != NULL) {
			fputs(text, f);
			fclose(f);
		}
	}
	free(text);
}

/* The tensor level: absent before the first hand-over (the families, no
 * samples), then the latest hand-over's numbers with its time. */
/* has_line of the line the format makes. */

static void test_tensors(void)
{
	struct gmt__metrics_device dev[2];
	struct gmt__metrics_site sites[3] = { { "Model.forward (model.py:12)", 48 * MIB, 6, 0 } };
	struct gmt__metrics_site suspects[1] = { { "cache.append (train.py:51)", 8 * MIB, 4, 6 * MIB } };
	struct gmt__metrics_site tsites[3] = {
		{ "train_step (loss.py:16)", 24 * MIB, 3, 0 },
		{ "<module> (loss.py:4)", 256 * MIB, 1, 0 },
		{ "train_step (loss.py:16)", 8 * MIB, 1, 0 }, /* another stack of that site */
	};
	struct gmt__metrics_site tsus[1] = { { "train_step (loss.py:16)", 32 * MIB, 4, 24 * MIB } };
	struct gmt__metrics_tensors t = {
		.time_ns = 1795698700500000000ull, .ndev = 2, .sites = tsites, .nsites = 3, .suspects = tsus,
		.nsuspects = 1,
	};
	struct gmt__metrics m = sample(dev, sites, suspects);
	const char *lb = "pid=\"4242\",host=\"node-7\",job_id=\"\",rank=\"3\",local_rank=\"\",world_size=\"512\","
			 "command=\"python3\"";
	char *text = NULL;
	size_t len = 0;

	m.nsites = 1;
	CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
	CHECK(text != NULL && has_line(text, "# TYPE gpumemtrace_tensor_site_live_bytes gauge") &&
	      has_line(text, "# TYPE gpumemtrace_tensor_timestamp_seconds gauge") &&
	      strstr(text, "\ngpumemtrace_tensor_") == NULL);
	free(text);

	t.dev[0] = (struct gmt__metrics_tensor_device){ 0, 288 * MIB, 5 };
	t.dev[1] = (struct gmt__metrics_tensor_device){ 1, 0, 0 };
	m.tensors = &t;
	CHECK_INT(gmt__metrics_text(&m, &text, &len), 0);
	if (text == NULL)
		return;
	CHECK(has_linef(text, "gpumemtrace_tensor_timestamp_seconds{%s} 1795698700.500", lb));
	CHECK(has_linef(text, "gpumemtrace_tensor_live_bytes{%s,device=\"0\"} %llu", lb, 288 * MIB));
	CHECK(has_linef(text, "gpumemtrace_tensor_live_tensors{%s,device=\"1\"} 0", lb));
	CHECK(has_linef(text, "gpumemtrace_tensor_site_live_bytes{%s,site=\"train_step (loss.py:16)\"} %llu", lb,
		 32 * MIB));
	CHECK(has_linef(text, "gpumemtrace_tensor_site_live_tensors{%s,site=\"train_step (loss.py:16)\"} 4", lb));
	CHECK(has_linef(text, "gpumemtrace_tensor_site_live_bytes{%s,site=\"<module> (loss.py:4)\"} %llu", lb,
		 256 * MIB));
	CHECK(has_linef(text, "gpumemtrace_tensor_growth_suspect_bytes{%s,site=\"train_step (loss.py:16)\"} %llu",
		 lb, 24 * MIB));
	/* The driver's level beside it, unchanged. */
	CHECK(has_linef(text, "gpumemtrace_site_live_bytes{%s,site=\"Model.forward (model.py:12)\"} %llu", lb,
		 48 * MIB));
	free(text);
}

int main(int argc, char **argv)
{
	test_label();
	test_text();
	test_labels_known();
	test_top();
	test_tensors();
	test_hostile(argc > 1 ? argv[1] : NULL);
	printf("metrics: %d failed\n", check_failed);
	return check_failed != 0;
}
