/* The SPSC ring and its registry (src/record/ring.c): single-thread semantics across
 * the 2^32 and 2^64 counter boundaries, a producer/consumer stress in which
 * every event must arrive once, whole and in order, concurrent registry
 * adds under a walking, reaping consumer, and the doorbell: its rules on one
 * thread, and a consumer that sleeps until the doorbell rings, whatever
 * happens. */
#define _GNU_SOURCE
#include "record/ring.h"

#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* An event whose every field derives from seq, so a torn copy shows. */
static struct gmt__event event_of(uint64_t seq)
{
	struct gmt__event ev;

	memset(&ev, 0, sizeof(ev));
	ev.seq = seq;
	ev.time_ns = seq * 3;
	ev.addr = seq ^ 0x5555555555555555ull;
	ev.size = ~seq;
	ev.link = seq << 7;
	ev.extra = seq * 0x9e3779b97f4a7c15ull;
	ev.stack = (uint32_t)seq;
	ev.tid = (uint32_t)(seq >> 32);
	ev.api = (uint16_t)seq;
	ev.op = (uint8_t)(seq % GMT_OP_COUNT);
	ev.kind = (uint8_t)(seq % GMT_KIND_COUNT);
	ev.device = (int16_t)(seq % 7) - 1;
	return ev;
}

static bool event_is(const struct gmt__event *ev, uint64_t seq)
{
	struct gmt__event want = event_of(seq);

	return memcmp(ev, &want, sizeof(want)) == 0;
}

/* --- one thread ----------------------------------------------------------------- */

static void test_capacities(void)
{
	static const struct {
		uint32_t capacity;
		bool ok;
	} cases[] = {
		{ 0, false }, { 1, false }, { 2, true }, { 3, false }, { 6, false },
		{ 64, true }, { 4096, true }, { 4097, false }, { 0x80000001u, false },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gmt__ring *r = gmt__ring_new(cases[i].capacity, 42);

		if ((r != NULL) != cases[i].ok)
			fprintf(stderr, "capacity %u: ring %s, expected %s\n", cases[i].capacity,
				r ? "made" : "refused", cases[i].ok ? "made" : "refused");
		CHECK((r != NULL) == cases[i].ok);
		if (r != NULL) {
			CHECK_EQ(gmt__ring_capacity(r), cases[i].capacity);
			CHECK_EQ(gmt__ring_tid(r), 42);
			CHECK_EQ(gmt__ring_count(r), 0);
			CHECK(gmt__ring_peek(r) == NULL);
			CHECK(!gmt__ring_is_dead(r));
			gmt__ring_free(r);
		}
	}
}

/* Fills, overfills, drains part and refills an 8-slot ring with counters
 * starting at `start`; events must come out in order and whole. */
static void test_fill_drain(uint64_t start)
{
	struct gmt__ring *r = gmt__ring_new(8, 1);
	const struct gmt__event *p;
	struct gmt__event ev;
	uint64_t in = 1, out = 1;
	int round, i;

	if (r == NULL) {
		CHECK(r != NULL);
		return;
	}
	gmt__ring_test_seek(r, start);
	for (round = 0; round < 5; round++) {
		for (;;) {
			bool room = gmt__ring_has_room(r);

			ev = event_of(in);
			CHECK_EQ(gmt__ring_push(r, &ev), room);
			if (!room)
				break;
			in++;
			CHECK_EQ(gmt__ring_count(r), in - out);
		}
		CHECK_EQ(in - out, 8);
		CHECK_EQ(gmt__ring_count(r), 8);
		/* Full: refused again, nothing changed. */
		ev = event_of(999);
		CHECK(!gmt__ring_has_room(r));
		CHECK(!gmt__ring_push(r, &ev));
		CHECK_EQ(gmt__ring_count(r), 8);
		/* One pop makes room for exactly one. */
		p = gmt__ring_peek(r);
		CHECK(p != NULL && event_is(p, out));
		gmt__ring_pop(r);
		out++;
		CHECK(gmt__ring_has_room(r));
		ev = event_of(in);
		CHECK(gmt__ring_push(r, &ev));
		in++;
		CHECK(!gmt__ring_has_room(r));
		CHECK(!gmt__ring_push(r, &ev));
		/* Drain a varying number, so later rounds start at other slots. */
		for (i = 0; i < 8 - round; i++) {
			p = gmt__ring_peek(r);
			CHECK(p != NULL);
			if (p == NULL)
				break;
			if (!event_is(p, out))
				fprintf(stderr, "start %#" PRIx64 ": got seq %" PRIu64 ", expected %" PRIu64 "\n",
					start, p->seq, out);
			CHECK(event_is(p, out));
			/* peek is idempotent until pop */
			CHECK(gmt__ring_peek(r) == p);
			gmt__ring_pop(r);
			out++;
		}
		CHECK_EQ(gmt__ring_count(r), in - out);
	}
	while ((p = gmt__ring_peek(r)) != NULL) {
		CHECK(event_is(p, out));
		gmt__ring_pop(r);
		out++;
	}
	CHECK_EQ(in, out);
	CHECK_EQ(gmt__ring_count(r), 0);
	gmt__ring_free(r);
}

