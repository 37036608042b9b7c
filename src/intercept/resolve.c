/* Where the real functions come from: glibc's dlsym through dlvsym, libcuda's
 * own symbols through a RTLD_NOLOAD handle, and the answers of the driver's
 * cuGetProcAddress, which decide which hook stands in for which variant
 * (docs/tracing.md, "What is intercepted": the variant the driver chose). */
#define _GNU_SOURCE
#include "intercept/hooks.h"

#include "util/log.h"

#include <dlfcn.h>
#include <string.h>

#define GMT_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))

const char *const gmt__api_names[GMT_API_COUNT] = {
#define GMT_X_NAME(sym, base, ver, ptsz) [GMT_API_##sym] = #sym,
	GMT_HOOKS(GMT_X_NAME)
#undef GMT_X_NAME
};

void *_Atomic gmt__real[GMT_API_COUNT];

void *(*gmt__real_dlsym)(void *, const char *);

/* gmt__real_dlsym once resolved (acquire pairs with the release in
 * resolve_dlsym), or NULL. */
static void *(*real_dlsym(void))(void *, const char *)
{
	return __atomic_load_n(&gmt__real_dlsym, __ATOMIC_ACQUIRE);
}

struct gmt__variant {
	const char *base;
	int version;
	bool ptsz;
	enum gmt__api api;
	void *hook;
};

/* NOTE: the hooks' addresses are our own functions: the library is linked
 * -Bsymbolic-functions, so a library preloaded before us cannot make us hand
 * out its definitions. */
static const struct gmt__variant variants[] = {
#define GMT_X_VARIANT(sym, base, ver, ptsz) { #base, ver, ptsz, GMT_API_##sym, (void *)&sym },
	GMT_HOOKS(GMT_X_VARIANT)
#undef GMT_X_VARIANT
};

/* NOTE: glibc moved dlsym into libc in 2.34 (version GLIBC_2.34) and keeps the
 * old one under the architecture's base version; asking for each in turn finds
 * the real dlsym on any glibc. dlvsym is not overridden, so this cannot recurse;
 * with RTLD_NEXT it finds the definition after this library. Sanitizers are off
 * here: ASan's own start-up calls dlsym before its shadow memory exists. */
GMT_NO_SANITIZE static void resolve_dlsym(void)
{
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17" };
	void *p = NULL;

	if (__atomic_load_n(&gmt__real_dlsym, __ATOMIC_ACQUIRE) != NULL)
		return;
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && p == NULL; i++)
		p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
	/* Release pairs with the acquire above and in the dlsym override: the
	 * pointer is published whole. Racing threads store the same value. */
	__atomic_store_n(&gmt__real_dlsym, (void *(*)(void *, const char *))p, __ATOMIC_RELEASE);
}

/* libcuda as the program loaded it (never loads it ourselves: a process that has
 * no driver loaded has nothing to trace). */
static void *libcuda(void)
{
	static void *_Atomic handle;
	void *h = atomic_load_explicit(&handle, memory_order_acquire);

	if (h == NULL) {
		h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
		if (h == NULL)
			h = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
		/* Release pairs with the acquire above; a racing thread's dlopen
		 * returns the same handle (and one reference is kept, harmlessly). */
		if (h != NULL)
			atomic_store_explicit(&handle, h, memory_order_release);
	}
	return h;
}

/* True when a and b are code of the same loaded object. */
static bool same_object(void *a, void *b)
{
	Dl_info ia, ib;

	return dladdr(a, &ia) != 0 && dladdr(b, &ib) != 0 && ia.dli_fbase == ib.dli_fbase;
}

/* Records `real` as the function behind hook `api`. A second, different
 * function for the same entry point is accepted when it lives in the same
 * object: NOTE the driver may answer a lookup with an internal function rather
 * than its exported symbol, and either implements the same entry point, so the
 * first one recorded serves both. A function of another object (two drivers in
 * one process) returns false: the caller must then hand out `real` itself,
 * untraced, since the hook could only call the first driver. */
