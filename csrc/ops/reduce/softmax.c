/* ops/reduce/softmax.c — normalizing exponentials along a dim.
 *
 * Mirrors torch:
 *   softmax(dim, dtype=None)        y = exp(x - max) / sum(exp(x - max))   SoftmaxBackward0
 *   log_softmax(dim, dtype=None)    y = x - max - log(sum(exp(x - max)))   LogSoftmaxBackward0
 *   logsumexp(dim, keepdim=False)   max + log(sum(exp(x - max)))           LogsumexpBackward0
 *   torch.softmax / nn.functional.softmax(input, dim=None, _stacklevel=3, dtype=None)
 *
 * Each row is normalized by one C call while it is in cache: a vector max, exp(x - max) into
 * the output (float32 uses cddp_exp_f32, which vectorizes), a pairwise sum in double, then
 * the scale. Subtracting the max keeps exp finite, so softmax([1000, 1000]) is [0.5, 0.5].
 * Backward is one fused pass per row over the saved output y:
 *   softmax:     gin = y * (g - sum(g * y))        log_softmax: gin = g - exp(y) * sum(g)
 *
 * Layout legend: input as (outer, R, inner), R the softmax dim (ops/reduce/reduce.h).
 */
/* The float selects in cddp_exp_f32 must stay selects for the loops to vectorize: GCC keeps
 * them as branches unless told FP operations do not trap (clang's default already); the
 * results are the same either way. fp-contract: the FMA clone (common/clones.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif
#include "ops/reduce/reduce.h"
#include <math.h>

#define LANES 256

/* ---- kernels -------------------------------------------------------------------------- */

static inline double exp_f64(double x)
{
    return exp(x);
}
#define EXP_f32 cddp_exp_f32
#define EXP_f64 exp_f64

/* sum_r exp(x[r] - m) over a row; y[r] = exp(x[r] - m) when keep (float64: always, y is the
 * scratch of its pairwise sum). Always inlined, as the kernels' clones need. */
#define row_sumexp_f32 cddp_row_sumexp_f32

CDDP_MATH_INLINE double row_sumexp_f64(const double *x, double *y, int64_t n, double m,
                                       int keep)
{
    (void)keep;
    for (int64_t r = 0; r < n; r++)
        y[r] = exp(x[r] - m);
    return cddp_pw_sum_f64(y, n);
}

/* y (outer, R, inner) = softmax (lg: log_softmax) over R of x. Rows (inner == 1) take the
 * vector path: max, the sum of exp (written to y for softmax), then scale (or x - max -
 * log(sum)). A row holding a NaN comes out all NaN, as in torch. */
#define SOFTMAX_KERNEL(NAME, T, SFX)                                                     \
    CDDP_CLONES static void NAME(const T *x, T *y, int64_t outer, int64_t R, int64_t inner, \
                              int lg)                                                    \
    {                                                                                    \
        for (int64_t o = 0; o < outer && R > 0; o++) {                                   \
            if (inner == 1) {                                                            \
                const T *xr = x + o * R;                                                 \
                T *yr = y + o * R;                                                       \
                int nan;                                                                 \
                T m = cddp_rowmax_##SFX(xr, R, 0, &nan);                                 \
                double s = row_sumexp_##SFX(xr, yr, R, m, !lg);                          \
                if (lg) {                                                                \
                    T lse = (T)log(s);                                                   \
                    for (int64_t r = 0; r < R; r++)                                      \
                        yr[r] = (xr[r] - m) - lse;                                       \
                } else {                                                                 \
                    T inv = (T)(1. / s);                                                 \
                    for (int64_t r = 0; r < R; r++)                                      \
                        yr[r] *= inv;                                                    \
                }                                                                        \
                continue;                                                                \
            }                                                                            \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                T m[LANES];                                                              \
                double s[LANES];                                                         \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                const T *xb = x + o * R * inner + i0;                                    \
                T *yb = y + o * R * inner + i0;                                          \
                for (int64_t i = 0; i < nb; i++) {                                       \
                    m[i] = xb[i];                                                        \
                    s[i] = 0.;                                                           \
                }                                                                        \
                for (int64_t r = 1; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++)                                     \
                        m[i] = xb[r * inner + i] > m[i] ? xb[r * inner + i] : m[i];      \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        T e = EXP_##SFX(xb[r * inner + i] - m[i]);                       \
                        yb[r * inner + i] = e;                                           \
                        s[i] += e;                                                       \
                    }                                                                    \
                for (int64_t i = 0; i < nb; i++)                                         \
                    s[i] = lg ? log(s[i]) : 1. / s[i];                                   \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        int64_t k = r * inner + i;                                       \
                        yb[k] = lg ? (xb[k] - m[i]) - (T)s[i] : (T)(yb[k] * s[i]);       \
                    }                                                                    \
            }                                                                            \
        }                                                                                \
    }
