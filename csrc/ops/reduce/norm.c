/* ops/reduce/norm.c — vector norms.
 *
 * Mirrors torch:
 *   Tensor.norm(p='fro', dim=None, keepdim=False, dtype=None)
 *   torch.norm(input, p='fro', dim=None, keepdim=False, out=None, dtype=None)
 *   torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)  (as
 *       cddp._C._linalg_vector_norm, for the Python linalg namespace)
 * All are vector norms over the reduced dims (torch.norm with a numeric p always is; 'fro' is
 * the 2-norm of the entries): sum(|x|^p)^(1/p), with p = 0 (count of nonzeros), 1, 2, inf
 * (max |x|), -inf (min |x|) and any other real p. Node: LinalgVectorNormBackward0, with
 * torch's norm_backward cases (the 2-norm's gradient x / ||x|| is 0 where ||x|| == 0; inf
 * norms share the gradient among ties). Sums accumulate in double.
 *
 * Layout legend: rows (outer, R), R the reduced extent (ops/reduce/reduce.h, rows plan).
 */
#include "ops/reduce/reduce.h"
#include <math.h>

/* ---- kernels -------------------------------------------------------------------------- */

#define NORM_KERNEL(NAME, T)                                                             \
    CDDP_CLONES static void NAME(const T *x, T *out, int64_t outer, int64_t R, double p)    \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            double acc = 0., res;                                                        \
            if (p == 2.) {                                                               \
                double a[8] = {0};                                                       \
                int64_t r = 0;                                                           \
                for (; r + 8 <= R; r += 8)                                               \
                    for (int k = 0; k < 8; k++)                                          \
                        a[k] += (double)xr[r + k] * xr[r + k];                           \
                for (; r < R; r++)                                                       \
                    a[0] += (double)xr[r] * xr[r];                                       \
                acc = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7])); \
                res = sqrt(acc);                                                         \
            } else if (p == 1.) {                                                        \
                for (int64_t r = 0; r < R; r++)                                          \
                    acc += fabs((double)xr[r]);                                          \
                res = acc;                                                               \
            } else if (isinf(p)) {                                                       \
                acc = p > 0 ? 0. : INFINITY;                                             \
                for (int64_t r = 0; r < R; r++) {                                        \
                    double v = fabs((double)xr[r]);                                      \
                    if ((p > 0 ? v > acc : v < acc) || v != v)                           \
                        acc = acc != acc ? acc : v;                                      \
                }                                                                        \
                res = acc;                                                               \
            } else if (p == 0.) {                                                        \
                for (int64_t r = 0; r < R; r++)                                          \
                    acc += xr[r] != 0;                                                   \
                res = acc;                                                               \
            } else {                                                                     \
                for (int64_t r = 0; r < R; r++)                                          \
                    acc += pow(fabs((double)xr[r]), p);                                  \
                res = pow(acc, 1. / p);                                                  \
            }                                                                            \
            out[o] = (T)res;                                                             \
        }                                                                                \
    }
NORM_KERNEL(norm_f32, float)
NORM_KERNEL(norm_f64, double)

static inline double sgn(double v)
{
    return (double)((v > 0) - (v < 0));
}

