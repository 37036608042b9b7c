/* The part of NVML's public API that the NVML double (libnvidia-ml.so.1)
 * implements, declared here because nvml.h is not installed with the CUDA
 * toolkit headers this project builds against. Written from NVIDIA's public NVML
 * API reference (docs.nvidia.com/deploy/nvml-api): the same names, values,
 * layouts and prototypes as nvml.h, for these entry points only. */
#ifndef GMTSIM_NVML_SIM_H
#define GMTSIM_NVML_SIM_H

/* nvmlReturn_t: only the values the double returns (nvml.h has more). */
typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

/* Bytes of device memory; used is total - free. */
typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

/* One process using a device (the layout the _v3 process queries fill). */
typedef struct nvmlProcessInfo_st {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;     /* NVML_NO_INSTANCE_ID without MIG */
	unsigned int computeInstanceId; /* NVML_NO_INSTANCE_ID without MIG */
} nvmlProcessInfo_t;

/* gpuInstanceId and computeInstanceId of a process on a GPU without MIG. */
#define NVML_NO_INSTANCE_ID 0xFFFFFFFFu

/* Reference counted: every nvmlInit_v2 needs its nvmlShutdown. Every call but
 * these two and nvmlErrorString returns NVML_ERROR_UNINITIALIZED while the
 * count is 0. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);

/* A static string for any value, "Unknown Error" for values NVML has no text for. */
const char *nvmlErrorString(nvmlReturn_t result);

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);

/* pciBusId: "domain:bus:device.function", "domain:bus:device" or
 * "bus:device.function", hexadecimal, any case, with any number of domain
 * digits (cuDeviceGetPCIBusId gives 4, NVML itself 8). */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);

/* Size protocol: *infoCount is the capacity of infos on entry and the number of
 * processes on return. When the capacity is smaller than that number,
 * NVML_ERROR_INSUFFICIENT_SIZE and nothing is written to infos; so a call with
 * *infoCount 0 (infos may then be NULL) asks for the count, and returns
 * NVML_SUCCESS when there are no processes. */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						      nvmlProcessInfo_t *infos);

#endif /* GMTSIM_NVML_SIM_H */
