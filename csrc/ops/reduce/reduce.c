/* ops/reduce/reduce.c — sums and friends, plus the machinery every reduction file shares.
 *
 * Mirrors torch.Tensor / torch functions:
 *   sum(dim=None, keepdim=False, *, dtype=None)     SumBackward0 / SumBackward1
 *   mean(dim=None, keepdim=False, *, dtype=None)    MeanBackward0 / MeanBackward1
 *   prod(dim=None, keepdim=False, *, dtype=None)    ProdBackward0 / ProdBackward1
 *   var/std(dim=None, unbiased=True, keepdim=False, *, correction=None)
 *                                                   VarBackward0 / StdBackward0
 *   cumsum(dim, *, dtype=None)                      CumsumBackward0
 *   all/any(dim=None, keepdim=False)                (bool, no gradient)
 * and holds the method tables of ops/reduce/minmax.c, ops/reduce/norm.c and ops/reduce/softmax.c.
 *
 * Layout legend: an input is viewed as a contiguous (outer, R, inner) block where R is the
 * product of the reduced dims (see ops/reduce/reduce.h); outputs are (outer, inner).
 * Accumulation: float32 and float64 sums accumulate in double (pairwise along contiguous
 * rows), so float32 results are at least as accurate as torch's cascade sum; integer and bool
 * sums accumulate in int64 (wrapping, as torch does).
 */
#include "ops/reduce/reduce.h"
#include "module.h"
#include <math.h>
#include <string.h>

/* ---- argument helpers ----------------------------------------------------------------- */

static int kw_is(PyObject *key, const char *name)
{
    return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

int cddp_reduce_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int npos,
                     PyObject **out)
{
    for (int k = 0; k < n; k++)
        out[k] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional argument%s (%zd given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (!kwnames)
        return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(kwnames); j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        int k = 0;
        for (; k < n; k++)
            if (kw_is(key, names[k]) || (strcmp(names[k], "dim") == 0 && kw_is(key, "axis")))
                break;
        if (k == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        if (out[k]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[k]);
            return -1;
        }
        out[k] = args[nargs + j];
    }
    return 0;
}

PyObject *cddp_reduce_as_function(const char *fname, cddp_reduce_meth impl,
                                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *input = NULL, *kw = NULL, *res = NULL;
    PyObject *rest[16];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, k = 0;
    if (nargs >= 1) {
        input = args[0];
        if (!cddp_tensor_check(input))
            goto bad_input;
        return impl(input, args + 1, nargs - 1, kwnames);
    }
    /* input passed by keyword: rebuild the keyword part without it */
    if (nkw > 16) {
        PyErr_Format(PyExc_TypeError, "%s(): too many keyword arguments", fname);
        return NULL;
    }
    if (!(kw = PyTuple_New(nkw ? nkw - 1 : 0)))
        return NULL;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        if (!input && kw_is(key, "input")) {
            input = args[j];
        } else if (k < PyTuple_GET_SIZE(kw)) {
            PyTuple_SET_ITEM(kw, k, Py_NewRef(key));
            rest[k++] = args[j];
        }
    }
    if (!input) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'input' (pos 1)", fname);
        goto done;
    }
    if (!cddp_tensor_check(input))
        goto bad_input;
    res = impl(input, rest, 0, PyTuple_GET_SIZE(kw) ? kw : NULL);
    goto done;
bad_input:
    PyErr_Format(PyExc_TypeError, "%s(): argument 'input' (position 1) must be Tensor, not %s",
                 fname, Py_TYPE(input)->tp_name);
done:
    Py_XDECREF(kw);
    return res;
}

int cddp_reduce_bool(const char *fname, const char *argname, PyObject *o, int dflt)
{
    if (!o)
        return dflt;
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be bool, not %s", fname,
                     argname, Py_TYPE(o)->tp_name);
        return -1;
    }
    return o == Py_True;
}

int cddp_reduce_dtype(PyObject *o, int *has, cddp_dtype *dt)
{
    *has = 0;
    if (!o || o == Py_None)
        return 0;
    if (cddp_dtype_from_py(o, dt) < 0)
        return -1;
    *has = 1;
    return 0;
}

int cddp_reduce_norm_dim(int64_t dim, int ndim, int *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                     -n, n - 1, (long long)dim);
        return -1;
    }
    *out = (int)(dim < 0 ? dim + n : dim);
    return 0;
}

static int is_int_arg(PyObject *o)
{
    return PyIndex_Check(o) && !PyBool_Check(o) && !cddp_tensor_check(o);
}

static int dim_value(const char *fname, PyObject *o, int ndim, int *out)
{
    int64_t v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        PyObject *i = PyNumber_Index(o);
        if (!i)
            return -1;
        v = PyLong_AsLongLong(i);
        Py_DECREF(i);
        if (v == -1 && PyErr_Occurred())
            return -1;
    }
    return cddp_reduce_norm_dim(v, ndim, out);
}

