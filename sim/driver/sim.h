/* Internal interface of the simulated driver (libcuda.so.1 double): the list of
 * entry points, the shared state and its lock, and the functions each file of
 * sim/driver/ provides to the others. See docs/simulator.md for the behaviour. */
#ifndef GMTSIM_SIM_H
#define GMTSIM_SIM_H

#include "config.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* NOTE: cuda.h maps unversioned names to their newest ABI (cuMemAlloc →
 * cuMemAlloc_v2). The simulator defines the legacy functions under their own
 * names, as the real library exports them, so those macros must go. */
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuMemAllocHost
#undef cuMemHostRegister
#undef cuDeviceTotalMem
#undef cuGetProcAddress
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDeviceGetUuid
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuStreamDestroy
#undef cuMemGetAddressRange
#undef cuArrayCreate
#undef cuArray3DCreate
#undef cuMemcpyHtoD
#undef cuMemcpyDtoH
#undef cuMemcpyDtoD
#undef cuMemcpyHtoDAsync
#undef cuMemcpyDtoHAsync
#undef cuMemcpyDtoDAsync
#undef cuMemsetD8
#undef cuMemsetD16
#undef cuMemsetD32
#undef cuMemHostGetDevicePointer
#undef cuIpcOpenMemHandle
#undef cuEventDestroy
#undef cuEventElapsedTime

#define GMTSIM_EXPORT __attribute__((visibility("default")))

#define SIM_ALIGN 256u

/* The per-thread default stream variant of an entry point: none, or the
 * `_ptsz` or `_ptds` form (cuda.h's __CUDA_API_PTSZ and __CUDA_API_PTDS). */
#define SIM_PT_NONE 0
#define SIM_PT_SZ 1
#define SIM_PT_DS 2

/* Every exported entry point: X(symbol, base name, version, per-thread variant).
 * One list, four uses: the call counters, the cuGetProcAddress table, the
 * linker's list of exports of each simulated driver release (exports.c) and
 * the compile-time check that each definition has the ABI of cudaTypedefs.h's
 * PFN_<base>_v<version>[_ptsz|_ptds]. */
