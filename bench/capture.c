/* Benchmark: what one stack capture costs, beside the call it is taken for.
 * From a call chain 70 frames deep it times, in this one process, an
 * uninstrumented cuMemAlloc_v2 + cuMemFree_v2 pair on the simulated driver, and
 * the tracer's capture (stacks.c, linked directly: no hook involved) at depths
 * 16 and 64, alone and with interning. A first pass of a few iterations lets
 * the unwinding rules of its frames be learnt (the tracer's consumer does that
 * in a traced program; src/record/unwind.h), and the second is timed. Prints "name
 * ns" lines for bench/run.py, and how many timed captures libunwind walked.
 *
 * Usage: capture [ITERATIONS] */
#define _GNU_SOURCE
#include "record/stacks.h"
#include "record/unwind.h"

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAIN 70

static long iterations;
static double result[5];
static uint64_t given_up;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int measure(void)
{
	static const int depths[] = { 16, 64 };
	uintptr_t ips[GMT_STACK_MAX_DEPTH];
	uint64_t t0;
	CUdeviceptr p;

	t0 = now_ns();
	for (long i = 0; i < iterations; i++) {
		if (cuMemAlloc(&p, 1024) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS)
			return -1;
	}
	result[0] = (double)(now_ns() - t0) / (double)iterations;
	for (int d = 0; d < 2; d++) {
		t0 = now_ns();
		for (long i = 0; i < iterations; i++) {
			if (gmt__stack_capture(ips, depths[d], 0) != depths[d])
				return -1;
		}
		result[1 + 2 * d] = (double)(now_ns() - t0) / (double)iterations;
		t0 = now_ns();
		for (long i = 0; i < iterations; i++) {
			int n = gmt__stack_capture(ips, depths[d], 0);

			if (gmt__stack_intern(ips, n) == 0)
				return -1;
		}
		result[2 + 2 * d] = (double)(now_ns() - t0) / (double)iterations;
	}
	return 0;
}

/* Recursion the compiler may not flatten, so the stacks really are deep. */
__attribute__((noinline)) static int nest(int n)
{
	int r = n > 0 ? nest(n - 1) : measure();

	__asm__ volatile("" : : "r"(n) : "memory");
	return r;
}

int main(int argc, char **argv)
{
	CUcontext ctx;

	iterations = argc > 1 ? atol(argv[1]) : 200000;
	if (iterations <= 0 || cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || gmt__stack_init() < 0) {
		fprintf(stderr, "capture: cannot start\n");
		return 1;
	}
	for (int pass = 0; pass < 2; pass++) {
		struct gmt__unwind_stats st;
		long timed = iterations;

		if (pass == 0)
			iterations = 2;
		gmt__unwind_stats(&st);
		given_up = st.given_up;
		if (nest(CHAIN) != 0) {
			fprintf(stderr, "capture: a call failed or a stack came out short\n");
			return 1;
		}
		gmt__unwind_stats(&st);
		given_up = st.given_up - given_up;
		gmt__unwind_learn();
		iterations = timed;
	}
	printf("call_ns %.1f\ncapture_16_ns %.1f\ncapture_intern_16_ns %.1f\n"
	       "capture_64_ns %.1f\ncapture_intern_64_ns %.1f\nlibunwind_walks %llu\n",
	       result[0], result[1], result[2], result[3], result[4], (unsigned long long)given_up);
	return 0;
}