int cddp_reduce_int_dim(const char *fname, PyObject *o, int ndim, int *out)
{
    if (!o || !is_int_arg(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be int, not %s", fname,
                     o ? Py_TYPE(o)->tp_name : "NoneType");
        return -1;
    }
    return dim_value(fname, o, ndim, out);
}

int cddp_reduce_dims(const char *fname, PyObject *o, int ndim, int allow_seq, int empty_all,
                     uint32_t *mask)
{
    uint32_t all = ndim ? (uint32_t)((1u << ndim) - 1) : 0, seen = 0;
    int d;
    if (!o || o == Py_None) {
        *mask = all;
        return 0;
    }
    if (is_int_arg(o)) {
        if (dim_value(fname, o, ndim, &d) < 0)
            return -1;
        *mask = ndim ? 1u << d : 0;
        return 0;
    }
    if (!allow_seq || !(PyTuple_Check(o) || PyList_Check(o))) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be %s, not %s", fname,
                     allow_seq ? "int or tuple of ints" : "int", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    if (n == 0) {
        *mask = empty_all ? all : 0;
        return 0;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(o, k);
        if (!is_int_arg(item)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument 'dim' must be tuple of ints, but found element of "
                         "type %s at pos %zd", fname, Py_TYPE(item)->tp_name, k);
            return -1;
        }
        if (dim_value(fname, item, ndim, &d) < 0)
            return -1;
        if (seen & (1u << d)) {
            PyErr_Format(PyExc_RuntimeError, "dim %d appears multiple times in the list of dims",
                         d);
            return -1;
        }
        seen |= 1u << d;
    }
    *mask = ndim ? seen : 0;
    return 0;
}

const char *cddp_reduce_torch_name(cddp_dtype d)
{
    static const char *const names[CDDP_NDTYPES] = {"Float", "Double", "Long", "Int", "Bool"};
    return names[d];
}

/* ---- plan ----------------------------------------------------------------------------- */

void cddp_rplan_init(cddp_rplan *p, int ndim, const int64_t *shape, uint32_t mask,
                     int keepdim, int rows)
{
    int first = -1, last = -1, run = 1, k = 0;
    p->ndim = ndim;
    memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
    p->mask = mask;
    p->keepdim = keepdim;
    p->permuted = 0;
    p->R = 1;
    for (int d = 0; d < ndim; d++) {
        int red = (mask >> d) & 1;
        if (red) {
            p->R *= shape[d];
            if (shape[d] != 1) {
                if (first < 0)
                    first = d;
                last = d;
            }
        }
        if (!red || keepdim)
            p->out_shape[k++] = red ? 1 : shape[d];
    }
    p->out_ndim = k;
    for (int d = first + 1; first >= 0 && d < last; d++)
        if (shape[d] != 1 && !((mask >> d) & 1))
            run = 0;
    p->outer = 1;
    p->inner = 1;
    if (first < 0) {
        /* only size-1 dims reduced: every element is its own row */
        for (int d = 0; d < ndim; d++)
            p->outer *= shape[d];
        return;
    }
    for (int d = last + 1; d < ndim; d++)
        p->inner *= shape[d];
    if (run && (!rows || p->inner == 1)) {
        for (int d = 0; d < first; d++)
            p->outer *= shape[d];
        return;
    }
    /* reduced dims that are not one run (or rows wanted): kept dims first, reduced last */
    p->permuted = 1;
    p->inner = 1;
    k = 0;
    for (int d = 0; d < ndim; d++)
        if (!((mask >> d) & 1)) {
            p->perm[k++] = d;
            p->outer *= shape[d];
        }
    for (int d = 0; d < ndim; d++)
        if ((mask >> d) & 1)
            p->perm[k++] = d;
}

void cddp_rplan_from_node(cddp_rplan *p, NodeObject *node, int rows)
{
    cddp_rplan_init(p, node->meta[0].ndim, node->meta[0].shape, (uint32_t)node->i[0],
                    (int)node->i[1], rows);
}

TensorObject *cddp_rplan_layout(const cddp_rplan *p, TensorObject *x, cddp_dtype dt)
{
    TensorObject *src, *out;
    if (p->permuted) {
        int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
        for (int k = 0; k < p->ndim; k++) {
            sh[k] = x->shape[p->perm[k]];
            st[k] = x->strides[p->perm[k]];
        }
        src = cddp_tensor_alias(x, p->ndim, sh, st, x->offset);
        if (!src)
            return NULL;
    } else {
        src = (TensorObject *)Py_NewRef(x);
    }
    if (src->dtype == dt && cddp_is_contiguous(src))
        return src;
    out = cddp_tensor_new(dt, src->ndim, src->shape, 0);
    if (out && cddp_copy_into(out, src) < 0)
        Py_CLEAR(out);
    Py_DECREF(src);
    return out;
}

TensorObject *cddp_rplan_new_layout(const cddp_rplan *p, cddp_dtype dt, int zero)
{
    int64_t sh[CDDP_MAX_DIMS];
    for (int k = 0; k < p->ndim; k++)
        sh[k] = p->permuted ? p->shape[p->perm[k]] : p->shape[k];
    return cddp_tensor_new(dt, p->ndim, sh, zero);
}

