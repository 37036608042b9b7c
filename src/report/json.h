/* The JSON writer of the snapshot document: buffered output to a file
 * descriptor, records formatted straight into the buffer, strings escaped by
 * jansson. A record is written into room reserved for it
 * (gmt__json_room) and committed (gmt__json_commit), which checks that it
 * stayed within that room: a record that did not fails the document
 * (-EOVERFLOW) instead of running past the buffer — the buffer keeps a
 * margin for it — and stops a debug build (util/check.h). The first failure
 * sticks in `err` and makes every later write a no-op. */
#ifndef GMT_JSON_H
#define GMT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The buffer, and the room most records reserve: a few dozen keys and
 * numbers of at most 20 digits, apart from their strings. */
#define GMT_JSON_BUFFER_BYTES (1u << 20)
#define GMT_JSON_RECORD_BYTES 512

struct gmt__json {
	int fd;
	int err;      /* 0, or the first failure (a negative errno) */
	char *buf;
	size_t n, cap;
	char *room_end; /* where the last reserved room ends */
};

/* An empty writer into fd. 0, or -ENOMEM. */
int gmt__json_open(struct gmt__json *o, int fd);
/* Writes what is buffered; frees the buffer. Returns o->err. */
int gmt__json_close(struct gmt__json *o);

void gmt__json_flush(struct gmt__json *o);
void gmt__json_fail(struct gmt__json *o, int err);

/* Room for a record of at most `need` bytes (at most GMT_JSON_BUFFER_BYTES /
 * 2): where it goes. Write it with the gmt__put_* below, then commit its end. */
char *gmt__json_room(struct gmt__json *o, size_t need);
void gmt__json_commit(struct gmt__json *o, char *end);

void gmt__json_mem(struct gmt__json *o, const void *p, size_t n);
void gmt__json_str(struct gmt__json *o, const char *s); /* raw: JSON syntax */
/* s as a JSON string (NOTE: bytes above 0x7f of invalid UTF-8 become '?');
 * NULL as null in the second. */
void gmt__json_string(struct gmt__json *o, const char *s);
void gmt__json_string_or_null(struct gmt__json *o, const char *s);

/* Decimal, quoted "0x" hex and literal writers into a record: return the end. */
static inline char *gmt__put_u64(char *p, uint64_t v)
{
	char tmp[20];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

static inline char *gmt__put_i64(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return gmt__put_u64(p, (uint64_t)0 - (uint64_t)v);
	}
	return gmt__put_u64(p, (uint64_t)v);
}

static inline char *gmt__put_hex(char *p, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char tmp[16];
	int n = 0;

	*p++ = '"';
	*p++ = '0';
	*p++ = 'x';
	do {
		tmp[n++] = digits[v & 15];
		v >>= 4;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	*p++ = '"';
	return p;
}

static inline char *gmt__put_lit(char *p, const char *s)
{
	size_t n = strlen(s);

	memcpy(p, s, n);
	return p + n;
}

/* v, or null when not `have`. */
static inline char *gmt__put_u64_or_null(char *p, bool have, uint64_t v)
{
	return have ? gmt__put_u64(p, v) : gmt__put_lit(p, "null");
}

/* {"keys[0]": v[0], ...} of n numbers, or null when not `have` (within a
 * record's room: a few keys). */
static inline char *gmt__put_u64_object(char *p, bool have, const char *const *keys, const uint64_t *v, size_t n)
{
	if (!have)
		return gmt__put_lit(p, "null");
	for (size_t k = 0; k < n; k++) {
		p = gmt__put_lit(p, k ? ", \"" : "{\"");
		p = gmt__put_lit(p, keys[k]);
		p = gmt__put_lit(p, "\": ");
		p = gmt__put_u64(p, v[k]);
	}
	return gmt__put_lit(p, "}");
}

#endif /* GMT_JSON_H */
