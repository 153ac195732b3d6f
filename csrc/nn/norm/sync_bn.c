/* nn/norm/sync_bn.c — the per-rank halves of SyncBatchNorm, as torch splits them (torch's
 * batch_norm_stats, batch_norm_gather_stats_with_counts, batch_norm_elemt,
 * batch_norm_backward_reduce, batch_norm_backward_elemt). No autograd: SyncBatchNorm's
 * Function (cddp/nn/modules/_functions.py) calls them around its collectives.
 *
 *   _batch_norm_stats(x (N, C, *), eps) -> (mean (C,), invstd (C,))
 *   _batch_norm_gather_stats_with_counts(x, mean_all (W, C), invstd_all (W, C),
 *       running_mean|None, running_var|None, momentum, eps, counts (W,)) -> (mean, invstd)
 *   _batch_norm_elemt(x, weight|None, bias|None, mean, invstd, eps) -> y
 *   _batch_norm_backward_reduce(dy, x, mean, invstd, weight|None, input_g, weight_g, bias_g)
 *       -> (sum_dy|None, sum_dy_xmu|None, grad_weight|None, grad_bias|None)
 *   _batch_norm_backward_elemt(dy, x, mean, invstd, weight|None, sum_dy, sum_dy_xmu,
 *       counts (W,)) -> dx
 *
 * W is the world size (ranks whose count is 0 are skipped). Ranks are merged with Chan's
 * parallel-variance update, in rank order, in double: each rank's sum of squared deviations
 * is recovered as (1/invstd^2 - eps) * count. Outputs have the input's dtype.
 */
#include "core/cddp.h"
#include "module.h"
#include "nn/norm/norm.h"
#include <math.h>
#include <string.h>

/* Positional tensor argument i (or None when may_none): TypeError otherwise. */
static int arg_tensor(PyObject *const *args, int i, const char *fname, const char *what,
                      int may_none, TensorObject **out)
{
    if (cddp_norm_opt_tensor(args[i], fname, what, out) < 0)
        return -1;
    if (!*out && !may_none) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not None", fname,
                     what);
        return -1;
    }
    return 0;
}

static int check_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *usage)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s", usage);
        return -1;
    }
    return 0;
}

/* x as a contiguous float tensor of >= 2 dims and its plan. New reference. */
static TensorObject *input_plan(TensorObject *x, const char *fname, cddp_bn_plan *p)
{
    if (cddp_refuse_narrow(x, fname) < 0)
        return NULL;
    if (!cddp_is_floating(x->dtype) || x->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "%s(): expected a floating input of at least 2 "
                     "dimensions (N, C, *), got %d-D %s", fname, x->ndim,
                     cddp_dtype_name[x->dtype]);
        return NULL;
    }
    cddp_bn_plan_init(p, x);
    return cddp_tensor_contiguous_raw(x);
}

/* (C,) doubles of an optional per-channel tensor (fill when None), checked like batch norm's. */
static int channel_doubles(TensorObject *t, const char *what, int64_t C, cddp_dtype dt,
                           double fill, double *v)
{
    if (!t) {
        for (int64_t c = 0; c < C; c++)
            v[c] = fill;
        return 0;
    }
    if (cddp_norm_check_param(t, what, C, dt) < 0)
        return -1;
    cddp_norm_to_doubles(t, C, v);
    return 0;
}

