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

/* t's values as a new contiguous float64 tensor (C order: torch's serial kernels walk the
 * contiguous output); NULL + exception */
static TensorObject *as_f64(TensorObject *t)
{
    TensorObject *o = cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0);
    if (o && cddp_copy_into(o, t) < 0)
        Py_CLEAR(o);
    return o;
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

enum { GAMMA, DIRICHLET, POISSON, BINOMIAL };

/* out[i] = one draw of kind for alpha[i] (binomial: count alpha[i], probability prob[i]);
 * gamma draws kept >= the dtype's smallest normal (std::max(min, s): NaN included) */
static void draw_all(GeneratorObject *gen, int kind, const double *alpha, const double *prob,
                     int64_t n, char *out, int f32)
{
    for (int64_t i = 0; i < n; i++) {
        double s;
        if (kind == BINOMIAL)
            s = f32 ? binomial_float(gen, (float)alpha[i], (float)prob[i])
                    : binomial_double(gen, alpha[i], prob[i]);
        else if (kind == POISSON)
            s = poisson_one(gen, alpha[i]);
        else if (f32)
            s = fmax((float)gamma_one(gen, alpha[i], 1), FLT_MIN);
        else
            s = fmax(gamma_one(gen, alpha[i], 0), DBL_MIN);
        if (f32)
            ((float *)out)[i] = (float)s;
        else
            ((double *)out)[i] = s;
    }
}

/* The draws of kind for t (float32 / float64; binomial: counts t, probabilities p of t's shape
 * and dtype): a tensor of t's shape and dtype, or (x, g) for Dirichlet. NULL + TypeError /
 * MemoryError. */
static PyObject *sample(int kind, PyObject *t, PyObject *p, GeneratorObject *gen,
                        const char *fname)
{
    TensorObject *a = (TensorObject *)t, *q = (TensorObject *)p, *a64 = NULL, *q64 = NULL;
    TensorObject *out = NULL, *g64 = NULL;
    PyObject *res = NULL;
    PyThreadState *ts;
    int64_t n;
    if (!t || !cddp_tensor_check(t) || (a->dtype != CDDP_FLOAT32 && a->dtype != CDDP_FLOAT64) ||
        (kind == BINOMIAL && (!p || !cddp_tensor_check(p) || q->dtype != a->dtype ||
                              q->ndim != a->ndim ||
                              memcmp(q->shape, a->shape, sizeof(int64_t) * a->ndim)))) {
        PyErr_Format(PyExc_TypeError, "%s(): expected float32 or float64 tensors (of one shape "
                     "and dtype)", fname);
        return NULL;
    }
    n = cddp_numel(a);
    if (!(a64 = as_f64(a)) || (kind == BINOMIAL && !(q64 = as_f64(q))) ||
        !(out = cddp_tensor_new(a->dtype, a->ndim, a->shape, 0)) ||
        (kind == DIRICHLET && !(g64 = cddp_tensor_new(CDDP_FLOAT64, a->ndim, a->shape, 0))))
        goto done;
    ts = n > 65536 ? PyEval_SaveThread() : NULL;          /* big draws: without the GIL */
    cddp_gen_acquire(gen, ts != NULL);
    if (kind == DIRICHLET)
        dirichlet_rows(gen, (const double *)cddp_data(a64), n,
                       a->ndim ? a->shape[a->ndim - 1] : 1, (double *)cddp_data(g64),
                       cddp_data(out), a->dtype == CDDP_FLOAT32);
    else
        draw_all(gen, kind, (const double *)cddp_data(a64),
                 q64 ? (const double *)cddp_data(q64) : NULL, n, cddp_data(out),
                 a->dtype == CDDP_FLOAT32);
    cddp_gen_release(gen);
    if (ts)
        PyEval_RestoreThread(ts);
    res = kind == DIRICHLET ? PyTuple_Pack(2, (PyObject *)out, (PyObject *)g64)
                            : Py_NewRef(out);
done:
    Py_XDECREF(a64);
    Py_XDECREF(q64);
    Py_XDECREF(out);
    Py_XDECREF(g64);
    return res;
}

/* Arguments names[0..nmax) (the generator at gen_at) into v; 0 / -1 (TypeError) */
static int parse(const char *fname, const char *const *names, int nmax, int gen_at,
                 PyObject *const *args, Py_ssize_t nargs, PyObject *kw, PyObject **v,
                 GeneratorObject **gen)
{
    if (nargs > nmax) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments", fname, nmax);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0 ||
        !(*gen = cddp_generator_get(v[gen_at], fname)))
        return -1;
    return 0;
}

PyObject *cddp_py_gamma_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"alpha", "generator", "dirichlet", NULL};
    PyObject *v[3] = {NULL};
    GeneratorObject *gen;
    int dir = 0;
    (void)m;
    if (parse("_gamma_draw", names, 3, 1, args, nargs, kw, v, &gen) < 0 ||
        cddp_parse_flag(v[2], &dir) < 0)
        return NULL;
    return sample(dir ? DIRICHLET : GAMMA, v[0], NULL, gen, "_gamma_draw");
}

PyObject *cddp_py_poisson_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    static const char *const names[] = {"rate", "generator", NULL};
    PyObject *v[2] = {NULL};
    GeneratorObject *gen;
    (void)m;
    if (parse("_poisson_draw", names, 2, 1, args, nargs, kw, v, &gen) < 0)
        return NULL;
    return sample(POISSON, v[0], NULL, gen, "_poisson_draw");
}

PyObject *cddp_py_binomial_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kw)
{
    static const char *const names[] = {"count", "prob", "generator", NULL};
    PyObject *v[3] = {NULL};
    GeneratorObject *gen;
    (void)m;
    if (parse("_binomial_draw", names, 3, 2, args, nargs, kw, v, &gen) < 0)
        return NULL;
    return sample(BINOMIAL, v[0], v[1], gen, "_binomial_draw");
}
