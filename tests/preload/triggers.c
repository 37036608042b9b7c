/* Test program for the snapshot triggers, one scenario per argument:
 *
 *   signal  its own SIGUSR2 handler installed first; raises SIGUSR2 with 3
 *           blocks live and waits for the signal snapshot: the tracer's
 *           handler must chain to the program's (which must run once) and the
 *           snapshot must hold the 3 blocks (compared with the "api" ledger
 *           written once it exists).
 *   peak    64 MiB (the first high: a peak snapshot of exactly it), freed;
 *           after the rate limit 32 MiB (no new high) then 64 MiB (96 MiB,
 *           past the step): a second peak snapshot of exactly those two.
 *   storm   out of memory 51 times from one line (a retry loop), nothing
 *           allocated in between: one episode, one oom snapshot (rewritten
 *           at its first 8 failures and once more at its end); a success
 *           ends it, and an immediate failure starts a second episode; after
 *           a success and 1.2 s, a failure starts a third.
 *   episodes N  N episodes of one failure each (a server refusing requests
 *           too big for it): 128 MiB live, then N times a failing 200 MiB
 *           request followed by a 1 MiB allocation that succeeds and is
 *           freed. Prints "EPISODES N".
 *
 * Run with GMTSIM_MEMORY=256M. Prints the PID/LIVE report (run_program.py). */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "gmtsim.h"
#include "prog.h"

#define MIB ((size_t)1024 * 1024)

static volatile sig_atomic_t handled;

static void on_usr2(int sig)
{
	(void)sig;
	handled++;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Waits up to 10 s until GPUMEMTRACE_DIR holds `count` snapshots of this
 * process for `reason`. */
static void wait_snapshots(const char *reason, int count)
{
	const char *dir = getenv("GPUMEMTRACE_DIR");
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "gpumemtrace.%ld.%s.", (long)getpid(), reason);
	for (int tries = 0; tries < 1000; tries++) {
		DIR *d = opendir(dir != NULL ? dir : ".");
		struct dirent *e;
		int n = 0;

		PROG_CHECK(d != NULL);
		while ((e = readdir(d)) != NULL)
			n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
		closedir(d);
		if (n >= count)
			return;
		sleep_ms(10);
	}
	PROG_FAIL("no %s snapshot after 10 s", reason);
}

static void write_ledger(void)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/ledger.%ld.api.json", getenv("GMTSIM_LEDGER_DIR"), (long)getpid());
	PROG_OK(gmtsim_ledger_write(path));
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "";
	CUcontext ctx;
	CUdeviceptr p[4], big;

	signal(SIGUSR2, on_usr2);
	PROG_OK(cuInit(0));
	PROG_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	PROG_OK(cuCtxSetCurrent(ctx));
	prog_report_begin("main");
	if (strcmp(what, "signal") == 0) {
		for (int i = 0; i < 3; i++)
			PROG_OK(cuMemAlloc(&p[i], (size_t)(i + 1) * MIB));
		raise(SIGUSR2);
		PROG_CHECK_EQ((int)handled, 1);
		wait_snapshots("signal", 1);
		write_ledger();
		for (int i = 0; i < 3; i++)
			prog_report_live(PROG_ADDR(p[i]), (size_t)(i + 1) * MIB, "device", 0);
	} else if (strcmp(what, "peak") == 0) {
		PROG_OK(cuMemAlloc(&p[0], 64 * MIB));
		wait_snapshots("peak", 1);
		PROG_OK(cuMemFree(p[0]));
		sleep_ms(1200);
		PROG_OK(cuMemAlloc(&p[1], 32 * MIB));
		PROG_OK(cuMemAlloc(&p[2], 64 * MIB));
		wait_snapshots("peak", 2);
		prog_report_live(PROG_ADDR(p[1]), 32 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(p[2]), 64 * MIB, "device", 0);
	} else if (strcmp(what, "storm") == 0) {
		PROG_OK(cuMemAlloc(&p[0], 128 * MIB));
		/* One call site: a first failure on a line of its own would be
		 * another call of the program, an episode of its own. */
		for (int i = 0; i < 51; i++)
			PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
		PROG_OK(cuMemAlloc(&p[1], 1 * MIB));
		PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
		sleep_ms(1200);
		PROG_OK(cuMemAlloc(&p[2], 1 * MIB));
		PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
		prog_report_live(PROG_ADDR(p[0]), 128 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(p[1]), 1 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(p[2]), 1 * MIB, "device", 0);
	} else if (strcmp(what, "episodes") == 0 && argc > 2) {
		long n = strtol(argv[2], NULL, 10);

		PROG_OK(cuMemAlloc(&p[0], 128 * MIB));
		for (long i = 0; i < n; i++) {
			PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
			PROG_OK(cuMemAlloc(&p[1], 1 * MIB));
			PROG_OK(cuMemFree(p[1]));
		}
		printf("EPISODES %ld\n", n);
		prog_report_live(PROG_ADDR(p[0]), 128 * MIB, "device", 0);
	} else {
		PROG_FAIL("usage: triggers signal|peak|storm|episodes N");
	}
	prog_report_end();
	return 0;
}
