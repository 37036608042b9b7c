/* The replay (src/analyze/replay.c) on made-up snapshots: each history is
 * what PyTorch's caching allocator records for the requests beside it, its
 * segment events derived by hand from the rules (c10/cuda/
 * CUDACachingAllocator.cpp) in the comments; then the same histories edited
 * so that they no longer are, and inputs that are no snapshot. */
#define _GNU_SOURCE
#include "analyze/replay.h"

#include "../output/check.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)

#define S1 0x10000000ull
#define S2 0x20000000ull
#define S3 0x30000000ull

struct ev {
	const char *action;
	uint64_t addr, size;
};

struct seg {
	uint64_t addr, size;
	/* its blocks: address, size, active */
	struct {
		uint64_t addr, size;
		bool active;
	} blocks[6];
};

/* A snapshot of PyTorch on device 0 under the settings conf: its history,
 * segments, reserved bytes and the device's free bytes (at its
 * out-of-memory when oom, else at the snapshot). */
static json_t *snapshot_conf(const struct ev *ev, size_t nev, bool complete, const struct seg *segs, size_t nseg,
			     uint64_t free_bytes, bool oom, const char *conf)
{
	bool expandable = strstr(conf, "expandable_segments:True") != NULL;
	json_t *events = json_array(), *segments = json_array();
	uint64_t reserved = 0, allocated = 0;

	for (size_t i = 0; i < nev; i++)
		json_array_append_new(events, json_pack("[sIIi]", ev[i].action, (json_int_t)ev[i].addr,
							(json_int_t)ev[i].size, 0));
	for (size_t i = 0; i < nseg; i++) {
		json_t *blocks = json_array();

		for (size_t k = 0; k < 6 && segs[i].blocks[k].size; k++) {
			allocated += segs[i].blocks[k].active ? segs[i].blocks[k].size : 0;
			json_array_append_new(blocks, json_pack("{sIsIsIss}", "address", (json_int_t)segs[i].blocks[k].addr,
								"size", (json_int_t)segs[i].blocks[k].size,
								"requested_size", (json_int_t)segs[i].blocks[k].size,
								"state", segs[i].blocks[k].active ? "active_allocated" : "inactive"));
		}
		json_array_append_new(segments, json_pack("{sisIsIsisssbso}", "device", 0, "address", (json_int_t)segs[i].addr,
							  "total_size", (json_int_t)segs[i].size, "stream", 0,
							  "segment_type", segs[i].size == 2 * MiB ? "small" : "large",
							  "is_expandable", expandable, "blocks", blocks));
		reserved += segs[i].size;
	}
	/* PyTorch's observer tells the free bytes at an out-of-memory; an exit
	 * snapshot has the driver's (as an api one would). */
	return json_pack("{sssisis[{sisIso}]s{sssssssos[{sisIsI}]sosssss[{sisbso}]}}",
			 "format", "gpumemtrace-snapshot", "version", 1, "minor", 18,
			 "devices", "index", 0, "total_bytes", (json_int_t)(reserved + free_bytes + 300 * MiB), "free_bytes",
			 oom ? json_null() : json_integer((json_int_t)free_bytes),
			 "framework", "name", "torch", "version", "2.5.1", "reason", oom ? "oom" : "exit",
			 "oom", oom ? json_pack("{sisI}", "device", 0, "device_free_bytes", (json_int_t)free_bytes) : json_null(),
			 "devices", "device", 0, "reserved_bytes", (json_int_t)reserved, "allocated_bytes",
			 (json_int_t)allocated,
			 "segments", segments, "alloc_conf", conf, "alloc_conf_from", "pytorch",
			 "allocator_history", "device", 0, "complete", complete, "events", events);
}

static json_t *snapshot(const struct ev *ev, size_t nev, bool complete, const struct seg *segs, size_t nseg,
			uint64_t free_bytes, bool oom)
{
	return snapshot_conf(ev, nev, complete, segs, nseg, free_bytes, oom, "");
}

static struct gmt__rp_input read_ok(json_t *doc)
{
	struct gmt__rp_input in;
	char err[256] = "";

	if (doc == NULL) {
		fprintf(stderr, "the made-up snapshot did not pack\n");
		exit(1);
	}
	CHECK_INT(gmt__rp_read(doc, &in, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "read: %s\n", err);
	json_decref(doc);
	return in;
}

static struct gmt__rp_result replay(const struct gmt__rp_input *in, const char *conf, bool own, uint64_t limit)
{
	struct gmt__am_config c;
	struct gmt__rp_result r;
	char err[256] = "";

