/* Modules the program unloads (dlclose): a frame captured while one was
 * loaded is named by it, never by a module the loader put at its addresses
 * later. Each unload advances an epoch; a stack is interned with the epoch of
 * its capture (stacks.h), and a frame of a stack of epoch E whose address lay
 * in a module unloaded after E belongs to that module. Its build-id is read
 * from its image before the unload: the file at its path may be another
 * build by the time its frames are named. */
#ifndef GMT_MODULES_H
#define GMT_MODULES_H

#include "util/buildid.h"

#include <stdbool.h>
#include <stdint.h>

struct gmt__unloaded {
	const char *path; /* as the loader named it */
	uintptr_t base;   /* its load bias */
	uintptr_t lo, hi; /* the span of its loaded segments */
	uint32_t epoch;   /* the epoch its unload began */
	struct gmt__build_id id; /* read from its image while it was mapped */
};

/* The epoch now: 0 until the first module is unloaded. One relaxed load. */
uint32_t gmt__modules_epoch(void);

/* The dlclose hook: calls the real dlclose, and records each module it
 * unloaded, with its build-id. Returns what dlclose returned, errno as it left it. */
int gmt__modules_dlclose(void *handle);

/* The module that held ip when a stack of epoch `epoch` was captured, if it
 * has been unloaded since: the first unloaded after that epoch whose span
 * holds ip. Thread-safe. */
bool gmt__modules_unloaded(uintptr_t ip, uint32_t epoch, struct gmt__unloaded *out);

/* The fork handler's (tracer/core.c): the list's lock held across the fork,
 * so that a child never inherits it taken by a thread it does not have. */
void gmt__modules_fork_prepare(void);
void gmt__modules_fork_parent(void);
void gmt__modules_fork_child(void);

#endif /* GMT_MODULES_H */
