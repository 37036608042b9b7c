/* The consumer's first half: one event applied to the live table, the
 * totals and the history, in global order (tracer/tracer.h: the state). */
#define _GNU_SOURCE
#include "intercept/hooks.h"
#include "tracer/tracer.h"

#include "util/log.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

/* --- the consumer: events → live table ------------------------------------------- */

static bool counts_as_memory(enum gmt__space space)
{
	return space == GMT_SPACE_MEMORY || space == GMT_SPACE_ARRAY || space == GMT_SPACE_HANDLE;
}

/* The slot of gmt__core.kind_live of `device` ([0]: host), or -1. */
static int device_slot(int device)
{
	return device >= -1 && device < GMT_MAX_DEVICES ? device + 1 : -1;
}

static void account(const struct gmt__entry *e, bool add)
{
	int d;

	if (!counts_as_memory(e->space))
		return;
	d = device_slot(e->device);
	if (gmt__core.have_hist)
		gmt__history_change(&gmt__core.hist, e, add, &gmt__core.cause);
	if (add)
		gmt__episode_allocated(e);
	else
		gmt__episode_freed(e);
	if (add) {
		gmt__core.live_bytes += e->size;
		gmt__core.live_count++;
		if (d >= 0) {
			uint64_t now;

			gmt__core.kind_live[d][e->kind] += e->size;
			gmt__core.kind_count[d][e->kind]++;
			now = gmt__slot_live(d);
			if (now > gmt__core.api_peak[d + 1])
				gmt__core.api_peak[d + 1] = now;
			if (now > gmt__core.device_peak[d])
				gmt__core.device_peak[d] = now;
		}
		if (gmt__core.live_bytes > gmt__core.api_peak[0])
			gmt__core.api_peak[0] = gmt__core.live_bytes;
		if (gmt__core.live_bytes > gmt__core.peak_bytes) {
			gmt__core.peak_bytes = gmt__core.live_bytes;
			gmt__peak_high(gmt__core.cause.time_ns);
		}
	} else {
		gmt__core.live_bytes -= e->size;
		gmt__core.live_count--;
		if (d >= 0) {
			gmt__core.kind_live[d][e->kind] -= e->size;
			gmt__core.kind_count[d][e->kind]--;
		}
	}
}

/* The bookkeeping of an entry that left the table. */
static void removed(const struct gmt__entry *e)
{
	account(e, false);
	if (counts_as_memory(e->space))
		gmt__core.total_frees++;
}

/* Removes (space, addr) in one probe; false when it was not there. */
static bool remove_key(enum gmt__space space, uint64_t addr)
{
	struct gmt__entry e;

	if (!gmt__table_remove(gmt__core.table, space, addr, &e))
		return false;
	removed(&e);
	return true;
}

struct gone {
	uintptr_t ctx;
	int device;
	bool primary;
	struct gmt__entry *v;
	size_t n, cap;
	bool failed;
};

static int collect_gone(void *arg, const struct gmt__entry *e)
{
	struct gone *g = arg;

	if (e->space != GMT_SPACE_MEMORY && e->space != GMT_SPACE_ARRAY)
		return 0;
	if (!((g->ctx != 0 && e->aux == g->ctx) ||
	      (g->primary && e->kind == GMT_KIND_ASYNC && e->device == g->device)))
		return 0;
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 256;
		struct gmt__entry *v = realloc(g->v, cap * sizeof(*v));

		if (v == NULL) {
			g->failed = true;
			return 1;
		}
		g->v = v;
		g->cap = cap;
	}
	g->v[g->n++] = *e;
	return 0;
}

/* A context went away: the driver freed everything allocated in it, and with a
 * device's primary context its stream-ordered memory too. VMM handles and
 * reservations are not a context's and stay. */
