/* ops/reduce/cumprod.c — running products and running extrema along one dim.
 *
 * Mirrors torch:
 *   cumprod(input, dim, *, dtype=None)     CumprodBackward0, zeros in the input included
 *   Tensor.cumprod_(dim)                   in place (the backward keeps the old values)
 *   cummax / cummin(input, dim)            (values, indices); CummaxBackward0 / CumminBackward0
 * The C entry points are cddp._C._cumprod / _cummax / _cummin; cddp/_ops.py gives cummax and
 * cummin their return_types-like named result, cumprod is exported as it is.
 *
 * Layout legend: input as (outer, R, inner), R the scanned dim (ops/reduce/plan.c); a "lane"
 * is one (o, i) pair: its R elements lie `inner` elements apart.
 *
 * cumprod accumulates in double for floats (torch's CPU accumulate type), in wrapping int64
 * for integers and bool. Its backward per lane, y = cumprod(x), z = first k with x[k] == 0:
 *   k < z:  dx[k] = (sum_{k <= j < z} g[j] y[j]) / x[k]       (y[j] = 0 from z on)
 *   k = z:  dx[z] = sum_{j >= z} g[j] prod_{i <= j, i != z} x[i]
 *   k > z:  dx[k] = 0                                          (every product holds x[z])
 * which is torch's cumprod_backward, exact with zeros, O(R) per lane.
 * cummax/cummin: a NaN, once met, stays (with its index); ties take the later index (torch's
 * >= / <=). Their backward scatter-adds g into the selected indices.
 */
#include "ops/reduce/reduce.h"
#include "module.h"
#include <math.h>

/* ---- cumprod -------------------------------------------------------------------------- */

#define CUMPROD_KERNEL(NAME, T, ACC)                                                     \
    static void NAME(const T *x, T *y, int64_t outer, int64_t R, int64_t inner)          \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i = 0; i < inner; i++) {                                        \
                ACC acc = 1;                                                             \
                for (int64_t k = 0; k < R; k++) {                                        \
                    int64_t off = (o * R + k) * inner + i;                               \
                    acc *= (ACC)x[off];                                                  \
                    y[off] = (T)acc;                                                     \
                }                                                                        \
            }                                                                            \
    }
CUMPROD_KERNEL(cumprod_f32, float, double)
CUMPROD_KERNEL(cumprod_f64, double, double)
CUMPROD_KERNEL(cumprod_i64, int64_t, uint64_t)

/* dx for one lane (the rule in the header); x, g, dx strided by s, length R, in double. */
static void cumprod_lane_grad(const double *x, const double *g, double *dx, int64_t R, int64_t s)
{
    int64_t z = R;
    double y = 1, acc = 0, p;
    for (int64_t k = 0; k < R; k++) {
        if (x[k * s] == 0) {
            z = k;
            break;
        }
    }
    /* k < z: suffix sums of g*y over [k, z); y recomputed forward first */
    for (int64_t k = 0; k < z; k++) {
        y *= x[k * s];
        dx[k * s] = y;               /* stash y[k] */
    }
    for (int64_t k = z - 1; k >= 0; k--) {
        acc += g[k * s] * dx[k * s];
        dx[k * s] = acc / x[k * s];
    }
    if (z == R)
        return;
    /* k = z: P_j = prod_{i <= j, i != z} x[i] */
    p = y;                            /* prod of x[0..z) */
    acc = g[z * s] * p;
    for (int64_t j = z + 1; j < R; j++) {
        p *= x[j * s];
        acc += g[j * s] * p;
    }
    dx[z * s] = acc;
    for (int64_t k = z + 1; k < R; k++)
        dx[k * s] = 0;
}

