/* The doubles test_leak_scan loads: a driver's (scan_driver.c, built as
 * libcuda_scandouble.so) and the tracer's (scan_own.c, built as
 * libgpumemtrace_scandouble.so). */
#ifndef GMT_TEST_SCAN_DOUBLES_H
#define GMT_TEST_SCAN_DOUBLES_H

#include <stdint.h>

#define SCAN_AREA_BYTES (256u << 10)     /* the driver double's mapping */
#define SCAN_OWN_BLOCK_BYTES (96u << 10) /* the tracer double's block (a heap chunk) */

/* Builds the driver double's records: `record` in a malloc block, `in_area`
 * in a mapping of its own of SCAN_AREA_BYTES, which also holds what looks
 * like a malloc block; its globals name the block twice (and the block
 * itself), the mapping, and that block in it. Returns the mapping, or NULL. */
void *scan_driver_build(uint64_t record, uint64_t in_area);

/* Keeps `in_global` in the tracer double's globals and `in_block` in a block
 * of SCAN_OWN_BLOCK_BYTES only they point at. Returns 0, or -1 without
 * memory. */
int scan_own_build(uint64_t in_global, uint64_t in_block);

#endif /* GMT_TEST_SCAN_DOUBLES_H */
