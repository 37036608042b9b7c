/* Test program for the snapshot triggers, one scenario per argument:
 *
 *   signal  its own SIGUSR2 handler installed first; raises SIGUSR2 with 3
 *           blocks live and waits for the signal snapshot: the tracer's
 *           handler must chain to the program's (which must run once) and the
 *           snapshot must hold the 3 blocks (compared with the "api" ledger
 *           written once it exists).
 *   peak    64 MiB (the first top), freed: its peak snapshot is written at
 *           the fall; 32 MiB (no new high) then 64 MiB (96 MiB, past the
 *           step), 64 MiB freed: a second peak snapshot of exactly those two,
 *           written at that fall too (the program waits for each).
 *   peak-short  0.1 s at most: 8, 16, 32 and 64 MiB, all but the 8 freed, 4
 *           MiB more: one peak snapshot, of the four (the top), not of the
 *           first 8 MiB.
 *   peak-long   about 2 s: 8 MiB, then 16 and 32 MiB after pauses, 32 freed
 *           (a fall of more than a quarter): the peak snapshot of the three
 *           is written then, before the program goes on (it waits for it).
 *   peak-exit   8, 16 and 32 MiB and exit, nothing freed: the top is written
 *           at exit.
 * Each peak scenario writes the simulator's ledger at its peak
 * (ledger.PID.peak.json): the last peak snapshot must hold its live set.
 *   storm   out of memory 51 times from one line (a retry loop), nothing
 *           allocated in between: one episode, one oom snapshot (rewritten
 *           at its first 8 failures and once more at its end); a success
 *           ends it, and an immediate failure starts a second episode; after
 *           a success and 1.2 s, a failure starts a third.
 *   devices two devices (GMTSIM_DEVICES=2, GMTSIM_MEMORY=256M,128M),
 *           failures of one request from one line: out of memory on device
 *           0; on device 1 a success, and 1 MiB allocated and freed; on
 *           device 0 1 MiB freed; out of memory on device 0; 2 MiB freed
 *           there and 3 MiB of managed memory allocated; out of memory there
 *           again: one episode of three failures, which freed 1 MiB before
 *           the second and 2 MiB before the third (a success of device
 *           memory ends an episode, and a free counts in it, on its own
 *           device only). Then out of memory on device 1: a second episode
 *           (another device); a success on device 0 and a failure there: a
 *           third.
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

/* What `devices` does after the failure of round `round`: after the first,
 * on device 1 a success (kept[0]) and 1 MiB allocated and freed, then on
 * device 0 spare[0] freed; after the second, spare[1] freed and 3 MiB of
 * managed memory allocated (kept[1]); after the third, to device 1; after
 * the fourth, back. */
__attribute__((noinline)) static void devices_round(int round, CUcontext ctx0, CUcontext ctx1, CUdeviceptr *kept,
						    const CUdeviceptr *spare)
{
	CUdeviceptr tmp;

	if (round == 0) {
		PROG_OK(cuCtxSetCurrent(ctx1));
		PROG_OK(cuMemAlloc(&kept[0], MIB));
		PROG_OK(cuMemAlloc(&tmp, MIB));
		PROG_OK(cuMemFree(tmp));
		PROG_OK(cuCtxSetCurrent(ctx0));
	}
	if (round < 2)
		PROG_OK(cuMemFree(spare[round]));
	if (round == 1)
		PROG_OK(cuMemAllocManaged(&kept[1], 3 * MIB, CU_MEM_ATTACH_GLOBAL));
	PROG_OK(cuCtxSetCurrent(round == 2 ? ctx1 : ctx0));
}

static void write_ledger(const char *what)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/ledger.%ld.%s.json", getenv("GMTSIM_LEDGER_DIR"), (long)getpid(), what);
	PROG_OK(gmtsim_ledger_write(path));
}

