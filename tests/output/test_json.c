/* The JSON writer (src/report/json.c): records within their room reach the
 * file whole, across buffer flushes; strings are escaped (non-UTF-8 bytes as
 * '?'); a record that runs past its room fails the document with -EOVERFLOW
 * and nothing more reaches the file — or, with the internal checks compiled in
 * (-Ddebug_checks=true), stops the process with one line naming the check. */
#define _GNU_SOURCE
#include "report/json.h"
#include "util/check.h"

#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* What was written to a temporary file, NUL-terminated (caller frees). */
static char *contents(FILE *f, size_t *len)
{
	char *buf;

	fflush(f);
	*len = (size_t)ftell(f);
	buf = malloc(*len + 1);
	rewind(f);
	if (buf == NULL || fread(buf, 1, *len, f) != *len)
		abort();
	buf[*len] = '\0';
	return buf;
}

static void test_records(void)
{
	FILE *f = tmpfile();
	struct gmt__json o;
	size_t len, n = 200000;
	char *got, *p;

	CHECK_INT(gmt__json_open(&o, fileno(f)), 0);
	gmt__json_str(&o, "[");
	for (size_t i = 0; i < n; i++) {
		p = gmt__json_room(&o, GMT_JSON_RECORD_BYTES);
		p = gmt__put_lit(p, i ? ", [" : "[");
		p = gmt__put_u64(p, UINT64_MAX - i);
		p = gmt__put_lit(p, ", ");
		p = gmt__put_i64(p, INT64_MIN + (int64_t)i);
		p = gmt__put_lit(p, ", ");
		p = gmt__put_hex(p, 0xdeadbeef00ull + i);
		p = gmt__put_lit(p, "]");
		gmt__json_commit(&o, p);
	}
	gmt__json_str(&o, ", ");
	gmt__json_string(&o, "tab\there \"quoted\" \xff\xfe");
	gmt__json_str(&o, ", ");
	gmt__json_string_or_null(&o, NULL);
	gmt__json_str(&o, "]");
	CHECK_INT(gmt__json_close(&o), 0);
	got = contents(f, &len);
	/* More than the buffer: the records crossed flushes whole. */
	CHECK(len > GMT_JSON_BUFFER_BYTES);
	CHECK(strncmp(got, "[[18446744073709551615, -9223372036854775808, \"0xdeadbeef00\"], [", 64) == 0);
	CHECK(strstr(got, "[18446744073709351616, -9223372036854575809, \"0xdeadc1fc3f\"]") != NULL);
	CHECK(strstr(got, ", \"tab\\there \\\"quoted\\\" ??\", null]") != NULL);
	free(got);
	fclose(f);
}

/* A record written past its room. */
static int overrun(int fd)
{
	struct gmt__json o;
	char *p;

	if (gmt__json_open(&o, fd) != 0)
		return -ENOMEM;
	gmt__json_str(&o, "before");
	p = gmt__json_room(&o, 8);
	p = gmt__put_lit(p, "a record of more than eight bytes");
	gmt__json_commit(&o, p);
	gmt__json_str(&o, "after");
	return gmt__json_close(&o);
}

static void test_overrun(void)
{
	FILE *f = tmpfile();
	int status, pipefd[2];
	char msg[256] = "";
	size_t len;
	char *got;
	pid_t pid;

	if (!GMT_DEBUG_CHECKS) {
		CHECK_INT(overrun(fileno(f)), -EOVERFLOW);
		got = contents(f, &len);
		/* Nothing more reaches the file once a record failed (the
		 * document is dropped). */
		CHECK(strcmp(got, "") == 0);
		free(got);
		fclose(f);
		return;
	}
	/* With the checks compiled in: the child stops at the check. */
	if (pipe(pipefd) != 0)
		abort();
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		signal(SIGABRT, SIG_DFL);
		_exit(overrun(fileno(f)) == -EOVERFLOW ? 0 : 1);
	}
	close(pipefd[1]);
	len = (size_t)read(pipefd[0], msg, sizeof(msg) - 1);
	msg[len < sizeof(msg) ? len : 0] = '\0';
	close(pipefd[0]);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	CHECK(strstr(msg, "gpumemtrace: internal check failed: end >= o->buf + o->n && end <= o->room_end") != NULL);
	fclose(f);
}

int main(void)
{
	test_records();
	test_overrun();
	if (check_failed == 0)
		printf("json: ok (internal checks %s)\n", GMT_DEBUG_CHECKS ? "on" : "off");
	return check_failed != 0;
}
