/* Snapshot writing: streams the JSON document of snapshot.h (docs/snapshot-format.md) into
 * a temporary file beside the target through a hand-rolled buffered writer (1M
 * allocations in well under 2 s), then renames it into place without ever
 * replacing a file or following a symlink. */
#define _GNU_SOURCE
#include "report/snapshot.h"

#include "analyze/diagnose.h"
#include "report/json.h"
#include "util/fdwrite.h"
#include "record/modules.h"
#include "tracer/options.h"
#include "record/event.h"
#include "record/pystack.h"
#include "record/stacks.h"
#include "record/tags.h"
#include "analyze/symbols.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* linux/fs.h */
#endif

#define TEMP_TRIES 16

/* ---- collecting and sorting the live set -------------------------------------- */

/* Where an entry goes: 0 "allocations", 1 "vmm.reservations", 2 "vmm.mappings". */
static int section_of(const struct gmt__entry *e)
{
	switch (e->space) {
	case GMT_SPACE_RESERVATION:
		return 1;
	case GMT_SPACE_MAPPING:
		return 2;
	default:
		return 0;
	}
}

struct collect {
	const struct gmt__entry **v;
	size_t n, cap;
};

/* By section, then address, then space. */
static int by_section_address(const void *x, const void *y)
{
	const struct gmt__entry *a = *(const struct gmt__entry *const *)x;
	const struct gmt__entry *b = *(const struct gmt__entry *const *)y;
	int sa = section_of(a), sb = section_of(b);

	if (sa != sb)
		return sa - sb;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return (int)a->space - (int)b->space;
}

/* ---- the set of referenced stack ids ------------------------------------------ */

/* Open addressing over uint32 ids (0 = empty slot), grown at half full: memory
 * proportional to the distinct stacks referenced, not to the live set. */
struct idset {
	uint32_t *v;
	size_t n, cap;
};

static uint32_t id_hash(uint32_t id)
{
	return id * 2654435761u;
}

static int idset_add(struct idset *s, uint32_t id)
{
	size_t i;

	if (id == 0)
		return 0;
	if (2 * (s->n + 1) > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256, j;
		uint32_t *v = calloc(cap, sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		for (j = 0; j < s->cap; j++) {
			if (s->v[j] == 0)
				continue;
			for (i = id_hash(s->v[j]) & (cap - 1); v[i] != 0; i = (i + 1) & (cap - 1))
				;
			v[i] = s->v[j];
		}
		free(s->v);
		s->v = v;
		s->cap = cap;
	}
	for (i = id_hash(id) & (s->cap - 1); s->v[i] != 0; i = (i + 1) & (s->cap - 1)) {
		if (s->v[i] == id)
			return 0;
	}
	s->v[i] = id;
	s->n++;
	return 0;
}

static int by_id(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

/* Packs the ids to the front of s->v, ascending; returns how many. */
static size_t idset_sorted(struct idset *s)
{
	size_t i, n = 0;

	for (i = 0; i < s->cap; i++) {
		if (s->v[i] != 0)
			s->v[n++] = s->v[i];
	}
	if (n > 1)
		qsort(s->v, n, sizeof(*s->v), by_id);
	return n;
}

/* ---- frames: what the loader and libdw know of an address, cached ------------- */

struct frame_info {
	uintptr_t ip;           /* 0 = empty slot */
	const char *module;     /* NULL: dladdr knew nothing */
	const char *function;   /* the loader's name (exported symbols) */
	uintptr_t base;
	size_t sym;             /* its source frames: syms[sym..sym + nsym) of the cache */
	int nsym;               /* 0: libdw knew nothing */
};

/* Source frames kept per address: an inlining depth no real code reaches. */
#define SYMS_PER_ADDRESS 64

/* A module some frame lies in, for the "modules" map. */
struct module_ref {
	const char *path;
	uintptr_t base;
};

/* NOTE: dladdr scans the symbol table of the object, and libdw walks line
 * tables and DIEs, so each lookup costs in proportion to the module's size;
 * stacks share most frames, so each address is looked up once per snapshot. */
struct frame_cache {
	struct frame_info *v;
	size_t n, cap;
	char *exe; /* the main program's absolute path, or NULL */
	struct gmt__symbols *symbols; /* NULL without memory: frames without file and line */
	struct gmt__frame_sym *syms;  /* the source frames of every address looked up */
	size_t nsyms, capsyms;
	struct module_ref *mods;      /* each (path, base) once, in the order first seen */
	size_t nmods, capmods;
	size_t lastmod;               /* the module of the previous lookup */
	/* The module epoch of the stack being resolved (modules.h), and the
	 * frames of modules unloaded since some stack's capture: kept apart,
	 * since their addresses may hold another module now. */
	uint32_t epoch;
	struct gone_frame *gone;
	size_t ngone, capgone;
};

struct gone_frame {
	uint32_t epoch; /* the unload's (tells modules at one address apart) */
	struct frame_info f;
};

static size_t ip_hash(uintptr_t ip)
{
	return (size_t)((ip >> 2) * 0x9e3779b97f4a7c15ull >> 20);
}

/* The slot of ip: its entry, or the empty slot where it would go. The cache
 * is never more than half full, so there is one. */
static struct frame_info *cache_slot(const struct frame_cache *c, uintptr_t ip)
{
	size_t mask = c->cap - 1, i;

	for (i = ip_hash(ip) & mask; c->v[i].ip != 0 && c->v[i].ip != ip; i = (i + 1) & mask)
		;
	return &c->v[i];
}

/* Doubles the cache; without memory it stays as it is (and later addresses
 * go uncached). */
static void cache_grow(struct frame_cache *c)
{
	struct frame_cache bigger = { .cap = c->cap ? 2 * c->cap : 1024 };
	size_t j;

	bigger.v = calloc(bigger.cap, sizeof(*bigger.v));
	if (bigger.v == NULL)
		return;
	for (j = 0; j < c->cap; j++) {
		if (c->v[j].ip != 0)
			*cache_slot(&bigger, c->v[j].ip) = c->v[j];
	}
	free(c->v);
	c->v = bigger.v;
	c->cap = bigger.cap;
}

/* Adds f's module to the map unless it is there; without memory it is left
 * out (its frames still name it). */
static void module_note(struct frame_cache *c, const struct frame_info *f)
{
	size_t i;

	if (f->module == NULL || f->module[0] == '\0')
		return;
	if (c->lastmod < c->nmods && c->mods[c->lastmod].base == f->base &&
	    strcmp(c->mods[c->lastmod].path, f->module) == 0)
		return;
	for (i = 0; i < c->nmods; i++) {
		if (c->mods[i].base == f->base && strcmp(c->mods[i].path, f->module) == 0) {
			c->lastmod = i;
			return;
		}
	}
	if (c->nmods == c->capmods) {
		size_t cap = c->capmods ? 2 * c->capmods : 32;
		struct module_ref *v = realloc(c->mods, cap * sizeof(*v));

		if (v == NULL)
			return;
		c->mods = v;
		c->capmods = cap;
	}
	c->mods[c->nmods] = (struct module_ref){ .path = f->module, .base = f->base };
	c->lastmod = c->nmods++;
}

/* The source frames of f (from libdw) into the cache's pool; none without
 * memory or when libdw knows nothing of the address. */
static void frame_symbolise(struct frame_cache *c, struct frame_info *f)
{
	struct gmt__frame_sym tmp[SYMS_PER_ADDRESS];
	int n;

	/* NOTE: a name without a slash is no file (the vDSO's "linux-vdso.so.1"):
	 * libdw would open whatever the current directory holds by that name. */
	if (c->symbols == NULL || f->module == NULL || strchr(f->module, '/') == NULL)
		return;
	n = gmt__symbols_lookup(c->symbols, f->module, f->base, f->ip, tmp,
				(int)(sizeof(tmp) / sizeof(tmp[0])));
	if (n <= 0)
		return;
	if (c->capsyms - c->nsyms < (size_t)n) {
		size_t cap = c->capsyms ? 2 * c->capsyms : 1024;
		struct gmt__frame_sym *v;

		while (cap - c->nsyms < (size_t)n)
			cap *= 2;
		v = realloc(c->syms, cap * sizeof(*v));
		if (v == NULL)
			return;
		c->syms = v;
		c->capsyms = cap;
	}
	memcpy(&c->syms[c->nsyms], tmp, (size_t)n * sizeof(*tmp));
	f->sym = c->nsyms;
	f->nsym = n;
	c->nsyms += (size_t)n;
}

static void frame_resolve(struct frame_cache *c, struct frame_info *f, uintptr_t ip)
{
	struct link_map *map = NULL;
	Dl_info info;

	memset(f, 0, sizeof(*f));
	f->ip = ip;
	/* A return address is one past the call, which may be the first byte of
	 * the next function: look up the byte before (heaptrack does the same). */
	if (ip == 0 || dladdr1((void *)(ip - 1), &info, (void **)&map, RTLD_DL_LINKMAP) == 0)
		return;
	f->module = info.dli_fname;
	f->function = info.dli_sname;
	f->base = (uintptr_t)info.dli_fbase;
	/* NOTE: for the main program the loader's name is argv[0] (maybe
	 * relative, maybe rewritten by the program); its link map has the empty
	 * name, and /proc/self/exe has the real path. */
	if (map != NULL && map->l_name[0] == '\0' && c->exe != NULL)
		f->module = c->exe;
	module_note(c, f);
	frame_symbolise(c, f);
}

/* The frame at ip of a module unloaded after the current stack's capture:
 * named from the module's file by its path and load base, never by what the
 * loader maps at ip now. */
static const struct frame_info *gone_lookup(struct frame_cache *c, uintptr_t ip, const struct gmt__unloaded *u,
					    struct frame_info *spare)
{
	struct frame_info *f = spare;

	for (size_t i = 0; i < c->ngone; i++) {
		if (c->gone[i].f.ip == ip && c->gone[i].epoch == u->epoch)
			return &c->gone[i].f;
	}
	if (c->ngone == c->capgone) {
		size_t cap = c->capgone ? 2 * c->capgone : 16;
		struct gone_frame *v = realloc(c->gone, cap * sizeof(*v));

		if (v != NULL) {
			c->gone = v;
			c->capgone = cap;
		}
	}
	if (c->ngone < c->capgone) {
		c->gone[c->ngone].epoch = u->epoch;
		f = &c->gone[c->ngone++].f;
	}
	memset(f, 0, sizeof(*f));
	f->ip = ip;
	f->module = u->path;
	f->base = u->base;
	module_note(c, f);
	frame_symbolise(c, f);
	return f;
}

/* What the loader knows of ip: from the cache, else resolved (into the cache,
 * or into *spare when the cache has no room or ip is 0). A frame of a module
 * unloaded since the stack's capture comes from gone_lookup. */
static const struct frame_info *frame_lookup(struct frame_cache *c, uintptr_t ip,
					     struct frame_info *spare)
{
	struct frame_info *f = spare;
	struct gmt__unloaded u;

	if (ip != 0 && gmt__modules_unloaded(ip, c->epoch, &u))
		return gone_lookup(c, ip, &u, spare);

	if (ip != 0 && c->cap != 0) {
		f = cache_slot(c, ip);
		if (f->ip == ip)
			return f;
	}
	if (ip != 0 && 2 * (c->n + 1) > c->cap) {
		cache_grow(c);
		f = c->cap != 0 ? cache_slot(c, ip) : spare;
	}
	if (ip == 0 || 2 * (c->n + 1) > c->cap)
		f = spare;
	else
		c->n++;
	frame_resolve(c, f, ip);
	return f;
}

/* ---- the document ------------------------------------------------------------- */

/* One frame object: the address's loader facts, and one source frame (sym,
 * or NULL: the loader's function name and no position). */
static void out_frame(struct gmt__json *o, const struct frame_info *f, const struct gmt__frame_sym *sym,
		      const char *function, bool first)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, first ? "{\"address\": " : ", {\"address\": ");
	p = gmt__put_hex(p, f->ip);
	if (f->module != NULL) {
		p = gmt__put_lit(p, ", \"offset\": ");
		p = gmt__put_hex(p, f->ip - f->base);
	}
	p = gmt__put_lit(p, ", \"module\": ");
	gmt__json_commit(o, p);
	gmt__json_string(o, f->module != NULL && f->module[0] != '\0' ? f->module : "?");
	gmt__json_str(o, ", \"function\": ");
	gmt__json_string_or_null(o, function);
	gmt__json_str(o, ", \"file\": ");
	gmt__json_string_or_null(o, sym != NULL ? sym->file : NULL);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"line\": ");
	p = sym != NULL && sym->line > 0 ? gmt__put_i64(p, sym->line) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, sym != NULL && sym->inlined ? ", \"inlined\": true" : ", \"inlined\": false");
	p = gmt__put_lit(p, ", \"python\": false}");
	gmt__json_commit(o, p);
}

/* One Python frame (pystack.h): no address or module, a function, file and
 * line, and the marker. */
static void out_py_frame(struct gmt__json *o, uintptr_t word, bool first)
{
	const char *function = NULL, *file = NULL;
	int line = 0;
	char *p;

	(void)gmt__py_frame(word, &function, &file, &line);
	gmt__json_str(o, first ? "{\"address\": null, \"module\": null, \"function\": "
			 : ", {\"address\": null, \"module\": null, \"function\": ");
	gmt__json_string_or_null(o, function);
	gmt__json_str(o, ", \"file\": ");
	gmt__json_string_or_null(o, file);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"line\": ");
	p = line > 0 ? gmt__put_i64(p, line) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"inlined\": false, \"python\": true}");
	gmt__json_commit(o, p);
}

/* Where a stack's frames go, one at a time, innermost first: a native frame
 * (the loader's facts, one source frame or NULL, the function name to show)
 * or a Python frame (pystack.h's word). */
struct frame_sink {
	void (*native)(void *ctx, const struct frame_info *f, const struct gmt__frame_sym *sym,
		       const char *function);
	void (*python)(void *ctx, uintptr_t word);
	void *ctx;
};

