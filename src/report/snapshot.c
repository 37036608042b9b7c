/* The snapshot document (snapshot.h, docs/snapshot-format.md), rendered from
 * the model of the snapshot (analyze/model.h): the live set in its sections,
 * the stacks with their sites and the modules, the per-stack sites, series
 * and history, the leak check's findings, streamed through the checked JSON
 * writer (json.h); publish.c makes it a file. Nothing here decides anything:
 * what the document says, the model concluded. */
#define _GNU_SOURCE
#include "report/document.h"

#include "analyze/sites.h"
#include "record/event.h"
#include "record/pystack.h"
#include "record/stacks.h"
#include "record/streams.h"
#include "record/tags.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the document ------------------------------------------------------------- */

/* One frame object: the address's loader facts, and one source frame (sym,
 * or NULL: the loader's function name and no position). */
static void out_frame(struct gmt__json *o, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
		      const char *function, bool first, const char *role)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, first ? "{\"address\": " : ", {\"address\": ");
	p = gmt__put_hex(p, f->ip);
	if (f->module != NULL) {
		p = gmt__put_lit(p, ", \"offset\": ");
		p = gmt__put_hex(p, f->ip - f->base);
	}
	if (f->unloaded != 0) {
		p = gmt__put_lit(p, ", \"unloaded\": ");
		p = gmt__put_u64(p, f->unloaded);
	}
	p = gmt__put_lit(p, ", \"module\": ");
	gmt__json_commit(o, p);
	gmt__json_string(o, f->module != NULL && f->module[0] != '\0' ? f->module : "?");
	gmt__json_str(o, ", \"function\": ");
	gmt__json_string_or_null(o, function);
	gmt__json_str(o, ", \"file\": ");
	gmt__json_string_or_null(o, sym != NULL ? sym->file : NULL);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"line\": ");
	p = sym != NULL && sym->line > 0 ? gmt__put_i64(p, sym->line) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, sym != NULL && sym->inlined ? ", \"inlined\": true" : ", \"inlined\": false");
	p = gmt__put_lit(p, ", \"python\": false, \"role\": \"");
	p = gmt__put_lit(p, role);
	p = gmt__put_lit(p, "\"}");
	gmt__json_commit(o, p);
}

/* One Python frame: no address or module, a function, file and line, and
 * the marker. */
static void out_py_frame(struct gmt__json *o, const char *function, const char *file, int line, bool first,
			 const char *role)
{
	char *p;

	gmt__json_str(o, first ? "{\"address\": null, \"module\": null, \"function\": "
			 : ", {\"address\": null, \"module\": null, \"function\": ");
	gmt__json_string_or_null(o, function);
	gmt__json_str(o, ", \"file\": ");
	gmt__json_string_or_null(o, file);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"line\": ");
	p = line > 0 ? gmt__put_i64(p, line) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"inlined\": false, \"python\": true, \"role\": \"");
	p = gmt__put_lit(p, role);
	p = gmt__put_lit(p, "\"}");
	gmt__json_commit(o, p);
}

/* The JSON frames array's sink: each frame with its role (sites.h). */
struct json_frames {
	struct gmt__json *o;
	const struct gmt__stack_site *site; /* NULL: every role "user" (no memory for the rule) */
	int i;
};

static const char *json_role(struct json_frames *j)
{
	const struct gmt__stack_site *s = j->site;

	return gmt__frame_role_name(s != NULL && j->i < s->nframes ? s->roles[j->i] : GMT_ROLE_USER);
}

static void json_native(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct json_frames *j = ctx;

	out_frame(j->o, f, sym, function, j->i == 0, json_role(j));
	j->i++;
}

static void json_python(void *ctx, uintptr_t word)
{
	struct json_frames *j = ctx;
	const char *function = NULL, *file = NULL;
	int line = 0;

	(void)gmt__py_frame(word, &function, &file, &line);
	out_py_frame(j->o, function, file, line, j->i == 0, json_role(j));
	j->i++;
}

static void out_frames(struct gmt__json *o, struct gmt__frame_cache *cache, const uintptr_t *ips, int n,
		       const struct gmt__stack_site *site)
{
	struct json_frames j = { o, site, 0 };
	struct gmt__frame_sink k = { json_native, json_python, &j };

	gmt__frames_sink(&k, cache, ips, n);
}

/* The "modules" map: each module a frame lies in, with its load base and GNU
 * build-id (its image's), so that the addresses can be symbolised again
 * offline; a module unloaded since with its unload, as its frames have it. */
