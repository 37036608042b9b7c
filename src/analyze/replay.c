/* The replay (replay.h): a snapshot's PyTorch history read into events, the
 * state before the history rebuilt where it does not reach back, the
 * events fed to the allocator model, and under the run's own settings each
 * segment event the model causes compared with the run's. */
#define _GNU_SOURCE
#include "analyze/replay.h"
#include "analyze/jsonval.h"
#include "util/xlist.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)

/* ---- reading ------------------------------------------------------------------------ */

static const char *const action_words[GMT_RP_OP_COUNT] = { GMT_RP_ACTIONS(GMT_X_WORD) };

const char *gmt__rp_op_name(enum gmt__rp_op op)
{
	return GMT_X_NAME(action_words, GMT_RP_OP_COUNT, op, NULL);
}

int gmt__rp_op_of(const char *word)
{
	for (int k = 0; word && k < GMT_RP_OP_COUNT; k++)
		if (strcmp(word, action_words[k]) == 0)
			return k;
	return -1;
}

static int read_events(const json_t *events, struct gmt__rp_input *in, char *err, size_t errlen)
{
	const json_t *ev;
	size_t i;

	in->ev = calloc(json_array_size(events) + 1, sizeof(*in->ev));
	in->releases = calloc(json_array_size(events) + 1, sizeof(*in->releases));
	in->called = calloc(json_array_size(events) + 1, sizeof(*in->called));
	if (in->ev == NULL || in->releases == NULL || in->called == NULL)
		return -ENOMEM;
	json_array_foreach(events, i, ev) {
		int op = gmt__rp_op_of(json_string_value(json_array_get(ev, 0)));
		struct gmt__rp_event *e = &in->ev[in->nev];
		const json_t *stream = json_array_get(ev, 3);

		if (op < 0 || !gmt__json_u64(json_array_get(ev, 1), &e->addr) || !gmt__json_u64(json_array_get(ev, 2), &e->size) ||
		    !json_is_integer(stream))
			return gmt__am_fail(err, errlen, -EINVAL,
					    "allocator_history event %zu is not [action, address, size, stream]", i);
		e->op = (enum gmt__rp_op)op;
		e->stream = (uint64_t)json_integer_value(stream);
		in->nev++;
	}
	return 0;
}

/* The program's empty_cache() calls (minor 17): the index of the event
 * each came before, nev for one after the last; out of range, left out. */
static void read_calls(const json_t *places, struct gmt__rp_input *in)
{
	const json_t *at;
	uint64_t k;
	size_t i;

	json_array_foreach(places, i, at) {
		if (gmt__json_u64(at, &k) && k <= in->nev && !in->called[k]) {
			in->called[k] = 1;
			in->ncalls++;
		}
	}
}

static int read_segments(const json_t *segments, struct gmt__rp_input *in)
{
	const json_t *s, *b;
	size_t i, j, nblocks = 0;

	json_array_foreach(segments, i, s) {
		nblocks += json_array_size(json_object_get(s, "blocks"));
	}
	in->seg = calloc(json_array_size(segments) + 1, sizeof(*in->seg));
	in->live = calloc(nblocks + 1, sizeof(*in->live));
	if (in->seg == NULL || in->live == NULL)
		return -ENOMEM;
	json_array_foreach(segments, i, s) {
		struct gmt__rp_segment *g = &in->seg[in->nseg];
		uint64_t device = 0;
		const char *type = json_string_value(json_object_get(s, "segment_type"));

		if (!gmt__json_u64(json_object_get(s, "device"), &device) || device != (uint64_t)in->device ||
		    !gmt__json_u64(json_object_get(s, "address"), &g->addr) ||
		    !gmt__json_u64(json_object_get(s, "total_size"), &g->size))
			continue;
		g->stream = (uint64_t)json_integer_value(json_object_get(s, "stream"));
		g->small = type ? strcmp(type, "small") == 0 : g->size == GMT_AM_SMALL_BUFFER;
		g->expandable = json_is_true(json_object_get(s, "is_expandable"));
		in->nseg++;
		json_array_foreach(json_object_get(s, "blocks"), j, b) {
			const char *state = json_string_value(json_object_get(b, "state"));
			struct gmt__rp_block *k = &in->live[in->nlive];

			if (state == NULL || strncmp(state, "active", 6) != 0 ||
			    !gmt__json_u64(json_object_get(b, "address"), &k->addr) || !gmt__json_u64(json_object_get(b, "size"), &k->size))
				continue;
			if (!gmt__json_u64(json_object_get(b, "requested_size"), &k->requested) || k->requested == 0)
				k->requested = k->size;
			in->nlive++;
		}
	}
	return 0;
}

/* The device bytes: what PyTorch could have held in all, the device less
 * everything that was not PyTorch's (the context, the process's memory
 * outside PyTorch, other processes) as it was at the snapshot: PyTorch's
 * reserved bytes plus the driver's free bytes, both from the same moment —
 * its out-of-memory observer's, the tracer's own at the snapshot, or what
 * the driver told PyTorch at its hand-over (at exit the tracer cannot ask). */
