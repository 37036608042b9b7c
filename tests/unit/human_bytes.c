/* Prints gmt__human_bytes (src/util/parse.c) of each argument, one a line, or
 * with --duration first gmt__human_duration of each (nanoseconds):
 * test_vocabulary.py holds the viewer's fmt_bytes and fmt_duration to them. */
#include "util/parse.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	bool duration = argc > 1 && strcmp(argv[1], "--duration") == 0;
	char buf[64];
	uint64_t n;

	for (int i = duration ? 2 : 1; i < argc; i++) {
		if (gmt__parse_u64(argv[i], 0, UINT64_MAX, &n) < 0) {
			fprintf(stderr, "human_bytes: %s: not a number\n", argv[i]);
			return 2;
		}
		puts(duration ? gmt__human_duration(buf, sizeof(buf), n) : gmt__human_bytes(buf, sizeof(buf), n));
	}
	return 0;
}
