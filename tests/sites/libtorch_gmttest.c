/* A framework-like shared library for the site tests: its name matches the
 * built-in library pattern libtorch*, and its tensor allocator calls the
 * runtime through two frames of its own, as a framework's does. */
#include <stddef.h>

#include <cuda_runtime_api.h>

void *gmttest_tensor_empty(size_t bytes);

__attribute__((noinline)) static void *caching_malloc(size_t bytes)
{
	void *p = NULL;

	if (cudaMalloc(&p, bytes) != cudaSuccess)
		return NULL;
	__asm__ volatile("" ::: "memory"); /* no tail call: this frame stays */
	return p;
}

__attribute__((noinline)) void *gmttest_tensor_empty(size_t bytes)
{
	void *p = caching_malloc(bytes);

	__asm__ volatile("" ::: "memory");
	return p;
}