	CHECK_INT(gmt__am_config_parse(conf, &c, err, sizeof(err)), 0);
	CHECK_INT(gmt__rp_run(in, &c, own, limit, &r, err, sizeof(err)), 0);
	if (err[0])
		fprintf(stderr, "replay: %s\n", err);
	return r;
}

static void check_faithful(const char *what, const struct gmt__rp_result *r, size_t segment_events)
{
	if (!r->faithful)
		fprintf(stderr, "%s: not faithful: %s\n", what, r->diverged);
	CHECK(r->faithful);
	CHECK_U64(r->segment_events, segment_events);
}

/* ---- a fragmented device: three 30 MiB segments, one freed, 50 MiB asked ---------------- */

/* Device bytes 100 MiB. Each 30 MiB request (>= 10 MiB) takes a segment of
 * its own size rounded up to 2 MiB: 30 MiB, whole (nothing left to split).
 * The fourth, 50 MiB: no cached block holds it; a new segment would make
 * 140 MiB > 100: the cache goes back (S2, whole: 60 MiB), 110 MiB > 100
 * still: out of memory, with 40 MiB free on the device. */
static const struct ev frag[] = {
	{ "segment_alloc", S1, 30 * MiB }, { "alloc", S1, 30 * MiB },
	{ "segment_alloc", S2, 30 * MiB }, { "alloc", S2, 30 * MiB },
	{ "segment_alloc", S3, 30 * MiB }, { "alloc", S3, 30 * MiB },
	{ "free_requested", S2, 30 * MiB }, { "free_completed", S2, 30 * MiB },
	{ "segment_free", S2, 30 * MiB }, { "oom", 40 * MiB, 50 * MiB },
};
static const struct seg frag_segs[] = {
	{ S1, 30 * MiB, { { S1, 30 * MiB, true } } },
	{ S3, 30 * MiB, { { S3, 30 * MiB, true } } },
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_faithful(void)
{
	struct gmt__rp_input in = read_ok(snapshot(frag, N(frag), true, frag_segs, N(frag_segs), 40 * MiB, true));
	struct gmt__rp_result r;

	CHECK(in.device_bytes_known);
	CHECK_U64(in.device_bytes, 100 * MiB);
	CHECK_STR(in.conf, "");
	r = replay(&in, "", true, in.device_bytes);
	check_faithful("fragmented", &r, 4);
	CHECK_STR(r.assumed, "");
	CHECK_U64(r.peak_reserved, 90 * MiB);
	CHECK(r.has_request && r.request_reached && !r.request_fits);
	CHECK_U64(r.request_no, 4);
	CHECK_U64(r.request_size, 50 * MiB);
	/* asked with 90 MiB reserved, 60 MiB of it allocated */
	CHECK_U64(r.unallocated_at_request, 30 * MiB);
	CHECK(r.failed && r.fail_is_request);
	CHECK_U64(r.fail_no, 4);
	CHECK_U64(r.fail_reserved, 60 * MiB);

	/* Without the device's free bytes (an exit snapshot's) the failure
	 * cannot be reproduced without a limit; with the run's, it is. */
	in.device_bytes_known = false;
	r = replay(&in, "", true, GMT_AM_UNLIMITED);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at request #4 (52428800 bytes): the run failed it, the replay serves it");
	r = replay(&in, "", true, 100 * MiB);
	check_faithful("fragmented, device bytes given", &r, 4);
	in.device_bytes_known = true;

	/* On 130 MiB the run is not reproduced: its failure would not be. */
	r = replay(&in, "", true, 130 * MiB);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at request #4 (52428800 bytes): the run failed it, the replay serves it");
	/* On 130 MiB: the release leaves 60 MiB, 60 + 50 fits; peak 110 MiB. */
	r = replay(&in, "", false, 130 * MiB);
	CHECK(r.request_reached && r.request_fits && !r.failed);
	CHECK_U64(r.peak_reserved, 110 * MiB);
	CHECK_U64(r.requests, 4);
	gmt__rp_input_free(&in);
}

/* The same history edited: a segment of another size, a release the run
 * never made, a tensor at another place. Each is not faithful, and says
 * where. */
static void test_diverging(void)
{
	struct ev edited[N(frag)];
	struct gmt__rp_input in;
	struct gmt__rp_result r;

	memcpy(edited, frag, sizeof(frag));
	edited[2].size = 32 * MiB;
	in = read_ok(snapshot(edited, N(edited), true, frag_segs, N(frag_segs), 40 * MiB, true));
	r = replay(&in, "", true, in.device_bytes);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at request #2 (31457280 bytes): the run did segment_alloc of 33554432 bytes, the "
			      "replay segment_alloc of 31457280 bytes (after 1 of its segment events matched)");
	gmt__rp_input_free(&in);

	/* no release before the failure: the model's cudaFree of S2 is its own */
	in = read_ok(snapshot((const struct ev[]){ frag[0], frag[1], frag[2], frag[3], frag[4], frag[5], frag[6],
						   frag[7], frag[9] },
			      9, true, frag_segs, N(frag_segs), 40 * MiB, true));
	r = replay(&in, "", true, in.device_bytes);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at request #4 (52428800 bytes): the run did no segment event, the replay "
			      "segment_free of 31457280 bytes (after 3 of its segment events matched)");
	gmt__rp_input_free(&in);

	memcpy(edited, frag, sizeof(frag));
	edited[3].addr = S2 + 512;
	edited[6].addr = edited[7].addr = S2 + 512;
	in = read_ok(snapshot(edited, N(edited), true, frag_segs, N(frag_segs), 40 * MiB, true));
	r = replay(&in, "", true, in.device_bytes);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at request #2 (31457280 bytes): the run placed it at 0x20000200, the replay at "
			      "0x20000000");
	gmt__rp_input_free(&in);

	/* every event as the run's, but the snapshot's S3 holds a 20 MiB
	 * block (PyTorch would not have split 30 MiB off a 30 MiB segment) */
	in = read_ok(snapshot(frag, N(frag), true,
			      (const struct seg[]){ frag_segs[0], { S3, 30 * MiB, { { S3, 20 * MiB, true },
										     { S3 + 20 * MiB, 10 * MiB, false } } } },
			      2, 40 * MiB, true));
	r = replay(&in, "", true, in.device_bytes);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at the snapshot: the run had 62914560 bytes reserved, 52428800 allocated; the "
			      "replay 62914560, 62914560");
	gmt__rp_input_free(&in);
}

