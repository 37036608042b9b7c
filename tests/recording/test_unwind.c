/* The stack walk of src/record/unwind.c against libunwind's unw_backtrace, the
 * ground truth it must equal: from call chains of known shapes (deep
 * recursion, frames addressed from rbp by alloca, libc's qsort and
 * dl_iterate_phdr calling back, a shared object, a second thread) both give
 * the same addresses once the rules are learnt; where the walk cannot follow
 * (a signal frame, code without CFI) it gives up, and gmt__unwind_walk gives
 * libunwind's. The memo of the last walk is checked by a caller that changes
 * outside frames the walk finds in their last state. */
#define _GNU_SOURCE
#include "record/stacks.h"
#include "record/unwind.h"

#include "check.h"

#include <alloca.h>
#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX GMT_UNWIND_MAX

/* Each frame below keeps its call: no inlining, no tail call (the barrier
 * after it), so that both walkers see every level. */
#define KEEP() __asm__ volatile("" ::: "memory")

struct walks {
	uintptr_t ours[MAX], theirs[MAX];
	int n, m;       /* ours: gmt__unwind_fast's result; theirs: unw_backtrace's */
	int rounds;     /* learning rounds it took */
};

/* Walks here with both, learning until the walk stops asking for rules (at
 * most 8 rounds: each learns at least the address that stopped it). */
__attribute__((noinline)) static void walk_both(struct walks *w, int max)
{
	for (w->rounds = 0; w->rounds < 8; w->rounds++) {
		w->n = gmt__unwind_fast(w->ours, max);
		w->m = unw_backtrace((void **)w->theirs, max);
		if (w->n != -ENOENT)
			break;
		gmt__unwind_note(w->theirs, w->m);
		gmt__unwind_learn();
	}
	KEEP();
}

/* The two agree: the same count, the same addresses but the first (each
 * walker's own call site in walk_both). */
static void check_same(const char *what, const struct walks *w)
{
	int diff = 0;

	CHECK_EQ(w->n, w->m);
	for (int i = 1; i < w->n && i < w->m; i++)
		if (w->ours[i] != w->theirs[i] && diff++ == 0)
			fprintf(stderr, "%s: frame %d: 0x%" PRIxPTR " (ours) != 0x%" PRIxPTR " (libunwind)\n", what, i,
				w->ours[i], w->theirs[i]);
	CHECK_EQ(diff, 0);
	if (w->n != w->m || diff != 0)
		fprintf(stderr, "%s: %d frames (ours), %d (libunwind), %d rounds\n", what, w->n, w->m, w->rounds);
}

/* --- recursion ------------------------------------------------------------------- */

static struct walks deep;

__attribute__((noinline)) static int recurse(int depth, int max)
{
	int r;

	if (depth == 0) {
		walk_both(&deep, max);
		return 0;
	}
	r = recurse(depth - 1, max);
	KEEP();
	return r + 1;
}

/* --- the memo: the same inner frames under another caller ------------------------ */

/* main -> outer (from one of two call sites) -> middle -> inner -> walk: the
 * second time, inner's frame is in the state the last walk saw it in, and
 * only outer's return address differs: the walk must see it (the memo's
 * check), not take the last walk's. */
static struct walks memo_walk;

__attribute__((noinline)) static void inner(void)
{
	walk_both(&memo_walk, MAX);
	KEEP();
}

__attribute__((noinline)) static void middle(void)
{
	inner();
	KEEP();
}

__attribute__((noinline)) static void outer(void)
{
	middle();
	KEEP();
}

/* --- frames addressed from rbp (alloca) ------------------------------------------ */

static struct walks dynamic;

__attribute__((noinline)) static int with_alloca(int depth, size_t n)
{
	volatile char *p = alloca(n);
	int r;

	p[0] = (char)depth;
	if (depth == 0) {
		walk_both(&dynamic, MAX);
		return p[0];
	}
	/* Alternate with frames that keep rsp-relative rules. */
	r = (depth & 1) ? recurse(0, MAX) * 0 + with_alloca(depth - 1, n + 16) : with_alloca(depth - 1, n * 2);
	KEEP();
	return r + p[0];
}

/* --- libc calling back ----------------------------------------------------------- */

static struct walks sorted, iterated;

static int compare_ints(const void *a, const void *b)
{
	static int once;

	if (!once++)
		walk_both(&sorted, MAX);
	return *(const int *)a - *(const int *)b;
}

static int each_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)info, (void)size, (void)arg;
	walk_both(&iterated, MAX);
	return 1;
}

/* --- a second thread ------------------------------------------------------------- */

static struct walks threaded;

static void *thread_main(void *arg)
{
	(void)arg;
	recurse(0, MAX);
	threaded = deep;
	return NULL;
}

/* --- a signal frame -------------------------------------------------------------- */

static volatile int in_handler_walk;
static int handler_fast;
static struct walks handler_walks;

/* The walk with libunwind behind it, against libunwind's own. */
__attribute__((noinline)) static void walk_with_fallback(struct walks *w)
{
	w->n = gmt__unwind_walk(w->ours, MAX);
	w->m = unw_backtrace((void **)w->theirs, MAX);
	KEEP();
}

/* The walk by rules alone from here, learning first until it stops asking
 * for rules: then only a frame the rules cannot follow stops it. */
