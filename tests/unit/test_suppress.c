/* Leak suppressions (src/analyze/suppress.c): the pattern match against a table and
 * against a plain recursive matcher of the documented rules, every short
 * pattern on every short name; rules from a file; and the memo (what a
 * snapshot matches through) against direct matching, frame by frame. */
#define _GNU_SOURCE
#include "util/input.h"
#include "analyze/suppress.h"

#include "../output/check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the pattern match ---------------------------------------------------------- */

struct match_case {
	const char *pattern, *text;
	bool match;
};

static const struct match_case match_cases[] = {
	/* a substring anywhere */
	{ "cublas", "/usr/lib/libcublas.so.12", true },
	{ "libcublas", "/usr/lib/libcublasLt.so.12", true },
	{ "cublas", "/usr/lib/libcudnn.so.9", false },
	{ "CUDACachingAllocator", "c10::cuda::CUDACachingAllocator::Native::malloc(void**, int, unsigned long)", true },
	{ "cupy/cuda/memory", "cupy/cuda/memory.pyx", true },
	{ "abc", "ab", false },
	{ "abc", "abc", true },
	{ "", "anything", true },
	{ "", "", true },
	/* anchors */
	{ "^lib", "libfoo.so", true },
	{ "^lib", "/usr/lib/libfoo.so", false },
	{ "^lib", "li", false },
	{ "so$", "libfoo.so", true },
	{ "so$", "libfoo.so.1", false },
	{ "so$", "o", false },
	{ "^main$", "main", true },
	{ "^main$", "main2", false },
	{ "^main$", "xmain", false },
	{ "^", "", true },
	{ "^", "x", true },
	{ "$", "", true },
	{ "$", "x", true },
	{ "^$", "", true },
	{ "^$", "x", false },
	{ "^^a", "^a", true },
	{ "^^a", "a", false },
	{ "a$$", "a$", true },
	{ "a$$", "a", false },
	/* `^` and `$` inside the pattern are plain characters */
	{ "a^b", "xa^by", true },
	{ "a$b", "xa$by", true },
	{ "a$b", "ab", false },
	/* `*` */
	{ "*", "", true },
	{ "^*$", "", true },
	{ "^*$", "abc", true },
	{ "a*b", "xaQQby", true },
	{ "a*b", "xbQQay", false },
	{ "^a*b$", "aXXb", true },
	{ "^a*b$", "aXXbc", false },
	{ "^a*b$", "ab_b", true },
	{ "a*b$", "ab_b", true },
	{ "^a*a*a$", "aaa", true },
	{ "^a*a*a$", "aa", false },
	{ "*ab*ab*", "aabab", true },
	{ "^*ab*ab$", "xabyab", true },
	{ "^*ab*ab$", "xabyabz", false },
	{ "**", "x", true },
	{ "Allocator*malloc", "c10::cuda::CUDACachingAllocator::Native::malloc(void**)", true },
	{ "^c10::*Allocator$", "c10::cuda::CUDACachingAllocator::Native::malloc", false },
	/* NULL: no name */
	{ "", NULL, false },
	{ "*", NULL, false },
};

static void test_match_table(void)
{
	for (size_t i = 0; i < sizeof(match_cases) / sizeof(match_cases[0]); i++) {
		const struct match_case *c = &match_cases[i];
		bool got = gmt__supp_pattern_match(c->pattern, c->text);

		if (got != c->match) {
			fprintf(stderr, "match(\"%s\", \"%s\") is %d, expected %d\n", c->pattern,
				c->text != NULL ? c->text : "(null)", got, c->match);
			check_failed++;
		}
	}
}

/* Whether t matches p[0..pn) as a whole, `*` any run: the rule as written. */
static bool ref_glob(const char *p, size_t pn, const char *t)
{
	if (pn == 0)
		return *t == '\0';
	if (*p == '*') {
		for (;; t++) {
			if (ref_glob(p + 1, pn - 1, t))
				return true;
			if (*t == '\0')
				return false;
		}
	}
	return *t != '\0' && *t == *p && ref_glob(p + 1, pn - 1, t + 1);
}

/* docs/guide.md "Rules": a leading `^` anchors at the start, a trailing `$`
 * at the end, otherwise the pattern may match anywhere. */
