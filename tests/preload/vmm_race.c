/* Test program for racing releases of VMM handles, against the simulator's
 * ledger. Each round the main thread creates a handle, maps it at MAPS
 * addresses of the round's own slice of a reservation and, every other
 * round, retains it once more (two references, else one), and reserves a
 * scratch range. Then, all at once:
 *
 * - UNMAPPERS threads each unmap every one of the handle's mappings, in an
 *   order of their own: the driver honours one unmap of each mapping, and
 *   the last one frees the handle when its references are gone;
 * - RELEASERS threads each release the handle once and free the scratch
 *   range: both releases honoured when it had two references, else one;
 *   one of the two frees of the range;
 * - a creator thread retains the handle through its first mapping and maps
 *   it at one more address, racing the releases and unmaps (either keeps
 *   the handle alive when it comes first: a release recorded before it
 *   may have counted on it); then creates handles, maps each at one of the
 *   round's addresses (once the driver has unmapped it there), releases its
 *   own reference and unmaps three in four again; reserves and frees
 *   ranges; and drops the reference it retained. The simulator, like the
 *   driver, gives a freed handle's value
 *   and a freed range's address to the next cuMemCreate and
 *   cuMemAddressReserve: the creator gets the round's handle, mapping
 *   addresses and scratch range back while the racing calls are still
 *   under way, and a late unmap or release may take what it got.
 *
 * Halfway, a snapshot (gmt_dump) and the simulator's ledger of that moment
 * (no call in flight); at exit, the exit snapshot against the exit ledger.
 * The live set, the mappings, the reservations and the totals must equal
 * the ledger's whatever the interleaving. Arguments: SEED ROUNDS. Prints
 * "PID <pid> main". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>
#include <gpumemtrace.h>

#include "gmtsim.h"
#include "shuffle.h"

#define MIB ((size_t)1024 * 1024)
#define PAGE (2 * MIB)
#define MAPS 4
#define SLOTS (MAPS + 1) /* the handle's mappings, the creator's one more */
#define UNMAPPERS 4
#define RELEASERS 2
#define CREATES 12
#define MAX_ROUNDS 200

static CUcontext ctx;
static const CUmemAllocationProp prop = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
};
static CUmemGenericAllocationHandle handle;
static CUdeviceptr at[SLOTS], scratch;
static pthread_barrier_t start;

struct worker {
	pthread_t t;
	unsigned seed;
};

static void *unmap_all(void *arg)
{
	struct worker *w = arg;
	int order[MAPS];

	cuCtxSetCurrent(ctx);
	shuffle(order, MAPS, &w->seed);
	pthread_barrier_wait(&start);
	for (int i = 0; i < MAPS; i++)
		(void)cuMemUnmap(at[order[i]], PAGE); /* all but one fail, or take the creator's */
	return NULL;
}

static void *release(void *arg)
{
	(void)arg;
	cuCtxSetCurrent(ctx);
	pthread_barrier_wait(&start);
	(void)cuMemRelease(handle);	      /* with one reference, one of the two fails */
	(void)cuMemAddressFree(scratch, PAGE); /* one of the two fails, or takes the creator's */
	return NULL;
}

static void *create(void *arg)
{
	struct worker *w = arg;
	CUmemGenericAllocationHandle held;
	bool retained;

	cuCtxSetCurrent(ctx);
	pthread_barrier_wait(&start);
	retained = cuMemRetainAllocationHandle(&held, (void *)(uintptr_t)at[0]) == CUDA_SUCCESS;
	(void)cuMemMap(at[MAPS], PAGE, 0, handle, 0); /* fails once the handle is freed */
	for (int i = 0; i < CREATES; i++) {
		CUmemGenericAllocationHandle h;
		size_t size = (1 + rand_r(&w->seed) % 2) * PAGE, offset = size - PAGE;
		CUdeviceptr where = at[rand_r(&w->seed) % MAPS], range;

		if (cuMemAddressReserve(&range, PAGE, 0, 0, 0) == CUDA_SUCCESS && rand_r(&w->seed) % 2 == 0)
			(void)cuMemAddressFree(range, PAGE);
		if (cuMemCreate(&h, size, &prop, 0) != CUDA_SUCCESS)
			continue;
		if (cuMemMap(where, PAGE, offset, h, 0) != CUDA_SUCCESS) {
			(void)cuMemRelease(h); /* may fail: a late release may have taken it */
			continue;
		}
		(void)cuMemRelease(h);
		if (rand_r(&w->seed) % 4 != 0)
			(void)cuMemUnmap(where, PAGE); /* may fail: a late unmap may have taken it */
	}
	if (retained)
		(void)cuMemRelease(held);
	return NULL;
}

/* The snapshot and the simulator's ledger of the same moment. */
static int dump(void)
{
	const char *ledgers = getenv("GMTSIM_LEDGER_DIR");
	char path[4096], ledger[4096];

	(void)gmt_dump(path, sizeof(path));
	if (ledgers == NULL)
		return 0;
	snprintf(ledger, sizeof(ledger), "%s/ledger.%ld.api.json", ledgers, (long)getpid());
	return gmtsim_ledger_write(ledger);
}

int main(int argc, char **argv)
{
	unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 1;
	int rounds = argc > 2 ? atoi(argv[2]) : 20;
	struct worker unmappers[UNMAPPERS], creator;
	pthread_t releasers[RELEASERS];
	CUdeviceptr base;
	CUdevice dev;

	if (rounds < 1 || rounds > MAX_ROUNDS || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
	    cuMemAddressReserve(&base, (size_t)rounds * SLOTS * PAGE, 0, 0, 0) != CUDA_SUCCESS)
		return 1;
	for (int r = 0; r < rounds; r++) {
		CUmemGenericAllocationHandle again;

		if (cuMemCreate(&handle, PAGE, &prop, 0) != CUDA_SUCCESS ||
		    cuMemAddressReserve(&scratch, PAGE, 0, 0, 0) != CUDA_SUCCESS)
			return 1;
		for (int i = 0; i < SLOTS; i++)
			at[i] = base + ((size_t)r * SLOTS + (size_t)i) * PAGE;
		for (int i = 0; i < MAPS; i++) {
			if (cuMemMap(at[i], PAGE, 0, handle, 0) != CUDA_SUCCESS)
				return 1;
		}
		if (r % 2 == 0 && (cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)at[0]) != CUDA_SUCCESS ||
				   again != handle))
			return 1;
		pthread_barrier_init(&start, NULL, UNMAPPERS + RELEASERS + 1);
		for (int k = 0; k < UNMAPPERS; k++) {
			unmappers[k].seed = seed + 101u * (unsigned)k + (unsigned)r;
			pthread_create(&unmappers[k].t, NULL, unmap_all, &unmappers[k]);
		}
		for (int k = 0; k < RELEASERS; k++)
			pthread_create(&releasers[k], NULL, release, NULL);
		creator.seed = seed * 7919u + (unsigned)r;
		pthread_create(&creator.t, NULL, create, &creator);
		for (int k = 0; k < UNMAPPERS; k++)
			pthread_join(unmappers[k].t, NULL);
		for (int k = 0; k < RELEASERS; k++)
			pthread_join(releasers[k], NULL);
		pthread_join(creator.t, NULL);
		pthread_barrier_destroy(&start);
		if (r == rounds / 2 && dump() != 0)
			return 1;
	}
	printf("PID %d main\n", (int)getpid());
	return 0;
}
