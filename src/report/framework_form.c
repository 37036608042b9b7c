/* The "framework" section's form (framework_form.h): one table of keys per
 * object of docs/snapshot.schema.json's "framework", read by one checker. */
#include "report/framework_form.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

enum form {
	FORM_STRING,         /* "type": "string" */
	FORM_STRING_OR_NULL, /* ["string", "null"] */
	FORM_COUNT,          /* an integer from 0: bytes, count, device_index, address */
	FORM_COUNT_OR_NULL,  /* bytes_or_null */
	FORM_INTEGER,        /* "type": "integer" */
	FORM_BOOLEAN,
	FORM_ARRAY,          /* its items checked by the caller */
	FORM_OBJECT_OR_NULL, /* its keys checked by the caller */
};

struct key {
	const char *name;
	enum form form;
	bool required;
};

#define KEYS(t) (t), sizeof(t) / sizeof((t)[0])

/* "reason" of the top level is checked before (core.c). */
static const struct key top_keys[] = {
	{ "name", FORM_STRING, true },
	{ "version", FORM_STRING, true },
	{ "file", FORM_STRING_OR_NULL, false },
	{ "oom", FORM_OBJECT_OR_NULL, false },
	{ "devices", FORM_ARRAY, true },
	{ "segments", FORM_ARRAY, true },
	{ "truncated", FORM_BOOLEAN, false },
	{ "pending_frees", FORM_OBJECT_OR_NULL, false },
	{ "alloc_conf", FORM_STRING_OR_NULL, false },
	{ "alloc_conf_from", FORM_STRING_OR_NULL, false },
};

static const struct key pending_keys[] = {
	{ "count", FORM_COUNT, true },
	{ "bytes", FORM_COUNT, true },
	{ "flushed_count", FORM_COUNT, true },
	{ "flushed_bytes", FORM_COUNT, true },
};

static const struct key oom_keys[] = {
	{ "device", FORM_COUNT, false },
	{ "requested_bytes", FORM_COUNT, false },
	{ "device_allocated_bytes", FORM_COUNT, false },
	{ "device_limit_bytes", FORM_COUNT, false },
	{ "device_free_bytes", FORM_COUNT, false },
};

static const struct key device_keys[] = {
	{ "device", FORM_COUNT, true },
	{ "allocated_bytes", FORM_COUNT, true },
	{ "reserved_bytes", FORM_COUNT, true },
	{ "requested_bytes", FORM_COUNT, false },
	{ "reserved_unallocated_bytes", FORM_COUNT, true },
	{ "largest_free_block_bytes", FORM_COUNT_OR_NULL, true },
	{ "limit_bytes", FORM_COUNT_OR_NULL, false },
	{ "peak_allocated_bytes", FORM_COUNT, false },
	{ "step_allocated_bytes", FORM_COUNT, false },
	{ "device_free_bytes", FORM_COUNT, false },
	{ "device_total_bytes", FORM_COUNT, false },
	{ "segments", FORM_COUNT, false },
	{ "blocks", FORM_COUNT, false },
};

static const struct key segment_keys[] = {
	{ "device", FORM_COUNT, true },
	{ "address", FORM_COUNT, true },
	{ "total_size", FORM_COUNT, true },
	{ "stream", FORM_INTEGER, false },
	{ "segment_type", FORM_STRING, false },
	{ "is_expandable", FORM_BOOLEAN, false },
	{ "blocks", FORM_ARRAY, true },
};

static const struct key block_keys[] = {
	{ "address", FORM_COUNT, true },
	{ "size", FORM_COUNT, true },
	{ "requested_size", FORM_COUNT, false },
	{ "state", FORM_STRING, true },
	{ "frames", FORM_ARRAY, false },
};

/* A block's frames: at most this many (the schema's maxItems). */
#define FRAMES_MAX 16

static bool of_form(const json_t *v, enum form form)
{
	switch (form) {
	case FORM_STRING:
		return json_is_string(v);
	case FORM_STRING_OR_NULL:
		return json_is_string(v) || json_is_null(v);
	case FORM_COUNT:
		return json_is_integer(v) && json_integer_value(v) >= 0;
	case FORM_COUNT_OR_NULL:
		return json_is_null(v) || (json_is_integer(v) && json_integer_value(v) >= 0);
	case FORM_INTEGER:
		return json_is_integer(v);
	case FORM_BOOLEAN:
		return json_is_boolean(v);
	case FORM_ARRAY:
		return json_is_array(v);
	case FORM_OBJECT_OR_NULL:
		return json_is_object(v) || json_is_null(v);
	}
	return false;
}

/* Whether obj is an object whose keys of the table have their form. */
static bool keys_ok(const json_t *obj, const struct key *keys, size_t n)
{
	if (!json_is_object(obj))
		return false;
	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_object_get(obj, keys[i].name);

		if (v == NULL ? keys[i].required : !of_form(v, keys[i].form))
			return false;
	}
	return true;
}

int gmt__framework_form_check(const json_t *doc)
{
	const json_t *oom = json_object_get(doc, "oom"), *pending = json_object_get(doc, "pending_frees");
	const json_t *devices, *segments, *seg, *block;
	size_t i, j;

	const char *from = json_string_value(json_object_get(doc, "alloc_conf_from"));

	if (from != NULL && strcmp(from, "pytorch") != 0 && strcmp(from, "environment") != 0)
		return -EINVAL;
	if (!keys_ok(doc, KEYS(top_keys)) || (json_is_object(oom) && !keys_ok(oom, KEYS(oom_keys))) ||
	    (json_is_object(pending) && !keys_ok(pending, KEYS(pending_keys))))
		return -EINVAL;
	devices = json_object_get(doc, "devices");
	for (i = 0; i < json_array_size(devices); i++) {
		if (!keys_ok(json_array_get(devices, i), KEYS(device_keys)))
			return -EINVAL;
	}
	segments = json_object_get(doc, "segments");
	json_array_foreach(segments, i, seg) {
		if (!keys_ok(seg, KEYS(segment_keys)))
			return -EINVAL;
		json_array_foreach(json_object_get(seg, "blocks"), j, block) {
			if (!keys_ok(block, KEYS(block_keys)) ||
			    json_array_size(json_object_get(block, "frames")) > FRAMES_MAX)
				return -EINVAL;
		}
	}
	return 0;
}