static PyObject *pair(TensorObject *a, TensorObject *b)
{
    PyObject *r = (a && b) ? PyTuple_Pack(2, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

static PyObject *py_stats(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc;
    cddp_bn_plan p;
    if (check_nargs(nargs, 2, "_batch_norm_stats(input, eps)") < 0 ||
        arg_tensor(args, 0, "batch_norm_stats", "input", 0, &x) < 0)
        return NULL;
    double eps = PyFloat_AsDouble(args[1]);
    if (PyErr_Occurred() || !(xc = input_plan(x, "batch_norm_stats", &p)))
        return NULL;
    int64_t C = p.C, M = p.N * p.S;
    double *v = PyMem_Malloc(sizeof(double) * (size_t)(2 * C + 1));
    PyObject *r = NULL;
    if (!v) {
        PyErr_NoMemory();
    } else if (cddp_bn_moments(&p, cddp_data(xc), v, v + C) == 0) {
        for (int64_t c = 0; c < C; c++)
            v[C + c] = 1.0 / sqrt((M ? v[C + c] / (double)M : 0.0) + eps);
        r = pair(cddp_norm_from_doubles(v, C, p.dt), cddp_norm_from_doubles(v + C, C, p.dt));
    }
    PyMem_Free(v);
    Py_DECREF(xc);
    return r;
}

/* Chan's merge of W ranks' (count, mean, invstd) per channel; updates running stats. */
static void gather(int64_t W, int64_t C, const TensorObject *ma, const TensorObject *ia,
                   const TensorObject *cnt, double eps, double mom, TensorObject *rm,
                   TensorObject *rv, double *mean, double *invstd)
{
    for (int64_t c = 0; c < C; c++) {
        double n = 0, avg = 0, m2 = 0;
        for (int64_t w = 0; w < W; w++) {
            double k = cddp_get_double(cnt, w), mu = cddp_get_double(ma, w * C + c);
            double s = 1.0 / cddp_get_double(ia, w * C + c), f;
            if (!(k > 0))
                continue;
            f = 1.0 / (n + k);
            m2 += (s * s - eps) * k + (avg - mu) * (avg - mu) * n * k * f;
            avg = n * f * avg + k * f * mu;
            n += k;
        }
        mean[c] = avg;
        invstd[c] = 1.0 / sqrt((n > 0 ? m2 / n : 0.0) + eps);
        if (rm)
            cddp_norm_set(rm, c, (1 - mom) * cddp_norm_at(rm, c) + mom * avg);
        if (rv)
            cddp_norm_set(rv, c, (1 - mom) * cddp_norm_at(rv, c) + mom * m2 / (n - 1));
    }
    if (rm)
        cddp_bump_version(rm);
    if (rv)
        cddp_bump_version(rv);
}

static PyObject *py_gather_stats(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *fn = "batch_norm_gather_stats_with_counts";
    TensorObject *x, *ma, *ia, *rm, *rv, *cnt;
    if (check_nargs(nargs, 8, "_batch_norm_gather_stats_with_counts(input, mean_all, "
                    "invstd_all, running_mean, running_var, momentum, eps, counts)") < 0 ||
        arg_tensor(args, 0, fn, "input", 0, &x) < 0 ||
        arg_tensor(args, 1, fn, "mean", 0, &ma) < 0 ||
        arg_tensor(args, 2, fn, "invstd", 0, &ia) < 0 ||
        arg_tensor(args, 3, fn, "running_mean", 1, &rm) < 0 ||
        arg_tensor(args, 4, fn, "running_var", 1, &rv) < 0 ||
        arg_tensor(args, 7, fn, "counts", 0, &cnt) < 0)
        return NULL;
    double mom = PyFloat_AsDouble(args[5]), eps = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return NULL;
    int64_t W = cddp_numel(cnt), C = x->ndim > 1 ? x->shape[1] : 0;
    if (ma->ndim != 2 || ia->ndim != 2 || ma->shape[0] != W || ia->shape[0] != W ||
        ma->shape[1] != C || ia->shape[1] != C) {
        PyErr_Format(PyExc_RuntimeError, "%s(): expected mean and invstd of shape (%lld, %lld) "
                     "(world size, channels)", fn, (long long)W, (long long)C);
        return NULL;
    }
    if (cddp_refuse_narrow(ma, "batch_norm_gather_stats") < 0 ||
        cddp_refuse_narrow(rm, "batch_norm_gather_stats") < 0 ||
        cddp_refuse_narrow(rv, "batch_norm_gather_stats") < 0)
        return NULL;
    if (!cddp_is_floating(ma->dtype) ||
        (rm && cddp_norm_check_param(rm, "running_mean", C, rm->dtype) < 0) ||
        (rv && cddp_norm_check_param(rv, "running_var", C, rv->dtype) < 0))
        return PyErr_Occurred() ? NULL
                                : PyErr_Format(PyExc_RuntimeError, "%s(): expected floating "
                                               "mean and invstd", fn);
    double *v = PyMem_Malloc(sizeof(double) * (size_t)(2 * C + 1));
    if (!v)
        return PyErr_NoMemory();
    gather(W, C, ma, ia, cnt, eps, mom, rm, rv, v, v + C);
    PyObject *r = pair(cddp_norm_from_doubles(v, C, ma->dtype),
                       cddp_norm_from_doubles(v + C, C, ma->dtype));
    PyMem_Free(v);
    return r;
}

static PyObject *py_elemt(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *fn = "batch_norm_elemt";
    TensorObject *x, *w, *b, *mt, *it, *xc = NULL, *y = NULL;
    cddp_bn_plan p;
    double *v = NULL;
    if (check_nargs(nargs, 6, "_batch_norm_elemt(input, weight, bias, mean, invstd, eps)") < 0 ||
        arg_tensor(args, 0, fn, "input", 0, &x) < 0 || arg_tensor(args, 1, fn, "weight", 1, &w) < 0 ||
        arg_tensor(args, 2, fn, "bias", 1, &b) < 0 || arg_tensor(args, 3, fn, "mean", 0, &mt) < 0 ||
        arg_tensor(args, 4, fn, "invstd", 0, &it) < 0 || !(xc = input_plan(x, fn, &p)))
        return NULL;
    int64_t C = p.C;
    if (!(v = PyMem_Malloc(sizeof(double) * (size_t)(4 * C + 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (channel_doubles(w, "weight", C, p.dt, 1.0, v) < 0 ||
        channel_doubles(b, "bias", C, p.dt, 0.0, v + C) < 0 ||
        channel_doubles(mt, "mean", C, mt->dtype, 0.0, v + 2 * C) < 0 ||
        channel_doubles(it, "invstd", C, it->dtype, 0.0, v + 3 * C) < 0)
        goto done;
    for (int64_t c = 0; c < C; c++)
        v[c] *= v[3 * C + c];
    if ((y = cddp_tensor_new(p.dt, x->ndim, x->shape, 0)) &&
        cddp_bn_affine(&p, cddp_data(xc), cddp_data(y), v + 2 * C, v, v + C) < 0)
        Py_CLEAR(y);
done:
    PyMem_Free(v);
    Py_DECREF(xc);
    return (PyObject *)y;
}

/* dy and x contiguous of one dtype, with the plan and mean/invstd/weight doubles: what both
 * backward primitives start from. v gets 3*C doubles: mean, invstd, weight (1 when None). */
static int backward_inputs(PyObject *const *args, const char *fn, TensorObject **gc,
                           TensorObject **xc, cddp_bn_plan *p, double **v)
{
    TensorObject *g, *x, *mt, *it, *w;
    *gc = *xc = NULL;
    *v = NULL;
    if (arg_tensor(args, 0, fn, "grad_out", 0, &g) < 0 || arg_tensor(args, 1, fn, "input", 0, &x) < 0 ||
        arg_tensor(args, 2, fn, "mean", 0, &mt) < 0 || arg_tensor(args, 3, fn, "invstd", 0, &it) < 0 ||
        arg_tensor(args, 4, fn, "weight", 1, &w) < 0 || !(*xc = input_plan(x, fn, p)))
        return -1;
    if (g->ndim != x->ndim || memcmp(g->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim)) {
        PyErr_Format(PyExc_RuntimeError, "%s(): grad_out and input must have the same shape", fn);
        return -1;
    }
    *gc = cddp_tensor_cast_raw(g, p->dt);
    if (*gc && !cddp_is_contiguous(*gc))
        Py_SETREF(*gc, cddp_tensor_contiguous_raw(*gc));
    if (!*gc)
        return -1;
    if (!(*v = PyMem_Malloc(sizeof(double) * (size_t)(7 * p->C + 1)))) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t C = p->C;
    if (channel_doubles(mt, "mean", C, mt->dtype, 0.0, *v) < 0 ||
        channel_doubles(it, "invstd", C, it->dtype, 0.0, *v + C) < 0 ||
        channel_doubles(w, "weight", C, w ? w->dtype : p->dt, 1.0, *v + 2 * C) < 0)
        return -1;
    return 0;
}

static PyObject *py_backward_reduce(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *fn = "batch_norm_backward_reduce";
    TensorObject *gc = NULL, *xc = NULL, *out[4] = {NULL, NULL, NULL, NULL};
    cddp_bn_plan p;
    double *v = NULL;
    PyObject *r = NULL;
    int want[3];
    if (check_nargs(nargs, 8, "_batch_norm_backward_reduce(grad_out, input, mean, invstd, "
                    "weight, input_g, weight_g, bias_g)") < 0)
        return NULL;
    for (int i = 0; i < 3; i++)
        if ((want[i] = PyObject_IsTrue(args[5 + i])) < 0)
            return NULL;
    if (backward_inputs(args, fn, &gc, &xc, &p, &v) < 0)
        goto done;
    int64_t C = p.C;
    double *sdy = v + 3 * C, *sdyx = v + 4 * C, *gw = v + 5 * C;
    if (cddp_bn_reduce(&p, cddp_data(gc), cddp_data(xc), v, sdy, sdyx) < 0)
        goto done;
    for (int64_t c = 0; c < C; c++)
        gw[c] = sdyx[c] * v[C + c];
    const double *src[4] = {sdy, sdyx, gw, sdy};
    const int on[4] = {want[0], want[0], want[1], want[2]};
    for (int i = 0; i < 4; i++)
        if (on[i] && !(out[i] = cddp_norm_from_doubles(src[i], C, p.dt)))
            goto done;
    r = PyTuple_New(4);
    for (int i = 0; r && i < 4; i++)
        PyTuple_SET_ITEM(r, i, out[i] ? Py_NewRef(out[i]) : Py_NewRef(Py_None));
done:
    for (int i = 0; i < 4; i++)
        Py_XDECREF(out[i]);
    Py_XDECREF(gc);
    Py_XDECREF(xc);
    PyMem_Free(v);
    return r;
}

static PyObject *py_backward_elemt(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *fn = "batch_norm_backward_elemt";
    TensorObject *gc = NULL, *xc = NULL, *sd, *sx, *cnt, *dx = NULL;
    cddp_bn_plan p;
    double *v = NULL, total = 0;
    if (check_nargs(nargs, 8, "_batch_norm_backward_elemt(grad_out, input, mean, invstd, "
                    "weight, sum_dy, sum_dy_xmu, count)") < 0 ||
        arg_tensor(args, 5, fn, "sum_dy", 0, &sd) < 0 ||
        arg_tensor(args, 6, fn, "sum_dy_xmu", 0, &sx) < 0 ||
        arg_tensor(args, 7, fn, "count", 0, &cnt) < 0)
        return NULL;
    if (backward_inputs(args, fn, &gc, &xc, &p, &v) < 0)
        goto done;
    int64_t C = p.C;
    double *a = v + 3 * C, *b = v + 4 * C, *pc = v + 5 * C, *q = v + 6 * C;
    if (channel_doubles(sd, "sum_dy", C, sd->dtype, 0.0, a) < 0 ||
        channel_doubles(sx, "sum_dy_xmu", C, sx->dtype, 0.0, b) < 0)
        goto done;
    for (int64_t w = 0; w < cddp_numel(cnt); w++)
        total += cddp_get_double(cnt, w);
    for (int64_t c = 0; c < C; c++) {      /* dx = (dy - a/M - (x-mean) invstd^2 b/M) invstd w */
        double is = v[C + c], s = is * v[2 * C + c];
        pc[c] = s;
        q[c] = total > 0 ? -s * is * is * b[c] / total : 0.0;
        a[c] = total > 0 ? -s * a[c] / total : 0.0;
    }
    if ((dx = cddp_tensor_new(p.dt, xc->ndim, xc->shape, 0)) &&
        cddp_bn_elemt(&p, cddp_data(gc), cddp_data(xc), cddp_data(dx), v, pc, q, a) < 0)
        Py_CLEAR(dx);
done:
    Py_XDECREF(gc);
    Py_XDECREF(xc);
    PyMem_Free(v);
    return (PyObject *)dx;
}

#define FAST(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
PyMethodDef cddp_sync_bn_module_methods[] = {
    {"_batch_norm_stats", FAST(py_stats), "_batch_norm_stats(input, eps) -> (mean, invstd)"},
    {"_batch_norm_gather_stats_with_counts", FAST(py_gather_stats),
     "merge per-rank (mean, invstd, count) into the global mean/invstd; updates running stats"},
    {"_batch_norm_elemt", FAST(py_elemt), "(x - mean) * invstd * weight + bias"},
    {"_batch_norm_backward_reduce", FAST(py_backward_reduce),
     "-> (sum_dy, sum_dy_xmu, grad_weight, grad_bias)"},
    {"_batch_norm_backward_elemt", FAST(py_backward_elemt), "-> grad_input"},
    {NULL},
};
