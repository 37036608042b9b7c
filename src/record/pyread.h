/* Python frames read from the interpreter's memory, for a thread that does
 * not hold the GIL (PyTorch, CuPy, ctypes and every extension that releases
 * it around a CUDA call): no interpreter lock, no Python call, no Python
 * object made. The layouts come from pylayout.h; every pointer is checked
 * against the process's readable mappings and every object's type against
 * the interpreter's own type objects before it is followed. pystack.c owns
 * the tables of code objects; this file only reads. docs/tracing.md ("Python
 * frames") gives the safety argument. */
#ifndef GMT_PYREAD_H
#define GMT_PYREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Chooses the layout of the interpreter whose symbols `handle` reaches
 * (dlsym; RTLD_DEFAULT is NULL) and checks it against the interpreter itself.
 * Returns true when frames can be read without the GIL from now on; false
 * with why (one line, for the verbose log) otherwise. Once, from
 * gmt__py_probe, before any read. */
bool gmt__pyread_setup(void *handle, const char **why);

/* One frame as read. */
struct gmt__pyframe {
	uintptr_t code;     /* the code object */
	uint64_t key;       /* what tells it from a later one at the same address: its names,
			     * file and line table (distinct immutable objects it holds) and
			     * first line, hashed; never 0 */
	uintptr_t previous; /* the caller's frame, 0 at the bottom */
	int addr;           /* the instruction as PyCode_Addr2Line takes it (bytes) */
	bool skip;          /* not a Python frame to show (an entry frame, one not started) */
	int traced_line;    /* > 0: the frame's own line while a tracer runs (3.9, 3.10) */
};

/* Everything below: under pystack.c's lock (one reader at a time: the
 * mapping table is rebuilt in place), from a thread inside a hook. Each
 * returns -EFAULT for memory that is not what the layout says (not mapped,
 * not the right type) and leaves errno as it was. */

/* Starts a capture: its reads may have the table of mappings rebuilt once. */
void gmt__pyread_begin(void);

/* The innermost frame of the thread state `tstate` (0: none). */
int gmt__pyread_first(uintptr_t tstate, uintptr_t *frame);

/* One frame. */
int gmt__pyread_frame(uintptr_t frame, struct gmt__pyframe *out);

/* The code object's function (its qualified name where the version has
 * one) and file, as UTF-8, cut to the room given. */
int gmt__pyread_code_names(uintptr_t code, char *function, size_t flen, char *file, size_t len);

/* The line of the instruction at `addr` (struct gmt__pyframe), as
 * PyCode_Addr2Line computes it; 0 for none. */
int gmt__pyread_line(uintptr_t code, int addr, int *line);

#endif /* GMT_PYREAD_H */
