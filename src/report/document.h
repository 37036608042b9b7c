/* What the parts of the report stage share: the model they render
 * (analyze/model.h), the api names as JSON strings, and the sections each
 * file writes. Rendering only: every conclusion is the model's. */
#ifndef GMT_DOCUMENT_H
#define GMT_DOCUMENT_H

#include "analyze/model.h"
#include "report/json.h"
#include "report/snapshot.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The api names as JSON strings ("\"cuMemAlloc_v2\""), escaped once. */
struct gmt__api_table {
	char **v;
	int n;
	size_t longest;
};

/* Streams the document of the snapshot s, whose model is m
 * (gmt__model_build), to o. Returns 0 or a negative errno (the writer's own
 * error, as in o->err). */
int gmt__doc_render(struct gmt__json *o, const struct gmt__snapshot *s, struct gmt__model *m);

/* The text reports of the snapshot s, whose model is m: the leak report
 * (s->leaks->report, when wanted) and the out-of-memory report (s->report,
 * when s has room for it and a diagnosis). */
void gmt__text_reports(const struct gmt__snapshot *s, struct gmt__model *m);

/* A record's object of values by kind, {"device": 1, ...}, in the kinds'
 * order: the kinds of `shown` (bit k: kind k). Returns the end. */
char *gmt__put_kinds(char *p, const uint64_t *v, unsigned shown);
/* The kinds whose value is not 0, as `shown`. */
unsigned gmt__kinds_nonzero(const uint64_t *v);

void gmt__doc_device(struct gmt__json *o, const struct gmt__snapshot_device *d, const struct gmt__pages *pg,
		     const uint64_t *kinds, const uint64_t *class_count, const uint64_t *class_bytes, bool first);

void gmt__doc_diagnosis(struct gmt__json *o, const struct gmt__view *view);

void gmt__doc_process(struct gmt__json *o, const struct gmt__snapshot *s);

/* The "episode" section of an out-of-memory snapshot (s->episode). */
void gmt__doc_episode(struct gmt__json *o, const struct gmt__snapshot *s);
/* `, "thread": {"tid": …, "name": …}`: the thread a failure came from (tid 0
 * and name "" are null: not known). */
void gmt__doc_thread(struct gmt__json *o, uint32_t tid, const char *name);

/* The "framework" section: the state handed over (m->framework), its
 * segments joined to the live memory by the model. */
void gmt__doc_framework(struct gmt__json *o, const struct gmt__model *m);

/* The "tensors" section: the framework's level (m->tensors), when known. */
void gmt__doc_tensors(struct gmt__json *o, const struct gmt__model *m);

/* A "series" object: the history h's points, then one for the open window
 * at `now`. */
void gmt__doc_series(struct gmt__json *o, const struct gmt__history *h, uint64_t now);

/* The elements of a "sites" array: the history h's sites v[0..n) (ids
 * indexing h), each with its growth; `tensors`: the ids are tensor stacks'
 * indices (tensors.h), written as their document ids. */
void gmt__doc_site_list(struct gmt__json *o, const struct gmt__history *h, const struct gmt__site_ref *v, size_t n,
			bool tensors);

#endif /* GMT_DOCUMENT_H */
