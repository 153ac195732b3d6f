/* ops/shape/tri.c — triangles and diagonals of matrices (and batches of them).
 *
 * Mirrors torch:
 *   tril / triu(input, diagonal=0)  (+ Tensor.tril_ / triu_)    TrilBackward0 / TriuBackward0
 *   diagonal(input, offset=0, dim1=0, dim2=1)      a view       DiagonalBackward0
 *   diag_embed(input, offset=0, dim1=-2, dim2=-1)  a copy       DiagEmbedBackward0
 *   diag(input, diagonal=0)    1-D -> (n+|d|, n+|d|) matrix (diag_embed), 2-D -> its diagonal
 *   trace(input)               sum of a matrix's diagonal       TraceBackward0
 *
 * Legend: x (..., M, N) for tril/triu (the last two dims are the matrix); element (i, j) is on
 * diagonal j - i. tril keeps j - i <= diagonal, triu keeps j - i >= diagonal.
 *
 * The diagonal of dims (d1, d2) at offset k is the strided view that drops d1 and d2 and adds
 * one last dim of stride st[d1] + st[d2]: no copy. diag_embed writes into that view of a zeroed
 * output; every backward here is the opposite one of these two moves, so they stay O(numel).
 * tril/triu copy the input once and zero the other triangle row by row (memset on contiguous
 * rows); zero bits are 0 / 0.0 / false in every dtype, so the kernel is dtype-free.
 */
#include "amp/amp.h"
#include "ops/shape/shape.h"
#include "module.h"
#include <string.h>

/* ---- geometry ------------------------------------------------------------------------- */

/* The diagonal view of t over dims d1 != d2 (wrapped) at offset k: the other dims in order,
 * then the diagonal. Fills nd/shape/strides/offset. */
static void diag_geom(const TensorObject *t, int64_t k, int d1, int d2, int *nd, int64_t *shape,
                      int64_t *strides, int64_t *offset)
{
    int64_t len, s1 = t->shape[d1], s2 = t->shape[d2];
    int n = 0;
    len = k >= 0 ? (s2 - k < s1 ? s2 - k : s1) : (s1 + k < s2 ? s1 + k : s2);
    len = len > 0 ? len : 0;
    *offset = t->offset;
    if (len > 0)                     /* an empty diagonal keeps the base offset (in bounds) */
        *offset += k >= 0 ? k * t->strides[d2] : -k * t->strides[d1];
    for (int d = 0; d < t->ndim; d++) {
        if (d == d1 || d == d2)
            continue;
        shape[n] = t->shape[d];
        strides[n++] = t->strides[d];
    }
    shape[n] = len;
    strides[n++] = t->strides[d1] + t->strides[d2];
    *nd = n;
}

/* Alias of t's diagonal (no history). */
static TensorObject *diag_alias(TensorObject *t, int64_t k, int d1, int d2)
{
    int nd;
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], off;
    diag_geom(t, k, d1, d2, &nd, sh, st, &off);
    return cddp_tensor_alias(t, nd, sh, st, off);
}

/* Wrap dim1/dim2 against ndim and refuse equal dims (torch's text). */
static int diag_dims(int64_t a, int64_t b, int ndim, int *d1, int *d2)
{
    int64_t x, y;
    if (cddp_shape_wrap_dim(a, ndim, &x) < 0 || cddp_shape_wrap_dim(b, ndim, &y) < 0)
        return -1;
    if (x == y) {
        PyErr_Format(PyExc_RuntimeError, "diagonal dimensions cannot be identical %lld, %lld",
                     (long long)a, (long long)b);
        return -1;
    }
    *d1 = (int)x;
    *d2 = (int)y;
    return 0;
}

/* A zeroed tensor of (ndim, shape) whose diagonal (k, d1, d2) holds src (broadcast, cast).
 * New reference. */
