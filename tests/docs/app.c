/* The "./app" of README.md's command lines (tests/docs): a CUDA program of
 * one's own, against the runtime API. It takes device memory 64 MiB at a time
 * until the device is full, says how far it got, frees it all and exits 0:
 * the tracer sees one out-of-memory. Exits 1 when not one piece fitted (no
 * simulated GPU: NVIDIA's runtime found instead of the double). */
#include <stdio.h>

#include <cuda_runtime_api.h>

#define APP_MAX_PIECES 4096

int main(void)
{
	static void *pieces[APP_MAX_PIECES];
	size_t n = 0;

	while (n < APP_MAX_PIECES && cudaMalloc(&pieces[n], (size_t)64 << 20) == cudaSuccess)
		n++;
	printf("app: %zu pieces of 64 MiB, then out of memory\n", n);
	for (size_t i = 0; i < n; i++)
		cudaFree(pieces[i]);
	return n > 0 ? 0 : 1;
}