static void out_modules(struct gmt__json *o, struct gmt__frame_cache *cache)
{
	char id[256];
	size_t i;

	gmt__json_str(o, " \"modules\": [");
	for (i = 0; i < cache->nmods; i++) {
		const struct gmt__module_ref *m = &cache->mods[i];
		char *p;

		gmt__json_str(o, i ? ",\n  {\"path\": " : "\n  {\"path\": ");
		gmt__json_string(o, m->path);
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"base\": ");
		p = gmt__put_hex(p, m->base);
		if (m->unloaded != 0) {
			p = gmt__put_lit(p, ", \"unloaded\": ");
			p = gmt__put_u64(p, m->unloaded);
		}
		p = gmt__put_lit(p, ", \"build_id\": ");
		gmt__json_commit(o, p);
		if (gmt__build_id_hex(&m->id, id, sizeof(id)) == 0)
			gmt__json_string(o, id);
		else
			gmt__json_str(o, "null");
		gmt__json_str(o, "}");
	}
	gmt__json_str(o, cache->nmods > 0 ? "\n ]\n" : "]\n");
}

/* A stack's site: its id, the index of its frame (null: no frames), that
 * of the outermost frame its label names, and its label. */
static void out_site(struct gmt__json *o, const struct gmt__stack_site *site)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, ", \"site\": {\"id\": ");
	p = gmt__put_u64(p, site->site);
	p = gmt__put_lit(p, ", \"frame\": ");
	p = site->frame >= 0 ? gmt__put_i64(p, site->frame) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"label_frame\": ");
	p = site->label_frame >= 0 ? gmt__put_i64(p, site->label_frame) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, site->user ? ", \"user\": true, \"label\": " : ", \"user\": false, \"label\": ");
	gmt__json_commit(o, p);
	gmt__json_string(o, site->label);
	gmt__json_str(o, "}");
}

/* The "stacks" array and the "modules" map, from frames resolve_stacks
 * looked up (the cache answers), each stack with its site (none without
 * memory for the rule). */
static void out_stacks(struct gmt__json *o, struct gmt__frame_cache *cache, const struct gmt__idset *ids, size_t n,
		       const struct gmt__sites *sites, const struct gmt__tensors *tensors)
{
	gmt__json_str(o, " \"stacks\": [");
	for (size_t i = 0; i < n; i++) {
		const struct gmt__site_frame *given;
		int depth = 0, ngiven = 0;
		const uintptr_t *ips;

		if (gmt__tensors_frames(tensors, ids->v[i], &given, &ngiven)) {
			/* A framework's Python stack: its frames as handed over. */
			const struct gmt__stack_site *site = sites->n > 0 ? &sites->v[i] : NULL;
			char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

			p = gmt__put_lit(p, i ? ",\n  {\"id\": " : "\n  {\"id\": ");
			p = gmt__put_u64(p, ids->v[i]);
			p = gmt__put_lit(p, ", \"runtime_call\": null, \"tags\": []");
			gmt__json_commit(o, p);
			if (site != NULL)
				out_site(o, site);
			gmt__json_str(o, ", \"frames\": [");
			for (int k = 0; k < ngiven; k++)
				out_py_frame(o, given[k].function, given[k].file, given[k].line, k == 0,
					     gmt__frame_role_name(site != NULL && k < site->nframes ? site->roles[k]
												  : GMT_ROLE_USER));
			gmt__json_str(o, "]}");
			continue;
		}
		ips = gmt__stack_get(ids->v[i], &depth);
		int nframes = gmt__stack_frames(ips, depth), ntags = ips != NULL ? depth - nframes : 0;
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		cache->epoch = gmt__stack_epoch(ids->v[i]);
		p = gmt__put_lit(p, i ? ",\n  {\"id\": " : "\n  {\"id\": ");
		p = gmt__put_u64(p, ids->v[i]);
		p = gmt__put_lit(p, ", \"runtime_call\": ");
		gmt__json_commit(o, p);
		gmt__json_string_or_null(o, ips != NULL ? gmt__frames_runtime_call(cache, ips, depth) : NULL);
		gmt__json_str(o, ", \"tags\": [");
		for (int t = 0; t < ntags; t++) {
			const char *name = gmt__tag_name((uint32_t)ips[depth - ntags + t]);

			if (t > 0)
				gmt__json_str(o, ", ");
			gmt__json_string(o, name != NULL ? name : "?");
		}
		gmt__json_str(o, "]");
		if (sites->n > 0)
			out_site(o, &sites->v[i]);
		gmt__json_str(o, ", \"frames\": [");
		if (ips != NULL)
			out_frames(o, cache, ips, nframes, sites->n > 0 ? &sites->v[i] : NULL);
		gmt__json_str(o, "]}");
	}
	gmt__json_str(o, n > 0 ? "\n ],\n" : "],\n");
	out_modules(o, cache);
}