static int cumprod_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x = cddp_node_saved(self, 0), *xl = NULL, *gl = NULL, *dl = NULL;
    int rc = -1;
    if (!x)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_rplan_from_node(&p, self, 0);
    /* the output has the input's shape: the gradient lays out like the input */
    if (!(xl = cddp_rplan_layout(&p, x, CDDP_FLOAT64)) ||
        !(gl = cddp_rplan_layout(&p, gout[0], CDDP_FLOAT64)) ||
        !(dl = cddp_rplan_new_layout(&p, CDDP_FLOAT64, 0)))
        goto done;
    {
        const double *xv = RDATA(xl), *gv = RDATA(gl);
        double *dv = RDATA(dl);
        for (int64_t o = 0; o < p.outer; o++)
            for (int64_t i = 0; i < p.inner; i++) {
                int64_t off = o * p.R * p.inner + i;
                cumprod_lane_grad(xv + off, gv + off, dv + off, p.R, p.inner);
            }
    }
    Py_SETREF(dl, cddp_rplan_unlayout(&p, dl));
    if (dl && dl->dtype != self->meta[0].dtype)
        Py_SETREF(dl, cddp_tensor_cast_raw(dl, self->meta[0].dtype));
    gin[0] = dl;
    dl = NULL;
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(gl);
    Py_XDECREF(dl);
    return rc;
}

static PyObject *cumprod_impl(TensorObject *x, PyObject *dimo, PyObject *dto)
{
    TensorObject *xl = NULL, *out = NULL, *res = NULL;
    cddp_rplan p;
    int d, has_dt, err;
    cddp_dtype dt, out_dt, acc_dt;
    int64_t n;
    if (!dimo) {
        PyErr_SetString(PyExc_TypeError, "cumprod() missing required argument 'dim' (pos 1)");
        return NULL;
    }
    if (cddp_reduce_int_dim("cumprod", dimo, x->ndim, &d) < 0 ||
        cddp_reduce_dtype(dto, &has_dt, &dt) < 0)
        return NULL;
    out_dt = has_dt ? dt : (cddp_is_floating(x->dtype) ? x->dtype : CDDP_INT64);
    /* float16/bfloat16 accumulate in float32 and round each output once (torch's acc_type) */
    acc_dt = cddp_is_floating(out_dt) ? cddp_kdt(out_dt) : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, x->ndim ? 1u << d : 0, 1, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)) || !(out = cddp_rplan_new_layout(&p, acc_dt, 0)))
        goto done;
    n = p.outer * p.R * p.inner;
    if (acc_dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, cumprod_f32(RDATA(xl), RDATA(out), p.outer, p.R, p.inner));
    else if (acc_dt == CDDP_FLOAT64)
        CDDP_REDUCE_NOGIL(n, cumprod_f64(RDATA(xl), RDATA(out), p.outer, p.R, p.inner));
    else
        CDDP_REDUCE_NOGIL(n, cumprod_i64(RDATA(xl), RDATA(out), p.outer, p.R, p.inner));
    Py_SETREF(out, cddp_rplan_unlayout(&p, out));
    if (out && out_dt != acc_dt)
        Py_SETREF(out, cddp_tensor_cast_raw(out, out_dt));
    if (!out)
        goto done;
    if (cddp_is_floating(x->dtype) && cddp_is_floating(out_dt)) {
        NodeObject *node = cddp_maybe_node("CumprodBackward0", cumprod_backward, 1, &x, &err);
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

/* Tensor.cumprod_: the values computed without history, written into x; the node's edge is
 * x's history before the write and it keeps a copy of the old values for the backward. */
static PyObject *cumprod_inplace(TensorObject *x, PyObject *dimo, PyObject *dto)
{
    TensorObject *old = NULL, *vals;
    NodeObject *node = NULL;
    int d, err = 0, saved = cddp_grad_enabled;
    if (cddp_check_inplace(x) < 0)
        return NULL;
    if (dimo && cddp_reduce_int_dim("cumprod_", dimo, x->ndim, &d) < 0)
        return NULL;
    cddp_grad_enabled = 0;
    vals = (TensorObject *)cumprod_impl(x, dimo, dto);
    cddp_grad_enabled = saved;
    if (!vals)
        return NULL;
    if (cddp_is_floating(x->dtype)) {
        node = cddp_maybe_node("CumprodBackward0", cumprod_backward, 1, &x, &err);
        if (!err && node) {
            old = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
            err = !old || cddp_copy_into(old, x) < 0 || cddp_node_save(node, 0, old) < 0;
            node->i[0] = x->ndim ? 1u << d : 0;          /* the plan cumprod_impl used */
            node->i[1] = 1;
        }
    }
    if (err || cddp_copy_into(x, vals) < 0) {
        Py_XDECREF(node);
        Py_XDECREF(old);
        Py_DECREF(vals);
        return NULL;
    }
    if (node) {
        err = cddp_set_inplace_history(x, node, 0) < 0;
        Py_DECREF(node);
    }
    Py_XDECREF(old);
    Py_DECREF(vals);
    return err ? NULL : Py_NewRef((PyObject *)x);
}

/* ---- cummax / cummin ------------------------------------------------------------------ */

/* values y and int64 indices ix of the running best along R; ismin picks <= over >=. */
#define CUMBEST_KERNEL(NAME, T, ISNAN)                                                   \
    static void NAME(const T *x, T *y, int64_t *ix, int64_t outer, int64_t R,            \
                     int64_t inner, int ismin)                                           \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i = 0; i < inner; i++) {                                        \
                int64_t base = o * R * inner + i, bi = 0;                                \
                T best = x[base];                                                        \
                for (int64_t k = 0; k < R; k++) {                                        \
                    T v = x[base + k * inner];                                           \
                    if (!ISNAN(best) && (ISNAN(v) || (ismin ? v <= best : v >= best))) { \
                        best = v;                                                        \
                        bi = k;                                                          \
                    }                                                                    \
                    y[base + k * inner] = best;                                          \
                    ix[base + k * inner] = bi;                                           \
                }                                                                        \
            }                                                                            \
    }
