/* The caching allocator model (allocmodel.h): blocks in two pools, each a
 * set ordered by (stream, size, address) as PyTorch's std::set is, the
 * segment rules, and the driver's events it causes. The names of the steps
 * follow PyTorch's functions (get_free_block, alloc_block, ...) so that a
 * reader can hold the two side by side. */
#include "analyze/allocmodel.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* Where the model's addresses start: a cudaMalloc segment or an expandable
 * segment's reservation takes the next ones, 2 MiB aligned. */
#define ADDR_BASE 0x7f0000000000ull

struct block {
	uint64_t addr, size, requested, stream;
	int64_t gc_base;   /* the pool's get_free_block count when it was cached */
	uint32_t prev, next;
	int32_t es;        /* its expandable segment, or -1 */
	bool small, allocated, mapped, used;
};

/* Block ids sorted by one of two orders. */
struct set {
	uint32_t *v;
	size_t n, cap;
};

struct pool {
	bool small;
	struct set blocks;    /* free mapped blocks by (stream, size, addr) */
	struct set unmapped;  /* unmapped expandable ranges by (stream, addr) */
	int64_t gc_calls;     /* get_free_blocks_call_count */
};

struct es {
	uint64_t base, page, pages;
};

struct gmt__allocmodel {
	struct gmt__am_config c;
	uint64_t device_total, limit, next_addr;
	bool addr_given; /* next_addr was given for the next reservation */
	uint64_t hint;   /* have_hint: where a reservation the call makes lies */
	bool have_hint;
	bool reuse_addrs; /* gmt__am_reuse_addrs */
	bool set_fraction;
	uint64_t allowed_max;
	struct block *b;
	size_t nb, capb;
	uint32_t free_slot;   /* a chain of unused slots through next */
	struct pool small, large;
	struct es *es;
	size_t nes, capes;
	struct gmt__am_event *ev;
	size_t nev, capev;
	uint64_t call;
	struct gmt__am_stats st;
};

/* ---- ordered sets of blocks ------------------------------------------------------- */

/* Room for one more of an array of n: doubles *cap from first. */
static int grow(void *vp, size_t *cap, size_t n, size_t elem, size_t first)
{
	void **v = vp, *nv;
	size_t c;

	if (n < *cap)
		return 0;
	c = *cap ? *cap * 2 : first;
	nv = realloc(*v, c * elem);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = c;
	return 0;
}

/* The size order, PyTorch's BlockComparatorSize. */
static int cmp_size(const struct block *a, const struct block *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	if (a->size != b->size)
		return a->size < b->size ? -1 : 1;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return 0;
}

/* The address order, BlockComparatorAddress. */
static int cmp_addr(const struct block *a, const struct block *b)
{
	if (a->stream != b->stream)
		return a->stream < b->stream ? -1 : 1;
	if (a->addr != b->addr)
		return a->addr < b->addr ? -1 : 1;
	return 0;
}

typedef int (*cmp_fn)(const struct block *, const struct block *);