/* The fields every record of the live table carries. */
static char *put_entry_common(char *p, const struct gmt__entry *e)
{
	p = gmt__put_lit(p, "{\"address\": ");
	p = gmt__put_hex(p, e->addr);
	p = gmt__put_lit(p, ", \"size\": ");
	p = gmt__put_u64(p, e->size);
	p = gmt__put_lit(p, ", \"device\": ");
	p = gmt__put_i64(p, e->device);
	return p;
}

static char *put_entry_origin(char *p, const struct gmt__entry *e, const char *api)
{
	p = gmt__put_lit(p, ", \"api\": ");
	p = gmt__put_lit(p, api);
	p = gmt__put_lit(p, ", \"thread\": ");
	p = gmt__put_u64(p, e->tid);
	p = gmt__put_lit(p, ", \"time_ns\": ");
	p = gmt__put_u64(p, e->time_ns);
	p = gmt__put_lit(p, ", \"stack\": ");
	p = gmt__put_u64(p, e->stack);
	return p;
}

static int api_table_init(struct gmt__api_table *t, const struct gmt__snapshot *s)
{
	int i;

	t->n = s->napi > 0 ? s->napi : 0;
	t->longest = sizeof("\"unknown\"");
	t->v = calloc((size_t)t->n + 1, sizeof(*t->v));
	if (t->v == NULL)
		return -ENOMEM;
	for (i = 0; i < t->n; i++) {
		const char *name = s->api_names[i] != NULL ? s->api_names[i] : "unknown";
		json_t *j = json_string(name);
		size_t len;

		if (j == NULL)
			j = json_string("unknown");
		t->v[i] = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
		json_decref(j);
		if (t->v[i] == NULL)
			return -ENOMEM;
		len = strlen(t->v[i]);
		if (len > t->longest)
			t->longest = len;
	}
	return 0;
}

static void api_table_free(struct gmt__api_table *t)
{
	int i;

	for (i = 0; t->v != NULL && i < t->n; i++)
		free(t->v[i]);
	free(t->v);
}

static const char *api_name(const struct gmt__api_table *t, unsigned api)
{
	return api < (unsigned)t->n ? t->v[api] : "\"unknown\"";
}

/* `, "stream": "0x…"` for memory of kind async whose stream is known. */
static char *put_stream(char *p, uint8_t kind, uint16_t stream)
{
	uint64_t handle;

	if (kind != GMT_KIND_ASYNC || !gmt__stream_handle(stream, &handle))
		return p;
	p = gmt__put_lit(p, ", \"stream\": ");
	return gmt__put_hex(p, handle);
}

static void out_entry(struct gmt__json *o, const struct gmt__entry *e, const struct gmt__api_table *apis,
		      bool first, const struct gmt__tensors *t)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES + apis->longest);

	p = gmt__put_lit(p, first ? "\n  " : ",\n  ");
	p = put_entry_common(p, e);
	switch (e->space) {
	case GMT_SPACE_RESERVATION:
	case GMT_SPACE_MAPPING:
		break;
	default:
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name(e->kind));
		p = gmt__put_lit(p, "\"");
		break;
	}
	switch (e->space) {
	case GMT_SPACE_HANDLE:
		/* Each count may be below zero for a while (table.h): a
		 * release or unmap recorded before the map or retain it
		 * followed. */
		p = gmt__put_lit(p, ", \"refs\": ");
		p = gmt__put_u64(p, e->refs > 0 ? (uint64_t)e->refs : 0);
		p = gmt__put_lit(p, ", \"mappings\": ");
		p = gmt__put_u64(p, (int64_t)e->aux > 0 ? e->aux : 0);
		break;
	case GMT_SPACE_MAPPING:
		p = gmt__put_lit(p, ", \"handle\": ");
		p = gmt__put_hex(p, e->link);
		p = gmt__put_lit(p, ", \"offset\": ");
		p = gmt__put_u64(p, e->aux);
		break;
	default:
		p = gmt__put_lit(p, ", \"seq\": ");
		p = gmt__put_u64(p, e->link);
		p = put_stream(p, e->kind, e->stream);
		break;
	}
	p = put_entry_origin(p, e, api_name(apis, e->api));
	if (t != NULL && t->known && gmt__tensors_backs(t, e))
		p = gmt__put_lit(p, ", \"framework_segment\": true");
	*p++ = '}';
	gmt__json_commit(o, p);
}

