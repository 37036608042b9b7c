/* The model of one snapshot (model.h): the analysis between the capture and
 * the render. */
#define _GNU_SOURCE
#include "analyze/model.h"
#include "analyze/jsonval.h"

#include "record/stacks.h"
#include "util/xlist.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char *gmt__reason_name(enum gmt__reason reason)
{
	static const char *const names[GMT_REASON_COUNT] = { GMT_REASONS(GMT_X_WORD) };

	return GMT_X_NAME(names, GMT_REASON_COUNT, reason, NULL);
}

const char *gmt__episode_end_name(enum gmt__episode_end end)
{
	static const char *const names[GMT_EPISODE_END_COUNT] = { GMT_EPISODE_ENDS(GMT_X_WORD) };

	return GMT_X_NAME(names, GMT_EPISODE_END_COUNT, end, NULL);
}

/* ---- collecting and sorting the live set -------------------------------------- */

/* Where an entry goes: 0 "allocations", 1 "vmm.reservations", 2 "vmm.mappings". */
static int section_of(const struct gmt__entry *e)
{
	switch (e->space) {
	case GMT_SPACE_RESERVATION:
		return 1;
	case GMT_SPACE_MAPPING:
		return 2;
	default:
		return 0;
	}
}

/* By section, then address, then space. */
static int by_section_address(const void *x, const void *y)
{
	const struct gmt__entry *a = *(const struct gmt__entry *const *)x;
	const struct gmt__entry *b = *(const struct gmt__entry *const *)y;
	int sa = section_of(a), sb = section_of(b);

	if (sa != sb)
		return sa - sb;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return (int)a->space - (int)b->space;
}

/* ---- the stacks ----------------------------------------------------------------- */

static void no_native(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
		      const char *function)
{
	(void)ctx, (void)f, (void)sym, (void)function;
}

static void no_python(void *ctx, uintptr_t word)
{
	(void)ctx, (void)word;
}

/* The analysis of the stacks ids[0..n): every frame resolved (dladdr, libdw:
 * the loader's lock — never under the tracer's), in the order the document
 * then writes them, so that "modules" lists each in the order first seen;
 * then their sites (sites.h: without memory for them, frames are written
 * without a site), and the leak check's rules matched (lw, may be NULL). */
static void resolve_stacks(struct gmt__frame_cache *cache, const struct gmt__idset *ids, size_t n,
			   const char *site_libraries, struct gmt__sites *sites, struct gmt__leak_work *lw,
			   const struct gmt__frame_source *more)
{
	const struct gmt__frame_sink none = { no_native, no_python, NULL };
	struct gmt__site_rules rules;

	for (size_t i = 0; i < n; i++) {
		int depth = 0;
		const uintptr_t *ips = gmt__is_tensor_stack(ids->v[i]) ? NULL : gmt__stack_get(ids->v[i], &depth);

		cache->epoch = gmt__stack_epoch(ids->v[i]);
		if (ips != NULL) {
			(void)gmt__frames_runtime_call(cache, ips, depth);
			gmt__frames_sink(&none, cache, ips, gmt__stack_frames(ips, depth));
		}
	}
	(void)gmt__site_rules_init(&rules, site_libraries);
	(void)gmt__sites_build(sites, cache, ids->v, n, &rules, more);
	gmt__site_rules_free(&rules);
	for (size_t i = 0; lw != NULL && i < n; i++) {
		int depth = 0;
		const uintptr_t *ips;
		const struct gmt__stack_site *site = sites->n > 0 ? &sites->v[i] : NULL;

		/* The leak check judges the driver's memory; a framework's
		 * stack is named (a suspect's) by its label alone. */
		ips = gmt__is_tensor_stack(ids->v[i]) ? NULL : gmt__stack_get(ids->v[i], &depth);
		cache->epoch = gmt__stack_epoch(ids->v[i]);
		gmt__leakcheck_stack_seen(lw, cache, ids->v[i], ips, gmt__stack_frames(ips, depth),
					  site != NULL ? site->label : "an unknown place");
	}
}

/* ---- the history's sites ------------------------------------------------------- */

