/* Assertions for the output tests: each failure prints both values and the
 * line, counts, and lets the test go on; main returns check_failed != 0. And
 * check_keep(), which keeps a copy of a snapshot a test wrote. */
#ifndef GMT_TEST_CHECK_H
#define GMT_TEST_CHECK_H

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int check_failed;

#define CHECK(cond)                                                                      \
	do {                                                                             \
		if (!(cond)) {                                                           \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                                  \
			check_failed++;                                                  \
		}                                                                        \
	} while (0)

#define CHECK_INT(got, want)                                                               \
	do {                                                                               \
		long long g_ = (long long)(got), w_ = (long long)(want);                   \
		if (g_ != w_) {                                                            \
			fprintf(stderr, "%s:%d: %s is %lld, expected %lld\n", __FILE__,    \
				__LINE__, #got, g_, w_);                                   \
			check_failed++;                                                    \
		}                                                                          \
	} while (0)

#define CHECK_U64(got, want)                                                                \
	do {                                                                                \
		uint64_t g_ = (uint64_t)(got), w_ = (uint64_t)(want);                       \
		if (g_ != w_) {                                                             \
			fprintf(stderr, "%s:%d: %s is %" PRIu64 ", expected %" PRIu64 "\n", \
				__FILE__, __LINE__, #got, g_, w_);                          \
			check_failed++;                                                     \
		}                                                                           \
	} while (0)

#define CHECK_STR(got, want)                                                                \
	do {                                                                                \
		const char *g_ = (got), *w_ = (want);                                       \
		if (g_ == NULL || w_ == NULL ? g_ != w_ : strcmp(g_, w_) != 0) {            \
			fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, \
				__LINE__, #got, g_ ? g_ : "(null)", w_ ? w_ : "(null)");    \
			check_failed++;                                                     \
		}                                                                           \
	} while (0)

/* With GMT_TEST_KEEP_DIR set, a copy of the snapshot at path goes there under
 * its own name, for tests/schema to check against docs/snapshot.schema.json
 * (the tests delete what they write). */
static inline void check_keep(const char *path)
{
	const char *dir = getenv("GMT_TEST_KEEP_DIR"), *name = strrchr(path, '/');
	char to[512], buf[1 << 16];
	int in, out;
	ssize_t n;

	if (dir == NULL || dir[0] == '\0')
		return;
	snprintf(to, sizeof(to), "%s/%s", dir, name != NULL ? name + 1 : path);
	in = open(path, O_RDONLY);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(in >= 0);
	CHECK(out >= 0);
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		CHECK(write(out, buf, (size_t)n) == n);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

#endif /* GMT_TEST_CHECK_H */
