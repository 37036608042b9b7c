/* What `gpumemtrace check` says about a run (check.h): the report on stderr,
 * GitHub Actions annotations on stdout, and JUnit XML. Each escapes the names
 * taken from snapshots (functions and files of the traced program) for where
 * it writes them. */
#define _GNU_SOURCE
#include "cli/check.h"

#include "util/log.h"
#include "util/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX "gpumemtrace: check: "

/* Counted leak sites listed on stderr and in the JUnit failure; sites that
 * grew most listed for --max-growth. */
#define TEXT_SITES 10
#define JUNIT_SITES 100
#define GROWTH_SITES 5

/* "1234567 bytes (1.18 MiB)", or "123 bytes", into buf. */
static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
	char h[32];

	if (n < 1024)
		snprintf(buf, len, "%" PRIu64 " bytes", n);
	else
		snprintf(buf, len, "%" PRIu64 " bytes (%s)", n, gmt__human_bytes(h, sizeof(h), n));
	return buf;
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

/* A name from a snapshot for a one-line message: printable ASCII and UTF-8
 * as they are (gmt__utf8_printable), any other byte '?', and a very long one
 * cut, never inside a character. */
static const char *one_line(const char *s, char *buf, size_t len)
{
	size_t i = 0, o = 0;

	while (s[i] != '\0') {
		unsigned char c = (unsigned char)s[i];
		size_t n = c >= 0x20 && c < 0x7f ? 1 : c >= 0x80 ? gmt__utf8_printable(s + i) : 0;

		if (o + (n > 0 ? n : 1) + 4 > len) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (n > 0)
			memcpy(buf + o, s + i, n);
		else
			buf[o] = '?';
		o += n > 0 ? n : 1;
		i += n > 0 ? n : 1;
	}
	buf[o] = '\0';
	return buf;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char text[10240], line[10240];
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (len < 0)
		return;
	/* one line whatever a path or a suppression line holds (launcher.c's vsay) */
	gmt__log_escape(line, sizeof(line), text, (size_t)len >= sizeof(text));
	fprintf(stderr, PREFIX "%s\n", line);
}

static const char *classes_text(unsigned classes, char *buf, size_t len)
{
	size_t n = 0;

	snprintf(buf, len, "none");
	for (unsigned i = 0; i < GMT_LEAK_CLASS_COUNT; i++) {
		if (classes & (1u << i))
			n += (size_t)snprintf(buf + n, len > n ? len - n : 0, "%s%s", n ? "," : "",
					      gmt__leak_class_names[i]);
	}
	return buf;
}

/* "+123 bytes" or "-123 bytes" */
static const char *signed_bytes(int64_t d, char *buf, size_t len)
{
	char h[64];
	uint64_t m = d < 0 ? (uint64_t)0 - (uint64_t)d : (uint64_t)d;

	snprintf(buf, len, "%c%s", d < 0 ? '-' : '+', human_bytes(m, h, sizeof(h)));
	return buf;
}

static const char *growth_limit_text(const struct cli_verdict *v, char *buf, size_t len)
{
	char h[64];

	if (v->limits->growth_is_pct)
		snprintf(buf, len, "%s (--max-growth %" PRIu64 "%% of the baseline's peak)",
			 human_bytes(v->growth_limit, h, sizeof(h)), v->limits->max_growth);
	else
		snprintf(buf, len, "%s (--max-growth)", human_bytes(v->growth_limit, h, sizeof(h)));
	return buf;
}

struct growth_site {
	const char *label;
	uint64_t before, now;
	int64_t delta;
};

static int compare_growth(const void *a, const void *b)
{
	const struct growth_site *x = a, *y = b;

	if (x->delta != y->delta)
		return x->delta < y->delta ? 1 : -1;
	return strcmp(x->label, y->label);
}

/* The sites of the peak process that grew most against the baseline, matched
 * by label; *n of them into a malloc'd array (NULL when none). */
static struct growth_site *grown_sites(const struct cli_verdict *v, size_t *n)
{
	const struct cli_snapshot *now = v->peak_snap, *base = v->baseline;
	struct growth_site *g;
	size_t i, j;

