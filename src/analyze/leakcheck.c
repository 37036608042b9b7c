/* The leak check's classification (leakcheck.h): the live allocations at
 * exit as items, the pointer scan (leaks.h), the rules (suppress.h) matched
 * on their frames, and the groups by site and class. No I/O. */
#define _GNU_SOURCE
#include "analyze/leakcheck.h"

#include "record/event.h"
#include "record/pystack.h"
#include "record/stacks.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gmt__leakcheck_free(struct gmt__leak_work *lw)
{
	free(lw->items);
	free(lw->targets);
	free(lw->refs);
	free(lw->stacks);
	free(lw->order);
	free(lw->groups);
	free(lw->rule_hits);
	free(lw->rule_bytes);
	gmt__supp_memo_free(&lw->memo);
}

static int by_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The history's growth suspects, largest growth first (read with the
 * table); a tensor history's (`tensors`) named by their document ids, and of
 * the driver's history none in `skip` (sorted stack ids). */
static void leak_suspects(struct gmt__leak_work *lw, const struct gmt__history *h, bool tensors,
			  const uint32_t *skip, size_t nskip)
{
	for (size_t id = 0; h != NULL && id < h->nsites; id++) {
		const struct gmt__site *site = gmt__history_site(h, (uint32_t)id);
		struct gmt__leak_suspect x = { .id = tensors ? gmt__tensor_stack_id((uint32_t)id) : (uint32_t)id };
		int at;

		if (site == NULL || (tensors && id == 0) || !gmt__site_suspect(h, site, &x.rises, &x.falls, &x.growth))
			continue;
		if (nskip > 0 && bsearch(&x.id, skip, nskip, sizeof(*skip), by_u32) != NULL)
			continue;
		x.live = site->live_bytes;
		x.peak = site->peak_bytes;
		for (at = lw->nsuspects; at > 0 && lw->suspects[at - 1].growth < x.growth; at--)
			;
		if (at >= LEAK_SUSPECTS)
			continue;
		if (lw->nsuspects < LEAK_SUSPECTS)
			lw->nsuspects++;
		memmove(&lw->suspects[at + 1], &lw->suspects[at],
			(size_t)(lw->nsuspects - 1 - at) * sizeof(lw->suspects[0]));
		lw->suspects[at] = x;
	}
}

/* The live allocations alloc[0..na) and VMM mappings map[0..nm), both in
 * address order, as items and scan targets; their stacks into ids. */
