/* The NVML double, libnvidia-ml.so.1 (docs/simulator.md, "NVML"): loaded the
 * way the profiler loads it (dlopen by soname, RTLD_LOCAL), checked against the
 * driver double in the same process: initialisation, devices and PCI bus ids,
 * memory info equal to cuMemGetInfo_v2, and the processes holding memory. */
#define _GNU_SOURCE
#include "simtest.h"

#include "nvml_sim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* --- the library, as the profiler loads it ----------------------------------- */

#define NVML_FUNCTIONS(X)                          \
	X(nvmlInit_v2)                             \
	X(nvmlShutdown)                            \
	X(nvmlErrorString)                         \
	X(nvmlDeviceGetCount_v2)                   \
	X(nvmlDeviceGetHandleByIndex_v2)           \
	X(nvmlDeviceGetHandleByPciBusId_v2)        \
	X(nvmlDeviceGetMemoryInfo)                 \
	X(nvmlDeviceGetComputeRunningProcesses_v3) \
	X(nvmlDeviceGetGraphicsRunningProcesses_v3)

/* Each function through a pointer of its nvml_sim.h type, named like it: the
 * test never links the library, so calls below read as ordinary NVML calls. */
static struct {
#define X(name) __typeof__(name) *name;
	NVML_FUNCTIONS(X)
#undef X
} nvml;

static void *nvml_handle;

static void nvml_load(void)
{
	nvml_handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (nvml_handle == NULL)
		simtest_fail(__FILE__, __LINE__, true, "dlopen(libnvidia-ml.so.1): %s", dlerror());
#define X(name)                                                                            \
	nvml.name = (__typeof__(name) *)dlsym(nvml_handle, #name);                         \
	if (nvml.name == NULL)                                                             \
		simtest_fail(__FILE__, __LINE__, true, "libnvidia-ml.so.1 lacks %s", #name);
	NVML_FUNCTIONS(X)
#undef X
}

#define CHECK_NVML(call, expected)                                                          \
	do {                                                                                \
		nvmlReturn_t sim_r_ = (call);                                               \
		nvmlReturn_t sim_e_ = (expected);                                           \
		if (sim_r_ != sim_e_)                                                       \
			simtest_fail(__FILE__, __LINE__, false, "%s returned %d (%s), expected %d (%s)", \
				     #call, (int)sim_r_, nvml.nvmlErrorString(sim_r_), (int)sim_e_, \
				     nvml.nvmlErrorString(sim_e_));                          \
	} while (0)
#define REQUIRE_NVML(call)                                                                  \
	do {                                                                                \
		nvmlReturn_t sim_r_ = (call);                                               \
		if (sim_r_ != NVML_SUCCESS)                                                 \
			simtest_fail(__FILE__, __LINE__, true, "%s returned %d (%s)", #call, \
				     (int)sim_r_, nvml.nvmlErrorString(sim_r_));             \
	} while (0)

static nvmlDevice_t handle_of(unsigned index)
{
	nvmlDevice_t d = NULL;

	REQUIRE_NVML(nvml.nvmlDeviceGetHandleByIndex_v2(index, &d));
	return d;
}

/* The compute processes of a device: at most N(out), *n of them. */
static void processes(nvmlDevice_t d, nvmlProcessInfo_t *out, unsigned cap, unsigned *n)
{
	*n = cap;
	REQUIRE_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, n, out));
	REQUIRE_U64(*n, <=, cap);
}

/* The bytes process `pid` holds on device `index` by NVML (0: not listed), after
 * checking every entry's MIG fields. */
static uint64_t process_bytes(unsigned index, unsigned pid)
{
	nvmlProcessInfo_t p[8];
	uint64_t bytes = 0;
	unsigned n, found = 0;

	processes(handle_of(index), p, N(p), &n);
	for (unsigned i = 0; i < n; i++) {
		CHECK_X(p[i].gpuInstanceId, ==, 0xFFFFFFFFu);
		CHECK_X(p[i].computeInstanceId, ==, 0xFFFFFFFFu);
		CHECK_X(p[i].usedGpuMemory % SIM_PAGE, ==, 0);
		if (p[i].pid == pid) {
			bytes = p[i].usedGpuMemory;
			found++;
		}
	}
	CHECK_U64(found, <=, 1);
	if (found == 1)
		CHECK_U64(bytes, >, 0);
	return bytes;
}

