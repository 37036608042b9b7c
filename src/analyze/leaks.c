/* The leak check's pointer scan (leaks.h). */
#define _GNU_SOURCE
#include "analyze/leaks.h"

#include "util/map.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define READ_BLOCK (1u << 20)    /* bytes read at once by the scan */
#define PAGE_BYTES 4096u
#define PAGE_SLOTS 256           /* pages cached while following pointers */
#define FOLLOW_LIMIT (1ull << 30) /* bytes of bookkeeping followed at most */
#define FOLLOW_PAGED (64u << 10)  /* smaller ranges are followed through the page cache */
#define RESIDENT_WINDOW (1ull << 30) /* bytes whose residency one mincore() asks */
/* A writable mapping this large is a reservation, not data: a sanitizer's
 * shadow memory (terabytes), an allocator's address space. */
#define HUGE_MAPPING (1ull << 36)

/* glibc malloc's chunk header (malloc/malloc.c): the size, with flag bits. */
#define CHUNK_PREV_INUSE 1u
#define CHUNK_IS_MMAPPED 2u
#define CHUNK_FLAGS 7u

/* AddressSanitizer's public interface, where its runtime is loaded: its heap
 * is not glibc's (blocks are found by asking it), and freed memory sits in
 * its quarantine, poisoned, with its old content (not read as references). */
typedef const char *asan_locate_fn(void *addr, char *name, size_t name_size, void **region_address,
				   size_t *region_size);
typedef int asan_poisoned_fn(void *addr);

struct asan {
	asan_locate_fn *locate;
	asan_poisoned_fn *poisoned;
};

static void asan_find(struct asan *a)
{
	void *locate = dlsym(RTLD_DEFAULT, "__asan_locate_address");
	void *poisoned = dlsym(RTLD_DEFAULT, "__asan_address_is_poisoned");

	memcpy(&a->locate, &locate, sizeof(locate));
	memcpy(&a->poisoned, &poisoned, sizeof(poisoned));
}

/* ---- memory of our own: mmap'd, so that it never lies in the heap we read -- */

struct scratch {
	void *p;
	size_t len;
};

/* Grows *v (of *cap elements of `size` bytes) to hold at least need. */
static int scratch_grow(void **v, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 256;
	void *bigger;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	bigger = *v == NULL ? gmt__map(n * size) : mremap(*v, *cap * size, n * size, MREMAP_MAYMOVE);
	if (bigger == NULL || bigger == MAP_FAILED)
		return -ENOMEM;
	*v = bigger;
	*cap = n;
	return 0;
}

static void scratch_free(void *v, size_t cap, size_t size)
{
	if (v != NULL)
		munmap(v, cap * size);
}

/* ---- reading our own memory safely ---------------------------------------------- */

struct reader {
	pid_t pid;
	int mem_fd; /* /proc/self/mem, when process_vm_readv is refused */
	bool use_fd;
	/* pages cached while following pointers */
	uint64_t *page_addr; /* [PAGE_SLOTS], 0: empty */
	unsigned char *pages; /* [PAGE_SLOTS][PAGE_BYTES] */
};

/* Copies [addr, addr + len) into buf. Returns the bytes copied (fewer, or -1,
 * where the memory is not there any more). */
static ssize_t peek(struct reader *rd, uint64_t addr, void *buf, size_t len)
{
	if (!rd->use_fd) {
		struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

		return syscall(SYS_process_vm_readv, rd->pid, &local, 1UL, &remote, 1UL, 0UL);
	}
	return pread(rd->mem_fd, buf, len, (off_t)addr);
}

static int reader_open(struct reader *rd)
{
	uint64_t probe = 0x5eed, got = 0;

	memset(rd, 0, sizeof(*rd));
	rd->pid = getpid();
	rd->mem_fd = -1;
	if (peek(rd, (uint64_t)(uintptr_t)&probe, &got, sizeof(got)) != (ssize_t)sizeof(got) || got != probe) {
		/* NOTE: seccomp profiles (containers) may refuse process_vm_readv. */
		rd->mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
		rd->use_fd = true;
		got = 0;
		if (rd->mem_fd < 0 || peek(rd, (uint64_t)(uintptr_t)&probe, &got, sizeof(got)) != (ssize_t)sizeof(got) ||
		    got != probe) {
			if (rd->mem_fd >= 0)
				close(rd->mem_fd);
			return -EPERM;
		}
	}
	rd->page_addr = gmt__map(PAGE_SLOTS * sizeof(uint64_t));
	rd->pages = gmt__map((size_t)PAGE_SLOTS * PAGE_BYTES);
	if (rd->page_addr == NULL || rd->pages == NULL)
		return -ENOMEM;
	return 0;
}

