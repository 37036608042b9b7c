/* Values of the JSON the analysis reads (a framework's hand-over, a
 * snapshot): the one rule for a count or a size. */
#ifndef GMT_JSONVAL_H
#define GMT_JSONVAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* v as an integer of 0 or more into *out; false (and *out untouched) for
 * anything else, NULL included. */
static inline bool gmt__json_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return false;
	*out = (uint64_t)json_integer_value(v);
	return true;
}

#endif /* GMT_JSONVAL_H */
