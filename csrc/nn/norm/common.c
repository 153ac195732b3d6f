/* nn/norm/common.c — what the normalization entry points share: the batch norm plan (rows or
 * columns over x (N, C, S), norm.h) and its four per-channel passes (moments, affine, backward
 * reduce, dx) with scratch allocated here and the GIL released around the loops; argument
 * checks with torch's messages; per-channel parameter reads and writes.
 *
 * Moments (per channel c, M = N*S values): one pass of sums around K = the channel's first
 * value gives mean = K + s1/M and m2 = s2 - s1^2/M; for float64 data a second pass around the
 * mean makes m2 as accurate as torch's two-pass variance.
 */
#include "nn/norm/norm.h"
#include <math.h>
#include <string.h>

void cddp_bn_plan_init(cddp_bn_plan *p, const TensorObject *x)
{
    p->dt = x->dtype;
    p->N = x->ndim > 0 ? x->shape[0] : 1;
    p->C = x->ndim > 1 ? x->shape[1] : 1;
    p->S = 1;
    for (int d = 2; d < x->ndim; d++)
        p->S *= x->shape[d];
    p->cols = p->S < CDDP_NORM_COLS_BELOW;
}

#define NOGIL(p, stmt)                                                                     \
    do {                                                                                   \
        if ((p)->N * (p)->C * (p)->S > CDDP_GIL_FREE_ELEMS) {                              \
            Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS                              \
        } else {                                                                           \
            stmt;                                                                          \
        }                                                                                  \
    } while (0)

/* Per-row or per-column sums of the plan folded into per-channel sums: rows r = n*C + c,
 * columns j = c*S + s. out[c] = sum over the entries of channel c. */
static void fold(const cddp_bn_plan *p, const double *v, double *out)
{
    int64_t C = p->C;
    memset(out, 0, sizeof(double) * (size_t)C);
    if (p->cols) {
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < p->S; s++)
                out[c] += v[c * p->S + s];
    } else {
        for (int64_t n = 0; n < p->N; n++)
            for (int64_t c = 0; c < C; c++)
                out[c] += v[n * C + c];
    }
}

/* Scratch for per-row/column sums: 2 arrays of the plan's length, plus `extra` doubles. */
static double *scratch(const cddp_bn_plan *p, int64_t extra, int64_t *len)
{
    *len = p->cols ? p->C * p->S : p->N * p->C;
    double *s = PyMem_Malloc(sizeof(double) * (size_t)(2 * *len + extra + 1));
    if (!s)
        PyErr_NoMemory();
    return s;
}

/* One moments pass around K (C,) into per-channel sums t1, t2. kw: (W,) scratch (cols). */
static void moments_pass(const cddp_bn_plan *p, const void *x, const double *K, double *s1,
                         double *s2, double *kw, double *t1, double *t2)
{
    if (p->cols) {
        for (int64_t j = 0; j < p->C * p->S; j++)
            kw[j] = K[j / p->S];
        NOGIL(p, cddp_norm_cols_moments(p->dt, x, p->N, p->C * p->S, kw, s1, s2));
    } else {
        NOGIL(p, cddp_norm_rows_moments(p->dt, x, p->N * p->C, p->S, K, p->C, s1, s2));
    }
    fold(p, s1, t1);
    fold(p, s2, t2);
}

int cddp_bn_moments(const cddp_bn_plan *p, const void *x, double *mean, double *m2)
{
    int64_t C = p->C, M = p->N * p->S, len;
    double *buf, *K, *t1, *t2, *kw;
    if (M == 0 || C == 0) {
        memset(mean, 0, sizeof(double) * (size_t)C);
        memset(m2, 0, sizeof(double) * (size_t)C);
        return 0;
    }
    buf = scratch(p, 3 * C + (p->cols ? C * p->S : 0), &len);
    if (!buf)
        return -1;
    K = buf + 2 * len;
    t1 = K + C;
    t2 = t1 + C;
    kw = t2 + C;
    for (int64_t c = 0; c < C; c++)    /* the channel's first value x[0, c, 0] */
        K[c] = p->dt == CDDP_FLOAT32 ? ((const float *)x)[c * p->S]
                                      : ((const double *)x)[c * p->S];
    for (int pass = 0; pass < (p->dt == CDDP_FLOAT64 ? 2 : 1); pass++) {
        moments_pass(p, x, K, buf, buf + len, kw, t1, t2);
        for (int64_t c = 0; c < C; c++) {
            mean[c] = K[c] + t1[c] / (double)M;
            m2[c] = t2[c] - t1[c] * t1[c] / (double)M;
            if (m2[c] < 0)
                m2[c] = 0;
            K[c] = mean[c];
        }
    }
    PyMem_Free(buf);
    return 0;
}

int cddp_bn_reduce(const cddp_bn_plan *p, const void *dy, const void *x, const double *mean,
                   double *sdy, double *sdyx)
{
    int64_t C = p->C, len;
    double *buf = scratch(p, p->cols ? C * p->S : 0, &len), *mw = buf ? buf + 2 * len : NULL;
    if (!buf)
        return -1;
    if (p->cols) {
        for (int64_t j = 0; x && j < C * p->S; j++)
            mw[j] = mean[j / p->S];
        NOGIL(p, cddp_norm_cols_reduce(p->dt, dy, x, p->N, C * p->S, mw, buf, buf + len));
    } else {
        NOGIL(p, cddp_norm_rows_reduce(p->dt, dy, x, p->N * C, p->S, mean, C, buf, buf + len));
    }
    fold(p, buf, sdy);
    if (x)
        fold(p, buf + len, sdyx);
    PyMem_Free(buf);
    return 0;
}