static uint64_t self_bytes(unsigned index)
{
	return process_bytes(index, (unsigned)getpid());
}

static unsigned process_count(unsigned index)
{
	nvmlProcessInfo_t p[8];
	unsigned n;

	processes(handle_of(index), p, N(p), &n);
	return n;
}

/* NVML's memory info of device `index` equals cuMemGetInfo_v2 in the current
 * context (which must be on that device). */
static void check_memory_matches_driver(unsigned index)
{
	nvmlMemory_t m = { 0 };
	size_t free_bytes = 0, total = 0;

	REQUIRE_OK(cuMemGetInfo_v2(&free_bytes, &total));
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(index), &m));
	CHECK_U64(m.total, ==, total);
	CHECK_U64(m.free, ==, free_bytes);
	CHECK_U64(m.used, ==, total - free_bytes);
}

/* --- scenarios ------------------------------------------------------------------ */

/* Before nvmlInit_v2 and after the last nvmlShutdown every call but those two
 * and nvmlErrorString is refused; init and shutdown are reference counted. */
static void check_refused(void)
{
	nvmlDevice_t d = (nvmlDevice_t)&d;
	nvmlMemory_t m;
	nvmlProcessInfo_t p[2];
	unsigned n = 2;

	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlDeviceGetHandleByPciBusId_v2("0000:18:00.0", &d), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlDeviceGetMemoryInfo(d, &m), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, p), NVML_ERROR_UNINITIALIZED);
	CHECK_NVML(nvml.nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
}

