/* ops/shape/slice.c — views of a part of a tensor, with the backward that scatters the
 * gradient of the part into zeros of the whole.
 *
 * Mirrors torch.Tensor:
 *   narrow(dim, start, length)   SliceBackward0     (start may be negative)
 *   select(dim, index)           SelectBackward0    (one dimension fewer)
 *   split(split_size | [sizes], dim=0)   SplitBackward0 / SplitWithSizesBackward0 per piece
 *   chunk(chunks, dim=0)         ceil(size/chunks) per piece, as torch
 *   unbind(dim=0)                UnbindBackward0 per piece
 *   iter(t)                      iter(t.unbind(0)), as torch's Tensor.__iter__
 *
 * torch gives split/unbind a single multi-output node; cddp's nodes have at most
 * CDDP_NODE_MAX_OUT outputs, so each piece gets its own one-output node, and a backward through
 * k pieces sums k input-sized gradients (O(k * numel) — fine for the few pieces of split/chunk,
 * quadratic when iterating a long tensor and using every row).
 */
#include "ops/shape/shape.h"

/* ---- backwards ------------------------------------------------------------------------ */

/* narrow/split: zeros of the input's shape with the gradient written at [start, start+len)
 * along dim (i[0] = dim, i[1] = start). */
static int narrow_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *m = &self->meta[0];
    TensorObject *z, *v;
    if (!gout[0] || !self->next[0].node)
        return 0;
    z = cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
    if (!z)
        return -1;
    v = cddp_shape_narrow_raw(z, (int)self->i[0], self->i[1], gout[0]->shape[self->i[0]]);
    if (!v || cddp_copy_into(v, gout[0]) < 0) {
        Py_XDECREF(v);
        Py_DECREF(z);
        return -1;
    }
    Py_DECREF(v);
    gin[0] = z;
    return 0;
}

/* select/unbind/iteration: zeros with the gradient at index i[1] of dim i[0]. */
static int select_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *m = &self->meta[0];
    TensorObject *z, *v;
    if (!gout[0] || !self->next[0].node)
        return 0;
    z = cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
    if (!z)
        return -1;
    v = cddp_shape_select_raw(z, (int)self->i[0], self->i[1]);
    if (!v || cddp_copy_into(v, gout[0]) < 0) {
        Py_XDECREF(v);
        Py_DECREF(z);
        return -1;
    }
    Py_DECREF(v);
    gin[0] = z;
    return 0;
}

/* ---- narrow / select / split / chunk / unbind ----------------------------------------- */

static PyObject *narrow_impl(TensorObject *x, int64_t dim, int64_t start, int64_t length,
                             const char *name)
{
    int64_t p[2];
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "narrow() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    if (cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
        return NULL;
    if (length < 0) {
        PyErr_SetString(PyExc_RuntimeError, "narrow(): length must be non-negative.");
        return NULL;
    }
    int64_t size = x->shape[dim];
    if (start < -size || start > size) {
        PyErr_Format(PyExc_IndexError,
                     "start out of range (expected to be in range of [%lld, %lld], but got %lld)",
                     (long long)-size, (long long)size, (long long)start);
        return NULL;
    }
    if (start < 0)
        start += size;
    if (start > size - length) {
        PyErr_Format(PyExc_RuntimeError,
                     "start (%lld) + length (%lld) exceeds dimension size (%lld).",
                     (long long)start, (long long)length, (long long)size);
        return NULL;
    }
    p[0] = dim;
    p[1] = start;
    return cddp_shape_finish(x, cddp_shape_narrow_raw(x, (int)dim, start, length), name,
                             narrow_backward, p, 2);
}

PyObject *cddp_shape_narrow(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"dim", "start", "length"};
    PyObject *a[3];
    int64_t v[3];
    if (cddp_shape_parse_args("narrow", args, nargs, kwnames, names, 3, 3, a) < 0)
        return NULL;
    for (int k = 0; k < 3; k++) {
        if (!a[k]) {
            PyErr_Format(PyExc_TypeError, "narrow() missing required argument '%s'", names[k]);
            return NULL;
        }
        if (cddp_shape_get_int(a[k], "narrow", names[k], &v[k]) < 0)
            return NULL;
    }
    return narrow_impl((TensorObject *)self, v[0], v[1], v[2], "SliceBackward0");
}

