/* Messages on stderr, one line each, prefixed "gpumemtrace: ". Silent unless
 * something is wrong, or GPUMEMTRACE_VERBOSE=1. Never changes errno; never
 * allocates; writes with write(2). */
#ifndef GMT_LOG_H
#define GMT_LOG_H

#include <stdbool.h>
#include <stddef.h>

/* A problem of the tracer itself or of its input (the program goes on).
 * Warnings are capped: after the 20th, one line says that further ones are
 * suppressed. */
void gmt__warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The same, but only the first time this call site is reached: pass a static
 * flag (`static bool once; gmt__warn_once(&once, ...)`). */
void gmt__warn_once(bool *once, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A line of a report the user asked for (the leak check's): printed always,
 * not counted against the warnings' cap. */
void gmt__report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Progress for GPUMEMTRACE_VERBOSE=1. */
void gmt__info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Turns gmt__info on or off (set from the options at initialisation). */
void gmt__log_set_verbose(bool on);

/* The length of the UTF-8 sequence at s (NUL-terminated) when it is one
 * printable character, else 0: not for control characters (C0, DEL, C1), the
 * line and paragraph separators, the bidirectional controls that can make a
 * line read otherwise than it is, and anything not well-formed (overlong,
 * surrogates, past U+10FFFF, cut short). What every one-line message lets
 * through of a name it did not make. */
size_t gmt__utf8_printable(const char *s);

/* Copies text into out (len bytes, its NUL included) as one line of a
 * message: printable ASCII and printable UTF-8 (gmt__utf8_printable) as they
 * are, every other byte (a newline, a terminal escape, a C1 control, a
 * bidirectional override, malformed UTF-8) as \xNN. What does not fit is
 * left out, never half a character or an escape, and the line ends in "..."
 * (so does it when `more`: the text was cut before). Returns the length
 * written. The one rule for every line the tracer and the command print of a
 * name they did not make. */
size_t gmt__log_escape(char *out, size_t len, const char *text, bool more);

/* For tests: send messages to `fd` instead of 2; returns the previous fd. */
int gmt__log_set_fd(int fd);

/* Messages go to the stderr the process started with, never to another
 * file the program opens at fd 2 later: its identity kept, and a private
 * descriptor of it (close-on-exec, high); nothing when fd 2 was closed. A
 * pipe, a socket or a terminal is written without ever waiting (a file
 * description of the tracer's own, non-blocking; send(MSG_DONTWAIT)).
 * Called once at the tracer's start; not after gmt__log_set_fd. */
void gmt__log_keep_stderr(void);

/* Lines that were not written because the stderr they go to was full (a
 * pipe, a socket or a terminal nobody reads: the tracer never waits for
 * it). The next line that finds room first says how many. */
unsigned long long gmt__log_dropped(void);

#endif /* GMT_LOG_H */
