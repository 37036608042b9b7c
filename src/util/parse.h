/* Numbers and sizes: parsed from configuration text (environment variables),
 * and byte counts written for a human. Shared by the tracer, the command and
 * the simulated GPU. Parsing is strict: empty strings, signs, trailing junk
 * and overflow are errors, never silently truncated. */
#ifndef GMT_PARSE_H
#define GMT_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* s[0..n) equals word (lower case), ignoring ASCII case: no locale, since
 * this may run before main, inside any program. */
bool gmt__word_is(const char *s, size_t n, const char *word);

/* A yes/no value: 1, true, yes, on or 0, false, no, off (any case). Returns 0
 * or -EINVAL; *out is written only on success. Allocates nothing: usable from
 * a hook before the options are read. */
int gmt__parse_bool(const char *s, bool *out);

/* Parse a decimal unsigned integer in [min, max] into *out.
 * Returns 0, -EINVAL (empty, not a number, trailing junk) or -ERANGE. *out is
 * written only on success. */
int gmt__parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Parse a byte size: a decimal integer with an optional suffix K, M, G, T (or
 * KB/Ki/KiB, MB/Mi/MiB...; all powers of 1024, case-insensitive), in [min, max].
 * Returns 0, -EINVAL or -ERANGE; *out is written only on success. */
int gmt__parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Bytes for a human, into buf: "512 B", "1.50 GiB", "32.0 MiB", "640 MiB" (binary
 * units, three significant figures at most). The one byte formatter of the C
 * code; the viewer's fmt_bytes writes the same. */
const char *gmt__human_bytes(char *buf, size_t len, uint64_t bytes);

/* A duration for a human, into buf: "0.25 ms", "2.10 s", "3 min 4 s",
 * "5 h 6 min", "2 d 3 h"; the viewer's fmt_duration writes the same. */
const char *gmt__human_duration(char *buf, size_t len, uint64_t ns);

#endif /* GMT_PARSE_H */
