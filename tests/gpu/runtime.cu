/* The runtime rows: cudaMalloc of large and small blocks, cudaMallocPitch,
 * frees, built with nvcc's default static cudart (runtime_static: no dynamic
 * cudaMalloc in the program at all) and with -cudart shared (runtime_shared:
 * cudaMalloc from libcudart.so.13). Every allocation reaches the driver
 * through cudart's cuGetProcAddress path. Checkpoints: start, allocated,
 * freed (some freed), end (all freed). */
#include <dlfcn.h>

#include "gpu_runtime.h"

#ifndef GT_STATIC_RUNTIME
#error "build with -DGT_STATIC_RUNTIME=0 or 1"
#endif

/* The loading path under test (g++ defines _GNU_SOURCE: RTLD_DEFAULT). */
static void check_linkage(void)
{
	void *sym = dlsym(RTLD_DEFAULT, "cudaMalloc");
	Dl_info info;

	if (GT_STATIC_RUNTIME) {
		if (sym != NULL)
			GT_FAIL("static runtime, yet cudaMalloc is a dynamic symbol at %p", sym);
		return;
	}
	if (sym == NULL)
		GT_FAIL("shared runtime, yet no dynamic cudaMalloc symbol");
	if (dladdr(sym, &info) == 0 || info.dli_fname == NULL ||
	    strstr(info.dli_fname, "libcudart.so") == NULL)
		GT_FAIL("cudaMalloc comes from %s, expected libcudart.so",
			info.dli_fname ? info.dli_fname : "(unknown)");
}

static void *dev_alloc(size_t size)
{
	void *p = NULL;

	GT_OK(cudaMalloc(&p, size));
	gt_add(GT_ADDR(p), size, "device", 0);
	return p;
}

static void dev_free(void *p)
{
	gt_remove(GT_ADDR(p), "device");
	GT_OK(cudaFree(p));
}

int main(void)
{
	void *d_8m, *d_3m, *d_1m, *d_100, *d_256, *pitched, *pitched_small;
	size_t pitch, pitch_small;

	gt_begin(GT_STATIC_RUNTIME ? "runtime_static" : "runtime_shared");
	check_linkage();
	gt_rt_init(0);
	gt_rt_checkpoint("start");

	d_8m = dev_alloc(8 * GT_MIB);
	d_3m = dev_alloc(3 * GT_MIB);
	d_1m = dev_alloc(1 * GT_MIB);
	d_100 = dev_alloc(100);
	d_256 = dev_alloc(256);
	/* The pitch is the driver's choice (a multiple of the texture pitch
	 * alignment): the snapshot's size is pitch x height, whatever it is. */
	GT_OK(cudaMallocPitch(&pitched, &pitch, 2048, 64));
	GT_CHECK(pitch >= 2048);
	gt_add(GT_ADDR(pitched), pitch * 64, "device", 0);
	GT_OK(cudaMallocPitch(&pitched_small, &pitch_small, 100, 10));
	GT_CHECK(pitch_small >= 100);
	gt_add(GT_ADDR(pitched_small), pitch_small * 10, "device", 0);
	gt_rt_checkpoint("allocated");

	dev_free(d_3m);
	dev_free(d_256);
	dev_free(pitched_small);
	gt_rt_checkpoint("freed");

	dev_free(d_8m);
	dev_free(d_1m);
	dev_free(d_100);
	dev_free(pitched);
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
