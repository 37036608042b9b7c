/* Frames (frames.h): what the loader and libdw know of a return address,
 * cached per snapshot, with each module's identity; a stack's Python frames
 * put back among its native ones; the site label and the runtime call. */
#define _GNU_SOURCE
#include "analyze/frames.h"

#include "record/event.h"
#include "record/modules.h"
#include "record/pystack.h"
#include "record/stacks.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the set of referenced stack ids ------------------------------------------ */

static uint32_t id_hash(uint32_t id)
{
	return id * 2654435761u;
}

int gmt__idset_add(struct gmt__idset *s, uint32_t id)
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
size_t gmt__idset_sorted(struct gmt__idset *s)
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

static size_t ip_hash(uintptr_t ip)
{
	return (size_t)((ip >> 2) * 0x9e3779b97f4a7c15ull >> 20);
}

/* The slot of ip: its entry, or the empty slot where it would go. The cache
 * is never more than half full, so there is one. */
static struct gmt__frame_info *cache_slot(const struct gmt__frame_cache *c, uintptr_t ip)
{
	size_t mask = c->cap - 1, i;

	for (i = ip_hash(ip) & mask; c->v[i].ip != 0 && c->v[i].ip != ip; i = (i + 1) & mask)
		;
	return &c->v[i];
}

/* Doubles the cache; without memory it stays as it is (and later addresses
 * go uncached). */
