/* ops/reduce/sum.c — sums and products over dims.
 *
 * Mirrors torch.Tensor / torch functions:
 *   sum(dim=None, keepdim=False, *, dtype=None)     SumBackward0 / SumBackward1
 *   mean(dim=None, keepdim=False, *, dtype=None)    MeanBackward0 / MeanBackward1
 *   prod(dim=None, keepdim=False, *, dtype=None)    ProdBackward0 / ProdBackward1
 *
 * Layout legend: an input is viewed as a contiguous (outer, R, inner) block where R is the
 * product of the reduced dims (ops/reduce/plan.c); outputs are (outer, inner).
 * Accumulation: float32 and float64 sums accumulate in double (pairwise along contiguous
 * rows), so float32 results are at least as accurate as torch's cascade sum; integer and bool
 * sums accumulate in int64 (wrapping, as torch does). Products accumulate in double (floats)
 * or wrapping uint64 (integers).
 */
#include "amp/amp.h"
#include "ops/reduce/reduce.h"
#include <string.h>

/* ---- kernels -------------------------------------------------------------------------- */

#define LANES 256   /* inner positions accumulated at once on the stack */

/* out (outer, inner) = sum (or mean) over R of x (outer, R, inner). */
#define SUM_KERNEL(NAME, T, PW)                                                          \
    CDDP_CLONES static void NAME(const T *x, T *out, int64_t outer, int64_t R, int64_t inner, \
                              int mean)                                                  \
    {                                                                                    \
        double div = mean ? (double)R : 1.0;                                             \
        if (inner == 1 && R < 8) {                                                      \
            /* short rows ((N, 2), (N, 4) ...): what PW adds, in its order (below 8 terms   \
             * it is a plain running sum), without its per-row set-up (was 14 ns a row) */ \
            for (int64_t o = 0; o < outer; o++) {                                        \
                double acc = 0.;                                                         \
                for (int64_t r = 0; r < R; r++)                                          \
                    acc += (double)x[o * R + r];                                         \
                out[o] = (T)(acc / div);                                                 \
            }                                                                            \
            return;                                                                      \
        }                                                                                \
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
    CDDP_CLONES static void NAME(const T *g, T *y, int64_t outer, int64_t R, int64_t inner, \
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
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);     /* float16: computed in float32 */
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
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
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
    acc_dt = cddp_is_floating(out_dt) ? cddp_kdt(out_dt) : CDDP_INT64;
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

PyObject *cddp_reduce_sum(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    PyObject *a[3];
    if (cddp_reduce_args("sum", args, nargs, kwnames, sum_names, 3, 2, a) < 0)
        return NULL;
    return sum_mean((TensorObject *)self, a[0], a[1], a[2], 0);
}

PyObject *cddp_reduce_mean(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
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

/* float16 / bfloat16 (values as float): torch multiplies in the dtype, each product rounded
 * to it; in order along R here (torch's vector lanes reorder rows longer than a few dozen). */
static void prod_reduced(const float *x, float *out, int64_t outer, int64_t R, int64_t inner,
                         cddp_dtype dt)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float acc = 1.0f;
            const float *xr = x + o * R * inner + i;
            for (int64_t r = 0; r < R; r++)
                acc = cddp_round_to(dt, acc * xr[r * inner]);
            out[o * inner + i] = acc;
        }
}

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
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
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
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

static PyObject *prod_impl(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
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
    acc_dt = cddp_is_floating(out_dt) ? cddp_kdt(out_dt) : CDDP_INT64;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (!(xl = cddp_rplan_layout(&p, x, acc_dt)) ||
        !(out = cddp_tensor_new(acc_dt, p.out_ndim, p.out_shape, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    void *xp = RDATA(xl), *op = RDATA(out);
    if (cddp_is_reduced(out_dt))
        CDDP_REDUCE_NOGIL(n, prod_reduced(xp, op, p.outer, p.R, p.inner, out_dt));
    else if (acc_dt == CDDP_FLOAT32)
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

/* Under autocast, prod runs in float32 (torch's CPU fp32 list). */
PyObject *cddp_reduce_prod(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_FP32, prod_impl, self, args, nargs, kwnames);
    return prod_impl(self, args, nargs, kwnames);
}