#define NO_NAN(v) 0
CUMBEST_KERNEL(cumbest_f32, float, isnan)
CUMBEST_KERNEL(cumbest_f64, double, isnan)
CUMBEST_KERNEL(cumbest_i64, int64_t, NO_NAN)
CUMBEST_KERNEL(cumbest_i32, int32_t, NO_NAN)
CUMBEST_KERNEL(cumbest_b8, uint8_t, NO_NAN)

/* gradient: zeros of the input's layout with g scatter-added at the saved indices */
static int cumbest_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *ix = cddp_node_saved(self, 0), *il = NULL, *gl = NULL, *dl = NULL;
    cddp_dtype dt = self->meta[0].dtype;
    int rc = -1;
    if (!ix)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_rplan_from_node(&p, self, 0);
    if (!(il = cddp_rplan_layout(&p, ix, CDDP_INT64)) ||
        !(gl = cddp_rplan_layout(&p, gout[0], CDDP_FLOAT64)) ||
        !(dl = cddp_rplan_new_layout(&p, CDDP_FLOAT64, 1)))
        goto done;
    {
        const int64_t *iv = RDATA(il);
        const double *gv = RDATA(gl);
        double *dv = RDATA(dl);
        for (int64_t o = 0; o < p.outer; o++)
            for (int64_t k = 0; k < p.R; k++)
                for (int64_t i = 0; i < p.inner; i++) {
                    int64_t off = (o * p.R + k) * p.inner + i;
                    dv[(o * p.R + iv[off]) * p.inner + i] += gv[off];
                }
    }
    Py_SETREF(dl, cddp_rplan_unlayout(&p, dl));
    if (dl && dl->dtype != dt)
        Py_SETREF(dl, cddp_tensor_cast_raw(dl, dt));
    gin[0] = dl;
    dl = NULL;
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(il);
    Py_XDECREF(gl);
    Py_XDECREF(dl);
    return rc;
}

