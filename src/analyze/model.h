/* The model of one snapshot: everything its document and its reports say,
 * concluded from a capture (capture.h) without the tracer's lock and without
 * I/O — the live set in document order, the stacks it names with their frames
 * resolved and their sites decided, the view of the devices (pages,
 * fragmentation, growth, the diagnosis), the leak check, and the
 * out-of-memory report's top sites. The report stage renders it (JSON, text
 * or both: report/document.h); nothing in it is written here. */
#ifndef GMT_MODEL_H
#define GMT_MODEL_H

#include "analyze/capture.h"
#include "analyze/frames.h"
#include "analyze/leakcheck.h"
#include "analyze/sites.h"
#include "analyze/view.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A stack of the history's per-stack sites, and its live bytes. */
struct gmt__site_ref {
	uint32_t id;
	uint64_t live;
};

/* The out-of-memory report's top sites: the sites (sites.h) with the most
 * live bytes, summed over their stacks, largest first, and their labels. */
#define GMT_TOP_SITES 3
struct gmt__top_sites {
	int n;
	uint64_t bytes[GMT_TOP_SITES], count[GMT_TOP_SITES];
	const char *where[GMT_TOP_SITES];
};

struct gmt__model {
	/* The live entries by section ("allocations", then VMM reservations,
	 * then mappings) and address; the sections start at 0, hi0, hi1. */
	const struct gmt__entry **live;
	size_t nlive, hi0, hi1;
	struct gmt__idset ids;        /* every stack the document names, ascending: ids.v[0..nids) */
	size_t nids;
	struct gmt__site_ref *sites;  /* the history's per-stack sites, most live bytes first */
	size_t nsites;
	struct gmt__view *view;
	struct gmt__frame_cache cache; /* every frame of those stacks, resolved */
	bool cache_open;
	struct gmt__sites stack_sites; /* each stack's site, by index in ids (empty without memory) */
	struct gmt__top_sites top;
	struct gmt__top_sites freed;  /* an episode's freed memory by site (s->episode) */
	struct gmt__leak_work lw;     /* exit snapshots (s->leaks): the leak check */
};

/* Analyses the capture s into m: resolves frames (the dynamic loader's lock —
 * never under the tracer's), decides sites, runs the leak check (s->leaks:
 * its verdict there, judged set). 0, or a negative errno; m is to be freed
 * either way. */
int gmt__model_build(struct gmt__model *m, const struct gmt__snapshot *s);
void gmt__model_free(struct gmt__model *m);

#endif /* GMT_MODEL_H */
