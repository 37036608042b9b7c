/* The out-of-memory diagnosis: from the numbers a snapshot holds about the
 * failing device, which named verdicts explain the failure, the primary one,
 * and the numbers each rests on. A pure function (no I/O), so that every rule
 * is tested on made-up numbers; docs/snapshot-format.md documents the rules. */
#ifndef GMT_DIAGNOSE_H
#define GMT_DIAGNOSE_H

#include "intercept/device.h"
#include "record/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gmt__rp_expandable; /* analyze/replay.h */

/* When the driver gives no granularity. */
#define GMT_DEFAULT_GRANULARITY (2u << 20)

/* The verdicts, X(ID, "word"), in the order of the rules (diagnose.c).
 * tests/unit/test_vocabulary.py holds the viewer's and the schema's copies
 * to this list. */
#define GMT_VERDICTS(X)                                                                  \
	X(EXHAUSTION, "exhaustion")       /* this process's own live memory fills the device */ \
	X(FRAGMENTATION, "fragmentation") /* free bytes exist, not in a usable shape */      \
	X(POOL, "pool_reservation")       /* stream-ordered pools hold memory they do not use */ \
	X(OTHERS, "other_processes")      /* other processes hold the memory */              \
	X(GROWTH, "growth")               /* sites whose live bytes kept rising */           \
	X(UNTRACKED, "untracked")         /* used memory the tracer did not see */          \
	X(NEVER_FITS, "never_fits")       /* more than this process could ever have */      \
	X(CACHE_RELEASED, "cache_released") /* memory freed during the episode did not help */ \
	X(ALLOCATOR_FRAGMENTATION, "allocator_fragmentation") /* free inside a framework's segments, not in one block */ \
	X(FRAMEWORK_LIMIT, "framework_limit") /* a framework's allocator refused past its own limit */

enum gmt__verdict {
#define GMT_X(id, word) GMT_VERDICT_##id,
	GMT_VERDICTS(GMT_X)
#undef GMT_X
	GMT_VERDICT_COUNT
};

/* The remedies, X(ID, "word"), in the order they are offered.
 * tests/unit/test_vocabulary.py holds the viewer's and the schema's copies
 * to this list. */
#define GMT_REMEDIES(X)                                                                    \
	X(SPLIT_REQUEST, "split_request")       /* never_fits: the request in pieces */          \
	X(EXPANDABLE, "expandable_segments")    /* allocator_fragmentation, PyTorch's */         \
	X(SMALLER_BATCH, "smaller_batch")       /* the step's live memory covers the shortfall */ \
	X(CHECKPOINTING, "checkpointing")       /* the same memory, recomputed instead */        \
	X(MIXED_PRECISION, "mixed_precision")   /* the same memory, PyTorch's, in 16 bits */     \
	X(FREE_GROWTH, "free_growing_site")     /* growth: what a site keeps by mistake */       \
	X(LARGEST_SITE, "shrink_largest_site")  /* one site alone covers the shortfall */        \
	X(TRIM_POOLS, "trim_pools")             /* pool_reservation */                           \
	X(LARGE_FIRST, "large_blocks_first")    /* fragmentation: stranded pages */              \
	X(OTHER_DEVICE, "other_device")         /* other_processes */          \
	X(RAISE_LIMIT, "raise_framework_limit") /* framework_limit, the device has room */

enum gmt__remedy_id {
#define GMT_X(id, word) GMT_REMEDY_##id,
	GMT_REMEDIES(GMT_X)
#undef GMT_X
	GMT_REMEDY_COUNT
};

struct gmt__remedy {
	enum gmt__remedy_id id;
	enum gmt__verdict verdict; /* the verdict whose numbers it answers */
	uint64_t bytes;           /* the memory it would give back (or the request's size) */
	uint32_t stack;           /* the site it names (0: none) */
	const char *rests_on[6];  /* names of diagnosis.numbers it reads, NULL-terminated */
	char text[512];
};

/* Page occupancy of one device's plain device memory (kind "device") at the
 * allocation granularity: pages holding live allocations, those only partly
 * covered, and the bytes those leave unusable. */
struct gmt__pages {
	uint64_t granularity;
	bool granularity_known;  /* from the driver, else GMT_DEFAULT_GRANULARITY */
	uint64_t pages, partial, stranded_bytes;
	uint64_t histogram[5];   /* pages by occupancy: <25%, <50%, <75%, <100%, full */
	uint64_t largest_hole;   /* the largest free run inside a partly used page */
};