/* Rows: gin from x, the norm n and g (torch's norm_backward). */
#define NORM_BACKWARD(NAME, T)                                                           \
    static void NAME(const T *x, const T *nrm, const T *g, T *gin, int64_t outer,        \
                     int64_t R, double p)                                                \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            T *gr = gin + o * R;                                                         \
            double n = nrm[o], go = g[o];                                                \
            if (p == 0.) {                                                               \
                for (int64_t r = 0; r < R; r++)                                          \
                    gr[r] = 0;                                                           \
            } else if (p == 1.) {                                                        \
                for (int64_t r = 0; r < R; r++)                                          \
                    gr[r] = (T)(sgn(xr[r]) * go);                                        \
            } else if (p == 2.) {                                                        \
                double s = n == 0. ? 0. : go / n;                                        \
                for (int64_t r = 0; r < R; r++)                                          \
                    gr[r] = (T)(xr[r] * s);                                              \
            } else if (isinf(p)) {                                                       \
                int64_t cnt = 0;                                                         \
                for (int64_t r = 0; r < R; r++) {                                        \
                    double v = fabs((double)xr[r]);                                      \
                    cnt += v == n || (v != v && n != n);                                 \
                }                                                                        \
                for (int64_t r = 0; r < R; r++) {                                        \
                    double v = fabs((double)xr[r]);                                      \
                    int eq = v == n || (v != v && n != n);                               \
                    gr[r] = eq ? (T)(sgn(xr[r]) * go / (double)cnt) : (T)0;              \
                }                                                                        \
            } else if (p < 1.) {                                                         \
                double s = go * pow(n, 1. - p);                                          \
                for (int64_t r = 0; r < R; r++)                                          \
                    gr[r] = xr[r] == 0 ? (T)0                                            \
                                       : (T)(sgn(xr[r]) * pow(fabs((double)xr[r]), p - 1.) * s); \
            } else {                                                                     \
                double s = n == 0. ? 0. : go / pow(n, p - 1.);                           \
                for (int64_t r = 0; r < R; r++)                                          \
                    gr[r] = (T)(sgn(xr[r]) * pow(fabs((double)xr[r]), p - 1.) * s);      \
            }                                                                            \
        }                                                                                \
    }
NORM_BACKWARD(norm_bw_f32, float)
NORM_BACKWARD(norm_bw_f64, double)

/* ---- autograd ------------------------------------------------------------------------- */

