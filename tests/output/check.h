/* Assertions for the output tests: each failure prints both values and the
 * line, counts, and lets the test go on; main returns check_failed != 0. */
#ifndef GMT_TEST_CHECK_H
#define GMT_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

#endif /* GMT_TEST_CHECK_H */
