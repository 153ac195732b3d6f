/* core/storage_view.c — storage-level access for checkpoints (cddp/serialization.py).
 *
 * Mirrors what torch.save/torch.load do with Tensor.untyped_storage() and
 * torch._utils._rebuild_tensor_v2 (= Tensor.set_(storage, offset, size, stride)): a whole-object
 * checkpoint writes every storage once and rebuilds each tensor as a view of it, so tensors that
 * shared memory when saved share it (and its version counter) when loaded.
 *
 *     _storage_info(t) -> (key, nbytes)      key: the storage's identity while t is alive
 *     _storage_view(t, offset, size, stride) -> a view of t's whole storage, history-free
 *     _adopt_view(t, view) -> t, now with view's shape, strides and offset (the in-place shape
 *                             ops: unsqueeze_, squeeze_, t_, transpose_, as_strided_ in
 *                             cddp/_compat.py)
 *
 * Dimension legend: size/stride (ndim,) in elements of t's dtype, offset in elements; the
 * storage holds nbytes bytes. _storage_view is reached by files a forger wrote (through the
 * restricted unpickler), so every number is checked against the storage before the view
 * exists: strides and sizes non-negative, at most CDDP_MAX_DIMS dims, no int64 overflow, and
 * every element the view can address lies inside the storage.
 */
#include "module.h"

/* Contract: parses a sequence of at most CDDP_MAX_DIMS non-negative ints into out; returns
 * the count, or -1 with ValueError/TypeError naming `what`. */
static int parse_dims(PyObject *seq, const char *what, int64_t *out)
{
    PyObject *fast = PySequence_Fast(seq, "");
    int n = -1;
    if (!fast) {
        PyErr_Format(PyExc_TypeError, "_storage_view: %s must be a sequence of ints", what);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "_storage_view: %s has %zd dimensions; cddp tensors "
                     "have at most %d", what, len, CDDP_MAX_DIMS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
        long long x;
        if (!PyLong_Check(v) || PyBool_Check(v)) {
            PyErr_Format(PyExc_TypeError, "_storage_view: %s[%zd] is not an int", what, i);
            goto done;
        }
        x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred())
            goto done;
        if (x < 0) {
            PyErr_Format(PyExc_ValueError, "_storage_view: %s[%zd] = %lld is negative", what,
                         i, x);
            goto done;
        }
        out[i] = x;
    }
    n = (int)len;
done:
    Py_DECREF(fast);
    return n;
}

/* Contract: 0 when a view (offset, size, stride) of itemsize-byte elements lies inside a
 * storage of nbytes bytes (an empty view: its offset at most the end), else -1 with
 * ValueError. Overflow-safe: a product or sum past int64 is out of bounds by definition. */
static int check_bounds(int n, const int64_t *size, const int64_t *stride, int64_t offset,
                        size_t itemsize, size_t nbytes)
{
    int64_t numel = 1, end;
    for (int d = 0; d < n; d++)
        if (__builtin_mul_overflow(numel, size[d], &numel))
            goto out;
    if (numel == 0) {
        if (__builtin_mul_overflow(offset, (int64_t)itemsize, &end) || (uint64_t)end > nbytes)
            goto out;
        return 0;
    }
    if (cddp_span_end(n, size, stride, offset, &end) < 0 ||
        __builtin_mul_overflow(end, (int64_t)itemsize, &end) || (uint64_t)end > nbytes)
        goto out;
    return 0;
out:
    PyErr_Format(PyExc_ValueError, "_storage_view: a view at offset %lld with these sizes and "
                 "strides reaches past the end of its storage (%zu bytes)", (long long)offset,
                 nbytes);
    return -1;
}

