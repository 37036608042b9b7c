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
			if (gmt__core.peak_armed && gmt__core.live_bytes >= gmt__core.peak_next_bytes)
				gmt__core.peak_due = true;
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

static struct gmt__undo *undo_begin(uint64_t seq)
{
	struct gmt__undo *u = &gmt__core.undo[seq % GMT_UNDO_SLOTS];

	u->seq = seq;
	u->nremoved = u->ndec = 0;
	return u;
}

static void undo_removed(struct gmt__undo *u, const struct gmt__entry *e)
{
	if (u->nremoved < GMT_UNDO_ENTRIES)
		u->removed[u->nremoved++] = *e;
	else
		u->seq = 0; /* too much to put back: a later undo reports it lost */
}

static void undo_dec(struct gmt__undo *u, uint64_t handle, uint8_t op)
{
	if (u->ndec < GMT_UNDO_ENTRIES) {
		u->dec_handle[u->ndec] = handle;
		u->dec_op[u->ndec++] = op;
	} else {
		u->seq = 0;
	}
}

/* The bookkeeping of an entry that left the table. */
static void removed(const struct gmt__entry *e, struct gmt__undo *u)
{
	account(e, false);
	if (counts_as_memory(e->space))
		gmt__core.total_frees++;
	if (u != NULL)
		undo_removed(u, e);
}

static void remove_entry(struct gmt__entry *e, struct gmt__undo *u)
{
	struct gmt__entry copy = *e;

	gmt__table_remove(gmt__core.table, copy.space, copy.addr, NULL);
	removed(&copy, u);
}

/* Removes (space, addr) in one probe; false when it was not there. */
static bool remove_key(enum gmt__space space, uint64_t addr, struct gmt__undo *u)
{
	struct gmt__entry e;

	if (!gmt__table_remove(gmt__core.table, space, addr, &e))
		return false;
	removed(&e, u);
	return true;
}

/* A handle with no reference and no mapping left holds no memory. */
static void handle_settle(struct gmt__entry *h, struct gmt__undo *u)
{
	if (h->refs == 0 && h->aux == 0)
		remove_entry(h, u);
}

/* cuMemUnmap: the range is made of whole mappings, each dropping one mapping of
 * its handle. */
static void apply_unmap(const struct gmt__event *ev, struct gmt__undo *u)
{
	uint64_t at = ev->addr, end = ev->addr + ev->size;

	while (at < end) {
		struct gmt__entry *m = gmt__table_find(gmt__core.table, GMT_SPACE_MAPPING, at);
		struct gmt__entry *h;
		uint64_t handle;

		if (m == NULL) {
			STAT_ADD(unknown_frees, 1);
			return;
		}
		handle = m->link;
		at += m->size;
		remove_entry(m, u);
		h = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, handle);
		if (h != NULL && h->aux > 0) {
			h->aux--;
			undo_dec(u, handle, GMT_OP_UNMAP);
			handle_settle(h, u);
		}
	}
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
		remove_key((enum gmt__space)g.v[i].space, g.v[i].addr, NULL);
	free(g.v);
}

/* Frees are recorded after their real call, and only when the driver
 * honoured it: two frees of one address racing (a program's double free)
 * then record exactly the one that freed. Every free and allocation record
 * carries its window's start (link: next_seq when its call began), and two
 * orders the records can invert are put right here:
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
 * removes what then lives at the address. */
#define DEBT_SETS 512
#define DEBT_WAYS 4
static struct gmt__debt {
	uint64_t addr, seq;
	uint32_t count;
	uint8_t space;
} debts[DEBT_SETS][DEBT_WAYS];
static size_t debts_open; /* ways in use: none, nothing to look up */

static struct gmt__debt *debt_set(uint64_t addr)
{
	return debts[(size_t)((addr >> 6) * 0x9e3779b97f4a7c15ull >> 55) % DEBT_SETS];
}

static void debt_add(enum gmt__space space, uint64_t addr, uint64_t seq)
{
	struct gmt__debt *set = debt_set(addr), *slot = NULL;

	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count > 0 && d->addr == addr && d->space == (uint8_t)space) {
			/* Paid by frees begun before the latest allocation. */
			d->count++;
			d->seq = seq;
			return;
		}
		if (slot == NULL || (slot->count > 0 && (d->count == 0 || d->seq < slot->seq)))
			slot = d;
	}
	if (slot->count > 0)
		STAT_ADD(debts_dropped, 1);
	else
		debts_open++;
	*slot = (struct gmt__debt){ .addr = addr, .seq = seq, .count = 1, .space = (uint8_t)space };
}