TensorObject *cddp_rplan_unlayout(const cddp_rplan *p, TensorObject *y)
{
    int64_t st[CDDP_MAX_DIMS];
    TensorObject *out, *view;
    if (!p->permuted)
        return (TensorObject *)Py_NewRef(y);
    out = cddp_tensor_new(y->dtype, p->ndim, p->shape, 0);
    if (!out)
        return NULL;
    for (int k = 0; k < p->ndim; k++)
        st[k] = out->strides[p->perm[k]];
    view = cddp_tensor_alias(out, y->ndim, y->shape, st, 0);
    if (!view || cddp_copy_into(view, y) < 0)
        Py_CLEAR(out);
    Py_XDECREF(view);
    return out;
}

TensorObject *cddp_rplan_grad(const cddp_rplan *p, TensorObject *g, cddp_dtype dt)
{
    TensorObject *c, *out;
    if (g->dtype == dt && cddp_is_contiguous(g))
        return (TensorObject *)Py_NewRef(g);
    c = cddp_tensor_new(dt, g->ndim, g->shape, 0);
    if (!c)
        return NULL;
    out = c;
    if (cddp_copy_into(c, g) < 0)
        Py_CLEAR(out);
    return out;
}

/* ---- kernels -------------------------------------------------------------------------- */

#define LANES 256   /* inner positions accumulated at once on the stack */

/* out (outer, inner) = sum (or mean) over R of x (outer, R, inner). */
#define SUM_KERNEL(NAME, T, PW)                                                          \
    CDDP_HOT static void NAME(const T *x, T *out, int64_t outer, int64_t R, int64_t inner, \
                              int mean)                                                  \
    {                                                                                    \
        double div = mean ? (double)R : 1.0;                                             \
        if (inner == 1) {                                                                \
            for (int64_t o = 0; o < outer; o++)                                          \
                out[o] = (T)(PW(x + o * R, R) / div);                                    \
            return;                                                                      \
        }                                                                                \
        /* columns: four rows per pass halve the traffic on the accumulators */          \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                double acc[LANES];                                                       \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES, r = 0;             \
                const T *xb = x + o * R * inner + i0;                                    \
                for (int64_t i = 0; i < nb; i++)                                         \
                    acc[i] = 0.;                                                         \
                for (; r + 4 <= R; r += 4) {                                             \
                    const T *x0 = xb + r * inner, *x1 = x0 + inner, *x2 = x1 + inner,    \
                            *x3 = x2 + inner;                                            \
                    for (int64_t i = 0; i < nb; i++)                                     \
                        acc[i] += ((double)x0[i] + (double)x1[i]) +                      \
                                  ((double)x2[i] + (double)x3[i]);                       \
                }                                                                        \
                for (; r < R; r++)                                                       \
                    for (int64_t i = 0; i < nb; i++)                                     \
                        acc[i] += xb[r * inner + i];                                     \
                for (int64_t i = 0; i < nb; i++)                                         \
                    out[o * inner + i0 + i] = (T)(acc[i] / div);                         \
            }                                                                            \
    }
SUM_KERNEL(sum_f32, float, cddp_pw_sum_f32)
SUM_KERNEL(sum_f64, double, cddp_pw_sum_f64)

static void sum_i64(const int64_t *x, int64_t *out, int64_t outer, int64_t R, int64_t inner)
{
    for (int64_t o = 0; o < outer; o++) {
        uint64_t *acc = (uint64_t *)(out + o * inner);  /* unsigned: wraps without UB */
        for (int64_t i = 0; i < inner; i++)
            acc[i] = 0;
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < inner; i++)
                acc[i] += (uint64_t)x[(o * R + r) * inner + i];
    }
}

/* y (outer, R, inner) = g (outer, inner) * scale, broadcast over R. */
#define EXPAND_KERNEL(NAME, T)                                                           \
    CDDP_HOT static void NAME(const T *g, T *y, int64_t outer, int64_t R, int64_t inner, \
                              double scale)                                              \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            if (inner == 1) {                                                            \
                T v = (T)(g[o] * scale), *yr = y + o * R;                                \
                for (int64_t r = 0; r < R; r++)                                          \
                    yr[r] = v;                                                           \
                continue;                                                                \
            }                                                                            \
            for (int64_t r = 0; r < R; r++) {                                            \
                T *yr = y + (o * R + r) * inner;                                         \
                const T *gr = g + o * inner;                                             \
                for (int64_t i = 0; i < inner; i++)                                      \
                    yr[i] = (T)(gr[i] * scale);                                          \
            }                                                                            \
        }                                                                                \
    }
EXPAND_KERNEL(expand_f32, float)
EXPAND_KERNEL(expand_f64, double)

/* ---- sum / mean ----------------------------------------------------------------------- */

