/* Region tags (tags.h): a fixed table of names, mapped on first use, and a
 * hash index into it; both only written under the lock. */
#define _GNU_SOURCE
#include "record/tags.h"

#include "util/log.h"
#include "util/map.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* R1 (release of `count`, after the name is written) pairs with A1 (acquire
 * in gmt__tag_name): a reader of an id below the count sees its name. */

#define GMT_TAG_SLOTS (2 * GMT_TAGS_MAX) /* index at most half full */

/* The last id: every name past the first GMT_TAGS_MAX - 1 (tags.h). */
#define OVERFLOW_NAME "(tags past the 4095th)"
_Static_assert(GMT_TAGS_MAX == 4096, "OVERFLOW_NAME counts the names");

struct tag_table {
	char names[GMT_TAGS_MAX + 1][GMT_TAG_NAME_MAX]; /* [0] unused */
	uint16_t slots[GMT_TAG_SLOTS];                  /* ids; 0: free */
};

static struct tag_table *table; /* under lock; readers after A1 */
static _Atomic uint32_t count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t name_hash(const char *s, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

int gmt__tag_id(const char *name, uint32_t *id)
{
	size_t len;
	uint32_t i, n;
	int r = 0;

	if (name == NULL || name[0] == '\0')
		return -EINVAL;
	len = strnlen(name, GMT_TAG_NAME_MAX - 1);
	pthread_mutex_lock(&lock);
	if (table == NULL) {
		void *p = gmt__map(sizeof(*table));

		if (p == NULL) {
			r = -ENOMEM;
			goto out;
		}
		table = p;
	}
	for (i = name_hash(name, len) % GMT_TAG_SLOTS; table->slots[i] != 0; i = (i + 1) % GMT_TAG_SLOTS) {
		const char *known = table->names[table->slots[i]];

		if (strncmp(known, name, len) == 0 && known[len] == '\0') {
			*id = table->slots[i];
			goto out;
		}
	}
	n = atomic_load_explicit(&count, memory_order_relaxed) + 1;
	if (n >= GMT_TAGS_MAX) {
		/* Full: one tag stands for every name beyond (never in the index). */
		if (n == GMT_TAGS_MAX) {
			memcpy(table->names[n], OVERFLOW_NAME, sizeof(OVERFLOW_NAME));
			atomic_store_explicit(&count, n, memory_order_release);
			gmt__warn("more than %d distinct tag names: the others are recorded as the tag '%s'",
				  GMT_TAGS_MAX - 1, OVERFLOW_NAME);
		}
		*id = GMT_TAGS_MAX;
		goto out;
	}
	memcpy(table->names[n], name, len);
	table->names[n][len] = '\0';
	table->slots[i] = (uint16_t)n;
	/* R1: release of the count publishes the name; pairs with A1. */
	atomic_store_explicit(&count, n, memory_order_release);
	*id = n;
out:
	pthread_mutex_unlock(&lock);
	return r;
}

const char *gmt__tag_name(uint32_t id)
{
	/* A1: acquire of the count; pairs with R1 in gmt__tag_id. */
	if (id == 0 || id > atomic_load_explicit(&count, memory_order_acquire))
		return NULL;
	return table->names[id];
}

void gmt__tags_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
}
