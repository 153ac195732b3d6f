/* nn/layer_norm.c — layer normalization as one fused kernel with autograd
 * (torch.nn.functional.layer_norm, torch.nn.LayerNorm).
 *
 *   _layer_norm(x (*, N...), normalized_shape (N...), weight (N...)|None, bias (N...)|None,
 *               eps) -> y (*, N...)
 *
 * Dimension legend: the input is viewed as M rows of N = prod(normalized_shape) elements
 * (x (M, N) contiguous); weight and bias are (N).
 *
 * Forward, per row while it is in cache: mean and biased variance in double (two passes,
 * eight SIMD lanes), rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * w + b. The row statistics
 * (mean, rstd) are kept as a (M, 2) float64 tensor for backward, as torch's native_layer_norm
 * keeps its mean/rstd outputs.
 * Backward (NativeLayerNormBackward0), per row with xhat = (x - mean) * rstd, g = dy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   dw = sum over rows of dy * xhat,  db = sum over rows of dy  (double accumulators)
 */
#include "core/cddp.h"
#include "module.h"
#include "ops/reduce/reduce.h"   /* CDDP_CLONES: AVX2 and baseline clones of the kernels */
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *torch_name(cddp_dtype d)
{
    switch (d) {
    case CDDP_FLOAT32: return "Float";
    case CDDP_FLOAT64: return "Double";
    case CDDP_INT64: return "Long";
    case CDDP_INT32: return "Int";
    case CDDP_BOOL: return "Bool";
    default: return (unsigned)d < CDDP_NDTYPES ? cddp_dtype_name[d] : "unknown";
    }
}

/* "[2, 5]" into buf (truncated to fit) */
static void fmt_list(char *buf, size_t size, int n, const int64_t *v)
{
    size_t k = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < n && k + 24 < size; d++)
        k += (size_t)snprintf(buf + k, size - k, d ? ", %lld" : "%lld", (long long)v[d]);
    snprintf(buf + k, size - k, "]");
}

/* ---- kernels -------------------------------------------------------------------------- */

/* Row sums in double with eight independent lanes, so the compiler keeps them in SIMD
 * registers (one double accumulator cannot be vectorized under IEEE rules):
 *   *s1 = sum(x - shift), *s2 = sum((x - shift)^2)        (ln_moments)
 *   *s1 = sum(x),         *s2 = sum(x * y)                (ln_dots)  */
#define LN_SUMS(NAME, T, EXPR1, EXPR2)                                                   \
    CDDP_CLONES static void NAME(const T *x, const T *y, int64_t n, double shift,           \
                              double *s1, double *s2)                                    \
    {                                                                                    \
        double a[8] = {0}, c[8] = {0};                                                   \
        int64_t j = 0;                                                                   \
        for (; j + 8 <= n; j += 8)                                                       \
            for (int l = 0; l < 8; l++) {                                                \
                int64_t i = j + l;                                                       \
                double d = (double)x[i] - shift;                                         \
                a[l] += EXPR1;                                                           \
                c[l] += EXPR2;                                                           \
            }                                                                            \
        for (int l = 0; j < n; j++, l++) {                                               \
            int64_t i = j;                                                               \
            double d = (double)x[i] - shift;                                             \
            a[l] += EXPR1;                                                               \
            c[l] += EXPR2;                                                               \
        }                                                                                \
        *s1 = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));         \
        *s2 = ((c[0] + c[1]) + (c[2] + c[3])) + ((c[4] + c[5]) + (c[6] + c[7]));         \
    }
LN_SUMS(ln_moments_f32, float, d, d * d)
LN_SUMS(ln_moments_f64, double, d, d * d)
LN_SUMS(ln_dots_f32, float, d, d * (double)y[i])
LN_SUMS(ln_dots_f64, double, d, d * y[i])

/* y (M,N) and stats (M,2) = (mean, rstd) from x (M,N); w, b (N) or NULL. Two passes in
 * double: the mean, then squared deviations from it (with the usual correction for the
 * rounding of the mean); the affine part runs in T, as torch's does. */