/* One address as its source frames, innermost first (several where code was
 * inlined), or as one frame the loader names. */
static void sink_native(const struct frame_sink *k, struct frame_cache *cache, uintptr_t ip)
{
	struct frame_info spare;
	const struct frame_info *f = frame_lookup(cache, ip, &spare);

	if (f->nsym == 0) {
		k->native(k->ctx, f, NULL, f->function);
		return;
	}
	for (int i = 0; i < f->nsym; i++) {
		const struct gmt__frame_sym *sym = &cache->syms[f->sym + (size_t)i];
		const char *function = sym->function;

		/* The real function (the last) is what the loader names too. */
		if (function == NULL && !sym->inlined)
			function = f->function;
		k->native(k->ctx, f, sym, function);
	}
}

/* The JSON frames array's sink. */
struct json_frames {
	struct gmt__json *o;
	bool first;
};

static void json_native(void *ctx, const struct frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct json_frames *j = ctx;

	out_frame(j->o, f, sym, function, j->first);
	j->first = false;
}

static void json_python(void *ctx, uintptr_t word)
{
	struct json_frames *j = ctx;

	out_py_frame(j->o, word, j->first);
	j->first = false;
}

/* Whether the native frame at ip is the interpreter's evaluation loop, by
 * the loader's name or the real function libdw names. */
static bool is_eval_frame(struct frame_cache *cache, uintptr_t ip)
{
	struct frame_info spare;
	const struct frame_info *f = frame_lookup(cache, ip, &spare);

	if (gmt__py_is_eval_function(f->function))
		return true;
	return f->nsym > 0 && gmt__py_is_eval_function(cache->syms[f->sym + (size_t)f->nsym - 1].function);
}

/* A run of the native stack that Python frames stand in for: from one
 * evaluation-loop frame to another with only interpreter frames between. */
struct py_span {
	int first, last; /* native frame indices, both loop frames */
	int loops;       /* loop frames in it */
	int take;        /* Python frames placed there */
};

/* Splits the nn native frames into spans; returns how many (at most nn). */
static int python_spans(struct frame_cache *cache, const uintptr_t *ips, int nn, struct py_span *spans)
{
	uintptr_t base = gmt__py_interpreter_base();
	int k = 0, since = -1; /* since: the last loop frame, while only interpreter frames followed */

	for (int i = 0; i < nn; i++) {
		struct frame_info spare;

		if (is_eval_frame(cache, ips[i])) {
			if (since >= 0) {
				spans[k - 1].last = i;
				spans[k - 1].loops++;
			} else {
				spans[k++] = (struct py_span){ .first = i, .last = i, .loops = 1 };
			}
			since = i;
		} else if (since >= 0 && (base == 0 || frame_lookup(cache, ips[i], &spare)->base != base)) {
			since = -1; /* a frame outside the interpreter: C called back into Python */
		}
	}
	return k;
}

/* Shares the np Python frames (innermost first) among the spans.
 * NOTE: the public C API does not say which Python frames one native loop
 * call runs. Up to 3.10 it runs exactly one, so each span takes as many as
 * it has loop frames, and any surplus (native frames cut at the depth limit)
 * goes to the outermost span. From 3.11 Python-to-Python calls run inline and
 * one loop call runs a chain: each span takes one frame per loop frame and
 * the innermost span takes the surplus — exact when C calls back into Python
 * nowhere, or only one frame deep (the usual shapes: Python code calling an
 * extension that allocates, a thread's entry), approximate otherwise. */
static void python_share(struct py_span *spans, int k, int np)
{
	int left = np;

	for (int j = 0; j < k; j++) {
		spans[j].take = spans[j].loops < left ? spans[j].loops : left;
		left -= spans[j].take;
	}
	if (left > 0)
		spans[gmt__py_frame_per_eval() ? k - 1 : 0].take += left;
}

/* Where the Python frames go when no native frame is the evaluation loop
 * (an interpreter without symbols): before the innermost frame in the
 * interpreter, else after every native frame. */
static int python_insertion(struct frame_cache *cache, const uintptr_t *ips, int nn)
{
	uintptr_t base = gmt__py_interpreter_base();

	for (int i = 0; base != 0 && i < nn; i++) {
		struct frame_info spare;

		if (frame_lookup(cache, ips[i], &spare)->base == base)
			return i;
	}
	return nn;
}

static void sink_python(const struct frame_sink *k, const uintptr_t *words, int n)
{
	for (int i = 0; i < n; i++)
		k->python(k->ctx, words[i]);
}

/* A stack's frames, innermost first: its native frames, with its Python
 * frames (stored after them) in place of the interpreter's evaluation loop
 * and the interpreter frames between loop frames. */
static void sink_frames(const struct frame_sink *k, struct frame_cache *cache, const uintptr_t *ips, int n)
{
	struct py_span spans[GMT_STACK_MAX_DEPTH]; /* at most one per native frame */
	int nn = 0, np, nspans, at, j = 0, py = 0;

	while (nn < n && gmt__word_is_native(ips[nn]))
		nn++;
	np = n - nn;
	nspans = np > 0 ? python_spans(cache, ips, nn, spans) : 0;
	if (np > 0 && nspans == 0) {
		at = python_insertion(cache, ips, nn);
		for (int i = 0; i < nn; i++) {
			if (i == at)
				sink_python(k, ips + nn, np);
			sink_native(k, cache, ips[i]);
		}
		if (at == nn)
			sink_python(k, ips + nn, np);
		return;
	}
	python_share(spans, nspans, np);
	for (int i = 0; i < nn; i++) {
		while (j < nspans && spans[j].last < i)
			j++;
		if (j < nspans && i >= spans[j].first && spans[j].take > 0) {
			if (i == spans[j].first) {
				sink_python(k, ips + nn + py, spans[j].take);
				py += spans[j].take;
			}
			continue;
		}
		sink_native(k, cache, ips[i]);
	}
}

static void out_frames(struct gmt__json *o, struct frame_cache *cache, const uintptr_t *ips, int n)
{
	struct json_frames j = { o, true };
	struct frame_sink k = { json_native, json_python, &j };

	sink_frames(&k, cache, ips, n);
}

/* The "modules" map: each module a frame lies in, with its load base and GNU
 * build-id, so that the addresses can be symbolised again offline. */
static void out_modules(struct gmt__json *o, struct frame_cache *cache)
{
	char id[256];
	size_t i;

	gmt__json_str(o, " \"modules\": [");
	for (i = 0; i < cache->nmods; i++) {
		const struct module_ref *m = &cache->mods[i];
		char *p;

		gmt__json_str(o, i ? ",\n  {\"path\": " : "\n  {\"path\": ");
		gmt__json_string(o, m->path);
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"base\": ");
		p = gmt__put_hex(p, m->base);
		p = gmt__put_lit(p, ", \"build_id\": ");
		gmt__json_commit(o, p);
		if (strchr(m->path, '/') != NULL &&
		    gmt__symbols_build_id(cache->symbols, m->path, id, sizeof(id)) == 0)
			gmt__json_string(o, id);
		else
			gmt__json_str(o, "null");
		gmt__json_str(o, "}");
	}
	gmt__json_str(o, cache->nmods > 0 ? "\n ]\n" : "]\n");
}

/* The runtime call that led to the driver (the label docs/tracing.md describes):
 * the outermost frame of the innermost run of frames in a shared cudart — the
 * function the program called, "cudaMalloc". NULL when no shared cudart is on
 * the stack (a static one exports no name to go by).
 * NOTE: derived here, from the stack, rather than by interposing cudaMalloc &c.:
 * a hook on those must call the caller's own cudart, which a return address
 * cannot identify reliably (tail calls; a cudart loaded RTLD_LOCAL is invisible
 * to RTLD_NEXT; several copies may be loaded), and a wrong guess would send the
 * program's allocation to another runtime instance. */
static const char *runtime_call(struct frame_cache *cache, const uintptr_t *ips, int n)
{
	const char *name = NULL;

	for (int i = 0; i < n && gmt__word_is_native(ips[i]); i++) {
		struct frame_info spare;
		const struct frame_info *f = frame_lookup(cache, ips[i], &spare);
		const char *file = f->module != NULL ? strrchr(f->module, '/') : NULL;

		file = file != NULL ? file + 1 : f->module;
		if (file == NULL || strncmp(file, "libcudart", 9) != 0) {
			if (name != NULL)
				break; /* left the runtime: the last name seen is its entry */
			continue;
		}
		if (f->function != NULL && strncmp(f->function, "cuda", 4) == 0)
			name = f->function;
	}
	return name;
}

/* The oom report's top sites: the sites with the most live bytes (ids,
 * UINT32_MAX: none), their bytes and counts, and where each is, in words,
 * from its stack. Sites with the same words (different callers further out)
 * are shown as one: REPORT_SITES are labelled for REPORT_SHOWN lines. */
#define REPORT_SITES 16
#define REPORT_SHOWN 3
struct report {
	int ntop;
	uint32_t top[REPORT_SITES];
	uint64_t bytes[REPORT_SITES], count[REPORT_SITES];
	char where[REPORT_SITES][192];
};

static const char *base_name(const char *path)
{
	const char *slash = path != NULL ? strrchr(path, '/') : NULL;

	return slash != NULL ? slash + 1 : path;
}

/* cudaMalloc, cuMemAlloc_v2: a name of CUDA's own API. */
static bool is_cuda_name(const char *name)
{
	if (name == NULL)
		return false;
	return strncmp(name, "cuda", 4) == 0 || (strncmp(name, "cu", 2) == 0 && name[2] >= 'A' && name[2] <= 'Z');
}

/* Where a stack allocates, for a human: its innermost Python frame, else its
 * innermost native frame outside the CUDA libraries and the tracer. */
static void site_label(struct frame_cache *cache, const uintptr_t *ips, int n, char *buf, size_t len)
{
	int nn = 0;

	snprintf(buf, len, "an unknown place");
	while (nn < n && gmt__word_is_native(ips[nn]))
		nn++;
	if (nn < n && gmt__word_is_python(ips[nn])) {
		const char *function = NULL, *file = NULL;
		int line = 0;

		(void)gmt__py_frame(ips[nn], &function, &file, &line);
		snprintf(buf, len, "%s (%s:%d)", function != NULL ? function : "?",
			 file != NULL ? base_name(file) : "?", line);
		return;
	}
	for (int i = 0; i < nn; i++) {
		struct frame_info spare;
		const struct frame_info *f = frame_lookup(cache, ips[i], &spare);
		const char *mod = base_name(f->module);
		const struct gmt__frame_sym *sym = f->nsym > 0 ? &cache->syms[f->sym] : NULL;
		const char *function = sym != NULL && sym->function != NULL ? sym->function : f->function;

		/* A shared CUDA library, or a static runtime's entry point. */
		if ((mod != NULL && (strncmp(mod, "libcuda", 7) == 0 || strncmp(mod, "libgpumemtrace", 14) == 0)) ||
		    is_cuda_name(function) || is_cuda_name(f->function))
			continue;
		if (sym != NULL && sym->file != NULL && sym->line > 0)
			snprintf(buf, len, "%s (%s:%d)", function != NULL ? function : "?", base_name(sym->file),
				 sym->line);
		else if (function != NULL)
			snprintf(buf, len, "%s (%s)", function, mod != NULL ? mod : "?");
		else
			snprintf(buf, len, "%s+0x%llx", mod != NULL ? mod : "?",
				 (unsigned long long)(f->ip - f->base));
		return;
	}
}

static void cache_open(struct frame_cache *cache)
{
	ssize_t len;

	memset(cache, 0, sizeof(*cache));
	cache->exe = malloc(PATH_MAX);
	len = cache->exe != NULL ? readlink("/proc/self/exe", cache->exe, PATH_MAX - 1) : -1;
	if (len > 0) {
		cache->exe[len] = '\0';
	} else {
		free(cache->exe);
		cache->exe = NULL;
	}
	cache->symbols = gmt__symbols_new();
}

static void cache_close(struct frame_cache *cache)
{
	free(cache->gone);
	gmt__symbols_free(cache->symbols);
	free(cache->syms);
	free(cache->mods);
	free(cache->v);
	free(cache->exe);
}

struct leak_work;
static void leak_stack_seen(struct leak_work *lw, struct frame_cache *cache, uint32_t id, const uintptr_t *ips,
			    int n);

/* The "stacks" array and the "modules" map. Resolving frames takes the dynamic
 * loader's lock (dladdr) and opens files (libdw): the caller's lock is long
 * released (snapshot.h). The leak check (lw, may be NULL) matches its rules
 * on the frames on the way. */
static void out_stacks(struct gmt__json *o, struct frame_cache *cache, struct idset *ids, struct report *rep,
		       struct leak_work *lw)
{
	size_t i, n = idset_sorted(ids);

	gmt__json_str(o, " \"stacks\": [");
	for (i = 0; i < n; i++) {
		int depth = 0, ntags;
		const uintptr_t *ips = gmt__stack_get(ids->v[i], &depth);
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		cache->epoch = gmt__stack_epoch(ids->v[i]);
		p = gmt__put_lit(p, i ? ",\n  {\"id\": " : "\n  {\"id\": ");
		p = gmt__put_u64(p, ids->v[i]);
		p = gmt__put_lit(p, ", \"runtime_call\": ");
		gmt__json_commit(o, p);
		gmt__json_string_or_null(o, ips != NULL ? runtime_call(cache, ips, depth) : NULL);
		/* Region tags come last (stacks.h), innermost last. */
		for (ntags = 0; ips != NULL && ntags < depth && gmt__word_is_tag(ips[depth - 1 - ntags]); ntags++)
			;
		gmt__json_str(o, ", \"tags\": [");
		for (int t = 0; t < ntags; t++) {
			const char *name = gmt__tag_name((uint32_t)ips[depth - ntags + t]);

			if (t > 0)
				gmt__json_str(o, ", ");
			gmt__json_string(o, name != NULL ? name : "?");
		}
		gmt__json_str(o, "], \"frames\": [");
		if (ips != NULL)
			out_frames(o, cache, ips, depth - ntags);
		gmt__json_str(o, "]}");
		for (int k = 0; ips != NULL && k < rep->ntop; k++) {
			if (rep->top[k] == ids->v[i])
				site_label(cache, ips, depth - ntags, rep->where[k], sizeof(rep->where[k]));
		}
		if (lw != NULL)
			leak_stack_seen(lw, cache, ids->v[i], ips, ips != NULL ? depth - ntags : 0);
	}
	gmt__json_str(o, n > 0 ? "\n ],\n" : "],\n");
	out_modules(o, cache);
}

