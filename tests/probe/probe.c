/* The probe of the test static-runtime-no-runtime-symbols: a library preloaded
 * with LD_PRELOAD that counts which way a program reaches cuMemAlloc_v2 (an
 * exported symbol, or the pointer the self-lookup of cuGetProcAddress returned)
 * and writes its counters as JSON to $PROBE_OUT at exit. A test tool, not the
 * product's interposer: it wraps only what the proof needs. */
#define _GNU_SOURCE
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PROBE_EXPORT __attribute__((visibility("default")))

/* NOTE: under AddressSanitizer, libasan resolves its interceptors with
 * dlsym(RTLD_NEXT, ...) before it has mapped its shadow memory, and that dlsym
 * is ours. The code on that path must not be instrumented. */
#define PROBE_EARLY __attribute__((no_sanitize_address))

/* Every counter: one list, for the storage and for the JSON. */
#define PROBE_COUNTERS(X)                                                      \
	X(dlsym_cuGetProcAddress_v2)     /* dlsym(h, "cuGetProcAddress_v2") */ \
	X(gpa_v2_calls)                  /* lookups through that pointer */   \
	X(gpa_v2_cuMemAlloc_lookups)     /* ...of "cuMemAlloc" */            \
	X(self_lookups_handed_out)       /* ("cuGetProcAddress", >=12000) answered */ \
	X(self_lookup_calls)             /* lookups through the self-lookup */ \
	X(self_lookup_cuMemAlloc_lookups) /* ...of ("cuMemAlloc", >=3020) */ \
	X(self_lookup_cuMemAlloc_v2_calls) /* calls of the pointer it gave */ \
	X(exported_cudaMalloc_calls)     /* the exported cudaMalloc below */  \
	X(exported_cuMemAlloc_v2_calls)  /* the exported cuMemAlloc_v2 below */

#define PROBE_X_ENUM(name) PROBE_##name,
enum { PROBE_COUNTERS(PROBE_X_ENUM) PROBE_NCOUNTERS };
#undef PROBE_X_ENUM

static unsigned long counters[PROBE_NCOUNTERS];

PROBE_EARLY static void count(int which)
{
	__atomic_fetch_add(&counters[which], 1, __ATOMIC_RELAXED);
}

/* The real functions behind each wrapper (the last answer seen: there is one
 * driver). Release/acquire: a wrapper handed out is never called before the
 * pointer it forwards to is visible. */
typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_ptr;
static PFN_cuGetProcAddress_v12000 real_gpa_v2;
static PFN_cuGetProcAddress_v12000 real_self_lookup;
static PFN_cuMemAlloc_v3020 real_self_mem_alloc;

/* No libc string functions on the dlsym path: ASan intercepts them, and they
 * may run here before it is initialised. */
PROBE_EARLY static bool same(const char *a, const char *b)
{
	if (!a)
		return false;
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

PROBE_EARLY static dlsym_fn real_dlsym(void)
{
	dlsym_fn fn = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_ACQUIRE);

	if (!fn) {
		/* glibc 2.34 moved dlsym into libc under a new version. */
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
		if (!fn)
			fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
		__atomic_store_n(&real_dlsym_ptr, fn, __ATOMIC_RELEASE);
	}
	return fn;
}

static CUresult CUDAAPI self_mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
	count(PROBE_self_lookup_cuMemAlloc_v2_calls);
	return __atomic_load_n(&real_self_mem_alloc, __ATOMIC_ACQUIRE)(dptr, bytesize);
}

static CUresult CUDAAPI self_lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
				    CUdriverProcAddressQueryResult *status);

/* The answer of a successful lookup made through either wrapper: the
 * self-lookup is wrapped again, and so is cuMemAlloc from the self-lookup. */