/* Writes the entries v[0..n) of one section as the elements of a JSON
 * array; t (may be NULL) marks the memory of a framework's segments. */
static void out_section(struct gmt__json *o, const struct gmt__entry *const *v, size_t n,
			const struct gmt__api_table *apis, const struct gmt__tensors *t)
{
	for (size_t i = 0; i < n && o->err == 0; i++)
		out_entry(o, v[i], apis, i == 0, t);
	if (n > 0)
		gmt__json_str(o, "\n ");
}

/* ---- the history: sites, series, events ------------------------------------------ */


void gmt__doc_site_list(struct gmt__json *o, const struct gmt__history *h, const struct gmt__site_ref *v, size_t n,
			bool tensors)
{
	for (size_t i = 0; i < n && o->err == 0; i++) {
		const struct gmt__site *s = gmt__history_site(h, v[i].id);
		uint32_t rises, falls;
		uint64_t growth, steps, step_growth = gmt__site_step_growth(h, s, &steps);
		bool growing = gmt__site_growing(h, s, &rises, &falls, &growth);
		uint64_t rise;
		bool suspect = gmt__site_suspect(h, s, &rises, &falls, &rise);
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		p = gmt__put_lit(p, i ? ",\n  {\"stack\": " : "\n  {\"stack\": ");
		p = gmt__put_u64(p, tensors ? gmt__tensor_stack_id(v[i].id) : v[i].id);
		p = gmt__put_lit(p, ", \"live_bytes\": ");
		p = gmt__put_u64(p, s->live_bytes);
		p = gmt__put_lit(p, ", \"live_count\": ");
		p = gmt__put_u64(p, s->live_count);
		p = gmt__put_lit(p, ", \"allocs\": ");
		p = gmt__put_u64(p, s->allocs);
		p = gmt__put_lit(p, ", \"alloc_bytes\": ");
		p = gmt__put_u64(p, s->alloc_bytes);
		p = gmt__put_lit(p, ", \"peak_bytes\": ");
		p = gmt__put_u64(p, s->peak_bytes);
		p = gmt__put_lit(p, ", \"rising_windows\": ");
		p = gmt__put_u64(p, rises);
		p = gmt__put_lit(p, ", \"falling_windows\": ");
		p = gmt__put_u64(p, falls);
		p = gmt__put_lit(p, ", \"growth_bytes\": ");
		p = gmt__put_u64(p, growth);
		p = gmt__put_lit(p, ", \"step_growth_bytes\": ");
		p = gmt__put_u64(p, step_growth);
		p = gmt__put_lit(p, ", \"growth_steps\": ");
		p = gmt__put_u64(p, steps);
		p = gmt__put_lit(p, growing ? ", \"growing\": true" : ", \"growing\": false");
		p = gmt__put_lit(p, suspect ? ", \"suspect\": true}" : ", \"suspect\": false}");
		gmt__json_commit(o, p);
	}
}

static void out_sites(struct gmt__json *o, const struct gmt__history *h, const struct gmt__site_ref *v, size_t n)
{
	gmt__json_str(o, " \"sites\": [");
	gmt__doc_site_list(o, h, v, n, false);
	gmt__json_str(o, n > 0 ? "\n ],\n" : "],\n");
}

static void out_u64_array(struct gmt__json *o, const uint64_t *v, size_t n, uint64_t last)
{
	gmt__json_str(o, "[");
	for (size_t i = 0; i <= n; i++) {
		char *p = gmt__json_room(o, 32);

		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_u64(p, i < n ? v[i] : last);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]");
}