#define SIM_ENTRY_POINTS(X)                                                    \
	X(cuInit, cuInit, 2000, 0)                                             \
	X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0)                     \
	X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                        \
	X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)                     \
	X(cuGetErrorString, cuGetErrorString, 6000, 0)                         \
	X(cuGetErrorName, cuGetErrorName, 6000, 0)                             \
	X(cuDeviceGet, cuDeviceGet, 2000, 0)                                   \
	X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                         \
	X(cuDeviceGetName, cuDeviceGetName, 2000, 0)                           \
	X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, 0)                   \
	X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)                           \
	X(cuDeviceGetUuid_v2, cuDeviceGetUuid, 11040, 0)                       \
	X(cuDeviceTotalMem, cuDeviceTotalMem, 2000, 0)                         \
	X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0)                      \
	X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)                 \
	X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0)      \
	X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, 0)                    \
	X(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, 0)                    \
	X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)         \
	X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)       \
	X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0)   \
	X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)           \
	X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0)       \
	X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, 0)     \
	X(cuCtxCreate_v2, cuCtxCreate, 3020, 0)                                \
	X(cuCtxCreate_v3, cuCtxCreate, 11040, 0)                               \
	X(cuCtxCreate_v4, cuCtxCreate, 12050, 0)                               \
	X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                              \
	X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0)                           \
	X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                           \
	X(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000, 0)                      \
	X(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000, 0)                        \
	X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)                             \
	X(cuCtxGetDevice_v2, cuCtxGetDevice, 13000, 0)                         \
	X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                         \
	X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, 0)                     \
	X(cuStreamCreate, cuStreamCreate, 2000, 0)                             \
	X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, 0)     \
	X(cuStreamDestroy_v2, cuStreamDestroy, 4000, 0)                        \
	X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                   \
	X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1)              \
	X(cuStreamQuery, cuStreamQuery, 2000, 0)                               \
	X(cuStreamQuery_ptsz, cuStreamQuery, 7000, 1)                          \
	X(cuMemGetInfo, cuMemGetInfo, 2000, 0)                                 \
	X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0)                              \
	X(cuMemAlloc, cuMemAlloc, 2000, 0)                                     \
	X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                  \
	X(cuMemAllocPitch, cuMemAllocPitch, 2000, 0)                           \
	X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                        \
	X(cuMemFree, cuMemFree, 2000, 0)                                       \
	X(cuMemFree_v2, cuMemFree, 3020, 0)                                    \
	X(cuMemGetAddressRange_v2, cuMemGetAddressRange, 3020, 0)              \
	X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                       \
	X(cuMemAllocHost, cuMemAllocHost, 2000, 0)                             \
	X(cuMemAllocHost_v2, cuMemAllocHost, 3020, 0)                          \
	X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0)                             \
	X(cuMemFreeHost, cuMemFreeHost, 2000, 0)                               \
	X(cuMemHostRegister, cuMemHostRegister, 4000, 0)                       \
	X(cuMemHostRegister_v2, cuMemHostRegister, 6050, 0)                    \
	X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0)                   \
	X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                          \
	X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                     \
	X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)          \
	X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)     \
	X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                            \
	X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                       \
	X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                          \
	X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                        \
	X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0)                          \
	X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, 0)              \
	X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, 0)              \
	X(cuMemCreate, cuMemCreate, 10020, 0)                                  \
	X(cuMemRelease, cuMemRelease, 10020, 0)                                \
	X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                  \
	X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                        \
	X(cuMemMap, cuMemMap, 10020, 0)                                        \
	X(cuMemUnmap, cuMemUnmap, 10020, 0)                                    \
	X(cuMemSetAccess, cuMemSetAccess, 10020, 0)                            \
	X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0) \
	X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020, 0) \
	X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)  \
	X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                            \
	X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                        \
	X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                             \
	X(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, 0)                              \
	X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, 2)                         \
	X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, 0)                              \
	X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, 2)                         \
	X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0)                              \
	X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 2)                         \
	X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, 0)                    \
	X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, 1)               \
	X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, 0)                    \
	X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, 1)               \
	X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0)                    \
	X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1)               \
	X(cuMemsetD8_v2, cuMemsetD8, 3020, 0)                                  \
	X(cuMemsetD8_v2_ptds, cuMemsetD8, 7000, 2)                             \
	X(cuMemsetD16_v2, cuMemsetD16, 3020, 0)                                \
	X(cuMemsetD16_v2_ptds, cuMemsetD16, 7000, 2)                           \
	X(cuMemsetD32_v2, cuMemsetD32, 3020, 0)                                \
	X(cuMemsetD32_v2_ptds, cuMemsetD32, 7000, 2)                           \
	X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0)                           \
	X(cuMemsetD8Async_ptsz, cuMemsetD8Async, 7000, 1)                      \
	X(cuMemsetD16Async, cuMemsetD16Async, 3020, 0)                         \
	X(cuMemsetD16Async_ptsz, cuMemsetD16Async, 7000, 1)                    \
	X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0)                         \
	X(cuMemsetD32Async_ptsz, cuMemsetD32Async, 7000, 1)                    \
	X(cuPointerGetAttribute, cuPointerGetAttribute, 4000, 0)               \
	X(cuMemHostGetDevicePointer_v2, cuMemHostGetDevicePointer, 3020, 0)    \
	X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0)                       \
	X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0)                     \
	X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0)                 \
	X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                   \
	X(cuEventCreate, cuEventCreate, 2000, 0)                               \
	X(cuEventRecord, cuEventRecord, 2000, 0)                               \
	X(cuEventRecord_ptsz, cuEventRecord, 7000, 1)                          \
	X(cuEventQuery, cuEventQuery, 2000, 0)                                 \
	X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                     \
	X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0)                     \
	X(cuEventElapsedTime_v2, cuEventElapsedTime, 12080, 0)                 \
	X(cuEventDestroy_v2, cuEventDestroy, 4000, 0)                          \
	X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, 0)                       \
	X(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, 7000, 1)                  \
	X(cuStreamAddCallback, cuStreamAddCallback, 5000, 0)                   \
	X(cuStreamAddCallback_ptsz, cuStreamAddCallback, 7000, 1)

enum sim_call {
#define SIM_X_ENUM(sym, base, ver, ptsz) SIM_CALL_##sym,
	SIM_ENTRY_POINTS(SIM_X_ENUM)
#undef SIM_X_ENUM
	SIM_CALL_COUNT
};

/* Declarations of the entry points cuda.h does not declare (legacy ABIs, the
 * per-thread-stream variants). The rest come from cuda.h itself. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
				unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device);
CUresult CUDAAPI cuCtxSynchronize(void);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total);
CUresult CUDAAPI cuMemAlloc(unsigned int *dptr, unsigned int bytesize);
CUresult CUDAAPI cuMemAllocPitch(unsigned int *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
				 unsigned int Height, unsigned int ElementSizeBytes);
CUresult CUDAAPI cuMemFree(unsigned int dptr);
CUresult CUDAAPI cuMemAllocHost(void **pp, unsigned int bytesize);
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					      CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
					   CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
					   CUstream hStream);
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
					   CUstream hStream);
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N);
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N);
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream);
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
					  unsigned int flags);

/* --- lookup.c ------------------------------------------------------------- */

/* The versioned name of entry point `call` ("cuMemAlloc_v2"). */
const char *gmtsim__call_name(enum sim_call call);

/* Counts one call of an entry point (relaxed: read only when a ledger is written). */
void gmtsim__count(enum sim_call call);

