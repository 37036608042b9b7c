/* Unit test of the out-of-memory diagnosis rules (diagnose.h) on made-up
 * device states: each verdict where it should be primary, the order of the
 * others that apply, the derived numbers, and what the verdicts rest on. */
#define _GNU_SOURCE
#include "check.h"
#include "analyze/diagnose.h"
#include "analyze/tensors.h"
#include "analyze/remedy.h"
#include "analyze/replay.h"
#include "util/parse.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

/* A 16 GiB device with `free` bytes free, nothing else known. */
static struct gmt__device_state device(uint64_t free)
{
	struct gmt__device_state st = {
		.index = 0, .have_mem = true, .total_bytes = 16 * GIB, .free_bytes = free,
		.have_granularity = true, .granularity = 2 * MIB, .have_pools = true,
		.npools = 1, .others_why = "NVML is not available",
	};
	return st;
}

static struct gmt__diag_input input(const struct gmt__device_state *st, uint64_t requested, uint64_t device_live)
{
	struct gmt__diag_input in = {
		.requested = requested, .device = 0, .state = st,
		.pages = { .granularity = 2 * MIB, .granularity_known = true, .pages = device_live / (2 * MIB) },
	};
	in.tracked[GMT_KIND_DEVICE] = device_live;
	return in;
}

/* The verdict names of d, primary first, joined by commas. */
static const char *names(const struct gmt__diagnosis *d)
{
	static char buf[256];

	buf[0] = '\0';
	for (int i = 0; i < d->nverdicts; i++) {
		if (i > 0)
			strcat(buf, ",");
		strcat(buf, gmt__verdict_name(d->v[i].verdict));
	}
	return buf;
}

/* The remedy names of d, in order, joined by commas. */
static const char *remedies(const struct gmt__diagnosis *d)
{
	static char buf[256];

	buf[0] = '\0';
	for (int i = 0; i < d->nremedies; i++) {
		if (i > 0)
			strcat(buf, ",");
		strcat(buf, gmt__remedy_name(d->remedies[i].id));
	}
	return buf;
}

static bool remedy_rests_on(const struct gmt__remedy *r, const char *number)
{
	for (int k = 0; r->rests_on[k] != NULL; k++) {
		if (strcmp(r->rests_on[k], number) == 0)
			return true;
	}
	return false;
}

static bool rests_on(const struct gmt__diag_verdict *v, const char *number)
{
	for (int k = 0; v->rests_on[k] != NULL; k++) {
		if (strcmp(v->rests_on[k], number) == 0)
			return true;
	}
	return false;
}

static void test_exhaustion(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion");
	CHECK_U64(d.shortfall, 1 * GIB);
	CHECK_U64(d.used, 15 * GIB);
	CHECK_U64(d.footprint, 15 * GIB);
	CHECK_U64(d.untracked, 0);
	CHECK(rests_on(&d.v[0], "free_bytes"));
	CHECK(strstr(d.summary, "exhaustion: 2.00 GiB requested with 1.00 GiB free of 16.0 GiB") == d.summary);

	/* Managed memory is not the device's: not in the process's total. */
	in.tracked[GMT_KIND_MANAGED] = 4 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_U64(d.tracked_total, 15 * GIB);
	CHECK_U64(d.v[0].bytes, 15 * GIB);
}

static void test_never_fits(void)
{
	struct gmt__device_state st = device(16 * GIB);
	struct gmt__diag_input in = input(&st, 17 * GIB, 0);
	struct gmt__diagnosis d;

	/* Larger than the device: nothing else to say. */
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "never_fits");
	CHECK_U64(d.capacity, 16 * GIB);
	CHECK(rests_on(&d.v[0], "capacity_bytes"));
	CHECK(strstr(d.v[0].detail, "larger than the device") != NULL);

	/* Other processes hold 12 GiB: 3 GiB free and 1 GiB of this process's
	 * own make 4 GiB it could ever have; 5 GiB never fits. */
	st = device(3 * GIB);
	st.have_others = true;
	st.others_bytes = 12 * GIB;
	st.nothers = 1;
	in = input(&st, 5 * GIB, 1 * GIB);
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "never_fits");
	CHECK_U64(d.capacity, 4 * GIB);
	CHECK(strstr(d.v[0].detail, "all this process could have of the device (4.00 GiB") != NULL);

	/* 4 GiB would fit once this process's own 1 GiB were freed: not never_fits. */
	in = input(&st, 4 * GIB, 1 * GIB);
	gmt__diagnose(&in, &d);
	CHECK(strcmp(names(&d), "never_fits") != 0);
}