static void reader_close(struct reader *rd)
{
	if (rd->mem_fd >= 0)
		close(rd->mem_fd);
	if (rd->page_addr != NULL)
		munmap(rd->page_addr, PAGE_SLOTS * sizeof(uint64_t));
	if (rd->pages != NULL)
		munmap(rd->pages, (size_t)PAGE_SLOTS * PAGE_BYTES);
}

/* The word at addr (8-aligned) through the page cache; false when unreadable. */
static bool peek_word(struct reader *rd, uint64_t addr, uint64_t *out)
{
	uint64_t page = addr & ~(uint64_t)(PAGE_BYTES - 1);
	size_t slot = (size_t)((page / PAGE_BYTES) % PAGE_SLOTS);
	unsigned char *p = rd->pages + slot * PAGE_BYTES;

	if (rd->page_addr[slot] != page + 1) {
		if (peek(rd, page, p, PAGE_BYTES) != (ssize_t)PAGE_BYTES) {
			rd->page_addr[slot] = 0;
			return false;
		}
		rd->page_addr[slot] = page + 1;
	}
	memcpy(out, p + (addr - page), sizeof(*out));
	return true;
}

/* ---- the process's mappings --------------------------------------------------- */

enum map_type { MT_OTHER, MT_ANON, MT_HEAP, MT_STACK, MT_FILE, MT_DEVICE };

struct mapping {
	uint64_t lo, hi;
	bool readable, writable;
	enum map_type type;
};

struct maps {
	struct mapping *v;
	size_t n, cap;
};

static enum map_type map_type_of(const char *path)
{
	if (path[0] == '\0')
		return MT_ANON;
	if (strcmp(path, "[heap]") == 0)
		return MT_HEAP;
	if (strncmp(path, "[stack", 6) == 0)
		return MT_STACK;
	if (strncmp(path, "/dev/", 5) == 0)
		return MT_DEVICE;
	if (path[0] == '/')
		return MT_FILE;
	return MT_OTHER; /* [vvar], [vdso], [vsyscall], anon_inode:... */
}

/* One line of /proc/self/maps: "lo-hi perms offset dev inode   path". */
static void maps_line(struct maps *m, const char *line)
{
	struct mapping x = { 0 };
	char *end;
	const char *p = line;
	int field;

	x.lo = strtoull(p, &end, 16);
	if (*end != '-')
		return;
	x.hi = strtoull(end + 1, &end, 16);
	if (*end != ' ' || end[1] == '\0' || end[2] == '\0')
		return;
	x.readable = end[1] == 'r';
	x.writable = end[2] == 'w';
	p = end + 1;
	for (field = 0; field < 4 && *p != '\0'; field++) { /* perms, offset, dev, inode */
		while (*p != '\0' && *p != ' ')
			p++;
		while (*p == ' ')
			p++;
	}
	x.type = map_type_of(p);
	if (scratch_grow((void **)&m->v, &m->cap, m->n + 1, sizeof(*m->v)) == 0)
		m->v[m->n++] = x;
}

static int maps_read(struct maps *m)
{
	char *buf = NULL;
	size_t cap = 0, len = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t got;

		if (scratch_grow((void **)&buf, &cap, len + 65536, 1) < 0) {
			r = -ENOMEM;
			break;
		}
		got = read(fd, buf + len, cap - len - 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			r = -errno;
			break;
		}
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	if (r == 0) {
		char *line = buf;

		buf[len] = '\0';
		while (line < buf + len) {
			char *nl = strchr(line, '\n');

			if (nl != NULL)
				*nl = '\0';
			maps_line(m, line);
			if (nl == NULL)
				break;
			line = nl + 1;
		}
	}
	scratch_free(buf, cap, 1);
	return r;
}

/* The index of the first mapping that ends past addr, or m->n (the kernel
 * lists them in address order). */
static size_t maps_from(const struct maps *m, uint64_t addr)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].hi <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The mapping holding addr, or NULL. */
static const struct mapping *maps_find(const struct maps *m, uint64_t addr)
{
	size_t i = maps_from(m, addr);

	return i < m->n && m->v[i].lo <= addr ? &m->v[i] : NULL;
}

/* ---- range lists ----------------------------------------------------------------- */

struct ranges {
	struct gmt__range *v;
	size_t n, cap;
};

static int ranges_add(struct ranges *r, uint64_t lo, uint64_t hi)
{
	if (hi <= lo)
		return 0;
	if (scratch_grow((void **)&r->v, &r->cap, r->n + 1, sizeof(*r->v)) < 0)
		return -ENOMEM;
	r->v[r->n++] = (struct gmt__range){ lo, hi };
	return 0;
}

