/* Allocation sites (sites.h). The rule, for one stack's frames innermost
 * first:
 *
 * 1. The CUDA frames: every frame up to the outermost frame of the CUDA
 *    libraries — the driver and runtime modules, the tracer, a function of
 *    CUDA's API or a static runtime's internals by name. What a CUDA frame
 *    called is CUDA's too, whatever its name.
 * 2. Every other frame is library code when its module or Python file
 *    matches a library pattern (the user's "!" patterns first, then the
 *    user's library patterns, then the built-in list), else the program's own.
 * 3. The site's frame is the innermost frame of the program's own code
 *    beyond the CUDA frames; with none, the innermost frame beyond them.
 * 4. Stacks are one site when their chains of the program's own frames, from
 *    the site's frame outwards, are the same.
 * 5. A site is labelled by its frame; sites whose labels would be the same
 *    add their callers in the program's code ("← caller"), as few as tell
 *    them apart, at most GMT_SITE_CALLERS. */
#define _GNU_SOURCE
#include "analyze/sites.h"

#include "record/pystack.h"
#include "record/stacks.h"
#include "util/xlist.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *gmt__frame_role_name(enum gmt__frame_role role)
{
	static const char *const names[GMT_ROLE_COUNT] = { GMT_FRAME_ROLES(GMT_X_WORD) };

	return GMT_X_NAME(names, GMT_ROLE_COUNT, role, "user");
}

/* NOTE: the built-in list names what is nobody's own code in a CUDA program:
 * NVIDIA's libraries (cuBLAS, cuDNN, NCCL, NVRTC...), the frameworks' native
 * libraries, ffi and the Python interpreter, the C and C++ runtimes, and
 * whatever pip or the system installed for Python (packages, the standard
 * library and its extension modules). docs/guide.md lists it. */
static const char *const builtin_libraries[] = {
	"libcu*", "libnv*", "libnccl*",
	"libtorch*", "libc10*", "libcaffe2*", "libshm.so*", "libtensorflow*", "libxla*", "xla_extension*",
	"libffi.so*", "libpython*", "python", "python[0-9]*",
	"libc.so*", "ld-linux*", "libstdc++.so*", "libgcc_s.so*", "libpthread.so*", "libdl.so*", "libm.so*",
	"*/site-packages/*", "*/dist-packages/*", "*/lib-dynload/*",
	"*/lib/python[0-9]*", "*/lib64/python[0-9]*", "<frozen *>",
};

#define GMT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The C runtime's start of every program: in the program's module, nobody's code. */
static const char *const startup_functions[] = { "_start", "__libc_start_main", "__libc_start_call_main" };

static bool matches(const char *pattern, const char *path)
{
	return fnmatch(pattern, strchr(pattern, '/') != NULL ? path : gmt__base_name(path), 0) == 0;
}

static bool matches_any(const char *const *patterns, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++) {
		if (matches(patterns[i], path))
			return true;
	}
	return false;
}

