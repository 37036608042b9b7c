/* Logging: one line per message on stderr (or the fd a test chose), prefixed
 * "gpumemtrace: ", written with a single write(2); warnings capped at
 * GMT_LOG_MAX_WARNINGS. See log.h. */
#define _GNU_SOURCE
#include "util/log.h"

#include "util/fdwrite.h"
#include "util/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GMT_LOG_PREFIX "gpumemtrace: "
#define GMT_LOG_MAX_WARNINGS 20u
/* A longer line is cut and ends in "...". It lives on the stack: hooks may log
 * from threads with little of it. */
#define GMT_LOG_LINE_MAX 1024

/* None of these publishes other data; each is read and written on its own, so
 * relaxed order is enough for them (log_file.known, below, publishes its
 * identity: release and acquire). */
static atomic_int log_fd = 2;
/* The file the messages go to, as the process started with it on fd 2
 * (gmt__log_keep_stderr): written to only while log_fd (else fd 2) is still
 * that file. R1 (release of `known`) pairs with A1: the identity is read
 * whole. */
static struct {
	uint64_t dev, ino;
	atomic_bool known;
} log_file;
/* -1 until the options set it: progress logged before the tracer has read
 * its options (a driver lookup inside dlopen) asks the environment. */
static atomic_int log_verbose = -1;
static atomic_uint log_warnings;
/* How log_fd is written (gmt__log_keep_stderr): */
enum { LOG_WAIT, LOG_NOWAIT, LOG_SEND, LOG_POLL };
static atomic_int log_mode = LOG_WAIT;
/* Lines that found no room, and how many of them a line has said so. */
static atomic_ullong log_dropped, log_dropped_said;

size_t gmt__utf8_printable(const char *text)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	uint32_t cp;

	if (n == 0 || s[0] > 0xf4)
		return 0;
	cp = s[0] & (0x7f >> n);
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	if (cp < 0xa0 || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x200e && cp <= 0x200f) ||
	    (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
		return 0;
	return n;
}

/* Whether fd is the file the process started with on fd 2. NOTE: the
 * system call: glibc's fstat is versioned anew in 2.33. */
static bool is_log_file(int fd)
{
	struct stat st;

	return syscall(SYS_fstat, fd, &st) == 0 && (uint64_t)st.st_dev == log_file.dev &&
	       (uint64_t)st.st_ino == log_file.ino;
}

/* Where a line goes: fd, while it is still the file the process started
 * with on fd 2; else fd 2 when that is; else nowhere (-1): a program that
 * closed its stderr and opened a file of its own there never gets the
 * tracer's lines in it. Any fd before gmt__log_keep_stderr ran (or a test's). */
static int target_fd(int fd)
{
	/* A1: acquire of `known`; pairs with R1 in gmt__log_keep_stderr. */
	if (fd < 0 || !atomic_load_explicit(&log_file.known, memory_order_acquire))
		return fd;
	if (is_log_file(fd))
		return fd;
	return fd != 2 && is_log_file(2) ? 2 : -1;
}

/* One attempt at a whole line that never waits (the modes but LOG_WAIT):
 * true when it was written. */
static bool put_nowait(int fd, int mode, const char *line, size_t n)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	if (mode == LOG_POLL && (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT)))
		return false;
	if (mode == LOG_POLL)
		return gmt__write_full(fd, line, n) == 0;
	return gmt__write_nowait(fd, line, n, mode == LOG_SEND) == (ssize_t)n;
}

/* Writes one line whole, one write per line so that the lines of several
 * threads or processes do not interleave. A stderr nobody reads (a pipe or a
 * socket whose reader waits for the program's end, a terminal stopped by
 * ^S) never holds the program: such a line is counted and lost, and the
 * next line that finds room says how many were. */
