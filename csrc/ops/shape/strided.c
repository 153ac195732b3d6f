/* ops/shape/strided.c — as_strided: a view of the input's storage with any sizes, strides and
 * storage offset (torch.as_strided, Tensor.as_strided; Longformer's sliding chunks, framing a
 * signal into overlapping windows).
 *
 *   as_strided(input, size, stride, storage_offset=None) -> view      AsStridedBackward0
 *   Tensor.as_strided_ (cddp/_compat.py) adopts such a view's geometry (_C._adopt_view)
 *
 * Strides and the offset are in elements of the storage, not of the input's layout (the
 * input's own strides do not matter); storage_offset defaults to the input's. The view may
 * overlap itself. Checks and messages are torch's (negative strides, negative sizes, a view
 * reaching past the storage's end).
 *
 * Backward (torch's as_strided_backward): the output gradient is scattered into a zeroed
 * buffer over the storage positions the input and the output span, accumulating where the
 * output overlaps itself; the input's gradient reads its own positions from that buffer,
 * divided by how many input elements share a position when the input overlaps itself.
 * Positions of the output outside the input's receive nothing. Sums in float32 (float64 for
 * float64), the result cast to the input's dtype.
 *
 * Node geometry (node->ibuf): [ndim_out, offset_out, sizes_out..., strides_out...,
 * offset_in, strides_in...]; the input's shape and dtype are node->meta[0].
 */
#include "ops/shape/shape.h"
#include "module.h"
#include <string.h>

/* Storage span [lo, hi) of a geometry (core's cddp_span_end): -1 on int64 overflow. */
static int span_of(int nd, const int64_t *shape, const int64_t *st, int64_t off, int64_t *lo,
                   int64_t *hi)
{
    *lo = off;
    return cddp_span_end(nd, shape, st, off, hi);
}

/* Calls fn(pos, k) for every element, k its C-order index and pos its storage position. */
#define FOR_EACH_POSITION(nd, shape, st, off, BODY)                                           \
    do {                                                                                      \
        int64_t idx_[CDDP_MAX_DIMS] = {0}, pos = (off), k = 0, n_ = 1;                        \
        for (int d_ = 0; d_ < (nd); d_++)                                                     \
            n_ *= (shape)[d_];                                                                \
        for (; k < n_; k++) {                                                                 \
            BODY;                                                                             \
            for (int d_ = (nd) - 1; d_ >= 0; d_--) {                                          \
                pos += (st)[d_];                                                              \
                if (++idx_[d_] < (shape)[d_])                                                 \
                    break;                                                                    \
                pos -= idx_[d_] * (st)[d_];                                                   \
                idx_[d_] = 0;                                                                 \
            }                                                                                 \
        }                                                                                     \
    } while (0)

#define DEFINE_SCATTER(T, SFX)                                                                \
static void scatter_##SFX(const int64_t *g, const cddp_meta *m, const T *gy, T *buf,          \
                          T *count, T *gx, int64_t lo, int overlapping)                       \
{                                                                                             \
    int nd = (int)g[0];                                                                       \
    const int64_t *ysh = g + 2, *yst = g + 2 + nd, *xst = g + 3 + 2 * nd;                     \
    int64_t xoff = g[2 + 2 * nd];                                                             \
    FOR_EACH_POSITION(nd, ysh, yst, g[1], buf[pos - lo] += gy[k]);                            \
    if (overlapping)                                                                          \
        FOR_EACH_POSITION(m->ndim, m->shape, xst, xoff, count[pos - lo] += (T)1);             \
    FOR_EACH_POSITION(m->ndim, m->shape, xst, xoff,                                           \
                      gx[k] = overlapping ? buf[pos - lo] / count[pos - lo] : buf[pos - lo]); \
}
DEFINE_SCATTER(float, f32)
DEFINE_SCATTER(double, f64)

