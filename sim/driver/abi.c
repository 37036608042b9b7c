/* Compile-time proof that every entry point the simulator exports has exactly
 * the ABI that the toolkit's cudaTypedefs.h gives for its (base, version, ptsz)
 * row in SIM_ENTRY_POINTS. This file generates no code. */

/* NOTE: cudaTypedefs.h declares the PFN types of the legacy ABIs (cuMemAlloc
 * with 32-bit sizes, cuGetProcAddress with 4 arguments...) only when this macro
 * is set; with it, cuda.h also #undefs its versioning macros at its end, so every
 * name below is the plain exported symbol. Used here for type checks only. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaTypedefs.h>

#include "sim.h"

#define SIM_PFN_0(base, ver) PFN_##base##_v##ver
#define SIM_PFN_1(base, ver) PFN_##base##_v##ver##_ptsz
#define SIM_PFN_2(base, ver) PFN_##base##_v##ver##_ptds
#define SIM_PFN(base, ver, ptsz) SIM_PFN_##ptsz(base, ver)

#define SIM_X_CHECK(sym, base, ver, ptsz)                                      \
	_Static_assert(_Generic(&sym, SIM_PFN(base, ver, ptsz): 1, default: 0), \
		       #sym " does not have the ABI of PFN_" #base "_v" #ver);
SIM_ENTRY_POINTS(SIM_X_CHECK)