/* ---- a history that starts late, and an empty_cache() ----------------------------------- */

/* Before the history: S1 (20 MiB) holds t0, 9 MiB at S1, the 11 MiB after
 * it cached. #1, 9 MiB: the cached 11 MiB, split (2 MiB > 1 MiB left).
 * t0 freed. #2, 12 MiB: no cached block holds it (9 and 2 MiB): a 12 MiB
 * segment S2, freed again, and the program's empty_cache() returns it (S1
 * is split: it stays). #3, 4 MiB: best fit is t0's 9 MiB, split (5 MiB
 * left). The exit snapshot: S1 with 4 MiB at S1 and 9 MiB at S1 + 9 MiB
 * allocated; 80 MiB free on the device. */
static const struct ev late[] = {
	{ "alloc", S1 + 9 * MiB, 9 * MiB },
	{ "free_requested", S1, 9 * MiB }, { "free_completed", S1, 9 * MiB },
	{ "segment_alloc", S2, 12 * MiB }, { "alloc", S2, 12 * MiB },
	{ "free_requested", S2, 12 * MiB }, { "free_completed", S2, 12 * MiB },
	{ "segment_free", S2, 12 * MiB },
	{ "alloc", S1, 4 * MiB },
};
static const struct seg late_segs[] = {
	{ S1, 20 * MiB, { { S1, 4 * MiB, true }, { S1 + 4 * MiB, 5 * MiB, false }, { S1 + 9 * MiB, 9 * MiB, true },
			  { S1 + 18 * MiB, 2 * MiB, false } } },
};

static void test_late_start(void)
{
	struct gmt__rp_input in = read_ok(snapshot(late, N(late), false, late_segs, N(late_segs), 80 * MiB, false));
	struct gmt__rp_result r;

	CHECK(!in.complete);
	CHECK_U64(in.device_bytes, 100 * MiB);
	CHECK_STR(in.device_rule, "PyTorch's reserved bytes and the device's free bytes at the snapshot");
	r = replay(&in, "", true, in.device_bytes);
	check_faithful("late start", &r, 2);
	CHECK_STR(r.assumed, "the history does not reach back to PyTorch's start: its first event found 1 segments "
			     "(20971520 bytes) and 1 tensors (9437184 bytes), rebuilt from the snapshot with the "
			     "history undone (a tensor freed in it sized as asked)");
	CHECK(!r.has_request && !r.failed);
	CHECK_U64(r.peak_reserved, 32 * MiB);
	CHECK_U64(r.requests, 3);

	/* Under other settings the tensor live then is allocated first. */
	r = replay(&in, "max_split_size_mb:20", false, in.device_bytes);
	CHECK(!r.failed);
	CHECK(strstr(r.assumed, "the 1 tensors (9437184 bytes) live at its first event were allocated first") != NULL);
	gmt__rp_input_free(&in);
}

/* An exit snapshot: the driver was not asked (null), PyTorch was told at
 * its hand-over (minor 16): 70 MiB free of 400; without that, not known. */
static void test_handed_over_device(void)
{
	json_t *doc = snapshot(late, N(late), false, late_segs, N(late_segs), 80 * MiB, false);
	json_t *drv = json_array_get(json_object_get(doc, "devices"), 0);
	json_t *fwd = json_array_get(json_object_get(json_object_get(doc, "framework"), "devices"), 0);
	struct gmt__rp_input in;

	json_object_set_new(drv, "free_bytes", json_null());
	json_object_set_new(drv, "total_bytes", json_null());
	json_object_set_new(fwd, "device_free_bytes", json_integer(70 * MiB));
	json_object_set_new(fwd, "device_total_bytes", json_integer(400 * MiB));
	json_incref(doc);
	in = read_ok(doc);
	CHECK(in.device_bytes_known);
	CHECK_U64(in.device_bytes, 90 * MiB);
	CHECK_U64(in.device_total, 400 * MiB);
	CHECK_STR(in.device_rule, "PyTorch's reserved bytes and the device's free bytes when it handed over its state");
	gmt__rp_input_free(&in);

	/* The driver's, where it was asked, come first. */
	json_object_set_new(drv, "free_bytes", json_integer(60 * MiB));
	json_object_set_new(drv, "total_bytes", json_integer(500 * MiB));
	json_incref(doc);
	in = read_ok(doc);
	CHECK_U64(in.device_bytes, 80 * MiB);
	CHECK_U64(in.device_total, 500 * MiB);
	gmt__rp_input_free(&in);

	json_object_set_new(drv, "free_bytes", json_null());
	json_object_set_new(drv, "total_bytes", json_null());
	json_object_del(fwd, "device_free_bytes");
	json_object_del(fwd, "device_total_bytes");
	in = read_ok(doc);
	CHECK(!in.device_bytes_known);
	CHECK_U64(in.device_total, 0);
	gmt__rp_input_free(&in);
}

/* ---- another setting that fails earlier ------------------------------------------------- */

/* Device bytes 90 MiB. 33 MiB takes a 34 MiB segment, whole (1 MiB left is
 * not split); two of them, 68 MiB; 40 MiB more is 108: out of memory. Under
 * roundup_power2_divisions:2, 33 MiB rounds to 48 MiB (the interval
 * 32-64 MiB in two steps of 16): the second request makes 96 > 90 and
 * fails first; the run's failing request is never reached. */