static bool real_set(enum gmt__api api, void *real)
{
	void *expected = NULL;

	/* Release (on success) pairs with the acquire in gmt__real_get: a thread
	 * that sees the pointer may call it. */
	if (atomic_compare_exchange_strong_explicit(&gmt__real[api], &expected, real,
						    memory_order_release, memory_order_acquire))
		return true;
	if (expected == real || same_object(expected, real))
		return true;
	static bool once;
	gmt__warn_once(&once, "%s comes from two different libraries; calls to the second are not traced",
		       gmt__api_names[api]);
	return false;
}

void *gmt__real_get(enum gmt__api api)
{
	void *p = atomic_load_explicit(&gmt__real[api], memory_order_acquire);
	void *h;

	if (p != NULL)
		return p;
	/* Reached through our exported symbol (a -lcuda program, a RTLD_LOCAL
	 * plugin): the real function is libcuda's own symbol of that name. NOTE:
	 * never RTLD_NEXT alone, which cannot see a libcuda loaded RTLD_LOCAL. */
	resolve_dlsym();
	h = libcuda();
	if (h != NULL && real_dlsym() != NULL)
		p = real_dlsym()(h, gmt__api_names[api]);
	if (p == NULL || p == variants[api].hook)
		return NULL;
	return real_set(api, p) ? p : atomic_load_explicit(&gmt__real[api], memory_order_acquire);
}

/* The hook standing in for `symbol` at (version, flags), as the driver would
 * choose the variant: the newest with a version at or below the request, the
 * per-thread-stream one when asked for and known. */
static const struct gmt__variant *variant_for(const char *symbol, int version, cuuint64_t flags)
{
	const struct gmt__variant *best = NULL, *best_ptsz = NULL;

	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		const struct gmt__variant *v = &variants[i];

		if (v->version > version || strcmp(v->base, symbol) != 0)
			continue;
		if (v->ptsz) {
			if (best_ptsz == NULL || v->version > best_ptsz->version)
				best_ptsz = v;
		} else if (best == NULL || v->version > best->version) {
			best = v;
		}
	}
	if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best_ptsz != NULL)
		return best_ptsz;
	return best;
}

/* With GPUMEMTRACE_VERBOSE=1, one line per lookup of a memory function
 * (cuMem…, cuArray…) and its outcome: how a program whose allocations are not
 * seen can be told apart from one that never allocates. */
static void *lookup_done(const char *how, const char *symbol, int version, cuuint64_t flags,
			 void *answer, const char *outcome)
{
	if (strncmp(symbol, "cuMem", 5) != 0 && strncmp(symbol, "cuArray", 7) != 0)
		return answer;
	if (version == 0)
		gmt__info("%s %s: %s", how, symbol, outcome);
	else
		gmt__info("%s %s (version %d, flags %llu): %s", how, symbol, version,
			  (unsigned long long)flags, outcome);
	return answer;
}

void *gmt__wrap_lookup(const char *symbol, void *p, int version, cuuint64_t flags,
		       PFN_cuGetProcAddress_v12000 v2, PFN_cuGetProcAddress_v11030 v1)
{
	const struct gmt__variant *v;
	int asked = version;

	if (p == NULL || symbol == NULL)
		return p;
	if (version > CUDA_VERSION) {
		/* A variant newer than our headers may have another ABI: wrap only
		 * when the driver gives the very same function at our version. */
		void *same = NULL;
		CUresult r = v2 != NULL ? v2(symbol, &same, CUDA_VERSION, flags, NULL)
					: v1(symbol, &same, CUDA_VERSION, flags);
		if (r != CUDA_SUCCESS || same != p)
			return lookup_done("cuGetProcAddress", symbol, asked, flags, p,
					   "newer than the tracer's headers and another function: not traced");
		version = CUDA_VERSION;
	}
	v = variant_for(symbol, version, flags);
	if (v == NULL)
		return lookup_done("cuGetProcAddress", symbol, asked, flags, p, "not a function the tracer hooks");
	if (p == v->hook || !real_set(v->api, p))
		return lookup_done("cuGetProcAddress", symbol, asked, flags, p, "already the hook, or a second driver");
	return lookup_done("cuGetProcAddress", symbol, asked, flags, v->hook, "hooked");
}

