/* A module's GNU build-id (the NT_GNU_BUILD_ID note its linker wrote): what
 * tells two builds at one path apart. Read from the module's image as the
 * loader mapped it, never from the file at its path, which may hold another
 * build since (a plugin reinstalled while the program runs). Reading a
 * mapped image takes no lock of the tracer's and allocates nothing. */
#ifndef GMT_BUILDID_H
#define GMT_BUILDID_H

#include <link.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longer ids (none that a linker writes: SHA-1's 20 bytes, MD5's or a UUID's
 * 16) keep their first bytes and their length. */
#define GMT_BUILD_ID_MAX 64

struct gmt__build_id {
	uint16_t len;                    /* in bytes; 0: the module has none */
	uint8_t bytes[GMT_BUILD_ID_MAX]; /* the first min(len, GMT_BUILD_ID_MAX) */
};

/* Sets id from n bytes (the rest beyond GMT_BUILD_ID_MAX left out). */
void gmt__build_id_set(struct gmt__build_id *id, const uint8_t *bytes, size_t n);

/* The build-id of a loaded module, as dl_iterate_phdr describes it, read from
 * its mapped notes: only a PT_NOTE inside a readable PT_LOAD's file-backed
 * part is read (anything else may not be mapped). id->len 0 when none. */
void gmt__build_id_mapped(const struct dl_phdr_info *info, struct gmt__build_id *id);

/* The build-id of the loaded module whose segments hold addr. Returns false
 * (id->len 0) when no loaded module does. Takes the loader's lock
 * (dl_iterate_phdr), walking every module: not for the hot path. */
bool gmt__build_id_at(uintptr_t addr, struct gmt__build_id *id);

/* Whether a and b are the same id; two modules without one are. */
bool gmt__build_id_equal(const struct gmt__build_id *a, const struct gmt__build_id *b);

/* The id as lowercase hex into hex[0..len), NUL-terminated. Returns 0,
 * -ENOENT when it has none, -ENAMETOOLONG when it does not fit. */
int gmt__build_id_hex(const struct gmt__build_id *id, char *hex, size_t len);

#endif /* GMT_BUILDID_H */
