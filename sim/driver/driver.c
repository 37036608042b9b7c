/* The simulated driver's lifecycle and everything that is not memory: its
 * cuInit and fork, devices, contexts, streams and error strings. The
 * configuration (GMTSIM_*) is in config.c; memory in memory.c, host.c, pool.c,
 * vmm.c and array.c. */
#define _GNU_SOURCE
#include "sim.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- the lock, initialisation and fork ------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

enum { SIM_UNINIT, SIM_READY, SIM_LOST_BY_FORK, SIM_TORN_DOWN };
/* Written under the lock; read without it by the fast checks (acquire pairs
 * with the release in cuInit: a reader that sees SIM_READY sees the memory
 * model that memory_init set up). */
static _Atomic int state = SIM_UNINIT;

void gmtsim__lock(void)
{
	pthread_mutex_lock(&lock);
}

void gmtsim__unlock(void)
{
	pthread_mutex_unlock(&lock);
}

CUresult gmtsim__initialised(void)
{
	switch (atomic_load_explicit(&state, memory_order_acquire)) {
	case SIM_READY:
		return CUDA_SUCCESS;
	case SIM_TORN_DOWN:
		return CUDA_ERROR_DEINITIALIZED;
	default:
		return CUDA_ERROR_NOT_INITIALIZED;
	}
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

/* The real driver does not carry CUDA across fork: a child of an initialised
 * process holds no contexts and no memory. The simulator makes that explicit. */
static void fork_child(void)
{
	pthread_mutex_unlock(&lock);
	if (atomic_load_explicit(&state, memory_order_relaxed) == SIM_READY) {
		atomic_store_explicit(&state, SIM_LOST_BY_FORK, memory_order_relaxed);
		gmtsim__memory_forget();
		gmtsim__reset_calls();
	}
}

__attribute__((constructor)) static void sim_constructor(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Teardown at exit: the exit ledger (what the process still held when the
 * driver went away), then, like a real driver that has shut down, every later
 * call is refused with CUDA_ERROR_DEINITIALIZED — what frees in exit handlers
 * registered before the driver's, and in late destructors, get. Registered with
 * atexit by the first successful cuInit; the destructor covers a process that
 * never returns through exit handlers registered after it. */
static void sim_teardown(void)
{
	const char *dir;
	char path[PATH_MAX];
	int s = atomic_load(&state);

	/* A fork child's driver was lost at the fork: it still leaves its (empty)
	 * ledger, and stays lost. */
	if (s != SIM_READY && s != SIM_LOST_BY_FORK)
		return;
	dir = gmtsim__config()->ledger_dir;
	gmtsim__lock();
	if (dir != NULL) {
		snprintf(path, sizeof(path), "%s/ledger.%ld.exit.json", dir, (long)getpid());
		if (gmtsim__ledger_write_locked(path, "exit", NULL) < 0)
			fprintf(stderr, "gmtsim: cannot write %s: %s\n", path, strerror(errno));
	}
	if (s == SIM_READY)
		atomic_store(&state, SIM_TORN_DOWN);
	gmtsim__unlock();
}

__attribute__((destructor)) static void sim_destructor(void)
{
	sim_teardown();
}

int gmtsim__driver_version(void)
{
	int v = gmtsim__config()->driver_version;

	return v != 0 && v < gmtsim__release ? v : gmtsim__release;
}

/* A library built as an older release cannot present a newer one: it lacks
 * that release's exports. Said once per process. */
static void release_refused(int asked)
{
	static atomic_bool said;

	if (!atomic_exchange(&said, true))
		fprintf(stderr,
			"gmtsim: GMTSIM_DRIVER_VERSION=%d is newer than this driver library (release %d); "
			"use the library built as that release\n",
			asked, gmtsim__release);
}

GMTSIM_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags)
{
	const struct sim_config *cfg;
	CUresult r = CUDA_SUCCESS;

	gmtsim__count(SIM_CALL_cuInit);
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	cfg = gmtsim__config();
	if (cfg->invalid)
		return CUDA_ERROR_INVALID_VALUE;
	if (cfg->driver_version > gmtsim__release) {
		release_refused(cfg->driver_version);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* A machine whose devices are all hidden (CUDA_VISIBLE_DEVICES="") or
	 * that has none: the driver loads, and cuInit says so. */
	if (cfg->ndevices == 0)
		return CUDA_ERROR_NO_DEVICE;
	gmtsim__lock();
	switch (atomic_load_explicit(&state, memory_order_relaxed)) {
	case SIM_UNINIT:
		r = gmtsim__memory_init(cfg);
		if (r == CUDA_SUCCESS) {
			atomic_store_explicit(&state, SIM_READY, memory_order_release);
			atexit(sim_teardown);
		}
		break;
	case SIM_LOST_BY_FORK:
		r = CUDA_ERROR_NOT_INITIALIZED;
		break;
	case SIM_TORN_DOWN:
		r = CUDA_ERROR_DEINITIALIZED;
		break;
	default:
		break;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	gmtsim__count(SIM_CALL_cuDriverGetVersion);
	if (driverVersion == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = gmtsim__driver_version();
	return CUDA_SUCCESS;
}

/* --- devices --------------------------------------------------------------- */

static CUresult check_device(CUdevice dev)
{
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (dev < 0 || dev >= gmtsim__config()->ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceGetCount);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*count = gmtsim__config()->ndevices;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceGet);
	r = check_device(ordinal);
	if (r != CUDA_SUCCESS)
		return r;
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceGetName);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "gpumemtrace simulated GPU %" PRIu64 " MiB",
		 gmtsim__config()->memory[dev] >> 20);
	return CUDA_SUCCESS;
}

/* "0000:18:00.0": domain, bus, device and function as cuDeviceGetAttribute
 * reports them (PCI_DOMAIN_ID 0, PCI_BUS_ID 0x18 + ordinal, PCI_DEVICE_ID 0), in
 * the driver's format (4 hex digits of domain, 13 bytes with the NUL; cuda.h).
 * A short buffer gets the string truncated. The NVML double's
 * nvmlDeviceGetHandleByPciBusId_v2 accepts it. */
GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceGetPCIBusId);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pciBusId == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", 0, SIM_PCI_BUS(dev), 0);
	return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* "GPU-gmtsim-<index>": stable, distinct per device. */
	memset(uuid->bytes, 0, sizeof(uuid->bytes));
	memcpy(uuid->bytes, "gmtsim-uuid-dev", 15);
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDeviceGetUuid);
	return device_uuid(uuid, dev);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDeviceGetUuid_v2);
	return device_uuid(uuid, dev);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceTotalMem_v2);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = gmtsim__config()->memory[dev];
	return CUDA_SUCCESS;
}

