/* An inlined function on the stack: compiled -O2 -g, the capture happens in
 * inner(), always inlined into outer(). The return address lies in outer's
 * code; symbolised, it is inner (inlined, at the capture's line), then outer
 * (at the line inner is called from), then main. */
#define _GNU_SOURCE
#include "record/stacks.h"
#include "analyze/symbols.h"
#include "symtest.h"

#define MAX_FRAMES 32

static uintptr_t ips[MAX_FRAMES];
static int line_inner, line_outer, line_main;
volatile int sink;

static inline __attribute__((always_inline)) int inner(void)
{
	line_inner = __LINE__ + 1;
	return gmt__stack_capture(ips, MAX_FRAMES, 0);
}

int outer(void);

__attribute__((noinline)) int outer(void)
{
	int n;

	line_outer = __LINE__ + 1;
	n = inner();
	sink += n; /* no tail call: outer stays on the stack */
	return n;
}

int main(void)
{
	struct gmt__frame_sym f[8];
	struct gmt__symbols *s;
	char path[4096];
	uintptr_t base;
	int nips, n;

	if (gmt__stack_init() != 0)
		return 1;
	line_main = __LINE__ + 1;
	nips = outer();
	sink += nips;
	CHECK_INT("captured at least 2 frames", nips >= 2, 1);
	s = gmt__symbols_new();
	if (s == NULL || nips < 2 || symtest_module(ips[0], path, sizeof(path), &base) != 0)
		return 1;

	n = gmt__symbols_lookup(s, path, base, NULL, ips[0], f, 8);
	symtest_print(ips[0], f, n);
	CHECK_INT("frames for the inlined address", n, 2);
	if (n >= 2) {
		CHECK_STR("innermost function", f[0].function, "inner");
		CHECK_STR("innermost file", symtest_basename(f[0].file), "test_symbols_inline.c");
		CHECK_INT("innermost line", f[0].line, line_inner);
		CHECK_INT("innermost inlined", f[0].inlined, 1);
		CHECK_STR("caller function", f[1].function, "outer");
		CHECK_STR("caller file", symtest_basename(f[1].file), "test_symbols_inline.c");
		CHECK_INT("caller line", f[1].line, line_outer);
		CHECK_INT("caller inlined", f[1].inlined, 0);
	}
	/* Room for one frame: the innermost. */
	CHECK_INT("frames with max 1", gmt__symbols_lookup(s, path, base, NULL, ips[0], f, 1), 1);
	CHECK_STR("innermost function, max 1", f[0].function, "inner");

	n = gmt__symbols_lookup(s, path, base, NULL, ips[1], f, 8);
	symtest_print(ips[1], f, n);
	CHECK_INT("frames for main", n, 1);
	if (n >= 1) {
		CHECK_STR("main", f[0].function, "main");
		CHECK_INT("main line", f[0].line, line_main);
	}
	gmt__symbols_free(s);
	if (symtest_failures != 0)
		fprintf(stderr, "%d checks failed\n", symtest_failures);
	return symtest_failures != 0;
}
