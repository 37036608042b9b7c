/* A plugin that allocates, built twice (plug_a, plug_b) with other names
 * and lines (two builds, two build-ids), for tests/preload/unloaded.c (one is
 * unloaded and the other loaded at the same address) and reload.c (both
 * installed in turn at one path). */
#include <cuda.h>

#ifdef PLUG_A
#define ALLOCATE plugin_a_allocate
#else
#define ALLOCATE totally_unrelated_function
/* plug_b's lines are from 1000 on: a frame named from the wrong build says
 * so by its line too. */
#line 1000
#endif

int ALLOCATE(CUdeviceptr *p, size_t size);

__attribute__((noinline)) int ALLOCATE(CUdeviceptr *p, size_t size)
{
	int r = (int)cuMemAlloc(p, size); /* ALLOC_LINE */

	__asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
	return r;
}