/* The 32-bit ABI cannot express more than 4 GiB - 1: it saturates. */
GMTSIM_EXPORT CUresult CUDAAPI cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	uint64_t total;
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceTotalMem);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	total = gmtsim__config()->memory[dev];
	*bytes = total > UINT_MAX ? UINT_MAX : (unsigned int)total;
	return CUDA_SUCCESS;
}

/* A Hopper-like device. Attributes not listed read as 0, as an absent
 * capability does on real hardware. */
static int attribute(CUdevice_attribute attrib)
{
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
	default: return 0;
	}
}

GMTSIM_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDeviceGetAttribute);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pi == NULL || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)
		*pi = SIM_PCI_BUS(dev);
	else
		*pi = attribute(attrib);
	return CUDA_SUCCESS;
}

/* --- contexts --------------------------------------------------------------- */

/* The calling thread's context stack (cuCtxPushCurrent / cuCtxPopCurrent). */
#define SIM_CTX_STACK 16
static _Thread_local struct CUctx_st *ctx_stack[SIM_CTX_STACK];
static _Thread_local int ctx_depth;

static struct CUctx_st primary[SIM_MAX_DEVICES];
static unsigned primary_refs[SIM_MAX_DEVICES];

/* Contexts made by cuCtxCreate are never freed: other threads may still hold
 * them as current after cuCtxDestroy, and must see a dead context, not freed
 * memory. The list keeps them reachable. */
struct sim_ctx_node {
	struct CUctx_st ctx;
	struct sim_ctx_node *next;
};
static struct sim_ctx_node *created_contexts;