static void wrap_answer(const char *symbol, void **pfn, int version, bool via_self)
{
	if (same(symbol, "cuGetProcAddress") && version >= 12000) {
		__atomic_store_n(&real_self_lookup, (PFN_cuGetProcAddress_v12000)*pfn, __ATOMIC_RELEASE);
		*pfn = (void *)self_lookup;
		count(PROBE_self_lookups_handed_out);
	} else if (via_self && same(symbol, "cuMemAlloc") && version >= 3020) {
		__atomic_store_n(&real_self_mem_alloc, (PFN_cuMemAlloc_v3020)*pfn, __ATOMIC_RELEASE);
		*pfn = (void *)self_mem_alloc;
		count(PROBE_self_lookup_cuMemAlloc_lookups);
	}
}

static CUresult CUDAAPI self_lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
				    CUdriverProcAddressQueryResult *status)
{
	CUresult r = __atomic_load_n(&real_self_lookup, __ATOMIC_ACQUIRE)(symbol, pfn, version, flags,
									  status);

	count(PROBE_self_lookup_calls);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		wrap_answer(symbol, pfn, version, true);
	return r;
}

static CUresult CUDAAPI gpa_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			       CUdriverProcAddressQueryResult *status)
{
	CUresult r = __atomic_load_n(&real_gpa_v2, __ATOMIC_ACQUIRE)(symbol, pfn, version, flags, status);

	count(PROBE_gpa_v2_calls);
	if (same(symbol, "cuMemAlloc"))
		count(PROBE_gpa_v2_cuMemAlloc_lookups);
	if (r == CUDA_SUCCESS && pfn && *pfn)
		wrap_answer(symbol, pfn, version, false);
	return r;
}

/* Never allocates. The pass-through is a tail call (at -O1 and above), so that
 * the real dlsym sees the caller's return address and RTLD_NEXT keeps its
 * meaning for other libraries. */
PROBE_EXPORT PROBE_EARLY void *dlsym(void *handle, const char *symbol)
{
	dlsym_fn next = real_dlsym();
	void *p;

	if (!next)
		return NULL;
	if (!same(symbol, "cuGetProcAddress_v2"))
		return next(handle, symbol);
	count(PROBE_dlsym_cuGetProcAddress_v2);
	p = next(handle, symbol);
	if (!p)
		return NULL;
	__atomic_store_n(&real_gpa_v2, (PFN_cuGetProcAddress_v12000)p, __ATOMIC_RELEASE);
	return (void *)gpa_v2;
}

/* The real function `name` of the already loaded library `lib`, by its handle:
 * RTLD_NEXT alone misses libraries loaded RTLD_LOCAL. */
static void *real_in(const char *lib, const char *name)
{
	void *h = dlopen(lib, RTLD_NOLOAD | RTLD_NOW);

	return h ? real_dlsym()(h, name) : NULL;
}

typedef cudaError_t (*cuda_malloc_fn)(void **, size_t);

PROBE_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	cuda_malloc_fn real = (cuda_malloc_fn)real_in("libcudart.so.13", "cudaMalloc");

	count(PROBE_exported_cudaMalloc_calls);
	return real ? real(devPtr, size) : cudaErrorUnknown;
}

PROBE_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	PFN_cuMemAlloc_v3020 real = (PFN_cuMemAlloc_v3020)real_in("libcuda.so.1", "cuMemAlloc_v2");

	count(PROBE_exported_cuMemAlloc_v2_calls);
	return real ? real(dptr, bytesize) : CUDA_ERROR_UNKNOWN;
}

__attribute__((destructor)) static void probe_write(void)
{
	const char *path = getenv("PROBE_OUT");
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "w");
	if (!f) {
		perror("probe: PROBE_OUT");
		return;
	}
	fprintf(f, "{\"pid\": %ld", (long)getpid());
#define PROBE_X_JSON(name) \
	fprintf(f, ", \"" #name "\": %lu", __atomic_load_n(&counters[PROBE_##name], __ATOMIC_RELAXED));
	PROBE_COUNTERS(PROBE_X_JSON)
#undef PROBE_X_JSON
	fprintf(f, "}\n");
	fclose(f);
}
