/* Python frames read from memory without the GIL (pyread.h): the layout of
 * the interpreter found, the table of readable mappings every pointer is
 * checked against, the frame, code, string and bytes readers, and the three
 * line-table formats. */
#define _GNU_SOURCE
#include "record/pyread.h"

#include "record/pylayout.h"
#include "record/pylayout_table.h"
#include "util/map.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const struct gmt__pylayout layouts[] = { GMT_PY_LAYOUTS };

/* Set once by gmt__pyread_setup, before pystack.c publishes (its R1).
 * frame_span: the bytes of a frame that hold every field read. */
static const struct gmt__pylayout *L;
static uintptr_t code_type, unicode_type, bytes_type, frame_type;
static size_t frame_span;
static char setup_why[160];

/* In every default build the object header is a reference count, then the
 * type (a free-threaded build differs: its layouts are refused). */
#define OB_TYPE 8
/* Caps on what one read may take: names are cut, longer tables refused. */
#define NAME_CHARS 1024
#define TABLE_MAX ((size_t)1 << 24)

/* --- readable memory --------------------------------------------------------------- */

/* The process's readable mappings, sorted, adjacent ones merged: rebuilt from
 * /proc/self/maps when a pointer falls outside them (a new thread's malloc
 * arena, a new chunk of a frame stack), at most once per capture: every
 * pointer a capture follows is live, so a second miss is memory that is not
 * what the layout says. Only under pystack.c's lock. NOTE: device files'
 * mappings (/dev/nvidia*: GPU memory and registers mapped by the driver) are
 * left out even when readable: a stray read there may stall or fault. NOTE:
 * kept in pages, not bytes: a word of the tracer's memory equal to a
 * mapping's start would be taken for a pointer by the exit leak scan, which
 * would then read the whole mapping (leaks.c, "bookkeeping"). */
#define PAGE_SHIFT 12
struct range {
	uintptr_t start, end; /* first page, page past the last */
};

static struct range *ranges;
static size_t nranges, ranges_cap;
/* The ranges the last reads fell in: a walk reads a few of them over and
 * over (the frame stack, the code objects' arenas). Cleared by a refresh. */
#define RECENT 4
static struct range recent[RECENT];
static unsigned recent_next;
static char *maps_buf;
static size_t maps_len;
static bool may_refresh;

/* All of /proc/self/maps into maps_buf; its length, or -1. */
static ssize_t maps_read(void)
{
	for (;;) {
		ssize_t n, got = 0;
		int fd;

		if (maps_buf == NULL) {
			maps_len = 64 << 10;
			maps_buf = gmt__map(maps_len);
			if (maps_buf == NULL)
				return -1;
		}
		fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		while ((n = read(fd, maps_buf + got, maps_len - (size_t)got)) > 0)
			got += n;
		close(fd);
		if (n < 0)
			return -1;
		if ((size_t)got < maps_len)
			return got;
		munmap(maps_buf, maps_len); /* full: it may have been cut; twice the room */
		maps_buf = NULL;
		maps_len *= 2;
		if (maps_len > ((size_t)64 << 20))
			return -1;
		maps_buf = gmt__map(maps_len);
		if (maps_buf == NULL)
			return -1;
	}
}

static void ranges_add(uintptr_t start, uintptr_t end)
{
	start >>= PAGE_SHIFT;
	end >>= PAGE_SHIFT;
	if (nranges > 0 && ranges[nranges - 1].end == start) {
		ranges[nranges - 1].end = end;
		return;
	}
	if (nranges == ranges_cap) {
		size_t cap = ranges_cap ? 2 * ranges_cap : 1024;
		struct range *r = gmt__map(cap * sizeof(*r));

		if (r == NULL)
			return;
		if (ranges != NULL) {
			memcpy(r, ranges, nranges * sizeof(*r));
			munmap(ranges, ranges_cap * sizeof(*r));
		}
		ranges = r;
		ranges_cap = cap;
	}
	ranges[nranges++] = (struct range){ start, end };
}

static void maps_refresh(void)
{
	ssize_t len = maps_read();
	char *p, *end;

	if (len < 0)
		return;
	nranges = 0;
	memset(recent, 0, sizeof(recent));
	for (p = maps_buf, end = maps_buf + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *q;
		unsigned long long start, stop;

		if (nl == NULL)
			nl = end;
		start = strtoull(p, &q, 16);
		if (q < nl && *q == '-') {
			stop = strtoull(q + 1, &q, 16);
			/* " rw-p offset dev inode   path" */
			if (q + 1 < nl && q[1] == 'r') {
				char *path = memchr(q, '/', (size_t)(nl - q));

				if (path == NULL || (size_t)(nl - path) < 5 || memcmp(path, "/dev/", 5) != 0)
					ranges_add((uintptr_t)start, (uintptr_t)stop);
			}
		}
		p = nl + 1;
	}
}

