/* The native stack walk of the hot path: per code address, the unwinding rule
 * read once from the module's .eh_frame (through libdw) and kept in a table;
 * then a few loads per frame. What the table cannot describe, libunwind walks
 * (stacks.c). */
#ifndef GMT_UNWIND_H
#define GMT_UNWIND_H

#include <stdint.h>

/* Frames one walk gives at most; more asked for are not. */
#define GMT_UNWIND_MAX 320

/* Walks the calling thread into ips[0..max), innermost first: ips[0] is in the
 * caller of this function, every address a return address, as libunwind's
 * unw_backtrace gives them. Returns the number stored (0 when unwinding
 * fails). Where gmt__unwind_fast cannot, libunwind walks, and the addresses
 * without a rule are queued for gmt__unwind_learn. Thread-safe; calls no
 * malloc; leaves errno alone. */
int gmt__unwind_walk(uintptr_t *ips, int max);

/* The walk by the learnt rules alone, as gmt__unwind_walk (ips[0] in this
 * function's caller). Returns the number stored, or a negative errno when it
 * cannot be trusted to equal libunwind's: -ENOENT (an address whose rule is
 * not learnt yet: it is queued), -ENOTSUP (not x86-64 Linux; a frame whose
 * rule is not "CFA = rsp or rbp + offset, return address at CFA - 8": signal
 * frames, DWARF expressions, code without CFI such as JIT code; a stack the
 * thread's own bounds do not hold), -EFAULT (a rule pointed outside the stack:
 * the walk stops before reading there). Frames outside the first one found in
 * the state the thread's last walk saw it in are taken from that walk, checked
 * word by word (unwind.c, the memo). Lock-free, calls no malloc (the thread's
 * first walk maps its memo). */
int gmt__unwind_fast(uintptr_t *ips, int max);

/* Queues, for gmt__unwind_learn, those of ips[0..n) (return addresses, as
 * the walk gives them) with no rule yet: gmt__unwind_walk does it with
 * libunwind's walk after the rules lacked one, so that one learning round
 * covers the whole stack. Lock-free; the queue is bounded and lossy (an address lost is met,
 * and queued, again). */
void gmt__unwind_note(const uintptr_t *ips, int n);

/* Reads the rules of the queued addresses from their modules' CFI (libdw:
 * loaded, and the process's modules read, on the first call) into the table.
 * Returns how many were added. For one thread (the consumer), never a hook:
 * it takes a lock, allocates, opens files. Leaves errno alone. */
int gmt__unwind_learn(void);

/* Calls wake (async-signal-safe, never blocks) from a walk that queues the
 * first address since the learner's last round. Set once, before any walk. */
void gmt__unwind_set_waker(void (*wake)(void));

/* In the child after fork(): the learner may have held its lock. */
void gmt__unwind_after_fork(void);

/* The calling thread is exiting: frees its memo of the last walk (each thread
 * keeps one, 24 KiB, made by its first walk). A later walk makes another. */
void gmt__unwind_thread_exit(void);

/* Counters since start: fast walks that gave up (gmt__unwind_walk then asks
 * libunwind), and code addresses whose rule is known. Statistics only. */
struct gmt__unwind_stats {
	uint64_t given_up, rules;
};
void gmt__unwind_stats(struct gmt__unwind_stats *out);

#endif /* GMT_UNWIND_H */
