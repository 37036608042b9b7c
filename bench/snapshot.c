/* Benchmark: writing a snapshot of N live allocations (docs/internals.md, "Targets": 1,000,000
 * in at most 2 s). Builds, with the tracer's own core (no preload), a live
 * table of N device allocations from 1,024 distinct 16-frame stacks of this
 * program, the history those allocations leave (events, series, sites), and an
 * out-of-memory request with a device state, so that every section of the
 * document and the diagnosis are written; then times gmt__snapshot_write into
 * a temporary directory. The baseline, in the same process: writing the same
 * number of bytes to a file in 1 MiB blocks (the disk's share of the time).
 * Prints "name value" lines for bench/run.py.
 *
 * Usage: snapshot [N] */
#define _GNU_SOURCE
#include "state/history.h"
#include "report/snapshot.h"
#include "record/stacks.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSTACKS 1024
#define DEPTH 16

static const char *const api_names[] = { "cuMemAlloc_v2", "cuMemFree_v2" };

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Return addresses inside this function stand for the stacks' frames. */
__attribute__((noinline)) static void frames_here(uintptr_t *ips, int k)
{
	for (int j = 0; j < DEPTH; j++)
		ips[j] = (uintptr_t)&frames_here + 1 + (uintptr_t)((k * DEPTH + j) % 512);
}

static int write_plain(const char *dir, size_t bytes, double *seconds)
{
	char path[512];
	static char block[1 << 20];
	double t0;
	int fd;

	snprintf(path, sizeof(path), "%s/plain", dir);
	memset(block, 'x', sizeof(block));
	t0 = now();
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	for (size_t done = 0; done < bytes;) {
		size_t n = bytes - done < sizeof(block) ? bytes - done : sizeof(block);
		ssize_t w = write(fd, block, n);

		if (w <= 0) {
			close(fd);
			return -1;
		}
		done += (size_t)w;
	}
	close(fd);
	*seconds = now() - t0;
	unlink(path);
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	struct gmt__table *t = gmt__table_new();
	struct gmt__history h;
	uint32_t stacks[NSTACKS];
	uint64_t x = 88172645463325252ull, live = 0;
	char dir[] = "/tmp/gmt-bench-snapshot.XXXXXX", path[512];
	struct gmt__device_state state = {
		.index = 0, .have_mem = true, .total_bytes = 80ull << 30, .free_bytes = 1 << 20,
		.have_granularity = true, .granularity = 2 << 20, .have_pools = true, .npools = 1,
		.others_why = "NVML is not available",
	};
	struct gmt__snapshot_device dev = { .index = 0, .state = &state };
	struct gmt__snapshot_request failed = {
		.api = "cuMemAlloc_v2", .size = 1ull << 30, .device = 0, .result = 2, .failure = 1,
	};
	struct gmt__snapshot_process process = { .ppid = 1, .host = "bench", .rank = -1, .local_rank = -1,
						 .world_size = -1 };
	struct gmt__snapshot s = {
		.reason = GMT_REASON_OOM, .seq = 1, .pid = getpid(), .devices = &dev, .ndevices = 1,
		.failed = &failed, .api_names = api_names, .napi = 2, .process = &process,
	};
	double t0, t_capture, t1, plain;
	struct gmt__entry *entries = NULL;
	struct gmt__history *copy = NULL;
	struct stat st;

	if (t == NULL || gmt__history_init(&h, 10000) < 0 || mkdtemp(dir) == NULL) {
		fprintf(stderr, "snapshot: no memory or no temporary directory\n");
		return 1;
	}
	for (int k = 0; k < NSTACKS; k++) {
		uintptr_t ips[DEPTH];

		frames_here(ips, k);
		stacks[k] = gmt__stack_intern(ips, DEPTH);
	}
	for (long i = 0; i < n; i++) {
		struct gmt__entry e;
		struct gmt__hist_cause cause = { .seq = (uint64_t)i + 1, .tid = 4242 };

		memset(&e, 0, sizeof(e));
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		e.addr = 0x7f0000000000ull + ((x & 0xffffffffffull) << 8);
		e.size = 256 + (x >> 50);
		e.time_ns = cause.time_ns = 1700000000000000000ull + (uint64_t)i * 1000;
		e.link = (uint64_t)i + 1;
		e.stack = stacks[x % NSTACKS];
		e.tid = 4242;
		e.space = GMT_SPACE_MEMORY;
		e.kind = GMT_KIND_DEVICE;
		if (gmt__table_insert(t, &e, NULL) == NULL) {
			fprintf(stderr, "snapshot: no memory for the table\n");
			return 1;
		}
		gmt__history_tick(&h, e.time_ns);
		gmt__history_change(&h, &e, true, &cause);
		live += e.size;
	}
	s.live_count = gmt__table_count(t);
	s.live_bytes = s.peak_bytes = dev.live_bytes = live;
	s.total_allocs = (uint64_t)n;
	s.time_ns = 1700000000000000000ull + (uint64_t)n * 1000;

	/* Timed as the tracer takes a snapshot: the capture (the copies it
	 * takes under its lock), then the document. */
	t0 = now();
	if (gmt__table_copy(t, &entries, &s.nentries) != 0 || (copy = gmt__history_copy(&h)) == NULL) {
		fprintf(stderr, "snapshot: no memory for the capture\n");
		return 1;
	}
	t_capture = now();
	s.entries = entries;
	s.history = copy;
	if (gmt__snapshot_write(&s, dir, path, sizeof(path), NULL) != 0 || stat(path, &st) != 0) {
		fprintf(stderr, "snapshot: the snapshot could not be written into %s\n", dir);
		return 1;
	}
	t1 = now();
	free(entries);
	gmt__history_copy_free(copy);
	unlink(path);
	if (write_plain(dir, (size_t)st.st_size, &plain) != 0) {
		fprintf(stderr, "snapshot: the plain file could not be written into %s\n", dir);
		return 1;
	}
	rmdir(dir);
	printf("live %ld\n", n);
	printf("snapshot_s %.4f\n", t1 - t0);
	printf("capture_s %.4f\n", t_capture - t0);
	printf("snapshot_bytes %lld\n", (long long)st.st_size);
	printf("plain_write_s %.4f\n", plain);
	return 0;
}
