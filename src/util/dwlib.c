/* elfutils' libdw, loaded at first use (dwlib.h). */
#define _GNU_SOURCE
#include "util/dwlib.h"

#include "util/loader.h"
#include "util/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

/* Filled once by load; read only after pthread_once, which publishes it. */
static struct gmt__dw dw;
static bool dw_ok;
static pthread_once_t dw_once = PTHREAD_ONCE_INIT;

/* NOTE: libdw is dlopen()ed rather than linked so that the tracer still loads,
 * and traces, in a container without elfutils (issue 4): frames then keep
 * module and offset, and libunwind alone walks stacks. RTLD_LOCAL keeps its
 * names (and libelf's) out of the program's scope. The handle is never
 * closed: Dwfl objects use it until exit. Plain dlsym: inside
 * libgpumemtrace.so it is the tracer's override, which passes every name not
 * starting with "cu" through to glibc's; a lookup in a handle searches its
 * dependencies too, so libelf's functions come from the same handle. */
static void load(void)
{
	void *h = gmt__dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL), *sym;
	const char *missing = NULL;

	if (h == NULL) {
		const char *why = dlerror();

		gmt__info("libdw.so.1 cannot be loaded (%s): stack frames carry no file and line, "
			  "and libunwind alone walks stacks", why != NULL ? why : "unknown error");
		return;
	}
#define GMT_DW_LOAD(name) \
	if (missing == NULL) { \
		sym = dlsym(h, #name); \
		if (sym == NULL) \
			missing = #name; \
		memcpy(&dw.name, &sym, sizeof(dw.name)); \
	}
	GMT_DW_FUNCTIONS(GMT_DW_LOAD)
#undef GMT_DW_LOAD
	if (missing != NULL) {
		gmt__info("libdw.so.1 lacks %s: stack frames carry no file and line, "
			  "and libunwind alone walks stacks", missing);
		return;
	}
	dw_ok = true;
}

const struct gmt__dw *gmt__dw_load(void)
{
	(void)pthread_once(&dw_once, load);
	return dw_ok ? &dw : NULL;
}