	*n = 0;
	if (now == NULL || base == NULL || now->npeaks == 0)
		return NULL;
	g = calloc(now->npeaks, sizeof(*g));
	if (g == NULL)
		return NULL;
	for (i = 0; i < now->npeaks; i++) {
		uint64_t before = 0;

		for (j = 0; j < base->npeaks; j++) {
			if (strcmp(base->peaks[j].label, now->peaks[i].label) == 0) {
				before = base->peaks[j].peak_bytes;
				break;
			}
		}
		if (now->peaks[i].peak_bytes <= before)
			continue;
		g[*n] = (struct growth_site){ now->peaks[i].label, before, now->peaks[i].peak_bytes,
					      (int64_t)(now->peaks[i].peak_bytes - before) };
		(*n)++;
	}
	qsort(g, *n, sizeof(*g), compare_growth);
	return g;
}

const char *cli_leak_limits_text(const struct cli_limits *l, char *out, size_t len)
{
	if (l->has_max_leak_bytes && l->has_max_leaks)
		snprintf(out, len, "%" PRIu64 " bytes (--max-leak-bytes), %" PRIu64 " allocations (--max-leaks)",
			 l->max_leak_bytes, l->max_leaks);
	else if (l->has_max_leak_bytes)
		snprintf(out, len, "%" PRIu64 " bytes (--max-leak-bytes; no limit on allocations)",
			 l->max_leak_bytes);
	else if (l->has_max_leaks)
		snprintf(out, len, "%" PRIu64 " allocations (--max-leaks; no limit on bytes)", l->max_leaks);
	else
		snprintf(out, len, "none given (--max-leak-bytes, --max-leaks): any counted leak fails");
	return out;
}

/* Whether a counted site of snapshot s is of class leaked. */
static bool counts_leaked(const struct cli_snapshot *s)
{
	for (size_t i = 0; i < s->nleaks; i++) {
		if (s->leaks[i].counted && s->leaks[i].cls == GMT_CLASS_LEAKED)
			return true;
	}
	return false;
}

static void text_leaks(const struct cli_verdict *v)
{
	char h[64], label[256], lim[160];
	size_t i;

	if (v->leaks_failed)
		say("FAILED: counted leaks: %s in %" PRIu64 " allocation%s; limits: %s",
		    human_bytes(v->leak_bytes, h, sizeof(h)), v->leak_count, plural(v->leak_count),
		    cli_leak_limits_text(v->limits, lim, sizeof(lim)));
	for (i = 0; i < v->ncounted && i < TEXT_SITES; i++) {
		const struct cli_leak_site *s = v->counted[i];

		say("leak: %s in %" PRIu64 " %s%s (%s) at %s, pid %" PRId64, human_bytes(s->bytes, h, sizeof(h)),
		    s->count, s->cls == CLI_CLASS_GROWING ? "tensor" : "allocation", plural(s->count),
		    cli_class_name(s->cls), one_line(s->place.label, label, sizeof(label)), s->pid);
	}
	if (v->ncounted > TEXT_SITES)
		say("... and %zu more counted leak site%s", v->ncounted - TEXT_SITES,
		    plural(v->ncounted - TEXT_SITES));
}

