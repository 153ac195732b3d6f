/* testing.c — the test-only binding of the caching allocator (allocator.h) over the fake
 * device of memory/fake.c, so tests/test_cuda_build.py checks its logic without a GPU:
 *
 *     a = _cuda._fake_allocator(limit)   # a capsule owning allocator + fake device
 *     p = _cuda._fa_malloc(a, size, stream)  -> int address (0 for size 0)
 *     _cuda._fa_free(a, p); _cuda._fa_record_stream(a, p, stream); _cuda._fa_empty_cache(a)
 *     _cuda._fa_stats(a) -> dict (allocator stats + the fake's "held", "n_sync")
 *     _cuda._fa_reset_peak(a); _cuda._fa_fail_next(a, k); _cuda._fa_complete(a, stream)
 *
 * Streams are plain integers standing for cudaStream_t values (0: the default stream).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "binding.h"

#include "allocator.h"
#include "check.h"

PyObject *cddp_cuda_stats_dict(const cddp_alloc_stats *s);   /* module.c */

#define CAPSULE_NAME "cddp._cuda.fake_allocator"

typedef struct fake_alloc {
    cddp_alloc_backend be;
    cddp_allocator *a;
} fake_alloc;

static void capsule_free(PyObject *cap)
{
    fake_alloc *f = PyCapsule_GetPointer(cap, CAPSULE_NAME);
    if (!f)
        return;
    cddp_allocator_destroy(f->a);
    cddp_fake_backend_fini(&f->be);
    free(f);
}

static fake_alloc *get(PyObject *cap)
{
    return PyCapsule_GetPointer(cap, CAPSULE_NAME);
}

static PyObject *py_new(PyObject *self, PyObject *args)
{
    Py_ssize_t limit;
    fake_alloc *f;
    int rc;
    if (!PyArg_ParseTuple(args, "n", &limit))
        return NULL;
    if (limit < 0)
        return PyErr_Format(PyExc_ValueError, "limit must be >= 0, got %zd", limit);
    if (!(f = calloc(1, sizeof *f)))
        return PyErr_NoMemory();
    if ((rc = cddp_fake_backend_init(&f->be, (size_t)limit)) < 0) {
        free(f);
        return cddp_cuda_raise(rc);
    }
    if (!(f->a = cddp_allocator_new(&f->be))) {
        cddp_fake_backend_fini(&f->be);
        free(f);
        return cddp_cuda_raise(cddp_cuda_errcode());
    }
    return PyCapsule_New(f, CAPSULE_NAME, capsule_free);
}

static PyObject *py_malloc(PyObject *self, PyObject *args)
{
    PyObject *cap;
    Py_ssize_t size;
    unsigned long long stream;
    void *p = NULL;
    fake_alloc *f;
    int rc;
    if (!PyArg_ParseTuple(args, "OnK", &cap, &size, &stream) || !(f = get(cap)))
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "size must be >= 0, got %zd", size);
    if ((rc = cddp_allocator_malloc(f->a, (size_t)size, (void *)(uintptr_t)stream, &p)) < 0)
        return cddp_cuda_raise(rc);
    if (p && size)   /* touch every byte: ASan catches a block smaller than asked */
        memset(p, 0x5A, (size_t)size);
    return PyLong_FromVoidPtr(p);
}

/* (capsule, address[, stream]) -> the allocator call named by `op`. */
static PyObject *ptr_op(PyObject *args, int op)
{
    PyObject *cap, *addr;
    unsigned long long stream = 0;
    fake_alloc *f;
    void *p;
    int rc;
    if (!PyArg_ParseTuple(args, "OO|K", &cap, &addr, &stream) || !(f = get(cap)))
        return NULL;
    p = PyLong_AsVoidPtr(addr);
    if (PyErr_Occurred())
        return NULL;
    rc = op == 0 ? cddp_allocator_release(f->a, p)
                 : cddp_allocator_record_stream(f->a, p, (void *)(uintptr_t)stream);
    if (rc < 0)
        return cddp_cuda_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *py_free(PyObject *self, PyObject *args)
{
    return ptr_op(args, 0);
}

static PyObject *py_record_stream(PyObject *self, PyObject *args)
{
    return ptr_op(args, 1);
}

static PyObject *py_empty_cache(PyObject *self, PyObject *cap)
{
    fake_alloc *f = get(cap);
    int rc;
    if (!f)
        return NULL;
    if ((rc = cddp_allocator_empty_cache(f->a)) < 0)
        return cddp_cuda_raise(rc);
    Py_RETURN_NONE;
}

static int set_size(PyObject *dict, const char *key, size_t v)
{
    PyObject *o = PyLong_FromSize_t(v);
    int rc = o ? PyDict_SetItemString(dict, key, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *py_stats(PyObject *self, PyObject *cap)
{
    fake_alloc *f = get(cap);
    cddp_fake_device *d;
    cddp_alloc_stats s;
    PyObject *dict;
    if (!f)
        return NULL;
    d = cddp_allocator_ctx(f->a);
    cddp_allocator_stats(f->a, &s);
    if (!(dict = cddp_cuda_stats_dict(&s)))
        return NULL;
    if (set_size(dict, "held", d->held) < 0 || set_size(dict, "n_sync", d->n_sync) < 0) {
        Py_DECREF(dict);
        return NULL;
    }
    return dict;
}

static PyObject *py_reset_peak(PyObject *self, PyObject *cap)
{
    fake_alloc *f = get(cap);
    if (!f)
        return NULL;
    cddp_allocator_reset_peak(f->a);
    Py_RETURN_NONE;
}

static PyObject *py_fail_next(PyObject *self, PyObject *args)
{
    PyObject *cap;
    int k;
    fake_alloc *f;
    if (!PyArg_ParseTuple(args, "Oi", &cap, &k) || !(f = get(cap)))
        return NULL;
    ((cddp_fake_device *)cddp_allocator_ctx(f->a))->fail_next = k;
    Py_RETURN_NONE;
}

static PyObject *py_complete(PyObject *self, PyObject *args)
{
    PyObject *cap;
    unsigned long long stream;
    fake_alloc *f;
    if (!PyArg_ParseTuple(args, "OK", &cap, &stream) || !(f = get(cap)))
        return NULL;
    cddp_fake_complete(cddp_allocator_ctx(f->a), (void *)(uintptr_t)stream);
    Py_RETURN_NONE;
}

static PyObject *py_round(PyObject *self, PyObject *arg)
{
    size_t n = PyLong_AsSize_t(arg);
    if (n == (size_t)-1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromSize_t(cddp_allocator_round(n));
}

PyMethodDef cddp_cuda_testing_methods[] = {
    {"_fake_allocator", py_new, METH_VARARGS, "A caching allocator over a fake host device (tests)."},
    {"_fa_malloc", py_malloc, METH_VARARGS, NULL},
    {"_fa_free", py_free, METH_VARARGS, NULL},
    {"_fa_record_stream", py_record_stream, METH_VARARGS, NULL},
    {"_fa_empty_cache", py_empty_cache, METH_O, NULL},
    {"_fa_stats", py_stats, METH_O, NULL},
    {"_fa_reset_peak", py_reset_peak, METH_O, NULL},
    {"_fa_fail_next", py_fail_next, METH_VARARGS, NULL},
    {"_fa_complete", py_complete, METH_VARARGS, NULL},
    {"_alloc_round", py_round, METH_O, "The allocator's size class of a request."},
    {NULL, NULL, 0, NULL},
};
