/* A library for bench/leak_scan's generated set (bench/run.py compiles it
 * once, SCAN_LIB_MIB given, and copies it, sparse, under many names): a
 * read-only blob of SCAN_LIB_MIB MiB, as a large library's code and
 * constants are, some writable data, and a function that the allocations
 * are made through, so that every stack passes through some copy. */
#include <stddef.h>

#ifndef SCAN_LIB_MIB
#define SCAN_LIB_MIB 32
#endif

int scan_lib_call(int (*fn)(void *), void *arg);

/* Zeros but one byte: on disk a hole once copied sparse. */
__attribute__((used)) static const unsigned char blob[(size_t)SCAN_LIB_MIB << 20] = { 1 };
/* 64 KiB of data with pointers into the blob, as a library's tables have. */
__attribute__((used)) static const unsigned char *table[8192] = { blob, blob + 1 };

int scan_lib_call(int (*fn)(void *), void *arg)
{
	/* Not a tail call: this frame stays on the stack under fn's. */
	volatile int r = fn(arg);

	return r + (table[0][0] != 1);
}
