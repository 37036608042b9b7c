/* Configuration: the GPUMEMTRACE_* table of options.h turned into descriptors
 * that drive the parser, the warnings about invalid values and unknown names,
 * and the verbose listing. See options.h. */
#define _GNU_SOURCE
#include "tracer/options.h"

#include "util/log.h"
#include "util/parse.h"
#include "util/xlist.h"
#include "record/stacks.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#define GMT_OPTION_PREFIX "GPUMEMTRACE_"

enum opt_type { OPT_BOOL, OPT_INT, OPT_SIZE, OPT_STRING, OPT_TRIGGERS, OPT_CLASSES, OPT_CHOICE };

/* What an INT or SIZE option accepts. Every INT and SIZE option of the table
 * needs one, named range_<field>: a missing one does not compile. */
struct opt_range {
	uint64_t min, max;
	bool pow2;
	const char *expected;
};

static const struct opt_range range_stack_depth = {
	0, GMT_STACK_MAX_DEPTH, false, "an integer from 0 to 256",
};
static const struct opt_range range_peak_step = {
	1, 1000, false, "an integer from 1 to 1000 (percent)",
};
static const struct opt_range range_history = {
	0, 10000000, false, "an integer from 0 to 10000000 (events)",
};
static const struct opt_range range_leak_exitcode = {
	1, 255, false, "an integer from 1 to 255",
};
static const struct opt_range range_metrics_interval = {
	1, 86400, false, "an integer from 1 to 86400 (seconds)",
};
static const struct opt_range range_metrics_top = {
	1, 1000, false, "an integer from 1 to 1000 (sites)",
};
static const struct opt_range range_ring_events = {
	64, 1u << 20, true, "a power of two from 64 to 1048576",
};
_Static_assert(GMT_STACK_MAX_DEPTH == 256, "range_stack_depth's phrase names the maximum");

const char *const gmt__torch_history_names[GMT_TORCH_HISTORY_COUNT] = { GMT_TORCH_HISTORIES(GMT_X_WORD) };

/* The words a CHOICE option takes: word i is value i. Every CHOICE option
 * of the table needs one, named choices_<field>. */
struct opt_choices {
	const char *const *names;
	size_t n;
	const char *expected;
};

static const struct opt_choices choices_torch_history = {
	gmt__torch_history_names, GMT_TORCH_HISTORY_COUNT,
	"one of " GMT_TORCH_HISTORIES(GMT_WORD_COMMA) "(a single word)",
};

struct opt_desc {
	const char *name;
	enum opt_type type;
	size_t offset; /* of the field in struct gmt__options */
	const struct opt_range *range;
	const struct opt_choices *choices;
	const char *help;
};

#define OPT_RANGE_BOOL(field) NULL
#define OPT_RANGE_INT(field) (&range_##field)
#define OPT_RANGE_SIZE(field) (&range_##field)
#define OPT_RANGE_STRING(field) NULL
#define OPT_RANGE_TRIGGERS(field) NULL
#define OPT_RANGE_CLASSES(field) NULL
#define OPT_RANGE_CHOICE(field) NULL
#define OPT_CHOICES_BOOL(field) NULL
#define OPT_CHOICES_INT(field) NULL
#define OPT_CHOICES_SIZE(field) NULL
#define OPT_CHOICES_STRING(field) NULL
#define OPT_CHOICES_TRIGGERS(field) NULL
#define OPT_CHOICES_CLASSES(field) NULL
#define OPT_CHOICES_CHOICE(field) (&choices_##field)