/* The fields every record of the live table carries. */
static char *put_entry_common(char *p, const struct gmt__entry *e)
{
	p = gmt__put_lit(p, "{\"address\": ");
	p = gmt__put_hex(p, e->addr);
	p = gmt__put_lit(p, ", \"size\": ");
	p = gmt__put_u64(p, e->size);
	p = gmt__put_lit(p, ", \"device\": ");
	p = gmt__put_i64(p, e->device);
	return p;
}

static char *put_entry_origin(char *p, const struct gmt__entry *e, const char *api)
{
	p = gmt__put_lit(p, ", \"api\": ");
	p = gmt__put_lit(p, api);
	p = gmt__put_lit(p, ", \"thread\": ");
	p = gmt__put_u64(p, e->tid);
	p = gmt__put_lit(p, ", \"time_ns\": ");
	p = gmt__put_u64(p, e->time_ns);
	p = gmt__put_lit(p, ", \"stack\": ");
	p = gmt__put_u64(p, e->stack);
	return p;
}

/* The api names as JSON strings ("\"cuMemAlloc_v2\""), escaped once. */
struct api_table {
	char **v;
	int n;
	size_t longest;
};

static int api_table_init(struct api_table *t, const struct gmt__snapshot *s)
{
	int i;

	t->n = s->napi > 0 ? s->napi : 0;
	t->longest = sizeof("\"unknown\"");
	t->v = calloc((size_t)t->n + 1, sizeof(*t->v));
	if (t->v == NULL)
		return -ENOMEM;
	for (i = 0; i < t->n; i++) {
		const char *name = s->api_names[i] != NULL ? s->api_names[i] : "unknown";
		json_t *j = json_string(name);
		size_t len;

		if (j == NULL)
			j = json_string("unknown");
		t->v[i] = j != NULL ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
		json_decref(j);
		if (t->v[i] == NULL)
			return -ENOMEM;
		len = strlen(t->v[i]);
		if (len > t->longest)
			t->longest = len;
	}
	return 0;
}

static void api_table_free(struct api_table *t)
{
	int i;

	for (i = 0; t->v != NULL && i < t->n; i++)
		free(t->v[i]);
	free(t->v);
}

static const char *api_name(const struct api_table *t, unsigned api)
{
	return api < (unsigned)t->n ? t->v[api] : "\"unknown\"";
}

static void out_entry(struct gmt__json *o, const struct gmt__entry *e, const struct api_table *apis,
		      bool first)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES + apis->longest);

	p = gmt__put_lit(p, first ? "\n  " : ",\n  ");
	p = put_entry_common(p, e);
	switch (e->space) {
	case GMT_SPACE_RESERVATION:
	case GMT_SPACE_MAPPING:
		break;
	default:
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name(e->kind));
		p = gmt__put_lit(p, "\"");
		break;
	}
	switch (e->space) {
	case GMT_SPACE_HANDLE:
		p = gmt__put_lit(p, ", \"refs\": ");
		p = gmt__put_u64(p, e->refs);
		p = gmt__put_lit(p, ", \"mappings\": ");
		p = gmt__put_u64(p, e->aux);
		break;
	case GMT_SPACE_MAPPING:
		p = gmt__put_lit(p, ", \"handle\": ");
		p = gmt__put_hex(p, e->link);
		p = gmt__put_lit(p, ", \"offset\": ");
		p = gmt__put_u64(p, e->aux);
		break;
	default:
		p = gmt__put_lit(p, ", \"seq\": ");
		p = gmt__put_u64(p, e->link);
		break;
	}
	p = put_entry_origin(p, e, api_name(apis, e->api));
	*p++ = '}';
	gmt__json_commit(o, p);
}

/* Writes the entries v[0..n) of one section as the elements of a JSON array,
 * and adds their stacks to ids. */
static int out_section(struct gmt__json *o, const struct gmt__entry *const *v, size_t n,
		       const struct api_table *apis, struct idset *ids)
{
	size_t i;
	int r;

	for (i = 0; i < n && o->err == 0; i++) {
		out_entry(o, v[i], apis, i == 0);
		r = idset_add(ids, v[i]->stack);
		if (r < 0)
			return r;
	}
	if (n > 0)
		gmt__json_str(o, "\n ");
	return 0;
}

/* ---- what the snapshot derives from the live set --------------------------------- */

/* Per device of the snapshot: page occupancy and live bytes by kind; for an
 * oom snapshot, the diagnosis of the failing device. */
#define SIZE_CLASSES 64
struct view {
	struct gmt__pages pages[GMT_SNAPSHOT_MAX_DEVICES];
	uint64_t kinds[GMT_SNAPSHOT_MAX_DEVICES][GMT_KIND_COUNT];
	/* live allocations by size class [2^k, 2^(k+1)): count and bytes */
	uint64_t class_count[GMT_SNAPSHOT_MAX_DEVICES][SIZE_CLASSES];
	uint64_t class_bytes[GMT_SNAPSHOT_MAX_DEVICES][SIZE_CLASSES];
	bool have_diagnosis;
	struct gmt__diag_input diag_in;
	struct gmt__diagnosis diag;
	uint32_t growth_ids[8]; /* the largest growing sites on the failing device */
	int ngrowth_ids;
};

/* Page occupancy of one device, built from its allocations in address order. */
struct page_walk {
	uint64_t page; /* the page being filled, valid when open */
	uint64_t used; /* its bytes covered so far */
	uint64_t end;  /* where the last allocation in it ends */
	bool open;
};

static void hole(struct gmt__pages *pg, uint64_t bytes)
{
	if (bytes > pg->largest_hole)
		pg->largest_hole = bytes;
}

static void page_close(struct gmt__pages *pg, struct page_walk *w)
{
	if (!w->open)
		return;
	pg->pages++;
	if (w->used < pg->granularity) {
		hole(pg, (w->page + 1) * pg->granularity - w->end);
		pg->partial++;
		pg->stranded_bytes += pg->granularity - w->used;
		pg->histogram[w->used * 4 / pg->granularity]++;
	} else {
		pg->histogram[4]++;
	}
	w->open = false;
}

/* Adds [addr, addr + size) to the walk. Allocations do not overlap and come
 * in address order. */
static void page_add(struct gmt__pages *pg, struct page_walk *w, uint64_t addr, uint64_t size)
{
	uint64_t g = pg->granularity, end = addr + size, first = addr / g, last = (end - 1) / g;

	if (size == 0 || end < addr)
		return;
	if (w->open && w->page != first)
		page_close(pg, w);
	if (!w->open) {
		w->page = first;
		w->used = 0;
		w->end = first * g;
		w->open = true;
	}
	hole(pg, addr - w->end);
	w->end = end;
	if (first == last) {
		w->used += size;
		return;
	}
	w->used += (first + 1) * g - addr;
	w->end = (first + 1) * g; /* it runs to the end of its first page */
	page_close(pg, w);
	/* The pages wholly inside, then the last one, open. */
	pg->pages += last - first - 1;
	pg->histogram[4] += last - first - 1;
	w->page = last;
	w->used = end - last * g;
	w->end = end;
	w->open = true;
}

static int device_slot_of(const struct gmt__snapshot *s, int device)
{
	for (int i = 0; i < s->ndevices; i++) {
		if (s->devices[i].index == device)
			return i;
	}
	return -1;
}

/* The growing sites with live memory on device `slot`, for the diagnosis:
 * their growth summed, the largest kept by id. */
static void growth_on_device(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
			     int device, struct view *view)
{
	const struct gmt__history *h = s->history;
	uint64_t best[8] = { 0 };
	uint8_t *seen;

	if (h == NULL || h->nsites == 0)
		return;
	seen = calloc(h->nsites / 8 + 1, 1);
	if (seen == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		const struct gmt__site *site;
		uint32_t id = v[i]->stack, rises, falls;
		uint64_t growth;
		int at;

		if (v[i]->device != device || id >= h->nsites || (seen[id / 8] & (1u << (id % 8))))
			continue;
		seen[id / 8] |= (uint8_t)(1u << (id % 8));
		site = gmt__history_site(h, id);
		if (site == NULL || !gmt__site_growing(site, &rises, &falls, &growth))
			continue;
		view->diag_in.growth_bytes += growth;
		view->diag_in.growth_sites++;
		/* Insertion into the 8 largest, largest first. */
		for (at = view->ngrowth_ids; at > 0 && best[at - 1] < growth; at--)
			;
		if (at < 8) {
			int last = view->ngrowth_ids < 8 ? view->ngrowth_ids : 7;

			for (int k = last; k > at; k--) {
				best[k] = best[k - 1];
				view->growth_ids[k] = view->growth_ids[k - 1];
			}
			best[at] = growth;
			view->growth_ids[at] = id;
			if (view->ngrowth_ids < 8)
				view->ngrowth_ids++;
		}
	}
	free(seen);
}

/* Fills the view from the live allocations v[0..n) (sorted by address). */
static void view_build(const struct gmt__snapshot *s, const struct gmt__entry *const *v, size_t n,
		       struct view *view)
{
	struct page_walk walks[GMT_SNAPSHOT_MAX_DEVICES] = { 0 };
	int ndev = s->ndevices < GMT_SNAPSHOT_MAX_DEVICES ? s->ndevices : GMT_SNAPSHOT_MAX_DEVICES;

	memset(view, 0, sizeof(*view));
	for (int i = 0; i < ndev; i++) {
		const struct gmt__device_state *st = s->devices[i].state;

		view->pages[i].granularity_known = st != NULL && st->have_granularity;
		view->pages[i].granularity = view->pages[i].granularity_known ? st->granularity : GMT_DEFAULT_GRANULARITY;
	}
	for (size_t i = 0; i < n; i++) {
		int d = device_slot_of(s, v[i]->device);

		if (d < 0 || d >= ndev)
			continue;
		view->kinds[d][v[i]->kind < GMT_KIND_COUNT ? v[i]->kind : 0] += v[i]->size;
		if (v[i]->size > 0) {
			int k = 63 - __builtin_clzll(v[i]->size);

			view->class_count[d][k]++;
			view->class_bytes[d][k] += v[i]->size;
		}
		if (v[i]->kind == GMT_KIND_DEVICE && v[i]->space == GMT_SPACE_MEMORY)
			page_add(&view->pages[d], &walks[d], v[i]->addr, v[i]->size);
	}
	for (int i = 0; i < ndev; i++)
		page_close(&view->pages[i], &walks[i]);

	if (s->failed != NULL) {
		int d = device_slot_of(s, s->failed->device);

		if (d < 0 || d >= ndev)
			return;
		view->diag_in.requested = s->failed->size;
		view->diag_in.device = s->failed->device;
		view->diag_in.state = s->devices[d].state;
		memcpy(view->diag_in.tracked, view->kinds[d], sizeof(view->diag_in.tracked));
		view->diag_in.pages = view->pages[d];
		growth_on_device(s, v, n, s->failed->device, view);
		gmt__diagnose(&view->diag_in, &view->diag);
		view->have_diagnosis = true;
	}
}

static char *put_u64_or_null(char *p, bool have, uint64_t v)
{
	return have ? gmt__put_u64(p, v) : gmt__put_lit(p, "null");
}

static void out_process(struct gmt__json *o, const struct gmt__snapshot *s)
{
	const struct gmt__snapshot_process *pr = s->process;
	char *p;

	if (pr == NULL)
		return;
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, " \"process\": {\"pid\": ");
	p = gmt__put_i64(p, s->pid);
	p = gmt__put_lit(p, ", \"ppid\": ");
	p = gmt__put_i64(p, pr->ppid);
	p = gmt__put_lit(p, ", \"host\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, pr->host);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"rank\": ");
	p = pr->rank >= 0 ? gmt__put_i64(p, pr->rank) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"local_rank\": ");
	p = pr->local_rank >= 0 ? gmt__put_i64(p, pr->local_rank) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"world_size\": ");
	p = pr->world_size >= 0 ? gmt__put_i64(p, pr->world_size) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"rank_variable\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, pr->rank_variable);
	gmt__json_str(o, "},\n");
}

/* Fragmentation at a glance: what is free, what a request could get, what
 * pools keep, and the live allocations by size class. */
static char *put_fragmentation(char *p, const struct gmt__device_state *st, const struct gmt__pages *pg,
			       const uint64_t *count, const uint64_t *bytes)
{
	bool mem = st != NULL && st->have_mem, pools = st != NULL && st->have_pools;
	uint64_t g = pg->granularity, whole = mem ? st->free_bytes / g * g : 0;
	bool any = false;

	p = gmt__put_lit(p, ", \"fragmentation\": {\"free_bytes\": ");
	p = put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"free_in_whole_pages\": ");
	p = put_u64_or_null(p, mem, whole);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, pg->stranded_bytes);
	p = gmt__put_lit(p, ", \"largest_hole_bytes\": ");
	p = gmt__put_u64(p, pg->largest_hole);
	p = gmt__put_lit(p, ", \"largest_fit_bytes\": ");
	p = put_u64_or_null(p, mem, whole > pg->largest_hole ? whole : pg->largest_hole);
	p = gmt__put_lit(p, ", \"pool_unused_bytes\": ");
	p = put_u64_or_null(p, pools, pools && st->pool_reserved > st->pool_used ? st->pool_reserved - st->pool_used : 0);
	p = gmt__put_lit(p, ", \"size_classes\": [");
	for (int k = 0; k < SIZE_CLASSES; k++) {
		if (count[k] == 0)
			continue;
		p = gmt__put_lit(p, any ? ", {\"min\": " : "{\"min\": ");
		p = gmt__put_u64(p, (uint64_t)1 << k);
		p = gmt__put_lit(p, ", \"max\": ");
		p = gmt__put_u64(p, k == 63 ? UINT64_MAX : ((uint64_t)1 << (k + 1)) - 1);
		p = gmt__put_lit(p, ", \"count\": ");
		p = gmt__put_u64(p, count[k]);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, bytes[k]);
		p = gmt__put_lit(p, "}");
		any = true;
	}
	return gmt__put_lit(p, "]}");
}

