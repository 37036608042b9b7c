/* Test program for the VMM row of the matrix, shaped like PyTorch's
 * expandable_segments: shared runtime, driver VMM entry points fetched through
 * cudaGetDriverEntryPointByVersion, a VA reservation of ~1.1x the device grown
 * and shrunk by 2 MiB pages, handles released right after mapping. Run with
 * GMTSIM_MEMORY=1G. */
#define _GNU_SOURCE
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "prog.h"

#define MIB ((size_t)1024 * 1024)
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

/* PyTorch asks for the entry points it needs by base name through the
 * runtime; 12000 is the version it was built against. */
static void *entry_point(const char *name)
{
	enum cudaDriverEntryPointQueryResult status;
	void *fn = NULL;

	PROG_OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
						 &status));
	PROG_CHECK_EQ(status, cudaDriverEntryPointSuccess);
	if (fn == NULL)
		PROG_FAIL("cudaGetDriverEntryPointByVersion(%s) gave NULL", name);
	return fn;
}

#define LOAD(field, name)                                                       \
	do {                                                                    \
		void *fn_ = entry_point(name);                                  \
		memcpy(&(field), &fn_, sizeof(fn_));                            \
	} while (0)

static void load_vmm(struct vmm *v)
{
	LOAD(v->granularity, "cuMemGetAllocationGranularity");
	LOAD(v->address_reserve, "cuMemAddressReserve");
	LOAD(v->address_free, "cuMemAddressFree");
	LOAD(v->create, "cuMemCreate");
	LOAD(v->release, "cuMemRelease");
	LOAD(v->map, "cuMemMap");
	LOAD(v->unmap, "cuMemUnmap");
	LOAD(v->set_access, "cuMemSetAccess");
	LOAD(v->retain_handle, "cuMemRetainAllocationHandle");
}

static void check_free_bytes(size_t want)
{
	size_t free_bytes, total_bytes;

	PROG_OK(cudaMemGetInfo(&free_bytes, &total_bytes));
	PROG_CHECK_EQ_U(free_bytes, want);
}

int main(void)
{
	CUmemGenericAllocationHandle handles[PAGES_GROWN], retained, probe, scratch;
	CUmemAllocationProp prop;
	CUmemAccessDesc access;
	CUdeviceptr base, other;
	size_t gran, gran_min, total, free_bytes, reserve_size;
	void *plain;
	struct vmm v;
	int i;

	/* An ordinary segment, as the caching allocator makes: XLA-style probes
	 * must not take it for a VMM mapping. */
	PROG_OK(cudaMalloc(&plain, 1 * MIB));
	load_vmm(&v);

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	PROG_OK(v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	PROG_OK(v.granularity(&gran_min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	PROG_CHECK_EQ_U(gran, 2 * MIB);
	PROG_CHECK_EQ_U(gran_min, 2 * MIB);

	PROG_OK(cudaMemGetInfo(&free_bytes, &total));
	PROG_CHECK_EQ_U(total, 1024 * MIB);
	PROG_CHECK_EQ_U(free_bytes, total - 2 * MIB);	/* the 1 MiB segment's page */

	/* PyTorch reserves 1.1x the device per expandable segment (VA only). */
	reserve_size = (total + total / 10 + gran - 1) / gran * gran;
	PROG_CHECK_EQ_U(reserve_size, 1128 * MIB);
	PROG_OK(v.address_reserve(&base, reserve_size, 0, 0, 0));
	check_free_bytes(total - 2 * MIB);

	/* A second reservation, given back at once. */
	PROG_OK(v.address_reserve(&other, 64 * MIB, 0, 0, 0));
	PROG_OK(v.address_free(other, 64 * MIB));

	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (i = 0; i < PAGES_GROWN; i++) {
		CUdeviceptr at = base + (CUdeviceptr)i * gran;

		PROG_OK(v.create(&handles[i], gran, &prop, 0));
		PROG_OK(v.map(at, gran, 0, handles[i], 0));
		PROG_OK(v.set_access(at, gran, &access, 1));
		/* As PyTorch does: the mapping keeps the memory; the handle's
		 * own reference goes at once. */
		PROG_OK(v.release(handles[i]));
	}
	check_free_bytes(total - 2 * MIB - PAGES_GROWN * gran);

	/* Retaining from an address inside a mapping adds a reference to that
	 * page's handle. */
	PROG_OK(v.retain_handle(&retained, (void *)(uintptr_t)(base + 3 * gran + 100)));
	PROG_CHECK_EQ_U(retained, handles[3]);
	PROG_OK(v.release(retained));

	/* XLA's probe on an ordinary pointer must fail; the ledger's totals show
	 * that it changed nothing. */
	probe = 0;
	PROG_CHECK_NE(v.retain_handle(&probe, plain), CUDA_SUCCESS);

	/* A handle created and released without a mapping is gone at once. */
	PROG_OK(v.create(&scratch, 2 * gran, &prop, 0));
	PROG_OK(v.release(scratch));

	/* Shrink: unmap the top pages one by one, as PyTorch unmaps handles. */
	for (i = PAGES_KEPT; i < PAGES_GROWN; i++)
		PROG_OK(v.unmap(base + (CUdeviceptr)i * gran, gran));
	check_free_bytes(total - 2 * MIB - PAGES_KEPT * gran);

	prog_report_begin("main");
	prog_report_live(PROG_ADDR(plain), 1 * MIB, "device", 0);
	for (i = 0; i < PAGES_KEPT; i++)
		prog_report_live(handles[i], gran, "vmm", 0);
	prog_report_end();
	return 0;
}