/* Many times the capacity through a small ring, pushes and pops interleaved
 * in bursts: the free-running counters wrap the slot index over and over. */
static void test_many_laps(void)
{
	struct gmt__ring *r = gmt__ring_new(4, 1);
	uint64_t in = 1, out = 1;
	unsigned burst;

	if (r == NULL) {
		CHECK(r != NULL);
		return;
	}
	for (burst = 0; burst < 10000; burst++) {
		unsigned k = burst % 5; /* 0..4 pushes, 4 of them a full ring */
		unsigned i;

		for (i = 0; i < k; i++) {
			struct gmt__event ev = event_of(in);

			if (gmt__ring_push(r, &ev))
				in++;
		}
		CHECK_EQ(gmt__ring_count(r), in - out);
		for (i = 0; i < (burst % 3) + 1; i++) {
			const struct gmt__event *p = gmt__ring_peek(r);

			if (p == NULL)
				break;
			CHECK(event_is(p, out));
			gmt__ring_pop(r);
			out++;
		}
	}
	CHECK(in > 4 * 1000);
	gmt__ring_free(r);
}

/* --- two threads ------------------------------------------------------------------ */

struct stress {
	struct gmt__ring *ring;
	uint64_t events;
	uint64_t full; /* pushes refused: the ring was full */
	uint64_t bad;  /* events out of order or torn */
	uint64_t got;
};

static void *producer(void *arg)
{
	struct stress *s = arg;
	uint64_t seq;

	for (seq = 1; seq <= s->events; seq++) {
		struct gmt__event ev = event_of(seq);

		/* The core drains when full; here the consumer thread does. */
		while (!gmt__ring_push(s->ring, &ev)) {
			s->full++;
			sched_yield();
		}
	}
	return NULL;
}

static void *consumer(void *arg)
{
	struct stress *s = arg;
	uint64_t want = 1;

	while (want <= s->events) {
		const struct gmt__event *ev = gmt__ring_peek(s->ring);

		if (ev == NULL) {
			sched_yield();
			continue;
		}
		if (!event_is(ev, want)) {
			if (s->bad++ < 5)
				fprintf(stderr, "stress: got seq %" PRIu64 ", expected %" PRIu64 "\n",
					ev->seq, want);
			/* resynchronise on what came, to count further damage once */
			want = ev->seq;
		}
		gmt__ring_pop(s->ring);
		want++;
		s->got++;
	}
	return NULL;
}

static void test_stress(uint64_t events, uint64_t start)
{
	struct stress s = { .events = events };
	pthread_t p, c;

	s.ring = gmt__ring_new(256, 7);
	if (s.ring == NULL) {
		CHECK(s.ring != NULL);
		return;
	}
	gmt__ring_test_seek(s.ring, start);
	pthread_create(&c, NULL, consumer, &s);
	pthread_create(&p, NULL, producer, &s);
	pthread_join(p, NULL);
	pthread_join(c, NULL);
	printf("stress: %" PRIu64 " events from %#" PRIx64 ", %" PRIu64 " pushes found the ring full\n",
	       s.got, start, s.full);
	CHECK_EQ(s.bad, 0);
	CHECK_EQ(s.got, events);
	CHECK(gmt__ring_peek(s.ring) == NULL);
	gmt__ring_free(s.ring);
}

/* --- the registry ------------------------------------------------------------------ */

#define ADDERS 8
#define RINGS_EACH 100
#define EVENTS_EACH 20

static atomic_int adders_done;

static void *adder(void *arg)
{
	uint32_t t = (uint32_t)(uintptr_t)arg;
	int i, k;

	for (i = 0; i < RINGS_EACH; i++) {
		/* tid encodes (thread, ring) so the walker can check fields */
		struct gmt__ring *r = gmt__ring_new(64, t * 1000 + (uint32_t)i + 1);

		if (r == NULL) {
			CHECK(r != NULL);
			continue;
		}
		gmt__rings_add(r);
		for (k = 0; k < EVENTS_EACH; k++) {
			struct gmt__event ev = event_of(gmt__ring_tid(r) * 100ull + (uint64_t)k);

			while (!gmt__ring_push(r, &ev))
				sched_yield();
		}
		gmt__ring_mark_dead(r);
	}
	atomic_fetch_add(&adders_done, 1);
	return NULL;
}