static void out_device(struct gmt__json *o, const struct gmt__snapshot_device *d, const struct gmt__pages *pg,
		       const uint64_t *kinds, const uint64_t *class_count, const uint64_t *class_bytes, bool first)
{
	const struct gmt__device_state *st = d->state;
	bool mem = st != NULL && st->have_mem;
	char *p = gmt__json_room(o, 2 * GMT_JSON_RECORD_BYTES + SIZE_CLASSES * 96);

	p = gmt__put_lit(p, first ? "\n  {\"index\": " : ",\n  {\"index\": ");
	p = gmt__put_i64(p, d->index);
	p = gmt__put_lit(p, ", \"total_bytes\": ");
	p = put_u64_or_null(p, mem, mem ? st->total_bytes : 0);
	p = gmt__put_lit(p, ", \"free_bytes\": ");
	p = put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"live_bytes\": ");
	p = gmt__put_u64(p, d->live_bytes);
	p = gmt__put_lit(p, ", \"kinds\": {");
	for (int k = 0, any = 0; k < GMT_KIND_COUNT; k++) {
		if (kinds[k] == 0)
			continue;
		p = gmt__put_lit(p, any++ ? ", \"" : "\"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)k));
		p = gmt__put_lit(p, "\": ");
		p = gmt__put_u64(p, kinds[k]);
	}
	p = gmt__put_lit(p, "}, \"pools\": ");
	if (st != NULL && st->have_pools) {
		p = gmt__put_lit(p, "{\"count\": ");
		p = gmt__put_i64(p, st->npools);
		p = gmt__put_lit(p, ", \"reserved_bytes\": ");
		p = gmt__put_u64(p, st->pool_reserved);
		p = gmt__put_lit(p, ", \"used_bytes\": ");
		p = gmt__put_u64(p, st->pool_used);
		p = gmt__put_lit(p, "}");
	} else {
		p = gmt__put_lit(p, "null");
	}
	p = gmt__put_lit(p, ", \"pages\": {\"granularity\": ");
	p = gmt__put_u64(p, pg->granularity);
	p = gmt__put_lit(p, pg->granularity_known ? ", \"granularity_known\": true" : ", \"granularity_known\": false");
	p = gmt__put_lit(p, ", \"pages\": ");
	p = gmt__put_u64(p, pg->pages);
	p = gmt__put_lit(p, ", \"partial\": ");
	p = gmt__put_u64(p, pg->partial);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, pg->stranded_bytes);
	p = gmt__put_lit(p, ", \"occupancy\": [");
	for (int k = 0; k < 5; k++) {
		p = gmt__put_lit(p, k ? ", " : "");
		p = gmt__put_u64(p, pg->histogram[k]);
	}
	p = gmt__put_lit(p, "]}");
	p = put_fragmentation(p, st, pg, class_count, class_bytes);
	p = gmt__put_lit(p, ", \"other_processes\": ");
	gmt__json_commit(o, p);
	if (st == NULL) {
		gmt__json_str(o, "null}");
		return;
	}
	if (!st->have_others) {
		gmt__json_str(o, "{\"known\": false, \"why\": ");
		gmt__json_string_or_null(o, st->others_why);
		gmt__json_str(o, "}}");
		return;
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "{\"known\": true, \"bytes\": ");
	p = gmt__put_u64(p, st->others_bytes);
	p = gmt__put_lit(p, ", \"count\": ");
	p = gmt__put_i64(p, st->nothers);
	p = gmt__put_lit(p, ", \"processes\": [");
	gmt__json_commit(o, p);
	for (int i = 0; i < st->nothers && i < GMT_DEVICE_MAX_OTHERS; i++) {
		p = gmt__json_room(o, 96);
		p = gmt__put_lit(p, i ? ", {\"pid\": " : "{\"pid\": ");
		p = gmt__put_u64(p, st->others[i].pid);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, st->others[i].bytes);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]}}");
}

static void out_diagnosis(struct gmt__json *o, const struct view *view)
{
	const struct gmt__diagnosis *d = &view->diag;
	const struct gmt__diag_input *in = &view->diag_in;
	const struct gmt__device_state *st = in->state;
	bool mem = d->have_mem, others = st != NULL && st->have_others;
	char *p;

	gmt__json_str(o, " \"diagnosis\": {\"verdict\": \"");
	gmt__json_str(o, gmt__verdict_name(d->primary));
	gmt__json_str(o, "\", \"summary\": ");
	gmt__json_string(o, d->summary);
	gmt__json_str(o, ",\n  \"verdicts\": [");
	for (int i = 0; i < d->nverdicts; i++) {
		const struct gmt__diag_verdict *v = &d->v[i];

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ",\n   {\"name\": \"" : "\n   {\"name\": \"");
		p = gmt__put_lit(p, gmt__verdict_name(v->verdict));
		p = gmt__put_lit(p, i == 0 ? "\", \"primary\": true, \"bytes\": " : "\", \"primary\": false, \"bytes\": ");
		p = gmt__put_u64(p, v->bytes);
		p = gmt__put_lit(p, ", \"rests_on\": [");
		for (int k = 0; v->rests_on[k] != NULL; k++) {
			p = gmt__put_lit(p, k ? ", \"" : "\"");
			p = gmt__put_lit(p, v->rests_on[k]);
			p = gmt__put_lit(p, "\"");
		}
		p = gmt__put_lit(p, "], \"detail\": ");
		gmt__json_commit(o, p);
		gmt__json_string(o, v->detail);
		gmt__json_str(o, "}");
	}
	p = gmt__json_room(o, 4 * GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "],\n  \"numbers\": {\"device\": ");
	p = gmt__put_i64(p, in->device);
	p = gmt__put_lit(p, ", \"requested_bytes\": ");
	p = gmt__put_u64(p, in->requested);
	p = gmt__put_lit(p, ", \"needed_bytes\": ");
	p = gmt__put_u64(p, d->needed);
	p = gmt__put_lit(p, ", \"granularity\": ");
	p = gmt__put_u64(p, in->pages.granularity);
	p = gmt__put_lit(p, ", \"total_bytes\": ");
	p = put_u64_or_null(p, mem, mem ? st->total_bytes : 0);
	p = gmt__put_lit(p, ", \"free_bytes\": ");
	p = put_u64_or_null(p, mem, mem ? st->free_bytes : 0);
	p = gmt__put_lit(p, ", \"used_bytes\": ");
	p = put_u64_or_null(p, mem, d->used);
	p = gmt__put_lit(p, ", \"shortfall_bytes\": ");
	p = put_u64_or_null(p, mem, d->shortfall);
	p = gmt__put_lit(p, ",\n   \"tracked_bytes\": {");
	for (int k = 0, any = 0; k < GMT_KIND_COUNT; k++) {
		if (k == GMT_KIND_HOST || k == GMT_KIND_REGISTERED)
			continue;
		p = gmt__put_lit(p, any++ ? ", \"" : "\"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)k));
		p = gmt__put_lit(p, "\": ");
		p = gmt__put_u64(p, in->tracked[k]);
	}
	p = gmt__put_lit(p, "}, \"tracked_total_bytes\": ");
	p = gmt__put_u64(p, d->tracked_total);
	p = gmt__put_lit(p, ", \"footprint_bytes\": ");
	p = gmt__put_u64(p, d->footprint);
	p = gmt__put_lit(p, ",\n   \"pool_reserved_bytes\": ");
	p = put_u64_or_null(p, d->have_pools, d->have_pools ? st->pool_reserved : 0);
	p = gmt__put_lit(p, ", \"pool_used_bytes\": ");
	p = put_u64_or_null(p, d->have_pools, d->have_pools ? st->pool_used : 0);
	p = gmt__put_lit(p, ", \"pool_unused_bytes\": ");
	p = put_u64_or_null(p, d->have_pools, d->pool_unused);
	p = gmt__put_lit(p, ", \"other_processes_bytes\": ");
	p = put_u64_or_null(p, others, others ? st->others_bytes : 0);
	p = gmt__put_lit(p, ", \"untracked_bytes\": ");
	p = put_u64_or_null(p, d->have_untracked, d->untracked);
	p = gmt__put_lit(p, ",\n   \"pages\": ");
	p = gmt__put_u64(p, in->pages.pages);
	p = gmt__put_lit(p, ", \"pages_partial\": ");
	p = gmt__put_u64(p, in->pages.partial);
	p = gmt__put_lit(p, ", \"stranded_bytes\": ");
	p = gmt__put_u64(p, in->pages.stranded_bytes);
	p = gmt__put_lit(p, ", \"growth_bytes\": ");
	p = gmt__put_u64(p, in->growth_bytes);
	p = gmt__put_lit(p, ", \"growth_sites\": ");
	p = gmt__put_i64(p, in->growth_sites);
	p = gmt__put_lit(p, ", \"growth_stacks\": [");
	for (int i = 0; i < view->ngrowth_ids; i++) {
		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_u64(p, view->growth_ids[i]);
	}
	p = gmt__put_lit(p, "]}},\n");
	gmt__json_commit(o, p);
}

/* ---- the history: sites, series, events ------------------------------------------ */

static const char *const hist_op_names[] = { "alloc", "free", "oom" };

/* "sites": every site that allocated, most live bytes first. */
struct site_ref {
	uint32_t id;
	uint64_t live;
};

static int by_live_desc(const void *x, const void *y)
{
	const struct site_ref *a = x, *b = y;

	if (a->live != b->live)
		return a->live < b->live ? 1 : -1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int out_sites(struct gmt__json *o, const struct gmt__history *h, struct idset *ids, uint32_t *top, int ntop)
{
	struct site_ref *v;
	size_t n = 0;
	int r = 0;

	for (int i = 0; i < ntop; i++)
		top[i] = UINT32_MAX;
	gmt__json_str(o, " \"sites\": [");
	v = malloc((h->nsites ? h->nsites : 1) * sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	for (size_t id = 0; id < h->nsites; id++) {
		const struct gmt__site *s = gmt__history_site(h, (uint32_t)id);

		if (s != NULL)
			v[n++] = (struct site_ref){ (uint32_t)id, s->live_bytes };
	}
	qsort(v, n, sizeof(*v), by_live_desc);
	for (size_t i = 0; i < n && o->err == 0; i++) {
		const struct gmt__site *s = gmt__history_site(h, v[i].id);
		uint32_t rises, falls;
		uint64_t growth;
		bool growing = gmt__site_growing(s, &rises, &falls, &growth);
		uint64_t rise;
		bool suspect = gmt__site_suspect(s, &rises, &falls, &rise);
		char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

		if ((int)i < ntop && s->live_bytes > 0)
			top[i] = v[i].id;
		p = gmt__put_lit(p, i ? ",\n  {\"stack\": " : "\n  {\"stack\": ");
		p = gmt__put_u64(p, v[i].id);
		p = gmt__put_lit(p, ", \"live_bytes\": ");
		p = gmt__put_u64(p, s->live_bytes);
		p = gmt__put_lit(p, ", \"live_count\": ");
		p = gmt__put_u64(p, s->live_count);
		p = gmt__put_lit(p, ", \"allocs\": ");
		p = gmt__put_u64(p, s->allocs);
		p = gmt__put_lit(p, ", \"alloc_bytes\": ");
		p = gmt__put_u64(p, s->alloc_bytes);
		p = gmt__put_lit(p, ", \"peak_bytes\": ");
		p = gmt__put_u64(p, s->peak_bytes);
		p = gmt__put_lit(p, ", \"rising_windows\": ");
		p = gmt__put_u64(p, rises);
		p = gmt__put_lit(p, ", \"falling_windows\": ");
		p = gmt__put_u64(p, falls);
		p = gmt__put_lit(p, ", \"growth_bytes\": ");
		p = gmt__put_u64(p, growth);
		p = gmt__put_lit(p, growing ? ", \"growing\": true" : ", \"growing\": false");
		p = gmt__put_lit(p, suspect ? ", \"suspect\": true}" : ", \"suspect\": false}");
		gmt__json_commit(o, p);
		r = idset_add(ids, v[i].id);
		if (r < 0)
			break;
	}
	gmt__json_str(o, n > 0 ? "\n ],\n" : "],\n");
	free(v);
	return r;
}

static void out_u64_array(struct gmt__json *o, const uint64_t *v, size_t n, uint64_t last)
{
	gmt__json_str(o, "[");
	for (size_t i = 0; i <= n; i++) {
		char *p = gmt__json_room(o, 32);

		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_u64(p, i < n ? v[i] : last);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "]");
}

/* "series": the stored points, then one for the open window at `now`. */
static void out_series(struct gmt__json *o, const struct gmt__history *h, uint64_t now)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	/* never before the open window's start (none before the first event) */
	if (h->next_ns >= h->interval_ns && now < h->next_ns - h->interval_ns)
		now = h->next_ns - h->interval_ns;
	p = gmt__put_lit(p, " \"series\": {\"interval_ns\": ");
	p = gmt__put_u64(p, h->interval_ns);
	p = gmt__put_lit(p, ", \"start_ns\": ");
	p = gmt__put_u64(p, h->start_ns);
	p = gmt__put_lit(p, ", \"columns_dropped\": ");
	p = gmt__put_u64(p, h->overflow);
	p = gmt__put_lit(p, ",\n  \"time_ns\": ");
	gmt__json_commit(o, p);
	out_u64_array(o, h->pt_time, h->npoints, now);
	gmt__json_str(o, ",\n  \"columns\": [");
	for (int c = 0; c < h->ncols; c++) {
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, c ? ",\n   {\"device\": " : "\n   {\"device\": ");
		p = gmt__put_i64(p, h->col_device[c]);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)h->col_kind[c]));
		p = gmt__put_lit(p, "\", \"live_bytes\": ");
		gmt__json_commit(o, p);
		out_u64_array(o, h->pt_val + (size_t)c * GMT_SERIES_POINTS, h->npoints, h->cur[c]);
		gmt__json_str(o, ", \"max_bytes\": ");
		out_u64_array(o, h->pt_max + (size_t)c * GMT_SERIES_POINTS, h->npoints, h->max[c]);
		gmt__json_str(o, "}");
	}
	gmt__json_str(o, h->ncols > 0 ? "\n  ]},\n" : "]},\n");
}

