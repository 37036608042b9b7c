/* Symbolisation at dump time: a module path and an address in it become
 * function, source file and line, inlined frames included, read from the DWARF
 * debug information with elfutils' libdw, which is dlopen()ed at first use (not
 * linked: without it every lookup finds nothing). Never on the hot path
 * (docs/internals.md, "Recording"): it opens files, allocates and takes the dynamic loader's lock. */
#ifndef GMT_SYMBOLS_H
#define GMT_SYMBOLS_H

#include "util/buildid.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One source-level frame. The strings belong to the gmt__symbols object and
 * stay valid until gmt__symbols_free. */
struct gmt__frame_sym {
	const char *function; /* C++ demangled where a demangler is loaded; NULL: unknown */
	const char *file;     /* as the debug information names it, usually absolute; NULL: unknown */
	int line;             /* 0: unknown */
	bool inlined;         /* inlined into the next frame (the caller, out[i + 1]) */
};

/* A cache of opened modules (each file opened and its debug information
 * indexed once) and of demangled names. Not thread-safe: one caller at a time,
 * which the snapshot writer is. NULL without memory. The first call loads
 * libdw.so.1; when it cannot, the object is still made, every lookup returns 0
 * and every build-id -ENOENT (one gmt__info line says so). */
struct gmt__symbols *gmt__symbols_new(void);
void gmt__symbols_free(struct gmt__symbols *s);

/* Symbolises the return address `ip` in the module at `module_path`, loaded at
 * `module_base` (the start of its first mapping, as dladdr's dli_fbase; the
 * address `ip` maps to ip - module_base + the first PT_LOAD's page), so the
 * same call works offline from a module map. The byte before `ip` is looked
 * up: a return address points past its call. Fills out[0..max) with the
 * innermost inlined frame first, then each caller it was inlined into, ending
 * with the real function, and returns how many; 0 when nothing is known (no
 * debug information, a stripped or missing module, an address outside it,
 * max <= 0): the caller keeps module and offset. Separate debug files are
 * looked for by build-id under /usr/lib/debug, never over the network.
 * `want`: the build-id of the module the address lay in (buildid.h, read
 * from its image), or NULL to take the file unchecked. The file at the path
 * is used only when its build-id is that one (both none included): a file
 * replaced by another build since names nothing. */
int gmt__symbols_lookup(struct gmt__symbols *s, const char *module_path, uintptr_t module_base,
			const struct gmt__build_id *want, uintptr_t ip, struct gmt__frame_sym *out, int max);

/* The name of the ELF symbol (function or variable, from the full symbol
 * table where the module has one) covering the data address `addr` of the
 * module; NULL when none does, or when the file's build-id is not `want`'s
 * (as for gmt__symbols_lookup). Owned by s. */
const char *gmt__symbols_data_name(struct gmt__symbols *s, const char *module_path, uintptr_t module_base,
				   const struct gmt__build_id *want, uintptr_t addr);

/* The GNU build-id of the file at module_path (which may not be the build a
 * loaded module of that path was mapped from) as lowercase hex into
 * hex[0..len), NUL-terminated. Returns 0, -ENOENT when the file has none or
 * cannot be opened, or -ENAMETOOLONG when it does not fit in len. */
int gmt__symbols_build_id(struct gmt__symbols *s, const char *module_path, char *hex, size_t len);

#endif /* GMT_SYMBOLS_H */
