/* The tracer's writes to files and to stderr: whole, retried after EINTR, and
 * never raising a signal in the program. A write past the file-size limit
 * (RLIMIT_FSIZE) raises SIGXFSZ, one to a pipe without reader SIGPIPE; both
 * kill by default, and the program did not ask for either. Here they are
 * blocked on the writing thread for the write, and one the write raised is
 * taken back; the write fails with EFBIG or EPIPE as for a program that
 * ignores them. */
#ifndef GMT_FDWRITE_H
#define GMT_FDWRITE_H

#include <stddef.h>

/* Writes all n bytes at p to fd: 0, or a negative errno (the first
 * failure; -EIO for a write that wrote nothing). Leaves errno as it was. */
int gmt__write_full(int fd, const void *p, size_t n);

#endif /* GMT_FDWRITE_H */