/* The consumer: walks, drains, reaps, until every adder is done and every
 * event consumed. Checks that each ring it reaches is complete. */
static void test_registry_concurrent(void)
{
	pthread_t th[ADDERS];
	uint64_t consumed = 0, reaped = 0, walks = 0, want = ADDERS * RINGS_EACH * EVENTS_EACH;
	struct gmt__ring *r;
	int i, left;

	CHECK(gmt__rings_first() == NULL);
	for (i = 0; i < ADDERS; i++)
		pthread_create(&th[i], NULL, adder, (void *)(uintptr_t)i);
	for (;;) {
		bool done = atomic_load(&adders_done) == ADDERS;

		for (r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r)) {
			const struct gmt__event *ev;
			uint32_t tid = gmt__ring_tid(r);

			CHECK_EQ(gmt__ring_capacity(r), 64);
			CHECK(tid >= 1 && tid % 1000 <= RINGS_EACH && tid / 1000 < ADDERS);
			while ((ev = gmt__ring_peek(r)) != NULL) {
				CHECK(ev->seq / 100 == tid && event_is(ev, ev->seq));
				gmt__ring_pop(r);
				consumed++;
			}
		}
		reaped += gmt__rings_reap();
		walks++;
		if (done && consumed == want)
			break;
		sched_yield();
	}
	for (i = 0; i < ADDERS; i++)
		pthread_join(th[i], NULL);
	reaped += gmt__rings_reap();
	for (left = 0, r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r))
		left++;
	printf("registry: %d rings, %" PRIu64 " events over %" PRIu64 " walks, %" PRIu64
	       " reaped, %d left\n", ADDERS * RINGS_EACH, consumed, walks, reaped, left);
	CHECK_EQ(consumed, want);
	/* Every ring is dead and empty; only the head may linger. */
	CHECK_EQ(left, 1);
	CHECK_EQ(reaped + (uint64_t)left, ADDERS * RINGS_EACH);
}

/* What reap takes and leaves, one case at a time, then fork's reset. */
static void test_registry_rules(void)
{
	struct gmt__ring *a, *b, *c, *d, *r;
	struct gmt__event ev = event_of(1);
	int n;

	/* The list still holds the concurrent test's dead head: drop it. */
	gmt__rings_after_fork(NULL);
	CHECK(gmt__rings_first() == NULL);
	CHECK_EQ(gmt__rings_reap(), 0);

	a = gmt__ring_new(4, 1); /* dead, empty: reaped */
	b = gmt__ring_new(4, 2); /* dead, holds an event: kept */
	c = gmt__ring_new(4, 3); /* alive, empty: kept */
	d = gmt__ring_new(4, 4); /* the head, dead and empty: kept */
	if (!a || !b || !c || !d) {
		CHECK(a && b && c && d);
		return;
	}
	gmt__rings_add(a);
	gmt__rings_add(b);
	gmt__rings_add(c);
	gmt__rings_add(d);
	CHECK(gmt__rings_first() == d);
	CHECK(gmt__ring_next(d) == c && gmt__ring_next(c) == b && gmt__ring_next(b) == a);
	CHECK(gmt__ring_next(a) == NULL);
	CHECK(gmt__ring_push(b, &ev));
	gmt__ring_mark_dead(a);
	gmt__ring_mark_dead(b);
	gmt__ring_mark_dead(d);
	CHECK(gmt__ring_is_dead(a) && gmt__ring_is_dead(b) && !gmt__ring_is_dead(c));

	CHECK_EQ(gmt__rings_reap(), 1); /* a */
	CHECK(gmt__rings_first() == d && gmt__ring_next(d) == c && gmt__ring_next(c) == b);
	CHECK(gmt__ring_next(b) == NULL);
	CHECK(gmt__ring_peek(b) != NULL);
	gmt__ring_pop(b);
	CHECK_EQ(gmt__rings_reap(), 1); /* b, now empty */
	CHECK(gmt__ring_next(c) == NULL);
	CHECK_EQ(gmt__rings_reap(), 0); /* d is the head */

	/* A newer ring stands before d: d goes. */
	a = gmt__ring_new(4, 5);
	if (a == NULL) {
		CHECK(a != NULL);
		return;
	}
	gmt__rings_add(a);
	CHECK_EQ(gmt__rings_reap(), 1);
	CHECK(gmt__rings_first() == a && gmt__ring_next(a) == c && gmt__ring_next(c) == NULL);

	/* After fork: only `keep`, emptied and alive. */
	CHECK(gmt__ring_push(c, &ev));
	gmt__ring_mark_dead(c);
	gmt__rings_after_fork(c);
	CHECK(gmt__rings_first() == c && gmt__ring_next(c) == NULL);
	CHECK_EQ(gmt__ring_count(c), 0);
	CHECK(gmt__ring_peek(c) == NULL);
	CHECK(!gmt__ring_is_dead(c));
	CHECK(gmt__ring_push(c, &ev));
	CHECK(gmt__ring_peek(c) != NULL && event_is(gmt__ring_peek(c), 1));
	for (n = 0, r = gmt__rings_first(); r != NULL; r = gmt__ring_next(r))
		n++;
	CHECK_EQ(n, 1);
	gmt__rings_after_fork(NULL);
	CHECK(gmt__rings_first() == NULL);
}

