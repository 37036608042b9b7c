/* Device state from the driver and NVML (device.h). */
#define _GNU_SOURCE
#include "intercept/device.h"

#include "intercept/hooks.h"
#include "util/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* NVML, as its public documentation (the NVML API reference) declares it; the
 * header is not part of the CUDA toolkit everywhere, and the library is loaded
 * at run time only when present, so the few names used are declared here. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
/* usedGpuMemory of a process NVML cannot measure (Windows WDDM, no rights). */
#define NVML_VALUE_NOT_AVAILABLE (~0ull)
#define NVML_MAX_PROCESSES 256

static struct {
	pthread_once_t once;
	bool ok;
	bool missing;    /* libnvidia-ml.so.1 not found */
	const char *why; /* when not ok */
	nvmlReturn_t (*get_by_bus_id)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*compute)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
	nvmlReturn_t (*graphics)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
	pthread_mutex_t lock; /* the process buffer below */
	nvmlProcessInfo_t procs[NVML_MAX_PROCESSES];
} nvml = {
	.once = PTHREAD_ONCE_INIT,
	.why = "NVML is not available",
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* NOTE: loaded on the first out-of-memory only, and kept: nvmlInit costs tens
 * of milliseconds on a real machine, and nvmlShutdown at exit would race the
 * program's own use of NVML (PyTorch's, for one). */
static void nvml_load(void)
{
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	nvmlReturn_t (*init)(void);

	if (h == NULL) {
		nvml.why = "NVML (libnvidia-ml.so.1) is not installed";
		nvml.missing = true;
		return;
	}
	*(void **)&init = dlsym(h, "nvmlInit_v2");
	*(void **)&nvml.get_by_bus_id = dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
	*(void **)&nvml.compute = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
	*(void **)&nvml.graphics = dlsym(h, "nvmlDeviceGetGraphicsRunningProcesses_v3");
	if (init == NULL || nvml.get_by_bus_id == NULL || nvml.compute == NULL || nvml.graphics == NULL) {
		nvml.why = "NVML is too old (no nvmlDeviceGetComputeRunningProcesses_v3)";
		return;
	}
	if (init() != NVML_SUCCESS) {
		nvml.why = "NVML did not initialise";
		return;
	}
	nvml.ok = true;
	gmt__info("NVML loaded: other processes' memory is known at out-of-memory");
}

/* Adds the processes of one NVML list to st (not this one). Returns false
 * when NVML could not answer or this process is not in a non-empty list. */
static bool add_processes(nvmlDevice_t dev, nvmlReturn_t (*list)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *),
			  struct gmt__device_state *st, bool *self_seen)
{
	unsigned int n = NVML_MAX_PROCESSES;
	uint32_t self = (uint32_t)getpid();

	if (list(dev, &n, nvml.procs) != NVML_SUCCESS) {
		st->others_why = "NVML did not list the device's processes";
		return false;
	}
	for (unsigned int i = 0; i < n; i++) {
		if (nvml.procs[i].pid == self) {
			*self_seen = true;
			continue;
		}
		if (nvml.procs[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE) {
			st->others_why = "NVML does not report other processes' memory here";
			return false;
		}
		if (st->nothers < GMT_DEVICE_MAX_OTHERS) {
			st->others[st->nothers].pid = nvml.procs[i].pid;
			st->others[st->nothers].bytes = nvml.procs[i].usedGpuMemory;
		}
		st->nothers++;
		st->others_bytes += nvml.procs[i].usedGpuMemory;
	}
	return true;
}

/* Whether the device is the simulated GPU of a gpumemtrace build (its name
 * says so through the driver's public API). */
static bool simulated(int device)
{
	static const char prefix[] = "gpumemtrace simulated GPU";
	char name[128];

	return gmt__driver_device_name(device, name, (int)sizeof(name)) == CUDA_SUCCESS &&
	       strncmp(name, prefix, sizeof(prefix) - 1) == 0;
}

static void query_others(int device, struct gmt__device_state *st)
{
	char bus[32];
	nvmlDevice_t dev;
	bool self_seen = false, ok;

	pthread_once(&nvml.once, nvml_load);
	st->others_why = nvml.why;
	if (!nvml.ok) {
		if (nvml.missing && simulated(device))
			st->others_why = "NVML (libnvidia-ml.so.1) is not installed (the simulated GPU's: the build's "
					 "sim/nvml)";
		return;
	}
	if (gmt__driver_pci_bus_id(device, bus, (int)sizeof(bus)) != CUDA_SUCCESS) {
		st->others_why = "the driver did not give the device's PCI bus id";
		return;
	}
	if (nvml.get_by_bus_id(bus, &dev) != NVML_SUCCESS) {
		st->others_why = "NVML does not know the device";
		return;
	}
	pthread_mutex_lock(&nvml.lock);
	ok = add_processes(dev, nvml.compute, st, &self_seen) && add_processes(dev, nvml.graphics, st, &self_seen);
	pthread_mutex_unlock(&nvml.lock);
	if (!ok) {
		st->nothers = 0;
		st->others_bytes = 0;
		return;
	}
	/* NOTE: in a container NVML lists processes by the host's pids, or
	 * none: a process asking about a device it allocates on is missing from
	 * the list only then, and the list cannot be trusted. */
	if (!self_seen) {
		st->nothers = 0;
		st->others_bytes = 0;
		st->others_why = "this process is not in NVML's list (another pid namespace)";
		return;
	}
	st->have_others = true;
	st->others_why = NULL;
}

void gmt__device_query(int device, struct gmt__device_state *st)
{
	size_t free_b, total_b, gran;
	CUmemoryPool def, cur;

	memset(st, 0, sizeof(*st));
	st->index = device;
	if (gmt__driver_mem_info(device, &free_b, &total_b) == CUDA_SUCCESS) {
		st->have_mem = true;
		st->free_bytes = free_b;
		st->total_bytes = total_b;
	}
	if (gmt__driver_granularity(device, &gran) == CUDA_SUCCESS && gran > 0) {
		st->have_granularity = true;
		st->granularity = gran;
	}
	if (gmt__driver_pools(device, &def, &cur) == CUDA_SUCCESS &&
	    gmt__driver_pool_usage(def, &st->pool_reserved, &st->pool_used) == CUDA_SUCCESS) {
		st->have_pools = true;
		st->npools = 1;
		if (cur != def) {
			uint64_t r, u;

			if (gmt__driver_pool_usage(cur, &r, &u) == CUDA_SUCCESS) {
				st->pool_reserved += r;
				st->pool_used += u;
				st->npools = 2;
			}
		}
	}
	query_others(device, st);
}
