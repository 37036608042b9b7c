/* Test program for the fork row of the matrix. (a) A child forked before any
 * CUDA call uses CUDA on its own and writes its own ledger. (b) A child forked
 * after the parent initialised CUDA holds no CUDA state: its calls fail with
 * the not-initialised error, as with the real driver. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)

static pid_t fork_child(void)
{
	pid_t pid;

	/* Nothing buffered may be written twice. */
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		PROG_FAIL("fork failed");
	return pid;
}

/* Child (a): CUDA was never initialised in the parent, so it works here. */
static void child_before_init(void)
{
	void *dev, *dev_small, *host;

	PROG_OK(cudaMalloc(&dev, 2 * MIB));
	PROG_OK(cudaMalloc(&dev_small, 1024));
	PROG_OK(cudaMallocHost(&host, 4096));
	PROG_OK(cudaFree(dev_small));

	prog_report_begin("child-a");
	prog_report_live(PROG_ADDR(dev), 2 * MIB, "device", 0);
	prog_report_live(PROG_ADDR(host), 4096, "host", -1);
	prog_report_end();
	exit(0);
}

/* Child (b): forked after the parent's cuInit. Both the runtime and a direct
 * driver call must fail and leave the output pointer as it was. */
static void child_after_init(PFN_cuMemAlloc_v3020 mem_alloc, void *parents)
{
	CUdeviceptr dptr = 0x1234;
	void *p = (void *)(uintptr_t)0x5678;

	PROG_CHECK_EQ(cudaMalloc(&p, 1 * MIB), cudaErrorInitializationError);
	PROG_CHECK_EQ_U(PROG_ADDR(p), 0x5678);
	PROG_CHECK_EQ(mem_alloc(&dptr, 1 * MIB), CUDA_ERROR_NOT_INITIALIZED);
	PROG_CHECK_EQ_U(dptr, 0x1234);
	/* Not even the parent's memory can be freed from here. */
	PROG_CHECK_EQ(cudaFree(parents), cudaErrorInitializationError);

	prog_report_begin("child-b");
	prog_report_end();
	exit(0);
}

static void wait_child(pid_t pid, const char *role)
{
	int status;

	if (waitpid(pid, &status, 0) != pid)
		PROG_FAIL("waitpid(%s) failed", role);
	if (!WIFEXITED(status))
		PROG_FAIL("%s (pid %ld) did not exit normally: status 0x%x", role,
			  (long)pid, status);
	if (WEXITSTATUS(status) != 0)
		PROG_FAIL("%s (pid %ld) exited with %d, expected 0", role, (long)pid,
			  WEXITSTATUS(status));
}

int main(void)
{
	enum cudaDriverEntryPointQueryResult status;
	PFN_cuMemAlloc_v3020 mem_alloc;
	void *dev, *dev_small, *fn = NULL;
	pid_t a, b;

	a = fork_child();
	if (a == 0)
		child_before_init();

	PROG_OK(cudaMalloc(&dev, 6 * MIB));
	PROG_OK(cudaMalloc(&dev_small, 512));
	PROG_OK(cudaFree(dev_small));
	PROG_OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000,
						 cudaEnableDefault, &status));
	PROG_CHECK(fn != NULL);
	memcpy(&mem_alloc, &fn, sizeof(fn));

	b = fork_child();
	if (b == 0)
		child_after_init(mem_alloc, dev);

	wait_child(a, "child-a");
	wait_child(b, "child-b");

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(dev), 6 * MIB, "device", 0);
	prog_report_end();
	return 0;
}
