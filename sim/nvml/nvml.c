/* The NVML double (libnvidia-ml.so.1): the devices of the GMTSIM_* configuration,
 * their memory and the processes holding it (docs/simulator.md, "NVML"). What it
 * reports comes from the driver double's model of this process when the driver
 * is loaded and initialised (gmtsim_device_usage), and from the configuration
 * alone otherwise, as a real NVML reports devices without any CUDA process. */
#define _GNU_SOURCE
#include "nvml_sim.h"

#include "config.h"
#include "gmtsim.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#define NVML_SIM_EXPORT __attribute__((visibility("default")))

/* nvmlInit_v2 calls not yet matched by nvmlShutdown. Relaxed: it publishes no
 * memory (the configuration is published by its own pthread_once, the handles
 * are constant). */
static _Atomic unsigned init_count;

/* A handle is the address of its device's entry; entries never change. */
struct nvmlDevice_st {
	unsigned index;
};

static struct nvmlDevice_st devices[SIM_MAX_DEVICES] = {
	{ 0 }, { 1 }, { 2 }, { 3 }, { 4 }, { 5 }, { 6 }, { 7 },
	{ 8 }, { 9 }, { 10 }, { 11 }, { 12 }, { 13 }, { 14 }, { 15 },
};
_Static_assert(SIM_MAX_DEVICES == 16, "devices[] lists one entry per device");

static bool initialised(void)
{
	return atomic_load_explicit(&init_count, memory_order_relaxed) > 0;
}

/* The index behind a handle of this library, or -1 for anything else. */
static int device_index(nvmlDevice_t device)
{
	uintptr_t p = (uintptr_t)device, base = (uintptr_t)devices;

	if (device == NULL || p < base || p >= base + sizeof(devices) ||
	    (p - base) % sizeof(devices[0]) != 0)
		return -1;
	if ((int)device->index >= gmtsim__config()->ndevices)
		return -1;
	return (int)device->index;
}

/* --- usage: from the driver double, or from the configuration -------------- */

typedef int (*usage_fn)(int device, struct gmtsim_usage *out);

/* The usage of `device` and whether this process holds CUDA state. The driver
 * double is looked up at every call, never cached: it may be loaded, initialised
 * or torn down at any time, and the handle keeps it loaded during the call. */
static void device_usage(int device, struct gmtsim_usage *out, bool *from_driver)
{
	const struct sim_config *cfg = gmtsim__config();
	void *lib;

	*from_driver = false;
	/* NOTE: RTLD_NOLOAD: never load the driver (a real NVML does not use
	 * libcuda); use it only when this process already has. A real libcuda.so.1
	 * has no gmtsim_device_usage and is used as if absent. */
	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (lib != NULL) {
		usage_fn fn = (usage_fn)dlsym(lib, "gmtsim_device_usage");

		if (fn != NULL && fn(device, out) == 0)
			*from_driver = true;
		dlclose(lib);
	}
	if (*from_driver)
		return;
	/* The driver holds nothing of this process: every page is free but
	 * those of other processes. */
	*out = (struct gmtsim_usage){
		.total_bytes = cfg->memory[device],
		.free_bytes = cfg->memory[device] - cfg->other[device],
		.other_bytes = cfg->other[device],
	};
}

/* --- lifecycle and errors ---------------------------------------------------- */

NVML_SIM_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	/* An invalid GMTSIM_* variable has printed its line; the driver double
	 * refuses cuInit for the same reason. */
	if (gmtsim__config()->invalid)
		return NVML_ERROR_UNKNOWN;
	atomic_fetch_add_explicit(&init_count, 1, memory_order_relaxed);
	return NVML_SUCCESS;
}

NVML_SIM_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	unsigned n = atomic_load_explicit(&init_count, memory_order_relaxed);

	do {
		if (n == 0)
			return NVML_ERROR_UNINITIALIZED;
	} while (!atomic_compare_exchange_weak_explicit(&init_count, &n, n - 1, memory_order_relaxed,
							memory_order_relaxed));
	return NVML_SUCCESS;
}

NVML_SIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	default: return "Unknown Error";
	}
}

/* --- devices ------------------------------------------------------------------ */

NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (deviceCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*deviceCount = (unsigned)gmtsim__config()->ndevices;
	return NVML_SUCCESS;
}

NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (device == NULL || index >= (unsigned)gmtsim__config()->ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

/* One hexadecimal field of 1 to 8 digits, either case, at *s; advances *s. */
static bool hex_field(const char **s, unsigned *out)
{
	unsigned v = 0;
	int n = 0;

	for (;; n++) {
		char c = (*s)[n];
		unsigned d;

		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			d = (unsigned)(c - 'A' + 10);
		else
			break;
		if (n == 8)
			return false;
		v = v << 4 | d;
	}
	if (n == 0)
		return false;
	*s += n;
	*out = v;
	return true;
}

/* The forms NVML's reference accepts, all hexadecimal: domain:bus:device.function,
 * domain:bus:device and bus:device.function (domain and function then 0). */
static bool parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *dev,
			 unsigned *function)
{
	unsigned f[4];
	char sep[3];
	int n = 0;

	for (;;) {
		if (!hex_field(&s, &f[n]))
			return false;
		n++;
		if (*s == '\0' || n == 4)
			break;
		if (*s != ':' && *s != '.')
			return false;
		sep[n - 1] = *s++;
	}
	if (*s != '\0')
		return false;
	if (n == 4 && sep[0] == ':' && sep[1] == ':' && sep[2] == '.') {
		*domain = f[0];
		*bus = f[1];
		*dev = f[2];
		*function = f[3];
		return true;
	}
	if (n == 3 && sep[0] == ':' && sep[1] == ':') {
		*domain = f[0];
		*bus = f[1];
		*dev = f[2];
		*function = 0;
		return true;
	}
	if (n == 3 && sep[0] == ':' && sep[1] == '.') {
		*domain = 0;
		*bus = f[0];
		*dev = f[1];
		*function = f[2];
		return true;
	}
	return false;
}

NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	unsigned domain, bus, dev, function;

	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (pciBusId == NULL || device == NULL ||
	    !parse_bus_id(pciBusId, &domain, &bus, &dev, &function))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < gmtsim__config()->ndevices; i++) {
		if (domain == 0 && bus == SIM_PCI_BUS(i) && dev == 0 && function == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/* --- memory and processes ---------------------------------------------------- */

NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct gmtsim_usage u;
	bool from_driver;
	int i;

	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	i = device_index(device);
	if (i < 0 || memory == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	device_usage(i, &u, &from_driver);
	*memory = (nvmlMemory_t){
		.total = u.total_bytes,
		.free = u.free_bytes,
		.used = u.total_bytes - u.free_bytes,
	};
	return NVML_SUCCESS;
}

/* Fills the list `all` of up to two processes and returns their number: this
 * process when it holds pages of the device, and the other processes
 * (GMTSIM_OTHER_PROCESSES) as one, under GMTSIM_OTHER_PID. */
static unsigned compute_processes(int device, nvmlProcessInfo_t all[2])
{
	struct gmtsim_usage u;
	bool from_driver;
	unsigned n = 0;

	device_usage(device, &u, &from_driver);
	if (from_driver && u.self_bytes > 0)
		all[n++] = (nvmlProcessInfo_t){
			.pid = (unsigned)getpid(),
			.usedGpuMemory = u.self_bytes,
			.gpuInstanceId = NVML_NO_INSTANCE_ID,
			.computeInstanceId = NVML_NO_INSTANCE_ID,
		};
	if (u.other_bytes > 0)
		all[n++] = (nvmlProcessInfo_t){
			.pid = gmtsim__config()->other_pid,
			.usedGpuMemory = u.other_bytes,
			.gpuInstanceId = NVML_NO_INSTANCE_ID,
			.computeInstanceId = NVML_NO_INSTANCE_ID,
		};
	return n;
}

/* The documented size protocol over the list `all` of `n` processes. */
static nvmlReturn_t give_processes(const nvmlProcessInfo_t *all, unsigned n, unsigned int *infoCount,
				   nvmlProcessInfo_t *infos)
{
	unsigned cap = *infoCount;

	*infoCount = n;
	if (cap < n)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	if (n > 0 && infos == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned k = 0; k < n; k++)
		infos[k] = all[k];
	return NVML_SUCCESS;
}

NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
								     unsigned int *infoCount,
								     nvmlProcessInfo_t *infos)
{
	nvmlProcessInfo_t all[2];
	int i;

	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	i = device_index(device);
	if (i < 0 || infoCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return give_processes(all, compute_processes(i, all), infoCount, infos);
}

/* The simulated GPUs run no graphics. */
NVML_SIM_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
								      unsigned int *infoCount,
								      nvmlProcessInfo_t *infos)
{
	if (!initialised())
		return NVML_ERROR_UNINITIALIZED;
	if (device_index(device) < 0 || infoCount == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return give_processes(NULL, 0, infoCount, infos);
}
