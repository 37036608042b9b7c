/* Opening an input file the user names (suppressions, a baseline or exit
 * snapshot): regular files only, never blocking, with a size cap, so that a
 * FIFO cannot hang the program and /dev/zero cannot fill its memory. Shared
 * by the tracer and the gpumemtrace command. */
#ifndef GMT_INPUT_H
#define GMT_INPUT_H

#include <stdint.h>
#include <stdio.h>

/* Caps (docs/guide.md, docs/ci.md). */
#define GMT_SUPPRESSIONS_MAX_BYTES ((uint64_t)64 << 20)
#define GMT_SNAPSHOT_MAX_BYTES ((uint64_t)16 << 30)

/* Opens `path` for reading ("re"): opened without blocking (O_NONBLOCK,
 * which changes nothing on a regular file), then checked to be a
 * regular file of at most `max` bytes. Returns the stream, or NULL with errno
 * set and one line in err[0..errlen) naming the path and `what` ("suppressions",
 * "snapshot"): "cannot read suppressions: ...", "not a regular file (a FIFO)",
 * "larger than ... bytes". */
FILE *gmt__input_open(const char *path, const char *what, uint64_t max, char *err, size_t errlen);

#endif /* GMT_INPUT_H */
