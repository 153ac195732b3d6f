/* nn/norm/group_norm.c — group normalization with autograd (torch.nn.functional.group_norm,
 * torch.group_norm; node NativeGroupNormBackward0).
 *
 *   _group_norm(input (N, C, *), num_groups G, weight (C,)|None, bias (C,)|None, eps) -> y
 *
 * x is viewed as (N, G, D = C/G, S): statistics per (n, g) over the L = D*S contiguous values
 * of the group (one pass around a sample, two for float64; double sums), rstd =
 * 1/sqrt(var + eps); then per (n, c) row of S values y = (x - mean) * (rstd w[c]) + b[c].
 * Backward, from per-(n, c) sums sdy = sum dy and sdyx = sum dy (x - mean):
 *   db[c] = sum_n sdy,  dw[c] = sum_n sdyx rstd,
 *   dx = rstd w[c] dy - rstd A/L - (x - mean) rstd^3 B/L   with A = sum_{c in g} w[c] sdy,
 *                                                           B = sum_{c in g} w[c] sdyx.
 * The node saves the contiguous input, the weight and a (2, N*G) float64 tensor (mean, rstd).
 */
#include "core/cddp.h"
#include "module.h"
#include "nn/norm/norm.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define GN_NOGIL(n, stmt)                                                                  \
    do {                                                                                   \
        if ((n) > CDDP_GIL_FREE_ELEMS) {                                                   \
            Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS                              \
        } else {                                                                           \
            stmt;                                                                          \
        }                                                                                  \
    } while (0)

typedef struct {
    cddp_dtype dt;
    int64_t N, C, G, D, S;     /* x (N, C, S), C = G * D */
} gn_plan;

static void plan_init(gn_plan *p, const TensorObject *x, int64_t G)
{
    p->dt = x->dtype;
    p->N = x->shape[0];
    p->C = x->shape[1];
    p->G = G;
    p->D = p->C / G;
    p->S = 1;
    for (int d = 2; d < x->ndim; d++)
        p->S *= x->shape[d];
}

/* mean (N*G,) and rstd (N*G,) of x; scratch here. 0 or -1 with MemoryError. */
static int group_stats(const gn_plan *p, const void *x, double eps, double *mean, double *rstd)
{
    int64_t R = p->N * p->G, L = p->D * p->S;
    double *s = PyMem_Malloc(sizeof(double) * (size_t)(2 * R + 1));
    if (!s) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t r = 0; r < R; r++)      /* centre: the group's first value */
        mean[r] = L ? (p->dt == CDDP_FLOAT32 ? ((const float *)x)[r * L]
                                             : ((const double *)x)[r * L]) : 0.0;
    for (int pass = 0; pass < (p->dt == CDDP_FLOAT64 ? 2 : 1) && L > 0; pass++) {
        GN_NOGIL(R * L, cddp_norm_rows_moments(p->dt, x, R, L, mean, R, s, s + R));
        for (int64_t r = 0; r < R; r++) {
            double m2 = s[R + r] - s[r] * s[r] / (double)L;
            mean[r] += s[r] / (double)L;
            rstd[r] = m2 > 0 ? m2 : 0;
        }
    }
    for (int64_t r = 0; r < R; r++)
        rstd[r] = L ? 1.0 / sqrt(rstd[r] / (double)L + eps) : 0.0;
    PyMem_Free(s);
    return 0;
}

/* dx coefficients per (n, c) from the per-row sums (norm.h's elemt form). */
static void dx_coefficients(const gn_plan *p, const double *mean, const double *rstd,
                            const double *w, const double *sdy, const double *sdyx, double *m,
                            double *pc, double *q, double *r)
{
    double L = (double)(p->D * p->S);
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t g = 0; g < p->G; g++) {
            int64_t ng = n * p->G + g;
            double A = 0, B = 0, rs = rstd[ng];
            for (int64_t d = 0; d < p->D; d++) {
                int64_t c = g * p->D + d;
                A += w[c] * sdy[n * p->C + c];
                B += w[c] * sdyx[n * p->C + c];
            }
            for (int64_t d = 0; d < p->D; d++) {
                int64_t c = g * p->D + d, row = n * p->C + c;
                m[row] = mean[ng];
                pc[row] = rs * w[c];
                q[row] = L > 0 ? -rs * rs * rs * B / L : 0.0;
                r[row] = L > 0 ? -rs * A / L : 0.0;
            }
        }
}