/* d(sum)/dx: the gradient broadcast back over the reduced dims (times 1/R for mean). */
static int sum_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *g = NULL, *y = NULL;
    cddp_dtype dt = self->meta[0].dtype;
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_rplan_from_node(&p, self, 0);
    if (!(g = cddp_rplan_grad(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, expand_f32(RDATA(g), RDATA(y), p.outer,
                                        p.R, p.inner, self->d[0]));
    else
        CDDP_REDUCE_NOGIL(n, expand_f64(RDATA(g), RDATA(y), p.outer,
                                        p.R, p.inner, self->d[0]));
    gin[0] = cddp_rplan_unlayout(&p, y);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

static PyObject *sum_mean(TensorObject *x, PyObject *dimo, PyObject *keepo, PyObject *dto,
                          int mean)
{
    const char *fname = mean ? "mean" : "sum";
    cddp_rplan p;
    uint32_t mask;
    int keep, has_dt, err;
    cddp_dtype dt, acc_dt, out_dt;
    TensorObject *xl = NULL, *out = NULL, *res = NULL;
    if (cddp_reduce_dims(fname, dimo, x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", keepo, 0)) < 0 ||
        cddp_reduce_dtype(dto, &has_dt, &dt) < 0)
        return NULL;
    out_dt = has_dt ? dt : x->dtype;
    if (mean && !cddp_is_floating(out_dt)) {
        PyErr_Format(PyExc_RuntimeError,
                     "mean(): could not infer output dtype. Input dtype must be either a "
                     "floating point or complex dtype. Got: %s", cddp_reduce_torch_name(out_dt));
        return NULL;
    }
    if (!has_dt && !cddp_is_floating(out_dt))
        out_dt = CDDP_INT64;
    acc_dt = cddp_is_floating(out_dt) ? out_dt : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)))
        goto done;
    if (!(out = cddp_tensor_new(acc_dt, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    void *xp = RDATA(xl), *op = RDATA(out);
    if (acc_dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, sum_f32(xp, op, p.outer, p.R, p.inner, mean));
    else if (acc_dt == CDDP_FLOAT64)
        CDDP_REDUCE_NOGIL(n, sum_f64(xp, op, p.outer, p.R, p.inner, mean));
    else
        CDDP_REDUCE_NOGIL(n, sum_i64(xp, op, p.outer, p.R, p.inner));
    if (out_dt != acc_dt) {
        res = cddp_tensor_cast_raw(out, out_dt);
        Py_SETREF(out, res);
        res = NULL;
        if (!out)
            goto done;
    }
    if (cddp_is_floating(x->dtype) && cddp_is_floating(out_dt)) {
        static const char *names[2][2] = {{"SumBackward0", "SumBackward1"},
                                          {"MeanBackward0", "MeanBackward1"}};
        int has_dim = dimo && dimo != Py_None;
        NodeObject *node = cddp_maybe_node(names[mean][has_dim], sum_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            node->d[0] = mean ? 1.0 / (double)p.R : 1.0;
            Py_DECREF(node);
        }
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

static const char *const sum_names[] = {"dim", "keepdim", "dtype"};

static PyObject *tensor_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    PyObject *a[3];
    if (cddp_reduce_args("sum", args, nargs, kwnames, sum_names, 3, 2, a) < 0)
        return NULL;
    return sum_mean((TensorObject *)self, a[0], a[1], a[2], 0);
}

static PyObject *tensor_mean(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *a[3];
    if (cddp_reduce_args("mean", args, nargs, kwnames, sum_names, 3, 2, a) < 0)
        return NULL;
    return sum_mean((TensorObject *)self, a[0], a[1], a[2], 1);
}

/* ---- prod ----------------------------------------------------------------------------- */

#define PROD_KERNEL(NAME, T, ACC)                                                        \
    static void NAME(const T *x, T *out, int64_t outer, int64_t R, int64_t inner)        \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i = 0; i < inner; i++) {                                        \
                ACC acc = 1;                                                             \
                const T *xr = x + o * R * inner + i;                                     \
                for (int64_t r = 0; r < R; r++)                                          \
                    acc *= (ACC)xr[r * inner];                                           \
                out[o * inner + i] = (T)acc;                                             \
            }                                                                            \
    }
PROD_KERNEL(prod_f32, float, double)
PROD_KERNEL(prod_f64, double, double)
PROD_KERNEL(prod_i64, int64_t, uint64_t)

/* Rows (outer, R) of x, g (outer): gin = g * prod of the other elements of the row, computed
 * from the zero count so zeros give exact gradients (torch's prod_backward). */
#define PROD_BACKWARD(NAME, T)                                                           \
    static void NAME(const T *x, const T *g, T *gin, int64_t outer, int64_t R)           \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            T *gr = gin + o * R;                                                         \
            double nz = 1.;                                                              \
            int64_t zeros = 0, zpos = 0;                                                 \
            for (int64_t r = 0; r < R; r++) {                                            \
                if (xr[r] == 0) {                                                        \
                    zeros++;                                                             \
                    zpos = r;                                                            \
                } else {                                                                 \
                    nz *= xr[r];                                                         \
                }                                                                        \
            }                                                                            \
            for (int64_t r = 0; r < R; r++)                                              \
                gr[r] = zeros ? (T)0 : (T)(g[o] * (nz / xr[r]));                         \
            if (zeros == 1)                                                              \
                gr[zpos] = (T)(g[o] * nz);                                               \
        }                                                                                \
    }
