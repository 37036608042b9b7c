/* Table-driven tests of the strict number and size parsers (src/util/parse.c). */
#include "util/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

struct size_case {
	const char *in;
	uint64_t min, max;
	int ret;
	uint64_t out;
};

static const struct size_case size_cases[] = {
	{ "0", 0, UINT64_MAX, 0, 0 },
	{ "4096", 0, UINT64_MAX, 0, 4096 },
	{ "1K", 0, UINT64_MAX, 0, 1024 },
	{ "1k", 0, UINT64_MAX, 0, 1024 },
	{ "3Ki", 0, UINT64_MAX, 0, 3072 },
	{ "2gi", 0, UINT64_MAX, 0, 2ull << 30 },
	{ "1Kx", 0, UINT64_MAX, -EINVAL, 0 },
	{ "2M", 0, UINT64_MAX, 0, 2u << 20 },
	{ "2MiB", 0, UINT64_MAX, 0, 2u << 20 },
	{ "2mb", 0, UINT64_MAX, 0, 2u << 20 },
	{ "16G", 0, UINT64_MAX, 0, 16ull << 30 },
	{ "3T", 0, UINT64_MAX, 0, 3ull << 40 },
	{ "12B", 0, UINT64_MAX, 0, 12 },
	{ "", 0, UINT64_MAX, -EINVAL, 0 },
	{ "G", 0, UINT64_MAX, -EINVAL, 0 },
	{ "-1", 0, UINT64_MAX, -EINVAL, 0 },
	{ "+1", 0, UINT64_MAX, -EINVAL, 0 },
	{ " 1", 0, UINT64_MAX, -EINVAL, 0 },
	{ "1 ", 0, UINT64_MAX, -EINVAL, 0 },
	{ "1X", 0, UINT64_MAX, -EINVAL, 0 },
	{ "1KiBB", 0, UINT64_MAX, -EINVAL, 0 },
	{ "1.5G", 0, UINT64_MAX, -EINVAL, 0 },
	{ "18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX },
	{ "18446744073709551616", 0, UINT64_MAX, -ERANGE, 0 },
	{ "16777216T", 0, UINT64_MAX, -ERANGE, 0 },
	{ "1M", 0, 1000, -ERANGE, 0 },
	{ "1", 2, 10, -ERANGE, 0 },
};

static const struct size_case u64_cases[] = {
	{ "7", 1, 16, 0, 7 },
	{ "16", 1, 16, 0, 16 },
	{ "17", 1, 16, -ERANGE, 0 },
	{ "0", 1, 16, -ERANGE, 0 },
	{ "1K", 0, UINT64_MAX, -EINVAL, 0 },
	{ "", 0, UINT64_MAX, -EINVAL, 0 },
	{ "12x", 0, UINT64_MAX, -EINVAL, 0 },
};

static int run(const char *what, const struct size_case *cases, size_t n,
	       int (*fn)(const char *, uint64_t, uint64_t, uint64_t *))
{
	int failed = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		const struct size_case *c = &cases[i];
		uint64_t out = 0xdeadbeef;
		int r = fn(c->in, c->min, c->max, &out);

		if (r != c->ret) {
			fprintf(stderr, "%s(\"%s\"): returned %d, expected %d\n", what, c->in, r, c->ret);
			failed++;
		} else if (r == 0 && out != c->out) {
			fprintf(stderr, "%s(\"%s\"): value %" PRIu64 ", expected %" PRIu64 "\n", what,
				c->in, out, c->out);
			failed++;
		} else if (r != 0 && out != 0xdeadbeef) {
			fprintf(stderr, "%s(\"%s\"): wrote %" PRIu64 " on failure\n", what, c->in, out);
			failed++;
		}
	}
	return failed;
}

int main(void)
{
	int failed = 0;

	failed += run("gmt__parse_size", size_cases, sizeof(size_cases) / sizeof(size_cases[0]),
		      gmt__parse_size);
	failed += run("gmt__parse_u64", u64_cases, sizeof(u64_cases) / sizeof(u64_cases[0]),
		      gmt__parse_u64);
	if (gmt__parse_size(NULL, 0, 1, &(uint64_t){ 0 }) != -EINVAL) {
		fprintf(stderr, "gmt__parse_size(NULL) did not fail\n");
		failed++;
	}
	printf("%d failed\n", failed);
	return failed ? 1 : 0;
}
