/* The framework's level of a snapshot (docs/guide.md, "Two levels of
 * memory"): the tensors a framework's allocator handed over — PyTorch's
 * active blocks — with the Python stacks that allocated them; their history
 * (the framework's own, handed over with them) replayed through the growth
 * rule of the driver's level (state/history.h), the program's steps
 * included; and how each device's live bytes split between the framework's
 * tensors, the free space inside its segments and the memory it did not
 * allocate. Pure: built from the capture and the framework's parsed state,
 * without lock or I/O. */
#ifndef GMT_TENSORS_H
#define GMT_TENSORS_H

#include "analyze/capture.h"
#include "analyze/sites.h"
#include "state/history.h"
#include "state/table.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A tensor stack's id in the document: this plus its index (from 1), apart
 * from the recorder's ids (below 2^24). 0 stays "no stack recorded". */
#define GMT_TENSOR_STACK_BASE (1u << 30)

struct gmt__tensor {
	uint64_t addr, size, requested;
	uint64_t segment;  /* the address of the segment it lies in */
	uint64_t time_ns;  /* when the framework's history saw it allocated; 0: before the history */
	uint64_t stream;
	uint32_t stack;    /* its stack's index (0: no frames) */
	int device;
};

/* A Python stack of the framework's, innermost first; the strings point
 * into the parsed state. */
struct gmt__tensor_stack {
	struct gmt__site_frame *v;
	int n;
};

/* One device's live memory by level: tensor + cached + other = live. */
struct gmt__tensor_device {
	int device;
	uint64_t tensor_bytes, tensor_count;
	uint64_t reserved_bytes; /* the framework's segments */
	uint64_t cached_bytes;   /* free inside them: reserved - tensor */
	uint64_t segment_bytes;  /* the driver's live memory that backs them */
	uint64_t other_bytes;    /* the driver's live memory that is not the framework's */
	uint64_t live_bytes;     /* the driver's live memory there, all of it */
};

struct gmt__segment_range {
	uint64_t addr, end;
	int device;
};

struct gmt__tensors {
	bool known;              /* the framework handed its blocks over */
	const char *framework;   /* its name */
	struct gmt__tensor *v;   /* the live tensors, by address */
	size_t n;
	struct gmt__tensor_stack *stacks; /* [0]: no frames */
	size_t nstacks;
	struct gmt__tensor_device dev[GMT_SNAPSHOT_MAX_DEVICES];
	int ndev;
	struct gmt__segment_range *segs; /* by address */
	size_t nsegs;
	uint64_t *backing;       /* VMM handles mapped inside a segment, ascending */
	size_t nbacking;
	/* The replay: a history of the tensor stacks (ids: indices), NULL when
	 * the framework handed over none. */
	struct gmt__history *history;
	uint64_t events;         /* the framework's tensor events replayed */
	uint64_t seeded;         /* tensors live before its first event */
	uint64_t first_ns, last_ns; /* its first and last event (0: no times) */
	bool complete;           /* it holds every event since the framework's history began */
	uint64_t steps;          /* step marks replayed among its events */
	/* The latest step mark before the snapshot, and the live tensors
	 * allocated since: the step's own (step_known: the history reaches
	 * back to the mark, with times). */
	bool step_known;
	uint64_t step, step_ns, step_bytes, step_count;
	/* The first step mark, when the history reaches back to it: a tensor
	 * older than it is the program's set-up (a model's weights). */
	bool first_step_known;
	uint64_t first_step_ns;
	struct gmt__site_ref *sites; /* the replay's sites with live or past tensors, most live bytes first */
	size_t nsites;
	json_t *state;           /* the parsed state the strings point into (a reference) */
};

/* Builds t from a framework's state (parsed; may be NULL) and the driver's
 * live memory of the snapshot: mem[0..nmem) its "allocations" (memory and
 * VMM handles), maps[0..nmaps) its VMM mappings, each by address. t->known
 * stays false when the state has no blocks. 0, or -ENOMEM (t is then to be
 * freed and known false). */
int gmt__tensors_build(struct gmt__tensors *t, json_t *state, const struct gmt__entry *const *mem, size_t nmem,
		       const struct gmt__entry *const *maps, size_t nmaps);
void gmt__tensors_free(struct gmt__tensors *t);

/* Whether the driver's live entry e (of "allocations") is memory of a
 * framework's segment: it lies inside one, or is a VMM handle mapped
 * inside one. */
bool gmt__tensors_backs(const struct gmt__tensors *t, const struct gmt__entry *e);

/* A tensor stack's document id from its index, and back (0: none). */
uint32_t gmt__tensor_stack_id(uint32_t index);
bool gmt__is_tensor_stack(uint32_t id);

/* The frames of document stack `id` when it is a tensor stack of t (a
 * gmt__frame_source for sites.h): true and *v, *n; else false. */
bool gmt__tensors_frames(const void *t, uint32_t id, const struct gmt__site_frame **v, int *n);

#endif /* GMT_TENSORS_H */