PROD_BACKWARD(prod_bw_f32, float)
PROD_BACKWARD(prod_bw_f64, double)

static int prod_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x, *xl = NULL, *g = NULL, *y = NULL;
    cddp_dtype dt = self->meta[0].dtype;
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)))
        return -1;
    cddp_rplan_from_node(&p, self, 1);
    if (!(xl = cddp_rplan_layout(&p, x, dt)) || !(g = cddp_rplan_grad(&p, gout[0], dt)) ||
        !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    if (dt == CDDP_FLOAT32)
        prod_bw_f32(RDATA(xl), RDATA(g), RDATA(y), p.outer, p.R);
    else
        prod_bw_f64(RDATA(xl), RDATA(g), RDATA(y), p.outer, p.R);
    gin[0] = cddp_rplan_unlayout(&p, y);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

static PyObject *tensor_prod(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    TensorObject *x = (TensorObject *)self, *xl = NULL, *out = NULL, *res = NULL;
    PyObject *a[3];
    cddp_rplan p;
    uint32_t mask;
    int keep, has_dt, err, d;
    cddp_dtype dt, out_dt, acc_dt;
    if (cddp_reduce_args("prod", args, nargs, kwnames, sum_names, 3, 2, a) < 0)
        return NULL;
    if (a[0] && a[0] != Py_None) {
        if (cddp_reduce_int_dim("prod", a[0], x->ndim, &d) < 0)
            return NULL;
        mask = x->ndim ? 1u << d : 0;
    } else {
        mask = x->ndim ? (uint32_t)((1u << x->ndim) - 1) : 0;
    }
    if ((keep = cddp_reduce_bool("prod", "keepdim", a[1], 0)) < 0 ||
        cddp_reduce_dtype(a[2], &has_dt, &dt) < 0)
        return NULL;
    out_dt = has_dt ? dt : (cddp_is_floating(x->dtype) ? x->dtype : CDDP_INT64);
    acc_dt = cddp_is_floating(out_dt) ? out_dt : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)) ||
        !(out = cddp_tensor_new(acc_dt, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    void *xp = RDATA(xl), *op = RDATA(out);
    if (acc_dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, prod_f32(xp, op, p.outer, p.R, p.inner));
    else if (acc_dt == CDDP_FLOAT64)
        CDDP_REDUCE_NOGIL(n, prod_f64(xp, op, p.outer, p.R, p.inner));
    else
        CDDP_REDUCE_NOGIL(n, prod_i64(xp, op, p.outer, p.R, p.inner));
    if (out_dt != acc_dt) {
        res = cddp_tensor_cast_raw(out, out_dt);
        Py_SETREF(out, res);
        res = NULL;
        if (!out)
            goto done;
    }
    if (cddp_is_floating(x->dtype) && cddp_is_floating(out_dt)) {
        int has_dim = a[0] && a[0] != Py_None;
        NodeObject *node = cddp_maybe_node(has_dim ? "ProdBackward1" : "ProdBackward0",
                                           prod_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            err = cddp_node_save(node, 0, x);
            Py_DECREF(node);
            if (err < 0)
                goto done;
        }
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

/* ---- var / std ------------------------------------------------------------------------ */

/* Rows (outer, R): out = sum((x - mean)^2) / dof, two passes in double; sqrt for std. */
#define VAR_KERNEL(NAME, T, PW)                                                          \
    static void NAME(const T *x, T *out, int64_t outer, int64_t R, double dof, int sd)   \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            double m = PW(xr, R) / (double)R, ss = 0.;                                   \
            for (int64_t r = 0; r < R; r++)                                              \
                ss += ((double)xr[r] - m) * ((double)xr[r] - m);                         \
            ss /= dof;                                                                   \
            out[o] = (T)(sd ? sqrt(ss) : ss);                                            \
        }                                                                                \
    }
VAR_KERNEL(var_f32, float, cddp_pw_sum_f32)
VAR_KERNEL(var_f64, double, cddp_pw_sum_f64)

/* var: gin = g * 2 (x - mean) / dof; std: gin = g (x - mean) / (dof * std), 0 where std == 0. */
#define VAR_BACKWARD(NAME, T, PW)                                                        \
    static void NAME(const T *x, const T *g, const T *res, T *gin, int64_t outer,        \
                     int64_t R, double dof, int sd)                                      \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            double m = PW(xr, R) / (double)R;                                            \
            double s = sd ? (res[o] == 0 ? 0. : (double)g[o] / (dof * (double)res[o]))   \
                          : 2. * (double)g[o] / dof;                                     \
            for (int64_t r = 0; r < R; r++)                                              \
                gin[o * R + r] = (T)(s * ((double)xr[r] - m));                           \
        }                                                                                \
    }