static bool ref_match(const char *pattern, const char *text)
{
	char buf[64];
	size_t pn = strlen(pattern), n = 0;
	bool lead = true, trail = true;

	if (pn > 0 && pattern[0] == '^') {
		lead = false;
		pattern++;
		pn--;
	}
	if (pn > 0 && pattern[pn - 1] == '$') {
		trail = false;
		pn--;
	}
	if (lead)
		buf[n++] = '*';
	memcpy(buf + n, pattern, pn);
	n += pn;
	if (trail)
		buf[n++] = '*';
	return ref_glob(buf, n, text);
}

/* Every string of length 0..max over the alphabet, one after another into
 * v[0..]; returns how many. */
static size_t all_strings(const char *alphabet, int max, char (*v)[8])
{
	size_t k = strlen(alphabet), n = 1, from = 0;

	v[0][0] = '\0';
	for (int len = 1; len <= max; len++) {
		size_t to = n;

		for (size_t i = from; i < to; i++) {
			for (size_t c = 0; c < k; c++) {
				memcpy(v[n], v[i], (size_t)len - 1);
				v[n][len - 1] = alphabet[c];
				v[n][len] = '\0';
				n++;
			}
		}
		from = to;
	}
	return n;
}

/* Every pattern of up to 5 characters of "ab*^$" on every name of up to 4 of
 * the same: each shape of the fast paths (substring, prefix, suffix, whole
 * name) and of the backtracking loop. */
static void test_match_exhaustive(void)
{
	static char patterns[4000][8], texts[800][8];
	size_t np = all_strings("ab*^$", 5, patterns), nt = all_strings("ab*^$", 4, texts), wrong = 0;

	CHECK_INT(np, 3906);
	CHECK_INT(nt, 781);
	for (size_t i = 0; i < np; i++) {
		for (size_t j = 0; j < nt; j++) {
			bool got = gmt__supp_pattern_match(patterns[i], texts[j]);

			if (got != ref_match(patterns[i], texts[j]) && wrong++ < 20)
				fprintf(stderr, "match(\"%s\", \"%s\") is %d, the rules say %d\n", patterns[i],
					texts[j], got, !got);
		}
	}
	CHECK_INT(wrong, 0);
}

/* ---- rules from a file, and the memo ---------------------------------------------- */

static const char rules_file[] =
	"# a comment, then rules of each shape\n"
	"\n"
	"leak:^my_leak_site$\n"
	"cached:pool_alloc\n"
	"leak:  ^vendor/\n"
	"leak:.cu$\n"
	"cached:Arena*grow\n"
	"leak:^*tmp*\n";

static int load(struct gmt__supp *s)
{
	char path[] = "/tmp/gmt-test-suppress-XXXXXX", err[256];
	int fd = mkstemp(path), r;

	CHECK(fd >= 0);
	if (fd < 0)
		return -1;
	CHECK_INT(write(fd, rules_file, sizeof(rules_file) - 1), (long long)sizeof(rules_file) - 1);
	close(fd);
	r = gmt__supp_load(s, path, err, sizeof(err));
	if (r != 0)
		fprintf(stderr, "load: %s\n", err);
	unlink(path);
	return r;
}

