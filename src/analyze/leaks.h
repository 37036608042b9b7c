/* The leak check's pointer scan: which allocations still live at exit does
 * host memory still refer to? Reads the process's writable memory (through
 * process_vm_readv, so that a mapping going away under it is an error, never
 * a crash) for 8-byte words whose value lies inside an allocation.
 *
 * Memory the scan does not read as the program's references:
 *  - the ranges the caller names (the tracer's own tables and buffers), and
 *    managed allocations (reading them would migrate their pages);
 *  - the bookkeeping of the CUDA driver and runtime: the writable segments of
 *    modules named libcuda* and libnvidia-*, and every malloc block or
 *    mapping reachable from them through pointers (a driver's record of an
 *    allocation holds its address too), found by a walk that reads each
 *    byte of it at most once;
 *  - the tracer's own writable segments (modules named libgpumemtrace*),
 *    never read and never walked from: what the tracer keeps elsewhere that
 *    holds the program's addresses, the caller names in `skip`;
 *  - the calling thread's stack below `stack_from` (the scan's own frames and
 *    dead frames of returned functions);
 *  - device files' mappings, what is not both readable and writable, pages
 *    not resident (never touched, or swapped out), and writable mappings
 *    over 64 GiB (a sanitizer's shadow memory, an allocator's reservation).
 * Everything else counts, conservatively: a stale copy left in freed heap
 * memory or on another thread's stack makes an allocation "referenced". */
#ifndef GMT_LEAKS_H
#define GMT_LEAKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gmt__range {
	uint64_t lo, hi; /* [lo, hi) */
};

/* One range a reference may point into, for allocation `item` of the
 * caller's. Targets may come in any order; several may name one item. */
struct gmt__leak_target {
	uint64_t lo, hi;
	uint32_t item;
};

/* Where a reference was found. */
enum gmt__ref_region {
	GMT_REF_NONE,
	GMT_REF_GLOBAL,  /* a module's writable data */
	GMT_REF_HEAP,    /* the malloc heap */
	GMT_REF_STACK,   /* a thread's stack */
	GMT_REF_MAPPING, /* another anonymous or file mapping */
};

struct gmt__leak_ref {
	uint64_t at;     /* the word's address; 0: none found */
	enum gmt__ref_region region;
};

/* What the scan cannot see in a Python process: an int object keeps its
 * value in 30-bit digits, never as the 64-bit word an address is. */
#define GMT_SCAN_UNSEEN_PYTHON "Python ints are not read as addresses"

#define GMT_SCAN_MODULES 4    /* driver modules named in the statistics */
#define GMT_SCAN_MODULE_NAME 64 /* bytes of each name kept, the NUL included */

struct gmt__scan_stats {
	bool done;
	const char *why;   /* why not done (static text) */
	const char *unseen; /* references the scan cannot see there (static text), or NULL */
	uint64_t mappings; /* mappings read */
	uint64_t bytes;    /* bytes read */
	uint64_t excluded; /* bytes of driver bookkeeping left out (no byte counted twice) */
	uint64_t walked;   /* bytes of it read to find the rest: at most `excluded` */
	/* The driver's and runtime's modules the walk started from: how many,
	 * and the file names of the first GMT_SCAN_MODULES. */
	unsigned nmodules;
	char modules[GMT_SCAN_MODULES][GMT_SCAN_MODULE_NAME];
	double seconds;
};

/* Scans for the targets t[0..n) (sorted in place), filling ref[item] for every
 * item some word refers to (the first word found; ref must hold every item
 * index, zeroed by the caller). skip[0..nskip) are left unread. Returns 0, or
 * a negative errno with stats->why saying why nothing was scanned (then ref
 * is untouched). Reads /proc/self/maps; allocates its own memory with mmap. */
int gmt__leak_scan(struct gmt__leak_target *t, size_t n, struct gmt__leak_ref *ref,
		   const struct gmt__range *skip, size_t nskip, uintptr_t stack_from,
		   struct gmt__scan_stats *stats);

const char *gmt__ref_region_name(enum gmt__ref_region r);

#endif /* GMT_LEAKS_H */
