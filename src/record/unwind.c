/* The native stack walk (unwind.h): on x86-64, each code address's unwinding
 * rule, read by the consumer thread from its module's .eh_frame through libdw
 * into a lock-free table, then a loop of a few loads per frame; libunwind's
 * fast path spends about 80 instructions a frame on the same work. */
#define _GNU_SOURCE
#include "record/unwind.h"

#include <errno.h>
#include <libunwind.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

/* Statistics only. NOTE: no counter of walks: one shared word written by
 * every capture on every thread would bounce between their caches. */
static _Atomic uint64_t n_given_up, n_rules;

void gmt__unwind_stats(struct gmt__unwind_stats *out)
{
	out->given_up = atomic_load_explicit(&n_given_up, memory_order_relaxed);
	out->rules = atomic_load_explicit(&n_rules, memory_order_relaxed);
}

#if defined(__x86_64__) && defined(__linux__)

#include "util/dwlib.h"
#include "util/map.h"

#include <dwarf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Memory ordering at a glance (each pair is named at both of its halves):
 *   R1 insert's release of a slot's pc     -> A1 lookup's acquire: the slot's rule
 *   R2 grow's release of the table pointer -> A2 walk's acquire:   the new table
 * The table is written under `lock`, by the thread learning rules only; the
 * queue of addresses to learn is relaxed throughout (see `pending`). */

/* --- rules -------------------------------------------------------------------- */

/* The x86-64 DWARF register numbers the rules use. */
enum { DW_RBP = 6, DW_RSP = 7, DW_RA = 16 };

enum {
	RULE_WALK = 1,    /* CFA = rsp or rbp + cfa_off; return address at CFA - 8 */
	RULE_LAST = 2,    /* the outermost frame: the return address is undefined */
	RULE_GIVE_UP = 3, /* anything else: libunwind walks */
};

#define RULE_CFA_RBP 1u   /* CFA from rbp, not rsp */
#define RULE_RBP_SAVED 2u /* the caller's rbp at CFA + rbp_off (else unchanged) */

/* What libunwind's fast path keeps per address (its unw_tdep_frame_t). */
struct rule {
	int32_t cfa_off;
	int16_t rbp_off;
	uint8_t kind;
	uint8_t flags;
};

/* A rule as the table holds it: one word, never 0 (kind is), read apart with
 * shifts in registers on the walk. */
static uint64_t rule_word(struct rule r)
{
	return (uint64_t)(uint32_t)r.cfa_off | (uint64_t)(uint16_t)r.rbp_off << 32 | (uint64_t)r.kind << 48 |
	       (uint64_t)r.flags << 56;
}

#define RULE_KIND(w) ((unsigned)((w) >> 48) & 0xffu)
#define RULE_FLAGS(w) ((unsigned)((w) >> 56))
#define RULE_CFA_OFF(w) ((uintptr_t)(intptr_t)(int32_t)(uint32_t)(w))
#define RULE_RBP_OFF(w) ((uintptr_t)(intptr_t)(int16_t)(uint16_t)((w) >> 32))

/* --- the table: pc -> rule, open addressing, never shrinks -------------------- */

/* A slot is free while pc is 0. A slot once filled never changes. */
struct slot {
	_Atomic uintptr_t pc;
	_Atomic uint64_t rule;
};

/* NOTE: growth never frees the table it replaces (as stacks.c's set): a walk
 * may still be probing it; it misses only rules added since, and queues
 * their addresses again, which the learner then finds in the current table.
 * Tables double: the outgrown ones take less than the current one. */
struct table {
	unsigned bits;
	size_t map_bytes;
	struct slot slots[];
};

#define GMT_RULES_MIN_BITS 12 /* 4096 slots, 64 KiB */

static _Atomic(struct table *) cur;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t used; /* under lock: slots filled in cur */

/* Where pc's probe starts in a table of 2^(64 - shift) slots (also the
 * queue's slot, below). */
static inline size_t hash_slot(uintptr_t pc, unsigned shift)
{
	return (size_t)(((uint64_t)pc * 0x9e3779b97f4a7c15ull) >> shift);
}

