// A C++ call chain, main → workspace::grow(int) → workspace::Allocator::alloc,
// captured in alloc and symbolised: names demangled, file and line exact.
extern "C" {
#include "record/stacks.h"
#include "analyze/symbols.h"
}
#include "symtest.h"

#define MAX_FRAMES 32

static uintptr_t ips[MAX_FRAMES];
static int nips;
static int line_alloc, line_grow, line_main;
volatile int sink;

namespace workspace {

class Allocator {
public:
	void *alloc(unsigned long n);
};

__attribute__((noinline)) void *Allocator::alloc(unsigned long n)
{
	line_alloc = __LINE__ + 1;
	nips = gmt__stack_capture(ips, MAX_FRAMES, 0);
	return n != 0 ? this : nullptr;
}

void *grow(int n);

__attribute__((noinline)) void *grow(int n)
{
	Allocator *a = new Allocator; // a real C++ program: the C++ runtime is loaded
	void *p;

	line_grow = __LINE__ + 1;
	p = a->alloc(static_cast<unsigned long>(n));
	sink += p != nullptr;
	delete a;
	return nullptr;
}

} // namespace workspace

int main()
{
	struct want {
		const char *function;
		int line;
	};
	struct gmt__symbols *s;

	if (gmt__stack_init() != 0)
		return 1;
	line_main = __LINE__ + 1;
	workspace::grow(42);
	const want wants[] = {
		{ "workspace::Allocator::alloc(unsigned long)", line_alloc },
		{ "workspace::grow(int)", line_grow },
		{ "main", line_main },
	};
	s = gmt__symbols_new();
	if (s == nullptr)
		return 1;
	CHECK_INT("captured at least 3 frames", nips >= 3, 1);
	for (int i = 0; i < 3 && i < nips; i++) {
		struct gmt__frame_sym f[8];
		char path[4096];
		uintptr_t base;
		int n;

		if (symtest_module(ips[i], path, sizeof(path), &base) != 0)
			return 1;
		n = gmt__symbols_lookup(s, path, base, NULL, ips[i], f, 8);
		symtest_print(ips[i], f, n);
		CHECK_INT("frames for one address", n, 1);
		if (n < 1)
			continue;
		CHECK_STR("function", f[0].function, wants[i].function);
		CHECK_STR("file", symtest_basename(f[0].file), "test_symbols_cpp.cpp");
		CHECK_INT("line", f[0].line, wants[i].line);
	}
	gmt__symbols_free(s);
	if (symtest_failures != 0)
		fprintf(stderr, "%d checks failed\n", symtest_failures);
	return symtest_failures != 0;
}
