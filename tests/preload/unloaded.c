/* Test program for frames of unloaded modules: plug_a allocates 3 MiB (kept),
 * is dlclose'd, and plug_b, built from the same source with other names, is
 * loaded — at plug_a's address, where the loader puts it (the program says
 * whether it did: "SAME_BASE 1"). plug_b then allocates 5 MiB. The exit
 * snapshot must name plug_a's function for the first allocation, never the
 * function now at that address. Arguments: PLUG_A PLUG_B (paths). Prints
 * the PID/LIVE report of tests/programs/run_program.py. */
#define _GNU_SOURCE
#include "plugin_host.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	CUdeviceptr a, b;
	allocate_fn fa, fb;
	uintptr_t base_a, base_b;
	void *ha, *hb;

	if (argc != 3 || plugin_host_cuda() != 0)
		return 1;
	ha = plugin_host_open(argv[1], "plugin_a_allocate", &fa, &base_a);
	if (ha == NULL || fa(&a, 3 << 20) != CUDA_SUCCESS)
		return 1;
	dlclose(ha);
	/* The loader reuses the range it just unmapped, unless another mapping
	 * took it in between (a sanitizer's allocator, the tracer's background
	 * thread): then plug_b is loaded again, a few times, before it
	 * allocates. */
	for (int tries = 0;; tries++) {
		hb = plugin_host_open(argv[2], "totally_unrelated_function", &fb, &base_b);
		if (hb == NULL || base_b == base_a || tries == 20)
			break;
		dlclose(hb);
	}
	if (hb == NULL || fb(&b, 5 << 20) != CUDA_SUCCESS)
		return 1;
	printf("PID %d main\nSAME_BASE %d\nLIVE %#llx %d device 0\nLIVE %#llx %d device 0\n", (int)getpid(),
	       base_a == base_b, (unsigned long long)a, 3 << 20, (unsigned long long)b, 5 << 20);
	return 0;
}
