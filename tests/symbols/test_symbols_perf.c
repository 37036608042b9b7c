/* Symbolising 10,000 distinct addresses of one module (argv[1]: the tracer's
 * own library, built with debug information, not loaded: the lookup works
 * offline from a module map): prints the time it takes from a fresh cache,
 * which issue 4 wants under a second for a snapshot's 10,000 unique stacks.
 * Checks only that most addresses resolve. */
#define _GNU_SOURCE
#include "analyze/symbols.h"
#include "symtest.h"

#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define NADDR 10000

struct text {
	uintptr_t lo, hi; /* offsets from the module's base */
};

/* The executable segment of the module at path, as offsets from where its
 * first page would be loaded. 0, or -1. */
static int find_text(const char *path, struct text *t)
{
	GElf_Addr first_page = 0;
	bool have_first = false;
	size_t nph = 0;
	GElf_Phdr ph;
	int fd, ret = -1;
	Elf *elf;

	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf != NULL && elf_getphdrnum(elf, &nph) == 0) {
		for (size_t i = 0; i < nph; i++) {
			if (gelf_getphdr(elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD)
				continue;
			if (!have_first) {
				first_page = ph.p_vaddr & ~(GElf_Addr)4095;
				have_first = true;
			}
			if (ph.p_flags & PF_X) {
				t->lo = ph.p_vaddr - first_page;
				t->hi = t->lo + ph.p_memsz;
				ret = 0;
				break;
			}
		}
	}
	elf_end(elf);
	close(fd);
	return ret;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const uintptr_t base = (uintptr_t)1 << 32; /* anywhere: the module is not loaded */
	struct text t = { 0, 0 };
	struct gmt__symbols *s;
	struct gmt__frame_sym f[16];
	const char *path = argc > 1 ? argv[1] : "";
	uintptr_t stride;
	int resolved = 0, frames = 0, looked = 0;
	double t0, t1, t2;

	if (find_text(path, &t) != 0 || t.hi <= t.lo) {
		fprintf(stderr, "%s: no executable segment found\n", path);
		return 1;
	}
	stride = (t.hi - t.lo) / NADDR ? (t.hi - t.lo) / NADDR : 1;
	s = gmt__symbols_new();
	if (s == NULL)
		return 1;
	t0 = now();
	/* +1: the lookup takes return addresses and looks up the byte before. */
	for (uintptr_t a = t.lo; a < t.hi && looked < NADDR; a += stride, looked++) {
		int n = gmt__symbols_lookup(s, path, base, NULL, base + a + 1, f, 16);

		resolved += n > 0;
		frames += n;
	}
	t1 = now();
	/* Again, the module open: what each lookup costs by itself. */
	for (uintptr_t a = t.lo, k = 0; a < t.hi && k < NADDR; a += stride, k++)
		gmt__symbols_lookup(s, path, base, NULL, base + a + 1, f, 16);
	t2 = now();
	printf("%d distinct addresses in %s (%#lx bytes of code): %d resolved, %d frames; "
	       "%.3f s from a fresh cache (opening the module included), %.3f s again (%.2f us each)\n",
	       looked, path, (unsigned long)(t.hi - t.lo), resolved, frames,
	       t1 - t0, t2 - t1, (t2 - t1) * 1e6 / (looked ? looked : 1));
	gmt__symbols_free(s);
	CHECK_INT("addresses looked up", looked, NADDR);
	CHECK_INT("most addresses resolved", resolved >= looked / 2, 1);
	return symtest_failures != 0;
}