static void test_allocator_fragmentation(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 20 * MIB, 15 * GIB);
	struct gmt__diagnosis d;

	/* PyTorch needed 2 GiB: 3 GiB free inside its segments, none of its
	 * free blocks larger than 512 MiB. */
	in.fw_known = in.fw_largest_known = true;
	in.fw_requested = 2 * GIB;
	in.fw_reserved_unallocated = 3 * GIB;
	in.fw_largest_free = 512 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	CHECK_U64(d.v[0].bytes, 3 * GIB);
	CHECK(rests_on(&d.v[0], "largest_free_block_bytes"));
	CHECK(strstr(d.v[0].detail, "holds 3.00 GiB free inside its segments, enough for the 2.00 GiB it needed, "
				    "but its largest free block is 512 MiB") != NULL);

	/* Exactly the request free inside the segments: fragmentation still. */
	in.fw_reserved_unallocated = 2 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	in.fw_reserved_unallocated = 3 * GIB;

	/* A free block large enough, or too little free: not fragmentation. */
	in.fw_largest_free = 2 * GIB;
	gmt__diagnose(&in, &d);
	CHECK(strstr(names(&d), "allocator_fragmentation") == NULL);
	in.fw_largest_free = 512 * MIB;
	in.fw_reserved_unallocated = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK(strstr(names(&d), "allocator_fragmentation") == NULL);

	/* The framework's request larger than the device: never_fits, said of it
	 * (expandable segments ask the driver a page at a time). */
	in.fw_requested = 17 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "never_fits");
	CHECK(rests_on(&d.v[0], "framework_requested_bytes"));
	CHECK(strstr(d.v[0].detail, "the framework's request alone (17.0 GiB) is larger than the device") != NULL);
}

/* JAX's allocator: 12 GiB taken from the 16 GiB device at start (its
 * limit), 11.5 GiB of it in use, 1 GiB asked. */
static struct gmt__diag_input jax_input(const struct gmt__device_state *st)
{
	struct gmt__diag_input in = input(st, 1 * GIB, 12 * GIB);

	in.fw_known = in.fw_largest_known = true;
	in.fw_name = "jax";
	in.fw_allocated = 11 * GIB + 512 * MIB;
	in.fw_reserved_unallocated = 512 * MIB;
	in.fw_largest_free = 512 * MIB;
	in.fw_limit = 12 * GIB;
	in.fw_requested = 1 * GIB;
	return in;
}

static void test_framework_limit(void)
{
	struct gmt__device_state st = device(4 * GIB);
	struct gmt__diag_input in = jax_input(&st);
	struct gmt__diagnosis d;

	/* In use and the request past the limit: refused inside the pool,
	 * however much the device has free. */
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "framework_limit");
	CHECK_U64(d.v[0].bytes, 12 * GIB);
	CHECK(rests_on(&d.v[0], "framework_limit_bytes") && rests_on(&d.v[0], "framework_allocated_bytes"));
	CHECK(strstr(d.v[0].detail, "jax's allocator refused it on its own: the 11.5 GiB it holds and the 1.00 GiB "
				    "asked exceed its limit of 12.0 GiB (the device has 4.00 GiB free)") != NULL);
	/* The fraction that covers 12.5 GiB of 16: 0.79. */
	CHECK_STR(remedies(&d), "raise_framework_limit");
	CHECK_U64(d.remedies[0].bytes, 512 * MIB);
	CHECK(remedy_rests_on(&d.remedies[0], "framework_limit_bytes"));
	CHECK(strstr(d.remedies[0].text, "XLA_PYTHON_CLIENT_MEM_FRACTION=0.79: JAX's allocator may use 12.0 GiB (75% "
					 "of the device's 16.0 GiB) and needed 12.5 GiB") != NULL);

	/* The device without the room: the verdict, no remedy. */
	st = device(256 * MIB);
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "framework_limit");
	CHECK_STR(remedies(&d), "");

	/* Without the driver's numbers: the verdict still, no remedy. */
	in.state = NULL;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "framework_limit");
	CHECK(strstr(d.v[0].detail, "device has") == NULL);
	CHECK_STR(remedies(&d), "");

	/* A request larger than the process could ever have: never_fits first. */
	st = device(4 * GIB);
	in = jax_input(&st);
	in.requested = in.fw_requested = 17 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "never_fits");

	/* Within the limit, the free bytes in the pool cover the request but no
	 * block does: allocator_fragmentation, and no remedy of PyTorch's. */
	in = jax_input(&st);
	in.fw_allocated = 10 * GIB;
	in.fw_reserved_unallocated = 2 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	CHECK_STR(remedies(&d), "");

	/* CuPy's pool: its limit set to 200 MiB, 150 MiB used, 100 MiB asked. */
	st = device(15 * GIB);
	in = input(&st, 100 * MIB, 150 * MIB);
	in.fw_known = true;
	in.fw_name = "cupy";
	in.fw_allocated = 150 * MIB;
	in.fw_limit = 200 * MIB;
	in.fw_requested = 100 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "framework_limit");
	CHECK_STR(remedies(&d), "raise_framework_limit");
	CHECK(strstr(d.remedies[0].text, "raise the pool's limit to at least 250 MiB "
					 "(cupy.get_default_memory_pool().set_limit(size=262144000), or CUPY_GPU_MEMORY_LIMIT): "
					 "it is 200 MiB; the pool holds 150 MiB and the device has 15.0 GiB free") != NULL);

	/* The device without the room for the pool's 250 MiB (150 held, 50
	 * free): the verdict, no limit to raise to. */
	st = device(50 * MIB);
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "framework_limit");
	CHECK_STR(remedies(&d), "");
	st = device(15 * GIB);

	/* No limit known, or within it — up to the limit exactly: never this
	 * verdict. */
	in.fw_limit = 0;
	gmt__diagnose(&in, &d);
	CHECK(strstr(names(&d), "framework_limit") == NULL);
	in.fw_limit = 250 * MIB;
	gmt__diagnose(&in, &d);
	CHECK(strstr(names(&d), "framework_limit") == NULL);
	in.fw_limit = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK(strstr(names(&d), "framework_limit") == NULL);
}