/* (values, indices) as a plain tuple; cddp/_ops.py names it. */
static PyObject *cumbest_impl(TensorObject *x, PyObject *dimo, int ismin)
{
    const char *fn = ismin ? "cummin" : "cummax";
    cddp_dtype kd = cddp_kdt(x->dtype);      /* narrow dtypes scan widened: exact values */
    TensorObject *xl = NULL, *y = NULL, *ix = NULL;
    PyObject *res = NULL;
    cddp_rplan p;
    int d, err;
    if (cddp_reduce_int_dim(fn, dimo, x->ndim, &d) < 0)
        return NULL;
    cddp_rplan_init(&p, x->ndim, x->shape, x->ndim ? 1u << d : 0, 1, 0);
    if (!(xl = cddp_rplan_layout(&p, x, kd)) ||
        !(y = cddp_rplan_new_layout(&p, kd, 0)) ||
        !(ix = cddp_rplan_new_layout(&p, CDDP_INT64, 0)))
        goto done;
    if (p.R > 0) {
        void *xv = RDATA(xl), *yv = RDATA(y);
        int64_t *iv = RDATA(ix);
        switch (kd) {
        case CDDP_FLOAT32: cumbest_f32(xv, yv, iv, p.outer, p.R, p.inner, ismin); break;
        case CDDP_FLOAT64: cumbest_f64(xv, yv, iv, p.outer, p.R, p.inner, ismin); break;
        case CDDP_INT64: cumbest_i64(xv, yv, iv, p.outer, p.R, p.inner, ismin); break;
        case CDDP_INT32: cumbest_i32(xv, yv, iv, p.outer, p.R, p.inner, ismin); break;
        default: cumbest_b8(xv, yv, iv, p.outer, p.R, p.inner, ismin); break;
        }
    }
    Py_SETREF(y, cddp_rplan_unlayout(&p, y));
    if (y && kd != x->dtype)
        Py_SETREF(y, cddp_tensor_cast_raw(y, x->dtype));
    if (y)
        Py_SETREF(ix, cddp_rplan_unlayout(&p, ix));
    if (!y || !ix)
        goto done;
    if (cddp_is_floating(x->dtype)) {
        NodeObject *node = cddp_maybe_node(ismin ? "CumminBackward0" : "CummaxBackward0",
                                           cumbest_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(y, node, 0);
            cddp_rplan_to_node(&p, node);
            err = cddp_node_save(node, 0, ix);
            Py_DECREF(node);
            if (err < 0)
                goto done;
        }
    }
    res = PyTuple_Pack(2, (PyObject *)y, (PyObject *)ix);
done:
    Py_XDECREF(xl);
    Py_XDECREF(y);
    Py_XDECREF(ix);
    return res;
}

/* ---- bindings ------------------------------------------------------------------------- */

static PyObject *t_cumprod(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"dim", "dtype"};
    PyObject *a[2];
    if (cddp_reduce_args("cumprod", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    return cumprod_impl((TensorObject *)self, a[0], a[1]);
}

static PyObject *t_cumprod_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"dim", "dtype"};
    PyObject *a[2];
    if (cddp_reduce_args("cumprod_", args, nargs, kwnames, names, 2, 1, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "cumprod_() missing required argument 'dim' (pos 1)");
        return NULL;
    }
    return cumprod_inplace((TensorObject *)self, a[0], a[1]);
}

static PyObject *m_cumprod(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    return cddp_reduce_as_function("cumprod", t_cumprod, args, nargs, kwnames);
}

/* _cummax(input, dim) / _cummin(input, dim) */
static PyObject *cumbest_binding(PyObject *const *args, Py_ssize_t nargs, PyObject *kw,
                                 int ismin)
{
    static const char *const names[] = {"input", "dim"};
    const char *fn = ismin ? "cummin" : "cummax";
    PyObject *a[2];
    if (cddp_reduce_args(fn, args, nargs, kw, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0] || !cddp_tensor_check(a[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", fn,
                     a[0] ? Py_TYPE(a[0])->tp_name : "nothing");
        return NULL;
    }
    if (!a[1]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'dim' (pos 2)", fn);
        return NULL;
    }
    return cumbest_impl((TensorObject *)a[0], a[1], ismin);
}

static PyObject *m_cummax(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return cumbest_binding(a, n, kw, 0);
}

static PyObject *m_cummin(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return cumbest_binding(a, n, kw, 1);
}

#define FC (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_cumprod_tensor_methods[] = {
    {"cumprod", FN(t_cumprod), FC, "cumprod(dim, *, dtype=None)"},
    {"cumprod_", FN(t_cumprod_), FC, "in-place cumprod"},
    {NULL},
};

PyMethodDef cddp_cumprod_module_methods[] = {
    {"cumprod", FN(m_cumprod), FC, "cumprod(input, dim, *, dtype=None)"},
    {"_cummax", FN(m_cummax), FC, "_cummax(input, dim) -> (values, indices)"},
    {"_cummin", FN(m_cummin), FC, "_cummin(input, dim) -> (values, indices)"},
    {NULL},
};
