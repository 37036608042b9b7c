/* Region tags (gmt_tag_push in the public API): each distinct name gets a
 * small id once, so that a stack can carry the tags open on its thread as
 * words (stacks.h) and the snapshot can name them. */
#ifndef GMT_TAGS_H
#define GMT_TAGS_H

#include <stdint.h>

/* Tag ids a process may use, from 1: the first GMT_TAGS_MAX - 1 distinct
 * names have ids of their own, every later name the last id, whose name says
 * so (one warning). */
#define GMT_TAGS_MAX 4096
/* Bytes of a name kept, its NUL included (gpumemtrace.h's GMT_TAG_MAX). */
#define GMT_TAG_NAME_MAX 64

/* The id of `name` (its first GMT_TAG_NAME_MAX - 1 bytes), registering it
 * when new. Thread-safe; no malloc. Returns 0 and *id, -EINVAL for NULL or
 * "", or -ENOMEM. */
int gmt__tag_id(const char *name, uint32_t *id);

/* The name of tag `id`, or NULL for an unknown id. Any thread. */
const char *gmt__tag_name(uint32_t id);

/* In the child after fork(): another thread may have held the lock. */
void gmt__tags_after_fork(void);

#endif /* GMT_TAGS_H */