static int by_live_desc(const void *x, const void *y)
{
	const struct gmt__site_ref *a = x, *b = y;

	if (a->live != b->live)
		return a->live < b->live ? 1 : -1;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* The sites with a history, by live bytes (largest first, then by id), into
 * *out (malloc'd). 0, or -ENOMEM. */
static int sites_sorted(const struct gmt__history *h, struct gmt__site_ref **out, size_t *n)
{
	struct gmt__site_ref *v = malloc((h->nsites ? h->nsites : 1) * sizeof(*v));

	*n = 0;
	*out = v;
	if (v == NULL)
		return -ENOMEM;
	for (size_t id = 0; id < h->nsites; id++) {
		const struct gmt__site *s = gmt__history_site(h, (uint32_t)id);

		if (s != NULL)
			v[(*n)++] = (struct gmt__site_ref){ (uint32_t)id, s->live_bytes };
	}
	qsort(v, *n, sizeof(*v), by_live_desc);
	return 0;
}

/* The n largest of bytes[0..nslots) (slot 0: no stack) into rep, with
 * their labels; bytes is spent. */
static void top_of(struct gmt__top_sites *rep, uint64_t *bytes, const uint64_t *count, const uint64_t *tensors,
		   size_t nslots, const struct gmt__sites *sites)
{
	for (int k = 0; k < GMT_TOP_SITES; k++) {
		size_t best = SIZE_MAX;

		for (size_t i = 0; i < nslots; i++) {
			if (bytes[i] > 0 && (best == SIZE_MAX || bytes[i] > bytes[best]))
				best = i;
		}
		if (best == SIZE_MAX)
			break;
		rep->bytes[k] = bytes[best];
		rep->count[k] = count[best];
		rep->tensors[k] = tensors != NULL ? tensors[best] : 0;
		rep->where[k] = best > 0 ? sites->labels[best - 1] : "(no stack recorded)";
		rep->n++;
		bytes[best] = 0;
	}
}

/* The out-of-memory report's top sites: live bytes by site, summed over the
 * sites' stacks (the history's sites are stacks). */
static void top_sites(struct gmt__top_sites *rep, const struct gmt__history *h, const struct gmt__site_ref *v,
			 size_t n, const struct gmt__sites *sites, const uint32_t *ids)
{
	/* Index 0 gathers the allocations without a stack; i > 0 is site id i. */
	size_t nslots = (size_t)sites->nsites + 1;
	uint64_t *bytes = calloc(nslots, sizeof(*bytes)), *count = calloc(nslots, sizeof(*count));

	memset(rep, 0, sizeof(*rep));
	for (size_t i = 0; bytes != NULL && count != NULL && i < n; i++) {
		const struct gmt__site *s = gmt__history_site(h, v[i].id);
		const struct gmt__stack_site *ss = gmt__sites_of(sites, ids, v[i].id);
		uint32_t slot = ss != NULL ? ss->site : 0;

		bytes[slot] += s->live_bytes;
		count[slot] += s->live_count;
	}
	if (bytes != NULL && count != NULL)
		top_of(rep, bytes, count, NULL, nslots, sites);
	free(bytes);
	free(count);
}

/* The out-of-memory report's top sites at the tensor level: the live
 * tensors and the driver's memory that is not the framework's, by site. */
static void top_sites_tensors(struct gmt__top_sites *rep, const struct gmt__model *d)
{
	const struct gmt__tensors *t = &d->tensors;
	size_t nslots = (size_t)d->stack_sites.nsites + 1;
	uint64_t *bytes = calloc(nslots, sizeof(*bytes)), *count = calloc(nslots, sizeof(*count));
	uint64_t *tensors = calloc(nslots, sizeof(*tensors));

	memset(rep, 0, sizeof(*rep));
	for (size_t i = 0; bytes != NULL && count != NULL && tensors != NULL && i < t->n; i++) {
		const struct gmt__stack_site *ss = gmt__sites_of(&d->stack_sites, d->ids.v,
								 gmt__tensor_stack_id(t->v[i].stack));
		uint32_t slot = ss != NULL ? ss->site : 0;

		bytes[slot] += t->v[i].size;
		count[slot]++;
		tensors[slot]++;
	}
	for (size_t i = 0; bytes != NULL && count != NULL && tensors != NULL && i < d->hi0; i++) {
		const struct gmt__stack_site *ss;
		uint32_t slot;

		if (gmt__tensors_backs(t, d->live[i]))
			continue;
		ss = gmt__sites_of(&d->stack_sites, d->ids.v, d->live[i]->stack);
		slot = ss != NULL ? ss->site : 0;
		bytes[slot] += d->live[i]->size;
		count[slot]++;
	}
	if (bytes != NULL && count != NULL && tensors != NULL)
		top_of(rep, bytes, count, tensors, nslots, &d->stack_sites);
	free(bytes);
	free(count);
	free(tensors);
}

/* Whether one of v[0..n), sorted by address, starts at addr. */
static bool starts_at(const struct gmt__entry *const *v, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v[mid]->addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && v[lo]->addr == addr;
}

/* Each of the framework's segments joined to the driver's memory by
 * address: "allocation" true when a live allocation, VMM reservation or
 * mapping starts there; "segments_joined" counts them. */
static int join_segments(struct gmt__model *d)
{
	json_t *seg;
	size_t i, matched = 0;
	int r = 0;

	json_array_foreach(json_object_get(d->framework, "segments"), i, seg) {
		json_t *a = json_object_get(seg, "address");
		uint64_t addr;
		bool found;

		if (!gmt__json_u64(a, &addr))
			continue;
		found = starts_at(d->live, d->hi0, addr) || starts_at(d->live + d->hi0, d->hi1 - d->hi0, addr) ||
			starts_at(d->live + d->hi1, d->nlive - d->hi1, addr);
		matched += found;
		if (json_object_set_new(seg, "allocation", json_boolean(found)) < 0)
			r = -ENOMEM;
	}
	if (json_object_set_new(d->framework, "segments_joined", json_integer((json_int_t)matched)) < 0)
		r = -ENOMEM;
	return r;
}

/* The sites of the memory an episode freed, summed by site, largest first. */
static void freed_sites(struct gmt__top_sites *rep, const struct gmt__episode *ep, const struct gmt__sites *sites,
			const uint32_t *ids)
{
	uint64_t bytes[GMT_EPISODE_SITES], count[GMT_EPISODE_SITES];
	uint32_t slot[GMT_EPISODE_SITES];
	int n = 0;

	memset(rep, 0, sizeof(*rep));
	for (int i = 0; i < ep->nsites; i++) {
		const struct gmt__stack_site *ss = gmt__sites_of(sites, ids, ep->sites[i].stack);
		uint32_t site = ss != NULL ? ss->site : 0;
		int k;

		for (k = 0; k < n && slot[k] != site; k++)
			;
		if (k == n) {
			slot[n] = site;
			bytes[n] = count[n] = 0;
			n++;
		}
		bytes[k] += ep->sites[i].bytes;
		count[k] += ep->sites[i].count;
	}
	while (rep->n < GMT_TOP_SITES) {
		int best = -1;

		for (int k = 0; k < n; k++) {
			if (bytes[k] > 0 && (best < 0 || bytes[k] > bytes[best]))
				best = k;
		}
		if (best < 0)
			break;
		rep->bytes[rep->n] = bytes[best];
		rep->count[rep->n] = count[best];
		rep->where[rep->n] = slot[best] > 0 ? sites->labels[slot[best] - 1] : "(no stack recorded)";
		rep->n++;
		bytes[best] = 0;
	}
}

/* ---- the model ------------------------------------------------------------------ */

/* The stacks an episode names: its failures' and those of the memory freed
 * during it. */
static int episode_stacks(struct gmt__idset *ids, const struct gmt__episode *ep)
{
	int r;

	for (int i = 0; i < ep->nlisted; i++) {
		if ((r = gmt__idset_add(ids, ep->listed[i].stack)) < 0)
			return r;
	}
	for (int i = 0; i < ep->nsites; i++) {
		if ((r = gmt__idset_add(ids, ep->sites[i].stack)) < 0)
			return r;
	}
	return 0;
}

/* The replay of PyTorch's history (replay.h) the diagnosis of an
 * out-of-memory cites: asked where the framework is PyTorch, its history
 * is on the failing device and its segments there are not expandable
 * already (the diagnosis offers expandable segments only then). */
static int replay_expandable(struct gmt__model *d, const struct gmt__snapshot *s)
{
	struct gmt__rp_device devs[GMT_SNAPSHOT_MAX_DEVICES];
	struct gmt__rp_input in;
	size_t n = 0;
	bool expandable = false;
	char err[256];
	int rc;

	if (d->fw_history == NULL)
		return 0;
	for (int i = 0; i < s->ndevices && i < GMT_SNAPSHOT_MAX_DEVICES; i++) {
		const struct gmt__device_state *st = s->devices[i].state;

		devs[n] = (struct gmt__rp_device){ .index = s->devices[i].index };
		if (st != NULL && st->have_mem) {
			devs[n].have_total = devs[n].have_free = true;
			devs[n].total = st->total_bytes;
			devs[n].free = st->free_bytes;
		}
		n++;
	}
	rc = gmt__rp_read_framework(d->framework, d->fw_history, devs, n, &in, err, sizeof(err));
	if (rc == -ENOMEM)
		return rc;
	if (rc < 0)
		return 0;
	for (size_t i = 0; i < in.nseg; i++)
		expandable |= in.seg[i].expandable;
	if (in.device == s->failed->device && !expandable) {
		d->replay_asked = true;
		gmt__rp_try_expandable(&in, &d->replay);
	}
	gmt__rp_input_free(&in);
	return 0;
}

int gmt__model_build(struct gmt__model *d, const struct gmt__snapshot *s)
{
	const struct gmt__history *h = s->history;
	const struct gmt__frame_source more = { gmt__tensors_frames, &d->tensors };
	int r;

	memset(d, 0, sizeof(*d));
	d->lw.in = s->leaks;
	d->view = malloc(sizeof(*d->view));
	d->live = malloc((s->nentries ? s->nentries : 1) * sizeof(*d->live));
	if (d->view == NULL || d->live == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < s->nentries; i++)
		d->live[d->nlive++] = &s->entries[i];
	if (d->nlive > 1)
		qsort(d->live, d->nlive, sizeof(*d->live), by_section_address);
	/* Sorted by section: three runs, one per array. */
	for (d->hi0 = 0; d->hi0 < d->nlive && section_of(d->live[d->hi0]) == 0; d->hi0++)
		;
	for (d->hi1 = d->hi0; d->hi1 < d->nlive && section_of(d->live[d->hi1]) == 1; d->hi1++)
		;
	if (s->framework != NULL) {
		/* Checked when it was handed over: NULL is memory. */
		d->framework = json_loads(s->framework, 0, NULL);
		if (d->framework == NULL)
			return -ENOMEM;
		/* NULL: no traces, or memory (checked JSON holds an array) */
		d->fw_history = gmt__rp_history(json_object_get(d->framework, "traces"));
		if (d->fw_history == NULL && json_is_array(json_object_get(d->framework, "traces")))
			return -ENOMEM;
		if ((r = join_segments(d)) < 0 ||
		    (r = gmt__tensors_build(&d->tensors, d->framework, d->live, d->hi0, d->live + d->hi1,
					    d->nlive - d->hi1)) < 0)
			return r;
	}
	if (s->failed != NULL && (r = replay_expandable(d, s)) < 0)
		return r;
	gmt__view_build(s, d->live, d->hi0, d->framework, &d->tensors, d->replay_asked ? &d->replay : NULL, d->view);
	if (s->leaks != NULL) {
		r = gmt__leakcheck_collect(&d->lw, d->live, d->hi0, d->live + d->hi1, d->nlive - d->hi1, h, &d->tensors,
					   &d->ids);
		if (r < 0)
			return r;
	}
	/* The stacks the document names: the live set's, the failed
	 * request's, every site's and every history event's. */
	for (size_t i = 0; i < d->nlive; i++) {
		if ((r = gmt__idset_add(&d->ids, d->live[i]->stack)) < 0)
			return r;
	}
	if (s->failed != NULL && (r = gmt__idset_add(&d->ids, s->failed->stack)) < 0)
		return r;
	if (s->episode != NULL && (r = episode_stacks(&d->ids, s->episode)) < 0)
		return r;
	if (h != NULL) {
		if ((r = sites_sorted(h, &d->sites, &d->nsites)) < 0)
			return r;
		for (size_t i = 0; i < d->nsites; i++) {
			if ((r = gmt__idset_add(&d->ids, d->sites[i].id)) < 0)
				return r;
		}
		for (size_t i = 0; i < h->count; i++) {
			if ((r = gmt__idset_add(&d->ids, gmt__history_event(h, i)->stack)) < 0)
				return r;
		}
	}
	/* The framework's stacks: ids of their own (tensors.h). */
	for (size_t i = 1; i < d->tensors.nstacks; i++) {
		if ((r = gmt__idset_add(&d->ids, gmt__tensor_stack_id((uint32_t)i))) < 0)
			return r;
	}
	d->nids = gmt__idset_sorted(&d->ids);
	if (s->leaks != NULL)
		gmt__leakcheck_scan(&d->lw, s);
	gmt__frames_open(&d->cache);
	d->cache_open = true;
	resolve_stacks(&d->cache, &d->ids, d->nids, s->site_libraries, &d->stack_sites,
		       s->leaks != NULL ? &d->lw : NULL, &more);
	if (d->tensors.known)
		top_sites_tensors(&d->top, d);
	else if (h != NULL)
		top_sites(&d->top, h, d->sites, d->nsites, &d->stack_sites, d->ids.v);
	if (s->episode != NULL)
		freed_sites(&d->freed, s->episode, &d->stack_sites, d->ids.v);
	gmt__view_diagnose(d->view, &d->stack_sites, d->ids.v);
	if (s->leaks != NULL) {
		if ((r = gmt__leakcheck_classify(&d->lw)) < 0)
			return r;
		s->leaks->judged = true;
	}
	return 0;
}

void gmt__model_free(struct gmt__model *d)
{
	if (d->cache_open)
		gmt__frames_close(&d->cache);
	gmt__leakcheck_free(&d->lw);
	gmt__tensors_free(&d->tensors);
	json_decref(d->framework);
	json_decref(d->fw_history);
	gmt__sites_free(&d->stack_sites);
	free(d->sites);
	free(d->view);
	free(d->ids.v);
	free(d->live);
	memset(d, 0, sizeof(*d));
}