#define OPT_X_DESC(field, var, type, def, help) \
	{ var, OPT_##type, offsetof(struct gmt__options, field), OPT_RANGE_##type(field), \
	  OPT_CHOICES_##type(field), help },
static const struct opt_desc descs[] = { GMT_OPTIONS(OPT_X_DESC) };
#undef OPT_X_DESC

#define NDESCS (sizeof(descs) / sizeof(descs[0]))

const char *const gmt__trigger_names[GMT_TRIGGER_COUNT] = { GMT_TRIGGERS(GMT_X_WORD) };
const char *const gmt__leak_class_names[GMT_LEAK_CLASS_COUNT] = { GMT_LEAK_CLASSES(GMT_X_WORD) };

/* Where a value came from, for the verbose listing. */
enum opt_source { FROM_DEFAULT, FROM_ENVIRONMENT, FROM_DEFAULT_INVALID };

/* The words of a TRIGGERS or CLASSES option: word i is bit i. A list of
 * triggers always has oom (keep) unless it says no-oom (off): adding a
 * trigger never takes away the out-of-memory snapshot. */
struct words {
	const char *const *names;
	size_t n;
	unsigned keep;
	const char *off;
};

static struct words words_of(const struct opt_desc *d)
{
	if (d->type == OPT_TRIGGERS)
		return (struct words){ gmt__trigger_names, GMT_TRIGGER_COUNT, GMT_TRIGGER_OOM, GMT_TRIGGER_NO_OOM };
	return (struct words){ gmt__leak_class_names, GMT_LEAK_CLASS_COUNT, 0, NULL };
}

/* A comma list of the words (and w.off), each possibly surrounded by blanks,
 * or the single word "none". Empty items, unknown words and w.off beside the
 * word it turns off are errors. */
static int parse_words(const char *s, struct words w, unsigned *out)
{
	unsigned bits = 0;
	bool off = false;
	const char *p = s;

	for (;;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		size_t i;

		while (n > 0 && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n == 0)
			return -EINVAL;
		if (gmt__word_is(p, n, "none")) {
			/* only on its own: "none,oom" is a contradiction */
			if (p != s + strspn(s, " \t") || end != NULL)
				return -EINVAL;
			*out = 0;
			return 0;
		}
		for (i = 0; i < w.n; i++) {
			if (gmt__word_is(p, n, w.names[i]))
				break;
		}
		if (i < w.n)
			bits |= 1u << i;
		else if (w.off != NULL && gmt__word_is(p, n, w.off))
			off = true;
		else
			return -EINVAL;
		if (end == NULL)
			break;
		p = end + 1;
	}
	if (off && (bits & w.keep))
		return -EINVAL;
	*out = off ? bits : bits | w.keep;
	return 0;
}

static void *field_of(const struct gmt__options *o, const struct opt_desc *d)
{
	return (char *)o + d->offset;
}

static const char *expected_of(const struct opt_desc *d)
{
	switch (d->type) {
	case OPT_BOOL:
		return "1, 0, true, false, yes, no, on or off";
	case OPT_INT:
	case OPT_SIZE:
		return d->range->expected;
	case OPT_STRING:
		return "a non-empty string";
	case OPT_TRIGGERS:
		return "a comma list of " GMT_TRIGGERS(GMT_WORD_COMMA) GMT_TRIGGER_NO_OOM ", or none";
	case OPT_CLASSES:
		return "a comma list of " GMT_LEAK_CLASSES(GMT_WORD_COMMA) "or none";
	case OPT_CHOICE:
		return d->choices->expected;
	}
	return "?";
}

/* Parses value into the field of d in *o; the field is written only on
 * success. */
static int parse_value(struct gmt__options *o, const struct opt_desc *d, const char *value)
{
	void *field = field_of(o, d);
	uint64_t v;
	bool b;
	unsigned t;
	int r;

	switch (d->type) {
	case OPT_BOOL:
		r = gmt__parse_bool(value, &b);
		if (r == 0)
			*(bool *)field = b;
		return r;
	case OPT_INT:
	case OPT_SIZE:
		if (d->type == OPT_INT)
			r = gmt__parse_u64(value, d->range->min, d->range->max, &v);
		else
			r = gmt__parse_size(value, d->range->min, d->range->max, &v);
		if (r == 0 && d->range->pow2 && (v & (v - 1)) != 0)
			r = -EINVAL;
		if (r == 0 && d->type == OPT_INT)
			*(int64_t *)field = (int64_t)v;
		else if (r == 0)
			*(uint64_t *)field = v;
		return r;
	case OPT_STRING:
		if (value[0] == '\0')
			return -EINVAL;
		*(const char **)field = value;
		return 0;
	case OPT_TRIGGERS:
	case OPT_CLASSES:
		r = parse_words(value, words_of(d), &t);
		if (r == 0)
			*(unsigned *)field = t;
		return r;
	case OPT_CHOICE:
		for (t = 0; t < d->choices->n; t++) {
			if (gmt__word_is(value, strlen(value), d->choices->names[t])) {
				*(unsigned *)field = t;
				return 0;
			}
		}
		return -EINVAL;
	}
	return -EINVAL;
}

static const struct opt_desc *find_desc(const char *name, size_t n)
{
	size_t i;

	for (i = 0; i < NDESCS; i++) {
		if (strncmp(descs[i].name, name, n) == 0 && descs[i].name[n] == '\0')
			return &descs[i];
	}
	return NULL;
}

/* Copies s[0..n) into buf for a message: printable ASCII as it is, anything
 * else as \xNN, so that a hostile value cannot break the one-line rule; cut
 * with "..." past 80 characters. */
static void quote(char *buf, size_t len, const char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (o + 8 > len || o >= 80) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
	}
	buf[o] = '\0';
}