/* The rule word of pc in t (shift = 64 - t->bits, mask = slots - 1), or 0. */
static inline uint64_t rule_of(const struct table *t, unsigned shift, size_t mask, uintptr_t pc)
{
	for (size_t i = hash_slot(pc, shift);; i = (i + 1) & mask) {
		/* A1: pairs with R1; the rule was stored before the pc. */
		uintptr_t at = atomic_load_explicit(&t->slots[i].pc, memory_order_acquire);

		if (at == pc)
			return atomic_load_explicit(&t->slots[i].rule, memory_order_relaxed);
		if (at == 0)
			return 0;
	}
}

/* Under lock: the free slot pc's probe in t ends at. */
static size_t free_slot(const struct table *t, uintptr_t pc)
{
	size_t mask = ((size_t)1 << t->bits) - 1, i = hash_slot(pc, 64 - t->bits);

	while (atomic_load_explicit(&t->slots[i].pc, memory_order_relaxed) != 0)
		i = (i + 1) & mask;
	return i;
}

static bool known(const struct table *t, uintptr_t pc)
{
	return t != NULL && rule_of(t, 64 - t->bits, ((size_t)1 << t->bits) - 1, pc) != 0;
}

static struct table *table_new(unsigned bits)
{
	size_t bytes = sizeof(struct table) + ((size_t)1 << bits) * sizeof(struct slot);
	struct table *t = gmt__map(bytes);

	if (t == NULL)
		return NULL;
	t->bits = bits;
	t->map_bytes = bytes;
	return t;
}

/* Under lock. Adds pc's rule to the current table (grown past half full);
 * false without memory for a bigger one (the rule is learnt again later). */
static bool insert(uintptr_t pc, struct rule r)
{
	struct table *t = atomic_load_explicit(&cur, memory_order_relaxed);
	size_t i;

	if (t == NULL || 2 * (used + 1) > ((size_t)1 << t->bits)) {
		struct table *n = table_new(t == NULL ? GMT_RULES_MIN_BITS : t->bits + 1);

		if (n == NULL)
			return false;
		if (t != NULL) {
			for (size_t j = 0; j < ((size_t)1 << t->bits); j++) {
				uintptr_t at = atomic_load_explicit(&t->slots[j].pc, memory_order_relaxed);
				size_t k;

				if (at == 0)
					continue;
				k = free_slot(n, at);
				atomic_store_explicit(&n->slots[k].rule,
						      atomic_load_explicit(&t->slots[j].rule, memory_order_relaxed),
						      memory_order_relaxed);
				atomic_store_explicit(&n->slots[k].pc, at, memory_order_relaxed);
			}
		}
		/* R2: pairs with A2; the copied slots are visible with the table. */
		atomic_store_explicit(&cur, n, memory_order_release);
		t = n;
	}
	i = free_slot(t, pc);
	atomic_store_explicit(&t->slots[i].rule, rule_word(r), memory_order_relaxed);
	/* R1: pairs with A1. */
	atomic_store_explicit(&t->slots[i].pc, pc, memory_order_release);
	used++;
	atomic_fetch_add_explicit(&n_rules, 1, memory_order_relaxed);
	return true;
}

/* --- reading a rule from the CFI ---------------------------------------------- */

/* Under lock: the process's modules as libdwfl knows them, and how many
 * objects the loader had added when they were last read (dl_iterate_phdr's
 * dlpi_adds): /proc/self/maps is read again only when that has moved. */
static const struct gmt__dw *dw;
static Dwfl *dwfl;
static unsigned long long reported_adds;
static bool dwfl_failed;

static int no_debuginfo(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr base, const char *file,
			const char *debuglink, GElf_Word crc, char **path)
{
	(void)mod, (void)user, (void)name, (void)base, (void)file, (void)debuglink, (void)crc, (void)path;
	return -1; /* .eh_frame is in the module itself: no separate debug file */
}

/* NOTE: libdwfl's dwfl_linux_proc_find_elf has libelf map each module's
 * whole file writable (MAP_PRIVATE, ELF_C_READ_MMAP_PRIVATE): a writable
 * mapping the leak scan would read through, file pages and all. Files are
 * mapped read-only here, with a descriptor not inherited across exec;
 * anything that does not open (a deleted file, the vdso) goes to libdwfl's
 * own callback (failing there, its addresses are walked by libunwind). Only
 * modules that hold code a walk went through get here: never a device's
 * mapping. */