static void apply_context_gone(uintptr_t ctx, int device, bool primary)
{
	struct gone g = { .ctx = ctx, .device = device, .primary = primary };

	gmt__table_each(gmt__core.table, collect_gone, &g);
	if (g.failed) {
		static bool once;
		gmt__warn_once(&once, "out of memory while dropping a destroyed context's allocations");
	}
	for (size_t i = 0; i < g.n; i++)
		remove_key((enum gmt__space)g.v[i].space, g.v[i].addr);
	free(g.v);
}

/* Frees are recorded after their real call, and only when the driver
 * honoured it: two frees of one address racing (a program's double free)
 * then record exactly the one that freed. So are VMM releases, unmaps and
 * address frees (their handles below, "VMM handles"). Every record of a
 * free and of what makes an entry carries its window's start (link, or
 * span: next_seq when its call began), and two orders the records can
 * invert are put right here, in every space (memory, arrays, reservations,
 * mappings):
 *
 * - An allocation recorded at an address the table still holds: the driver
 *   never gives out a live address, so a free of the old entry ran and has
 *   not recorded yet. The old entry leaves now (freed at the allocation's
 *   number), and the address owes one free (a debt, with the allocation's
 *   number). A free of the address whose call began no later than that
 *   number pays the debt and changes nothing else — every free that made
 *   room for the allocation began before it recorded, and a free begun
 *   after it cannot pay. The debt outlives the entry: the new allocation
 *   may be freed, and the address given out again, before the late free
 *   records. NOTE: a stale free that really freed the new entry, begun
 *   before its record, pays the debt, and the late free of the old one then
 *   removes the new entry: the same live set, the frees named the other way
 *   round.
 * - A free the driver honoured of an address the table does not hold freed
 *   either memory the tracer never saw, or an allocation whose call had
 *   returned the address but not yet recorded it — a stale free racing
 *   another thread's allocation of the same address. The second is told by
 *   the allocation's window: a free of its address that found nothing,
 *   recorded inside [link, seq), came after the driver gave the address out.
 *   NOTE: a free of memory the tracer never saw, overlapping in time a new
 *   allocation of the same address, would be taken for the second: a rarer
 *   conjunction than either. The table is direct-mapped: a slot lost to a
 *   collision loses a kill, never makes a wrong one (the address is
 *   compared). */

/* The debts: 4-way sets by address. Open debts are few (at most one per
 * free in flight, plus frees the tracer never saw), so a full set gives up
 * its oldest (stats.debts_dropped): that late free, if it still comes,
 * removes what then lives at the address. `size` is the replaced entry's:
 * a late unmap walks its range mapping by mapping. */
#define DEBT_SETS 512
#define DEBT_WAYS 4
static struct gmt__debt {
	uint64_t addr, seq, size;
	uint32_t count;
	uint8_t space;
} debts[DEBT_SETS][DEBT_WAYS];
static size_t debts_open; /* ways in use: none, nothing to look up */

static struct gmt__debt *debt_set(uint64_t addr)
{
	return debts[(size_t)((addr >> 6) * 0x9e3779b97f4a7c15ull >> 55) % DEBT_SETS];
}

static void debt_add(enum gmt__space space, uint64_t addr, uint64_t seq, uint64_t size)
{
	struct gmt__debt *set = debt_set(addr), *slot = NULL;

	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count > 0 && d->addr == addr && d->space == (uint8_t)space) {
			/* Paid by frees begun before the latest allocation. */
			d->count++;
			d->seq = seq;
			d->size = size;
			return;
		}
		if (slot == NULL || (slot->count > 0 && (d->count == 0 || d->seq < slot->seq)))
			slot = d;
	}
	if (slot->count > 0)
		STAT_ADD(debts_dropped, 1);
	else
		debts_open++;
	*slot = (struct gmt__debt){ .addr = addr, .seq = seq, .size = size, .count = 1, .space = (uint8_t)space };
}

/* Pays a debt of (space, addr) with a free begun at `began`: true, and the
 * size of the entry it freed into *size, when there was one to pay. */