static inline bool in_ranges(uintptr_t p, size_t len)
{
	size_t lo = 0, hi = nranges;
	uintptr_t first, last;

	if (len == 0 || p + len < p)
		return len == 0;
	first = p >> PAGE_SHIFT;
	last = (p + len - 1) >> PAGE_SHIFT;
	for (unsigned i = 0; i < RECENT; i++) {
		if (first - recent[i].start < recent[i].end - recent[i].start && last < recent[i].end)
			return true;
	}
	while (lo < hi) { /* the first range starting after p's page */
		size_t mid = lo + (hi - lo) / 2;

		if (ranges[mid].start <= first)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || last >= ranges[lo - 1].end)
		return false;
	recent[recent_next++ % RECENT] = ranges[lo - 1];
	return true;
}

/* Whether [p, p + len) lies in readable memory (pointers from the
 * interpreter's structures are checked before every load). */
static inline bool readable(uintptr_t p, size_t len)
{
	int saved;

	if (p == 0)
		return false;
	if (__builtin_expect(in_ranges(p, len), 1))
		return true;
	if (!may_refresh)
		return false;
	may_refresh = false;
	saved = errno;
	maps_refresh();
	errno = saved;
	return in_ranges(p, len);
}

void gmt__pyread_begin(void)
{
	may_refresh = true;
}

static int rd(uintptr_t addr, void *out, size_t len)
{
	if (!readable(addr, len))
		return -EFAULT;
	memcpy(out, (const void *)addr, len);
	return 0;
}

static int rd_ptr(uintptr_t addr, uintptr_t *out)
{
	return rd(addr, out, sizeof(*out));
}

/* obj is an object of exactly that type. */
static bool is_type(uintptr_t obj, uintptr_t type)
{
	uintptr_t t;

	return obj != 0 && (obj & 7) == 0 && rd_ptr(obj + OB_TYPE, &t) == 0 && t == type;
}

/* --- objects -------------------------------------------------------------------------- */

