/* Compile-time proof that every hook has exactly the ABI that cudaTypedefs.h
 * gives its (base, version, ptsz) row in GMT_HOOKS. Generates no code. */

/* NOTE: cudaTypedefs.h declares the PFN types of the legacy ABIs (32-bit
 * cuMemAlloc, 4-argument cuGetProcAddress) only when this macro is set; with it,
 * cuda.h also #undefs its versioning macros at its end. Type checks only. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>

#include "intercept/hooks.h"

#define GMT_PFN_0(base, ver) PFN_##base##_v##ver
#define GMT_PFN_1(base, ver) PFN_##base##_v##ver##_ptsz
#define GMT_PFN(base, ver, ptsz) GMT_PFN_##ptsz(base, ver)

#define GMT_X_CHECK(sym, base, ver, ptsz)                                      \
	_Static_assert(_Generic(&sym, GMT_PFN(base, ver, ptsz): 1, default: 0), \
		       #sym " does not have the ABI of PFN_" #base "_v" #ver);
GMT_HOOKS(GMT_X_CHECK)
