/* Test program for the public API (gpumemtrace.h), run untraced (tests/sim)
 * and traced (tests/preload): untraced every call returns -ENOSYS and the
 * program goes on; traced, gmt_live_bytes agrees with what the program holds,
 * region tags nest, bad tags are refused, and gmt_dump writes a snapshot at
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

	PROG_OK(cuMemFree(plain));
	check_live(0, 5 * MIB + 2);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(tagged_inner), 2 * MIB + 1, "device", 0);
	prog_report_live(PROG_ADDR(tagged_outer), 3 * MIB + 1, "device", 0);
	prog_report_live(PROG_ADDR(host), 8192, "host", -1);
	prog_report_end();
	return 0;
}
