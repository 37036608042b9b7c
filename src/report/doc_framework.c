/* The document's "framework" section (docs/snapshot-format.md): a
 * framework's allocator state as its bootstrap handed it over (gmt_framework:
 * checked JSON), each of its segments joined to the driver's memory by
 * address — "allocation": true when a live allocation, VMM reservation or
 * mapping of the snapshot starts there. */
#define _GNU_SOURCE
#include "report/document.h"

#include <jansson.h>
#include <stdlib.h>

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

void gmt__doc_framework(struct gmt__json *o, const struct gmt__snapshot *s, const struct gmt__model *m)
{
	json_t *doc = json_loads(s->framework, 0, NULL), *segs, *seg;
	size_t i, matched = 0;
	char *text;

	/* Checked when it was handed over: a failure here is memory. */
	if (doc == NULL)
		return;
	segs = json_object_get(doc, "segments");
	json_array_foreach(segs, i, seg) {
		json_t *a = json_object_get(seg, "address");
		uint64_t addr;
		bool found;

		if (!json_is_integer(a) || json_integer_value(a) < 0)
			continue;
		addr = (uint64_t)json_integer_value(a);
		found = starts_at(m->live, m->hi0, addr) || starts_at(m->live + m->hi0, m->hi1 - m->hi0, addr) ||
			starts_at(m->live + m->hi1, m->nlive - m->hi1, addr);
		matched += found;
		json_object_set_new(seg, "allocation", json_boolean(found));
	}
	json_object_set_new(doc, "segments_joined", json_integer((json_int_t)matched));
	text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(doc);
	if (text == NULL)
		return;
	gmt__json_str(o, " \"framework\": ");
	gmt__json_str(o, text);
	gmt__json_str(o, ",\n");
	free(text);
}