/* Only names of the driver API can be hooks; everything else is answered by
 * glibc without a second look. */
GMT_NO_SANITIZE void *gmt__dlsym_hook(void *handle, const char *symbol)
{
	void *real;

	resolve_dlsym();
	if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || symbol == NULL || symbol[0] != 'c' ||
	    symbol[1] != 'u' || real_dlsym() == NULL)
		return NULL;
	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
		if (strcmp(gmt__api_names[variants[i].api], symbol) != 0)
			continue;
		real = real_dlsym()(handle, symbol);
		/* A handle of this very library answers with the hook itself:
		 * recording it as the real function would make the hook call
		 * itself forever. */
		if (real == NULL || real == variants[i].hook || !real_set(variants[i].api, real))
			return lookup_done("dlsym", symbol, 0, 0, NULL, "passed through");
		return lookup_done("dlsym", symbol, 0, 0, variants[i].hook, "hooked");
	}
	return NULL;
}

/* --- the tracer's own driver calls ------------------------------------------ */

#define GMT_X_PFN(sym, base, ver) static PFN_##base##_v##ver real_##sym;
GMT_DRIVER_CALLS(GMT_X_PFN)
#undef GMT_X_PFN

/* Racing threads find and store the same function; relaxed is enough for a
 * pointer to code that was mapped before either of them ran. */