static void cache_grow(struct gmt__frame_cache *c)
{
	struct gmt__frame_cache bigger = { .cap = c->cap ? 2 * c->cap : 1024 };
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

/* Whether m is f's module: its path and base, and the same unload (after an
 * unload another build may have them). */
static bool module_is(const struct gmt__module_ref *m, const struct gmt__frame_info *f)
{
	return m->base == f->base && m->unloaded == f->unloaded && strcmp(m->path, f->module) == 0;
}

/* Adds f's module to the map unless it is there, and returns its build-id:
 * `gone`'s for a module unloaded since (f->unloaded), else the one mapped at
 * f's address now. Without memory it is left out of the map (its frames
 * still name it) and the id is put in *spare. NULL for a frame of no
 * module. */
static const struct gmt__build_id *module_note(struct gmt__frame_cache *c, const struct gmt__frame_info *f,
					       const struct gmt__build_id *gone, struct gmt__build_id *spare)
{
	struct gmt__build_id *id = spare;
	size_t i;

	if (f->module == NULL || f->module[0] == '\0')
		return NULL;
	if (c->lastmod < c->nmods && module_is(&c->mods[c->lastmod], f))
		return &c->mods[c->lastmod].id;
	for (i = 0; i < c->nmods; i++) {
		if (module_is(&c->mods[i], f)) {
			c->lastmod = i;
			return &c->mods[i].id;
		}
	}
	if (c->nmods == c->capmods) {
		size_t cap = c->capmods ? 2 * c->capmods : 32;
		struct gmt__module_ref *v = realloc(c->mods, cap * sizeof(*v));

		if (v != NULL) {
			c->mods = v;
			c->capmods = cap;
		}
	}
	if (c->nmods < c->capmods) {
		c->mods[c->nmods] = (struct gmt__module_ref){ .path = f->module, .base = f->base,
							      .unloaded = f->unloaded };
		id = &c->mods[c->nmods].id;
		c->lastmod = c->nmods++;
	}
	if (gone != NULL)
		*id = *gone;
	else
		(void)gmt__build_id_at(f->ip - 1, id); /* as dladdr was asked */
	return id;
}

/* The source frames of f (from libdw) into the cache's pool, from its
 * module's file only while that file is the build `id` (module_note's);
 * none without memory or when libdw knows nothing of the address. */
static void frame_symbolise(struct gmt__frame_cache *c, struct gmt__frame_info *f, const struct gmt__build_id *id)
{
	struct gmt__frame_sym tmp[SYMS_PER_ADDRESS];
	int n;

	/* NOTE: a name without a slash is no file (the vDSO's "linux-vdso.so.1"):
	 * libdw would open whatever the current directory holds by that name. */
	if (c->symbols == NULL || f->module == NULL || strchr(f->module, '/') == NULL || id == NULL)
		return;
	n = gmt__symbols_lookup(c->symbols, f->module, f->base, id, f->ip, tmp,
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

static void frame_resolve(struct gmt__frame_cache *c, struct gmt__frame_info *f, uintptr_t ip)
{
	struct link_map *map = NULL;
	struct gmt__build_id spare;
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
	if (!c->loader_only)
		frame_symbolise(c, f, module_note(c, f, NULL, &spare));
}

/* The frame at ip of a module unloaded after the current stack's capture:
 * named from the module's file by its path and load base while that file is
 * the build that was unloaded, never by what the loader maps at ip now. */
static const struct gmt__frame_info *gone_lookup(struct gmt__frame_cache *c, uintptr_t ip,
						 const struct gmt__unloaded *u, struct gmt__frame_info *spare)
{
	struct gmt__frame_info *f = spare;
	struct gmt__build_id spare_id;

	for (size_t i = 0; i < c->ngone; i++) {
		if (c->gone[i].f.ip == ip && c->gone[i].f.unloaded == u->epoch)
			return &c->gone[i].f;
	}
	if (c->ngone == c->capgone) {
		size_t cap = c->capgone ? 2 * c->capgone : 16;
		struct gmt__gone_frame *v = realloc(c->gone, cap * sizeof(*v));

		if (v != NULL) {
			c->gone = v;
			c->capgone = cap;
		}
	}
	if (c->ngone < c->capgone)
		f = &c->gone[c->ngone++].f;
	memset(f, 0, sizeof(*f));
	f->ip = ip;
	f->module = u->path;
	f->base = u->base;
	f->unloaded = u->epoch;
	if (!c->loader_only)
		frame_symbolise(c, f, module_note(c, f, &u->id, &spare_id));
	return f;
}

/* What the loader knows of ip: from the cache, else resolved (into the cache,
 * or into *spare when the cache has no room or ip is 0). A frame of a module
 * unloaded since the stack's capture comes from gone_lookup. */
static const struct gmt__frame_info *frame_lookup(struct gmt__frame_cache *c, uintptr_t ip,
						  struct gmt__frame_info *spare)
{
	struct gmt__frame_info *f = spare;
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

/* One address as its source frames, innermost first (several where code was
 * inlined), or as one frame the loader names. */
static void sink_native(const struct gmt__frame_sink *k, struct gmt__frame_cache *cache, uintptr_t ip)
{
	struct gmt__frame_info spare;
	const struct gmt__frame_info *f = frame_lookup(cache, ip, &spare);

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

/* Whether the native frame at ip is the interpreter's evaluation loop, by
 * the loader's name or the real function libdw names. */
static bool is_eval_frame(struct gmt__frame_cache *cache, uintptr_t ip)
{
	struct gmt__frame_info spare;
	const struct gmt__frame_info *f = frame_lookup(cache, ip, &spare);

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
static int python_spans(struct gmt__frame_cache *cache, const uintptr_t *ips, int nn, struct py_span *spans)
{
	uintptr_t base = gmt__py_interpreter_base();
	int k = 0, since = -1; /* since: the last loop frame, while only interpreter frames followed */

	for (int i = 0; i < nn; i++) {
		struct gmt__frame_info spare;

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
static int python_insertion(struct gmt__frame_cache *cache, const uintptr_t *ips, int nn)
{
	uintptr_t base = gmt__py_interpreter_base();

	for (int i = 0; base != 0 && i < nn; i++) {
		struct gmt__frame_info spare;

		if (frame_lookup(cache, ips[i], &spare)->base == base)
			return i;
	}
	return nn;
}

static void sink_python(const struct gmt__frame_sink *k, const uintptr_t *words, int n)
{
	for (int i = 0; i < n; i++)
		k->python(k->ctx, words[i]);
}

/* A stack's frames, innermost first: its native frames, with its Python
 * frames (stored after them) in place of the interpreter's evaluation loop
 * and the interpreter frames between loop frames. */
void gmt__frames_sink(const struct gmt__frame_sink *k, struct gmt__frame_cache *cache, const uintptr_t *ips, int n)
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

/* The runtime call that led to the driver (the label docs/tracing.md describes):
 * the outermost frame of the innermost run of frames in a shared cudart — the
 * function the program called, "cudaMalloc". NULL when no shared cudart is on
 * the stack (a static one exports no name to go by).
 * NOTE: derived here, from the stack, rather than by interposing cudaMalloc &c.:
 * a hook on those must call the caller's own cudart, which a return address
 * cannot identify reliably (tail calls; a cudart loaded RTLD_LOCAL is invisible
 * to RTLD_NEXT; several copies may be loaded), and a wrong guess would send the
 * program's allocation to another runtime instance. */
const char *gmt__frames_runtime_call(struct gmt__frame_cache *cache, const uintptr_t *ips, int n)
{
	const char *name = NULL;

	for (int i = 0; i < n && gmt__word_is_native(ips[i]); i++) {
		struct gmt__frame_info spare;
		const struct gmt__frame_info *f = frame_lookup(cache, ips[i], &spare);
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

const char *gmt__base_name(const char *path)
{
	const char *slash = path != NULL ? strrchr(path, '/') : NULL;

	return slash != NULL ? slash + 1 : path;
}

/* An empty cache that knows the main program's path. */
static void cache_open(struct gmt__frame_cache *cache)
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
}

void gmt__frames_open(struct gmt__frame_cache *cache)
{
	cache_open(cache);
	cache->symbols = gmt__symbols_new();
}

void gmt__frames_open_loader(struct gmt__frame_cache *cache)
{
	/* NOTE: not even gmt__symbols_new: its first call loads libdw. */
	cache_open(cache);
	cache->loader_only = true;
}

void gmt__frames_close(struct gmt__frame_cache *cache)
{
	free(cache->gone);
	gmt__symbols_free(cache->symbols);
	free(cache->syms);
	free(cache->mods);
	free(cache->v);
	free(cache->exe);
}