/* saved: 0 = input (after the dtype cast), 1 = output; d[0] = p */
static int norm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x, *out, *xl = NULL, *ol = NULL, *g = NULL, *y = NULL;
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)) || !(out = cddp_node_saved(self, 1)))
        return -1;
    cddp_dtype dt = cddp_kdt(out->dtype);          /* float16: computed in float32 */
    cddp_rplan_from_node(&p, self, 1);
    if (!(xl = cddp_rplan_layout(&p, x, dt)) || !(ol = cddp_rplan_grad(&p, out, dt)) ||
        !(g = cddp_rplan_grad(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    int64_t n = p.outer * p.R;
    if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, norm_bw_f32(RDATA(xl), RDATA(ol), RDATA(g),
                                         RDATA(y), p.outer, p.R, self->d[0]));
    else
        CDDP_REDUCE_NOGIL(n, norm_bw_f64(RDATA(xl), RDATA(ol), RDATA(g),
                                         RDATA(y), p.outer, p.R, self->d[0]));
    Py_SETREF(y, cddp_rplan_unlayout(&p, y));
    if (y)
        gin[0] = cddp_tensor_cast_raw(y, self->meta[0].dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(ol);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

/* ---- forward -------------------------------------------------------------------------- */

/* p as a double: None -> 2, 'fro' -> 2, numbers as they are; 'nuc' and other strings raise. */
static int parse_ord(const char *fname, PyObject *o, double *p)
{
    if (!o || o == Py_None) {
        *p = 2.;
        return 0;
    }
    if (PyUnicode_Check(o)) {
        if (PyUnicode_CompareWithASCIIString(o, "fro") == 0) {
            *p = 2.;
            return 0;
        }
        if (PyUnicode_CompareWithASCIIString(o, "nuc") == 0) {
            PyErr_SetString(PyExc_NotImplementedError,
                            "cddp: the nuclear norm (p='nuc') is not supported");
            return -1;
        }
        PyErr_Format(PyExc_RuntimeError, "linalg.matrix_norm: Order %U not supported.", o);
        return -1;
    }
    if (PyBool_Check(o) || !(PyLong_Check(o) || PyFloat_Check(o))) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'p' must be a number or 'fro', not %s",
                     fname, Py_TYPE(o)->tp_name);
        return -1;
    }
    *p = PyFloat_AsDouble(o);
    return *p == -1. && PyErr_Occurred() ? -1 : 0;
}

static PyObject *norm_impl(const char *fname, TensorObject *x, PyObject *po, PyObject *dimo,
                           PyObject *keepo, PyObject *dto)
{
    cddp_rplan pl;
    uint32_t mask;
    int keep, has_dt, err;
    double p;
    cddp_dtype dt;
    TensorObject *xc = NULL, *xl = NULL, *out = NULL, *res = NULL;
    if (parse_ord(fname, po, &p) < 0 ||
        cddp_reduce_dims(fname, dimo, x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", keepo, 0)) < 0 ||
        cddp_reduce_dtype(dto, &has_dt, &dt) < 0)
        return NULL;
    if (!cddp_is_floating(x->dtype) || (has_dt && !cddp_is_floating(dt))) {
        PyErr_Format(PyExc_RuntimeError,
                     "linalg.vector_norm: Expected a floating point or complex tensor as input. "
                     "Got %s", cddp_reduce_torch_name(has_dt ? dt : x->dtype));
        return NULL;
    }
    if (!has_dt)
        dt = x->dtype;
    cddp_rplan_init(&pl, x->ndim, x->shape, mask, keep, 1);
    if (pl.R == 0 && isinf(p)) {
        PyErr_Format(PyExc_RuntimeError,
                     "linalg.vector_norm cannot compute the %s norm on an empty tensor because "
                     "the operation does not have an identity", p > 0 ? "inf" : "-inf");
        return NULL;
    }
    cddp_dtype kt = cddp_kdt(dt);
    if (!(xc = cddp_tensor_cast_raw(x, dt)) || !(xl = cddp_rplan_layout(&pl, xc, kt)) ||
        !(out = cddp_tensor_new(kt, pl.out_ndim, pl.out_shape, 0)))
        goto done;
    int64_t n = pl.outer * pl.R;
    if (kt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, norm_f32(RDATA(xl), RDATA(out), pl.outer, pl.R, p));
    else
        CDDP_REDUCE_NOGIL(n, norm_f64(RDATA(xl), RDATA(out), pl.outer, pl.R, p));
    if (!(out = cddp_reduce_to_dtype(out, dt)))
        goto done;
    NodeObject *node = cddp_maybe_node("LinalgVectorNormBackward0", norm_backward, 1, &x, &err);
    if (err)
        goto done;
    if (node) {
        cddp_set_history(out, node, 0);
        cddp_rplan_to_node(&pl, node);
        node->d[0] = p;
        err = cddp_node_save(node, 0, xc) < 0 || cddp_node_save_output(node, 1, out) < 0;
        Py_DECREF(node);
        if (err)
            goto done;
    }
    res = out;
    out = NULL;
done:
    Py_XDECREF(xc);
    Py_XDECREF(xl);
    Py_XDECREF(out);
    return (PyObject *)res;
}

PyObject *cddp_reduce_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    static const char *const names[] = {"p", "dim", "keepdim", "dtype"};
    PyObject *a[4];
    if (cddp_reduce_args("norm", args, nargs, kwnames, names, 4, 4, a) < 0)
        return NULL;
    return norm_impl("norm", (TensorObject *)self, a[0] ? a[0] : NULL, a[1], a[2], a[3]);
}

/* torch.norm(input, p, dim, keepdim, out, dtype): out= must be None */
static PyObject *norm_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"p", "dim", "keepdim", "out", "dtype"};
    PyObject *a[5];
    if (cddp_reduce_args("norm", args, nargs, kwnames, names, 5, 5, a) < 0)
        return NULL;
    if (a[3] && a[3] != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError, "cddp: norm(out=...) is not supported");
        return NULL;
    }
    return norm_impl("norm", (TensorObject *)self, a[0], a[1], a[2], a[4]);
}

PyObject *cddp_reduce_fn_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return cddp_reduce_as_function("norm", norm_function, args, nargs, kwnames);
}

static PyObject *vector_norm(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    static const char *const names[] = {"ord", "dim", "keepdim", "dtype"};
    PyObject *a[4];
    if (cddp_reduce_args("vector_norm", args, nargs, kwnames, names, 4, 3, a) < 0)
        return NULL;
    if (a[0] && PyUnicode_Check(a[0])) {
        PyErr_Format(PyExc_RuntimeError, "linalg.vector_norm: ord must be a number, got %U", a[0]);
        return NULL;
    }
    return norm_impl("vector_norm", (TensorObject *)self, a[0], a[1], a[2], a[3]);
}

PyObject *cddp_reduce_fn_vector_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    return cddp_reduce_as_function("vector_norm", vector_norm, args, nargs, kwnames);
}
