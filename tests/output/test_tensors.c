/* Unit test of the framework's level (analyze/tensors.h) on made-up states:
 * the live tensors and their stacks, each device's bytes by level, the
 * replay of the framework's history (what was live before it, a free
 * requested then completed, a free the history lost, a live tensor's block
 * size against a freed one's rounded request), growth judged on the steps,
 * and a state without history or without blocks. */
#define _GNU_SOURCE
#include "check.h"
#include "analyze/tensors.h"
#include "record/event.h"

#include <jansson.h>

#define MIB (1ull << 20)

static json_t *frames(const char *name, const char *file, int line)
{
	return json_pack("[{s:s, s:s, s:i}, {s:s, s:s, s:i}]", "name", name, "filename", file, "line", line, "name",
			 "<module>", "filename", file, "line", 100);
}

static json_t *block(uint64_t addr, uint64_t size, uint64_t requested, bool active, json_t *fr)
{
	json_t *b = json_pack("{s:I, s:I, s:I, s:s}", "address", (json_int_t)addr, "size", (json_int_t)size,
			      "requested_size", (json_int_t)requested, "state", active ? "active_allocated" : "inactive");

	json_object_set_new(b, "frames", fr != NULL ? fr : json_array());
	return b;
}

static json_t *segment(int device, uint64_t addr, uint64_t size, json_t *blocks)
{
	json_t *s = json_pack("{s:i, s:I, s:I, s:i}", "device", device, "address", (json_int_t)addr, "total_size",
			      (json_int_t)size, "stream", 0);

	json_object_set_new(s, "blocks", blocks);
	return s;
}

static json_t *event(const char *action, uint64_t addr, uint64_t size, uint64_t time_us, int stack)
{
	return json_pack("[s, I, I, I, i, i]", action, (json_int_t)addr, (json_int_t)size, (json_int_t)time_us, stack, 0);
}

static struct gmt__entry entry(uint64_t addr, uint64_t size, int device, uint32_t stack)
{
	struct gmt__entry e = { .addr = addr, .size = size, .device = (int16_t)device, .kind = GMT_KIND_DEVICE,
				.space = GMT_SPACE_MEMORY, .stack = stack };
	return e;
}

/* Two segments on device 0 and one driver allocation that is not the
 * framework's: the split adds up; the tensors and their stacks. */
static void test_levels(void)
{
	const uint64_t s1 = 0x7f0000000000ull, s2 = s1 + 64 * MIB, other = s1 + 512 * MIB;
	json_t *state = json_pack("{s:s}", "name", "torch");
	json_t *segs = json_array();
	struct gmt__entry e[3] = { entry(s1, 64 * MIB, 0, 1), entry(s2, 32 * MIB, 0, 1), entry(other, 12 * MIB, 0, 2) };
	const struct gmt__entry *v[3] = { &e[0], &e[1], &e[2] };
	struct gmt__tensors t;
	const struct gmt__tensor_device *d;
	const struct gmt__site_frame *fr;
	int n = 0;

	json_array_append_new(segs, segment(0, s1, 64 * MIB,
					    json_pack("[o, o, o]", block(s1, 24 * MIB, 24 * MIB, true, frames("step", "a.py", 3)),
						      block(s1 + 24 * MIB, 16 * MIB, 0, false, NULL),
						      block(s1 + 40 * MIB, 24 * MIB, 24 * MIB - 100, true,
							    frames("step", "a.py", 3)))));
	json_array_append_new(segs, segment(0, s2, 32 * MIB,
					    json_pack("[o]", block(s2, 32 * MIB, 32 * MIB, true, frames("load", "a.py", 9)))));
	json_object_set_new(state, "segments", segs);
	CHECK_INT(gmt__tensors_build(&t, state, v, 3, NULL, 0), 0);
	CHECK(t.known);
	CHECK_U64(t.n, 3);
	CHECK(t.history == NULL); /* no history handed over */
	/* By address; one stack for the two tensors of one line: stacks are
	 * interned. */
	CHECK_U64(t.nstacks, 3);
	CHECK_U64(t.v[1].addr, s1 + 40 * MIB);
	CHECK_INT(t.v[0].stack, t.v[1].stack);
	CHECK(t.v[0].stack != t.v[2].stack);
	CHECK_U64(t.v[1].requested, 24 * MIB - 100);
	CHECK_U64(t.v[1].segment, s1);
	CHECK_U64(t.v[2].segment, s2);
	CHECK(gmt__tensors_frames(&t, gmt__tensor_stack_id(t.v[2].stack), &fr, &n));
	CHECK_INT(n, 2);
	CHECK(n == 2 && fr[0].python && strcmp(fr[0].function, "load") == 0 && fr[0].line == 9);
	CHECK(!gmt__tensors_frames(&t, 5, &fr, &n)); /* the recorder's stack 5 */
	/* One device: device 0's split. */
	CHECK_INT(t.ndev, 1);
	d = t.ndev == 1 && t.dev[0].device == 0 ? &t.dev[0] : NULL;
	CHECK(d != NULL);
	if (d != NULL) {
		CHECK_U64(d->tensor_bytes, 80 * MIB);
		CHECK_U64(d->tensor_count, 3);
		CHECK_U64(d->reserved_bytes, 96 * MIB);
		CHECK_U64(d->cached_bytes, 16 * MIB);
		CHECK_U64(d->segment_bytes, 96 * MIB);
		CHECK_U64(d->other_bytes, 12 * MIB);
		CHECK_U64(d->live_bytes, 108 * MIB);
		CHECK_U64(d->tensor_bytes + d->cached_bytes + d->other_bytes, d->live_bytes);
	}
	CHECK(gmt__tensors_backs(&t, &e[0]) && gmt__tensors_backs(&t, &e[1]) && !gmt__tensors_backs(&t, &e[2]));
	gmt__tensors_free(&t);
	json_decref(state);
}