#define LN_FORWARD(NAME, T, SFX)                                                         \
    CDDP_CLONES static void NAME(const T *x, const T *w, const T *b, T *y, double *stats,    \
                                 int64_t M, int64_t N, double eps)                       \
    {                                                                                    \
        for (int64_t m = 0; m < M; m++) {                                                \
            const T *xr = x + m * N;                                                     \
            T *yr = y + m * N;                                                           \
            double s, ss;                                                                \
            ln_moments_##SFX(xr, NULL, N, 0.0, &s, &ss);                                 \
            double mean = s / (double)N;                                                 \
            ln_moments_##SFX(xr, NULL, N, mean, &s, &ss);                                \
            double dm = s / (double)N, var = ss / (double)N - dm * dm;                   \
            double rstd = 1.0 / sqrt((var > 0 ? var : 0) + eps);                         \
            stats[2 * m] = mean;                                                         \
            stats[2 * m + 1] = rstd;                                                     \
            T mu = (T)mean, r = (T)rstd;                                                 \
            if (w && b)                                                                  \
                for (int64_t j = 0; j < N; j++)                                          \
                    yr[j] = (xr[j] - mu) * r * w[j] + b[j];                              \
            else if (w)                                                                  \
                for (int64_t j = 0; j < N; j++)                                          \
                    yr[j] = (xr[j] - mu) * r * w[j];                                     \
            else if (b)                                                                  \
                for (int64_t j = 0; j < N; j++)                                          \
                    yr[j] = (xr[j] - mu) * r + b[j];                                     \
            else                                                                         \
                for (int64_t j = 0; j < N; j++)                                          \
                    yr[j] = (xr[j] - mu) * r;                                            \
        }                                                                                \
    }
LN_FORWARD(ln_forward_f32, float, f32)
LN_FORWARD(ln_forward_f64, double, f64)

/* dx (M,N) (or NULL) and dw/db accumulators (N) in double (or NULL) from dy, x, w, stats.
 * `tmp` (2N of T) holds a row's xhat and g = dy * w. */
#define LN_BACKWARD(NAME, T, SFX)                                                        \
    CDDP_CLONES static void NAME(const T *x, const T *w, const double *stats, const T *dy,   \
                                 T *dx, double *dw, double *db, int64_t M, int64_t N,    \
                                 T *tmp)                                                 \
    {                                                                                    \
        T *h = tmp, *g = tmp + N;                                                        \
        for (int64_t m = 0; m < M; m++) {                                                \
            const T *xr = x + m * N, *gr = dy + m * N;                                   \
            T mu = (T)stats[2 * m], r = (T)stats[2 * m + 1];                             \
            for (int64_t j = 0; j < N; j++)                                              \
                h[j] = (xr[j] - mu) * r;                                                 \
            if (dw)                                                                      \
                for (int64_t j = 0; j < N; j++)                                          \
                    dw[j] += (double)gr[j] * h[j];                                       \
            if (db)                                                                      \
                for (int64_t j = 0; j < N; j++)                                          \
                    db[j] += gr[j];                                                      \
            if (!dx)                                                                     \
                continue;                                                                \
            if (w)                                                                       \
                for (int64_t j = 0; j < N; j++)                                          \
                    g[j] = gr[j] * w[j];                                                 \
            else                                                                         \
                memcpy(g, gr, sizeof(T) * (size_t)N);                                    \
            double a, c;                                                                 \
            ln_dots_##SFX(g, h, N, 0.0, &a, &c);                                         \
            T am = (T)(a / (double)N), cm = (T)(c / (double)N);                          \
            T *dr = dx + m * N;                                                          \
            for (int64_t j = 0; j < N; j++)                                              \
                dr[j] = r * (g[j] - am - h[j] * cm);                                     \
        }                                                                                \
    }
LN_BACKWARD(ln_backward_f32, float, f32)
LN_BACKWARD(ln_backward_f64, double, f64)

/* A (N) double accumulator written into a new tensor of dtype dt and the parameter's shape. */
static TensorObject *from_acc(const double *acc, int64_t N, cddp_dtype dt, const cddp_meta *m)
{
    TensorObject *t = cddp_tensor_new(dt, m->ndim, m->shape, 0);
    if (!t)
        return NULL;
    for (int64_t j = 0; j < N; j++) {
        if (dt == CDDP_FLOAT32)
            ((float *)cddp_data(t))[j] = (float)acc[j];
        else
            ((double *)cddp_data(t))[j] = acc[j];
    }
    return t;
}

