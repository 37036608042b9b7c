/* PyTorch's allocator settings for the model (allocmodel.h): a
 * PYTORCH_CUDA_ALLOC_CONF parsed as PyTorch's tokenizer reads it, and the
 * sizes those settings give a request (rounding) and a new segment. */
#include "analyze/allocmodel.h"
#include "util/parse.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the configuration ------------------------------------------------------- */

void gmt__am_config_default(struct gmt__am_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_split_size = GMT_AM_UNLIMITED;
	c->max_non_split_rounding = GMT_AM_LARGE_BUFFER;
	c->memory_fraction = -1;
}

#define MAX_TOKENS 512
#define TOKEN_LEN 64

struct tokens {
	char v[MAX_TOKENS][TOKEN_LEN];
	size_t n;
};

int gmt__am_fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* As PyTorch's ConfigTokenizer: , : [ ] are tokens of their own, blanks
 * separate, anything else runs together. */
static int tokenize(const char *s, struct tokens *t, char *err, size_t errlen)
{
	size_t len = 0;

	t->n = 0;
	for (;; s++) {
		bool sep = *s == '\0' || *s == ' ' || *s == '\t' || *s == '\n' || strchr(",:[]", *s);

		if (sep && len > 0) {
			t->v[t->n][len] = '\0';
			t->n++;
			len = 0;
		}
		if (*s == '\0')
			return 0;
		if (t->n >= MAX_TOKENS)
			return gmt__am_fail(err, errlen, -EINVAL, "PYTORCH_CUDA_ALLOC_CONF: too long");
		if (sep) {
			if (*s != ' ' && *s != '\t' && *s != '\n') {
				t->v[t->n][0] = *s;
				t->v[t->n][1] = '\0';
				t->n++;
			}
			continue;
		}
		if (len + 1 >= TOKEN_LEN)
			return gmt__am_fail(err, errlen, -EINVAL, "PYTORCH_CUDA_ALLOC_CONF: a word too long");
		t->v[t->n][len++] = *s;
	}
}

static const char *tok(const struct tokens *t, size_t i)
{
	return i < t->n ? t->v[i] : "";
}