static bool debt_pay(enum gmt__space space, uint64_t addr, uint64_t began, uint64_t *size)
{
	struct gmt__debt *set;

	if (debts_open == 0 || began == 0)
		return false;
	set = debt_set(addr);
	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count == 0 || d->addr != addr || d->space != (uint8_t)space || began > d->seq)
			continue;
		*size = d->size;
		if (--d->count == 0)
			debts_open--;
		return true;
	}
	return false;
}

#define UNKNOWN_FREES 1024
static struct {
	uint64_t addr, seq;
	uint8_t space;
} unknown_frees_seen[UNKNOWN_FREES];

static size_t unknown_slot(uint64_t addr)
{
	return (size_t)((addr >> 6) * 0x9e3779b97f4a7c15ull >> 54) % UNKNOWN_FREES;
}

static bool unknown_any; /* some slot was ever filled: else nothing to look up */

static void unknown_free(enum gmt__space space, uint64_t addr, uint64_t seq)
{
	size_t i = unknown_slot(addr);

	STAT_ADD(unknown_frees, 1);
	unknown_any = true;
	unknown_frees_seen[i].addr = addr;
	unknown_frees_seen[i].seq = seq;
	unknown_frees_seen[i].space = (uint8_t)space;
}

static bool freed_in_flight(enum gmt__space space, uint64_t addr, uint64_t began, uint64_t seq)
{
	size_t i = unknown_slot(addr);

	if (!unknown_any || began == 0 || unknown_frees_seen[i].addr != addr || unknown_frees_seen[i].space != (uint8_t)space ||
	    unknown_frees_seen[i].seq < began || unknown_frees_seen[i].seq > seq)
		return false;
	unknown_frees_seen[i].addr = 0;
	return true;
}

/* gmt__table_insert, one warning when the table is out of memory. */
static struct gmt__entry *table_put(const struct gmt__entry *e, struct gmt__entry *replaced)
{
	struct gmt__entry *at = gmt__table_insert(gmt__core.table, e, replaced);

	if (at == NULL) {
		static bool once;
		gmt__warn_once(&once, "out of memory for the live table; some allocations are not tracked");
	}
	return at;
}

/* Inserts *e, made by the record numbered `seq`. An entry already at its key
 * was freed by a free not yet recorded: it leaves (copied to *old when not
 * NULL) and the address owes that free (debts above). Returns 1 when an
 * entry was replaced, 0 when not, -1 when the table is out of memory. */
static int insert(const struct gmt__entry *e, uint64_t seq, struct gmt__entry *old)
{
	size_t before = gmt__table_count(gmt__core.table);
	struct gmt__entry replaced;
	int r = 0;

	if (table_put(e, &replaced) == NULL)
		return -1;
	/* One probe: the count tells a replaced entry from a new one. The
	 * old one leaves before the new one counts (no false peak). */
	if (gmt__table_count(gmt__core.table) == before) {
		STAT_ADD(replaced, 1);
		removed(&replaced);
		debt_add((enum gmt__space)e->space, e->addr, seq, replaced.size);
		if (old != NULL)
			*old = replaced;
		r = 1;
	}
	account(e, true);
	return r;
}

/* A free of (space, addr) the driver honoured, its call begun at `began`,
 * recorded as `seq`: false when the table held nothing there (nor owed a
 * free). What it freed goes to *out: the entry that left, or, when it paid
 * a debt (the entry left earlier), only its size, with space
 * GMT_SPACE_COUNT. */
static bool apply_free(enum gmt__space space, uint64_t addr, uint64_t began, uint64_t seq, struct gmt__entry *out)
{
	struct gmt__entry e;

	/* A free that made room for a later allocation was applied then. */
	if (debt_pay(space, addr, began, &out->size)) {
		out->space = GMT_SPACE_COUNT; /* nothing left the table now */
		return true;
	}
	if (gmt__table_remove(gmt__core.table, space, addr, &e)) {
		removed(&e);
		*out = e;
		return true;
	}
	unknown_free(space, addr, seq);
	return false;
}

