/* Modules the program unloads (modules.h). */
#define _GNU_SOURCE
#include "record/modules.h"

#include "tracer/options.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint epoch;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gmt__unloaded *gone; /* under lock, never shrinks; paths never freed */
static size_t ngone, capgone;

uint32_t gmt__modules_epoch(void)
{
	return atomic_load_explicit(&epoch, memory_order_relaxed);
}

struct loaded {
	struct gmt__unloaded *v;
	size_t n, cap;
	bool ids;    /* read each module's build-id (before the unload: still mapped) */
	bool failed;
};

static int list_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct loaded *l = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < lo)
			lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > hi)
			hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	if (hi <= lo || info->dlpi_name == NULL || info->dlpi_name[0] == '\0')
		return 0; /* the program itself, or nothing mapped: never unloaded */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct gmt__unloaded *v = realloc(l->v, cap * sizeof(*v));

		if (v == NULL) {
			l->failed = true;
			return 1;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n] = (struct gmt__unloaded){ .path = info->dlpi_name, .base = info->dlpi_addr, .lo = lo, .hi = hi };
	if (l->ids)
		gmt__build_id_mapped(info, &l->v[l->n].id);
	l->n++;
	return 0;
}

static bool listed(const struct loaded *l, const struct gmt__unloaded *m)
{
	for (size_t i = 0; i < l->n; i++) {
		if (l->v[i].base == m->base && l->v[i].lo == m->lo && l->v[i].hi == m->hi)
			return true;
	}
	return false;
}

/* Keeps m (unloaded as the epoch `e` began): a copy of its path first, taken
 * before the unload (the loader frees its own). */
static void keep(const struct gmt__unloaded *m, uint32_t e)
{
	pthread_mutex_lock(&lock);
	if (ngone == capgone) {
		size_t cap = capgone ? 2 * capgone : 16;
		struct gmt__unloaded *v = realloc(gone, cap * sizeof(*v));

		if (v == NULL) {
			pthread_mutex_unlock(&lock);
			free((char *)m->path);
			return;
		}
		gone = v;
		capgone = cap;
	}
	gone[ngone] = *m;
	gone[ngone++].epoch = e;
	pthread_mutex_unlock(&lock);
}

/* NOTE: dlclose is glibc's under GLIBC_2.34 from 2.34 on, under the base
 * version before (as dlsym: resolve.c); dlvsym is not overridden. */
static int (*real_dlclose(void))(void *)
{
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17" };
	static int (*real)(void *);
	int (*p)(void *) = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
	void *sym = NULL;

	if (p != NULL)
		return p;
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && sym == NULL; i++)
		sym = dlvsym(RTLD_NEXT, "dlclose", versions[i]);
	memcpy(&p, &sym, sizeof(p));
	__atomic_store_n(&real, p, __ATOMIC_RELEASE);
	return p;
}

int gmt__modules_dlclose(void *handle)
{
	int (*real)(void *) = real_dlclose();
	struct loaded before = { .ids = true }, after = { 0 };
	int r, saved;
	uint32_t e;

	if (real == NULL)
		return -1;
	if (gmt__secure())
		return real(handle);
	dl_iterate_phdr(list_one, &before);
	/* The paths, copied while the loader still has them. */
	for (size_t i = 0; i < before.n; i++) {
		before.v[i].path = strdup(before.v[i].path);
		before.failed |= before.v[i].path == NULL;
	}
	r = real(handle);
	saved = errno;
	if (!before.failed)
		dl_iterate_phdr(list_one, &after);
	e = 0;
	for (size_t i = 0; i < before.n; i++) {
		if (before.failed || after.failed || listed(&after, &before.v[i]) || before.v[i].path == NULL) {
			free((char *)before.v[i].path);
			continue;
		}
		if (e == 0)
			e = atomic_fetch_add_explicit(&epoch, 1, memory_order_relaxed) + 1;
		keep(&before.v[i], e);
	}
	free(before.v);
	free(after.v);
	errno = saved;
	return r;
}

bool gmt__modules_unloaded(uintptr_t ip, uint32_t e, struct gmt__unloaded *out)
{
	bool found = false;

	if (gmt__modules_epoch() <= e)
		return false; /* nothing unloaded since that stack's capture */
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < ngone; i++) {
		if (gone[i].epoch > e && ip > gone[i].lo && ip <= gone[i].hi && (!found || gone[i].epoch < out->epoch)) {
			*out = gone[i];
			found = true;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

void gmt__modules_fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

void gmt__modules_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

void gmt__modules_fork_child(void)
{
	pthread_mutex_unlock(&lock);
}