static size_t put_utf8(char *out, size_t room, uint32_t c)
{
	char b[4];
	size_t n;

	if (c < 0x80) {
		b[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		b[0] = (char)(0xc0 | c >> 6);
		b[1] = (char)(0x80 | (c & 0x3f));
		n = 2;
	} else if (c < 0x10000) {
		b[0] = (char)(0xe0 | c >> 12);
		b[1] = (char)(0x80 | (c >> 6 & 0x3f));
		b[2] = (char)(0x80 | (c & 0x3f));
		n = 3;
	} else {
		if (c > 0x10ffff)
			c = 0xfffd;
		b[0] = (char)(0xf0 | c >> 18);
		b[1] = (char)(0x80 | (c >> 12 & 0x3f));
		b[2] = (char)(0x80 | (c >> 6 & 0x3f));
		b[3] = (char)(0x80 | (c & 0x3f));
		n = 4;
	}
	if (n > room)
		return 0;
	memcpy(out, b, n);
	return n;
}

/* A str object's text as UTF-8 into out[0..len), NUL-terminated, cut to
 * NAME_CHARS characters and to the room. Compact strings only (every name
 * the compiler makes is one). Lone surrogates come out as U+FFFD. */
static int rd_str(uintptr_t s, char *out, size_t len)
{
	int64_t length;
	uint32_t state;
	unsigned kind;
	uintptr_t data;
	size_t i, w = 0, n;

	if (len == 0 || !is_type(s, unicode_type) || rd(s + L->unicode_length, &length, sizeof(length)) != 0 ||
	    rd(s + L->unicode_state, &state, sizeof(state)) != 0)
		return -EFAULT;
	/* state: interned:2, kind:3, compact:1, ascii:1 from the lowest bit, in
	 * every version read here. */
	kind = state >> 2 & 7;
	if (length < 0 || !(state >> 5 & 1) || (kind != 1 && kind != 2 && kind != 4))
		return -EFAULT;
	n = (size_t)length < NAME_CHARS ? (size_t)length : NAME_CHARS;
	data = s + (state >> 6 & 1 ? L->ascii_size : L->compact_size);
	if (!readable(data, n * kind))
		return -EFAULT;
	for (i = 0; i < n; i++) {
		uint32_t c;
		size_t put;

		if (kind == 1) {
			c = ((const uint8_t *)data)[i];
		} else if (kind == 2) {
			uint16_t u;

			memcpy(&u, (const void *)(data + 2 * i), 2);
			c = u;
		} else {
			memcpy(&c, (const void *)(data + 4 * i), 4);
		}
		if (c >= 0xd800 && c < 0xe000)
			c = 0xfffd;
		put = put_utf8(out + w, len - 1 - w, c);
		if (put == 0)
			break;
		w += put;
	}
	out[w] = '\0';
	return 0;
}

/* A bytes object's data and size. */
static int rd_bytes(uintptr_t b, const uint8_t **data, size_t *size)
{
	int64_t n;

	if (!is_type(b, bytes_type) || rd(b + L->var_size, &n, sizeof(n)) != 0 || n < 0 || (size_t)n > TABLE_MAX ||
	    !readable(b + L->bytes_data, (size_t)n))
		return -EFAULT;
	*data = (const uint8_t *)(b + L->bytes_data);
	*size = (size_t)n;
	return 0;
}

/* --- frames -------------------------------------------------------------------------- */

int gmt__pyread_first(uintptr_t tstate, uintptr_t *frame)
{
	uintptr_t p;

	if (rd_ptr(tstate + L->tstate_frame, &p) != 0)
		return -EFAULT;
	if (L->frame_kind == GMT_PY_FRAME_INTERP && L->version < 0x030d0000 && p != 0 &&
	    rd_ptr(p + L->cframe_current, &p) != 0)
		return -EFAULT;
	*frame = p;
	return 0;
}

/* A field of an object whose whole span was checked readable. */
#define FIELD(type, base, off) (*(const type *)(const void *)((base) + (off)))

/* The code object at `code` (its fixed part checked readable and its type
 * the interpreter's code type) and its key: its names, file and line table —
 * distinct immutable objects it holds — and first line, hashed; never 0. */
static int code_at(uintptr_t code, uint64_t *key)
{
	uint64_t h = 0xcbf29ce484222325ull;

	if ((code & 7) != 0 || !readable(code, L->code_basicsize) || FIELD(uintptr_t, code, OB_TYPE) != code_type)
		return -EFAULT;
	h = (h ^ FIELD(uintptr_t, code, L->code_name)) * 0x100000001b3ull;
	if (L->code_qualname != 0)
		h = (h ^ FIELD(uintptr_t, code, L->code_qualname)) * 0x100000001b3ull;
	h = (h ^ FIELD(uintptr_t, code, L->code_filename)) * 0x100000001b3ull;
	h = (h ^ FIELD(uintptr_t, code, L->code_linetable)) * 0x100000001b3ull;
	h = (h ^ FIELD(uint32_t, code, L->code_firstlineno)) * 0x100000001b3ull;
	*key = h | 1;
	return 0;
}

static int frame_object(uintptr_t frame, struct gmt__pyframe *out)
{
	int lasti, lineno;

	if ((frame & 7) != 0 || !readable(frame, frame_span) || FIELD(uintptr_t, frame, OB_TYPE) != frame_type)
		return -EFAULT;
	out->previous = FIELD(uintptr_t, frame, L->frame_previous);
	out->code = FIELD(uintptr_t, frame, L->frame_code);
	lasti = FIELD(int, frame, L->frame_lasti);
	lineno = FIELD(int, frame, L->frame_lineno);
	/* PyFrame_GetLineNumber: a traced frame's own line, else the code's
	 * line for f_lasti (bytes in 3.9, code units in 3.10). */
	out->addr = L->linetable_kind == GMT_PY_LNOTAB ? lasti : lasti * 2;
	out->traced_line = FIELD(uintptr_t, frame, L->frame_trace) != 0 && lineno > 0 ? lineno : 0;
	return code_at(out->code, &out->key);
}

static int interpreter_frame(uintptr_t frame, struct gmt__pyframe *out)
{
	intptr_t lasti;
	uint8_t owner;

	if ((frame & 7) != 0 || !readable(frame, frame_span))
		return -EFAULT;
	out->previous = FIELD(uintptr_t, frame, L->frame_previous);
	out->code = FIELD(uintptr_t, frame, L->frame_code) & ~(uintptr_t)L->code_tag_bits;
	owner = FIELD(uint8_t, frame, L->frame_owner);
	/* A frame of the interpreter's own (3.14+) or an entry frame on the C
	 * stack (3.12+) is no Python frame, nor is one whose code has not
	 * started (_PyFrame_IsIncomplete): the interpreter's own walk skips
	 * them all. */
	if (owner >= L->owner_native) {
		out->skip = true;
		return 0;
	}
	if (code_at(out->code, &out->key) != 0)
		return -EFAULT;
	lasti = ((intptr_t)FIELD(uintptr_t, frame, L->frame_instr) - (intptr_t)(out->code + L->code_bytecode)) / 2;
	if (lasti < -1 || lasti >= FIELD(int64_t, out->code, L->var_size))
		return -EFAULT;
	out->skip = owner != L->owner_generator && lasti < FIELD(int32_t, out->code, L->code_firsttraceable);
	out->addr = (int)lasti * 2;
	return 0;
}

int gmt__pyread_frame(uintptr_t frame, struct gmt__pyframe *out)
{
	*out = (struct gmt__pyframe){ 0 };
	return L->frame_kind == GMT_PY_FRAME_OBJECTS ? frame_object(frame, out) : interpreter_frame(frame, out);
}

/* --- code objects ------------------------------------------------------------------------ */

int gmt__pyread_code_names(uintptr_t code, char *function, size_t flen, char *file, size_t len)
{
	uintptr_t name, path;

	if (!is_type(code, code_type) || rd_ptr(code + (L->code_qualname ? L->code_qualname : L->code_name), &name) != 0 ||
	    rd_ptr(code + L->code_filename, &path) != 0 || rd_str(name, function, flen) != 0 ||
	    rd_str(path, file, len) != 0)
		return -EFAULT;
	return 0;
}

/* --- line tables ------------------------------------------------------------------------ */

/* 3.9's co_lnotab (PyCode_Addr2Line of 3.9). */
static int line_lnotab(const uint8_t *p, size_t size, int first, int addr)
{
	int line = first, at = 0;

	for (size_t i = 0; i + 1 < size; i += 2) {
		at += p[i];
		if (at > addr)
			break;
		line += (int8_t)p[i + 1];
	}
	return line;
}

/* 3.10's co_linetable: ranges [start, end) of addresses, each with a line
 * or none (-128), as _PyCode_CheckLineNumber walks them. */
static int line_310(const uint8_t *p, size_t size, int first, int addr)
{
	int end = 0, line = first, ar_line = -1;
	size_t i = 0;

	if (addr < 0)
		return first;
	while (end <= addr) {
		if (i + 1 >= size)
			return -1;
		end += p[i];
		if ((int8_t)p[i + 1] == -128) {
			ar_line = -1;
		} else {
			line += (int8_t)p[i + 1];
			ar_line = line;
		}
		i += 2;
	}
	return ar_line;
}

static unsigned varint(const uint8_t *p, size_t size, size_t *i)
{
	unsigned v = 0, shift = 0;
	uint8_t b;

	do {
		if (*i >= size || shift > 28)
			return 0;
		b = p[(*i)++];
		v |= (unsigned)(b & 63) << shift;
		shift += 6;
	} while (b & 64);
	return v;
}

static int svarint(const uint8_t *p, size_t size, size_t *i)
{
	unsigned v = varint(p, size, i);

	return v & 1 ? -(int)(v >> 1) : (int)(v >> 1);
}

/* 3.11+'s location table: entries of one byte 1CCCCLLL (code C, L + 1 code
 * units) and their operands; the line of each entry is its delta from the
 * last (PEP 657; Objects/locations.md in CPython's sources). */
static int line_locations(const uint8_t *p, size_t size, int first, int addr)
{
	int end = 0, line = first, ar_line = -1;
	size_t i = 0;

	if (addr < 0)
		return first;
	while (end <= addr) {
		unsigned code;
		size_t at = i;

		if (i >= size || !(p[i] & 128))
			return -1;
		code = p[i] >> 3 & 15;
		i++;
		if (code == 15) {
			ar_line = -1;
		} else {
			if (code == 13 || code == 14)
				line += svarint(p, size, &i);
			else if (code >= 10)
				line += (int)code - 10;
			ar_line = line;
		}
		end += ((p[at] & 7) + 1) * 2;
		while (i < size && !(p[i] & 128))
			i++; /* the columns */
	}
	return ar_line;
}

int gmt__pyread_line(uintptr_t code, int addr, int *line)
{
	const uint8_t *table;
	uintptr_t obj;
	int32_t first;
	size_t size;
	int l;

	if (rd_ptr(code + L->code_linetable, &obj) != 0 || rd(code + L->code_firstlineno, &first, sizeof(first)) != 0 ||
	    rd_bytes(obj, &table, &size) != 0)
		return -EFAULT;
	if (L->linetable_kind == GMT_PY_LNOTAB)
		l = line_lnotab(table, size, first, addr);
	else if (L->linetable_kind == GMT_PY_LINETABLE)
		l = line_310(table, size, first, addr);
	else
		l = line_locations(table, size, first, addr);
	*line = l > 0 ? l : 0;
	return 0;
}

/* --- setup -------------------------------------------------------------------------------- */

static uintptr_t sym(void *handle, const char *name)
{
	return (uintptr_t)dlsym(handle, name);
}

static bool refuse(const char **why, unsigned long version, const char *what)
{
	snprintf(setup_why, sizeof(setup_why), "Python %lu.%lu %s", version >> 24 & 0xff, version >> 16 & 0xff, what);
	*why = setup_why;
	return false;
}

/* The interpreter's version as PY_VERSION_HEX's major and minor, 0 unknown. */
static unsigned long interpreter_version(void *handle)
{
	const unsigned long *hex = (const unsigned long *)sym(handle, "Py_Version");
	const char *(*get)(void);
	unsigned major, minor;
	uintptr_t f;

	if (hex != NULL)
		return *hex & 0xffff0000ul;
	/* Before 3.11: the version string ("3.10.13 (main, ...") */
	f = sym(handle, "Py_GetVersion");
	if (f == 0)
		return 0;
	memcpy(&get, &f, sizeof(get));
	if (sscanf(get(), "%u.%u", &major, &minor) != 2)
		return 0;
	return (unsigned long)major << 24 | (unsigned long)minor << 16;
}

/* 3.13+: the interpreter's _Py_DebugOffsets agree with the layout. */
static bool debug_offsets_agree(void *handle, const struct gmt__pylayout *l)
{
	const struct {
		uint16_t where, want;
	} pairs[] = {
		{ l->dbg_current_frame, l->tstate_frame },     { l->dbg_frame_previous, l->frame_previous },
		{ l->dbg_frame_code, l->frame_code },          { l->dbg_frame_instr, l->frame_instr },
		{ l->dbg_frame_owner, l->frame_owner },        { l->dbg_code_filename, l->code_filename },
		{ l->dbg_code_name, l->code_name },            { l->dbg_code_qualname, l->code_qualname },
		{ l->dbg_code_linetable, l->code_linetable },  { l->dbg_code_firstlineno, l->code_firstlineno },
		{ l->dbg_code_bytecode, l->code_bytecode },
	};
	const char *rt = (const char *)sym(handle, "_PyRuntime");
	uint64_t v;

	if (rt == NULL || memcmp(rt, "xdebugpy", 8) != 0)
		return false;
	memcpy(&v, rt + 8, sizeof(v));
	if ((v & 0xffff0000u) != l->version)
		return false;
	memcpy(&v, rt + l->dbg_free_threaded, sizeof(v));
	if (v != 0)
		return false;
	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		memcpy(&v, rt + pairs[i].where, sizeof(v));
		if (v != pairs[i].want)
			return false;
	}
	return true;
}

