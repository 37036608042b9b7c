/* The model of one snapshot: everything its document and its reports say,
 * concluded from a capture (capture.h) without the tracer's lock and without
 * I/O — the live set in document order, the framework's level above it (its
 * tensors, tensors.h) where a framework handed it over, the stacks both name
 * with their frames resolved and their sites decided by one rule, the view
 * of the devices (pages, fragmentation, growth, the diagnosis), the leak
 * check, and the out-of-memory report's top sites. The report stage renders it (JSON, text
 * or both: report/document.h); nothing in it is written here. */
#ifndef GMT_MODEL_H
#define GMT_MODEL_H

#include "analyze/capture.h"
#include "analyze/frames.h"
#include "analyze/leakcheck.h"
#include "analyze/replay.h"
#include "analyze/sites.h"
#include "analyze/tensors.h"
#include "analyze/view.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The out-of-memory report's top sites: the sites (sites.h) with the most
 * live bytes, summed over their stacks, largest first, and their labels;
 * at the tensor level, how many of count are tensors. */
#define GMT_TOP_SITES 3
struct gmt__top_sites {
	int n;
	uint64_t bytes[GMT_TOP_SITES], count[GMT_TOP_SITES], tensors[GMT_TOP_SITES];
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
	struct gmt__top_sites top;    /* at the tensor level when the tensors are known */
	struct gmt__top_sites freed;  /* an episode's freed memory by site (s->episode) */
	/* The framework's state (s->framework) parsed, each segment joined to
	 * the driver's memory ("allocation", "segments_joined"); NULL: none. */
	json_t *framework;
	struct gmt__tensors tensors;  /* the framework's level (tensors.h) */
	/* PyTorch's allocator history as the document keeps it (replay.h),
	 * NULL: none; for an out-of-memory, what its replay says of
	 * expandable segments (the diagnosis reads it; asked: there was a
	 * history to replay). */
	json_t *fw_history;
	bool replay_asked;
	struct gmt__rp_expandable replay;
	struct gmt__leak_work lw;     /* exit snapshots (s->leaks): the leak check */
};

/* Analyses the capture s into m: resolves frames (the dynamic loader's lock —
 * never under the tracer's), decides sites, runs the leak check (s->leaks:
 * its verdict there, judged set). 0, or a negative errno; m is to be freed
 * either way. */
int gmt__model_build(struct gmt__model *m, const struct gmt__snapshot *s);
void gmt__model_free(struct gmt__model *m);

#endif /* GMT_MODEL_H */
