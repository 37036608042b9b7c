/* Input files the user names, opened safely (input.h). */
#define _GNU_SOURCE
#include "util/input.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a plain file";
}

FILE *gmt__input_open(const char *path, const char *what, uint64_t max, char *err, size_t errlen)
{
	struct stat st;
	FILE *f;
	int fd, e;

	/* NOTE: O_NONBLOCK: opening a FIFO for reading blocks until a writer
	 * comes, and a device may block too; nothing is read before the type is
	 * known. It stays set: on a regular file it changes nothing (and no
	 * fcntl is needed, whose 64-bit name needs glibc 2.28: the tracer loads
	 * on older ones, tests/preload/check_library.py). */
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		e = errno;
		snprintf(err, errlen, "%s: cannot read %s: %s", path, what, strerror(e));
		errno = e;
		return NULL;
	}
	/* NOTE: the system call: glibc's fstat is fstat64@GLIBC_2.33. */
	if (syscall(SYS_fstat, fd, &st) != 0) {
		e = errno;
		snprintf(err, errlen, "%s: cannot read %s: %s", path, what, strerror(e));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		e = EINVAL;
		snprintf(err, errlen, "%s: cannot read %s: not a regular file (%s)", path, what, kind_of(st.st_mode));
		goto fail;
	}
	if ((uint64_t)st.st_size > max) {
		e = EFBIG;
		snprintf(err, errlen, "%s: cannot read %s: larger than %" PRIu64 " bytes (%" PRIu64 ")", path, what,
			 max, (uint64_t)st.st_size);
		goto fail;
	}
	f = fdopen(fd, "re");
	if (f == NULL) {
		e = errno;
		snprintf(err, errlen, "%s: cannot read %s: %s", path, what, strerror(e));
		goto fail;
	}
	return f;
fail:
	close(fd);
	errno = e;
	return NULL;
}
