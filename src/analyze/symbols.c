/* Symbolisation at dump time through elfutils' libdwfl/libdw, loaded at run
 * time: one Dwfl per module path, opened once; per address the scopes around it
 * give the inlined frames, the line table the innermost position,
 * DW_AT_call_file/_line the position in each caller. C++ names through the C++
 * runtime's __cxa_demangle, looked up at run time, each demangled once. */
#define _GNU_SOURCE
#include "analyze/symbols.h"

#include "util/dwlib.h"
#include "util/loader.h"
#include "util/log.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <errno.h>
#include <gelf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- libdw ------------------------------------------------------------------- */

/* Set by the first gmt__symbols_new: libdw's functions (dwlib.h), NULL without
 * libdw; and the Dwfl callbacks built from them. */
static const struct gmt__dw *dw;
static Dwfl_Callbacks dw_callbacks;
static pthread_once_t dw_once = PTHREAD_ONCE_INIT;

static void dw_setup(void)
{
	dw = gmt__dw_load();
	if (dw == NULL)
		return;
	/* NOTE: separate debug files by build-id only (/usr/lib/debug/.build-id,
	 * where Debian's -dbgsym packages put them). dwfl_standard_find_debuginfo
	 * would also ask a debuginfod server whenever DEBUGINFOD_URLS is set: a
	 * network fetch in the middle of a snapshot. */
	dw_callbacks = (Dwfl_Callbacks){
		.find_elf = dw->dwfl_build_id_find_elf,
		.find_debuginfo = dw->dwfl_build_id_find_debuginfo,
		.section_address = dw->dwfl_offline_section_address,
	};
}

/* A function's code range (one of them: a function split hot/cold has two)
 * and its concrete DIE. */
struct func {
	Dwarf_Addr lo, hi;
	Dwarf_Die die;
};

/* The functions of one compilation unit, sorted by address, built the first
 * time an address falls in the CU: finding the function by binary search and
 * then descending only into it is many times faster than dwarf_getscopes,
 * which walks the CU's whole DIE tree for every address. */
struct cu_index {
	Dwarf_Off off;         /* the CU DIE's offset */
	struct func *v;        /* NULL: no memory, or no functions */
	size_t n;
};

struct module {
	char *path;
	Dwfl *dwfl;            /* NULL: the module could not be opened (kept, not retried) */
	Dwfl_Module *mod;
	Dwarf_Addr bias;       /* Dwfl address = file address + bias */
	GElf_Addr first_page;  /* the page of the first PT_LOAD: where module_base maps */
	struct gmt__build_id id; /* the file's (len 0: none) */
	struct cu_index *cus;  /* the CUs looked into so far, by DIE offset */
	size_t ncus, capcus;
};

/* A mangled name (its address in the module's string data, stable while the
 * module is open) and what it demangles to. */
struct name {
	const char *mangled;   /* NULL: empty slot */
	char *demangled;       /* NULL: does not demangle; the mangled name stands */
};

typedef char *demangle_fn(const char *mangled, char *buf, size_t *len, int *status);

struct gmt__symbols {
	struct module *mods;
	size_t nmods, capmods;
	size_t last;           /* the module of the previous lookup (stacks repeat modules) */
	struct name *names;    /* open addressing, never more than half full */
	size_t nnames, capnames;
	demangle_fn *demangle; /* NULL: no C++ runtime loaded */
	void *libstdcxx;       /* our reference to a C++ runtime loaded RTLD_LOCAL, or NULL */
	uintptr_t page_size;
};

struct gmt__symbols *gmt__symbols_new(void)
{
	struct gmt__symbols *s = calloc(1, sizeof(*s));
	long page = sysconf(_SC_PAGESIZE);
	void *sym;

	if (s == NULL)
		return NULL;
	(void)pthread_once(&dw_once, dw_setup);
	s->page_size = page > 0 ? (uintptr_t)page : 4096;
	/* NOTE: dlvsym, not dlsym: inside libgpumemtrace.so dlsym is the tracer's
	 * own override (-Bsymbolic-functions). The C++ runtime is never loaded
	 * here (RTLD_NOLOAD finds one loaded RTLD_LOCAL): a program without it
	 * has no C++ names to demangle. */
	sym = dlvsym(RTLD_DEFAULT, "__cxa_demangle", "CXXABI_1.3");
	if (sym == NULL) {
		s->libstdcxx = gmt__dlopen("libstdc++.so.6", RTLD_NOLOAD | RTLD_LAZY);
		if (s->libstdcxx != NULL)
			sym = dlvsym(s->libstdcxx, "__cxa_demangle", "CXXABI_1.3");
	}
	memcpy(&s->demangle, &sym, sizeof(s->demangle));
	return s;
}

