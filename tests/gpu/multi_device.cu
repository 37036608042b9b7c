/* Several devices, where present (up to 4): on each, cudaMalloc and
 * cudaMallocAsync made with that device current, so that every allocation is
 * listed with its own device and every device's free bytes drop by its own
 * share. A snapshot asks the free bytes of the current device only, so each
 * device has its own checkpoints: start.N, allocated.N, end.N. One device:
 * skipped. Static cudart. */
#include "gpu_runtime.h"

#define MAX_DEVICES 4

static char label[64];

static const char *at(const char *what, int device)
{
	snprintf(label, sizeof(label), "%s.%d", what, device);
	return label;
}

int main(void)
{
	void *plain[MAX_DEVICES], *async[MAX_DEVICES];
	int count, dev;

	gt_begin("multi_device");
	GT_OK(cudaGetDeviceCount(&count));
	if (count < 2) {
		gt_skip("one device: nothing to compare across devices");
		return 0;
	}
	if (count > MAX_DEVICES)
		count = MAX_DEVICES;
	for (dev = 0; dev < count; dev++) {
		gt_rt_init(dev);
		gt_rt_checkpoint(at("start", dev));
	}

	/* Device d holds (d + 1) x 4 MiB plain and 2 MiB stream-ordered. */
	for (dev = 0; dev < count; dev++) {
		GT_OK(cudaSetDevice(dev));
		GT_OK(cudaMalloc(&plain[dev], (size_t)(dev + 1) * 4 * GT_MIB));
		gt_add(GT_ADDR(plain[dev]), (size_t)(dev + 1) * 4 * GT_MIB, "device", dev);
		GT_OK(cudaMallocAsync(&async[dev], 2 * GT_MIB, 0));
		GT_OK(cudaStreamSynchronize(0));
		gt_add(GT_ADDR(async[dev]), 2 * GT_MIB, "async", dev);
	}
	for (dev = 0; dev < count; dev++) {
		GT_OK(cudaSetDevice(dev));
		gt_rt_checkpoint(at("allocated", dev));
	}

	for (dev = 0; dev < count; dev++) {
		GT_OK(cudaSetDevice(dev));
		gt_remove(GT_ADDR(plain[dev]), "device");
		GT_OK(cudaFree(plain[dev]));
		gt_remove(GT_ADDR(async[dev]), "async");
		GT_OK(cudaFreeAsync(async[dev], 0));
		GT_OK(cudaStreamSynchronize(0));
	}
	for (dev = 0; dev < count; dev++) {
		GT_OK(cudaSetDevice(dev));
		gt_rt_checkpoint(at("end", dev));
	}
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