static void test_cache_released(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	/* The third failure of an episode, 768 MiB freed since the first:
	 * beside exhaustion, the cache released. */
	in.episode_failures = 3;
	in.released_bytes = 768 * MIB;
	in.released_count = 3;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,cache_released");
	CHECK_U64(d.v[1].bytes, 768 * MIB);
	CHECK(rests_on(&d.v[1], "released_bytes"));
	CHECK(strstr(d.v[1].detail, "freed 768 MiB in 3 allocations and the request still did not fit") != NULL);
	CHECK(strstr(d.v[1].detail, "3 failures") != NULL);

	/* Beside never_fits too. */
	in.requested = 17 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "never_fits,cache_released");

	/* Nothing freed, or one failure only: not listed. */
	in.requested = 2 * GIB;
	in.released_bytes = in.released_count = 0;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion");
	in.released_bytes = 768 * MIB;
	in.episode_failures = 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion");
}

static void test_fragmentation(void)
{
	struct gmt__device_state st = device(0);
	struct gmt__diag_input in = input(&st, 4 * MIB, 8 * GIB);
	struct gmt__diagnosis d;

	/* Half of every page used: 8 GiB live in 16 GiB of pages. */
	in.pages.pages = 8192;
	in.pages.partial = 8192;
	in.pages.stranded_bytes = 8 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "fragmentation,exhaustion");
	CHECK_U64(d.v[0].bytes, 8 * GIB);
	CHECK(rests_on(&d.v[0], "stranded_bytes"));

	/* The driver says enough is free: fragmentation by the first rule. */
	st = device(1 * GIB);
	in = input(&st, 512 * MIB, 15 * GIB);
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "fragmentation");
	CHECK_U64(d.shortfall, 0);

	/* A few stranded pages beside a device full of live memory: they would
	 * cover the shortfall, but are too small a part to blame. */
	st = device(0);
	in = input(&st, 2 * MIB, 15 * GIB);
	in.pages.pages = 8192;
	in.pages.partial = 4;
	in.pages.stranded_bytes = 4 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,fragmentation");
}

static void test_pool(void)
{
	struct gmt__device_state st = device(4 * GIB);
	struct gmt__diag_input in = input(&st, 6 * GIB, 2 * GIB);
	struct gmt__diagnosis d;

	st.pool_reserved = 10 * GIB;
	st.pool_used = 1 * GIB;
	in.tracked[GMT_KIND_ASYNC] = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "pool_reservation,exhaustion");
	CHECK_U64(d.pool_unused, 9 * GIB);
	CHECK_U64(d.v[0].bytes, 9 * GIB);
	CHECK_U64(d.footprint, 12 * GIB);
	CHECK(rests_on(&d.v[0], "pool_reserved_bytes"));
	CHECK(rests_on(&d.v[0], "pool_used_bytes"));

	/* Pools not known: the async memory counts at its live size. */
	st.have_pools = false;
	gmt__diagnose(&in, &d);
	CHECK_U64(d.footprint, 3 * GIB);
	CHECK(!d.have_pools);
}

static void test_others(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 3 * GIB, 3 * GIB);
	struct gmt__diagnosis d;

	/* 12 GiB used by another process: with NVML the verdict names it. */
	st.have_others = true;
	st.others_why = NULL;
	st.others_bytes = 12 * GIB;
	st.nothers = 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "other_processes,exhaustion");
	CHECK_U64(d.untracked, 0);
	CHECK(rests_on(&d.v[0], "other_processes_bytes"));

	/* Without NVML the same memory is untracked, and the detail says that
	 * other processes are in it. */
	st.have_others = false;
	st.others_bytes = 0;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "untracked,exhaustion");
	CHECK_U64(d.untracked, 12 * GIB);
	CHECK(strstr(d.v[0].detail, "other processes' memory included") != NULL);
}