void gmt__symbols_free(struct gmt__symbols *s)
{
	size_t i;

	if (s == NULL)
		return;
	for (i = 0; i < s->nmods; i++) {
		for (size_t j = 0; j < s->mods[i].ncus; j++)
			free(s->mods[i].cus[j].v);
		free(s->mods[i].cus);
		if (s->mods[i].dwfl != NULL)
			dw->dwfl_end(s->mods[i].dwfl);
		free(s->mods[i].path);
	}
	for (i = 0; i < s->capnames; i++)
		free(s->names[i].demangled);
	free(s->mods);
	free(s->names);
	if (s->libstdcxx != NULL)
		gmt__dlclose(s->libstdcxx);
	free(s);
}

/* ---- modules ------------------------------------------------------------------ */

/* Opens path into m (m->path set). Failure leaves m->dwfl NULL. */
static void module_open(struct module *m, uintptr_t page_size)
{
	size_t nph = 0, i;
	GElf_Phdr ph;
	Elf *elf;

	m->dwfl = dw->dwfl_begin(&dw_callbacks);
	if (m->dwfl == NULL)
		return;
	dw->dwfl_report_begin(m->dwfl);
	m->mod = dw->dwfl_report_elf(m->dwfl, m->path, m->path, -1, 0, false);
	if (dw->dwfl_report_end(m->dwfl, NULL, NULL) != 0 || m->mod == NULL)
		goto fail;
	elf = dw->dwfl_module_getelf(m->mod, &m->bias);
	if (elf == NULL || dw->elf_getphdrnum(elf, &nph) != 0)
		goto fail;
	for (i = 0; i < nph; i++) {
		if (dw->gelf_getphdr(elf, (int)i, &ph) != NULL && ph.p_type == PT_LOAD) {
			const unsigned char *bits;
			GElf_Addr vaddr;
			int n;

			/* The loader maps the first PT_LOAD from its page: dli_fbase
			 * is that page's address (glibc's l_map_start). */
			m->first_page = ph.p_vaddr & ~(GElf_Addr)(page_size - 1);
			n = dw->dwfl_module_build_id(m->mod, &bits, &vaddr);
			if (n > 0)
				gmt__build_id_set(&m->id, bits, (size_t)n);
			return;
		}
	}
fail:
	dw->dwfl_end(m->dwfl);
	m->dwfl = NULL;
	m->mod = NULL;
}

/* The module of path, opened on first use; NULL without memory. */
static struct module *module_get(struct gmt__symbols *s, const char *path)
{
	struct module *m;
	size_t i;

	if (dw == NULL)
		return NULL; /* no libdw: nothing to open modules with */
	if (s->last < s->nmods && strcmp(s->mods[s->last].path, path) == 0)
		return &s->mods[s->last];
	for (i = 0; i < s->nmods; i++) {
		if (strcmp(s->mods[i].path, path) == 0) {
			s->last = i;
			return &s->mods[i];
		}
	}
	if (s->nmods == s->capmods) {
		size_t cap = s->capmods ? 2 * s->capmods : 16;
		struct module *v = realloc(s->mods, cap * sizeof(*v));

		if (v == NULL)
			return NULL;
		s->mods = v;
		s->capmods = cap;
	}
	m = &s->mods[s->nmods];
	memset(m, 0, sizeof(*m));
	m->path = strdup(path);
	if (m->path == NULL)
		return NULL;
	module_open(m, s->page_size);
	s->last = s->nmods++;
	return m;
}

/* The module of path, opened, when its file is the build `want` names (any
 * file when want is NULL); else NULL. */
static struct module *module_usable(struct gmt__symbols *s, const char *path, const struct gmt__build_id *want)
{
	struct module *m;

