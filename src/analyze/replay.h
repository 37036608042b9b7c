/* The replay of a recorded PyTorch run through the caching allocator model
 * (allocmodel.h; docs/whatif.md): what a snapshot holds of PyTorch's
 * allocator (its history, segments, live blocks, settings) is read once,
 * then replayed under the run's own settings — which must reproduce every
 * segment event the history recorded, or the replay answers nothing — and
 * under others: peak reserved, reserved-but-unallocated at the failing
 * request, whether that request fits, the first request that fails. Pure:
 * no I/O. */
#ifndef GMT_REPLAY_H
#define GMT_REPLAY_H

#include "analyze/allocmodel.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The history's actions, as PyTorch names them (and the snapshot's
 * allocator_history, docs/snapshot.schema.json). alloc: a tensor, its
 * address and the bytes asked; free_requested is not replayed (a block is
 * reusable at its free_completed); oom: a request PyTorch failed, its
 * rounded size. */
#define GMT_RP_ACTIONS(X)                                                                 \
	X(ALLOC, "alloc") X(FREE_REQUESTED, "free_requested") X(FREE, "free_completed")     \
	X(SEGMENT_ALLOC, "segment_alloc") X(SEGMENT_FREE, "segment_free")                  \
	X(SEGMENT_MAP, "segment_map") X(SEGMENT_UNMAP, "segment_unmap") X(OOM, "oom")

enum gmt__rp_op {
#define GMT_X(id, word) GMT_RP_##id,
	GMT_RP_ACTIONS(GMT_X)
#undef GMT_X
	GMT_RP_OP_COUNT
};

/* The action's word, or NULL; the action of a word, or -1. */
const char *gmt__rp_op_name(enum gmt__rp_op op);
int gmt__rp_op_of(const char *word);

struct gmt__rp_event {
	enum gmt__rp_op op;
	uint64_t addr, size, stream;
};

struct gmt__rp_segment {
	uint64_t addr, size, stream;
	bool small, expandable;
};

struct gmt__rp_block {
	uint64_t addr, size, requested;
};

/* What a snapshot holds for the replay, of one device. */
struct gmt__rp_input {
	int device;
	char *version;             /* PyTorch's */
	char *conf;                /* the run's PYTORCH_CUDA_ALLOC_CONF; NULL when not known */
	char *conf_from;           /* where it was read (alloc_conf_from) */
	bool complete;             /* the history reaches back to PyTorch's start */
	struct gmt__rp_event *ev;
	size_t nev;
	/* Per event, what a replay under the run's own settings found the
	 * segment frees before that request to be: 0 not known, 1 the
	 * request's own release-and-retry, 2 the program's empty_cache(). A
	 * property of the run, which replays under other settings read. */
	uint8_t *releases;
	/* Per event and after the last (nev + 1): the program called
	 * torch.cuda.empty_cache() before it, as the bootstrap placed the
	 * call (snapshot minor 17); ncalls of them. */
	uint8_t *called;
	size_t ncalls;
	struct gmt__rp_segment *seg; /* the snapshot's segments */
	size_t nseg;
	struct gmt__rp_block *live;  /* its allocated blocks */
	size_t nlive;
	uint64_t snap_reserved, snap_allocated; /* PyTorch's counters at the snapshot */
	bool snap_known;
	uint64_t device_total;       /* the device's total; 0 when not known */
	uint64_t device_bytes;       /* what PyTorch could have held in all in the run */
	bool device_bytes_known;
	char device_rule[256];       /* how device_bytes was had */
	/* PyTorch's memory fraction in the run (set_per_process_memory_fraction):
	 * the most its allocator may reserve, as its out-of-memory observer was
	 * told (framework.devices[].limit_bytes, snapshot minor 18); 0: none. */
	uint64_t allowed_max;
};

/* Reads a snapshot document (the whole of it) into *in (zeroed first).
 * Returns 0; -EINVAL where doc is not a gpumemtrace snapshot, -ENOENT where
 * it holds no PyTorch allocator history (minor 14), -ENOMEM; with a
 * one-line reason in err. */
int gmt__rp_read(const json_t *doc, struct gmt__rp_input *in, char *err, size_t errlen);

