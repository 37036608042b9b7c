/* Shared by the programs of the real-GPU suite (docs/gpu-suite.md): the lines
 * each program prints for check_gpu.py — its live allocations at every
 * checkpoint, the device's free bytes there, the out-of-memory results and
 * leaks to expect — and checks that print both values and exit non-zero.
 *
 * Header-only C++ (the programs are .cu files: nvcc builds them against the
 * real cudart and driver, g++ against the simulated ones), one translation
 * unit per program. Nothing here calls CUDA: the runtime programs add
 * gpu_runtime.h, the driver-API ones ask the driver themselves. */
#ifndef GMT_GPU_TEST_H
#define GMT_GPU_TEST_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpumemtrace.h>

#define GT_MIB ((size_t)1 << 20)
#define GT_ADDR(p) ((unsigned long long)(uintptr_t)(p))

/* The most allocations a program holds at once (the out-of-memory programs
 * fill a large device with 1 GiB chunks and a few hundred 1 MiB blocks). */
#define GT_MAX_ALLOCS 16384

/* Prints "file:line: message" on stderr and exits with status 1. */
__attribute__((noreturn, format(printf, 3, 4)))
static inline void gt_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define GT_FAIL(...) gt_fail(__FILE__, __LINE__, __VA_ARGS__)

