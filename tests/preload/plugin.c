/* A plugin that allocates, built twice (plug_a, plug_b) with other names,
 * for tests/preload/unloaded.c: one is unloaded and the other loaded at the
 * same address. */
#include <cuda.h>

#ifdef PLUG_A
#define ALLOCATE plugin_a_allocate
#else
#define ALLOCATE totally_unrelated_function
#endif

int ALLOCATE(CUdeviceptr *p, size_t size);

__attribute__((noinline)) int ALLOCATE(CUdeviceptr *p, size_t size)
{
	int r = (int)cuMemAlloc(p, size); /* ALLOC_LINE */

	__asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
	return r;
}
