/* The document's "framework" section (docs/snapshot-format.md): a
 * framework's allocator state as its bootstrap handed it over (gmt_framework:
 * checked JSON), each of its segments joined to the driver's memory by the
 * model ("allocation", "segments_joined"). Of what the bootstrap handed
 * over for the analysis, the framework's history is here in a short form
 * ("allocator_history", for gpumemtrace whatif's replay) and, with the steps
 * marked, in the "tensors" section as what the model made of it. */
#define _GNU_SOURCE
#include "report/document.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void gmt__doc_framework(struct gmt__json *o, const struct gmt__model *m)
{
	json_t *doc = json_copy(m->framework);
	char *text;

	if (doc == NULL)
		return;
	if (m->fw_history != NULL)
		json_object_set(doc, "allocator_history", m->fw_history);
	json_object_del(doc, "traces");
	json_object_del(doc, "trace_stacks");
	json_object_del(doc, "steps");
	text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	if (text == NULL) {
		gmt__json_fail(o, -ENOMEM);
		return;
	}
	gmt__json_str(o, " \"framework\": ");
	gmt__json_str(o, text);
	gmt__json_str(o, ",\n");
	free(text);
}
