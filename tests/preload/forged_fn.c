/* The allocating function of forged_name.c, compiled on its own and renamed
 * after (objcopy, meson.build) to "gmt_forged_grow", a newline and a report
 * line, as a C++ or assembler name can be: no debug information, so the
 * symbol table names the frame. It allocates through the caller's function
 * (no header needed here). */
#include <stddef.h>

int gmt_forged_grow(int (*alloc)(void *, size_t), void *p, size_t size);
int gmt_forged_run(int (*alloc)(void *, size_t), void *p, size_t size);

__attribute__((noinline)) int gmt_forged_grow(int (*alloc)(void *, size_t), void *p, size_t size)
{
	int r = alloc(p, size);

	__asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
	return r;
}

__attribute__((noinline)) int gmt_forged_run(int (*alloc)(void *, size_t), void *p, size_t size)
{
	int r = gmt_forged_grow(alloc, p, size);

	__asm__ volatile("" ::: "memory");
	return r;
}