static int group_norm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *st = cddp_node_saved(self, 1), *w = NULL;
    TensorObject *g = NULL;
    double *buf = NULL;
    int rc = -1;
    if (!x || !st || (self->i[1] && !(w = cddp_node_saved(self, 2))))
        return -1;
    if (!gout[0])
        return 0;
    gn_plan p;
    plan_init(&p, x, self->i[0]);
    int64_t NC = p.N * p.C, NG = p.N * p.G, C = p.C;
    const double *mean = (const double *)cddp_data(st), *rstd = mean + NG;
    g = cddp_tensor_cast_raw(gout[0], p.dt);
    if (g && !cddp_is_contiguous(g))
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    buf = PyMem_Malloc(sizeof(double) * (size_t)(6 * NC + 2 * C + 1));
    if (!g || !buf)
        goto done;
    double *m = buf, *sdy = buf + NC, *sdyx = buf + 2 * NC, *pc = buf + 3 * NC,
           *q = buf + 4 * NC, *r = buf + 5 * NC, *wv = buf + 6 * NC, *acc = wv + C;
    for (int64_t c = 0; c < C; c++)
        wv[c] = w ? cddp_norm_at(w, c) : 1.0;
    for (int64_t row = 0; row < NC; row++)
        m[row] = mean[(row / C) * p.G + (row % C) / p.D];
    GN_NOGIL(NC * p.S, cddp_norm_rows_reduce(p.dt, cddp_data(g), cddp_data(x), NC, p.S, m, NC,
                                             sdy, sdyx));
    if (self->next[0].node) {
        if (!(gin[0] = cddp_tensor_new(p.dt, x->ndim, x->shape, 0)))
            goto done;
        dx_coefficients(&p, mean, rstd, wv, sdy, sdyx, m, pc, q, r);
        GN_NOGIL(NC * p.S, cddp_norm_rows_elemt(p.dt, cddp_data(g), cddp_data(x),
                                                cddp_data(gin[0]), NC, p.S, m, pc, q, r, NC));
    }
    for (int k = 1; k <= 2; k++) {           /* dw = sum_n sdyx rstd, db = sum_n sdy */
        if (!self->next[k].node)
            continue;
        for (int64_t c = 0; c < C; c++) {
            acc[c] = 0;
            for (int64_t n = 0; n < p.N; n++)
                acc[c] += k == 1 ? sdyx[n * C + c] * rstd[n * p.G + c / p.D] : sdy[n * C + c];
        }
        if (!(gin[k] = cddp_norm_param_grad(&self->meta[k], acc, C)))
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(g);
    PyMem_Free(buf);
    return rc;
}

/* "[4, 3, 5]" */
static void shape_str(char *buf, size_t n, const TensorObject *t)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

