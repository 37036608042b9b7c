/* gpumemtrace public header.
 *
 * The version of the interface a program was built against. The run-time API
 * (dump a snapshot, tag a region, query totals) is declared here as it lands; a
 * program that includes this header runs unchanged without the library. */
#ifndef GPUMEMTRACE_H
#define GPUMEMTRACE_H

#define GMT_VERSION_MAJOR 0
#define GMT_VERSION_MINOR 1
#define GMT_VERSION_PATCH 0
#define GMT_VERSION_STRING "0.1.0"

/* One number that orders versions: 10000 * major + 100 * minor + patch. */
#define GMT_VERSION (GMT_VERSION_MAJOR * 10000 + GMT_VERSION_MINOR * 100 + GMT_VERSION_PATCH)

#endif /* GPUMEMTRACE_H */
