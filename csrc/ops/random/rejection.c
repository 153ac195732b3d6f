/* ops/random/rejection.c — torch's CPU gamma, Dirichlet, Poisson and binomial samplers, draw for
 * draw: the values torch._standard_gamma / torch._sample_dirichlet / torch.poisson /
 * torch.binomial give after the same manual_seed.
 *
 *   _gamma_draw(alpha, generator=None, dirichlet=False)
 *     alpha: float32 / float64, any shape and layout; read in C order (torch's serial kernel
 *     walks the contiguous output)
 *     -> gamma draws G(alpha, 1) of alpha's shape and dtype, each >= the dtype's smallest
 *        normal number                                                     (_s_gamma_cpu)
 *     -> dirichlet=True: (x, g) over the last dim: g float64 gamma draws of the double alpha,
 *        x = g / sum(g) in alpha's dtype, clamped into [smallest normal, 1 - ulp)
 *                                                                        (_s_dirichlet_cpu)
 *
 *   _poisson_draw(rate, generator=None)
 *     rate: float32 / float64 -> Poisson(rate) counts of its shape and dtype   (_s_poisson_cpu)
 *   _binomial_draw(count, prob, generator=None)
 *     count, prob: one shape, one dtype (float32 / float64; the caller broadcasts and checks)
 *     -> Binomial(count, prob) counts                                        (_s_binomial_cpu)
 *
 * One draw (torch's sample_gamma, Marsaglia & Tsang 2000, doi:10.1145/358407.358414): alpha
 * < 1 is boosted to alpha + 1 with scale (1 - U)^(1/alpha) (U drawn first); then normals x
 * (normal_distribution<double>, its Box-Muller cache shared with the generator) until
 * y = 1 + c x > 0, a uniform u = 1 - U, and the squeeze or the log test accepts d y^3. The
 * arithmetic is float where torch's is (alpha + 1, 1 / alpha and alpha - 1/3 for a float32
 * alpha; the literal constants are floats), double elsewhere.
 *
 * One Poisson draw (torch's sample_poisson, in double): rate >= 10 by Hormann's transformed
 * rejection (1993: two uniforms a round), 0 for rate 0, else the product of uniforms until it
 * falls to exp(-rate) or below.
 *
 * One binomial draw (torch's sample_binomial, in the dtype's own arithmetic where torch's is
 * and double elsewhere): count <= 0 or prob <= 0 give 0, prob >= 1 count; otherwise with q the
 * smaller of prob and 1 - prob, count q >= 10 by BTRS (Hormann 1993, torch's variant of its
 * bound with Stirling tails), else by summing geometric waiting times.
 *
 * No gradient here: the callers attach it (distributions/gamma.py, _sampling.py).
 */
#include "ops/random/random.h"
#include "ops/creation/creation.h"
#include <float.h>
#include <math.h>
#include <string.h>

/* One draw for alpha, f32: alpha is a float32 value (torch's scalar_t arithmetic). */
static double gamma_one(GeneratorObject *g, double alpha, int f32)
{
    double scale = 1.0, d, c;
    if (alpha < 1.0) {
        double inv;
        if (alpha == 0.0)
            return 0.0;
        inv = f32 ? (double)(1.0f / (float)alpha) : 1.0 / alpha;
        scale *= pow(1.0 - cddp_uniform_f64(g), inv);
        alpha = f32 ? (double)((float)alpha + 1.0f) : alpha + 1.0;
    }
    d = f32 ? (double)((float)alpha - 1.0f / 3.0f) : alpha - (double)(1.0f / 3.0f);
    c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, y, v, u, xx;
        do {
            x = cddp_normal_f64(g, 0.0, 1.0);
            y = 1.0 + c * x;
        } while (y <= 0);
        v = y * y * y;
        u = 1 - cddp_uniform_f64(g);
        xx = x * x;
        if (u < 1.0 - (double)0.0331f * xx * xx)
            return scale * d * v;
        if (log(u) < 0.5 * xx + d * (1.0 - v + log(v)))
            return scale * d * v;
    }
}

