/* Test program for the exit-without-frees row of the matrix: allocates every
 * kind and exits holding all of it. A late cleanup (an atexit handler
 * registered before the first CUDA call, so it runs after the runtime's own)
 * tries cudaFree and must get cudaErrorCudartUnloading, as programs' late
 * destructors do with the real cudart. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

static void *device_mem;
static void *registered;	/* reachable at exit: still registered */

static void late_cleanup(void)
{
	cudaError_t err = cudaFree(device_mem);

	/* NOTE: exit() must not be called again from an atexit handler; _exit()
	 * skips the driver's destructor, so the harness also misses the ledger. */
	if (err != cudaErrorCudartUnloading) {
		fprintf(stderr, "exit_no_free: late cudaFree returned %d, expected "
			"cudaErrorCudartUnloading (%d)\n", err, cudaErrorCudartUnloading);
		_exit(2);
	}
}

int main(void)
{
	void *async, *managed, *host, *host_alloc;

	if (atexit(late_cleanup) != 0)
		PROG_FAIL("atexit failed");

	PROG_OK(cudaMalloc(&device_mem, 5 * MIB));
	PROG_OK(cudaMallocAsync(&async, 3 * MIB, 0));
	PROG_OK(cudaStreamSynchronize(0));
	PROG_OK(cudaMallocManaged(&managed, 1 * MIB, cudaMemAttachGlobal));
	PROG_OK(cudaMallocHost(&host, 64 * 1024));
	PROG_OK(cudaHostAlloc(&host_alloc, 4096, cudaHostAllocDefault));
	registered = aligned_alloc(4096, 32 * 1024);
	PROG_CHECK(registered != NULL);
	PROG_OK(cudaHostRegister(registered, 32 * 1024, cudaHostRegisterDefault));

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(device_mem), 5 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(async), 3 * MIB, "async", 0);
	prog_report_live(PROG_ADDR(managed), 1 * MIB, "managed", 0);
	prog_report_live(PROG_ADDR(host), 64 * 1024, "host", -1);
	prog_report_live(PROG_ADDR(host_alloc), 4096, "host", -1);
	prog_report_live(PROG_ADDR(registered), 32 * 1024, "registered", -1);
	prog_report_end();
	return 0;
}