static TensorObject *embed_raw(TensorObject *src, cddp_dtype dt, int ndim, const int64_t *shape,
                               int64_t k, int d1, int d2)
{
    TensorObject *out = cddp_tensor_new(dt, ndim, shape, 1), *v;
    if (!out)
        return NULL;
    v = diag_alias(out, k, d1, d2);
    if (!v || cddp_copy_into(v, src) < 0)
        Py_CLEAR(out);
    Py_XDECREF(v);
    return out;
}

/* ---- tril / triu ---------------------------------------------------------------------- */

/* Zero, in place, the elements of every (M, N) matrix of t (any strides) outside the kept
 * triangle: upper = 0 keeps j - i <= k (tril), upper = 1 keeps j - i >= k (triu). */
static void tri_zero(TensorObject *t, int64_t k, int upper)
{
    int nb = t->ndim - 2;
    int64_t M = t->shape[nb], N = t->shape[nb + 1], rs = t->strides[nb], cs = t->strides[nb + 1];
    int64_t nbatch = 1, idx[CDDP_MAX_DIMS] = {0}, boff = 0;
    size_t isz = cddp_dtype_size[t->dtype];
    char *base = cddp_data(t);
    for (int d = 0; d < nb; d++)
        nbatch *= t->shape[d];
    if (M == 0 || N == 0)
        return;
    for (int64_t b = 0; b < nbatch; b++) {
        for (int64_t i = 0; i < M; i++) {
            /* zeroed columns of row i: [lo, hi) */
            int64_t lo = upper ? 0 : i + k + 1, hi = upper ? i + k : N;
            lo = lo < 0 ? 0 : lo > N ? N : lo;
            hi = hi < 0 ? 0 : hi > N ? N : hi;
            char *row = base + (boff + i * rs) * (int64_t)isz;
            if (hi <= lo)
                continue;
            if (cs == 1)
                memset(row + lo * (int64_t)isz, 0, (size_t)(hi - lo) * isz);
            else
                for (int64_t j = lo; j < hi; j++)
                    memset(row + j * cs * (int64_t)isz, 0, isz);
        }
        for (int d = nb - 1; d >= 0; d--) {          /* odometer over the batch dims */
            boff += t->strides[d];
            if (++idx[d] < t->shape[d])
                break;
            boff -= t->strides[d] * t->shape[d];
            idx[d] = 0;
        }
    }
}

/* i[0] = diagonal, i[1] = upper: the gradient is the same triangle of g. */
static int tri_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g;
    if (!gout[0] || !self->next[0].node)
        return 0;
    g = cddp_tensor_new(gout[0]->dtype, gout[0]->ndim, gout[0]->shape, 0);
    if (!g || cddp_copy_into(g, gout[0]) < 0) {
        Py_XDECREF(g);
        return -1;
    }
    tri_zero(g, self->i[0], (int)self->i[1]);
    gin[0] = g;
    return 0;
}

static PyObject *tri_impl(TensorObject *x, PyObject *ko, int upper, int inplace)
{
    const char *fn = upper ? (inplace ? "triu_" : "triu") : (inplace ? "tril_" : "tril");
    const char *name = upper ? "TriuBackward0" : "TrilBackward0";
    int64_t k = 0, p[2];
    TensorObject *out;
    NodeObject *node;
    int err = 0;
    if (ko && cddp_shape_get_int(ko, fn, "diagonal", &k) < 0)
        return NULL;
    if (x->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "%.4s: input tensor must have at least 2 dimensions",
                     fn);
        return NULL;
    }
    p[0] = k;
    p[1] = upper;
    if (!inplace) {
        out = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
        if (!out || cddp_copy_into(out, x) < 0) {
            Py_XDECREF(out);
            return NULL;
        }
        tri_zero(out, k, upper);
        if (!cddp_is_floating(x->dtype))
            return (PyObject *)out;
        return cddp_shape_finish(x, out, name, tri_backward, p, 2);
    }
    if (cddp_check_inplace(x) < 0)
        return NULL;
    /* the node's edge is x's history before the write; x then carries the node */
    node = cddp_is_floating(x->dtype) ? cddp_maybe_node(name, tri_backward, 1, &x, &err) : NULL;
    if (cddp_is_floating(x->dtype) && err)
        return NULL;
    tri_zero(x, k, upper);
    cddp_bump_version(x);
    if (node) {
        node->i[0] = k;
        node->i[1] = upper;
        err = cddp_set_inplace_history(x, node, 0);
        Py_DECREF(node);
        if (err < 0)
            return NULL;
    }
    return Py_NewRef((PyObject *)x);
}

