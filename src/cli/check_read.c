/* Reading snapshots for `gpumemtrace check` (check.h): only the keys the gate
 * needs, each checked for its type, so that a malformed document is one line
 * naming the file and the key, never a crash. docs/snapshot-format.md says
 * what the keys mean. */
#define _GNU_SOURCE
#include "cli/check.h"

#include "util/input.h"

#include <jansson.h>
#include <gpumemtrace.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cli_class_name(unsigned cls)
{
	if (cls == CLI_CLASS_GROWING)
		return "growing";
	for (unsigned i = 0; i < GMT_LEAK_CLASS_COUNT; i++) {
		if (1u << i == cls)
			return gmt__leak_class_names[i];
	}
	return "?";
}

struct stack_ref {
	int64_t id;
	json_t *frames;
	json_t *site; /* NULL in a snapshot older than the site rule (format minor 1) */
};

struct reader {
	const char *path;
	char *err;
	size_t errlen;
	struct stack_ref *stacks; /* sorted by id */
	size_t nstacks;
};

/* "PATH: message" into the reader's err; returns -EINVAL for `return fail()`. */
static void fail_message(struct reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_message(struct reader *rd, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(rd->err, rd->errlen, "%s: ", rd->path);
	if (n >= 0 && (size_t)n < rd->errlen) {
		va_start(ap, fmt);
		vsnprintf(rd->err + n, rd->errlen - (size_t)n, fmt, ap);
		va_end(ap);
	}
}

/* Say what is wrong with the document and give -EINVAL. NOTE: a macro, so
 * that the constant is seen where fail() is returned: a variadic function is
 * never inlined, and GCC's -O3 would otherwise not see that the lookups set
 * their outputs whenever they return 0 (-Wmaybe-uninitialized). */
#define fail(rd, ...) (fail_message((rd), __VA_ARGS__), -EINVAL)

static int no_memory(struct reader *rd)
{
	snprintf(rd->err, rd->errlen, "%s: out of memory", rd->path);
	return -ENOMEM;
}

/* The lookups below take `where`, the path of obj in the document ("" for
 * the top level), for the messages. */

static json_t *get(struct reader *rd, json_t *obj, const char *where, const char *key, int *r)
{
	json_t *v = json_object_get(obj, key);

	if (v == NULL)
		*r = fail(rd, "no key \"%s%s%s\"", where, where[0] ? "." : "", key);
	return v;
}

static int get_u64(struct reader *rd, json_t *obj, const char *where, const char *key,
		   uint64_t *out)
{
	int r = 0;
	json_t *v = get(rd, obj, where, key, &r);

	if (v == NULL)
		return r;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return fail(rd, "%s%s%s: expected a non-negative integer", where, where[0] ? "." : "",
			    key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int get_i64(struct reader *rd, json_t *obj, const char *where, const char *key,
		   int64_t *out)
{
	int r = 0;
	json_t *v = get(rd, obj, where, key, &r);

	if (v == NULL)
		return r;
	if (!json_is_integer(v))
		return fail(rd, "%s%s%s: expected an integer", where, where[0] ? "." : "", key);
	*out = (int64_t)json_integer_value(v);
	return 0;
}

/* A string, or null (*out = NULL) when null_ok. */
static int get_str(struct reader *rd, json_t *obj, const char *where, const char *key,
		   bool null_ok, const char **out)
{
	int r = 0;
	json_t *v = get(rd, obj, where, key, &r);

	if (v == NULL)
		return r;
	if (null_ok && json_is_null(v)) {
		*out = NULL;
		return 0;
	}
	if (!json_is_string(v))
		return fail(rd, "%s%s%s: expected a string%s", where, where[0] ? "." : "", key,
			    null_ok ? " or null" : "");
	*out = json_string_value(v);
	return 0;
}

static int get_typed(struct reader *rd, json_t *obj, const char *where, const char *key,
		     json_type type, json_t **out)
{
	static const char *const names[] = {
		[JSON_OBJECT] = "an object", [JSON_ARRAY] = "an array", [JSON_STRING] = "a string",
		[JSON_INTEGER] = "an integer", [JSON_REAL] = "a number", [JSON_TRUE] = "a boolean",
		[JSON_FALSE] = "a boolean", [JSON_NULL] = "null",
	};
	int r = 0;
	json_t *v = get(rd, obj, where, key, &r);

	if (v == NULL)
		return r;
	if (json_typeof(v) != type && !(type == JSON_TRUE && json_is_boolean(v)))
		return fail(rd, "%s%s%s: expected %s", where, where[0] ? "." : "", key, names[type]);
	*out = v;
	return 0;
}

static int compare_stack_ref(const void *a, const void *b)
{
	const struct stack_ref *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static int index_stacks(struct reader *rd, json_t *stacks)
{
	size_t i, n = json_array_size(stacks);
	char where[48];
	int r;

	rd->stacks = calloc(n ? n : 1, sizeof(*rd->stacks));
	if (rd->stacks == NULL)
		return no_memory(rd);
	for (i = 0; i < n; i++) {
		json_t *s = json_array_get(stacks, i);

		snprintf(where, sizeof(where), "stacks[%zu]", i);
		if (!json_is_object(s))
			return fail(rd, "%s: expected an object", where);
		r = get_i64(rd, s, where, "id", &rd->stacks[i].id);
		if (r == 0)
			r = get_typed(rd, s, where, "frames", JSON_ARRAY, &rd->stacks[i].frames);
		if (r == 0 && json_object_get(s, "site") != NULL)
			r = get_typed(rd, s, where, "site", JSON_OBJECT, &rd->stacks[i].site);
		if (r < 0)
			return r;
	}
	rd->nstacks = n;
	qsort(rd->stacks, n, sizeof(*rd->stacks), compare_stack_ref);
	return 0;
}

struct frame {
	const char *address, *module, *function, *file;
	bool has_line;
	int64_t line;
};

static int read_frame(struct reader *rd, json_t *f, const char *where, struct frame *out)
{
	json_t *line;
	int r;

	if (!json_is_object(f))
		return fail(rd, "%s: expected an object", where);
	*out = (struct frame){ 0 };
	r = get_str(rd, f, where, "address", true, &out->address);
	if (r == 0)
		r = get_str(rd, f, where, "module", true, &out->module);
	if (r == 0)
		r = get_str(rd, f, where, "function", true, &out->function);
	if (r == 0)
		r = get_str(rd, f, where, "file", true, &out->file);
	if (r == 0 && (line = get(rd, f, where, "line", &r)) != NULL) {
		if (json_is_integer(line)) {
			out->has_line = true;
			out->line = (int64_t)json_integer_value(line);
		} else if (!json_is_null(line)) {
			r = fail(rd, "%s.line: expected an integer or null", where);
		}
	}
	return r;
}

static void place_free(struct cli_site_place *p)
{
	free(p->label);
	free(p->file);
}

/* The place of a snapshot older than the site rule: its innermost frame
 * with a file and a line, else its innermost frame (docs/ci.md). 0, or -1
 * without memory (out's fields each NULL or owned). */
static int old_place(const struct frame *frames, size_t n, struct cli_site_place *out)
{
	const struct frame *f = &frames[0];
	char *label;

	for (size_t i = 0; i < n; i++) {
		if (frames[i].file != NULL && frames[i].has_line) {
			f = &frames[i];
			break;
		}
	}
	if (f->file != NULL && f->has_line) {
		out->file = strdup(f->file);
		out->line = f->line;
		if (out->file == NULL || asprintf(&label, "%s (%s:%lld)", f->function != NULL ? f->function : "?",
						  f->file, (long long)f->line) < 0)
			return -1;
	} else if (asprintf(&label, "%s", f->function != NULL ? f->function : f->address != NULL ? f->address : "?") < 0) {
		return -1;
	}
	out->label = label;
	return 0;
}

/* The place of stack `id` (check.h): its site as the snapshot names it
 * (stacks[].site: the label, and the file and line of the outermost frame
 * the label names — the caller that tells it from sites with the same frame
 * (label_frame, minor 12), else the site's frame — when it is the program's
 * own code). */
static int place_of(struct reader *rd, int64_t id, const char *where, struct cli_site_place *out)
{
	struct stack_ref key = { .id = id }, *s;
	struct frame *frames = NULL;
	char fwhere[96];
	const char *label = NULL;
	json_t *at = NULL, *named = NULL, *user = NULL;
	size_t i, n;
	int r = 0;

	*out = (struct cli_site_place){ 0 };
	s = bsearch(&key, rd->stacks, rd->nstacks, sizeof(*rd->stacks), compare_stack_ref);
	if (s == NULL && id == 0) {
		out->label = strdup("(no stack recorded)");
		return out->label != NULL ? 0 : no_memory(rd);
	}
	if (s == NULL)
		return fail(rd, "%s.stack: no stack %lld in stacks", where, (long long)id);
	n = json_array_size(s->frames);
	snprintf(fwhere, sizeof(fwhere), "stacks[id %lld].site", (long long)id);
	if (s->site != NULL) {
		r = get_str(rd, s->site, fwhere, "label", false, &label);
		if (r == 0)
			r = get_typed(rd, s->site, fwhere, "user", JSON_TRUE, &user);
		if (r == 0 && (at = get(rd, s->site, fwhere, "frame", &r)) != NULL && !json_is_null(at) &&
		    (!json_is_integer(at) || json_integer_value(at) < 0 || (size_t)json_integer_value(at) >= n))
			r = fail(rd, "%s.frame: expected null or an index into the stack's frames", fwhere);
		if (r == 0 && (named = json_object_get(s->site, "label_frame")) != NULL && !json_is_null(named) &&
		    (!json_is_integer(named) || json_integer_value(named) < 0 ||
		     (size_t)json_integer_value(named) >= n))
			r = fail(rd, "%s.label_frame: expected null or an index into the stack's frames", fwhere);
		if (r < 0)
			return r;
	}
	if (n == 0 && label == NULL) {
		char *none;

		if (asprintf(&none, "(stack %lld: no frames)", (long long)id) < 0)
			return no_memory(rd);
		out->label = none;
		return 0;
	}
	frames = calloc(n ? n : 1, sizeof(*frames));
	if (frames == NULL)
		return no_memory(rd);
	for (i = 0; i < n; i++) {
		snprintf(fwhere, sizeof(fwhere), "stacks[id %lld].frames[%zu]", (long long)id, i);
		r = read_frame(rd, json_array_get(s->frames, i), fwhere, &frames[i]);
		if (r < 0) {
			free(frames);
			return r;
		}
	}
	if (label == NULL) {
		r = old_place(frames, n, out);
	} else {
		const struct frame *f = named != NULL && json_is_integer(named) ? &frames[json_integer_value(named)]
					: at != NULL && json_is_integer(at) ? &frames[json_integer_value(at)]
					: NULL;

		out->label = strdup(label);
		r = out->label != NULL ? 0 : -1;
		if (r == 0 && json_is_true(user) && f != NULL && f->file != NULL && f->has_line) {
			out->file = strdup(f->file);
			out->line = f->line;
			r = out->file != NULL ? 0 : -1;
		}
	}
	free(frames);
	if (r < 0) {
		place_free(out);
		*out = (struct cli_site_place){ 0 };
		return no_memory(rd);
	}
	return 0;
}

static int parse_class(const char *s, unsigned *out)
{
	for (unsigned i = 0; i < GMT_LEAK_CLASS_COUNT; i++) {
		if (strcmp(s, gmt__leak_class_names[i]) == 0) {
			*out = 1u << i;
			return 0;
		}
	}
	return -EINVAL;
}

static int read_leak_site(struct reader *rd, json_t *site, const char *where,
			  struct cli_leak_site *out)
{
	const char *cls = NULL, *supp = NULL;
	json_t *counted;
	int r;

	if (!json_is_object(site))
		return fail(rd, "%s: expected an object", where);
	r = get_i64(rd, site, where, "stack", &out->stack);
	if (r == 0)
		r = get_str(rd, site, where, "class", false, &cls);
	if (r == 0 && parse_class(cls, &out->cls) < 0)
		r = fail(rd, "%s.class: '%.40s' is not leaked, referenced or cached", where, cls);
	if (r == 0)
		r = get_typed(rd, site, where, "counted", JSON_TRUE, &counted);
	if (r == 0)
		r = get_str(rd, site, where, "suppressed_by", true, &supp);
	if (r == 0)
		r = get_u64(rd, site, where, "count", &out->count);
	if (r == 0)
		r = get_u64(rd, site, where, "bytes", &out->bytes);
	if (r < 0)
		return r;
	if (supp != NULL && (out->suppressed_by = strdup(supp)) == NULL)
		return no_memory(rd);
	return place_of(rd, out->stack, where, &out->place);
}

static int read_leaks(struct reader *rd, json_t *leaks, struct cli_snapshot *out)
{
	json_t *sites, *scan;
	char where[48];
	size_t i, n;
	int r;

	if (!json_is_object(leaks))
		return fail(rd, "leaks: expected an object");
	r = get_typed(rd, leaks, "leaks", "sites", JSON_ARRAY, &sites);
	if (r < 0)
		return r;
	out->scan_done = true;
	scan = json_object_get(leaks, "scan");
	if (scan != NULL) {
		json_t *done = NULL;
		const char *why = NULL, *unseen = NULL;

		if (!json_is_object(scan))
			return fail(rd, "leaks.scan: expected an object");
		r = get_typed(rd, scan, "leaks.scan", "done", JSON_TRUE, &done);
		if (r == 0)
			r = get_str(rd, scan, "leaks.scan", "why", true, &why);
		/* minor 11 */
		if (r == 0 && json_object_get(scan, "unseen") != NULL)
			r = get_str(rd, scan, "leaks.scan", "unseen", true, &unseen);
		if (r < 0)
			return r;
		out->scan_done = json_is_true(done);
		if (why != NULL && (out->scan_why = strdup(why)) == NULL)
			return no_memory(rd);
		if (unseen != NULL && (out->scan_unseen = strdup(unseen)) == NULL)
			return no_memory(rd);
	}
	n = json_array_size(sites);
	out->leaks = calloc(n ? n : 1, sizeof(*out->leaks));
	if (out->leaks == NULL)
		return no_memory(rd);
	for (i = 0; i < n; i++) {
		snprintf(where, sizeof(where), "leaks.sites[%zu]", i);
		out->leaks[i].pid = out->pid;
		r = read_leak_site(rd, json_array_get(sites, i), where, &out->leaks[i]);
		out->nleaks = i + 1; /* freed with the snapshot, even half read */
		if (r < 0)
			return r;
	}
	return 0;
}

/* sites[] into peaks, sites of the same label added up. Only for the list of
 * what grew, which the verdict does not depend on: a sites[] this cannot read
 * gives no list rather than an error. */
static void read_peaks(struct reader *rd, json_t *sites, struct cli_snapshot *out)
{
	size_t i, j, n = json_array_size(sites);
	char err[8], where[48];
	struct reader quiet = *rd;

	quiet.err = err; /* its messages are not wanted */
	quiet.errlen = sizeof(err);
	out->peaks = calloc(n ? n : 1, sizeof(*out->peaks));
	if (out->peaks == NULL)
		return;
	for (i = 0; i < n; i++) {
		json_t *site = json_array_get(sites, i);
		struct cli_site_place place;
		uint64_t peak;
		int64_t stack;

		snprintf(where, sizeof(where), "sites[%zu]", i);
		if (!json_is_object(site) || get_i64(&quiet, site, where, "stack", &stack) < 0 ||
		    get_u64(&quiet, site, where, "peak_bytes", &peak) < 0 ||
		    place_of(&quiet, stack, where, &place) < 0)
			goto drop;
		free(place.file);
		for (j = 0; j < out->npeaks; j++) {
			if (strcmp(out->peaks[j].label, place.label) == 0)
				break;
		}
		if (j < out->npeaks) {
			out->peaks[j].peak_bytes += peak;
			free(place.label);
		} else {
			out->peaks[out->npeaks].label = place.label;
			out->peaks[out->npeaks++].peak_bytes = peak;
		}
	}
	return;
drop:
	for (j = 0; j < out->npeaks; j++)
		free(out->peaks[j].label);
	free(out->peaks);
	out->peaks = NULL;
	out->npeaks = 0;
}

static int compare_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The addresses of the allocations that are the framework's segments
 * (allocations[].framework_segment), sorted; *n of them. NULL for none (or
 * no memory: then no site is taken for the framework's). */
static const char **segment_addresses(json_t *doc, size_t *n)
{
	json_t *allocs = json_object_get(doc, "allocations"), *a, *addr;
	const char **v;
	size_t i;

	*n = 0;
	if (!json_is_array(allocs) || (v = calloc(json_array_size(allocs) + 1, sizeof(*v))) == NULL)
		return NULL;
	json_array_foreach(allocs, i, a) {
		addr = json_object_get(a, "address");
		if (json_is_true(json_object_get(a, "framework_segment")) && json_is_string(addr))
			v[(*n)++] = json_string_value(addr);
	}
	qsort(v, *n, sizeof(*v), compare_str);
	return v;
}

/* Marks the leak sites whose every allocation is a framework's segment. */
static void mark_framework_sites(json_t *doc, json_t *leaks, struct cli_snapshot *out)
{
	json_t *sites = json_object_get(leaks, "sites"), *addrs, *addr;
	size_t nseg, i, j;
	const char **seg = segment_addresses(doc, &nseg);

	for (i = 0; seg != NULL && nseg > 0 && i < out->nleaks; i++) {
		bool all = true;

		addrs = json_object_get(json_array_get(sites, i), "addresses");
		if (!json_is_array(addrs) || json_array_size(addrs) == 0)
			continue;
		json_array_foreach(addrs, j, addr) {
			const char *a = json_string_value(addr);

			if (a == NULL || bsearch(&a, seg, nseg, sizeof(*seg), compare_str) == NULL) {
				all = false;
				break;
			}
		}
		out->leaks[i].framework = all;
	}
	free(seg);
}

/* The live tensors of a tensor site (tensors.sites[]), 0 when not listed. */
static uint64_t tensor_count(json_t *tsites, int64_t stack)
{
	json_t *site;
	size_t i;

	json_array_foreach(tsites, i, site) {
		json_t *id = json_object_get(site, "stack"), *n = json_object_get(site, "live_count");

		if (json_is_integer(id) && json_integer_value(id) == stack && json_is_integer(n) &&
		    json_integer_value(n) >= 0)
			return (uint64_t)json_integer_value(n);
	}
	return 0;
}

/* GMT_READ_TENSORS: the tensor level, where the framework handed its
 * tensors over and said its peak on every device; else the snapshot stays at
 * the driver's level (out->tensors false). */
static int read_tensor_level(struct reader *rd, json_t *doc, unsigned flags, struct cli_snapshot *out)
{
	json_t *tensors = json_object_get(doc, "tensors"), *devices, *dev, *leaks, *suspects, *sus;
	json_t *tsites;
	uint64_t peak = 0, base = 0;
	char where[64];
	size_t i;
	int r;

	devices = json_object_get(json_object_get(doc, "framework"), "devices");
	if (!json_is_object(tensors) || !json_is_array(devices) || json_array_size(devices) == 0)
		return 0;
	json_array_foreach(devices, i, dev) {
		json_t *p = json_object_get(dev, "peak_allocated_bytes");

		if (!json_is_integer(p) || json_integer_value(p) < 0)
			return 0; /* a framework that says no peak: the driver's level */
		peak = peak > UINT64_MAX - (uint64_t)json_integer_value(p) ? UINT64_MAX
									 : peak + (uint64_t)json_integer_value(p);
	}
	r = get_u64(rd, tensors, "tensors", "stack_base", &base);
	if (r == 0)
		r = get_typed(rd, tensors, "tensors", "sites", JSON_ARRAY, &tsites);
	if (r < 0)
		return r;
	out->tensors = true;
	out->peak_bytes = peak;
	leaks = json_object_get(doc, "leaks");
	if ((flags & GMT_READ_EXIT) && json_is_object(leaks)) {
		mark_framework_sites(doc, leaks, out);
		suspects = json_object_get(leaks, "suspects");
		json_array_foreach(suspects, i, sus) {
			struct cli_leak_site *grown, site = { .cls = CLI_CLASS_GROWING, .pid = out->pid };

			snprintf(where, sizeof(where), "leaks.suspects[%zu]", i);
			r = get_i64(rd, sus, where, "stack", &site.stack);
			if (r == 0)
				r = get_u64(rd, sus, where, "live_bytes", &site.bytes);
			if (r < 0)
				return r;
			if (site.stack < 0 || (uint64_t)site.stack < base || site.bytes == 0)
				continue; /* the driver's suspects, or a site that let go */
			site.count = tensor_count(tsites, site.stack);
			grown = realloc(out->leaks, (out->nleaks + 1) * sizeof(*grown));
			if (grown == NULL)
				return no_memory(rd);
			out->leaks = grown;
			r = place_of(rd, site.stack, where, &site.place);
			if (r < 0)
				return r;
			out->leaks[out->nleaks++] = site;
		}
	}
	if (flags & GMT_READ_PEAKS) {
		for (i = 0; i < out->npeaks; i++)
			free(out->peaks[i].label);
		free(out->peaks);
		out->peaks = NULL;
		out->npeaks = 0;
		read_peaks(rd, tsites, out);
	}
	return 0;
}

static int read_document(struct reader *rd, json_t *doc, unsigned flags, struct cli_snapshot *out)
{
	json_t *summary = NULL, *stacks = NULL, *leaks, *sites;
	const char *format = NULL, *reason = NULL;
	int64_t version = 0;
	int r;

	if (!json_is_object(doc))
		return fail(rd, "not a gpumemtrace snapshot: not a JSON object");
	r = get_str(rd, doc, "", "format", false, &format);
	if (r < 0 || strcmp(format, "gpumemtrace-snapshot") != 0)
		return fail(rd, "not a gpumemtrace snapshot (no \"format\": \"gpumemtrace-snapshot\")");
	r = get_i64(rd, doc, "", "version", &version);
	if (r < 0)
		return r;
	if (version != 1)
		return fail(rd, "snapshot version %lld; this gpumemtrace (%s) reads version 1",
			    (long long)version, GMT_BUILD_VERSION);
	r = get_str(rd, doc, "", "reason", false, &reason);
	if (r == 0 && (flags & GMT_READ_EXIT) && strcmp(reason, "exit") != 0)
		r = fail(rd, "reason '%.20s', expected an exit snapshot", reason);
	if (r == 0)
		r = get_i64(rd, doc, "", "pid", &out->pid);
	if (r == 0)
		r = get_typed(rd, doc, "", "summary", JSON_OBJECT, &summary);
	if (r == 0)
		r = get_u64(rd, summary, "summary", "peak_bytes", &out->peak_bytes);
	out->driver_peak_bytes = out->peak_bytes;
	if (r == 0)
		r = get_u64(rd, summary, "summary", "live_bytes", &out->live_bytes);
	if (r == 0)
		r = get_typed(rd, doc, "", "stacks", JSON_ARRAY, &stacks);
	if (r == 0)
		r = index_stacks(rd, stacks);
	if (r < 0)
		return r;
	leaks = json_object_get(doc, "leaks");
	if (leaks == NULL && (flags & GMT_READ_EXIT))
		return fail(rd, "no \"leaks\" section: written by a libgpumemtrace.so older than this "
				"gpumemtrace (%s); use the library of the same build",
			    GMT_BUILD_VERSION);
	if (leaks != NULL && (flags & GMT_READ_EXIT)) {
		r = read_leaks(rd, leaks, out);
		if (r < 0)
			return r;
	}
	sites = json_object_get(doc, "sites");
	if ((flags & GMT_READ_PEAKS) && json_is_array(sites))
		read_peaks(rd, sites, out);
	if (flags & GMT_READ_TENSORS)
		return read_tensor_level(rd, doc, flags, out);
	return 0;
}

int cli_snapshot_read(const char *path, unsigned flags, struct cli_snapshot *out, char *err,
		      size_t errlen)
{
	struct reader rd = { .path = path, .err = err, .errlen = errlen };
	json_error_t jerr;
	json_t *doc = NULL;
	FILE *f;
	int r;

	*out = (struct cli_snapshot){ 0 };
	if (errlen > 0)
		err[0] = '\0';
	f = gmt__input_open(path, "snapshot", GMT_SNAPSHOT_MAX_BYTES, err, errlen);
	if (f == NULL)
		return -errno;
	/* NOTE: JSON_DISABLE_EOF_CHECK off: trailing junk after the document (a
	 * torn write) is an error too. */
	doc = json_loadf(f, 0, &jerr);
	fclose(f);
	if (doc == NULL) {
		snprintf(err, errlen, "%s: not valid JSON: %s (line %d)", path, jerr.text, jerr.line);
		return -EINVAL;
	}
	out->path = strdup(path);
	r = out->path != NULL ? read_document(&rd, doc, flags, out) : no_memory(&rd);
	json_decref(doc);
	free(rd.stacks);
	if (r < 0)
		cli_snapshot_free(out);
	return r;
}

void cli_snapshot_free(struct cli_snapshot *s)
{
	size_t i;

	for (i = 0; i < s->nleaks; i++) {
		free(s->leaks[i].suppressed_by);
		place_free(&s->leaks[i].place);
	}
	for (i = 0; i < s->npeaks; i++)
		free(s->peaks[i].label);
	free(s->leaks);
	free(s->peaks);
	free(s->scan_why);
	free(s->scan_unseen);
	free(s->path);
	*s = (struct cli_snapshot){ 0 };
}