/* --- VMM handles: counts that commute ------------------------------------------------- */

/* A handle holds memory from its cuMemCreate until both its references
 * (cuMemRelease) and its mappings (cuMemUnmap) are gone; retains and maps
 * add to them. Recorded after their calls, a release or unmap can reach
 * the consumer before the map or retain it followed (one thread maps,
 * another releases the last reference counting on that mapping), and a
 * create before the last release or unmap of the earlier handle of the same
 * value (the driver gives a freed handle's value out again). Counting puts
 * both right without any order: references and mappings are counted as
 * signed numbers over every record of the value, the latest create giving
 * size, device and stack; a sum of additions is the same in any order, so
 * once every call has recorded, the sum is the driver's — above zero while
 * the handle lives, zero once it is freed (every earlier handle of the value
 * added up to zero). Between, the tracer holds the handle while its sum is
 * above zero: in the table, counted as memory. One whose sum falls to zero
 * or below leaves for `settled`, where a later record of the value finds
 * its counts: a map or retain that lifts it above zero puts it back
 * (stats.put_back: its free uncounted, the history told it is not new).
 *
 * Totals: a create counts an allocation and a free (a handle is freed
 * unless the table holds it); entering the table takes the free back,
 * leaving counts it again. */

static int64_t handle_sum(const struct gmt__entry *h)
{
	return (int64_t)h->refs + (int64_t)h->aux;
}

/* The handles that left the table (their sum at most zero), 4-way sets by
 * value, until a later record or the set's need of room. A full set forgets
 * its oldest; one whose counts were not settled yet (stats.handles_forgotten)
 * loses the record still to come: a map or retain of it is then of a handle
 * the tracer does not know, a release or unmap frees nothing. */
#define SETTLED_SETS 256
#define SETTLED_WAYS 4
static struct settled {
	struct gmt__entry e;
	uint64_t seq; /* when it came, 0: a free way */
} settled[SETTLED_SETS][SETTLED_WAYS];

static struct settled *settled_set(uint64_t id)
{
	return settled[(size_t)(id * 0x9e3779b97f4a7c15ull >> 56) % SETTLED_SETS];
}

static struct settled *settled_find(uint64_t id)
{
	struct settled *set = settled_set(id);

	for (int w = 0; w < SETTLED_WAYS; w++) {
		if (set[w].seq != 0 && set[w].e.addr == id)
			return &set[w];
	}
	return NULL;
}

/* Keeps *e (record `seq`) in its way, else in a free one, else in place of
 * the set's oldest. */
static void settled_put(const struct gmt__entry *e, uint64_t seq)
{
	struct settled *set = settled_set(e->addr), *slot = settled_find(e->addr);

	for (int w = 0; slot == NULL && w < SETTLED_WAYS; w++) {
		if (set[w].seq == 0)
			slot = &set[w];
	}
	if (slot == NULL) {
		slot = &set[0];
		for (int w = 1; w < SETTLED_WAYS; w++) {
			if (set[w].seq < slot->seq)
				slot = &set[w];
		}
		if (slot->e.refs != 0 || slot->e.aux != 0)
			STAT_ADD(handles_forgotten, 1);
	}
	slot->e = *e;
	slot->seq = seq != 0 ? seq : 1;
}

/* Adds `refs` references and `maps` mappings to handle `id` (record `seq`);
 * `created`: the cuMemCreate that made it (refs 1), whose size, device and
 * stack the handle takes. False when the tracer knows no handle of that
 * value. */