/* saved: 0 x (M,N) contiguous, 1 weight (N) or None, 2 stats (M,2); i[0] M, i[1] N */
static int layer_norm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *w = NULL, *st = cddp_node_saved(self, 2);
    TensorObject *gy = NULL;
    double *acc = NULL;
    int rc = -1;
    int64_t M = self->i[0], N = self->i[1];
    if (!x || !st)
        return -1;
    if (self->saved[1] && !(w = cddp_node_saved(self, 1)))
        return -1;
    if (!gout[0])
        return 0;
    cddp_dtype dt = x->dtype;
    int want_w = self->n_next > 1 && self->next[1].node != NULL;
    int want_b = self->n_next > 2 && self->next[2].node != NULL;
    gy = cddp_tensor_cast_raw(gout[0], dt);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    TensorObject *wc = w ? cddp_tensor_contiguous_raw(w) : NULL;
    if (!gy || (w && !wc))
        goto done;
    if (self->next[0].node && !(gin[0] = cddp_tensor_new(dt, self->meta[0].ndim,
                                                         self->meta[0].shape, 0)))
        goto done;
    acc = PyMem_Calloc((size_t)(4 * N + 1), sizeof(double));   /* dw, db, then the kernel's tmp */
    if (!acc) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const void *xp = cddp_data(x), *wp = wc ? cddp_data(wc) : NULL, *gp = cddp_data(gy);
        const double *sp = (const double *)cddp_data(st);
        void *dxp = gin[0] ? cddp_data(gin[0]) : NULL;
        double *dw = want_w ? acc : NULL, *db = want_b ? acc + N : NULL;
        Py_BEGIN_ALLOW_THREADS
        if (dt == CDDP_FLOAT32)
            ln_backward_f32(xp, wp, sp, gp, dxp, dw, db, M, N, (float *)(acc + 2 * N));
        else
            ln_backward_f64(xp, wp, sp, gp, dxp, dw, db, M, N, acc + 2 * N);
        Py_END_ALLOW_THREADS
    }
    if (want_w && !(gin[1] = from_acc(acc, N, self->meta[1].dtype, &self->meta[1])))
        goto done;
    if (want_b && !(gin[2] = from_acc(acc + N, N, self->meta[2].dtype, &self->meta[2])))
        goto done;
    rc = 0;
done:
    PyMem_Free(acc);
    Py_XDECREF(gy);
    Py_XDECREF(wc);
    return rc;
}

/* torch's _check_layer_norm_inputs: shapes of weight, bias and the input's trailing dims. */
static int check_inputs(TensorObject *x, int nd, const int64_t *ns, TensorObject *w,
                        TensorObject *b)
{
    char a[256], c[256];
    fmt_list(a, sizeof a, nd, ns);
    if (nd < 1) {
        PyErr_Format(PyExc_RuntimeError, "Expected normalized_shape to be at least "
                     "1-dimensional, i.e., containing at least one element, but got "
                     "normalized_shape = %s", a);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        TensorObject *p = k ? b : w;
        if (p && (p->ndim != nd || memcmp(p->shape, ns, sizeof(int64_t) * nd))) {
            fmt_list(c, sizeof c, p->ndim, p->shape);
            PyErr_Format(PyExc_RuntimeError, "Expected %s to be of same shape as "
                         "normalized_shape, but got %s of shape %s and normalized_shape = %s",
                         k ? "bias" : "weight", k ? "bias" : "weight", c, a);
            return -1;
        }
    }
    if (x->ndim < nd || memcmp(x->shape + x->ndim - nd, ns, sizeof(int64_t) * nd)) {
        char s[256];
        size_t q = (size_t)snprintf(s, sizeof s, "[*");
        for (int d = 0; d < nd && q + 24 < sizeof s; d++)
            q += (size_t)snprintf(s + q, sizeof s - q, ", %lld", (long long)ns[d]);
        snprintf(s + q, sizeof s - q, "]");
        fmt_list(c, sizeof c, x->ndim, x->shape);
        PyErr_Format(PyExc_RuntimeError, "Given normalized_shape=%s, expected input with shape "
                     "%s, but got input of size%s", a, s, c);
        return -1;
    }
    if (x->dtype != CDDP_FLOAT32 && x->dtype != CDDP_FLOAT64) {
        PyErr_Format(PyExc_NotImplementedError,
                     "\"LayerNormKernelImpl\" not implemented for '%s'", torch_name(x->dtype));
        return -1;
    }
    if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "mixed dtype (CPU): expect parameter to have scalar "
                     "type of %s", torch_name(x->dtype));
        return -1;
    }
    return 0;
}

