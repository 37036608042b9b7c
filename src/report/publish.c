/* The snapshot as a file (snapshot.h): a temporary file beside the target,
 * written through json.h, renamed into place without ever replacing a file
 * or following a symlink — but the process's own out-of-memory episode file,
 * which a later failure of the episode rewrites in place; stale temporary
 * files of dead processes swept. */
#define _GNU_SOURCE
#include "report/document.h"
#include "report/metrics.h"

#include "util/fdwrite.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* linux/fs.h */
#endif

#define TEMP_TRIES 16

/* Creates a new temporary file in dirfd, named after `name`, mode 0600. Never
 * opens an existing file or a symlink (O_EXCL implies it); another name is
 * tried when one is taken. Returns the fd or a negative errno. */
static int open_temp(int dirfd, const char *name, char *tmp, size_t len)
{
	struct timespec ts;
	int i, fd;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (i = 0; i < TEMP_TRIES; i++) {
		uint64_t salt = ((uint64_t)ts.tv_nsec << 8 ^ (uint64_t)ts.tv_sec) * 0x9e3779b97f4a7c15ull +
				(uint64_t)i * 0x2545f4914f6cdd1dull;

		if (snprintf(tmp, len, ".%s.%08x.tmp", name, (unsigned)(salt >> 32)) >= (int)len)
			return -ENAMETOOLONG;
		fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/* A temporary file of a writer that died (killed during a write) stays
 * forever: the first write of each process removes those it can tell are
 * dead — of a pid that no longer exists here, and untouched for
 * STALE_TEMP_SECONDS (a live writer keeps writing; the age also spares the
 * files of writers on other hosts or in other pid namespaces that share the
 * directory, whose pids mean nothing here). */
#define STALE_TEMP_SECONDS 600

static void sweep_stale_temps(int dirfd)
{
	static atomic_bool swept; /* NOTE: two first writers at once both sweep: harmless */
	struct timespec now;
	struct dirent *e;
	DIR *d;
	int fd;

	if (atomic_exchange_explicit(&swept, true, memory_order_relaxed))
		return;
	fd = dup(dirfd);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	while ((e = readdir(d)) != NULL) {
		size_t n = strlen(e->d_name);
		struct stat st;
		int pid;

		if (n < 5 || strcmp(e->d_name + n - 4, ".tmp") != 0 ||
		    sscanf(e->d_name, ".gpumemtrace.%d.", &pid) != 1 || pid <= 0 || pid == getpid())
			continue;
		/* NOTE: the system call: glibc's fstatat is versioned anew in 2.33. */
		if (syscall(SYS_newfstatat, dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
		    now.tv_sec - st.st_mtim.tv_sec < STALE_TEMP_SECONDS)
			continue;
		if (kill(pid, 0) != 0 && errno == ESRCH)
			unlinkat(dirfd, e->d_name, 0);
	}
	closedir(d);
}

/* Moves tmp to name within dirfd unless name exists (as anything: a symlink
 * there is neither followed nor replaced). Returns 0 or a negative errno
 * (-EEXIST when the name is taken). */
static int publish(int dirfd, const char *tmp, const char *name)
{
	/* NOTE: the system call, not glibc's renameat2() wrapper, which only glibc
	 * 2.28 has (the library must load on glibc 2.17: glibc_compat.h). */
	if (syscall(SYS_renameat2, dirfd, tmp, dirfd, name, RENAME_NOREPLACE) == 0)
		return 0;
	/* NOTE: RENAME_NOREPLACE needs Linux 3.15 and filesystem support (some
	 * network and FUSE filesystems answer EINVAL); link() also never replaces,
	 * and does not follow a symlink at the new name. */
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return -errno;
	if (linkat(dirfd, tmp, dirfd, name, 0) != 0)
		return -errno;
	unlinkat(dirfd, tmp, 0);
	return 0;
}

/* 0 when nothing, not even a dangling symlink, has this name in dirfd; 1 when
 * something has; else a negative errno (a directory that cannot be searched).
 * NOTE: an O_PATH open rather than fstatat, whose symbol glibc 2.33 versioned
 * anew (the library must load on glibc 2.17: glibc_compat.h). */
static int name_taken(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return errno == ENOENT ? 0 : -errno;
}

/* The file name of snapshot s with number seq. */
static void snapshot_name(const struct gmt__snapshot *s, uint64_t seq, char *name, size_t len)
{
	if (s->process != NULL && (s->process->rank >= 0 || s->process->local_rank >= 0))
		snprintf(name, len, "gpumemtrace.%d.%s.%llu.rank%lld.json", s->pid, gmt__reason_name(s->reason),
			 (unsigned long long)seq,
			 (long long)(s->process->rank >= 0 ? s->process->rank : s->process->local_rank));
	else
		snprintf(name, len, "gpumemtrace.%d.%s.%llu.json", s->pid, gmt__reason_name(s->reason), (unsigned long long)seq);
}

/* The document of s (its model m) as the file, or no file (s->no_file, or
 * one that cannot be made): 0 or a negative errno (snapshot.h). */
static int publish_file(const struct gmt__snapshot *s, struct gmt__model *m, const char *dir, char *path, size_t len)
{
	int saved = errno;
	char name[128], tmp[192];
	struct gmt__json o = { .fd = -1 };
	struct gmt__snapshot numbered = *s;
	bool have_tmp = false;
	int dirfd = -1, fd = -1, r, tries = 0;

	if (dir == NULL || dir[0] == '\0')
		dir = ".";
	if (s->no_file) {
		r = 0;
		goto no_file;
	}
	if (gmt__reason_name(s->reason) == NULL) {
		r = -EINVAL;
		goto no_file;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		r = -errno;
		goto no_file;
	}
	sweep_stale_temps(dirfd);
	/* A name already taken (by anything, a symlink included) is left alone:
	 * the next number is tried, before anything is written, so that the
	 * document says the number its name has. */
	for (;;) {
		snapshot_name(s, numbered.seq, name, sizeof(name));
		if (s->replace)
			break;
		r = name_taken(dirfd, name);
		if (r < 0)
			goto no_file;
		if (r == 0)
			break;
		if (++tries == GMT_SNAPSHOT_NAME_TRIES) {
			r = -EEXIST;
			goto no_file;
		}
		numbered.seq++;
	}
	if (s->seq_out != NULL)
		*s->seq_out = numbered.seq;
	s = &numbered;
	if (path != NULL && len > 0 &&
	    snprintf(path, len, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name) >= (int)len) {
		r = -ENAMETOOLONG;
		goto no_file;
	}
	fd = open_temp(dirfd, name, tmp, sizeof(tmp));
	if (fd < 0) {
		r = fd;
		goto no_file;
	}
	have_tmp = true;
	/* The umask may have taken bits off 0600, never added any: make it
	 * exact. A filesystem without modes may refuse, and the file is no more
	 * open than 0600 either way, so that is no reason to lose the snapshot. */
	(void)fchmod(fd, 0600);
	r = gmt__json_open(&o, fd);
	if (r == 0)
		r = gmt__doc_render(&o, s, m);
	r = r < 0 ? r : gmt__json_close(&o);
	if (r < 0)
		goto out;
	/* NOTE: no fsync: it can cost seconds on a busy disk, at the moment the
	 * program is dying of OOM. A crash of the program never leaves a partial
	 * file under the final name; a crash of the whole machine may lose the
	 * file or leave it empty. */
	r = close(fd) == 0 ? 0 : -errno;
	fd = -1;
	if (r < 0)
		goto out;
	/* An episode's file is this process's own, written at an earlier
	 * failure: the new document takes its place in one rename (a reader
	 * sees the old file or the new, whole). */
	if (s->replace)
		r = renameat(dirfd, tmp, dirfd, name) == 0 ? 0 : -errno;
	else
		r = publish(dirfd, tmp, name);
	if (r == 0)
		have_tmp = false;
	goto out;
no_file:
	/* No file (asked for none, or it cannot be made): the model and its
	 * reports were made all the same; nothing is rendered. */
	if (path != NULL && len > 0)
		path[0] = '\0';
out:
	gmt__json_close(&o);
	if (fd >= 0)
		close(fd);
	if (have_tmp)
		unlinkat(dirfd, tmp, 0);
	if (dirfd >= 0)
		close(dirfd);
	free(o.buf);
	if (r < 0 && path != NULL && len > 0)
		path[0] = '\0';
	errno = saved;
	return r;
}

/* The snapshot path, in its order: the capture (s) analysed into its model,
 * the model's text reports — the program's, made whether or not the file
 * can be — then its document as the file. */
int gmt__snapshot_write(const struct gmt__snapshot *s, const char *dir, char *path, size_t len,
			struct gmt__metrics_tensors *tensors)
{
	int saved = errno;
	struct gmt__model m;
	int r = gmt__model_build(&m, s);

	if (r == 0) {
		gmt__text_reports(s, &m);
		r = publish_file(s, &m, dir, path, len);
		/* Whatever became of the file: the model saw the tensors. */
		if (tensors != NULL)
			(void)gmt__metrics_tensors_of(&m, s->time_ns, tensors);
	} else if (path != NULL && len > 0) {
		path[0] = '\0';
	}
	gmt__model_free(&m);
	errno = saved;
	return r;
}