/* The replay: a tensor allocated before the history (seeded), one freed
 * requested then completed, one whose allocation the history lost (seen
 * only freed), a leak of 4 MiB a step over 6 steps, a temporary freed each
 * step. */
static void test_replay(void)
{
	const uint64_t base = 0x7f0000000000ull;
	json_t *state = json_pack("{s:s}", "name", "torch"), *segs = json_array(), *events = json_array();
	json_t *stacks = json_pack("[o, o]", frames("train", "t.py", 16), frames("train", "t.py", 12));
	json_t *blocks = json_array(), *steps = json_array();
	uint64_t us = 1000000, leak = base + 128 * MIB;
	struct gmt__tensors t;
	const struct gmt__site *site;
	uint32_t rises, falls, loss = 0, weights = 0;
	uint64_t growth, nsteps = 0;
	int k;

	/* Live before the history: the weights, with their frames. */
	json_array_append_new(blocks, block(base, 64 * MIB, 64 * MIB, true, frames("init", "t.py", 4)));
	/* Seen freed only: its allocation fell out of the history. */
	json_array_append_new(events, event("free_requested", base + 64 * MIB, 1000, us, -1));
	json_array_append_new(events, event("free_completed", base + 64 * MIB, 1000, us, -1));
	for (k = 0; k < 6; k++) {
		uint64_t t0 = us + 1000 * (uint64_t)(k + 1);

		/* A temporary: 2 MiB asked, freed in the step. */
		json_array_append_new(events, event("alloc", base + 96 * MIB, 2 * MIB, t0, 1));
		json_array_append_new(events, event("free_requested", base + 96 * MIB, 2 * MIB, t0 + 1, -1));
		json_array_append_new(events, event("free_completed", base + 96 * MIB, 2 * MIB, t0 + 2, -1));
		/* The leak: 4 MiB asked, 4 MiB + 512 bytes of block. */
		json_array_append_new(events, event("alloc", leak + (uint64_t)k * 8 * MIB, 4 * MIB, t0 + 3, 0));
		json_array_append_new(blocks, block(leak + (uint64_t)k * 8 * MIB, 4 * MIB + 512, 4 * MIB, true,
						    frames("train", "t.py", 16)));
		json_array_append_new(steps, json_pack("[I, I]", (json_int_t)(k + 1), (json_int_t)((t0 + 4) * 1000)));
	}
	json_array_append_new(segs, segment(0, base, 256 * MIB, blocks));
	json_object_set_new(state, "segments", segs);
	json_object_set_new(state, "traces", json_pack("[{s:i, s:b, s:o}]", "device", 0, "complete", 0, "events", events));
	json_object_set_new(state, "trace_stacks", stacks);
	json_object_set_new(state, "steps", steps);
	CHECK_INT(gmt__tensors_build(&t, state, NULL, 0, NULL, 0), 0);
	CHECK(t.history != NULL);
	CHECK_U64(t.events, 2 + 6 * 4);
	CHECK_U64(t.seeded, 2); /* the weights, and the tensor seen only freed */
	CHECK(!t.complete);
	CHECK_U64(t.steps, 6);
	CHECK_U64(t.first_ns, us * 1000);
	/* The weights, never seen allocated: before the history. */
	CHECK_U64(t.v[0].time_ns, 0);
	CHECK_U64(t.v[1].time_ns, (us + 1000 + 3) * 1000);
	for (size_t i = 0; i < t.n; i++) {
		if (t.v[i].addr == leak)
			loss = t.v[i].stack;
		if (t.v[i].addr == base)
			weights = t.v[i].stack;
	}
	site = gmt__history_site(t.history, loss);
	CHECK(site != NULL);
	if (site != NULL) {
		/* Live tensors count their blocks. */
		CHECK_U64(site->live_bytes, 6 * (4 * MIB + 512));
		CHECK_U64(site->allocs, 6);
		/* Each step marked after its allocations: the first block is
		 * its first round's, growth what came after. */
		CHECK(gmt__site_growing(t.history, site, &rises, &falls, &growth));
		CHECK_U64(growth, 5 * (4 * MIB + 512));
		CHECK_U64(gmt__site_step_growth(t.history, site, &nsteps), 4 * (4 * MIB + 512));
		CHECK_U64(nsteps, 4);
	}
	/* The temporary's site: allocated and freed each step, its rounded
	 * request both ways; not growing. */
	for (uint32_t id = 1; id < t.nstacks; id++) {
		const struct gmt__site *s = gmt__history_site(t.history, id);

		if (s == NULL || id == loss || t.stacks[id].v[0].line != 12)
			continue;
		CHECK_U64(s->allocs, 6);
		CHECK_U64(s->live_bytes, 0);
		CHECK_U64(s->peak_bytes, 2 * MIB);
		CHECK(!gmt__site_growing(t.history, s, &rises, &falls, &growth));
	}
	/* The latest step, and the tensors since: none (the mark came after
	 * the step's last allocation). */
	CHECK(t.step_known);
	CHECK_U64(t.step, 6);
	CHECK_U64(t.step_bytes, 0);
	/* The weights, the leak, the temporary; the seed seen only freed
	 * (stack 0) has nothing live and made nothing in the history. */
	CHECK_U64(t.nsites, 3);
	CHECK_U64(t.sites[0].id, weights);
	CHECK_U64(t.sites[1].id, loss);
	gmt__tensors_free(&t);
	json_decref(state);
}

