/* What the symbols tests share: the module (path and load base) an address
 * lies in, as the snapshot writer finds it, and checks that print both sides.
 * Compiles as C and as C++. */
#ifndef GMT_SYMTEST_H
#define GMT_SYMTEST_H

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int symtest_failures;

#define CHECK_INT(what, got, want)                                                       \
	do {                                                                             \
		long long g_ = (long long)(got), w_ = (long long)(want);                 \
		if (g_ != w_) {                                                          \
			fprintf(stderr, "%s:%d: %s: got %lld, want %lld\n", __FILE__,    \
				__LINE__, (what), g_, w_);                               \
			symtest_failures++;                                              \
		}                                                                        \
	} while (0)

#define CHECK_STR(what, got, want)                                                       \
	do {                                                                             \
		const char *g_ = (got), *w_ = (want);                                    \
		if (g_ == NULL || w_ == NULL || strcmp(g_, w_) != 0) {                   \
			fprintf(stderr, "%s:%d: %s: got \"%s\", want \"%s\"\n", __FILE__, \
				__LINE__, (what), g_ ? g_ : "(null)", w_ ? w_ : "(null)");  \
			symtest_failures++;                                              \
		}                                                                        \
	} while (0)

static inline const char *symtest_basename(const char *path)
{
	const char *slash = path != NULL ? strrchr(path, '/') : NULL;

	return slash != NULL ? slash + 1 : path;
}

/* The module of return address ip: its path (the main program's from
 * /proc/self/exe) and base, as src/analyze/frames.c finds them. 0, or -1. */
static inline int symtest_module(uintptr_t ip, char *path, size_t len, uintptr_t *base)
{
	struct link_map *map = NULL;
	Dl_info info;

	if (dladdr1((void *)(ip - 1), &info, (void **)&map, RTLD_DL_LINKMAP) == 0 ||
	    info.dli_fname == NULL)
		return -1;
	*base = (uintptr_t)info.dli_fbase;
	if (map != NULL && map->l_name[0] == '\0') {
		ssize_t n = readlink("/proc/self/exe", path, len - 1);

		if (n <= 0)
			return -1;
		path[n] = '\0';
	} else {
		snprintf(path, len, "%s", info.dli_fname);
	}
	return 0;
}

static inline void symtest_print(uintptr_t ip, const struct gmt__frame_sym *f, int n)
{
	for (int i = 0; i < n; i++)
		printf("  %#lx%s %s at %s:%d\n", (unsigned long)ip, f[i].inlined ? " (inlined)" : "",
		       f[i].function ? f[i].function : "?", symtest_basename(f[i].file), f[i].line);
}

#endif /* GMT_SYMTEST_H */