/* The sorts below order elements by their first 8 bytes. */
_Static_assert(offsetof(struct gmt__range, lo) == 0, "a range's key is its first member");
_Static_assert(offsetof(struct gmt__leak_target, lo) == 0, "a target's key is its first member");

static uint64_t key_at(const unsigned char *v, size_t i, size_t size)
{
	uint64_t k;

	memcpy(&k, v + i * size, sizeof(k));
	return k;
}

/* Swaps elements i and j of `size` bytes, a multiple of 8. */
static void swap_at(unsigned char *v, size_t i, size_t j, size_t size)
{
	for (size_t b = 0; b < size; b += sizeof(uint64_t)) {
		uint64_t x, y;

		memcpy(&x, v + i * size + b, sizeof(x));
		memcpy(&y, v + j * size + b, sizeof(y));
		memcpy(v + i * size + b, &y, sizeof(y));
		memcpy(v + j * size + b, &x, sizeof(x));
	}
}

static void sift_down(unsigned char *v, size_t root, size_t n, size_t size)
{
	for (size_t child; (child = 2 * root + 1) < n; root = child) {
		if (child + 1 < n && key_at(v, child, size) < key_at(v, child + 1, size))
			child++;
		if (key_at(v, root, size) >= key_at(v, child, size))
			return;
		swap_at(v, root, child, size);
	}
}

/* Sorts v[0..n), elements of `size` bytes (a multiple of 8), in place by
 * their first 8 bytes, lo (a heapsort).
 * NOTE: not qsort: glibc's (2.36 here) sorts through a malloc'd buffer once
 * the array passes 1 KiB, and a heap that grows after /proc/self/maps was
 * read no longer matches it: heap_free_chunks gives up, and stale copies in
 * free chunks (that buffer's among them) are read as references. */
static void sort_by_lo(void *v, size_t n, size_t size)
{
	unsigned char *b = v;
	size_t k = 1;

	while (k < n && key_at(b, k - 1, size) <= key_at(b, k, size))
		k++;
	if (k >= n)
		return; /* in order already (the targets come in address order) */
	for (size_t i = n / 2; i-- > 0;)
		sift_down(b, i, n, size);
	for (size_t end = n; end-- > 1;) {
		swap_at(b, 0, end, size);
		sift_down(b, 0, end, size);
	}
}

/* Sorts and merges overlapping or touching ranges. */
static void ranges_normalise(struct ranges *r)
{
	size_t k = 0;

	if (r->n == 0)
		return;
	sort_by_lo(r->v, r->n, sizeof(*r->v));
	for (size_t i = 1; i < r->n; i++) {
		if (r->v[i].lo <= r->v[k].hi) {
			if (r->v[i].hi > r->v[k].hi)
				r->v[k].hi = r->v[i].hi;
		} else {
			r->v[++k] = r->v[i];
		}
	}
	r->n = k + 1;
}

/* ---- the modules' writable data ------------------------------------------------ */

/* What a module's writable data is to the scan: the program's globals, the
 * CUDA driver's or runtime's (where their bookkeeping is found from), or the
 * tracer's own (left out, and never walked from: what the tracer keeps that
 * holds the program's addresses, its caller names in `skip`). */
enum module_role { MOD_PROGRAM, MOD_DRIVER, MOD_OWN };

static enum module_role module_role_of(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base != NULL ? base + 1 : path;
	if (strncmp(base, "libcuda", 7) == 0 || strncmp(base, "libnvidia-", 10) == 0)
		return MOD_DRIVER;
	if (strncmp(base, "libgpumemtrace", 14) == 0)
		return MOD_OWN;
	return MOD_PROGRAM;
}

struct module_data {
	struct ranges *driver;      /* the driver's: where the walk starts */
	struct ranges *own;         /* the tracer's: never read */
	struct ranges *globals;     /* of every module */
	struct gmt__scan_stats *st; /* the driver's modules named */
};

static void module_named(struct gmt__scan_stats *st, const char *path)
{
	const char *base = strrchr(path, '/');

	base = base != NULL ? base + 1 : path;
	if (st->nmodules < GMT_SCAN_MODULES) {
		char *to = st->modules[st->nmodules];

		strncpy(to, base, GMT_SCAN_MODULE_NAME - 1);
		to[GMT_SCAN_MODULE_NAME - 1] = '\0';
	}
	st->nmodules++;
}

static int module_data_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct module_data *md = arg;
	const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
	enum module_role role = module_role_of(name);

	(void)size;
	if (role == MOD_DRIVER)
		module_named(md->st, name);
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo, hi;

		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W))
			continue;
		lo = info->dlpi_addr + ph->p_vaddr;
		hi = lo + ph->p_memsz;
		lo &= ~(uint64_t)7;
		if (ranges_add(md->globals, lo, hi) < 0 ||
		    (role == MOD_DRIVER && ranges_add(md->driver, lo, hi) < 0) ||
		    (role == MOD_OWN && ranges_add(md->own, lo, hi) < 0))
			return -1;
	}
	return 0;
}