static int as_strided_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    const cddp_meta *m = &self->meta[0];
    const int64_t *g = self->ibuf;
    int nd = (int)g[0], ovl;
    const int64_t *xst = g + 3 + 2 * nd;
    cddp_dtype acc = m->dtype == CDDP_FLOAT64 ? CDDP_FLOAT64 : CDDP_FLOAT32;
    int64_t ylo, yhi, xlo, xhi, lo, len;
    TensorObject *gy = NULL, *buf = NULL, *cnt = NULL, *gx = NULL;
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    /* both spans were checked when the view was made */
    (void)span_of(nd, g + 2, g + 2 + nd, g[1], &ylo, &yhi);
    (void)span_of(m->ndim, m->shape, xst, g[2 + 2 * nd], &xlo, &xhi);
    lo = ylo < xlo ? ylo : xlo;
    len = (yhi > xhi ? yhi : xhi) - lo;
    ovl = cddp_self_overlapping(m->ndim, m->shape, xst);
    gy = cddp_tensor_cast_raw(gout[0], acc);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy || !(buf = cddp_tensor_new(acc, 1, &len, 1)) ||
        (ovl && !(cnt = cddp_tensor_new(acc, 1, &len, 1))) ||
        !(gx = cddp_tensor_new(acc, m->ndim, m->shape, 0)))
        goto done;
    {
        const void *gyp = cddp_data(gy);
        void *bp = cddp_data(buf), *cp = cnt ? cddp_data(cnt) : NULL, *xp = cddp_data(gx);
        Py_BEGIN_ALLOW_THREADS
        if (acc == CDDP_FLOAT32)
            scatter_f32(g, m, gyp, bp, cp, xp, lo, ovl);
        else
            scatter_f64(g, m, gyp, bp, cp, xp, lo, ovl);
        Py_END_ALLOW_THREADS
    }
    gin[0] = acc == m->dtype ? (TensorObject *)Py_NewRef(gx) : cddp_tensor_cast_raw(gx, m->dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(gy);
    Py_XDECREF(buf);
    Py_XDECREF(cnt);
    Py_XDECREF(gx);
    return rc;
}

/* torch's checks; -1 with the exception set. */
static int check_geometry(TensorObject *x, int nd, const int64_t *size, int ns,
                          const int64_t *st, int64_t off)
{
    char a[256], b[256];
    int64_t lo, hi;
    size_t isz = cddp_dtype_size[x->dtype];
    if (nd != ns) {
        PyErr_Format(PyExc_RuntimeError, "mismatch in length of strides and shape");
        return -1;
    }
    for (int d = 0; d < nd; d++) {
        if (st[d] < 0) {
            cddp_shape_format(a, sizeof a, nd, st);
            PyErr_Format(PyExc_RuntimeError, "as_strided: Negative strides are not supported at "
                         "the moment, got strides: %s", a);
            return -1;
        }
        if (size[d] < 0) {
            cddp_shape_format(a, sizeof a, nd, size);
            cddp_shape_format(b, sizeof b, nd, st);
            PyErr_Format(PyExc_RuntimeError, "Storage size calculation overflowed with sizes=%s "
                         "and strides=%s", a, b);
            return -1;
        }
    }
    if (off < 0) {
        PyErr_Format(PyExc_RuntimeError, "Tensor: invalid storage offset %lld", (long long)off);
        return -1;
    }
    if (span_of(nd, size, st, off, &lo, &hi) < 0 || hi > INT64_MAX / (int64_t)isz) {
        cddp_shape_format(a, sizeof a, nd, size);
        cddp_shape_format(b, sizeof b, nd, st);
        PyErr_Format(PyExc_RuntimeError, "Storage size calculation overflowed with sizes=%s "
                     "and strides=%s", a, b);
        return -1;
    }
    if (hi > lo && (size_t)hi * isz > x->storage->nbytes) {
        cddp_shape_format(a, sizeof a, nd, size);
        cddp_shape_format(b, sizeof b, nd, st);
        PyErr_Format(PyExc_RuntimeError, "setStorage: sizes %s, strides %s, storage offset "
                     "%lld, and itemsize %zu requiring a storage size of %lld are out of bounds "
                     "for storage of size %zu", a, b, (long long)off, isz,
                     (long long)((size_t)hi * isz), x->storage->nbytes);
        return -1;
    }
    return 0;
}