SOFTMAX_KERNEL(softmax_f32, float, f32)
SOFTMAX_KERNEL(softmax_f64, double, f64)

/* float16 / bfloat16 log_softmax over rows (outer, R) of float values: torch's last-dim kernel
 * keeps the sum of exponentials and its log in the dtype (each rounded), then writes
 * (x - max) - log(sum) in float, rounded once (the caller's cast). */
static void log_softmax_rows_reduced(const float *x, float *y, int64_t outer, int64_t R,
                                     cddp_dtype dt)
{
    for (int64_t o = 0; o < outer && R > 0; o++) {
        const float *xr = x + o * R;
        float *yr = y + o * R;
        int nan;
        float m = cddp_rowmax_f32(xr, R, 0, &nan);
        for (int64_t r = 0; r < R; r++)
            yr[r] = EXP_f32(xr[r] - m);
        float s = cddp_round_to(dt, (float)cddp_pw_sum_f32(yr, R));
        float lse = cddp_round_to(dt, logf(s));
        for (int64_t r = 0; r < R; r++)
            yr[r] = (xr[r] - m) - lse;
    }
}

/* gin from g and the saved output y, both (outer, R, inner). Rows use gin as scratch for
 * the products g * y so the sum is a vectorized pairwise one. */
#define SOFTMAX_BACKWARD(NAME, T, SFX)                                                   \
    CDDP_CLONES static void NAME(const T *y, const T *g, T *gin, int64_t outer, int64_t R,  \
                              int64_t inner, int lg)                                     \
    {                                                                                    \
        for (int64_t o = 0; o < outer && R > 0; o++) {                                   \
            if (inner == 1) {                                                            \
                const T *yr = y + o * R, *gr = g + o * R;                                \
                T *dr = gin + o * R;                                                     \
                if (lg) {                                                                \
                    T s = (T)cddp_pw_sum_##SFX(gr, R);                                   \
                    for (int64_t r = 0; r < R; r++)                                      \
                        dr[r] = gr[r] - EXP_##SFX(yr[r]) * s;                            \
                } else {                                                                 \
                    for (int64_t r = 0; r < R; r++)                                      \
                        dr[r] = gr[r] * yr[r];                                           \
                    T s = (T)cddp_pw_sum_##SFX(dr, R);                                   \
                    for (int64_t r = 0; r < R; r++)                                      \
                        dr[r] = yr[r] * (gr[r] - s);                                     \
                }                                                                        \
                continue;                                                                \
            }                                                                            \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                double s[LANES];                                                         \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                int64_t base = o * R * inner + i0;                                       \
                for (int64_t i = 0; i < nb; i++)                                         \
                    s[i] = 0.;                                                           \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        int64_t k = base + r * inner + i;                                \
                        s[i] += lg ? (double)g[k] : (double)(g[k] * y[k]);               \
                    }                                                                    \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        int64_t k = base + r * inner + i;                                \
                        gin[k] = lg ? (T)(g[k] - EXP_##SFX(y[k]) * (T)s[i])              \
                                    : (T)(y[k] * (g[k] - (T)s[i]));                      \
                    }                                                                    \
            }                                                                            \
        }                                                                                \
    }