/* ---- reading ranges of memory ------------------------------------------------- */

/* What is done with the words read: the scan looks for its targets in them,
 * the walk of the bookkeeping follows them. */
struct visit {
	void (*words)(void *ctx, const struct mapping *m, const uint64_t *w, size_t nw, uint64_t at);
	void *ctx;
	uint64_t bytes; /* read so far */
};

/* Reads [lo, hi) of mapping m, leaving out the sorted ranges ex. */
static void read_piece(struct reader *rd, const struct mapping *m, uint64_t lo, uint64_t hi,
		       const struct ranges *ex, uint64_t *buf, struct visit *v)
{
	size_t k = 0;

	lo = (lo + 7) & ~(uint64_t)7;
	while (k < ex->n && ex->v[k].hi <= lo)
		k++;
	while (lo < hi) {
		uint64_t end = hi;
		ssize_t got;

		if (k < ex->n && ex->v[k].lo <= lo) {
			lo = (ex->v[k++].hi + 7) & ~(uint64_t)7;
			continue;
		}
		if (k < ex->n && ex->v[k].lo < end)
			end = ex->v[k].lo & ~(uint64_t)7;
		if (end - lo > READ_BLOCK)
			end = lo + READ_BLOCK;
		if (end <= lo) {
			lo += 8;
			continue;
		}
		got = peek(rd, lo, buf, (size_t)(end - lo));
		if (got <= 0)
			return; /* gone, or not readable after all */
		v->words(v->ctx, m, buf, (size_t)got / 8, lo);
		v->bytes += (uint64_t)got & ~(uint64_t)7;
		if ((uint64_t)got < end - lo)
			return; /* the rest went away while we read */
		lo = end;
	}
}

/* Reads the resident pages of [lo, hi), inside mapping m: a page never
 * touched holds zeros, and a huge reservation (a sanitizer's shadow, a
 * runtime's arena) would take hours to read whole. NOTE: pages swapped out
 * are not read either. */
static void read_range(struct reader *rd, const struct mapping *m, uint64_t lo, uint64_t hi,
		       const struct ranges *ex, uint64_t *buf, unsigned char *vec, struct visit *v)
{
	uint64_t page = PAGE_BYTES, at = lo & ~(page - 1);

	while (at < hi) {
		uint64_t end = hi - at > RESIDENT_WINDOW ? at + RESIDENT_WINDOW : hi;
		size_t npages = (size_t)((end - at + page - 1) / page), i = 0;

		if (mincore((void *)(uintptr_t)at, (size_t)(end - at), vec) != 0) {
			/* not answered: read what is small enough to read */
			if (end - at <= RESIDENT_WINDOW / 16)
				read_piece(rd, m, at > lo ? at : lo, end, ex, buf, v);
			at = end;
			continue;
		}
		while (i < npages) {
			size_t j;

			while (i < npages && !(vec[i] & 1))
				i++;
			for (j = i; j < npages && (vec[j] & 1); j++)
				;
			if (j > i) {
				uint64_t a = at + i * page, b = at + j * page;

				read_piece(rd, m, a > lo ? a : lo, b < hi ? b : hi, ex, buf, v);
			}
			i = j;
		}
		at = end;
	}
}

/* ---- following the driver's pointers ------------------------------------------ */

/* An open-addressing set of addresses, in scratch memory. */
struct addrset {
	uint64_t *v;
	size_t cap, n;
};

static bool addrset_add(struct addrset *s, uint64_t a)
{
	size_t i;

	if (2 * (s->n + 1) > s->cap) {
		struct addrset bigger = { .cap = s->cap ? 2 * s->cap : 4096 };

		bigger.v = gmt__map(bigger.cap * sizeof(uint64_t));
		if (bigger.v == NULL)
			return false; /* treated as seen: the walk stops growing */
		for (size_t j = 0; j < s->cap; j++) {
			if (s->v[j] != 0) {
				for (i = (s->v[j] * 0x9e3779b97f4a7c15ull >> 20) & (bigger.cap - 1); bigger.v[i] != 0;
				     i = (i + 1) & (bigger.cap - 1))
					;
				bigger.v[i] = s->v[j];
				bigger.n++;
			}
		}
		scratch_free(s->v, s->cap, sizeof(uint64_t));
		*s = bigger;
	}
	for (i = (a * 0x9e3779b97f4a7c15ull >> 20) & (s->cap - 1); s->v[i] != 0; i = (i + 1) & (s->cap - 1)) {
		if (s->v[i] == a)
			return false;
	}
	s->v[i] = a;
	s->n++;
	return true;
}

