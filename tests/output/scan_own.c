/* A tracer double for test_leak_scan: a module whose name begins with
 * libgpumemtrace. The leak scan never reads its globals, and never walks
 * from them: the block they point at is read as any other memory. */
#include "scan_doubles.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES SCAN_OWN_BLOCK_BYTES

uint64_t scan_own_global;
uint64_t *scan_own_block;

int scan_own_build(uint64_t in_global, uint64_t in_block)
{
	scan_own_block = malloc(BLOCK_BYTES);
	if (scan_own_block == NULL)
		return -1;
	memset(scan_own_block, 0x33, BLOCK_BYTES); /* resident */
	scan_own_block[BLOCK_BYTES / 16] = in_block;
	scan_own_global = in_global;
	return 0;
}