static int find_elf(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr base, char **file_name, Elf **elfp)
{
	int fd = name[0] == '/' ? open(name, O_RDONLY | O_CLOEXEC) : -1;

	if (fd < 0)
		return dw->dwfl_linux_proc_find_elf(mod, user, name, base, file_name, elfp);
	*file_name = strdup(name);
	*elfp = *file_name != NULL ? dw->elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
	if (*elfp == NULL) {
		free(*file_name);
		*file_name = NULL;
		close(fd);
		return -1;
	}
	return fd; /* libdwfl's from now on, as the Elf */
}

static int first_adds(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(unsigned long long *)arg = info->dlpi_adds;
	return 1;
}

static unsigned long long loader_adds(void)
{
	unsigned long long adds = 0;

	dl_iterate_phdr(first_adds, &adds);
	return adds;
}

/* Under lock. Reads /proc/self/maps into dwfl (made on first use). */
static bool report(void)
{
	static const Dwfl_Callbacks callbacks = {
		.find_elf = find_elf,
		.find_debuginfo = no_debuginfo,
	};

	if (dwfl == NULL) {
		if (dwfl_failed)
			return false;
		dw = gmt__dw_load();
		if (dw == NULL) {
			dwfl_failed = true;
			return false;
		}
		dwfl = dw->dwfl_begin(&callbacks);
		if (dwfl == NULL) {
			dwfl_failed = true;
			return false;
		}
	}
	reported_adds = loader_adds();
	dw->dwfl_report_begin(dwfl);
	if (dw->dwfl_linux_proc_report(dwfl, getpid()) != 0) {
		dw->dwfl_report_end(dwfl, NULL, NULL);
		return false;
	}
	return dw->dwfl_report_end(dwfl, NULL, NULL) == 0;
}

/* An expression "the CFA + k" as libdw gives a register saved in the frame:
 * DW_OP_call_frame_cfa, then DW_OP_plus_uconst k unless k is 0. */
static bool cfa_plus(const Dwarf_Op *ops, size_t nops, int64_t *k)
{
	if (nops == 1 && ops[0].atom == DW_OP_call_frame_cfa) {
		*k = 0;
		return true;
	}
	if (nops == 2 && ops[0].atom == DW_OP_call_frame_cfa && ops[1].atom == DW_OP_plus_uconst) {
		*k = (int64_t)ops[1].number;
		return true;
	}
	return false;
}

/* Under lock. The rule for code address pc from its module's CFI; RULE_GIVE_UP
 * when there is none, or it is not one the walk follows. */
static struct rule read_rule(uintptr_t pc)
{
	struct rule r = {.kind = RULE_GIVE_UP};
	Dwfl_Module *mod = NULL;
	Dwarf_Frame *frame = NULL;
	Dwarf_Op mem[3], *ops;
	Dwarf_Addr bias, start, end;
	Dwarf_CFI *cfi;
	size_t nops;
	int64_t k;
	bool is_signal;

