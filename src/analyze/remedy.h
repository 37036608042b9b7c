/* What to try about an out-of-memory: the remedies a diagnosis's own numbers
 * support, each a sentence that says why and how much. A remedy appears only
 * when a number in the snapshot supports it — never a generic list. Pure (no
 * I/O); docs/snapshot-format.md ("remedies") gives the rules. */
#ifndef GMT_REMEDY_H
#define GMT_REMEDY_H

#include "analyze/diagnose.h"

const char *gmt__remedy_name(enum gmt__remedy_id id);

/* Fills d->remedies from the numbers of in and the verdicts of d (called by
 * gmt__diagnose, after them). */
void gmt__remedies(const struct gmt__diag_input *in, struct gmt__diagnosis *d);

#endif /* GMT_REMEDY_H */