static void test_growth(void)
{
	struct gmt__device_state st = device(0);
	struct gmt__diag_input in = input(&st, 1 * GIB, 16 * GIB);
	struct gmt__diagnosis d;

	in.growth_bytes = 12 * GIB;
	in.growth_sites = 2;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "growth,exhaustion");
	CHECK(strstr(d.v[0].detail, "2 allocation sites kept growing") != NULL);
	/* Exhaustion beside growth counts what is not growth, and says so. */
	CHECK_U64(d.v[1].bytes, 4 * GIB);
	CHECK(strstr(d.v[1].detail, "besides what growing sites gained (4.00 GiB of 16.0 GiB)") != NULL);
	CHECK(rests_on(&d.v[1], "growth_bytes"));

	/* Growth too small to matter beside the rest: exhaustion counts all
	 * the process holds. */
	in.growth_bytes = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,growth");
	CHECK_U64(d.v[0].bytes, 16 * GIB);
	CHECK(strstr(d.v[0].detail, "this process holds 16.0 GiB live") != NULL);

	/* No device numbers: growth is all that can be judged. */
	in.state = NULL;
	in.growth_bytes = 12 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "growth,exhaustion");
	CHECK(!d.have_mem);
	CHECK(strstr(d.summary, "free memory not known") != NULL);
}

/* The rule for the primary verdict at its edges: a cause that alone covers
 * the shortfall is primary when it holds at least a quarter of the
 * process's own memory (diagnose.c, rule 3), and applies only when it covers
 * the shortfall; one byte either side of each edge. */
static void test_edges(void)
{
	/* 10 GiB used of 16: 8 GiB this process's, 2 GiB another's; 7 GiB
	 * asked for with 6 GiB free: 1 GiB short. A quarter of 8 GiB is 2 GiB. */
	struct gmt__device_state st = device(6 * GIB);
	struct gmt__diag_input in = input(&st, 7 * GIB, 8 * GIB);
	struct gmt__diagnosis d;

	st.have_others = true;
	st.others_why = NULL;
	st.nothers = 1;
	st.others_bytes = 2 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_U64(d.shortfall, 1 * GIB);
	CHECK_U64(d.untracked, 0);
	CHECK_STR(names(&d), "other_processes,exhaustion");
	st.others_bytes = 2 * GIB - 1; /* a byte under a quarter: not to blame first */
	gmt__diagnose(&in, &d);
	CHECK_U64(d.shortfall, 1 * GIB);
	CHECK_STR(names(&d), "exhaustion,other_processes");

	/* Fragmentation: stranded bytes exactly the shortfall apply, a byte
	 * fewer do not (no page's worth is then free anywhere). 4 MiB asked
	 * for, nothing free, 8 GiB live in 16 GiB of half-used pages. */
	st = device(0);
	in = input(&st, 4 * MIB, 8 * GIB);
	in.pages.pages = 8192;
	in.pages.partial = 8192;
	in.pages.stranded_bytes = 4 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,fragmentation");
	in.pages.stranded_bytes = 4 * MIB - 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion");
	/* And at a quarter of the process's memory it is primary. */
	in.pages.stranded_bytes = 2 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "fragmentation,exhaustion");
	in.pages.stranded_bytes = 2 * GIB - 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,fragmentation");

	/* Exhaustion beside another verdict: the process's own memory exactly
	 * the shortfall applies. 1 GiB of its own, 9 GiB another's, 7 GiB asked
	 * with 6 GiB free — all it could have (not never_fits). */
	st = device(6 * GIB);
	st.have_others = true;
	st.others_why = NULL;
	st.nothers = 1;
	st.others_bytes = 9 * GIB;
	in = input(&st, 7 * GIB, 1 * GIB);
	gmt__diagnose(&in, &d);
	CHECK_U64(d.shortfall, 1 * GIB);
	CHECK_U64(d.capacity, 7 * GIB);
	CHECK_STR(names(&d), "other_processes,exhaustion");
}

/* Five causes that each alone would have made room: 15 GiB used of 16,
 * 4 GiB live of this process's, pools reserving 6 GiB (5 unused), 3 GiB of
 * two other processes, 2 GiB nobody tracked; 1.5 GiB stranded in partly
 * used pages. 2 GiB asked: 1 GiB short. */
static struct gmt__diag_input five_causes(struct gmt__device_state *st)
{
	struct gmt__diag_input in;

	*st = device(1 * GIB);
	st->pool_reserved = 6 * GIB;
	st->pool_used = 1 * GIB;
	st->have_others = true;
	st->others_why = NULL;
	st->nothers = 2;
	st->others_bytes = 3 * GIB;
	in = input(st, 2 * GIB, 4 * GIB);
	in.pages.partial = 3000;
	in.pages.stranded_bytes = 3 * GIB / 2;
	return in;
}

/* The largest cause primary, the others after it largest first, each with
 * its own bytes. */
static void test_order(void)
{
	struct gmt__device_state st;
	struct gmt__diag_input in = five_causes(&st);
	struct gmt__diagnosis d;

	gmt__diagnose(&in, &d);
	CHECK_U64(d.shortfall, 1 * GIB);
	CHECK_U64(d.untracked, 2 * GIB);
	CHECK_STR(names(&d), "pool_reservation,exhaustion,other_processes,untracked,fragmentation");
	CHECK_INT(d.nverdicts, 5);
	CHECK_U64(d.v[0].bytes, 5 * GIB);
	CHECK_U64(d.v[1].bytes, 4 * GIB);
	CHECK_U64(d.v[2].bytes, 3 * GIB);
	CHECK_U64(d.v[3].bytes, 2 * GIB);
	CHECK_U64(d.v[4].bytes, 3 * GIB / 2);
}