__attribute__((noinline)) static int fast_after_learning(void)
{
	uintptr_t ips[MAX];
	int n = -ENOENT;

	for (int i = 0; i < 8 && n == -ENOENT; i++) {
		n = gmt__unwind_fast(ips, MAX);
		if (n == -ENOENT) {
			gmt__unwind_note(ips, unw_backtrace((void **)ips, MAX));
			gmt__unwind_learn();
		}
	}
	KEEP();
	return n;
}

static void on_signal(int sig)
{
	(void)sig;
	handler_fast = fast_after_learning();
	walk_with_fallback(&handler_walks);
	in_handler_walk = 1;
}

/* --- code without CFI ------------------------------------------------------------ */

static int jit_fast;
static struct walks jit_walks;

static void from_jit(void)
{
	jit_fast = fast_after_learning();
	walk_with_fallback(&jit_walks);
}

/* Private writable file mappings at offset 0: the loader makes none (a
 * module's first segment is read-only), and the rules' reading must not
 * either (the leak scan reads writable mappings). Shared ones are not
 * modules (valgrind's vgdb keeps one). */
static int writable_file_heads(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024];
	int n = 0;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		char perms[8], path[512] = "";
		unsigned long long off;

		if (sscanf(line, "%*x-%*x %7s %llx %*s %*s %511s", perms, &off, path) >= 2 && perms[1] == 'w' &&
		    perms[3] == 'p' && off == 0 && path[0] == '/') {
			fprintf(stderr, "writable file mapping: %s", line);
			n++;
		}
	}
	fclose(f);
	return n;
}

int main(void)
{
	struct gmt__unwind_stats st;
	pthread_t th;
	int v[64];

	CHECK_EQ(gmt__stack_init(), 0);

	recurse(5, MAX);
	check_same("recursion 5", &deep);
	CHECK(deep.n > 6);
	recurse(60, MAX);
	check_same("recursion 60", &deep);
	CHECK(deep.n > 61);
	/* Deeper than the walk goes: both stop at max, the second time from
	 * the memo of the first. */
	for (volatile int i = 0; i < 2; i++) {
		recurse(400, MAX);
		check_same("recursion 400", &deep);
		CHECK_EQ(deep.n, MAX);
	}
	for (int max = 1; max <= 4; max++) {
		recurse(10, max);
		check_same("recursion 10, few frames", &deep);
		CHECK_EQ(deep.n, max);
	}
	/* Once learnt, the walk goes alone: the second pass from one call site
	 * needs no round of learning (volatile: a loop of two, unrolled, would
	 * be two call sites). */
	for (volatile int i = 0; i < 2; i++)
		recurse(40, MAX);
	CHECK_EQ(deep.rounds, 0);
	check_same("recursion 40, learnt", &deep);

	/* Two call sites of outer, in turn: every walk equal to libunwind's. */
	for (int i = 0; i < 3; i++) {
		uintptr_t first_site;

		outer();
		check_same("memo, call site 1", &memo_walk);
		first_site = memo_walk.ours[memo_walk.n - 1 > 4 ? 4 : 0];
		outer();
		check_same("memo, call site 2", &memo_walk);
		CHECK(memo_walk.ours[4] != first_site);
	}

	with_alloca(12, 32);
	check_same("alloca", &dynamic);
	CHECK(dynamic.n > 13);

	for (int i = 0; i < 64; i++)
		v[i] = (i * 37) % 64;
	qsort(v, 64, sizeof(v[0]), compare_ints);
	check_same("qsort", &sorted);
	dl_iterate_phdr(each_object, NULL);
	check_same("dl_iterate_phdr", &iterated);

	CHECK_EQ(pthread_create(&th, NULL, thread_main, NULL), 0);
	pthread_join(th, NULL);
	check_same("thread", &threaded);
	CHECK(threaded.n > 2);

	/* A signal frame: the walk gives up; stacks.c's walk is libunwind's,
	 * which goes on through the frame into main. */
	signal(SIGUSR1, on_signal);
	raise(SIGUSR1);
	CHECK_EQ(in_handler_walk, 1);
	CHECK_EQ(handler_fast, -ENOTSUP);
	check_same("signal frame, libunwind behind", &handler_walks);
	CHECK(handler_walks.n > 3);

	/* Code without CFI (JIT-like): sub $8,%rsp; call *%rdi; add $8,%rsp; ret. */
	{
		static const unsigned char code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7, 0x48, 0x83, 0xc4, 0x08, 0xc3};
		void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		CHECK(page != MAP_FAILED);
		if (page != MAP_FAILED) {
			void (*jit)(void (*)(void));

			memcpy(page, code, sizeof(code));
			CHECK_EQ(mprotect(page, 4096, PROT_READ | PROT_EXEC), 0);
			memcpy(&jit, &page, sizeof(jit));
			jit(from_jit);
			CHECK_EQ(jit_fast, -ENOTSUP);
			check_same("code without CFI, libunwind behind", &jit_walks);
			/* libunwind too stops at the code without CFI: from_jit and
			 * walk_with_fallback. */
			CHECK(jit_walks.n >= 2);
			munmap(page, 4096);
		}
	}

	CHECK_EQ(writable_file_heads(), 0);

	gmt__unwind_stats(&st);
	printf("unwind: %" PRIu64 " rules learnt, %" PRIu64 " walks given to libunwind\n", st.rules, st.given_up);
	CHECK(st.rules > 20);
	return check_done("unwind");
}
