/* Test program for out-of-memory by exhaustion: 64 MiB blocks until cudaMalloc
 * fails. The failure must be exactly cudaErrorMemoryAllocation (and, through a
 * driver call, CUDA_ERROR_OUT_OF_MEMORY), leave the output pointer alone, and
 * not be sticky. Run with GMTSIM_MEMORY=256M GMTSIM_OTHER_PROCESSES=1M. */
#define _GNU_SOURCE
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
#define BLOCK (64 * MIB)
#define MAX_BLOCKS 64

static PFN_cuMemAlloc_v3020 driver_mem_alloc(void)
{
	enum cudaDriverEntryPointQueryResult status;
	PFN_cuMemAlloc_v3020 fn;
	void *p = NULL;

	PROG_OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &p, 12000,
						 cudaEnableDefault, &status));
	PROG_CHECK(p != NULL);
	memcpy(&fn, &p, sizeof(p));
	return fn;
}

int main(void)
{
	void *blocks[MAX_BLOCKS], *sentinel = (void *)(uintptr_t)0xdead0000, *p, *small;
	size_t free_bytes, total, n = 0;
	CUdeviceptr dptr = 0xbeef0000;
	PFN_cuMemAlloc_v3020 mem_alloc;
	cudaError_t err;

	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(total, 256 * MIB);
	/* Other processes hold 1M, rounded up to one 2 MiB page. */
	PROG_CHECK_EQ_U(free_bytes, 254 * MIB);

	for (;;) {
		p = sentinel;
		err = cudaMalloc(&p, BLOCK);
		if (err != cudaSuccess)
			break;
		PROG_CHECK(n < MAX_BLOCKS);
		blocks[n++] = p;
	}
	PROG_CHECK_EQ(err, cudaErrorMemoryAllocation);
	PROG_CHECK_EQ_U(PROG_ADDR(p), PROG_ADDR(sentinel));
	PROG_CHECK_EQ_U(n, 254 * MIB / BLOCK);

	/* Reported once, then cleared: not sticky. */
	PROG_CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
	PROG_CHECK_EQ(cudaGetLastError(), cudaSuccess);

	/* The same through the driver: exactly CUDA_ERROR_OUT_OF_MEMORY. */
	mem_alloc = driver_mem_alloc();
	PROG_CHECK_EQ(mem_alloc(&dptr, 96 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
	PROG_CHECK_EQ_U(dptr, 0xbeef0000);
	PROG_CHECK_EQ(cudaGetLastError(), cudaSuccess);

	/* What still fits is still handed out. */
	PROG_OK(cudaMalloc(&small, 1 * MIB));
	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(free_bytes, 254 * MIB - n * BLOCK - 2 * MIB);
	PROG_OK(cudaFree(blocks[0]));

	prog_report_begin("main");
	for (size_t i = 1; i < n; i++)
		prog_report_live(PROG_ADDR(blocks[i]), BLOCK, "device", 0);
	prog_report_live(PROG_ADDR(small), 1 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