struct follow {
	struct reader *rd;
	const struct asan *asan;
	const struct maps *maps;
	const struct ranges *skip;
	const struct ranges *globals; /* the modules' data: roots, never reached */
	struct ranges work;    /* found, still to read */
	struct addrset seen;   /* addresses tried as the start of a block */
	/* The words found so far, one bit per 8-byte word of each mapping the
	 * walk went into (maps->v[i]'s: cover[i], made on first use), so that
	 * no word is found, and read, twice. */
	uint64_t **cover;
};

static bool in_ranges(const struct ranges *r, uint64_t a)
{
	size_t lo = 0, hi = r->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r->v[mid].hi <= a)
			lo = mid + 1;
		else if (r->v[mid].lo > a)
			hi = mid;
		else
			return true;
	}
	return false;
}

static size_t cover_bytes(const struct mapping *m)
{
	return (size_t)(((m->hi - m->lo) / 8 + 63) / 64 * sizeof(uint64_t));
}

static bool covered(const struct follow *f, const struct mapping *m, uint64_t p)
{
	const uint64_t *bits = f->cover[m - f->maps->v];
	uint64_t i = (p - m->lo) / 8;

	return bits != NULL && (bits[i / 64] >> (i % 64) & 1);
}

/* [lo, hi) of mapping m is bookkeeping: what of it was not found before
 * is marked found and joins the work. */
static void claim(struct follow *f, const struct mapping *m, uint64_t lo, uint64_t hi)
{
	uint64_t **bits = &f->cover[m - f->maps->v];
	uint64_t i, end;

	if (*bits == NULL && (*bits = gmt__map(cover_bytes(m))) == NULL)
		return; /* not found: read by the scan, as the program's */
	hi = hi < m->hi ? (hi + 7) & ~(uint64_t)7 : m->hi;
	i = (lo - m->lo) / 8;
	end = (hi - m->lo) / 8;
	while (i < end) {
		uint64_t j;

		while (i < end && ((*bits)[i / 64] >> (i % 64) & 1))
			i++;
		for (j = i; j < end && !((*bits)[j / 64] >> (j % 64) & 1); j++)
			(*bits)[j / 64] |= 1ull << (j % 64);
		if (j > i && ranges_add(&f->work, m->lo + 8 * i, m->lo + 8 * j) < 0)
			return;
		i = j;
	}
}

/* If p is the start of a block malloc handed out, inside mapping m: its end.
 * NOTE: glibc's chunk layout on 64-bit: the size word 8 bytes before the
 * block (16-aligned, at least 32, flags in the low 3 bits), and the next
 * chunk's PREV_INUSE bit set while this one is in use; an mmapped chunk
 * starts its own mapping. Anything else is not taken for a block. */
static uint64_t chunk_end(struct follow *f, const struct mapping *m, uint64_t p)
{
	uint64_t size, next, prev;

	if (p % 16 != 0 || p < m->lo + 16 || !peek_word(f->rd, p - 8, &size))
		return 0;
	if (size & CHUNK_IS_MMAPPED) {
		size &= ~(uint64_t)CHUNK_FLAGS;
		if (!peek_word(f->rd, p - 16, &prev) || p - 16 - prev != m->lo || size < 32 ||
		    p - 16 + size > m->hi)
			return 0;
		return p - 16 + size;
	}
	size &= ~(uint64_t)CHUNK_FLAGS;
	if (size < 32 || size % 16 != 0 || size > m->hi - (p - 16))
		return 0;
	if (p - 16 + size + 16 <= m->hi) {
		if (!peek_word(f->rd, p - 16 + size + 8, &next) || !(next & CHUNK_PREV_INUSE))
			return 0;
		return p - 16 + size + 8; /* the user data runs into the next chunk's first word */
	}
	return p - 16 + size;
}

/* A word of bookkeeping: if it points at a block or a mapping's start, that
 * memory is bookkeeping too. */