bool gmt__pyread_setup(void *handle, const char **why)
{
	unsigned long version = interpreter_version(handle);
	const struct gmt__pylayout *l = NULL;
	int64_t basicsize;

	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
		if (layouts[i].version == version)
			l = &layouts[i];
	}
	if (l == NULL)
		return refuse(why, version, "has no layout here (scripts/py-layouts: 3.9 to 3.14)");
	code_type = sym(handle, "PyCode_Type");
	unicode_type = sym(handle, "PyUnicode_Type");
	bytes_type = sym(handle, "PyBytes_Type");
	frame_type = sym(handle, "PyFrame_Type");
	if (code_type == 0 || unicode_type == 0 || bytes_type == 0 || frame_type == 0)
		return refuse(why, version, "lacks a type object the reader checks against");
	/* A debug or free-threaded build lays objects out otherwise. */
	memcpy(&basicsize, (const void *)(code_type + l->type_basicsize), sizeof(basicsize));
	if (basicsize != l->code_basicsize)
		return refuse(why, version, "is not a default build (its code objects differ in size)");
	if (l->dbg_current_frame != 0 && !debug_offsets_agree(handle, l))
		return refuse(why, version, "publishes debug offsets that disagree with the layout (a "
			      "free-threaded or patched build)");
	frame_span = 0;
	for (size_t i = 0; i < 6; i++) {
		const uint16_t off[] = { OB_TYPE, l->frame_previous, l->frame_code, l->frame_instr, l->frame_trace,
					 l->frame_lasti };
		size_t end = (size_t)off[i] + 8;

		frame_span = end > frame_span ? end : frame_span;
	}
	if ((size_t)l->frame_owner + 1 > frame_span)
		frame_span = (size_t)l->frame_owner + 1;
	if ((size_t)l->frame_lineno + 4 > frame_span)
		frame_span = (size_t)l->frame_lineno + 4;
	L = l;
	return true;
}
