/* Leak suppressions (suppress.h): the built-in rules, the file parser, the
 * LeakSanitizer-style pattern match, and the memo of what each name matched. */
#define _GNU_SOURCE
#include "analyze/suppress.h"

#include "util/input.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What frameworks and NVIDIA's libraries keep for the life of the process.
 * NOTE: matched on names every build of them carries: the module's file name,
 * or a C++ class name, which the mangled name holds as well as the demangled
 * one. */
static const struct {
	enum gmt__supp_type type;
	const char *pattern, *why;
} builtins[] = {
	{ GMT_SUPP_CACHED, "CUDACachingAllocator", "PyTorch's CUDA caching allocator" },
	{ GMT_SUPP_CACHED, "CudaMallocAsync", "PyTorch's cudaMallocAsync allocator" },
	{ GMT_SUPP_CACHED, "cupy/cuda/memory", "CuPy's memory pool" },
	{ GMT_SUPP_CACHED, "BFCAllocator", "XLA's BFC allocator" },
	{ GMT_SUPP_CACHED, "GpuCudaMallocAsyncAllocator", "XLA's stream-ordered allocator" },
	{ GMT_SUPP_LEAK, "libcublas", "cuBLAS handle workspace" },
	{ GMT_SUPP_LEAK, "libcudnn", "cuDNN handle workspace" },
	{ GMT_SUPP_LEAK, "libnccl", "NCCL communicator buffers" },
	{ GMT_SUPP_LEAK, "libcufft", "cuFFT plan workspace" },
	{ GMT_SUPP_LEAK, "libcusparse", "cuSPARSE handle workspace" },
	{ GMT_SUPP_LEAK, "libcusolver", "cuSOLVER handle workspace" },
	{ GMT_SUPP_LEAK, "libcurand", "cuRAND generator state" },
};

/* The pattern's anchors stripped, and whether a `*` is left. */
/* ---- storage and index ----------------------------------------------------------- */

/* Rules with a body longer than this are tried one by one. */
#define INDEX_MAX_LEN 256
#define LENGTH_WORDS ((INDEX_MAX_LEN + 64) / 64)

enum { CLASS_SUB, CLASS_PREFIX, CLASS_SUFFIX, CLASS_EXACT, CLASSES };

struct chunk {
	struct chunk *next;
	size_t used, cap;
	char data[];
};

struct gmt__supp_store {
	struct chunk *chunks;         /* text, never moved */
	uint32_t *slots;              /* open addressing: rule index + 1; 0 empty */
	size_t cap;                   /* slots, a power of two, or 0: no index */
	size_t indexed;               /* rules in the slots */
	size_t *scan, nscan, scancap; /* rules tried one by one, in order */
	uint64_t lengths[CLASSES][LENGTH_WORDS]; /* body lengths present, per class */
};

static struct gmt__supp_store *store_of(struct gmt__supp *s)
{
	if (s->store == NULL)
		s->store = calloc(1, sizeof(*s->store));
	return s->store;
}

/* A copy of text[0..len) with a NUL, kept until gmt__supp_free. */
static const char *store_text(struct gmt__supp *s, const char *text, size_t len)
{
	struct gmt__supp_store *st = store_of(s);
	struct chunk *c;
	char *out;

	if (st == NULL)
		return NULL;
	c = st->chunks;
	if (c == NULL || c->cap - c->used < len + 1) {
		size_t cap = len + 1 > (64u << 10) ? len + 1 : (64u << 10);

		c = malloc(sizeof(*c) + cap);
		if (c == NULL)
			return NULL;
		*c = (struct chunk){ .next = st->chunks, .cap = cap };
		st->chunks = c;
	}
	out = c->data + c->used;
	memcpy(out, text, len);
	out[len] = '\0';
	c->used += len + 1;
	return out;
}

static int class_of(const struct gmt__supp_glob *g)
{
	return g->lead ? (g->trail ? CLASS_SUB : CLASS_SUFFIX) : (g->trail ? CLASS_PREFIX : CLASS_EXACT);
}

static uint64_t key_hash(int cls, const char *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)cls;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)p[i]) * 0x100000001b3ull;
	return h ^ h >> 29;
}