static bool handle_add(uint64_t id, int refs, int maps, const struct gmt__entry *created, uint64_t seq)
{
	struct gmt__entry *h = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, id), e;
	struct settled *s = NULL;

	if (created != NULL) {
		gmt__core.total_allocs++;
		gmt__core.total_frees++;
	}
	if (h != NULL) {
		if (created != NULL) {
			/* The earlier handle of this value was freed before
			 * the create; its last release or unmap is still to
			 * record (and will add up to zero with its counts). */
			STAT_ADD(replaced, 1);
			account(h, false);
			e = *created;
			e.refs = h->refs;
			e.aux = h->aux;
			*h = e;
			account(h, true);
		}
		h->refs = (int16_t)(h->refs + refs);
		h->aux = (uint64_t)((int64_t)h->aux + maps);
		if (handle_sum(h) > 0)
			return true;
		e = *h;
		gmt__table_remove(gmt__core.table, GMT_SPACE_HANDLE, id, NULL);
		account(&e, false);
		gmt__core.total_frees++;
		settled_put(&e, seq);
		return true;
	}
	s = settled_find(id);
	if (s == NULL && created == NULL) {
		/* A stale release of a value given out again may come
		 * before the create's record (freed_in_flight); a map's or
		 * an unmap's handle is the mapping's own. */
		if (refs < 0)
			unknown_free(GMT_SPACE_HANDLE, id, seq);
		return false;
	}
	if (created != NULL) {
		e = *created;
		e.refs = s != NULL ? s->e.refs : 0;
		e.aux = s != NULL ? s->e.aux : 0;
	} else {
		e = s->e;
	}
	e.refs = (int16_t)(e.refs + refs);
	e.aux = (uint64_t)((int64_t)e.aux + maps);
	if (handle_sum(&e) <= 0) {
		settled_put(&e, seq);
		return true;
	}
	if (table_put(&e, NULL) == NULL)
		return true;
	if (s != NULL)
		s->seq = 0;
	if (created == NULL) {
		STAT_ADD(put_back, 1);
		gmt__core.cause.put_back = true;
	}
	account(&e, true);
	gmt__core.cause.put_back = false;
	gmt__core.total_frees--;
	return true;
}

/* cuMemMap: a mapping of its handle. */
static void apply_map(const struct gmt__event *ev, struct gmt__entry *e)
{
	uint64_t began = ev->seq - ev->span;
	const struct gmt__entry *h = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, ev->link);
	const struct settled *s = h == NULL ? settled_find(ev->link) : NULL;
	struct gmt__entry old;
	int r;

	e->space = GMT_SPACE_MAPPING;
	e->link = ev->link;
	e->aux = ev->extra;
	e->device = h != NULL ? h->device : s != NULL ? s->e.device : -1;
	r = insert(e, ev->seq, &old);
	if (r < 0)
		return;
	handle_add(ev->link, 0, 1, NULL, ev->seq);
	/* The mapping an unmap not yet recorded took away. */
	if (r > 0)
		handle_add(old.link, 0, -1, NULL, ev->seq);
	/* Unmapped already, by an unmap recorded while this map's call was
	 * under way (freed_in_flight). */
	if (freed_in_flight(GMT_SPACE_MAPPING, ev->addr, began, ev->seq) &&
	    gmt__table_remove(gmt__core.table, GMT_SPACE_MAPPING, ev->addr, NULL))
		handle_add(ev->link, 0, -1, NULL, ev->seq);
}

/* cuMemUnmap: the range is made of whole mappings, each dropping one mapping
 * of its handle. */
static void apply_unmap(const struct gmt__event *ev)
{
	uint64_t at = ev->addr, end = ev->addr + ev->size;

	while (at < end) {
		struct gmt__entry m;

		if (!apply_free(GMT_SPACE_MAPPING, at, ev->link, ev->seq, &m) || m.size == 0)
			return;
		if (m.space == GMT_SPACE_MAPPING)
			handle_add(m.link, 0, -1, NULL, ev->seq);
		at += m.size;
	}
}

