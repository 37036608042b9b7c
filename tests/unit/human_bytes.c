/* Prints gmt__human_bytes (src/util/parse.c) of each argument, one a line:
 * test_vocabulary.py holds the viewer's fmt_bytes to it. */
#include "util/parse.h"

#include <inttypes.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	char buf[64];
	uint64_t n;

	for (int i = 1; i < argc; i++) {
		if (gmt__parse_u64(argv[i], 0, UINT64_MAX, &n) < 0) {
			fprintf(stderr, "human_bytes: %s: not a byte count\n", argv[i]);
			return 2;
		}
		puts(gmt__human_bytes(buf, sizeof(buf), n));
	}
	return 0;
}
