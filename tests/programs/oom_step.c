/* Test program for the remedies that rest on step markers: the shape of a
 * training loop whose batch grows. Weights of 96 MiB (or the MiB of its
 * argument, a multiple of 16) are allocated before the first step and stay
 * live; each step, marked with gmt_step(n) as it begins, allocates n
 * activations of 16 MiB and frees them when it ends. On a 256 MiB device
 * step 10 fills it exactly; step 11's eleventh activation fails with 160 MiB
 * of the step live and nothing free: a shortfall of 16 MiB, which half the
 * step's memory covers. With 160 MiB of weights, step 6 fills it and step
 * 7's seventh fails: the weights are the largest site. Untraced, gmt_step
 * does nothing. Run with GMTSIM_MEMORY=256M. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 96;
	/* the steps that fit: weights + 16 MiB a step's activation */
	int fit = (int)((256 - mib) / 16);
	void *weights, *act[MAX_STEP];
	int step, n = 0;

	PROG_OK(cudaMalloc(&weights, mib * MIB));
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
	PROG_CHECK_EQ(step, fit + 1);
	PROG_CHECK_EQ(n, fit);
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(weights), mib * MIB, "device", 0);
	for (int i = 0; i < n; i++)
		prog_report_live(PROG_ADDR(act[i]), 16 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
