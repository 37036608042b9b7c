/* Library B of the RTLD_NEXT test: dlsym(RTLD_NEXT) from here must find A's
 * definition. NOTE: glibc finds "next" from the caller's return address; if a
 * preloaded dlsym override called the real dlsym instead of jumping to it, the
 * caller would be the override's library and the answer B's own definition. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

int gmt_test_which(void);
int gmt_test_next_after_b(void);

int gmt_test_which(void)
{
	return 2;
}

int gmt_test_next_after_b(void)
{
	int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, "gmt_test_which");

	return f != NULL ? f() : -1;
}
