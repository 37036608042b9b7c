/* The document's "tensors" section (docs/snapshot-format.md): the
 * framework's level of the model (analyze/tensors.h) — each device's live
 * bytes by level, the live tensors with their stacks, their history's reach
 * and the latest step's tensors, and the tensor sites with the growth the
 * replay judged. Rendering only. */
#define _GNU_SOURCE
#include "report/document.h"

#include <stdio.h>

static void out_devices(struct gmt__json *o, const struct gmt__tensors *t)
{
	gmt__json_str(o, ",\n  \"devices\": [");
	for (int i = 0; i < t->ndev; i++) {
		const struct gmt__tensor_device *d = &t->dev[i];
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		p = gmt__put_lit(p, i ? ", {\"device\": " : "{\"device\": ");
		p = gmt__put_i64(p, d->device);
		p = gmt__put_lit(p, ", \"tensor_bytes\": ");
		p = gmt__put_u64(p, d->tensor_bytes);
		p = gmt__put_lit(p, ", \"tensor_count\": ");
		p = gmt__put_u64(p, d->tensor_count);
		p = gmt__put_lit(p, ", \"cached_bytes\": ");
		p = gmt__put_u64(p, d->cached_bytes);
		p = gmt__put_lit(p, ", \"reserved_bytes\": ");
		p = gmt__put_u64(p, d->reserved_bytes);
		p = gmt__put_lit(p, ", \"segment_bytes\": ");
		p = gmt__put_u64(p, d->segment_bytes);
		p = gmt__put_lit(p, ", \"other_bytes\": ");
		p = gmt__put_u64(p, d->other_bytes);
		p = gmt__put_lit(p, ", \"live_bytes\": ");
		p = gmt__put_u64(p, d->live_bytes);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]");
}

static void out_tensors(struct gmt__json *o, const struct gmt__tensors *t)
{
	gmt__json_str(o, ",\n  \"allocations\": [");
	for (size_t i = 0; i < t->n && o->err == 0; i++) {
		const struct gmt__tensor *x = &t->v[i];
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		p = gmt__put_lit(p, i ? ",\n   {\"address\": " : "\n   {\"address\": ");
		p = gmt__put_hex(p, x->addr);
		p = gmt__put_lit(p, ", \"size\": ");
		p = gmt__put_u64(p, x->size);
		p = gmt__put_lit(p, ", \"requested_size\": ");
		p = gmt__put_u64(p, x->requested);
		p = gmt__put_lit(p, ", \"device\": ");
		p = gmt__put_i64(p, x->device);
		p = gmt__put_lit(p, ", \"segment\": ");
		p = gmt__put_hex(p, x->segment);
		p = gmt__put_lit(p, ", \"stream\": ");
		p = gmt__put_hex(p, x->stream);
		p = gmt__put_lit(p, ", \"time_ns\": ");
		p = gmt__put_u64_or_null(p, x->time_ns != 0, x->time_ns);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, gmt__tensor_stack_id(x->stack));
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, t->n > 0 ? "\n  ]" : "]");
}

void gmt__doc_tensors(struct gmt__json *o, const struct gmt__model *m)
{
	const struct gmt__tensors *t = &m->tensors;
	bool replayed = t->history != NULL, timed = t->first_ns != 0;
	char *p;

	if (!t->known)
		return;
	gmt__json_str(o, " \"tensors\": {\"framework\": ");
	gmt__json_string_or_null(o, t->framework);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"stack_base\": ");
	p = gmt__put_u64(p, GMT_TENSOR_STACK_BASE);
	p = gmt__put_lit(p, ",\n  \"history\": ");
	if (replayed) {
		p = gmt__put_lit(p, "{\"events\": ");
		p = gmt__put_u64(p, t->events);
		p = gmt__put_lit(p, ", \"seeded\": ");
		p = gmt__put_u64(p, t->seeded);
		p = gmt__put_lit(p, t->complete ? ", \"complete\": true" : ", \"complete\": false");
		p = gmt__put_lit(p, ", \"first_ns\": ");
		p = gmt__put_u64_or_null(p, timed, t->first_ns);
		p = gmt__put_lit(p, ", \"last_ns\": ");
		p = gmt__put_u64_or_null(p, timed, t->last_ns);
		p = gmt__put_lit(p, ", \"steps\": ");
		p = gmt__put_u64(p, t->steps);
		p = gmt__put_lit(p, "}");
	} else {
		p = gmt__put_lit(p, "null");
	}
	p = gmt__put_lit(p, ", \"step\": ");
	if (t->step_known) {
		p = gmt__put_lit(p, "{\"step\": ");
		p = gmt__put_u64(p, t->step);
		p = gmt__put_lit(p, ", \"time_ns\": ");
		p = gmt__put_u64(p, t->step_ns);
		p = gmt__put_lit(p, ", \"tensor_bytes\": ");
		p = gmt__put_u64(p, t->step_bytes);
		p = gmt__put_lit(p, ", \"tensor_count\": ");
		p = gmt__put_u64(p, t->step_count);
		p = gmt__put_lit(p, "}");
	} else {
		p = gmt__put_lit(p, "null");
	}
	gmt__json_commit(o, p);
	out_devices(o, t);
	out_tensors(o, t);
	/* The replayed history's live tensor bytes over its time, by device. */
	if (replayed && timed) {
		gmt__json_str(o, ",\n  \"series\": ");
		gmt__doc_series(o, t->history, t->last_ns);
	}
	gmt__json_str(o, ",\n  \"sites\": [");
	if (replayed)
		gmt__doc_site_list(o, t->history, t->sites, t->nsites, true);
	gmt__json_str(o, t->nsites > 0 && replayed ? "\n  ]},\n" : "]},\n");
}