static void run_lifecycle(void)
{
	unsigned n = 0;

	nvml_load();
	check_refused();

	CHECK_NVML(nvml.nvmlInit_v2(), NVML_SUCCESS);
	CHECK_NVML(nvml.nvmlInit_v2(), NVML_SUCCESS);
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	CHECK_U64(n, ==, 1);
	CHECK_NVML(nvml.nvmlShutdown(), NVML_SUCCESS);
	/* one nvmlInit_v2 is still unmatched */
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	CHECK_NVML(nvml.nvmlShutdown(), NVML_SUCCESS);
	check_refused();
	/* and it starts again */
	CHECK_NVML(nvml.nvmlInit_v2(), NVML_SUCCESS);
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlShutdown(), NVML_SUCCESS);

	CHECK_STR(nvml.nvmlErrorString(NVML_SUCCESS), "Success");
	CHECK_STR(nvml.nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
	CHECK_STR(nvml.nvmlErrorString(NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
	CHECK_STR(nvml.nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found");
	CHECK_STR(nvml.nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
	CHECK_STR(nvml.nvmlErrorString(NVML_ERROR_UNKNOWN), "Unknown Error");
	CHECK_STR(nvml.nvmlErrorString((nvmlReturn_t)12345), "Unknown Error");

	/* only the NVML entry points are exported (the configuration is hidden) */
	CHECK_PTR(dlsym(nvml_handle, "gmtsim__config"), ==, NULL);
	CHECK_PTR(dlsym(nvml_handle, "gmtsim_device_usage"), ==, NULL);
}

/* An invalid GMTSIM_* variable fails nvmlInit_v2, as it fails cuInit. */
static void run_invalid_config(void)
{
	unsigned n = 0;

	nvml_load();
	CHECK_NVML(nvml.nvmlInit_v2(), NVML_ERROR_UNKNOWN);
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED);
	CHECK_CU(cuInit(0), CUDA_ERROR_INVALID_VALUE);
}

/* GMTSIM_DEVICES=3: handles by index and by the driver's PCI bus ids, in the
 * forms NVML accepts. */
static void run_devices(void)
{
	static const char *const same_as_device2[] = {
		"0000:1a:00.0", "0000:1A:00.0", "00000000:1a:00.0", "00000000:1A:00.0",
		"0:1a:0.0", "0000:1a:00", "1a:00.0", "1A:00.0",
	};
	static const char *const invalid[] = {
		"", "1a", "0000:1a", "0000:1a:00.0 ", " 0000:1a:00.0", "0000:1a:00.0.0",
		"0000.1a:00.0", "0000:1g:00.0", "0x0000:1a:00.0", "000000000:1a:00.0", "0000:1a::00.0",
	};
	static const char *const absent[] = {
		"0000:1b:00.0", "0001:18:00.0", "0000:18:01.0", "0000:18:00.1", "0000:17:00.0",
	};
	nvmlDevice_t h[3], d;
	char bus_id[32];
	unsigned n = 0;
	int attr;

	nvml_load();
	REQUIRE_NVML(nvml.nvmlInit_v2());
	CHECK_NVML(nvml.nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	CHECK_U64(n, ==, 3);
	for (unsigned i = 0; i < 3; i++) {
		h[i] = handle_of(i);
		CHECK(h[i] != NULL);
		for (unsigned j = 0; j < i; j++)
			CHECK_PTR(h[i], !=, h[j]);
		/* the same handle every time */
		CHECK_PTR(handle_of(i), ==, h[i]);
	}
	d = (nvmlDevice_t)&d;
	CHECK_NVML(nvml.nvmlDeviceGetHandleByIndex_v2(3, &d), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_PTR(d, ==, (nvmlDevice_t)&d);
	CHECK_NVML(nvml.nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT);

	/* the driver's own strings, exactly as it gives them */
	REQUIRE_OK(cuInit(0));
	for (int i = 0; i < 3; i++) {
		char want[32];

		REQUIRE_OK(cuDeviceGetPCIBusId(bus_id, (int)sizeof(bus_id), i));
		REQUIRE_OK(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i));
		snprintf(want, sizeof(want), "0000:%02x:00.0", attr);
		CHECK_STR(bus_id, want);
		d = NULL;
		CHECK_NVML(nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id, &d), NVML_SUCCESS);
		CHECK_PTR(d, ==, h[i]);
	}
	CHECK_STR(bus_id, "0000:1a:00.0");
	/* a short buffer gets the string truncated; a bad one an error */
	REQUIRE_OK(cuDeviceGetPCIBusId(bus_id, 5, 0));
	CHECK_STR(bus_id, "0000");
	CHECK_CU(cuDeviceGetPCIBusId(bus_id, 0, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuDeviceGetPCIBusId(NULL, 32, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_CU(cuDeviceGetPCIBusId(bus_id, 32, 3), CUDA_ERROR_INVALID_DEVICE);

	for (size_t i = 0; i < N(same_as_device2); i++) {
		d = NULL;
		CHECK_NVML(nvml.nvmlDeviceGetHandleByPciBusId_v2(same_as_device2[i], &d), NVML_SUCCESS);
		if (d != h[2])
			simtest_fail(__FILE__, __LINE__, false, "\"%s\" is not device 2", same_as_device2[i]);
	}
	for (size_t i = 0; i < N(invalid); i++) {
		if (nvml.nvmlDeviceGetHandleByPciBusId_v2(invalid[i], &d) != NVML_ERROR_INVALID_ARGUMENT)
			simtest_fail(__FILE__, __LINE__, false, "\"%s\" accepted", invalid[i]);
	}
	for (size_t i = 0; i < N(absent); i++) {
		if (nvml.nvmlDeviceGetHandleByPciBusId_v2(absent[i], &d) != NVML_ERROR_NOT_FOUND)
			simtest_fail(__FILE__, __LINE__, false, "\"%s\" found", absent[i]);
	}
	CHECK_NVML(nvml.nvmlDeviceGetHandleByPciBusId_v2(NULL, &d), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlDeviceGetHandleByPciBusId_v2("0000:18:00.0", NULL),
		   NVML_ERROR_INVALID_ARGUMENT);

	/* something that is not a handle of the library */
	nvmlMemory_t m;
	CHECK_NVML(nvml.nvmlDeviceGetMemoryInfo(NULL, &m), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlDeviceGetMemoryInfo((nvmlDevice_t)&m, &m), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlDeviceGetMemoryInfo(h[0], NULL), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlShutdown(), NVML_SUCCESS);
}

/* GMTSIM_DEVICES=2, GMTSIM_MEMORY=64M,128M, GMTSIM_OTHER_PROCESSES=3M,0,
 * GMTSIM_CONTEXT_BYTES=5M: NVML's memory info is cuMemGetInfo_v2's, with and
 * without CUDA initialised. */
static void run_memory_info(void)
{
	CUcontext ctx[2];
	CUdeviceptr a, b, c;
	nvmlMemory_t m;

	nvml_load();
	REQUIRE_NVML(nvml.nvmlInit_v2());
	/* before cuInit: the configuration, other processes' pages only */
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(0), &m));
	CHECK_U64(m.total, ==, 64 * SIM_MiB);
	CHECK_U64(m.free, ==, 60 * SIM_MiB);
	CHECK_U64(m.used, ==, 4 * SIM_MiB);
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(1), &m));
	CHECK_U64(m.total, ==, 128 * SIM_MiB);
	CHECK_U64(m.free, ==, 128 * SIM_MiB);
	CHECK_U64(m.used, ==, 0);

	ctx[1] = simtest_init_context(1);
	ctx[0] = simtest_init_context(0);
	check_memory_matches_driver(0);
	REQUIRE_OK(cuMemAlloc_v2(&a, 3 * SIM_MiB));
	REQUIRE_OK(cuMemAlloc_v2(&b, 1000));
	check_memory_matches_driver(0);
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(0), &m));
	CHECK_U64(m.used, ==, (4 + 6 + 4 + 2) * SIM_MiB);

	REQUIRE_OK(cuCtxSetCurrent(ctx[1]));
	check_memory_matches_driver(1);
	REQUIRE_OK(cuMemAlloc_v2(&c, 20 * SIM_MiB));
	check_memory_matches_driver(1);
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(1), &m));
	CHECK_U64(m.used, ==, (6 + 20) * SIM_MiB);

	REQUIRE_OK(cuCtxSetCurrent(ctx[0]));
	REQUIRE_OK(cuMemFree_v2(a));
	REQUIRE_OK(cuMemFree_v2(b));
	check_memory_matches_driver(0);
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(0), &m));
	CHECK_U64(m.used, ==, (4 + 6) * SIM_MiB);
	REQUIRE_NVML(nvml.nvmlShutdown());
}

