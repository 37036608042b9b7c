/* Leak suppressions, LeakSanitizer style: rules `leak:PATTERN` (what matches
 * is not counted as a leak: it is "suppressed") and `cached:PATTERN` (what
 * matches is memory a caching allocator or pool holds: class "cached"), from
 * GPUMEMTRACE_SUPPRESSIONS and from the built-in list (framework caches and
 * the long-lived workspaces of NVIDIA's libraries). A pattern matches a frame
 * when it matches the frame's function (as recorded and demangled), module
 * path or source file: `*` is any run of characters, a leading `^` anchors at
 * the start and a trailing `$` at the end, otherwise the pattern may match
 * anywhere in the name (LeakSanitizer's reading). */
#ifndef GMT_SUPPRESS_H
#define GMT_SUPPRESS_H

#include "util/addrmap.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gmt__supp_type {
	GMT_SUPP_LEAK,   /* leak:PATTERN */
	GMT_SUPP_CACHED, /* cached:PATTERN */
};

/* A pattern as matched, worked out once: body[0..len) (the pattern without
 * its anchors, not NUL-terminated) with an implicit `*` before it (lead)
 * unless `^` anchors it, after it (trail) unless `$` does; star: the body
 * holds a `*` of its own. */
struct gmt__supp_glob {
	const char *body;
	size_t len;
	bool lead, trail, star;
};

struct gmt__supp_rule {
	enum gmt__supp_type type;
	const char *pattern; /* without the type (kept by the list) */
	struct gmt__supp_glob glob; /* of pattern (points into it) */
	const char *source; /* the file it came from, or "built-in" (kept by the list) */
	int line;           /* its line there (0 for built-in rules) */
	const char *why;    /* built-in rules: what the memory is, for the report */
	/* Filled by whoever matches: allocations and bytes it took. */
	uint64_t hits, bytes;
};

/* An ordered list of rules: the first rule that matches a stack wins.
 * store: the patterns' and sources' text, and an index of the rules
 * without a `*` by their text, so that a name is matched against millions
 * of rules in time that grows with the name, not with the rules. */
struct gmt__supp_store;
struct gmt__supp {
	struct gmt__supp_rule *v;
	size_t n, cap;
	struct gmt__supp_store *store;
};

/* Appends the built-in rules (docs/ci.md lists them). Returns 0 or -ENOMEM. */
int gmt__supp_add_builtins(struct gmt__supp *s);

/* Appends the rules of the file at `path`. Blank lines and lines starting
 * with `#` (after blanks) are ignored; every other line must be
 * `leak:PATTERN` or `cached:PATTERN` with a non-empty pattern (blanks around
 * it are dropped). Returns 0; or a negative errno with a one-line message in
 * err[0..errlen) naming the file, and the line for a malformed one (-EINVAL):
 * "FILE:LINE: expected leak:PATTERN or cached:PATTERN, got '...'". Nothing is
 * appended from a file with any error. */
int gmt__supp_load(struct gmt__supp *s, const char *path, char *err, size_t errlen);

void gmt__supp_free(struct gmt__supp *s);

/* Whether pattern matches text (rules above); false for a NULL text. */
bool gmt__supp_pattern_match(const char *pattern, const char *text);

/* The index of the first rule that matches text; SIZE_MAX when none does
 * (or text is NULL). Cost: rules with a `*` (or a body over 256 bytes) are
 * tried one by one; the others are looked up by every piece of text of a
 * length some rule has (about the text's length times the sum of the
 * distinct rule lengths, in hash probes), or tried one by one where that is
 * cheaper. */
size_t gmt__supp_first(const struct gmt__supp *s, const char *text);

/* Matching one stack: call gmt__supp_frame for each of its frames with the
 * frame's names (any may be NULL); *best holds the lowest index of a rule that
 * matched so far (start it at SIZE_MAX; SIZE_MAX at the end: none). */
void gmt__supp_frame(const struct gmt__supp *s, const char *function, const char *module,
		     const char *file, size_t *best);

/* gmt__supp_first of each name seen, remembered by the name's address
 * (util/addrmap.h): the stacks of a snapshot repeat the same few thousand
 * names (the frame cache's, libdw's, the Python frames') on every stack, so
 * each is matched once. NOTE: every name passed must stay where it is,
 * unchanged, until gmt__supp_memo_free — one memo per snapshot, never one
 * that outlives the names' owners. */
struct gmt__supp_memo {
	const struct gmt__supp *s; /* may be NULL: no rules */
	struct gmt__addrmap map;   /* name -> its first rule */
};

/* Starts an empty memo of the rules s (which must not change while it is
 * used). Allocates nothing; without memory later, names go unremembered and
 * are matched every time (the same answers, slower). */
void gmt__supp_memo_init(struct gmt__supp_memo *m, const struct gmt__supp *s);
void gmt__supp_memo_free(struct gmt__supp_memo *m);

/* gmt__supp_first(m->s, text), remembered. */
size_t gmt__supp_memo_first(struct gmt__supp_memo *m, const char *text);

/* gmt__supp_frame(m->s, ...), through the memo: the same *best. */
void gmt__supp_memo_frame(struct gmt__supp_memo *m, const char *function, const char *module,
			  const char *file, size_t *best);

/* "leak:PATTERN" or "cached:PATTERN" of a rule into buf. */
void gmt__supp_rule_text(const struct gmt__supp_rule *r, char *buf, size_t len);

#endif /* GMT_SUPPRESS_H */
