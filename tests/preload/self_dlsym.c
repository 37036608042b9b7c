/* dlsym on a handle of the tracer itself answers with the tracer's own hook;
 * that must not be taken for the real function (the hook would call itself
 * forever). Usage: self_dlsym LIBGPUMEMTRACE */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	CUresult (*alloc)(CUdeviceptr *, size_t);
	void *self;
	CUdeviceptr p;
	CUcontext ctx;
	CUresult r;

	if (argc != 2 || (self = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD)) == NULL) {
		fprintf(stderr, "self_dlsym: the tracer is not loaded\n");
		return 1;
	}
	alloc = (CUresult (*)(CUdeviceptr *, size_t))dlsym(self, "cuMemAlloc_v2");
	if (alloc == NULL || cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return 1;
	r = alloc(&p, 4096);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "self_dlsym: cuMemAlloc_v2 returned %d\n", (int)r);
		return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
