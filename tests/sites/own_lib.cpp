// The program's own shared library for the site tests (libgmttest_arena.so):
// an arena that grows by device allocations. Its frames are the program's
// own code: a site inside it is named there, by its callers where two would
// read the same.
#include <cstddef>

#include <cuda_runtime_api.h>

#include "own_lib.h"

int Arena::grow_line;

void *Arena::grow(std::size_t bytes)
{
	void *p = nullptr;
	cudaError_t r = cudaMalloc(&p, bytes); grow_line = __LINE__;

	if (r != cudaSuccess)
		return nullptr;
	blocks_++;
	return p;
}
