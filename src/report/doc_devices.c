/* The document's "process", "devices" (with pages and fragmentation) and
 * "diagnosis" sections. */
#define _GNU_SOURCE
#include "report/document.h"

#include "analyze/diagnose.h"
#include "analyze/remedy.h"
#include "analyze/replay.h"
#include "record/event.h"

#include <string.h>

_Static_assert(GMT_KIND_COUNT <= 32, "a kind is a bit of an unsigned");

char *gmt__put_kinds(char *p, const uint64_t *v, unsigned shown)
{
	*p++ = '{';
	for (int k = 0, any = 0; k < GMT_KIND_COUNT; k++) {
		if (!(shown & 1u << k))
			continue;
		p = gmt__put_lit(p, any++ ? ", \"" : "\"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)k));
		p = gmt__put_lit(p, "\": ");
		p = gmt__put_u64(p, v[k]);
	}
	*p++ = '}';
	return p;
}

unsigned gmt__kinds_nonzero(const uint64_t *v)
{
	unsigned shown = 0;

	for (int k = 0; k < GMT_KIND_COUNT; k++)
		shown |= (v[k] != 0 ? 1u : 0u) << k;
	return shown;
}

void gmt__doc_process(struct gmt__json *o, const struct gmt__snapshot *s)
{
	const struct gmt__snapshot_process *pr = s->process;
	char *p;

	if (pr == NULL)
		return;
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, " \"process\": {\"pid\": ");
	p = gmt__put_i64(p, s->pid);
	p = gmt__put_lit(p, ", \"ppid\": ");
	p = gmt__put_i64(p, pr->ppid);
	p = gmt__put_lit(p, ", \"host\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, pr->host);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"rank\": ");
	p = pr->rank >= 0 ? gmt__put_i64(p, pr->rank) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"local_rank\": ");
	p = pr->local_rank >= 0 ? gmt__put_i64(p, pr->local_rank) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"world_size\": ");
	p = pr->world_size >= 0 ? gmt__put_i64(p, pr->world_size) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"rank_variable\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, pr->rank_variable);
	gmt__json_str(o, "},\n");
}

/* Fragmentation at a glance: what is free, what a request could get, what
 * pools keep, and the live allocations by size class. */
static char *put_fragmentation(char *p, const struct gmt__device_state *st, const struct gmt__pages *pg,
			       const uint64_t *count, const uint64_t *bytes)
{
	bool mem = st != NULL && st->have_mem, pools = st != NULL && st->have_pools;
	uint64_t g = pg->granularity, whole = mem ? st->free_bytes / g * g : 0;
	bool any = false;

	p = gmt__put_lit(p, ", \"fragmentation\": {\"free_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"free_in_whole_pages\": ");
	p = gmt__put_u64_or_null(p, mem, whole);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, pg->stranded_bytes);
	p = gmt__put_lit(p, ", \"largest_hole_bytes\": ");
	p = gmt__put_u64(p, pg->largest_hole);
	p = gmt__put_lit(p, ", \"largest_fit_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, whole > pg->largest_hole ? whole : pg->largest_hole);
	p = gmt__put_lit(p, ", \"pool_unused_bytes\": ");
	p = gmt__put_u64_or_null(p, pools, pools && st->pool_reserved > st->pool_used ? st->pool_reserved - st->pool_used : 0);
	p = gmt__put_lit(p, ", \"size_classes\": [");
	for (int k = 0; k < SIZE_CLASSES; k++) {
		if (count[k] == 0)
			continue;
		p = gmt__put_lit(p, any ? ", {\"min\": " : "{\"min\": ");
		p = gmt__put_u64(p, (uint64_t)1 << k);
		p = gmt__put_lit(p, ", \"max\": ");
		p = gmt__put_u64(p, k == 63 ? UINT64_MAX : ((uint64_t)1 << (k + 1)) - 1);
		p = gmt__put_lit(p, ", \"count\": ");
		p = gmt__put_u64(p, count[k]);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, bytes[k]);
		p = gmt__put_lit(p, "}");
		any = true;
	}
	return gmt__put_lit(p, "]}");
}

