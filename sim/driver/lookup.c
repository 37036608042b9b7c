/* cuGetProcAddress and cuGetProcAddress_v2: entry point lookup by base name,
 * version and flags, as the real driver does it (docs/simulator.md, "Loading
 * paths"), plus the per-entry-point call counters the ledger reports. */
#include "sim.h"

#include <string.h>

struct sim_symbol {
	const char *base;
	int version;
	bool per_thread; /* a _ptsz or _ptds variant */
	enum sim_call call;
	void *fn;
};

/* NOTE: converting a function pointer to void * is what cuGetProcAddress's own
 * signature demands; POSIX guarantees it round-trips (dlsym relies on it too). */
static const struct sim_symbol symbols[] = {
#define SIM_X_SYMBOL(sym, base, ver, pt) { #base, ver, (pt) != SIM_PT_NONE, SIM_CALL_##sym, (void *)&sym },
	SIM_ENTRY_POINTS(SIM_X_SYMBOL)
#undef SIM_X_SYMBOL
};

static const char *const call_names[] = {
#define SIM_X_NAME(sym, base, ver, pt) #sym,
	SIM_ENTRY_POINTS(SIM_X_NAME)
#undef SIM_X_NAME
};

/* Relaxed: counters are statistics, read when a ledger is written; no other
 * memory is published through them. */
static _Atomic uint64_t call_counts[SIM_CALL_COUNT];

const char *gmtsim__call_name(enum sim_call call)
{
	return (unsigned)call < SIM_CALL_COUNT ? call_names[call] : "unknown";
}

void gmtsim__count(enum sim_call call)
{
	atomic_fetch_add_explicit(&call_counts[call], 1, memory_order_relaxed);
}

uint64_t gmtsim__calls(enum sim_call call)
{
	return atomic_load_explicit(&call_counts[call], memory_order_relaxed);
}

void gmtsim__reset_calls(void)
{
	for (int i = 0; i < SIM_CALL_COUNT; i++)
		atomic_store_explicit(&call_counts[i], 0, memory_order_relaxed);
}

/* Among the entries named `base` that the simulated driver version knows, the
 * newest at or below `version` with the wanted stream variant. */
static const struct sim_symbol *best(const char *base, int version, int driver, bool per_thread)
{
	const struct sim_symbol *found = NULL;

	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		const struct sim_symbol *s = &symbols[i];

		if (s->per_thread != per_thread || s->version > driver || s->version > version)
			continue;
		if (strcmp(s->base, base) != 0)
			continue;
		if (found == NULL || s->version > found->version)
			found = s;
	}
	return found;
}

static bool known(const char *base, int driver)
{
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++)
		if (symbols[i].version <= driver && strcmp(symbols[i].base, base) == 0)
			return true;
	return false;
}

/* NOTE: the two ABIs report a failed lookup differently (cuda.h's doc comment
 * for CUDA 13.0, and the CUDA 11.3-11.8 driver API manual): cuGetProcAddress_v2
 * returns CUDA_SUCCESS with *pfn = NULL and the reason in *symbolStatus, and
 * CUDA_ERROR_INVALID_VALUE when cudaVersion is newer than the driver; the
 * 4-argument cuGetProcAddress returns CUDA_ERROR_NOT_FOUND. An interposer must
 * pass both through unchanged. */
static CUresult lookup(const char *symbol, void **pfn, int version, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status, bool v2)
{
	int driver = gmtsim__driver_version();
	const struct sim_symbol *s = NULL;
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r;

	if (pfn == NULL || symbol == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	if (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
	    flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	if (v2 && version > driver)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
		s = best(symbol, version, driver, true);
	if (s == NULL)
		s = best(symbol, version, driver, false);
	if (s != NULL) {
		*pfn = s->fn;
		st = CU_GET_PROC_ADDRESS_SUCCESS;
	} else if (known(symbol, driver)) {
		st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	}
	if (status != NULL)
		*status = st;
	if (s != NULL || v2)
		r = CUDA_SUCCESS;
	else
		r = CUDA_ERROR_NOT_FOUND;
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
						   cuuint64_t flags,
						   CUdriverProcAddressQueryResult *symbolStatus)
{
	gmtsim__count(SIM_CALL_cuGetProcAddress_v2);
	return lookup(symbol, pfn, cudaVersion, flags, symbolStatus, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
						cuuint64_t flags)
{
	gmtsim__count(SIM_CALL_cuGetProcAddress);
	return lookup(symbol, pfn, cudaVersion, flags, NULL, false);
}