/* One Poisson(lambda) count (see the file comment). */
static double poisson_one(GeneratorObject *g, double lambda)
{
    if (lambda >= 10) {
        const double slam = sqrt(lambda), loglam = log(lambda);
        const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
        const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2);
        for (;;) {
            double u = cddp_uniform_f64(g) - 0.5, v = cddp_uniform_f64(g);
            double us = 0.5 - fabs(u);
            /* torch's k is an int64; a double holds the same integers, and an infinite or
             * huge rate then gives inf / a huge count instead of an overflowing conversion */
            double k = floor((2 * a / us + b) * u + lambda + 0.43);
            if (us >= 0.07 && v <= vr)
                return k;
            if (k < 0 || (us < 0.013 && v > us))
                continue;
            if (log(v) + log(invalpha) - log(a / (us * us) + b) <=
                -lambda + k * loglam - lgamma(k + 1))
                return k;
        }
    }
    if (lambda == 0)
        return 0.0;
    {
        const double enlam = exp(-lambda);
        double prod = 1.0;
        int64_t x = 0;
        for (;;) {
            prod *= cddp_uniform_f64(g);
            if (prod > enlam)
                x += 1;
            else
                return (double)x;
        }
    }
}

/* Stirling's series tail of log k! (torch's stirling_approx_tail: a table below 10) */
static double stirling_tail(double k)
{
    static const double small[10] = {
        0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
        0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
        0.00925546218271273, 0.00833056343336287};
    double kp1sq;
    if (k <= 9)
        return small[(int)k];
    kp1sq = (k + 1) * (k + 1);
    return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1);
}

/* binomial_<S>(g, count, prob) for the scalar type S (float: float32 tensors): the count
 * and probability arithmetic in S, as torch's scalar_t, the rest in double */
#define BINOMIAL(S)                                                                           \
    static S btrs_##S(GeneratorObject *g, S count, S prob)                                    \
    {                                                                                         \
        const double stddev = sqrt(count * prob * (1 - prob));                                \
        const double b = 1.15 + 2.53 * stddev, a = -0.0873 + 0.0248 * b + 0.01 * prob;       \
        const double c = count * prob + 0.5, v_r = 0.92 - 4.2 / b, r = prob / (1 - prob);   \
        const double alpha = (2.83 + 5.1 / b) * stddev, m = floor((count + 1) * prob);       \
        for (;;) {                                                                            \
            double u = cddp_uniform_f64(g) - 0.5, v = cddp_uniform_f64(g);                    \
            double us = 0.5 - fabs(u), bound;                                                 \
            S k = (S)floor((2 * a / us + b) * u + c);                                         \
            if (k < 0 || k > count)                                                           \
                continue;                                                                     \
            if (us >= 0.07 && v <= v_r)                                                       \
                return k;                                                                     \
            v = log(v * alpha / (a / (us * us) + b));                                         \
            bound = (m + 0.5) * log((m + 1) / (r * (count - m + 1))) +                        \
                    (count + 1) * log((count - m + 1) / (count - k + 1)) +                    \
                    (k + 0.5) * log(r * (count - k + 1) / (k + 1)) + stirling_tail(m) +       \
                    stirling_tail(count - m) - stirling_tail(k) - stirling_tail(count - k);   \
            if (v <= bound)                                                                   \
                return k;                                                                     \
        }                                                                                     \
    }                                                                                         \
    static S inversion_##S(GeneratorObject *g, S count, S prob)                               \
    {                                                                                         \
        double sum = 0, logprob = log1p(-prob);                                               \
        S k = 0;                                                                              \
        for (;;) {                                                                            \
            sum += ceil(log(cddp_uniform_f64(g)) / logprob);                                  \
            if (sum > count)                                                                  \
                return k;                                                                     \
            k = k + 1;                                                                        \
        }                                                                                     \
    }                                                                                         \
    static S binomial_##S(GeneratorObject *g, S count, S prob)                                \
    {                                                                                         \
        S q;                                                                                  \
        if (!isfinite(count) || isnan(prob))   /* torch's loops never end on these */         \
            return (S)NAN;                                                                    \
        if (count <= 0 || prob <= 0)                                                          \
            return 0;                                                                         \
        if (prob >= 1)                                                                        \
            return count;                                                                     \
        if (prob <= 0.5)                                                                      \
            return count * prob >= 10 ? btrs_##S(g, count, prob)                              \
                                       : inversion_##S(g, count, prob);                       \
        if (!(prob > 0.5))                                                                    \
            return (S)NAN;                                                                    \
        q = 1 - prob;                                                                         \
        return count - (count * q >= 10 ? btrs_##S(g, count, q) : inversion_##S(g, count, q)); \
    }
BINOMIAL(float)
BINOMIAL(double)

/* alpha's values in C order, as doubles (n of them), into a new buffer; NULL + MemoryError */
static double *read_alpha(TensorObject *a, int64_t n)
{
    double *v = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(double));
    int64_t idx[CDDP_MAX_DIMS] = {0}, off = a->offset;
    if (!v)
        return (double *)PyErr_NoMemory();
    for (int64_t e = 0; e < n; e++) {
        const char *p = (const char *)a->storage->data + off * (int64_t)cddp_dtype_size[a->dtype];
        v[e] = a->dtype == CDDP_FLOAT32 ? (double)*(const float *)p : *(const double *)p;
        for (int d = a->ndim - 1; d >= 0; d--) {        /* odometer over a's shape */
            if (++idx[d] < a->shape[d]) {
                off += a->strides[d];
                break;
            }
            off -= a->strides[d] * (a->shape[d] - 1);
            idx[d] = 0;
        }
    }
    return v;
}

