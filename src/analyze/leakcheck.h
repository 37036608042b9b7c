/* The leak check of an exit snapshot: the live allocations as items, the
 * pointer scan that tells leaked from referenced, the suppression and
 * caching rules matched on their frames, and the groups by site and class
 * that the document and the report show. */
#ifndef GMT_LEAKCHECK_H
#define GMT_LEAKCHECK_H

#include "analyze/capture.h"
#include "analyze/frames.h"
#include "analyze/leaks.h"
#include "analyze/tensors.h"
#include "state/history.h"
#include "tracer/options.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Totals: what each class (enum gmt__leak_class, options.h) holds
 * unsuppressed, what was suppressed, what counts. */
enum { TOTAL_SUPPRESSED = GMT_LEAK_CLASS_COUNT, TOTAL_COUNTED, TOTAL_COUNT };

#define NO_RULE UINT32_MAX
#define LEAK_SUSPECTS 8        /* growth suspects kept, largest growth first */
#define LEAK_REPORT_SITES 20   /* counted sites the report shows with their stacks */
#define LEAK_REPORT_FRAMES 16  /* frames shown per site */
#define LEAK_REPORT_BRIEF 10   /* lines for what does not count */

/* One live allocation at exit. */
struct gmt__leak_item {
	uint64_t addr, size;
	uint32_t stack;
	uint32_t rule; /* the rule its stack matched, NO_RULE: none */
	int16_t device;
	uint8_t kind, cls;
};

/* Each stack some item (or suspect) has: the rule its frames match (only
 * for a stack of items: a suspect's own stack needs none), and where it is
 * in words. */
struct gmt__leak_stack {
	uint32_t id;
	uint32_t rule;
	bool has_items;
	char where[384];
};

/* Items of one (stack, class, rule). */
struct gmt__leak_group {
	uint32_t stack, rule;
	uint8_t cls;
	bool counted;
	uint64_t count, bytes;
	size_t first; /* its items: order[first .. first + count) */
	uint64_t kinds[GMT_KIND_COUNT];
	struct gmt__leak_ref ref; /* the first reference found to one of them */
	uint64_t ref_value;       /* the address that word held */
};

struct gmt__leak_suspect {
	uint32_t id, rises, falls;
	uint64_t live, peak, growth;
};

struct gmt__leak_work {
	struct gmt__snapshot_leaks *in;
	struct gmt__leak_item *items;
	size_t n;
	struct gmt__leak_target *targets;
	size_t ntargets;
	struct gmt__leak_ref *refs;
	struct gmt__scan_stats scan;
	struct gmt__leak_stack *stacks;
	size_t nstacks;
	uint32_t *order;
	struct gmt__leak_group *groups;
	size_t ngroups;
	uint64_t total_count[TOTAL_COUNT], total_bytes[TOTAL_COUNT];
	uint64_t *rule_hits, *rule_bytes; /* per rule of in->supp */
	struct gmt__supp_memo memo;       /* of in->supp, for this snapshot's names */
	struct gmt__leak_suspect suspects[LEAK_SUSPECTS];
	int nsuspects;
};

/* After the stacks: rules applied, items grouped, totals counted. */
int gmt__leakcheck_classify(struct gmt__leak_work *lw);

/* The live allocations alloc[0..na) and VMM mappings map[0..nm), both in
 * address order, as items and scan targets; their stacks into ids. The
 * growth suspects from the history h; with a framework's tensors known
 * (t->known, tensors.h), the tensor sites' (their document ids) and those
 * of the driver's that hold no memory of the framework's segments. */
int gmt__leakcheck_collect(struct gmt__leak_work *lw, const struct gmt__entry *const *alloc, size_t na,
			   const struct gmt__entry *const *map, size_t nm, const struct gmt__history *h,
			   const struct gmt__tensors *t, struct gmt__idset *ids);

/* The pointer scan: leaked or referenced. */
void gmt__leakcheck_scan(struct gmt__leak_work *lw, const struct gmt__snapshot *s);

struct gmt__leak_stack *gmt__leakcheck_stack_of(const struct gmt__leak_work *lw, uint32_t id);

/* Called for every stack the document names, with its site's label
 * (sites.h): the leak check's rule matched on its frames (a framework's
 * stack, ips NULL: its label alone). */
void gmt__leakcheck_stack_seen(struct gmt__leak_work *lw, struct gmt__frame_cache *cache, uint32_t id,
			       const uintptr_t *ips, int n, const char *where);

void gmt__leakcheck_free(struct gmt__leak_work *lw);

/* What holds a reference, in words: the global's name where the loader
 * knows it. */
void gmt__leakcheck_where(struct gmt__frame_cache *cache, const struct gmt__leak_group *g, char *buf, size_t len);

bool gmt__leakcheck_suppresses(const struct gmt__leak_work *lw, uint32_t rule);

#endif /* GMT_LEAKCHECK_H */