VAR_BACKWARD(var_bw_f32, float, cddp_pw_sum_f32)
VAR_BACKWARD(var_bw_f64, double, cddp_pw_sum_f64)

static int var_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x, *res = NULL, *xl = NULL, *g = NULL, *rl = NULL, *y = NULL;
    cddp_dtype dt = self->meta[0].dtype;
    int sd = (int)self->i[2], rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)) || (sd && !(res = cddp_node_saved(self, 1))))
        return -1;
    cddp_rplan_from_node(&p, self, 1);
    if (!(xl = cddp_rplan_layout(&p, x, dt)) || !(g = cddp_rplan_grad(&p, gout[0], dt)) ||
        (sd && !(rl = cddp_rplan_grad(&p, res, dt))) || !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    void *rp = rl ? RDATA(rl) : NULL;
    if (dt == CDDP_FLOAT32)
        var_bw_f32(RDATA(xl), RDATA(g), rp, RDATA(y), p.outer, p.R, self->d[0], sd);
    else
        var_bw_f64(RDATA(xl), RDATA(g), rp, RDATA(y), p.outer, p.R, self->d[0], sd);
    gin[0] = cddp_rplan_unlayout(&p, y);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(g);
    Py_XDECREF(rl);
    Py_XDECREF(y);
    return rc;
}

static PyObject *var_std(TensorObject *x, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int sd)
{
    static const char *const names[] = {"dim", "unbiased", "keepdim", "correction"};
    const char *fname = sd ? "std" : "var";
    PyObject *a[4];
    cddp_rplan p;
    uint32_t mask;
    int keep, unbiased, err;
    double corr;
    TensorObject *xl = NULL, *out = NULL, *res = NULL;
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 4, 3, a) < 0)
        return NULL;
    if (a[0] && PyBool_Check(a[0]) && !a[1]) {    /* legacy var(unbiased) */
        a[1] = a[0];
        a[0] = NULL;
    }
    if (cddp_reduce_dims(fname, a[0], x->ndim, 1, 1, &mask) < 0 ||
        (unbiased = cddp_reduce_bool(fname, "unbiased", a[1], 1)) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[2], 0)) < 0)
        return NULL;
    corr = unbiased;
    if (a[3] && a[3] != Py_None) {
        if (!PyLong_Check(a[3]) && !PyFloat_Check(a[3])) {
            PyErr_Format(PyExc_TypeError, "%s(): argument 'correction' must be Number, not %s",
                         fname, Py_TYPE(a[3])->tp_name);
            return NULL;
        }
        corr = PyFloat_AsDouble(a[3]);
        if (corr == -1. && PyErr_Occurred())
            return NULL;
    }
    if (!cddp_is_floating(x->dtype)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "std and var only support floating point and complex dtypes");
        return NULL;
    }
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 1);
    double dof = (double)p.R - corr;
    if (dof <= 0) {
        if (PyErr_WarnFormat(PyExc_UserWarning, 1,
                             "%s(): degrees of freedom is <= 0. Correction should be strictly "
                             "less than the reduction factor (input numel divided by output "
                             "numel).", fname) < 0)
            return NULL;
        dof = 0.;
    }
    if (!(xl = cddp_rplan_layout(&p, x, x->dtype)) ||
        !(out = cddp_tensor_new(x->dtype, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R;
    if (x->dtype == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, var_f32(RDATA(xl), RDATA(out), p.outer, p.R, dof, sd));
    else
        CDDP_REDUCE_NOGIL(n, var_f64(RDATA(xl), RDATA(out), p.outer, p.R, dof, sd));
    NodeObject *node = cddp_maybe_node(sd ? "StdBackward0" : "VarBackward0", var_backward, 1,
                                       &x, &err);
    if (err)
        goto done;
    if (node) {
        cddp_set_history(out, node, 0);
        cddp_rplan_to_node(&p, node);
        node->i[2] = sd;
        node->d[0] = dof;
        err = cddp_node_save(node, 0, x) < 0 || (sd && cddp_node_save_output(node, 1, out) < 0);
        Py_DECREF(node);
        if (err)
            goto done;
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

static PyObject *tensor_var(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return var_std((TensorObject *)self, args, nargs, kwnames, 0);
}

static PyObject *tensor_std(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return var_std((TensorObject *)self, args, nargs, kwnames, 1);
}

/* ---- cumsum --------------------------------------------------------------------------- */

/* y (outer, R, inner) = running sum over R of x, accumulated in double for floats (torch's
 * CPU accumulate type); rev runs from the end (the backward). */
#define CUMSUM_KERNEL(NAME, T, ACC)                                                      \
    static void NAME(const T *x, T *y, int64_t outer, int64_t R, int64_t inner, int rev) \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                ACC acc[LANES];                                                          \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                for (int64_t i = 0; i < nb; i++)                                         \
                    acc[i] = 0;                                                          \
                for (int64_t k = 0; k < R; k++) {                                        \
                    int64_t off = (o * R + (rev ? R - 1 - k : k)) * inner + i0;          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        acc[i] += (ACC)x[off + i];                                       \
                        y[off + i] = (T)acc[i];                                          \
                    }                                                                    \
                }                                                                        \
            }                                                                            \
    }
CUMSUM_KERNEL(cumsum_f32, float, double)
CUMSUM_KERNEL(cumsum_f64, double, double)
CUMSUM_KERNEL(cumsum_i64, int64_t, uint64_t)

static void cumsum_run(cddp_dtype dt, void *x, void *y, const cddp_rplan *p, int rev)
{
    int64_t n = p->outer * p->R * p->inner;
    if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, cumsum_f32(x, y, p->outer, p->R, p->inner, rev));
    else if (dt == CDDP_FLOAT64)
        CDDP_REDUCE_NOGIL(n, cumsum_f64(x, y, p->outer, p->R, p->inner, rev));
    else
        CDDP_REDUCE_NOGIL(n, cumsum_i64(x, y, p->outer, p->R, p->inner, rev));
}