static void test_rules(const struct gmt__supp *s)
{
	static const struct {
		const char *text;
		size_t first;
	} cases[] = {
		{ "my_leak_site", 0 },
		{ "my_leak_site2", SIZE_MAX },
		{ "lib::pool_allocate", 1 },
		{ "vendor/kernels.cu", 2 }, /* rules 2 and 3: the first wins */
		{ "src/kernels.cu", 3 },
		{ "src/kernels.cuh", SIZE_MAX },
		{ "ArenaPool::grow", 4 },
		{ "/tmp/x.c", 5 },
		{ "/usr/lib/x86_64-linux-gnu/libcublasLt.so.12", 6 + 5 }, /* built-in leak:libcublas */
		{ "c10::cuda::CUDACachingAllocator::Native::malloc", 6 + 0 },
		{ "main", SIZE_MAX },
		{ NULL, SIZE_MAX },
	};

	CHECK_INT(s->n, 6 + 12);
	CHECK_STR(s->v[2].pattern, "^vendor/");
	CHECK_INT(s->v[2].line, 5);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t got = gmt__supp_first(s, cases[i].text);

		if (got != cases[i].first) {
			fprintf(stderr, "first(\"%s\") is %zu, expected %zu\n",
				cases[i].text != NULL ? cases[i].text : "(null)", got, cases[i].first);
			check_failed++;
		}
	}
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint32_t rng(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

/* Names of every kind a frame carries, some matching each rule, most none. */
static const char *const name_pool[] = {
	"main", "step", "down_a", "down_b", "my_leak_site", "my_leak_site_not", "lib::pool_allocate",
	"ArenaPool::grow", "Arena::shrink", "c10::cuda::CUDACachingAllocator::Native::malloc(void**, int)",
	"xla::BFCAllocator::AllocateRaw", "cudaMalloc", "cuMemAlloc_v2", "_ZN3foo3barEv", "foo::bar()",
	"/usr/lib/x86_64-linux-gnu/libcublas.so.12", "/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
	"/usr/lib/x86_64-linux-gnu/libc.so.6", "/work/build/bench/stacks", "libcudart.so.13",
	"vendor/kernels.cu", "src/kernels.cu", "src/kernels.cuh", "../sim/runtime/memory.c",
	"/tmp/build/x.c", "cupy/cuda/memory.pyx", "torch/cuda/memory.py", "", "linux-vdso.so.1",
};
#define NAMES (sizeof(name_pool) / sizeof(name_pool[0]))

/* The memo gives what direct matching gives, for every name and every stack
 * of frames, with names at several addresses (copies of the same text) and
 * more distinct addresses than the memo starts with (it grows). */
static void test_memo(const struct gmt__supp *s)
{
	enum { COPIES = 40, STACKS = 4000, FRAMES = 24 };
	static char *names[NAMES * COPIES];
	struct gmt__supp_memo memo;
	size_t nnames = 0, wrong = 0;

	for (size_t c = 0; c < COPIES; c++) {
		for (size_t i = 0; i < NAMES; i++) {
			names[nnames] = strdup(name_pool[i]);
			CHECK(names[nnames] != NULL);
			if (names[nnames] == NULL)
				return;
			nnames++;
		}
	}
	gmt__supp_memo_init(&memo, s);
	/* twice: first seen, then remembered */
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < nnames; i++) {
			size_t want = gmt__supp_first(s, names[i]), got = gmt__supp_memo_first(&memo, names[i]);

			if (got != want && wrong++ < 10)
				fprintf(stderr, "memo first(\"%s\") is %zu, expected %zu\n", names[i], got, want);
		}
	}
	CHECK_U64(gmt__supp_memo_first(&memo, NULL), SIZE_MAX);
	for (int st = 0; st < STACKS; st++) {
		size_t want = SIZE_MAX, got = SIZE_MAX;
		int frames = (int)rng(FRAMES) + 1;

		for (int f = 0; f < frames; f++) {
			/* a fifth of the names absent, as for frames nothing is known of */
			const char *fn = rng(5) ? names[rng((uint32_t)nnames)] : NULL;
			const char *mod = rng(5) ? names[rng((uint32_t)nnames)] : NULL;
			const char *file = rng(5) ? names[rng((uint32_t)nnames)] : NULL;

			gmt__supp_frame(s, fn, mod, file, &want);
			gmt__supp_memo_frame(&memo, fn, mod, file, &got);
		}
		if (got != want && wrong++ < 10)
			fprintf(stderr, "stack %d: memo's rule %zu, direct %zu\n", st, got, want);
	}
	CHECK(memo.map.n <= nnames);
	CHECK(memo.map.cap >= 2 * memo.map.n);
	CHECK_INT(wrong, 0);
	gmt__supp_memo_free(&memo);
	for (size_t i = 0; i < nnames; i++)
		free(names[i]);
}

/* No rules: nothing matches, nothing is allocated. */
static void test_memo_empty(void)
{
	struct gmt__supp none = { 0 };
	struct gmt__supp_memo memo;
	size_t best = SIZE_MAX;

	gmt__supp_memo_init(&memo, NULL);
	CHECK_U64(gmt__supp_memo_first(&memo, "libcublas"), SIZE_MAX);
	gmt__supp_memo_free(&memo);
	gmt__supp_memo_init(&memo, &none);
	gmt__supp_memo_frame(&memo, "libcublas", "libcudnn", NULL, &best);
	CHECK_U64(best, SIZE_MAX);
	CHECK(memo.map.v == NULL);
	gmt__supp_memo_free(&memo);
}

/* Special files are refused at once, never read (a FIFO would block, a device
 * never end), and so is a file over the size cap. */