static void test_earlier_failure(void)
{
	static const struct ev ev[] = {
		{ "segment_alloc", S1, 34 * MiB }, { "alloc", S1, 33 * MiB },
		{ "segment_alloc", S2, 34 * MiB }, { "alloc", S2, 33 * MiB },
		{ "oom", 22 * MiB, 40 * MiB },
	};
	static const struct seg segs[] = {
		{ S1, 34 * MiB, { { S1, 34 * MiB, true } } },
		{ S2, 34 * MiB, { { S2, 34 * MiB, true } } },
	};
	struct gmt__rp_input in = read_ok(snapshot(ev, N(ev), true, segs, N(segs), 22 * MiB, true));
	struct gmt__rp_result r;

	r = replay(&in, "", true, in.device_bytes);
	check_faithful("earlier failure, own", &r, 2);
	CHECK(r.request_reached && !r.request_fits && r.fail_is_request);
	r = replay(&in, "roundup_power2_divisions:2", false, in.device_bytes);
	CHECK(r.has_request && !r.request_reached && r.failed && !r.fail_is_request);
	CHECK_U64(r.fail_no, 2);
	CHECK_U64(r.fail_size, 33 * MiB);
	CHECK_U64(r.fail_reserved, 48 * MiB);
	gmt__rp_input_free(&in);
}

/* ---- an empty_cache() the cache serves after ------------------------------------------- */

/* Device bytes 83 MiB. #1, 512 KiB: a small segment SS (2 MiB). #2, #3,
 * 40 MiB each: segments S1 and S2 (82 MiB reserved). #3 freed, then the
 * program's empty_cache() returns S2 (42). #4, 512 KiB: SS's free 1.5 MiB
 * serves it — PyTorch asks the driver nothing, so S2's free before it was
 * no release of #4's, though a new segment for #4 (2 MiB) would not have
 * fit beside the 82 MiB reserved before. #5, 60 MiB: a new segment makes
 * 102 MiB > 83, nothing idle to release: out of memory, 41 MiB free. */
static const struct ev served[] = {
	{ "segment_alloc", S3, 2 * MiB }, { "alloc", S3, 512 * 1024 },
	{ "segment_alloc", S1, 40 * MiB }, { "alloc", S1, 40 * MiB },
	{ "segment_alloc", S2, 40 * MiB }, { "alloc", S2, 40 * MiB },
	{ "free_requested", S2, 40 * MiB }, { "free_completed", S2, 40 * MiB },
	{ "segment_free", S2, 40 * MiB },
	{ "alloc", S3 + 512 * 1024, 512 * 1024 },
	{ "oom", 41 * MiB, 60 * MiB },
};
static const struct seg served_segs[] = {
	{ S3, 2 * MiB, { { S3, 512 * 1024, true }, { S3 + 512 * 1024, 512 * 1024, true },
			 { S3 + 1 * MiB, 1 * MiB, false } } },
	{ S1, 40 * MiB, { { S1, 40 * MiB, true } } },
};

static void test_empty_cache_served(void)
{
	struct gmt__rp_input in = read_ok(snapshot(served, N(served), true, served_segs, N(served_segs), 41 * MiB,
						  true));
	struct gmt__rp_result r;

	CHECK_U64(in.device_bytes, 83 * MiB);
	r = replay(&in, "", true, in.device_bytes);
	check_faithful("an empty_cache() the cache serves after", &r, 4);
	CHECK(r.request_reached && !r.request_fits);
	/* Under other settings the run's empty_cache() is the program's too:
	 * #5 is asked with SS's 1 MiB cached, not S2's 40 more. */
	r = replay(&in, "max_split_size_mb:200", false, in.device_bytes);
	CHECK(r.request_reached);
	CHECK_U64(r.unallocated_at_request, 1 * MiB);
	gmt__rp_input_free(&in);
}

/* Device bytes 100 MiB. #1, 20 MiB: a segment S1, freed; the program's
 * empty_cache() returns it. #2, 30 MiB: no cached block would have served
 * it, but a new segment beside S1 (50 MiB) fits: S1's free was no release
 * of #2's. #3, 80 MiB: 30 + 80 > 100, nothing idle: out of memory. */
static const struct ev emptied[] = {
	{ "segment_alloc", S1, 20 * MiB }, { "alloc", S1, 20 * MiB },
	{ "free_requested", S1, 20 * MiB }, { "free_completed", S1, 20 * MiB },
	{ "segment_free", S1, 20 * MiB },
	{ "segment_alloc", S2, 30 * MiB }, { "alloc", S2, 30 * MiB },
	{ "oom", 70 * MiB, 80 * MiB },
};
static const struct seg emptied_segs[] = {
	{ S2, 30 * MiB, { { S2, 30 * MiB, true } } },
};

static void test_empty_cache_unserved(void)
{
	struct gmt__rp_input in = read_ok(snapshot(emptied, N(emptied), true, emptied_segs, N(emptied_segs),
						  70 * MiB, true));
	struct gmt__rp_result r;

	r = replay(&in, "", true, in.device_bytes);
	check_faithful("an empty_cache() before a new segment that fits", &r, 3);
	gmt__rp_input_free(&in);
}

/* ---- the run's own settings with expandable segments ------------------------------------ */

