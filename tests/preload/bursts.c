/* Bursts of allocation+free pairs with pauses between them, on one thread:
 * in each pause the tracer's background thread applies what is left and goes
 * to sleep, for longer and longer while nothing comes; the next burst fills
 * the ring past half (the harness sets rings of 64 events) well before that
 * sleep ends, and the doorbell must wake it (ring.h). The harness checks the
 * counts in the exit snapshot's stats, and the live set against the ledger:
 * nothing lost whoever applied the events.
 *
 * Usage: bursts ROUNDS PAIRS PAUSE_MS */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 40, pairs = argc > 2 ? atol(argv[2]) : 24;
	long pause_ms = argc > 3 ? atol(argv[3]) : 30;
	struct timespec pause = { pause_ms / 1000, pause_ms % 1000 * 1000000 };
	CUdeviceptr p, kept;
	CUcontext ctx;

	if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
	    cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cuMemAlloc(&kept, 1 << 20) != CUDA_SUCCESS) {
		fprintf(stderr, "bursts: no CUDA device\n");
		return 1;
	}
	for (long r = 0; r < rounds; r++) {
		nanosleep(&pause, NULL);
		for (long i = 0; i < pairs; i++) {
			if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) {
				fprintf(stderr, "bursts: a CUDA call failed\n");
				return 1;
			}
		}
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
