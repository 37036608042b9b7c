/* The snapshot writer hands the table back (table_done) exactly once on every
 * path — success, a directory that does not exist, a refused reason — so the
 * caller's lock is always released (core.c relies on it), and what it wrote
 * afterwards (the stacks) is still complete. */
#define _GNU_SOURCE
#include "check.h"

#include "report/snapshot.h"
#include "record/stacks.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int calls;

static void done(void *arg)
{
	(*(int *)arg)++;
}

static int write_one(struct gmt__table *t, const char *reason, const char *dir, char *path, size_t len)
{
	struct gmt__snapshot s = {
		.reason = reason, .seq = 1, .pid = getpid(), .table = t,
		.table_done = done, .table_done_arg = &calls,
	};

	calls = 0;
	return gmt__snapshot_write(&s, dir, path, len);
}

int main(void)
{
	char dir[] = "/tmp/gmt-release-XXXXXX", path[512], cmd[600];
	struct gmt__table *t = gmt__table_new();
	uintptr_t ips[2] = { (uintptr_t)&main + 1, (uintptr_t)&write_one + 1 };
	struct gmt__entry e = { .addr = 0x1000, .size = 64, .space = GMT_SPACE_MEMORY,
				.kind = GMT_KIND_DEVICE };
	FILE *f;
	char *doc = NULL;
	size_t n = 0;

	CHECK(t != NULL && mkdtemp(dir) != NULL && gmt__stack_init() == 0);
	e.stack = gmt__stack_intern(ips, 2);
	CHECK(gmt__table_insert(t, &e, NULL) != NULL);

	CHECK_INT(write_one(t, "exit", dir, path, sizeof(path)), 0);
	CHECK_INT(calls, 1);
	f = fopen(path, "r");
	CHECK(f != NULL && getdelim(&doc, &n, '\0', f) > 0);
	CHECK(doc != NULL && strstr(doc, "\"frames\"") != NULL && strstr(doc, "\n}\n") != NULL);
	check_keep(path);
	if (f)
		fclose(f);

	CHECK(write_one(t, "exit", "/nonexistent/gmt-release", path, sizeof(path)) < 0);
	CHECK_INT(calls, 1);
	CHECK(write_one(t, "Not a reason", dir, path, sizeof(path)) < 0);
	CHECK_INT(calls, 1);
	CHECK_INT(write_one(t, "exit", dir, path, sizeof(path)), 0); /* name taken: the next one */
	CHECK_INT(calls, 1);
	CHECK(strstr(path, ".exit.2.json") != NULL);

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
	free(doc);
	gmt__table_free(t);
	return check_failed != 0;
}