void gmt__apply(const struct gmt__event *ev)
{
	enum gmt__space space = gmt__kind_space((enum gmt__kind)ev->kind);
	struct gmt__entry e = {
		.addr = ev->addr, .size = ev->size, .time_ns = ev->time_ns, .link = ev->seq,
		.stack = ev->stack, .tid = ev->tid, .api = ev->api, .kind = ev->kind,
		.space = (uint8_t)space, .device = ev->device,
	};
	struct gmt__entry freed;

	GMT_CHECK(gmt__core_held());
	gmt__core.cause = (struct gmt__hist_cause){
		.seq = ev->seq, .time_ns = ev->time_ns, .tid = ev->tid, .api = ev->api,
	};
	/* At a top, the state is copied before an event that may lower it. */
	if (gmt__core.peak_top)
		gmt__peak_before(ev->op);
	if (gmt__core.have_hist)
		gmt__history_tick(&gmt__core.hist, ev->time_ns);
	switch ((enum gmt__op)ev->op) {
	case GMT_OP_ALLOC:
		if (ev->kind == GMT_KIND_VMM) {
			handle_add(ev->addr, 1, 0, &e, ev->seq);
			/* Released already by a stale release of the value
			 * while this create was under way (freed_in_flight). */
			if (freed_in_flight(GMT_SPACE_HANDLE, ev->addr, ev->link, ev->seq))
				handle_add(ev->addr, -1, 0, NULL, ev->seq);
			break;
		}
		e.aux = ev->extra; /* the context it belongs to */
		e.stream = ev->stream;
		if (insert(&e, ev->seq, NULL) >= 0 && counts_as_memory(space))
			gmt__core.total_allocs++;
		/* Freed already: a free that found nothing, recorded while this
		 * allocation's call was under way, freed it (freed_in_flight). */
		if (freed_in_flight(space, ev->addr, ev->link, ev->seq))
			remove_key(space, ev->addr);
		break;
	case GMT_OP_FREE:
		if (!apply_free(space, ev->addr, ev->link, ev->seq, &freed))
			gmt__info("%s of %#llx: nothing the tracer saw allocated there (counted in unknown_frees)",
				  ev->api < GMT_API_COUNT ? gmt__api_names[ev->api] : "a free",
				  (unsigned long long)ev->addr);
		break;
	case GMT_OP_RETAIN:
		if (!handle_add(ev->addr, 1, 0, NULL, ev->seq))
			STAT_ADD(unknown_frees, 1);
		break;
	case GMT_OP_RELEASE:
		handle_add(ev->addr, -1, 0, NULL, ev->seq);
		break;
	case GMT_OP_MAP:
		apply_map(ev, &e);
		break;
	case GMT_OP_UNMAP:
		apply_unmap(ev);
		break;
	case GMT_OP_RESERVE:
		e.space = GMT_SPACE_RESERVATION;
		insert(&e, ev->seq, NULL);
		if (freed_in_flight(GMT_SPACE_RESERVATION, ev->addr, ev->link, ev->seq))
			remove_key(GMT_SPACE_RESERVATION, ev->addr);
		break;
	case GMT_OP_UNRESERVE:
		apply_free(GMT_SPACE_RESERVATION, ev->addr, ev->link, ev->seq, &freed);
		break;
	case GMT_OP_CONTEXT_GONE:
		apply_context_gone(ev->addr, ev->device, ev->link != 0);
		break;
	case GMT_OP_COUNT:
		break;
	}
}

/* Applies, in sequence order, every event with a sequence number below
 * `target`. Lock held. Returns how many were applied.
 *
 * Why the order is exact: a thread takes its number (one fetch_add on
 * next_seq) only once its ring has room, and pushes right after, so every
 * number below `target` is in some ring or about to be. When the event with
 * the expected number is not visible yet, its thread is between those two
 * steps: wait for it. A free's number is taken after its real call, so an
 * address freed and given out again can be numbered in either order; apply
 * puts that right (owed frees, "Frees are recorded after"). */

void gmt__apply_after_fork(void)
{
	memset(unknown_frees_seen, 0, sizeof(unknown_frees_seen));
	unknown_any = false;
	memset(debts, 0, sizeof(debts));
	debts_open = 0;
	memset(settled, 0, sizeof(settled));
}
