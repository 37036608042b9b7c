/* The state of a device as the driver and NVML see it, for snapshots and the
 * out-of-memory diagnosis: total and free memory, the allocation granularity,
 * the stream-ordered pools' reserved and used bytes, and the memory other
 * processes hold. Asked from a program thread that is allowed to call the
 * driver (a failing allocation, gmt_dump), never from a signal handler, the
 * background thread or a destructor, and never with the core's lock held:
 * loading NVML takes the dynamic loader's lock. */
#ifndef GMT_DEVICE_H
#define GMT_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#define GMT_DEVICE_MAX_OTHERS 16

struct gmt__device_state {
	int index;
	bool have_mem;          /* cuMemGetInfo_v2 answered */
	uint64_t total_bytes, free_bytes;
	bool have_granularity;
	uint64_t granularity;
	bool have_pools;        /* the default and current pools answered */
	int npools;             /* 1, or 2 when the current pool is not the default */
	uint64_t pool_reserved, pool_used;
	/* Other processes (NVML): known, or why not (a phrase). */
	bool have_others;
	const char *others_why;
	uint64_t others_bytes;
	int nothers;            /* processes, of which the first GMT_DEVICE_MAX_OTHERS are listed */
	struct {
		uint32_t pid;
		uint64_t bytes;
	} others[GMT_DEVICE_MAX_OTHERS];
};

/* Fills *st for `device`, the current context's device of the calling thread
 * (cuMemGetInfo_v2 answers for that one). What cannot be had is marked so. */
void gmt__device_query(int device, struct gmt__device_state *st);

#endif /* GMT_DEVICE_H */
