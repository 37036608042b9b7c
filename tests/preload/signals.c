/* The tracer's background thread must block every signal: a handler of the
 * program may never run on it (docs/internals.md, "Stages and threads"). Finds that thread by its name,
 * checks its blocked set in /proc, and sends the process signals that only the
 * program's worker threads (and, wrongly, the tracer's) could take. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic long handled_on[1024];
static _Atomic int handled;
static _Atomic bool stop;

static void on_usr1(int sig)
{
	int i = atomic_fetch_add(&handled, 1);

	(void)sig;
	if (i < 1024)
		handled_on[i] = syscall(SYS_gettid);
}

static void *worker(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		usleep(1000);
	return NULL;
}

/* The kernel thread id of the thread named `name`, and its SigBlk mask. */
static long find_thread(const char *name, unsigned long long *sigblk)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	long tid = -1;

	while (d != NULL && (e = readdir(d)) != NULL) {
		char path[512], comm[64] = "", line[256];
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f == NULL || fgets(comm, sizeof(comm), f) == NULL) {
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		comm[strcspn(comm, "\n")] = '\0';
		if (strcmp(comm, name) != 0)
			continue;
		tid = atol(e->d_name);
		snprintf(path, sizeof(path), "/proc/self/task/%s/status", e->d_name);
		f = fopen(path, "r");
		while (f != NULL && fgets(line, sizeof(line), f) != NULL)
			if (sscanf(line, "SigBlk: %llx", sigblk) == 1)
				break;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return tid;
}

int main(void)
{
	pthread_t workers[3];
	sigset_t usr1;
	CUcontext ctx;
	CUdeviceptr p;
	unsigned long long blocked = 0;
	long tracer;

	signal(SIGUSR1, on_usr1);
	for (int i = 0; i < 3; i++)
		pthread_create(&workers[i], NULL, worker, NULL);
	/* The main thread does not take SIGUSR1 either: only the workers may. */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS)
		return 1;
	tracer = find_thread("gpumemtrace", &blocked);
	if (tracer < 0) {
		fprintf(stderr, "signals: the tracer's thread is not running (is the tracer preloaded?)\n");
		return 1;
	}
	/* Every signal but those no thread can block (SIGKILL, SIGSTOP) and the two
	 * glibc keeps for itself (32, 33). */
	for (int sig = 1; sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || sig == 32 || sig == 33)
			continue;
		if (!(blocked & (1ull << (sig - 1)))) {
			fprintf(stderr, "signals: the tracer's thread does not block signal %d (SigBlk %llx)\n",
				sig, blocked);
			return 1;
		}
	}
	for (int i = 0; i < 200; i++) {
		kill(getpid(), SIGUSR1);
		if (i % 20 == 0)
			usleep(1000);
	}
	for (int i = 0; i < 100 && atomic_load(&handled) == 0; i++)
		usleep(1000);
	atomic_store(&stop, true);
	for (int i = 0; i < 3; i++)
		pthread_join(workers[i], NULL);
	for (int i = 0; i < atomic_load(&handled) && i < 1024; i++) {
		if (handled_on[i] == tracer) {
			fprintf(stderr, "signals: a handler ran on the tracer's thread\n");
			return 1;
		}
	}
	if (atomic_load(&handled) == 0) {
		fprintf(stderr, "signals: no signal was handled at all\n");
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
