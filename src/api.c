/* The public API's table, exported as `gmt_api_v1`: what gpumemtrace.h finds
 * with dlsym. It forwards to the core, nothing else. */
#include "record/record.h"

#include <gpumemtrace.h>

__attribute__((visibility("default"))) const struct gmt_api_v1 gmt_api_v1 = {
	.size = sizeof(struct gmt_api_v1),
	.dump = gmt__api_dump,
	.tag_push = gmt__api_tag_push,
	.tag_pop = gmt__api_tag_pop,
	.live_bytes = gmt__api_live_bytes,
	.peak_bytes = gmt__api_peak_bytes,
	.peak_reset = gmt__api_peak_reset,
	.mark = gmt__api_mark,
	.live_since = gmt__api_live_since,
	.step = gmt__api_step,
	.framework = gmt__api_framework,
};
