/* Unit test of the stream ids (record/streams.h): one id per handle, for
 * good, the same from every thread that asks at once; the handle back from
 * the id; none past the table's size. Run under ThreadSanitizer too. */
#define _GNU_SOURCE
#include "check.h"
#include "record/streams.h"

#include <pthread.h>

#define THREADS 8
#define PER_THREAD 1000

static uint16_t seen[THREADS][PER_THREAD];

/* Stream handles as pointers are: aligned, clustered. */
static uint64_t handle(int i)
{
	return 0x7f3a00001000ull + (uint64_t)i * 0x40;
}

static void *intern(void *arg)
{
	int t = (int)(intptr_t)arg;

	/* Each thread in its own order, so that they race for the same slots. */
	for (int k = 0; k < PER_THREAD; k++) {
		int i = (k * 7 + t * 131) % PER_THREAD;

		seen[t][i] = gmt__stream_id(handle(i));
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t th[THREADS];
	uint64_t h;

	for (int t = 0; t < THREADS; t++)
		CHECK_EQ(pthread_create(&th[t], NULL, intern, (void *)(intptr_t)t), 0);
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	for (int i = 0; i < PER_THREAD; i++) {
		CHECK(seen[0][i] != 0);
		for (int t = 1; t < THREADS; t++)
			CHECK_EQ(seen[t][i], seen[0][i]);
		CHECK(gmt__stream_handle(seen[0][i], &h));
		CHECK_EQ(h, handle(i));
		/* Asked again: the same id. */
		CHECK_EQ(gmt__stream_id(handle(i)), seen[0][i]);
	}
	/* Distinct handles, distinct ids. */
	for (int i = 1; i < PER_THREAD; i++) {
		for (int j = 0; j < i; j++)
			CHECK(seen[0][i] != seen[0][j]);
	}
}

static void test_special(void)
{
	uint64_t h = 99;
	uint16_t legacy = gmt__stream_id(0), per_thread = gmt__stream_id(2);

	/* The default streams are streams like any other. */
	CHECK(legacy != 0 && per_thread != 0 && legacy != per_thread);
	CHECK(gmt__stream_handle(legacy, &h));
	CHECK_EQ(h, 0);
	CHECK(!gmt__stream_handle(0, &h));
	CHECK(!gmt__stream_handle(4097, &h));
}

static void test_full(void)
{
	int named = 0, unnamed = 0;

	/* 1,002 taken above; up to GMT_STREAMS_MAX in all, then none. */
	for (int i = 0; i < GMT_STREAMS_MAX; i++) {
		if (gmt__stream_id(0x100000000000ull + (uint64_t)i * 0x100) != 0)
			named++;
		else
			unnamed++;
	}
	CHECK_EQ(named, GMT_STREAMS_MAX - PER_THREAD - 2);
	CHECK_EQ(unnamed, PER_THREAD + 2);
	/* Those named before keep their ids. */
	CHECK(gmt__stream_id(handle(5)) == seen[0][5]);
	CHECK(gmt__stream_id(0) != 0);
}

int main(void)
{
	test_threads();
	test_special();
	test_full();
	return check_done("streams");
}
