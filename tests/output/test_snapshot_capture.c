/* The snapshot is written from the capture alone: the copies of the live
 * entries and of the history the tracer takes under its lock
 * (gmt__table_copy, gmt__history_copy). Here the table is freed and the
 * history emptied before the write, and the document still holds what was
 * captured — the writer never reaches back into them, so the tracer's lock
 * can go before it starts. */
#define _GNU_SOURCE
#include "check.h"

#include "record/stacks.h"
#include "report/snapshot.h"
#include "state/history.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	char dir[] = "/tmp/gmt-capture-XXXXXX", path[512], cmd[600];
	struct gmt__table *t = gmt__table_new();
	uintptr_t ips[2] = { (uintptr_t)&main + 1, (uintptr_t)&system + 1 };
	struct gmt__entry e = { .addr = 0x7e0000001000ull, .size = 3 << 20, .space = GMT_SPACE_MEMORY,
				.kind = GMT_KIND_DEVICE, .time_ns = 1700000000000000000ull };
	struct gmt__hist_cause cause = { .seq = 1, .time_ns = e.time_ns, .tid = 7 };
	struct gmt__history h, *hist;
	struct gmt__entry *entries = NULL;
	struct gmt__snapshot s = { .reason = GMT_REASON_EXIT, .seq = 1, .pid = getpid() };
	json_t *doc, *a, *sites;
	json_error_t err;

	CHECK(t != NULL && mkdtemp(dir) != NULL && gmt__stack_init() == 0);
	CHECK_INT(gmt__history_init(&h, 16), 0);
	e.stack = gmt__stack_intern(ips, 2);
	CHECK(gmt__table_insert(t, &e, NULL) != NULL);
	gmt__history_tick(&h, e.time_ns);
	gmt__history_change(&h, &e, true, &cause);

	/* The capture, then everything it came from goes away. */
	CHECK_INT(gmt__table_copy(t, &entries, &s.nentries), 0);
	hist = gmt__history_copy(&h);
	CHECK(hist != NULL);
	gmt__table_free(t);
	gmt__history_clear(&h);
	s.entries = entries;
	s.history = hist;
	s.live_bytes = e.size;
	s.live_count = 1;

	CHECK_INT(gmt__snapshot_write(&s, dir, path, sizeof(path), NULL), 0);
	doc = json_load_file(path, 0, &err);
	CHECK(doc != NULL);
	a = json_object_get(doc, "allocations");
	CHECK_INT(json_array_size(a), 1);
	CHECK(json_string_value(json_object_get(json_array_get(a, 0), "address")) != NULL &&
	      strcmp(json_string_value(json_object_get(json_array_get(a, 0), "address")), "0x7e0000001000") == 0);
	CHECK_INT(json_integer_value(json_object_get(json_array_get(a, 0), "size")), 3 << 20);
	sites = json_object_get(doc, "sites");
	CHECK_INT(json_array_size(sites), 1);
	CHECK_INT(json_integer_value(json_object_get(json_array_get(sites, 0), "live_bytes")), 3 << 20);
	CHECK_INT(json_array_size(json_object_get(json_object_get(doc, "history"), "events")), 1);
	CHECK_INT(json_array_size(json_object_get(doc, "stacks")), 1);
	check_keep(path);
	json_decref(doc);

	free(entries);
	gmt__history_copy_free(hist);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
	return check_failed != 0;
}
