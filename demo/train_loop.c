/*
 * The demo program: a small "training loop" that runs out of device memory.
 * Plain C against the CUDA runtime API, so it builds against the simulated
 * cudart (meson) and, unchanged, with nvcc against the real one (scripts/demo).
 * It marks each training step with gmt_step() from gpumemtrace.h, which does
 * nothing when the tracer is not loaded (a training loop that marks its steps
 * gets remedies in bytes per step).
 *
 * What it allocates, scaled to the device so it behaves alike on the simulated
 * 4 GiB GPU and on an 80 GiB one (u = total / 256, whole 2 MiB pages):
 *   - weights of 4 layers (2u, 4u, 4u, 2u) and Adam state (2 x weights), cudaMalloc;
 *   - a pinned host staging buffer for input batches, cudaMallocHost;
 *   - per step, one activation per layer (2 x weights) and one gradient per
 *     layer, cudaMallocAsync / cudaFreeAsync on a stream.
 * The bug: a "metrics hook" keeps the last layer's activation of every step
 * (meant to be read back later for a gradient-norm plot), so 4u more stays live
 * each step until an allocation fails after ~40-50 steps. No kernel runs: this is
 * the allocation pattern of a training job, nothing more.
 *
 * A step "computes" for 20 ms (a sleep standing in for its kernels), so that
 * the run spans time as a real one does and the tracer's series (10 ms
 * windows) sees the leak grow step by step.
 *
 * Exit status: 2 on CUDA out-of-memory (with a framework-like message on
 * stderr), 1 on any other CUDA error, 0 if MAX_STEPS pass without failing.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
#include <gpumemtrace.h>

#define N_LAYERS 4
#define MAX_STEPS 1000
#define PAGE ((size_t)2 << 20)
#define EXIT_CUDA_ERROR 1
#define EXIT_OOM 2

struct layer {
	size_t weight_bytes;
	size_t act_bytes;
	void *weights;
	void *adam_m;	/* Adam's first and second moments, one each per weight */
	void *adam_v;
};

static struct layer layers[N_LAYERS];
/* The bug: one retained activation per step, never freed. */
static void *metrics_cache[MAX_STEPS];
static int cached;
/* The step being run, for messages; 0 while setting up. */
static int step;