void gmt__doc_series(struct gmt__json *o, const struct gmt__history *h, uint64_t now)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	/* never before the open window's start (none before the first event) */
	if (h->next_ns >= h->interval_ns && now < h->next_ns - h->interval_ns)
		now = h->next_ns - h->interval_ns;
	p = gmt__put_lit(p, "{\"interval_ns\": ");
	p = gmt__put_u64(p, h->interval_ns);
	p = gmt__put_lit(p, ", \"start_ns\": ");
	p = gmt__put_u64(p, h->start_ns);
	p = gmt__put_lit(p, ", \"columns_dropped\": ");
	p = gmt__put_u64(p, h->overflow);
	p = gmt__put_lit(p, ",\n  \"time_ns\": ");
	gmt__json_commit(o, p);
	out_u64_array(o, h->pt_time, h->npoints, now);
	gmt__json_str(o, ",\n  \"columns\": [");
	for (int c = 0; c < h->ncols; c++) {
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, c ? ",\n   {\"device\": " : "\n   {\"device\": ");
		p = gmt__put_i64(p, h->col_device[c]);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)h->col_kind[c]));
		p = gmt__put_lit(p, "\", \"live_bytes\": ");
		gmt__json_commit(o, p);
		out_u64_array(o, h->pt_val + (size_t)c * GMT_SERIES_POINTS, h->npoints, h->cur[c]);
		gmt__json_str(o, ", \"max_bytes\": ");
		out_u64_array(o, h->pt_max + (size_t)c * GMT_SERIES_POINTS, h->npoints, h->max[c]);
		gmt__json_str(o, "}");
	}
	gmt__json_str(o, h->ncols > 0 ? "\n  ]}" : "]}");
}

/* "history": the last events, oldest first. */
static void out_history(struct gmt__json *o, const struct gmt__history *h, const struct gmt__api_table *apis)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, " \"history\": {\"capacity\": ");
	p = gmt__put_u64(p, h->cap);
	p = gmt__put_lit(p, ", \"dropped\": ");
	p = gmt__put_u64(p, h->dropped);
	p = gmt__put_lit(p, ", \"events\": [");
	gmt__json_commit(o, p);
	for (size_t i = 0; i < h->count && o->err == 0; i++) {
		const struct gmt__hist_event *ev = gmt__history_event(h, i);

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES + apis->longest);
		p = gmt__put_lit(p, i ? ",\n  {\"op\": \"" : "\n  {\"op\": \"");
		p = gmt__put_lit(p, gmt__hist_op_name((enum gmt__hist_op)ev->op));
		p = gmt__put_lit(p, "\", \"seq\": ");
		p = gmt__put_u64(p, ev->seq);
		p = gmt__put_lit(p, ", \"time_ns\": ");
		p = gmt__put_u64(p, ev->time_ns);
		p = gmt__put_lit(p, ", \"address\": ");
		p = ev->op == GMT_HIST_OOM || ev->op == GMT_HIST_STEP ? gmt__put_lit(p, "null") : gmt__put_hex(p, ev->addr);
		p = gmt__put_lit(p, ", \"size\": ");
		p = gmt__put_u64(p, ev->size);
		if (ev->op == GMT_HIST_STEP) {
			/* A step: its number; no memory, no call. */
			p = gmt__put_lit(p, ", \"step\": ");
			p = gmt__put_u64(p, ev->addr);
			p = gmt__put_lit(p, ", \"kind\": null, \"device\": -1, \"api\": null");
		} else {
			p = gmt__put_lit(p, ", \"kind\": \"");
			p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)ev->kind));
			p = gmt__put_lit(p, "\", \"device\": ");
			p = gmt__put_i64(p, ev->device);
			p = gmt__put_lit(p, ", \"api\": ");
			p = gmt__put_lit(p, api_name(apis, ev->api));
			if (ev->op == GMT_HIST_ALLOC)
				p = put_stream(p, ev->kind, ev->stream);
		}
		p = gmt__put_lit(p, ", \"thread\": ");
		p = gmt__put_u64(p, ev->tid);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, ev->stack);
		*p++ = '}';
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, h->count > 0 ? "\n ]},\n" : "]},\n");
}

