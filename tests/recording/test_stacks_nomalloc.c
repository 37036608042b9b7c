/* The hot path allocates nothing (docs/internals.md, "Recording"): after gmt__stack_init,
 * capturing a stack and interning one seen before call no malloc, on the
 * initialising thread and on a thread started later, whether libunwind or
 * unwind.c walks (before and after the rules are learnt). This executable defines
 * malloc and friends itself, counting calls, and forwards them to glibc. */
#define _GNU_SOURCE
#include "record/stacks.h"
#include "record/unwind.h"

#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

/* GCC says so with __SANITIZE_*__, Clang with __has_feature. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GMT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define GMT_SANITIZED 1
#endif
#endif
#ifndef GMT_SANITIZED
#define GMT_SANITIZED 0
#endif

#if !GMT_SANITIZED
/* glibc's own entry points (the sanitizers define malloc themselves). */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t m);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static atomic_long allocations;

void *malloc(size_t n)
{
	atomic_fetch_add(&allocations, 1);
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	atomic_fetch_add(&allocations, 1);
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	atomic_fetch_add(&allocations, 1);
	return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
	atomic_fetch_add(&allocations, 1);
	return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
	atomic_fetch_add(&allocations, 1);
	return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	void *p;

	atomic_fetch_add(&allocations, 1);
	p = __libc_memalign(align, n);
	if (p == NULL)
		return 12; /* ENOMEM */
	*out = p;
	return 0;
}

void free(void *p)
{
	__libc_free(p);
}

/* Captures and interns the same stack `rounds` times; returns the mallocs
 * made meanwhile, the first two rounds excluded: a new stack (interning may
 * lock), and new frames, whose unwinding rules are learnt after each of them
 * (as the consumer does). *given_up: walks libunwind made in the rounds
 * counted; 0 where unwind.c walks (x86-64), once the rules are learnt. */
static long hot_path(int rounds, uint32_t *id_out, uint64_t *given_up)
{
	struct gmt__unwind_stats st = {0}, end;
	long before = 0;
	uint32_t id = 0;
	int i;

	for (i = 0; i < rounds; i++) {
		uintptr_t ips[64];
		int n;

		if (i == 2) {
			before = atomic_load(&allocations);
			gmt__unwind_stats(&st);
		}
		n = gmt__stack_capture(ips, 64, 0);
		CHECK(n > 0);
		id = gmt__stack_intern(ips, n);
		CHECK(id != 0);
		if (i < 2)
			gmt__unwind_learn();
	}
	gmt__unwind_stats(&end);
	*given_up = end.given_up - st.given_up;
	*id_out = id;
	return atomic_load(&allocations) - before;
}

static long first_capture_in_thread;
static long thread_hot_path;
static uint64_t thread_given_up;

static void *thread_main(void *arg)
{
	uintptr_t ips[64];
	uint32_t id;
	long before = atomic_load(&allocations);

	(void)arg;
	CHECK(gmt__stack_capture(ips, 64, 0) > 0);
	first_capture_in_thread = atomic_load(&allocations) - before;
	thread_hot_path = hot_path(1000, &id, &thread_given_up);
	return NULL;
}
#endif

int main(void)
{
#if GMT_SANITIZED
	printf("nomalloc: skipped under a sanitizer (it owns malloc)\n");
	return 77;
#else
	pthread_t th;
	uint32_t id;
	uint64_t given_up;
	long n;

	CHECK_EQ(gmt__stack_init(), 0);
	n = hot_path(1000, &id, &given_up);
	printf("nomalloc: %ld mallocs in 998 captures+interns on the main thread; libunwind walked %" PRIu64 "\n",
	       n, given_up);
	CHECK_EQ(n, 0);
#if defined(__x86_64__)
	CHECK_EQ(given_up, 0);
#endif

	pthread_create(&th, NULL, thread_main, NULL);
	pthread_join(th, NULL);
	printf("nomalloc: new thread: %ld mallocs in its first capture, %ld in 998 more; libunwind walked %" PRIu64 "\n",
	       first_capture_in_thread, thread_hot_path, thread_given_up);
	CHECK_EQ(first_capture_in_thread, 0);
	CHECK_EQ(thread_hot_path, 0);
#if defined(__x86_64__)
	CHECK_EQ(thread_given_up, 0);
#endif
	return check_done("stacks-nomalloc");
#endif
}
