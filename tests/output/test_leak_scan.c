/* The leak scan's walk of the driver's bookkeeping (src/analyze/leaks.c) on
 * made-up memory: a driver double (scan_driver.c) whose records overlap, a
 * tracer double (scan_own.c), and the program's own references. Each byte
 * of the bookkeeping is read at most once (walked <= excluded), the tracer's
 * globals are neither read nor walked from, and the classes come out as the
 * memory says; a word refers to the target it falls in, first byte to last,
 * and to none just outside. No timing is checked. */
#define _GNU_SOURCE
#include "analyze/leaks.h"

#include "check.h"
#include "scan_doubles.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEVICE_BYTES (1u << 20)

/* The targets, 4 KiB each, at these offsets of a reserved range no host
 * memory can take: where each one's address is kept. */
enum { IN_RECORD, IN_AREA, IN_OWN_GLOBAL, IN_OWN_BLOCK, IN_GLOBAL, IN_HEAP, NOWHERE, TARGETS };

static const char *const where[TARGETS] = { "driver record", "driver area", "tracer global", "tracer block",
					    "program global", "program heap", "nowhere" };

/* Disguised (XOR), so that the program's own copy of the reservation's
 * address is no reference. */
static uint64_t device_base_x;
/* volatile: stores no one reads back stay stores. */
static volatile uint64_t kept_global;
static volatile uint64_t *volatile kept_heap;

#define DISGUISE 0xa5a5a5a5a5a5a5a5ull

static uint64_t device(int i)
{
	return (device_base_x ^ DISGUISE) + 0x10000 + (uint64_t)i * 0x2000;
}

static void __attribute__((noinline)) test_walk(void)
{
	struct gmt__leak_target t[TARGETS];
	struct gmt__leak_ref ref[TARGETS];
	struct gmt__scan_stats st;
	void *area;

	area = scan_driver_build(device(IN_RECORD), device(IN_AREA));
	CHECK(area != NULL);
	CHECK_INT(scan_own_build(device(IN_OWN_GLOBAL), device(IN_OWN_BLOCK)), 0);
	kept_global = device(IN_GLOBAL);
	kept_heap = calloc(16, sizeof(*kept_heap));
	CHECK(kept_heap != NULL);
	if (area == NULL || kept_heap == NULL)
		return;
	kept_heap[3] = device(IN_HEAP);
	for (int i = 0; i < TARGETS; i++)
		t[i] = (struct gmt__leak_target){ device(i), device(i) + 4096, (uint32_t)i };
	memset(ref, 0, sizeof(ref));

	CHECK_INT(gmt__leak_scan(t, TARGETS, ref, NULL, 0, (uintptr_t)__builtin_frame_address(0), &st), 0);
	CHECK(st.done);
	/* The walk starts from the driver double alone. */
	CHECK_INT(st.nmodules, 1);
	CHECK_STR(st.modules[0], "libcuda_scandouble.so");
	/* Each byte of the bookkeeping read at most once: the chunk inside the
	 * area, the record named twice and in a cycle, read with the rest. */
	if (st.walked > st.excluded)
		fprintf(stderr, "walked %llu bytes of %llu bytes of bookkeeping: some twice\n",
			(unsigned long long)st.walked, (unsigned long long)st.excluded);
	CHECK(st.walked <= st.excluded);
	/* The area and the record are bookkeeping (beside the double's globals,
	 * a page or two); the tracer double's block, reached only from the
	 * tracer's globals, is not. */
	if (st.excluded < SCAN_AREA_BYTES + 64 || st.excluded > SCAN_AREA_BYTES + 16384)
		fprintf(stderr, "%llu bytes of bookkeeping, expected the area's %u and the record's\n",
			(unsigned long long)st.excluded, SCAN_AREA_BYTES);
	CHECK(st.excluded >= SCAN_AREA_BYTES + 64);
	CHECK(st.excluded <= SCAN_AREA_BYTES + 16384);

	for (int i = 0; i < TARGETS; i++) {
		/* What the tracer keeps elsewhere, its caller names in skip: here
		 * nothing, so its block is read as the program's. */
		bool want = i == IN_GLOBAL || i == IN_HEAP || i == IN_OWN_BLOCK;

		if ((ref[i].at != 0) != want) {
			fprintf(stderr, "the address kept in the %s: %s, expected %s\n", where[i],
				ref[i].at != 0 ? "referenced" : "not referenced", want ? "referenced" : "not");
			check_failed++;
		}
	}
	CHECK_INT(ref[IN_GLOBAL].region, GMT_REF_GLOBAL);
	CHECK_INT(ref[IN_HEAP].region, GMT_REF_HEAP);
}

/* Targets of 4 KiB, 4 KiB apart, after test_walk's: a program global
 * holds, for each, a word at one edge of it or just past one. */
enum { AT_FIRST, AT_MIDDLE, AT_LAST, PAST_END, BEFORE_START, EDGES };

static const char *const edge_name[EDGES] = { "its first byte", "its middle", "its last byte",
					      "one past its end", "one before its start" };
static volatile uint64_t edge_kept[EDGES];

static void __attribute__((noinline)) test_edges(void)
{
	static const int64_t offset[EDGES] = { 0, 2048, 4095, 4096, -1 };
	struct gmt__leak_target t[EDGES];
	struct gmt__leak_ref ref[EDGES];
	struct gmt__scan_stats st;

	for (int i = 0; i < EDGES; i++) {
		t[i] = (struct gmt__leak_target){ device(TARGETS + i), device(TARGETS + i) + 4096, (uint32_t)i };
		edge_kept[i] = device(TARGETS + i) + (uint64_t)offset[i];
	}
	memset(ref, 0, sizeof(ref));
	CHECK_INT(gmt__leak_scan(t, EDGES, ref, NULL, 0, (uintptr_t)__builtin_frame_address(0), &st), 0);
	CHECK(st.done);
	for (int i = 0; i < EDGES; i++) {
		bool want = i <= AT_LAST;

		if ((ref[i].at != 0) != want) {
			fprintf(stderr, "a global word at %s: %s, expected %s\n", edge_name[i],
				ref[i].at != 0 ? "referenced" : "not referenced", want ? "referenced" : "not");
			check_failed++;
		}
		if (want)
			CHECK_INT(ref[i].region, GMT_REF_GLOBAL);
	}
}

int main(void)
{
	void *base = mmap(NULL, DEVICE_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (base == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	device_base_x = (uint64_t)(uintptr_t)base ^ DISGUISE;
	base = NULL;
	test_walk();
	test_edges();
	if (check_failed == 0)
		printf("ok: leak scan walk\n");
	return check_failed != 0;
}