static void out_header(struct gmt__json *o, const struct gmt__snapshot *s, const struct gmt__view *view)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	int i;

	p = gmt__put_lit(p, "{\n \"format\": \"gpumemtrace-snapshot\",\n \"version\": 1,\n \"minor\": " GMT_SNAPSHOT_MINOR
			 ",\n \"producer\": \"gpumemtrace " GMT_BUILD_VERSION "\",\n \"reason\": \"");
	p = gmt__put_lit(p, gmt__reason_name(s->reason));
	p = gmt__put_lit(p, "\",\n \"seq\": ");
	p = gmt__put_u64(p, s->seq);
	p = gmt__put_lit(p, ",\n \"time_ns\": ");
	p = gmt__put_u64(p, s->time_ns);
	p = gmt__put_lit(p, ",\n \"pid\": ");
	p = gmt__put_i64(p, s->pid);
	p = gmt__put_lit(p, ",\n \"argv\": [");
	gmt__json_commit(o, p);
	for (i = 0; i < s->argc && s->argv != NULL && s->argv[i] != NULL; i++) {
		if (i)
			gmt__json_str(o, ", ");
		gmt__json_string(o, s->argv[i]);
	}

	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "]");
	if (s->argv_truncated)
		p = gmt__put_lit(p, ",\n \"argv_truncated\": true");
	p = gmt__put_lit(p, ",\n \"summary\": {\"live_bytes\": ");
	p = gmt__put_u64(p, s->live_bytes);
	p = gmt__put_lit(p, ", \"live_count\": ");
	p = gmt__put_u64(p, s->live_count);
	p = gmt__put_lit(p, ", \"peak_bytes\": ");
	p = gmt__put_u64(p, s->peak_bytes);
	p = gmt__put_lit(p, ", \"total_allocs\": ");
	p = gmt__put_u64(p, s->total_allocs);
	p = gmt__put_lit(p, ", \"total_frees\": ");
	p = gmt__put_u64(p, s->total_frees);
	p = gmt__put_lit(p, "},\n");
	gmt__json_commit(o, p);
	gmt__doc_process(o, s);
	gmt__json_str(o, " \"devices\": [");
	for (i = 0; i < s->ndevices; i++)
		gmt__doc_device(o, &s->devices[i], &view->pages[i], view->kinds[i], view->class_count[i], view->class_bytes[i],
			   i == 0);
	gmt__json_str(o, s->ndevices > 0 ? "\n ],\n" : "],\n");

	if (s->failed != NULL) {
		const struct gmt__snapshot_request *f = s->failed;

		gmt__json_str(o, " \"failed_request\": {\"api\": ");
		gmt__json_string(o, f->api != NULL ? f->api : "unknown");
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"size\": ");
		p = gmt__put_u64(p, f->size);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)f->kind));
		p = gmt__put_lit(p, "\", \"device\": ");
		p = gmt__put_i64(p, f->device);
		p = gmt__put_lit(p, ", \"result\": ");
		p = gmt__put_i64(p, f->result);
		p = gmt__put_lit(p, ", \"failure\": ");
		p = gmt__put_u64(p, f->failure);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, f->stack);
		p = gmt__put_lit(p, f->by_framework ? ", \"refused_by\": \"framework\"" : ", \"refused_by\": \"driver\"");
		gmt__json_commit(o, p);
		gmt__doc_thread(o, f->tid, f->thread);
		gmt__json_str(o, "},\n");
		if (view->have_diagnosis)
			gmt__doc_diagnosis(o, view);
		if (s->episode != NULL)
			gmt__doc_episode(o, s);
	}

	gmt__json_str(o, " \"stats\": {");
	for (i = 0; i < s->nstats; i++) {
		gmt__json_str(o, i ? ", " : "");
		gmt__json_string(o, s->stats[i].name);
		p = gmt__json_room(o, 32);
		p = gmt__put_lit(p, ": ");
		p = gmt__put_u64(p, s->stats[i].value);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "},\n");
}