	if (dwfl != NULL)
		mod = dw->dwfl_addrmodule(dwfl, pc);
	/* A module loaded since the last report, or the first report. */
	if (mod == NULL && (dwfl == NULL || loader_adds() != reported_adds) && report())
		mod = dw->dwfl_addrmodule(dwfl, pc);
	if (mod == NULL)
		return r;
	cfi = dw->dwfl_module_eh_cfi(mod, &bias);
	if (cfi == NULL || dw->dwarf_cfi_addrframe(cfi, pc - bias, &frame) != 0)
		return r;
	if (dw->dwarf_frame_info(frame, &start, &end, &is_signal) != DW_RA || is_signal)
		goto out;
	/* The CFA: one DW_OP_bregx of rsp or rbp. */
	if (dw->dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 1 || ops[0].atom != DW_OP_bregx ||
	    (ops[0].number != DW_RSP && ops[0].number != DW_RBP) || (int64_t)ops[0].number2 != (int32_t)ops[0].number2)
		goto out;
	r.cfa_off = (int32_t)ops[0].number2;
	r.flags = ops[0].number == DW_RBP ? RULE_CFA_RBP : 0;
	/* The return address: at CFA - 8, or undefined in the outermost frame. */
	if (dw->dwarf_frame_register(frame, DW_RA, mem, &ops, &nops) != 0)
		goto out;
	if (nops == 0 && ops == mem) {
		r.kind = RULE_LAST;
		goto out;
	}
	if (!cfa_plus(ops, nops, &k) || k != -8)
		goto out;
	/* The caller's rsp: the CFA (DW_OP_call_frame_cfa, DW_OP_stack_value). */
	if (dw->dwarf_frame_register(frame, DW_RSP, mem, &ops, &nops) != 0 || nops != 2 ||
	    ops[0].atom != DW_OP_call_frame_cfa || ops[1].atom != DW_OP_stack_value)
		goto out;
	/* The caller's rbp: unchanged (same value), or saved at CFA + k. */
	if (dw->dwarf_frame_register(frame, DW_RBP, mem, &ops, &nops) != 0)
		goto out;
	if (nops != 0 || ops != NULL) {
		if (!cfa_plus(ops, nops, &k) || k != (int16_t)k)
			goto out;
		r.flags |= RULE_RBP_SAVED;
		r.rbp_off = (int16_t)k;
	}
	r.kind = RULE_WALK;
out:
	free(frame);
	if (r.kind == RULE_GIVE_UP)
		r.cfa_off = r.rbp_off = r.flags = 0;
	return r;
}

/* --- the queue of addresses to learn ------------------------------------------ */

/* Addresses a walk met without a rule, for the consumer to learn. Lossy: an
 * address overwritten by another before the consumer took it is met again by
 * the next walk through it, and queued again. Relaxed: an address is one
 * word, and a late one is taken on a later round. */
#define GMT_PENDING_BITS 10
#define GMT_PENDING (1u << GMT_PENDING_BITS)
static _Atomic uintptr_t pending[GMT_PENDING];
static _Atomic bool pending_any;
static void (*waker)(void); /* set before any walk (gmt__unwind_set_waker) */

static void queue(uintptr_t pc)
{
	size_t i = hash_slot(pc, 64 - GMT_PENDING_BITS);

	if (atomic_load_explicit(&pending[i], memory_order_relaxed) != pc)
		atomic_store_explicit(&pending[i], pc, memory_order_relaxed);
	/* The first address since the learner's last round wakes it: until it
	 * learns, every walk through the address is libunwind's. */
	if (!atomic_load_explicit(&pending_any, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&pending_any, true, memory_order_relaxed) && waker != NULL)
		waker();
}

void gmt__unwind_set_waker(void (*wake)(void))
{
	waker = wake;
}

void gmt__unwind_note(const uintptr_t *ips, int n)
{
	struct table *t = atomic_load_explicit(&cur, memory_order_acquire); /* A2 */

	for (int i = 0; i < n; i++)
		if (ips[i] > 0 && !known(t, ips[i] - 1))
			queue(ips[i] - 1);
}

/* Set while the learner is inside libdw: a child forked then cannot trust
 * the Dwfl (gmt__unwind_after_fork). Under lock. */
static bool learning;

int gmt__unwind_learn(void)
{
	int saved = errno, added = 0;

	if (!atomic_load_explicit(&pending_any, memory_order_relaxed))
		return 0;
	pthread_mutex_lock(&lock);
	atomic_store_explicit(&pending_any, false, memory_order_relaxed);
	for (size_t i = 0; i < GMT_PENDING; i++) {
		uintptr_t pc = atomic_exchange_explicit(&pending[i], 0, memory_order_relaxed);
		struct rule r;

		if (pc == 0 || known(atomic_load_explicit(&cur, memory_order_relaxed), pc))
			continue;
		learning = true;
		r = read_rule(pc);
		learning = false;
		if (insert(pc, r))
			added++;
	}
	pthread_mutex_unlock(&lock);
	errno = saved;
	return added;
}

void gmt__unwind_after_fork(void)
{
	/* The learner (the consumer) does not exist in the child. Had it been
	 * inside libdw, its Dwfl may be half changed: start a new one (the old
	 * one is left, not freed). The table is whole at every step of an
	 * insert. */
	pthread_mutex_init(&lock, NULL);
	if (learning) {
		dwfl = NULL;
		learning = false;
	}
}

