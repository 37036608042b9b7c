/* Test program for a fork at any moment (tests/preload/check_forks.py): the
 * parent keeps LIVE allocations of 4 KiB, made from a few call sites (a
 * snapshot whose frames take a while to resolve), and forks CHILDREN children
 * one after another while the tracer writes snapshots: in mode "signal" a
 * timer sends SIGUSR2 every 2 ms (no thread of the program's own), in mode
 * "dump" a thread calls gmt_dump() again and again. Each child calls the
 * driver (which fails there: CUDA was initialised before the fork), and
 * exits, writing its own exit snapshot. The parent reaps every child and
 * prints "CHILDREN <n> DIED <d>" with, for each child that did not exit with
 * 0, one line "DIED <pid> <status>"; it exits with 1 when any died.
 * Arguments: MODE CHILDREN LIVE. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "gpumemtrace.h"

static atomic_bool stop;

static __attribute__((noinline)) int alloc_a(CUdeviceptr *p)
{
	return cuMemAlloc(p, 4096) == CUDA_SUCCESS ? 0 : -1;
}

static __attribute__((noinline)) int alloc_b(CUdeviceptr *p)
{
	return cuMemAlloc(p, 4096) == CUDA_SUCCESS ? 0 : -1;
}

static void *dumper(void *arg)
{
	char path[4096];

	(void)arg;
	while (!atomic_load(&stop))
		(void)gmt_dump(path, sizeof(path));
	return NULL;
}

static int start_timer(void)
{
	struct sigevent sev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR2 };
	struct itimerspec its = { .it_interval = { 0, 2000000 }, .it_value = { 0, 2000000 } };
	timer_t timer;

	return timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0 && timer_settime(timer, 0, &its, NULL) == 0 ? 0 : -1;
}

static void child(void)
{
	CUdeviceptr p;

	(void)cuMemAlloc(&p, 4096);
	exit(0);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "signal";
	long children = argc > 2 ? strtol(argv[2], NULL, 10) : 200;
	long live = argc > 3 ? strtol(argv[3], NULL, 10) : 2000;
	long died = 0;
	pthread_t thread;
	CUdevice dev;
	CUcontext ctx;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		fprintf(stderr, "fork_writes: the driver failed\n");
		return 2;
	}
	/* Nothing buffered may be written again by a child's exit. */
	setvbuf(stdout, NULL, _IONBF, 0);
	for (long i = 0; i < live; i++) {
		CUdeviceptr p;

		if ((i % 2 == 0 ? alloc_a(&p) : alloc_b(&p)) != 0) {
			fprintf(stderr, "fork_writes: allocation %ld failed\n", i);
			return 2;
		}
	}
	if (strcmp(mode, "dump") == 0) {
		if (pthread_create(&thread, NULL, dumper, NULL) != 0) {
			fprintf(stderr, "fork_writes: no thread\n");
			return 2;
		}
	} else if (start_timer() != 0) {
		fprintf(stderr, "fork_writes: no timer\n");
		return 2;
	}
	for (long i = 0; i < children; i++) {
		pid_t pid = fork();
		int status;

		if (pid < 0) {
			fprintf(stderr, "fork_writes: fork failed\n");
			return 2;
		}
		if (pid == 0)
			child();
		while (waitpid(pid, &status, 0) < 0)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			printf("DIED %ld 0x%x\n", (long)pid, status);
			died++;
		}
	}
	if (strcmp(mode, "dump") == 0) {
		atomic_store(&stop, true);
		pthread_join(thread, NULL);
	}
	printf("CHILDREN %ld DIED %ld\n", children, died);
	return died != 0;
}