/* g[i] = gamma draws of v (the double alpha: Dirichlet's), x = g / row sums, clamped */
static void dirichlet_rows(GeneratorObject *gen, const double *v, int64_t n, int64_t k,
                           double *g, char *x, int f32)
{
    for (int64_t i = 0; i < n; i++) {
        double s = gamma_one(gen, v[i], 0);
        g[i] = s > DBL_MIN ? s : DBL_MIN;
    }
    for (int64_t r = 0; k > 0 && r < n / k; r++) {
        double sum = 0.0;
        for (int64_t j = 0; j < k; j++)
            sum += g[r * k + j];
        for (int64_t j = 0; j < k; j++) {
            double q = g[r * k + j] / sum;
            if (f32) {
                float f = (float)q, hi = nextafterf(1.0f, 0.0f);
                ((float *)x)[r * k + j] = f < FLT_MIN ? FLT_MIN : f > hi ? hi : f;
            } else {
                double hi = nextafter(1.0, 0.0);
                ((double *)x)[r * k + j] = q < DBL_MIN ? DBL_MIN : q > hi ? hi : q;
            }
        }
    }
}

/* out[i] = one draw for alpha[i], kept >= the dtype's smallest normal (std::max(min, s): NaN
 * included); Poisson counts as they come */
static void draw_all(GeneratorObject *gen, const double *alpha, int64_t n, char *out, int f32,
                     int poisson)
{
    for (int64_t i = 0; i < n; i++) {
        if (poisson) {
            double k = poisson_one(gen, alpha[i]);
            if (f32)
                ((float *)out)[i] = (float)k;
            else
                ((double *)out)[i] = k;
        } else if (f32) {
            float s = (float)gamma_one(gen, alpha[i], 1);
            ((float *)out)[i] = s > FLT_MIN ? s : FLT_MIN;
        } else {
            double s = gamma_one(gen, alpha[i], 0);
            ((double *)out)[i] = s > DBL_MIN ? s : DBL_MIN;
        }
    }
}

enum { GAMMA, DIRICHLET, POISSON };

/* The draws of kind for tensor argument v0 (float32 / float64): a tensor, or (x, g) for
 * Dirichlet. NULL + TypeError / MemoryError. */
