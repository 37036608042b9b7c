/* Copies, memsets, pointer attributes, events and IPC handles in the driver
 * double (docs/simulator.md, "Fidelity"): ranges checked against the memory
 * model, host-visible bytes moved, device memory read as zeros, and the
 * driver's errors for what it does not know. */
#define _GNU_SOURCE
#include "simtest.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define BAD CUDA_ERROR_INVALID_VALUE

static const CUmemAllocationProp device0_prop = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};

static size_t count_not(const unsigned char *p, size_t n, unsigned char v)
{
	size_t bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += p[i] != v;
	return bad;
}

static void run_copies(void)
{
	unsigned char host[4096], back[4096];
	unsigned char *pinned = NULL, *pinned2 = NULL;
	CUdeviceptr d, managed, va;
	CUmemGenericAllocationHandle h1, h2;
	CUstream stream;

	CHECK_CU(cuMemcpyHtoD(0x1000, host, 16), CUDA_ERROR_NOT_INITIALIZED);
	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc(&d, 1000));
	REQUIRE_OK(cuMemAllocManaged(&managed, 512, CU_MEM_ATTACH_GLOBAL));
	REQUIRE_OK(cuMemHostAlloc((void **)&pinned, 4096, 0));
	REQUIRE_OK(cuMemAllocHost((void **)&pinned2, 4096));
	memset(host, 0x5a, sizeof(host));

	/* inside the requested bytes, and not one byte past them */
	CHECK_CU(cuMemcpyHtoD(d, host, 1000), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyHtoD(d + 999, host, 1), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyHtoD(d + 1, host, 1000), BAD);
	CHECK_CU(cuMemcpyHtoD(d, NULL, 8), BAD);
	CHECK_CU(cuMemcpyHtoD(d + 4096, host, 8), BAD);
	CHECK_CU(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)host, host, 8), BAD); /* plain host memory */
	CHECK_CU(cuMemcpyHtoD(d + 4096, host, 0), CUDA_SUCCESS);             /* nothing to copy */
	CHECK_CU(cuMemcpyHtoD(managed, host, 512), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyHtoD(managed, host, 513), BAD);

	/* device memory holds no bytes: it reads as zeros */
	memset(back, 0xee, sizeof(back));
	CHECK_CU(cuMemcpyDtoH(back, d, 1000), CUDA_SUCCESS);
	CHECK_U64(count_not(back, 1000, 0), ==, 0);
	CHECK_U64(count_not(back + 1000, sizeof(back) - 1000, 0xee), ==, 0);
	CHECK_CU(cuMemcpyDtoH(back, d, 1001), BAD);
	CHECK_CU(cuMemcpyDtoH(NULL, d, 8), BAD);

	/* pinned host memory holds real bytes, in both directions */
	CHECK_CU(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)pinned, host, 4096), CUDA_SUCCESS);
	CHECK_U64(count_not(pinned, 4096, 0x5a), ==, 0);
	memset(pinned, 0x11, 100);
	CHECK_CU(cuMemcpyDtoH(back, (CUdeviceptr)(uintptr_t)pinned, 100), CUDA_SUCCESS);
	CHECK_U64(count_not(back, 100, 0x11), ==, 0);
	CHECK_CU(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)pinned2, (CUdeviceptr)(uintptr_t)pinned, 4096),
		 CUDA_SUCCESS);
	CHECK_U64(count_not(pinned2, 100, 0x11), ==, 0);
	CHECK_U64(count_not(pinned2 + 100, 3996, 0x5a), ==, 0);
	/* device to pinned memory: zeros land */
	CHECK_CU(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)pinned2, d, 1000), CUDA_SUCCESS);
	CHECK_U64(count_not(pinned2, 1000, 0), ==, 0);
	CHECK_CU(cuMemcpyDtoD(d, managed, 512), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyDtoD(d, managed, 1000), BAD);

	/* a range across two mappings that sit end to end */
	REQUIRE_OK(cuMemCreate(&h1, SIM_PAGE, &device0_prop, 0));
	REQUIRE_OK(cuMemCreate(&h2, SIM_PAGE, &device0_prop, 0));
	REQUIRE_OK(cuMemAddressReserve(&va, 3 * SIM_PAGE, 0, 0, 0));
	REQUIRE_OK(cuMemMap(va, SIM_PAGE, 0, h1, 0));
	CHECK_CU(cuMemcpyHtoD(va + SIM_PAGE - 8, host, 16), BAD);
	REQUIRE_OK(cuMemMap(va + SIM_PAGE, SIM_PAGE, 0, h2, 0));
	CHECK_CU(cuMemcpyHtoD(va + SIM_PAGE - 8, host, 16), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyDtoH(back, va + 2 * SIM_PAGE - 8, 16), BAD);

	/* the asynchronous forms: done when issued, on a stream that exists */
	REQUIRE_OK(cuStreamCreate(&stream, 0));
	CHECK_CU(cuMemcpyHtoDAsync(d, host, 1000, stream), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyDtoHAsync(back, (CUdeviceptr)(uintptr_t)pinned, 10, NULL), CUDA_SUCCESS);
	CHECK_U64(count_not(back, 10, 0x11), ==, 0);
	CHECK_CU(cuMemcpyDtoDAsync(d, managed, 512, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CHECK_CU(cuMemcpyHtoDAsync(d, host, 1001, stream), BAD);
	REQUIRE_OK(cuStreamDestroy(stream));
	CHECK_CU(cuMemcpyHtoDAsync(d, host, 8, stream), CUDA_ERROR_INVALID_HANDLE);

	/* freed memory is no place to copy to */
	REQUIRE_OK(cuMemFree(d));
	CHECK_CU(cuMemcpyHtoD(d, host, 8), BAD);
	REQUIRE_OK(cuMemFreeHost(pinned));
	REQUIRE_OK(cuMemFreeHost(pinned2));
	REQUIRE_OK(cuMemFree(managed));
}

static void run_memsets(void)
{
	unsigned char *pinned = NULL;
	CUdeviceptr d, p;
	uint16_t v16;
	uint32_t v32;

	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc(&d, 1024));
	REQUIRE_OK(cuMemHostAlloc((void **)&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	p = (CUdeviceptr)(uintptr_t)pinned;

	CHECK_CU(cuMemsetD8(d, 7, 1024), CUDA_SUCCESS);
	CHECK_CU(cuMemsetD8(d, 7, 1025), BAD);
	CHECK_CU(cuMemsetD16(d, 7, 512), CUDA_SUCCESS);
	CHECK_CU(cuMemsetD16(d, 7, 513), BAD);
	CHECK_CU(cuMemsetD16(d + 1, 7, 2), BAD); /* misaligned */
	CHECK_CU(cuMemsetD32(d, 7, 256), CUDA_SUCCESS);
	CHECK_CU(cuMemsetD32(d + 2, 7, 1), BAD);
	CHECK_CU(cuMemsetD32(d + 1024, 7, 1), BAD);
	CHECK_CU(cuMemsetD8Async(d, 1, 1024, NULL), CUDA_SUCCESS);
	CHECK_CU(cuMemsetD32Async(d, 1, 257, NULL), BAD);

	/* host-visible bytes take the value */
	memset(pinned, 0, 4096);
	CHECK_CU(cuMemsetD8(p + 1, 0xab, 10), CUDA_SUCCESS);
	CHECK_U64(pinned[0], ==, 0);
	CHECK_U64(count_not(pinned + 1, 10, 0xab), ==, 0);
	CHECK_U64(pinned[11], ==, 0);
	CHECK_CU(cuMemsetD16(p + 64, 0xbeef, 3), CUDA_SUCCESS);
	memcpy(&v16, pinned + 68, 2);
	CHECK_X(v16, ==, 0xbeef);
	CHECK_U64(pinned[70], ==, 0);
	CHECK_CU(cuMemsetD32Async(p + 128, 0xdeadbeef, 2, NULL), CUDA_SUCCESS);
	memcpy(&v32, pinned + 132, 4);
	CHECK_X(v32, ==, 0xdeadbeef);
	CHECK_U64(pinned[136], ==, 0);
	REQUIRE_OK(cuMemFreeHost(pinned));
	REQUIRE_OK(cuMemFree(d));
}

static void run_pointer_attributes(void)
{
	CUdeviceptr d, managed, got = 0, mapped = 0;
	CUcontext ctx, owner = NULL;
	unsigned int type = 0;
	unsigned char *pinned = NULL;
	size_t size = 0;
	bool is_managed = true;
	int ordinal = -1;

	ctx = simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc(&d, 5000));
	REQUIRE_OK(cuMemAllocManaged(&managed, 100, CU_MEM_ATTACH_GLOBAL));
	REQUIRE_OK(cuMemHostAlloc((void **)&pinned, 100, CU_MEMHOSTALLOC_DEVICEMAP));

	CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 10), CUDA_SUCCESS);
	CHECK_U64(type, ==, CU_MEMORYTYPE_DEVICE);
	CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pinned),
		 CUDA_SUCCESS);
	CHECK_U64(type, ==, CU_MEMORYTYPE_HOST);
	CHECK_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d), CUDA_SUCCESS);
	CHECK_PTR(owner, ==, ctx);
	CHECK_CU(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 4999), CUDA_SUCCESS);
	CHECK_X(got, ==, d);
	CHECK_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 1), CUDA_SUCCESS);
	CHECK_U64(size, ==, 5000);
	CHECK_CU(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, d + 8), CUDA_SUCCESS);
	CHECK_X(got, ==, d + 8);
	CHECK_CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d), CUDA_SUCCESS);
	CHECK(!is_managed);
	CHECK_CU(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, managed), CUDA_SUCCESS);
	CHECK(is_managed);
	CHECK_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d), CUDA_SUCCESS);
	CHECK_INT(ordinal, ==, 0);
	CHECK_CU(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), BAD);
	/* past the requested bytes, or memory the driver never gave out */
	CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 5000), BAD);
	CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&type),
		 BAD);
	CHECK_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d), CUDA_ERROR_NOT_SUPPORTED);

	/* with unified addressing a mapped host pointer is its own device pointer */
	CHECK_CU(cuMemHostGetDevicePointer(&mapped, pinned + 3, 0), CUDA_SUCCESS);
	CHECK_X(mapped, ==, (CUdeviceptr)(uintptr_t)(pinned + 3));
	CHECK_CU(cuMemHostGetDevicePointer(&mapped, pinned, 1), BAD);
	CHECK_CU(cuMemHostGetDevicePointer(&mapped, &type, 0), BAD);
	CHECK_CU(cuMemHostGetDevicePointer(&mapped, (void *)(uintptr_t)d, 0), BAD);
	REQUIRE_OK(cuMemFreeHost(pinned));
	REQUIRE_OK(cuMemFree(managed));
	REQUIRE_OK(cuMemFree(d));
}

