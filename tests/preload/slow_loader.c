/* A test double of a slow dynamic loader, for tests/preload/check_forks.py.
 * Preloaded before the tracer: dlopen takes 3 ms on any thread but the main
 * one (where the tracer's writer runs), and counts the calls in flight. glibc's fork does not
 * wait for a dlopen in another thread: the child inherits the loader's data as
 * that call left it, which can make the child's own dlopen fault (a fault
 * that needs the fork to land in a window of microseconds). Here the window
 * is the whole 3 ms, and the fault is certain: a child forked while a call
 * was in flight says so on stderr at its first dlopen and exits with 86. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_int in_flight;
static bool broken;

static void child(void)
{
	broken = atomic_load(&in_flight) > 0;
	atomic_store(&in_flight, 0);
}

__attribute__((constructor)) static void setup(void)
{
	pthread_atfork(NULL, NULL, child);
}

static void *(*real_dlopen(void))(const char *, int)
{
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17" };
	void *(*fn)(const char *, int) = NULL;
	void *sym = NULL;

	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && sym == NULL; i++)
		sym = dlvsym(RTLD_NEXT, "dlopen", versions[i]);
	memcpy(&fn, &sym, sizeof(fn));
	return fn;
}

void *dlopen(const char *name, int mode)
{
	static const char msg[] = "slow_loader: dlopen in a child forked while another thread was inside dlopen\n";
	struct timespec pause = { 0, 3000000 };
	bool slow = syscall(SYS_gettid) != getpid();
	void *h;

	if (broken) {
		(void)!write(2, msg, sizeof(msg) - 1);
		_exit(86);
	}
	if (slow) {
		atomic_fetch_add(&in_flight, 1);
		nanosleep(&pause, NULL);
	}
	h = real_dlopen()(name, mode);
	if (slow)
		atomic_fetch_sub(&in_flight, 1);
	return h;
}