SOFTMAX_BACKWARD(softmax_bw_f32, float, f32)
SOFTMAX_BACKWARD(softmax_bw_f64, double, f64)

/* ---- softmax / log_softmax ------------------------------------------------------------ */

/* saved: 0 = output y; i[2] = log flag */
static int softmax_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *y, *yl = NULL, *g = NULL, *r = NULL;
    int lg = (int)self->i[2], rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(y = cddp_node_saved(self, 0)))
        return -1;
    cddp_dtype dt = cddp_kdt(y->dtype);            /* float16: computed in float32 */
    cddp_rplan_from_node(&p, self, 0);
    /* y and g have the input's shape: their layout is the plan's (a single dim) */
    if (!(yl = cddp_rplan_layout(&p, y, dt)) || !(g = cddp_rplan_layout(&p, gout[0], dt)) ||
        !(r = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, softmax_bw_f32(RDATA(yl), RDATA(g), RDATA(r), p.outer,
                                            p.R, p.inner, lg));
    else
        CDDP_REDUCE_NOGIL(n, softmax_bw_f64(RDATA(yl), RDATA(g), RDATA(r), p.outer,
                                            p.R, p.inner, lg));
    gin[0] = cddp_tensor_cast_raw(r, self->meta[0].dtype);   /* softmax(dtype=) casts back */
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(yl);
    Py_XDECREF(g);
    Py_XDECREF(r);
    return rc;
}

static PyObject *softmax_impl(TensorObject *x, PyObject *dimo, PyObject *dto, int lg)
{
    const char *fname = lg ? "log_softmax" : "softmax";
    cddp_rplan p;
    int d, has_dt, err;
    cddp_dtype dt;
    TensorObject *xl = NULL, *out = NULL, *res = NULL;
    if (cddp_reduce_dtype(dto, &has_dt, &dt) < 0)
        return NULL;
    if (!dimo || dimo == Py_None) {
        /* torch's legacy implicit choice */
        if (PyErr_WarnFormat(PyExc_UserWarning, 2,
                             "Implicit dimension choice for %s has been deprecated. Change the "
                             "call to include dim=X as an argument.", fname) < 0)
            return NULL;
        d = (x->ndim == 0 || x->ndim == 1 || x->ndim == 3) ? 0 : 1;
    } else if (cddp_reduce_int_dim(fname, dimo, x->ndim, &d) < 0) {
        return NULL;
    }
    if (!has_dt)
        dt = x->dtype;
    if (!cddp_is_floating(dt)) {
        /* torch names the kernel: softmax_lastdim_kernel_impl / log_softmax_kernel_impl */
        int last = x->ndim == 0 || d == x->ndim - 1;
        PyErr_Format(PyExc_NotImplementedError, "\"%s%s_kernel_impl\" not implemented for '%s'",
                     fname, last ? "_lastdim" : "", cddp_reduce_torch_name(dt));
        return NULL;
    }
    cddp_rplan_init(&p, x->ndim, x->shape, x->ndim ? 1u << d : 0, 1, 0);
    cddp_dtype kt = cddp_kdt(dt);
    if (!(xl = cddp_rplan_layout(&p, x, kt)) || !(out = cddp_rplan_new_layout(&p, kt, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    if (lg && cddp_is_reduced(dt) && p.inner == 1)
        CDDP_REDUCE_NOGIL(n, log_softmax_rows_reduced(RDATA(xl), RDATA(out), p.outer, p.R, dt));
    else if (kt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, softmax_f32(RDATA(xl), RDATA(out), p.outer, p.R, p.inner,
                                         lg));
    else
        CDDP_REDUCE_NOGIL(n, softmax_f64(RDATA(xl), RDATA(out), p.outer, p.R, p.inner,
                                         lg));
    if (!(out = cddp_reduce_to_dtype(out, dt)))
        goto done;
    if (cddp_is_floating(x->dtype)) {
        NodeObject *node = cddp_maybe_node(lg ? "LogSoftmaxBackward0" : "SoftmaxBackward0",
                                           softmax_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            node->i[2] = lg;
            err = cddp_node_save_output(node, 0, out);
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

static PyObject *softmax_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, int lg)
{
    static const char *const names[] = {"dim", "dtype"};
    const char *fname = lg ? "log_softmax" : "softmax";
    PyObject *a[2];
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'dim' (pos 1)", fname);
        return NULL;
    }
    return softmax_impl((TensorObject *)self, a[0], a[1], lg);
}

PyObject *cddp_reduce_softmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return softmax_method(self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_log_softmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    return softmax_method(self, args, nargs, kwnames, 1);
}

/* Function form: torch.softmax(input, dim, dtype) and F.softmax(input, dim, _stacklevel,
 * dtype) both land here: a non-int third positional is the dtype. */
static PyObject *softmax_function_impl(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames, int lg)
{
    static const char *const names[] = {"dim", "_stacklevel", "dtype"};
    const char *fname = lg ? "log_softmax" : "softmax";
    PyObject *a[3];
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 3, 3, a) < 0)
        return NULL;
    if (a[1] && !a[2] && !PyLong_Check(a[1])) {
        a[2] = a[1];
        a[1] = NULL;
    }
    return softmax_impl((TensorObject *)self, a[0], a[2], lg);
}

static PyObject *softmax_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    return softmax_function_impl(self, args, nargs, kwnames, 0);
}

static PyObject *log_softmax_function(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames)
{
    return softmax_function_impl(self, args, nargs, kwnames, 1);
}

PyObject *cddp_reduce_fn_softmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    return cddp_reduce_as_function("softmax", softmax_function, args, nargs, kwnames);
}