/* A device as the driver told it at the snapshot. */
struct gmt__rp_device {
	int index;
	bool have_total, have_free;
	uint64_t total, free;
};

/* The same from a framework's state before it is a document (the tracer's
 * model): fw the bootstrap's hand-over, history its allocator_history (as
 * gmt__rp_history makes it), devs what the driver said. */
int gmt__rp_read_framework(const json_t *fw, const json_t *history, const struct gmt__rp_device *devs, size_t ndevs,
			   struct gmt__rp_input *in, char *err, size_t errlen);

/* The snapshot's allocator_history (per device: complete, events as
 * [action, address, size, stream]) from the hand-over's traces ([action,
 * address, size, time_us, stack, stream]); NULL when there are none or
 * memory ran out. */
json_t *gmt__rp_history(const json_t *traces);
void gmt__rp_input_free(struct gmt__rp_input *in);

/* What one replay found. Requests are numbered from 1 in the history's
 * order (alloc and oom events). */
struct gmt__rp_result {
	bool own;                  /* under the run's own settings */
	bool faithful;             /* own: every segment event reproduced, and the
				    * reserved and allocated bytes at the snapshot */
	char diverged[384];        /* own, not faithful: where and how */
	size_t segment_events;     /* own: the run's segment events compared */
	size_t inferred_calls;     /* empty_cache() calls inferred from the run's releases, not placed */
	char assumed[384];         /* what was assumed before the history; "" when nothing */
	size_t requests;           /* requests replayed */
	uint64_t peak_reserved;    /* up to the end of the replay */
	bool has_request;          /* the history holds a failing request (its last oom) */
	uint64_t request_no, request_size;
	bool request_reached;      /* the replay came to it (no earlier request failed) */
	bool request_fits;         /* it was served within the device bytes */
	uint64_t unallocated_at_request; /* reserved - allocated when it was asked */
	bool failed;               /* a request failed */
	/* fail_no 0: a tensor live before the history did not fit */
	uint64_t fail_no, fail_size, fail_reserved, fail_allocated;
	bool fail_is_request;      /* the first failure is the failing request */
};

/* Replays in under c on a device where PyTorch can hold limit bytes
 * (GMT_AM_UNLIMITED: no limit). own: c is the run's own settings: the state
 * before the history is rebuilt as it was, the model takes the run's
 * segment addresses, and its segment events are compared with the run's
 * (faithful, under the run's limit); otherwise the tensors live before the
 * history are allocated first. The replay stops at the history's failing
 * request (what follows is the program's answer to its failure) or at the
 * first request the run served that fails (the program would have raised
 * there). Returns 0, or a negative errno with a one-line reason in err
 * where the state before the history cannot be rebuilt (expandable
 * segments, a tensor in no segment) or memory runs out. */
int gmt__rp_run(const struct gmt__rp_input *in, const struct gmt__am_config *c, bool own, uint64_t limit,
		struct gmt__rp_result *r, char *err, size_t errlen);

/* What the diagnosis asks of the replay (docs/whatif.md, "In the
 * diagnosis"): would the failing request have fit under the run's own
 * settings with expandable_segments:True, on the device bytes of the run.
 * Answered only where the replay under the run's own settings is faithful. */
struct gmt__rp_expandable {
	bool replayed;             /* answered; else why says why not */
	char why[640];
	char setting[256];         /* the setting replayed, as PYTORCH_CUDA_ALLOC_CONF */
	uint64_t device_bytes;     /* what PyTorch could hold in all */
	bool fits;                 /* the failing request served */
	uint64_t peak_reserved;    /* up to it */
	uint64_t request_no, request_size;
	bool failed;               /* a request failed, the failing one or earlier */
	/* the first that failed (0: a tensor live before the history), its
	 * bytes, and the bytes reserved when it did */
	uint64_t fail_no, fail_size, fail_reserved;
	char assumed[384];         /* what was assumed before the history; "" when nothing */
};

void gmt__rp_try_expandable(const struct gmt__rp_input *in, struct gmt__rp_expandable *out);

#endif /* GMT_REPLAY_H */