/* Levenshtein distance of a[0..na) and b, both at most 63 characters (else a
 * large number), without malloc. */
static unsigned edit_distance(const char *a, size_t na, const char *b)
{
	unsigned row[64];
	size_t nb = strlen(b), i, j;

	if (na >= 64 || nb >= 64)
		return 1000;
	for (j = 0; j <= nb; j++)
		row[j] = (unsigned)j;
	for (i = 1; i <= na; i++) {
		unsigned diag = row[0];

		row[0] = (unsigned)i;
		for (j = 1; j <= nb; j++) {
			unsigned up = row[j];
			unsigned best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

static void warn_unknown(const char *name, size_t n)
{
	const struct opt_desc *best = NULL;
	unsigned best_d = 4; /* suggest only close names */
	char q[96];
	size_t i;

	for (i = 0; i < NDESCS; i++) {
		unsigned d = edit_distance(name, n, descs[i].name);

		if (d < best_d) {
			best_d = d;
			best = &descs[i];
		}
	}
	quote(q, sizeof(q), name, n);
	if (best != NULL)
		gmt__warn("%s is not a gpumemtrace option, ignored (did you mean %s?)", q, best->name);
	else
		gmt__warn("%s is not a gpumemtrace option, ignored", q);
}

void gmt__options_defaults(struct gmt__options *out)
{
#define OPT_X_DEFAULT(field, var, type, def, help) out->field = def;
	GMT_OPTIONS(OPT_X_DEFAULT)
#undef OPT_X_DEFAULT
}

int gmt__options_set(struct gmt__options *out, const char *name, const char *value,
		     const char **expected)
{
	const struct opt_desc *d = find_desc(name, strlen(name));
	int r;

	if (d == NULL)
		return -ENOENT;
	r = parse_value(out, d, value);
	if (r < 0 && expected != NULL)
		*expected = expected_of(d);
	return r;
}

static int format_value(const struct gmt__options *o, const struct opt_desc *d, char *buf,
			size_t len)
{
	const void *field = field_of(o, d);
	struct words w;
	unsigned bits;
	size_t i, n = 0;

	if (len == 0)
		return 0;
	buf[0] = '\0';
	switch (d->type) {
	case OPT_BOOL:
		snprintf(buf, len, "%d", *(const bool *)field ? 1 : 0);
		break;
	case OPT_INT:
		snprintf(buf, len, "%" PRId64, *(const int64_t *)field);
		break;
	case OPT_SIZE:
		snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
		break;
	case OPT_STRING:
		snprintf(buf, len, "%s", *(const char *const *)field);
		break;
	case OPT_TRIGGERS:
	case OPT_CLASSES:
		w = words_of(d);
		bits = *(const unsigned *)field;
		if (bits == 0)
			snprintf(buf, len, "none");
		for (i = 0; i < w.n && n < len; i++) {
			if (bits & (1u << i))
				n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? "," : "", w.names[i]);
		}
		/* So that the text parses back to the same value. */
		if (bits != 0 && w.keep != 0 && !(bits & w.keep) && n < len)
			snprintf(buf + n, len - n, ",%s", w.off);
		break;
	case OPT_CHOICE:
		snprintf(buf, len, "%s", d->choices->names[*(const unsigned *)field]);
		break;
	}
	return 0;
}

int gmt__options_format(const struct gmt__options *o, const char *name, char *buf, size_t len)
{
	const struct opt_desc *d = find_desc(name, strlen(name));

	if (d == NULL)
		return -ENOENT;
	return format_value(o, d, buf, len);
}

static void print_table(const struct gmt__options *o, const enum opt_source *src)
{
	static const char *const from[] = {
		[FROM_DEFAULT] = "default",
		[FROM_ENVIRONMENT] = "environment",
		[FROM_DEFAULT_INVALID] = "default; the environment's value is invalid",
	};
	char value[256], q[96];
	size_t i;

	for (i = 0; i < NDESCS; i++) {
		format_value(o, &descs[i], value, sizeof(value));
		quote(q, sizeof(q), value, strlen(value));
		gmt__info("option %s=%s (%s)", descs[i].name, q, from[src[i]]);
	}
}

void gmt__options_parse(struct gmt__options *out, char *const *envp)
{
	enum opt_source src[NDESCS] = { FROM_DEFAULT };
	const size_t plen = sizeof(GMT_OPTION_PREFIX) - 1;
	char *const *e;

	gmt__options_defaults(out);
	for (e = envp; e != NULL && *e != NULL; e++) {
		const char *name = *e, *eq = strchr(name, '='), *value;
		const struct opt_desc *d;
		size_t n, i;
		char q[96];

		if (eq == NULL || strncmp(name, GMT_OPTION_PREFIX, plen) != 0)
			continue;
		n = (size_t)(eq - name);
		value = eq + 1;
		d = find_desc(name, n);
		if (d == NULL) {
			warn_unknown(name, n);
			continue;
		}
		i = (size_t)(d - descs);
		/* NOTE: a hand-made environment may name a variable twice; getenv()
		 * answers with the first, so the first one counts here too. */
		if (src[i] != FROM_DEFAULT)
			continue;
		if (parse_value(out, d, value) == 0) {
			src[i] = FROM_ENVIRONMENT;
			continue;
		}
		src[i] = FROM_DEFAULT_INVALID;
		quote(q, sizeof(q), value, strlen(value));
		gmt__warn("%s=\"%s\" is invalid (expected %s); keeping the default", d->name, q,
			  expected_of(d));
	}
	if (out->verbose) {
		gmt__log_set_verbose(true);
		print_table(out, src);
	}
}

static struct gmt__options options;
static pthread_once_t options_once = PTHREAD_ONCE_INIT;

/* NOTE: pthread_once is safe here because parsing never re-enters the tracer
 * (no dlsym, no CUDA call, no malloc); the hooks' own initialisation, which
 * can re-enter dlsym, uses an atomic state instead (tracer/core.c,
 * gmt__ready_slow). */
bool gmt__secure(void)
{
	return getauxval(AT_SECURE) != 0;
}

/* The working directory at load (gmt__options_at_load), or "". */
static char start_cwd[PATH_MAX];

void gmt__options_at_load(void)
{
	if (getcwd(start_cwd, sizeof(start_cwd)) == NULL)
		start_cwd[0] = '\0';
}

/* NOTE: a relative directory (GPUMEMTRACE_DIR's default "." included) is
 * made absolute against the working directory the process had at load (else
 * the one it has now), so that a program that calls chdir() before its first
 * CUDA call or later still writes where it was asked (issue 35). One whose
 * absolute name does not fit stays as it is. */
static void make_absolute(const char **dir, char *buf, size_t len)
{
	char now[PATH_MAX];
	const char *cwd = start_cwd[0] != '\0' ? start_cwd : getcwd(now, sizeof(now));
	int n;

	if ((*dir)[0] == '\0' || (*dir)[0] == '/' || cwd == NULL)
		return;
	if (strcmp(*dir, ".") == 0)
		n = snprintf(buf, len, "%s", cwd);
	else
		n = snprintf(buf, len, "%s/%s", cwd, *dir);
	if (n > 0 && (size_t)n < len)
		*dir = buf;
}

static void options_init(void)
{
	static char dir[PATH_MAX + 256], metrics_dir[PATH_MAX + 256];

	/* NOTE: in secure execution the environment is the less privileged
	 * caller's, as for glibc's own LD_PRELOAD rule: no path and no behaviour
	 * is taken from it. */
	gmt__options_parse(&options, gmt__secure() ? NULL : environ);
	make_absolute(&options.dir, dir, sizeof(dir));
	make_absolute(&options.metrics_dir, metrics_dir, sizeof(metrics_dir));
	gmt__log_set_verbose(options.verbose);
}

const struct gmt__options *gmt__options(void)
{
	pthread_once(&options_once, options_init);
	return &options;
}