struct gmt__diag_input {
	uint64_t requested;
	int device;
	const struct gmt__device_state *state; /* NULL when the device was not asked */
	uint64_t tracked[GMT_KIND_COUNT];      /* this process's live bytes there, by kind */
	struct gmt__pages pages;
	uint64_t growth_bytes;                 /* growing sites with memory there */
	int growth_sites;
	/* The out-of-memory episode: its failures so far, and what the
	 * program freed on the device since the first (capture.h). */
	uint64_t episode_failures;
	uint64_t released_bytes, released_count;
	/* A framework allocator's own state (capture.h "framework"): its
	 * counters known (allocated, free inside its segments), its largest
	 * free block known (not CuPy's), their values on the device, and the
	 * request its error or observer named (0: none). */
	bool fw_known, fw_largest_known;
	uint64_t fw_reserved_unallocated, fw_largest_free, fw_requested;
	bool fw_torch;           /* the framework is PyTorch */
	const char *fw_name;     /* its name ("torch", "cupy", "jax"), or NULL */
	/* Its allocated bytes and its own limit on the device (0: none
	 * known), whether or not the rest of its state is. */
	uint64_t fw_allocated, fw_limit;
	int fw_expandable;       /* its segments there expandable: 1, not: 0, not known: -1 */
	/* Step markers (gmt_step): whether one came before the failure, its
	 * number, the steps marked, and the live bytes on the device allocated
	 * since it (the step's activations, temporaries and gradients). */
	bool step_known;
	uint64_t step, steps, step_live_bytes;
	/* step_live_bytes from the framework's counters (its allocated bytes
	 * now less at the step's mark: a caching allocator serves a step from
	 * segments the driver gave before it), not the driver's allocations. */
	bool step_from_framework;
	/* The stack holding the most live bytes on the device, and those bytes;
	 * whether all of them were allocated before the program's first step
	 * mark — its set-up, a model's weights and optimizer state — (1), not
	 * all (0), or it is not known (-1: no step marked, or the history does
	 * not reach back to the first). */
	uint32_t largest_stack;
	uint64_t largest_stack_bytes;
	int largest_before_steps;
	bool largest_python; /* its site's frame is Python's */
	/* The growing site that gained most there: its stack, its gain, and
	 * with step markers what it gained over whole steps and how many
	 * (gmt__site_step_growth; 0: not known). */
	uint32_t growth_top_stack;
	uint64_t growth_top_bytes, growth_top_step_bytes, growth_top_steps;
	/* Its site's label (sites.h), or NULL; whether its frame is Python's,
	 * and whether it is a stack of the framework's tensors. */
	const char *growth_top_label;
	bool growth_top_python, growth_top_tensor;
	/* It is the framework's tensors its history gave no line of (stack 0):
	 * with tensors_lined, those of a run that recorded lines for others
	 * (made in autograd's backward or C++ code, with no Python frame);
	 * without, a run that recorded none (PyTorch's under
	 * GPUMEMTRACE_TORCH_HISTORY=events). */
	bool growth_top_unlined, tensors_lined;
	/* The framework's tensors are known (analyze/tensors.h): growth, the
	 * largest stack and the step's memory above are those of its tensors
	 * and of the memory that is not the framework's, and a growth that
	 * covers the shortfall comes before its allocator's fragmentation. */
	bool tensors;
	/* step_live_bytes is what the live tensors allocated since the step's
	 * mark hold. */
	bool step_tensors;
	/* PyTorch's history replayed under its settings with expandable
	 * segments (replay.h), or NULL where there was none to replay or its
	 * segments are expandable already. */
	const struct gmt__rp_expandable *replay;
};

struct gmt__diag_verdict {
	enum gmt__verdict verdict;
	uint64_t bytes;           /* the memory it puts the failure on */
	const char *rests_on[6];  /* names of diagnosis.numbers it reads, NULL-terminated */
	char detail[512];
};

struct gmt__diagnosis {
	enum gmt__verdict primary;
	char summary[768];
	int nverdicts;           /* those that apply, the primary first */
	struct gmt__diag_verdict v[GMT_VERDICT_COUNT];
	/* derived numbers (the inputs are written beside them) */
	bool have_mem;
	uint64_t needed;         /* requested, rounded up to the granularity */
	uint64_t used, shortfall;
	uint64_t tracked_total;  /* all kinds but managed (not resident until touched) */
	uint64_t footprint;      /* what this process's tracked memory takes of the device */
	bool have_pools;
	uint64_t pool_unused;
	bool have_untracked;
	uint64_t untracked;
	uint64_t capacity;       /* free + footprint: all this process could have of the device */
	int nremedies;           /* what to try, in GMT_REMEDIES order (remedy.h) */
	struct gmt__remedy remedies[GMT_REMEDY_COUNT];
};

const char *gmt__verdict_name(enum gmt__verdict v);

/* What a framework's own limit weighs with its request: PyTorch's memory
 * fraction caps its reserved bytes (its segments, free blocks in them too),
 * CuPy's and JAX's limits the bytes they have allocated. */
uint64_t gmt__fw_held_by_limit(const struct gmt__diag_input *in);

void gmt__diagnose(const struct gmt__diag_input *in, struct gmt__diagnosis *out);

#endif /* GMT_DIAGNOSE_H */