/* The first position whose block is not below key. */
static size_t lower_bound(const struct gmt__allocmodel *m, const struct set *s, cmp_fn cmp,
			  const struct block *key)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cmp(&m->b[s->v[mid]], key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int set_insert(struct gmt__allocmodel *m, struct set *s, cmp_fn cmp, uint32_t id)
{
	size_t at;

	if (grow(&s->v, &s->cap, s->n, sizeof(*s->v), 64) < 0)
		return -ENOMEM;
	at = lower_bound(m, s, cmp, &m->b[id]);
	memmove(s->v + at + 1, s->v + at, (s->n - at) * sizeof(*s->v));
	s->v[at] = id;
	s->n++;
	return 0;
}

/* Removes id, found by its key as it stands: erase before changing a
 * block's size or address, as PyTorch does. */
static void set_erase(struct gmt__allocmodel *m, struct set *s, cmp_fn cmp, uint32_t id)
{
	size_t at = lower_bound(m, s, cmp, &m->b[id]);

	if (at < s->n && s->v[at] == id) {
		memmove(s->v + at, s->v + at + 1, (s->n - at - 1) * sizeof(*s->v));
		s->n--;
	}
}

static void set_erase_at(struct set *s, size_t at)
{
	memmove(s->v + at, s->v + at + 1, (s->n - at - 1) * sizeof(*s->v));
	s->n--;
}

/* ---- blocks, counters, events ----------------------------------------------------- */

static struct pool *pool_of(struct gmt__allocmodel *m, const struct block *b)
{
	return b->small ? &m->small : &m->large;
}

/* Whether a request of size bytes is the small pool's; its size rounded
 * in *rounded. */
static bool small_request(const struct gmt__allocmodel *m, uint64_t size, uint64_t *rounded)
{
	*rounded = gmt__am_round_size(&m->c, size == 0 ? 1 : size);
	return *rounded <= GMT_AM_SMALL_SIZE;
}

static uint32_t block_new(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t stream,
			  bool small)
{
	uint32_t id;

	if (m->free_slot != NONE) {
		id = m->free_slot;
		m->free_slot = m->b[id].next;
	} else {
		if (grow(&m->b, &m->capb, m->nb, sizeof(*m->b), 256) < 0)
			return NONE;
		id = (uint32_t)m->nb++;
	}
	m->b[id] = (struct block){ .addr = addr, .size = size, .stream = stream, .small = small,
				   .prev = NONE, .next = NONE, .es = -1, .mapped = true, .used = true };
	return id;
}

static void block_delete(struct gmt__allocmodel *m, uint32_t id)
{
	m->b[id].used = false;
	m->b[id].allocated = false;
	m->b[id].next = m->free_slot;
	m->free_slot = id;
}

static bool is_split(const struct block *b)
{
	return b->prev != NONE || b->next != NONE;
}

/* insert_into_blocks: a cached block remembers when it was cached, for the
 * garbage collection's ages. */
static int cache(struct gmt__allocmodel *m, uint32_t id)
{
	struct pool *p = pool_of(m, &m->b[id]);

	m->b[id].gc_base = p->gc_calls;
	return set_insert(m, &p->blocks, cmp_size, id);
}

static void reserve(struct gmt__allocmodel *m, uint64_t bytes)
{
	m->st.reserved += bytes;
	if (m->st.reserved > m->st.peak_reserved)
		m->st.peak_reserved = m->st.reserved;
}

static void event(struct gmt__allocmodel *m, enum gmt__am_op op, const struct block *b, uint64_t addr,
		  uint64_t size)
{
	if (grow(&m->ev, &m->capev, m->nev, sizeof(*m->ev), 256) < 0)
		return; /* NOTE: the counters stay right; only the list is short */
	m->ev[m->nev++] = (struct gmt__am_event){ .op = op, .small = b->small, .addr = addr,
						  .size = size, .stream = b->stream,
						  .reserved = m->st.reserved, .call = m->call };
}

/* v rounded up to a multiple of to. */
static uint64_t round_up(uint64_t v, uint64_t to)
{
	return (v + to - 1) / to * to;
}

struct range {
	uint64_t lo, hi;
};

static int cmp_range(const void *x, const void *y)
{
	const struct range *a = x, *b = y;

	return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The lowest address from ADDR_BASE, 2 MiB aligned, where step bytes lie
 * clear of every segment and reservation the model holds (their blocks
 * cover them); the next after the last when memory runs out. */
static uint64_t lowest_free(const struct gmt__allocmodel *m, uint64_t step)
{
	struct range *v = malloc((m->nb + 1) * sizeof(*v));
	uint64_t a = ADDR_BASE;
	size_t n = 0;

	if (v == NULL)
		return m->next_addr;
	for (size_t i = 0; i < m->nb; i++) {
		if (m->b[i].used)
			v[n++] = (struct range){ m->b[i].addr, m->b[i].addr + m->b[i].size };
	}
	qsort(v, n, sizeof(*v), cmp_range);
	for (size_t i = 0; i < n && v[i].lo < a + step; i++) {
		if (v[i].hi > a)
			a = round_up(v[i].hi, GMT_AM_ROUND_LARGE);
	}
	free(v);
	return a;
}

static uint64_t take_addr(struct gmt__allocmodel *m, uint64_t size)
{
	uint64_t a = m->next_addr, step = round_up(size, GMT_AM_ROUND_LARGE);

	if (m->have_hint) {
		m->have_hint = false;
		if (m->hint + step > m->next_addr)
			m->next_addr = m->hint + step;
		return m->hint;
	}
	if (m->reuse_addrs && !m->addr_given)
		a = lowest_free(m, step);
	if (a + step > m->next_addr)
		m->next_addr = a + step;
	return a;
}

/* Whether the driver would grant bytes more. */
static bool driver_grants(const struct gmt__allocmodel *m, uint64_t bytes)
{
	return m->st.reserved <= m->limit && bytes <= m->limit - m->st.reserved;
}

/* ---- merging and the pools' search ------------------------------------------------ */

/* try_merge_blocks: src, free and alike in being mapped, joins dst. Returns
 * the bytes it brought. */
static uint64_t try_merge(struct gmt__allocmodel *m, uint32_t dst, uint32_t src)
{
	struct block *d = &m->b[dst], *s;
	struct pool *p;
	uint64_t size;

	if (src == NONE)
		return 0;
	s = &m->b[src];
	if (s->allocated || s->mapped != d->mapped)
		return 0;
	p = pool_of(m, s);
	if (s->mapped)
		set_erase(m, &p->blocks, cmp_size, src);
	else
		set_erase(m, &p->unmapped, cmp_addr, src);
	if (d->prev == src) {
		d->addr = s->addr;
		d->prev = s->prev;
		if (d->prev != NONE)
			m->b[d->prev].next = dst;
	} else {
		d->next = s->next;
		if (d->next != NONE)
			m->b[d->next].prev = dst;
	}
	size = s->size;
	d->size += size;
	block_delete(m, src);
	return size;
}

/* The size a block can grow to in place: itself and the unmapped range after it. */
static uint64_t expandable_size(const struct gmt__allocmodel *m, uint32_t id)
{
	const struct block *b = &m->b[id];

	return b->size + (b->next != NONE && !m->b[b->next].mapped ? m->b[b->next].size : 0);
}

/* The best fit of the request's stream get_free_block takes, and where it
 * is in the pool's set; NONE: none. */
static uint32_t find_free_block(const struct gmt__allocmodel *m, const struct pool *p, uint64_t size,
				uint64_t stream, size_t *at)
{
	struct block key = { .stream = stream, .size = size, .addr = 0 };
	const struct set *s = &p->blocks;
	size_t it;
	uint32_t id;

	it = lower_bound(m, s, cmp_size, &key);
	if (it >= s->n || m->b[s->v[it]].stream != stream)
		return NONE;
	if (m->b[s->v[it]].es >= 0) {
		if (m->c.expandable_segments) {
			/* A block that can grow is as large as it can grow. */
			size_t next = it + 1;

			while (m->b[s->v[it]].es >= 0 && next < s->n && m->b[s->v[next]].stream == stream &&
			       expandable_size(m, s->v[next]) < expandable_size(m, s->v[it]))
				it = next++;
		} else {
			do
				it++;
			while (it < s->n && m->b[s->v[it]].es >= 0 && m->b[s->v[it]].stream == stream);
			if (it == s->n || m->b[s->v[it]].stream != stream)
				return NONE;
		}
	}
	id = s->v[it];
	/* An oversize block serves only oversize requests, and those only
	 * within max_non_split_rounding of its size. */
	if (size < m->c.max_split_size && m->b[id].size >= m->c.max_split_size)
		return NONE;
	if (size >= m->c.max_split_size && m->b[id].size >= size + m->c.max_non_split_rounding)
		return NONE;
	*at = it;
	return id;
}

/* get_free_block: the best fit of the request's stream, taken out of the
 * pool, or NONE. */
static uint32_t get_free_block(struct gmt__allocmodel *m, struct pool *p, uint64_t size,
			       uint64_t stream)
{
	size_t it = 0;
	uint32_t id;

	if (m->set_fraction && m->c.gc_threshold > 0)
		p->gc_calls++;
	id = find_free_block(m, p, size, stream, &it);
	if (id != NONE)
		set_erase_at(&p->blocks, it);
	return id;
}

bool gmt__am_cache_serves(const struct gmt__allocmodel *m, uint64_t size, uint64_t stream)
{
	uint64_t rounded;
	bool small = small_request(m, size, &rounded);
	size_t it;

	return find_free_block(m, small ? &m->small : &m->large, rounded, stream, &it) != NONE;
}

/* ---- releasing segments ----------------------------------------------------------- */

/* release_block: cudaFree of a whole cached segment. */
static void release_block(struct gmt__allocmodel *m, uint32_t id)
{
	struct block *b = &m->b[id];

	set_erase(m, &pool_of(m, b)->blocks, cmp_size, id);
	m->st.reserved -= b->size;
	m->st.segments--;
	m->st.device_frees++;
	event(m, GMT_AM_SEGMENT_FREE, b, b->addr, b->size);
	block_delete(m, id);
}

/* unmap_block: the whole pages inside a free block of an expandable
 * segment go back to the driver; the slivers either side stay cached. */
static int unmap_block(struct gmt__allocmodel *m, uint32_t id)
{
	struct block *b = &m->b[id];
	const struct es *e = &m->es[b->es];
	struct pool *p = pool_of(m, b);
	uint64_t first = (b->addr - e->base + e->page - 1) / e->page;
	uint64_t last = (b->addr + b->size - e->base) / e->page;
	uint64_t ua, us, before, after;
	uint32_t nid;

	if (first >= last)
		return 0;
	ua = e->base + first * e->page;
	us = (last - first) * e->page;
	set_erase(m, &p->blocks, cmp_size, id);
	before = ua - b->addr;
	after = b->size - before - us;
	if (before > 0) {
		nid = block_new(m, b->addr, before, b->stream, b->small);
		if (nid == NONE)
			return -ENOMEM;
		b = &m->b[id];
		m->b[nid].es = b->es;
		m->b[nid].prev = b->prev;
		m->b[nid].next = id;
		if (b->prev != NONE)
			m->b[b->prev].next = nid;
		b->prev = nid;
		if (cache(m, nid) < 0)
			return -ENOMEM;
	}
	if (after > 0) {
		nid = block_new(m, ua + us, after, b->stream, b->small);
		if (nid == NONE)
			return -ENOMEM;
		b = &m->b[id];
		m->b[nid].es = b->es;
		m->b[nid].prev = id;
		m->b[nid].next = b->next;
		if (b->next != NONE)
			m->b[b->next].prev = nid;
		b->next = nid;
		if (cache(m, nid) < 0)
			return -ENOMEM;
	}
	b->addr = ua;
	b->size = us;
	b->mapped = false;
	try_merge(m, id, m->b[id].prev);
	try_merge(m, id, m->b[id].next);
	if (set_insert(m, &p->unmapped, cmp_addr, id) < 0)
		return -ENOMEM;
	m->st.reserved -= us;
	m->st.device_frees++;
	event(m, GMT_AM_SEGMENT_UNMAP, &m->b[id], ua, us);
	return 0;
}

/* release_blocks: every cached segment that is whole goes back; of the
 * expandable segments, every whole page, and the reservation of one left
 * with nothing mapped. */
static void release_blocks(struct gmt__allocmodel *m, struct pool *p)
{
	uint32_t *to_unmap = NULL;
	size_t n = 0, i = 0;

	to_unmap = malloc((p->blocks.n + 1) * sizeof(*to_unmap));
	while (i < p->blocks.n) {
		uint32_t id = p->blocks.v[i];

		if (m->b[id].es >= 0) {
			if (to_unmap)
				to_unmap[n++] = id;
			i++;
		} else if (!is_split(&m->b[id])) {
			release_block(m, id); /* erases at i */
		} else {
			i++;
		}
	}
	for (size_t k = 0; k < n; k++) {
		uint32_t id = to_unmap[k];
		struct block *b;

		unmap_block(m, id);
		b = &m->b[id];
		if (!b->mapped && !is_split(b)) {
			set_erase(m, &p->unmapped, cmp_addr, id);
			event(m, GMT_AM_VA_FREE, b, b->addr, b->size);
			block_delete(m, id);
		}
	}
	free(to_unmap);
}

/* release_cached_blocks: the large pool, then the small. */
static void release_cached_blocks(struct gmt__allocmodel *m)
{
	release_blocks(m, &m->large);
	release_blocks(m, &m->small);
}

/* release_available_cached_blocks: frees the smallest oversize cached
 * segment of the stream that is at least as large as the request (or
 * max_split_size), else oversize ones from the largest down until that much
 * went back. Only under a max_split_size. */
static bool release_available(struct gmt__allocmodel *m, struct pool *p, uint64_t size,
			      uint64_t stream)
{
	struct block key = { .stream = stream, .addr = 0 };
	struct set *s = &p->blocks;
	uint64_t released = 0;
	size_t it;

	if (m->c.max_split_size == GMT_AM_UNLIMITED)
		return false;
	key.size = size < m->c.max_split_size ? m->c.max_split_size : size;
	it = lower_bound(m, s, cmp_size, &key);
	if (it < s->n && m->b[s->v[it]].stream == stream) {
		/* NOTE: PyTorch asserts here on a block of an expandable segment
		 * (release_block); the model keeps it instead. */
		if (m->b[s->v[it]].es >= 0 || is_split(&m->b[s->v[it]]))
			return false;
		release_block(m, s->v[it]);
		return true;
	}
	if (it == 0)
		return false;
	it--;
	while (released < key.size) {
		uint32_t id = s->v[it];
		const struct block *b = &m->b[id];

		if (b->size < m->c.max_split_size || b->stream != stream || b->es >= 0 || is_split(b))
			break;
		released += b->size;
		release_block(m, id);
		if (it == 0)
			break;
		it--;
	}
	return released >= key.size;
}

/* garbage_collect_cached_blocks: past gc_threshold of the allowed memory,
 * whole cached large segments go back, the oldest first (age: the pool's
 * searches since the block was cached), pass after pass over those of at
 * least the average age, until the excess went back. */
static void garbage_collect(struct gmt__allocmodel *m)
{
	struct set *s = &m->large.blocks;
	uint64_t threshold = (uint64_t)(m->c.gc_threshold * (double)m->allowed_max);
	uint64_t target, reclaimed = 0, total_age = 0;
	int64_t count = 0;
	bool freed = true;

	if (m->st.reserved <= threshold)
		return;
	target = m->st.reserved - threshold;
	for (size_t i = 0; i < s->n; i++) {
		const struct block *b = &m->b[s->v[i]];

		if (!is_split(b) && b->es < 0) {
			total_age += (uint64_t)(m->large.gc_calls - b->gc_base);
			count++;
		}
	}
	while (reclaimed < target && freed && count > 0) {
		double age_threshold = (double)total_age / (double)count;
		size_t i = 0;

		freed = false;
		while (i < s->n) {
			uint32_t id = s->v[i];
			const struct block *b = &m->b[id];
			uint64_t age = (uint64_t)(m->large.gc_calls - b->gc_base);

			if (is_split(b) || b->es >= 0 || (double)age < age_threshold) {
				i++;
				continue;
			}
			freed = true;
			reclaimed += b->size;
			total_age -= age;
			count--;
			release_block(m, id); /* erases at i */
		}
	}
}

/* ---- new memory -------------------------------------------------------------------- */

/* The lowest address of the stream's expandable segments where free and
 * unmapped ranges together hold size (find_expandable_block's search), or
 * NONE. */
static uint32_t expandable_place(const struct gmt__allocmodel *m, const struct pool *p, uint64_t size,
				 uint64_t stream)
{
	struct block key = { .stream = stream, .addr = 0 };
	const struct set *s = &p->unmapped;

	for (size_t it = lower_bound(m, s, cmp_addr, &key); it < s->n && m->b[s->v[it]].stream == stream;
	     it++) {
		uint32_t c = s->v[it], w;
		uint64_t bytes = 0;

		if (m->b[c].prev != NONE && !m->b[m->b[c].prev].allocated)
			c = m->b[c].prev;
		for (w = c; bytes < size && w != NONE && !m->b[w].allocated; w = m->b[w].next)
			bytes += m->b[w].size;
		if (bytes >= size)
			return c;
	}
	return NONE;
}

/* A new reservation's size: 1 1/8 of the device, in whole pages. */
static uint64_t reservation_pages(const struct gmt__allocmodel *m, uint64_t page)
{
	uint64_t va = m->device_total + m->device_total / 8;

	return (va + page - 1) / page;
}

/* find_expandable_block: expandable_place, or a new segment's whole
 * (unmapped) reservation. */
static uint32_t find_expandable(struct gmt__allocmodel *m, struct pool *p, uint64_t size,
				uint64_t stream)
{
	struct set *s = &p->unmapped;
	uint64_t page, pages;
	uint32_t id = expandable_place(m, p, size, stream);

	if (id != NONE)
		return id;
	/* Pages of 2 MiB (small pool) or 20 MiB (large). */
	page = p->small ? GMT_AM_SMALL_BUFFER : GMT_AM_LARGE_BUFFER;
	pages = reservation_pages(m, page);
	if (grow(&m->es, &m->capes, m->nes, sizeof(*m->es), 8) < 0)
		return NONE;
	/* Apart from every block the model holds where no address was given
	 * for it (a failed request's reservation): the last one given may lie
	 * inside a reservation placed since. */
	for (size_t i = 0; !m->addr_given && i < m->nb; i++) {
		if (m->b[i].used && m->b[i].addr + m->b[i].size > m->next_addr)
			m->next_addr = m->b[i].addr + m->b[i].size;
	}
	m->addr_given = false;
	m->es[m->nes] = (struct es){ .base = take_addr(m, pages * page), .page = page, .pages = pages };
	id = block_new(m, m->es[m->nes].base, pages * page, stream, p->small);
	if (id == NONE)
		return NONE;
	m->b[id].es = (int32_t)m->nes++;
	m->b[id].mapped = false;
	if (set_insert(m, s, cmp_addr, id) < 0)
		return NONE;
	event(m, GMT_AM_VA_RESERVE, &m->b[id], m->b[id].addr, m->b[id].size);
	return id;
}

uint64_t gmt__am_first_ask(const struct gmt__allocmodel *m, uint64_t size, uint64_t stream)
{
	uint64_t rounded, page, left, asked = 0;
	bool small = small_request(m, size, &rounded);
	const struct pool *p = small ? &m->small : &m->large;
	uint32_t w;

	if (!m->c.expandable_segments)
		return gmt__am_segment_size(rounded);
	/* As alloc_expandable maps: each unmapped range met from the place
	 * found, in whole pages, until the free run holds the request. */
	page = small ? GMT_AM_SMALL_BUFFER : GMT_AM_LARGE_BUFFER;
	w = expandable_place(m, p, rounded, stream);
	if (w == NONE) {
		uint64_t whole = reservation_pages(m, page) * page;

		return rounded < whole ? round_up(rounded, page) : whole;
	}
	for (left = rounded; left > 0 && w != NONE; w = m->b[w].next) {
		uint64_t take = m->b[w].size;

		if (!m->b[w].mapped) {
			take = left < take ? round_up(left, page) : take;
			asked += take;
		}
		left = take >= left ? 0 : left - take;
	}
	return asked;
}

/* map_block: maps the pages under [start of to_map, + size) and joins them
 * to free neighbours. Fails, mapping nothing, where the driver would not
 * grant the pages. */
static bool map_block(struct gmt__allocmodel *m, uint32_t id, uint64_t size)
{
	struct block *b = &m->b[id];
	const struct es *e = &m->es[b->es];
	struct pool *p = pool_of(m, b);
	uint64_t first = (b->addr - e->base) / e->page;
	uint64_t last = (b->addr + size - e->base + e->page - 1) / e->page;
	uint64_t mapped = (last - first) * e->page, at = b->addr;
	uint32_t rest;

	if (mapped == 0 || !driver_grants(m, mapped))
		return false;
	set_erase(m, &p->unmapped, cmp_addr, id);
	b->mapped = true;
	if (mapped < b->size) {
		rest = block_new(m, b->addr + mapped, b->size - mapped, b->stream, b->small);
		if (rest == NONE)
			return false;
		b = &m->b[id];
		m->b[rest].es = b->es;
		m->b[rest].mapped = false;
		m->b[rest].prev = id;
		m->b[rest].next = b->next;
		if (b->next != NONE)
			m->b[b->next].prev = rest;
		b->next = rest;
		b->size = mapped;
		if (set_insert(m, &p->unmapped, cmp_addr, rest) < 0)
			return false;
	}
	try_merge(m, id, m->b[id].prev);
	try_merge(m, id, m->b[id].next);
	if (cache(m, id) < 0)
		return false;
	reserve(m, mapped);
	m->st.device_allocs++;
	event(m, GMT_AM_SEGMENT_MAP, &m->b[id], at, mapped);
	return true;
}

/* try_allocate_expandable_block: grows the lowest fitting place until one
 * free block holds size, and takes it out of the pool. */
static uint32_t alloc_expandable(struct gmt__allocmodel *m, struct pool *p, uint64_t size,
				 uint64_t stream)
{
	uint32_t c = find_expandable(m, p, size, stream);

	if (c == NONE)
		return NONE;
	if (!m->b[c].mapped) {
		uint64_t want = m->b[c].size < size ? m->b[c].size : size;

		if (!map_block(m, c, want))
			return NONE;
	}
	while (m->b[c].size < size) {
		uint32_t next = m->b[c].next;
		uint64_t want = size - m->b[c].size;

		/* A reservation mapped whole and still too small: a request
		 * larger than 1 1/8 of the device, which the driver never
		 * grants PyTorch. */
		if (next == NONE)
			return NONE;
		if (want > m->b[next].size)
			want = m->b[next].size;
		if (!map_block(m, next, want))
			return NONE;
		c = next; /* it took c in */
	}
	set_erase(m, &p->blocks, cmp_size, c);
	return c;
}

/* alloc_block: a new segment (or pages) for the request. */
static uint32_t alloc_block(struct gmt__allocmodel *m, struct pool *p, uint64_t size,
			    uint64_t alloc_size, uint64_t stream, bool retry)
{
	uint32_t id;

	if (retry)
		m->st.retries++;
	if (m->set_fraction && (m->st.reserved > m->allowed_max ||
				alloc_size > m->allowed_max - m->st.reserved))
		return NONE;
	if (m->c.expandable_segments)
		return alloc_expandable(m, p, size, stream);
	if (!driver_grants(m, alloc_size))
		return NONE;
	id = block_new(m, take_addr(m, alloc_size), alloc_size, stream, p->small);
	if (id == NONE)
		return NONE;
	reserve(m, alloc_size);
	m->st.segments++;
	m->st.device_allocs++;
	event(m, GMT_AM_SEGMENT_ALLOC, &m->b[id], m->b[id].addr, alloc_size);
	return id;
}

/* ---- the calls ------------------------------------------------------------------- */

static bool should_split(const struct gmt__allocmodel *m, const struct block *b, uint64_t size)
{
	uint64_t remaining = b->size - size;

	if (b->small || m->c.expandable_segments)
		return remaining >= GMT_AM_MIN_BLOCK;
	return size < m->c.max_split_size && remaining > GMT_AM_SMALL_SIZE;
}

static void record_oom(struct gmt__allocmodel *m, uint64_t size, uint64_t rounded, uint64_t alloc_size,
		       uint64_t stream)
{
	m->st.ooms++;
	if (m->st.failed)
		return;
	m->st.failed = true;
	m->st.first_oom = (struct gmt__am_oom){
		.call = m->call, .size = size, .rounded = rounded, .alloc_size = alloc_size,
		.stream = stream, .reserved = m->st.reserved, .allocated = m->st.allocated,
		.limit = m->set_fraction && m->allowed_max < m->limit ? m->allowed_max : m->limit,
	};
}

int gmt__am_malloc(struct gmt__allocmodel *m, uint64_t size, uint64_t stream, uint32_t *out)
{
	uint64_t rounded, alloc_size;
	struct pool *p;
	uint32_t id;
	int rc = 0;

	if (size == 0)
		return -EINVAL;
	p = small_request(m, size, &rounded) ? &m->small : &m->large;
	alloc_size = gmt__am_segment_size(rounded);
	id = get_free_block(m, p, rounded, stream);
	if (id == NONE) {
		if (m->set_fraction && m->c.gc_threshold > 0)
			garbage_collect(m);
		id = alloc_block(m, p, rounded, alloc_size, stream, false);
		if (id == NONE && release_available(m, p, rounded, stream))
			id = alloc_block(m, p, rounded, alloc_size, stream, false);
		if (id == NONE) {
			release_cached_blocks(m);
			id = alloc_block(m, p, rounded, alloc_size, stream, true);
		}
	}
	if (id == NONE) {
		record_oom(m, size, rounded, alloc_size, stream);
		rc = -ENOMEM;
		goto out;
	}
	/* alloc_found_block: the front of the block serves, the rest stays
	 * cached under the old id. */
	if (should_split(m, &m->b[id], rounded)) {
		uint32_t rest = id;
		struct block *r;

		id = block_new(m, m->b[rest].addr, rounded, stream, m->b[rest].small);
		if (id == NONE) {
			rc = -ENOMEM;
			goto out;
		}
		r = &m->b[rest];
		m->b[id].es = r->es;
		m->b[id].prev = r->prev;
		m->b[id].next = rest;
		if (r->prev != NONE)
			m->b[r->prev].next = id;
		r->prev = id;
		r->addr += rounded;
		r->size -= rounded;
		if (cache(m, rest) < 0) {
			rc = -ENOMEM;
			goto out;
		}
	}
	m->b[id].allocated = true;
	m->b[id].requested = size;
	m->st.allocated += m->b[id].size;
	if (m->st.allocated > m->st.peak_allocated)
		m->st.peak_allocated = m->st.allocated;
	*out = id;
out:
	m->have_hint = false; /* the call's own */
	m->call++;
	return rc;
}

int gmt__am_free(struct gmt__allocmodel *m, uint32_t id)
{
	struct block *b;
	int rc = 0;

	if (id >= m->nb || !m->b[id].used || !m->b[id].allocated) {
		rc = -EINVAL;
		goto out;
	}
	b = &m->b[id];
	b->allocated = false;
	m->st.allocated -= b->size;
	/* free_block: joins its free neighbours and is cached. */
	try_merge(m, id, b->prev);
	try_merge(m, id, b->next);
	rc = cache(m, id);
out:
	m->call++;
	return rc;
}

void gmt__am_empty_cache(struct gmt__allocmodel *m)
{
	release_cached_blocks(m);
	m->call++;
}

int gmt__am_block(const struct gmt__allocmodel *m, uint32_t id, uint64_t *addr, uint64_t *size)
{
	if (id >= m->nb || !m->b[id].used || !m->b[id].allocated)
		return -EINVAL;
	*addr = m->b[id].addr;
	*size = m->b[id].size;
	return 0;
}

const struct gmt__am_stats *gmt__am_stats(const struct gmt__allocmodel *m)
{
	return &m->st;
}

const struct gmt__am_event *gmt__am_events(const struct gmt__allocmodel *m, size_t *n)
{
	*n = m->nev;
	return m->ev;
}

void gmt__am_set_limit(struct gmt__allocmodel *m, uint64_t bytes)
{
	m->limit = bytes;
}

void gmt__am_set_fraction(struct gmt__allocmodel *m, double fraction)
{
	gmt__am_set_allowed(m, (uint64_t)(fraction * (double)m->device_total));
}

void gmt__am_set_allowed(struct gmt__allocmodel *m, uint64_t bytes)
{
	m->set_fraction = true;
	m->allowed_max = bytes;
}

/* ---- seeding ------------------------------------------------------------------------ */

int gmt__am_seed_segment(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t stream, bool small)
{
	uint32_t id;

	if (size == 0 || addr + size < addr)
		return -EINVAL;
	for (size_t i = 0; i < m->nb; i++) {
		const struct block *b = &m->b[i];

		if (b->used && b->addr < addr + size && addr < b->addr + b->size)
			return -EINVAL;
	}
	id = block_new(m, addr, size, stream, small);
	if (id == NONE)
		return -ENOMEM;
	reserve(m, size);
	m->st.segments++;
	if (addr + size > m->next_addr)
		m->next_addr = addr + size;
	return cache(m, id);
}

/* Cuts [at, at + size) off the front of free block id (which starts at at):
 * the rest a new cached block after it. Returns the rest's id, id itself
 * when nothing is left, or NONE. */
static uint32_t cut_front(struct gmt__allocmodel *m, uint32_t id, uint64_t size)
{
	uint32_t rest;

	if (m->b[id].size == size)
		return id;
	rest = block_new(m, m->b[id].addr + size, m->b[id].size - size, m->b[id].stream, m->b[id].small);
	if (rest == NONE)
		return NONE;
	m->b[rest].prev = id;
	m->b[rest].next = m->b[id].next;
	if (m->b[id].next != NONE)
		m->b[m->b[id].next].prev = rest;
	m->b[id].next = rest;
	m->b[id].size = size;
	if (cache(m, rest) < 0)
		return NONE;
	return rest;
}

int gmt__am_seed_block(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t requested,
		       uint32_t *out)
{
	uint32_t id = NONE;

	size = size < GMT_AM_MIN_BLOCK ? GMT_AM_MIN_BLOCK : (size + GMT_AM_MIN_BLOCK - 1) / GMT_AM_MIN_BLOCK * GMT_AM_MIN_BLOCK;
	for (size_t i = 0; i < m->nb && id == NONE; i++) {
		const struct block *b = &m->b[i];

		if (b->used && !b->allocated && b->mapped && b->es < 0 && b->addr <= addr &&
		    addr + size <= b->addr + b->size)
			id = (uint32_t)i;
	}
	if (id == NONE)
		return -EINVAL;
	set_erase(m, &pool_of(m, &m->b[id])->blocks, cmp_size, id);
	if (m->b[id].addr < addr) {
		uint32_t front = id;

		id = cut_front(m, front, addr - m->b[front].addr);
		if (id == NONE)
			return -ENOMEM;
		/* the front stays cached; the block is the rest, now cached too */
		if (cache(m, front) < 0)
			return -ENOMEM;
		set_erase(m, &pool_of(m, &m->b[id])->blocks, cmp_size, id);
	}
	if (cut_front(m, id, size) == NONE)
		return -ENOMEM;
	m->b[id].allocated = true;
	m->b[id].requested = requested;
	m->st.allocated += m->b[id].size;
	if (m->st.allocated > m->st.peak_allocated)
		m->st.peak_allocated = m->st.allocated;
	*out = id;
	return 0;
}

void gmt__am_set_next_addr(struct gmt__allocmodel *m, uint64_t addr)
{
	m->next_addr = addr;
	m->addr_given = true;
}

void gmt__am_reuse_addrs(struct gmt__allocmodel *m)
{
	m->reuse_addrs = true;
}

void gmt__am_hint_addr(struct gmt__allocmodel *m, uint64_t addr)
{
	m->hint = addr;
	m->have_hint = true;
}

bool gmt__am_reserved_at(const struct gmt__allocmodel *m, uint64_t addr, uint64_t size)
{
	uint64_t rounded;
	bool small = small_request(m, size, &rounded);

	for (size_t i = 0; i < m->nb; i++) {
		const struct block *b = &m->b[i];

		if (b->used && b->es >= 0 && b->small == small && b->addr <= addr && addr - b->addr < b->size)
			return true;
	}
	return false;
}

bool gmt__am_place_reservation(struct gmt__allocmodel *m, uint64_t addr, uint64_t size, uint64_t stream)
{
	uint64_t rounded;
	struct pool *p = small_request(m, size, &rounded) ? &m->small : &m->large;

	for (size_t it = 0; it < p->unmapped.n; it++) {
		uint32_t id = p->unmapped.v[it];
		struct block *b = &m->b[id];

		if (b->stream != stream || b->mapped || b->allocated || is_split(b))
			continue;
		/* nothing of it mapped: it may lie anywhere */
		set_erase_at(&p->unmapped, it);
		m->es[b->es].base = addr;
		b->addr = addr;
		if (addr + b->size > m->next_addr)
			m->next_addr = addr + b->size;
		return set_insert(m, &p->unmapped, cmp_addr, id) == 0;
	}
	return false;
}

int gmt__am_create(const struct gmt__am_config *c, uint64_t device_total, struct gmt__allocmodel **out)
{
	struct gmt__allocmodel *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->c = *c;
	m->device_total = device_total;
	m->limit = device_total;
	m->next_addr = ADDR_BASE;
	m->free_slot = NONE;
	m->small.small = true;
	if (c->memory_fraction >= 0)
		gmt__am_set_fraction(m, c->memory_fraction);
	*out = m;
	return 0;
}

void gmt__am_destroy(struct gmt__allocmodel *m)
{
	if (!m)
		return;
	free(m->small.blocks.v);
	free(m->small.unmapped.v);
	free(m->large.blocks.v);
	free(m->large.unmapped.v);
	free(m->b);
	free(m->es);
	free(m->ev);
	free(m);
}