/* --- the walk ------------------------------------------------------------------ */

/* NOTE: ld.so's, set to the stack pointer the process started with; the
 * outermost frame of the main thread (_start's caller's) lies below it. */
extern void *__libc_stack_end;

/* The top of the stack sp lies in, or 0 when that is not known. Other threads
 * than the main one run below their thread descriptor: glibc places it (and
 * the static TLS) at the top of the thread's stack block, its own or the
 * program's (x86-64 keeps the TCB above the thread pointer). The main
 * thread's descriptor is elsewhere; its stack ends at __libc_stack_end. Found
 * without a call, a lock or malloc on every walk. */
static uintptr_t stack_top(uintptr_t sp)
{
	const uintptr_t span = (uintptr_t)1 << 32; /* no stack is larger */
	uintptr_t self = (uintptr_t)pthread_self(), main_top = (uintptr_t)__libc_stack_end;

	if (sp < self && self - sp < span)
		return self;
	if (sp < main_top && main_top - sp < span)
		return main_top;
	return 0;
}

static uintptr_t word_at(uintptr_t addr)
{
	uintptr_t w;

	memcpy(&w, (const void *)addr, sizeof(w));
	return w;
}

/* --- the memo of the last walk --------------------------------------------------- */

/* Consecutive walks of a thread share most frames: those outside the loop
 * that allocates. Each thread keeps its last walk, and a walk that reaches a
 * frame in the same state as one there (same CFA, return address and rbp)
 * takes the frames outside it from the memo, once it has checked that every
 * word the last walk read there (each return address, each saved rbp) still
 * holds what it read. That is exact: the walk from a state is a function of
 * the state, the rules (which never change for an address) and the words it
 * reads, and those are the same, so it would read the same addresses again.
 * The check costs a few instructions a frame; walking, about thirty. */
struct memo_frame {
	uintptr_t cfa;   /* the frame's CFA: the caller's rsp */
	uintptr_t ra;    /* the return address, read at cfa - 8 */
	uintptr_t fp_at; /* where the caller's rbp was read; 0: rbp passed unchanged */
	uintptr_t fp;    /* the caller's rbp, ^ GMT_FP_MASK */
};

/* NOTE: rbp is a register like any other where a function keeps no frame
 * pointer: a caller's rbp may hold a device address, which the leak scan
 * (leaks.c) would then find in the memo and call referenced. Masked, the word
 * is no user-space address at all. */
#define GMT_FP_MASK ((uintptr_t)0xa5a5ull << 48)

#define GMT_MEMO_FRAMES GMT_UNWIND_MAX /* every frame a walk may give */

struct memo {
	uintptr_t hi;       /* the stack top the walk was checked against */
	int n;              /* frames in f */
	bool complete;      /* f[0] is the outermost frame (not a walk stopped at max) */
	volatile sig_atomic_t busy; /* a walk on this thread uses it (a signal handler's walk does not) */
	/* Outermost first: a frame keeps its index while walks change the frames
	 * inside it. */
	struct memo_frame f[GMT_MEMO_FRAMES];
	/* This walk's frames, innermost first, until they are placed in f. */
	struct memo_frame scratch[GMT_MEMO_FRAMES];
};

/* NOTE: mmap'd, not static TLS: 20 KiB a thread would not fit the surplus a
 * library loaded later than start-up gets; not malloc: the hot path calls no
 * malloc (tests/recording/test_stacks_nomalloc.c). */
static _Thread_local struct memo *memo_of_thread __attribute__((tls_model("initial-exec")));
static _Thread_local bool memo_failed __attribute__((tls_model("initial-exec")));

static struct memo *memo_get(void)
{
	struct memo *m = memo_of_thread;

	if (m == NULL && !memo_failed) {
		m = gmt__map(sizeof(*m));
		if (m == NULL) {
			memo_failed = true; /* walk without one */
			return NULL;
		}
		memo_of_thread = m;
	}
	return m;
}

void gmt__unwind_thread_exit(void)
{
	struct memo *m = memo_of_thread;

	memo_of_thread = NULL;
	if (m != NULL)
		munmap(m, sizeof(*m));
}