int gmt__site_rules_init(struct gmt__site_rules *r, const char *user)
{
	size_t items = 1;
	char *save = NULL;

	memset(r, 0, sizeof(*r));
	r->builtins = true;
	if (user == NULL || user[0] == '\0')
		return 0;
	for (const char *p = user; *p != '\0'; p++)
		items += *p == ',';
	r->text = strdup(user);
	r->mine = calloc(items, sizeof(*r->mine));
	r->lib = calloc(items, sizeof(*r->lib));
	if (r->text == NULL || r->mine == NULL || r->lib == NULL) {
		gmt__site_rules_free(r);
		r->builtins = true;
		return -ENOMEM;
	}
	for (char *t = strtok_r(r->text, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ' || *t == '\t')
			t++;
		for (char *e = t + strlen(t); e > t && (e[-1] == ' ' || e[-1] == '\t');)
			*--e = '\0';
		if (strcmp(t, "nobuiltin") == 0)
			r->builtins = false;
		else if (t[0] == '!' && t[1] != '\0')
			r->mine[r->nmine++] = t + 1;
		else if (t[0] != '\0' && t[0] != '!')
			r->lib[r->nlib++] = t;
	}
	return 0;
}

void gmt__site_rules_free(struct gmt__site_rules *r)
{
	gmt__addrmap_free(&r->memo);
	free(r->text);
	free(r->mine);
	free(r->lib);
	memset(r, 0, sizeof(*r));
}

/* cudaMalloc, cuMemAlloc_v2, cudart::globalState::..., __cudart123: a name of
 * CUDA's API or of a static runtime's internals. */
static bool is_cuda_function(const char *name)
{
	if (name == NULL)
		return false;
	if (strncmp(name, "cudart::", 8) == 0 || strncmp(name, "__cudart", 8) == 0)
		return true;
	if (strncmp(name, "cuda", 4) == 0 && name[4] >= 'A' && name[4] <= 'Z')
		return true;
	return name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

/* The tracer's own Python code that stands between a framework and the
 * driver (it watches numba's allocations), wherever the package lies: the
 * source tree, an installation's share/gpumemtrace/python, a wheel's
 * site-packages. */
#define GMT_OWN_PYTHON "*/gpumemtrace/frameworks.py"

static bool is_cuda_frame(const struct gmt__site_frame *f)
{
	const char *mod = f->module != NULL ? gmt__base_name(f->module) : NULL;

	if (f->python)
		return f->file != NULL && fnmatch(GMT_OWN_PYTHON, f->file, 0) == 0;
	if (mod != NULL && (strncmp(mod, "libcuda.so", 10) == 0 || strncmp(mod, "libcudart", 9) == 0 ||
			    strncmp(mod, "libgpumemtrace", 14) == 0))
		return true;
	return is_cuda_function(f->function);
}

/* Whether path is library code by the patterns. */
static bool path_is_library(const struct gmt__site_rules *r, const char *path)
{
	if (matches_any(r->mine, r->nmine, path))
		return false;
	if (matches_any(r->lib, r->nlib, path))
		return true;
	return r->builtins && matches_any(builtin_libraries, GMT_ARRAY_SIZE(builtin_libraries), path);
}

/* path_is_library through the memo. */
static bool path_is_library_memo(struct gmt__site_rules *r, const char *path)
{
	size_t library;

	if (!gmt__addrmap_get(&r->memo, path, &library)) {
		library = path_is_library(r, path);
		gmt__addrmap_put(&r->memo, path, library);
	}
	return library != 0;
}

enum gmt__frame_role gmt__site_frame_role(struct gmt__site_rules *r, const struct gmt__site_frame *f)
{
	const char *path = f->python ? f->file : f->module;

	if (is_cuda_frame(f))
		return GMT_ROLE_CUDA;
	if (path == NULL || path[0] == '\0' || strcmp(path, "?") == 0)
		return GMT_ROLE_USER;
	if (path_is_library_memo(r, path))
		return GMT_ROLE_LIBRARY;
	for (size_t i = 0; !f->python && f->function != NULL && i < GMT_ARRAY_SIZE(startup_functions); i++) {
		if (strcmp(f->function, startup_functions[i]) == 0)
			return GMT_ROLE_LIBRARY;
	}
	return GMT_ROLE_USER;
}

const char *gmt__site_frame_text(const struct gmt__site_frame *f, char *buf, size_t len)
{
	const char *mod = f->module != NULL && f->module[0] != '\0' ? gmt__base_name(f->module) : "?";

	if (f->file != NULL && f->line > 0)
		snprintf(buf, len, "%s (%s:%d)", f->function != NULL ? f->function : "?", gmt__base_name(f->file),
			 f->line);
	else if (f->python)
		snprintf(buf, len, "%s (%s)", f->function != NULL ? f->function : "?",
			 f->file != NULL ? gmt__base_name(f->file) : "?");
	else if (f->function != NULL)
		snprintf(buf, len, "%s (%s)", f->function, mod);
	else
		snprintf(buf, len, "%s+0x%llx", mod, (unsigned long long)f->offset);
	return buf;
}

/* ---- one stack ------------------------------------------------------------------ */

/* The written frames of one stack, collected through a frame sink. */
struct collect {
	struct gmt__site_frame *v;
	int n, cap;
	bool failed;
};

static void collect_push(struct collect *c, const struct gmt__site_frame *f)
{
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		struct gmt__site_frame *v = realloc(c->v, (size_t)cap * sizeof(*v));

		if (v == NULL) {
			c->failed = true;
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = *f;
}

static void collect_native(void *ctx, const struct gmt__frame_info *f, const struct gmt__frame_sym *sym,
			   const char *function)
{
	struct gmt__site_frame x = {
		.module = f->module, .function = function, .offset = f->module != NULL ? f->ip - f->base : f->ip,
		.file = sym != NULL ? sym->file : NULL, .line = sym != NULL ? sym->line : 0,
		.inlined = sym != NULL && sym->inlined,
	};

	collect_push(ctx, &x);
}

static void collect_python(void *ctx, uintptr_t word)
{
	struct gmt__site_frame x = { .python = true };

	(void)gmt__py_frame(word, &x.function, &x.file, &x.line);
	collect_push(ctx, &x);
}

/* Hashes of a chain of frames: two FNV-1a streams (different offsets), so
 * that two chains share an id only when 128 bits agree. */
struct chain_hash {
	uint64_t a, b;
};

static void hash_bytes(struct chain_hash *h, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++) {
		h->a = (h->a ^ s[i]) * 0x100000001b3ull;
		h->b = (h->b ^ s[i]) * 0x100000001b3ull;
		h->b ^= h->b >> 29;
	}
}

static void hash_str(struct chain_hash *h, const char *s)
{
	hash_bytes(h, s != NULL ? s : "", s != NULL ? strlen(s) + 1 : 1);
}

/* What names a frame across stacks: not its address. */
static void hash_frame(struct chain_hash *h, const struct gmt__site_frame *f)
{
	hash_bytes(h, &f->python, sizeof(f->python));
	hash_str(h, f->function);
	hash_str(h, f->file);
	hash_bytes(h, &f->line, sizeof(f->line));
	if (!f->python) {
		hash_str(h, f->module != NULL ? gmt__base_name(f->module) : NULL);
		if (f->function == NULL)
			hash_bytes(h, &f->offset, sizeof(f->offset));
	}
}

/* What the rule concludes for one stack before labels are settled. */
struct gmt__site_pending {
	struct chain_hash hash;
	char *text;                        /* the site frame in words */
	char *callers[GMT_SITE_CALLERS];   /* the next frames of the program's code, in words */
	int caller_frames[GMT_SITE_CALLERS]; /* their indices in the stack's frames */
	int ncallers;
	size_t index;                      /* in ids */
};

/* Steps 1 to 3 of the rule for frames v[0..n): each frame's role into
 * roles[0..n), and the site's frame (-1: no frames); *user whether it is the
 * program's own. */
static int assign_roles(const struct gmt__site_frame *v, int n, struct gmt__site_rules *rules, uint8_t *roles,
			bool *user)
{
	int ncuda = 0, frame = -1;

	for (int i = 0; i < n; i++) {
		if (is_cuda_frame(&v[i]))
			ncuda = i + 1;
	}
	for (int i = 0; i < n; i++) {
		roles[i] = (uint8_t)(i < ncuda ? GMT_ROLE_CUDA : gmt__site_frame_role(rules, &v[i]));
		if (frame < 0 && roles[i] == GMT_ROLE_USER)
			frame = i;
	}
	*user = frame >= 0;
	if (!*user && n > 0)
		frame = ncuda < n ? ncuda : n - 1;
	return frame;
}

static int judge_stack(struct gmt__stack_site *out, struct gmt__site_pending *p, const struct gmt__site_frame *v,
		       int n, struct gmt__site_rules *rules)
{
	char buf[512];

	p->hash = (struct chain_hash){ 0xcbf29ce484222325ull, 0x84222325cbf29ce4ull };
	out->nframes = n;
	out->frame = -1;
	out->roles = n > 0 ? malloc((size_t)n) : NULL;
	if (n > 0 && out->roles == NULL)
		return -ENOMEM;
	out->frame = assign_roles(v, n, rules, out->roles, &out->user);
	out->python = out->frame >= 0 && v[out->frame].python;
	if (out->frame < 0) {
		p->text = strdup("(no frames)");
		hash_str(&p->hash, "(no frames)");
		return p->text != NULL ? 0 : -ENOMEM;
	}
	p->text = strdup(gmt__site_frame_text(&v[out->frame], buf, sizeof(buf)));
	if (p->text == NULL)
		return -ENOMEM;
	hash_bytes(&p->hash, &out->user, sizeof(out->user));
	hash_frame(&p->hash, &v[out->frame]);
	for (int i = out->frame + 1; out->user && i < n; i++) {
		if (out->roles[i] != GMT_ROLE_USER)
			continue;
		hash_frame(&p->hash, &v[i]);
		if (p->ncallers < GMT_SITE_CALLERS) {
			p->caller_frames[p->ncallers] = i;
			p->callers[p->ncallers] = strdup(gmt__site_frame_text(&v[i], buf, sizeof(buf)));
			if (p->callers[p->ncallers++] == NULL)
				return -ENOMEM;
		}
	}
	return 0;
}

/* ---- sites across stacks -------------------------------------------------------- */

static int by_hash(const void *x, const void *y)
{
	const struct gmt__site_pending *a = x, *b = y;

	if (a->hash.a != b->hash.a)
		return a->hash.a < b->hash.a ? -1 : 1;
	if (a->hash.b != b->hash.b)
		return a->hash.b < b->hash.b ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

static int by_index(const void *x, const void *y)
{
	const struct gmt__site_pending *a = *(const struct gmt__site_pending *const *)x;
	const struct gmt__site_pending *b = *(const struct gmt__site_pending *const *)y;

	return a->index < b->index ? -1 : a->index > b->index;
}

static int by_text(const void *x, const void *y)
{
	const struct gmt__site_pending *a = *(const struct gmt__site_pending *const *)x;
	const struct gmt__site_pending *b = *(const struct gmt__site_pending *const *)y;
	int c = strcmp(a->text, b->text);

	return c != 0 ? c : by_index(x, y);
}

/* The label of site `p` with its first k callers. */
static char *label_with(const struct gmt__site_pending *p, int k)
{
	size_t len = strlen(p->text) + 1;
	char *s;

	for (int i = 0; i < k && i < p->ncallers; i++)
		len += strlen(" \u2190 ") + strlen(p->callers[i]);
	s = malloc(len);
	if (s == NULL)
		return NULL;
	strcpy(s, p->text);
	for (int i = 0; i < k && i < p->ncallers; i++) {
		strcat(s, " \u2190 ");
		strcat(s, p->callers[i]);
	}
	return s;
}

/* Whether the k-caller labels of reps[0..n) are all different. */
static bool distinct_with(struct gmt__site_pending **reps, size_t n, int k, char **labels)
{
	bool ok = true;

	for (size_t i = 0; i < n; i++) {
		labels[i] = label_with(reps[i], k);
		if (labels[i] == NULL)
			return false;
	}
	for (size_t i = 0; ok && i < n; i++) {
		for (size_t j = i + 1; ok && j < n; j++)
			ok = strcmp(labels[i], labels[j]) != 0;
	}
	return ok;
}

/* Labels reps[0..n), one site each, all with the same frame text: the fewest
 * callers that tell them apart. Each label goes to labels[site id - 1], the
 * number of callers it may name to named[site id - 1]. */
static int label_run(struct gmt__site_pending **reps, size_t n, const uint32_t *site_of, char **labels, int *named)
{
	char **try = calloc(n, sizeof(*try));
	int k = 0;

	if (try == NULL)
		return -ENOMEM;
	for (;; k++) {
		bool ok = distinct_with(reps, n, k, try);

		if (ok || k == GMT_SITE_CALLERS)
			break;
		for (size_t i = 0; i < n; i++) {
			free(try[i]);
			try[i] = NULL;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (try[i] == NULL) {
			for (size_t j = 0; j < n; j++)
				free(try[j]);
			free(try);
			return -ENOMEM;
		}
		labels[site_of[reps[i]->index] - 1] = try[i];
		named[site_of[reps[i]->index] - 1] = k;
	}
	free(try);
	return 0;
}

static void pending_free(struct gmt__site_pending *p, size_t n)
{
	for (size_t i = 0; p != NULL && i < n; i++) {
		free(p[i].text);
		for (int k = 0; k < p[i].ncallers; k++)
			free(p[i].callers[k]);
	}
	free(p);
}

/* Site ids in order of their first stack; returns how many. */
static uint32_t number_sites(struct gmt__site_pending *p, size_t n, uint32_t *site_of, struct gmt__site_pending **reps)
{
	size_t nreps = 0;
	uint32_t id = 0;

	qsort(p, n, sizeof(*p), by_hash);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || p[i].hash.a != p[i - 1].hash.a || p[i].hash.b != p[i - 1].hash.b)
			reps[nreps++] = &p[i];
	}
	qsort(reps, nreps, sizeof(*reps), by_index);
	for (size_t r = 0; r < nreps; r++)
		site_of[reps[r]->index] = ++id;
	for (size_t i = 0; i < n; i++) {
		if (site_of[p[i].index] == 0)
			site_of[p[i].index] = site_of[(i > 0 ? &p[i - 1] : &p[i])->index];
	}
	return id;
}

static int label_sites(struct gmt__site_pending **reps, uint32_t nsites, const uint32_t *site_of, char **labels,
		       int *named)
{
	int r = 0;

	qsort(reps, nsites, sizeof(*reps), by_text);
	for (size_t i = 0, j; r == 0 && i < nsites; i = j) {
		for (j = i + 1; j < nsites && strcmp(reps[j]->text, reps[i]->text) == 0; j++)
			;
		r = label_run(reps + i, j - i, site_of, labels, named);
	}
	return r;
}

int gmt__sites_begin(struct gmt__sites *out, size_t n)
{
	memset(out, 0, sizeof(*out));
	out->v = calloc(n ? n : 1, sizeof(*out->v));
	out->pending = calloc(n ? n : 1, sizeof(*out->pending));
	if (out->v == NULL || out->pending == NULL) {
		gmt__sites_free(out);
		return -ENOMEM;
	}
	out->n = n;
	for (size_t i = 0; i < n; i++)
		out->pending[i].index = i;
	return 0;
}

int gmt__sites_add(struct gmt__sites *s, size_t i, const struct gmt__site_frame *frames, int n,
		   struct gmt__site_rules *rules)
{
	if (i >= s->n || s->pending == NULL)
		return -EINVAL;
	return judge_stack(&s->v[i], &s->pending[i], frames, n, rules);
}

int gmt__sites_finish(struct gmt__sites *s)
{
	struct gmt__site_pending **reps = calloc(s->n ? s->n : 1, sizeof(*reps));
	uint32_t *site_of = calloc(s->n ? s->n : 1, sizeof(*site_of));
	int *named = calloc(s->n ? s->n : 1, sizeof(*named)); /* by site id - 1 */
	int r = reps != NULL && site_of != NULL && named != NULL ? 0 : -ENOMEM;

	if (r == 0) {
		/* The pending entries move (sorted by hash); site_of and reps
		 * follow them by index. */
		s->nsites = number_sites(s->pending, s->n, site_of, reps);
		s->labels = calloc(s->nsites ? s->nsites : 1, sizeof(*s->labels));
		r = s->labels != NULL ? label_sites(reps, s->nsites, site_of, s->labels, named) : -ENOMEM;
	}
	for (size_t i = 0; r == 0 && i < s->n; i++) {
		s->v[i].site = site_of[i];
		s->v[i].label = s->labels[site_of[i] - 1];
	}
	/* Each stack's own index of the last caller its site's label names:
	 * the stacks of one site have the same chain, not the same frames. */
	for (size_t j = 0; r == 0 && j < s->n; j++) {
		const struct gmt__site_pending *p = &s->pending[j];
		int k = named[site_of[p->index] - 1];

		k = k < p->ncallers ? k : p->ncallers;
		s->v[p->index].label_frame = k > 0 ? p->caller_frames[k - 1] : s->v[p->index].frame;
	}
	pending_free(s->pending, s->n);
	s->pending = NULL;
	free(reps);
	free(site_of);
	free(named);
	return r;
}

int gmt__sites_build(struct gmt__sites *out, struct gmt__frame_cache *cache, const uint32_t *ids, size_t n,
		     struct gmt__site_rules *rules, const struct gmt__frame_source *more)
{
	struct collect c = { 0 };
	struct gmt__frame_sink sink = { collect_native, collect_python, &c };
	int r = gmt__sites_begin(out, n);

	for (size_t i = 0; r == 0 && i < n; i++) {
		const struct gmt__site_frame *given;
		int depth = 0, ngiven = 0;
		const uintptr_t *ips;
		int frames;

		if (more != NULL && more->frames(more->ctx, ids[i], &given, &ngiven)) {
			r = gmt__sites_add(out, i, given, ngiven, rules);
			continue;
		}
		ips = gmt__stack_get(ids[i], &depth);
		frames = gmt__stack_frames(ips, depth);
		cache->epoch = gmt__stack_epoch(ids[i]);
		c.n = 0;
		if (ips != NULL)
			gmt__frames_sink(&sink, cache, ips, frames);
		r = c.failed ? -ENOMEM : gmt__sites_add(out, i, c.v, c.n, rules);
	}
	if (r == 0)
		r = gmt__sites_finish(out);
	free(c.v);
	if (r < 0)
		gmt__sites_free(out);
	return r;
}

/* A frame of the program's own, by what tells one call apart from another
 * without debug information: a native frame by its module and offset. */
static void hash_call_frame(struct chain_hash *h, const struct gmt__site_frame *f)
{
	if (f->python) {
		hash_frame(h, f);
		return;
	}
	hash_bytes(h, &f->python, sizeof(f->python));
	hash_str(h, f->module != NULL ? gmt__base_name(f->module) : NULL);
	hash_bytes(h, &f->offset, sizeof(f->offset));
}

uint64_t gmt__site_call_frames(const struct gmt__site_frame *v, int n, struct gmt__site_rules *rules)
{
	struct chain_hash h = { 0xcbf29ce484222325ull, 0x84222325cbf29ce4ull };
	uint8_t *roles = n > 0 ? malloc((size_t)n) : NULL;
	uint64_t key;
	bool user;
	int frame;

	if (n > 0 && roles == NULL)
		return 0;
	frame = assign_roles(v, n, rules, roles, &user);
	hash_bytes(&h, &user, sizeof(user));
	/* The chain step 4 compares: the site's frame and its callers in the
	 * program's code. Without one of the program's (a library's thread)
	 * nothing tells its calls apart: one for all. */
	for (int i = frame; user && i < n; i++) {
		if (roles[i] == GMT_ROLE_USER)
			hash_call_frame(&h, &v[i]);
	}
	free(roles);
	key = h.a ^ (h.b << 32 | h.b >> 32);
	return key != 0 ? key : 1;
}

uint64_t gmt__site_call(struct gmt__frame_cache *cache, struct gmt__site_rules *rules, uint32_t id)
{
	struct collect c = { 0 };
	struct gmt__frame_sink sink = { collect_native, collect_python, &c };
	int depth = 0;
	const uintptr_t *ips = id != 0 ? gmt__stack_get(id, &depth) : NULL;
	uint64_t key = 0;

	if (ips == NULL)
		return 0;
	cache->epoch = gmt__stack_epoch(id);
	gmt__frames_sink(&sink, cache, ips, gmt__stack_frames(ips, depth));
	if (!c.failed)
		key = gmt__site_call_frames(c.v, c.n, rules);
	free(c.v);
	return key;
}

void gmt__sites_free(struct gmt__sites *s)
{
	pending_free(s->pending, s->n);
	for (size_t i = 0; s->v != NULL && i < s->n; i++)
		free(s->v[i].roles);
	for (uint32_t i = 0; s->labels != NULL && i < s->nsites; i++)
		free(s->labels[i]);
	free(s->labels);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

static int by_id(const void *key, const void *elem)
{
	uint32_t a = *(const uint32_t *)key, b = *(const uint32_t *)elem;

	return a < b ? -1 : a > b;
}

const struct gmt__stack_site *gmt__sites_of(const struct gmt__sites *s, const uint32_t *ids, uint32_t id)
{
	const uint32_t *at = s->n > 0 ? bsearch(&id, ids, s->n, sizeof(*ids), by_id) : NULL;

	return at != NULL ? &s->v[at - ids] : NULL;
}
