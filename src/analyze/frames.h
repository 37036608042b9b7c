/* Frames for a snapshot: a cache of what the loader (dladdr) and the debug
 * information (symbols.h) know of each return address, with the module it
 * lies in as it was when the stack was captured (modules.h), named from the
 * module's file only while that file is the build that was mapped (its
 * build-id, buildid.h); the set of
 * stack ids a snapshot refers to; a stack walked as the program saw it, its
 * Python frames put back among the native ones (frame_sink); and the runtime
 * call read off them (the site rule is sites.h's). Resolving takes the
 * dynamic loader's lock: never under the tracer's lock. */
#ifndef GMT_FRAMES_H
#define GMT_FRAMES_H

#include "analyze/symbols.h"
#include "record/modules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Source frames kept per address: an inlining depth no real code reaches. */
#define SYMS_PER_ADDRESS 64

struct gmt__frame_info {
	uintptr_t ip;           /* 0 = empty slot */
	const char *module;     /* NULL: dladdr knew nothing */
	const char *function;   /* the loader's name (exported symbols) */
	uintptr_t base;
	uint32_t unloaded;      /* the epoch of its module's unload (modules.h); 0: a module loaded now */
	size_t sym;             /* its source frames: syms[sym..sym + nsym) of the cache */
	int nsym;               /* 0: libdw knew nothing */
};

/* A module some frame lies in, for the "modules" map: one per path, base and
 * unload, since after an unload the same path and base may be another
 * build. */
struct gmt__module_ref {
	const char *path;
	uintptr_t base;
	uint32_t unloaded;       /* as the frames' */
	struct gmt__build_id id; /* read from its image, not from its file */
};

struct gmt__gone_frame {
	struct gmt__frame_info f; /* f.unloaded tells modules at one address apart */
};

/* NOTE: dladdr scans the symbol table of the object, and libdw walks line
 * tables and DIEs, so each lookup costs in proportion to the module's size;
 * stacks share most frames, so each address is looked up once per snapshot. */
struct gmt__frame_cache {
	struct gmt__frame_info *v;
	size_t n, cap;
	char *exe; /* the main program's absolute path, or NULL */
	struct gmt__symbols *symbols; /* NULL without memory: frames without file and line */
	struct gmt__frame_sym *syms;  /* the source frames of every address looked up */
	size_t nsyms, capsyms;
	struct gmt__module_ref *mods;      /* each (path, base) once, in the order first seen */
	size_t nmods, capmods;
	size_t lastmod;               /* the module of the previous lookup */
	/* The module epoch of the stack being resolved (modules.h), and the
	 * frames of modules unloaded since some stack's capture: kept apart,
	 * since their addresses may hold another module now. */
	uint32_t epoch;
	struct gmt__gone_frame *gone;
	size_t ngone, capgone;
	bool loader_only; /* gmt__frames_open_loader's: no debug information, no module map */
};

/* Open addressing over uint32 ids (0 = empty slot), grown at half full: memory
 * proportional to the distinct stacks referenced, not to the live set. */
struct gmt__idset {
	uint32_t *v;
	size_t n, cap;
};

/* Where a stack's frames go, one at a time, innermost first: a native frame
 * (the loader's facts, one source frame or NULL, the function name to show)
 * or a Python frame (pystack.h's word). */
struct gmt__frame_sink {
	void (*native)(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
		       const char *function);
	void (*python)(void *ctx, uintptr_t word);
	void *ctx;
};

/* The part of path after its last '/' (path itself when none; NULL stays). */
const char *gmt__base_name(const char *path);

/* An empty cache for one snapshot (symbolisation through libdw when it can
 * be loaded), and its end. */
void gmt__frames_open(struct gmt__frame_cache *cache);
void gmt__frames_close(struct gmt__frame_cache *cache);

/* An empty cache whose frames are the loader's alone (module, base, exported
 * name): no debug information read and no module's build-id, so that a
 * lookup costs one dladdr — for a stack judged while the program waits
 * (tracer/episode.c). Closed by gmt__frames_close. */
void gmt__frames_open_loader(struct gmt__frame_cache *cache);

/* Adds id to s (0 is never added). 0, or -ENOMEM. */
int gmt__idset_add(struct gmt__idset *s, uint32_t id);

/* Packs the ids to the front of s->v, ascending; returns how many. */
size_t gmt__idset_sorted(struct gmt__idset *s);

/* The runtime call that led to the driver (the label docs/tracing.md describes):
 * the outermost frame of the innermost run of frames in a shared cudart — the
 * function the program called, "cudaMalloc". NULL when no shared cudart is on
 * the stack (a static one exports no name to go by).
 * NOTE: derived here, from the stack, rather than by interposing cudaMalloc &c.:
 * a hook on those must call the caller's own cudart, which a return address
 * cannot identify reliably (tail calls; a cudart loaded RTLD_LOCAL is invisible
 * to RTLD_NEXT; several copies may be loaded), and a wrong guess would send the
 * program's allocation to another runtime instance. */
const char *gmt__frames_runtime_call(struct gmt__frame_cache *cache, const uintptr_t *ips, int n);

/* A stack's frames, innermost first: its native frames, with its Python
 * frames (stored after them) in place of the interpreter's evaluation loop
 * and the interpreter frames between loop frames. */
void gmt__frames_sink(const struct gmt__frame_sink *k, struct gmt__frame_cache *cache, const uintptr_t *ips, int n);

#endif /* GMT_FRAMES_H */
