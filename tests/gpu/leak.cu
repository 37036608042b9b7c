/* A leak: device memory and pinned host memory allocated and never freed,
 * beside memory freed properly (device and stream-ordered). Run with
 * GPUMEMTRACE_LEAK_CHECK=1: the program ends with the leak gate's status
 * (23), and its exit snapshot's leak check counts exactly the two leaks.
 * Static cudart. Checkpoints: start, allocated, exit (the tracer's own). */
#include "gpu_runtime.h"

int main(void)
{
	void *leaked_device, *leaked_host, *freed_device, *freed_async;

	gt_begin("leak");
	gt_rt_init(0);
	gt_rt_checkpoint("start");

	GT_OK(cudaMalloc(&leaked_device, 3 * GT_MIB));
	gt_add(GT_ADDR(leaked_device), 3 * GT_MIB, "device", 0);
	GT_OK(cudaMallocHost(&leaked_host, 64 * 1024));
	gt_add(GT_ADDR(leaked_host), 64 * 1024, "host", -1);
	GT_OK(cudaMalloc(&freed_device, 1 * GT_MIB));
	gt_add(GT_ADDR(freed_device), 1 * GT_MIB, "device", 0);
	GT_OK(cudaMallocAsync(&freed_async, 2 * GT_MIB, 0));
	GT_OK(cudaStreamSynchronize(0));
	gt_add(GT_ADDR(freed_async), 2 * GT_MIB, "async", 0);
	gt_rt_checkpoint("allocated");

	gt_remove(GT_ADDR(freed_device), "device");
	GT_OK(cudaFree(freed_device));
	gt_remove(GT_ADDR(freed_async), "async");
	GT_OK(cudaFreeAsync(freed_async, 0));
	GT_OK(cudaStreamSynchronize(0));

	gt_checkpoint_at("exit", "@exit");
	gt_leaks("exit", 2, 3 * GT_MIB + 64 * 1024);
	return 0;
}
