/* core/share.c — tensors in shared memory: Tensor.share_memory_ / is_shared (torch's
 * Tensor.share_memory_, Storage.is_shared) and the two entry points of the file-descriptor
 * pickling strategy (torch.multiprocessing.reductions: reduce_storage / rebuild_storage_fd),
 * used by cddp/multiprocessing/reductions.py.
 *
 *   t.share_memory_()           # t's storage (so every view of it) moves into a memfd
 *   _C._shared_fd(t) -> (fd, nbytes) | None   # that memfd; the pickler sends a duplicate
 *   _C._from_shared_fd(fd, nbytes, dtype, shape, strides, offset) -> Tensor over the mapping
 *
 * The memory itself is core/storage.c's (cddp_storage_share / cddp_storage_from_fd).
 * Dimension legend: any shape; strides and offset in elements.
 */
#include "core/cddp.h"
#include "module.h"
#include <string.h>

static PyObject *tensor_share_memory_(TensorObject *self, PyObject *unused)
{
    if (cddp_storage_share(self->storage) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *tensor_is_shared(TensorObject *self, PyObject *unused)
{
    return PyBool_FromLong(cddp_storage_shared_fd(self->storage) >= 0);
}

/* _shared_fd(t) -> (fd, nbytes) of t's shared storage, or None when it is not shared. */
static PyObject *py_shared_fd(PyObject *m, PyObject *t)
{
    cddp_storage *s;
    if (!cddp_tensor_check(t)) {
        PyErr_SetString(PyExc_TypeError, "_shared_fd expects a Tensor");
        return NULL;
    }
    s = ((TensorObject *)t)->storage;
    if (cddp_storage_shared_fd(s) < 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(in)", cddp_storage_shared_fd(s), (Py_ssize_t)s->nbytes);
}

/* Whether the view (shape, strides, offset) of `itemsize`-byte elements fits in nbytes. */
static int view_fits(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                     size_t itemsize, size_t nbytes)
{
    int64_t last = offset;                /* index of the last element the view reaches */
    if (offset < 0)
        return 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return 1;                     /* no element at all */
        if (strides[d] < 0 || (strides[d] && shape[d] - 1 > (INT64_MAX - last) / strides[d]))
            return 0;
        last += (shape[d] - 1) * strides[d];
    }
    return last < INT64_MAX / (int64_t)itemsize &&
           (uint64_t)(last + 1) * itemsize <= (uint64_t)nbytes;
}

/* A sequence of ints (at most CDDP_MAX_DIMS) into out. */
static int parse_ints(PyObject *seq, int *n, int64_t *out)
{
    PyObject *a = PyTuple_Pack(1, seq);
    int rc = a ? cddp_parse_shape(a, n, out) : -1;
    Py_XDECREF(a);
    return rc;
}

/* _from_shared_fd(fd, nbytes, dtype, shape, strides, offset): a tensor over another process's
 * shared storage. fd is taken over on success (the caller passes a duplicate). */
static PyObject *py_from_shared_fd(PyObject *m, PyObject *args)
{
    int fd, ndim, nd2;
    Py_ssize_t nbytes;
    long long offset;
    PyObject *dto, *shp, *strd;
    int64_t shape[CDDP_MAX_DIMS], strides[CDDP_MAX_DIMS];
    cddp_dtype dt;
    cddp_storage *s;
    TensorObject *t;
    if (!PyArg_ParseTuple(args, "inOOOL:_from_shared_fd", &fd, &nbytes, &dto, &shp, &strd,
                          &offset))
        return NULL;
    if (cddp_dtype_from_py(dto, &dt) < 0 || parse_ints(shp, &ndim, shape) < 0 ||
        parse_ints(strd, &nd2, strides) < 0)
        return NULL;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            nd2 = -1;
    if (nbytes < 0 || nd2 != ndim ||
        !view_fits(ndim, shape, strides, offset, cddp_dtype_size[dt], (size_t)nbytes)) {
        PyErr_SetString(PyExc_ValueError, "_from_shared_fd: the view does not fit the storage");
        return NULL;
    }
    t = cddp_tensor_new(dt, 0, NULL, 0);
    if (!t)
        return NULL;
    s = cddp_storage_from_fd(fd, (size_t)nbytes);
    if (!s) {
        Py_DECREF(t);
        return NULL;
    }
    cddp_storage_decref(t->storage);
    t->storage = s;
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(t->strides, strides, sizeof(int64_t) * (size_t)ndim);
    t->offset = offset;
    return (PyObject *)t;
}

PyMethodDef cddp_share_tensor_methods[] = {
    {"share_memory_", (PyCFunction)tensor_share_memory_, METH_NOARGS,
     "move the storage into shared memory (in place; fork children and processes it is "
     "sent to through cddp.multiprocessing see the same memory)"},
    {"is_shared", (PyCFunction)tensor_is_shared, METH_NOARGS, NULL},
    {NULL},
};

PyMethodDef cddp_share_module_methods[] = {
    {"_shared_fd", py_shared_fd, METH_O, NULL},
    {"_from_shared_fd", py_from_shared_fd, METH_VARARGS, NULL},
    {NULL},
};
