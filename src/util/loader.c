/* The tracer's loader calls, serialised with fork (loader.h). */
#define _GNU_SOURCE
#include "util/loader.h"

#include <dlfcn.h>
#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void *gmt__dlopen(const char *name, int mode)
{
	void *h;

	pthread_mutex_lock(&lock);
	h = dlopen(name, mode);
	pthread_mutex_unlock(&lock);
	return h;
}

void gmt__dlclose(void *handle)
{
	pthread_mutex_lock(&lock);
	dlclose(handle);
	pthread_mutex_unlock(&lock);
}

void gmt__loader_fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

void gmt__loader_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

/* The forking thread held it; it is the child's only thread. */
void gmt__loader_fork_child(void)
{
	pthread_mutex_unlock(&lock);
}