/* "history": the last events, oldest first. */
static int out_history(struct gmt__json *o, const struct gmt__history *h, const struct api_table *apis,
		       struct idset *ids)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	int r = 0;

	p = gmt__put_lit(p, " \"history\": {\"capacity\": ");
	p = gmt__put_u64(p, h->cap);
	p = gmt__put_lit(p, ", \"dropped\": ");
	p = gmt__put_u64(p, h->dropped);
	p = gmt__put_lit(p, ", \"events\": [");
	gmt__json_commit(o, p);
	for (size_t i = 0; i < h->count && o->err == 0; i++) {
		const struct gmt__hist_event *ev = gmt__history_event(h, i);

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES + apis->longest);
		p = gmt__put_lit(p, i ? ",\n  {\"op\": \"" : "\n  {\"op\": \"");
		p = gmt__put_lit(p, hist_op_names[ev->op < 3 ? ev->op : 0]);
		p = gmt__put_lit(p, "\", \"seq\": ");
		p = gmt__put_u64(p, ev->seq);
		p = gmt__put_lit(p, ", \"time_ns\": ");
		p = gmt__put_u64(p, ev->time_ns);
		p = gmt__put_lit(p, ", \"address\": ");
		p = ev->op == GMT_HIST_OOM ? gmt__put_lit(p, "null") : gmt__put_hex(p, ev->addr);
		p = gmt__put_lit(p, ", \"size\": ");
		p = gmt__put_u64(p, ev->size);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)ev->kind));
		p = gmt__put_lit(p, "\", \"device\": ");
		p = gmt__put_i64(p, ev->device);
		p = gmt__put_lit(p, ", \"api\": ");
		p = gmt__put_lit(p, api_name(apis, ev->api));
		p = gmt__put_lit(p, ", \"thread\": ");
		p = gmt__put_u64(p, ev->tid);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, ev->stack);
		*p++ = '}';
		gmt__json_commit(o, p);
		r = idset_add(ids, ev->stack);
		if (r < 0)
			break;
	}
	gmt__json_str(o, h->count > 0 ? "\n ]},\n" : "]},\n");
	return r;
}

static void out_header(struct gmt__json *o, const struct gmt__snapshot *s, const struct view *view)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	int i;

	p = gmt__put_lit(p, "{\n \"format\": \"gpumemtrace-snapshot\",\n \"version\": 1,\n \"reason\": \"");
	p = gmt__put_lit(p, s->reason);
	p = gmt__put_lit(p, "\",\n \"seq\": ");
	p = gmt__put_u64(p, s->seq);
	p = gmt__put_lit(p, ",\n \"time_ns\": ");
	p = gmt__put_u64(p, s->time_ns);
	p = gmt__put_lit(p, ",\n \"pid\": ");
	p = gmt__put_i64(p, s->pid);
	p = gmt__put_lit(p, ",\n \"argv\": [");
	gmt__json_commit(o, p);
	for (i = 0; i < s->argc && s->argv != NULL && s->argv[i] != NULL; i++) {
		if (i)
			gmt__json_str(o, ", ");
		gmt__json_string(o, s->argv[i]);
	}

	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "],\n \"summary\": {\"live_bytes\": ");
	p = gmt__put_u64(p, s->live_bytes);
	p = gmt__put_lit(p, ", \"live_count\": ");
	p = gmt__put_u64(p, s->live_count);
	p = gmt__put_lit(p, ", \"peak_bytes\": ");
	p = gmt__put_u64(p, s->peak_bytes);
	p = gmt__put_lit(p, ", \"total_allocs\": ");
	p = gmt__put_u64(p, s->total_allocs);
	p = gmt__put_lit(p, ", \"total_frees\": ");
	p = gmt__put_u64(p, s->total_frees);
	p = gmt__put_lit(p, "},\n");
	gmt__json_commit(o, p);
	out_process(o, s);
	gmt__json_str(o, " \"devices\": [");
	for (i = 0; i < s->ndevices; i++)
		out_device(o, &s->devices[i], &view->pages[i], view->kinds[i], view->class_count[i], view->class_bytes[i],
			   i == 0);
	gmt__json_str(o, s->ndevices > 0 ? "\n ],\n" : "],\n");

	if (s->failed != NULL) {
		const struct gmt__snapshot_request *f = s->failed;

		gmt__json_str(o, " \"failed_request\": {\"api\": ");
		gmt__json_string(o, f->api != NULL ? f->api : "unknown");
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"size\": ");
		p = gmt__put_u64(p, f->size);
		p = gmt__put_lit(p, ", \"kind\": \"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)f->kind));
		p = gmt__put_lit(p, "\", \"device\": ");
		p = gmt__put_i64(p, f->device);
		p = gmt__put_lit(p, ", \"result\": ");
		p = gmt__put_i64(p, f->result);
		p = gmt__put_lit(p, ", \"failure\": ");
		p = gmt__put_u64(p, f->failure);
		p = gmt__put_lit(p, ", \"stack\": ");
		p = gmt__put_u64(p, f->stack);
		p = gmt__put_lit(p, "},\n");
		gmt__json_commit(o, p);
		if (view->have_diagnosis)
			out_diagnosis(o, view);
	}

	gmt__json_str(o, " \"stats\": {");
	for (i = 0; i < s->nstats; i++) {
		gmt__json_str(o, i ? ", " : "");
		gmt__json_string(o, s->stats[i].name);
		p = gmt__json_room(o, 32);
		p = gmt__put_lit(p, ": ");
		p = gmt__put_u64(p, s->stats[i].value);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "},\n");
}

/* ---- the leak check ---------------------------------------------------------------- */

enum { CLASS_LEAKED, CLASS_REFERENCED, CLASS_CACHED, CLASS_COUNT };

static const char *const class_names[CLASS_COUNT] = { "leaked", "referenced", "cached" };
static const unsigned class_bits[CLASS_COUNT] = { GMT_CLASS_LEAKED, GMT_CLASS_REFERENCED, GMT_CLASS_CACHED };

#define NO_RULE UINT32_MAX
#define LEAK_SUSPECTS 8
#define LEAK_REPORT_SITES 20   /* counted sites the report shows with their stacks */
#define LEAK_REPORT_FRAMES 16  /* frames shown per site */
#define LEAK_REPORT_BRIEF 10   /* lines for what does not count */

/* One live allocation at exit. */
struct leak_item {
	uint64_t addr, size;
	uint32_t stack;
	uint32_t rule; /* the rule its stack matched, NO_RULE: none */
	int16_t device;
	uint8_t kind, cls;
};

/* Each stack some item (or suspect) has: the rule its frames match (only
 * for a stack of items: a suspect's own stack needs none), and where it is
 * in words. */
struct leak_stack {
	uint32_t id;
	uint32_t rule;
	bool has_items;
	char where[192];
};

/* Items of one (stack, class, rule). */
struct leak_group {
	uint32_t stack, rule;
	uint8_t cls;
	bool counted;
	uint64_t count, bytes;
	size_t first; /* its items: order[first .. first + count) */
	uint64_t kinds[GMT_KIND_COUNT];
	struct gmt__leak_ref ref; /* the first reference found to one of them */
	uint64_t ref_value;       /* the address that word held */
};

struct leak_suspect {
	uint32_t id, rises, falls;
	uint64_t live, peak, growth;
};

/* Totals: what each class holds unsuppressed, what was suppressed, what counts. */
enum { TOTAL_SUPPRESSED = CLASS_COUNT, TOTAL_COUNTED, TOTAL_COUNT };

struct leak_work {
	struct gmt__snapshot_leaks *in;
	struct leak_item *items;
	size_t n;
	struct gmt__leak_target *targets;
	size_t ntargets;
	struct gmt__leak_ref *refs;
	struct gmt__scan_stats scan;
	struct leak_stack *stacks;
	size_t nstacks;
	uint32_t *order;
	struct leak_group *groups;
	size_t ngroups;
	uint64_t total_count[TOTAL_COUNT], total_bytes[TOTAL_COUNT];
	uint64_t *rule_hits, *rule_bytes; /* per rule of in->supp */
	struct gmt__supp_memo memo;       /* of in->supp, for this snapshot's names */
	struct leak_suspect suspects[LEAK_SUSPECTS];
	int nsuspects;
};

static void leak_work_free(struct leak_work *lw)
{
	free(lw->items);
	free(lw->targets);
	free(lw->refs);
	free(lw->stacks);
	free(lw->order);
	free(lw->groups);
	free(lw->rule_hits);
	free(lw->rule_bytes);
	gmt__supp_memo_free(&lw->memo);
}

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

/* The history's growth suspects, largest growth first (read with the table). */
static void leak_suspects(struct leak_work *lw, const struct gmt__history *h)
{
	for (size_t id = 0; h != NULL && id < h->nsites; id++) {
		const struct gmt__site *site = gmt__history_site(h, (uint32_t)id);
		struct leak_suspect x = { .id = (uint32_t)id };
		int at;

		if (site == NULL || !gmt__site_suspect(site, &x.rises, &x.falls, &x.growth))
			continue;
		x.live = site->live_bytes;
		x.peak = site->peak_bytes;
		for (at = lw->nsuspects; at > 0 && lw->suspects[at - 1].growth < x.growth; at--)
			;
		if (at >= LEAK_SUSPECTS)
			continue;
		if (lw->nsuspects < LEAK_SUSPECTS)
			lw->nsuspects++;
		memmove(&lw->suspects[at + 1], &lw->suspects[at],
			(size_t)(lw->nsuspects - 1 - at) * sizeof(lw->suspects[0]));
		lw->suspects[at] = x;
	}
}

/* The live allocations alloc[0..na) and VMM mappings map[0..nm), both in
 * address order, as items and scan targets; their stacks into ids. */
static int leak_collect(struct leak_work *lw, const struct gmt__entry *const *alloc, size_t na,
			const struct gmt__entry *const *map, size_t nm, const struct gmt__history *h,
			struct idset *ids)
{
	uint32_t *handles = NULL;
	uint64_t *sids = NULL; /* stack << 1 | 1 for a suspect's: an item's sorts first */
	size_t nh = 0, nt = 0, ns = 0;
	int r = -ENOMEM;

	gmt__supp_memo_init(&lw->memo, lw->in->supp);
	lw->items = malloc((na ? na : 1) * sizeof(*lw->items));
	lw->targets = malloc((na + nm + 1) * sizeof(*lw->targets));
	lw->refs = calloc(na ? na : 1, sizeof(*lw->refs));
	handles = malloc((na ? na : 1) * sizeof(*handles));
	sids = malloc((na + LEAK_SUSPECTS + 1) * sizeof(*sids));
	if (lw->items == NULL || lw->targets == NULL || lw->refs == NULL || handles == NULL || sids == NULL)
		goto out;
	for (size_t i = 0; i < na; i++) {
		const struct gmt__entry *e = alloc[i];

		lw->items[i] = (struct leak_item){
			.addr = e->addr, .size = e->size, .stack = e->stack, .rule = NO_RULE,
			.device = e->device, .kind = e->kind, .cls = CLASS_LEAKED,
		};
		sids[ns++] = (uint64_t)e->stack << 1;
		switch (e->space) {
		case GMT_SPACE_HANDLE:
			handles[nh++] = (uint32_t)i; /* referred to through its mappings */
			break;
		case GMT_SPACE_ARRAY:
			/* a handle the program holds: the exact value */
			lw->targets[nt++] = (struct gmt__leak_target){ e->addr, e->addr + 1, (uint32_t)i };
			break;
		default:
			if (e->size > 0 && e->addr + e->size > e->addr)
				lw->targets[nt++] = (struct gmt__leak_target){ e->addr, e->addr + e->size, (uint32_t)i };
			break;
		}
	}
	/* A mapping names its handle: the handle is referred to when the mapped
	 * range is. Handles come in address order, as the allocations do. */
	for (size_t i = 0; i < nm; i++) {
		size_t lo = 0, hi = nh;

		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (lw->items[handles[mid]].addr < map[i]->link)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < nh && lw->items[handles[lo]].addr == map[i]->link && map[i]->size > 0)
			lw->targets[nt++] = (struct gmt__leak_target){ map[i]->addr, map[i]->addr + map[i]->size, handles[lo] };
	}
	lw->n = na;
	lw->ntargets = nt;
	leak_suspects(lw, h);
	for (int i = 0; i < lw->nsuspects; i++)
		sids[ns++] = (uint64_t)lw->suspects[i].id << 1 | 1;
	qsort(sids, ns, sizeof(*sids), by_u64);
	lw->stacks = malloc((ns ? ns : 1) * sizeof(*lw->stacks));
	if (lw->stacks == NULL)
		goto out;
	for (size_t i = 0; i < ns; i++) {
		uint32_t id = (uint32_t)(sids[i] >> 1);

		if (lw->nstacks > 0 && lw->stacks[lw->nstacks - 1].id == id)
			continue;
		lw->stacks[lw->nstacks] = (struct leak_stack){ .id = id, .rule = NO_RULE, .has_items = !(sids[i] & 1) };
		snprintf(lw->stacks[lw->nstacks].where, sizeof(lw->stacks[0].where), "an unknown place");
		lw->nstacks++;
		r = idset_add(ids, id);
		if (r < 0)
			goto out;
	}
	r = 0;
