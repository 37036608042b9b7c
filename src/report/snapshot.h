/* Snapshot writing: one JSON document (docs/snapshot-format.md) made from a
 * capture (analyze/capture.h) by the analysis (analyze/model.h), written
 * atomically into GPUMEMTRACE_DIR as gpumemtrace.<pid>.<reason>.<seq>.json.
 * Never from a signal handler. */
#ifndef GMT_SNAPSHOT_H
#define GMT_SNAPSHOT_H

#include "analyze/capture.h"

#include <stddef.h>

/* The format's additions to version 1 (docs/snapshot-format.md): 1, the
 * site rule's stacks[].site and frames[].role; 2, the episode of an oom
 * snapshot, and the verdicts never_fits and cache_released; 3, the
 * diagnosis's remedies; 4, framework sections of CuPy's pool; 5, failures a
 * framework's allocator refused on its own (failed_request.refused_by), the
 * verdict framework_limit, JAX's framework section, allocations[].stream;
 * 6, the tensors section (the framework's level), the memory of its segments
 * marked, the sites' growth over steps; 7, stats.log_lines_dropped; 8, the
 * unload of a module unloaded since (frames[].unloaded, modules[].unloaded),
 * modules[].build_id from the module's image; 9, numba's framework section
 * and its pending_frees, the episode end other_site,
 * leaks.scan.walked_bytes and bookkeeping_modules; 10, producer (the
 * tracer's name and version); 11, leaks.scan.unseen. */
#define GMT_SNAPSHOT_MINOR "18"

/* Names tried, from s->seq on, when a snapshot's name is taken. */
#define GMT_SNAPSHOT_NAME_TRIES 100

/* The snapshot path, in its order: the capture s analysed into its model
 * (gmt__model_build), the model's text reports (s->report, s->leaks), then
 * its document written into `dir`, atomically (a temporary file in the same
 * directory, then a rename that never replaces an existing file), mode 0600,
 * never through a symlink. When the name for s->seq is taken (by anything, a
 * symlink included) the following numbers are tried first, and the document
 * carries the one used (*s->seq_out). On success stores the final path in
 * path[0..len) (path may be NULL) and returns 0; otherwise returns a negative
 * errno, sets path to "" and leaves no file behind — the document is still
 * built, for s->report and s->leaks, which never depend on the file: -EEXIST when
 * GMT_SNAPSHOT_NAME_TRIES names are taken or the name was taken while the
 * file was being written, -EINVAL for
 * a reason outside the list, -ENAMETOOLONG when the path does not
 * fit in len, else the errno of the failing call (-ENOSPC, -EACCES, ...).
 * errno is left as it was. dir NULL or "" means ".". With a rank the name is
 * gpumemtrace.<pid>.<reason>.<seq>.rank<rank>.json.
 * Live entries of GMT_SPACE_MEMORY, _ARRAY and _HANDLE are the "allocations";
 * reservations and mappings go under "vmm". Frames are resolved at dump time: function, file, line and inlined frames from the
 * debug information through libdw when it can be loaded (symbols.h), else the
 * loader's name (dladdr) with file and line null; "modules" lists each module a
 * frame names, with its load base and build-id, for exact offline symbolisation.
 * With tensors not NULL, the model's tensor level is also put there for the
 * live metrics (metrics.h; tensors->time_ns stays 0 when it has none). */
struct gmt__metrics_tensors;
int gmt__snapshot_write(const struct gmt__snapshot *s, const char *dir, char *path, size_t len,
			struct gmt__metrics_tensors *tensors);

#endif /* GMT_SNAPSHOT_H */
