/* Test program for a plugin reinstalled while the program runs: the file at
 * its path replaced by another build (written beside it and renamed over
 * it, as an installer does). Arguments: PLUG_A PLUG_B, two builds of
 * plugin.c. In a directory of its own (under TMPDIR):
 *   plug_a installed at DIR/libplugin.so, loaded, allocates 3 MiB (kept),
 *   unloaded; plug_b installed at the same path, loaded, allocates 5 MiB
 *   (kept, plug_b stays loaded); snapshot 1 (gmt_dump);
 *   plug_a installed again while plug_b is loaded; snapshot 2;
 *   the directory removed before the exit snapshot.
 * Prints "PLUGIN <path>", "DUMP <n> <rc>" per snapshot, "SAME_BASE 0|1"
 * (where the loader put plug_b: not a precondition), and the PID/LIVE report
 * of tests/programs/run_program.py. */
#define _GNU_SOURCE
#include "plugin_host.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpumemtrace.h>

/* Copies src to dir/.libplugin.so.new and renames it over path. */
static int install(const char *src, const char *dir, const char *path)
{
	char tmp[4096 + 32], buf[65536];
	int in, out, rc = -1;
	ssize_t n = -1;

	snprintf(tmp, sizeof(tmp), "%s/.libplugin.so.new", dir);
	in = open(src, O_RDONLY | O_CLOEXEC);
	out = in >= 0 ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755) : -1;
	if (out >= 0) {
		while ((n = read(in, buf, sizeof(buf))) > 0 && write(out, buf, (size_t)n) == n)
			;
		rc = n == 0 ? 0 : -1;
		if (close(out) != 0)
			rc = -1;
	}
	if (in >= 0)
		close(in);
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -1;
	if (rc != 0) {
		perror("reload: install");
		unlink(tmp);
	}
	return rc;
}

int main(int argc, char **argv)
{
	const char *tmpdir = getenv("TMPDIR");
	char dir[4096], path[sizeof(dir) + 16];
	CUdeviceptr a, b;
	allocate_fn fa, fb;
	uintptr_t base_a, base_b;
	void *ha, *hb;
	int rc = 1;

	if (argc != 3 || plugin_host_cuda() != 0)
		return 1;
	snprintf(dir, sizeof(dir), "%s/gmt-reload-XXXXXX", tmpdir != NULL && tmpdir[0] != '\0' ? tmpdir : "/tmp");
	if (mkdtemp(dir) == NULL) {
		perror("reload: mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/libplugin.so", dir);
	printf("PLUGIN %s\n", path);

	if (install(argv[1], dir, path) != 0)
		goto out;
	ha = plugin_host_open(path, "plugin_a_allocate", &fa, &base_a);
	if (ha == NULL || fa(&a, 3 << 20) != CUDA_SUCCESS)
		goto out;
	dlclose(ha);

	if (install(argv[2], dir, path) != 0)
		goto out;
	hb = plugin_host_open(path, "totally_unrelated_function", &fb, &base_b);
	if (hb == NULL || fb(&b, 5 << 20) != CUDA_SUCCESS)
		goto out;
	printf("DUMP 1 %d\n", gmt_dump(NULL, 0));

	/* Replaced while plug_b stays loaded. */
	if (install(argv[1], dir, path) != 0)
		goto out;
	printf("DUMP 2 %d\n", gmt_dump(NULL, 0));
	printf("PID %d main\nSAME_BASE %d\nLIVE %#llx %d device 0\nLIVE %#llx %d device 0\n", (int)getpid(),
	       base_a == base_b, (unsigned long long)a, 3 << 20, (unsigned long long)b, 5 << 20);
	rc = 0;
out:
	unlink(path);
	rmdir(dir);
	return rc;
}
