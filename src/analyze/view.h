/* What a snapshot derives from its live set before it writes anything:
 * per device its pages and fragmentation, the growing sites with memory
 * there (the tensors' where a framework handed them over), and the inputs
 * and result of the diagnosis. Pure: no lock, no I/O. */
#ifndef GMT_VIEW_H
#define GMT_VIEW_H

#include "analyze/diagnose.h"
#include "analyze/capture.h"
#include "analyze/sites.h"
#include "analyze/tensors.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Per device of the snapshot: page occupancy and live bytes by kind; for an
 * oom snapshot, the diagnosis of the failing device. */
#define SIZE_CLASSES 64

struct gmt__view {
	struct gmt__pages pages[GMT_SNAPSHOT_MAX_DEVICES];
	uint64_t kinds[GMT_SNAPSHOT_MAX_DEVICES][GMT_KIND_COUNT];
	/* live allocations by size class [2^k, 2^(k+1)): count and bytes */
	uint64_t class_count[GMT_SNAPSHOT_MAX_DEVICES][SIZE_CLASSES];
	uint64_t class_bytes[GMT_SNAPSHOT_MAX_DEVICES][SIZE_CLASSES];
	bool have_diagnosis;
	struct gmt__diag_input diag_in;
	struct gmt__diagnosis diag;
	uint32_t growth_ids[8]; /* the largest growing sites on the failing device */
	int ngrowth_ids;
};

/* Fills the view from the live allocations v[0..n) (sorted by address), the
 * framework's state (parsed, may be NULL), its tensors (tensors.h) and the
 * replay of its history (replay.h, may be NULL): all but the diagnosis
 * itself, whose labels need the sites. */
void gmt__view_build(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
		     const json_t *framework, const struct gmt__tensors *tensors,
		     const struct gmt__rp_expandable *replay, struct gmt__view *view);

/* The diagnosis of an out-of-memory snapshot, once the sites of the stacks
 * (ids[0..], ascending) are decided: the growing site's label and words. */
void gmt__view_diagnose(struct gmt__view *view, const struct gmt__sites *sites, const uint32_t *ids);

#endif /* GMT_VIEW_H */