int gmt__leakcheck_collect(struct gmt__leak_work *lw, const struct gmt__entry *const *alloc, size_t na,
			   const struct gmt__entry *const *map, size_t nm, const struct gmt__history *h,
			   const struct gmt__tensors *t, struct gmt__idset *ids)
{
	uint32_t *handles = NULL, *segment_stacks = NULL;
	size_t nseg = 0;
	uint64_t *sids = NULL; /* stack << 1 | 1 for a suspect's: an item's sorts first */
	size_t nh = 0, nt = 0, ns = 0;
	int r = -ENOMEM;

	gmt__supp_memo_init(&lw->memo, lw->in->supp);
	lw->items = malloc((na ? na : 1) * sizeof(*lw->items));
	lw->targets = malloc((na + nm + 1) * sizeof(*lw->targets));
	lw->refs = calloc(na ? na : 1, sizeof(*lw->refs));
	handles = malloc((na ? na : 1) * sizeof(*handles));
	sids = malloc((na + LEAK_SUSPECTS + 1) * sizeof(*sids));
	if (lw->items == NULL || lw->targets == NULL || lw->refs == NULL || handles == NULL || sids == NULL)
		goto out;
	for (size_t i = 0; i < na; i++) {
		const struct gmt__entry *e = alloc[i];

		lw->items[i] = (struct gmt__leak_item){
			.addr = e->addr, .size = e->size, .stack = e->stack, .rule = NO_RULE,
			.device = e->device, .kind = e->kind, .cls = GMT_LEAK_LEAKED,
		};
		sids[ns++] = (uint64_t)e->stack << 1;
		switch (e->space) {
		case GMT_SPACE_HANDLE:
			handles[nh++] = (uint32_t)i; /* referred to through its mappings */
			break;
		case GMT_SPACE_ARRAY:
			/* a handle the program holds: the exact value */
			lw->targets[nt++] = (struct gmt__leak_target){ e->addr, e->addr + 1, (uint32_t)i };
			break;
		default:
			if (e->size > 0 && e->addr + e->size > e->addr)
				lw->targets[nt++] = (struct gmt__leak_target){ e->addr, e->addr + e->size, (uint32_t)i };
			break;
		}
	}
	/* A mapping names its handle: the handle is referred to when the mapped
	 * range is. Handles come in address order, as the allocations do. */
	for (size_t i = 0; i < nm; i++) {
		size_t lo = 0, hi = nh;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (lw->items[handles[mid]].addr < map[i]->link)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < nh && lw->items[handles[lo]].addr == map[i]->link && map[i]->size > 0)
			lw->targets[nt++] = (struct gmt__leak_target){ map[i]->addr, map[i]->addr + map[i]->size, handles[lo] };
	}
	lw->n = na;
	lw->ntargets = nt;
	if (t != NULL && t->known && t->history != NULL) {
		/* The tensors' suspects; of the driver's, those of the memory
		 * that is not the framework's (its segments are its business). */
		segment_stacks = malloc((na ? na : 1) * sizeof(*segment_stacks));
		if (segment_stacks == NULL)
			goto out;
		for (size_t i = 0; i < na; i++) {
			if (gmt__tensors_backs(t, alloc[i]))
				segment_stacks[nseg++] = alloc[i]->stack;
		}
		qsort(segment_stacks, nseg, sizeof(*segment_stacks), by_u32);
		leak_suspects(lw, t->history, true, NULL, 0);
		leak_suspects(lw, h, false, segment_stacks, nseg);
	} else {
		leak_suspects(lw, h, false, NULL, 0);
	}
	for (int i = 0; i < lw->nsuspects; i++)
		sids[ns++] = (uint64_t)lw->suspects[i].id << 1 | 1;
	qsort(sids, ns, sizeof(*sids), by_u64);
	lw->stacks = malloc((ns ? ns : 1) * sizeof(*lw->stacks));
	if (lw->stacks == NULL)
		goto out;
	for (size_t i = 0; i < ns; i++) {
		uint32_t id = (uint32_t)(sids[i] >> 1);

		if (lw->nstacks > 0 && lw->stacks[lw->nstacks - 1].id == id)
			continue;
		lw->stacks[lw->nstacks] = (struct gmt__leak_stack){ .id = id, .rule = NO_RULE, .has_items = !(sids[i] & 1) };
		snprintf(lw->stacks[lw->nstacks].where, sizeof(lw->stacks[0].where), "an unknown place");
		lw->nstacks++;
		r = gmt__idset_add(ids, id);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	free(handles);
	free(sids);
	free(segment_stacks);
	return r;
}

