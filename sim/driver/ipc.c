/* Interprocess memory handles (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle). A handle names an allocation of cuMemAlloc by process
 * and address. Each process simulates its own GPU, so no process can map
 * another's memory: opening answers as the driver does for a handle of the
 * same process, and CUDA_ERROR_NOT_SUPPORTED for another's. */
#define _GNU_SOURCE
#include "model.h"

#include <string.h>
#include <unistd.h>

#define SIM_IPC_MAGIC "gmtsim-ipc"

/* The bytes of a CUipcMemHandle (64 reserved bytes) as the simulator fills them. */
struct sim_ipc {
	char magic[sizeof(SIM_IPC_MAGIC)];
	int32_t pid;
	uint64_t addr, size;
};
_Static_assert(sizeof(struct sim_ipc) <= sizeof(CUipcMemHandle), "an IPC handle holds struct sim_ipc");

GMTSIM_EXPORT CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	const struct sim_alloc *a;
	struct sim_ipc h = { .magic = SIM_IPC_MAGIC };
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuIpcGetMemHandle);
	if (pHandle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r != CUDA_SUCCESS)
		goto out;
	/* Only the base of memory from cuMemAlloc can be shared this way. */
	a = gmtsim__alloc_at(dptr);
	if (a == NULL || a->addr != dptr || a->kind != SIM_KIND_DEVICE) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	h.pid = (int32_t)getpid();
	h.addr = a->addr;
	h.size = a->size;
	memset(pHandle, 0, sizeof(*pHandle));
	memcpy(pHandle, &h, sizeof(h));
out:
	gmtsim__unlock();
	return r;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	struct sim_ipc h;
	int dev;
	CUresult r;

	if (pdptr == NULL || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&h, &handle, sizeof(h));
	if (memcmp(h.magic, SIM_IPC_MAGIC, sizeof(h.magic)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	gmtsim__unlock();
	if (r != CUDA_SUCCESS)
		return r;
	/* The driver refuses a handle exported by the opening process itself. */
	return h.pid == (int32_t)getpid() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_SUPPORTED;
}

GMTSIM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuIpcOpenMemHandle);
	return ipc_open(pdptr, handle, Flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuIpcOpenMemHandle_v2);
	return ipc_open(pdptr, handle, Flags);
}

/* Nothing can have been opened. */
GMTSIM_EXPORT CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult r = gmtsim__initialised();

	gmtsim__count(SIM_CALL_cuIpcCloseMemHandle);
	(void)dptr;
	return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
}