/* A CUDA call that must succeed: 0 is both cudaSuccess and CUDA_SUCCESS. */
#define GT_OK(call)                                                             \
	do {                                                                    \
		long long gt_rc_ = (long long)(call);                           \
		if (gt_rc_ != 0)                                                \
			GT_FAIL("%s returned %lld", #call, gt_rc_);             \
	} while (0)

#define GT_CHECK(cond)                                                          \
	do {                                                                    \
		if (!(cond))                                                    \
			GT_FAIL("check failed: %s", #cond);                     \
	} while (0)

#define GT_CHECK_EQ(actual, expected)                                           \
	do {                                                                    \
		unsigned long long gt_a_ = (unsigned long long)(actual);        \
		unsigned long long gt_e_ = (unsigned long long)(expected);      \
		if (gt_a_ != gt_e_)                                             \
			GT_FAIL("%s is %llu (0x%llx), expected %s = %llu (0x%llx)", \
				#actual, gt_a_, gt_a_, #expected, gt_e_, gt_e_); \
	} while (0)

/* --- What the program holds --------------------------------------------------
 * Every allocation the program makes is added here when it succeeds and
 * removed when it is freed, so that each checkpoint can print exactly the set
 * the snapshot must hold. kind is the snapshot's kind (device, async, managed,
 * host, registered, vmm, array); device is -1 for host kinds. A vmm entry's
 * address is its physical handle, an array's its CUarray. */

struct gt_alloc {
	unsigned long long address;
	size_t size;
	const char *kind;
	int device;
};

static struct gt_alloc gt_allocs[GT_MAX_ALLOCS];
static size_t gt_count;

static inline void gt_add(unsigned long long address, size_t size, const char *kind, int device)
{
	if (gt_count == GT_MAX_ALLOCS)
		GT_FAIL("more than %d allocations held", GT_MAX_ALLOCS);
	gt_allocs[gt_count].address = address;
	gt_allocs[gt_count].size = size;
	gt_allocs[gt_count].kind = kind;
	gt_allocs[gt_count].device = device;
	gt_count++;
}

/* Forgets the allocation at address (of that kind: a VMM handle's value may
 * equal nothing else, but be exact). */
static inline void gt_remove(unsigned long long address, const char *kind)
{
	for (size_t i = 0; i < gt_count; i++) {
		if (gt_allocs[i].address == address && strcmp(gt_allocs[i].kind, kind) == 0) {
			gt_allocs[i] = gt_allocs[--gt_count];
			return;
		}
	}
	GT_FAIL("removing 0x%llx (%s), which the program does not hold", address, kind);
}

/* --- The lines for check_gpu.py ---------------------------------------------
 * Every line starts with a keyword; docs/gpu-suite.md lists them all. */

/* The first line: the test's name and this process. */
static inline void gt_begin(const char *name)
{
	/* Line-buffered: what was printed survives a crash. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("TEST %s %ld\n", name, (long)getpid());
}

/* The program cannot run its checks here (one device where it needs two):
 * the suite counts it skipped, never passed. */
static inline void gt_skip(const char *reason)
{
	printf("SKIP %s\n", reason);
	fflush(stdout);
}

static inline void gt_print_live(const char *label)
{
	/* Compared with the snapshot's allocations of every kind. */
	printf("COVER %s all\n", label);
	for (size_t i = 0; i < gt_count; i++)
		printf("LIVE %s 0x%llx %zu %s %d\n", label, gt_allocs[i].address,
		       gt_allocs[i].size, gt_allocs[i].kind, gt_allocs[i].device);
}

/* Writes an api snapshot now (gmt_dump) and says what it must hold: exactly
 * the allocations the program holds. Untraced, gmt_dump does nothing and the
 * line says "-" (the checker then fails the test: it was not traced). */
static inline void gt_checkpoint(const char *label)
{
	char path[4096];
	int rc;

	path[0] = '\0';
	rc = gmt_dump(path, sizeof(path));
	printf("CHECKPOINT %s %s\n", label, rc == 0 && path[0] ? path : "-");
	if (rc != 0 && rc != -ENOSYS)
		printf("NOTE gmt_dump at %s returned %d\n", label, rc);
	gt_print_live(label);
}

/* A checkpoint whose snapshot the tracer writes by itself: "@oom" (the
 * out-of-memory snapshot of the process's first failure) or "@exit". */
static inline void gt_checkpoint_at(const char *label, const char *which)
{
	printf("CHECKPOINT %s %s\n", label, which);
	gt_print_live(label);
}

/* The device's free and total bytes right after the checkpoint's snapshot
 * (cudaMemGetInfo / cuMemGetInfo on that device). */
static inline void gt_meminfo(const char *label, int device, size_t free_bytes, size_t total_bytes)
{
	printf("MEMINFO %s %d %zu %zu\n", label, device, free_bytes, total_bytes);
}

/* Device memory this program holds that the snapshot's footprint rightly
 * leaves out: managed memory a kernel touched (resident now), or the
 * reservation of a pool that is neither the device's default nor its current
 * one (the tracer asks only those two). */
static inline void gt_extra(const char *label, int device, unsigned long long bytes)
{
	printf("EXTRA %s %d %llu\n", label, device, bytes);
}

/* The reserved bytes of the device's default (and current) pool, as the
 * program asked them: the snapshot's devices[].pools.reserved_bytes. */
static inline void gt_pool(const char *label, int device, unsigned long long reserved)
{
	printf("POOL %s %d %llu\n", label, device, reserved);
}

/* The snapshot holds a VMM address reservation of at least min_size bytes
 * (virtual addresses: on no device in particular). */
static inline void gt_reservation(const char *label, size_t min_size)
{
	printf("RESERVATION %s %zu\n", label, min_size);
}

/* The snapshot at label is an out-of-memory one for this request. */
static inline void gt_oom(const char *label, const char *api, size_t size, int device)
{
	printf("OOM %s %s %zu %d exact\n", label, api, size, device);
}

/* The out-of-memory snapshot's diagnosis names this verdict (as its primary
 * one when primary is set). */
static inline void gt_verdict(const char *label, const char *verdict, int primary)
{
	printf("VERDICT %s %s%s\n", label, verdict, primary ? " primary" : "");
}

/* The exit snapshot's leak check counts exactly these leaks. */
static inline void gt_leaks(const char *label, unsigned long long count, unsigned long long bytes)
{
	printf("LEAKS %s %llu %llu\n", label, count, bytes);
}

static inline void gt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static inline void gt_note(const char *fmt, ...)
{
	va_list ap;

	fputs("NOTE ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
}

static inline size_t gt_round_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

static inline size_t gt_round_down(size_t n, size_t to)
{
	return n / to * to;
}

#endif
