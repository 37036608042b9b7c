/* The tracer's own memory, straight from the kernel: anonymous private
 * mappings, never malloc. Used wherever memory is had inside a hook or by a
 * producer draining its full ring (malloc may be the program's, or locked by
 * the thread being interrupted), and for what the leak scan must not read as
 * the program's heap. Untouched pages cost nothing. */
#ifndef GMT_MAP_H
#define GMT_MAP_H

#include <stddef.h>
#include <sys/mman.h>

/* len bytes, zeroed, page-aligned; NULL when the kernel refuses. Returned by
 * munmap(p, len). */
static inline void *gmt__map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

#endif /* GMT_MAP_H */
