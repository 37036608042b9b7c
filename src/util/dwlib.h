/* elfutils' libdw, libdwfl and libelf, loaded at run time for the two users
 * of DWARF in the tracer: symbolisation at dump time (symbols.c) and the CFI
 * rules of the stack walk (unwind.c). */
#ifndef GMT_DWLIB_H
#define GMT_DWLIB_H

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>

/* Every libdw, libdwfl and libelf function the tracer calls. The headers give
 * the types only: nothing in the tracer links against libdw. */
#define GMT_DW_FUNCTIONS(X) \
	X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_child) X(dwarf_dieoffset) \
	X(dwarf_filesrc) X(dwarf_formstring) X(dwarf_formudata) X(dwarf_getsrc_die) \
	X(dwarf_getsrcfiles) X(dwarf_haspc) X(dwarf_lineaddr) X(dwarf_lineno) X(dwarf_linesrc) \
	X(dwarf_ranges) X(dwarf_siblingof) X(dwarf_tag) \
	X(dwarf_cfi_addrframe) X(dwarf_frame_cfa) X(dwarf_frame_info) X(dwarf_frame_register) \
	X(dwfl_addrmodule) X(dwfl_begin) X(dwfl_build_id_find_debuginfo) X(dwfl_build_id_find_elf) \
	X(dwfl_end) X(dwfl_linux_proc_find_elf) X(dwfl_linux_proc_report) \
	X(dwfl_module_addrdie) X(dwfl_module_addrinfo) X(dwfl_module_addrname) X(dwfl_module_build_id) \
	X(dwfl_module_eh_cfi) X(dwfl_module_getelf) X(dwfl_offline_section_address) \
	X(dwfl_report_begin) X(dwfl_report_elf) X(dwfl_report_end) \
	X(elf_begin) X(elf_end) X(elf_getphdrnum) X(gelf_getphdr)

#define GMT_DW_FIELD(name) __typeof__(&name) name;

struct gmt__dw {
	GMT_DW_FUNCTIONS(GMT_DW_FIELD)
};

/* libdw's functions, loaded at the first call from any thread (once; later
 * calls only read), or NULL when libdw.so.1 cannot be loaded or lacks one of
 * them (said once, at info level). Not for signal handlers: the first call
 * dlopen()s. */
const struct gmt__dw *gmt__dw_load(void);

#endif /* GMT_DWLIB_H */