CUresult gmtsim__current_device(int *device, struct CUctx_st **ctx)
{
	CUresult r = gmtsim__initialised();
	struct CUctx_st *c;

	if (r != CUDA_SUCCESS)
		return r;
	c = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
	if (c == NULL || !c->alive)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = c->device;
	if (ctx != NULL)
		*ctx = c;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxRetain);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	if (primary_refs[dev] == 0) {
		r = gmtsim__context_created(dev);
		if (r == CUDA_SUCCESS) {
			primary[dev].device = dev;
			primary[dev].primary = true;
			primary[dev].alive = true;
		}
	}
	if (r == CUDA_SUCCESS) {
		primary_refs[dev]++;
		*pctx = &primary[dev];
	}
	gmtsim__unlock();
	return r;
}

static CUresult primary_release(CUdevice dev, bool reset)
{
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	if (primary_refs[dev] == 0) {
		r = reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	} else if (reset || --primary_refs[dev] == 0) {
		/* A destroyed primary context takes its allocations with it. */
		primary_refs[dev] = 0;
		primary[dev].alive = false;
		gmtsim__context_destroyed(&primary[dev]);
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxRelease);
	return primary_release(dev, false);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxRelease_v2);
	return primary_release(dev, false);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxReset);
	return primary_release(dev, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxReset_v2);
	return primary_release(dev, true);
}

GMTSIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuDevicePrimaryCtxGetState);
	r = check_device(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	*flags = primary[dev].flags;
	*active = primary_refs[dev] > 0;
	gmtsim__unlock();
	return CUDA_SUCCESS;
}

static CUresult push(struct CUctx_st *ctx)
{
	if (ctx_depth == SIM_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct sim_ctx_node *node;
	CUresult r = check_device(dev);

	if (r != CUDA_SUCCESS)
		return r;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx_depth == SIM_CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	node = calloc(1, sizeof(*node));
	if (node == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gmtsim__lock();
	r = gmtsim__context_created(dev);
	if (r == CUDA_SUCCESS) {
		node->ctx = (struct CUctx_st){ .device = dev, .alive = true, .flags = flags };
		node->next = created_contexts;
		created_contexts = node;
		*pctx = &node->ctx;
		push(&node->ctx);
	}
	gmtsim__unlock();
	if (r != CUDA_SUCCESS)
		free(node);
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuCtxCreate_v2);
	return ctx_create(pctx, flags, dev);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
					      int numParams, unsigned int flags, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuCtxCreate_v3);
	return ctx_create(pctx, flags, dev);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
					      unsigned int flags, CUdevice dev)
{
	gmtsim__count(SIM_CALL_cuCtxCreate_v4);
	return ctx_create(pctx, flags, dev);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuCtxDestroy_v2);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	gmtsim__lock();
	if (!ctx->alive) {
		r = CUDA_ERROR_INVALID_CONTEXT;
	} else {
		ctx->alive = false;
		gmtsim__context_destroyed(ctx);
	}
	gmtsim__unlock();
	if (r == CUDA_SUCCESS && ctx_depth > 0 && ctx_stack[ctx_depth - 1] == ctx)
		ctx_depth--;
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuCtxGetCurrent);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
	return CUDA_SUCCESS;
}

/* Replaces the top of the stack; NULL pops it (cuCtxSetCurrent's documented
 * semantics). */
GMTSIM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuCtxSetCurrent);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL) {
		if (ctx_depth > 0)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!ctx->alive)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == 0)
		return push(ctx);
	ctx_stack[ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuCtxPushCurrent_v2);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx == NULL || !ctx->alive)
		return CUDA_ERROR_INVALID_CONTEXT;
	return push(ctx);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuCtxPopCurrent_v2);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx != NULL)
		*pctx = ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

/* Whether `ctx` is a context this driver made (primary or created), so that a
 * stale or garbage handle is refused rather than read: CUDA 12 clients that
 * call cuCtxGetDevice_v2 with one argument pass whatever the register holds.
 * Lock held. */
static bool ctx_known(const struct CUctx_st *ctx)
{
	for (int i = 0; i < SIM_MAX_DEVICES; i++)
		if (ctx == &primary[i])
			return true;
	for (const struct sim_ctx_node *n = created_contexts; n != NULL; n = n->next)
		if (&n->ctx == ctx)
			return true;
	return false;
}