out:
	free(handles);
	free(sids);
	return r;
}

static struct leak_stack *leak_stack_of(const struct leak_work *lw, uint32_t id)
{
	size_t lo = 0, hi = lw->nstacks;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (lw->stacks[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < lw->nstacks && lw->stacks[lo].id == id ? &lw->stacks[lo] : NULL;
}

/* The pointer scan: leaked or referenced. */
static void leak_scan(struct leak_work *lw, const struct gmt__snapshot *s)
{
	struct gmt__range *skip;
	size_t nskip = lw->in->nskip;

	if (!lw->in->scan) {
		lw->scan.why = "the scan is off (GPUMEMTRACE_LEAK_SCAN=0)";
		return;
	}
	/* The tracer's own memory, the items and the capture (they hold every
	 * address). */
	skip = malloc((nskip + 3) * sizeof(*skip));
	if (skip == NULL) {
		lw->scan.why = "out of memory";
		return;
	}
	if (nskip > 0)
		memcpy(skip, lw->in->skip, nskip * sizeof(*skip));
	skip[nskip++] = (struct gmt__range){ (uintptr_t)lw->items, (uintptr_t)(lw->items + lw->n) };
	skip[nskip++] = (struct gmt__range){ (uintptr_t)s->entries, (uintptr_t)(s->entries + s->nentries) };
	if (s->history != NULL && s->history->events != NULL)
		skip[nskip++] = (struct gmt__range){ (uintptr_t)s->history->events,
						     (uintptr_t)(s->history->events + s->history->cap) };
	(void)gmt__leak_scan(lw->targets, lw->ntargets, lw->refs, skip, nskip, lw->in->stack_from, &lw->scan);
	free(skip);
	for (size_t i = 0; i < lw->n; i++) {
		if (lw->refs[i].at != 0)
			lw->items[i].cls = CLASS_REFERENCED;
	}
}

/* The rule matching: each frame's names against the rules.
 * NOTE: through the memo, keyed by the names' addresses: every name here is
 * owned by the loader, the frame cache (its libdw object, the program's path)
 * or pystack.c, and stays put until the snapshot is written. Stacks repeat the same names, so each
 * distinct one is matched once, not once per stack (issue 8). */
struct rule_match {
	struct gmt__supp_memo *memo;
	size_t best;
};

static void rule_native(void *ctx, const struct frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct rule_match *m = ctx;

	gmt__supp_memo_frame(m->memo, function, f->module, sym != NULL ? sym->file : NULL, &m->best);
	if (f->function != NULL && f->function != function)
		gmt__supp_memo_frame(m->memo, f->function, NULL, NULL, &m->best);
}

static void rule_python(void *ctx, uintptr_t word)
{
	struct rule_match *m = ctx;
	const char *function = NULL, *file = NULL;
	int line = 0;

	(void)gmt__py_frame(word, &function, &file, &line);
	gmt__supp_memo_frame(m->memo, function, NULL, file, &m->best);
}

/* Called by out_stacks for every stack written. */
static void leak_stack_seen(struct leak_work *lw, struct frame_cache *cache, uint32_t id, const uintptr_t *ips,
			    int n)
{
	struct leak_stack *ls = leak_stack_of(lw, id);
	struct rule_match m = { &lw->memo, SIZE_MAX };
	struct frame_sink k = { rule_native, rule_python, &m };

	if (ls == NULL || ips == NULL)
		return;
	site_label(cache, ips, n, ls->where, sizeof(ls->where));
	/* The rule is read through the items (leak_classify) only. */
	if (!ls->has_items || lw->in->supp == NULL || lw->in->supp->n == 0)
		return;
	sink_frames(&k, cache, ips, n);
	if (m.best != SIZE_MAX)
		ls->rule = (uint32_t)m.best;
}

static int by_group_key(const void *x, const void *y, void *arg)
{
	const struct leak_item *items = arg;
	const struct leak_item *a = &items[*(const uint32_t *)x];
	const struct leak_item *b = &items[*(const uint32_t *)y];

	if (a->stack != b->stack)
		return a->stack < b->stack ? -1 : 1;
	if (a->cls != b->cls)
		return a->cls - b->cls;
	if (a->rule != b->rule)
		return a->rule < b->rule ? -1 : 1;
	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int by_counted_bytes(const void *x, const void *y)
{
	const struct leak_group *a = x, *b = y;

	if (a->counted != b->counted)
		return a->counted ? -1 : 1;
	if (a->bytes != b->bytes)
		return a->bytes > b->bytes ? -1 : 1;
	return a->stack < b->stack ? -1 : a->stack > b->stack;
}

static bool rule_suppresses(const struct leak_work *lw, uint32_t rule)
{
	return rule != NO_RULE && lw->in->supp->v[rule].type == GMT_SUPP_LEAK;
}

/* After the stacks: rules applied, items grouped, totals counted. */
static int leak_classify(struct leak_work *lw)
{
	const struct gmt__supp *supp = lw->in->supp;
	size_t nrules = supp != NULL ? supp->n : 0;

	lw->order = malloc((lw->n ? lw->n : 1) * sizeof(*lw->order));
	lw->groups = malloc((lw->n ? lw->n : 1) * sizeof(*lw->groups));
	lw->rule_hits = calloc(nrules + 1, sizeof(*lw->rule_hits));
	lw->rule_bytes = calloc(nrules + 1, sizeof(*lw->rule_bytes));
	if (lw->order == NULL || lw->groups == NULL || lw->rule_hits == NULL || lw->rule_bytes == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < lw->n; i++) {
		struct leak_item *it = &lw->items[i];
		const struct leak_stack *ls = leak_stack_of(lw, it->stack);

		lw->order[i] = (uint32_t)i;
		it->rule = ls != NULL ? ls->rule : NO_RULE;
		if (it->rule != NO_RULE) {
			lw->rule_hits[it->rule]++;
			lw->rule_bytes[it->rule] += it->size;
			if (supp->v[it->rule].type == GMT_SUPP_CACHED)
				it->cls = CLASS_CACHED;
		}
	}
	qsort_r(lw->order, lw->n, sizeof(*lw->order), by_group_key, lw->items);

	for (size_t i = 0; i < lw->n; i++) {
		const struct leak_item *it = &lw->items[lw->order[i]];
		const struct gmt__leak_ref *ref = &lw->refs[lw->order[i]];
		struct leak_group *g = lw->ngroups > 0 ? &lw->groups[lw->ngroups - 1] : NULL;
		bool suppressed = rule_suppresses(lw, it->rule);
		int t = suppressed ? TOTAL_SUPPRESSED : it->cls;

		if (g == NULL || g->stack != it->stack || g->cls != it->cls || g->rule != it->rule) {
			g = &lw->groups[lw->ngroups++];
			*g = (struct leak_group){
				.stack = it->stack, .rule = it->rule, .cls = it->cls, .first = i,
				.counted = !suppressed && (lw->in->classes & class_bits[it->cls]),
			};
		}
		g->count++;
		g->bytes += it->size;
		g->kinds[it->kind < GMT_KIND_COUNT ? it->kind : 0] += it->size;
		if (g->ref.at == 0 && ref->at != 0) {
			g->ref = *ref;
			g->ref_value = it->addr;
		}
		lw->total_count[t]++;
		lw->total_bytes[t] += it->size;
		if (g->counted) {
			lw->total_count[TOTAL_COUNTED]++;
			lw->total_bytes[TOTAL_COUNTED] += it->size;
		}
	}
	qsort(lw->groups, lw->ngroups, sizeof(*lw->groups), by_counted_bytes);
	lw->in->suspects = lw->nsuspects;
	lw->in->counted_count = lw->total_count[TOTAL_COUNTED];
	lw->in->counted_bytes = lw->total_bytes[TOTAL_COUNTED];
	return 0;
}

/* What holds a reference, in words: the global's name where the loader
 * knows it. */
static void ref_where(struct frame_cache *cache, const struct leak_group *g, char *buf, size_t len)
{
	const struct gmt__leak_ref *ref = &g->ref;
	struct link_map *map = NULL;
	const char *name;
	Dl_info info;

	if (ref->region == GMT_REF_GLOBAL &&
	    dladdr1((void *)(uintptr_t)ref->at, &info, (void **)&map, RTLD_DL_LINKMAP) != 0) {
		const char *path = map != NULL && map->l_name[0] == '\0' && cache->exe != NULL ? cache->exe : info.dli_fname;
		const char *mod = base_name(path);

		/* NOTE: the loader knows exported symbols only; the full symbol
		 * table (through libdw) names a program's static variables too. */
		name = gmt__symbols_data_name(cache->symbols, path, (uintptr_t)info.dli_fbase, ref->at);
		if (name != NULL)
			snprintf(buf, len, "global '%s' (%s)", name, mod != NULL ? mod : "?");
		else
			snprintf(buf, len, "global data of %s at 0x%llx", mod != NULL ? mod : "?",
				 (unsigned long long)ref->at);
		return;
	}
	snprintf(buf, len, "%s memory at 0x%llx",
		 ref->region == GMT_REF_HEAP ? "heap" : ref->region == GMT_REF_STACK ? "stack" :
		 ref->region == GMT_REF_GLOBAL ? "global" : "mapped",
		 (unsigned long long)ref->at);
}

static void out_leak_group(struct gmt__json *o, struct frame_cache *cache, const struct leak_work *lw,
			   const struct leak_group *g, bool first)
{
	const struct gmt__supp *supp = lw->in->supp;
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	char text[320];
	int16_t devs[8];
	int ndev = 0;

	p = gmt__put_lit(p, first ? "\n   {\"stack\": " : ",\n   {\"stack\": ");
	p = gmt__put_u64(p, g->stack);
	p = gmt__put_lit(p, ", \"class\": \"");
	p = gmt__put_lit(p, class_names[g->cls]);
	p = gmt__put_lit(p, g->counted ? "\", \"counted\": true" : "\", \"counted\": false");
	p = gmt__put_lit(p, ", \"suppressed_by\": ");
	gmt__json_commit(o, p);
	if (rule_suppresses(lw, g->rule)) {
		gmt__supp_rule_text(&supp->v[g->rule], text, sizeof(text));
		gmt__json_string(o, text);
	} else {
		gmt__json_str(o, "null");
	}
	gmt__json_str(o, ", \"rule\": ");
	if (g->rule != NO_RULE) {
		gmt__supp_rule_text(&supp->v[g->rule], text, sizeof(text));
		gmt__json_string(o, text);
		gmt__json_str(o, ", \"rule_source\": ");
		if (supp->v[g->rule].line > 0)
			snprintf(text, sizeof(text), "%s:%d", supp->v[g->rule].source, supp->v[g->rule].line);
		else
			snprintf(text, sizeof(text), "%s", supp->v[g->rule].source);
		gmt__json_string(o, text);
	} else {
		gmt__json_str(o, "null, \"rule_source\": null");
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"count\": ");
	p = gmt__put_u64(p, g->count);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, g->bytes);
	p = gmt__put_lit(p, ", \"kinds\": {");
	for (int k = 0, any = 0; k < GMT_KIND_COUNT; k++) {
		if (g->kinds[k] == 0)
			continue;
		p = gmt__put_lit(p, any++ ? ", \"" : "\"");
		p = gmt__put_lit(p, gmt__kind_name((enum gmt__kind)k));
		p = gmt__put_lit(p, "\": ");
		p = gmt__put_u64(p, g->kinds[k]);
	}
	p = gmt__put_lit(p, "}, \"devices\": [");
	for (uint64_t i = 0; i < g->count; i++) {
		int16_t d = lw->items[lw->order[g->first + i]].device;
		int k;

		for (k = 0; k < ndev && devs[k] != d; k++)
			;
		if (k == ndev && ndev < 8) {
			devs[ndev++] = d;
			p = gmt__put_lit(p, ndev > 1 ? ", " : "");
			p = gmt__put_i64(p, d);
		}
	}
	p = gmt__put_lit(p, "], \"addresses\": [");
	gmt__json_commit(o, p);
	for (uint64_t i = 0; i < g->count; i++) {
		p = gmt__json_room(o, 32);
		p = gmt__put_lit(p, i ? ", " : "");
		p = gmt__put_hex(p, lw->items[lw->order[g->first + i]].addr);
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "], \"referenced_from\": ");
	if (g->ref.at == 0) {
		gmt__json_str(o, "null}");
		return;
	}
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, "{\"address\": ");
	p = gmt__put_hex(p, g->ref.at);
	p = gmt__put_lit(p, ", \"value\": ");
	p = gmt__put_hex(p, g->ref_value);
	p = gmt__put_lit(p, ", \"region\": \"");
	p = gmt__put_lit(p, gmt__ref_region_name(g->ref.region));
	p = gmt__put_lit(p, "\", \"what\": ");
	gmt__json_commit(o, p);
	ref_where(cache, g, text, sizeof(text));
	gmt__json_string(o, text);
	gmt__json_str(o, "}}");
}

static void out_leak_total(struct gmt__json *o, const char *name, uint64_t count, uint64_t bytes, bool first)
{
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);

	p = gmt__put_lit(p, first ? "\"" : ", \"");
	p = gmt__put_lit(p, name);
	p = gmt__put_lit(p, "\": {\"count\": ");
	p = gmt__put_u64(p, count);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, bytes);
	p = gmt__put_lit(p, "}");
	gmt__json_commit(o, p);
}

