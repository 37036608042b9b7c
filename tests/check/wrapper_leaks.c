/* Test program for the gate's GitHub annotations: two leaks made through
 * one allocation wrapper (device_alloc), from two callers. Their sites share
 * the wrapper's frame and differ in the caller, which their labels name
 * ("device_alloc (wrapper_leaks.c:W) ← load_weights (wrapper_leaks.c:A)"):
 * each annotation must point at its caller's line, not at the wrapper's.
 * Prints "WRAPPER <line>", "LOAD <line>" and "BUFFERS <line>". */
#define _GNU_SOURCE
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "../programs/prog.h"

#define MIB ((size_t)1024 * 1024)

void *volatile scratch; /* overwritten: what it held is leaked */

static __attribute__((noinline)) void *device_alloc(size_t n)
{
	void *p = NULL;

	printf("WRAPPER %d\n", __LINE__ + 1);
	PROG_OK(cudaMalloc(&p, n));
	return p;
}

static __attribute__((noinline)) void load_weights(void)
{
	printf("LOAD %d\n", __LINE__ + 1);
	scratch = device_alloc(2 * MIB);
	scratch = NULL;
}

static __attribute__((noinline)) void make_buffers(void)
{
	printf("BUFFERS %d\n", __LINE__ + 1);
	scratch = device_alloc(4 * MIB);
	scratch = NULL;
}

int main(void)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	load_weights();
	make_buffers();
	return 0;
}
