/* The hot path allocates nothing (DESIGN.md §3): after gmt__stack_init,
 * capturing a stack and interning one seen before call no malloc, on the
 * initialising thread and on a thread started later. This executable defines
 * malloc and friends itself, counting calls, and forwards them to glibc. */
#define _GNU_SOURCE
#include "stacks.h"

#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GMT_SANITIZED 1
#else
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
 * made meanwhile, the first round (a new stack: it may lock) excluded. */
static long hot_path(int rounds, uint32_t *id_out)
{
	long before = 0;
	uint32_t id = 0;
	int i;

	for (i = 0; i < rounds; i++) {
		uintptr_t ips[64];
		int n;

		if (i == 1)
			before = atomic_load(&allocations);
		n = gmt__stack_capture(ips, 64, 0);
		CHECK(n > 0);
		id = gmt__stack_intern(ips, n);
		CHECK(id != 0);
	}
	*id_out = id;
	return atomic_load(&allocations) - before;
}

static long first_capture_in_thread;
static long thread_hot_path;

static void *thread_main(void *arg)
{
	uintptr_t ips[64];
	uint32_t id;
	long before = atomic_load(&allocations);

	(void)arg;
	CHECK(gmt__stack_capture(ips, 64, 0) > 0);
	first_capture_in_thread = atomic_load(&allocations) - before;
	thread_hot_path = hot_path(1000, &id);
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
	long n;

	CHECK_EQ(gmt__stack_init(), 0);
	n = hot_path(1000, &id);
	printf("nomalloc: %ld mallocs in 999 captures+interns on the main thread\n", n);
	CHECK_EQ(n, 0);

	pthread_create(&th, NULL, thread_main, NULL);
	pthread_join(th, NULL);
	printf("nomalloc: new thread: %ld mallocs in its first capture, %ld in 999 more\n",
	       first_capture_in_thread, thread_hot_path);
	CHECK_EQ(first_capture_in_thread, 0);
	CHECK_EQ(thread_hot_path, 0);
	return check_done("stacks-nomalloc");
#endif
}
