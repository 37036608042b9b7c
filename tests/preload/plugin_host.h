/* What the programs that load tests/preload/plugin.c share (unloaded.c,
 * reload.c): a context made current, and a build of the plugin loaded with
 * its allocating function and load bias. */
#ifndef GMT_TEST_PLUGIN_HOST_H
#define GMT_TEST_PLUGIN_HOST_H

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda.h>

typedef int (*allocate_fn)(CUdeviceptr *, size_t);

/* The primary context of device 0, current. Returns 0, or -1. */
static inline int plugin_host_cuda(void)
{
	CUdevice dev;
	CUcontext ctx;

	return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
	       cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS ? 0 : -1;
}

/* dlopen(path) with its function `name` in *fn and its load bias in *base;
 * NULL (said on stderr) when either is missing. */
static inline void *plugin_host_open(const char *path, const char *name, allocate_fn *fn, uintptr_t *base)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	struct link_map *map = NULL;

	if (h == NULL || dlinfo(h, RTLD_DI_LINKMAP, &map) != 0) {
		fprintf(stderr, "%s: %s\n", path, dlerror());
		return NULL;
	}
	*(void **)fn = dlsym(h, name);
	*base = map->l_addr;
	return *fn != NULL ? h : NULL;
}

#endif
