/* A map from addresses to numbers, for memos keyed by a string's address:
 * where the same few thousand names (the loader's, libdw's, the Python
 * frames') come back through the same pointers, each is worked out once.
 * Open addressing, grown at half full. Without memory it stays as it is: a
 * put is dropped and the caller works the answer out again next time.
 * NOTE: keyed by address, not contents: every key must stay where it is,
 * unchanged, while the map is used (a later string at a freed key's address
 * would get its answer). */
#ifndef GMT_ADDRMAP_H
#define GMT_ADDRMAP_H

#include <stdbool.h>
#include <stddef.h>

struct gmt__addrmap_slot {
	const void *key; /* NULL: an empty slot */
	size_t value;
};

/* Zeroed: empty, nothing allocated. */
struct gmt__addrmap {
	struct gmt__addrmap_slot *v;
	size_t n, cap; /* cap: 0 or a power of two */
};

/* Whether key (not NULL) is in the map; its value in *value. */
bool gmt__addrmap_get(const struct gmt__addrmap *m, const void *key, size_t *value);
/* Adds key (not NULL, not in the map yet) with its value. */
void gmt__addrmap_put(struct gmt__addrmap *m, const void *key, size_t value);
void gmt__addrmap_free(struct gmt__addrmap *m);

#endif /* GMT_ADDRMAP_H */