static void read_device_bytes(const json_t *fw, const struct gmt__rp_device *devs, size_t ndevs,
			      struct gmt__rp_input *in)
{
	const json_t *oom = json_object_get(fw, "oom"), *d, *mine = NULL;
	const struct gmt__rp_device *dev = NULL;
	const char *rule = NULL;
	uint64_t reserved = 0, free_bytes = 0, index = 0;
	bool have_reserved = false;
	size_t i;

	json_array_foreach(json_object_get(fw, "devices"), i, d) {
		if (gmt__json_u64(json_object_get(d, "device"), &index) && index == (uint64_t)in->device) {
			mine = d;
			have_reserved = gmt__json_u64(json_object_get(d, "reserved_bytes"), &reserved);
			in->snap_known = have_reserved &&
					 gmt__json_u64(json_object_get(d, "allocated_bytes"), &in->snap_allocated);
			in->snap_reserved = reserved;
			if (!gmt__json_u64(json_object_get(d, "limit_bytes"), &in->allowed_max))
				in->allowed_max = 0;
		}
	}
	for (i = 0; i < ndevs; i++) {
		if (devs[i].index == in->device)
			dev = &devs[i];
	}
	if (dev != NULL && dev->have_total)
		in->device_total = dev->total;
	else if (!gmt__json_u64(json_object_get(mine, "device_total_bytes"), &in->device_total))
		in->device_total = 0;
	if (!have_reserved)
		return;
	if (json_is_object(oom) && gmt__json_u64(json_object_get(oom, "device_free_bytes"), &free_bytes)) {
		rule = "PyTorch's reserved bytes and the device's free bytes when its out-of-memory observer ran";
	} else if (dev != NULL && dev->have_free) {
		free_bytes = dev->free;
		rule = "PyTorch's reserved bytes and the device's free bytes at the snapshot";
	} else if (gmt__json_u64(json_object_get(mine, "device_free_bytes"), &free_bytes)) {
		rule = "PyTorch's reserved bytes and the device's free bytes when it handed over its state";
	}
	if (rule == NULL)
		return;
	in->device_bytes = reserved + free_bytes;
	in->device_bytes_known = true;
	snprintf(in->device_rule, sizeof(in->device_rule), "%s", rule);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int gmt__rp_read_framework(const json_t *fw, const json_t *hist, const struct gmt__rp_device *devs, size_t ndevs,
			   struct gmt__rp_input *in, char *err, size_t errlen)
{
	const json_t *h, *chosen = NULL, *oom;
	uint64_t dev = 0;
	size_t i;
	int rc;

