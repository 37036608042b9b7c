/* The fixed-size record of one intercepted operation, as it travels from a hook
 * through its thread's ring to the background consumer, and the vocabularies it
 * uses (kinds, operations, key spaces). */
#ifndef GMT_EVENT_H
#define GMT_EVENT_H

#include <stddef.h>
#include <stdint.h>

/* What memory an allocation is: the snapshot's "kind" (docs/snapshot-format.md),
 * X(ID, "word"). A VMM allocation is a physical handle from cuMemCreate.
 * tests/unit/test_vocabulary.py holds the viewer's and the schema's copies
 * to this list. */
#define GMT_KINDS(X)                                                                        \
	X(DEVICE, "device") X(ASYNC, "async") X(MANAGED, "managed") X(HOST, "host")          \
	X(REGISTERED, "registered") X(VMM, "vmm") X(ARRAY, "array")

enum gmt__kind {
#define GMT_X(id, word) GMT_KIND_##id,
	GMT_KINDS(GMT_X)
#undef GMT_X
	GMT_KIND_COUNT
};

/* Addresses of different spaces never collide in the live table: device and
 * host memory share the process's address space, but VMM handles, array
 * handles, reservations and mappings are numbers of their own. */
enum gmt__space {
	GMT_SPACE_MEMORY,      /* device, async, managed, host, registered */
	GMT_SPACE_ARRAY,       /* CUarray handles */
	GMT_SPACE_HANDLE,      /* CUmemGenericAllocationHandle */
	GMT_SPACE_RESERVATION, /* cuMemAddressReserve ranges */
	GMT_SPACE_MAPPING,     /* cuMemMap ranges */
	GMT_SPACE_COUNT
};

/* Every operation is recorded after its real call, and only when the
 * driver honoured it. An operation's window is its call: `link` (`span`
 * for MAP) says where it began in the global order (state/apply.c puts
 * records of one address or handle right when their windows overlap). */
enum gmt__op {
	GMT_OP_ALLOC,       /* addr, size, kind, device; link: window */
	GMT_OP_FREE,        /* addr (space from kind); link: window */
	GMT_OP_RETAIN,      /* cuMemRetainAllocationHandle: handle `addr` +1 */
	GMT_OP_RELEASE,     /* cuMemRelease: handle `addr` -1; link: window */
	GMT_OP_MAP,         /* cuMemMap: addr, size, handle `link`, offset `extra`; span: window */
	GMT_OP_UNMAP,       /* cuMemUnmap: addr, size; link: window */
	GMT_OP_RESERVE,     /* cuMemAddressReserve: addr, size; link: window */
	GMT_OP_UNRESERVE,   /* cuMemAddressFree: addr, size; link: window */
	GMT_OP_CONTEXT_GONE, /* context `addr` destroyed; link 1: the primary context
			      * of `device`, whose stream-ordered memory goes too */
	GMT_OP_COUNT
};

/* 64 bytes: one cache line. */
struct gmt__event {
	uint64_t seq;      /* global order (one atomic increment per event) */
	uint64_t time_ns;  /* CLOCK_REALTIME */
	uint64_t addr;
	uint64_t size;
	uint64_t link;     /* MAP: the handle; CONTEXT_GONE: primary; else the seq when its call began */
	uint64_t extra;    /* MAP: offset into the handle; ALLOC: the context */
	uint32_t stack;    /* interned stack id, 0 = none */
	uint32_t tid;      /* kernel thread id */
	uint16_t api;      /* label: index into the api names (hooks.h) */
	uint8_t op;        /* enum gmt__op */
	uint8_t kind;      /* enum gmt__kind */
	union {
		struct {
			int16_t device;  /* -1 for host memory */
			uint16_t stream; /* ALLOC of kind async: its stream's id (streams.h), 0 when not known */
		};
		/* MAP (which has no device of its own, and `link` taken): seq
		 * less the seq when its call began, at most UINT32_MAX. */
		uint32_t span;
	};
};

_Static_assert(sizeof(struct gmt__event) == 64, "an event is one cache line");

const char *gmt__kind_name(enum gmt__kind kind);

/* Called once per region of memory a structure of the tracer owns (the leak
 * check's scan must not take the addresses kept there for the program's). */
typedef void gmt__region_fn(void *ctx, const void *addr, size_t len);

/* The key space of an allocation of `kind`. */
enum gmt__space gmt__kind_space(enum gmt__kind kind);

#endif /* GMT_EVENT_H */