/* ---- diagonal / diag_embed / diag / trace --------------------------------------------- */

/* DiagonalBackward0: i[0] offset, i[1] dim1, i[2] dim2; g lands on that diagonal of zeros of
 * the input's shape. */
static int diagonal_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    const cddp_meta *m = &self->meta[0];
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = embed_raw(gout[0], m->dtype, m->ndim, m->shape, self->i[0], (int)self->i[1],
                       (int)self->i[2]);
    return gin[0] ? 0 : -1;
}

/* DiagEmbedBackward0: the gradient is g's diagonal (i[0..2] as above), copied. */
static int diag_embed_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *v;
    if (!gout[0] || !self->next[0].node)
        return 0;
    v = diag_alias(gout[0], self->i[0], (int)self->i[1], (int)self->i[2]);
    if (!v)
        return -1;
    gin[0] = cddp_tensor_contiguous_raw(v);
    Py_DECREF(v);
    return gin[0] ? 0 : -1;
}

static PyObject *diagonal_impl(TensorObject *x, int64_t k, int64_t a, int64_t b)
{
    int d1, d2;
    int64_t p[3];
    if (diag_dims(a, b, x->ndim, &d1, &d2) < 0)
        return NULL;
    if (x->ndim < 2) {               /* a 1-D input wraps both dims to 0 */
        PyErr_Format(PyExc_RuntimeError, "diagonal dimensions cannot be identical %lld, %lld",
                     (long long)a, (long long)b);
        return NULL;
    }
    p[0] = k;
    p[1] = d1;
    p[2] = d2;
    return cddp_shape_finish(x, diag_alias(x, k, d1, d2), "DiagonalBackward0",
                             diagonal_backward, p, 3);
}

static PyObject *diag_embed_impl(TensorObject *x, int64_t k, int64_t a, int64_t b)
{
    int d1, d2, nd = x->ndim + 1;
    int64_t shape[CDDP_MAX_DIMS], p[3], n;
    if (x->ndim >= CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return NULL;
    }
    if (x->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "diag_embed(): input must be at least 1-D");
        return NULL;
    }
    if (diag_dims(a, b, nd, &d1, &d2) < 0)
        return NULL;
    n = x->shape[x->ndim - 1] + (k >= 0 ? k : -k);
    for (int d = 0, s = 0; d < nd; d++)
        shape[d] = d == d1 || d == d2 ? n : x->shape[s++];
    p[0] = k;
    p[1] = d1;
    p[2] = d2;
    return cddp_shape_finish(x, embed_raw(x, x->dtype, nd, shape, k, d1, d2),
                             "DiagEmbedBackward0", diag_embed_backward, p, 3);
}

static PyObject *diag_impl(TensorObject *x, int64_t k)
{
    PyObject *v, *out;
    if (x->ndim == 1)
        return diag_embed_impl(x, k, 0, 1);
    if (x->ndim != 2) {
        PyErr_Format(PyExc_RuntimeError, "diag(): Supports 1D or 2D tensors. Got %dD", x->ndim);
        return NULL;
    }
    /* the diagonal, copied: a view op followed by a clone, as torch's composite */
    v = diagonal_impl(x, k, 0, 1);
    if (!v)
        return NULL;
    out = PyObject_CallMethod(v, "clone", NULL);
    Py_DECREF(v);
    return out;
}

/* TraceBackward0: g (0-dim) on the diagonal of a zero matrix of the input's shape. */
static int trace_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    const cddp_meta *m = &self->meta[0];
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = embed_raw(gout[0], m->dtype, m->ndim, m->shape, 0, 0, 1);
    return gin[0] ? 0 : -1;
}