static const CUmemAllocationProp device0_prop = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};

/* The child of run_processes: CUDA does not cross fork, so NVML lists only the
 * other process. Exit status 0 when that holds. */
static int child_after_fork(void)
{
	nvmlMemory_t m;

	if (self_bytes(0) != 0 || process_count(0) != 1 || process_bytes(0, 12345) != 4 * SIM_MiB)
		return 1;
	REQUIRE_NVML(nvml.nvmlDeviceGetMemoryInfo(handle_of(0), &m));
	if (m.used != 4 * SIM_MiB || simtest_failures() != 0)
		return 1;
	return 0;
}

/* GMTSIM_MEMORY=64M, GMTSIM_OTHER_PROCESSES=3M (4 MiB of pages),
 * GMTSIM_CONTEXT_BYTES=5M (6 MiB), GMTSIM_OTHER_PID=12345: this process is
 * listed with every page it holds, and only while it holds any. */
static void run_processes(void)
{
	CUmemGenericAllocationHandle vmm;
	CUdeviceptr big, small, async, managed;
	CUcontext ctx;
	CUarray array;
	CUDA_ARRAY_DESCRIPTOR desc = { .Width = 1024, .Height = 1024,
				       .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1 };
	void *host;
	int status;
	pid_t pid;

	nvml_load();
	REQUIRE_NVML(nvml.nvmlInit_v2());
	/* no CUDA yet: the other process alone */
	CHECK_U64(process_count(0), ==, 1);
	CHECK_U64(process_bytes(0, 12345), ==, 4 * SIM_MiB);
	CHECK_U64(self_bytes(0), ==, 0);

	/* initialised but holding nothing: still not listed */
	REQUIRE_OK(cuInit(0));
	CHECK_U64(process_count(0), ==, 1);
	CHECK_U64(self_bytes(0), ==, 0);

	ctx = simtest_init_context(0);
	CHECK_U64(self_bytes(0), ==, 6 * SIM_MiB); /* the context */
	CHECK_U64(process_count(0), ==, 2);
	REQUIRE_OK(cuMemAlloc_v2(&big, 3 * SIM_MiB));
	CHECK_U64(self_bytes(0), ==, (6 + 4) * SIM_MiB); /* 3 MiB take 2 pages */
	REQUIRE_OK(cuMemAlloc_v2(&small, 1000));
	CHECK_U64(self_bytes(0), ==, (6 + 4 + 2) * SIM_MiB); /* a page for small ones */
	REQUIRE_OK(cuMemAllocAsync(&async, SIM_MiB, NULL));
	CHECK_U64(self_bytes(0), ==, (6 + 4 + 2 + 2) * SIM_MiB); /* a pool segment */
	REQUIRE_OK(cuMemCreate(&vmm, 4 * SIM_MiB, &device0_prop, 0));
	CHECK_U64(self_bytes(0), ==, (6 + 4 + 2 + 2 + 4) * SIM_MiB);
	REQUIRE_OK(cuArrayCreate(&array, &desc)); /* 4 MiB */
	CHECK_U64(self_bytes(0), ==, (6 + 4 + 2 + 2 + 4 + 4) * SIM_MiB);
	/* managed and host memory hold no device pages */
	REQUIRE_OK(cuMemAllocManaged(&managed, 8 * SIM_MiB, CU_MEM_ATTACH_GLOBAL));
	REQUIRE_OK(cuMemHostAlloc(&host, 8 * SIM_MiB, 0));
	CHECK_U64(self_bytes(0), ==, 22 * SIM_MiB);
	CHECK_U64(process_bytes(0, 12345), ==, 4 * SIM_MiB);
	check_memory_matches_driver(0);

	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(child_after_fork());
	REQUIRE_INT(pid, >, 0);
	REQUIRE_INT(waitpid(pid, &status, 0), ==, pid);
	CHECK_INT(WIFEXITED(status), ==, 1);
	CHECK_INT(WEXITSTATUS(status), ==, 0);
	CHECK_U64(self_bytes(0), ==, 22 * SIM_MiB);

	/* what a free gives back */
	REQUIRE_OK(cuMemFree_v2(big));
	CHECK_U64(self_bytes(0), ==, 18 * SIM_MiB);
	REQUIRE_OK(cuMemRelease(vmm));
	REQUIRE_OK(cuMemFreeAsync(async, NULL));
	REQUIRE_OK(cuStreamSynchronize(NULL)); /* release threshold 0: the segment goes */
	CHECK_U64(self_bytes(0), ==, 12 * SIM_MiB); /* the context, the small page, the array */
	/* the context takes the rest with it: this process is listed no more */
	REQUIRE_OK(cuCtxDestroy(ctx));
	CHECK_U64(self_bytes(0), ==, 0);
	CHECK_U64(process_count(0), ==, 1);
	REQUIRE_NVML(nvml.nvmlShutdown());
}