static void test_special_files(void)
{
	static const struct {
		const char *path, *words;
	} cases[] = {
		{ NULL, "not a regular file (a FIFO)" }, /* a FIFO made here */
		{ "/dev/zero", "not a regular file (a character device)" },
		{ "/", "not a regular file (a directory)" },
		{ NULL, "larger than" }, /* a sparse file one byte over the cap */
		{ "/nonexistent/supp.txt", "cannot read suppressions: No such file or directory" },
	};
	char fifo[] = "/tmp/gmt-test-fifo-XXXXXX", big[] = "/tmp/gmt-test-big-XXXXXX", err[256];
	int fd;

	fd = mkstemp(fifo);
	CHECK(fd >= 0);
	close(fd);
	unlink(fifo);
	CHECK_INT(mkfifo(fifo, 0600), 0);
	fd = mkstemp(big);
	CHECK(fd >= 0);
	CHECK_INT(ftruncate(fd, (off_t)GMT_SUPPRESSIONS_MAX_BYTES + 1), 0);
	close(fd);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gmt__supp s = { 0 };
		const char *path = cases[i].path != NULL ? cases[i].path : i == 0 ? fifo : big;

		CHECK(gmt__supp_load(&s, path, err, sizeof(err)) < 0);
		if (strstr(err, cases[i].words) == NULL || strstr(err, path) == NULL) {
			fprintf(stderr, "load(%s): \"%s\" does not say \"%s\"\n", path, err, cases[i].words);
			check_failed++;
		}
		CHECK_INT(s.n, 0);
		gmt__supp_free(&s);
	}
	unlink(fifo);
	unlink(big);
}

/* The index against the rules' meaning: thousands of random rules of every
 * shape (a `*`, anchors, lengths from 1 to past the index's limit, repeated
 * bodies), then random names from empty to longer than any rule: the first
 * rule that matches must be the first one gmt__supp_pattern_match says
 * matches, in order, whichever way gmt__supp_first finds it. */
static void test_index_random(void)
{
	enum { RULES = 3000, TEXTS = 3000 };
	static char rules[RULES][300], path[] = "/tmp/gmt-test-index-XXXXXX";
	struct gmt__supp s = { 0 };
	unsigned seed = 12345;
	char err[256], name[400];
	size_t wrong = 0;
	FILE *f;
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL)
		return;
	for (int i = 0; i < RULES; i++) {
		size_t n = 0, len = rand_r(&seed) % 50 == 0 ? 257 + rand_r(&seed) % 20 : 1 + rand_r(&seed) % 6;

		if (rand_r(&seed) % 4 == 0)
			rules[i][n++] = '^';
		for (size_t k = 0; k < len; k++)
			rules[i][n++] = rand_r(&seed) % 40 == 0 ? '*' : "abc"[rand_r(&seed) % 3];
		if (rand_r(&seed) % 4 == 0)
			rules[i][n++] = '$';
		rules[i][n] = '\0';
		fprintf(f, "%s:%s\n", i % 2 ? "leak" : "cached", rules[i]);
	}
	fclose(f);
	CHECK_INT(gmt__supp_load(&s, path, err, sizeof(err)), 0);
	unlink(path);
	CHECK_INT(s.n, RULES);
	for (int j = 0; j < TEXTS && s.n == RULES; j++) {
		size_t n = j % 100 == 0 ? 300 + rand_r(&seed) % 60 : rand_r(&seed) % 14, want = SIZE_MAX, got;

		for (size_t k = 0; k < n; k++)
			name[k] = "abc"[rand_r(&seed) % 3];
		name[n] = '\0';
		for (size_t i = 0; i < RULES && want == SIZE_MAX; i++) {
			if (gmt__supp_pattern_match(rules[i], name))
				want = i;
		}
		got = gmt__supp_first(&s, name);
		if (got != want && wrong++ < 10)
			fprintf(stderr, "first(\"%.40s\") is %zu, the rules in order say %zu\n", name, got, want);
	}
	CHECK_INT(wrong, 0);
	gmt__supp_free(&s);
}

int main(void)
{
	struct gmt__supp s = { 0 };

	test_match_table();
	test_match_exhaustive();
	test_index_random();
	if (load(&s) == 0 && gmt__supp_add_builtins(&s) == 0) {
		test_rules(&s);
		test_memo(&s);
	} else {
		check_failed++;
	}
	test_memo_empty();
	test_special_files();
	gmt__supp_free(&s);
	if (check_failed == 0)
		printf("suppress: ok\n");
	return check_failed != 0;
}