PyObject *cddp_reduce_fn_log_softmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    return cddp_reduce_as_function("log_softmax", log_softmax_function, args, nargs, kwnames);
}

/* ---- logsumexp ------------------------------------------------------------------------ */

/* Rows (outer, R): out = m + log(sum(exp(x - m))), m the row max with +-inf replaced by 0 as
 * torch does (so all -inf rows give -inf, not NaN). The exps go through a block buffer so
 * both they and the pairwise sum vectorize. */
#define LSE_KERNEL(NAME, T, SFX)                                                         \
    CDDP_CLONES static void NAME(const T *x, T *out, int64_t outer, int64_t R)              \
    {                                                                                    \
        T buf[CDDP_PW_BLOCK];                                                            \
        for (int64_t o = 0; o < outer; o++) {                                            \
            const T *xr = x + o * R;                                                     \
            cddp_pw_acc acc = {.depth = 0, .count = 0};                                  \
            int nan;                                                                     \
            T m = R ? cddp_rowmax_##SFX(xr, R, 0, &nan) : (T)0;                          \
            int64_t b = 0;                                                               \
            double s;                                                                    \
            if (isinf(m))                                                                \
                m = 0;                                                                   \
            for (;; b += CDDP_PW_BLOCK) {                                                \
                int nb = (int)(R - b < CDDP_PW_BLOCK ? R - b : CDDP_PW_BLOCK);           \
                for (int i = 0; i < nb; i++)                                             \
                    buf[i] = EXP_##SFX(xr[b + i] - m);                                   \
                s = cddp_pw_sum_##SFX##_block(buf, nb);                                  \
                if (nb < CDDP_PW_BLOCK || b + CDDP_PW_BLOCK == R)                        \
                    break;                                                               \
                cddp_pw_push(&acc, s);                                                   \
            }                                                                            \
            out[o] = (T)(log(cddp_pw_total(&acc, s)) + m);                               \
        }                                                                                \
    }
LSE_KERNEL(lse_f32, float, f32)
LSE_KERNEL(lse_f64, double, f64)

#define round_to cddp_round_to
/* float16 / bfloat16 rows (outer, R) of float values: logsumexp as torch composes it for
 * them — amax, exp(x - max), a float-accumulated sum, log, + max — with each of those
 * results rounded to dt in turn, so the values match torch's (which rounds at each op). */
