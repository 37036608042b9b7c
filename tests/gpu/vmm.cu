/* The VMM row, shaped like PyTorch's expandable segments: shared cudart, the
 * driver's VMM entry points fetched through cudaGetDriverEntryPointByVersion,
 * an address reservation of 1.125 x the device (virtual addresses only), grown
 * page by page (cuMemCreate, cuMemMap, cuMemSetAccess, then cuMemRelease at
 * once: the mapping keeps the memory) and shrunk by unmapping. The snapshot
 * lists each mapped handle once, as kind vmm at its handle's value, and the
 * reservation under vmm.reservations. Checkpoints: start, grown, shrunk, end. */
#include <cuda.h>
#include <cudaTypedefs.h>

#include "gpu_runtime.h"

#define PAGES_GROWN 8	/* the segment grows to 8 pages ... */
#define PAGES_KEPT 5	/* ... and shrinks back to 5 */

struct vmm {
	PFN_cuMemGetAllocationGranularity_v10020 granularity;
	PFN_cuMemAddressReserve_v10020 address_reserve;
	PFN_cuMemAddressFree_v10020 address_free;
	PFN_cuMemCreate_v10020 create;
	PFN_cuMemRelease_v10020 release;
	PFN_cuMemMap_v10020 map;
	PFN_cuMemUnmap_v10020 unmap;
	PFN_cuMemSetAccess_v10020 set_access;
	PFN_cuMemRetainAllocationHandle_v11000 retain_handle;
};

/* PyTorch asks by base name at the version it was built against. */
static void *entry_point(const char *name)
{
	enum cudaDriverEntryPointQueryResult status;
	void *fn = NULL;

	GT_OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
	GT_CHECK_EQ(status, cudaDriverEntryPointSuccess);
	GT_CHECK(fn != NULL);
	return fn;
}

#define LOAD(field, name)                                                       \
	do {                                                                    \
		void *fn_ = entry_point(name);                                  \
		memcpy(&(field), &fn_, sizeof(fn_));                            \
	} while (0)

int main(void)
{
	CUmemGenericAllocationHandle handles[PAGES_GROWN], retained;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUdeviceptr base;
	size_t gran, free_bytes, total, reserve_size;
	void *plain;
	struct vmm v;
	int i;

	gt_begin("vmm_expandable");
	gt_rt_init(0);
	LOAD(v.granularity, "cuMemGetAllocationGranularity");
	LOAD(v.address_reserve, "cuMemAddressReserve");
	LOAD(v.address_free, "cuMemAddressFree");
	LOAD(v.create, "cuMemCreate");
	LOAD(v.release, "cuMemRelease");
	LOAD(v.map, "cuMemMap");
	LOAD(v.unmap, "cuMemUnmap");
	LOAD(v.set_access, "cuMemSetAccess");
	LOAD(v.retain_handle, "cuMemRetainAllocationHandle");

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	/* The pages are of the recommended granularity; the snapshot's is the
	 * minimum one. */
	GT_OK(v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	printf("GRANULARITY 0 %zu\n", gran);
	GT_OK(v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	GT_OK(cudaMemGetInfo(&free_bytes, &total));
	gt_rt_checkpoint("start");

	/* An ordinary segment beside it, as the caching allocator makes. */
	GT_OK(cudaMalloc(&plain, 1 * GT_MIB));
	gt_add(GT_ADDR(plain), 1 * GT_MIB, "device", 0);

	reserve_size = gt_round_up(total + total / 8, gran);
	GT_OK(v.address_reserve(&base, reserve_size, 0, 0, 0));
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (i = 0; i < PAGES_GROWN; i++) {
		CUdeviceptr at = base + (CUdeviceptr)i * gran;

		GT_OK(v.create(&handles[i], gran, &prop, 0));
		GT_OK(v.map(at, gran, 0, handles[i], 0));
		GT_OK(v.set_access(at, gran, &access, 1));
		GT_OK(v.release(handles[i]));
		gt_add(handles[i], gran, "vmm", 0);
	}
	/* A reference taken from a mapping's address, and dropped. */
	GT_OK(v.retain_handle(&retained, (void *)(uintptr_t)(base + 3 * gran)));
	GT_CHECK_EQ(retained, handles[3]);
	GT_OK(v.release(retained));
	gt_rt_checkpoint("grown");
	gt_reservation("grown", reserve_size);

	/* Unmapped with no reference left: each handle is gone. */
	for (i = PAGES_KEPT; i < PAGES_GROWN; i++) {
		GT_OK(v.unmap(base + (CUdeviceptr)i * gran, gran));
		gt_remove(handles[i], "vmm");
	}
	gt_rt_checkpoint("shrunk");
	gt_reservation("shrunk", reserve_size);

	for (i = 0; i < PAGES_KEPT; i++) {
		GT_OK(v.unmap(base + (CUdeviceptr)i * gran, gran));
		gt_remove(handles[i], "vmm");
	}
	GT_OK(v.address_free(base, reserve_size));
	gt_remove(GT_ADDR(plain), "device");
	GT_OK(cudaFree(plain));
	gt_rt_checkpoint("end");
	gt_checkpoint_at("exit", "@exit");
	return 0;
}