void gmt__doc_device(struct gmt__json *o, const struct gmt__snapshot_device *d, const struct gmt__pages *pg,
		     const uint64_t *kinds, const uint64_t *class_count, const uint64_t *class_bytes, bool first)
{
	const struct gmt__device_state *st = d->state;
	bool mem = st != NULL && st->have_mem;
	char *p = gmt__json_room(o, 2 * GMT_JSON_RECORD_BYTES + SIZE_CLASSES * 96);

	p = gmt__put_lit(p, first ? "\n  {\"index\": " : ",\n  {\"index\": ");
	p = gmt__put_i64(p, d->index);
	p = gmt__put_lit(p, ", \"total_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, mem ? st->total_bytes : 0);
	p = gmt__put_lit(p, ", \"free_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"live_bytes\": ");
	p = gmt__put_u64(p, d->live_bytes);
	p = gmt__put_lit(p, ", \"kinds\": ");
	p = gmt__put_kinds(p, kinds, gmt__kinds_nonzero(kinds));
	p = gmt__put_lit(p, ", \"pools\": ");
	if (st != NULL && st->have_pools) {
		p = gmt__put_lit(p, "{\"count\": ");
		p = gmt__put_i64(p, st->npools);
		p = gmt__put_lit(p, ", \"reserved_bytes\": ");
		p = gmt__put_u64(p, st->pool_reserved);
		p = gmt__put_lit(p, ", \"used_bytes\": ");
		p = gmt__put_u64(p, st->pool_used);
		p = gmt__put_lit(p, "}");
	} else {
		p = gmt__put_lit(p, "null");
	}
	p = gmt__put_lit(p, ", \"pages\": {\"granularity\": ");
	p = gmt__put_u64(p, pg->granularity);
	p = gmt__put_lit(p, pg->granularity_known ? ", \"granularity_known\": true" : ", \"granularity_known\": false");
	p = gmt__put_lit(p, ", \"pages\": ");
	p = gmt__put_u64(p, pg->pages);
	p = gmt__put_lit(p, ", \"partial\": ");
	p = gmt__put_u64(p, pg->partial);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, pg->stranded_bytes);
	p = gmt__put_lit(p, ", \"occupancy\": [");
	for (int k = 0; k < 5; k++) {
		p = gmt__put_lit(p, k ? ", " : "");
		p = gmt__put_u64(p, pg->histogram[k]);
	}
	p = gmt__put_lit(p, "]}");
	p = put_fragmentation(p, st, pg, class_count, class_bytes);
	p = gmt__put_lit(p, ", \"other_processes\": ");
	gmt__json_commit(o, p);
	if (st == NULL) {
		gmt__json_str(o, "null}");
		return;
	}
	if (!st->have_others) {
		gmt__json_str(o, "{\"known\": false, \"why\": ");
		gmt__json_string_or_null(o, st->others_why);
		gmt__json_str(o, "}}");
		return;
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "{\"known\": true, \"bytes\": ");
	p = gmt__put_u64(p, st->others_bytes);
	p = gmt__put_lit(p, ", \"count\": ");
	p = gmt__put_i64(p, st->nothers);
	p = gmt__put_lit(p, ", \"processes\": [");
	gmt__json_commit(o, p);
	for (int i = 0; i < st->nothers && i < GMT_DEVICE_MAX_OTHERS; i++) {
		p = gmt__json_room(o, 96);
		p = gmt__put_lit(p, i ? ", {\"pid\": " : "{\"pid\": ");
		p = gmt__put_u64(p, st->others[i].pid);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, st->others[i].bytes);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]}}");
}

/* `, "rests_on": [names...]`: the numbers a verdict or remedy reads
 * (NULL-terminated, at most 6: within a record's room). */
