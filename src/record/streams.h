/* The streams of stream-ordered allocations: each distinct CUstream a
 * cuMemAllocAsync was made on gets a small id once, so that the event and the
 * live entry carry it in 16 bits and the snapshot can name the stream
 * (allocations[].stream). Lock-free, no malloc: it runs in the hooks. */
#ifndef GMT_STREAMS_H
#define GMT_STREAMS_H

#include <stdbool.h>
#include <stdint.h>

/* Distinct streams a process may name; ids run from 1. Past that, an
 * allocation's stream is not recorded (id 0). */
#define GMT_STREAMS_MAX 4095

/* The id of stream `handle` (a CUstream's value: 0 is the legacy default
 * stream, CU_STREAM_PER_THREAD the per-thread one), registering it when new;
 * 0 when the table is full. */
uint16_t gmt__stream_id(uint64_t handle);

/* The handle of stream `id` into *handle; false for 0 or an unknown id. Any
 * thread, any time after gmt__stream_id returned it. */
bool gmt__stream_handle(uint16_t id, uint64_t *handle);

#endif /* GMT_STREAMS_H */
