/* Test program for the growth verdict: a loop that keeps a 20 MiB block per
 * iteration (a leak) beside a 4 MiB temporary it frees, one iteration every
 * 25 ms — or, with the argument "fast", as fast as it can (the whole loop
 * within one window of time) — until the kept blocks fill the device: 12 fit
 * in 256 MiB, the 13th fails with 16 MiB free. The growing site is the leak.
 * With the argument "steps", each iteration is a step marked with
 * gmt_step(n) (nothing untraced). Run with GMTSIM_MEMORY=256M. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <gpumemtrace.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define MAX_ITER 64

static void *keep(void)
{
	void *p = (void *)(uintptr_t)0xdead0000;

	if (cudaMalloc(&p, 20 * MIB) != cudaSuccess) {
		PROG_CHECK_EQ_U(PROG_ADDR(p), 0xdead0000);
		return NULL;
	}
	return p;
}

static void scratch(void)
{
	void *p;

	PROG_OK(cudaMalloc(&p, 4 * MIB));
	PROG_OK(cudaFree(p));
}

int main(int argc, char **argv)
{
	bool fast = argc > 1 && strcmp(argv[1], "fast") == 0;
	bool steps = argc > 1 && strcmp(argv[1], "steps") == 0;
	struct timespec pause = { 0, 25 * 1000000 };
	void *kept[MAX_ITER];
	int n = 0;

	for (;;) {
		PROG_CHECK(n < MAX_ITER);
		if (steps)
			(void)gmt_step((unsigned long long)n + 1); /* -ENOSYS untraced */
		kept[n] = keep();
		if (kept[n] == NULL)
			break;
		n++;
		scratch();
		if (!fast)
			nanosleep(&pause, NULL);
	}
	PROG_CHECK_EQ(n, 12);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);

	prog_report_begin("main");
	for (int i = 0; i < n; i++)
		prog_report_live(PROG_ADDR(kept[i]), 20 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