static char *put_rests_on(char *p, const char *const *names)
{
	p = gmt__put_lit(p, ", \"rests_on\": [");
	for (int k = 0; names[k] != NULL; k++) {
		p = gmt__put_lit(p, k ? ", \"" : "\"");
		p = gmt__put_lit(p, names[k]);
		p = gmt__put_lit(p, "\"");
	}
	return gmt__put_lit(p, "]");
}

/* The diagnosis's "replay": what the replay of PyTorch's history under its
 * settings with expandable segments said (analyze/replay.h), or null where
 * there was nothing to replay. */
static void doc_replay(struct gmt__json *o, const struct gmt__rp_expandable *rp)
{
	static const char *const request_keys[] = { "number", "bytes" };
	static const char *const failure_keys[] = { "request", "bytes", "reserved_bytes" };
	char *p;

	if (rp == NULL) {
		gmt__json_str(o, "null");
		return;
	}
	gmt__json_str(o, "{\"setting\": ");
	gmt__json_string(o, rp->setting);
	gmt__json_str(o, ", \"replayed\": ");
	gmt__json_str(o, rp->replayed ? "true" : "false");
	gmt__json_str(o, ", \"why\": ");
	gmt__json_string_or_null(o, rp->replayed ? NULL : rp->why);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ",\n   \"device_bytes\": ");
	p = gmt__put_u64_or_null(p, rp->replayed, rp->device_bytes);
	p = gmt__put_lit(p, ", \"fits\": ");
	p = gmt__put_lit(p, !rp->replayed ? "null" : rp->fits ? "true" : "false");
	p = gmt__put_lit(p, ", \"peak_reserved_bytes\": ");
	p = gmt__put_u64_or_null(p, rp->replayed, rp->peak_reserved);
	p = gmt__put_lit(p, ", \"failing_request\": ");
	p = gmt__put_u64_object(p, rp->replayed, request_keys, (const uint64_t[]){ rp->request_no, rp->request_size }, 2);
	p = gmt__put_lit(p, ", \"first_failure\": ");
	p = gmt__put_u64_object(p, rp->replayed && rp->failed, failure_keys,
				(const uint64_t[]){ rp->fail_no, rp->fail_size, rp->fail_reserved }, 3);
	p = gmt__put_lit(p, ", \"assumed\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, rp->replayed && rp->assumed[0] ? rp->assumed : NULL);
	gmt__json_str(o, "}");
}

