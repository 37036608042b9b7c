/* Strict parsing of integers and byte sizes (see parse.h). */
#include "util/parse.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Reads the leading digits of s into *out; *end points past them. */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	*end = p;
	return 0;
}

static int ascii_lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

bool gmt__word_is(const char *s, size_t n, const char *word)
{
	for (size_t i = 0; i < n; i++) {
		if (word[i] == '\0' || ascii_lower((unsigned char)s[i]) != word[i])
			return false;
	}
	return word[n] == '\0';
}

int gmt__parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };
	size_t n = strlen(s);

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (gmt__word_is(s, n, yes[i])) {
			*out = true;
			return 0;
		}
		if (gmt__word_is(s, n, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

int gmt__parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;
	const char *end;
	int r;

	if (s == NULL)
		return -EINVAL;
	r = parse_digits(s, &v, &end);
	if (r < 0)
		return r;
	if (*end != '\0')
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static int lower(int c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

static int suffix_shift(const char *sfx)
{
	static const struct {
		char letter;
		int shift;
	} units[] = { { 'k', 10 }, { 'm', 20 }, { 'g', 30 }, { 't', 40 } };
	size_t i;

	if (sfx[0] == '\0')
		return 0;
	if ((sfx[0] == 'b' || sfx[0] == 'B') && sfx[1] == '\0')
		return 0;
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (lower(sfx[0]) != units[i].letter)
			continue;
		/* K, KB, Ki, KiB (any case) */
		if (sfx[1] == '\0')
			return units[i].shift;
		if (lower(sfx[1]) == 'i' && sfx[2] == '\0')
			return units[i].shift;
		if (lower(sfx[1]) == 'b' && sfx[2] == '\0')
			return units[i].shift;
		if (lower(sfx[1]) == 'i' && lower(sfx[2]) == 'b' && sfx[3] == '\0')
			return units[i].shift;
	}
	return -EINVAL;
}

int gmt__parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;
	const char *end;
	int shift, r;

	if (s == NULL)
		return -EINVAL;
	r = parse_digits(s, &v, &end);
	if (r < 0)
		return r;
	shift = suffix_shift(end);
	if (shift < 0)
		return -EINVAL;
	if (shift > 0 && v > (UINT64_MAX >> shift))
		return -ERANGE;
	v <<= shift;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

const char *gmt__human_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024.0 && u < 6) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, v < 10.0 ? "%.2f %s" : v < 100.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

const char *gmt__human_duration(char *buf, size_t len, uint64_t ns)
{
	double sec = (double)ns / 1e9;
	uint64_t m, h, d;

	if (sec < 1.0) {
		snprintf(buf, len, "%.3g ms", sec * 1000.0);
		return buf;
	}
	if (sec < 60.0) {
		snprintf(buf, len, sec < 10.0 ? "%.2f s" : "%.1f s", sec);
		return buf;
	}
	m = ns / 1000000000ull / 60;
	if (m < 60) {
		snprintf(buf, len, "%llu min %llu s", (unsigned long long)m,
			 (unsigned long long)(ns / 1000000000ull % 60));
		return buf;
	}
	h = m / 60;
	if (h < 48) {
		snprintf(buf, len, "%llu h %llu min", (unsigned long long)h, (unsigned long long)(m % 60));
		return buf;
	}
	d = h / 24;
	snprintf(buf, len, "%llu d %llu h", (unsigned long long)d, (unsigned long long)(h % 24));
	return buf;
}