static void test_granularity(void)
{
	struct gmt__device_state st = device(2 * MIB);
	struct gmt__diag_input in = input(&st, 1, 15 * GIB);
	struct gmt__diagnosis d;

	/* One byte needs a whole page; a page is free: not an exhaustion. */
	gmt__diagnose(&in, &d);
	CHECK_U64(d.needed, 2 * MIB);
	CHECK_STR(names(&d), "fragmentation");
	in.requested = 2 * MIB + 1;
	gmt__diagnose(&in, &d);
	CHECK_U64(d.needed, 4 * MIB);
	CHECK_U64(d.shortfall, 2 * MIB);
}

static void test_human(void)
{
	char buf[32];

	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), 0), "0 B");
	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), 1023), "1023 B");
	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), 1536), "1.50 KiB");
	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), 64 * MIB), "64.0 MiB");
	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), 256 * MIB), "256 MiB");
	CHECK_STR(gmt__human_bytes(buf, sizeof(buf), ~0ull), "16.0 EiB");
}


/* Each remedy where its numbers support it, with them in its text, and not
 * where they do not. */
static void test_remedies_steps(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	/* Exhaustion, no steps, no site: nothing to offer. */
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");

	/* The step holds 4 GiB of the 15: a batch of 1/2 leaves room for the
	 * 1 GiB short (k >= 4 / (4 - 1) rounds up to 2). */
	in.step_known = true;
	in.step = 7;
	in.steps = 7;
	in.step_live_bytes = 4 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "smaller_batch,checkpointing");
	CHECK_U64(d.remedies[0].bytes, 4 * GIB);
	CHECK_INT(d.remedies[0].verdict, GMT_VERDICT_EXHAUSTION);
	CHECK(remedy_rests_on(&d.remedies[0], "step_live_bytes"));
	CHECK(strstr(d.remedies[0].text, "since the program marked step 7 and still live is 4.00 GiB (26% of") != NULL);
	CHECK(strstr(d.remedies[0].text, "a batch of 1/2 keeps about 2.00 GiB and leaves room for the 1.00 GiB") != NULL);
	CHECK(strstr(d.remedies[1].text, "the 4.00 GiB allocated since step 7") != NULL);

	/* 1.5 GiB of step memory against 1 GiB short: 1/3 of the batch; 1.75
	 * GiB: 1/3 too (1/2 would keep 896 MiB, less than the 1 GiB needed). */
	in.step_live_bytes = 3 * GIB / 2;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "a batch of 1/3 keeps about 512 MiB") != NULL);
	in.step_live_bytes = 7 * GIB / 4;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "a batch of 1/3 keeps about 597 MiB") != NULL);

	/* No more than the shortfall: a smaller batch cannot make room. */
	in.step_live_bytes = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");
	in.step_live_bytes = 4 * GIB;
	in.step_known = false;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");

	/* One stack holds 6 GiB: it alone covers the shortfall. */
	in.largest_stack = 9;
	in.largest_stack_bytes = 6 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "shrink_largest_site");
	CHECK_INT(d.remedies[0].stack, 9);
	CHECK(strstr(d.remedies[0].text, "it holds 6.00 GiB live (40% of this process's on the device), more than the "
					 "1.00 GiB the request fell short") != NULL);
	/* Exactly the shortfall covers it; a byte less does not. */
	in.largest_stack_bytes = 1 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "shrink_largest_site");
	in.largest_stack_bytes = 1 * GIB - 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");

	/* 2 MiB short: a stack of 64 MiB is under one percent of the 15 GiB,
	 * said as 1%, not 0%. */
	in.requested = 1 * GIB + 2 * MIB;
	in.largest_stack_bytes = 64 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "shrink_largest_site");
	CHECK(strstr(d.remedies[0].text, "it holds 64.0 MiB live (1% of this process's on the device)") != NULL);

	/* Pools reserving less than the shortfall: no pool verdict, no trim. */
	in.requested = 2 * GIB;
	in.largest_stack = 0;
	st.pool_reserved = 512 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion");
	CHECK_STR(remedies(&d), "");
}

