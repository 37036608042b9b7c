/* Parsing of numbers and sizes from configuration text (environment variables).
 * Shared by the tracer's options and the simulated GPU. Strict: empty strings,
 * signs, trailing junk and overflow are errors, never silently truncated. */
#ifndef GMT_PARSE_H
#define GMT_PARSE_H

#include <stdint.h>

/* Parse a decimal unsigned integer in [min, max] into *out.
 * Returns 0, -EINVAL (empty, not a number, trailing junk) or -ERANGE. *out is
 * written only on success. */
int gmt__parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Parse a byte size: a decimal integer with an optional suffix K, M, G, T (or
 * KB/Ki/KiB, MB/Mi/MiB...; all powers of 1024, case-insensitive), in [min, max].
 * Returns 0, -EINVAL or -ERANGE; *out is written only on success. */
int gmt__parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);

#endif /* GMT_PARSE_H */