static PyObject *sample(PyObject *v0, GeneratorObject *gen, int kind, const char *fname)
{
    TensorObject *a, *out = NULL, *g64 = NULL;
    PyObject *res = NULL;
    PyThreadState *ts;
    double *alpha = NULL;
    int f32;
    int64_t n;
    if (!v0 || !cddp_tensor_check(v0) || (((TensorObject *)v0)->dtype != CDDP_FLOAT32 &&
                                          ((TensorObject *)v0)->dtype != CDDP_FLOAT64)) {
        PyErr_Format(PyExc_TypeError, "%s(): expected a float32 or float64 tensor", fname);
        return NULL;
    }
    a = (TensorObject *)v0;
    f32 = a->dtype == CDDP_FLOAT32;
    n = cddp_numel(a);
    if (!(alpha = read_alpha(a, n)) || !(out = cddp_tensor_new(a->dtype, a->ndim, a->shape, 0)))
        goto done;
    if (kind == DIRICHLET && !(g64 = cddp_tensor_new(CDDP_FLOAT64, a->ndim, a->shape, 0)))
        goto done;
    ts = n > 65536 ? PyEval_SaveThread() : NULL;          /* big draws: without the GIL */
    cddp_gen_acquire(gen, ts != NULL);
    if (kind == DIRICHLET)
        dirichlet_rows(gen, alpha, n, a->ndim ? a->shape[a->ndim - 1] : 1,
                       (double *)cddp_data(g64), cddp_data(out), f32);
    else
        draw_all(gen, alpha, n, cddp_data(out), f32, kind == POISSON);
    cddp_gen_release(gen);
    if (ts)
        PyEval_RestoreThread(ts);
    res = kind == DIRICHLET ? PyTuple_Pack(2, (PyObject *)out, (PyObject *)g64)
                            : Py_NewRef(out);
done:
    PyMem_Free(alpha);
    Py_XDECREF(out);
    Py_XDECREF(g64);
    return res;
}

PyObject *cddp_py_gamma_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"alpha", "generator", "dirichlet", NULL};
    PyObject *v[3] = {NULL};
    GeneratorObject *gen;
    int dir = 0;
    (void)m;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "_gamma_draw() takes at most 3 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("_gamma_draw", args, nargs, kw, names, v) < 0 ||
        !(gen = cddp_generator_get(v[1], "_gamma_draw")) || cddp_parse_flag(v[2], &dir) < 0)
        return NULL;
    return sample(v[0], gen, dir ? DIRICHLET : GAMMA, "_gamma_draw");
}

PyObject *cddp_py_poisson_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    static const char *const names[] = {"rate", "generator", NULL};
    PyObject *v[2] = {NULL};
    GeneratorObject *gen;
    (void)m;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "_poisson_draw() takes at most 2 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("_poisson_draw", args, nargs, kw, names, v) < 0 ||
        !(gen = cddp_generator_get(v[1], "_poisson_draw")))
        return NULL;
    return sample(v[0], gen, POISSON, "_poisson_draw");
}

PyObject *cddp_py_binomial_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kw)
{
    static const char *const names[] = {"count", "prob", "generator", NULL};
    PyObject *v[3] = {NULL}, *res = NULL;
    TensorObject *c, *p, *out = NULL;
    GeneratorObject *gen;
    PyThreadState *ts;
    double *cv = NULL, *pv = NULL;
    int64_t n;
    (void)m;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "_binomial_draw() takes at most 3 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("_binomial_draw", args, nargs, kw, names, v) < 0 ||
        !(gen = cddp_generator_get(v[2], "_binomial_draw")))
        return NULL;
    c = (TensorObject *)v[0];
    p = (TensorObject *)v[1];
    if (!c || !p || !cddp_tensor_check(v[0]) || !cddp_tensor_check(v[1]) ||
        c->dtype != p->dtype || (c->dtype != CDDP_FLOAT32 && c->dtype != CDDP_FLOAT64) ||
        c->ndim != p->ndim || memcmp(c->shape, p->shape, sizeof(int64_t) * c->ndim)) {
        PyErr_SetString(PyExc_TypeError, "_binomial_draw(): count and prob must be float32 or "
                        "float64 tensors of one shape and dtype");
        return NULL;
    }
    n = cddp_numel(c);
    if (!(cv = read_alpha(c, n)) || !(pv = read_alpha(p, n)) ||
        !(out = cddp_tensor_new(c->dtype, c->ndim, c->shape, 0)))
        goto done;
    ts = n > 65536 ? PyEval_SaveThread() : NULL;          /* big draws: without the GIL */
    cddp_gen_acquire(gen, ts != NULL);
    for (int64_t i = 0; i < n; i++) {
        if (c->dtype == CDDP_FLOAT32)
            ((float *)cddp_data(out))[i] = binomial_float(gen, (float)cv[i], (float)pv[i]);
        else
            ((double *)cddp_data(out))[i] = binomial_double(gen, cv[i], pv[i]);
    }
    cddp_gen_release(gen);
    if (ts)
        PyEval_RestoreThread(ts);
    res = Py_NewRef(out);
done:
    PyMem_Free(cv);
    PyMem_Free(pv);
    Py_XDECREF(out);
    return res;
}
