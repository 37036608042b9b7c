/* A C call chain with known lines, main → first → symtest_lib_call (a shared
 * object) → second → third, captured in third and symbolised: function, file
 * and line of each frame exact, in the main program (PIE, or not: the same
 * source is built both ways) and in the shared object. With --stripped PATH,
 * the same addresses looked up in PATH, a stripped copy of this program, give
 * nothing; so do a missing and a truncated module. Compiled -g -O0; with
 * --nodebug, compiled without debug information: the program's frames are
 * named by its symbol table, with no file and line. */
#define _GNU_SOURCE
#include "record/stacks.h"
#include "analyze/symbols.h"
#include "symtest.h"
#include "symtest_lib.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#define MAX_FRAMES 32

static uintptr_t ips[MAX_FRAMES];
static int nips;
static bool nodebug;
static int line_third, line_second, line_first, line_main;

__attribute__((noinline)) static void third(void)
{
	line_third = __LINE__ + 1;
	nips = gmt__stack_capture(ips, MAX_FRAMES, 0);
}

__attribute__((noinline)) static void second(void)
{
	line_second = __LINE__ + 1;
	third();
	symtest_lib_sink++;
}

__attribute__((noinline)) static void first(void)
{
	line_first = __LINE__ + 1;
	symtest_lib_call(second);
	symtest_lib_sink++;
}

struct expect {
	const char *function, *file;
	int line;
};

static void check_chain(struct gmt__symbols *s)
{
	const struct expect want[] = {
		{ "third", "test_symbols_c.c", line_third },
		{ "second", "test_symbols_c.c", line_second },
		{ "symtest_lib_call", "symtest_lib.c", symtest_lib_call_line },
		{ "first", "test_symbols_c.c", line_first },
		{ "main", "test_symbols_c.c", line_main },
	};
	int nwant = (int)(sizeof(want) / sizeof(want[0]));

	if (nips < nwant) {
		CHECK_INT("captured frames (at least)", nips, nwant);
		return;
	}
	for (int i = 0; i < nwant; i++) {
		struct gmt__frame_sym f[8];
		char path[4096];
		uintptr_t base;
		int n;

		if (symtest_module(ips[i], path, sizeof(path), &base) != 0) {
			CHECK_INT("module found", -1, 0);
			continue;
		}
		n = gmt__symbols_lookup(s, path, base, NULL, ips[i], f, 8);
		printf("frame %d: %s+%#lx\n", i, symtest_basename(path), (unsigned long)(ips[i] - base));
		symtest_print(ips[i], f, n);
		CHECK_INT("frames for one address", n, 1);
		if (n < 1)
			continue;
		CHECK_STR("function", f[0].function, want[i].function);
		CHECK_INT("inlined", f[0].inlined, 0);
		if (nodebug && strcmp(symtest_basename(path), "libsymtest.so") != 0) {
			CHECK_INT("no file without debug information", f[0].file == NULL, 1);
			CHECK_INT("no line without debug information", f[0].line, 0);
			continue;
		}
		CHECK_STR("file", symtest_basename(f[0].file), want[i].file);
		CHECK_INT("line", f[0].line, want[i].line);
	}
}

/* The build-id note of the main program, as the loader mapped it. */
static int exe_note(struct dl_phdr_info *info, size_t size, void *arg)
{
	char *hex = arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;

		if (ph->p_type != PT_NOTE)
			continue;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const unsigned char *desc = (const unsigned char *)p + sizeof(*nh) + ((nh->n_namesz + 3) & ~3u);

			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(nh + 1, "GNU", 4) == 0) {
				for (unsigned j = 0; j < nh->n_descsz && j < 64; j++)
					sprintf(hex + 2 * j, "%02x", desc[j]);
				return 1;
			}
			p = (const char *)desc + ((nh->n_descsz + 3) & ~3u);
		}
	}
	return 1; /* the first object is the main program */
}

static void check_build_id(struct gmt__symbols *s)
{
	char want[160] = "", got[160], small[8];

	dl_iterate_phdr(exe_note, want);
	if (want[0] == '\0') {
		CHECK_INT("build-id of a program without one", gmt__symbols_build_id(s, "/proc/self/exe", got, sizeof(got)), -ENOENT);
		return;
	}
	CHECK_INT("build-id", gmt__symbols_build_id(s, "/proc/self/exe", got, sizeof(got)), 0);
	CHECK_STR("build-id", got, want);
	CHECK_INT("build-id too long", gmt__symbols_build_id(s, "/proc/self/exe", small, sizeof(small)), -ENAMETOOLONG);
	CHECK_INT("build-id, missing module", gmt__symbols_build_id(s, "/nonexistent/module.so", got, sizeof(got)), -ENOENT);
}

/* The build-id read from this program's image is its file's; a lookup
 * asking for another build of the file names nothing, the same build
 * names what the file does. */