/* The first rule of class cls whose body is p[0..len), or SIZE_MAX. */
static size_t lookup(const struct gmt__supp *s, int cls, const char *p, size_t len)
{
	const struct gmt__supp_store *st = s->store;
	size_t mask = st->cap - 1;

	for (size_t i = key_hash(cls, p, len) & mask; st->slots[i] != 0; i = (i + 1) & mask) {
		const struct gmt__supp_rule *r = &s->v[st->slots[i] - 1];

		if (r->glob.len == len && class_of(&r->glob) == cls && memcmp(r->glob.body, p, len) == 0)
			return st->slots[i] - 1;
	}
	return SIZE_MAX;
}

/* Rebuilds the index of all rules (after rules were added). Without memory
 * there is none, and every rule is tried one by one: the same answers. */
static void index_build(struct gmt__supp *s)
{
	struct gmt__supp_store *st = store_of(s);
	size_t want = 16;

	if (st == NULL)
		return;
	free(st->slots);
	st->slots = NULL;
	st->cap = st->indexed = st->nscan = 0;
	memset(st->lengths, 0, sizeof(st->lengths));
	while (want < 2 * s->n)
		want *= 2;
	st->slots = calloc(want, sizeof(*st->slots));
	if (st->slots == NULL || s->n >= UINT32_MAX)
		goto none;
	st->cap = want;
	for (size_t i = 0; i < s->n; i++) {
		const struct gmt__supp_glob *g = &s->v[i].glob;
		int cls = class_of(g);

		if (g->star || g->len > INDEX_MAX_LEN) {
			if (st->nscan == st->scancap) {
				size_t cap = st->scancap ? 2 * st->scancap : 16;
				size_t *v = realloc(st->scan, cap * sizeof(*v));

				if (v == NULL)
					goto none;
				st->scan = v;
				st->scancap = cap;
			}
			st->scan[st->nscan++] = i;
			continue;
		}
		if (lookup(s, cls, g->body, g->len) == SIZE_MAX) { /* an earlier equal rule wins */
			size_t mask = st->cap - 1, k = key_hash(cls, g->body, g->len) & mask;

			while (st->slots[k] != 0)
				k = (k + 1) & mask;
			st->slots[k] = (uint32_t)(i + 1);
		}
		st->lengths[cls][g->len / 64] |= 1ull << (g->len % 64);
		st->indexed++;
	}
	return;
none:
	free(st->slots);
	st->slots = NULL;
	st->cap = 0;
}

static struct gmt__supp_glob glob_compile(const char *pattern, size_t len)
{
	struct gmt__supp_glob g = { .body = pattern, .len = len, .lead = true, .trail = true };

	if (g.len > 0 && g.body[0] == '^') {
		g.lead = false;
		g.body++;
		g.len--;
	}
	if (g.len > 0 && g.body[g.len - 1] == '$') {
		g.trail = false;
		g.len--;
	}
	g.star = memchr(g.body, '*', g.len) != NULL;
	return g;
}

