/* A C extension shaped like PyTorch's bindings, for python_nogil.py (which
 * builds it with the interpreter's own headers): each allocation runs between
 * Py_BEGIN_ALLOW_THREADS and Py_END_ALLOW_THREADS, so that the tracer's hook
 * runs on a thread that does not hold the GIL. The driver is reached as a
 * private loader does: dlopen("libcuda.so.1") and dlsym by versioned name.
 *
 *   init()                   cuInit, device 0's primary context
 *   alloc(size) -> address   cuMemAlloc_v2 without the GIL
 *   free(address)            cuMemFree_v2 without the GIL
 *   native_thread(callable)  a thread Python did not create calls
 *                            callable() through PyGILState_Ensure */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <pthread.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

static CUresult (*cu_init)(unsigned);
static CUresult (*cu_device_get)(int *, int);
static CUresult (*cu_primary_retain)(CUcontext *, int);
static CUresult (*cu_ctx_set_current)(CUcontext);
static CUresult (*cu_mem_alloc)(CUdeviceptr *, size_t);
static CUresult (*cu_mem_free)(CUdeviceptr);
static CUcontext context;

static int load(void **field, void *h, const char *name)
{
	*field = dlsym(h, name);
	return *field != NULL;
}

static PyObject *init(PyObject *self, PyObject *unused)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int dev = 0;

	(void)self;
	(void)unused;
	if (h == NULL || !load((void **)&cu_init, h, "cuInit") || !load((void **)&cu_device_get, h, "cuDeviceGet") ||
	    !load((void **)&cu_primary_retain, h, "cuDevicePrimaryCtxRetain") ||
	    !load((void **)&cu_ctx_set_current, h, "cuCtxSetCurrent") ||
	    !load((void **)&cu_mem_alloc, h, "cuMemAlloc_v2") || !load((void **)&cu_mem_free, h, "cuMemFree_v2"))
		return PyErr_Format(PyExc_RuntimeError, "libcuda.so.1: %s", dlerror());
	if (cu_init(0) != 0 || cu_device_get(&dev, 0) != 0 || cu_primary_retain(&context, dev) != 0)
		return PyErr_Format(PyExc_RuntimeError, "no CUDA context");
	Py_RETURN_NONE;
}

static PyObject *alloc(PyObject *self, PyObject *arg)
{
	size_t size = PyLong_AsSize_t(arg);
	CUdeviceptr p = 0;
	CUresult r;

	(void)self;
	if (size == (size_t)-1 && PyErr_Occurred())
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = cu_ctx_set_current(context);
	if (r == 0)
		r = cu_mem_alloc(&p, size);
	Py_END_ALLOW_THREADS
	if (r != 0)
		return PyErr_Format(PyExc_RuntimeError, "cuMemAlloc_v2(%zu) returned %d", size, r);
	return PyLong_FromUnsignedLongLong(p);
}

static PyObject *release(PyObject *self, PyObject *arg)
{
	CUdeviceptr p = PyLong_AsUnsignedLongLong(arg);
	CUresult r;

	(void)self;
	if (PyErr_Occurred())
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = cu_ctx_set_current(context);
	if (r == 0)
		r = cu_mem_free(p);
	Py_END_ALLOW_THREADS
	if (r != 0)
		return PyErr_Format(PyExc_RuntimeError, "cuMemFree_v2 returned %d", r);
	Py_RETURN_NONE;
}

static void *native_main(void *callable)
{
	PyGILState_STATE g = PyGILState_Ensure();
	PyObject *r = PyObject_CallObject((PyObject *)callable, NULL);

	if (r == NULL)
		PyErr_Print();
	Py_XDECREF(r);
	PyGILState_Release(g);
	return r != NULL ? callable : NULL;
}

static PyObject *native_thread(PyObject *self, PyObject *callable)
{
	pthread_t t;
	void *ok = NULL;
	int e;

	(void)self;
	Py_INCREF(callable);
	e = pthread_create(&t, NULL, native_main, callable);
	if (e == 0) {
		Py_BEGIN_ALLOW_THREADS
		pthread_join(t, &ok);
		Py_END_ALLOW_THREADS
	}
	Py_DECREF(callable);
	if (e != 0)
		return PyErr_Format(PyExc_RuntimeError, "pthread_create: %d", e);
	if (ok == NULL)
		return PyErr_Format(PyExc_RuntimeError, "the native thread's call failed");
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{ "init", init, METH_NOARGS, NULL },
	{ "alloc", alloc, METH_O, NULL },
	{ "free", release, METH_O, NULL },
	{ "native_thread", native_thread, METH_O, NULL },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = { PyModuleDef_HEAD_INIT, "nogil_ext", NULL, -1, methods, NULL, NULL, NULL, NULL };

PyMODINIT_FUNC PyInit_nogil_ext(void)
{
	return PyModule_Create(&module);
}
