/* The document's "framework" section (docs/snapshot-format.md): a
 * framework's allocator state as its bootstrap handed it over (gmt_framework:
 * checked JSON), each of its segments joined to the driver's memory by the
 * model ("allocation", "segments_joined"). Of what the bootstrap handed
 * over for the analysis, the framework's history is here in a short form
 * ("allocator_history", for gpumemtrace whatif's replay) and, with the steps
 * marked, in the "tensors" section as what the model made of it. */
#define _GNU_SOURCE
#include "report/document.h"

#include "analyze/replay.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* One event of the hand-over's traces ([action, address, size, time_us,
 * stack, stream]) as the snapshot keeps it, [action, address, size,
 * stream], or NULL where it is not of that form. */
static json_t *history_event(const json_t *ev)
{
	const char *action = json_string_value(json_array_get(ev, 0));
	const json_t *addr = json_array_get(ev, 1), *size = json_array_get(ev, 2), *stream = json_array_get(ev, 5);

	if (gmt__rp_op_of(action) < 0 || !json_is_integer(addr) || json_integer_value(addr) < 0 ||
	    !json_is_integer(size) || json_integer_value(size) < 0)
		return NULL;
	return json_pack("[sIII]", action, json_integer_value(addr), json_integer_value(size),
			 json_is_integer(stream) ? json_integer_value(stream) : (json_int_t)0);
}

/* The allocator's history for the replay (gpumemtrace whatif): per device
 * whether it is complete and its events, from the hand-over's traces. NULL
 * when there were none. */
static json_t *allocator_history(const json_t *traces)
{
	json_t *out, *tr, *ev;
	size_t i, j;

	if (!json_is_array(traces))
		return NULL;
	out = json_array();
	json_array_foreach(traces, i, tr) {
		const json_t *device = json_object_get(tr, "device");
		json_t *events = json_array(), *one;

		if (!json_is_integer(device) || json_integer_value(device) < 0 || events == NULL) {
			json_decref(events);
			continue;
		}
		json_array_foreach(json_object_get(tr, "events"), j, ev) {
			one = history_event(ev);
			if (one != NULL)
				json_array_append_new(events, one);
		}
		json_array_append_new(out, json_pack("{sIsbso}", "device", json_integer_value(device), "complete",
						     json_is_true(json_object_get(tr, "complete")), "events", events));
	}
	return out;
}

void gmt__doc_framework(struct gmt__json *o, const struct gmt__model *m)
{
	json_t *doc = json_copy(m->framework), *history;
	char *text;

	if (doc == NULL)
		return;
	history = allocator_history(json_object_get(doc, "traces"));
	if (history != NULL)
		json_object_set_new(doc, "allocator_history", history);
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