static int add(struct gmt__supp *s, enum gmt__supp_type type, const char *pattern, size_t len,
	       const char *source, int line, const char *why)
{
	struct gmt__supp_rule *r;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct gmt__supp_rule *v = realloc(s->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	r = &s->v[s->n];
	*r = (struct gmt__supp_rule){ .type = type, .line = line, .why = why, .source = source };
	r->pattern = store_text(s, pattern, len);
	if (r->pattern == NULL)
		return -ENOMEM;
	r->glob = glob_compile(r->pattern, len);
	s->n++;
	return 0;
}

int gmt__supp_add_builtins(struct gmt__supp *s)
{
	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
		int r = add(s, builtins[i].type, builtins[i].pattern, strlen(builtins[i].pattern), "built-in", 0,
			    builtins[i].why);

		if (r < 0)
			return r;
	}
	index_build(s);
	return 0;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Parses one line into *type and [*pat, *pat + *len). Returns 1 for a rule,
 * 0 for a comment or blank line, -1 when malformed. */
static int parse_line(char *line, enum gmt__supp_type *type, const char **pat, size_t *len)
{
	char *p = line, *end = line + strlen(line), *colon;

	while (p < end && blank(*p))
		p++;
	while (end > p && blank(end[-1]))
		end--;
	*end = '\0';
	if (p == end || *p == '#')
		return 0;
	colon = strchr(p, ':');
	if (colon == NULL)
		return -1;
	if (colon - p == 4 && strncmp(p, "leak", 4) == 0)
		*type = GMT_SUPP_LEAK;
	else if (colon - p == 6 && strncmp(p, "cached", 6) == 0)
		*type = GMT_SUPP_CACHED;
	else
		return -1;
	for (p = colon + 1; p < end && blank(*p); p++)
		;
	if (p == end)
		return -1;
	*pat = p;
	*len = (size_t)(end - p);
	return 1;
}

int gmt__supp_load(struct gmt__supp *s, const char *path, char *err, size_t errlen)
{
	size_t first = s->n, cap = 0, len;
	char *line = NULL;
	const char *pat, *source;
	enum gmt__supp_type type;
	int lineno = 0, r = 0;
	ssize_t got;
	FILE *f;

	if (errlen > 0)
		err[0] = '\0';
	f = gmt__input_open(path, "suppressions", GMT_SUPPRESSIONS_MAX_BYTES, err, errlen);
	if (f == NULL)
		return -errno;
	source = store_text(s, path, strlen(path)); /* one copy for all its rules */
	if (source == NULL) {
		fclose(f);
		snprintf(err, errlen, "%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	errno = 0;
	while ((got = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if ((size_t)got != strlen(line)) {
			snprintf(err, errlen, "%s:%d: a NUL byte in a suppression", path, lineno);
			r = -EINVAL;
			break;
		}
		switch (parse_line(line, &type, &pat, &len)) {
		case 0:
			continue;
		case 1:
			r = add(s, type, pat, len, source, lineno, NULL);
			if (r < 0)
				snprintf(err, errlen, "%s: %s", path, strerror(-r));
			break;
		default:
			snprintf(err, errlen, "%s:%d: expected leak:PATTERN or cached:PATTERN, got '%.60s%s'", path,
				 lineno, line + strspn(line, " \t"), strlen(line) > 60 ? "..." : "");
			r = -EINVAL;
			break;
		}
		if (r < 0)
			break;
	}
	if (r == 0 && ferror(f)) {
		r = errno != 0 ? -errno : -EIO;
		snprintf(err, errlen, "%s: cannot read suppressions: %s", path, strerror(-r));
	}
	free(line);
	fclose(f);
	if (r < 0)
		s->n = first; /* their text stays in the store until gmt__supp_free */
	index_build(s);
	return r;
}

void gmt__supp_free(struct gmt__supp *s)
{
	if (s->store != NULL) {
		for (struct chunk *c = s->store->chunks, *next; c != NULL; c = next) {
			next = c->next;
			free(c);
		}
		free(s->store->slots);
		free(s->store->scan);
		free(s->store);
	}
	free(s->v);
	*s = (struct gmt__supp){ 0 };
}

static char glob_at(const struct gmt__supp_glob *g, size_t i)
{
	if (g->lead && i-- == 0)
		return '*';
	return i < g->len ? g->body[i] : '*'; /* past the end only when trail */
}

/* Whether t[0..tn) matches the pattern as a whole, `*` matching any run.
 * NOTE: the classic linear backtracking: on a mismatch, the last `*` takes
 * one more character; no recursion, O(pattern * text) at worst. */
static bool glob(const struct gmt__supp_glob *g, const char *t, size_t tn)
{
	size_t n = g->len + g->lead + g->trail, i = 0, j = 0, star = SIZE_MAX, mark = 0;

	while (j < tn) {
		if (i < n && glob_at(g, i) == '*') {
			star = i++;
			mark = j;
		} else if (i < n && glob_at(g, i) == t[j]) {
			i++;
			j++;
		} else if (star != SIZE_MAX) {
			i = star + 1;
			j = ++mark;
		} else {
			return false;
		}
	}
	while (i < n && glob_at(g, i) == '*')
		i++;
	return i == n;
}

/* Whether text matches g. Without a `*` of its own a pattern asks for a
 * substring, a prefix, a suffix or the whole name: the C library's string
 * functions answer those, faster than the loop. */
static bool glob_match(const struct gmt__supp_glob *g, const char *text)
{
	size_t tn;

	if (text == NULL)
		return false;
	if (!g->star && !g->lead) /* ^body or ^body$ */
		return strncmp(text, g->body, g->len) == 0 && (g->trail || text[g->len] == '\0');
	tn = strlen(text);
	if (g->star)
		return glob(g, text, tn);
	if (g->trail) /* body */
		return g->len == 0 || memmem(text, tn, g->body, g->len) != NULL;
	/* body$ */
	return tn >= g->len && memcmp(text + tn - g->len, g->body, g->len) == 0;
}

bool gmt__supp_pattern_match(const char *pattern, const char *text)
{
	struct gmt__supp_glob g = glob_compile(pattern, strlen(pattern));

	return glob_match(&g, text);
}

/* The first rule of class cls (by the index) that text[0..tn) matches, or
 * SIZE_MAX: a lookup for every piece of the text of a length some rule of
 * the class has. */
static size_t indexed_first(const struct gmt__supp *s, int cls, const char *text, size_t tn)
{
	const uint64_t *lengths = s->store->lengths[cls];
	size_t best = SIZE_MAX;

	for (size_t w = 0; w < LENGTH_WORDS; w++) {
		for (uint64_t bits = lengths[w]; bits != 0; bits &= bits - 1) {
			size_t len = w * 64 + (size_t)__builtin_ctzll(bits), k;

			if (len > tn)
				return best;
			if (cls == CLASS_EXACT && len != tn)
				continue;
			if (cls == CLASS_SUB) {
				for (size_t at = 0; at + len <= tn; at++) {
					k = lookup(s, cls, text + at, len);
					best = k < best ? k : best;
				}
				continue;
			}
			k = lookup(s, cls, cls == CLASS_SUFFIX ? text + tn - len : text, len);
			best = k < best ? k : best;
		}
	}
	return best;
}

/* Probes the index would take for a text of tn bytes. */
static size_t index_cost(const struct gmt__supp_store *st, size_t tn)
{
	size_t cost = 0;

	for (size_t len = 0; len <= tn && len <= INDEX_MAX_LEN; len++) {
		if (st->lengths[CLASS_SUB][len / 64] >> (len % 64) & 1)
			cost += (tn - len + 1) * (len + 1);
		for (int cls = CLASS_PREFIX; cls < CLASSES; cls++)
			cost += (st->lengths[cls][len / 64] >> (len % 64) & 1) * (len + 1);
	}
	return cost;
}

size_t gmt__supp_first(const struct gmt__supp *s, const char *text)
{
	const struct gmt__supp_store *st;
	size_t best = SIZE_MAX, tn;

	if (s == NULL || text == NULL || s->n == 0)
		return SIZE_MAX;
	st = s->store;
	tn = strlen(text);
	/* Without the index, or where one by one is cheaper: every rule. */
	if (st == NULL || st->cap == 0 || index_cost(st, tn) > st->indexed * (tn + 1)) {
		for (size_t i = 0; i < s->n; i++) {
			if (glob_match(&s->v[i].glob, text))
				return i;
		}
		return SIZE_MAX;
	}
	for (size_t j = 0; j < st->nscan; j++) {
		if (glob_match(&s->v[st->scan[j]].glob, text)) {
			best = st->scan[j];
			break;
		}
	}
	for (int cls = 0; cls < CLASSES; cls++) {
		size_t k = indexed_first(s, cls, text, tn);

		best = k < best ? k : best;
	}
	return best;
}

void gmt__supp_frame(const struct gmt__supp *s, const char *function, const char *module,
		     const char *file, size_t *best)
{
	/* The first rule any of the names matches: the lowest of their firsts. */
	const char *names[] = { function, module, file };

	for (int i = 0; i < 3; i++) {
		size_t k = gmt__supp_first(s, names[i]);

		*best = k < *best ? k : *best;
	}
}

/* ---- the memo ------------------------------------------------------------------ */

void gmt__supp_memo_init(struct gmt__supp_memo *m, const struct gmt__supp *s)
{
	*m = (struct gmt__supp_memo){ .s = s };
}

void gmt__supp_memo_free(struct gmt__supp_memo *m)
{
	gmt__addrmap_free(&m->map);
	m->s = NULL;
}

size_t gmt__supp_memo_first(struct gmt__supp_memo *m, const char *text)
{
	size_t first;

	if (text == NULL || m->s == NULL || m->s->n == 0)
		return SIZE_MAX;
	if (!gmt__addrmap_get(&m->map, text, &first)) {
		first = gmt__supp_first(m->s, text);
		gmt__addrmap_put(&m->map, text, first);
	}
	return first;
}

void gmt__supp_memo_frame(struct gmt__supp_memo *m, const char *function, const char *module,
			  const char *file, size_t *best)
{
	/* The first rule any of the names matches: the lowest of their firsts. */
	size_t first[3] = { gmt__supp_memo_first(m, function), gmt__supp_memo_first(m, module),
			    gmt__supp_memo_first(m, file) };

	for (int i = 0; i < 3; i++) {
		if (first[i] < *best)
			*best = first[i];
	}
}

void gmt__supp_rule_text(const struct gmt__supp_rule *r, char *buf, size_t len)
{
	snprintf(buf, len, "%s:%s", r->type == GMT_SUPP_LEAK ? "leak" : "cached", r->pattern);
}