/* The `count` frames f[top - 1], f[top - 2], ... still hold what the memo
 * read: their addresses into out[0..count). Returns false when a word
 * changed (out then holds garbage, to be overwritten). Frames beyond count
 * are not checked: every reuse checks what it takes. noinline: a loop of its
 * own keeps its registers (about twelve instructions a frame). */
__attribute__((noinline, no_sanitize_address)) static bool reuse(const struct memo *m, int top, uintptr_t *out,
								    int count)
{
	const struct memo_frame *f = &m->f[top - 1];

	for (int i = 0; i < count; i++, f--) {
		uintptr_t ra = f->ra;

		if (word_at(f->cfa - 8) != ra || (f->fp_at != 0 && (word_at(f->fp_at) ^ GMT_FP_MASK) != f->fp))
			return false;
		out[i] = ra;
	}
	return true;
}

/* After a walk of n frames that took the frames outside scratch[at] from
 * f[top] (at, top = -1: none; else n counts the frames taken too, and only
 * scratch[0..at] is this walk's own): the memo becomes this walk.
 * scratch[at] replaces f[top], in the same state: where this walk read its
 * rbp is what a later check of it must read. */
static void memo_keep(struct memo *m, uintptr_t hi, int n, bool complete, int at, int top)
{
	if (top >= 0) {
		if (top + at + 1 > GMT_MEMO_FRAMES) {
			m->n = 0;
			return;
		}
		for (int i = 0; i <= at; i++)
			m->f[top + at - i] = m->scratch[i];
		m->n = top + at + 1;
		return;
	}
	for (int i = 0; i < n; i++)
		m->f[n - 1 - i] = m->scratch[i];
	m->n = n;
	m->hi = hi;
	m->complete = complete;
}

/* --- the walk ------------------------------------------------------------------ */

/* The walk from the function it is inlined into (the first frame: the
 * address, rsp and rbp there): ips[0] lies in that function's caller.
 * NOTE: no_sanitize_address: the loads read other functions' frames (return
 * addresses, saved rbp), as libunwind does from its own uninstrumented code;
 * each is first checked to lie in this thread's stack above the frame being
 * left, which the thread's own frames occupy. */
__attribute__((always_inline, no_sanitize_address)) static inline int fast_walk(uintptr_t *ips, int max)
{
	uintptr_t pc, sp, fp, hi;
	struct table *t;
	struct memo *m = NULL;
	unsigned shift;
	size_t mask;
	int n = 0, err = 0, top = -1, at = -1, hit = -1;
	bool complete = false, tried = false;

	/* Where this function is, and its rsp and rbp there: the first frame. */
	__asm__ volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2" : "=r"(pc), "=r"(sp), "=r"(fp));
	hi = stack_top(sp);
	/* A2: pairs with R2. */
	t = atomic_load_explicit(&cur, memory_order_acquire);
	if (hi == 0 || t == NULL) {
		err = hi == 0 ? -ENOTSUP : -ENOENT;
		if (t == NULL)
			queue(pc);
		goto out;
	}
	shift = 64 - t->bits;
	mask = ((size_t)1 << t->bits) - 1;
	m = memo_get();
	if (m != NULL) {
		if (m->busy) {
			m = NULL; /* a signal handler's walk, inside this thread's */
		} else {
			m->busy = 1;
			atomic_signal_fence(memory_order_seq_cst);
			if (m->hi == hi)
				top = m->n - 1;
		}
	}
	for (;;) {
		uint64_t w = rule_of(t, shift, mask, pc);
		uintptr_t cfa, ra, fp_at = 0;

		if (w == 0) {
			queue(pc);
			err = -ENOENT;
			goto out;
		}
		if (RULE_KIND(w) != RULE_WALK) {
			if (RULE_KIND(w) == RULE_LAST) {
				complete = true;
				break;
			}
			err = -ENOTSUP;
			goto out;
		}
		cfa = ((RULE_FLAGS(w) & RULE_CFA_RBP) ? fp : sp) + RULE_CFA_OFF(w);
		/* The return address at CFA - 8 and the frame left behind must lie
		 * in the stack: a caller's frame is above its callee's. */
		if (cfa - (sp + 8) > hi - (sp + 8)) {
			err = -EFAULT;
			goto out;
		}
		ra = word_at(cfa - 8);
		if (RULE_FLAGS(w) & RULE_RBP_SAVED) {
			fp_at = cfa + RULE_RBP_OFF(w);
			if (fp_at - sp > hi - 8 - sp) {
				err = -EFAULT;
				goto out;
			}
			fp = word_at(fp_at);
		}
		sp = cfa;
		/* As libunwind: an address this low is no code; the walk ends. */
		if (ra < 0x4000) {
			complete = true;
			break;
		}
		if (m != NULL)
			m->scratch[n] = (struct memo_frame){cfa, ra, fp_at, fp ^ GMT_FP_MASK};
		ips[n++] = ra;
		if (n == max)
			break;
		/* The memo: its innermost frame not inside this one; the same
		 * frame in the same state, once a walk. */
		if (top >= 0 && !tried) {
			while (top >= 0 && m->f[top].cfa < cfa)
				top--;
			if (top >= 0 && m->f[top].cfa == cfa) {
				tried = true;
				if (m->f[top].ra == ra && m->f[top].fp == (fp ^ GMT_FP_MASK) &&
				    (m->complete || n + top >= max)) {
					int count = top < max - n ? top : max - n;

					if (reuse(m, top, ips + n, count)) {
						at = n - 1;
						hit = top;
						n += count;
						break;
					}
				}
			}
		}
		/* The rule of the call instruction, which ends before ra: the
		 * return address of a call that does not return may be the
		 * next function's first. */
		pc = ra - 1;
	}
	if (m != NULL)
		memo_keep(m, hi, n, complete, at, hit);
out:
	if (m != NULL) {
		atomic_signal_fence(memory_order_seq_cst);
		m->busy = 0;
	}
	if (err < 0) {
		atomic_fetch_add_explicit(&n_given_up, 1, memory_order_relaxed);
		return err;
	}
	return n;
}

