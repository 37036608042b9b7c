// A C++ program allocating through a library of its own (own_lib.cpp): the
// same Arena::grow for weights (from make_weights) and for activations (from
// forward), never freed. The sites are Arena::grow, told apart by their
// callers; the checker gets the lines from the program's output.
#include <cstdio>
#include <vector>

#include "own_lib.h"

static int weights_line, forward_line;

// The blocks are kept in a std::vector: the program has the C++ runtime the
// tracer demangles names with (as every real C++ program has).
__attribute__((noinline)) static void make_weights(Arena &a, std::vector<void *> &kept)
{
	for (int i = 0; i < 3; i++) {
		kept.push_back(a.grow(8 << 20)); weights_line = __LINE__;
		__asm__ volatile("" ::: "memory");
	}
}

__attribute__((noinline)) static void forward(Arena &a, std::vector<void *> &kept)
{
	kept.push_back(a.grow(4 << 20)); forward_line = __LINE__;
	__asm__ volatile("" ::: "memory");
}

int main()
{
	Arena arena;
	std::vector<void *> kept;

	make_weights(arena, kept);
	for (int i = 0; i < 5; i++)
		forward(arena, kept);
	std::printf("GROW_LINE %d\nWEIGHTS_LINE %d\nFORWARD_LINE %d\n", Arena::grow_line, weights_line, forward_line);
	return 0;
}
