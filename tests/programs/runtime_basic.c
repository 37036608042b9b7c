/* Test program for the runtime rows of the matrix: every runtime allocation call
 * (device, pitched, managed, pinned host, registered host), built against the
 * static runtime double (nvcc's default) and against the shared one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "prog.h"

#ifndef PROG_STATIC_RUNTIME
#error "build with -DPROG_STATIC_RUNTIME=0 or 1"
#endif

#define MIB (1024 * 1024)

/* Globals keep the registered buffers reachable, so LeakSanitizer stays quiet
 * about memory that is, by design, still registered at exit. */
static void *registered_kept;

/* The loading path under test: statically linked, the program has no dynamic
 * cudaMalloc at all (an LD_PRELOAD hook on it would never fire); shared, the
 * symbol comes from libcudart.so.13. */
static void check_runtime_linkage(void)
{
	void *sym = dlsym(RTLD_DEFAULT, "cudaMalloc");
	Dl_info info;

	if (PROG_STATIC_RUNTIME) {
		if (sym != NULL)
			PROG_FAIL("static runtime, yet cudaMalloc is a dynamic symbol at %p", sym);
		return;
	}
	if (sym == NULL)
		PROG_FAIL("shared runtime, yet no dynamic cudaMalloc symbol");
	if (dladdr(sym, &info) == 0 || info.dli_fname == NULL ||
	    strstr(info.dli_fname, "libcudart.so") == NULL)
		PROG_FAIL("cudaMalloc comes from %s, expected libcudart.so.13",
			  info.dli_fname ? info.dli_fname : "(unknown)");
}

int main(void)
{
	void *d_1m, *d_3m, *d_8m, *d_256, *d_100;
	void *pitched, *pitched_small, *managed, *managed_small;
	void *host, *host_small, *host_portable, *registered_small;
	size_t pitch;

	check_runtime_linkage();

	PROG_OK(cudaMalloc(&d_1m, 1 * MIB));
	PROG_OK(cudaMalloc(&d_3m, 3 * MIB));
	PROG_OK(cudaMalloc(&d_8m, 8 * MIB));
	PROG_OK(cudaMalloc(&d_256, 256));
	PROG_OK(cudaMalloc(&d_100, 100));
	PROG_OK(cudaFree(d_3m));
	PROG_OK(cudaFree(d_256));

	/* Widths that are multiples of 512 bytes: the pitch equals the width on
	 * every GPU (and in the simulator), so the ledger size is exact. */
	PROG_OK(cudaMallocPitch(&pitched, &pitch, 2048, 64));
	PROG_CHECK_EQ(pitch, 2048);
	PROG_OK(cudaMallocPitch(&pitched_small, &pitch, 512, 10));
	PROG_CHECK_EQ(pitch, 512);
	PROG_OK(cudaFree(pitched_small));

	PROG_OK(cudaMallocManaged(&managed, 4 * MIB, cudaMemAttachGlobal));
	PROG_OK(cudaMallocManaged(&managed_small, 64 * 1024, cudaMemAttachGlobal));
	PROG_OK(cudaFree(managed_small));

	PROG_OK(cudaMallocHost(&host, 100000));
	PROG_OK(cudaHostAlloc(&host_small, 8192, cudaHostAllocDefault));
	PROG_OK(cudaHostAlloc(&host_portable, 12345, cudaHostAllocPortable));
	PROG_OK(cudaFreeHost(host_small));

	registered_kept = aligned_alloc(4096, 64 * 1024);
	registered_small = aligned_alloc(4096, 16 * 1024);
	PROG_CHECK(registered_kept != NULL && registered_small != NULL);
	PROG_OK(cudaHostRegister(registered_kept, 64 * 1024, cudaHostRegisterDefault));
	PROG_OK(cudaHostRegister(registered_small, 16 * 1024, cudaHostRegisterDefault));
	PROG_OK(cudaHostUnregister(registered_small));
	free(registered_small);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(d_1m), 1 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(d_8m), 8 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(d_100), 100, "device", 0);
	prog_report_live(PROG_ADDR(pitched), 2048 * 64, "device", 0);
	prog_report_live(PROG_ADDR(managed), 4 * MIB, "managed", 0);
	prog_report_live(PROG_ADDR(host), 100000, "host", -1);
	prog_report_live(PROG_ADDR(host_portable), 12345, "host", -1);
	prog_report_live(PROG_ADDR(registered_kept), 64 * 1024,
			 "registered", -1);
	prog_report_end();
	return 0;
}