/* dim already wrapped and x->ndim > 0. */
static PyObject *select_impl(TensorObject *x, int64_t dim, int64_t index, const char *name)
{
    int64_t p[2];
    if (index < -x->shape[dim] || index >= x->shape[dim]) {
        char buf[256];
        cddp_shape_format(buf, sizeof buf, x->ndim, x->shape);
        PyErr_Format(PyExc_IndexError,
                     "select(): index %lld out of range for tensor of size %s at dimension %lld",
                     (long long)index, buf, (long long)dim);
        return NULL;
    }
    if (index < 0)
        index += x->shape[dim];
    p[0] = dim;
    p[1] = index;
    return cddp_shape_finish(x, cddp_shape_select_raw(x, (int)dim, index), name,
                             select_backward, p, 2);
}

PyObject *cddp_shape_select(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"dim", "index"};
    PyObject *a[2];
    TensorObject *x = (TensorObject *)self;
    int64_t dim, index;
    if (cddp_shape_parse_args("select", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0] || !a[1]) {
        PyErr_SetString(PyExc_TypeError, "select() missing required arguments 'dim' and 'index'");
        return NULL;
    }
    if (cddp_shape_get_int(a[0], "select", "dim", &dim) < 0 ||
        cddp_shape_get_int(a[1], "select", "index", &index) < 0)
        return NULL;
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "select() cannot be applied to a 0-dim tensor.");
        return NULL;
    }
    if (cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
        return NULL;
    return select_impl(x, dim, index, "SelectBackward0");
}

/* Pieces of `sizes` along dim (sum already checked) as a tuple of narrow views. */
static PyObject *split_pieces(TensorObject *x, int64_t dim, int n, const int64_t *sizes,
                              const char *name)
{
    PyObject *tup = PyTuple_New(n);
    int64_t start = 0;
    for (int k = 0; tup && k < n; k++) {
        PyObject *v = narrow_impl(x, dim, start, sizes[k], name);
        if (!v) {
            Py_CLEAR(tup);
            break;
        }
        PyTuple_SET_ITEM(tup, k, v);
        start += sizes[k];
    }
    return tup;
}

/* Equal pieces of `size` (the last may be smaller); n == 0 pieces impossible except size 0. */
static PyObject *split_equal(TensorObject *x, int64_t dim, int64_t size, const char *name)
{
    int64_t len = x->shape[dim], n, *sizes;
    PyObject *res;
    if (size < 0) {
        PyErr_Format(PyExc_RuntimeError, "split expects split_size be non-negative, but got "
                     "split_size=%lld", (long long)size);
        return NULL;
    }
    if (size == 0 && len != 0) {
        PyErr_Format(PyExc_RuntimeError, "split_size can only be 0 if dimension size is 0, but "
                     "got dimension size of %lld", (long long)len);
        return NULL;
    }
    n = size == 0 ? 1 : (len + size - 1) / size;
    if (n == 0)
        n = 1;                           /* torch: an empty dim still yields one piece */
    if (n > INT32_MAX)
        return PyErr_NoMemory();
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)n);
    if (!sizes)
        return PyErr_NoMemory();
    for (int64_t k = 0; k < n; k++)
        sizes[k] = k < n - 1 ? size : len - size * (n - 1);
    res = split_pieces(x, dim, (int)n, sizes, name);
    PyMem_Free(sizes);
    return res;
}

static PyObject *split_impl(TensorObject *x, PyObject *spec, PyObject *dimo)
{
    int64_t dim = 0, size;
    if (!spec) {
        PyErr_SetString(PyExc_TypeError, "split() missing required argument 'split_size'");
        return NULL;
    }
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "split expects at least a 1-dimensional tensor");
        return NULL;
    }
    if ((dimo && cddp_shape_get_int(dimo, "split", "dim", &dim) < 0) ||
        cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
        return NULL;
    if (PyLong_Check(spec) || (PyIndex_Check(spec) && !PyFloat_Check(spec))) {
        if (cddp_shape_get_int(spec, "split", "split_size", &size) < 0)
            return NULL;
        return split_equal(x, dim, size, "SplitBackward0");
    }
    PyObject *fast = PySequence_Fast(spec, "split(): split_size must be an int or a list of ints");
    Py_ssize_t n;
    int64_t *sizes = NULL, total = 0;
    PyObject *res = NULL;
    if (!fast)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    sizes = PyMem_Malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!sizes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (cddp_shape_get_int(PySequence_Fast_GET_ITEM(fast, k), "split", "split_size",
                               &sizes[k]) < 0)
            goto done;
        if (sizes[k] < 0) {
            PyErr_Format(PyExc_RuntimeError, "split_with_sizes expects split_sizes have only "
                         "non-negative entries, but got split_sizes=%R", spec);
            goto done;
        }
        total += sizes[k];
    }
    if (total != x->shape[dim] || n > INT32_MAX) {
        PyErr_Format(PyExc_RuntimeError,
                     "split_with_sizes expects split_sizes to sum exactly to %lld (input tensor's "
                     "size at dimension %lld), but got split_sizes=%R",
                     (long long)x->shape[dim], (long long)dim, spec);
        goto done;
    }
    res = split_pieces(x, dim, (int)n, sizes, "SplitWithSizesBackward0");