struct gmt__leak_stack *gmt__leakcheck_stack_of(const struct gmt__leak_work *lw, uint32_t id)
{
	size_t lo = 0, hi = lw->nstacks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (lw->stacks[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < lw->nstacks && lw->stacks[lo].id == id ? &lw->stacks[lo] : NULL;
}

/* The pointer scan: leaked or referenced. */
void gmt__leakcheck_scan(struct gmt__leak_work *lw, const struct gmt__snapshot *s)
{
	struct gmt__range *skip;
	size_t nskip = lw->in->nskip;

	if (!lw->in->scan) {
		lw->scan.why = "the scan is off (GPUMEMTRACE_LEAK_SCAN=0)";
		return;
	}
	/* The tracer's own memory, the items and the capture (they hold every
	 * address). */
	skip = malloc((nskip + 3) * sizeof(*skip));
	if (skip == NULL) {
		lw->scan.why = "out of memory";
		return;
	}
	if (nskip > 0)
		memcpy(skip, lw->in->skip, nskip * sizeof(*skip));
	skip[nskip++] = (struct gmt__range){ (uintptr_t)lw->items, (uintptr_t)(lw->items + lw->n) };
	skip[nskip++] = (struct gmt__range){ (uintptr_t)s->entries, (uintptr_t)(s->entries + s->nentries) };
	if (s->history != NULL && s->history->events != NULL)
		skip[nskip++] = (struct gmt__range){ (uintptr_t)s->history->events,
						     (uintptr_t)(s->history->events + s->history->cap) };
	(void)gmt__leak_scan(lw->targets, lw->ntargets, lw->refs, skip, nskip, lw->in->stack_from, &lw->scan);
	free(skip);
	if (lw->scan.done && lw->in->python)
		lw->scan.unseen = GMT_SCAN_UNSEEN_PYTHON;
	for (size_t i = 0; i < lw->n; i++) {
		if (lw->refs[i].at != 0)
			lw->items[i].cls = GMT_LEAK_REFERENCED;
	}
}

/* The rule matching: each frame's names against the rules.
 * NOTE: through the memo, keyed by the names' addresses: every name here is
 * owned by the loader, the frame cache (its libdw object, the program's path)
 * or pystack.c, and stays put until the snapshot is written. Stacks repeat the same names, so each
 * distinct one is matched once, not once per stack (issue 8). */
struct rule_match {
	struct gmt__supp_memo *memo;
	size_t best;
};

static void rule_native(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct rule_match *m = ctx;

	gmt__supp_memo_frame(m->memo, function, f->module, sym != NULL ? sym->file : NULL, &m->best);
	if (f->function != NULL && f->function != function)
		gmt__supp_memo_frame(m->memo, f->function, NULL, NULL, &m->best);
}

static void rule_python(void *ctx, uintptr_t word)
{
	struct rule_match *m = ctx;
	const char *function = NULL, *file = NULL;
	int line = 0;

	(void)gmt__py_frame(word, &function, &file, &line);
	gmt__supp_memo_frame(m->memo, function, NULL, file, &m->best);
}

/* Called by out_stacks for every stack written. */
void gmt__leakcheck_stack_seen(struct gmt__leak_work *lw, struct gmt__frame_cache *cache, uint32_t id,
			       const uintptr_t *ips, int n, const char *where)
{
	struct gmt__leak_stack *ls = gmt__leakcheck_stack_of(lw, id);
	struct rule_match m = { &lw->memo, SIZE_MAX };
	struct gmt__frame_sink k = { rule_native, rule_python, &m };

	if (ls == NULL)
		return;
	snprintf(ls->where, sizeof(ls->where), "%s", where);
	if (ips == NULL)
		return;
	/* The rule is read through the items (leak_classify) only. */
	if (!ls->has_items || lw->in->supp == NULL || lw->in->supp->n == 0)
		return;
	gmt__frames_sink(&k, cache, ips, n);
	if (m.best != SIZE_MAX)
		ls->rule = (uint32_t)m.best;
}

static int by_group_key(const void *x, const void *y, void *arg)
{
	const struct gmt__leak_item *items = arg;
	const struct gmt__leak_item *a = &items[*(const uint32_t *)x];
	const struct gmt__leak_item *b = &items[*(const uint32_t *)y];

	if (a->stack != b->stack)
		return a->stack < b->stack ? -1 : 1;
	if (a->cls != b->cls)
		return a->cls - b->cls;
	if (a->rule != b->rule)
		return a->rule < b->rule ? -1 : 1;
	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int by_counted_bytes(const void *x, const void *y)
{
	const struct gmt__leak_group *a = x, *b = y;

	if (a->counted != b->counted)
		return a->counted ? -1 : 1;
	if (a->bytes != b->bytes)
		return a->bytes > b->bytes ? -1 : 1;
	return a->stack < b->stack ? -1 : a->stack > b->stack;
}

bool gmt__leakcheck_suppresses(const struct gmt__leak_work *lw, uint32_t rule)
{
	return rule != NO_RULE && lw->in->supp->v[rule].type == GMT_SUPP_LEAK;
}

/* After the stacks: rules applied, items grouped, totals counted. */
int gmt__leakcheck_classify(struct gmt__leak_work *lw)
{
	const struct gmt__supp *supp = lw->in->supp;
	size_t nrules = supp != NULL ? supp->n : 0;

	lw->order = malloc((lw->n ? lw->n : 1) * sizeof(*lw->order));
	lw->groups = malloc((lw->n ? lw->n : 1) * sizeof(*lw->groups));
	lw->rule_hits = calloc(nrules + 1, sizeof(*lw->rule_hits));
	lw->rule_bytes = calloc(nrules + 1, sizeof(*lw->rule_bytes));
	if (lw->order == NULL || lw->groups == NULL || lw->rule_hits == NULL || lw->rule_bytes == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < lw->n; i++) {
		struct gmt__leak_item *it = &lw->items[i];
		const struct gmt__leak_stack *ls = gmt__leakcheck_stack_of(lw, it->stack);

		lw->order[i] = (uint32_t)i;
		it->rule = ls != NULL ? ls->rule : NO_RULE;
		if (it->rule != NO_RULE) {
			lw->rule_hits[it->rule]++;
			lw->rule_bytes[it->rule] += it->size;
			if (supp->v[it->rule].type == GMT_SUPP_CACHED)
				it->cls = GMT_LEAK_CACHED;
		}
	}
	qsort_r(lw->order, lw->n, sizeof(*lw->order), by_group_key, lw->items);

	for (size_t i = 0; i < lw->n; i++) {
		const struct gmt__leak_item *it = &lw->items[lw->order[i]];
		const struct gmt__leak_ref *ref = &lw->refs[lw->order[i]];
		struct gmt__leak_group *g = lw->ngroups > 0 ? &lw->groups[lw->ngroups - 1] : NULL;
		bool suppressed = gmt__leakcheck_suppresses(lw, it->rule);
		int t = suppressed ? TOTAL_SUPPRESSED : it->cls;

		if (g == NULL || g->stack != it->stack || g->cls != it->cls || g->rule != it->rule) {
			g = &lw->groups[lw->ngroups++];
			*g = (struct gmt__leak_group){
				.stack = it->stack, .rule = it->rule, .cls = it->cls, .first = i,
				.counted = !suppressed && (lw->in->classes & (1u << it->cls)),
			};
		}
		g->count++;
		g->bytes += it->size;
		g->kinds[it->kind < GMT_KIND_COUNT ? it->kind : 0] += it->size;
		if (g->ref.at == 0 && ref->at != 0) {
			g->ref = *ref;
			g->ref_value = it->addr;
		}
		lw->total_count[t]++;
		lw->total_bytes[t] += it->size;
		if (g->counted) {
			lw->total_count[TOTAL_COUNTED]++;
			lw->total_bytes[TOTAL_COUNTED] += it->size;
		}
	}
	qsort(lw->groups, lw->ngroups, sizeof(*lw->groups), by_counted_bytes);
	lw->in->suspects = lw->nsuspects;
	lw->in->counted_count = lw->total_count[TOTAL_COUNTED];
	lw->in->counted_bytes = lw->total_bytes[TOTAL_COUNTED];
	return 0;
}

/* What holds a reference, in words: the global's name where the loader
 * knows it. */
void gmt__leakcheck_where(struct gmt__frame_cache *cache, const struct gmt__leak_group *g, char *buf, size_t len)
{
	const struct gmt__leak_ref *ref = &g->ref;
	struct link_map *map = NULL;
	struct gmt__build_id id;
	const char *name;
	Dl_info info;

	if (ref->region == GMT_REF_GLOBAL &&
	    dladdr1((void *)(uintptr_t)ref->at, &info, (void **)&map, RTLD_DL_LINKMAP) != 0) {
		const char *path = map != NULL && map->l_name[0] == '\0' && cache->exe != NULL ? cache->exe : info.dli_fname;
		const char *mod = gmt__base_name(path);

		/* NOTE: the loader knows exported symbols only; the full symbol
		 * table (through libdw) names a program's static variables too,
		 * from the module's file while it is the build mapped there. */
		(void)gmt__build_id_at(ref->at, &id);
		name = gmt__symbols_data_name(cache->symbols, path, (uintptr_t)info.dli_fbase, &id, ref->at);
		if (name != NULL)
			snprintf(buf, len, "global '%s' (%s)", name, mod != NULL ? mod : "?");
		else
			snprintf(buf, len, "global data of %s at 0x%llx", mod != NULL ? mod : "?",
				 (unsigned long long)ref->at);
		return;
	}
	snprintf(buf, len, "%s memory at 0x%llx",
		 ref->region == GMT_REF_HEAP ? "heap" : ref->region == GMT_REF_STACK ? "stack" :
		 ref->region == GMT_REF_GLOBAL ? "global" : "mapped",
		 (unsigned long long)ref->at);
}
