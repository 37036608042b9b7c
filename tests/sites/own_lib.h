// libgmttest_arena.so's interface (own_lib.cpp).
#ifndef GMTTEST_OWN_LIB_H
#define GMTTEST_OWN_LIB_H

#include <cstddef>

class Arena {
public:
	__attribute__((noinline)) void *grow(std::size_t bytes);
	static int grow_line;

private:
	int blocks_ = 0;
};

#endif
