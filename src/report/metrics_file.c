/* The metrics file's name and the rule for gone processes' files
 * (metrics_file.h). */
#define _GNU_SOURCE
#include "report/metrics_file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *gmt__metrics_name(const struct gmt__metrics_writer *w, char *buf)
{
	snprintf(buf, GMT_METRICS_NAME_MAX, "gpumemtrace.%ld.%.32s-%" PRIu64 "-%" PRIu64 ".prom", w->pid, w->boot,
		 w->pidns, w->start);
	return buf;
}

/* A decimal number of at most 20 digits at *s, moved past it. */
static bool number(const char **s, uint64_t *out)
{
	const char *p = *s;
	uint64_t v = 0;

	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*s = p;
	*out = v;
	return true;
}

int gmt__metrics_name_parse(const char *name, struct gmt__metrics_writer *w)
{
	const char *p = name;
	uint64_t pid;

	if (strncmp(p, "gpumemtrace.", 12) != 0)
		return -EINVAL;
	p += 12;
	if (!number(&p, &pid) || pid == 0 || pid > INT32_MAX || *p++ != '.')
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
			return -EINVAL;
	}
	memcpy(w->boot, p, 32);
	w->boot[32] = '\0';
	p += 32;
	if (*p++ != '-' || !number(&p, &w->pidns) || *p++ != '-' || !number(&p, &w->start) || strcmp(p, ".prom") != 0)
		return -EINVAL;
	w->pid = (long)pid;
	return 0;
}

bool gmt__metrics_gone(const struct gmt__metrics_writer *self, const struct gmt__metrics_writer *w, bool running,
		       uint64_t start_now)
{
	if (strcmp(self->boot, w->boot) != 0 || self->pidns != w->pidns)
		return false;
	if (w->pid == self->pid && w->start == self->start)
		return false;
	return !running || (start_now != 0 && start_now != w->start);
}
