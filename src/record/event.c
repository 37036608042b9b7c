/* Names and key spaces of the allocation kinds (event.h). */
#include "record/event.h"

const char *gmt__kind_name(enum gmt__kind kind)
{
	static const char *const names[GMT_KIND_COUNT] = {
#define GMT_X(id, word) [GMT_KIND_##id] = word,
		GMT_KINDS(GMT_X)
#undef GMT_X
	};
	return (unsigned)kind < GMT_KIND_COUNT ? names[kind] : "unknown";
}

enum gmt__space gmt__kind_space(enum gmt__kind kind)
{
	switch (kind) {
	case GMT_KIND_VMM:
		return GMT_SPACE_HANDLE;
	case GMT_KIND_ARRAY:
		return GMT_SPACE_ARRAY;
	default:
		return GMT_SPACE_MEMORY;
	}
}