static void out_leaks(struct gmt__json *o, struct frame_cache *cache, const struct leak_work *lw)
{
	const struct gmt__snapshot_leaks *in = lw->in;
	const struct gmt__supp *supp = in->supp;
	char *p = gmt__json_room(o, GMT_JSON_RECORD_BYTES), sec[32];
	bool any = false;

	p = gmt__put_lit(p, ",\n \"leaks\": {\"scan\": {\"done\": ");
	p = gmt__put_lit(p, lw->scan.done ? "true" : "false");
	p = gmt__put_lit(p, ", \"why\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, lw->scan.done ? NULL : lw->scan.why);
	p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
	p = gmt__put_lit(p, ", \"mappings\": ");
	p = gmt__put_u64(p, lw->scan.mappings);
	p = gmt__put_lit(p, ", \"bytes\": ");
	p = gmt__put_u64(p, lw->scan.bytes);
	p = gmt__put_lit(p, ", \"excluded_bytes\": ");
	p = gmt__put_u64(p, lw->scan.excluded);
	snprintf(sec, sizeof(sec), "%.6f", lw->scan.seconds);
	p = gmt__put_lit(p, ", \"seconds\": ");
	p = gmt__put_lit(p, sec);
	p = gmt__put_lit(p, "},\n  \"classes\": [");
	for (int c = 0; c < CLASS_COUNT; c++) {
		if (!(in->classes & class_bits[c]))
			continue;
		p = gmt__put_lit(p, any ? ", \"" : "\"");
		p = gmt__put_lit(p, class_names[c]);
		p = gmt__put_lit(p, "\"");
		any = true;
	}
	p = gmt__put_lit(p, "], \"exit_status\": ");
	p = in->exit_status >= 0 ? gmt__put_i64(p, in->exit_status) : gmt__put_lit(p, "null");
	p = gmt__put_lit(p, ", \"suppressions_error\": ");
	gmt__json_commit(o, p);
	gmt__json_string_or_null(o, in->supp_error);
	gmt__json_str(o, ",\n  \"totals\": {");
	for (int c = 0; c < CLASS_COUNT; c++)
		out_leak_total(o, class_names[c], lw->total_count[c], lw->total_bytes[c], c == 0);
	out_leak_total(o, "suppressed", lw->total_count[TOTAL_SUPPRESSED], lw->total_bytes[TOTAL_SUPPRESSED], false);
	out_leak_total(o, "counted", lw->total_count[TOTAL_COUNTED], lw->total_bytes[TOTAL_COUNTED], false);
	gmt__json_str(o, "},\n  \"sites\": [");
	for (size_t i = 0; i < lw->ngroups && o->err == 0; i++)
		out_leak_group(o, cache, lw, &lw->groups[i], i == 0);
	gmt__json_str(o, lw->ngroups > 0 ? "\n  ],\n  \"suspects\": [" : "],\n  \"suspects\": [");
	for (int i = 0; i < lw->nsuspects; i++) {
		const struct leak_suspect *x = &lw->suspects[i];

		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ", {\"stack\": " : "{\"stack\": ");
		p = gmt__put_u64(p, x->id);
		p = gmt__put_lit(p, ", \"live_bytes\": ");
		p = gmt__put_u64(p, x->live);
		p = gmt__put_lit(p, ", \"peak_bytes\": ");
		p = gmt__put_u64(p, x->peak);
		p = gmt__put_lit(p, ", \"growth_bytes\": ");
		p = gmt__put_u64(p, x->growth);
		p = gmt__put_lit(p, ", \"rising_windows\": ");
		p = gmt__put_u64(p, x->rises);
		p = gmt__put_lit(p, ", \"falling_windows\": ");
		p = gmt__put_u64(p, x->falls);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
	}
	gmt__json_str(o, "],\n  \"suppressions\": [");
	any = false;
	for (size_t r = 0; supp != NULL && r < supp->n; r++) {
		char text[320];

		if (lw->rule_hits[r] == 0)
			continue;
		gmt__json_str(o, any ? ", {\"rule\": " : "{\"rule\": ");
		gmt__supp_rule_text(&supp->v[r], text, sizeof(text));
		gmt__json_string(o, text);
		gmt__json_str(o, ", \"source\": ");
		gmt__json_string(o, supp->v[r].source);
		p = gmt__json_room(o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, ", \"line\": ");
		p = supp->v[r].line > 0 ? gmt__put_i64(p, supp->v[r].line) : gmt__put_lit(p, "null");
		p = gmt__put_lit(p, ", \"hits\": ");
		p = gmt__put_u64(p, lw->rule_hits[r]);
		p = gmt__put_lit(p, ", \"bytes\": ");
		p = gmt__put_u64(p, lw->rule_bytes[r]);
		p = gmt__put_lit(p, "}");
		gmt__json_commit(o, p);
		any = true;
	}
	gmt__json_str(o, "]}\n");
}

/* ---- the leak report: text for stderr ------------------------------------------- */

struct text {
	char *s;
	size_t n, cap;
	bool failed;
};

static void text_add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int need;

	if (t->failed)
		return;
	va_start(ap, fmt);
	need = vsnprintf(t->s != NULL ? t->s + t->n : NULL, t->s != NULL ? t->cap - t->n : 0, fmt, ap);
	va_end(ap);
	if (need < 0) {
		t->failed = true;
		return;
	}
	if (t->s == NULL || (size_t)need >= t->cap - t->n) {
		size_t cap = t->cap ? t->cap : 4096;
		char *bigger;

		while (cap - t->n <= (size_t)need)
			cap *= 2;
		bigger = realloc(t->s, cap);
		if (bigger == NULL) {
			t->failed = true;
			return;
		}
		t->s = bigger;
		t->cap = cap;
		va_start(ap, fmt);
		vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
		va_end(ap);
	}
	t->n += (size_t)need;
}

/* Frames as LeakSanitizer prints them. */
struct text_frames {
	struct text *t;
	int k;
};

static void text_native(void *ctx, const struct frame_info *f, const struct gmt__frame_sym *sym,
			const char *function)
{
	struct text_frames *tf = ctx;
	const char *mod = base_name(f->module);

	if (tf->k >= LEAK_REPORT_FRAMES) {
		tf->k++;
		return;
	}
	text_add(tf->t, "    #%d 0x%llx in %s", tf->k++, (unsigned long long)f->ip, function != NULL ? function : "??");
	if (sym != NULL && sym->file != NULL && sym->line > 0)
		text_add(tf->t, " %s:%d", sym->file, sym->line);
	if (f->module != NULL)
		text_add(tf->t, " (%s+0x%llx)", mod != NULL ? mod : "?", (unsigned long long)(f->ip - f->base));
	text_add(tf->t, "\n");
}

static void text_python(void *ctx, uintptr_t word)
{
	struct text_frames *tf = ctx;
	const char *function = NULL, *file = NULL;
	int line = 0;

	if (tf->k >= LEAK_REPORT_FRAMES) {
		tf->k++;
		return;
	}
	(void)gmt__py_frame(word, &function, &file, &line);
	text_add(tf->t, "    #%d in %s %s:%d [Python]\n", tf->k++, function != NULL ? function : "??",
		 file != NULL ? file : "?", line);
}

/* "device memory on device 0", "device and managed memory on devices 0, 1". */
static void group_what(const struct leak_work *lw, const struct leak_group *g, char *buf, size_t len)
{
	size_t at = 0;
	int nk = 0, nd = 0;
	int16_t devs[4];

	buf[0] = '\0';
	for (int k = 0; k < GMT_KIND_COUNT; k++) {
		if (g->kinds[k] == 0)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%s", nk++ ? " and " : "", gmt__kind_name((enum gmt__kind)k));
		if (at >= len)
			return;
	}
	at += (size_t)snprintf(buf + at, len - at, " memory");
	for (uint64_t i = 0; i < g->count && at < len; i++) {
		int16_t d = lw->items[lw->order[g->first + i]].device;
		int k;

		for (k = 0; k < nd && devs[k] != d; k++)
			;
		if (k < nd || nd == 4)
			continue;
		devs[nd++] = d;
		if (d < 0)
			continue;
		at += (size_t)snprintf(buf + at, len - at, "%s%d", nd == 1 ? " on device " : ", ", d);
	}
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

static void rule_words(const struct gmt__supp *supp, uint32_t rule, char *buf, size_t len)
{
	const struct gmt__supp_rule *r = &supp->v[rule];
	char text[256];

	gmt__supp_rule_text(r, text, sizeof(text));
	if (r->line > 0)
		snprintf(buf, len, "%s (%s:%d)", text, r->source, r->line);
	else
		snprintf(buf, len, "%s (built-in: %s)", text, r->why != NULL ? r->why : "?");
}

static void leak_report(struct leak_work *lw, struct frame_cache *cache)
{
	const struct gmt__snapshot_leaks *in = lw->in;
	struct text t = { 0 };
	char a[32], b[32], what[160], where[320];
	size_t shown = 0, brief = 0, counted_groups = 0;

	if (in->supp_error != NULL)
		text_add(&t, "leak check: suppressions not applied: %s\n", in->supp_error);
	if (!lw->scan.done)
		text_add(&t, "leak check: no pointer scan (%s): every allocation nobody freed is 'leaked'\n",
			 lw->scan.why != NULL ? lw->scan.why : "?");
	for (size_t i = 0; i < lw->ngroups; i++)
		counted_groups += lw->groups[i].counted;
	if (lw->total_count[TOTAL_COUNTED] > 0)
		text_add(&t, "leak check: %llu allocation%s of %s live at exit count as leaks, from %zu site%s:\n",
			 (unsigned long long)lw->total_count[TOTAL_COUNTED], plural(lw->total_count[TOTAL_COUNTED]),
			 gmt__human_bytes(a, sizeof(a), lw->total_bytes[TOTAL_COUNTED]), counted_groups,
			 counted_groups == 1 ? "" : "s");
	for (size_t i = 0; i < lw->ngroups && lw->groups[i].counted; i++) {
		const struct leak_group *g = &lw->groups[i];
		int depth = 0, ntags = 0;
		const uintptr_t *ips;

		if (shown++ == LEAK_REPORT_SITES) {
			text_add(&t, "... and %zu more site%s (the exit snapshot lists them all)\n",
				 counted_groups - LEAK_REPORT_SITES, counted_groups - LEAK_REPORT_SITES == 1 ? "" : "s");
			break;
		}
		group_what(lw, g, what, sizeof(what));
		text_add(&t, "\n%s %s in %llu allocation%s of %s", g->cls == CLASS_REFERENCED ? "Still referenced:" :
			 g->cls == CLASS_CACHED ? "Cached:" : "Leaked:", gmt__human_bytes(a, sizeof(a), g->bytes),
			 (unsigned long long)g->count, plural(g->count), what);
		if (g->cls == CLASS_REFERENCED) {
			ref_where(cache, g, where, sizeof(where));
			text_add(&t, "; %s holds 0x%llx\n", where, (unsigned long long)g->ref_value);
		} else if (g->cls == CLASS_LEAKED && lw->scan.done) {
			text_add(&t, "; no host memory holds %s address\n", g->count == 1 ? "its" : "their");
		} else {
			text_add(&t, "\n");
		}
		ips = gmt__stack_get(g->stack, &depth);
		cache->epoch = gmt__stack_epoch(g->stack);
		while (ips != NULL && ntags < depth && gmt__word_is_tag(ips[depth - 1 - ntags]))
			ntags++;
		if (ips != NULL && depth - ntags > 0) {
			struct text_frames tf = { &t, 0 };
			struct frame_sink k = { text_native, text_python, &tf };

			sink_frames(&k, cache, ips, depth - ntags);
			if (tf.k > LEAK_REPORT_FRAMES)
				text_add(&t, "    ... %d more frames\n", tf.k - LEAK_REPORT_FRAMES);
		} else {
			text_add(&t, "    (no stack: GPUMEMTRACE_STACK_DEPTH=0)\n");
		}
	}
	if (shown > 0)
		text_add(&t, "\n");
	for (size_t i = 0; i < lw->ngroups; i++) {
		const struct leak_group *g = &lw->groups[i];
		const struct leak_stack *ls = leak_stack_of(lw, g->stack);

		if (g->counted)
			continue;
		if (brief++ == LEAK_REPORT_BRIEF) {
			text_add(&t, "Not counted: ... and more (the exit snapshot lists them all)\n");
			break;
		}
		if (g->rule != NO_RULE)
			rule_words(in->supp, g->rule, where, sizeof(where));
		else
			snprintf(where, sizeof(where), "GPUMEMTRACE_LEAK_CLASSES leaves out '%s'", class_names[g->cls]);
		text_add(&t, "Not counted: %s %s in %llu allocation%s at %s: %s\n",
			 rule_suppresses(lw, g->rule) ? "suppressed" : class_names[g->cls],
			 gmt__human_bytes(a, sizeof(a), g->bytes), (unsigned long long)g->count, plural(g->count),
			 ls != NULL ? ls->where : "an unknown place", where);
	}
	for (int i = 0; i < lw->nsuspects; i++) {
		const struct leak_suspect *x = &lw->suspects[i];
		const struct leak_stack *ls = leak_stack_of(lw, x->id);

		text_add(&t, "Leak suspect: %s grew in %u windows (fell in %u) to %s at its peak; %s live at exit\n",
			 ls != NULL ? ls->where : "an unknown place", x->rises, x->falls,
			 gmt__human_bytes(a, sizeof(a), x->peak), gmt__human_bytes(b, sizeof(b), x->live));
	}
	text_add(&t, "SUMMARY: %s in %llu allocation%s count as leaks", gmt__human_bytes(a, sizeof(a), lw->total_bytes[TOTAL_COUNTED]),
		 (unsigned long long)lw->total_count[TOTAL_COUNTED], plural(lw->total_count[TOTAL_COUNTED]));
	text_add(&t, " (leaked %s in %llu, still referenced %s in %llu)",
		 gmt__human_bytes(a, sizeof(a), lw->total_bytes[CLASS_LEAKED]), (unsigned long long)lw->total_count[CLASS_LEAKED],
		 gmt__human_bytes(b, sizeof(b), lw->total_bytes[CLASS_REFERENCED]),
		 (unsigned long long)lw->total_count[CLASS_REFERENCED]);
	text_add(&t, "; cached %s in %llu; suppressed %s in %llu\n",
		 gmt__human_bytes(a, sizeof(a), lw->total_bytes[CLASS_CACHED]), (unsigned long long)lw->total_count[CLASS_CACHED],
		 gmt__human_bytes(b, sizeof(b), lw->total_bytes[TOTAL_SUPPRESSED]),
		 (unsigned long long)lw->total_count[TOTAL_SUPPRESSED]);
	if (t.failed) {
		free(t.s);
		return;
	}
	lw->in->report = t.s;
}

/* The oom report: a few lines for the program's stderr. */
static void report_write(const struct gmt__snapshot *s, const struct view *view, const struct report *rep)
{
	const struct gmt__device_state *st = view->diag_in.state;
	char a[32], b[32], c[32];
	size_t at;
	int n;

	n = snprintf(s->report, s->report_len, "out of memory: %s of %s on device %d failed",
		     s->failed->api != NULL ? s->failed->api : "an allocation",
		     gmt__human_bytes(a, sizeof(a), s->failed->size), s->failed->device);
	at = n > 0 ? (size_t)n : 0;
	if (at < s->report_len && st != NULL && st->have_mem)
		at += (size_t)snprintf(s->report + at, s->report_len - at, " with %s free of %s",
				       gmt__human_bytes(b, sizeof(b), st->free_bytes),
				       gmt__human_bytes(c, sizeof(c), st->total_bytes));
	if (at < s->report_len)
		at += (size_t)snprintf(s->report + at, s->report_len - at, "\nverdict: %s: %s",
				       gmt__verdict_name(view->diag.primary), view->diag.v[0].detail);
	for (int i = 0, shown = 0; i < rep->ntop && shown < REPORT_SHOWN && at < s->report_len; i++) {
		uint64_t bytes = rep->bytes[i], count = rep->count[i];
		bool seen = false;

		if (rep->top[i] == UINT32_MAX)
			break;
		for (int k = 0; k < i; k++)
			seen |= strcmp(rep->where[k], rep->where[i]) == 0;
		if (seen)
			continue;
		for (int k = i + 1; k < rep->ntop && rep->top[k] != UINT32_MAX; k++) {
			if (strcmp(rep->where[k], rep->where[i]) == 0) {
				bytes += rep->bytes[k];
				count += rep->count[k];
			}
		}
		at += (size_t)snprintf(s->report + at, s->report_len - at, "%s%s in %llu allocation%s at %s",
				       shown++ == 0 ? "\ntop sites: " : "; ", gmt__human_bytes(a, sizeof(a), bytes),
				       (unsigned long long)count, count == 1 ? "" : "s",
				       rep->where[i][0] != '\0' ? rep->where[i] : "an unknown place");
	}
}

/* Streams the whole document to o. Returns 0 or a negative errno (the
 * writer's own error is in o->err). */
static int out_document(struct gmt__json *o, const struct gmt__snapshot *s)
{
	struct collect c = { 0 };
	struct idset ids = { 0 };
	struct api_table apis = { 0 };
	struct view *view = NULL;
	struct report rep = { .ntop = 0 };
	struct leak_work lw = { .in = s->leaks };
	struct frame_cache cache;
	size_t hi0, hi1;
	int r;

	r = api_table_init(&apis, s);
	if (r < 0)
		goto out;
	view = malloc(sizeof(*view));
	if (view == NULL) {
		r = -ENOMEM;
		goto out;
	}
	c.cap = s->nentries;
	c.v = malloc((c.cap ? c.cap : 1) * sizeof(*c.v));
	if (c.v == NULL) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < s->nentries; i++)
		c.v[c.n++] = &s->entries[i];
	if (c.n > 1)
		qsort(c.v, c.n, sizeof(*c.v), by_section_address);
	/* c.v is sorted by section: three runs, one per array. */
	for (hi0 = 0; hi0 < c.n && section_of(c.v[hi0]) == 0; hi0++)
		;
	for (hi1 = hi0; hi1 < c.n && section_of(c.v[hi1]) == 1; hi1++)
		;
	view_build(s, c.v, hi0, view);
	if (s->leaks != NULL) {
		r = leak_collect(&lw, c.v, hi0, c.v + hi1, c.n - hi1, s->history, &ids);
		if (r < 0)
			goto out;
	}

	out_header(o, s, view);
	gmt__json_str(o, " \"allocations\": [");
	r = out_section(o, c.v, hi0, &apis, &ids);
	if (r < 0)
		goto out;
	gmt__json_str(o, "],\n \"vmm\": {\"reservations\": [");
	r = out_section(o, c.v + hi0, hi1 - hi0, &apis, &ids);
	if (r < 0)
		goto out;
	gmt__json_str(o, "], \"mappings\": [");
	r = out_section(o, c.v + hi1, c.n - hi1, &apis, &ids);
	if (r < 0)
		goto out;
	gmt__json_str(o, "]},\n");
	if (s->failed != NULL && s->failed->stack != 0) {
		r = idset_add(&ids, s->failed->stack);
		if (r < 0)
			goto out;
	}
	if (s->history != NULL) {
		rep.ntop = REPORT_SITES;
		r = out_sites(o, s->history, &ids, rep.top, rep.ntop);
		if (r == 0) {
			out_series(o, s->history, s->time_ns);
			r = out_history(o, s->history, &apis, &ids);
		}
		if (r < 0)
			goto out;
		for (int i = 0; i < rep.ntop; i++) {
			const struct gmt__site *site = rep.top[i] != UINT32_MAX ? gmt__history_site(s->history, rep.top[i]) : NULL;

			rep.bytes[i] = site != NULL ? site->live_bytes : 0;
			rep.count[i] = site != NULL ? site->live_count : 0;
		}
	}
	if (s->leaks != NULL)
		leak_scan(&lw, s);
	cache_open(&cache);
	out_stacks(o, &cache, &ids, &rep, s->leaks != NULL ? &lw : NULL);
	if (s->leaks != NULL) {
		r = leak_classify(&lw);
		if (r == 0) {
			s->leaks->judged = true;
			out_leaks(o, &cache, &lw);
			if (s->leaks->want_report)
				leak_report(&lw, &cache);
		}
	}
	cache_close(&cache);
	if (r < 0)
		goto out;
	/* The report is the program's, the file the tracer's: it is made
	 * whether or not the file could be written. */
	if (s->report != NULL && s->report_len > 0 && view->have_diagnosis)
		report_write(s, view, &rep);
	gmt__json_str(o, "}\n");
	gmt__json_flush(o);
	r = o->err;
out:
	leak_work_free(&lw);
	api_table_free(&apis);
	free(view);
	free(ids.v);
	free(c.v);
	return r;
}