/* Device bytes 100 MiB, pages of 20 MiB, every place from S1. #1, 30 MiB:
 * two pages [0, 40), 10 free after. #2, 30 MiB: the free 10 and one page
 * more, [30, 60). #3, 2 MiB: nothing free before the unmapped rest, one
 * page, [60, 62) used, 18 free (80 MiB reserved). #1 freed: [0, 30) free;
 * the program's empty_cache() unmaps its whole page [0, 20). #4, 35 MiB: no
 * free block holds it. Before any unmap, the lowest place was the free 18
 * at the end and one page more: 100 MiB, within the 100 — so PyTorch would
 * have unmapped nothing for #4, and the unmap before it was the program's,
 * though a segment of #4's size (36 MiB) beside the 80 reserved would not
 * have fit. After it, the unmapped [0, 20) with the free [20, 30) holds 30
 * only: #4 takes the page at the end, [62, 97); 80 MiB reserved. #5, 40
 * MiB: the free 3 at the end and two pages: 120 > 100, nothing whole to
 * unmap: out of memory, 20 MiB free. */
static const struct ev paged[] = {
	{ "segment_map", S1, 40 * MiB }, { "alloc", S1, 30 * MiB },
	{ "segment_map", S1 + 40 * MiB, 20 * MiB }, { "alloc", S1 + 30 * MiB, 30 * MiB },
	{ "segment_map", S1 + 60 * MiB, 20 * MiB }, { "alloc", S1 + 60 * MiB, 2 * MiB },
	{ "free_requested", S1, 30 * MiB }, { "free_completed", S1, 30 * MiB },
	{ "segment_unmap", S1, 20 * MiB },
	{ "segment_map", S1 + 80 * MiB, 20 * MiB }, { "alloc", S1 + 62 * MiB, 35 * MiB },
	{ "oom", 20 * MiB, 40 * MiB },
};
static const struct seg paged_segs[] = {
	{ S1 + 20 * MiB, 80 * MiB, { { S1 + 20 * MiB, 10 * MiB, false }, { S1 + 30 * MiB, 30 * MiB, true },
				     { S1 + 60 * MiB, 2 * MiB, true }, { S1 + 62 * MiB, 35 * MiB, true },
				     { S1 + 97 * MiB, 3 * MiB, false } } },
};

/* Device bytes 80 MiB. #1, 512 KiB: the small pool's reservation (at S3),
 * one 2 MiB page; freed. #2, 30 MiB: the large pool's (at S1), two pages;
 * freed. #3, 70 MiB: no cached block holds it; the free 40 and two pages
 * more make 82 > 80: the release unmaps both pools' pages (the large
 * first) and frees both reservations, nothing mapped being left; the retry
 * reserves anew, and the driver gives the freed address: four pages at
 * S1, 80 MiB. #4, 20 MiB: the free 10 after #3 and a page: 100 > 80,
 * nothing whole to unmap: out of memory, nothing free. */
static const struct ev again[] = {
	{ "segment_map", S3, 2 * MiB }, { "alloc", S3, 512 * 1024 },
	{ "free_requested", S3, 512 * 1024 }, { "free_completed", S3, 512 * 1024 },
	{ "segment_map", S1, 40 * MiB }, { "alloc", S1, 30 * MiB },
	{ "free_requested", S1, 30 * MiB }, { "free_completed", S1, 30 * MiB },
	{ "segment_unmap", S1, 40 * MiB }, { "segment_unmap", S3, 2 * MiB },
	{ "segment_map", S1, 80 * MiB }, { "alloc", S1, 70 * MiB },
	{ "oom", 0, 20 * MiB },
};
static const struct seg again_segs[] = {
	{ S1, 80 * MiB, { { S1, 70 * MiB, true }, { S1 + 70 * MiB, 10 * MiB, false } } },
};

static void test_own_expandable(void)
{
	struct gmt__rp_input in = read_ok(snapshot_conf(paged, N(paged), true, paged_segs, N(paged_segs), 20 * MiB,
						       true, "expandable_segments:True"));
	struct gmt__rp_result r;

	CHECK_U64(in.device_bytes, 100 * MiB);
	r = replay(&in, in.conf, true, in.device_bytes);
	check_faithful("an empty_cache() before a request that maps one page", &r, 5);
	CHECK(r.request_reached && !r.request_fits);
	CHECK_U64(r.peak_reserved, 80 * MiB);
	gmt__rp_input_free(&in);

	in = read_ok(snapshot_conf(again, N(again), true, again_segs, N(again_segs), 0, true,
				   "expandable_segments:True"));
	CHECK_U64(in.device_bytes, 80 * MiB);
	r = replay(&in, in.conf, true, in.device_bytes);
	check_faithful("a reservation a release frees, made again at its address", &r, 5);
	CHECK(r.request_reached && !r.request_fits);
	gmt__rp_input_free(&in);

}

/* ---- what the diagnosis asks: expandable segments ---------------------------------------- */

/* Device bytes 100 MiB. #1, 60 MiB: a segment S1 of its size, freed (cached).
 * #2-#5, 12 MiB each: split off S1's cached block in turn (a rest of more
 * than 1 MiB stays), at S1 + 0, 12, 24, 36; 12 MiB left at S1 + 48. #3 and
 * #5 freed: free [12, 24) and [36, 60) inside S1 — 36 MiB, the largest 24.
 * #6, 30 MiB: no free block holds it, a segment S2 (90 MiB reserved). #7,
 * 30 MiB: a new segment would make 120 MiB; nothing whole to release: out
 * of memory with 10 MiB free, 36 MiB free inside the segments. */