#else /* not x86-64 Linux: libunwind walks every stack */

static inline int fast_walk(uintptr_t *ips, int max)
{
	(void)ips;
	(void)max;
	atomic_fetch_add_explicit(&n_given_up, 1, memory_order_relaxed);
	return -ENOTSUP;
}

void gmt__unwind_note(const uintptr_t *ips, int n)
{
	(void)ips;
	(void)n;
}

int gmt__unwind_learn(void)
{
	return 0;
}

void gmt__unwind_after_fork(void)
{
}

void gmt__unwind_thread_exit(void)
{
}

void gmt__unwind_set_waker(void (*wake)(void))
{
	(void)wake;
}

#endif

/* --- the walk, and libunwind behind it ------------------------------------------- */

/* libunwind's walk, as the fast walk gives it: ips[0] in the caller of
 * gmt__unwind_walk (libunwind's first two addresses lie here and there).
 * Queues what needs a rule when `note`. noinline: the two frames dropped. */
__attribute__((noinline)) static int libunwind_walk(uintptr_t *ips, int max, bool note)
{
	void *buf[GMT_UNWIND_MAX + 2];
	int n = unw_backtrace(buf, max + 2) - 2;

	if (n <= 0)
		return 0;
	memcpy(ips, buf + 2, (size_t)n * sizeof(*ips));
	if (note)
		gmt__unwind_note(ips, n);
	return n;
}

__attribute__((noinline)) int gmt__unwind_walk(uintptr_t *ips, int max)
{
	int n;

	if (max <= 0)
		return 0;
	if (max > GMT_UNWIND_MAX)
		max = GMT_UNWIND_MAX;
	n = fast_walk(ips, max);
	if (n < 0)
		n = libunwind_walk(ips, max, n == -ENOENT);
	/* Not a tail call: libunwind_walk drops this frame. */
	__asm__ volatile("" ::: "memory");
	return n;
}

__attribute__((noinline)) int gmt__unwind_fast(uintptr_t *ips, int max)
{
	int n = max > 0 ? fast_walk(ips, max < GMT_UNWIND_MAX ? max : GMT_UNWIND_MAX) : 0;

	/* Not a tail call: ips[0] is this frame's caller's. */
	__asm__ volatile("" ::: "memory");
	return n;
}