static void lse_reduced(const float *x, float *out, int64_t outer, int64_t R, cddp_dtype dt)
{
    for (int64_t o = 0; o < outer; o++) {
        const float *xr = x + o * R;
        int nan;
        float m = R ? cddp_rowmax_f32(xr, R, 0, &nan) : 0.0f, s = 0.0f;
        if (isinf(m))
            m = 0;
        for (int64_t r = 0; r < R; r++)
            s += round_to(dt, EXP_f32(round_to(dt, xr[r] - m)));
        out[o] = round_to(dt, round_to(dt, logf(round_to(dt, s))) + m);
    }
}

/* Rows: gin = g * exp(x - out). */
#define LSE_BACKWARD(NAME, T, EXP)                                                       \
    CDDP_CLONES static void NAME(const T *x, const T *out, const T *g, T *gin, int64_t outer, \
                     int64_t R)                                                          \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t r = 0; r < R; r++)                                              \
                gin[o * R + r] = g[o] * EXP(x[o * R + r] - out[o]);                      \
    }
LSE_BACKWARD(lse_bw_f32, float, EXP_f32)
LSE_BACKWARD(lse_bw_f64, double, EXP_f64)

/* saved: 0 = input, 1 = output */
static int logsumexp_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x, *out, *xl = NULL, *ol = NULL, *g = NULL, *y = NULL;
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)) || !(out = cddp_node_saved(self, 1)))
        return -1;
    cddp_rplan_from_node(&p, self, 1);
    if (!(xl = cddp_rplan_layout(&p, x, dt)) || !(ol = cddp_rplan_grad(&p, out, dt)) ||
        !(g = cddp_rplan_grad(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    if (dt == CDDP_FLOAT32)
        lse_bw_f32(RDATA(xl), RDATA(ol), RDATA(g), RDATA(y), p.outer, p.R);
    else
        lse_bw_f64(RDATA(xl), RDATA(ol), RDATA(g), RDATA(y), p.outer, p.R);
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(ol);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

PyObject *cddp_reduce_logsumexp(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    static const char *const names[] = {"dim", "keepdim"};
    TensorObject *x = (TensorObject *)self, *xl = NULL, *out = NULL, *res = NULL;
    PyObject *a[2];
    cddp_rplan p;
    uint32_t mask;
    int keep, err;
    cddp_dtype dt = cddp_is_floating(x->dtype) ? x->dtype : cddp_state()->default_dtype;
    if (cddp_reduce_args("logsumexp", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_SetString(PyExc_TypeError, "logsumexp() missing required argument 'dim' (pos 1)");
        return NULL;
    }
    if (cddp_reduce_dims("logsumexp", a[0], x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool("logsumexp", "keepdim", a[1], 0)) < 0)
        return NULL;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 1);
    cddp_dtype kt = cddp_kdt(dt);
    if (!(xl = cddp_rplan_layout(&p, x, kt)) ||
        !(out = cddp_tensor_new(kt, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R;
    if (cddp_is_reduced(dt))
        CDDP_REDUCE_NOGIL(n, lse_reduced(RDATA(xl), RDATA(out), p.outer, p.R, dt));
    else if (kt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, lse_f32(RDATA(xl), RDATA(out), p.outer, p.R));
    else
        CDDP_REDUCE_NOGIL(n, lse_f64(RDATA(xl), RDATA(out), p.outer, p.R));
    if (!(out = cddp_reduce_to_dtype(out, dt)))
        goto done;
    if (cddp_is_floating(x->dtype)) {
        NodeObject *node = cddp_maybe_node("LogsumexpBackward0", logsumexp_backward, 1, &x, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            cddp_rplan_to_node(&p, node);
            err = cddp_node_save(node, 0, x) < 0 || cddp_node_save_output(node, 1, out) < 0;
            Py_DECREF(node);
            if (err)
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
