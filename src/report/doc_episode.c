/* The document's "episode" section (docs/snapshot-format.md): the
 * out-of-memory episode an "oom" snapshot belongs to — its failures, listed,
 * and the memory freed during it, by the stack that had allocated it. */
#define _GNU_SOURCE
#include "report/document.h"

#include <stdlib.h>

/* The sites of freed memory by bytes, largest first (then by stack). */
static int by_bytes_desc(const void *x, const void *y)
{
	const struct gmt__episode_site *a = *(const struct gmt__episode_site *const *)x;
	const struct gmt__episode_site *b = *(const struct gmt__episode_site *const *)y;

	if (a->bytes != b->bytes)
		return a->bytes < b->bytes ? 1 : -1;
	return (a->stack > b->stack) - (a->stack < b->stack);
}

static void put_failure(struct gmt__json *o, const struct gmt__snapshot *s, const struct gmt__episode_failure *f,
			bool first)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, first ? "\n   {\"failure\": " : ",\n   {\"failure\": ");
	p = gmt__put_u64(p, f->failure);
	p = gmt__put_lit(p, ", \"time_ns\": ");
	p = gmt__put_u64(p, f->time_ns);
	p = gmt__put_lit(p, ", \"api\": ");
	gmt__json_commit(o, p);
	gmt__json_string(o, f->api < s->napi && s->api_names[f->api] != NULL ? s->api_names[f->api] : "unknown");
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"size\": ");
	p = gmt__put_u64(p, f->size);
	p = gmt__put_lit(p, ", \"kind\": \"");
	p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)f->kind));
	p = gmt__put_lit(p, "\", \"stack\": ");
	p = gmt__put_u64(p, f->stack);
	p = gmt__put_lit(p, ", \"live_bytes\": ");
	p = gmt__put_u64(p, f->live_bytes);
	p = gmt__put_lit(p, ", \"freed_bytes\": ");
	p = gmt__put_u64(p, f->freed_bytes);
	p = gmt__put_lit(p, ", \"freed_count\": ");
	p = gmt__put_u64(p, f->freed_count);
	gmt__json_commit(o, p);
	gmt__doc_thread(o, f->tid, f->thread);
	gmt__json_str(o, "}");
}

void gmt__doc_thread(struct gmt__json *o, uint32_t tid, const char *name)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, ", \"thread\": {\"tid\": ");
	p = tid != 0 ? gmt__put_u64(p, tid) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"name\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, name[0] != '\0' ? name : NULL);
	gmt__json_str(o, "}");
}

void gmt__doc_episode(struct gmt__json *o, const struct gmt__snapshot *s)
{
	const struct gmt__episode *ep = s->episode;
	const struct gmt__episode_site *order[GMT_EPISODE_SITES];
	char *p = gmt__json_room(o, 2 * GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, " \"episode\": {\"id\": ");
	p = gmt__put_u64(p, ep->id);
	p = gmt__put_lit(p, ", \"device\": ");
	p = gmt__put_i64(p, ep->device);
	p = gmt__put_lit(p, ", \"failures\": ");
	p = gmt__put_u64(p, ep->failures);
	p = gmt__put_lit(p, ", \"described\": ");
	p = gmt__put_u64(p, ep->described);
	p = gmt__put_lit(p, ", \"end\": \"");
	p = gmt__put_lit(p, gmt__episode_end_name(ep->end));
	p = gmt__put_lit(p, "\", \"first_ns\": ");
	p = gmt__put_u64(p, ep->first_ns);
	p = gmt__put_lit(p, ", \"last_ns\": ");
	p = gmt__put_u64(p, ep->last_ns);
	p = gmt__put_lit(p, ", \"not_written\": ");
	p = gmt__put_u64(p, ep->not_written);
	p = gmt__put_lit(p, ", \"left_out\": ");
	p = gmt__put_u64(p, ep->left_out);
	p = gmt__put_lit(p, ",\n  \"freed\": {\"bytes\": ");
	p = gmt__put_u64(p, ep->freed_bytes);
	p = gmt__put_lit(p, ", \"count\": ");
	p = gmt__put_u64(p, ep->freed_count);
	p = gmt__put_lit(p, ", \"other_bytes\": ");
	p = gmt__put_u64(p, ep->other_bytes);
	p = gmt__put_lit(p, ", \"other_count\": ");
	p = gmt__put_u64(p, ep->other_count);
	p = gmt__put_lit(p, ", \"sites\": [");
	gmt__json_commit(o, p);
	for (int i = 0; i < ep->nsites; i++)
		order[i] = &ep->sites[i];
	qsort(order, (size_t)ep->nsites, sizeof(order[0]), by_bytes_desc);
	for (int i = 0; i < ep->nsites; i++) {
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ",\n   {\"stack\": " : "\n   {\"stack\": ");
		p = gmt__put_u64(p, order[i]->stack);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)order[i]->kind));
		p = gmt__put_lit(p, "\", \"bytes\": ");
		p = gmt__put_u64(p, order[i]->bytes);
		p = gmt__put_lit(p, ", \"count\": ");
		p = gmt__put_u64(p, order[i]->count);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]},\n  \"listed\": [");
	for (int i = 0; i < ep->nlisted; i++)
		put_failure(o, s, &ep->listed[i], i == 0);
	gmt__json_str(o, "]},\n");
}
