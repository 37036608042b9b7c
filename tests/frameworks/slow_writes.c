/* A test double of a slow disk, for test_exit_writes.py. Preloaded before
 * the tracer: a write() to a regular file takes 20 ms more on any thread but
 * the main one (the tracer's background thread, which writes the peak and
 * signal snapshots), 1 s at most in all. Such a snapshot then outlasts the
 * program's exit, which must wait for it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int slowed;

ssize_t write(int fd, const void *buf, size_t n)
{
	static ssize_t (*real)(int, const void *, size_t);
	struct timespec pause = { 0, 20000000 };
	struct stat st;

	if (real == NULL) {
		void *sym = dlsym(RTLD_NEXT, "write");

		memcpy(&real, &sym, sizeof(real));
	}
	if (syscall(SYS_gettid) != getpid() && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    atomic_fetch_add(&slowed, 1) < 50)
		nanosleep(&pause, NULL);
	return real(fd, buf, n);
}