/* No blocks: no tensor level. Bad values are left out, not trusted. */
static void test_none_and_bad(void)
{
	json_t *state = json_pack("{s:s, s:[]}", "name", "cupy", "segments");
	struct gmt__tensors t;

	CHECK_INT(gmt__tensors_build(&t, state, NULL, 0, NULL, 0), 0);
	CHECK(!t.known);
	gmt__tensors_free(&t);
	json_decref(state);
	CHECK_INT(gmt__tensors_build(&t, NULL, NULL, 0, NULL, 0), 0);
	CHECK(!t.known);
	gmt__tensors_free(&t);

	state = json_pack("{s:s, s:[{s:s, s:I, s:[{s:I, s:I, s:s}, {s:s}]}], s:[{s:i, s:[[s], [i, i]]}], s:[[s]]}",
			  "name", "torch", "segments", "address", "0x10", "total_size", (json_int_t)MIB, "blocks",
			  "address", (json_int_t)16, "size", (json_int_t)512, "state", "active_allocated", "state", "x",
			  "traces", "device", 0, "events", "alloc", 1, 2, "steps", "x");
	CHECK_INT(gmt__tensors_build(&t, state, NULL, 0, NULL, 0), 0);
	CHECK(!t.known); /* its one segment has no integer address */
	gmt__tensors_free(&t);
	json_decref(state);
}

int main(void)
{
	test_levels();
	test_replay();
	test_none_and_bad();
	printf("tensors: %d failed\n", check_failed);
	return check_failed != 0;
}
