/* A model of PyTorch's native CUDA caching allocator (the DeviceCachingAllocator
 * of c10/cuda/CUDACachingAllocator.cpp), for replaying a recorded run's
 * allocations under other settings (issue 39). Fed malloc, free, empty_cache
 * and the device's limit, it says which segments the driver would have seen
 * allocated, mapped, unmapped and freed, PyTorch's reserved and allocated
 * bytes along the way, and the first request that would fail. Pure: no I/O.
 *
 * Follows PyTorch 2.5 onwards, as read in its sources: the caching rules of
 * c10/cuda/CUDACachingAllocator.cpp (a 2.3-era copy and a recent main's,
 * which agree on every rule modelled here but the garbage collection's
 * skipping expandable blocks, taken from the recent one) and the
 * PYTORCH_CUDA_ALLOC_CONF parsers of a recent main's
 * c10/core/AllocatorConfig.cpp and c10/cuda/CUDAAllocatorConfig.cpp
 * (max_non_split_rounding_mb, from 2.5; per_process_memory_fraction, later).
 * NOTE: read from copies of single files, not from tagged releases: the
 * version bounds are not checked against tags.
 * docs/whatif.md says what it follows and what it leaves out; in short:
 *
 * - modelled: size rounding (512 bytes, roundup_power2_divisions in both
 *   forms), the small (<= 1 MiB) and large pools, segment sizes (2 MiB; 20 MiB
 *   below 10 MiB; else rounded to 2 MiB), best fit by (stream, size, address),
 *   splitting and its limits, max_split_size_mb and the rounding tolerance of
 *   oversize blocks (max_non_split_rounding_mb, 20 MiB by default), merging on
 *   free, the release-and-retry after a failed cudaMalloc, the garbage
 *   collection threshold (which PyTorch applies only under a memory
 *   fraction), expandable segments (2 MiB / 20 MiB pages mapped on demand,
 *   unmapped on release), empty_cache, per-stream pools.
 * - left out: record_stream and its events (a block is reusable at its free),
 *   CUDA graphs' private pools and MemPools, the free-memory callbacks (IPC),
 *   several devices (one model per device), backend:cudaMallocAsync, the
 *   driver's own addresses (segments get the model's, increasing: ties
 *   between equal sizes in different segments may break otherwise), the
 *   expandable segments' reservation sizes (expandable_segments_reserve*). */
#ifndef GMT_ALLOCMODEL_H
#define GMT_ALLOCMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* PyTorch's constants, in bytes. */
#define GMT_AM_MIN_BLOCK     512u                /* kMinBlockSize */
#define GMT_AM_SMALL_SIZE    (1ull << 20)        /* kSmallSize: the small pool's largest */
#define GMT_AM_SMALL_BUFFER  (2ull << 20)        /* kSmallBuffer: a small segment */
#define GMT_AM_LARGE_BUFFER  (20ull << 20)       /* kLargeBuffer */
#define GMT_AM_MIN_LARGE     (10ull << 20)       /* kMinLargeAlloc */
#define GMT_AM_ROUND_LARGE   (2ull << 20)        /* kRoundLarge */
#define GMT_AM_DIV_INTERVALS 16                  /* roundup_power2_divisions' slots: <2 MiB .. >=32 GiB */
#define GMT_AM_UNLIMITED     UINT64_MAX

/* A PYTORCH_CUDA_ALLOC_CONF, parsed. gmt__am_config_default() gives
 * PyTorch's defaults (as an empty string would). */
struct gmt__am_config {
	bool expandable_segments;
	uint64_t max_split_size;          /* GMT_AM_UNLIMITED: no limit */
	uint64_t max_non_split_rounding;  /* oversize blocks serve requests this much smaller */
	double gc_threshold;              /* garbage_collection_threshold; 0: off */
	double memory_fraction;           /* per_process_memory_fraction; < 0: not set */
	uint32_t divisions[GMT_AM_DIV_INTERVALS]; /* per power-of-two interval from 1 MiB; 0, 1: none */
	char ignored[256];                /* keys that do not touch the device cache, comma-separated */
};