static void text_peaks(const struct cli_verdict *v)
{
	const struct cli_limits *l = v->limits;
	char h[64], m[64], d[80], lim[160], label[256];
	struct growth_site *g;
	size_t i, n;

	for (i = 0; l->has_max_peak && i < v->nsnaps; i++) {
		if (v->snaps[i].peak_bytes > l->max_peak)
			say("FAILED: peak: pid %" PRId64 " peaked at %s%s; limit %s (--max-peak)",
			    v->snaps[i].pid, human_bytes(v->snaps[i].peak_bytes, h, sizeof(h)),
			    v->snaps[i].tensors ? " of tensors" : "", human_bytes(l->max_peak, m, sizeof(m)));
	}
	if (v->baseline == NULL)
		return;
	say("%sgrowth: peak %s (pid %" PRId64 ") against the baseline's %s (%s): %s; limit %s",
	    v->growth_failed ? "FAILED: " : "", human_bytes(v->peak, h, sizeof(h)),
	    v->peak_snap->pid, human_bytes(v->baseline->peak_bytes, m, sizeof(m)),
	    one_line(v->baseline->path, label, sizeof(label)), signed_bytes(v->growth, d, sizeof(d)),
	    growth_limit_text(v, lim, sizeof(lim)));
	if (!v->growth_failed)
		return;
	g = grown_sites(v, &n);
	for (i = 0; i < n && i < GROWTH_SITES; i++)
		say("grew: %s at %s (peak %" PRIu64 " bytes, the baseline's %" PRIu64 ")",
		    signed_bytes(g[i].delta, d, sizeof(d)), one_line(g[i].label, label, sizeof(label)),
		    g[i].now, g[i].before);
	free(g);
}

/* --level tensors: how many processes were judged at the tensor level,
 * "" without the option. */
static const char *level_text(const struct cli_verdict *v, char *buf, size_t len)
{
	size_t i, n = 0;

	buf[0] = '\0';
	if (!v->limits->tensors)
		return buf;
	for (i = 0; i < v->nsnaps; i++)
		n += v->snaps[i].tensors;
	snprintf(buf, len, "; level tensors in %zu of %zu process%s%s", n, v->nsnaps, v->nsnaps == 1 ? "" : "es",
		 n < v->nsnaps ? " (the others': their driver allocations)" : "");
	return buf;
}

void cli_report_text(const struct cli_verdict *v)
{
	const struct cli_limits *l = v->limits;
	char h[64], p[64], c[64], lim[160], d[80], lv[128], dir[PATH_MAX], line[PATH_MAX + 1024];
	size_t i;

	if (v->status == 0) {
		char peak[200] = "", growth[300] = "", leaklim[160];

		if (l->has_max_peak)
			snprintf(peak, sizeof(peak), " (limit %" PRIu64 ")", l->max_peak);
		if (v->baseline != NULL)
			snprintf(growth, sizeof(growth), ", growth %s against the baseline, limit %s",
				 signed_bytes(v->growth, d, sizeof(d)), growth_limit_text(v, lim, sizeof(lim)));
		say("passed: %" PRIu64 " counted leak%s of %" PRIu64 " bytes (limits: %s; classes %s), peak %"
		    PRIu64 " bytes%s%s; %zu exit snapshot%s%s%s%s",
		    v->leak_count, plural(v->leak_count), v->leak_bytes,
		    cli_leak_limits_text(l, leaklim, sizeof(leaklim)), classes_text(l->classes, c, sizeof(c)),
		    v->peak, peak, growth,
		    v->nsnaps, plural(v->nsnaps), level_text(v, lv, sizeof(lv)), v->dir_kept ? " in " : "",
		    v->dir_kept ? one_line(v->dir, dir, sizeof(dir)) : "");
		return;
	}
	if (v->command_signal != 0)
		say("the command was killed by signal %d (%s): the status of the check is %d",
		    v->command_signal, strsignal(v->command_signal), v->command_status);
	else if (v->command_status != 0)
		say("the command failed with exit status %d: that is the status of the check",
		    v->command_status);
	if (v->error != NULL)
		say("%s", one_line(v->error, line, sizeof(line)));
	if (v->nsnaps > 0) {
		say("%zu exit snapshot%s; counted leaks (classes %s): %s in %" PRIu64
		    " allocation%s; suppressed: %" PRIu64 " bytes in %" PRIu64
		    " allocation%s; peak %s (pid %" PRId64 ")%s",
		    v->nsnaps, plural(v->nsnaps), classes_text(l->classes, c, sizeof(c)),
		    human_bytes(v->leak_bytes, h, sizeof(h)), v->leak_count, plural(v->leak_count),
		    v->suppressed_bytes, v->suppressed_count, plural(v->suppressed_count),
		    human_bytes(v->peak, p, sizeof(p)), v->peak_snap->pid, level_text(v, lv, sizeof(lv)));
		for (i = 0; i < v->nsnaps; i++) {
			if (!v->snaps[i].scan_done && v->snaps[i].nleaks > 0)
				say("pid %" PRId64 ": the scan for references did not finish (%s): what it "
				    "did not reach is classed leaked",
				    v->snaps[i].pid,
				    v->snaps[i].scan_why ? one_line(v->snaps[i].scan_why, lim, sizeof(lim))
							 : "no reason given");
			if (v->snaps[i].scan_unseen != NULL && counts_leaked(&v->snaps[i]))
				say("pid %" PRId64 ": leaked means no host memory holds its address as a pointer; "
				    "%s",
				    v->snaps[i].pid, one_line(v->snaps[i].scan_unseen, lim, sizeof(lim)));
		}
		text_leaks(v);
		text_peaks(v);
	}
	if (v->dir_kept)
		say("the snapshots are in %s", one_line(v->dir, dir, sizeof(dir)));
}