static void check_mapped_build_id(struct gmt__symbols *s)
{
	struct gmt__build_id mapped, other;
	struct gmt__frame_sym f[8];
	char want[160] = "", got[160], path[4096];
	uintptr_t base;

	dl_iterate_phdr(exe_note, want);
	CHECK_INT("a loaded module at the program's address", gmt__build_id_at(ips[0] - 1, &mapped), 1);
	CHECK_INT("no loaded module at address 1", gmt__build_id_at(1, &other), 0);
	if (symtest_module(ips[0], path, sizeof(path), &base) != 0) {
		CHECK_INT("module found", -1, 0);
		return;
	}
	if (want[0] == '\0') {
		CHECK_INT("mapped build-id of a program without one", mapped.len, 0);
		CHECK_INT("frames, neither image nor file with a build-id",
			  gmt__symbols_lookup(s, path, base, &mapped, ips[0], f, 8) > 0, 1);
		return;
	}
	CHECK_INT("mapped build-id", gmt__build_id_hex(&mapped, got, sizeof(got)), 0);
	CHECK_STR("mapped build-id", got, want);
	CHECK_INT("frames, the file the image's build", gmt__symbols_lookup(s, path, base, &mapped, ips[0], f, 8) > 0, 1);
	other = mapped;
	other.bytes[0] ^= 1;
	CHECK_INT("frames, the file another build", gmt__symbols_lookup(s, path, base, &other, ips[0], f, 8), 0);
	other.len = 0;
	CHECK_INT("frames, an image without a build-id", gmt__symbols_lookup(s, path, base, &other, ips[0], f, 8), 0);
	CHECK_INT("data name, the file another build",
		  gmt__symbols_data_name(s, path, base, &other, (uintptr_t)&nips) == NULL, 1);
	CHECK_INT("build-id hex too long", gmt__build_id_hex(&mapped, got, 2 * mapped.len), -ENAMETOOLONG);
	CHECK_INT("build-id hex of none", gmt__build_id_hex(&other, got, sizeof(got)), -ENOENT);
}

/* A copy of the first half of this program: an ELF file whose sections lie
 * past its end. */
static int truncated_copy(char *path, size_t len)
{
	const char *dir = getenv("TMPDIR");
	char buf[65536];
	int in, out = -1, ret = -1;
	off_t size, done = 0;

	snprintf(path, len, "%s/gmt-symbols-truncated-XXXXXX", dir && dir[0] ? dir : "/tmp");
	in = open("/proc/self/exe", O_RDONLY);
	if (in < 0)
		return -1;
	size = lseek(in, 0, SEEK_END);
	lseek(in, 0, SEEK_SET);
	out = mkstemp(path);
	while (out >= 0 && done < size / 2) {
		ssize_t n = read(in, buf, (size_t)(size / 2 - done) < sizeof(buf) ? (size_t)(size / 2 - done) : sizeof(buf));

		if (n <= 0 || write(out, buf, (size_t)n) != n)
			goto out;
		done += n;
	}
	ret = out >= 0 ? 0 : -1;
out:
	close(in);
	if (out >= 0)
		close(out);
	return ret;
}

/* Addresses of this program looked up in modules that know nothing of them. */
static void check_unknown(struct gmt__symbols *s, const char *stripped)
{
	struct gmt__frame_sym f[8];
	char path[4096], truncated[4096];
	uintptr_t base;

	if (symtest_module(ips[0], path, sizeof(path), &base) != 0) {
		CHECK_INT("module found", -1, 0);
		return;
	}
	CHECK_INT("frames from the program itself", gmt__symbols_lookup(s, path, base, NULL, ips[0], f, 8) > 0, 1);
	CHECK_INT("frames from a missing module", gmt__symbols_lookup(s, "/nonexistent/module.so", base, NULL, ips[0], f, 8), 0);
	CHECK_INT("frames from a non-ELF file", gmt__symbols_lookup(s, "/dev/null", base, NULL, ips[0], f, 8), 0);
	CHECK_INT("frames with max 0", gmt__symbols_lookup(s, path, base, NULL, ips[0], f, 0), 0);
	CHECK_INT("frames below the base", gmt__symbols_lookup(s, path, ips[0], NULL, ips[0], f, 8), 0);
	CHECK_INT("frames past the module", gmt__symbols_lookup(s, path, base, NULL, base + ((uintptr_t)1 << 40), f, 8), 0);
	if (truncated_copy(truncated, sizeof(truncated)) == 0) {
		for (int i = 0; i < nips; i++)
			CHECK_INT("frames from a truncated copy", gmt__symbols_lookup(s, truncated, base, NULL, ips[i], f, 8), 0);
		unlink(truncated);
	} else {
		CHECK_INT("truncated copy made", -1, 0);
	}
	if (stripped != NULL) {
		char exe[4096];
		uintptr_t exe_base;

		/* The frames in this program (ips[0], third, is one of them). */
		if (symtest_module(ips[0], exe, sizeof(exe), &exe_base) != 0)
			return;
		for (int i = 0; i < nips; i++) {
			if (symtest_module(ips[i], path, sizeof(path), &base) == 0 && strcmp(path, exe) == 0)
				CHECK_INT("frames from the stripped copy", gmt__symbols_lookup(s, stripped, base, NULL, ips[i], f, 8), 0);
		}
	}
}

int main(int argc, char **argv)
{
	const char *stripped = argc == 3 && strcmp(argv[1], "--stripped") == 0 ? argv[2] : NULL;
	struct gmt__symbols *s;

	nodebug = argc == 2 && strcmp(argv[1], "--nodebug") == 0;

	if (gmt__stack_init() != 0) {
		fprintf(stderr, "gmt__stack_init failed\n");
		return 1;
	}
	line_main = __LINE__ + 1;
	first();
	s = gmt__symbols_new();
	if (s == NULL) {
		fprintf(stderr, "gmt__symbols_new failed\n");
		return 1;
	}
	if (stripped == NULL) {
		check_chain(s);
		check_build_id(s);
		check_mapped_build_id(s);
	}
	check_unknown(s, stripped);
	gmt__symbols_free(s);
	if (symtest_failures != 0)
		fprintf(stderr, "%d checks failed\n", symtest_failures);
	return symtest_failures != 0;
}
