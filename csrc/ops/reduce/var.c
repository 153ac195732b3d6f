/* ops/reduce/var.c — variance and standard deviation over dims.
 *
 * Mirrors torch.Tensor / torch functions:
 *   var(dim=None, unbiased=True, keepdim=False, *, correction=None)    VarBackward0
 *   std(dim=None, unbiased=True, keepdim=False, *, correction=None)    StdBackward0
 * with torch's legacy var(unbiased) form and its "degrees of freedom is <= 0" warning.
 *
 * Layout legend: rows (outer, R), R the product of the reduced dims (ops/reduce/plan.c, rows
 * plan); outputs (outer,). Two passes per row in double: the mean, then squared deviations.
 */
#include "ops/reduce/reduce.h"
#include <math.h>

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
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
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
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
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
    cddp_dtype kt = cddp_kdt(x->dtype);            /* float16: computed in float32 */
    if (!(xl = cddp_rplan_layout(&p, x, kt)) ||
        !(out = cddp_tensor_new(kt, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R;
    if (kt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, var_f32(RDATA(xl), RDATA(out), p.outer, p.R, dof, sd));
    else
        CDDP_REDUCE_NOGIL(n, var_f64(RDATA(xl), RDATA(out), p.outer, p.R, dof, sd));
    if (!(out = cddp_reduce_to_dtype(out, x->dtype)))
        goto done;
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

PyObject *cddp_reduce_var(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return var_std((TensorObject *)self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_std(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return var_std((TensorObject *)self, args, nargs, kwnames, 1);
}

