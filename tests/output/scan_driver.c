/* A driver double for test_leak_scan: a module whose name begins with
 * libcuda, so that the leak scan walks its bookkeeping from its globals. Its
 * records overlap on purpose: a block named twice and in a cycle, a mapping
 * of its own and, inside that mapping, what looks like a malloc block
 * (a chunk header), named too. */
#define _GNU_SOURCE
#include "scan_doubles.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define AREA_BYTES SCAN_AREA_BYTES
#define PAGE 4096u

void *scan_driver_root[4];

void *scan_driver_build(uint64_t record, uint64_t in_area)
{
	uint64_t *rec = malloc(64), *area;
	unsigned char *guarded;

	/* NOTE: guard pages either side keep the area a mapping of its own: the
	 * kernel would merge it with a neighbour of the same protection. */
	guarded = mmap(NULL, AREA_BYTES + 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (rec == NULL || guarded == MAP_FAILED ||
	    mprotect(guarded + PAGE, AREA_BYTES, PROT_READ | PROT_WRITE) != 0)
		return NULL;
	area = (uint64_t *)(void *)(guarded + PAGE);
	memset(area, 0x5a, AREA_BYTES); /* every page resident */
	area[0] = in_area;
	area[1] = (uintptr_t)rec;
	/* A chunk header at area + PAGE: 64 bytes in use (PREV_INUSE), and the
	 * next chunk's size word saying so. */
	area[PAGE / 8 + 1] = 64 | 1;
	area[PAGE / 8 + 9] = 32 | 1;
	rec[0] = record;
	rec[1] = (uintptr_t)area;
	rec[2] = (uintptr_t)&area[PAGE / 8 + 2];
	rec[3] = (uintptr_t)rec;
	for (int i = 4; i < 8; i++)
		rec[i] = 0;
	scan_driver_root[0] = rec;
	scan_driver_root[1] = rec;
	scan_driver_root[2] = &area[PAGE / 8 + 2];
	scan_driver_root[3] = area;
	return area;
}
