/* Events (cuEventCreate … cuEventElapsedTime), cuStreamWaitEvent and
 * cuStreamAddCallback. Streams run synchronously, so an event is complete once
 * recorded and its time is the host's clock at cuEventRecord. */
#define _GNU_SOURCE
#include "sim.h"

#include <stdlib.h>
#include <time.h>

/* Like streams, event objects are never freed: a destroyed handle is
 * recognised as invalid rather than read after free. */
struct CUevent_st {
	unsigned int flags;
	bool alive, recorded;
	uint64_t ns; /* CLOCK_MONOTONIC at the last cuEventRecord */
	struct CUevent_st *next;
};
static struct CUevent_st *events;

/* The live event `e`, or NULL. Lock held. */
static struct CUevent_st *event_find(CUevent e)
{
	for (struct CUevent_st *v = events; v != NULL; v = v->next)
		if (v == e)
			return v->alive ? v : NULL;
	return NULL;
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	const unsigned int known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	struct CUevent_st *e;
	int dev;
	CUresult r;

	gmtsim__count(SIM_CALL_cuEventCreate);
	/* An interprocess event must not time (cuda.h's CU_EVENT_INTERPROCESS). */
	if (phEvent == NULL || (Flags & ~known) != 0 ||
	    ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, NULL);
	if (r == CUDA_SUCCESS) {
		e = calloc(1, sizeof(*e));
		if (e == NULL) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			*e = (struct CUevent_st){ .flags = Flags, .alive = true, .next = events };
			events = e;
			*phEvent = e;
		}
	}
	gmtsim__unlock();
	return r;
}

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
	struct CUevent_st *e;
	struct timespec ts;
	int dev;
	CUresult r;

	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	e = event_find(hEvent);
	if (r == CUDA_SUCCESS && e == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	if (r == CUDA_SUCCESS) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		e->ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		e->recorded = true;
	}
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuEventRecord);
	return event_record(hEvent, hStream);
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	gmtsim__count(SIM_CALL_cuEventRecord_ptsz);
	return event_record(hEvent, hStream);
}

/* Query and synchronize: the recorded work is always done. */
static CUresult event_done(CUevent hEvent)
{
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	if (event_find(hEvent) == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
	gmtsim__count(SIM_CALL_cuEventQuery);
	return event_done(hEvent);
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
	gmtsim__count(SIM_CALL_cuEventSynchronize);
	return event_done(hEvent);
}

/* The driver's answers: an unknown event is an invalid handle; one created
 * without timing cannot be timed; one never recorded is not ready. */
static CUresult elapsed(float *ms, CUevent hStart, CUevent hEnd)
{
	struct CUevent_st *a, *b;
	CUresult r = gmtsim__initialised();

	if (r != CUDA_SUCCESS)
		return r;
	if (ms == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	a = event_find(hStart);
	b = event_find(hEnd);
	if (a == NULL || b == NULL || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (!a->recorded || !b->recorded)
		r = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)((double)((int64_t)(b->ns - a->ns)) / 1e6);
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	gmtsim__count(SIM_CALL_cuEventElapsedTime);
	return elapsed(pMilliseconds, hStart, hEnd);
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	gmtsim__count(SIM_CALL_cuEventElapsedTime_v2);
	return elapsed(pMilliseconds, hStart, hEnd);
}

GMTSIM_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
	struct CUevent_st *e;
	CUresult r = gmtsim__initialised();

	gmtsim__count(SIM_CALL_cuEventDestroy_v2);
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	e = event_find(hEvent);
	if (e == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	else
		e->alive = false;
	gmtsim__unlock();
	return r;
}

/* --- streams waiting on events, stream callbacks ----------------------------------- */

static CUresult wait_event(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	int dev;
	CUresult r;

	if (Flags != CU_EVENT_WAIT_DEFAULT && Flags != CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	if (r == CUDA_SUCCESS && event_find(hEvent) == NULL)
		r = CUDA_ERROR_INVALID_HANDLE;
	gmtsim__unlock();
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuStreamWaitEvent);
	return wait_event(hStream, hEvent, Flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	gmtsim__count(SIM_CALL_cuStreamWaitEvent_ptsz);
	return wait_event(hStream, hEvent, Flags);
}

/* The stream's work is done: the callback runs at once, on the calling thread,
 * with the lock released (a callback must not call CUDA, but may take locks of
 * its own). */
static CUresult add_callback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	int dev;
	CUresult r;

	if (callback == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	gmtsim__lock();
	r = gmtsim__stream_device(hStream, &dev);
	gmtsim__unlock();
	if (r == CUDA_SUCCESS)
		callback(hStream, CUDA_SUCCESS, userData);
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
						   unsigned int flags)
{
	gmtsim__count(SIM_CALL_cuStreamAddCallback);
	return add_callback(hStream, callback, userData, flags);
}

GMTSIM_EXPORT CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
							void *userData, unsigned int flags)
{
	gmtsim__count(SIM_CALL_cuStreamAddCallback_ptsz);
	return add_callback(hStream, callback, userData, flags);
}