	if (s == NULL || path == NULL || path[0] == '\0')
		return NULL;
	m = module_get(s, path);
	if (m == NULL || m->mod == NULL || (want != NULL && !gmt__build_id_equal(want, &m->id)))
		return NULL;
	return m;
}

/* ---- names -------------------------------------------------------------------- */

static size_t name_hash(const char *p)
{
	return (size_t)((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull >> 29);
}

static struct name *name_slot(const struct gmt__symbols *s, const char *mangled)
{
	size_t mask = s->capnames - 1, i;

	for (i = name_hash(mangled) & mask; s->names[i].mangled != NULL &&
	     s->names[i].mangled != mangled; i = (i + 1) & mask)
		;
	return &s->names[i];
}

/* Doubles the table; returns false without memory (it stays as it was). */
static bool names_grow(struct gmt__symbols *s)
{
	struct gmt__symbols bigger = { .capnames = s->capnames ? 2 * s->capnames : 256 };
	size_t j;

	bigger.names = calloc(bigger.capnames, sizeof(*bigger.names));
	if (bigger.names == NULL)
		return false;
	for (j = 0; j < s->capnames; j++) {
		if (s->names[j].mangled != NULL)
			*name_slot(&bigger, s->names[j].mangled) = s->names[j];
	}
	free(s->names);
	s->names = bigger.names;
	s->capnames = bigger.capnames;
	return true;
}

/* The demangled form of a linkage name, or the name itself (not C++, no
 * demangler, no memory). */
static const char *demangled(struct gmt__symbols *s, const char *mangled)
{
	struct name *slot;
	int status = -1;
	char *d;

	if (s->demangle == NULL || strncmp(mangled, "_Z", 2) != 0)
		return mangled;
	if (s->capnames != 0) {
		slot = name_slot(s, mangled);
		if (slot->mangled == mangled)
			return slot->demangled != NULL ? slot->demangled : mangled;
	}
	if (2 * (s->nnames + 1) > s->capnames && !names_grow(s))
		return mangled;
	d = s->demangle(mangled, NULL, NULL, &status);
	if (status != 0) {
		free(d);
		d = NULL;
	}
	slot = name_slot(s, mangled);
	slot->mangled = mangled;
	slot->demangled = d;
	s->nnames++;
	return d != NULL ? d : mangled;
}

/* A subprogram's or inlined instance's name: the linkage name demangled, else
 * the plain name, following DW_AT_abstract_origin and DW_AT_specification. */
static const char *die_function(struct gmt__symbols *s, Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name;

	name = dw->dwarf_formstring(dw->dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
	if (name == NULL)
		name = dw->dwarf_formstring(dw->dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
	if (name != NULL)
		return demangled(s, name);
	return dw->dwarf_formstring(dw->dwarf_attr_integrate(die, DW_AT_name, &attr));
}

/* ---- functions of a CU ------------------------------------------------------- */

struct funcs {
	struct func *v;
	size_t n, cap;
	bool failed;
};

static void funcs_add(struct funcs *fs, Dwarf_Die *die)
{
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;

	while ((off = dw->dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (lo >= hi)
			continue;
		if (fs->n == fs->cap) {
			size_t cap = fs->cap ? 2 * fs->cap : 64;
			struct func *v = realloc(fs->v, cap * sizeof(*v));

			if (v == NULL) {
				fs->failed = true;
				return;
			}
			fs->v = v;
			fs->cap = cap;
		}
		fs->v[fs->n++] = (struct func){ .lo = lo, .hi = hi, .die = *die };
	}
}

/* The concrete functions among the children of parent, and in the
 * namespaces and types it holds (C++ puts definitions there too). */
static void funcs_collect(struct funcs *fs, Dwarf_Die *parent, int depth)
{
	Dwarf_Die child;

	if (depth > 16 || dw->dwarf_child(parent, &child) != 0)
		return;
	do {
		switch (dw->dwarf_tag(&child)) {
		case DW_TAG_subprogram:
			funcs_add(fs, &child);
			break;
		case DW_TAG_namespace:
		case DW_TAG_class_type:
		case DW_TAG_structure_type:
		case DW_TAG_union_type:
		case DW_TAG_module:
			funcs_collect(fs, &child, depth + 1);
			break;
		default:
			break;
		}
	} while (!fs->failed && dw->dwarf_siblingof(&child, &child) == 0);
}

static int func_order(const void *a, const void *b)
{
	const struct func *x = a, *y = b;

	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The index of cu, built on first use; NULL without memory. */
static struct cu_index *cu_index_get(struct module *m, Dwarf_Die *cu)
{
	Dwarf_Off off = dw->dwarf_dieoffset(cu);
	struct funcs fs = { 0 };
	size_t lo = 0, hi = m->ncus;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->cus[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < m->ncus && m->cus[lo].off == off)
		return &m->cus[lo];
	if (m->ncus == m->capcus) {
		size_t cap = m->capcus ? 2 * m->capcus : 16;
		struct cu_index *v = realloc(m->cus, cap * sizeof(*v));

		if (v == NULL)
			return NULL;
		m->cus = v;
		m->capcus = cap;
	}
	funcs_collect(&fs, cu, 0);
	if (fs.failed) {
		free(fs.v);
		return NULL; /* not cached: a later lookup tries again */
	}
	qsort(fs.v, fs.n, sizeof(*fs.v), func_order);
	memmove(&m->cus[lo + 1], &m->cus[lo], (m->ncus - lo) * sizeof(*m->cus));
	m->cus[lo] = (struct cu_index){ .off = off, .v = fs.v, .n = fs.n };
	m->ncus++;
	return &m->cus[lo];
}

/* The function whose code holds addr, or NULL. */
static Dwarf_Die *cu_index_find(struct cu_index *c, Dwarf_Addr addr)
{
	size_t lo = 0, hi = c->n, back;

	while (lo < hi) { /* the first function starting after addr */
		size_t mid = lo + (hi - lo) / 2;

		if (c->v[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Functions do not overlap, but a few of those before may be longer
	 * than the last one starting before addr (odd code: look a little). */
	for (back = 0; back < 8 && lo > 0; back++, lo--) {
		if (addr < c->v[lo - 1].hi)
			return &c->v[lo - 1].die;
	}
	return NULL;
}

/* ---- lookup ------------------------------------------------------------------- */

#define MAX_INLINE_DEPTH 64

/* Without debug information for addr (a release build, most shared
 * libraries, code the debug information leaves out): the ELF symbol tables
 * (.symtab, else .dynsym) still name the function — only a function symbol
 * whose size holds addr, since the nearest one before it may be another
 * function's (a stripped program's static functions are in no table).
 * Returns 1 frame, or 0. */
static int symbol_only(struct gmt__symbols *s, struct module *m, Dwarf_Addr addr, struct gmt__frame_sym *out)
{
	GElf_Off offset = 0;
	GElf_Sym sym;
	const char *name = dw->dwfl_module_addrinfo(m->mod, addr, &offset, &sym, NULL, NULL, NULL);

	if (name == NULL || GELF_ST_TYPE(sym.st_info) != STT_FUNC || offset >= sym.st_size)
		return 0;
	out[0] = (struct gmt__frame_sym){ .function = demangled(s, name) };
	return 1;
}

int gmt__symbols_lookup(struct gmt__symbols *s, const char *module_path, uintptr_t module_base,
			const struct gmt__build_id *want, uintptr_t ip, struct gmt__frame_sym *out, int max)
{
	Dwarf_Die chain[MAX_INLINE_DEPTH], *cu, *fn = NULL, cur, child;
	Dwarf_Addr addr, cubias = 0;
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;
	const char *file = NULL;
	struct cu_index *index;
	struct module *m;
	Dwarf_Line *line;
	int n = 0, lineno = 0, depth = 0, i;

	if (out == NULL || max <= 0 || ip <= module_base)
		return 0;
	m = module_usable(s, module_path, want);
	if (m == NULL)
		return 0;
	/* A return address is one past its call, which may be the first byte of
	 * the next function or of the next line: look up the byte before. */
	addr = (Dwarf_Addr)(ip - 1 - module_base) + m->first_page + m->bias;
	cu = dw->dwfl_module_addrdie(m->mod, addr, &cubias);
	if (cu == NULL)
		return symbol_only(s, m, addr, out);
	addr -= cubias;
	line = dw->dwarf_getsrc_die(cu, addr);
	if (line != NULL) {
		file = dw->dwarf_linesrc(line, NULL, NULL);
		if (dw->dwarf_lineno(line, &lineno) != 0)
			lineno = 0;
	}
	index = cu_index_get(m, cu);
	if (index != NULL)
		fn = cu_index_find(index, addr);
	/* The function, then the inlined instances holding addr, each inside
	 * the last (lexical blocks descended into, not kept). */
	if (fn != NULL) {
		chain[depth++] = *fn;
		cur = *fn;
		while (depth < MAX_INLINE_DEPTH && dw->dwarf_child(&cur, &child) == 0) {
			int tag;

			do {
				tag = dw->dwarf_tag(&child);
				if ((tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block ||
				     tag == DW_TAG_subprogram) && dw->dwarf_haspc(&child, addr) == 1)
					break;
				tag = -1;
			} while (dw->dwarf_siblingof(&child, &child) == 0);
			if (tag == -1)
				break;
			if (tag == DW_TAG_subprogram)
				depth = 0; /* a nested function (GNU C): a function of its own */
			if (tag != DW_TAG_lexical_block)
				chain[depth++] = child;
			cur = child;
		}
	}
	for (i = depth - 1; i >= 0 && n < max; i--) {
		bool inlined = dw->dwarf_tag(&chain[i]) == DW_TAG_inlined_subroutine;
		Dwarf_Attribute attr;
		Dwarf_Word w;

		out[n].function = die_function(s, &chain[i]);
		out[n].file = file;
		out[n].line = lineno;
		out[n].inlined = inlined;
		n++;
		if (!inlined)
			break;
		/* Where this instance was inlined is the caller's position. */
		file = NULL;
		lineno = 0;
		if (dw->dwarf_formudata(dw->dwarf_attr(&chain[i], DW_AT_call_file, &attr), &w) == 0 &&
		    (files != NULL || dw->dwarf_getsrcfiles(cu, &files, &nfiles) == 0) && w < nfiles)
			file = dw->dwarf_filesrc(files, w, NULL, NULL);
		if (dw->dwarf_formudata(dw->dwarf_attr(&chain[i], DW_AT_call_line, &attr), &w) == 0 &&
		    w <= (Dwarf_Word)INT32_MAX)
			lineno = (int)w;
	}
	if (n == 0 && line != NULL) {
		/* Lines but no function around the address (assembly): the ELF
		 * symbol names the function. NOTE: the nearest line before addr
		 * may be another function's, when addr lies in code the debug
		 * information leaves out between a unit's functions (the CRT's
		 * _start linked among them): a line before the symbol's start is
		 * not this code's. */
		GElf_Off offset = 0;
		GElf_Sym sym;
		Dwarf_Addr at = 0;
		const char *name = dw->dwfl_module_addrinfo(m->mod, addr + cubias, &offset, &sym, NULL, NULL, NULL);

		if (name != NULL && dw->dwarf_lineaddr(line, &at) == 0 && at < addr - offset)
			return symbol_only(s, m, addr + cubias, out);
		out[0] = (struct gmt__frame_sym){
			.function = name != NULL ? demangled(s, name) : NULL,
			.file = file,
			.line = lineno,
		};
		n = 1;
	}
	if (n == 0)
		return symbol_only(s, m, addr + cubias, out);
	return n;
}

const char *gmt__symbols_data_name(struct gmt__symbols *s, const char *module_path, uintptr_t module_base,
				   const struct gmt__build_id *want, uintptr_t addr)
{
	struct module *m;
	const char *sym;

	if (addr < module_base)
		return NULL;
	m = module_usable(s, module_path, want);
	if (m == NULL)
		return NULL;
	sym = dw->dwfl_module_addrname(m->mod, (Dwarf_Addr)(addr - module_base) + m->first_page + m->bias);
	return sym != NULL ? demangled(s, sym) : NULL;
}

int gmt__symbols_build_id(struct gmt__symbols *s, const char *module_path, char *hex, size_t len)
{
	struct module *m = module_usable(s, module_path, NULL);

	if (m == NULL) {
		if (hex != NULL && len > 0)
			hex[0] = '\0';
		return -ENOENT;
	}
	return gmt__build_id_hex(&m->id, hex, len);
}