static const struct ev pieces[] = {
	{ "segment_alloc", S1, 60 * MiB }, { "alloc", S1, 60 * MiB },
	{ "free_requested", S1, 60 * MiB }, { "free_completed", S1, 60 * MiB },
	{ "alloc", S1, 12 * MiB }, { "alloc", S1 + 12 * MiB, 12 * MiB },
	{ "alloc", S1 + 24 * MiB, 12 * MiB }, { "alloc", S1 + 36 * MiB, 12 * MiB },
	{ "free_requested", S1 + 12 * MiB, 12 * MiB }, { "free_completed", S1 + 12 * MiB, 12 * MiB },
	{ "free_requested", S1 + 36 * MiB, 12 * MiB }, { "free_completed", S1 + 36 * MiB, 12 * MiB },
	{ "segment_alloc", S2, 30 * MiB }, { "alloc", S2, 30 * MiB },
	{ "oom", 10 * MiB, 30 * MiB },
};
static const struct seg pieces_segs[] = {
	{ S1, 60 * MiB, { { S1, 12 * MiB, true }, { S1 + 12 * MiB, 12 * MiB, false },
			  { S1 + 24 * MiB, 12 * MiB, true }, { S1 + 36 * MiB, 24 * MiB, false } } },
	{ S2, 30 * MiB, { { S2, 30 * MiB, true } } },
};

/* Under expandable segments: one segment of the large pool mapped in 20 MiB
 * pages at the lowest place where free and unmapped space hold the request,
 * any rest split off. pieces: #1 maps [0, 60), freed; #2-#5 at 0, 12, 24,
 * 36 as before; #3, #5 freed: [12, 24) and [36, 60) free. #6, 30 MiB: the
 * lowest place is 36 with the unmapped space after 60: one page more (80
 * mapped), at [36, 66). #7: [66, 80) free and one page more: 100 MiB, the
 * peak, within the 100 — it fits.
 *
 * frag: #1, 30 MiB: two pages (40), #2 at [30, 60) (60 mapped), #3 at
 * [60, 90) (100 mapped). #2 freed. #4, 50 MiB: the lowest place is the
 * free [90, 100) and two pages more: 140 > 100; the release unmaps the one
 * whole free page, [40, 60): 80 mapped, and two pages make 120 > 100: it
 * still fails, 80 MiB reserved. */
static void test_expandable_answer(void)
{
	struct gmt__rp_input in = read_ok(snapshot(pieces, N(pieces), true, pieces_segs, N(pieces_segs), 10 * MiB,
						  true));
	struct gmt__rp_expandable a;
	struct gmt__rp_result r;
	struct ev edited[N(frag)];
	char *conf;

	r = replay(&in, "", true, in.device_bytes);
	check_faithful("pieces", &r, 2);
	CHECK(r.request_reached && !r.request_fits);
	gmt__rp_try_expandable(&in, &a);
	if (!a.replayed)
		fprintf(stderr, "expandable: %s\n", a.why);
	CHECK(a.replayed && a.fits && !a.failed);
	CHECK_STR(a.setting, "expandable_segments:True");
	CHECK_U64(a.device_bytes, 100 * MiB);
	CHECK_U64(a.peak_reserved, 100 * MiB);
	CHECK_U64(a.request_no, 7);
	CHECK_U64(a.request_size, 30 * MiB);
	CHECK_STR(a.assumed, "");

	/* The run's own settings come with expandable segments: a memory
	 * fraction of 95 MiB of the 400 MiB device (the run peaked at 90 MiB
	 * reserved, its failure the same) leaves #7's second page out — with
	 * nothing whole to unmap it fails, where on the device bytes alone it
	 * fit. */
	free(in.conf);
	in.conf = strdup("per_process_memory_fraction:0.2375");
	r = replay(&in, in.conf, true, in.device_bytes);
	check_faithful("pieces, a memory fraction", &r, 2);
	gmt__rp_try_expandable(&in, &a);
	CHECK_STR(a.setting, "per_process_memory_fraction:0.2375,expandable_segments:True");
	CHECK(a.replayed && !a.fits && a.failed);
	CHECK_U64(a.fail_no, 7);
	CHECK_U64(a.peak_reserved, 80 * MiB);
	gmt__rp_input_free(&in);

	in = read_ok(snapshot(frag, N(frag), true, frag_segs, N(frag_segs), 40 * MiB, true));
	gmt__rp_try_expandable(&in, &a);
	CHECK(a.replayed && !a.fits && a.failed);
	CHECK_U64(a.fail_no, 4);
	CHECK_U64(a.fail_size, 50 * MiB);
	CHECK_U64(a.fail_reserved, 80 * MiB);
	CHECK_U64(a.peak_reserved, 100 * MiB);

	/* The run's own settings come with it; a replay under them that does
	 * not reproduce the run (on 130 MiB its failure would not be) answers
	 * nothing. */
	conf = in.conf;
	in.conf = (char *)"max_split_size_mb:200";
	in.device_bytes = 130 * MiB;
	gmt__rp_try_expandable(&in, &a);
	CHECK_STR(a.setting, "max_split_size_mb:200,expandable_segments:True");
	CHECK(!a.replayed);
	CHECK_STR(a.why, "the replay under the run's own settings is not faithful: at request #4 (52428800 bytes): "
			 "the run failed it, the replay serves it");
	in.device_bytes = 100 * MiB;

	/* Not asked of a run that had them; not answered without the device
	 * bytes. */
	in.conf = (char *)"expandable_segments:True";
	gmt__rp_try_expandable(&in, &a);
	CHECK(!a.replayed);
	CHECK_STR(a.why, "the run's own settings have expandable segments already");
	in.conf = conf;
	in.device_bytes_known = false;
	gmt__rp_try_expandable(&in, &a);
	CHECK(!a.replayed);
	CHECK_STR(a.why, "the device bytes of the run are not known");
	gmt__rp_input_free(&in);

	/* A history the model does not reproduce answers nothing. */
	memcpy(edited, frag, sizeof(frag));
	edited[2].size = 32 * MiB;
	in = read_ok(snapshot(edited, N(edited), true, frag_segs, N(frag_segs), 40 * MiB, true));
	gmt__rp_try_expandable(&in, &a);
	CHECK(!a.replayed);
	CHECK_STR(a.why, "the replay under the run's own settings is not faithful: at request #2 (31457280 bytes): "
			 "the run did segment_alloc of 33554432 bytes, the replay segment_alloc of 31457280 bytes "
			 "(after 1 of its segment events matched)");
	gmt__rp_input_free(&in);

	/* An exit snapshot's history holds no failing request. */
	in = read_ok(snapshot(late, N(late), false, late_segs, N(late_segs), 80 * MiB, false));
	gmt__rp_try_expandable(&in, &a);
	CHECK(!a.replayed);
	CHECK_STR(a.why, "PyTorch's history holds no failing request");
	gmt__rp_input_free(&in);
}

