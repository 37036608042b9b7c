/* What a snapshot derives from its live set (view.h): pages and
 * fragmentation per device, the growing sites with memory there, and the
 * diagnosis's numbers. Pure: no lock, no I/O. */
#define _GNU_SOURCE
#include "analyze/view.h"

#include "analyze/diagnose.h"
#include "record/event.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Page occupancy of one device, built from its allocations in address order. */
struct page_walk {
	uint64_t page; /* the page being filled, valid when open */
	uint64_t used; /* its bytes covered so far */
	uint64_t end;  /* where the last allocation in it ends */
	bool open;
};

static void hole(struct gmt__pages *pg, uint64_t bytes)
{
	if (bytes > pg->largest_hole)
		pg->largest_hole = bytes;
}

static void page_close(struct gmt__pages *pg, struct page_walk *w)
{
	if (!w->open)
		return;
	pg->pages++;
	if (w->used < pg->granularity) {
		hole(pg, (w->page + 1) * pg->granularity - w->end);
		pg->partial++;
		pg->stranded_bytes += pg->granularity - w->used;
		pg->histogram[w->used * 4 / pg->granularity]++;
	} else {
		pg->histogram[4]++;
	}
	w->open = false;
}

/* Adds [addr, addr + size) to the walk. Allocations do not overlap and come
 * in address order. */
static void page_add(struct gmt__pages *pg, struct page_walk *w, uint64_t addr, uint64_t size)
{
	uint64_t g = pg->granularity, end = addr + size, first = addr / g, last = (end - 1) / g;

	if (size == 0 || end < addr)
		return;
	if (w->open && w->page != first)
		page_close(pg, w);
	if (!w->open) {
		w->page = first;
		w->used = 0;
		w->end = first * g;
		w->open = true;
	}
	hole(pg, addr - w->end);
	w->end = end;
	if (first == last) {
		w->used += size;
		return;
	}
	w->used += (first + 1) * g - addr;
	w->end = (first + 1) * g; /* it runs to the end of its first page */
	page_close(pg, w);
	/* The pages wholly inside, then the last one, open. */
	pg->pages += last - first - 1;
	pg->histogram[4] += last - first - 1;
	w->page = last;
	w->used = end - last * g;
	w->end = end;
	w->open = true;
}

static int device_slot_of(const struct gmt__snapshot *s, int device)
{
	for (int i = 0; i < s->ndevices; i++) {
		if (s->devices[i].index == device)
			return i;
	}
	return -1;
}

/* The growing sites with live memory on device `slot`, for the diagnosis:
 * their growth summed, the largest kept by id. */
static void growth_on_device(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
			     int device, struct gmt__view *view)
{
	const struct gmt__history *h = s->history;
	uint64_t best[8] = { 0 };
	uint8_t *seen;

	if (h == NULL || h->nsites == 0)
		return;
	seen = calloc(h->nsites / 8 + 1, 1);
	if (seen == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct gmt__site *site;
		uint32_t id = v[i]->stack, rises, falls;
		uint64_t growth;
		int at;

		if (v[i]->device != device || id >= h->nsites || (seen[id / 8] & (1u << (id % 8))))
			continue;
		seen[id / 8] |= (uint8_t)(1u << (id % 8));
		site = gmt__history_site(h, id);
		if (site == NULL || !gmt__site_growing(h, site, &rises, &falls, &growth))
			continue;
		view->diag_in.growth_bytes += growth;
		view->diag_in.growth_sites++;
		if (growth > view->diag_in.growth_top_bytes) {
			view->diag_in.growth_top_bytes = growth;
			view->diag_in.growth_top_stack = id;
			view->diag_in.growth_top_step_bytes =
				gmt__site_step_growth(h, site, &view->diag_in.growth_top_steps);
		}
		/* Insertion into the 8 largest, largest first. */
		for (at = view->ngrowth_ids; at > 0 && best[at - 1] < growth; at--)
			;
		if (at < 8) {
			int last = view->ngrowth_ids < 8 ? view->ngrowth_ids : 7;

			for (int k = last; k > at; k--) {
				best[k] = best[k - 1];
				view->growth_ids[k] = view->growth_ids[k - 1];
			}
			best[at] = growth;
			view->growth_ids[at] = id;
			if (view->ngrowth_ids < 8)
				view->ngrowth_ids++;
		}
	}
	free(seen);
}

