/* The log (src/util/log.c): prefix, one whole line per message and per write even
 * from racing threads, truncation, errno untouched, the verbose switch, the
 * warning cap and warn_once. Messages go to a pipe through gmt__log_set_fd. */
#define _GNU_SOURCE
#include "util/log.h"

#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define PREFIX "gpumemtrace: "

static int pipe_rd;

/* Everything written to the pipe so far (NUL terminated, static buffer). */
static const char *drain(void)
{
	static char buf[1 << 17];
	size_t n = 0;
	ssize_t r;

	while (n < sizeof(buf) - 1 && (r = read(pipe_rd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	return buf;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Every line of s starts with the prefix. */
static bool all_prefixed(const char *s)
{
	while (*s) {
		if (strncmp(s, PREFIX, strlen(PREFIX)) != 0)
			return false;
		s = strchr(s, '\n');
		if (s == NULL)
			return false;
		s++;
	}
	return true;
}

static void test_info(void)
{
	const char *got;

	gmt__log_set_verbose(false);
	gmt__info("hidden %d", 1);
	CHECK_STR(drain(), "");

	gmt__log_set_verbose(true);
	errno = EDOM;
	gmt__info("hello %s %d", "world", 42);
	CHECK_INT(errno, EDOM);
	CHECK_STR(drain(), PREFIX "hello world 42\n");

	/* A value with a newline or a terminal escape (a path, a suppression
	 * line) cannot split the message or reach the terminal raw; a backslash
	 * stays (quoted values arrive escaped); printable UTF-8 stays. */
	gmt__info("cannot write into %s: %s", "/tmp/a\nb\x1b[31m\\c\xc3\xa9", "done");
	CHECK_STR(drain(), PREFIX "cannot write into /tmp/a\\x0ab\\x1b[31m\\c\xc3\xa9: done\n");
	/* Not printable UTF-8: a C1 control (CSI), a bidirectional override,
	 * the line separator, an overlong '/', a surrogate, a sequence cut short,
	 * a stray continuation byte. */
	gmt__info("%s", "a\xc2\x9b" "2J b\xe2\x80\xae c\xe2\x80\xa8 d\xc0\xaf e\xed\xa0\x80 f\xe2\x86 g\x86 \xe2\x86\x90");
	CHECK_STR(drain(), PREFIX "a\\xc2\\x9b2J b\\xe2\\x80\\xae c\\xe2\\x80\\xa8 d\\xc0\\xaf e\\xed\\xa0\\x80 "
				  "f\\xe2\\x86 g\\x86 \xe2\x86\x90\n");
	gmt__info("%s", "gpumemtrace: forged\ngpumemtrace: line");
	CHECK_INT(count_lines(drain()), 1);

	/* A long message is cut to one line that says so, escapes included. */
	{
		static char big[5000];

		memset(big, 'x', sizeof(big) - 1);
		gmt__info("%s", big);
		got = drain();
		CHECK_INT(count_lines(got), 1);
		CHECK(strlen(got) <= 1024);
		CHECK(strlen(got) > 1000);
		CHECK(strlen(got) >= 4 && strcmp(got + strlen(got) - 4, "...\n") == 0);
		CHECK(all_prefixed(got));
		memset(big, '\n', sizeof(big) - 1);
		gmt__info("%s", big);
		got = drain();
		CHECK_INT(count_lines(got), 1);
		CHECK(strlen(got) <= 1024);
		CHECK(strlen(got) >= 4 && strcmp(got + strlen(got) - 4, "...\n") == 0);
	}
}

#define RACERS 4
#define RACER_LINES 150 /* 4 × 150 lines of ~70 bytes fit the 64 KiB pipe */

static void *racer(void *arg)
{
	int id = (int)(intptr_t)arg, i;

	for (i = 0; i < RACER_LINES; i++)
		gmt__info("racer %d line %03d %s", id, i, "abcdefghijklmnopqrstuvwxyz");
	return NULL;
}

/* Lines of racing threads never interleave: each is one write. */
static void test_racing_lines(void)
{
	pthread_t t[RACERS];
	int i, seen[RACERS] = { 0 };
	const char *s;

	gmt__log_set_verbose(true);
	for (i = 0; i < RACERS; i++)
		pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i);
	for (i = 0; i < RACERS; i++)
		pthread_join(t[i], NULL);
	s = drain();
	CHECK_INT(count_lines(s), RACERS * RACER_LINES);
	while (*s) {
		int id, line, used = 0;

		if (sscanf(s, PREFIX "racer %d line %d abcdefghijklmnopqrstuvwxyz\n%n", &id, &line,
			   &used) != 2 || used == 0 || id < 0 || id >= RACERS) {
			fprintf(stderr, "mangled line: %.80s\n", s);
			check_failed++;
			break;
		}
		CHECK_INT(line, seen[id]);
		seen[id]++;
		s += used;
	}
	for (i = 0; i < RACERS; i++)
		CHECK_INT(seen[i], RACER_LINES);
}

static bool race_flag;

static void *once_racer(void *arg)
{
	gmt__warn_once(&race_flag, "raced once");
	return arg;
}

/* Returns how many warnings it used (2). */
static int test_warn_once(void)
{
	static bool flag;
	pthread_t t[8];
	int i;

	errno = ERANGE;
	gmt__warn_once(&flag, "first %d", 1);
	gmt__warn_once(&flag, "second %d", 2);
	CHECK_INT(errno, ERANGE);
	CHECK_STR(drain(), PREFIX "first 1\n");
	CHECK(flag);

	for (i = 0; i < 8; i++)
		pthread_create(&t[i], NULL, once_racer, NULL);
	for (i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	CHECK_STR(drain(), PREFIX "raced once\n");
	return 2;
}

static void test_cap(int used)
{
	static bool late;
	const char *s;
	int i;

	for (i = 0; i < 30; i++) {
		errno = EILSEQ;
		gmt__warn("warning %d", i);
		CHECK_INT(errno, EILSEQ);
	}
	s = drain();
	/* 20 warnings in all, then the one line that says the rest is hidden */
	CHECK_INT(count_lines(s), 20 - used + 1);
	CHECK(all_prefixed(s));
	{
		char want[64];

		snprintf(want, sizeof(want), PREFIX "warning %d\n", 20 - used - 1);
		CHECK(strstr(s, want) != NULL);
		snprintf(want, sizeof(want), PREFIX "warning %d\n", 20 - used);
		CHECK(strstr(s, want) == NULL);
	}
	CHECK(strstr(s, "further warnings suppressed") != NULL);
	CHECK(strstr(s, "further warnings suppressed") > strstr(s, "warning 0\n"));

	gmt__warn_once(&late, "past the cap");
	gmt__warn("still capped");
	CHECK_STR(drain(), "");
	/* progress messages are not warnings: never capped */
	gmt__log_set_verbose(true);
	gmt__info("info after the cap");
	CHECK_STR(drain(), PREFIX "info after the cap\n");
}

int main(void)
{
	int fds[2], used;

	if (pipe2(fds, O_NONBLOCK) != 0) {
		perror("pipe2");
		return 1;
	}
	pipe_rd = fds[0];
	CHECK_INT(gmt__log_set_fd(fds[1]), 2);

	test_info();
	test_racing_lines();
	used = test_warn_once();
	test_cap(used);

	CHECK_INT(gmt__log_set_fd(2), fds[1]);
	if (check_failed)
		fprintf(stderr, "%d check(s) failed\n", check_failed);
	return check_failed != 0;
}