/* --- the doorbell ------------------------------------------------------------------ */

#define SHORT_NS 1000000ull /* a sleep that nothing should end early */

/* One thread: when the consumer may sleep and what ends the sleep. A sleep
 * that nothing ends times out (false); one the doorbell or a wake ended
 * already returns at once (true). A ring of 64: a check every
 * 8 pushes, the doorbell rings from 32 held, the consumer stays up from 24. */
static void test_doorbell_rules(void)
{
	struct gmt__ring *small, *r = gmt__ring_new(64, 1);
	struct gmt__event ev = event_of(1);
	int i;

	gmt__rings_after_fork(NULL);
	small = gmt__ring_new(2, 2); /* every push a check; rings from 1 held */
	if (r == NULL || small == NULL) {
		CHECK(r != NULL && small != NULL);
		return;
	}
	gmt__rings_add(r);

	/* Quiet rings: may sleep; nothing rings, so the sleep times out. */
	CHECK(gmt__rings_may_sleep());
	CHECK(!gmt__rings_sleep(SHORT_NS));

	/* Checks under half full do not ring (at 8, 16 and 24 held). */
	CHECK(gmt__rings_may_sleep());
	for (i = 0; i < 31; i++)
		CHECK(gmt__ring_push(r, &ev));
	CHECK(!gmt__rings_sleep(SHORT_NS));

	/* 31 held: 24 or more, so the consumer stays up. */
	CHECK(!gmt__rings_may_sleep());

	/* 23 held: it may sleep. The check at tail 32 (24 held) does not ring,
	 * the one at tail 40 (32 held) does. */
	for (i = 0; i < 8 && gmt__ring_peek(r) != NULL; i++)
		gmt__ring_pop(r);
	CHECK_EQ(gmt__ring_count(r), 23);
	CHECK(gmt__rings_may_sleep());
	for (i = 0; i < 9; i++)
		CHECK(gmt__ring_push(r, &ev));
	CHECK(gmt__rings_sleep(SHORT_NS));
	CHECK_EQ(gmt__ring_count(r), 32);
	CHECK(!gmt__rings_may_sleep());
	while (gmt__ring_peek(r) != NULL)
		gmt__ring_pop(r);
	CHECK(gmt__rings_may_sleep());
	CHECK(!gmt__rings_sleep(SHORT_NS));

	/* gmt__rings_wake ends a sleep; without a sleeper it changes nothing. */
	CHECK(gmt__rings_may_sleep());
	gmt__rings_wake();
	CHECK(gmt__rings_sleep(SHORT_NS));
	gmt__rings_wake();
	CHECK(gmt__rings_may_sleep());
	CHECK(!gmt__rings_sleep(SHORT_NS));

	/* A ring added after the consumer's look rings at its first check. */
	CHECK(gmt__rings_may_sleep());
	gmt__rings_add(small);
	CHECK(gmt__ring_push(small, &ev));
	CHECK(gmt__rings_sleep(SHORT_NS));
	CHECK(!gmt__rings_may_sleep()); /* 1 held in a ring of 2 */

	/* Empty again, the ring of 2 lets the consumer sleep: its stay-up
	 * threshold (a check's worth below half, 0) is clamped to 1 event. */
	CHECK(gmt__ring_peek(small) != NULL);
	gmt__ring_pop(small);
	CHECK(gmt__rings_may_sleep());
	CHECK(!gmt__rings_sleep(SHORT_NS));
	gmt__rings_after_fork(NULL); /* frees both */
}