static int cumsum_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *g = NULL, *y = NULL;
    cddp_dtype dt = self->meta[0].dtype;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_rplan_from_node(&p, self, 0);
    /* the output has the input's shape: as a "gradient" it is already in the plan's layout */
    if (!(g = cddp_rplan_layout(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0))) {
        Py_XDECREF(g);
        return -1;
    }
    cumsum_run(dt, RDATA(g), RDATA(y), &p, 1);
    Py_DECREF(g);
    gin[0] = y;
    return 0;
}

static PyObject *tensor_cumsum(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"dim", "dtype"};
    TensorObject *x = (TensorObject *)self, *xl = NULL, *out = NULL, *res = NULL;
    PyObject *a[2];
    cddp_rplan p;
    int d, has_dt, err;
    cddp_dtype dt, out_dt, acc_dt;
    if (cddp_reduce_args("cumsum", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "cumsum() missing required argument 'dim' (pos 1)");
        return NULL;
    }
    if (cddp_reduce_int_dim("cumsum", a[0], x->ndim, &d) < 0 ||
        cddp_reduce_dtype(a[1], &has_dt, &dt) < 0)
        return NULL;
    out_dt = has_dt ? dt : (cddp_is_floating(x->dtype) ? x->dtype : CDDP_INT64);
    acc_dt = cddp_is_floating(out_dt) ? out_dt : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, x->ndim ? 1u << d : 0, 1, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)) || !(out = cddp_rplan_new_layout(&p, acc_dt, 0)))
        goto done;
    cumsum_run(acc_dt, RDATA(xl), RDATA(out), &p, 0);
    if (out_dt != acc_dt) {
        res = cddp_tensor_cast_raw(out, out_dt);
        Py_SETREF(out, res);
        res = NULL;
        if (!out)
            goto done;
    }
    if (cddp_is_floating(x->dtype) && cddp_is_floating(out_dt)) {
        NodeObject *node = cddp_maybe_node("CumsumBackward0", cumsum_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            Py_DECREF(node);
        }
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

/* ---- all / any ------------------------------------------------------------------------ */

static void all_any_u8(const uint8_t *x, uint8_t *out, int64_t outer, int64_t R, int64_t inner,
                       int any)
{
    for (int64_t o = 0; o < outer; o++) {
        uint8_t *acc = out + o * inner;
        for (int64_t i = 0; i < inner; i++)
            acc[i] = (uint8_t)!any;
        for (int64_t r = 0; r < R; r++) {
            const uint8_t *xr = x + (o * R + r) * inner;
            if (any)
                for (int64_t i = 0; i < inner; i++)
                    acc[i] |= xr[i];
            else
                for (int64_t i = 0; i < inner; i++)
                    acc[i] &= xr[i];
        }
    }
}

static PyObject *all_any(TensorObject *x, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int any)
{
    static const char *const names[] = {"dim", "keepdim"};
    const char *fname = any ? "any" : "all";
    PyObject *a[2];
    cddp_rplan p;
    uint32_t mask;
    int keep;
    TensorObject *xl = NULL, *out = NULL;
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 2, 2, a) < 0 ||
        cddp_reduce_dims(fname, a[0], x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[1], 0)) < 0)
        return NULL;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (!(xl = cddp_rplan_layout(&p, x, CDDP_BOOL)))   /* the cast maps v != 0 (NaN too) */
        return NULL;
    out = cddp_tensor_new(CDDP_BOOL, p.out_ndim, p.out_shape, 0);
    if (out)
        CDDP_REDUCE_NOGIL(p.outer * p.R * p.inner,
                          all_any_u8(RDATA(xl), RDATA(out),
                                     p.outer, p.R, p.inner, any));
    Py_DECREF(xl);
    return (PyObject *)out;
}

static PyObject *tensor_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return all_any((TensorObject *)self, args, nargs, kwnames, 0);
}

static PyObject *tensor_any(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return all_any((TensorObject *)self, args, nargs, kwnames, 1);
}

/* ---- tables --------------------------------------------------------------------------- */

