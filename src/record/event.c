/* Names and key spaces of the allocation kinds (event.h). */
#include "record/event.h"

#include "util/xlist.h"

const char *gmt__kind_name(enum gmt__kind kind)
{
	static const char *const names[GMT_KIND_COUNT] = { GMT_KINDS(GMT_X_WORD) };

	return GMT_X_NAME(names, GMT_KIND_COUNT, kind, "unknown");
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