static void follow_word(struct follow *f, uint64_t w)
{
	const struct mapping *m;
	uint64_t p = w & ~(uint64_t)7, end; /* tagged pointers: tsearch keeps a bit there */

	if (p < 4096 || (m = maps_find(f->maps, p)) == NULL || !m->readable || !m->writable)
		return;
	/* NOTE: a mapping the scan does not read (over 64 GiB) holds no
	 * reference to hide, and its bitmap would not be small. */
	if ((m->type != MT_HEAP && m->type != MT_ANON) || m->hi - m->lo > HUGE_MAPPING)
		return;
	/* NOTE: a module's data (its .bss is an anonymous mapping) is where the
	 * program's roots live, never bookkeeping reached from the driver: a
	 * number that equals the start of its mapping (the end of a module's
	 * file mapping, which is where .bss starts) must not take the program's
	 * globals out of the scan. */
	if (in_ranges(f->skip, p) || in_ranges(f->globals, p))
		return;
	/* Inside what was found already, or tried before: nothing new starts
	 * here (a block holds no other block). */
	if (covered(f, m, p) || !addrset_add(&f->seen, p))
		return;
	if (f->asan->locate != NULL) {
		void *start = NULL;
		size_t size = 0;
		const char *what = f->asan->locate((void *)(uintptr_t)p, NULL, 0, &start, &size);

		if (what != NULL && strcmp(what, "heap") == 0) {
			/* a block of its heap, or inside one: never a whole mapping */
			if ((uintptr_t)start == p)
				claim(f, m, p, p + size);
			return;
		}
		end = 0;
	} else {
		end = chunk_end(f, m, p);
	}
	if (end == 0 && p == m->lo && m->type == MT_ANON)
		end = m->hi;
	if (end != 0)
		claim(f, m, p, end);
}

static void follow_words(void *ctx, const struct mapping *m, const uint64_t *w, size_t nw, uint64_t at)
{
	(void)m, (void)at;
	for (size_t i = 0; i < nw; i++)
		follow_word(ctx, w[i]);
}

/* Reads the words of [lo, hi) through the page cache, leaving out what the
 * scan never reads and a page that cannot be read. */
static void follow_paged(struct follow *f, uint64_t lo, uint64_t hi, struct visit *v)
{
	for (uint64_t a = (lo + 7) & ~(uint64_t)7; a + 8 <= hi; a += 8) {
		uint64_t w;

		if (in_ranges(f->skip, a))
			continue;
		if (!peek_word(f->rd, a, &w)) {
			a = (a | (PAGE_BYTES - 1)) + 1 - 8; /* on to the next page */
			continue;
		}
		follow_word(f, w);
		v->bytes += 8;
	}
}

/* Reads the work, and the work it finds, up to FOLLOW_LIMIT bytes: a small
 * range (a malloc block) through the page cache, as its neighbours are
 * likely found too; a larger one (a module's data, a mapping) in blocks,
 * its resident pages only, through the mappings it spans (a module's data:
 * its file's pages, then .bss). Returns the bytes read. */
static uint64_t follow_all(struct follow *f, uint64_t *buf, unsigned char *vec)
{
	struct visit v = { follow_words, f, 0 };

	while (f->work.n > 0 && v.bytes < FOLLOW_LIMIT) {
		struct gmt__range r = f->work.v[--f->work.n];

		/* NOTE: a system call or two per block found (a mapping's
		 * residency, the read) cost more than the walk itself where a
		 * driver keeps a record of each of 10,000 allocations. */
		if (r.hi - r.lo < FOLLOW_PAGED) {
			follow_paged(f, r.lo, r.hi, &v);
			continue;
		}
		for (size_t i = maps_from(f->maps, r.lo); i < f->maps->n && f->maps->v[i].lo < r.hi; i++) {
			const struct mapping *m = &f->maps->v[i];

			if (m->readable)
				read_range(f->rd, m, r.lo > m->lo ? r.lo : m->lo, r.hi < m->hi ? r.hi : m->hi,
					   f->skip, buf, vec, &v);
		}
	}
	return v.bytes;
}

/* Adds what was found in mapping m (the runs of its bitmap, in address
 * order) to ex. Returns their bytes. */
static uint64_t found_ranges(const uint64_t *bits, const struct mapping *m, struct ranges *ex)
{
	uint64_t words = (m->hi - m->lo) / 8, i = 0, bytes = 0;

	while (i < words) {
		uint64_t j = i;

		if (i % 64 == 0 && bits[i / 64] == 0) {
			i += 64;
			continue;
		}
		while (j < words && (bits[j / 64] >> (j % 64) & 1))
			j++;
		if (j == i) {
			i++;
			continue;
		}
		if (ranges_add(ex, m->lo + 8 * i, m->lo + 8 * j) < 0)
			break;
		bytes += 8 * (j - i);
		i = j;
	}
	return bytes;
}

/* ---- free memory in the heap --------------------------------------------------- */

/* Adds the free chunks of glibc's main heap (the [heap] mapping) to ex: what
 * they hold are stale copies (a freed buffer), not references. Walks the
 * chunks from the start of the mapping by their size words; unless the walk
 * ends exactly at the mapping's end, the layout is not glibc's as expected
 * and nothing is added. NOTE: chunks in the per-thread caches and fast bins
 * look in use and are read; so are other arenas' heaps. */
