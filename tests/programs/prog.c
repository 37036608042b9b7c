/* The report and failure helpers of the test programs (see prog.h): a buffer
 * filled line by line and written with a single write(2). */
#define _GNU_SOURCE
#include "prog.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char report[64 * 1024];
static size_t report_len;

static void report_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void report_append(const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(report + report_len, sizeof(report) - report_len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(report) - report_len)
		PROG_FAIL("report buffer of %zu bytes is full", sizeof(report));
	report_len += (size_t)n;
}

void prog_report_begin(const char *role)
{
	report_len = 0;
	report_append("PID %ld %s\n", (long)getpid(), role);
}

void prog_report_live(unsigned long long address, size_t size, const char *kind,
		      int device)
{
	report_append("LIVE 0x%llx %zu %s %d\n", address, size, kind, device);
}

void prog_report_end(void)
{
	size_t done = 0;

	while (done < report_len) {
		ssize_t n = write(STDOUT_FILENO, report + done, report_len - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			PROG_FAIL("writing the report: %s", strerror(errno));
		done += (size_t)n;
	}
	report_len = 0;
}

void prog_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}