static PyObject *py_storage_info(PyObject *m, PyObject *arg)
{
    TensorObject *t = (TensorObject *)arg;
    if (!cddp_tensor_check(arg)) {
        PyErr_Format(PyExc_TypeError, "_storage_info: expected a Tensor, got %s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)t->storage,
                         (unsigned long long)t->storage->nbytes);
}

static PyObject *py_storage_view(PyObject *m, PyObject *args)
{
    PyObject *base, *size_obj, *stride_obj;
    long long offset;
    int64_t size[CDDP_MAX_DIMS], stride[CDDP_MAX_DIMS];
    int n, ns;
    TensorObject *b;
    if (!PyArg_ParseTuple(args, "OLOO:_storage_view", &base, &offset, &size_obj, &stride_obj))
        return NULL;
    if (!cddp_tensor_check(base)) {
        PyErr_Format(PyExc_TypeError, "_storage_view: expected a Tensor, got %s",
                     Py_TYPE(base)->tp_name);
        return NULL;
    }
    b = (TensorObject *)base;
    if ((n = parse_dims(size_obj, "size", size)) < 0 ||
        (ns = parse_dims(stride_obj, "stride", stride)) < 0)
        return NULL;
    if (n != ns) {
        PyErr_Format(PyExc_ValueError, "_storage_view: size has %d dimensions but stride has "
                     "%d", n, ns);
        return NULL;
    }
    if (offset < 0) {
        PyErr_Format(PyExc_ValueError, "_storage_view: offset %lld is negative", offset);
        return NULL;
    }
    if (check_bounds(n, size, stride, offset, cddp_dtype_size[b->dtype], b->storage->nbytes) < 0)
        return NULL;
    return (PyObject *)cddp_tensor_alias(b, n, size, stride, offset);
}

/* t takes view's geometry. Contract: view is a view of t's storage made from t (in bounds
 * by construction; checked again: same storage, same dtype); refused where autograd would have
 * to record the change (t has history, or requires grad with grad mode on): in-place geometry
 * changes bypass it. Returns t (new reference). */
static PyObject *py_adopt_view(PyObject *m, PyObject *args)
{
    PyObject *a, *b;
    TensorObject *t, *v;
    if (!PyArg_ParseTuple(args, "OO:_adopt_view", &a, &b))
        return NULL;
    if (!cddp_tensor_check(a) || !cddp_tensor_check(b)) {
        PyErr_SetString(PyExc_TypeError, "_adopt_view: expected two Tensors");
        return NULL;
    }
    t = (TensorObject *)a;
    v = (TensorObject *)b;
    if (v->storage != t->storage || v->dtype != t->dtype) {
        PyErr_SetString(PyExc_ValueError, "_adopt_view: the view is not of this tensor's storage");
        return NULL;
    }
    if (t->grad_fn || (t->requires_grad && cddp_grad_enabled)) {
        PyErr_SetString(PyExc_RuntimeError, "in-place shape operations (unsqueeze_, squeeze_, "
                        "t_, transpose_, as_strided_) are not supported on a tensor that "
                        "requires grad in cddp; use the out-of-place form (x = x.unsqueeze(d)) "
                        "or run it under no_grad");
        return NULL;
    }
    t->ndim = v->ndim;
    t->offset = v->offset;
    memcpy(t->shape, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    memcpy(t->strides, v->strides, sizeof(int64_t) * (size_t)v->ndim);
    return Py_NewRef(a);
}

PyMethodDef cddp_storage_view_module_methods[] = {
    {"_adopt_view", py_adopt_view, METH_VARARGS,
     "_adopt_view(t, view) -> t with view's shape, strides and offset (in-place shape ops)"},
    {"_storage_info", py_storage_info, METH_O,
     "_storage_info(t) -> (key, nbytes) of t's storage (key: its identity while t lives)"},
    {"_storage_view", py_storage_view, METH_VARARGS,
     "_storage_view(t, offset, size, stride) -> a history-free view of t's storage, bounds "
     "checked (torch's Tensor.set_(storage, offset, size, stride))"},
    {NULL},
};
