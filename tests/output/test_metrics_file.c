/* Unit test of the metrics file's name (report/metrics_file.h) on made-up
 * processes: the name says who wrote it and reads back; other names (an
 * earlier version's, a random one, malformed ones) say nobody; a file is
 * gone only when it is of this boot and this pid namespace and its process
 * runs no more — never another container's or another machine's. */
#define _GNU_SOURCE
#include "check.h"
#include "report/metrics_file.h"

#include <errno.h>

#define BOOT "55484c046e614204962f2d13b77fb83f"

static const struct gmt__metrics_writer self = { .pid = 1, .boot = BOOT, .pidns = 4026532178, .start = 5000 };

static void test_name(void)
{
	struct gmt__metrics_writer w = { 0 };
	char buf[GMT_METRICS_NAME_MAX];

	CHECK_STR(gmt__metrics_name(&self, buf), "gpumemtrace.1." BOOT "-4026532178-5000.prom");
	CHECK_INT(gmt__metrics_name_parse(buf, &w), 0);
	CHECK_INT(w.pid, 1);
	CHECK_STR(w.boot, BOOT);
	CHECK_U64(w.pidns, 4026532178u);
	CHECK_U64(w.start, 5000);
	{
		static const struct gmt__metrics_writer big = {
			.pid = 2147483647, .boot = BOOT, .pidns = UINT64_MAX, .start = UINT64_MAX
		};

		gmt__metrics_name(&big, buf);
		CHECK(strlen(buf) < GMT_METRICS_NAME_MAX - 1);
		CHECK_INT(gmt__metrics_name_parse(buf, &w), 0);
		CHECK_U64(w.start, UINT64_MAX);
	}
}

static void test_other_names(void)
{
	static const char *const names[] = {
		"gpumemtrace.1.prom",                                 /* an earlier version's: anyone's */
		"gpumemtrace.1.r0123456789abcdef.prom",               /* made without /proc */
		".gpumemtrace.1." BOOT "-7-9.prom.tmp",               /* a temporary */
		"gpumemtrace.0." BOOT "-7-9.prom",                    /* no pid 0 */
		"gpumemtrace.1." BOOT "-7-9.prom.json",
		"gpumemtrace.1.55484C046E614204962F2D13B77FB83F-7-9.prom", /* not as the kernel writes it */
		"gpumemtrace.1.55484c04-6e61-4204-962f-2d13b77fb83f-7-9.prom",
		"gpumemtrace.1." BOOT "-7-.prom",
		"gpumemtrace.1." BOOT "--9.prom",
		"gpumemtrace.1." BOOT "-7-18446744073709551616.prom", /* past 64 bits */
		"gpumemtrace.9999999999." BOOT "-7-9.prom",
		"gpumemtrace.1.3.exit.1.json",
	};
	struct gmt__metrics_writer w;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (gmt__metrics_name_parse(names[i], &w) != -EINVAL) {
			fprintf(stderr, "%s:%d: \"%s\" read as a writer's name\n", __FILE__, __LINE__, names[i]);
			check_failed++;
		}
	}
}

static void test_gone(void)
{
	struct gmt__metrics_writer w = self;

	/* Of this pid namespace: gone when its pid runs no more, or runs a
	 * process started at another time (the pid used again). */
	w.pid = 2;
	CHECK(gmt__metrics_gone(&self, &w, false, 0));
	CHECK(gmt__metrics_gone(&self, &w, true, 6000));
	CHECK(!gmt__metrics_gone(&self, &w, true, 5000));
	CHECK(!gmt__metrics_gone(&self, &w, true, 0)); /* its start not known: it may be w's */
	/* Self's own pid: its own file stays, an earlier process's goes. */
	w.pid = 1;
	CHECK(!gmt__metrics_gone(&self, &w, true, 5000));
	w.start = 4000;
	CHECK(gmt__metrics_gone(&self, &w, true, 5000));
	/* Another container's (pid namespace) or another machine's (boot):
	 * its pid says nothing here, running or not. */
	w = self;
	w.pid = 2;
	w.pidns = self.pidns + 1;
	CHECK(!gmt__metrics_gone(&self, &w, false, 0));
	CHECK(!gmt__metrics_gone(&self, &w, true, 6000));
	w.pid = 1; /* both pid 1 in their own namespace: two files */
	CHECK(!gmt__metrics_gone(&self, &w, true, 6000));
	w = self;
	w.pid = 2;
	memcpy(w.boot, "00000000000000000000000000000000", 33);
	CHECK(!gmt__metrics_gone(&self, &w, false, 0));
}

int main(void)
{
	test_name();
	test_other_names();
	test_gone();
	printf("metrics-file: %d failed\n", check_failed);
	return check_failed != 0;
}