static int check_args(TensorObject *x, int64_t G, TensorObject *w, TensorObject *b)
{
    char xs[200], ps[200];
    if (cddp_refuse_narrow(x, "group_norm") < 0 || cddp_refuse_narrow(w, "group_norm") < 0 ||
        cddp_refuse_narrow(b, "group_norm") < 0)
        return -1;
    if (!cddp_is_floating(x->dtype) || x->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "group_norm(): expected a floating input of at least "
                     "2 dimensions (N, C, *), got %d-D %s", x->ndim, cddp_dtype_name[x->dtype]);
        return -1;
    }
    shape_str(xs, sizeof xs, x);
    if (G <= 0 || x->shape[1] % G) {
        PyErr_Format(PyExc_RuntimeError, "Expected number of channels in input to be divisible "
                     "by num_groups, but got input of shape %s and num_groups=%lld", xs,
                     (long long)G);
        return -1;
    }
    TensorObject *ps_t[2] = {w, b};
    for (int i = 0; i < 2; i++) {
        TensorObject *t = ps_t[i];
        if (!t)
            continue;
        if (t->ndim != 1 || t->shape[0] != x->shape[1]) {
            shape_str(ps, sizeof ps, t);
            PyErr_Format(PyExc_RuntimeError, "Expected %s to be a vector of size equal to the "
                         "number of channels in input, but got %s of shape %s and input of "
                         "shape %s", i ? "bias" : "weight", i ? "bias" : "weight", ps, xs);
            return -1;
        }
        if (cddp_norm_check_param(t, i ? "bias" : "weight", x->shape[1], x->dtype) < 0)
            return -1;
    }
    return 0;
}

static PyObject *py_group_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *w, *b, *xc = NULL, *y = NULL, *st = NULL;
    double *buf = NULL;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_group_norm(input, num_groups, weight, bias, eps)");
        return NULL;
    }
    if (cddp_norm_opt_tensor(args[0], "group_norm", "input", &x) < 0 || !x ||
        cddp_norm_opt_tensor(args[2], "group_norm", "weight", &w) < 0 ||
        cddp_norm_opt_tensor(args[3], "group_norm", "bias", &b) < 0)
        return x ? NULL : PyErr_Format(PyExc_TypeError, "group_norm(): input must be a Tensor");
    int64_t G = PyLong_AsLongLong(args[1]);
    double eps = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred() || check_args(x, G, w, b) < 0)
        return NULL;
    gn_plan p;
    plan_init(&p, x, G);
    int64_t NC = p.N * p.C, st_shape[2] = {2, p.N * G};
    xc = cddp_tensor_contiguous_raw(x);
    st = cddp_tensor_new(CDDP_FLOAT64, 2, st_shape, 0);
    buf = PyMem_Malloc(sizeof(double) * (size_t)(3 * NC + 1));
    if (!xc || !st || !buf)
        goto fail;
    double *mean = (double *)cddp_data(st), *rstd = mean + p.N * G;
    if (group_stats(&p, cddp_data(xc), eps, mean, rstd) < 0)
        goto fail;
    for (int64_t row = 0; row < NC; row++) {
        int64_t c = row % p.C, ng = (row / p.C) * G + c / p.D;
        buf[row] = mean[ng];
        buf[NC + row] = rstd[ng] * (w ? cddp_norm_at(w, c) : 1.0);
        buf[2 * NC + row] = b ? cddp_norm_at(b, c) : 0.0;
    }
    if (!(y = cddp_tensor_new(p.dt, x->ndim, x->shape, 0)))
        goto fail;
    GN_NOGIL(NC * p.S, cddp_norm_rows_affine(p.dt, cddp_data(xc), cddp_data(y), NC, p.S, buf,
                                             buf + NC, buf + 2 * NC, NC));
    int err;
    TensorObject *ins[3] = {x, w, b};
    NodeObject *node = cddp_maybe_node("NativeGroupNormBackward0", group_norm_backward, 3, ins,
                                       &err);
    if (err)
        goto fail;
    if (node) {
        cddp_set_history(y, node, 0);
        node->i[0] = G;
        node->i[1] = w != NULL;
        int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, st) < 0 ||
                  (w && cddp_node_save(node, 2, w) < 0);
        Py_DECREF(node);
        if (bad)
            goto fail;
    }
    Py_DECREF(xc);
    Py_DECREF(st);
    PyMem_Free(buf);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(st);
    Py_XDECREF(y);
    PyMem_Free(buf);
    return NULL;
}

PyMethodDef cddp_group_norm_module_methods[] = {
    {"_group_norm", (PyCFunction)(void (*)(void))py_group_norm, METH_FASTCALL,
     "_group_norm(input, num_groups, weight, bias, eps)"},
    {NULL},
};