static int by_stack_id(const void *a, const void *b)
{
	uint32_t x = (*(const struct gmt__entry *const *)a)->stack, y = (*(const struct gmt__entry *const *)b)->stack;

	return x < y ? -1 : x > y;
}

/* The stack holding the most live memory on `device`, and with step
 * markers the live memory allocated there since the latest. */
static void own_on_device(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n, int device,
			  struct gmt__diag_input *in)
{
	const struct gmt__history *h = s->history;
	const struct gmt__entry **mine = malloc((n ? n : 1) * sizeof(*mine));
	size_t m = 0;

	if (h != NULL && h->stepped) {
		in->step_known = true;
		in->step = h->step;
		in->steps = h->round[GMT_SCALE_STEPS];
	}
	for (size_t i = 0; i < n; i++) {
		if (v[i]->device != device || v[i]->kind == GMT_KIND_MANAGED)
			continue;
		/* link: the seq of the event that made the entry (table.h) */
		if (in->step_known && !in->step_from_framework && v[i]->link >= h->step_seq)
			in->step_live_bytes += v[i]->size;
		if (mine != NULL && v[i]->stack != 0)
			mine[m++] = v[i];
	}
	if (mine == NULL)
		return;
	qsort(mine, m, sizeof(*mine), by_stack_id);
	for (size_t i = 0, j; i < m; i = j) {
		uint64_t bytes = 0;

		for (j = i; j < m && mine[j]->stack == mine[i]->stack; j++)
			bytes += mine[j]->size;
		if (bytes > in->largest_stack_bytes) {
			in->largest_stack_bytes = bytes;
			in->largest_stack = mine[i]->stack;
		}
	}
	free(mine);
}

static uint64_t json_u64(const json_t *o, const char *key, bool *ok)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		*ok = false;
		return 0;
	}
	return (uint64_t)json_integer_value(v);
}

/* The name of a framework the diagnosis knows by name (its remedies), or
 * NULL. */
static const char *known_framework(const char *name)
{
	static const char *const known[] = { "torch", "cupy", "jax" };

	for (size_t i = 0; name != NULL && i < sizeof(known) / sizeof(known[0]); i++) {
		if (strcmp(name, known[i]) == 0)
			return known[i];
	}
	return NULL;
}

/* What a framework's allocator state (s->framework, checked JSON) says of
 * `device`: its counters, and the request its out-of-memory observer was
 * told of when it was on that device. */