	memset(in, 0, sizeof(*in));
	if (!json_is_object(fw) || !json_is_string(json_object_get(fw, "name")) ||
	    strcmp(json_string_value(json_object_get(fw, "name")), "torch") != 0 || !json_is_array(hist))
		return gmt__am_fail(err, errlen, -ENOENT,
			    "no PyTorch allocator history (framework.allocator_history, snapshot minor 14)");
	/* The device of PyTorch's out-of-memory, else the first with events. */
	oom = json_object_get(fw, "oom");
	if (json_is_object(oom) && gmt__json_u64(json_object_get(oom, "device"), &dev)) {
		json_array_foreach(hist, i, h) {
			uint64_t d;

			if (gmt__json_u64(json_object_get(h, "device"), &d) && d == dev)
				chosen = h;
		}
	}
	json_array_foreach(hist, i, h) {
		if (chosen == NULL && json_array_size(json_object_get(h, "events")) > 0)
			chosen = h;
	}
	if (chosen == NULL)
		return gmt__am_fail(err, errlen, -ENOENT, "PyTorch's allocator history holds no events");
	if (!gmt__json_u64(json_object_get(chosen, "device"), &dev) || dev > INT16_MAX)
		return gmt__am_fail(err, errlen, -EINVAL,
				    "PyTorch's allocator history has no valid device ordinal (framework.allocator_history[].device)");
	in->device = (int)dev;
	in->complete = json_is_true(json_object_get(chosen, "complete"));
	in->version = dup_or_null(json_string_value(json_object_get(fw, "version")));
	in->conf = dup_or_null(json_string_value(json_object_get(fw, "alloc_conf")));
	in->conf_from = dup_or_null(json_string_value(json_object_get(fw, "alloc_conf_from")));
	rc = read_events(json_object_get(chosen, "events"), in, err, errlen);
	if (rc == 0)
		read_calls(json_object_get(chosen, "empty_cache"), in);
	if (rc == 0)
		rc = read_segments(json_object_get(fw, "segments"), in);
	if (rc == 0)
		read_device_bytes(fw, devs, ndevs, in);
	if (rc == -ENOMEM)
		gmt__am_fail(err, errlen, rc, "out of memory");
	if (rc < 0)
		gmt__rp_input_free(in);
	return rc;
}

int gmt__rp_read(const json_t *doc, struct gmt__rp_input *in, char *err, size_t errlen)
{
	const json_t *fw = json_object_get(doc, "framework"), *d;
	const char *format = json_string_value(json_object_get(doc, "format"));
	struct gmt__rp_device *devs;
	size_t i, n = 0;
	int rc;

	memset(in, 0, sizeof(*in));
	if (!json_is_object(doc) || format == NULL || strcmp(format, "gpumemtrace-snapshot") != 0)
		return gmt__am_fail(err, errlen, -EINVAL, "not a gpumemtrace snapshot");
	devs = calloc(json_array_size(json_object_get(doc, "devices")) + 1, sizeof(*devs));
	if (devs == NULL)
		return gmt__am_fail(err, errlen, -ENOMEM, "out of memory");
	json_array_foreach(json_object_get(doc, "devices"), i, d) {
		uint64_t index;

		if (!gmt__json_u64(json_object_get(d, "index"), &index) || index > INT16_MAX)
			continue;
		devs[n].index = (int)index;
		devs[n].have_total = gmt__json_u64(json_object_get(d, "total_bytes"), &devs[n].total);
		devs[n].have_free = gmt__json_u64(json_object_get(d, "free_bytes"), &devs[n].free);
		n++;
	}
	rc = gmt__rp_read_framework(fw, json_object_get(fw, "allocator_history"), devs, n, in, err, errlen);
	free(devs);
	return rc;
}

/* One event of the hand-over's traces as the snapshot keeps it, or NULL
 * where it is not of that form. */
static json_t *history_event(const json_t *ev)
{
	const char *action = json_string_value(json_array_get(ev, 0));
	const json_t *stream = json_array_get(ev, 5);
	uint64_t addr, size;

	if (gmt__rp_op_of(action) < 0 || !gmt__json_u64(json_array_get(ev, 1), &addr) ||
	    !gmt__json_u64(json_array_get(ev, 2), &size))
		return NULL;
	return json_pack("[sIII]", action, (json_int_t)addr, (json_int_t)size,
			 json_is_integer(stream) ? json_integer_value(stream) : (json_int_t)0);
}

/* The places of the program's empty_cache() calls in the hand-over's
 * events (the index of the first event after each) as places among those
 * kept (kept[k]: how many of the first k were kept): each once, in order
 * (a place before the last taken is left out), none past the end. */
static json_t *history_calls(const json_t *places, const size_t *kept, size_t nev)
{
	json_t *out = json_array(), *at;
	bool any = false;
	size_t i, last = 0;
	uint64_t k;

	if (out == NULL)
		return NULL;
	json_array_foreach(places, i, at) {
		if (!gmt__json_u64(at, &k) || k > nev || (any && kept[k] <= last))
			continue;
		any = true;
		last = kept[k];
		if (json_array_append_new(out, json_integer((json_int_t)last)) < 0) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

json_t *gmt__rp_history(const json_t *traces)
{
	json_t *out, *tr, *ev;
	size_t i, j;
	size_t *kept = NULL;

	if (!json_is_array(traces) || (out = json_array()) == NULL)
		return NULL;
	json_array_foreach(traces, i, tr) {
		const json_t *given = json_object_get(tr, "events");
		uint64_t device;
		json_t *events, *one, *h, *calls;

		if (!gmt__json_u64(json_object_get(tr, "device"), &device))
			continue;
		free(kept);
		kept = malloc((json_array_size(given) + 1) * sizeof(*kept));
		events = json_array();
		h = json_pack("{sIsbso}", "device", (json_int_t)device, "complete",
			      json_is_true(json_object_get(tr, "complete")), "events", events);
		if (kept == NULL || h == NULL || json_array_append_new(out, h) < 0)
			goto nomem;
		kept[0] = 0;
		json_array_foreach(given, j, ev) {
			one = history_event(ev);
			if (one != NULL && json_array_append_new(events, one) < 0)
				goto nomem;
			kept[j + 1] = json_array_size(events);
		}
		if (json_array_size(json_object_get(tr, "empty_cache")) == 0)
			continue;
		calls = history_calls(json_object_get(tr, "empty_cache"), kept, json_array_size(given));
		if (calls == NULL || json_object_set_new(h, "empty_cache", calls) < 0)
			goto nomem;
	}
	free(kept);
	return out;
nomem:
	free(kept);
	json_decref(out);
	return NULL;
}

void gmt__rp_input_free(struct gmt__rp_input *in)
{
	free(in->version);
	free(in->conf);
	free(in->conf_from);
	free(in->ev);
	free(in->releases);
	free(in->called);
	free(in->seg);
	free(in->live);
	memset(in, 0, sizeof(*in));
}

/* ---- tensors by address ------------------------------------------------------------- */

struct tensor {
	uint64_t addr;
	uint32_t id;
};

/* Live tensors sorted by address: the run's address to the model's block. */
struct tensors {
	struct tensor *v;
	size_t n, cap;
};

static size_t t_find(const struct tensors *t, uint64_t addr)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->v[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int t_put(struct tensors *t, uint64_t addr, uint32_t id)
{
	size_t at = t_find(t, addr);

	if (at < t->n && t->v[at].addr == addr) {
		t->v[at].id = id;
		return 0;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		struct tensor *v = realloc(t->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	memmove(t->v + at + 1, t->v + at, (t->n - at) * sizeof(*t->v));
	t->v[at] = (struct tensor){ .addr = addr, .id = id };
	t->n++;
	return 0;
}

/* Takes addr's block out; false when it is not there. */
static bool t_take(struct tensors *t, uint64_t addr, uint32_t *id)
{
	size_t at = t_find(t, addr);

	if (at >= t->n || t->v[at].addr != addr)
		return false;
	*id = t->v[at].id;
	memmove(t->v + at, t->v + at + 1, (t->n - at - 1) * sizeof(*t->v));
	t->n--;
	return true;
}

/* ---- the state before the history ---------------------------------------------------- */

static bool is_segment_op(enum gmt__rp_op op)
{
	return op == GMT_RP_SEGMENT_ALLOC || op == GMT_RP_SEGMENT_FREE || op == GMT_RP_SEGMENT_MAP ||
	       op == GMT_RP_SEGMENT_UNMAP;
}

static int by_seg_addr(const void *a, const void *b)
{
	const struct gmt__rp_segment *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int by_block_addr(const void *a, const void *b)
{
	const struct gmt__rp_block *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The segments and tensors at the history's first event: the snapshot's
 * with the history undone, walking back from its end. */
struct start {
	struct gmt__rp_segment *seg;
	size_t nseg;
	struct gmt__rp_block *live;
	size_t nlive;
	bool expandable;
};

static void start_free(struct start *s)
{
	free(s->seg);
	free(s->live);
}

static int rebuild_start(const struct gmt__rp_input *in, struct start *s)
{
	size_t cap_seg = in->nseg + in->nev + 1, cap_live = in->nlive + in->nev + 1;

	memset(s, 0, sizeof(*s));
	s->seg = malloc(cap_seg * sizeof(*s->seg));
	s->live = malloc(cap_live * sizeof(*s->live));
	if (s->seg == NULL || s->live == NULL)
		return -ENOMEM;
	memcpy(s->seg, in->seg, in->nseg * sizeof(*s->seg));
	s->nseg = in->nseg;
	memcpy(s->live, in->live, in->nlive * sizeof(*s->live));
	s->nlive = in->nlive;
	for (size_t k = 0; k < s->nseg; k++)
		s->expandable |= s->seg[k].expandable;
	for (size_t i = in->nev; i-- > 0;) {
		const struct gmt__rp_event *e = &in->ev[i];
		size_t k;

		switch (e->op) {
		case GMT_RP_ALLOC:
		case GMT_RP_SEGMENT_ALLOC:
			/* not there before it */
			if (e->op == GMT_RP_ALLOC) {
				for (k = 0; k < s->nlive && s->live[k].addr != e->addr; k++)
					;
				if (k < s->nlive)
					s->live[k] = s->live[--s->nlive];
			} else {
				for (k = 0; k < s->nseg && s->seg[k].addr != e->addr; k++)
					;
				if (k < s->nseg)
					s->seg[k] = s->seg[--s->nseg];
			}
			break;
		case GMT_RP_FREE:
			/* live before it: the block the bytes asked round to */
			s->live[s->nlive++] = (struct gmt__rp_block){
				.addr = e->addr, .requested = e->size,
				.size = e->size < GMT_AM_MIN_BLOCK ? GMT_AM_MIN_BLOCK
								   : (e->size + GMT_AM_MIN_BLOCK - 1) / GMT_AM_MIN_BLOCK * GMT_AM_MIN_BLOCK,
			};
			break;
		case GMT_RP_SEGMENT_FREE:
			s->seg[s->nseg++] = (struct gmt__rp_segment){ .addr = e->addr, .size = e->size, .stream = e->stream,
								      .small = e->size == GMT_AM_SMALL_BUFFER };
			break;
		case GMT_RP_SEGMENT_MAP:
		case GMT_RP_SEGMENT_UNMAP:
			s->expandable = true;
			break;
		default:
			break;
		}
	}
	qsort(s->seg, s->nseg, sizeof(*s->seg), by_seg_addr);
	qsort(s->live, s->nlive, sizeof(*s->live), by_block_addr);
	return 0;
}

static uint64_t sum_live(const struct start *s)
{
	uint64_t b = 0;

	for (size_t k = 0; k < s->nlive; k++)
		b += s->live[k].size;
	return b;
}

/* Under the run's own settings: its segments and tensors as they were. */
static int seed_exact(struct gmt__allocmodel *m, const struct start *s, struct tensors *t,
		      struct gmt__rp_result *r, char *err, size_t errlen)
{
	uint64_t seg_bytes = 0;
	uint32_t id;
	int rc;

	if (s->expandable)
		return gmt__am_fail(err, errlen, -ENOTSUP,
			    "the history does not reach back to PyTorch's start and the run used expandable "
			    "segments: the state before it is not modelled");
	for (size_t k = 0; k < s->nseg; k++) {
		rc = gmt__am_seed_segment(m, s->seg[k].addr, s->seg[k].size, s->seg[k].stream, s->seg[k].small);
		if (rc < 0)
			return gmt__am_fail(err, errlen, rc, "the state before the history: segment 0x%" PRIx64 " overlaps another",
				    s->seg[k].addr);
		seg_bytes += s->seg[k].size;
	}
	for (size_t k = 0; k < s->nlive; k++) {
		rc = gmt__am_seed_block(m, s->live[k].addr, s->live[k].size, s->live[k].requested, &id);
		if (rc < 0)
			return gmt__am_fail(err, errlen, rc, "the state before the history: the tensor at 0x%" PRIx64
				    " lies in no free part of a segment", s->live[k].addr);
		if (t_put(t, s->live[k].addr, id) < 0)
			return gmt__am_fail(err, errlen, -ENOMEM, "out of memory");
	}
	snprintf(r->assumed, sizeof(r->assumed),
		 "the history does not reach back to PyTorch's start: its first event found %zu segments "
		 "(%" PRIu64 " bytes) and %zu tensors (%" PRIu64 " bytes), rebuilt from the snapshot with the "
		 "history undone (a tensor freed in it sized as asked)",
		 s->nseg, seg_bytes, s->nlive, sum_live(s));
	return 0;
}

/* Under other settings: the tensors live then allocated first, in address
 * order; the cache of that moment is not known. */
static int seed_alloc(struct gmt__allocmodel *m, const struct start *s, struct tensors *t,
		      struct gmt__rp_result *r, char *err, size_t errlen)
{
	uint32_t id;

	for (size_t k = 0; k < s->nlive && !r->failed; k++) {
		if (gmt__am_malloc(m, s->live[k].requested, 0, &id) < 0) {
			/* the program would have failed before the history */
			r->failed = true;
			r->fail_size = s->live[k].requested;
			r->fail_reserved = gmt__am_stats(m)->first_oom.reserved;
			r->fail_allocated = gmt__am_stats(m)->first_oom.allocated;
			break;
		}
		if (t_put(t, s->live[k].addr, id) < 0)
			return gmt__am_fail(err, errlen, -ENOMEM, "out of memory");
	}
	snprintf(r->assumed, sizeof(r->assumed),
		 "the history does not reach back to PyTorch's start: the %zu tensors (%" PRIu64 " bytes) live at its "
		 "first event were allocated first, in address order; the segments cached then are not known",
		 s->nlive, sum_live(s));
	return 0;
}

/* ---- the comparison ----------------------------------------------------------------- */

/* The history's action for a driver event of the model's; -1 for an
 * expandable segment's reservation, which PyTorch's history does not
 * record. */
static int action_of(enum gmt__am_op mop)
{
	switch (mop) {
	case GMT_AM_SEGMENT_ALLOC:
		return GMT_RP_SEGMENT_ALLOC;
	case GMT_AM_SEGMENT_FREE:
		return GMT_RP_SEGMENT_FREE;
	case GMT_AM_SEGMENT_MAP:
		return GMT_RP_SEGMENT_MAP;
	case GMT_AM_SEGMENT_UNMAP:
		return GMT_RP_SEGMENT_UNMAP;
	default:
		return -1;
	}
}

/* The run's segment events waiting for the model's. */
struct queue {
	const struct gmt__rp_event **v;
	size_t n;
};

struct replay {
	const struct gmt__rp_input *in;
	struct gmt__allocmodel *m;
	struct gmt__rp_result *r;
	struct queue q;
	size_t seen;      /* the model's events compared so far */
	size_t run_no;    /* the run's segment events compared so far */
	uint64_t request; /* the current request's number (0: none yet) */
	uint64_t run_reserved; /* the run's reserved bytes before the queued events */
	bool called;      /* the program called empty_cache() since the last request or free */
};

/* The first n queued events are done with: the run's reserved bytes after
 * them; the rest move up. */
static void flush(struct replay *p, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const struct gmt__rp_event *e = p->q.v[k];

		if (e->op == GMT_RP_SEGMENT_ALLOC || e->op == GMT_RP_SEGMENT_MAP)
			p->run_reserved += e->size;
		else
			p->run_reserved -= e->size < p->run_reserved ? e->size : p->run_reserved;
	}
	memmove(p->q.v, p->q.v + n, (p->q.n - n) * sizeof(*p->q.v));
	p->q.n -= n;
}

static bool is_release(enum gmt__rp_op op)
{
	return op == GMT_RP_SEGMENT_FREE || op == GMT_RP_SEGMENT_UNMAP;
}

/* How many of the queued events lead with releases. */
static size_t leading_releases(const struct replay *p)
{
	size_t k = 0;

	while (k < p->q.n && is_release(p->q.v[k]->op))
		k++;
	return k;
}

/* The model's driver events since the last comparison against the first
 * nq of the run's queued ones: the same kinds and sizes in the same order.
 * Marks the replay not faithful at the first difference. */
static void compare(struct replay *p, size_t nq, const char *when)
{
	size_t n, k = 0;
	const struct gmt__am_event *e = gmt__am_events(p->m, &n);
	const struct gmt__am_event *got = NULL;
	const struct gmt__rp_event *want = NULL;

	for (; p->seen < n || k < nq;) {
		while (p->seen < n && action_of(e[p->seen].op) < 0)
			p->seen++;
		got = p->seen < n ? &e[p->seen] : NULL;
		want = k < nq ? p->q.v[k] : NULL;
		if (got == NULL && want == NULL)
			break;
		if (got == NULL || want == NULL || action_of(got->op) != (int)want->op || got->size != want->size)
			break;
		p->seen++;
		k++;
		p->run_no++;
		got = NULL;
		want = NULL;
	}
	if ((got != NULL || want != NULL) && p->r->faithful) {
		char run[96] = "no segment event", model[96] = "nothing";

		if (want != NULL)
			snprintf(run, sizeof(run), "%s of %" PRIu64 " bytes", gmt__rp_op_name(want->op), want->size);
		if (got != NULL)
			snprintf(model, sizeof(model), "%s of %" PRIu64 " bytes",
				 gmt__rp_op_name((enum gmt__rp_op)action_of(got->op)), got->size);
		p->r->faithful = false;
		snprintf(p->r->diverged, sizeof(p->r->diverged),
			 "%s: the run did %s, the replay %s (after %zu of its segment events matched)", when, run, model,
			 p->run_no);
	}
	flush(p, nq);
	p->seen = n;
}

static void diverge(struct replay *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void diverge(struct replay *p, const char *fmt, ...)
{
	va_list ap;

	if (!p->r->faithful)
		return;
	p->r->faithful = false;
	va_start(ap, fmt);
	vsnprintf(p->r->diverged, sizeof(p->r->diverged), fmt, ap);
	va_end(ap);
}

/* Whether the run's segment frees queued before request e are its
 * release-and-retry (PyTorch frees cached segments only when the driver
 * refused new memory), not an empty_cache() of the program's: no cached
 * block served the request (else PyTorch asks the driver nothing), and in
 * the run its first ask — a new segment, or under expandable segments the
 * pages it maps — would have passed the device bytes; where those are not
 * known, when the request failed. The cache is the run's only under its
 * own settings: what that replay found is kept for the others
 * (in->releases); where it found nothing, a new segment of the request's
 * size (512-byte rounding) is the run's ask. */
static bool frees_are_the_requests(const struct replay *p, const struct gmt__rp_event *e)
{
	uint64_t rounded = (e->size + GMT_AM_MIN_BLOCK - 1) / GMT_AM_MIN_BLOCK * GMT_AM_MIN_BLOCK;
	uint8_t *found = &p->in->releases[e - p->in->ev];
	bool own;

	if (leading_releases(p) == 0)
		return true;
	if (!p->r->own && *found != 0)
		return *found == 1;
	if (p->r->own && gmt__am_cache_serves(p->m, e->size, e->stream))
		own = false;
	else if (!p->in->device_bytes_known)
		own = e->op == GMT_RP_OOM;
	else
		own = p->run_reserved + (p->r->own ? gmt__am_first_ask(p->m, e->size, e->stream) :
				      gmt__am_segment_size(rounded)) > p->in->device_bytes;
	if (p->r->own)
		*found = own ? 1 : 2;
	return own;
}

/* The program's empty_cache(), whose releases lead the queue: the model's
 * too; under the run's settings compared with the run's releases. */
static void empty_cache(struct replay *p, const char *when)
{
	size_t nq = leading_releases(p);

	p->r->inferred_calls += !p->called;
	p->called = false;
	gmt__am_empty_cache(p->m);
	if (p->r->own) {
		compare(p, nq, when);
	} else {
		flush(p, nq);
		(void)gmt__am_events(p->m, &p->seen);
	}
}

/* The index of the history's failing request: its last oom, or nev. */
static size_t failing_request(const struct gmt__rp_input *in)
{
	for (size_t i = in->nev; i-- > 0;)
		if (in->ev[i].op == GMT_RP_OOM)
			return i;
	return in->nev;
}

static void note_failure(struct replay *p, uint64_t size, bool is_request)
{
	const struct gmt__am_stats *st = gmt__am_stats(p->m);

	if (p->r->failed)
		return;
	p->r->failed = true;
	p->r->fail_no = p->request;
	p->r->fail_size = size;
	p->r->fail_reserved = st->first_oom.reserved;
	p->r->fail_allocated = st->first_oom.allocated;
	p->r->fail_is_request = is_request;
}

/* One request of the history: alloc (the run served it) or oom (the run
 * failed it). Returns false where the replay stops. */
static bool request(struct replay *p, const struct gmt__rp_event *e, bool is_request, struct tensors *t,
		    int *rc)
{
	const struct gmt__am_stats *st = gmt__am_stats(p->m);
	char when[96];
	uint64_t addr = 0, size = 0;
	uint32_t id;
	int mrc;

	p->request++;
	snprintf(when, sizeof(when), "at request #%" PRIu64 " (%" PRIu64 " bytes)", p->request, e->size);
	if (p->called)
		empty_cache(p, "at the program's empty_cache() before it");
	else if (!frees_are_the_requests(p, e))
		empty_cache(p, "at an empty_cache() before it");
	if (p->r->own) {
		/* The run's addresses for the model's new segments; a mapping
		 * outside the model's reservations is in one the run made
		 * before (a failed request's) or makes now. */
		for (size_t k = 0; k < p->q.n; k++) {
			const struct gmt__rp_event *q = p->q.v[k];

			if (q->op == GMT_RP_SEGMENT_ALLOC) {
				gmt__am_set_next_addr(p->m, q->addr);
				break;
			}
			if (q->op == GMT_RP_SEGMENT_MAP) {
				if (gmt__am_reserved_at(p->m, q->addr, e->size))
					gmt__am_hint_addr(p->m, q->addr);
				else if (!gmt__am_place_reservation(p->m, q->addr, e->size, e->stream))
					gmt__am_set_next_addr(p->m, q->addr);
				break;
			}
		}
	}
	if (is_request) {
		p->r->request_reached = true;
		p->r->unallocated_at_request = st->reserved - st->allocated;
	}
	mrc = gmt__am_malloc(p->m, e->size == 0 ? 1 : e->size, e->stream, &id);
	if (mrc == -ENOMEM) {
		note_failure(p, e->size, is_request);
		if (p->r->own && e->op == GMT_RP_ALLOC)
			diverge(p, "%s: the run served it, the replay fails it", when);
	} else if (mrc < 0) {
		*rc = mrc;
		return false;
	} else if (e->op == GMT_RP_OOM) {
		if (p->r->own)
			diverge(p, "%s: the run failed it, the replay serves it", when);
		if (is_request)
			p->r->request_fits = true;
		gmt__am_free(p->m, id); /* the program never had it */
	} else {
		(void)gmt__am_block(p->m, id, &addr, &size);
		if (p->r->own && addr != e->addr)
			diverge(p, "%s: the run placed it at 0x%" PRIx64 ", the replay at 0x%" PRIx64, when, e->addr, addr);
		if (t_put(t, e->addr, id) < 0) {
			*rc = -ENOMEM;
			return false;
		}
	}
	if (p->r->own)
		compare(p, p->q.n, when);
	else
		flush(p, p->q.n);
	if (is_request)
		return false;
	/* Under other settings a request the run served that fails here is
	 * where the program would have raised. */
	return !(mrc == -ENOMEM && e->op == GMT_RP_ALLOC);
}

int gmt__rp_run(const struct gmt__rp_input *in, const struct gmt__am_config *c, bool own, uint64_t limit,
		struct gmt__rp_result *r, char *err, size_t errlen)
{
	struct replay p = { .in = in, .r = r };
	struct tensors t = { 0 };
	struct start s = { 0 };
	size_t stop = failing_request(in);
	uint64_t total;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	r->own = own;
	r->faithful = own;
	if (stop < in->nev) {
		r->has_request = true;
		r->request_size = in->ev[stop].size;
		for (size_t i = 0; i <= stop; i++)
			r->request_no += in->ev[i].op == GMT_RP_ALLOC || in->ev[i].op == GMT_RP_OOM;
	}
	/* The device's size: an expandable segment reserves 1 1/8 of it. A
	 * device asked about with more bytes than the run's has at least as
	 * many. */
	total = in->device_total ? in->device_total : limit != GMT_AM_UNLIMITED ? limit : 1ull << 40;
	if (limit != GMT_AM_UNLIMITED && limit > total)
		total = limit;
	if (gmt__am_create(c, total, &p.m) < 0)
		return gmt__am_fail(err, errlen, -ENOMEM, "out of memory");
	gmt__am_set_limit(p.m, limit);
	/* The run's memory fraction holds under every setting but one that
	 * names its own. */
	if (in->allowed_max > 0 && c->memory_fraction < 0)
		gmt__am_set_allowed(p.m, in->allowed_max);
	if (!own)
		gmt__am_reuse_addrs(p.m);
	p.q.v = malloc((in->nev + 1) * sizeof(*p.q.v));
	if (p.q.v == NULL) {
		rc = gmt__am_fail(err, errlen, -ENOMEM, "out of memory");
		goto out;
	}
	if (!in->complete) {
		rc = rebuild_start(in, &s);
		for (size_t k = 0; rc == 0 && k < s.nseg; k++)
			p.run_reserved += s.seg[k].size;
		if (rc == 0)
			rc = own ? seed_exact(p.m, &s, &t, r, err, errlen) : seed_alloc(p.m, &s, &t, r, err, errlen);
		else
			gmt__am_fail(err, errlen, rc, "out of memory");
		if (rc < 0)
			goto out;
		(void)gmt__am_events(p.m, &p.seen);
	}
	/* A tensor live before the history that does not fit ends it there. */
	for (size_t i = 0; i <= in->nev && i <= stop && !(r->failed && r->fail_no == 0); i++) {
		const struct gmt__rp_event *e = &in->ev[i];
		uint32_t id;

		/* A call the bootstrap placed: the model empties its cache
		 * under every setting, whatever the run released then; the
		 * releases of an earlier call it did not place go first. */
		if (in->called[i]) {
			if (p.q.n > 0 && !p.called)
				empty_cache(&p, "at an empty_cache()");
			p.called = true;
		}
		if (i == in->nev)
			break;
		if (is_segment_op(e->op)) {
			p.q.v[p.q.n++] = e;
			continue;
		}
		if (e->op == GMT_RP_ALLOC || e->op == GMT_RP_OOM) {
			if (!request(&p, e, i == stop, &t, &rc))
				break;
			continue;
		}
		if (e->op != GMT_RP_FREE)
			continue;
		if (p.q.n > 0 || p.called)
			empty_cache(&p, p.called ? "at the program's empty_cache()" : "at an empty_cache()");
		if (t_take(&t, e->addr, &id)) {
			if (gmt__am_free(p.m, id) < 0 && own)
				diverge(&p, "at the free of 0x%" PRIx64 ": the replay holds no such block", e->addr);
		} else if (own) {
			diverge(&p, "at the free of 0x%" PRIx64 ": no tensor there in the replay", e->addr);
		}
	}
	if (rc < 0) {
		gmt__am_fail(err, errlen, rc, "out of memory");
		goto out;
	}
	if (leading_releases(&p) > 0 || p.called)
		empty_cache(&p, "at an empty_cache() at the end");
	if (own && p.q.n > 0)
		compare(&p, p.q.n, "at the end");
	/* A replay that came to the snapshot's moment (its failure is the
	 * history's last event) holds what PyTorch counted there. */
	if (own && in->snap_known && stop + 1 >= in->nev) {
		const struct gmt__am_stats *st = gmt__am_stats(p.m);

		if (st->reserved != in->snap_reserved || st->allocated != in->snap_allocated)
			diverge(&p, "at the snapshot: the run had %" PRIu64 " bytes reserved, %" PRIu64 " allocated; the "
				    "replay %" PRIu64 ", %" PRIu64, in->snap_reserved, in->snap_allocated, st->reserved,
				st->allocated);
	}
	r->segment_events = p.run_no;
	r->requests = p.request;
	r->peak_reserved = gmt__am_stats(p.m)->peak_reserved;
out:
	start_free(&s);
	free(t.v);
	free(p.q.v);
	gmt__am_destroy(p.m);
	return rc;
}

/* ---- for the diagnosis ------------------------------------------------------------- */

void gmt__rp_try_expandable(const struct gmt__rp_input *in, struct gmt__rp_expandable *out)
{
	struct gmt__am_config own, exp;
	struct gmt__rp_result r;
	char err[256];

	memset(out, 0, sizeof(*out));
	snprintf(out->setting, sizeof(out->setting), "%s%sexpandable_segments:True", in->conf ? in->conf : "",
		 in->conf && in->conf[0] ? "," : "");
	if (!in->device_bytes_known) {
		snprintf(out->why, sizeof(out->why), "the device bytes of the run are not known");
		return;
	}
	out->device_bytes = in->device_bytes;
	if (gmt__am_config_parse(in->conf, &own, err, sizeof(err)) != 0) {
		snprintf(out->why, sizeof(out->why), "the run's PYTORCH_CUDA_ALLOC_CONF: %s", err);
		return;
	}
	if (own.expandable_segments) {
		snprintf(out->why, sizeof(out->why), "the run's own settings have expandable segments already");
		return;
	}
	if (gmt__rp_run(in, &own, true, in->device_bytes, &r, err, sizeof(err)) < 0) {
		snprintf(out->why, sizeof(out->why), "not replayed under the run's own settings: %s", err);
		return;
	}
	if (!r.has_request) {
		snprintf(out->why, sizeof(out->why), "PyTorch's history holds no failing request");
		return;
	}
	if (!r.faithful) {
		snprintf(out->why, sizeof(out->why), "the replay under the run's own settings is not faithful: %s",
			 r.diverged);
		return;
	}
	exp = own;
	exp.expandable_segments = true;
	if (gmt__rp_run(in, &exp, false, in->device_bytes, &r, err, sizeof(err)) < 0) {
		snprintf(out->why, sizeof(out->why), "not replayed under %s: %s", out->setting, err);
		return;
	}
	out->replayed = true;
	out->fits = r.request_reached && r.request_fits;
	out->peak_reserved = r.peak_reserved;
	out->request_no = r.request_no;
	out->request_size = r.request_size;
	out->failed = r.failed;
	out->fail_no = r.fail_no;
	out->fail_size = r.fail_size;
	out->fail_reserved = r.fail_reserved;
	snprintf(out->assumed, sizeof(out->assumed), "%s", r.assumed);
}
