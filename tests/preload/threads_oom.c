/* Test program for out-of-memory failures on several threads at once: a
 * 1 GiB device holds 900 MiB; three threads named "oom-worker-N" each ask
 * for 200 MiB at the same moment (a barrier) and all fail. Prints
 * "FAILED <tid> <name>" for each, for tests/preload/check_threads_oom.py to
 * find every one of them, with its thread, in the snapshots. Run with
 * GMTSIM_MEMORY=1G. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda.h>

#define MIB ((size_t)1024 * 1024)
#define THREADS 3

static CUcontext ctx;
static pthread_barrier_t start;
static pthread_mutex_t out = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
	char name[16];
	CUdeviceptr p;
	CUresult r;

	snprintf(name, sizeof(name), "oom-worker-%d", (int)(long)arg);
	pthread_setname_np(pthread_self(), name);
	if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		abort();
	pthread_barrier_wait(&start);
	r = cuMemAlloc(&p, 200 * MIB);
	pthread_mutex_lock(&out);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		printf("FAILED %ld %s\n", (long)syscall(SYS_gettid), name);
	else
		printf("UNEXPECTED %d %s\n", (int)r, name);
	fflush(stdout);
	pthread_mutex_unlock(&out);
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	CUdevice dev;
	CUdeviceptr held;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    cuMemAlloc(&held, 900 * MIB) != CUDA_SUCCESS)
		return 1;
	pthread_barrier_init(&start, NULL, THREADS);
	for (long i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	cuMemFree(held);
	return 0;
}