static void put_line(int fd, const char *line, size_t n)
{
	int mode = atomic_load_explicit(&log_mode, memory_order_relaxed);
	unsigned long long dropped, said;

	if (mode == LOG_WAIT) {
		gmt__write_full(fd, line, n);
		return;
	}
	dropped = atomic_load_explicit(&log_dropped, memory_order_relaxed);
	said = atomic_load_explicit(&log_dropped_said, memory_order_relaxed);
	/* Of threads that find lines unsaid, one says them. */
	if (dropped > said && atomic_compare_exchange_strong_explicit(&log_dropped_said, &said, dropped,
								      memory_order_relaxed, memory_order_relaxed)) {
		char note[128];
		int len = snprintf(note, sizeof(note),
				   GMT_LOG_PREFIX "%llu lines not written: stderr was full (nobody read it)\n",
				   dropped - said);

		if (!put_nowait(fd, mode, note, (size_t)len)) {
			atomic_fetch_sub_explicit(&log_dropped_said, dropped - said, memory_order_relaxed);
			atomic_fetch_add_explicit(&log_dropped, 1, memory_order_relaxed);
			return;
		}
	}
	if (!put_nowait(fd, mode, line, n))
		atomic_fetch_add_explicit(&log_dropped, 1, memory_order_relaxed);
}

unsigned long long gmt__log_dropped(void)
{
	return atomic_load_explicit(&log_dropped, memory_order_relaxed);
}

size_t gmt__log_escape(char *out, size_t len, const char *text, bool more)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	if (len == 0)
		return 0;
	for (size_t i = 0; text[i] != '\0'; i++) {
		unsigned char c = (unsigned char)text[i];
		size_t plain = c >= 0x20 && c < 0x7f ? 1 : c >= 0x80 ? gmt__utf8_printable(text + i) : 0;

		/* keep room for "..." and the NUL */
		if (n + (plain > 0 ? plain : 4) + 4 > len) {
			more = true;
			break;
		}
		if (plain > 0) {
			memcpy(out + n, text + i, plain);
			n += plain;
			i += plain - 1;
		} else {
			out[n++] = '\\';
			out[n++] = 'x';
			out[n++] = hex[c >> 4];
			out[n++] = hex[c & 15];
		}
	}
	if (more && n + 4 <= len) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
	return n;
}

/* Formats one line and writes it whole, escaped (gmt__log_escape) as
 * options.c quotes a bad value (which comes here quoted already: its
 * backslashes are left alone): a path or a suppression line with a newline in
 * it cannot split a message or forge another. NOTE: vsnprintf is not
 * async-signal-safe; nothing calls the log from a signal handler. */
