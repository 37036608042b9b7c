/* Errors of the simulated CUDA runtime: driver results mapped to cudaError_t,
 * the per-thread last error (cudaGetLastError, cudaPeekAtLastError) and the
 * error names and descriptions.
 */
#include "internal.h"

/* X(driver result, runtime error). Results not listed map to cudaErrorUnknown. */
#define GMTRT_RESULT_MAP(X) \
	X(CUDA_SUCCESS, cudaSuccess) \
	X(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue) \
	X(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation) \
	X(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError) \
	X(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading) \
	X(CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary) \
	X(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice) \
	X(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice) \
	X(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized) \
	X(CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed) \
	X(CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem) \
	X(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle) \
	X(CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState) \
	X(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound) \
	X(CUDA_ERROR_NOT_READY, cudaErrorNotReady) \
	X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaErrorHostMemoryAlreadyRegistered) \
	X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cudaErrorHostMemoryNotRegistered) \
	X(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted) \
	X(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported) \
	X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch)

/* X(runtime error, description as cudart words it). */
#define GMTRT_ERRORS(X) \
	X(cudaSuccess, "no error") \
	X(cudaErrorInvalidValue, "invalid argument") \
	X(cudaErrorMemoryAllocation, "out of memory") \
	X(cudaErrorInitializationError, "initialization error") \
	X(cudaErrorCudartUnloading, "driver shutting down") \
	X(cudaErrorStubLibrary, "CUDA driver is a stub library") \
	X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
	X(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver") \
	X(cudaErrorNoDevice, "no CUDA-capable device is detected") \
	X(cudaErrorInvalidDevice, "invalid device ordinal") \
	X(cudaErrorDeviceUninitialized, "invalid device context") \
	X(cudaErrorContextIsDestroyed, "context is destroyed") \
	X(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS") \
	X(cudaErrorInvalidResourceHandle, "invalid resource handle") \
	X(cudaErrorIllegalState, "the operation cannot be performed in the present state") \
	X(cudaErrorSymbolNotFound, "named symbol not found") \
	X(cudaErrorNotReady, "device not ready") \
	X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
	X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
	X(cudaErrorNotPermitted, "operation not permitted") \
	X(cudaErrorNotSupported, "operation not supported") \
	X(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination") \
	X(cudaErrorUnknown, "unknown error")

/* What cudart answers for a code it does not know. */
#define GMTRT_UNRECOGNIZED "unrecognized error code"

/* cudart keeps the last error per host thread. */
static _Thread_local cudaError_t tls_last_error = cudaSuccess;

cudaError_t gmtrt__from_cu(CUresult r)
{
	switch (r) {
#define GMTRT_MAP_CASE(cu, rt) case cu: return rt;
	GMTRT_RESULT_MAP(GMTRT_MAP_CASE)
#undef GMTRT_MAP_CASE
	default:
		return cudaErrorUnknown;
	}
}

cudaError_t gmtrt__fail(cudaError_t err)
{
	if (err != cudaSuccess)
		tls_last_error = err;
	return err;
}

GMTRT_API cudaError_t cudaGetLastError(void)
{
	cudaError_t err = tls_last_error;

	if (gmtrt__unloading())
		return cudaErrorCudartUnloading;
	tls_last_error = cudaSuccess;
	return err;
}

GMTRT_API cudaError_t cudaPeekAtLastError(void)
{
	if (gmtrt__unloading())
		return cudaErrorCudartUnloading;
	return tls_last_error;
}

GMTRT_API const char *cudaGetErrorName(cudaError_t error)
{
	switch (error) {
#define GMTRT_NAME_CASE(code, text) case code: return #code;
	GMTRT_ERRORS(GMTRT_NAME_CASE)
#undef GMTRT_NAME_CASE
	default:
		return GMTRT_UNRECOGNIZED;
	}
}

GMTRT_API const char *cudaGetErrorString(cudaError_t error)
{
	switch (error) {
#define GMTRT_TEXT_CASE(code, text) case code: return text;
	GMTRT_ERRORS(GMTRT_TEXT_CASE)
#undef GMTRT_TEXT_CASE
	default:
		return GMTRT_UNRECOGNIZED;
	}
}