static void out_leak_group(struct gmt__json *o, struct gmt__frame_cache *cache, const struct gmt__leak_work *lw,
			   const struct gmt__leak_group *g, bool first)
{
	const struct gmt__supp *supp = lw->in->supp;
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	char text[320];
	int16_t devs[8];
	int ndev = 0;

	p = gmt__put_lit(p, first ? "\n   {\"stack\": " : ",\n   {\"stack\": ");
	p = gmt__put_u64(p, g->stack);
	p = gmt__put_lit(p, ", \"class\": \"");
	p = gmt__put_lit(p, gmt__leak_class_names[g->cls]);
	p = gmt__put_lit(p, g->counted ? "\", \"counted\": true" : "\", \"counted\": false");
	p = gmt__put_lit(p, ", \"suppressed_by\": ");
	gmt__json_commit(o, p);
	if (gmt__leakcheck_suppresses(lw, g->rule)) {
		gmt__supp_rule_text(&supp->v[g->rule], text, sizeof(text));
		gmt__json_string(o, text);
	} else {
		gmt__json_str(o, "null");
	}
	gmt__json_str(o, ", \"rule\": ");
	if (g->rule != NO_RULE) {
		gmt__supp_rule_text(&supp->v[g->rule], text, sizeof(text));
		gmt__json_string(o, text);
		gmt__json_str(o, ", \"rule_source\": ");
		if (supp->v[g->rule].line > 0)
			snprintf(text, sizeof(text), "%s:%d", supp->v[g->rule].source, supp->v[g->rule].line);
		else
			snprintf(text, sizeof(text), "%s", supp->v[g->rule].source);
		gmt__json_string(o, text);
	} else {
		gmt__json_str(o, "null, \"rule_source\": null");
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"count\": ");
	p = gmt__put_u64(p, g->count);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, g->bytes);
	p = gmt__put_lit(p, ", \"kinds\": ");
	p = gmt__put_kinds(p, g->kinds, gmt__kinds_nonzero(g->kinds));
	p = gmt__put_lit(p, ", \"devices\": [");
	for (uint64_t i = 0; i < g->count; i++) {
		int16_t d = lw->items[lw->order[g->first + i]].device;
		int k;

		for (k = 0; k < ndev && devs[k] != d; k++)
			;
		if (k == ndev && ndev < 8) {
			devs[ndev++] = d;
			p = gmt__put_lit(p, ndev > 1 ? ", " : "");
			p = gmt__put_i64(p, d);
		}
	}
	p = gmt__put_lit(p, "], \"addresses\": [");
	gmt__json_commit(o, p);
	for (uint64_t i = 0; i < g->count; i++) {
		p = gmt__json_room(o, 32);
		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_hex(p, lw->items[lw->order[g->first + i]].addr);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "], \"referenced_from\": ");
	if (g->ref.at == 0) {
		gmt__json_str(o, "null}");
		return;
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "{\"address\": ");
	p = gmt__put_hex(p, g->ref.at);
	p = gmt__put_lit(p, ", \"value\": ");
	p = gmt__put_hex(p, g->ref_value);
	p = gmt__put_lit(p, ", \"region\": \"");
	p = gmt__put_lit(p, gmt__ref_region_name(g->ref.region));
	p = gmt__put_lit(p, "\", \"what\": ");
	gmt__json_commit(o, p);
	gmt__leakcheck_where(cache, g, text, sizeof(text));
	gmt__json_string(o, text);
	gmt__json_str(o, "}}");
}

static void out_leak_total(struct gmt__json *o, const char *name, uint64_t count, uint64_t bytes, bool first)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, first ? "\"" : ", \"");
	p = gmt__put_lit(p, name);
	p = gmt__put_lit(p, "\": {\"count\": ");
	p = gmt__put_u64(p, count);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, bytes);
	p = gmt__put_lit(p, "}");
	gmt__json_commit(o, p);
}

