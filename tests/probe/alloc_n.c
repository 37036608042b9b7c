/* N cudaMalloc/cudaFree pairs through the runtime double, of sizes 4 KiB to
 * N × 4 KiB: built once against the static and once against the shared runtime,
 * and run under the probe by check_probe.py. Usage: alloc_n N */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	char *end;
	long n;

	errno = 0;
	n = argc == 2 ? strtol(argv[1], &end, 10) : -1;
	if (argc != 2 || errno || *end || n < 0 || n > 100000) {
		fprintf(stderr, "usage: %s N (0 to 100000)\n", argv[0]);
		return 2;
	}
	for (long i = 0; i < n; i++) {
		void *p = NULL;
		cudaError_t e = cudaMalloc(&p, (size_t)(i + 1) * 4096);

		if (e != cudaSuccess) {
			fprintf(stderr, "alloc_n: cudaMalloc #%ld returned %d\n", i, (int)e);
			return 1;
		}
		e = cudaFree(p);
		if (e != cudaSuccess) {
			fprintf(stderr, "alloc_n: cudaFree #%ld returned %d\n", i, (int)e);
			return 1;
		}
	}
	return 0;
}