static void test_remedies_verdicts(void)
{
	struct gmt__device_state st = device(16 * GIB);
	struct gmt__diag_input in = input(&st, 40 * GIB, 0);
	struct gmt__diagnosis d;

	/* never_fits: the request against all the process could have. */
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "split_request");
	CHECK_U64(d.remedies[0].bytes, 40 * GIB);
	CHECK(strstr(d.remedies[0].text, "the request (40.0 GiB) is larger than the 16.0 GiB this process could ever "
					 "have of the device, so a batch of at most 40% of this one, gradient "
					 "accumulation over 3 or more micro-batches") != NULL);

	/* Allocator fragmentation in PyTorch's segments: expandable segments,
	 * unless they are on already or the framework is another. */
	st = device(1 * GIB);
	in = input(&st, 20 * MIB, 15 * GIB);
	in.fw_known = in.fw_largest_known = in.fw_torch = true;
	in.fw_expandable = 0;
	in.fw_requested = 2 * GIB;
	in.fw_reserved_unallocated = 3 * GIB;
	in.fw_largest_free = 512 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "expandable_segments");
	CHECK(remedy_rests_on(&d.remedies[0], "largest_free_block_bytes"));
	CHECK(strstr(d.remedies[0].text, "PyTorch holds 3.00 GiB free inside its segments, more than the 2.00 GiB it "
					 "needed, but its largest free block is 512 MiB") != NULL);
	in.fw_expandable = -1; /* not known: offered */
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "expandable_segments");
	in.fw_expandable = 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");
	in.fw_expandable = -1;

	/* The replay of the run (analyze/replay.h): where it serves the
	 * request the remedy cites it; where it does not, no remedy and the
	 * verdict says why; where it could not answer, as without it. */
	{
		struct gmt__rp_expandable rp = { .replayed = true, .fits = true, .peak_reserved = 920 * MIB,
						 .device_bytes = 1 * GIB, .request_no = 11, .request_size = 2 * GIB };

		in.replay = &rp;
		gmt__diagnose(&in, &d);
		CHECK_STR(remedies(&d), "expandable_segments");
		CHECK(remedy_rests_on(&d.remedies[0], "replay_peak_reserved_bytes") &&
		      remedy_rests_on(&d.remedies[0], "replay_device_bytes"));
		CHECK(strstr(d.remedies[0].text, "between blocks (replayed: fits, peak reserved 920 MiB of 1.00 GiB)") !=
		      NULL);
		CHECK(strstr(d.v[0].detail, "replayed") == NULL);
		rp.fits = false;
		rp.failed = true;
		rp.fail_no = 11;
		rp.fail_size = 2 * GIB;
		rp.fail_reserved = 900 * MIB;
		gmt__diagnose(&in, &d);
		CHECK_STR(remedies(&d), "");
		CHECK_STR(gmt__verdict_name(d.primary), "allocator_fragmentation");
		CHECK(strstr(d.v[0].detail, "its segments are fragmented; replayed with expandable segments it would "
					    "not have helped: the request still fails, 900 MiB reserved of the 1.00 GiB "
					    "PyTorch could hold") != NULL);
		CHECK(strstr(d.summary, "would not have helped") != NULL);
		CHECK(rests_on(&d.v[0], "replay_fits"));
		rp.fail_no = 7;
		rp.fail_size = 64 * MIB;
		gmt__diagnose(&in, &d);
		CHECK(strstr(d.v[0].detail, "it would not have helped: request #7 (64.0 MiB) fails before it") != NULL);
		rp.fail_no = 0;
		gmt__diagnose(&in, &d);
		CHECK(strstr(d.v[0].detail, "a tensor live before the history (64.0 MiB) does not fit") != NULL);
		rp.replayed = false;
		gmt__diagnose(&in, &d);
		CHECK_STR(remedies(&d), "expandable_segments");
		CHECK(strstr(d.remedies[0].text, "replayed") == NULL && strstr(d.v[0].detail, "replayed") == NULL);
		in.replay = NULL;
	}
	in.fw_torch = false;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");

	/* Pools, stranded pages and other processes: each verdict's bytes. */
	in = five_causes(&st);
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "trim_pools,large_blocks_first,other_device");
	CHECK(strstr(d.remedies[0].text, "the stream-ordered pools hold 5.00 GiB reserved and unused, more than the "
					 "1.00 GiB the request fell short") != NULL);
	CHECK(strstr(d.remedies[1].text, "1.50 GiB lie unused in 3000 partly used pages of 2.00 MiB") != NULL);
	CHECK(strstr(d.remedies[2].text, "2 other processes hold 3.00 GiB of this device") != NULL);
}