void gmt__doc_diagnosis(struct gmt__json *o, const struct gmt__view *view)
{
	const struct gmt__diagnosis *d = &view->diag;
	const struct gmt__diag_input *in = &view->diag_in;
	const struct gmt__device_state *st = in->state;
	const struct gmt__rp_expandable *rp = in->replay;
	bool mem = d->have_mem, others = st != NULL && st->have_others, replayed = rp != NULL && rp->replayed;
	char *p;

	gmt__json_str(o, " \"diagnosis\": {\"verdict\": \"");
	gmt__json_str(o, gmt__verdict_name(d->primary));
	gmt__json_str(o, "\", \"summary\": ");
	gmt__json_string(o, d->summary);
	gmt__json_str(o, ",\n  \"verdicts\": [");
	for (int i = 0; i < d->nverdicts; i++) {
		const struct gmt__diag_verdict *v = &d->v[i];

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ",\n   {\"name\": \"" : "\n   {\"name\": \"");
		p = gmt__put_lit(p, gmt__verdict_name(v->verdict));
		p = gmt__put_lit(p, i == 0 ? "\", \"primary\": true, \"bytes\": " : "\", \"primary\": false, \"bytes\": ");
		p = gmt__put_u64(p, v->bytes);
		p = put_rests_on(p, v->rests_on);
		p = gmt__put_lit(p, ", \"detail\": ");
		gmt__json_commit(o, p);
		gmt__json_string(o, v->detail);
		gmt__json_str(o, "}");
	}
	gmt__json_str(o, "],\n  \"remedies\": [");
	for (int i = 0; i < d->nremedies; i++) {
		const struct gmt__remedy *r = &d->remedies[i];

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ",\n   {\"name\": \"" : "\n   {\"name\": \"");
		p = gmt__put_lit(p, gmt__remedy_name(r->id));
		p = gmt__put_lit(p, "\", \"verdict\": \"");
		p = gmt__put_lit(p, gmt__verdict_name(r->verdict));
		p = gmt__put_lit(p, "\", \"bytes\": ");
		p = gmt__put_u64(p, r->bytes);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, r->stack);
		p = put_rests_on(p, r->rests_on);
		p = gmt__put_lit(p, ", \"text\": ");
		gmt__json_commit(o, p);
		gmt__json_string(o, r->text);
		gmt__json_str(o, "}");
	}
	p = gmt__json_room(o, 6 * GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "],\n  \"numbers\": {\"device\": ");
	p = gmt__put_i64(p, in->device);
	p = gmt__put_lit(p, ", \"requested_bytes\": ");
	p = gmt__put_u64(p, in->requested);
	p = gmt__put_lit(p, ", \"needed_bytes\": ");
	p = gmt__put_u64(p, d->needed);
	p = gmt__put_lit(p, ", \"granularity\": ");
	p = gmt__put_u64(p, in->pages.granularity);
	p = gmt__put_lit(p, ", \"total_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, mem ? st->total_bytes : 0);
	p = gmt__put_lit(p, ", \"free_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"used_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, d->used);
	p = gmt__put_lit(p, ", \"shortfall_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, d->shortfall);
	p = gmt__put_lit(p, ",\n   \"tracked_bytes\": ");
	/* every kind of device memory, 0 or not */
	p = gmt__put_kinds(p, in->tracked, ((1u << GMT_KIND_COUNT) - 1) & ~(1u << GMT_KIND_HOST | 1u << GMT_KIND_REGISTERED));
	p = gmt__put_lit(p, ", \"tracked_total_bytes\": ");
	p = gmt__put_u64(p, d->tracked_total);
	p = gmt__put_lit(p, ", \"footprint_bytes\": ");
	p = gmt__put_u64(p, d->footprint);
	p = gmt__put_lit(p, ",\n   \"pool_reserved_bytes\": ");
	p = gmt__put_u64_or_null(p, d->have_pools, d->have_pools ? st->pool_reserved : 0);
	p = gmt__put_lit(p, ", \"pool_used_bytes\": ");
	p = gmt__put_u64_or_null(p, d->have_pools, d->have_pools ? st->pool_used : 0);
	p = gmt__put_lit(p, ", \"pool_unused_bytes\": ");
	p = gmt__put_u64_or_null(p, d->have_pools, d->pool_unused);
	p = gmt__put_lit(p, ", \"other_processes_bytes\": ");
	p = gmt__put_u64_or_null(p, others, others ? st->others_bytes : 0);
	p = gmt__put_lit(p, ", \"untracked_bytes\": ");
	p = gmt__put_u64_or_null(p, d->have_untracked, d->untracked);
	p = gmt__put_lit(p, ", \"capacity_bytes\": ");
	p = gmt__put_u64_or_null(p, mem, d->capacity);
	p = gmt__put_lit(p, ",\n   \"episode_failures\": ");
	p = gmt__put_u64(p, in->episode_failures);
	p = gmt__put_lit(p, ", \"released_bytes\": ");
	p = gmt__put_u64(p, in->released_bytes);
	p = gmt__put_lit(p, ", \"released_count\": ");
	p = gmt__put_u64(p, in->released_count);
	p = gmt__put_lit(p, ",\n   \"framework_requested_bytes\": ");
	p = gmt__put_u64_or_null(p, in->fw_requested > 0, in->fw_requested);
	p = gmt__put_lit(p, ", \"reserved_unallocated_bytes\": ");
	p = gmt__put_u64_or_null(p, in->fw_known, in->fw_reserved_unallocated);
	p = gmt__put_lit(p, ", \"largest_free_block_bytes\": ");
	p = gmt__put_u64_or_null(p, in->fw_largest_known, in->fw_largest_free);
	p = gmt__put_lit(p, ", \"framework_allocated_bytes\": ");
	p = gmt__put_u64_or_null(p, in->fw_known, in->fw_allocated);
	p = gmt__put_lit(p, ", \"framework_limit_bytes\": ");
	p = gmt__put_u64_or_null(p, in->fw_limit > 0, in->fw_limit);
	p = gmt__put_lit(p, ",\n   \"pages\": ");
	p = gmt__put_u64(p, in->pages.pages);
	p = gmt__put_lit(p, ", \"pages_partial\": ");
	p = gmt__put_u64(p, in->pages.partial);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, in->pages.stranded_bytes);
	p = gmt__put_lit(p, ", \"growth_bytes\": ");
	p = gmt__put_u64(p, in->growth_bytes);
	p = gmt__put_lit(p, ", \"growth_sites\": ");
	p = gmt__put_i64(p, in->growth_sites);
	p = gmt__put_lit(p, ", \"growth_stacks\": [");
	for (int i = 0; i < view->ngrowth_ids; i++) {
		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_u64(p, view->growth_ids[i]);
	}
	p = gmt__put_lit(p, "],\n   \"growth_top_stack\": ");
	p = gmt__put_u64(p, in->growth_top_stack);
	p = gmt__put_lit(p, ", \"growth_top_bytes\": ");
	p = gmt__put_u64(p, in->growth_top_bytes);
	p = gmt__put_lit(p, ", \"growth_top_step_bytes\": ");
	p = gmt__put_u64(p, in->growth_top_step_bytes);
	p = gmt__put_lit(p, ", \"growth_top_steps\": ");
	p = gmt__put_u64(p, in->growth_top_steps);
	p = gmt__put_lit(p, ", \"largest_stack\": ");
	p = gmt__put_u64(p, in->largest_stack);
	p = gmt__put_lit(p, ", \"largest_stack_bytes\": ");
	p = gmt__put_u64(p, in->largest_stack_bytes);
	p = gmt__put_lit(p, ", \"largest_stack_before_steps\": ");
	p = gmt__put_lit(p, in->largest_before_steps < 0 ? "null" : in->largest_before_steps ? "true" : "false");
	p = gmt__put_lit(p, ",\n   \"step\": ");
	p = gmt__put_u64_or_null(p, in->step_known, in->step);
	p = gmt__put_lit(p, ", \"steps\": ");
	p = gmt__put_u64(p, in->steps);
	p = gmt__put_lit(p, ", \"step_live_bytes\": ");
	p = gmt__put_u64_or_null(p, in->step_known, in->step_live_bytes);
	p = gmt__put_lit(p, ", \"step_live_source\": ");
	p = gmt__put_lit(p, !in->step_known	       ? "null"
			    : in->step_tensors	       ? "\"tensors\""
			    : in->step_from_framework ? "\"framework\""
						       : "\"driver\"");
	p = gmt__put_lit(p, ", \"framework_expandable\": ");
	p = gmt__put_lit(p, in->fw_expandable < 0 ? "null" : in->fw_expandable ? "true" : "false");
	p = gmt__put_lit(p, ",\n   \"replay_fits\": ");
	p = gmt__put_lit(p, !replayed ? "null" : rp->fits ? "true" : "false");
	p = gmt__put_lit(p, ", \"replay_peak_reserved_bytes\": ");
	p = gmt__put_u64_or_null(p, replayed, replayed ? rp->peak_reserved : 0);
	p = gmt__put_lit(p, ", \"replay_device_bytes\": ");
	p = gmt__put_u64_or_null(p, replayed, replayed ? rp->device_bytes : 0);
	p = gmt__put_lit(p, "},\n  \"replay\": ");
	gmt__json_commit(o, p);
	doc_replay(o, rp);
	gmt__json_str(o, "},\n");
}