/* ---- the program's empty_cache() calls, as the bootstrap placed them --------------------- */

/* The calls placed in a snapshot's history (allocator_history[0].empty_cache). */
static json_t *with_calls(json_t *doc, json_t *places)
{
	json_object_set_new(json_array_get(json_object_get(json_object_get(doc, "framework"), "allocator_history"), 0),
			    "empty_cache", places);
	return doc;
}

/* Under expandable segments, device bytes 100 MiB, pages of 20 MiB. #1,
 * 15 MiB: one page [0, 20), 5 free after. #2, 4 MiB: the free 5 holds it,
 * [15, 19). #1 freed: [0, 15) free, no whole page. The program's
 * empty_cache() there unmaps nothing: the history has no trace of it. #3,
 * 18 MiB: no free block holds it; the free [19, 20) and one page more,
 * [19, 37): 40 MiB reserved.
 *
 * Under PyTorch's defaults: #1 a segment of 16 MiB (15 rounded up to 2
 * MiB), #2 one of 20 MiB (below 10 MiB), 36 reserved. #1 freed: its
 * segment cached whole; the call returns it: 20. #3 a segment of 18 MiB:
 * 38 MiB at the peak. Without the call the 16 MiB cached cannot hold #3,
 * and its segment comes beside it: 54 MiB. */
static const struct ev unseen[] = {
	{ "segment_map", S1, 20 * MiB }, { "alloc", S1, 15 * MiB },
	{ "alloc", S1 + 15 * MiB, 4 * MiB },
	{ "free_requested", S1, 15 * MiB }, { "free_completed", S1, 15 * MiB },
	{ "segment_map", S1 + 20 * MiB, 20 * MiB }, { "alloc", S1 + 19 * MiB, 18 * MiB },
};
static const struct seg unseen_segs[] = {
	{ S1, 40 * MiB, { { S1, 15 * MiB, false }, { S1 + 15 * MiB, 4 * MiB, true }, { S1 + 19 * MiB, 18 * MiB, true },
			  { S1 + 37 * MiB, 3 * MiB, false } } },
};

static void test_placed_calls(void)
{
	struct gmt__rp_input in;
	struct gmt__rp_result r;

	in = read_ok(with_calls(snapshot_conf(unseen, N(unseen), true, unseen_segs, N(unseen_segs), 60 * MiB, false,
					      "expandable_segments:True"),
				json_pack("[i]", 5)));
	CHECK_U64(in.ncalls, 1);
	CHECK_U64(in.device_bytes, 100 * MiB);
	r = replay(&in, in.conf, true, in.device_bytes);
	check_faithful("a call that unmapped nothing", &r, 2);
	CHECK_U64(r.peak_reserved, 40 * MiB);
	r = replay(&in, "", false, in.device_bytes);
	CHECK(!r.failed);
	CHECK_U64(r.peak_reserved, 38 * MiB);
	gmt__rp_input_free(&in);

	/* Not placed: the defaults keep the 16 MiB segment. */
	in = read_ok(snapshot_conf(unseen, N(unseen), true, unseen_segs, N(unseen_segs), 60 * MiB, false,
				   "expandable_segments:True"));
	CHECK_U64(in.ncalls, 0);
	r = replay(&in, "", false, in.device_bytes);
	CHECK_U64(r.peak_reserved, 54 * MiB);
	gmt__rp_input_free(&in);

	/* A call placed after the last event, and places out of range: the
	 * replay comes to the end with nothing more to release. */
	in = read_ok(with_calls(snapshot_conf(unseen, N(unseen), true, unseen_segs, N(unseen_segs), 60 * MiB, false,
					      "expandable_segments:True"),
				json_pack("[iiis]", 5, (int)N(unseen), (int)N(unseen) + 1, "x")));
	CHECK_U64(in.ncalls, 2);
	r = replay(&in, in.conf, true, in.device_bytes);
	check_faithful("a call at the end", &r, 2);
	gmt__rp_input_free(&in);

	/* pieces: S1 cached whole after #1's free; a call placed before #2
	 * would have returned it, and the run kept it: not faithful. */
	in = read_ok(with_calls(snapshot(pieces, N(pieces), true, pieces_segs, N(pieces_segs), 10 * MiB, true),
				json_pack("[i]", 4)));
	r = replay(&in, "", true, in.device_bytes);
	CHECK(!r.faithful);
	CHECK_STR(r.diverged, "at the program's empty_cache() before it: the run did no segment event, the replay "
			      "segment_free of 62914560 bytes (after 1 of its segment events matched)");
	gmt__rp_input_free(&in);
}