static void test_remedies_growth(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	in.growth_sites = 2;
	in.growth_bytes = 12 * GIB;
	in.growth_top_stack = 5;
	in.growth_top_bytes = 10 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "growth,exhaustion");
	CHECK_STR(remedies(&d), "free_growing_site");
	CHECK_INT(d.remedies[0].stack, 5);
	/* C's words: a native site, no framework. */
	CHECK(strstr(d.remedies[0].text, "free what this site allocates once it is done with it — each buffer it "
					 "keeps across iterations (it grew by 10.0 GiB while the program ran)") != NULL);
	CHECK(strstr(d.remedies[0].text, "torch") == NULL && strstr(d.remedies[0].text, "tensor") == NULL);

	/* A Python line (CuPy, numba): the references that keep its arrays. */
	in.growth_top_python = true;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "drop the references that keep what this line allocates alive") != NULL);
	CHECK(strstr(d.remedies[0].text, "torch") == NULL);

	/* With steps: the gain over whole steps, per step. The step's own
	 * memory is no remedy beside a leak. A PyTorch tensor's line: the words
	 * of what PyTorch users keep by mistake. */
	in.step_known = true;
	in.step = 40;
	in.step_live_bytes = 4 * GIB;
	in.growth_top_step_bytes = 9 * GIB;
	in.growth_top_steps = 36;
	in.fw_torch = true;
	in.growth_top_tensor = true;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "free_growing_site");
	CHECK(strstr(d.remedies[0].text, "stop keeping what this line allocates across steps (256 MiB a step over 36 "
					 "whole steps): a tensor kept across steps keeps its graph too, "
					 "so keep `loss.item()` or `loss.detach()`") != NULL);
	CHECK(strstr(d.remedies[0].text, "empty_cache") == NULL);

	/* No steps: evaluation first (torch.no_grad()). */
	in.growth_top_steps = 0;
	in.growth_top_step_bytes = 0;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "stop keeping what this line allocates (it grew by 10.0 GiB while the "
					 "program ran): if it runs the model for evaluation, wrap it in "
					 "`with torch.no_grad():`") != NULL);

	/* PyTorch's tensors without lines (stack 0): still a remedy, which
	 * says how to name the line. */
	in.growth_top_stack = 0;
	in.growth_top_unlined = true;
	in.growth_top_label = "PyTorch's tensors, their lines not recorded (GPUMEMTRACE_TORCH_HISTORY)";
	in.growth_sites = 1;
	in.growth_top_steps = 36;
	in.growth_top_step_bytes = 9 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "growth,exhaustion");
	CHECK(strstr(d.v[0].detail, "a leak suspect): PyTorch's tensors, their lines not recorded") != NULL);
	CHECK_STR(remedies(&d), "free_growing_site");
	CHECK_INT(d.remedies[0].stack, 0);
	CHECK(strstr(d.remedies[0].text, "run again with GPUMEMTRACE_TORCH_HISTORY=alloc (the default) to name it "
					 "(256 MiB a step over 36 whole steps)") != NULL);
	/* The same in a run that recorded lines for other tensors: made where
	 * no Python frame was (the backward), not a setting to change. */
	in.tensors_lined = true;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "PyTorch recorded no Python line for them (made in autograd's backward") !=
	      NULL);
	CHECK(strstr(d.remedies[0].text, "GPUMEMTRACE_TORCH_HISTORY") == NULL);
	in.tensors_lined = false;
	/* Stack 0 of the driver (no stack recorded): nothing to name. */
	in.growth_top_unlined = false;
	in.growth_top_label = NULL;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "");
}

/* With the framework's tensors known, a growth that covers the shortfall is
 * the verdict even when the request met the allocator's fragmentation,
 * which is listed beside it; without growth, or with the tensors unknown,
 * fragmentation stays first. */
static void test_tensor_growth_first(void)
{
	struct gmt__device_state st = device(0);
	struct gmt__diag_input in = input(&st, 40 * MIB, 16 * GIB);
	struct gmt__diagnosis d;

	in.fw_known = in.fw_largest_known = in.fw_torch = true;
	in.fw_name = "torch";
	in.fw_expandable = 0;
	in.fw_requested = 40 * MIB;
	in.fw_reserved_unallocated = 688 * MIB;
	in.fw_largest_free = 16 * MIB;
	in.fw_allocated = 15 * GIB;
	in.growth_sites = 1;
	in.growth_bytes = 912 * MIB;
	in.growth_top_stack = 0x40000003;
	in.growth_top_bytes = 912 * MIB;
	in.growth_top_step_bytes = 984 * MIB;
	in.growth_top_steps = 41;
	in.growth_top_label = "train_step (loss.py:16)";
	in.growth_top_tensor = in.growth_top_python = true;

	/* The tensors unknown: the allocator's fragmentation, as before. */
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	CHECK_STR(remedies(&d), "expandable_segments");

	in.tensors = true;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "growth,exhaustion,allocator_fragmentation");
	CHECK_U64(d.v[0].bytes, 912 * MIB);
	CHECK(strstr(d.v[0].detail, "1 allocation site kept growing and added 912 MiB (a leak suspect): train_step "
				    "(loss.py:16), 24.0 MiB a step over 41 steps; the request fell 40.0 MiB short") != NULL);
	CHECK(strstr(d.v[2].detail, "its largest free block is 16.0 MiB: its segments are fragmented; without what "
				    "train_step (loss.py:16) kept (912 MiB), 1.56 GiB of them would be free") != NULL);
	CHECK(rests_on(&d.v[2], "growth_top_bytes"));
	CHECK_STR(remedies(&d), "free_growing_site");
	CHECK(strstr(d.remedies[0].text, "loss.item()") != NULL);

	/* A growth too small for the shortfall: the fragmentation stays first,
	 * and the growing site is no remedy. */
	in.growth_bytes = in.growth_top_bytes = 16 * MIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	CHECK_STR(remedies(&d), "expandable_segments");

	/* No growth: fragmentation, and its remedy. */
	in.growth_sites = 0;
	in.growth_bytes = in.growth_top_bytes = 0;
	in.growth_top_stack = 0;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "allocator_fragmentation");
	CHECK_STR(remedies(&d), "expandable_segments");
}

/* Exhaustion with the tensors of the step known: what the step's own
 * tensors hold against what earlier steps left. */