/* GitHub's workflow commands: data escapes %, CR and LF; a property value
 * also : and , (the separators of the command's properties). */
static void put_github(FILE *f, const char *s, bool property)
{
	for (; *s != '\0'; s++) {
		if (*s == '%')
			fputs("%25", f);
		else if (*s == '\r')
			fputs("%0D", f);
		else if (*s == '\n')
			fputs("%0A", f);
		else if (property && *s == ':')
			fputs("%3A", f);
		else if (property && *s == ',')
			fputs("%2C", f);
		else
			fputc(*s, f);
	}
}

/* Whether workspace/rel is a file. */
static bool in_workspace(const char *workspace, size_t n, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)n, workspace, rel) >= sizeof(path))
		return false;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* file relative to the workspace, for an annotation: an absolute path under
 * it (as given, or both with symbolic links resolved), or a relative one
 * found there. NOTE: compilers record the names they were given, which for a
 * build directory beside the sources are relative to it ("../src/x.c"): the
 * leading components are dropped one by one until the rest names a file of
 * the workspace. Anything else as it is. */
static const char *workspace_relative(const char *file, const char *workspace, char *buf)
{
	char ws[PATH_MAX], real[PATH_MAX];
	const char *rest;
	size_t n;

	if (workspace == NULL || workspace[0] == '\0')
		return file;
	n = strlen(workspace);
	while (n > 1 && workspace[n - 1] == '/')
		n--;
	if (file[0] != '/') {
		for (rest = file; rest != NULL && rest[0] != '\0'; rest = strchr(rest, '/')) {
			rest += rest[0] == '/';
			if (strncmp(rest, "./", 2) != 0 && strncmp(rest, "../", 3) != 0 &&
			    in_workspace(workspace, n, rest))
				return rest;
		}
		return file;
	}
	if (strncmp(file, workspace, n) == 0 && file[n] == '/')
		return file + n + 1;
	if (realpath(workspace, ws) == NULL || realpath(file, real) == NULL)
		return file;
	n = strlen(ws);
	if (strncmp(real, ws, n) != 0 || real[n] != '/')
		return file;
	snprintf(buf, PATH_MAX, "%s", real + n + 1);
	return buf;
}

void cli_report_github(const struct cli_verdict *v, const char *workspace, FILE *f)
{
	/* NOTE: leaks within the limits do not fail the job: warnings, so that
	 * a green job carries no red annotation. */
	const char *command = v->leaks_failed ? "error" : "warning";
	char buf[PATH_MAX], *msg;
	size_t i;

	for (i = 0; i < v->ncounted; i++) {
		const struct cli_leak_site *s = v->counted[i];

		if (asprintf(&msg,
			     "%" PRIu64 " bytes in %" PRIu64 " allocation%s not freed at exit (%s), "
			     "allocated at %s, pid %" PRId64,
			     s->bytes, s->count, plural(s->count), cli_class_name(s->cls), s->place.label,
			     s->pid) < 0)
			return;
		fprintf(f, "::%s ", command);
		if (s->place.file != NULL) {
			fputs("file=", f);
			put_github(f, workspace_relative(s->place.file, workspace, buf), true);
			fprintf(f, ",line=%" PRId64 ",", s->place.line);
		}
		fputs("title=gpumemtrace leak::", f);
		put_github(f, msg, false);
		fputc('\n', f);
		free(msg);
	}
}