#define GMT_DRIVER_FN(sym, base, ver)                                                           \
	(__atomic_load_n(&real_##sym, __ATOMIC_RELAXED) != NULL                                 \
		 ? __atomic_load_n(&real_##sym, __ATOMIC_RELAXED)                               \
		 : (__atomic_store_n(&real_##sym, (PFN_##base##_v##ver)driver_fn(#base, #sym, ver), \
				     __ATOMIC_RELAXED),                                         \
		    __atomic_load_n(&real_##sym, __ATOMIC_RELAXED)))

/* Looked up through the driver's own cuGetProcAddress when we have it (exactly
 * what cudart gets), else by name from libcuda. */
static void *driver_fn(const char *base, const char *sym, int version)
{
	PFN_cuGetProcAddress_v12000 lookup = gmt__real_get(GMT_API_cuGetProcAddress_v2);
	CUdriverProcAddressQueryResult status;
	void *p = NULL, *h;

	if (lookup != NULL && lookup(base, &p, version, 0, &status) == CUDA_SUCCESS && p != NULL)
		return p;
	h = libcuda();
	resolve_dlsym();
	return h != NULL && real_dlsym() != NULL ? real_dlsym()(h, sym) : NULL;
}

CUresult gmt__driver_ctx_device(int *device)
{
	PFN_cuCtxGetDevice_v2000 fn = GMT_DRIVER_FN(cuCtxGetDevice, cuCtxGetDevice, 2000);

	return fn != NULL ? fn(device) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult gmt__driver_ctx_current(CUcontext *ctx)
{
	PFN_cuCtxGetCurrent_v4000 fn = GMT_DRIVER_FN(cuCtxGetCurrent, cuCtxGetCurrent, 4000);

	return fn != NULL ? fn(ctx) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult gmt__driver_primary_active(int device, bool *active)
{
	PFN_cuDevicePrimaryCtxGetState_v7000 fn =
		GMT_DRIVER_FN(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000);
	unsigned int flags;
	int on = 0;
	CUresult r = fn != NULL ? fn(device, &flags, &on) : CUDA_ERROR_NOT_INITIALIZED;

	*active = on != 0;
	return r;
}

CUresult gmt__driver_mem_info(int device, size_t *free_bytes, size_t *total_bytes)
{
	PFN_cuMemGetInfo_v3020 info = GMT_DRIVER_FN(cuMemGetInfo_v2, cuMemGetInfo, 3020);
	PFN_cuCtxPushCurrent_v4000 push = GMT_DRIVER_FN(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000);
	PFN_cuCtxPopCurrent_v4000 pop = GMT_DRIVER_FN(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000);
	PFN_cuDevicePrimaryCtxRetain_v7000 retain = gmt__real_get(GMT_API_cuDevicePrimaryCtxRetain);
	PFN_cuDevicePrimaryCtxRelease_v11000 release = gmt__real_get(GMT_API_cuDevicePrimaryCtxRelease_v2);
	CUcontext cur = NULL, primary, popped;
	bool active;
	int d;
	CUresult r;

	if (info == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gmt__driver_ctx_current(&cur) == CUDA_SUCCESS && cur != NULL &&
	    gmt__driver_ctx_device(&d) == CUDA_SUCCESS && d == device)
		return info(free_bytes, total_bytes);
	/* NOTE: the thread that reports a framework's failure (JAX's Python
	 * thread) may have no context: the framework drives the device from
	 * threads of its own, in the primary context. */
	if (push == NULL || pop == NULL || retain == NULL || release == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = gmt__driver_primary_active(device, &active);
	if (r != CUDA_SUCCESS || !active)
		return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_CONTEXT;
	r = retain(&primary, device);
	if (r != CUDA_SUCCESS)
		return r;
	r = push(primary);
	if (r == CUDA_SUCCESS) {
		r = info(free_bytes, total_bytes);
		pop(&popped);
	}
	release(device);
	return r;
}

CUresult gmt__driver_granularity(int device, size_t *bytes)
{
	PFN_cuMemGetAllocationGranularity_v10020 fn =
		GMT_DRIVER_FN(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020);
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device },
	};

	return fn != NULL ? fn(bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult gmt__driver_pools(int device, CUmemoryPool *default_pool, CUmemoryPool *current_pool)
{
	PFN_cuDeviceGetDefaultMemPool_v11020 def =
		GMT_DRIVER_FN(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020);
	PFN_cuDeviceGetMemPool_v11020 cur = GMT_DRIVER_FN(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020);
	CUresult r;

	if (def == NULL || cur == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = def(default_pool, device);
	return r == CUDA_SUCCESS ? cur(current_pool, device) : r;
}

CUresult gmt__driver_pool_usage(CUmemoryPool pool, uint64_t *reserved, uint64_t *used)
{
	PFN_cuMemPoolGetAttribute_v11020 fn = GMT_DRIVER_FN(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020);
	cuuint64_t r = 0, u = 0;
	CUresult res;

	if (fn == NULL)
		return CUDA_ERROR_NOT_INITIALIZED;
	res = fn(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r);
	if (res == CUDA_SUCCESS)
		res = fn(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u);
	*reserved = r;
	*used = u;
	return res;
}

CUresult gmt__driver_pci_bus_id(int device, char *id, int len)
{
	PFN_cuDeviceGetPCIBusId_v4010 fn = GMT_DRIVER_FN(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010);

	return fn != NULL ? fn(id, len, device) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult gmt__driver_device_name(int device, char *name, int len)
{
	PFN_cuDeviceGetName_v2000 fn = GMT_DRIVER_FN(cuDeviceGetName, cuDeviceGetName, 2000);

	return fn != NULL ? fn(name, len, device) : CUDA_ERROR_NOT_INITIALIZED;
}

const char *gmt__driver_error_name(CUresult r)
{
	PFN_cuGetErrorName_v6000 fn = GMT_DRIVER_FN(cuGetErrorName, cuGetErrorName, 6000);
	const char *name = NULL;

	return fn != NULL && fn(r, &name) == CUDA_SUCCESS ? name : NULL;
}
