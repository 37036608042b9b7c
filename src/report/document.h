/* What the parts of the report stage share: the analysis they render
 * (frames.h, view.h, leakcheck.h), the out-of-memory report's sites, the
 * api names as JSON strings, and the sections each file writes. */
#ifndef GMT_DOCUMENT_H
#define GMT_DOCUMENT_H

#include "analyze/frames.h"
#include "analyze/leakcheck.h"
#include "analyze/view.h"
#include "report/json.h"
#include "report/snapshot.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The oom report's top sites: the sites (sites.h) with the most live bytes,
 * summed over their stacks, largest first, and their labels. */
#define REPORT_SHOWN 3
struct gmt__report_sites {
	int n;
	uint64_t bytes[REPORT_SHOWN], count[REPORT_SHOWN];
	const char *where[REPORT_SHOWN];
};

/* The api names as JSON strings ("\"cuMemAlloc_v2\""), escaped once. */
struct gmt__api_table {
	char **v;
	int n;
	size_t longest;
};

/* Analyses the snapshot — and so makes the leak check's verdict and report
 * and the out-of-memory report (s->leaks, s->report) — then streams the
 * document to o; with o NULL, the analysis alone (no file to write).
 * Returns 0 or a negative errno (the writer's own error is in o->err). */
int gmt__doc_write(struct gmt__json *o, const struct gmt__snapshot *s);

void gmt__doc_device(struct gmt__json *o, const struct gmt__snapshot_device *d, const struct gmt__pages *pg,
		     const uint64_t *kinds, const uint64_t *class_count, const uint64_t *class_bytes, bool first);

void gmt__doc_diagnosis(struct gmt__json *o, const struct gmt__view *view);

void gmt__doc_process(struct gmt__json *o, const struct gmt__snapshot *s);

void gmt__text_leak_report(struct gmt__leak_work *lw, struct gmt__frame_cache *cache);

/* The oom report: a few lines for the program's stderr. */
void gmt__text_oom_report(const struct gmt__snapshot *s, const struct gmt__view *view,
			  const struct gmt__report_sites *rep);

#endif /* GMT_DOCUMENT_H */