static int heap_free_chunks(struct reader *rd, const struct mapping *m, struct ranges *ex)
{
	size_t first = ex->n;
	uint64_t c = m->lo, size, next_size;

	while (c + 16 <= m->hi) {
		if (!peek_word(rd, c + 8, &size))
			break;
		size &= ~(uint64_t)CHUNK_FLAGS;
		if (size < 32 || size % 16 != 0 || size > m->hi - c)
			break;
		if (c + size == m->hi) { /* the top chunk: free */
			if (ranges_add(ex, c + 16, m->hi) < 0)
				break;
			return 0;
		}
		if (c + size + 16 > m->hi || !peek_word(rd, c + size + 8, &next_size))
			break;
		if (!(next_size & CHUNK_PREV_INUSE) && ranges_add(ex, c + 16, c + size) < 0)
			break;
		c += size;
	}
	ex->n = first; /* not the layout expected: read it all */
	return -1;
}

/* ---- the scan -------------------------------------------------------------------- */

struct scan {
	const struct asan *asan;
	const struct gmt__leak_target *t;
	size_t n;
	uint64_t min, max;
	struct gmt__leak_ref *ref;
	const struct ranges *globals;
};

static enum gmt__ref_region region_of(const struct scan *s, const struct mapping *m, uint64_t at)
{
	if (in_ranges(s->globals, at))
		return GMT_REF_GLOBAL;
	if (s->asan->locate != NULL) {
		void *start = NULL;
		size_t size = 0;
		const char *what = s->asan->locate((void *)(uintptr_t)at, NULL, 0, &start, &size);

		if (what != NULL && strcmp(what, "heap") == 0)
			return GMT_REF_HEAP;
	}
	switch (m->type) {
	case MT_HEAP:
		return GMT_REF_HEAP;
	case MT_STACK:
		return GMT_REF_STACK;
	default:
		return GMT_REF_MAPPING;
	}
}

static void scan_words(void *ctx, const struct mapping *m, const uint64_t *w, size_t nw, uint64_t at)
{
	const struct scan *s = ctx;

	for (size_t i = 0; i < nw; i++) {
		uint64_t v = w[i];
		size_t lo = 0, hi = s->n;

		if (v < s->min || v >= s->max)
			continue;
		/* the last target starting at or below v */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;

			if (s->t[mid].lo <= v)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo == 0 || v >= s->t[lo - 1].hi)
			continue;
		if (s->asan->poisoned != NULL && s->asan->poisoned((void *)(uintptr_t)(at + 8 * i)))
			continue; /* freed (quarantined) or a redzone: stale */
		if (s->ref[s->t[lo - 1].item].at == 0) {
			s->ref[s->t[lo - 1].item].at = at + 8 * i;
			s->ref[s->t[lo - 1].item].region = region_of(s, m, at + 8 * i);
		}
	}
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int gmt__leak_scan(struct gmt__leak_target *t, size_t n, struct gmt__leak_ref *ref,
		   const struct gmt__range *skip, size_t nskip, uintptr_t stack_from,
		   struct gmt__scan_stats *st)
{
	struct reader rd;
	struct maps maps = { 0 };
	struct ranges ex = { 0 }, globals = { 0 }, driver = { 0 }, own = { 0 };
	struct module_data md = { &driver, &own, &globals, st };
	struct follow f = { 0 };
	struct asan asan;
	struct scan s = { .asan = &asan, .t = t, .n = n, .ref = ref, .globals = &globals, .min = UINT64_MAX };
	struct visit v = { scan_words, &s, 0 };
	struct timespec t0;
	uint64_t *buf = NULL;
	unsigned char *vec = NULL;
	int r;

