/* Python frames: when the process runs a CPython interpreter and the
 * allocating thread has a Python thread state, its Python stack (function,
 * file, line) — through the public C API looked up at run time where the
 * thread holds the GIL, read from the interpreter's memory where it does not
 * (pyread.h: the thread released the GIL around this call, as PyTorch, CuPy
 * and ctypes do). No build-time dependency on Python, and the GIL is never
 * taken. Each frame becomes one tagged word that is interned with the native
 * frames of the same stack (stacks.h); a word names a code object the tracer
 * knows (its names copied at first sight) and a line. */
#ifndef GMT_PYSTACK_H
#define GMT_PYSTACK_H

#include "record/stacks.h"

#include <stdbool.h>
#include <stdint.h>

/* A Python frame word (gmt__word_is_python in stacks.h):
 * GMT_WORD_PYTHON | code id << 32 | line. */

/* Looks up the interpreter's C API in the process (the global scope, then a
 * libpython loaded RTLD_LOCAL). Returns true when Python frames can be
 * captured from now on; false (and nothing changes) when no interpreter of a
 * supported version (3.9 or later) is loaded yet — call it again later to
 * catch one loaded since. Takes the dynamic loader's lock: not for the hot
 * path (tracer/core.c calls it at initialisation, state/consumer.c from the
 * background thread). */
bool gmt__py_probe(void);

/* What one capture did, for the tracer's statistics. */
struct gmt__py_capture_info {
	unsigned dropped; /* frames that could not be read consistently (without the GIL) */
	bool nogil;       /* the frames were read without the GIL */
};

/* The calling thread's Python frames, innermost first, as words into
 * out[0..max). Returns how many: 0 when no interpreter was found, while it is
 * not initialised (or finalising), and when this thread has no Python thread
 * state. Holding the GIL, it calls into the interpreter with automatic
 * garbage collection held off (so no finaliser can run inside a hook) and the
 * pending exception kept. Not holding it, it reads the frames from memory,
 * checking every pointer (pyread.h), and calls nothing in the interpreter.
 * Either way it allocates (with mmap) only for a code object or position
 * never seen before. */
int gmt__py_capture(uintptr_t *out, int max, struct gmt__py_capture_info *info);

/* The function (qualified name where the interpreter has one), file and line
 * (0: unknown) of a word from gmt__py_capture. Any thread, any time after the
 * capture. Returns 0, or -ENOENT for a word that names no known code object. */
int gmt__py_frame(uintptr_t word, const char **function, const char **file, int *line);

/* Placement facts for the snapshot writer. Each Python frame runs in a native
 * evaluation-loop call of its own (CPython 3.10 and older) or several share
 * one (3.11 and newer: Python-to-Python calls run inline). The interpreter's
 * load base (dladdr's dli_fbase), 0 when none was found. */
bool gmt__py_frame_per_eval(void);
uintptr_t gmt__py_interpreter_base(void);

/* Whether `function`, a native frame's name, is the interpreter's evaluation
 * loop: the native frames Python frames stand for. */
bool gmt__py_is_eval_function(const char *function);

/* In the child after fork(): another thread may have held the table lock. */
void gmt__py_after_fork(void);

#endif /* GMT_PYSTACK_H */