done:
    PyMem_Free(sizes);
    Py_DECREF(fast);
    return res;
}

PyObject *cddp_shape_split(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    /* torch.split names its size argument split_size_or_sections, Tensor.split split_size */
    static const char *const names[] = {"split_size", "dim", "split_size_or_sections"};
    PyObject *a[3];
    if (cddp_shape_parse_args("split", args, nargs, kwnames, names, 3, 2, a) < 0)
        return NULL;
    if (a[0] && a[2]) {
        PyErr_SetString(PyExc_TypeError, "split() got multiple values for argument "
                        "'split_size_or_sections'");
        return NULL;
    }
    return split_impl((TensorObject *)self, a[0] ? a[0] : a[2], a[1]);
}

PyObject *cddp_shape_chunk(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames)
{
    static const char *const names[] = {"chunks", "dim"};
    PyObject *a[2];
    TensorObject *x = (TensorObject *)self;
    int64_t chunks, dim = 0;
    if (cddp_shape_parse_args("chunk", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "chunk() missing required argument 'chunks'");
        return NULL;
    }
    if (cddp_shape_get_int(a[0], "chunk", "chunks", &chunks) < 0 ||
        (a[1] && cddp_shape_get_int(a[1], "chunk", "dim", &dim) < 0))
        return NULL;
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "chunk expects at least a 1-dimensional tensor");
        return NULL;
    }
    if (chunks <= 0) {
        PyErr_Format(PyExc_RuntimeError, "chunk expects `chunks` to be greater than 0, got: %lld",
                     (long long)chunks);
        return NULL;
    }
    if (cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
        return NULL;
    int64_t len = x->shape[dim], size = (len + chunks - 1) / chunks;
    if (size == 0 && len == 0) {
        /* torch: chunks empty pieces of an empty dim */
        PyObject *res;
        int64_t *sizes;
        if (chunks > INT32_MAX)
            return PyErr_NoMemory();
        sizes = PyMem_Calloc((size_t)chunks, sizeof(int64_t));
        if (!sizes)
            return PyErr_NoMemory();
        res = split_pieces(x, dim, (int)chunks, sizes, "SplitWithSizesBackward0");
        PyMem_Free(sizes);
        return res;
    }
    return split_equal(x, dim, size, "SplitBackward0");
}

static PyObject *unbind_impl(TensorObject *x, int64_t dim, const char *name)
{
    PyObject *tup;
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_IndexError, "Dimension specified as 0 but tensor has no dimensions");
        return NULL;
    }
    if (cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
        return NULL;
    if (x->shape[dim] > PY_SSIZE_T_MAX / 2)
        return PyErr_NoMemory();
    tup = PyTuple_New((Py_ssize_t)x->shape[dim]);
    for (int64_t k = 0; tup && k < x->shape[dim]; k++) {
        PyObject *v = select_impl(x, dim, k, name);
        if (!v) {
            Py_CLEAR(tup);
            break;
        }
        PyTuple_SET_ITEM(tup, (Py_ssize_t)k, v);
    }
    return tup;
}

PyObject *cddp_shape_unbind(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"dim"};
    PyObject *a[1];
    int64_t dim = 0;
    if (cddp_shape_parse_args("unbind", args, nargs, kwnames, names, 1, 1, a) < 0 ||
        (a[0] && cddp_shape_get_int(a[0], "unbind", "dim", &dim) < 0))
        return NULL;
    return unbind_impl((TensorObject *)self, dim, "UnbindBackward0");
}

/* iter(t) is iter(t.unbind(0)), as torch's Tensor.__iter__. */
PyObject *cddp_tensor_iter(PyObject *self)
{
    PyObject *tup, *it;
    if (((TensorObject *)self)->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d tensor");
        return NULL;
    }
    tup = unbind_impl((TensorObject *)self, 0, "UnbindBackward0");
    if (!tup)
        return NULL;
    it = PyObject_GetIter(tup);
    Py_DECREF(tup);
    return it;
}