static bool debt_pay(enum gmt__space space, uint64_t addr, uint64_t began)
{
	struct gmt__debt *set;

	if (debts_open == 0 || began == 0)
		return false;
	set = debt_set(addr);
	for (int w = 0; w < DEBT_WAYS; w++) {
		struct gmt__debt *d = &set[w];

		if (d->count == 0 || d->addr != addr || d->space != (uint8_t)space || began > d->seq)
			continue;
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

/* Inserts *e. An entry already at its key is replaced: with debt_seq (an
 * allocation's number) it was freed by a free not yet recorded, which the
 * address now owes (debts above); without, it was lost track of. */
static bool insert(const struct gmt__entry *e, uint64_t debt_seq)
{
	size_t before = gmt__table_count(gmt__core.table);
	struct gmt__entry old;

	if (gmt__table_insert(gmt__core.table, e, &old) == NULL) {
		static bool once;
		gmt__warn_once(&once, "out of memory for the live table; some allocations are not tracked");
		return false;
	}
	/* One probe: the count tells a replaced entry from a new one. */
	if (gmt__table_count(gmt__core.table) == before) {
		STAT_ADD(replaced, 1);
		if (debt_seq != 0) {
			removed(&old, NULL);
			debt_add((enum gmt__space)e->space, e->addr, debt_seq);
		} else {
			account(&old, false);
		}
	}
	account(e, true);
	return true;
}

/* Puts back what the removal with sequence number `seq` took away: its real
 * call failed, so nothing was freed. */
static void apply_undo(uint64_t seq)
{
	struct gmt__undo *u = &gmt__core.undo[seq % GMT_UNDO_SLOTS];

	if (u->seq != seq) {
		STAT_ADD(undo_lost, 1);
		return;
	}
	for (int i = 0; i < u->nremoved; i++) {
		if (gmt__table_find(gmt__core.table, u->removed[i].space, u->removed[i].addr) == NULL &&
		    insert(&u->removed[i], 0) && counts_as_memory(u->removed[i].space))
			gmt__core.total_frees--;
	}
	for (int i = 0; i < u->ndec; i++) {
		struct gmt__entry *h = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, u->dec_handle[i]);

		if (h == NULL)
			continue;
		if (u->dec_op[i] == GMT_OP_RELEASE)
			h->refs++;
		else
			h->aux++;
	}
	if (u->nremoved > 0 || u->ndec > 0)
		STAT_ADD(undone, 1);
	u->seq = 0;
}

void gmt__apply(const struct gmt__event *ev)
{
	enum gmt__space space = gmt__kind_space((enum gmt__kind)ev->kind);
	struct gmt__entry e = {
		.addr = ev->addr, .size = ev->size, .time_ns = ev->time_ns, .link = ev->seq,
		.stack = ev->stack, .tid = ev->tid, .api = ev->api, .kind = ev->kind,
		.space = (uint8_t)space, .device = ev->device,
	};
	struct gmt__entry *found;
	struct gmt__undo *u;

	GMT_CHECK(gmt__core_held());
	gmt__core.cause = (struct gmt__hist_cause){
		.seq = ev->seq, .time_ns = ev->time_ns, .tid = ev->tid, .api = ev->api,
		.undo = ev->op == GMT_OP_FREE_FAILED,
	};
	if (gmt__core.have_hist)
		gmt__history_tick(&gmt__core.hist, ev->time_ns);
	switch ((enum gmt__op)ev->op) {
	case GMT_OP_ALLOC:
		if (ev->kind == GMT_KIND_VMM) {
			e.refs = 1;
		} else {
			e.aux = ev->extra; /* the context it belongs to */
			e.stream = ev->stream;
		}
		/* A handle replaced was lost track of; an address replaced
		 * owes the free that made room (debts, "Frees are recorded"). */
		if (insert(&e, ev->kind == GMT_KIND_VMM ? 0 : ev->seq) && counts_as_memory(space))
			gmt__core.total_allocs++;
		/* Freed already: a free that found nothing, recorded while this
		 * allocation's call was under way, freed it (freed_in_flight). */
		if (freed_in_flight(space, ev->addr, ev->link, ev->seq))
			remove_key(space, ev->addr, NULL);
		break;
	case GMT_OP_FREE:
		/* Recorded after the driver honoured it: nothing to undo. A
		 * free that made room for a later allocation was applied then. */
		if (debt_pay(space, ev->addr, ev->link))
			break;
		if (!remove_key(space, ev->addr, NULL)) {
			STAT_ADD(unknown_frees, 1);
			unknown_free(space, ev->addr, ev->seq);
			gmt__info("%s of %#llx: nothing the tracer saw allocated there (counted in unknown_frees)",
				  ev->api < GMT_API_COUNT ? gmt__api_names[ev->api] : "a free",
				  (unsigned long long)ev->addr);
		}
		break;
	case GMT_OP_FREE_FAILED:
		apply_undo(ev->link);
		break;
	case GMT_OP_RETAIN:
		found = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, ev->addr);
		if (found == NULL)
			STAT_ADD(unknown_frees, 1);
		else
			found->refs++;
		break;
	case GMT_OP_RELEASE:
		u = undo_begin(ev->seq);
		found = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, ev->addr);
		if (found == NULL || found->refs == 0) {
			STAT_ADD(unknown_frees, 1);
			break;
		}
		found->refs--;
		undo_dec(u, ev->addr, GMT_OP_RELEASE);
		handle_settle(found, u);
		break;
	case GMT_OP_MAP:
		e.space = GMT_SPACE_MAPPING;
		e.link = ev->link;
		e.aux = ev->extra;
		found = gmt__table_find(gmt__core.table, GMT_SPACE_HANDLE, ev->link);
		if (found != NULL) {
			found->aux++;
			e.device = found->device;
		}
		insert(&e, 0);
		break;
	case GMT_OP_UNMAP:
		apply_unmap(ev, undo_begin(ev->seq));
		break;
	case GMT_OP_RESERVE:
		e.space = GMT_SPACE_RESERVATION;
		insert(&e, 0);
		break;
	case GMT_OP_CONTEXT_GONE:
		apply_context_gone(ev->addr, ev->device, ev->link != 0);
		break;
	case GMT_OP_UNRESERVE:
		if (!remove_key(GMT_SPACE_RESERVATION, ev->addr, undo_begin(ev->seq)))
			STAT_ADD(unknown_frees, 1);
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
}