/* A sequence of ints (torch's IntArrayRef; a bare int is refused, as torch's as_strided). */
static int int_seq(PyObject *o, const char *what, int *n, int64_t *out)
{
    if (!PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError, "as_strided(): argument '%s' must be tuple of ints, not "
                     "%s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    return cddp_shape_int_list("as_strided", &o, 1, n, out);
}

static PyObject *as_strided_impl(TensorObject *x, PyObject *so, PyObject *sto, PyObject *oo)
{
    int64_t size[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], off = x->offset;
    int nd, ns, err;
    TensorObject *y;
    NodeObject *node;
    if (int_seq(so, "size", &nd, size) < 0 || int_seq(sto, "stride", &ns, st) < 0 ||
        (oo && oo != Py_None && cddp_shape_get_int(oo, "as_strided", "storage_offset",
                                                   &off) < 0) ||
        check_geometry(x, nd, size, ns, st, off) < 0)
        return NULL;
    if (!(y = cddp_tensor_alias(x, nd, size, st, off)))
        return NULL;
    node = cddp_shape_record(x, y, "AsStridedBackward0", as_strided_backward, &err);
    if (err) {
        Py_DECREF(y);
        return NULL;
    }
    if (node) {
        int64_t *g = PyMem_Malloc(sizeof(int64_t) * (size_t)(3 + 2 * nd + x->ndim));
        if (!g) {
            Py_DECREF(node);
            Py_DECREF(y);
            return PyErr_NoMemory();
        }
        g[0] = nd;
        g[1] = off;
        memcpy(g + 2, size, sizeof(int64_t) * (size_t)nd);
        memcpy(g + 2 + nd, st, sizeof(int64_t) * (size_t)nd);
        g[2 + 2 * nd] = x->offset;
        memcpy(g + 3 + 2 * nd, x->strides, sizeof(int64_t) * (size_t)x->ndim);
        node->ibuf = g;
        Py_DECREF(node);
    }
    return (PyObject *)y;
}

static PyObject *as_strided_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kw)
{
    static const char *const names[] = {"input", "size", "stride", "storage_offset"};
    PyObject *a[4] = {NULL};
    if (self) {
        if (cddp_shape_parse_args("as_strided", args, nargs, kw, names + 1, 3, 3, a + 1) < 0)
            return NULL;
        a[0] = self;
    } else if (cddp_shape_parse_args("as_strided", args, nargs, kw, names, 4, 4, a) < 0 ||
               (a[0] && cddp_shape_check_tensor(a[0], "as_strided", "input") < 0)) {
        return NULL;
    }
    if (!a[0] || !a[1] || !a[2]) {
        PyErr_Format(PyExc_TypeError, "as_strided() missing required argument '%s'",
                     !a[0] ? "input" : !a[1] ? "size" : "stride");
        return NULL;
    }
    return as_strided_impl((TensorObject *)a[0], a[1], a[2], a[3]);
}

static PyObject *t_as_strided(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return as_strided_binding(s, a, n, kw);
}

static PyObject *m_as_strided(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return as_strided_binding(NULL, a, n, kw);
}

/* _C._as_strided_positions(node): for this op's AsStridedBackward0 node, (positions of the
 * output's elements, positions of the input's elements, length) — int64 tensors of the
 * output's and the input's shapes holding storage positions relative to the lowest either
 * spans, and the span's length; None for any other node. The higher-order engine's formula
 * (cddp/autograd/_higher/shape.py) rebuilds the backward from them with index_add /
 * index_select, which it can differentiate again. */
static PyObject *py_as_strided_positions(PyObject *m, PyObject *arg)
{
    NodeObject *node = (NodeObject *)arg;
    const cddp_meta *mt;
    const int64_t *g;
    int nd;
    int64_t ylo, yhi, xlo, xhi, lo, *yp, *xp;
    TensorObject *ypos, *xpos;
    if (!PyObject_TypeCheck(arg, cddp_state()->node_type)) {
        PyErr_SetString(PyExc_TypeError, "_as_strided_positions expects an autograd Node");
        return NULL;
    }
    if (node->backward != as_strided_backward || !node->ibuf)
        Py_RETURN_NONE;
    mt = &node->meta[0];
    g = node->ibuf;
    nd = (int)g[0];
    (void)span_of(nd, g + 2, g + 2 + nd, g[1], &ylo, &yhi);     /* checked at the forward */
    (void)span_of(mt->ndim, mt->shape, g + 3 + 2 * nd, g[2 + 2 * nd], &xlo, &xhi);
    lo = ylo < xlo ? ylo : xlo;
    ypos = cddp_tensor_new(CDDP_INT64, nd, g + 2, 0);
    xpos = ypos ? cddp_tensor_new(CDDP_INT64, mt->ndim, mt->shape, 0) : NULL;
    if (!xpos) {
        Py_XDECREF(ypos);
        return NULL;
    }
    yp = (int64_t *)cddp_data(ypos);
    xp = (int64_t *)cddp_data(xpos);
    FOR_EACH_POSITION(nd, g + 2, g + 2 + nd, g[1], yp[k] = pos - lo);
    FOR_EACH_POSITION(mt->ndim, mt->shape, g + 3 + 2 * nd, g[2 + 2 * nd], xp[k] = pos - lo);
    return Py_BuildValue("(NNL)", ypos, xpos, (long long)((yhi > xhi ? yhi : xhi) - lo));
}

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_strided_tensor_methods[] = {
    {"as_strided", FN(t_as_strided), FK,
     "as_strided(size, stride, storage_offset=None): a view of the storage"},
    {NULL},
};

PyMethodDef cddp_strided_module_methods[] = {
    {"as_strided", FN(m_as_strided), FK,
     "as_strided(input, size, stride, storage_offset=None) -> view of input's storage"},
    {"_as_strided_positions", py_as_strided_positions, METH_O,
     "_as_strided_positions(node) -> (output positions, input positions, length) | None"},
    {NULL},
};