static void framework_on_device(const char *text, int device, struct gmt__diag_input *in)
{
	json_t *doc = json_loads(text, 0, NULL), *d, *oom;
	size_t i;

	if (doc == NULL)
		return;
	json_array_foreach(json_object_get(doc, "devices"), i, d) {
		bool ok = true;
		uint64_t dev = json_u64(d, "device", &ok);

		if (!ok || dev != (uint64_t)device)
			continue;
		in->fw_name = known_framework(json_string_value(json_object_get(doc, "name")));
		in->fw_torch = in->fw_name != NULL && strcmp(in->fw_name, "torch") == 0;
		if (json_is_integer(json_object_get(d, "step_allocated_bytes"))) {
			bool step_ok = true;
			uint64_t now = json_u64(d, "allocated_bytes", &step_ok), then = json_u64(d, "step_allocated_bytes", &step_ok);

			if (step_ok) {
				in->step_from_framework = true;
				in->step_live_bytes = now > then ? now - then : 0;
			}
		}
		in->fw_allocated = json_u64(d, "allocated_bytes", &ok);
		in->fw_reserved_unallocated = json_u64(d, "reserved_unallocated_bytes", &ok);
		in->fw_known = ok;
		in->fw_largest_known = true;
		in->fw_largest_free = json_u64(d, "largest_free_block_bytes", &in->fw_largest_known);
		if (json_is_integer(json_object_get(d, "limit_bytes"))) {
			bool limit_ok = true;

			in->fw_limit = json_u64(d, "limit_bytes", &limit_ok);
		}
		break;
	}
	/* Expandable when any of its segments there is, not when it has
	 * segments and none is. */
	json_array_foreach(json_object_get(doc, "segments"), i, d) {
		bool ok = true;
		uint64_t dev = json_u64(d, "device", &ok);

		if (!ok || dev != (uint64_t)device)
			continue;
		if (json_is_true(json_object_get(d, "is_expandable")))
			in->fw_expandable = 1;
		else if (in->fw_expandable < 0)
			in->fw_expandable = 0;
	}
	oom = json_object_get(doc, "oom");
	if (json_is_object(oom)) {
		bool ok = true;
		uint64_t dev = json_u64(oom, "device", &ok), req = json_u64(oom, "requested_bytes", &ok);

		if (ok && dev == (uint64_t)device)
			in->fw_requested = req;
	}
	json_decref(doc);
}

void gmt__view_build(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
		     struct gmt__view *view)
{
	struct page_walk walks[GMT_SNAPSHOT_MAX_DEVICES] = { 0 };
	int ndev = s->ndevices < GMT_SNAPSHOT_MAX_DEVICES ? s->ndevices : GMT_SNAPSHOT_MAX_DEVICES;

	memset(view, 0, sizeof(*view));
	for (int i = 0; i < ndev; i++) {
		const struct gmt__device_state *st = s->devices[i].state;

		view->pages[i].granularity_known = st != NULL && st->have_granularity;
		view->pages[i].granularity = view->pages[i].granularity_known ? st->granularity : GMT_DEFAULT_GRANULARITY;
	}
	for (size_t i = 0; i < n; i++) {
		int d = device_slot_of(s, v[i]->device);

		if (d < 0 || d >= ndev)
			continue;
		view->kinds[d][v[i]->kind < GMT_KIND_COUNT ? v[i]->kind : 0] += v[i]->size;
		if (v[i]->size > 0) {
			int k = 63 - __builtin_clzll(v[i]->size);

			view->class_count[d][k]++;
			view->class_bytes[d][k] += v[i]->size;
		}
		if (v[i]->kind == GMT_KIND_DEVICE && v[i]->space == GMT_SPACE_MEMORY)
			page_add(&view->pages[d], &walks[d], v[i]->addr, v[i]->size);
	}
	for (int i = 0; i < ndev; i++)
		page_close(&view->pages[i], &walks[i]);

	if (s->failed != NULL) {
		int d = device_slot_of(s, s->failed->device);

		if (d < 0 || d >= ndev)
			return;
		view->diag_in.requested = s->failed->size;
		view->diag_in.device = s->failed->device;
		view->diag_in.state = s->devices[d].state;
		memcpy(view->diag_in.tracked, view->kinds[d], sizeof(view->diag_in.tracked));
		view->diag_in.pages = view->pages[d];
		view->diag_in.fw_expandable = -1;
		growth_on_device(s, v, n, s->failed->device, view);
		if (s->framework != NULL)
			framework_on_device(s->framework, s->failed->device, &view->diag_in);
		own_on_device(s, v, n, s->failed->device, &view->diag_in);
		if (s->episode != NULL) {
			view->diag_in.episode_failures = s->episode->failures;
			view->diag_in.released_bytes = s->episode->freed_bytes;
			view->diag_in.released_count = s->episode->freed_count;
		}
		gmt__diagnose(&view->diag_in, &view->diag);
		view->have_diagnosis = true;
	}
}