/* ---- from the bootstrap's hand-over ------------------------------------------------------ */

/* The tracer's way in: the framework's state and the driver's devices, the
 * history made from the hand-over's traces. */
static void test_from_framework(void)
{
	json_t *doc = snapshot(frag, N(frag), true, frag_segs, N(frag_segs), 40 * MiB, true);
	json_t *fw = json_object_get(doc, "framework"), *traces = json_array(), *handed, *history, *calls;
	const json_t *ev;
	struct gmt__rp_device dev = { .index = 0, .have_total = true, .total = 400 * MiB };
	struct gmt__rp_input in;
	char err[256] = "";
	size_t i;

	json_array_foreach(json_object_get(json_array_get(json_object_get(fw, "allocator_history"), 0), "events"), i,
			   ev) {
		/* [action, address, size, time_us, stack, stream] */
		json_array_append_new(traces, json_pack("[OOOiiO]", json_array_get(ev, 0), json_array_get(ev, 1),
							json_array_get(ev, 2), 1000 + (int)i, 0, json_array_get(ev, 3)));
	}
	json_array_insert_new(traces, 2, json_pack("[siiiii]", "no_such_action", 0, 0, 0, 0, 0));
	/* The calls' places among the events kept: the event left out moves
	 * those after it; one place once; one out of order or past the end
	 * left out. */
	handed = json_pack("[{sisbsos[iiiiii]}]", "device", 0, "complete", 1, "events", traces, "empty_cache", 1, 3, 2, 3,
			   (int)N(frag) + 1, (int)N(frag) + 2);
	history = gmt__rp_history(handed);
	calls = json_object_get(json_array_get(history, 0), "empty_cache");
	CHECK_INT((int)json_array_size(calls), 3);
	CHECK_INT((int)json_integer_value(json_array_get(calls, 0)), 1);
	CHECK_INT((int)json_integer_value(json_array_get(calls, 1)), 2);
	CHECK_INT((int)json_integer_value(json_array_get(calls, 2)), (int)N(frag));
	CHECK_INT(gmt__rp_read_framework(fw, history, &dev, 1, &in, err, sizeof(err)), 0);
	CHECK_U64(in.ncalls, 3);
	CHECK(in.called[1] && in.called[2] && in.called[N(frag)] && !in.called[0] && !in.called[3]);
	gmt__rp_input_free(&in);
	json_object_del(json_array_get(history, 0), "empty_cache");
	CHECK(json_equal(history, json_object_get(fw, "allocator_history")));
	CHECK_INT(gmt__rp_read_framework(fw, history, &dev, 1, &in, err, sizeof(err)), 0);
	CHECK_U64(in.nev, N(frag));
	CHECK_U64(in.device_total, 400 * MiB);
	CHECK_U64(in.device_bytes, 100 * MiB);
	gmt__rp_input_free(&in);
	json_decref(history);
	json_decref(handed);
	json_decref(doc);
}

/* ---- not a snapshot, no history --------------------------------------------------------- */

static void test_bad_input(void)
{
	struct gmt__rp_input in;
	char err[256];
	json_t *doc;

	doc = json_pack("{ss}", "format", "something-else");
	CHECK_INT(gmt__rp_read(doc, &in, err, sizeof(err)), -EINVAL);
	CHECK_STR(err, "not a gpumemtrace snapshot");
	json_decref(doc);

	doc = json_pack("{sss{ss}}", "format", "gpumemtrace-snapshot", "framework", "name", "cupy");
	CHECK_INT(gmt__rp_read(doc, &in, err, sizeof(err)), -ENOENT);
	CHECK_STR(err, "no PyTorch allocator history (framework.allocator_history, snapshot minor 14)");
	json_decref(doc);

	doc = snapshot(frag, N(frag), true, frag_segs, N(frag_segs), 40 * MiB, true);
	json_array_set_new(json_object_get(json_array_get(json_object_get(json_object_get(doc, "framework"),
									  "allocator_history"), 0), "events"),
			   3, json_pack("[sI]", "alloc", (json_int_t)S2));
	CHECK_INT(gmt__rp_read(doc, &in, err, sizeof(err)), -EINVAL);
	CHECK_STR(err, "allocator_history event 3 is not [action, address, size, stream]");
	json_decref(doc);
}

int main(void)
{
	test_faithful();
	test_diverging();
	test_late_start();
	test_handed_over_device();
	test_earlier_failure();
	test_empty_cache_served();
	test_empty_cache_unserved();
	test_own_expandable();
	test_placed_calls();
	test_expandable_answer();
	test_from_framework();
	test_bad_input();
	if (check_failed)
		fprintf(stderr, "%d checks failed\n", check_failed);
	return check_failed != 0;
}
