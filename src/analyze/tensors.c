/* The framework's level of a snapshot (tensors.h). The state a framework's
 * bootstrap handed over (docs/snapshot-format.md, "framework") gives its
 * segments and their blocks — the tensors are the active ones — and, for
 * PyTorch, its allocator history ("traces": per device its tensor events,
 * each allocation's stack an index into "trace_stacks") and the steps the
 * program marked ("steps": number and CLOCK_REALTIME time).
 *
 * The replay puts the history's events, oldest first, into a history of
 * its own (state/history.h) keyed by tensor stack, so that growth is judged
 * by the one rule the driver's level uses, at the same scales and on the
 * same steps. Sizes: a live tensor counts its block's size, as the
 * framework's allocated bytes do; a tensor freed since, what it asked for
 * rounded up to PyTorch's 512 bytes (its block is gone). Before the first
 * event the history holds, the replay starts from what must have been live
 * then: the live tensors it never saw allocated, and the tensors it sees
 * freed without having seen them allocated (their stack unknown). */
#define _GNU_SOURCE
#include "analyze/tensors.h"
#include "analyze/jsonval.h"

#include "record/event.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The framework's rounding of a request (PyTorch's kMinBlockSize). */
#define GMT_TENSOR_ROUND 512u

uint32_t gmt__tensor_stack_id(uint32_t index)
{
	return index == 0 ? 0 : GMT_TENSOR_STACK_BASE + index;
}

bool gmt__is_tensor_stack(uint32_t id)
{
	return id > GMT_TENSOR_STACK_BASE;
}

/* ---- the state's values ---------------------------------------------------------- */

/* An integer of 0 or more, or false. */
static bool get_u64(const json_t *o, const char *key, uint64_t *out)
{
	return gmt__json_u64(json_object_get(o, key), out);
}

static bool item_u64(const json_t *a, size_t i, uint64_t *out)
{
	return gmt__json_u64(json_array_get(a, i), out);
}

/* ---- stacks: each distinct chain of frames once ---------------------------------- */

struct interner {
	uint32_t *slots; /* stack index, 0: empty */
	size_t cap;
};