static bool parse_double(const char *s, double *out)
{
	char *end;

	if (*s == '\0')
		return false;
	errno = 0;
	*out = strtod(s, &end);
	return *end == '\0' && errno == 0;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static unsigned log2_floor(uint64_t v)
{
	return 63u - (unsigned)__builtin_clzll(v);
}

/* The keys PyTorch accepts that touch nothing this model holds: pinned host
 * memory, the lock around cudaMalloc, graph capture, the reservation of
 * expandable segments' address space. */
static const char *const ignored_keys[] = {
	"release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "release_lock_on_device_malloc",
	"pinned_use_cuda_host_register", "pinned_use_hip_host_register",
	"pinned_use_device_host_register", "pinned_num_register_threads",
	"pinned_use_background_threads", "pinned_reserve_segment_size_mb", "pinned_free_catch_all",
	"graph_capture_record_stream_reuse", "throw_on_cudamalloc_oom",
	"expandable_segments_reserve", "expandable_segments_reserve_by_class",
};

static void note_ignored(struct gmt__am_config *c, const char *key)
{
	size_t len = strlen(c->ignored);

	if (strstr(c->ignored, key))
		return;
	snprintf(c->ignored + len, sizeof(c->ignored) - len, "%s%s", len ? ", " : "", key);
}

/* A value of an ignored key: one word, or a bracketed list. Returns the
 * index of its last token. */
static size_t skip_value(const struct tokens *t, size_t i)
{
	if (strcmp(tok(t, i), "[") != 0)
		return i;
	while (i < t->n && strcmp(tok(t, i), "]") != 0)
		i++;
	return i;
}

static const char *const model_keys[] = {
	"max_split_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold",
	"per_process_memory_fraction", "roundup_power2_divisions", "expandable_segments", "backend",
};

static bool in_list(const char *key, const char *const *v, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (!strcmp(key, v[k]))
			return true;
	return false;
}

static bool known_key(const char *key)
{
	return in_list(key, model_keys, sizeof(model_keys) / sizeof(model_keys[0])) ||
	       in_list(key, ignored_keys, sizeof(ignored_keys) / sizeof(ignored_keys[0]));
}

static int parse_bool(const char *s, bool *out)
{
	if (!strcmp(s, "True") || !strcmp(s, "true")) {
		*out = true;
		return 0;
	}
	if (!strcmp(s, "False") || !strcmp(s, "false")) {
		*out = false;
		return 0;
	}
	return -EINVAL;
}

/* roundup_power2_divisions: a number for every interval, or a list
 * [boundary_mb:divisions, ..., >:divisions] where a boundary's interval and
 * those below the first boundary take its value and > takes every interval
 * above the last one named. i is at the value; returns the index of its last
 * token or a negative errno. */
static long parse_divisions(const struct tokens *t, size_t i, struct gmt__am_config *c, char *err,
			    size_t errlen)
{
	static const char key[] = "roundup_power2_divisions";
	uint64_t v, boundary;
	size_t last = 0;
	bool first = true;

	if (strcmp(tok(t, i), "[") != 0) {
		if (gmt__parse_u64(tok(t, i), 0, UINT64_MAX, &v) != 0 || !is_pow2(v))
			return gmt__am_fail(err, errlen, -EINVAL, "%s: '%s' is not a power of 2", key, tok(t, i));
		for (size_t k = 0; k < GMT_AM_DIV_INTERVALS; k++)
			c->divisions[k] = (uint32_t)v;
		return (long)i;
	}
	while (++i < t->n && strcmp(tok(t, i), "]") != 0) {
		size_t at = i;

		if (strcmp(tok(t, ++i), ":") != 0)
			return gmt__am_fail(err, errlen, -EINVAL, "%s: expected ':' after '%s'", key, tok(t, at));
		if (gmt__parse_u64(tok(t, ++i), 0, UINT64_MAX, &v) != 0 || (v != 0 && !is_pow2(v)))
			return gmt__am_fail(err, errlen, -EINVAL, "%s: divisions '%s' is not 0 or a power of 2", key,
				    tok(t, i));
		if (v > UINT32_MAX)
			return gmt__am_fail(err, errlen, -EINVAL, "%s: divisions '%s' too large", key, tok(t, i));
		if (!strcmp(tok(t, at), ">")) {
			for (size_t k = last + 1; k < GMT_AM_DIV_INTERVALS; k++)
				c->divisions[k] = (uint32_t)v;
		} else {
			size_t k;

			if (gmt__parse_u64(tok(t, at), 0, UINT64_MAX, &boundary) != 0 || !is_pow2(boundary))
				return gmt__am_fail(err, errlen, -EINVAL, "%s: boundary '%s' is not a power of 2", key,
					    tok(t, at));
			k = log2_floor(boundary);
			if (k > GMT_AM_DIV_INTERVALS - 1)
				k = GMT_AM_DIV_INTERVALS - 1;
			if (first) {
				for (size_t j = 0; j < k; j++)
					c->divisions[j] = (uint32_t)v;
				first = false;
			}
			c->divisions[k] = (uint32_t)v;
			last = k;
		}
		if (strcmp(tok(t, i + 1), "]") != 0 && strcmp(tok(t, ++i), ",") != 0)
			return gmt__am_fail(err, errlen, -EINVAL, "%s: expected ',' or ']' at '%s'", key, tok(t, i));
	}
	if (i >= t->n)
		return gmt__am_fail(err, errlen, -EINVAL, "%s: no closing ']'", key);
	return (long)i;
}

/* max_split_size_mb and max_non_split_rounding_mb: at least 20 MiB. */
static int parse_mb(const char *key, const char *s, uint64_t *out, char *err, size_t errlen)
{
	uint64_t mb;

	if (gmt__parse_u64(s, 0, UINT64_MAX, &mb) != 0)
		return gmt__am_fail(err, errlen, -EINVAL, "%s: '%s' is not a number of MiB", key, s);
	if (mb < GMT_AM_LARGE_BUFFER >> 20)
		return gmt__am_fail(err, errlen, -EINVAL, "%s: %s too small, must be >= %llu", key, s,
			    (unsigned long long)(GMT_AM_LARGE_BUFFER >> 20));
	*out = mb > (UINT64_MAX >> 20) ? UINT64_MAX : mb << 20;
	return 0;
}

static int parse_pair(const struct tokens *t, size_t *ip, struct gmt__am_config *c, char *err,
		      size_t errlen)
{
	size_t i = *ip;
	const char *key = tok(t, i), *val;
	double d;
	long r;
	int rc = 0;

	if (!known_key(key))
		return gmt__am_fail(err, errlen, -EINVAL, "PYTORCH_CUDA_ALLOC_CONF: unknown key '%s'", key);
	if (strcmp(tok(t, i + 1), ":") != 0)
		return gmt__am_fail(err, errlen, -EINVAL, "PYTORCH_CUDA_ALLOC_CONF: expected ':' after '%s'", key);
	i += 2;
	val = tok(t, i);
	if (!strcmp(key, "max_split_size_mb")) {
		rc = parse_mb(key, val, &c->max_split_size, err, errlen);
	} else if (!strcmp(key, "max_non_split_rounding_mb")) {
		rc = parse_mb(key, val, &c->max_non_split_rounding, err, errlen);
	} else if (!strcmp(key, "garbage_collection_threshold")) {
		if (!parse_double(val, &d) || !(d > 0 && d < 1))
			rc = gmt__am_fail(err, errlen, -EINVAL, "%s: '%s' is not in (0.0, 1.0)", key, val);
		else
			c->gc_threshold = d;
	} else if (!strcmp(key, "per_process_memory_fraction")) {
		if (!parse_double(val, &d) || !(d >= 0 && d <= 1))
			rc = gmt__am_fail(err, errlen, -EINVAL, "%s: '%s' is not in [0.0, 1.0]", key, val);
		else
			c->memory_fraction = d;
	} else if (!strcmp(key, "roundup_power2_divisions")) {
		r = parse_divisions(t, i, c, err, errlen);
		if (r < 0)
			return (int)r;
		i = (size_t)r;
	} else if (!strcmp(key, "expandable_segments")) {
		if (parse_bool(val, &c->expandable_segments) < 0)
			rc = gmt__am_fail(err, errlen, -EINVAL, "%s: '%s' is not True or False", key, val);
	} else if (!strcmp(key, "backend")) {
		if (!strcmp(val, "cudaMallocAsync"))
			rc = gmt__am_fail(err, errlen, -ENOTSUP,
				  "backend:cudaMallocAsync: not the caching allocator this models");
		else if (strcmp(val, "native") != 0)
			rc = gmt__am_fail(err, errlen, -EINVAL, "backend: '%s' is not native or cudaMallocAsync",
				  val);
	} else {
		note_ignored(c, key);
		i = skip_value(t, i);
	}
	if (rc == 0 && i >= t->n)
		rc = gmt__am_fail(err, errlen, -EINVAL, "%s: no value", key);
	*ip = i;
	return rc;
}

int gmt__am_config_parse(const char *conf, struct gmt__am_config *c, char *err, size_t errlen)
{
	struct tokens *t;
	int rc = 0;

	gmt__am_config_default(c);
	if (err && errlen)
		err[0] = '\0';
	if (!conf || !*conf)
		return 0;
	t = malloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	rc = tokenize(conf, t, err, errlen);
	for (size_t i = 0; rc == 0 && i < t->n; i++) {
		rc = parse_pair(t, &i, c, err, errlen);
		if (rc == 0 && i + 1 < t->n && strcmp(tok(t, ++i), ",") != 0)
			rc = gmt__am_fail(err, errlen, -EINVAL, "PYTORCH_CUDA_ALLOC_CONF: expected ',' at '%s'",
				  tok(t, i));
	}
	free(t);
	return rc;
}

/* ---- rounding ------------------------------------------------------------------- */

/* Intervals of powers of two from 1 MiB: [0, 2 MiB) is the first, >= 32 GiB
 * the last. */
static uint32_t divisions_for(const struct gmt__am_config *c, uint64_t size)
{
	unsigned lg = log2_floor(size), k = lg > 20 ? lg - 20 : 0;

	return c->divisions[k < GMT_AM_DIV_INTERVALS ? k : GMT_AM_DIV_INTERVALS - 1];
}

uint64_t gmt__am_round_size(const struct gmt__am_config *c, uint64_t size)
{
	uint64_t div, floor2, step, low;
	uint32_t d;

	if (size < GMT_AM_MIN_BLOCK)
		return GMT_AM_MIN_BLOCK;
	d = divisions_for(c, size);
	if (d <= 1 || size <= (uint64_t)GMT_AM_MIN_BLOCK * d)
		return (size + GMT_AM_MIN_BLOCK - 1) / GMT_AM_MIN_BLOCK * GMT_AM_MIN_BLOCK;
	/* roundup_power2_next_division: the interval between two powers of two
	 * cut in d (rounded down to a power of two) equal steps. */
	if (is_pow2(size))
		return size;
	div = d;
	floor2 = 1ull << log2_floor(size);
	step = floor2 >> log2_floor(div);
	if (step == 0)
		return floor2 << 1;
	low = size & ~(step - 1);
	return low == size ? size : low + step;
}

uint64_t gmt__am_segment_size(uint64_t rounded)
{
	if (rounded <= GMT_AM_SMALL_SIZE)
		return GMT_AM_SMALL_BUFFER;
	if (rounded < GMT_AM_MIN_LARGE)
		return GMT_AM_LARGE_BUFFER;
	return (rounded + GMT_AM_ROUND_LARGE - 1) / GMT_AM_ROUND_LARGE * GMT_AM_ROUND_LARGE;
}