/* cddp.<name>(input, ...) for each method whose function form takes the same arguments */
#define AS_FUNCTION(NAME, IMPL)                                                          \
    static PyObject *fn_##NAME(PyObject *m, PyObject *const *args, Py_ssize_t nargs,     \
                               PyObject *kwnames)                                        \
    {                                                                                    \
        return cddp_reduce_as_function(#NAME, IMPL, args, nargs, kwnames);               \
    }
AS_FUNCTION(sum, tensor_sum)
AS_FUNCTION(mean, tensor_mean)
AS_FUNCTION(prod, tensor_prod)
AS_FUNCTION(var, tensor_var)
AS_FUNCTION(std, tensor_std)
AS_FUNCTION(cumsum, tensor_cumsum)
AS_FUNCTION(all, tensor_all)
AS_FUNCTION(any, tensor_any)
AS_FUNCTION(amax, cddp_reduce_amax)
AS_FUNCTION(amin, cddp_reduce_amin)
AS_FUNCTION(argmax, cddp_reduce_argmax)
AS_FUNCTION(argmin, cddp_reduce_argmin)
AS_FUNCTION(logsumexp, cddp_reduce_logsumexp)

#define FC METH_FASTCALL | METH_KEYWORDS
#define M(NAME, IMPL, DOC) {NAME, (PyCFunction)(void (*)(void))IMPL, FC, DOC}

PyMethodDef cddp_reduce_tensor_methods[] = {
    M("sum", tensor_sum, "sum(dim=None, keepdim=False, *, dtype=None)"),
    M("mean", tensor_mean, "mean(dim=None, keepdim=False, *, dtype=None)"),
    M("prod", tensor_prod, "prod(dim=None, keepdim=False, *, dtype=None)"),
    M("var", tensor_var, "var(dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("std", tensor_std, "std(dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("cumsum", tensor_cumsum, "cumsum(dim, *, dtype=None)"),
    M("all", tensor_all, "all(dim=None, keepdim=False) -> bool tensor"),
    M("any", tensor_any, "any(dim=None, keepdim=False) -> bool tensor"),
    M("max", cddp_reduce_max, "max() / max(dim, keepdim=False) -> (values, indices) / max(other)"),
    M("min", cddp_reduce_min, "min() / min(dim, keepdim=False) -> (values, indices) / min(other)"),
    M("amax", cddp_reduce_amax, "amax(dim=(), keepdim=False)"),
    M("amin", cddp_reduce_amin, "amin(dim=(), keepdim=False)"),
    M("argmax", cddp_reduce_argmax, "argmax(dim=None, keepdim=False) -> int64"),
    M("argmin", cddp_reduce_argmin, "argmin(dim=None, keepdim=False) -> int64"),
    M("softmax", cddp_reduce_softmax, "softmax(dim, dtype=None)"),
    M("log_softmax", cddp_reduce_log_softmax, "log_softmax(dim, dtype=None)"),
    M("logsumexp", cddp_reduce_logsumexp, "logsumexp(dim, keepdim=False)"),
    M("norm", cddp_reduce_norm, "norm(p='fro', dim=None, keepdim=False, dtype=None)"),
    {NULL},
};

PyMethodDef cddp_reduce_module_methods[] = {
    M("sum", fn_sum, "sum(input, dim=None, keepdim=False, *, dtype=None)"),
    M("mean", fn_mean, "mean(input, dim=None, keepdim=False, *, dtype=None)"),
    M("prod", fn_prod, "prod(input, dim=None, keepdim=False, *, dtype=None)"),
    M("var", fn_var, "var(input, dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("std", fn_std, "std(input, dim=None, unbiased=True, keepdim=False, *, correction=None)"),
    M("cumsum", fn_cumsum, "cumsum(input, dim, *, dtype=None)"),
    M("all", fn_all, "all(input, dim=None, keepdim=False)"),
    M("any", fn_any, "any(input, dim=None, keepdim=False)"),
    M("max", cddp_reduce_fn_max, "max(input) / max(input, dim, keepdim=False) / max(input, other)"),
    M("min", cddp_reduce_fn_min, "min(input) / min(input, dim, keepdim=False) / min(input, other)"),
    M("amax", fn_amax, "amax(input, dim=(), keepdim=False)"),
    M("amin", fn_amin, "amin(input, dim=(), keepdim=False)"),
    M("argmax", fn_argmax, "argmax(input, dim=None, keepdim=False)"),
    M("argmin", fn_argmin, "argmin(input, dim=None, keepdim=False)"),
    M("softmax", cddp_reduce_fn_softmax, "softmax(input, dim=None, _stacklevel=3, dtype=None)"),
    M("log_softmax", cddp_reduce_fn_log_softmax,
      "log_softmax(input, dim=None, _stacklevel=3, dtype=None)"),
    M("logsumexp", fn_logsumexp, "logsumexp(input, dim, keepdim=False)"),
    M("norm", cddp_reduce_fn_norm, "norm(input, p='fro', dim=None, keepdim=False, dtype=None)"),
    M("_linalg_vector_norm", cddp_reduce_fn_vector_norm,
      "linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)"),
    {NULL},
};