/* The documented size protocol, with two processes (this one and the other). */
static void run_insufficient_size(void)
{
	nvmlProcessInfo_t p[3];
	nvmlDevice_t d;
	CUdeviceptr dptr;
	unsigned n;

	nvml_load();
	REQUIRE_NVML(nvml.nvmlInit_v2());
	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc_v2(&dptr, SIM_MiB));
	d = handle_of(0);

	n = 0;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_U64(n, ==, 2);
	memset(p, 0xab, sizeof(p));
	n = 1;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p), NVML_ERROR_INSUFFICIENT_SIZE);
	CHECK_U64(n, ==, 2);
	CHECK_X(p[0].pid, ==, 0xababababu); /* nothing written */
	n = 2;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p), NVML_SUCCESS);
	CHECK_U64(n, ==, 2);
	n = 3;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p), NVML_SUCCESS);
	CHECK_U64(n, ==, 2);
	CHECK_X(p[2].pid, ==, 0xababababu); /* nothing past the count */
	CHECK(p[0].pid != p[1].pid);
	CHECK((p[0].pid == (unsigned)getpid() && p[1].pid == 4194304u) ||
	      (p[1].pid == (unsigned)getpid() && p[0].pid == 4194304u));
	CHECK_U64(process_bytes(0, 4194304u), ==, 2 * SIM_MiB);
	CHECK_U64(self_bytes(0), ==, 2 * SIM_MiB);
	n = 3;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, NULL, p), NVML_ERROR_INVALID_ARGUMENT);
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(NULL, &n, p), NVML_ERROR_INVALID_ARGUMENT);

	/* no graphics on a simulated GPU */
	n = 0;
	CHECK_NVML(nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, NULL), NVML_SUCCESS);
	CHECK_U64(n, ==, 0);
	n = 3;
	CHECK_NVML(nvml.nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, p), NVML_SUCCESS);
	CHECK_U64(n, ==, 0);
	REQUIRE_NVML(nvml.nvmlShutdown());
}