static void out_leaks(struct gmt__json *o, struct gmt__frame_cache *cache, const struct gmt__leak_work *lw)
{
	const struct gmt__snapshot_leaks *in = lw->in;
	const struct gmt__supp *supp = in->supp;
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES), sec[32];
	bool any = false;

	p = gmt__put_lit(p, ",\n \"leaks\": {\"scan\": {\"done\": ");
	p = gmt__put_lit(p, lw->scan.done ? "true" : "false");
	p = gmt__put_lit(p, ", \"why\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, lw->scan.done ? NULL : lw->scan.why);
	gmt__json_str(o, ", \"unseen\": ");
	gmt__json_string_or_null(o, lw->scan.unseen);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"mappings\": ");
	p = gmt__put_u64(p, lw->scan.mappings);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, lw->scan.bytes);
	p = gmt__put_lit(p, ", \"excluded_bytes\": ");
	p = gmt__put_u64(p, lw->scan.excluded);
	p = gmt__put_lit(p, ", \"walked_bytes\": ");
	p = gmt__put_u64(p, lw->scan.walked);
	p = gmt__put_lit(p, ", \"bookkeeping_modules\": [");
	gmt__json_commit(o, p);
	for (unsigned i = 0; i < lw->scan.nmodules && i < GMT_SCAN_MODULES; i++) {
		if (i > 0)
			gmt__json_str(o, ", ");
		gmt__json_string(o, lw->scan.modules[i]);
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "]");
	snprintf(sec, sizeof(sec), "%.6f", lw->scan.seconds);
	p = gmt__put_lit(p, ", \"seconds\": ");
	p = gmt__put_lit(p, sec);
	p = gmt__put_lit(p, "},\n  \"classes\": [");
	for (int c = 0; c < GMT_LEAK_CLASS_COUNT; c++) {
		if (!(in->classes & (1u << c)))
			continue;
		p = gmt__put_lit(p, any ? ", \"" : "\"");
		p = gmt__put_lit(p, gmt__leak_class_names[c]);
		p = gmt__put_lit(p, "\"");
		any = true;
	}
	p = gmt__put_lit(p, "], \"exit_status\": ");
	p = in->exit_status >= 0 ? gmt__put_i64(p, in->exit_status) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"suppressions_error\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, in->supp_error);
	gmt__json_str(o, ",\n  \"totals\": {");
	for (int c = 0; c < GMT_LEAK_CLASS_COUNT; c++)
		out_leak_total(o, gmt__leak_class_names[c], lw->total_count[c], lw->total_bytes[c], c == 0);
	out_leak_total(o, "suppressed", lw->total_count[TOTAL_SUPPRESSED], lw->total_bytes[TOTAL_SUPPRESSED], false);
	out_leak_total(o, "counted", lw->total_count[TOTAL_COUNTED], lw->total_bytes[TOTAL_COUNTED], false);
	gmt__json_str(o, "},\n  \"sites\": [");
	for (size_t i = 0; i < lw->ngroups && o->err == 0; i++)
		out_leak_group(o, cache, lw, &lw->groups[i], i == 0);
	gmt__json_str(o, lw->ngroups > 0 ? "\n  ],\n  \"suspects\": [" : "],\n  \"suspects\": [");
	for (int i = 0; i < lw->nsuspects; i++) {
		const struct gmt__leak_suspect *x = &lw->suspects[i];

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ", {\"stack\": " : "{\"stack\": ");
		p = gmt__put_u64(p, x->id);
		p = gmt__put_lit(p, ", \"live_bytes\": ");
		p = gmt__put_u64(p, x->live);
		p = gmt__put_lit(p, ", \"peak_bytes\": ");
		p = gmt__put_u64(p, x->peak);
		p = gmt__put_lit(p, ", \"growth_bytes\": ");
		p = gmt__put_u64(p, x->growth);
		p = gmt__put_lit(p, ", \"rising_windows\": ");
		p = gmt__put_u64(p, x->rises);
		p = gmt__put_lit(p, ", \"falling_windows\": ");
		p = gmt__put_u64(p, x->falls);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "],\n  \"suppressions\": [");
	any = false;
	for (size_t r = 0; supp != NULL && r < supp->n; r++) {
		char text[320];

		if (lw->rule_hits[r] == 0)
			continue;
		gmt__json_str(o, any ? ", {\"rule\": " : "{\"rule\": ");
		gmt__supp_rule_text(&supp->v[r], text, sizeof(text));
		gmt__json_string(o, text);
		gmt__json_str(o, ", \"source\": ");
		gmt__json_string(o, supp->v[r].source);
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"line\": ");
		p = supp->v[r].line > 0 ? gmt__put_i64(p, supp->v[r].line) : gmt__put_lit(p, "null");
		p = gmt__put_lit(p, ", \"hits\": ");
		p = gmt__put_u64(p, lw->rule_hits[r]);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, lw->rule_bytes[r]);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
		any = true;
	}
	gmt__json_str(o, "]}\n");
}

/* The document of the model, streamed to o. */
static void render(struct gmt__json *o, const struct gmt__snapshot *s, struct gmt__model *d,
		   const struct gmt__api_table *apis)
{
	out_header(o, s, d->view);
	gmt__json_str(o, " \"allocations\": [");
	out_section(o, d->live, d->hi0, apis, &d->tensors);
	gmt__json_str(o, "],\n \"vmm\": {\"reservations\": [");
	out_section(o, d->live + d->hi0, d->hi1 - d->hi0, apis, NULL);
	gmt__json_str(o, "], \"mappings\": [");
	out_section(o, d->live + d->hi1, d->nlive - d->hi1, apis, NULL);
	gmt__json_str(o, "]},\n");
	if (d->framework != NULL)
		gmt__doc_framework(o, d);
	gmt__doc_tensors(o, d);
	if (s->history != NULL) {
		out_sites(o, s->history, d->sites, d->nsites);
		gmt__json_str(o, " \"series\": ");
		gmt__doc_series(o, s->history, s->time_ns);
		gmt__json_str(o, ",\n");
		out_history(o, s->history, apis);
	}
	out_stacks(o, &d->cache, &d->ids, d->nids, &d->stack_sites, &d->tensors);
	if (s->leaks != NULL)
		out_leaks(o, &d->cache, &d->lw);
	gmt__json_str(o, "}\n");
	gmt__json_flush(o);
}

int gmt__doc_render(struct gmt__json *o, const struct gmt__snapshot *s, struct gmt__model *m)
{
	struct gmt__api_table apis = { 0 };
	int r = api_table_init(&apis, s);

	if (r == 0) {
		render(o, s, m, &apis);
		r = o->err;
	}
	api_table_free(&apis);
	return r;
}