/* XML 1.0 text or attribute value: the five entities; in attributes, the
 * blanks as character references (an attribute's newlines are otherwise
 * read as spaces); control characters XML 1.0 cannot carry become '?'. */
static void put_xml(FILE *f, const char *s, bool attribute)
{
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '&')
			fputs("&amp;", f);
		else if (c == '<')
			fputs("&lt;", f);
		else if (c == '>')
			fputs("&gt;", f);
		else if (c == '"')
			fputs("&quot;", f);
		else if (c == '\'')
			fputs("&apos;", f);
		else if (attribute && (c == '\n' || c == '\r' || c == '\t'))
			fprintf(f, "&#%d;", c);
		else if (c < 0x20 && c != '\n' && c != '\t' && c != '\r')
			fputc('?', f);
		else
			fputc(c, f);
	}
}

static void junit_case(FILE *f, const char *name, const char *tag, const char *type,
		       const char *message, const char *body)
{
	fprintf(f, "  <testcase classname=\"gpumemtrace\" name=\"%s\"", name);
	if (tag == NULL) {
		fputs("/>\n", f);
		return;
	}
	fprintf(f, ">\n    <%s type=\"%s\" message=\"", tag, type);
	put_xml(f, message, true);
	fputs("\">", f);
	if (body != NULL)
		put_xml(f, body, false);
	fprintf(f, "</%s>\n  </testcase>\n", tag);
}

/* The text of the leaks testcase's failure: a line per counted site. */
static char *leak_lines(const struct cli_verdict *v)
{
	char *buf = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&buf, &len);

	if (f == NULL)
		return NULL;
	for (i = 0; i < v->ncounted && i < JUNIT_SITES; i++) {
		const struct cli_leak_site *s = v->counted[i];

		fprintf(f, "%" PRIu64 " bytes in %" PRIu64 " allocation%s (%s) at %s, pid %" PRId64 "\n",
			s->bytes, s->count, plural(s->count), cli_class_name(s->cls), s->place.label,
			s->pid);
	}
	if (v->ncounted > JUNIT_SITES)
		fprintf(f, "... and %zu more counted leak sites\n", v->ncounted - JUNIT_SITES);
	if (v->dir_kept)
		fprintf(f, "snapshots: %s\n", v->dir);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static int write_junit(const struct cli_verdict *v, FILE *f)
{
	const struct cli_limits *l = v->limits;
	bool command_failed = v->command_status != 0;
	int tests = 1 + l->has_max_peak + (v->baseline != NULL) + command_failed;
	int failures = command_failed, errors = 0;
	char message[1024], lim[160], d[80], *body;
	const char *error = v->error;
	size_t i;

	if (error != NULL)
		errors = tests - command_failed;
	else
		failures += v->leaks_failed + v->peak_failed + v->growth_failed;
	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<testsuite name=\"gpumemtrace\" tests=\"%d\" failures=\"%d\" errors=\"%d\" "
		"skipped=\"0\">\n",
		tests, failures, errors);
	if (command_failed) {
		if (v->command_signal != 0)
			snprintf(message, sizeof(message), "the command was killed by signal %d (%s)",
				 v->command_signal, strsignal(v->command_signal));
		else
			snprintf(message, sizeof(message), "the command failed with exit status %d",
				 v->command_status);
		junit_case(f, "command", "failure", "command", message, NULL);
	}

	if (error != NULL) {
		junit_case(f, "leaks", "error", "snapshot", error, NULL);
		if (l->has_max_peak)
			junit_case(f, "peak", "error", "snapshot", error, NULL);
		if (v->baseline != NULL)
			junit_case(f, "growth", "error", "snapshot", error, NULL);
		goto out;
	}

	if (v->leaks_failed) {
		char leaklim[160];

		snprintf(message, sizeof(message),
			 "counted leaks: %" PRIu64 " bytes in %" PRIu64 " allocation%s; limits: %s",
			 v->leak_bytes, v->leak_count, plural(v->leak_count),
			 cli_leak_limits_text(l, leaklim, sizeof(leaklim)));
		body = leak_lines(v);
		junit_case(f, "leaks", "failure", "leaks", message, body);
		free(body);
	} else {
		junit_case(f, "leaks", NULL, NULL, NULL, NULL);
	}

	if (v->peak_failed) {
		size_t n = 0;

		message[0] = '\0';
		for (i = 0; i < v->nsnaps; i++) {
			if (v->snaps[i].peak_bytes > l->max_peak && n < sizeof(message))
				n += (size_t)snprintf(message + n, sizeof(message) - n,
						      "%spid %" PRId64 " peaked at %" PRIu64 " bytes",
						      n ? "; " : "", v->snaps[i].pid, v->snaps[i].peak_bytes);
		}
		if (n < sizeof(message))
			snprintf(message + n, sizeof(message) - n, "; limit %" PRIu64 " bytes (--max-peak)",
				 l->max_peak);
		junit_case(f, "peak", "failure", "peak", message, NULL);
	} else if (l->has_max_peak) {
		junit_case(f, "peak", NULL, NULL, NULL, NULL);
	}

	if (v->growth_failed) {
		snprintf(message, sizeof(message),
			 "peak %" PRIu64 " bytes against the baseline's %" PRIu64 " bytes: %s; limit %s",
			 v->peak, v->baseline->peak_bytes, signed_bytes(v->growth, d, sizeof(d)),
			 growth_limit_text(v, lim, sizeof(lim)));
		junit_case(f, "growth", "failure", "growth", message, NULL);
	} else if (v->baseline != NULL) {
		junit_case(f, "growth", NULL, NULL, NULL, NULL);
	}