static uint64_t hash_str(uint64_t h, const char *s)
{
	for (; s != NULL && *s != '\0'; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (h ^ 0xff) * 0x100000001b3ull;
}

static uint64_t hash_frames(const struct gmt__site_frame *v, int n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (int i = 0; i < n; i++) {
		h = hash_str(h, v[i].function);
		h = hash_str(h, v[i].file);
		h = (h ^ (uint64_t)(uint32_t)v[i].line) * 0x100000001b3ull;
	}
	return h;
}

static bool same_str(const char *a, const char *b)
{
	return (a == NULL || b == NULL) ? a == b : strcmp(a, b) == 0;
}

static bool same_frames(const struct gmt__tensor_stack *s, const struct gmt__site_frame *v, int n)
{
	if (s->n != n)
		return false;
	for (int i = 0; i < n; i++) {
		if (s->v[i].line != v[i].line || !same_str(s->v[i].function, v[i].function) ||
		    !same_str(s->v[i].file, v[i].file))
			return false;
	}
	return true;
}

static int interner_grow(struct interner *in, const struct gmt__tensors *t)
{
	size_t cap = in->cap ? 2 * in->cap : 1024;
	uint32_t *slots = calloc(cap, sizeof(*slots));

	if (slots == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < in->cap; i++) {
		uint32_t k = in->slots[i];
		size_t at;

		if (k == 0)
			continue;
		for (at = hash_frames(t->stacks[k].v, t->stacks[k].n) & (cap - 1); slots[at] != 0; at = (at + 1) & (cap - 1))
			;
		slots[at] = k;
	}
	free(in->slots);
	in->slots = slots;
	in->cap = cap;
	return 0;
}

/* The index of the stack of frames v[0..n) (taken over: freed when already
 * known), added when new; 0 for no frames. *out; 0 or -ENOMEM (v freed). */
static int intern(struct gmt__tensors *t, struct interner *in, struct gmt__site_frame *v, int n, uint32_t *out)
{
	size_t at;
	int r;

	*out = 0;
	if (n == 0) {
		free(v);
		return 0;
	}
	if (2 * (t->nstacks + 1) > in->cap && (r = interner_grow(in, t)) < 0) {
		free(v);
		return r;
	}
	for (at = hash_frames(v, n) & (in->cap - 1); in->slots[at] != 0; at = (at + 1) & (in->cap - 1)) {
		if (same_frames(&t->stacks[in->slots[at]], v, n)) {
			*out = in->slots[at];
			free(v);
			return 0;
		}
	}
	if ((t->nstacks & (t->nstacks - 1)) == 0) {
		struct gmt__tensor_stack *bigger = realloc(t->stacks, 2 * t->nstacks * sizeof(*bigger));

		if (bigger == NULL) {
			free(v);
			return -ENOMEM;
		}
		t->stacks = bigger;
	}
	t->stacks[t->nstacks] = (struct gmt__tensor_stack){ v, n };
	in->slots[at] = (uint32_t)t->nstacks;
	*out = (uint32_t)t->nstacks++;
	return 0;
}

/* The stack of a JSON array of frames ({"name", "filename", "line"},
 * innermost first): its index, 0 for none. 0 or -ENOMEM. */
static int stack_of(struct gmt__tensors *t, struct interner *in, const json_t *frames, uint32_t *out)
{
	size_t n = json_is_array(frames) ? json_array_size(frames) : 0, k = 0;
	struct gmt__site_frame *v;

	*out = 0;
	if (n == 0)
		return 0;
	v = calloc(n, sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const json_t *f = json_array_get(frames, i);
		uint64_t line = 0;

		if (!json_is_object(f))
			continue;
		v[k].python = true;
		v[k].function = json_string_value(json_object_get(f, "name"));
		v[k].file = json_string_value(json_object_get(f, "filename"));
		v[k].line = get_u64(f, "line", &line) && line <= INT32_MAX ? (int)line : 0;
		k++;
	}
	return intern(t, in, v, (int)k, out);
}

/* ---- the live tensors and the devices --------------------------------------------- */

static int by_address(const void *x, const void *y)
{
	const struct gmt__tensor *a = x, *b = y;

	if (a->device != b->device)
		return a->device < b->device ? -1 : 1;
	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int by_range(const void *x, const void *y)
{
	const struct gmt__segment_range *a = x, *b = y;

	return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static struct gmt__tensor_device *device_of(struct gmt__tensors *t, int device)
{
	for (int i = 0; i < t->ndev; i++) {
		if (t->dev[i].device == device)
			return &t->dev[i];
	}
	if (t->ndev == GMT_SNAPSHOT_MAX_DEVICES)
		return NULL;
	t->dev[t->ndev] = (struct gmt__tensor_device){ .device = device };
	return &t->dev[t->ndev++];
}

/* The segments and their active blocks. 0 or -ENOMEM. */
static int collect_blocks(struct gmt__tensors *t, struct interner *in, const json_t *segs)
{
	size_t cap = 0, i, j;
	const json_t *seg, *b;

	json_array_foreach(segs, i, seg) {
		cap += json_array_size(json_object_get(seg, "blocks"));
	}
	t->v = calloc(cap ? cap : 1, sizeof(*t->v));
	t->segs = calloc(json_array_size(segs) ? json_array_size(segs) : 1, sizeof(*t->segs));
	if (t->v == NULL || t->segs == NULL)
		return -ENOMEM;
	json_array_foreach(segs, i, seg) {
		uint64_t addr, size, device = 0, stream = 0;
		struct gmt__tensor_device *d;

		if (!get_u64(seg, "address", &addr) || !get_u64(seg, "total_size", &size) ||
		    (json_object_get(seg, "device") != NULL && !get_u64(seg, "device", &device)) ||
		    device >= INT16_MAX || (d = device_of(t, (int)device)) == NULL)
			continue;
		(void)get_u64(seg, "stream", &stream);
		t->segs[t->nsegs++] = (struct gmt__segment_range){ addr, addr + size, (int)device };
		d->reserved_bytes += size;
		json_array_foreach(json_object_get(seg, "blocks"), j, b) {
			const char *state = json_string_value(json_object_get(b, "state"));
			struct gmt__tensor *x = &t->v[t->n];
			int r;

			if (state == NULL || strcmp(state, "active_allocated") != 0 || !get_u64(b, "address", &x->addr) ||
			    !get_u64(b, "size", &x->size))
				continue;
			if (!get_u64(b, "requested_size", &x->requested))
				x->requested = x->size;
			x->segment = addr;
			x->stream = stream;
			x->device = (int)device;
			if ((r = stack_of(t, in, json_object_get(b, "frames"), &x->stack)) < 0)
				return r;
			d->tensor_bytes += x->size;
			d->tensor_count++;
			t->n++;
		}
	}
	qsort(t->v, t->n, sizeof(*t->v), by_address);
	qsort(t->segs, t->nsegs, sizeof(*t->segs), by_range);
	return 0;
}

static const struct gmt__segment_range *segment_at(const struct gmt__tensors *t, int device, uint64_t addr)
{
	size_t lo = 0, hi = t->nsegs;

	/* The last segment starting at or before addr. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->segs[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* Devices share no addresses (unified addressing); a device that
	 * differs is no match. */
	if (lo == 0 || addr >= t->segs[lo - 1].end || t->segs[lo - 1].device != device)
		return NULL;
	return &t->segs[lo - 1];
}

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

bool gmt__tensors_backs(const struct gmt__tensors *t, const struct gmt__entry *e)
{
	if (e->space == GMT_SPACE_HANDLE)
		return t->nbacking > 0 && bsearch(&e->addr, t->backing, t->nbacking, sizeof(*t->backing), by_u64) != NULL;
	if (e->space != GMT_SPACE_MEMORY || e->size == 0)
		return false;
	{
		const struct gmt__segment_range *s = segment_at(t, e->device, e->addr);

		return s != NULL && e->addr + e->size <= s->end;
	}
}

/* Each device's split: the driver's live memory, and what of it backs the
 * framework's segments. 0 or -ENOMEM. */
static int split_devices(struct gmt__tensors *t, const struct gmt__entry *const *mem, size_t nmem,
			 const struct gmt__entry *const *maps, size_t nmaps)
{
	t->backing = malloc((nmaps ? nmaps : 1) * sizeof(*t->backing));
	if (t->backing == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < nmaps; i++) {
		if (segment_at(t, maps[i]->device, maps[i]->addr) != NULL)
			t->backing[t->nbacking++] = maps[i]->link;
	}
	qsort(t->backing, t->nbacking, sizeof(*t->backing), by_u64);
	for (size_t i = 0; i < nmem; i++) {
		struct gmt__tensor_device *d;

		if (mem[i]->device < 0 || (d = device_of(t, mem[i]->device)) == NULL)
			continue;
		d->live_bytes += mem[i]->size;
		if (gmt__tensors_backs(t, mem[i]))
			d->segment_bytes += mem[i]->size;
	}
	for (int i = 0; i < t->ndev; i++) {
		struct gmt__tensor_device *d = &t->dev[i];

		d->cached_bytes = d->reserved_bytes > d->tensor_bytes ? d->reserved_bytes - d->tensor_bytes : 0;
		d->other_bytes = d->live_bytes - d->segment_bytes;
	}
	return 0;
}

/* ---- the history, replayed ---------------------------------------------------------- */

enum tev_op { TEV_ALLOC, TEV_FREE_REQUESTED, TEV_FREE_COMPLETED };

struct tev {
	uint64_t time_ns; /* made non-decreasing within its device */
	size_t order;     /* in its device's history */
	uint64_t addr, size, stream;
	uint32_t stack;
	int device;
	uint8_t op;
};

static int by_time(const void *x, const void *y)
{
	const struct tev *a = x, *b = y;

	if (a->time_ns != b->time_ns)
		return a->time_ns < b->time_ns ? -1 : 1;
	if (a->device != b->device)
		return a->device < b->device ? -1 : 1;
	return a->order < b->order ? -1 : a->order > b->order;
}

/* Open allocations by (device, address): open addressing, deletion by
 * backward shift. */
struct open_set {
	struct open_slot {
		uint64_t addr;
		uint64_t size;
		uint32_t stack;
		int device; /* -1: empty */
		bool requested; /* freed (requested), its completion to come */
	} *v;
	size_t cap, n;
};

static size_t open_hash(const struct open_set *o, int device, uint64_t addr)
{
	return (size_t)((addr >> 9) * 0x9e3779b97f4a7c15ull ^ (uint64_t)device) & (o->cap - 1);
}

static int open_init(struct open_set *o, size_t n)
{
	o->cap = 64;
	while (o->cap < 2 * n + 2)
		o->cap *= 2;
	o->n = 0;
	o->v = malloc(o->cap * sizeof(*o->v));
	if (o->v == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < o->cap; i++)
		o->v[i].device = -1;
	return 0;
}

static struct open_slot *open_find(struct open_set *o, int device, uint64_t addr)
{
	for (size_t at = open_hash(o, device, addr);; at = (at + 1) & (o->cap - 1)) {
		if (o->v[at].device < 0)
			return NULL;
		if (o->v[at].device == device && o->v[at].addr == addr)
			return &o->v[at];
	}
}

/* Room is assured: the set was made for twice what it ever holds. */
static struct open_slot *open_put(struct open_set *o, int device, uint64_t addr)
{
	size_t at;

	for (at = open_hash(o, device, addr); o->v[at].device >= 0; at = (at + 1) & (o->cap - 1)) {
		if (o->v[at].device == device && o->v[at].addr == addr)
			return &o->v[at];
	}
	o->v[at] = (struct open_slot){ .addr = addr, .device = device };
	o->n++;
	return &o->v[at];
}

static void open_del(struct open_set *o, struct open_slot *s)
{
	size_t at = (size_t)(s - o->v), next;

	o->v[at].device = -1;
	o->n--;
	for (next = (at + 1) & (o->cap - 1); o->v[next].device >= 0; next = (next + 1) & (o->cap - 1)) {
		size_t home = open_hash(o, o->v[next].device, o->v[next].addr);
		/* Whether next's home lies cyclically outside (at, next]. */
		bool move = at <= next ? (home <= at || home > next) : (home <= at && home > next);

		if (move) {
			o->v[at] = o->v[next];
			o->v[next].device = -1;
			at = next;
		}
	}
}

static struct gmt__tensor *tensor_at(struct gmt__tensors *t, int device, uint64_t addr)
{
	struct gmt__tensor key = { .addr = addr, .device = device };

	return t->n > 0 ? bsearch(&key, t->v, t->n, sizeof(*t->v), by_address) : NULL;
}

static uint64_t rounded(uint64_t size)
{
	uint64_t r = size < GMT_TENSOR_ROUND ? GMT_TENSOR_ROUND : (size + GMT_TENSOR_ROUND - 1) / GMT_TENSOR_ROUND * GMT_TENSOR_ROUND;

	return r < size ? size : r;
}

/* The events of every device's history, in one order. 0 or -ENOMEM. */
static int collect_events(struct gmt__tensors *t, const json_t *traces, const uint32_t *stack_map, size_t nmap,
			  struct tev **out, size_t *nout, bool *timed)
{
	size_t cap = 0, n = 0, i, j;
	const json_t *tr, *ev;
	struct tev *v;

	*timed = true;
	t->complete = json_array_size(traces) > 0;
	json_array_foreach(traces, i, tr) {
		cap += json_array_size(json_object_get(tr, "events"));
	}
	v = malloc((cap ? cap : 1) * sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	json_array_foreach(traces, i, tr) {
		uint64_t device = 0, last = 0, k = 0;

		if (!get_u64(tr, "device", &device) || device >= INT16_MAX)
			continue;
		t->complete &= json_is_true(json_object_get(tr, "complete"));
		json_array_foreach(json_object_get(tr, "events"), j, ev) {
			const char *action = json_string_value(json_array_get(ev, 0));
			const json_t *when = json_array_get(ev, 3);
			struct tev *x = &v[n];
			uint64_t stack = 0;

			if (action == NULL || !item_u64(ev, 1, &x->addr) || !item_u64(ev, 2, &x->size))
				continue;
			if (strcmp(action, "alloc") == 0)
				x->op = TEV_ALLOC;
			else if (strcmp(action, "free_requested") == 0)
				x->op = TEV_FREE_REQUESTED;
			else if (strcmp(action, "free_completed") == 0)
				x->op = TEV_FREE_COMPLETED;
			else
				continue;
			if (json_is_integer(when) && json_integer_value(when) >= 0 &&
			    json_integer_value(when) < INT64_MAX / 1000) {
				x->time_ns = (uint64_t)json_integer_value(when) * 1000;
			} else {
				*timed = false;
				x->time_ns = 0;
			}
			/* A device's own order stands: its clock only goes on. */
			if (x->time_ns < last)
				x->time_ns = last;
			last = x->time_ns;
			x->stack = item_u64(ev, 4, &stack) && stack < nmap ? stack_map[stack] : 0;
			x->stream = 0;
			(void)item_u64(ev, 5, &x->stream);
			x->device = (int)device;
			x->order = k++;
			n++;
		}
	}
	if (!*timed) {
		for (size_t k = 0; k < n; k++)
			v[k].time_ns = 0;
	}
	qsort(v, n, sizeof(*v), by_time);
	*out = v;
	*nout = n;
	return 0;
}

/* The steps handed over ([number, time_ns]...), by time. 0 or -ENOMEM. */
struct step_mark {
	uint64_t step, time_ns;
};

static int by_step_time(const void *x, const void *y)
{
	const struct step_mark *a = x, *b = y;

	return a->time_ns < b->time_ns ? -1 : a->time_ns > b->time_ns;
}

static int collect_steps(const json_t *steps, struct step_mark **out, size_t *nout)
{
	size_t n = 0, i;
	const json_t *s;
	struct step_mark *v = malloc((json_array_size(steps) ? json_array_size(steps) : 1) * sizeof(*v));

	if (v == NULL)
		return -ENOMEM;
	json_array_foreach(steps, i, s) {
		if (item_u64(s, 0, &v[n].step) && item_u64(s, 1, &v[n].time_ns))
			n++;
	}
	qsort(v, n, sizeof(*v), by_step_time);
	*out = v;
	*nout = n;
	return 0;
}

static void change(struct gmt__history *h, int device, uint64_t addr, uint64_t size, uint32_t stack, bool add,
		   uint64_t seq, uint64_t time_ns, bool seed)
{
	struct gmt__entry e = {
		.addr = addr, .size = size, .stack = stack, .kind = GMT_KIND_DEVICE, .space = GMT_SPACE_MEMORY,
		.device = (int16_t)device,
	};
	struct gmt__hist_cause cause = { .seq = seq, .time_ns = time_ns, .put_back = seed };

	gmt__history_change(h, &e, add, &cause);
}

/* Pass 1: what was live before the first event (seeds: stack 0 for a
 * tensor seen freed only), and the size each allocation event counts.
 * Pass 2: the history, steps among its events. */
static int replay(struct gmt__tensors *t, struct tev *ev, size_t n, bool timed, const struct step_mark *steps,
		  size_t nsteps)
{
	struct open_set open = { 0 };
	uint64_t *size_of = malloc((n ? n : 1) * sizeof(*size_of));
	bool *live_at = calloc(t->n ? t->n : 1, sizeof(*live_at)); /* the tensor's last allocation was seen */
	struct tev *seeds = malloc((n + t->n ? n + t->n : 1) * sizeof(*seeds));
	size_t nseeds = 0, s = 0;
	uint64_t t0 = n > 0 && timed ? ev[0].time_ns : 0;
	int r = -ENOMEM;

	/* Open at once: at most every seed and every allocation. */
	if (size_of == NULL || live_at == NULL || seeds == NULL || open_init(&open, n + t->n) < 0)
		goto out;
	/* A live tensor counts its block from its last allocation on. */
	for (size_t i = n; i-- > 0;) {
		struct gmt__tensor *x;

		size_of[i] = rounded(ev[i].size);
		if (ev[i].op != TEV_ALLOC || (x = tensor_at(t, ev[i].device, ev[i].addr)) == NULL || live_at[x - t->v])
			continue;
		size_of[i] = x->size;
		live_at[x - t->v] = true;
		x->time_ns = ev[i].time_ns;
	}
	for (size_t i = 0; i < n; i++) {
		struct open_slot *o = open_find(&open, ev[i].device, ev[i].addr);

		if (ev[i].op == TEV_ALLOC) {
			o = open_put(&open, ev[i].device, ev[i].addr);
			o->requested = false;
			continue;
		}
		if (o != NULL && o->requested) {
			/* The completion of a free already requested. */
			if (ev[i].op == TEV_FREE_COMPLETED)
				open_del(&open, o);
			continue;
		}
		if (o == NULL) {
			seeds[nseeds++] = (struct tev){ .addr = ev[i].addr, .size = rounded(ev[i].size), .device = ev[i].device };
			o = open_put(&open, ev[i].device, ev[i].addr);
		}
		if (ev[i].op == TEV_FREE_REQUESTED)
			o->requested = true;
		else
			open_del(&open, o);
	}
	for (size_t i = 0; i < t->n; i++) {
		if (!live_at[i]) {
			seeds[nseeds++] = (struct tev){ .addr = t->v[i].addr, .size = t->v[i].size, .stack = t->v[i].stack,
							.device = t->v[i].device };
		}
	}

	t->history = malloc(sizeof(*t->history));
	if (t->history == NULL || gmt__history_init(t->history, 0) < 0)
		goto out;
	t->events = n;
	t->seeded = nseeds;
	if (timed && n > 0) {
		t->first_ns = ev[0].time_ns;
		t->last_ns = ev[n - 1].time_ns;
		gmt__history_tick(t->history, t0);
	}
	/* Steps before the history's first event change nothing it holds. */
	while (timed && s < nsteps && steps[s].time_ns < t0)
		s++;
	for (size_t i = 0; i < nseeds; i++)
		change(t->history, seeds[i].device, seeds[i].addr, seeds[i].size, seeds[i].stack, true, 0, t0, true);
	open.n = 0;
	for (size_t i = 0; i < open.cap; i++)
		open.v[i].device = -1;
	for (size_t i = 0; i < nseeds; i++) {
		struct open_slot *o = open_put(&open, seeds[i].device, seeds[i].addr);

		o->size = seeds[i].size;
		o->stack = seeds[i].stack;
	}
	for (size_t i = 0; i < n; i++) {
		struct open_slot *o;

		for (; timed && s < nsteps && steps[s].time_ns <= ev[i].time_ns; s++) {
			struct gmt__hist_cause cause = { .time_ns = steps[s].time_ns };

			gmt__history_tick(t->history, steps[s].time_ns);
			gmt__history_step(t->history, &cause, steps[s].step);
			t->steps++;
		}
		if (timed)
			gmt__history_tick(t->history, ev[i].time_ns);
		o = open_find(&open, ev[i].device, ev[i].addr);
		if (ev[i].op == TEV_ALLOC) {
			if (o != NULL) /* a free the history lost: gone before this */
				change(t->history, ev[i].device, ev[i].addr, o->size, o->stack, false, i + 1, ev[i].time_ns,
				       false);
			o = open_put(&open, ev[i].device, ev[i].addr);
			o->size = size_of[i];
			o->stack = ev[i].stack;
			o->requested = false;
			change(t->history, ev[i].device, ev[i].addr, o->size, o->stack, true, i + 1, ev[i].time_ns, false);
			continue;
		}
		if (o == NULL)
			continue;
		if (!o->requested)
			change(t->history, ev[i].device, ev[i].addr, o->size, o->stack, false, i + 1, ev[i].time_ns, false);
		if (ev[i].op == TEV_FREE_REQUESTED)
			o->requested = true;
		else
			open_del(&open, o);
	}
	/* Steps marked after the last event: rounds in which nothing changed. */
	for (; timed && s < nsteps; s++) {
		struct gmt__hist_cause cause = { .time_ns = steps[s].time_ns };

		gmt__history_tick(t->history, steps[s].time_ns);
		gmt__history_step(t->history, &cause, steps[s].step);
		t->steps++;
	}
	r = 0;
out:
	free(open.v);
	free(size_of);
	free(live_at);
	free(seeds);
	return r;
}

static int by_live_desc(const void *x, const void *y)
{
	const struct gmt__site_ref *a = x, *b = y;

	if (a->live != b->live)
		return a->live < b->live ? 1 : -1;
	return a->id < b->id ? -1 : a->id > b->id;
}

/* The replay's sites, most live bytes first (ids: stack indices). */
static int sort_sites(struct gmt__tensors *t)
{
	const struct gmt__history *h = t->history;

	t->sites = malloc((t->nstacks ? t->nstacks : 1) * sizeof(*t->sites));
	if (t->sites == NULL)
		return -ENOMEM;
	for (uint32_t id = 0; id < t->nstacks; id++) {
		const struct gmt__site *s = h != NULL ? gmt__history_site(h, id) : NULL;

		if (s != NULL)
			t->sites[t->nsites++] = (struct gmt__site_ref){ id, s->live_bytes };
	}
	qsort(t->sites, t->nsites, sizeof(*t->sites), by_live_desc);
	return 0;
}

/* The latest step mark, and what the live tensors allocated since hold —
 * known when the history reaches back to the mark. */
static void step_tensors(struct gmt__tensors *t, const struct step_mark *steps, size_t nsteps, bool timed)
{
	if (nsteps == 0 || !timed || t->events == 0)
		return;
	t->step = steps[nsteps - 1].step;
	t->step_ns = steps[nsteps - 1].time_ns;
	t->first_step_ns = steps[0].time_ns;
	t->first_step_known = t->first_ns <= t->first_step_ns;
	if (t->first_ns > t->step_ns && !t->complete)
		return;
	t->step_known = true;
	for (size_t i = 0; i < t->n; i++) {
		if (t->v[i].time_ns > t->step_ns) {
			t->step_bytes += t->v[i].size;
			t->step_count++;
		}
	}
}

int gmt__tensors_build(struct gmt__tensors *t, json_t *state, const struct gmt__entry *const *mem, size_t nmem,
		       const struct gmt__entry *const *maps, size_t nmaps)
{
	const json_t *segs = json_object_get(state, "segments"), *traces, *tstacks;
	struct interner in = { 0 };
	uint32_t *stack_map = NULL;
	struct step_mark *steps = NULL;
	struct tev *ev = NULL;
	size_t nev = 0, nsteps = 0, nmap = 0;
	bool timed = false;
	int r;

	memset(t, 0, sizeof(*t));
	if (!json_is_array(segs) || json_array_size(segs) == 0)
		return 0;
	t->state = json_incref(state);
	t->framework = json_string_value(json_object_get(state, "name"));
	t->stacks = malloc(sizeof(*t->stacks));
	if (t->stacks == NULL)
		return -ENOMEM;
	t->stacks[0] = (struct gmt__tensor_stack){ NULL, 0 };
	t->nstacks = 1;
	if ((r = collect_blocks(t, &in, segs)) < 0)
		goto out;
	/* Segments none of which could be read are no level. */
	if (t->nsegs == 0)
		goto out;
	if ((r = split_devices(t, mem, nmem, maps, nmaps)) < 0)
		goto out;
	t->known = true;
	traces = json_object_get(state, "traces");
	tstacks = json_object_get(state, "trace_stacks");
	if (json_is_array(traces)) {
		size_t i;
		const json_t *frames;

		nmap = json_array_size(tstacks);
		stack_map = calloc(nmap ? nmap : 1, sizeof(*stack_map));
		r = stack_map != NULL ? 0 : -ENOMEM;
		json_array_foreach(tstacks, i, frames) {
			if (r == 0)
				r = stack_of(t, &in, frames, &stack_map[i]);
		}
		if (r < 0 || (r = collect_events(t, traces, stack_map, nmap, &ev, &nev, &timed)) < 0 ||
		    (r = collect_steps(json_object_get(state, "steps"), &steps, &nsteps)) < 0 ||
		    (r = replay(t, ev, nev, timed, steps, nsteps)) < 0)
			goto out;
		step_tensors(t, steps, nsteps, timed);
	}
	r = sort_sites(t);
out:
	free(in.slots);
	free(stack_map);
	free(steps);
	free(ev);
	if (r < 0)
		t->known = false;
	return r;
}

bool gmt__tensors_frames(const void *ctx, uint32_t id, const struct gmt__site_frame **v, int *n)
{
	const struct gmt__tensors *t = ctx;
	uint32_t index = id - GMT_TENSOR_STACK_BASE;

	if (t == NULL || !gmt__is_tensor_stack(id) || index >= t->nstacks)
		return false;
	*v = t->stacks[index].v;
	*n = t->stacks[index].n;
	return true;
}

void gmt__tensors_free(struct gmt__tensors *t)
{
	for (size_t i = 1; t->stacks != NULL && i < t->nstacks; i++)
		free(t->stacks[i].v);
	free(t->stacks);
	free(t->v);
	free(t->segs);
	free(t->backing);
	free(t->sites);
	if (t->history != NULL)
		gmt__history_destroy(t->history);
	free(t->history);
	json_decref(t->state);
	memset(t, 0, sizeof(*t));
}
