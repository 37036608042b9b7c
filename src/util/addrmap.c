/* A map from addresses to numbers (addrmap.h). */
#include "util/addrmap.h"

#include <stdint.h>
#include <stdlib.h>

/* The slot of key: its entry, or the empty slot where it would go (the map
 * is never more than half full). */
static struct gmt__addrmap_slot *slot_of(struct gmt__addrmap_slot *v, size_t cap, const void *key)
{
	size_t mask = cap - 1;
	size_t i = (size_t)((uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull >> 29) & mask;

	while (v[i].key != NULL && v[i].key != key)
		i = (i + 1) & mask;
	return &v[i];
}

bool gmt__addrmap_get(const struct gmt__addrmap *m, const void *key, size_t *value)
{
	const struct gmt__addrmap_slot *s;

	if (m->cap == 0)
		return false;
	s = slot_of(m->v, m->cap, key);
	if (s->key != key)
		return false;
	*value = s->value;
	return true;
}

void gmt__addrmap_put(struct gmt__addrmap *m, const void *key, size_t value)
{
	if (2 * (m->n + 1) > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 256;
		struct gmt__addrmap_slot *v = calloc(cap, sizeof(*v));

		if (v == NULL)
			return;
		for (size_t j = 0; j < m->cap; j++) {
			if (m->v[j].key != NULL)
				*slot_of(v, cap, m->v[j].key) = m->v[j];
		}
		free(m->v);
		m->v = v;
		m->cap = cap;
	}
	*slot_of(m->v, m->cap, key) = (struct gmt__addrmap_slot){ key, value };
	m->n++;
}

void gmt__addrmap_free(struct gmt__addrmap *m)
{
	free(m->v);
	*m = (struct gmt__addrmap){ 0 };
}
