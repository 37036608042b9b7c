/* The tracer's writes to files and to stderr: whole, retried after EINTR, and
 * never raising a signal in the program. A write past the file-size limit
 * (RLIMIT_FSIZE) raises SIGXFSZ, one to a pipe without reader SIGPIPE; both
 * kill by default, and the program did not ask for either. Here they are
 * blocked on the writing thread for the write, and one the write raised is
 * taken back; the write fails with EFBIG or EPIPE as for a program that
 * ignores them. */
#ifndef GMT_FDWRITE_H
#define GMT_FDWRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Writes all n bytes at p to fd: 0, or a negative errno (the first
 * failure; -EIO for a write that wrote nothing). Leaves errno as it was. */
int gmt__write_full(int fd, const void *p, size_t n);

/* One attempt at writing n bytes at p to fd that never waits: fd is a
 * descriptor opened O_NONBLOCK (to a pipe, n <= PIPE_BUF bytes go whole or
 * not at all), or a socket (socket: send with MSG_DONTWAIT). Returns the
 * bytes written, or a negative errno (-EAGAIN: no room now). Leaves errno
 * as it was. */
ssize_t gmt__write_nowait(int fd, const void *p, size_t n, bool socket);

#endif /* GMT_FDWRITE_H */
