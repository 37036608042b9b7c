/* Arrays (cuArrayCreate, cuArray3DCreate, cuArrayDestroy): whole pages for their
 * bytes, owned by the context that made them. */
#include "model.h"

#include <stdlib.h>

static unsigned format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

static CUresult array_create(enum sim_call api, CUarray *out, uint64_t w, uint64_t h, uint64_t depth,
			     CUarray_format format, unsigned channels)
{
	struct CUarray_st *a;
	unsigned elem = format_bytes(format);
	int dev;
	CUresult r;

	if (out == NULL || w == 0 || elem == 0 || (channels != 1 && channels != 2 && channels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	gmtsim__lock();
	r = gmtsim__current_device(&dev, &a->ctx);
	if (r != CUDA_SUCCESS)
		goto out;
	a->bytes = w * (h ? h : 1) * (depth ? depth : 1) * channels * elem;
	a->pages = gmtsim__pages_for(a->bytes);
	a->device = dev;
	a->api = api;
	if (a->pages > gmtsim__pages_free(&gmtsim__model.dev[dev])) {
		r = gmtsim__oom(api, a->bytes, dev);
		goto out;
	}
	gmtsim__model.dev[dev].pages_used += a->pages;
	a->next = gmtsim__model.arrays;
	gmtsim__model.arrays = a;
	gmtsim__model.totals.allocs++;
	*out = a;
	a = NULL;
out:
	gmtsim__unlock();
	free(a);
	return r;
}

GMTSIM_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	gmtsim__count(SIM_CALL_cuArrayCreate_v2);
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(SIM_CALL_cuArrayCreate_v2, pHandle, d->Width, d->Height, 0, d->Format,
			    d->NumChannels);
}

GMTSIM_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	gmtsim__count(SIM_CALL_cuArray3DCreate_v2);
	if (d == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(SIM_CALL_cuArray3DCreate_v2, pHandle, d->Width, d->Height, d->Depth, d->Format,
			    d->NumChannels);
}

void gmtsim__array_free(struct CUarray_st **link)
{
	struct CUarray_st *a = *link;

	*link = a->next;
	gmtsim__model.dev[a->device].pages_used -= a->pages;
	gmtsim__model.totals.frees++;
	free(a);
}

GMTSIM_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
	CUresult r;

	gmtsim__count(SIM_CALL_cuArrayDestroy);
	r = gmtsim__initialised();
	if (r != CUDA_SUCCESS)
		return r;
	gmtsim__lock();
	r = CUDA_ERROR_INVALID_HANDLE;
	for (struct CUarray_st **p = &gmtsim__model.arrays; *p != NULL; p = &(*p)->next) {
		if (*p == hArray) {
			gmtsim__array_free(p);
			r = CUDA_SUCCESS;
			break;
		}
	}
	gmtsim__unlock();
	return r;
}
