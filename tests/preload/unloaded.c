/* Test program for frames of unloaded modules: plug_a allocates 3 MiB (kept),
 * is dlclose'd, and plug_b, built from the same source with other names, is
 * loaded — at plug_a's address, where the loader puts it (the program says
 * whether it did: "SAME_BASE 1"). plug_b then allocates 5 MiB. The exit
 * snapshot must name plug_a's function for the first allocation, never the
 * function now at that address. Arguments: PLUG_A PLUG_B (paths). Prints
 * the PID/LIVE report of tests/programs/run_program.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <unistd.h>

#include <cuda.h>

typedef int (*allocate_fn)(CUdeviceptr *, size_t);

static void *open_plugin(const char *path, const char *name, allocate_fn *fn, uintptr_t *base)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	struct link_map *map = NULL;

	if (h == NULL || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0) {
		fprintf(stderr, "unloaded: %s: %s\n", path, dlerror());
		return NULL;
	}
	*(void **)fn = dlsym(h, name);
	*base = map->l_addr;
	return *fn != NULL ? h : NULL;
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr a, b;
	allocate_fn fa, fb;
	uintptr_t base_a, base_b;
	void *ha, *hb;

	if (argc != 3 || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	ha = open_plugin(argv[1], "plugin_a_allocate", &fa, &base_a);
	if (ha == NULL || fa(&a, 3 << 20) != CUDA_SUCCESS)
		return 1;
	dlclose(ha);
	/* The loader reuses the range it just unmapped, unless another mapping
	 * took it in between (a sanitizer's allocator, the tracer's background
	 * thread): then plug_b is loaded again, a few times, before it
	 * allocates. */
	for (int tries = 0;; tries++) {
		hb = open_plugin(argv[2], "totally_unrelated_function", &fb, &base_b);
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
