/* cudaDeviceReset frees everything of the device: the runtime resets the
 * primary context (reached through cuGetProcAddress, like all of cudart). The
 * tracer's exit snapshot must list only what was allocated after it. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <unistd.h>

#define CK(x)                                                                             \
	do {                                                                              \
		cudaError_t r_ = (x);                                                     \
		if (r_ != cudaSuccess) {                                                  \
			fprintf(stderr, "device_reset: %s returned %d\n", #x, (int)r_);   \
			return 1;                                                         \
		}                                                                         \
	} while (0)

int main(void)
{
	void *a, *b, *h, *s, *kept;

	CK(cudaMalloc(&a, 1 << 20));
	CK(cudaMalloc(&b, 3 << 20));
	CK(cudaMallocHost(&h, 1 << 16));
	CK(cudaMallocAsync(&s, 2 << 20, 0));
	CK(cudaDeviceReset());
	CK(cudaMalloc(&kept, 7 << 20));
	printf("PID %d main\n", (int)getpid());
	return 0;
}