/* Per-channel coefficient arrays (k of them, C each) repeated over S columns: (W,) each. */
static double *expand(const cddp_bn_plan *p, int k, const double *const *src)
{
    int64_t W = p->C * p->S;
    double *out = PyMem_Malloc(sizeof(double) * (size_t)(k * W + 1));
    if (!out)
        return (double *)PyErr_NoMemory();
    for (int i = 0; i < k; i++)
        for (int64_t j = 0; j < W; j++)
            out[i * W + j] = src[i] ? src[i][j / p->S] : 0.0;
    return out;
}

int cddp_bn_affine(const cddp_bn_plan *p, const void *x, void *y, const double *m,
                   const double *a, const double *b)
{
    if (!p->cols) {
        NOGIL(p, cddp_norm_rows_affine(p->dt, x, y, p->N * p->C, p->S, m, a, b, p->C));
        return 0;
    }
    const double *src[3] = {m, a, b};
    int64_t W = p->C * p->S;
    double *e = expand(p, 3, src);
    if (!e)
        return -1;
    NOGIL(p, cddp_norm_cols_affine(p->dt, x, y, p->N, W, e, e + W, e + 2 * W));
    PyMem_Free(e);
    return 0;
}

int cddp_bn_elemt(const cddp_bn_plan *p, const void *dy, const void *x, void *dx,
                  const double *m, const double *pc, const double *q, const double *r)
{
    if (!p->cols) {
        NOGIL(p, cddp_norm_rows_elemt(p->dt, dy, x, dx, p->N * p->C, p->S, m, pc, q, r, p->C));
        return 0;
    }
    const double *src[4] = {m, pc, q, r};
    int64_t W = p->C * p->S;
    double *e = expand(p, 4, src);
    if (!e)
        return -1;
    NOGIL(p, cddp_norm_cols_elemt(p->dt, dy, x, dx, p->N, W, e, e + W, e + 2 * W, e + 3 * W));
    PyMem_Free(e);
    return 0;
}

/* ---- arguments -------------------------------------------------------------------------- */

int cddp_norm_opt_tensor(PyObject *o, const char *fname, const char *what, TensorObject **out)
{
    *out = NULL;
    if (!o || o == Py_None)
        return 0;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not %s", fname, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = (TensorObject *)o;
    return 0;
}

int cddp_norm_check_param(TensorObject *t, const char *what, int64_t C, cddp_dtype dt)
{
    int64_t k = cddp_numel(t);
    if (k != C) {
        PyErr_Format(PyExc_RuntimeError, "%s should contain %lld elements not %lld", what,
                     (long long)C, (long long)k);
        return -1;
    }
    if (t->dtype != dt) {
        if (dt == CDDP_FLOAT64)
            PyErr_SetString(PyExc_RuntimeError,
                            "mixed dtype (CPU): all inputs must share same datatype.");
        else
            PyErr_Format(PyExc_RuntimeError, "mixed dtype (CPU): expect parameter to have "
                         "scalar type of %s", cddp_dtype_torch_name[dt]);
        return -1;
    }
    return 0;
}

/* Element offset of C-order flat index i in t. */
static int64_t flat_offset(const TensorObject *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return off;
}

double cddp_norm_at(const TensorObject *t, int64_t c)
{
    return cddp_get_double(t, c);
}

void cddp_norm_set(TensorObject *t, int64_t c, double v)
{
    char *base = cddp_data(t);
    int64_t off = flat_offset(t, c);
    if (t->dtype == CDDP_FLOAT32)
        ((float *)base)[off] = (float)v;
    else if (t->dtype == CDDP_FLOAT64)
        ((double *)base)[off] = v;
}

TensorObject *cddp_norm_from_doubles(const double *v, int64_t C, cddp_dtype dt)
{
    TensorObject *out = cddp_tensor_new(dt, 1, &C, 0);
    if (!out)
        return NULL;
    for (int64_t c = 0; c < C; c++) {
        if (dt == CDDP_FLOAT32)
            ((float *)cddp_data(out))[c] = (float)v[c];
        else
            ((double *)cddp_data(out))[c] = v[c];
    }
    return out;
}

TensorObject *cddp_norm_param_grad(const cddp_meta *m, const double *v, int64_t C)
{
    TensorObject *g = cddp_tensor_new(m->dtype, m->ndim, m->shape, 0);
    for (int64_t c = 0; g && c < C; c++) {
        if (m->dtype == CDDP_FLOAT32)
            ((float *)cddp_data(g))[c] = (float)v[c];
        else
            ((double *)cddp_data(g))[c] = v[c];
    }
    return g;
}

void cddp_norm_to_doubles(const TensorObject *t, int64_t C, double *v)
{
    if (cddp_is_contiguous(t) && t->dtype == CDDP_FLOAT64) {
        memcpy(v, cddp_data(t), sizeof(double) * (size_t)C);
        return;
    }
    if (cddp_is_contiguous(t) && t->dtype == CDDP_FLOAT32) {
        for (int64_t c = 0; c < C; c++)
            v[c] = ((const float *)cddp_data(t))[c];
        return;
    }
    for (int64_t c = 0; c < C; c++)
        v[c] = cddp_get_double(t, c);
}
