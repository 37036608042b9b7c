/* What a snapshot derives from its live set (view.h): pages and
 * fragmentation per device, the growing sites with memory there, and the
 * diagnosis's numbers. Pure: no lock, no I/O. */
#define _GNU_SOURCE
#include "analyze/view.h"

#include "analyze/diagnose.h"
#include "analyze/jsonval.h"
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

/* Notes one growing site (document stack id) for the diagnosis: its growth
 * summed, the one that gained most, the 8 largest kept by id. unlined: the
 * framework's tensors its history gave no lines of (stack 0). */
static void note_growth(struct gmt__view *view, uint64_t *best, uint32_t id, uint64_t growth,
			const struct gmt__history *h, const struct gmt__site *site, bool unlined)
{
	int at;

	view->diag_in.growth_bytes += growth;
	view->diag_in.growth_sites++;
	if (growth > view->diag_in.growth_top_bytes) {
		view->diag_in.growth_top_bytes = growth;
		view->diag_in.growth_top_stack = id;
		view->diag_in.growth_top_unlined = unlined;
		view->diag_in.growth_top_step_bytes = gmt__site_step_growth(h, site, &view->diag_in.growth_top_steps);
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

/* The growing sites with live memory on `device`, for the diagnosis. With
 * a framework's tensors known, its segments are the allocator's business:
 * the driver's sites count for the memory that is not the framework's, and
 * the tensors' sites (their replayed history) for the rest. */
static void growth_on_device(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
			     int device, const struct gmt__tensors *t, struct gmt__view *view)
{
	const struct gmt__history *h = s->history;
	uint64_t best[8] = { 0 };
	uint8_t *seen;

	if (t->known && t->history != NULL) {
		/* [0] is the stack of no frames: others mean lines were recorded */
		view->diag_in.tensors_lined = t->nstacks > 1;
		seen = calloc(t->nstacks / 8 + 1, 1);
		for (size_t i = 0; seen != NULL && i < t->n; i++) {
			const struct gmt__site *site;
			uint32_t id = t->v[i].stack, rises, falls;
			uint64_t growth;

			if (t->v[i].device != device || (seen[id / 8] & (1u << (id % 8))))
				continue;
			seen[id / 8] |= (uint8_t)(1u << (id % 8));
			/* Stack 0: tensors without lines (GPUMEMTRACE_TORCH_HISTORY=events):
			 * their growth is still PyTorch's, told without a line. */
			site = gmt__history_site(t->history, id);
			if (site != NULL && gmt__site_growing(t->history, site, &rises, &falls, &growth))
				note_growth(view, best, gmt__tensor_stack_id(id), growth, t->history, site, id == 0);
		}
		free(seen);
	}
	if (h == NULL || h->nsites == 0)
		return;
	seen = calloc(h->nsites / 8 + 1, 1);
	if (seen == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct gmt__site *site;
		uint32_t id = v[i]->stack, rises, falls;
		uint64_t growth;

		if (v[i]->device != device || id >= h->nsites || (seen[id / 8] & (1u << (id % 8))) ||
		    (t->known && gmt__tensors_backs(t, v[i])))
			continue;
		seen[id / 8] |= (uint8_t)(1u << (id % 8));
		site = gmt__history_site(h, id);
		if (site != NULL && gmt__site_growing(h, site, &rises, &falls, &growth))
			note_growth(view, best, id, growth, h, site, false);
	}
	free(seen);
}

static int by_stack_id(const void *a, const void *b)
{
	uint32_t x = (*(const struct gmt__entry *const *)a)->stack, y = (*(const struct gmt__entry *const *)b)->stack;

	return x < y ? -1 : x > y;
}

/* The largest of the stacks that hold live memory, one run of `mine`
 * (sorted by stack) after another. */
static void largest_of(const struct gmt__entry **mine, size_t m, struct gmt__diag_input *in)
{
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
}

/* Whether every live byte of stack `id` on `device` was allocated before
 * the program's first step mark: 1, 0, or -1 when that is not known. A
 * tensor stack's from the framework's history (a tensor it saw no
 * allocation of was live before its first event), another's from the seq
 * of the event that made each entry. */
static int largest_before_steps(const struct gmt__entry *const *v, size_t n, int device,
				const struct gmt__history *h, const struct gmt__tensors *t, uint32_t id)
{
	if (id == 0)
		return -1;
	if (gmt__is_tensor_stack(id)) {
		if (!t->first_step_known)
			return -1;
		for (size_t i = 0; i < t->n; i++) {
			if (t->v[i].device == device && gmt__tensor_stack_id(t->v[i].stack) == id &&
			    t->v[i].time_ns > t->first_step_ns)
				return 0;
		}
		return 1;
	}
	if (h == NULL || !h->stepped)
		return -1;
	for (size_t i = 0; i < n; i++) {
		/* link: the seq of the event that made the entry (table.h) */
		if (v[i]->device == device && v[i]->stack == id && v[i]->kind != GMT_KIND_MANAGED &&
		    !(t->known && gmt__tensors_backs(t, v[i])) && v[i]->link >= h->first_step_seq)
			return 0;
	}
	return 1;
}

/* The stack holding the most live memory on `device` — with a framework's
 * tensors known, among the tensors' stacks and the stacks of the memory
 * that is not the framework's — and with step markers the live memory
 * allocated there since the latest (the tensors' own when their history
 * reaches back to it). */
static void own_on_device(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n, int device,
			  const struct gmt__tensors *t, struct gmt__diag_input *in)
{
	const struct gmt__history *h = s->history;
	const struct gmt__entry **mine = malloc((n + t->n ? n + t->n : 1) * sizeof(*mine));
	struct gmt__entry *as_entries = t->n > 0 ? calloc(t->n, sizeof(*as_entries)) : NULL;
	size_t m = 0;

	if (h != NULL && h->stepped) {
		in->step_known = true;
		in->step = h->step;
		in->steps = h->round[GMT_SCALE_STEPS];
	}
	if (t->known && t->step_known) {
		/* The tensors allocated since the latest step mark: exact where
		 * the allocator's counters only give a difference. */
		in->step_known = true;
		in->step = t->step;
		in->step_from_framework = true;
		in->step_tensors = true;
		in->step_live_bytes = t->step_bytes;
		if (in->steps < t->steps)
			in->steps = t->steps;
	}
	for (size_t i = 0; i < n; i++) {
		bool fw = t->known && gmt__tensors_backs(t, v[i]);

		if (v[i]->device != device || v[i]->kind == GMT_KIND_MANAGED)
			continue;
		/* link: the seq of the event that made the entry (table.h) */
		if (in->step_known && !in->step_from_framework && v[i]->link >= h->step_seq)
			in->step_live_bytes += v[i]->size;
		if (mine != NULL && v[i]->stack != 0 && !fw)
			mine[m++] = v[i];
	}
	/* The tensors, as entries of their stacks' document ids. */
	for (size_t i = 0; mine != NULL && as_entries != NULL && i < t->n; i++) {
		if (t->v[i].device != device || t->v[i].stack == 0)
			continue;
		as_entries[i] = (struct gmt__entry){ .addr = t->v[i].addr, .size = t->v[i].size,
						     .stack = gmt__tensor_stack_id(t->v[i].stack) };
		mine[m++] = &as_entries[i];
	}
	if (mine != NULL)
		largest_of(mine, m, in);
	free(mine);
	free(as_entries);
	in->largest_before_steps = largest_before_steps(v, n, device, h, t, in->largest_stack);
}

static uint64_t json_u64(const json_t *o, const char *key, bool *ok)
{
	uint64_t v = 0;

	if (!gmt__json_u64(json_object_get(o, key), &v))
		*ok = false;
	return v;
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
static void framework_on_device(const json_t *doc, int device, struct gmt__diag_input *in)
{
	const json_t *d, *oom;
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
}

void gmt__view_build(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
		     const json_t *framework, const struct gmt__tensors *tensors,
		     const struct gmt__rp_expandable *replay, struct gmt__view *view)
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
		view->diag_in.tensors = tensors->known;
		view->diag_in.replay = replay;
		growth_on_device(s, v, n, s->failed->device, tensors, view);
		framework_on_device(framework, s->failed->device, &view->diag_in);
		own_on_device(s, v, n, s->failed->device, tensors, &view->diag_in);
		if (s->episode != NULL) {
			view->diag_in.episode_failures = s->episode->failures;
			view->diag_in.released_bytes = s->episode->freed_bytes;
			view->diag_in.released_count = s->episode->freed_count;
		}
		view->have_diagnosis = true;
	}
}

void gmt__view_diagnose(struct gmt__view *view, const struct gmt__sites *sites, const uint32_t *ids)
{
	const struct gmt__stack_site *ss;

	if (!view->have_diagnosis)
		return;
	ss = view->diag_in.growth_top_stack != 0 ? gmt__sites_of(sites, ids, view->diag_in.growth_top_stack) : NULL;
	if (view->diag_in.growth_top_unlined) {
		view->diag_in.growth_top_label = view->diag_in.tensors_lined
							 ? "PyTorch's tensors with no Python line (autograd's backward, C++ code)"
							 : "PyTorch's tensors, their lines not recorded (GPUMEMTRACE_TORCH_HISTORY)";
		view->diag_in.growth_top_tensor = true;
	} else if (ss != NULL) {
		view->diag_in.growth_top_label = ss->label;
		view->diag_in.growth_top_python = ss->python;
		view->diag_in.growth_top_tensor = gmt__is_tensor_stack(view->diag_in.growth_top_stack);
	}
	ss = view->diag_in.largest_stack != 0 ? gmt__sites_of(sites, ids, view->diag_in.largest_stack) : NULL;
	view->diag_in.largest_python = ss != NULL && ss->python;
	gmt__diagnose(&view->diag_in, &view->diag);
}