/* GMTSIM_DEVICES=2, GMTSIM_OTHER_PROCESSES=0,6M and no GMTSIM_OTHER_PID: the
 * other process only where it holds memory, under the default pid that no
 * Linux process can have; no process at all on an unused device. */
static void run_other_pid_default(void)
{
	nvmlDevice_t d;
	unsigned n;

	nvml_load();
	REQUIRE_NVML(nvml.nvmlInit_v2());
	d = handle_of(0);
	n = 0;
	CHECK_NVML(nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL), NVML_SUCCESS);
	CHECK_U64(n, ==, 0);
	CHECK_U64(process_count(1), ==, 1);
	CHECK_U64(process_bytes(1, 4194304u), ==, 6 * SIM_MiB);

	/* CUDA on device 1 only: this process appears there and nowhere else */
	simtest_init_context(1);
	CHECK_U64(process_count(0), ==, 0);
	CHECK_U64(process_count(1), ==, 2);
	CHECK_U64(self_bytes(1), ==, 2 * SIM_MiB); /* GMTSIM_CONTEXT_BYTES=1: one page */
	CHECK_U64(process_bytes(1, 4194304u), ==, 6 * SIM_MiB);
	REQUIRE_NVML(nvml.nvmlShutdown());
}

static const char *const env_lifecycle[] = { "GMTSIM_MEMORY=64M", NULL };
static const char *const env_invalid[] = { "GMTSIM_OTHER_PID=0", NULL };
static const char *const env_devices[] = { "GMTSIM_DEVICES=3", "GMTSIM_MEMORY=64M", NULL };
static const char *const env_memory[] = { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=64M,128M",
					  "GMTSIM_OTHER_PROCESSES=3M,0",
					  "GMTSIM_CONTEXT_BYTES=5M", NULL };
static const char *const env_processes[] = { "GMTSIM_MEMORY=64M", "GMTSIM_OTHER_PROCESSES=3M",
					     "GMTSIM_CONTEXT_BYTES=5M", "GMTSIM_OTHER_PID=12345",
					     NULL };
static const char *const env_size[] = { "GMTSIM_MEMORY=64M", "GMTSIM_OTHER_PROCESSES=2M", NULL };
static const char *const env_default_pid[] = { "GMTSIM_DEVICES=2", "GMTSIM_MEMORY=64M",
					       "GMTSIM_OTHER_PROCESSES=0,6M",
					       "GMTSIM_CONTEXT_BYTES=1", NULL };

static const struct simtest_case cases[] = {
	{ "lifecycle", env_lifecycle, run_lifecycle, false },
	{ "invalid-config", env_invalid, run_invalid_config, false },
	{ "devices", env_devices, run_devices, false },
	{ "memory-info", env_memory, run_memory_info, false },
	{ "processes", env_processes, run_processes, false },
	{ "insufficient-size", env_size, run_insufficient_size, false },
	{ "other-pid-default", env_default_pid, run_other_pid_default, false },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
