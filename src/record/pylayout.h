/* Where each CPython minor version keeps what pyread.c reads from the
 * interpreter's memory without the GIL: one entry per version, its numbers
 * generated from that version's own headers by scripts/py-layouts into
 * pylayout_table.h. Offsets are in bytes from the start of the object. */
#ifndef GMT_PYLAYOUT_H
#define GMT_PYLAYOUT_H

#include <stdint.h>

enum {
	GMT_PY_FRAME_OBJECTS = 0, /* 3.9, 3.10: PyFrameObject chain from tstate->frame */
	GMT_PY_FRAME_INTERP = 1,  /* 3.11+: _PyInterpreterFrame chain */
};

enum {
	GMT_PY_LNOTAB = 0,    /* 3.9: co_lnotab, (address delta, line delta) byte pairs */
	GMT_PY_LINETABLE = 1, /* 3.10: co_linetable, (address delta, line delta), -128 no line */
	GMT_PY_LOCATIONS = 2, /* 3.11+: the location table (PEP 657) */
};

struct gmt__pylayout {
	uint32_t version; /* PY_VERSION_HEX of the minor version: 0x030b0000 */
	uint8_t frame_kind, linetable_kind;
	/* 3.11+: the owner value of a generator's frame, and the lowest owner
	 * value of a frame that runs no Python function: the interpreter's own
	 * (3.14+) or an entry frame on the C stack (3.12, 3.13); 255 where
	 * there is none (3.11). code_tag_bits: the low bits that tag the
	 * frame's reference to its code (3.14+: a _PyStackRef). */
	uint8_t owner_generator, owner_native, code_tag_bits;
	/* PyThreadState: the frame (3.9, 3.10), the _PyCFrame pointer (3.11,
	 * 3.12: its current_frame at cframe_current) or current_frame (3.13+). */
	uint16_t tstate_frame, cframe_current;
	/* The frame: its caller, its code object, its instruction (3.11+: a
	 * pointer into the code's bytecode; 3.9, 3.10: f_lasti, an int in
	 * bytes or code units) and owner; f_trace and f_lineno (3.9, 3.10). */
	uint16_t frame_previous, frame_code, frame_instr, frame_owner, frame_lasti, frame_trace, frame_lineno;
	/* The code object. code_qualname 0: none (before 3.11). code_bytecode:
	 * where the code units start (3.11+). code_basicsize: PyCode_Type's
	 * tp_basicsize, checked at run time. */
	uint16_t code_filename, code_name, code_qualname, code_linetable, code_firstlineno,
		code_firsttraceable, code_bytecode, code_basicsize;
	/* PyVarObject's ob_size, PyTypeObject's tp_basicsize, the string and
	 * bytes objects. */
	uint16_t var_size, type_basicsize, ascii_size, compact_size, unicode_length, unicode_state, bytes_data;
	/* 3.13+: where _Py_DebugOffsets, at the start of _PyRuntime, holds the
	 * same offsets (compared at run time); 0: not published. */
	uint16_t dbg_current_frame, dbg_frame_previous, dbg_frame_code, dbg_frame_instr, dbg_frame_owner,
		dbg_code_filename, dbg_code_name, dbg_code_qualname, dbg_code_linetable, dbg_code_firstlineno,
		dbg_code_bytecode, dbg_free_threaded;
};

#endif /* GMT_PYLAYOUT_H */