/* Optional Tensor argument: NULL for None; TypeError naming it otherwise. */
static int opt_tensor(PyObject *o, TensorObject **out, const char *what)
{
    *out = NULL;
    if (o == Py_None)
        return 0;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "layer_norm(): argument '%s' must be Tensor, not %s",
                     what, Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = (TensorObject *)o;
    return 0;
}

/* _layer_norm(input, normalized_shape, weight, bias, eps) */
static PyObject *py_layer_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *w, *b, *xc = NULL, *y = NULL, *st = NULL, *wc = NULL, *bc = NULL;
    int64_t ns[CDDP_MAX_DIMS];
    int nd;
    if (nargs != 5 || !cddp_tensor_check(args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "_layer_norm(input, normalized_shape, weight, bias, eps)");
        return NULL;
    }
    x = (TensorObject *)args[0];
    if (opt_tensor(args[2], &w, "weight") < 0 || opt_tensor(args[3], &b, "bias") < 0)
        return NULL;
    {
        PyObject *tup = PyTuple_Pack(1, args[1]);
        int bad = !tup || cddp_parse_shape(tup, &nd, ns) < 0;
        Py_XDECREF(tup);
        if (bad)
            return NULL;
    }
    double eps = PyFloat_AsDouble(args[4]);
    if (eps == -1.0 && PyErr_Occurred())
        return NULL;
    if (check_inputs(x, nd, ns, w, b) < 0)
        return NULL;
    int64_t N = 1, M = 1;
    for (int d = 0; d < nd; d++)
        N *= ns[d];
    for (int d = 0; d < x->ndim - nd; d++)
        M *= x->shape[d];
    int64_t sshape[2] = {M, 2};
    if (!(xc = cddp_tensor_contiguous_raw(x)) ||
        !(y = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0)) ||
        !(st = cddp_tensor_new(CDDP_FLOAT64, 2, sshape, 0)) ||
        (w && !(wc = cddp_tensor_contiguous_raw(w))) ||
        (b && !(bc = cddp_tensor_contiguous_raw(b))))
        goto fail;
    if (N > 0) {
        const void *xp = cddp_data(xc), *wp = wc ? cddp_data(wc) : NULL;
        const void *bp = bc ? cddp_data(bc) : NULL;
        void *yp = cddp_data(y);
        double *sp = (double *)cddp_data(st);
        Py_BEGIN_ALLOW_THREADS
        if (x->dtype == CDDP_FLOAT32)
            ln_forward_f32(xp, wp, bp, yp, sp, M, N, eps);
        else
            ln_forward_f64(xp, wp, bp, yp, sp, M, N, eps);
        Py_END_ALLOW_THREADS
    }
    {
        int err;
        TensorObject *ins[3] = {x, w, b};
        NodeObject *node = cddp_maybe_node("NativeLayerNormBackward0", layer_norm_backward, 3,
                                           ins, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(y, node, 0);
            node->i[0] = M;
            node->i[1] = N;
            int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 2, st) < 0 ||
                      (w && cddp_node_save(node, 1, w) < 0);
            Py_DECREF(node);
            if (bad)
                goto fail;
        }
    }
    Py_DECREF(xc);
    Py_DECREF(st);
    Py_XDECREF(wc);
    Py_XDECREF(bc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    Py_XDECREF(st);
    Py_XDECREF(wc);
    Py_XDECREF(bc);
    return NULL;
}

PyMethodDef cddp_layer_norm_module_methods[] = {
    {"_layer_norm", (PyCFunction)(void (*)(void))py_layer_norm, METH_FASTCALL,
     "_layer_norm(input, normalized_shape, weight, bias, eps): fused layer normalization"},
    {NULL},
};
