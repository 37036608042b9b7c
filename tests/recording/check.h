/* Assertions for the recording tests: each prints both operands and counts a
 * failure instead of stopping, so one run shows every broken case. */
#ifndef GMT_TEST_CHECK_H
#define GMT_TEST_CHECK_H

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* Shared by the test's threads. */
static atomic_int failed;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
			atomic_fetch_add(&failed, 1);                                 \
		}                                                                     \
	} while (0)

/* Unsigned integers (pointers through uintptr_t). */
#define CHECK_EQ(a, b)                                                                \
	do {                                                                          \
		uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                      \
		if (a_ != b_) {                                                       \
			fprintf(stderr, "%s:%d: %s == %s: %" PRIu64 " (0x%" PRIx64 ") != %" PRIu64 \
				" (0x%" PRIx64 ")\n", __FILE__, __LINE__, #a, #b, a_, a_, b_, b_); \
			atomic_fetch_add(&failed, 1);                                 \
		}                                                                     \
	} while (0)

#define CHECK_LE(a, b)                                                                \
	do {                                                                          \
		double a_ = (double)(a), b_ = (double)(b);                            \
		if (!(a_ <= b_)) {                                                    \
			fprintf(stderr, "%s:%d: %s <= %s: %g > %g\n", __FILE__, __LINE__, #a, #b, \
				a_, b_);                                              \
			atomic_fetch_add(&failed, 1);                                 \
		}                                                                     \
	} while (0)

/* Ends main: the verdict and the exit status. */
static inline int check_done(const char *name)
{
	int n = atomic_load(&failed);

	printf("%s: %d failed\n", name, n);
	return n ? 1 : 0;
}

#endif /* GMT_TEST_CHECK_H */