static void run_events(void)
{
	CUevent a, b, untimed, never;
	float ms = -1;

	CHECK_CU(cuEventCreate(&a, 0), CUDA_ERROR_NOT_INITIALIZED);
	simtest_init_context(0);
	REQUIRE_OK(cuEventCreate(&a, CU_EVENT_DEFAULT));
	REQUIRE_OK(cuEventCreate(&b, CU_EVENT_BLOCKING_SYNC));
	REQUIRE_OK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
	REQUIRE_OK(cuEventCreate(&never, 0));
	CHECK_CU(cuEventCreate(&a, CU_EVENT_INTERPROCESS), BAD); /* must not time */
	CHECK_CU(cuEventCreate(&a, 0x100), BAD);

	CHECK_CU(cuEventRecord(a, NULL), CUDA_SUCCESS);
	CHECK_CU(cuEventRecord(b, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
	CHECK_CU(cuEventRecord(untimed, NULL), CUDA_SUCCESS);
	CHECK_CU(cuEventQuery(b), CUDA_SUCCESS);
	CHECK_CU(cuEventSynchronize(b), CUDA_SUCCESS);
	CHECK_CU(cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
	CHECK(ms >= 0);
	CHECK_CU(cuEventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU(cuEventElapsedTime(&ms, a, never), CUDA_ERROR_NOT_READY);
	CHECK_CU(cuStreamWaitEvent(NULL, b, 0), CUDA_SUCCESS);
	CHECK_CU(cuStreamWaitEvent(NULL, b, 7), BAD);

	REQUIRE_OK(cuEventDestroy(b));
	CHECK_CU(cuEventQuery(b), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU(cuEventRecord(b, NULL), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU(cuEventDestroy(b), CUDA_ERROR_INVALID_HANDLE);
	CHECK_CU(cuStreamWaitEvent(NULL, b, 0), CUDA_ERROR_INVALID_HANDLE);
	REQUIRE_OK(cuEventDestroy(a));
	REQUIRE_OK(cuEventDestroy(untimed));
	REQUIRE_OK(cuEventDestroy(never));
}

static void count_call(CUstream stream, CUresult status, void *data)
{
	(void)stream;
	if (status == CUDA_SUCCESS)
		++*(int *)data;
}

static void run_callbacks(void)
{
	CUstream stream;
	int calls = 0;

	simtest_init_context(0);
	REQUIRE_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CHECK_CU(cuStreamAddCallback(stream, count_call, &calls, 0), CUDA_SUCCESS);
	CHECK_CU(cuStreamAddCallback(NULL, count_call, &calls, 0), CUDA_SUCCESS);
	CHECK_CU(cuStreamAddCallback(stream, count_call, &calls, 1), BAD);
	CHECK_CU(cuStreamAddCallback(stream, NULL, &calls, 0), BAD);
	CHECK_INT(calls, ==, 2);
	REQUIRE_OK(cuStreamDestroy(stream));
	CHECK_CU(cuStreamAddCallback(stream, count_call, &calls, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_INT(calls, ==, 2);
}

#define IPC_FILE "ipc.handle"

/* Child of "ipc": exports an allocation and leaves its handle in IPC_FILE. */
static void run_ipc_export(void)
{
	CUipcMemHandle h;
	CUdeviceptr d;
	FILE *f;

	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc(&d, 4096));
	REQUIRE_OK(cuIpcGetMemHandle(&h, d));
	f = fopen(IPC_FILE, "wb");
	if (f == NULL || fwrite(&h, sizeof(h), 1, f) != 1 || fclose(f) != 0)
		simtest_fail(__FILE__, __LINE__, true, "cannot write %s", IPC_FILE);
}

static void run_ipc(void)
{
	char dir[] = "/tmp/gmtsim-ipc.XXXXXX";
	CUipcMemHandle h, theirs;
	CUdeviceptr d, managed, opened = SIM_SENTINEL;
	FILE *f;
	int st;

	simtest_init_context(0);
	REQUIRE_OK(cuMemAlloc(&d, 4096));
	REQUIRE_OK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
	CHECK_CU(cuIpcGetMemHandle(&h, d + 16), BAD);
	CHECK_CU(cuIpcGetMemHandle(&h, managed), BAD);
	REQUIRE_OK(cuIpcGetMemHandle(&h, d));
	/* the driver refuses a handle of the opening process itself */
	CHECK_CU(cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_X(opened, ==, SIM_SENTINEL);
	memset(&theirs, 0, sizeof(theirs));
	CHECK_CU(cuIpcOpenMemHandle(&opened, theirs, 0), BAD);
	CHECK_CU(cuIpcCloseMemHandle(d), BAD);

	/* another process's handle: no process maps another's simulated memory */
	REQUIRE_INT(mkdtemp(dir) != NULL, ==, 1);
	st = simtest_spawn("ipc-export", NULL, -1, dir);
	REQUIRE_INT(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
	REQUIRE_INT(chdir(dir), ==, 0);
	f = fopen(IPC_FILE, "rb");
	REQUIRE_INT(f != NULL && fread(&theirs, sizeof(theirs), 1, f) == 1, ==, 1);
	fclose(f);
	unlink(IPC_FILE);
	rmdir(dir);
	CHECK_CU(cuIpcOpenMemHandle(&opened, theirs, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
		 CUDA_ERROR_NOT_SUPPORTED);
	CHECK_X(opened, ==, SIM_SENTINEL);
	REQUIRE_OK(cuMemFree(managed));
	REQUIRE_OK(cuMemFree(d));
}

static const char *const env_64m[] = { "GMTSIM_MEMORY=64M", NULL };

static const struct simtest_case cases[] = {
	{ "copies", env_64m, run_copies, false },
	{ "memsets", env_64m, run_memsets, false },
	{ "pointer-attributes", env_64m, run_pointer_attributes, false },
	{ "events", env_64m, run_events, false },
	{ "callbacks", env_64m, run_callbacks, false },
	{ "ipc", env_64m, run_ipc, false },
	{ "ipc-export", env_64m, run_ipc_export, true },
};

int main(int argc, char **argv)
{
	return simtest_main(argc, argv, cases, N(cases));
}
