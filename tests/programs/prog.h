/* Shared by the test programs in tests/programs: the report each process prints
 * for run_program.py (a "PID <pid> <role>" line, then one "LIVE <address> <size>
 * <kind> <device>" line per allocation it still holds), and checks that print
 * both values and exit non-zero. */
#ifndef GMT_TEST_PROG_H
#define GMT_TEST_PROG_H

#include <stddef.h>
#include <stdint.h>

/* A host or device pointer as the number the report prints. */
#define PROG_ADDR(p) ((unsigned long long)(uintptr_t)(p))

/* Starts this process's report; role is "main" for the process the harness
 * started, another word (e.g. "child-a") for a fork child. */
void prog_report_begin(const char *role);

/* Adds one allocation the process still holds when it ends. kind is a ledger
 * kind (device, async, managed, host, registered, vmm, array); device is -1 for
 * host kinds. For vmm, address is the physical handle's value. */
void prog_report_live(unsigned long long address, size_t size, const char *kind,
		      int device);

/* Writes the report with one write(2) so that the reports of processes sharing a
 * pipe (fork.c) never interleave: one report must stay below PIPE_BUF (4096
 * bytes) when several processes print. */
void prog_report_end(void);

/* Prints "file:line: message" on stderr and exits with status 1 (exit(), not
 * _exit(), so that the driver's destructor still writes the exit ledger). */
__attribute__((noreturn, format(printf, 3, 4)))
void prog_fail(const char *file, int line, const char *fmt, ...);

#define PROG_FAIL(...) prog_fail(__FILE__, __LINE__, __VA_ARGS__)

/* Checks that compare integer values and print both operands on failure. */
#define PROG_CHECK_EQ(actual, expected)                                         \
	do {                                                                    \
		long long prog_a_ = (long long)(actual);                        \
		long long prog_e_ = (long long)(expected);                      \
		if (prog_a_ != prog_e_)                                         \
			PROG_FAIL("%s is %lld, expected %s = %lld", #actual,    \
				  prog_a_, #expected, prog_e_);                 \
	} while (0)

#define PROG_CHECK_EQ_U(actual, expected)                                       \
	do {                                                                    \
		unsigned long long prog_a_ = (unsigned long long)(actual);      \
		unsigned long long prog_e_ = (unsigned long long)(expected);    \
		if (prog_a_ != prog_e_)                                         \
			PROG_FAIL("%s is %llu (0x%llx), expected %s = %llu "   \
				  "(0x%llx)", #actual, prog_a_, prog_a_,        \
				  #expected, prog_e_, prog_e_);                 \
	} while (0)

#define PROG_CHECK_NE(actual, unexpected)                                       \
	do {                                                                    \
		long long prog_a_ = (long long)(actual);                        \
		long long prog_u_ = (long long)(unexpected);                    \
		if (prog_a_ == prog_u_)                                         \
			PROG_FAIL("%s is %lld, must differ from %s = %lld",     \
				  #actual, prog_a_, #unexpected, prog_u_);      \
	} while (0)

/* a < b, compared as unsigned 64-bit values. */
#define PROG_CHECK_LT_U(a, b)                                                   \
	do {                                                                    \
		unsigned long long prog_a_ = (unsigned long long)(a);           \
		unsigned long long prog_b_ = (unsigned long long)(b);           \
		if (!(prog_a_ < prog_b_))                                       \
			PROG_FAIL("expected %s < %s, but %llu >= %llu", #a, #b, \
				  prog_a_, prog_b_);                            \
	} while (0)

#define PROG_CHECK(cond)                                                        \
	do {                                                                    \
		if (!(cond))                                                    \
			PROG_FAIL("check failed: %s", #cond);                   \
	} while (0)

/* A CUDA call that must succeed (0 is both cudaSuccess and CUDA_SUCCESS). */
#define PROG_OK(call) PROG_CHECK_EQ((call), 0)

#endif