	memset(st, 0, sizeof(*st));
	if (n == 0) {
		st->done = true; /* nothing live: nothing to look for */
		return 0;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	asan_find(&asan);
	r = reader_open(&rd);
	if (r < 0) {
		st->why = r == -EPERM ? "this process may not read its own memory (process_vm_readv and /proc/self/mem refused)"
				      : "out of memory";
		goto out;
	}
	r = maps_read(&maps);
	if (r < 0) {
		st->why = "cannot read /proc/self/maps";
		goto out;
	}
	buf = gmt__map(READ_BLOCK);
	vec = gmt__map(RESIDENT_WINDOW / PAGE_BYTES);
	f.cover = gmt__map(maps.n * sizeof(*f.cover));
	if (buf == NULL || vec == NULL || f.cover == NULL || dl_iterate_phdr(module_data_one, &md) != 0) {
		r = -ENOMEM;
		st->why = "out of memory";
		goto out;
	}
	/* What is never read: the caller's ranges, the targets themselves, the
	 * tracer's own data. */
	for (size_t i = 0; i < nskip; i++)
		r |= ranges_add(&ex, skip[i].lo, skip[i].hi);
	for (size_t i = 0; i < own.n; i++)
		r |= ranges_add(&ex, own.v[i].lo, own.v[i].hi);
	r |= ranges_add(&ex, (uintptr_t)t, (uintptr_t)(t + n));
	/* and the scan's copies of what it reads */
	r |= ranges_add(&ex, (uintptr_t)buf, (uintptr_t)buf + READ_BLOCK);
	r |= ranges_add(&ex, (uintptr_t)rd.pages, (uintptr_t)rd.pages + (size_t)PAGE_SLOTS * PAGE_BYTES);
	if (r < 0) {
		st->why = "out of memory";
		goto out;
	}
	ranges_normalise(&ex);
	ranges_normalise(&globals);

	/* The driver's and runtime's bookkeeping, followed from their globals. */
	f = (struct follow){ .rd = &rd, .asan = &asan, .maps = &maps, .skip = &ex, .globals = &globals,
			     .cover = f.cover };
	for (size_t i = 0; i < driver.n; i++) {
		if (ranges_add(&f.work, driver.v[i].lo, driver.v[i].hi) < 0)
			break;
	}
	st->walked = follow_all(&f, buf, vec);
	/* What was found, left out of the scan: the driver's data (no block
	 * found lies inside a module's data) and each word found, once. */
	for (size_t i = 0; i < driver.n; i++) {
		st->excluded += driver.v[i].hi - driver.v[i].lo;
		(void)ranges_add(&ex, driver.v[i].lo, driver.v[i].hi);
	}
	for (size_t i = 0; i < maps.n; i++) {
		if (f.cover[i] != NULL)
			st->excluded += found_ranges(f.cover[i], &maps.v[i], &ex);
	}
	for (size_t i = 0; i < maps.n; i++) {
		if (maps.v[i].type == MT_HEAP && maps.v[i].readable)
			(void)heap_free_chunks(&rd, &maps.v[i], &ex);
	}
	ranges_normalise(&ex);

	sort_by_lo(t, n, sizeof(*t));
	for (size_t i = 0; i < n; i++) {
		if (t[i].lo < s.min)
			s.min = t[i].lo;
		if (t[i].hi > s.max)
			s.max = t[i].hi;
	}
	for (size_t i = 0; i < maps.n && n > 0; i++) {
		const struct mapping *m = &maps.v[i];
		uint64_t lo = m->lo;

		if (!m->readable || !m->writable || m->type == MT_DEVICE || m->type == MT_OTHER ||
		    m->hi - m->lo > HUGE_MAPPING)
			continue;
		/* The calling thread's stack: only the frames of its callers. */
		if (stack_from >= m->lo && stack_from < m->hi)
			lo = stack_from & ~(uint64_t)7;
		st->mappings++;
		read_range(&rd, m, lo, m->hi, &ex, buf, vec, &v);
	}
	st->bytes = v.bytes;
	st->done = true;
	r = 0;
out:
	st->seconds = seconds_since(&t0);
	scratch_free(buf, buf != NULL ? READ_BLOCK : 0, 1);
	scratch_free(vec, vec != NULL ? RESIDENT_WINDOW / PAGE_BYTES : 0, 1);
	if (f.cover != NULL) {
		for (size_t i = 0; i < maps.n; i++)
			scratch_free(f.cover[i], f.cover[i] != NULL ? cover_bytes(&maps.v[i]) : 0, 1);
		scratch_free(f.cover, maps.n, sizeof(*f.cover));
	}
	scratch_free(maps.v, maps.cap, sizeof(*maps.v));
	scratch_free(ex.v, ex.cap, sizeof(*ex.v));
	scratch_free(globals.v, globals.cap, sizeof(*globals.v));
	scratch_free(driver.v, driver.cap, sizeof(*driver.v));
	scratch_free(own.v, own.cap, sizeof(*own.v));
	scratch_free(f.work.v, f.work.cap, sizeof(*f.work.v));
	scratch_free(f.seen.v, f.seen.cap, sizeof(uint64_t));
	if (rd.page_addr != NULL || rd.pages != NULL || rd.mem_fd >= 0)
		reader_close(&rd);
	return r;
}

const char *gmt__ref_region_name(enum gmt__ref_region r)
{
	switch (r) {
	case GMT_REF_GLOBAL:
		return "global";
	case GMT_REF_HEAP:
		return "heap";
	case GMT_REF_STACK:
		return "stack";
	case GMT_REF_MAPPING:
		return "mapping";
	default:
		return "none";
	}
}
