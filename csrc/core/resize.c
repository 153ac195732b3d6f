/* core/resize.c — Tensor.resize_ / resize_as_, and cddp_tensor_resize for the out= argument.
 *
 * Mirrors: torch's Tensor.resize_(*sizes) and resize_as_(other): the tensor takes the new
 * shape with contiguous strides at its current offset; its values, in that order, are kept as
 * far as the old storage reached; new elements read as 0 (torch leaves them uninitialised).
 *
 * Decision: when the storage must grow, this tensor moves to a new, larger storage holding a
 * copy of the old bytes. torch grows the storage object itself, so its other views follow;
 * here other views keep the old storage and stop sharing with this tensor. Refused (torch's
 * "not resizable" error) for storages the tensor does not own alone in memory cddp controls:
 * a NumPy array's, shared memory, a live buffer export, a GPU storage.
 */
#include "module.h"

/* Contract in core/cddp.h. */
int cddp_tensor_resize(TensorObject *t, int ndim, const int64_t *shape)
{
    const size_t item = cddp_dtype_size[t->dtype];
    int64_t numel = 1, stride = 1;
    size_t need;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            PyErr_Format(PyExc_RuntimeError, "Trying to create tensor with negative dimension "
                         "%lld", (long long)shape[d]);
            return -1;
        }
        if (shape[d] && numel > INT64_MAX / shape[d]) {
            PyErr_NoMemory();
            return -1;
        }
        numel *= shape[d];
    }
    if (t->requires_grad || t->grad_fn) {
        PyErr_SetString(PyExc_RuntimeError, "cannot resize variables that require grad");
        return -1;
    }
    if ((uint64_t)(t->offset + numel) > SIZE_MAX / item) {
        PyErr_NoMemory();
        return -1;
    }
    need = (size_t)(t->offset + numel) * item;
    if (need > t->storage->nbytes) {
        cddp_storage *old = t->storage, *grown;
        if (old->owner || old->device >= 0 || t->exports > 0 || cddp_storage_shared_fd(old) >= 0) {
            PyErr_SetString(PyExc_RuntimeError, "Trying to resize storage that is not resizable");
            return -1;
        }
        grown = cddp_storage_new(need, 1);
        if (!grown)
            return -1;
        if (old->nbytes)
            memcpy(grown->data, old->data, old->nbytes);
        grown->version = old->version;
        t->storage = grown;
        cddp_storage_decref(old);
    }
    t->ndim = ndim;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = stride;
        stride *= shape[d] > 1 ? shape[d] : 1;
    }
    cddp_bump_version(t);
    return 0;
}

/* resize_(*sizes) or resize_(sizes); memory_format accepted and ignored (contiguous only). */
static PyObject *py_resize_(PyObject *self, PyObject *args, PyObject *kwargs)
{
    int64_t shape[CDDP_MAX_DIMS];
    PyObject *seq = args, *fast;
    Py_ssize_t n;
    int rc = -1;
    if (kwargs && PyDict_GET_SIZE(kwargs) &&
        !(PyDict_GET_SIZE(kwargs) == 1 && PyDict_GetItemString(kwargs, "memory_format"))) {
        PyErr_SetString(PyExc_TypeError, "resize_() got an unexpected keyword argument");
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) == 1 && !PyLong_Check(PyTuple_GET_ITEM(args, 0)))
        seq = PyTuple_GET_ITEM(args, 0);
    fast = PySequence_Fast(seq, "resize_(): argument 'size' must be tuple of ints");
    if (!fast)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_RuntimeError, "resize_(): cddp tensors have at most %d dimensions",
                     CDDP_MAX_DIMS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
        long long x;
        if (!PyLong_Check(v) || PyBool_Check(v)) {
            PyErr_Format(PyExc_TypeError, "resize_(): argument 'size' must be tuple of ints, "
                         "but found element of type %s at pos %zd", Py_TYPE(v)->tp_name, i);
            goto done;
        }
        x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred())
            goto done;
        shape[i] = x;
    }
    rc = cddp_tensor_resize((TensorObject *)self, (int)n, shape);
done:
    Py_DECREF(fast);
    return rc < 0 ? NULL : Py_NewRef(self);
}

static PyObject *py_resize_as_(PyObject *self, PyObject *other)
{
    TensorObject *o = (TensorObject *)other;
    if (!cddp_tensor_check(other)) {
        PyErr_Format(PyExc_TypeError, "resize_as_(): argument 'the_template' must be Tensor, "
                     "not %s", Py_TYPE(other)->tp_name);
        return NULL;
    }
    if (cddp_tensor_resize((TensorObject *)self, o->ndim, o->shape) < 0)
        return NULL;
    return Py_NewRef(self);
}

PyMethodDef cddp_resize_tensor_methods[] = {
    {"resize_", (PyCFunction)(void (*)(void))py_resize_, METH_VARARGS | METH_KEYWORDS,
     "resize_(*sizes) -> self with the new shape, contiguous; values kept in order"},
    {"resize_as_", py_resize_as_, METH_O, "resize_as_(other) -> self with other's shape"},
    {NULL},
};
