/* Benchmark program for the leak check's pointer scan: makes LIVE device
 * allocations of 4 KiB, keeps the pointers of half of them in a heap array
 * (still referenced) and overwrites the other half (leaked), and fills HOST
 * MiB of heap with data the scan must read (a pseudo-random pattern, no
 * pointers), then exits. Traced with GPUMEMTRACE_LEAK_CHECK by bench/run.py,
 * which reads the scan's time and bytes from the exit snapshot's "leaks".
 * With LIBs (copies of bench/scan_lib.c), it loads each and makes the
 * allocations through them in turn, as a program that maps a framework's
 * many large libraries does.
 *
 * Usage: leak_scan LIVE HOST_MIB [LIB...] */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                               \
	do {                                                                   \
		CUresult r_ = (x);                                             \
		if (r_ != CUDA_SUCCESS) {                                      \
			fprintf(stderr, "leak_scan: %s: %d\n", #x, (int)r_);  \
			exit(1);                                               \
		}                                                              \
	} while (0)

typedef int call_fn(int (*fn)(void *), void *arg);

static int alloc_one(void *arg)
{
	CHECK(cuMemAlloc(arg, 4096));
	return 0;
}

/* Allocates *p through the library call (NULL: directly). */
static void alloc_through(call_fn *call, CUdeviceptr *p)
{
	if (call != NULL)
		(void)call(alloc_one, p);
	else
		(void)alloc_one(p);
}

int main(int argc, char **argv)
{
	long live = argc > 1 ? atol(argv[1]) : 10000;
	long host_mib = argc > 2 ? atol(argv[2]) : 64;
	int nlibs = argc > 3 ? argc - 3 : 0;
	call_fn **calls = calloc((size_t)nlibs + 1, sizeof(*calls));
	CUdeviceptr *kept, lost;
	CUcontext ctx;
	CUdevice dev;
	uint64_t *fill, x = 0x9e3779b97f4a7c15ull;
	size_t words;

	if (live < 2 || host_mib < 0) {
		fprintf(stderr, "usage: leak_scan LIVE HOST_MIB [LIB...] (LIVE >= 2)\n");
		return 2;
	}
	for (int i = 0; i < nlibs && calls != NULL; i++) {
		void *h = dlopen(argv[3 + i], RTLD_NOW | RTLD_LOCAL), *sym;

		sym = h != NULL ? dlsym(h, "scan_lib_call") : NULL;
		if (sym == NULL) {
			fprintf(stderr, "leak_scan: %s: %s\n", argv[3 + i], dlerror());
			return 1;
		}
		memcpy(&calls[i], &sym, sizeof(sym));
	}
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	kept = calloc((size_t)live / 2, sizeof(*kept));
	words = (size_t)host_mib << 17;
	fill = malloc(words * sizeof(*fill) + 1);
	if (kept == NULL || fill == NULL) {
		fprintf(stderr, "leak_scan: out of host memory\n");
		return 1;
	}
	/* xorshift: values spread over 64 bits, almost never inside a device
	 * allocation, as most of a real process's data is. */
	for (size_t i = 0; i < words; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		fill[i] = x;
	}
	for (long i = 0; i < live; i++) {
		call_fn *call = nlibs > 0 && calls != NULL ? calls[i % nlibs] : NULL;

		alloc_through(call, i % 2 == 0 ? &kept[i / 2] : &lost);
	}
	lost = 0;
	printf("live %ld host_mib %ld libs %d\n", live, host_mib, nlibs);
	return 0;
}