static PyObject *trace_impl(TensorObject *x)
{
    TensorObject *v, *out;
    int64_t n;
    double s = 0;
    int64_t si = 0;
    if (x->ndim != 2) {
        PyErr_Format(PyExc_RuntimeError, "trace: expected a matrix, but got tensor with dim %d",
                     x->ndim);
        return NULL;
    }
    if (x->dtype == CDDP_BOOL) {
        PyErr_SetString(PyExc_NotImplementedError, "\"trace\" not implemented for 'Bool'");
        return NULL;
    }
    v = diag_alias(x, 0, 0, 1);
    if (!v)
        return NULL;
    n = v->shape[0];
    /* the diagonal of a matrix is at most min(M, N) elements: one pass, double / int64 */
    for (int64_t i = 0; i < n; i++) {
        const char *p = cddp_data(v) + i * v->strides[0] * (int64_t)cddp_dtype_size[v->dtype];
        if (v->dtype == CDDP_INT64)
            si += *(const int64_t *)p;
        else if (cddp_is_floating(v->dtype))
            s += cddp_get_double(v, i);
        else                            /* int32 and narrower: exact through double */
            si += (int64_t)cddp_get_double(v, i);
    }
    Py_DECREF(v);
    if (!cddp_is_floating(x->dtype)) {
        out = cddp_tensor_new(CDDP_INT64, 0, NULL, 0);
        if (out)
            *(int64_t *)cddp_data(out) = si;
        return (PyObject *)out;
    }
    out = cddp_scalar_tensor(s, x->dtype);
    return cddp_shape_finish(x, out, "TraceBackward0", trace_backward, NULL, 0);
}

/* ---- bindings ------------------------------------------------------------------------- */

/* Optional int arguments (absent: dflt[i]) from parsed objects. */
static int ints_or(PyObject **a, int n, const char *fn, const char *const *names,
                   const int64_t *dflt, int64_t *v)
{
    for (int i = 0; i < n; i++) {
        v[i] = dflt[i];
        if (a[i] && cddp_shape_get_int(a[i], fn, names[i], &v[i]) < 0)
            return -1;
    }
    return 0;
}

/* self == NULL: module form, the input is the first argument (positional or `input`). */
static TensorObject *self_or_input(PyObject *self, PyObject *const *args, Py_ssize_t *nargs,
                                   PyObject *const **rest, const char *fn)
{
    if (self) {
        *rest = args;
        return (TensorObject *)self;
    }
    if (*nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'input' (pos 1)", fn);
        return NULL;
    }
    if (cddp_shape_check_tensor(args[0], fn, "input") < 0)
        return NULL;
    *rest = args + 1;
    (*nargs)--;
    return (TensorObject *)args[0];
}

static PyObject *tri_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kw, int upper, int inplace)
{
    static const char *const names[] = {"diagonal"};
    const char *fn = upper ? "triu" : "tril";
    PyObject *const *rest;
    PyObject *a[1];
    TensorObject *x = self_or_input(self, args, &nargs, &rest, fn);
    if (!x || cddp_shape_parse_args(fn, rest, nargs, kw, names, 1, 1, a) < 0)
        return NULL;
    return tri_impl(x, a[0], upper, inplace);
}

#define TRI(NAME, UP, INPL)                                                                \
    static PyObject *NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)     \
    {                                                                                      \
        return tri_binding(s, a, n, kw, UP, INPL);                                         \
    }
TRI(t_tril, 0, 0)
TRI(t_triu, 1, 0)
TRI(t_tril_, 0, 1)
TRI(t_triu_, 1, 1)

static PyObject *m_tril(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return tri_binding(NULL, a, n, kw, 0, 0);
}

static PyObject *m_triu(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return tri_binding(NULL, a, n, kw, 1, 0);
}

