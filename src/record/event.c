/* Names and key spaces of the allocation kinds (event.h). */
#include "record/event.h"

const char *gmt__kind_name(enum gmt__kind kind)
{
	static const char *const names[GMT_KIND_COUNT] = {
		[GMT_KIND_DEVICE] = "device",   [GMT_KIND_ASYNC] = "async",
		[GMT_KIND_MANAGED] = "managed", [GMT_KIND_HOST] = "host",
		[GMT_KIND_REGISTERED] = "registered", [GMT_KIND_VMM] = "vmm",
		[GMT_KIND_ARRAY] = "array",
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
