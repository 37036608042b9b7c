/* Writes that raise no signal in the program (fdwrite.h). */
#define _GNU_SOURCE
#include "util/fdwrite.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

int gmt__write_full(int fd, const void *p, size_t n)
{
	const struct timespec now = { 0, 0 };
	const char *at = p;
	sigset_t quiet, old, before, after;
	int saved = errno, r = 0;

	sigemptyset(&quiet);
	sigaddset(&quiet, SIGXFSZ);
	sigaddset(&quiet, SIGPIPE);
	/* NOTE: the kernel sends both to the writing thread (send_sig: the
	 * thread, not the process), so blocking them here is enough; one
	 * already pending before (the program blocks it too) is left alone. */
	pthread_sigmask(SIG_BLOCK, &quiet, &old);
	sigpending(&before);
	while (n > 0) {
		ssize_t w = write(fd, at, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			r = w < 0 ? -errno : -EIO;
			break;
		}
		at += w;
		n -= (size_t)w;
	}
	if (r == -EFBIG || r == -EPIPE) {
		int sig = r == -EFBIG ? SIGXFSZ : SIGPIPE;
		sigset_t one;

		sigpending(&after);
		if (sigismember(&after, sig) && !sigismember(&before, sig)) {
			sigemptyset(&one);
			sigaddset(&one, sig);
			sigtimedwait(&one, NULL, &now);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return r;
}