/* Allocates `n` blocks of sizes[i] MiB into p[]. */
static void alloc_mib(CUdeviceptr *p, const size_t *sizes, int n)
{
	for (int i = 0; i < n; i++)
		PROG_OK(cuMemAlloc(&p[i], sizes[i] * MIB));
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
		write_ledger("api");
		for (int i = 0; i < 3; i++)
			prog_report_live(PROG_ADDR(p[i]), (size_t)(i + 1) * MIB, "device", 0);
	} else if (strcmp(what, "peak") == 0) {
		PROG_OK(cuMemAlloc(&p[0], 64 * MIB));
		PROG_OK(cuMemFree(p[0]));
		wait_snapshots("peak", 1);
		PROG_OK(cuMemAlloc(&p[1], 32 * MIB));
		PROG_OK(cuMemAlloc(&p[2], 64 * MIB));
		write_ledger("peak");
		PROG_OK(cuMemFree(p[2]));
		wait_snapshots("peak", 2);
		prog_report_live(PROG_ADDR(p[1]), 32 * MIB, "device", 0);
	} else if (strcmp(what, "peak-short") == 0) {
		static const size_t sizes[] = { 8, 16, 32, 64 };

		alloc_mib(p, sizes, 4);
		write_ledger("peak");
		for (int i = 3; i > 0; i--)
			PROG_OK(cuMemFree(p[i]));
		PROG_OK(cuMemAlloc(&p[1], 4 * MIB));
		prog_report_live(PROG_ADDR(p[0]), 8 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(p[1]), 4 * MIB, "device", 0);
	} else if (strcmp(what, "peak-long") == 0) {
		PROG_OK(cuMemAlloc(&p[0], 8 * MIB));
		sleep_ms(1200);
		PROG_OK(cuMemAlloc(&p[1], 16 * MIB));
		sleep_ms(300);
		PROG_OK(cuMemAlloc(&p[2], 32 * MIB));
		write_ledger("peak");
		sleep_ms(300);
		PROG_OK(cuMemFree(p[2]));
		wait_snapshots("peak", 1);
		prog_report_live(PROG_ADDR(p[0]), 8 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(p[1]), 16 * MIB, "device", 0);
	} else if (strcmp(what, "peak-exit") == 0) {
		static const size_t sizes[] = { 8, 16, 32 };

		alloc_mib(p, sizes, 3);
		write_ledger("peak");
		for (int i = 0; i < 3; i++)
			prog_report_live(PROG_ADDR(p[i]), sizes[i] * MIB, "device", 0);
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
	} else if (strcmp(what, "devices") == 0) {
		/* NOTE: volatile, and what differs from round to round in a
		 * function of its own, so that the loop is neither unrolled nor
		 * peeled: its failures must come from one call instruction, one
		 * call site. */
		volatile int rounds = 4;
		CUdeviceptr spare[2], kept[2];
		CUcontext other;

		PROG_OK(cuDevicePrimaryCtxRetain(&other, 1));
		PROG_OK(cuMemAlloc(&p[0], 128 * MIB));
		PROG_OK(cuMemAlloc(&spare[0], 1 * MIB));
		PROG_OK(cuMemAlloc(&spare[1], 2 * MIB));
		for (int i = 0; i < rounds; i++) {
			PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
			devices_round(i, ctx, other, kept, spare);
		}
		PROG_OK(cuMemAlloc(&p[2], 1 * MIB));
		PROG_CHECK_EQ(cuMemAlloc(&big, 200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
		prog_report_live(PROG_ADDR(p[0]), 128 * MIB, "device", 0);
		prog_report_live(PROG_ADDR(kept[0]), 1 * MIB, "device", 1);
		prog_report_live(PROG_ADDR(kept[1]), 3 * MIB, "managed", 0);
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
		PROG_FAIL("usage: triggers signal|peak|peak-short|peak-long|peak-exit|storm|devices|episodes N");
	}
	prog_report_end();
	return 0;
}
