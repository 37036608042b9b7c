/* A shared object in the middle of the C test's call chain, so that one of its
 * frames lies in a module loaded at a base of its own. */
#include "symtest_lib.h"

const int symtest_lib_call_line = __LINE__ + 4;

void symtest_lib_call(void (*fn)(void))
{
	fn();
	symtest_lib_sink++; /* no tail call: this frame stays on the stack */
}

volatile int symtest_lib_sink;