/* Producers that never drain and never wake anyone themselves: when a ring is
 * full they only yield. The consumer sleeps with no timeout whenever it may,
 * so only the doorbell gets it going again: a lost wake-up leaves a producer
 * spinning on a full ring and the consumer asleep, and the test never ends
 * (meson's timeout fails it). Once the producers are done, the last events
 * (under half a ring) are the timeout's in the core; here main wakes the
 * consumer.
 * Every event must arrive once, in order. */
#define BELL_PRODUCERS 3

struct bell {
	struct gmt__ring *ring[BELL_PRODUCERS];
	uint64_t events; /* per producer */
	atomic_bool consumer_done;
	uint64_t got, bad, sleeps, wakeups, full;
};

static void *bell_producer(void *arg)
{
	struct gmt__ring *r = arg;
	uint64_t full = 0;

	for (uint64_t seq = 1; seq <= (uint64_t)gmt__ring_tid(r); seq++) {
		struct gmt__event ev = event_of(seq);

		while (!gmt__ring_push(r, &ev)) {
			full++;
			sched_yield();
		}
	}
	return (void *)(uintptr_t)full;
}

static void *bell_consumer(void *arg)
{
	struct bell *b = arg;
	uint64_t want[BELL_PRODUCERS], total = BELL_PRODUCERS * b->events;

	for (int i = 0; i < BELL_PRODUCERS; i++)
		want[i] = 1;
	while (b->got < total) {
		uint64_t n = 0;

		for (int i = 0; i < BELL_PRODUCERS; i++) {
			const struct gmt__event *ev;

			while ((ev = gmt__ring_peek(b->ring[i])) != NULL) {
				if (!event_is(ev, want[i]) && b->bad++ < 5)
					fprintf(stderr, "doorbell: ring %d: got seq %" PRIu64 ", expected %" PRIu64 "\n",
						i, ev->seq, want[i]);
				want[i] = ev->seq + 1;
				gmt__ring_pop(b->ring[i]);
				n++;
			}
		}
		b->got += n;
		if (n == 0 && b->got < total && gmt__rings_may_sleep()) {
			b->sleeps++;
			b->wakeups += gmt__rings_sleep(0);
		}
	}
	atomic_store(&b->consumer_done, true);
	return NULL;
}

static void test_doorbell_stress(uint64_t events)
{
	struct bell b = { .events = events };
	pthread_t c, p[BELL_PRODUCERS];
	int i;

	gmt__rings_after_fork(NULL);
	for (i = 0; i < BELL_PRODUCERS; i++) {
		/* The tid carries the producer's event count. */
		b.ring[i] = gmt__ring_new(64, (uint32_t)events);
		if (b.ring[i] == NULL) {
			CHECK(b.ring[i] != NULL);
			return;
		}
		gmt__rings_add(b.ring[i]);
	}
	pthread_create(&c, NULL, bell_consumer, &b);
	for (i = 0; i < BELL_PRODUCERS; i++)
		pthread_create(&p[i], NULL, bell_producer, b.ring[i]);
	for (i = 0; i < BELL_PRODUCERS; i++) {
		void *full;

		pthread_join(p[i], &full);
		b.full += (uint64_t)(uintptr_t)full;
	}
	while (!atomic_load(&b.consumer_done)) {
		gmt__rings_wake();
		sched_yield();
	}
	pthread_join(c, NULL);
	printf("doorbell: %" PRIu64 " events from %d producers through rings of 64; the consumer slept %" PRIu64
	       " times, woken %" PRIu64 " times; %" PRIu64 " pushes found a ring full\n",
	       b.got, BELL_PRODUCERS, b.sleeps, b.wakeups, b.full);
	CHECK_EQ(b.got, BELL_PRODUCERS * events);
	CHECK_EQ(b.bad, 0);
	gmt__rings_after_fork(NULL); /* frees them */
}

int main(int argc, char **argv)
{
	/* argv[1]: events in each stress run (default 5M; fewer under valgrind) */
	uint64_t events = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;

	test_capacities();
	test_fill_drain(0);
	test_fill_drain(UINT32_MAX - 5);
	test_fill_drain(UINT64_MAX - 5);
	test_many_laps();
	test_stress(events, 0);
	test_stress(events / 50, UINT32_MAX - 1000);
	test_stress(events / 50, UINT64_MAX - 1000);
	test_registry_concurrent();
	test_registry_rules();
	test_doorbell_rules();
	test_doorbell_stress(events / 10);
	return check_done("ring");
}