/* diagonal (which = 0) and diag_embed (1): (offset, dim1, dim2) with their defaults */
static PyObject *diag3_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw, int which)
{
    static const char *const names[] = {"offset", "dim1", "dim2"};
    static const int64_t dflt[2][3] = {{0, 0, 1}, {0, -2, -1}};
    const char *fn = which ? "diag_embed" : "diagonal";
    PyObject *const *rest;
    PyObject *a[3];
    int64_t v[3];
    TensorObject *x = self_or_input(self, args, &nargs, &rest, fn);
    if (!x || cddp_shape_parse_args(fn, rest, nargs, kw, names, 3, 3, a) < 0 ||
        ints_or(a, 3, fn, names, dflt[which], v) < 0)
        return NULL;
    return which ? diag_embed_impl(x, v[0], v[1], v[2]) : diagonal_impl(x, v[0], v[1], v[2]);
}

static PyObject *t_diagonal(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag3_binding(s, a, n, kw, 0);
}
static PyObject *m_diagonal(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag3_binding(NULL, a, n, kw, 0);
}
static PyObject *t_diag_embed(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag3_binding(s, a, n, kw, 1);
}
static PyObject *m_diag_embed(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag3_binding(NULL, a, n, kw, 1);
}

static PyObject *diag_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"diagonal"};
    static const int64_t dflt[1] = {0};
    PyObject *const *rest;
    PyObject *a[1];
    int64_t k;
    TensorObject *x = self_or_input(self, args, &nargs, &rest, "diag");
    if (!x || cddp_shape_parse_args("diag", rest, nargs, kw, names, 1, 1, a) < 0 ||
        ints_or(a, 1, "diag", names, dflt, &k) < 0)
        return NULL;
    return diag_impl(x, k);
}

static PyObject *t_diag(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag_binding(s, a, n, kw);
}
static PyObject *m_diag(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return diag_binding(NULL, a, n, kw);
}

static PyObject *trace_fast(PyObject *x, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return trace_impl((TensorObject *)x);
}

/* trace is on torch's CPU autocast fp32 list: float16 / bfloat16 input sums in float32 there */
static PyObject *trace_gated(TensorObject *x)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_FP32, trace_fast, (PyObject *)x, NULL, 0, NULL);
    return trace_impl(x);
}

static PyObject *t_trace(PyObject *self, PyObject *unused)
{
    return trace_gated((TensorObject *)self);
}

static PyObject *m_trace(PyObject *m, PyObject *x)
{
    if (cddp_shape_check_tensor(x, "trace", "input") < 0)
        return NULL;
    return trace_gated((TensorObject *)x);
}

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_tri_tensor_methods[] = {
    {"tril", FN(t_tril), FK, "tril(diagonal=0): the lower triangle (j - i <= diagonal), copied"},
    {"triu", FN(t_triu), FK, "triu(diagonal=0): the upper triangle (j - i >= diagonal), copied"},
    {"tril_", FN(t_tril_), FK, "in-place tril"},
    {"triu_", FN(t_triu_), FK, "in-place triu"},
    {"diagonal", FN(t_diagonal), FK, "diagonal(offset=0, dim1=0, dim2=1): a view"},
    {"diag_embed", FN(t_diag_embed), FK, "diag_embed(offset=0, dim1=-2, dim2=-1)"},
    {"diag", FN(t_diag), FK, "diag(diagonal=0): 1-D -> matrix, 2-D -> its diagonal"},
    {"trace", t_trace, METH_NOARGS, "trace(): sum of the main diagonal of a matrix"},
    {NULL},
};

PyMethodDef cddp_tri_module_methods[] = {
    {"tril", FN(m_tril), FK, "tril(input, diagonal=0) -> Tensor"},
    {"triu", FN(m_triu), FK, "triu(input, diagonal=0) -> Tensor"},
    {"diagonal", FN(m_diagonal), FK, "diagonal(input, offset=0, dim1=0, dim2=1) -> view"},
    {"diag_embed", FN(m_diag_embed), FK, "diag_embed(input, offset=0, dim1=-2, dim2=-1)"},
    {"diag", FN(m_diag), FK, "diag(input, diagonal=0) -> Tensor"},
    {"trace", m_trace, METH_O, "trace(input) -> Tensor"},
    {NULL},
};