/* ---- the file ------------------------------------------------------------------ */

/* reason goes into a file name: one lowercase word, nothing else. */
static bool reason_ok(const char *reason)
{
	const char *p;

	if (reason == NULL || reason[0] == '\0' || strlen(reason) > 16)
		return false;
	for (p = reason; *p != '\0'; p++) {
		if (*p < 'a' || *p > 'z')
			return false;
	}
	return true;
}

/* Creates a new temporary file in dirfd, named after `name`, mode 0600. Never
 * opens an existing file or a symlink (O_EXCL implies it); another name is
 * tried when one is taken. Returns the fd or a negative errno. */
static int open_temp(int dirfd, const char *name, char *tmp, size_t len)
{
	struct timespec ts;
	int i, fd;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (i = 0; i < TEMP_TRIES; i++) {
		uint64_t salt = ((uint64_t)ts.tv_nsec << 8 ^ (uint64_t)ts.tv_sec) * 0x9e3779b97f4a7c15ull +
				(uint64_t)i * 0x2545f4914f6cdd1dull;

		if (snprintf(tmp, len, ".%s.%08x.tmp", name, (unsigned)(salt >> 32)) >= (int)len)
			return -ENAMETOOLONG;
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* A temporary file of a writer that died (killed during a write) stays
 * forever: the first write of each process removes those it can tell are
 * dead — of a pid that no longer exists here, and untouched for
 * STALE_TEMP_SECONDS (a live writer keeps writing; the age also spares the
 * files of writers on other hosts or in other pid namespaces that share the
 * directory, whose pids mean nothing here). */
#define STALE_TEMP_SECONDS 600

static void sweep_stale_temps(int dirfd)
{
	static atomic_bool swept; /* NOTE: two first writers at once both sweep: harmless */
	struct timespec now;
	struct dirent *e;
	DIR *d;
	int fd;

	if (atomic_exchange_explicit(&swept, true, memory_order_relaxed))
		return;
	fd = dup(dirfd);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		struct stat st;
		int pid;

		if (n < 5 || strcmp(e->d_name + n - 4, ".tmp") != 0 ||
		    sscanf(e->d_name, ".gpumemtrace.%d.", &pid) != 1 || pid <= 0 || pid == getpid())
			continue;
		/* NOTE: the system call: glibc's fstatat is versioned anew in 2.33. */
		if (syscall(SYS_newfstatat, dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
		    now.tv_sec - st.st_mtim.tv_sec < STALE_TEMP_SECONDS)
			continue;
		if (kill(pid, 0) != 0 && errno == ESRCH)
			unlinkat(dirfd, e->d_name, 0);
	}
	closedir(d);
}

/* Moves tmp to name within dirfd unless name exists (as anything: a symlink
 * there is neither followed nor replaced). Returns 0 or a negative errno
 * (-EEXIST when the name is taken). */
static int publish(int dirfd, const char *tmp, const char *name)
{
	/* NOTE: the system call, not glibc's renameat2() wrapper, which only glibc
	 * 2.28 has (the library must load on glibc 2.17: glibc_compat.h). */
	if (syscall(SYS_renameat2, dirfd, tmp, dirfd, name, RENAME_NOREPLACE) == 0)
		return 0;
	/* NOTE: RENAME_NOREPLACE needs Linux 3.15 and filesystem support (some
	 * network and FUSE filesystems answer EINVAL); link() also never replaces,
	 * and does not follow a symlink at the new name. */
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return -errno;
	if (linkat(dirfd, tmp, dirfd, name, 0) != 0)
		return -errno;
	unlinkat(dirfd, tmp, 0);
	return 0;
}

/* 0 when nothing, not even a dangling symlink, has this name in dirfd; 1 when
 * something has; else a negative errno (a directory that cannot be searched).
 * NOTE: an O_PATH open rather than fstatat, whose symbol glibc 2.33 versioned
 * anew (the library must load on glibc 2.17: glibc_compat.h). */
static int name_taken(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return errno == ENOENT ? 0 : -errno;
}

/* The file name of snapshot s with number seq. */
static void snapshot_name(const struct gmt__snapshot *s, uint64_t seq, char *name, size_t len)
{
	if (s->process != NULL && (s->process->rank >= 0 || s->process->local_rank >= 0))
		snprintf(name, len, "gpumemtrace.%d.%s.%llu.rank%lld.json", s->pid, s->reason,
			 (unsigned long long)seq,
			 (long long)(s->process->rank >= 0 ? s->process->rank : s->process->local_rank));
	else
		snprintf(name, len, "gpumemtrace.%d.%s.%llu.json", s->pid, s->reason, (unsigned long long)seq);
}

int gmt__snapshot_write(const struct gmt__snapshot *s, const char *dir, char *path, size_t len)
{
	int saved = errno;
	char name[128], tmp[192];
	struct gmt__json o = { .fd = -1 };
	struct gmt__snapshot numbered = *s;
	bool have_tmp = false;
	int dirfd = -1, fd = -1, r, tries = 0;

	if (dir == NULL || dir[0] == '\0')
		dir = ".";
	if (s->no_file) {
		r = 0;
		goto no_file;
	}
	if (!reason_ok(s->reason)) {
		r = -EINVAL;
		goto no_file;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		r = -errno;
		goto no_file;
	}
	sweep_stale_temps(dirfd);
	/* A name already taken (by anything, a symlink included) is left alone:
	 * the next number is tried, before anything is written, so that the
	 * document says the number its name has. */
	for (;;) {
		snapshot_name(s, numbered.seq, name, sizeof(name));
		r = name_taken(dirfd, name);
		if (r < 0)
			goto no_file;
		if (r == 0)
			break;
		if (++tries == GMT_SNAPSHOT_NAME_TRIES) {
			r = -EEXIST;
			goto no_file;
		}
		numbered.seq++;
	}
	if (s->seq_out != NULL)
		*s->seq_out = numbered.seq;
	s = &numbered;
	if (path != NULL && len > 0 &&
	    snprintf(path, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name) >= (int)len) {
		r = -ENAMETOOLONG;
		goto no_file;
	}
	fd = open_temp(dirfd, name, tmp, sizeof(tmp));
	if (fd < 0) {
		r = fd;
		goto no_file;
	}
	have_tmp = true;
	/* The umask may have taken bits off 0600, never added any: make it
	 * exact. A filesystem without modes may refuse, and the file is no more
	 * open than 0600 either way, so that is no reason to lose the snapshot. */
	(void)fchmod(fd, 0600);
	r = gmt__json_open(&o, fd, false);
	if (r == 0)
		r = out_document(&o, s);
	r = r < 0 ? r : gmt__json_close(&o);
	if (r < 0)
		goto out;
	/* NOTE: no fsync: it can cost seconds on a busy disk, at the moment the
	 * program is dying of OOM. A crash of the program never leaves a partial
	 * file under the final name; a crash of the whole machine may lose the
	 * file or leave it empty. */
	r = close(fd) == 0 ? 0 : -errno;
	fd = -1;
	if (r < 0)
		goto out;
	r = publish(dirfd, tmp, name);
	if (r == 0)
		have_tmp = false;
	goto out;
no_file:
	/* No file (asked for none, or it cannot be made): the document is built
	 * all the same, written nowhere, for the report and the leak check. */
	if (path != NULL && len > 0)
		path[0] = '\0';
	if (gmt__json_open(&o, -1, true) < 0) {
		r = r < 0 ? r : -ENOMEM;
	} else {
		int built = out_document(&o, s);

		r = r < 0 ? r : built;
	}
out:
	gmt__json_close(&o);
	if (fd >= 0)
		close(fd);
	if (have_tmp)
		unlinkat(dirfd, tmp, 0);
	if (dirfd >= 0)
		close(dirfd);
	free(o.buf);
	if (r < 0 && path != NULL && len > 0)
		path[0] = '\0';
	errno = saved;
	return r;
}