/* Number of calls of `call` so far in this process. */
uint64_t gmtsim__calls(enum sim_call call);

/* Zero every call counter (the child of a fork starts afresh). */
void gmtsim__reset_calls(void);

/* --- release.c ------------------------------------------------------------ */

/* The driver release this library was built as (13000, 12080): what its
 * linker exports and, unless GMTSIM_DRIVER_VERSION asks for an older one,
 * what cuDriverGetVersion reports. */
extern const int gmtsim__release;

/* --- driver.c: devices, contexts, lifecycle (configuration: config.h) ----- */

/* The simulated driver version: GMTSIM_DRIVER_VERSION, at most the release
 * (cuInit refuses a newer one), or the release. Governs cuDriverGetVersion
 * and which entry points cuGetProcAddress finds. */
int gmtsim__driver_version(void);

struct CUctx_st {
	int device;
	bool primary;
	bool alive;
	unsigned int flags;
};

/* The global lock over every piece of simulated state. */
void gmtsim__lock(void);
void gmtsim__unlock(void);

/* The device of the calling thread's current context. Returns CUDA_SUCCESS or
 * the error the real driver gives: not initialised, or no/destroyed context. */
CUresult gmtsim__current_device(int *device, struct CUctx_st **ctx);

/* The device a stream belongs to; the special handles (0, CU_STREAM_LEGACY,
 * CU_STREAM_PER_THREAD) mean the current context's device. Lock held. */
CUresult gmtsim__stream_device(CUstream stream, int *device);

/* CUDA_SUCCESS once cuInit succeeded in this process, else the error to return
 * (not initialised; also in the child of a fork after initialisation). */
CUresult gmtsim__initialised(void);

/* --- memory.c: the memory model (model.h holds its internals) ------------ */

enum sim_kind {
	SIM_KIND_DEVICE,
	SIM_KIND_ASYNC,
	SIM_KIND_MANAGED,
	SIM_KIND_HOST,
	SIM_KIND_REGISTERED,
	SIM_KIND_VMM,
	SIM_KIND_ARRAY,
};

const char *gmtsim__kind_name(enum sim_kind kind);

/* Sets up each device's pages and address windows. Called once by cuInit with the
 * lock held; returns CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY when the address
 * windows cannot be reserved. */
CUresult gmtsim__memory_init(const struct sim_config *cfg);

/* Context accounting: the first live context on a device takes the context
 * bytes, the last one gives them back. Lock held. */
CUresult gmtsim__context_created(int device);
void gmtsim__context_destroyed(struct CUctx_st *ctx);

/* Forget every simulated object (the child of a fork holds no CUDA state). */
void gmtsim__memory_forget(void);

/* --- pool.c: stream-ordered pools ----------------------------------------- */

/* Release, on every pool of `device`, unused memory above the pool's release
 * threshold (what a synchronisation does). Lock held. */
void gmtsim__pools_sync(int device);

/* --- ledger.c ------------------------------------------------------------- */

/* One live entry, as the ledger lists it. */
struct sim_ledger_entry {
	uint64_t address;
	uint64_t size;
	enum sim_kind kind;
	int device;
	enum sim_call api;
	uint64_t stream; /* SIM_KIND_ASYNC: the stream it was allocated on */
};

struct sim_failed_request {
	enum sim_call api;
	uint64_t size;
	int device;
	CUresult result;
};

/* Memory model → ledger: visit every live entry, pool, reservation and mapping
 * (lock held), in address order. */
struct sim_ledger_visitor {
	void (*entry)(void *ctx, const struct sim_ledger_entry *e);
	void (*pool)(void *ctx, uint64_t handle, int device, bool is_default, uint64_t reserved,
		     uint64_t used, uint64_t threshold);
	void (*reservation)(void *ctx, uint64_t address, uint64_t size);
	void (*mapping)(void *ctx, uint64_t address, uint64_t size, uint64_t handle, uint64_t offset);
	void *ctx;
};
void gmtsim__memory_visit(const struct sim_ledger_visitor *v);

struct sim_device_state {
	uint64_t total_bytes, free_bytes;
	uint64_t pages_total, pages_free, pages_other, pages_context;
	uint64_t pool_reserved, pool_used;
};
int gmtsim__device_count(void);
void gmtsim__device_state(int device, struct sim_device_state *out);

struct sim_totals {
	uint64_t allocs, frees, oom;
};
void gmtsim__totals(struct sim_totals *out);

/* Write the ledger to `path` (lock held). Returns 0 or a negative errno. */
int gmtsim__ledger_write_locked(const char *path, const char *reason,
				const struct sim_failed_request *failed);

/* Note an out-of-memory result and write the oom ledger when asked to (lock held). */
void gmtsim__ledger_oom(const struct sim_failed_request *failed);

#endif /* GMTSIM_SIM_H */