static CUresult ctx_device(CUdevice *device, CUcontext ctx)
{
	int dev;
	CUresult r;

	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx != NULL) {
		r = gmtsim__initialised();
		if (r != CUDA_SUCCESS)
			return r;
		gmtsim__lock();
		if (!ctx_known(ctx) || !ctx->alive)
			r = CUDA_ERROR_INVALID_CONTEXT;
		else
			*device = ctx->device;
		gmtsim__unlock();
		return r;
	}
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS)
		*device = dev;
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	gmtsim__count(SIM_CALL_cuCtxGetDevice);
	return ctx_device(device, NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	gmtsim__count(SIM_CALL_cuCtxGetDevice_v2);
	return ctx_device(device, ctx);
}

static CUresult ctx_sync(CUcontext ctx)
{
	CUdevice dev;
	CUresult r = ctx_device(&dev, ctx);

	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	gmtsim__pools_sync(dev);
	gmtsim__unlock();
	return CUDA_SUCCESS;
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
	gmtsim__count(SIM_CALL_cuCtxSynchronize);
	return ctx_sync(NULL);
}

GMTSIM_EXPORT CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
	gmtsim__count(SIM_CALL_cuCtxSynchronize_v2);
	return ctx_sync(ctx);
}

/* --- streams ---------------------------------------------------------------- */

/* Streams run synchronously: stream-ordered work is done when it is enqueued.
 * Like contexts, stream objects are never freed, so a destroyed handle is
 * recognised as invalid rather than read after free. */
struct CUstream_st {
	int device;
	bool alive;
	struct CUstream_st *next;
};
static struct CUstream_st *streams;

CUresult gmtsim__stream_device(CUstream stream, int *device)
{
	if (stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
		return gmtsim__current_device(device, NULL);
	for (struct CUstream_st *s = streams; s != NULL; s = s->next) {
		if (s == stream) {
			if (!s->alive)
				break;
			*device = s->device;
			return gmtsim__initialised();
		}
	}
	return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_create(CUstream *phStream, unsigned int flags)
{
	struct CUstream_st *s;
	int dev;
	CUresult r;

	if (phStream == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		s = calloc(1, sizeof(*s));
		if (s == NULL) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			*s = (struct CUstream_st){ .device = dev, .alive = true, .next = streams };
			streams = s;
			*phStream = s;
		}
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuStreamCreate);
	return stream_create(phStream, Flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
							  int priority)
{
	gmtsim__count(SIM_CALL_cuStreamCreateWithPriority);
	return stream_create(phStream, flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuStreamDestroy_v2);
	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	if (r == CUDA_SUCCESS) {
		if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
			r = CUDA_ERROR_INVALID_HANDLE;
		else
			hStream->alive = false;
	}
	gmtsim__unlock();
	return r;
}

static CUresult stream_sync(CUstream hStream)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	if (r == CUDA_SUCCESS)
		gmtsim__pools_sync(dev);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuStreamSynchronize);
	return stream_sync(hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuStreamSynchronize_ptsz);
	return stream_sync(hStream);
}

static CUresult stream_query(CUstream hStream)
{
	int dev;
	CUresult r;

	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuStreamQuery);
	return stream_query(hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuStreamQuery_ptsz);
	return stream_query(hStream);
}

/* --- error strings ------------------------------------------------------------ */

#define SIM_ERRORS(X)                                                                   \
	X(CUDA_SUCCESS, "no error")                                                     \
	X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                 \
	X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                    \
	X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                           \
	X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                             \
	X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                   \
	X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                          \
	X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                         \
	X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                         \
	X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                               \
	X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                          \
	X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                                    \
	  "part or all of the requested memory range is already mapped")                \
	X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
	X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                         \
	X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")

GMTSIM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	gmtsim__count(SIM_CALL_cuGetErrorString);
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	switch (error) {
#define SIM_X_STRING(code, text) case code: *pStr = text; return CUDA_SUCCESS;
		SIM_ERRORS(SIM_X_STRING)
#undef SIM_X_STRING
	default:
		*pStr = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
}

GMTSIM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	gmtsim__count(SIM_CALL_cuGetErrorName);
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	switch (error) {
#define SIM_X_NAME(code, text) case code: *pStr = #code; return CUDA_SUCCESS;
		SIM_ERRORS(SIM_X_NAME)
#undef SIM_X_NAME
	default:
		*pStr = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
}
