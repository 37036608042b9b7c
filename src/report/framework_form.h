/* What a framework's state must be to go into a snapshot: the form
 * docs/snapshot.schema.json gives the "framework" section, checked when
 * gmt_framework takes the state, so that no snapshot fails the schema. */
#ifndef GMT_FRAMEWORK_FORM_H
#define GMT_FRAMEWORK_FORM_H

#include <jansson.h>

/* 0 when doc (a parsed state, reason "oom", "exit" or "api") has every key
 * the schema requires, and every key it names (required or not) of the
 * type and within the range it allows; else -EINVAL. Keys the snapshot does
 * not keep (the history, "traces", "trace_stacks", "steps"; "allocation" and
 * "segments_joined", which the model sets) are left to their readers. */
int gmt__framework_form_check(const json_t *doc);

#endif /* GMT_FRAMEWORK_FORM_H */
