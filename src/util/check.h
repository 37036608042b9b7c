/* Debug assertions: the tracer's own invariants (the consumer's lock held
 * where its state is touched, a JSON record within the room it reserved, a
 * ring's counters in order). Compiled in with the Meson option
 * debug_checks (on in the sanitizer build, off by default): a failed one
 * prints one line naming the condition and where, then aborts — for tests,
 * never for a traced program in production, where they cost nothing. */
#ifndef GMT_CHECK_H
#define GMT_CHECK_H

#ifndef GMT_DEBUG_CHECKS
#define GMT_DEBUG_CHECKS 0
#endif

_Noreturn void gmt__check_failed(const char *cond, const char *file, int line);

#if GMT_DEBUG_CHECKS
#define GMT_CHECK(cond) ((cond) ? (void)0 : gmt__check_failed(#cond, __FILE__, __LINE__))
#else
#define GMT_CHECK(cond) ((void)sizeof(!(cond)))
#endif

#endif /* GMT_CHECK_H */