out:
	fputs("</testsuite>\n", f);
	return 0;
}

/* The JUnit XML into a stream that is not a regular file: standard output
 * ("-"), or the FIFO or character device at path, written into and never
 * replaced (a FIFO nobody reads is refused, never waited on). */
static int junit_into(const struct cli_verdict *v, const char *path)
{
	FILE *f = stdout;
	int fd = -1, r = 0;

	if (strcmp(path, "-") != 0) {
		fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd < 0)
			return errno == ENXIO ? -EPIPE : -errno;
		if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0 || (f = fdopen(fd, "w")) == NULL) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	write_junit(v, f);
	if (fflush(f) != 0 || ferror(f))
		r = errno ? -errno : -EIO;
	if (f != stdout && fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

int cli_report_junit(const struct cli_verdict *v, const char *path, char *err, size_t errlen)
{
	char *tmp = NULL;
	mode_t mask;
	FILE *f = NULL;
	struct stat st;
	int fd, r = 0;

	if (strcmp(path, "-") == 0 || (stat(path, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))) {
		r = junit_into(v, path);
		if (r < 0)
			snprintf(err, errlen, "--junit: cannot write %s: %s", path,
				 r == -EPIPE ? "nobody reads it (a FIFO)" : strerror(-r));
		return r;
	}
	if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
		tmp = NULL;
		r = -ENOMEM;
		goto out;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		r = -errno;
		free(tmp);
		tmp = NULL;
		goto out;
	}
	/* mkstemp makes it 0600; a report is as readable as any new file */
	mask = umask(0);
	umask(mask);
	if (fchmod(fd, 0666 & ~mask) != 0 || (f = fdopen(fd, "w")) == NULL) {
		r = -errno;
		close(fd);
		goto out;
	}
	write_junit(v, f);
	if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0)
		r = errno ? -errno : -EIO;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) != 0)
		r = -errno;
out:
	if (r < 0) {
		snprintf(err, errlen, "--junit: cannot write %s: %s", path, strerror(-r));
		if (tmp != NULL)
			unlink(tmp);
	}
	free(tmp);
	return r;
}