static void emit(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
static void emit(const char *fmt, va_list ap)
{
	char text[GMT_LOG_LINE_MAX], line[GMT_LOG_LINE_MAX];
	const size_t prefix = sizeof(GMT_LOG_PREFIX) - 1;
	int fd = atomic_load_explicit(&log_fd, memory_order_relaxed);
	size_t n = prefix;
	int len;

	len = vsnprintf(text, sizeof(text), fmt, ap);
	if (len < 0)
		return;
	memcpy(line, GMT_LOG_PREFIX, prefix);
	/* one byte kept for the '\n' (in the escape's NUL's place) */
	n += gmt__log_escape(line + n, sizeof(line) - n - 1, text, (size_t)len >= sizeof(text));
	line[n++] = '\n';

	fd = target_fd(fd);
	if (fd >= 0)
		put_line(fd, line, n);
}

static void emit_args(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit_args(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	emit(fmt, ap);
	va_end(ap);
}

/* Counts a warning and says whether it may be printed; the first one past the
 * cap prints the "suppressed" line instead. */
static bool warn_admit(void)
{
	unsigned n = atomic_fetch_add_explicit(&log_warnings, 1, memory_order_relaxed);

	if (n < GMT_LOG_MAX_WARNINGS)
		return true;
	if (n == GMT_LOG_MAX_WARNINGS)
		emit_args("further warnings suppressed (more than %u)", GMT_LOG_MAX_WARNINGS);
	return false;
}

void gmt__warn(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (warn_admit()) {
		va_start(ap, fmt);
		emit(fmt, ap);
		va_end(ap);
	}
	errno = saved;
}

void gmt__warn_once(bool *once, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	/* NOTE: the flag is a plain static bool at the call site (log.h), so the
	 * GCC builtin makes the exchange atomic: of racing threads exactly one
	 * sees false. Relaxed: the flag guards nothing but this message. */
	if (__atomic_exchange_n(once, true, __ATOMIC_RELAXED))
		goto out;
	if (warn_admit()) {
		va_start(ap, fmt);
		emit(fmt, ap);
		va_end(ap);
	}
out:
	errno = saved;
}

void gmt__report(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	emit(fmt, ap);
	va_end(ap);
	errno = saved;
}

static bool verbose(void)
{
	int on = atomic_load_explicit(&log_verbose, memory_order_relaxed);
	const char *env;
	bool b = false;

	if (on >= 0)
		return on;
	env = getenv("GPUMEMTRACE_VERBOSE");
	return env != NULL && gmt__parse_bool(env, &b) == 0 && b;
}

void gmt__info(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	if (!verbose())
		return;
	va_start(ap, fmt);
	emit(fmt, ap);
	va_end(ap);
	errno = saved;
}

void gmt__log_set_verbose(bool on)
{
	atomic_store_explicit(&log_verbose, on ? 1 : 0, memory_order_relaxed);
}

int gmt__log_set_fd(int fd)
{
	atomic_store_explicit(&log_file.known, false, memory_order_relaxed);
	return atomic_exchange_explicit(&log_fd, fd, memory_order_relaxed);
}

/* A descriptor of fd 2's file that the tracer can write without waiting,
 * at or above min (close-on-exec), and how to write it (*mode); -1 where
 * fd 2 is a file that never makes a writer wait (a regular file, /dev/null:
 * mode LOG_WAIT) or none could be had. A pipe or a terminal is opened anew
 * through /proc: a file description of the tracer's own, O_NONBLOCK
 * without changing the program's (flags belong to the description, which a
 * dup shares). A socket takes send(MSG_DONTWAIT) on a dup. */
static int own_descriptor(const struct stat *st, int min, int *mode)
{
	struct stat again;
	int fd, high;

	if (S_ISSOCK(st->st_mode)) {
		*mode = LOG_SEND;
		return (int)syscall(SYS_fcntl, 2, F_DUPFD_CLOEXEC, min);
	}
	if (!S_ISFIFO(st->st_mode) && !S_ISCHR(st->st_mode))
		return -1;
	if (S_ISCHR(st->st_mode) && !isatty(2))
		return -1; /* /dev/null and friends: never full */
	fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -1;
	/* The same file, not one put in its place since. */
	if (syscall(SYS_fstat, fd, &again) != 0 || again.st_dev != st->st_dev || again.st_ino != st->st_ino) {
		close(fd);
		return -1;
	}
	high = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, min);
	close(fd);
	*mode = LOG_NOWAIT;
	return high;
}

void gmt__log_keep_stderr(void)
{
	struct rlimit rl;
	struct stat st;
	int fd, min = 3, mode = LOG_WAIT;

	if (atomic_load_explicit(&log_fd, memory_order_relaxed) != 2 ||
	    atomic_load_explicit(&log_file.known, memory_order_relaxed))
		return;
	if (syscall(SYS_fstat, 2, &st) != 0) {
		/* Closed at the start: the program wants no stderr. */
		atomic_store_explicit(&log_fd, -1, memory_order_relaxed);
		return;
	}
	log_file.dev = (uint64_t)st.st_dev;
	log_file.ino = (uint64_t)st.st_ino;
	/* A descriptor of its own, high above the program's (its first open()
	 * still gets 3), closed by exec (the new program keeps its own). */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 64 && rl.rlim_cur != RLIM_INFINITY)
		min = (int)(rl.rlim_cur - 64 < 1024 ? rl.rlim_cur - 64 : 1024);
	/* NOTE: the system call: glibc 2.28 versions fcntl anew (as fcntl64). */
	fd = own_descriptor(&st, min, &mode);
	if (fd < 0) {
		fd = (int)syscall(SYS_fcntl, 2, F_DUPFD_CLOEXEC, min);
		mode = S_ISFIFO(st.st_mode) || (S_ISCHR(st.st_mode) && isatty(2)) ? LOG_POLL : LOG_WAIT;
	}
	if (fd >= 0) {
		atomic_store_explicit(&log_mode, mode, memory_order_relaxed);
		atomic_store_explicit(&log_fd, fd, memory_order_relaxed);
	}
	/* R1: the identity is whole before it is used; pairs with A1. */
	atomic_store_explicit(&log_file.known, true, memory_order_release);
}
