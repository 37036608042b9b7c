/* Allocation sites: the one rule that says which frame of a stack is where
 * the program allocated, what every frame is (the CUDA call, a library, the
 * program's own code) and which stacks are one site. The snapshot writes
 * what it concludes (stacks[].site, frames[].role) and every view — the
 * stderr reports, the gate, the viewer — reads that instead of deciding
 * again. docs/guide.md, "Allocation sites", states the rule for users. */
#ifndef GMT_SITES_H
#define GMT_SITES_H

#include "analyze/frames.h"
#include "util/addrmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a frame is, X(ID, "word"): the CUDA libraries and what they called
 * (the driver, the runtime, the tracer; a static runtime's internals); a
 * library (frameworks, NVIDIA's libraries, ffi, the interpreter, the C and
 * C++ runtimes, installed Python packages and the standard library); the
 * program's own code. tests/unit/test_vocabulary.py holds the viewer's and
 * the schema's copies to this list. */
#define GMT_FRAME_ROLES(X) X(CUDA, "cuda") X(LIBRARY, "library") X(USER, "user")

enum gmt__frame_role {
#define GMT_X(id, word) GMT_ROLE_##id,
	GMT_FRAME_ROLES(GMT_X)
#undef GMT_X
	GMT_ROLE_COUNT
};

const char *gmt__frame_role_name(enum gmt__frame_role role);

/* Callers added to a label to tell apart sites whose own frame is the same. */
#define GMT_SITE_CALLERS 3

/* The library patterns: the built-in list, and the user's
 * (GPUMEMTRACE_SITE_LIBRARIES: a comma list of glob patterns; "!PATTERN"
 * marks the program's own code, before any other pattern is tried). A
 * pattern with a '/' is matched against the whole path (of the module, or
 * the Python file), one without against its last component. */
struct gmt__site_rules {
	char *text;              /* the user's list, split in place; malloc'd */
	const char **mine, **lib;
	size_t nmine, nlib;
	bool builtins;           /* the built-in list applies */
	/* Whether each path is library code (1) or not (0), by the path's
	 * address: a snapshot's frames name few modules and files, each
	 * through one string. */
	struct gmt__addrmap memo;
};

/* Compiles `user` (may be NULL or ""). 0, or -ENOMEM (then the rules are the
 * built-in list alone, and still valid to use). */
int gmt__site_rules_init(struct gmt__site_rules *r, const char *user);
void gmt__site_rules_free(struct gmt__site_rules *r);

/* A frame as the rule sees it: native (module and offset; function and
 * position where known) or Python (function, file, line). */
struct gmt__site_frame {
	const char *module, *function, *file;
	uintptr_t offset;
	int line;
	bool python, inlined;
};

/* The role of one frame by itself (the positional part of the rule — what a
 * CUDA frame called is CUDA's — is gmt__sites_build's). Notes the path's
 * match in r's memo (without memory, matches again next time). */
enum gmt__frame_role gmt__site_frame_role(struct gmt__site_rules *r, const struct gmt__site_frame *f);

/* A frame in words, for a label: "forward (train.py:29)", "make (libfoo.so)",
 * "libfoo.so+0x1f7a". Returns buf. */
const char *gmt__site_frame_text(const struct gmt__site_frame *f, char *buf, size_t len);

/* One stack's site. */
struct gmt__stack_site {
	uint32_t site;           /* stacks with the same call chain of the program's own code share it; from 1 */
	int frame;               /* the site's frame among the stack's written frames; -1: no frames */
	/* The outermost frame the label names: the caller that tells this site
	 * from the others with the same frame text (the site's frame when the
	 * label needs no caller). Where a report points at one line for the
	 * site (the gate's annotations), this is the line. */
	int label_frame;
	bool user;               /* that frame is the program's own code (else no frame was) */
	bool python;             /* that frame is a Python frame */
	int nframes;
	uint8_t *roles;          /* enum gmt__frame_role of each written frame */
	char *label;             /* the site in words */
};

struct gmt__site_pending;

/* The sites of n stacks, by index (a snapshot's: its ids, ascending). */
struct gmt__sites {
	struct gmt__stack_site *v;
	size_t n;
	uint32_t nsites;         /* distinct site ids */
	char **labels;           /* by site id - 1 */
	struct gmt__site_pending *pending; /* while being built */
};

/* Where the frames of stacks that are not the recorder's come from (a
 * framework's Python stacks, tensors.h): true with the frames of `id`
 * (innermost first), false when id is not one of them. */
struct gmt__frame_source {
	bool (*frames)(const void *ctx, uint32_t id, const struct gmt__site_frame **v, int *n);
	const void *ctx;
};

/* Decides every stack's site — one rule and one numbering for the
 * recorder's stacks and those of `more` (may be NULL); frames through cache
 * (the loader's lock: never under the tracer's). 0, or -ENOMEM (then out is
 * empty: n is 0). */
int gmt__sites_build(struct gmt__sites *out, struct gmt__frame_cache *cache, const uint32_t *ids, size_t n,
		     struct gmt__site_rules *rules, const struct gmt__frame_source *more);

/* The same in steps, from frames given (the unit tests' way in): room for n
 * stacks; stack i's frames (innermost first), each stack once; then the
 * sites numbered and labelled. Each returns 0 or -ENOMEM; after a failure
 * only gmt__sites_free may follow. */
int gmt__sites_begin(struct gmt__sites *out, size_t n);
int gmt__sites_add(struct gmt__sites *s, size_t i, const struct gmt__site_frame *frames, int n,
		   struct gmt__site_rules *rules);
int gmt__sites_finish(struct gmt__sites *s);

void gmt__sites_free(struct gmt__sites *s);

/* The call a failure came from (tracer/episode.c: whether two failures are
 * one call of the program asking again): a number for stack `id`'s chain of
 * the program's own frames by this rule, from the site's frame outwards —
 * equal for two stacks with the same chain. Frames are named through `cache`
 * (gmt__frames_open_loader's: the loader alone), so a native frame of the
 * chain is told by its module and offset, a Python frame by its function,
 * file and line. Stacks with no frame of the program's own (a library's
 * thread) all get one number: nothing tells their calls apart. 0: not known
 * (stack 0, an unknown id, no memory). Takes the loader's lock: never under
 * the tracer's. */
uint64_t gmt__site_call(struct gmt__frame_cache *cache, struct gmt__site_rules *rules, uint32_t id);

/* The same for frames given, innermost first (the unit tests' way in); a
 * native frame with its module and offset. */
uint64_t gmt__site_call_frames(const struct gmt__site_frame *v, int n, struct gmt__site_rules *rules);

/* The site of stack `id` (one of the ids given to build), or NULL. */
const struct gmt__stack_site *gmt__sites_of(const struct gmt__sites *s, const uint32_t *ids, uint32_t id);

#endif /* GMT_SITES_H */