void gmt__am_config_default(struct gmt__am_config *c);

/* Parses conf (NULL or "" gives the defaults) as PyTorch does: key:value
 * pairs separated by commas. Returns 0, or -EINVAL with a one-line reason in
 * err naming the key (an unknown key, a bad or out-of-range value), or
 * -ENOTSUP for backend:cudaMallocAsync (not this allocator). Keys of pinned
 * host memory and locking are accepted and listed in c->ignored. */
int gmt__am_config_parse(const char *conf, struct gmt__am_config *c, char *err, size_t errlen);

/* A one-line reason, as printf, into err[0..errlen) (err may be NULL);
 * returns rc. The model's and the replay's errors. */
int gmt__am_fail(char *err, size_t errlen, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* What the driver saw, in order. */
enum gmt__am_op {
	GMT_AM_SEGMENT_ALLOC,  /* cudaMalloc of a segment */
	GMT_AM_SEGMENT_FREE,   /* cudaFree of a segment */
	GMT_AM_SEGMENT_MAP,    /* pages mapped into an expandable segment (size: the range) */
	GMT_AM_SEGMENT_UNMAP,  /* pages unmapped from one */
	GMT_AM_VA_RESERVE,     /* an expandable segment's address space reserved (no memory) */
	GMT_AM_VA_FREE,
};

struct gmt__am_event {
	enum gmt__am_op op;
	bool small;             /* the small pool's */
	uint64_t addr, size, stream;
	uint64_t reserved;      /* PyTorch's reserved bytes after it */
	uint64_t call;          /* the model call (from 0) that caused it */
};

/* The first request that failed, and the state it failed in. */
struct gmt__am_oom {
	uint64_t call, size, rounded, alloc_size, stream;
	uint64_t reserved, allocated, limit;
};

struct gmt__am_stats {
	uint64_t reserved, allocated;           /* PyTorch's reserved_bytes and allocated_bytes */
	uint64_t peak_reserved, peak_allocated;
	uint64_t segments;                      /* cudaMalloc segments held */
	uint64_t device_allocs, device_frees;   /* num_device_alloc, num_device_free */
	uint64_t retries;                       /* num_alloc_retries */
	uint64_t ooms;
	bool failed;
	struct gmt__am_oom first_oom;
};

struct gmt__allocmodel;

/* A model of one device of device_total bytes under c (copied). The driver
 * grants up to device_total until gmt__am_set_limit says otherwise. Returns
 * 0 or -ENOMEM. */
int gmt__am_create(const struct gmt__am_config *c, uint64_t device_total, struct gmt__allocmodel **out);
void gmt__am_destroy(struct gmt__allocmodel *m);

/* The bytes the driver would grant this allocator in all (the device less
 * what others hold): a cudaMalloc or a mapping that would take the reserved
 * bytes past it fails. Any time; reserved memory is never taken back. */
void gmt__am_set_limit(struct gmt__allocmodel *m, uint64_t bytes);

/* torch.cuda.set_per_process_memory_fraction: caps reserved at fraction of
 * the device and turns the garbage collection threshold on. */
void gmt__am_set_fraction(struct gmt__allocmodel *m, double fraction);

/* The same with the allowed bytes given (PyTorch's allowed maximum, as its
 * out-of-memory observer is told it). */
void gmt__am_set_allowed(struct gmt__allocmodel *m, uint64_t bytes);

/* A request of size bytes (> 0) on stream. Returns 0 with *id the block's
 * (valid until its free), -ENOMEM where PyTorch raises its out-of-memory
 * error (recorded in the stats), -EINVAL for size 0. */
int gmt__am_malloc(struct gmt__allocmodel *m, uint64_t size, uint64_t stream, uint32_t *id);

/* Whether a block the model caches would serve a request of size bytes on
 * stream as it is now: no new segment, no mapping, no release (PyTorch
 * asks the driver only when none does). No side effect. */
bool gmt__am_cache_serves(const struct gmt__allocmodel *m, uint64_t size, uint64_t stream);

/* What the model's first attempt at new memory for a request of size bytes
 * on stream would ask of the driver as it is now: the segment's size, or
 * with expandable segments the pages it would map (0 where mapped free
 * blocks there hold it). No side effect. */
uint64_t gmt__am_first_ask(const struct gmt__allocmodel *m, uint64_t size, uint64_t stream);

/* Frees a block gmt__am_malloc gave. Returns 0, or -EINVAL for an id that
 * is not an allocated block. */
int gmt__am_free(struct gmt__allocmodel *m, uint32_t id);

/* torch.cuda.empty_cache(). */
void gmt__am_empty_cache(struct gmt__allocmodel *m);

/* An allocated block's address and size (after rounding). Returns 0 or -EINVAL. */
int gmt__am_block(const struct gmt__allocmodel *m, uint32_t id, uint64_t *addr, uint64_t *size);

const struct gmt__am_stats *gmt__am_stats(const struct gmt__allocmodel *m);

/* The driver's events so far, in order; valid until the next call. */
const struct gmt__am_event *gmt__am_events(const struct gmt__allocmodel *m, size_t *n);

/* Seeding, for a replay whose history does not reach back to the program's
 * start: the segments and live blocks that existed then.
 *
 * gmt__am_seed_segment: a cudaMalloc segment of size bytes at addr on
 * stream, in the small pool or the large, held and wholly cached (no driver
 * event recorded: it was there before). Returns 0, -EINVAL where it would
 * overlap a segment of the model, -ENOMEM.
 * gmt__am_seed_block: an allocated block of size bytes (rounded as a block
 * is) at addr, requested bytes asked, cut from the cached block of a seeded
 * segment that holds it, the rest staying cached. Returns 0 with *id, or
 * -EINVAL where no free block holds it. Neither is for expandable segments. */
int gmt__am_seed_segment(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t stream, bool small);
int gmt__am_seed_block(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t requested,
		       uint32_t *id);

/* The address the next segment (or expandable reservation) takes; those
 * after follow it as before (2 MiB steps). A replay hands the model the
 * run's own addresses so that best fit breaks ties between equal blocks as
 * the run did. */
void gmt__am_set_next_addr(struct gmt__allocmodel *m, uint64_t addr);

/* The address a segment or reservation the next gmt__am_malloc makes
 * takes, if it makes one; after that call the hint is gone. A replay hands
 * the run's where the model holds a reservation there already: one a
 * release may free before the retry makes another (the driver gives the
 * freed addresses again). */
void gmt__am_hint_addr(struct gmt__allocmodel *m, uint64_t addr);

/* From now on a segment or reservation no address was given for takes the
 * lowest address clear of every one the model holds (2 MiB aligned), as a
 * driver gives freed addresses again, rather than the next after the last.
 * A replay under settings other than the run's, which has no addresses of
 * the run to give, places them so. */
void gmt__am_reuse_addrs(struct gmt__allocmodel *m);

/* Whether addr lies in one of the model's expandable reservations of the
 * pool a request of size bytes uses (each pool's are apart). */
bool gmt__am_reserved_at(const struct gmt__allocmodel *m, uint64_t addr, uint64_t size);

/* Moves a reservation of the pool a request of size bytes on stream would
 * use, nothing of it mapped (one a failed request made), to start at addr
 * — a driver's reservation is where the driver puts it, known only once
 * something is mapped there. false: there is none. */
bool gmt__am_place_reservation(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t stream);

/* PyTorch's rounding of a request (round_size) and the segment a new one
 * would take (get_allocation_size), under c. */
uint64_t gmt__am_round_size(const struct gmt__am_config *c, uint64_t size);
uint64_t gmt__am_segment_size(uint64_t rounded);

#endif /* GMT_ALLOCMODEL_H */
