/* Native stacks: capture of raw return addresses with libunwind on the hot path,
 * and interning, so that equal stacks share one id and one copy. Symbolisation
 * happens at dump time, never here (docs/internals.md, "Recording"). */
#ifndef GMT_STACKS_H
#define GMT_STACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GMT_STACK_MAX_DEPTH 256
/* Region tags one stack may carry (tags.h). */
#define GMT_STACK_MAX_TAGS 16
/* Words one interned stack may hold: native return addresses, then as many
 * Python frames (pystack.h), then the region tags open on the thread. */
#define GMT_STACK_MAX_FRAMES (2 * GMT_STACK_MAX_DEPTH + GMT_STACK_MAX_TAGS)

/* The top two bits of a word tell its kind: 0x a native return address (no
 * user-space address on x86-64 or AArch64 has the top bit), 10 a Python
 * frame, 11 a region tag. */
#define GMT_WORD_PYTHON ((uintptr_t)2 << 62)
#define GMT_WORD_TAG ((uintptr_t)3 << 62)

static inline bool gmt__word_is_native(uintptr_t word)
{
	return word >> 63 == 0;
}

static inline bool gmt__word_is_python(uintptr_t word)
{
	return word >> 62 == 2;
}

static inline bool gmt__word_is_tag(uintptr_t word)
{
	return word >> 62 == 3;
}

/* Warm up the unwinder (its caches, the first-use allocations of libunwind) so
 * that later captures do not allocate. Call once at initialisation, outside any
 * hook. Returns 0 or a negative errno. */
int gmt__stack_init(void);

/* Unwinds the calling thread into ips[0..max), innermost first, with no copy:
 * raw return addresses, the innermost of them the caller's own frames (and
 * maybe this function's). For callers that drop their own frames themselves
 * (record/record.c: by address). Returns the number stored (0 when unwinding fails);
 * `max` is capped at GMT_STACK_MAX_DEPTH. */
int gmt__stack_walk(uintptr_t *ips, int max);

/* Captures up to `max` return addresses of the calling thread into ips[],
 * skipping the innermost `skip` frames (the tracer's own). Raw addresses, as the
 * unwinder gives them. Returns the number captured (0 when unwinding fails).
 * gmt__stack_capture's own frame is never included: with skip 0, ips[0] is the
 * return address into its caller. `max` is capped at GMT_STACK_MAX_DEPTH and
 * `skip` at 32. */
int gmt__stack_capture(uintptr_t *ips, int max, int skip);

/* The id of the stack ips[0..n) (n at most GMT_STACK_MAX_FRAMES; words
 * beyond are left out): equal stacks get equal ids. Thread-safe;
 * looking up a stack seen before takes no lock and allocates nothing. Returns
 * 0 for n == 0 and when the stack cannot be stored (memory). */
uint32_t gmt__stack_intern(const uintptr_t *ips, int n);

/* The same for a stack captured in module epoch `epoch` (modules.h): equal
 * words of different epochs are different stacks, since an address may lie
 * in another module after an unload. gmt__stack_intern is epoch 0. */
uint32_t gmt__stack_intern_at(const uintptr_t *ips, int n, uint32_t epoch);

/* The module epoch stack `id` was captured in (0 for an unknown id). */
uint32_t gmt__stack_epoch(uint32_t id);

/* The frames of stack `id` (valid for the life of the process), or NULL for an
 * unknown id; *n gets the depth. Safe from any thread for ids already returned
 * by gmt__stack_intern. */
const uintptr_t *gmt__stack_get(uint32_t id, int *n);

/* Number of distinct stacks, and bytes of memory they take. */
uint32_t gmt__stack_count(void);

/* The frames of a stack of depth words (gmt__stack_get): its region tags,
 * stored last, left out. 0 for NULL. */
int gmt__stack_frames(const uintptr_t *ips, int depth);
size_t gmt__stack_bytes(void);

/* In the child after fork(): another thread may have held the interning lock.
 * Interned stacks and their ids stay valid. */
void gmt__stack_after_fork(void);

#endif /* GMT_STACKS_H */
