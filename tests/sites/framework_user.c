/* A program whose allocations all come through a framework-like library
 * (libtorch_gmttest.so): 4 weights of 16 MiB made once, then a training loop
 * whose forward pass keeps one 32 MiB activation a step (a leak) until the
 * device is full. Both call the library's one allocator: the sites are the
 * program's two functions, not the library's frames. Prints the lines of
 * its call sites (WEIGHTS_LINE, FORWARD_LINE) for the checker. Run with
 * GMTSIM_MEMORY=512M. */
#include <stdio.h>
#include <stddef.h>

#define MIB ((size_t)1024 * 1024)

static int weights_line, forward_line;

void *gmttest_tensor_empty(size_t bytes);

__attribute__((noinline)) static void make_weights(void **w, int n)
{
	for (int i = 0; i < n; i++) {
		w[i] = gmttest_tensor_empty(16 * MIB); weights_line = __LINE__;
		__asm__ volatile("" ::: "memory");
	}
}

__attribute__((noinline)) static void *forward(void)
{
	void *act = gmttest_tensor_empty(32 * MIB); forward_line = __LINE__;

	__asm__ volatile("" ::: "memory");
	return act;
}

int main(void)
{
	void *w[4], *kept[64];
	int n = 0;

	make_weights(w, 4);
	while (n < 64 && (kept[n] = forward()) != NULL)
		n++;
	printf("WEIGHTS_LINE %d\nFORWARD_LINE %d\nkept %d activations\n", weights_line, forward_line, n);
	return 0;
}
