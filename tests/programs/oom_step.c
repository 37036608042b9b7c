/* Test program for the remedies that rest on step markers: the shape of a
 * training loop whose batch grows. Weights of 96 MiB stay live; each step,
 * marked with gmt_step(n) as it begins, allocates n activations of 16 MiB
 * and frees them when it ends. On a 256 MiB device step 10 fills it exactly;
 * step 11's eleventh activation fails with 160 MiB of the step live and
 * nothing free: a shortfall of 16 MiB, which half the step's memory covers.
 * Untraced, gmt_step does nothing. Run with GMTSIM_MEMORY=256M. */
#define _GNU_SOURCE
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <gpumemtrace.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define MAX_STEP 32

/* One activation of the forward: NULL when it does not fit. */
static void *activation(void)
{
	void *p = (void *)(uintptr_t)0xdead0000;

	if (cudaMalloc(&p, 16 * MIB) != cudaSuccess) {
		PROG_CHECK_EQ_U(PROG_ADDR(p), 0xdead0000);
		return NULL;
	}
	return p;
}

int main(void)
{
	void *weights, *act[MAX_STEP];
	int step, n = 0;

	PROG_OK(cudaMalloc(&weights, 96 * MIB));
	for (step = 1; step < MAX_STEP; step++) {
		(void)gmt_step((unsigned long long)step); /* -ENOSYS untraced */
		for (n = 0; n < step; n++) {
			act[n] = activation();
			if (act[n] == NULL)
				break;
		}
		if (n < step)
			break;
		for (int i = 0; i < n; i++)
			PROG_OK(cudaFree(act[i]));
	}
	PROG_CHECK_EQ(step, 11);
	PROG_CHECK_EQ(n, 10);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(weights), 96 * MIB, "device", 0);
	for (int i = 0; i < n; i++)
		prog_report_live(PROG_ADDR(act[i]), 16 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
