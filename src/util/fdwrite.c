/* Writes that raise no signal in the program (fdwrite.h). */
#define _GNU_SOURCE
#include "util/fdwrite.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The signals a write can raise, blocked on this thread around it. */
struct quiet {
	sigset_t old, before;
};

static void quiet_begin(struct quiet *q)
{
	sigset_t quiet;

	sigemptyset(&quiet);
	sigaddset(&quiet, SIGXFSZ);
	sigaddset(&quiet, SIGPIPE);
	/* NOTE: the kernel sends both to the writing thread (send_sig: the
	 * thread, not the process), so blocking them here is enough; one
	 * already pending before (the program blocks it too) is left alone. */
	pthread_sigmask(SIG_BLOCK, &quiet, &q->old);
	sigpending(&q->before);
}

/* r: the write's result; a signal it raised is taken back. */
static void quiet_end(struct quiet *q, int r)
{
	const struct timespec now = { 0, 0 };

	if (r == -EFBIG || r == -EPIPE) {
		int sig = r == -EFBIG ? SIGXFSZ : SIGPIPE;
		sigset_t after, one;

		sigpending(&after);
		if (sigismember(&after, sig) && !sigismember(&q->before, sig)) {
			sigemptyset(&one);
			sigaddset(&one, sig);
			sigtimedwait(&one, NULL, &now);
		}
	}
	pthread_sigmask(SIG_SETMASK, &q->old, NULL);
}

int gmt__write_full(int fd, const void *p, size_t n)
{
	const char *at = p;
	struct quiet q;
	int saved = errno, r = 0;

	quiet_begin(&q);
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
	quiet_end(&q, r);
	errno = saved;
	return r;
}

ssize_t gmt__write_nowait(int fd, const void *p, size_t n, bool socket)
{
	struct quiet q;
	int saved = errno;
	ssize_t w;

	quiet_begin(&q);
	do {
		w = socket ? send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL) : write(fd, p, n);
	} while (w < 0 && errno == EINTR);
	if (w < 0)
		w = errno == EWOULDBLOCK ? -EAGAIN : -errno;
	quiet_end(&q, (int)(w < 0 ? w : 0));
	errno = saved;
	return w;
}