static void test_exhaustion_step_tensors(void)
{
	struct gmt__device_state st = device(100 * MIB);
	struct gmt__diag_input in = input(&st, 512 * MIB, 15 * GIB);
	struct gmt__diagnosis d;

	in.tensors = in.fw_known = in.fw_torch = true;
	in.fw_allocated = 14 * GIB;
	in.step_known = in.step_from_framework = in.step_tensors = true;
	in.step = 7;
	in.step_live_bytes = 10 * GIB;
	gmt__diagnose(&in, &d);
	CHECK_STR(names(&d), "exhaustion,untracked");
	CHECK(strstr(d.v[0].detail, "; of the framework's tensors, step 7's own hold 10.0 GiB and earlier steps left "
				    "4.00 GiB") != NULL);
	CHECK(rests_on(&d.v[0], "step_live_bytes"));
	CHECK_STR(remedies(&d), "smaller_batch,checkpointing,mixed_precision");
}

/* Mixed precision: PyTorch's step memory, half of which covers the
 * shortfall; said as a condition (element types are not known). */
static void test_remedies_mixed_precision(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	in.step_known = true;
	in.step = 3;
	in.step_live_bytes = 2 * GIB;
	/* A C program's step: no mixed precision. */
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "smaller_batch,checkpointing");
	in.fw_torch = in.fw_known = true;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "smaller_batch,checkpointing,mixed_precision");
	CHECK_U64(d.remedies[2].bytes, 1 * GIB);
	CHECK(remedy_rests_on(&d.remedies[2], "step_live_bytes"));
	CHECK(strstr(d.remedies[2].text, "mixed precision, if the step runs in float32: under `torch.autocast(") != NULL);
	CHECK(strstr(d.remedies[2].text, "half of the 2.00 GiB allocated since step 3 and still live is 1.00 GiB, "
					 "more than the 1.00 GiB the request fell short") != NULL);
	/* Half a byte short of the shortfall: not offered. */
	in.step_live_bytes = 2 * GIB - 2;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "smaller_batch,checkpointing");
}

/* The largest site's memory all allocated before the first step: the
 * program's set-up, in its language; unknown or younger: the plain words. */
static void test_remedies_setup(void)
{
	struct gmt__device_state st = device(1 * GIB);
	struct gmt__diag_input in = input(&st, 2 * GIB, 15 * GIB);
	struct gmt__diagnosis d;

	in.largest_stack = 9;
	in.largest_stack_bytes = 6 * GIB;
	in.largest_before_steps = -1;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "shrink_largest_site");
	CHECK(strstr(d.remedies[0].text, "keep less of what this site allocates, or free it") != NULL);
	in.largest_before_steps = 0;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "keep less of what this site allocates, or free it") != NULL);

	/* C: the program's buffers, no model, no torch. */
	in.largest_before_steps = 1;
	gmt__diagnose(&in, &d);
	CHECK_STR(remedies(&d), "shrink_largest_site");
	CHECK(remedy_rests_on(&d.remedies[0], "largest_stack_before_steps"));
	CHECK(strstr(d.remedies[0].text, "this site's buffers were all allocated before the program's first step and "
					 "stay live") != NULL);
	CHECK(strstr(d.remedies[0].text, "6.00 GiB (40% of this process's on the device), more than the 1.00 GiB") != NULL);
	CHECK(strstr(d.remedies[0].text, "keep less") == NULL);
	CHECK(strstr(d.remedies[0].text, "weights") == NULL);

	/* A Python line that is not the framework's tensors. */
	in.largest_python = true;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "what this line allocated was all made before the program's first step") != NULL);
	CHECK(strstr(d.remedies[0].text, "optimizer") == NULL);

	/* PyTorch's tensors: the model's weights and optimizer state. */
	in.fw_torch = in.fw_known = in.tensors = true;
	in.largest_stack = gmt__tensor_stack_id(4);
	gmt__diagnose(&in, &d);
	CHECK_INT(d.remedies[0].stack, gmt__tensor_stack_id(4));
	CHECK(strstr(d.remedies[0].text, "this line's tensors were all made before the first step and stay live — the "
					 "model's weights, buffers or optimizer state: 6.00 GiB") != NULL);
	CHECK(strstr(d.remedies[0].text, "bfloat16 weights if they are float32") != NULL);
	CHECK(strstr(d.remedies[0].text, "FSDP") != NULL);
	/* A driver stack of a PyTorch process (not a tensor's): the Python words. */
	in.largest_stack = 9;
	gmt__diagnose(&in, &d);
	CHECK(strstr(d.remedies[0].text, "what this line allocated was all made before") != NULL);
}

int main(void)
{
	test_exhaustion();
	test_never_fits();
	test_cache_released();
	test_allocator_fragmentation();
	test_tensor_growth_first();
	test_exhaustion_step_tensors();
	test_framework_limit();
	test_fragmentation();
	test_pool();
	test_others();
	test_growth();
	test_edges();
	test_order();
	test_granularity();
	test_human();
	test_remedies_steps();
	test_remedies_verdicts();
	test_remedies_growth();
	test_remedies_mixed_precision();
	test_remedies_setup();
	printf("diagnose: %d failed\n", check_failed);
	return check_failed != 0;
}
