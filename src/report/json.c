/* The JSON writer (json.h). */
#define _GNU_SOURCE
#include "report/json.h"

#include "util/check.h"
#include "util/fdwrite.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>

/* Past the buffer's capacity: what a record that overran its room may have
 * written before gmt__json_commit saw it. */
#define JSON_MARGIN_BYTES (64u << 10)

int gmt__json_open(struct gmt__json *o, int fd)
{
	*o = (struct gmt__json){ .fd = fd, .cap = GMT_JSON_BUFFER_BYTES };
	o->buf = malloc(o->cap + JSON_MARGIN_BYTES);
	if (o->buf == NULL) {
		o->err = -ENOMEM;
		return -ENOMEM;
	}
	o->room_end = o->buf;
	return 0;
}

int gmt__json_close(struct gmt__json *o)
{
	if (o->buf != NULL)
		gmt__json_flush(o);
	free(o->buf);
	o->buf = NULL;
	return o->err;
}

static void write_all(struct gmt__json *o, const char *p, size_t n)
{
	if (o->err == 0)
		o->err = gmt__write_full(o->fd, p, n);
}

void gmt__json_flush(struct gmt__json *o)
{
	write_all(o, o->buf, o->n);
	o->n = 0;
}

void gmt__json_fail(struct gmt__json *o, int err)
{
	if (o->err == 0)
		o->err = err;
}

char *gmt__json_room(struct gmt__json *o, size_t need)
{
	GMT_CHECK(need <= o->cap / 2);
	if (o->cap - o->n < need)
		gmt__json_flush(o);
	o->room_end = o->buf + o->n + need;
	return o->buf + o->n;
}

void gmt__json_commit(struct gmt__json *o, char *end)
{
	GMT_CHECK(end >= o->buf + o->n && end <= o->room_end);
	if (end > o->room_end || end < o->buf + o->n) {
		/* The record ran past its room: it is not written, nor is
		 * anything after it. */
		gmt__json_fail(o, -EOVERFLOW);
		return;
	}
	o->n = (size_t)(end - o->buf);
}

void gmt__json_mem(struct gmt__json *o, const void *p, size_t n)
{
	if (n > o->cap / 2) {
		gmt__json_flush(o);
		write_all(o, p, n);
		return;
	}
	memcpy(gmt__json_room(o, n), p, n);
	o->n += n;
}

void gmt__json_str(struct gmt__json *o, const char *s)
{
	gmt__json_mem(o, s, strlen(s));
}

/* Whether s needs no escaping at all as a JSON string: printable ASCII
 * without quote or backslash (what jansson would write unchanged). */
static bool plain_ascii(const char *s)
{
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			return false;
	}
	return true;
}

/* NOTE: jansson accepts only valid UTF-8, and argv or file names need not
 * be: then every byte above 0x7f becomes '?' (lossy, but still names the
 * thing). */
void gmt__json_string(struct gmt__json *o, const char *s)
{
	json_t *j = NULL;
	char *copy = NULL, *big = NULL;
	size_t need, i, len;

	if (plain_ascii(s)) {
		gmt__json_mem(o, "\"", 1);
		gmt__json_str(o, s);
		gmt__json_mem(o, "\"", 1);
		return;
	}
	j = json_string(s);
	if (j == NULL) {
		len = strlen(s);
		copy = malloc(len + 1);
		if (copy == NULL)
			goto nomem;
		for (i = 0; i <= len; i++)
			copy[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
		j = json_string(copy);
		if (j == NULL)
			goto nomem;
	}
	need = json_dumpb(j, NULL, 0, JSON_ENCODE_ANY);
	if (need <= o->cap / 2) {
		char *p = gmt__json_room(o, need); /* may flush: o->n changes */

		gmt__json_commit(o, p + json_dumpb(j, p, need, JSON_ENCODE_ANY));
		goto out;
	}
	big = malloc(need);
	if (big == NULL)
		goto nomem;
	gmt__json_mem(o, big, json_dumpb(j, big, need, JSON_ENCODE_ANY));
	goto out;
nomem:
	gmt__json_fail(o, -ENOMEM);
out:
	json_decref(j);
	free(big);
	free(copy);
}

void gmt__json_string_or_null(struct gmt__json *o, const char *s)
{
	if (s != NULL)
		gmt__json_string(o, s);
	else
		gmt__json_str(o, "null");
}