static double mib(size_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static void where(char *buf, size_t len)
{
	if (step > 0)
		snprintf(buf, len, "step %d", step);
	else
		snprintf(buf, len, "setup");
}

static void fail(const char *call, cudaError_t err)
{
	char at[32];

	where(at, sizeof(at));
	fprintf(stderr, "train_loop: %s: %s failed: %s (%s)\n", at, call,
		cudaGetErrorString(err), cudaGetErrorName(err));
	exit(EXIT_CUDA_ERROR);
}

static void check(const char *call, cudaError_t err)
{
	if (err != cudaSuccess)
		fail(call, err);
}

/* What a framework prints when an allocation fails, then exit as it would. */
static void out_of_memory(size_t bytes, cudaError_t err)
{
	size_t free_bytes = 0, total_bytes = 0;
	char at[32];

	/* NOTE: out-of-memory is not a sticky error; clear it so the query works. */
	(void)cudaGetLastError();
	check("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
	where(at, sizeof(at));
	fprintf(stderr, "train_loop: %s: CUDA out of memory: tried to allocate %.2f MiB "
		"(%s); %zu MiB free of %zu MiB\n", at, mib(bytes), cudaGetErrorName(err),
		free_bytes >> 20, total_bytes >> 20);
	exit(EXIT_OOM);
}

static void *device_alloc(size_t bytes)
{
	void *p = NULL;
	cudaError_t err = cudaMalloc(&p, bytes);

	if (err == cudaErrorMemoryAllocation)
		out_of_memory(bytes, err);
	check("cudaMalloc", err);
	return p;
}

static void *stream_alloc(size_t bytes, cudaStream_t stream)
{
	void *p = NULL;
	cudaError_t err = cudaMallocAsync(&p, bytes, stream);

	if (err == cudaErrorMemoryAllocation)
		out_of_memory(bytes, err);
	check("cudaMallocAsync", err);
	return p;
}

/* Forward, backward and the optimizer step's allocations for one batch. */
static void train_step(cudaStream_t stream, unsigned char *staging, size_t batch_bytes)
{
	static const struct timespec compute = { 0, 20 * 1000 * 1000 };
	void *act[N_LAYERS], *grad;
	int i;

	/* Stage the next input batch in pinned memory, as a data loader does. */
	memset(staging, step & 0xff, batch_bytes);

	for (i = 0; i < N_LAYERS; i++)
		act[i] = stream_alloc(layers[i].act_bytes, stream);

	for (i = N_LAYERS - 1; i >= 0; i--) {
		grad = stream_alloc(layers[i].weight_bytes, stream);
		check("cudaFreeAsync", cudaFreeAsync(grad, stream));
		if (i == N_LAYERS - 1) {
			/* BUG: the metrics hook keeps the output activation "for later"
			 * and nothing ever reads or frees it. */
			metrics_cache[cached++] = act[i];
			continue;
		}
		check("cudaFreeAsync", cudaFreeAsync(act[i], stream));
	}
	check("cudaStreamSynchronize", cudaStreamSynchronize(stream));
	nanosleep(&compute, NULL);
}

int main(void)
{
	size_t free_bytes, total_bytes, unit, staging_bytes, batch_bytes, params = 0;
	static const int weight_units[N_LAYERS] = { 2, 4, 4, 2 };
	unsigned char *staging = NULL;
	cudaStream_t stream;
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	check("cudaSetDevice", cudaSetDevice(0));
	check("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
	unit = total_bytes / 256 / PAGE * PAGE;
	if (unit == 0)
		unit = PAGE;
	printf("train_loop: device 0: %zu MiB total, %zu MiB free\n",
	       total_bytes >> 20, free_bytes >> 20);

	for (i = 0; i < N_LAYERS; i++) {
		layers[i].weight_bytes = (size_t)weight_units[i] * unit;
		layers[i].act_bytes = 2 * layers[i].weight_bytes;
		layers[i].weights = device_alloc(layers[i].weight_bytes);
		layers[i].adam_m = device_alloc(layers[i].weight_bytes);
		layers[i].adam_v = device_alloc(layers[i].weight_bytes);
		params += layers[i].weight_bytes;
	}
	staging_bytes = 64 << 20;
	batch_bytes = 1 << 20;
	check("cudaMallocHost", cudaMallocHost((void **)&staging, staging_bytes));
	check("cudaStreamCreate", cudaStreamCreate(&stream));
	printf("train_loop: model: %d layers, %.0f MiB of weights, %.0f MiB of Adam "
	       "state; %.0f MiB pinned staging buffer\n", N_LAYERS, mib(params),
	       mib(2 * params), mib(staging_bytes));

	for (step = 1; step <= MAX_STEPS; step++) {
		(void)gmt_step((unsigned long long)step); /* -ENOSYS untraced */
		train_step(stream, staging, batch_bytes);
		if (step % 5 == 0) {
			check("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total_bytes));
			printf("train_loop: step %3d  loss %.3f  metrics cache %3d "
			       "activations (%.0f MiB)  %zu MiB free\n", step,
			       2.0 + 8.0 / (step + 3), cached,
			       mib((size_t)cached * layers[N_LAYERS - 1].act_bytes),
			       free_bytes >> 20);
		}
	}

	/* Not reached on a device of up to ~1000 x the per-step growth. */
	printf("train_loop: %d steps without running out of memory\n", MAX_STEPS);
	for (i = 0; i < cached; i++)
		check("cudaFreeAsync", cudaFreeAsync(metrics_cache[i], stream));
	check("cudaStreamSynchronize", cudaStreamSynchronize(stream));
	for (i = 0; i < N_LAYERS; i++) {
		check("cudaFree", cudaFree(layers[i].weights));
		check("cudaFree", cudaFree(layers[i].adam_m));
		check("cudaFree", cudaFree(layers[i].adam_v));
	}
	check("cudaStreamDestroy", cudaStreamDestroy(stream));
	check("cudaFreeHost", cudaFreeHost(staging));
	return 0;
}
