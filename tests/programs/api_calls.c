/* Test program for the public API (gpumemtrace.h), run untraced (tests/sim)
 * and traced (tests/preload): untraced every call returns -ENOSYS and the
 * program goes on; traced, gmt_live_bytes agrees with what the program holds,
 * region tags nest, bad tags are refused, the peaks since a reset and what a
 * stretch of the program left behind (gmt_mark, gmt_live_since) are the
 * program's own numbers, and gmt_dump writes a snapshot at
 * the moment the simulator's "api" ledger is written (the preload harness
 * compares the two). The program knows it is traced from LD_PRELOAD. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>
#include <gpumemtrace.h>

#include "gmtsim.h"
#include "prog.h"

#define MIB ((size_t)1024 * 1024)

static int traced;

/* rc when traced, -ENOSYS when not. */
static int want(int rc)
{
	return traced ? rc : -ENOSYS;
}

static void check_live(int device, unsigned long long expected)
{
	unsigned long long bytes = 12345;

	PROG_CHECK_EQ(gmt_live_bytes(device, &bytes), want(0));
	PROG_CHECK_EQ_U(bytes, traced ? expected : 12345);
}

static void check_peak(int device, unsigned long long expected)
{
	unsigned long long bytes = 12345;

	PROG_CHECK_EQ(gmt_peak_bytes(device, &bytes), want(0));
	PROG_CHECK_EQ_U(bytes, traced ? expected : 12345);
}

/* Peaks since a reset, and what a stretch left behind: 4 MiB and 1 MiB made
 * and the 4 MiB freed (the peak is 5 MiB above what was live), and an older
 * block freed within it, which the net change would count against the
 * 1 MiB left. */
static void check_stretch(CUdeviceptr older, unsigned long long live_before)
{
	unsigned long long mark = 7, bytes = 7, count = 7;
	CUdeviceptr a, b;

	PROG_CHECK_EQ(gmt_peak_reset(), want(0));
	check_peak(0, live_before);
	PROG_CHECK_EQ(gmt_mark(&mark), want(0));
	PROG_OK(cuMemAlloc(&a, 4 * MIB));
	PROG_OK(cuMemAlloc(&b, 1 * MIB));
	PROG_OK(cuMemFree(a));
	PROG_OK(cuMemFree(older));
	check_peak(0, live_before + 5 * MIB);
	check_peak(GMT_ALL_DEVICES, live_before + 5 * MIB + 8192);
	PROG_CHECK_EQ(gmt_live_since(mark, 0, &bytes, &count), want(0));
	PROG_CHECK_EQ_U(bytes, traced ? 1 * MIB : 7);
	PROG_CHECK_EQ_U(count, traced ? 1 : 7);
	PROG_CHECK_EQ(gmt_live_since(mark, GMT_HOST, &bytes, &count), want(0));
	PROG_CHECK_EQ_U(bytes, traced ? 0 : 7);
	PROG_CHECK_EQ(gmt_live_since(mark, -3, &bytes, &count), want(-EINVAL));
	PROG_CHECK_EQ(gmt_peak_bytes(0, NULL), want(-EINVAL));
	PROG_CHECK_EQ(gmt_mark(NULL), want(-EINVAL));
	PROG_CHECK_EQ(gmt_step(41), want(0));
	PROG_CHECK_EQ(gmt_step(42), want(0));
	PROG_OK(cuMemFree(b));
}

int main(void)
{
	const char *preload = getenv("LD_PRELOAD"), *ledgers = getenv("GMTSIM_LEDGER_DIR");
	CUcontext ctx;
	CUdeviceptr plain, tagged_inner, tagged_outer;
	void *host;
	char path[4096], ledger[4096];
	struct stat st;

	traced = preload != NULL && strstr(preload, "libgpumemtrace") != NULL;
	PROG_OK(cuInit(0));
	PROG_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	PROG_OK(cuCtxSetCurrent(ctx));

	check_live(0, 0);
	PROG_OK(cuMemAlloc(&plain, 1 * MIB));
	PROG_OK(cuMemAllocHost(&host, 8192));
	check_live(0, 1 * MIB);
	check_live(GMT_HOST, 8192);
	check_live(GMT_ALL_DEVICES, 1 * MIB + 8192);
	PROG_CHECK_EQ(gmt_live_bytes(-3, NULL), want(-EINVAL));
	PROG_CHECK_EQ(gmt_live_bytes(0, NULL), want(-EINVAL));

	PROG_CHECK_EQ(gmt_tag_push("outer"), want(0));
	PROG_CHECK_EQ(gmt_tag_push("inner"), want(0));
	PROG_OK(cuMemAlloc(&tagged_inner, 2 * MIB + 1));
	PROG_CHECK_EQ(gmt_tag_pop(), want(0));
	PROG_OK(cuMemAlloc(&tagged_outer, 3 * MIB + 1));
	PROG_CHECK_EQ(gmt_tag_pop(), want(0));
	PROG_CHECK_EQ(gmt_tag_pop(), want(-ENOENT));
	PROG_CHECK_EQ(gmt_tag_push(""), want(-EINVAL));
	PROG_CHECK_EQ(gmt_tag_push(NULL), want(-EINVAL));
	check_live(0, 6 * MIB + 2);

	/* The snapshot and the simulator's ledger of the same moment. */
	path[0] = '\0';
	PROG_CHECK_EQ(gmt_dump(path, sizeof(path)), want(0));
	if (traced) {
		PROG_CHECK(strstr(path, ".api.") != NULL);
		PROG_OK(stat(path, &st));
		PROG_CHECK_EQ((int)(st.st_mode & 0777), 0600);
	} else {
		PROG_CHECK_EQ(path[0], '\0');
	}
	PROG_CHECK(ledgers != NULL);
	snprintf(ledger, sizeof(ledger), "%s/ledger.%ld.api.json", ledgers, (long)getpid());
	PROG_OK(gmtsim_ledger_write(ledger));

	{
		CUdeviceptr older;

		PROG_OK(cuMemAlloc(&older, 2 * MIB));
		check_stretch(older, 8 * MIB + 2);
	}
	PROG_OK(cuMemFree(plain));
	check_live(0, 5 * MIB + 2);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(tagged_inner), 2 * MIB + 1, "device", 0);
	prog_report_live(PROG_ADDR(tagged_outer), 3 * MIB + 1, "device", 0);
	prog_report_live(PROG_ADDR(host), 8192, "host", -1);
	prog_report_end();
	return 0;
}
