/* ops/random/gamma.c — torch's CPU gamma and Dirichlet samplers, draw for draw: the values
 * torch._standard_gamma / torch._sample_dirichlet give after the same manual_seed.
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
 * One draw (torch's sample_gamma, Marsaglia & Tsang 2000, doi:10.1145/358407.358414): alpha
 * < 1 is boosted to alpha + 1 with scale (1 - U)^(1/alpha) (U drawn first); then normals x
 * (normal_distribution<double>, its Box-Muller cache shared with the generator) until
 * y = 1 + c x > 0, a uniform u = 1 - U, and the squeeze or the log test accepts d y^3. The
 * arithmetic is float where torch's is (alpha + 1, 1 / alpha and alpha - 1/3 for a float32
 * alpha; the literal constants are floats), double elsewhere. No gradient here: the callers attach it (distributions/
 * gamma.py).
 */
#include "ops/random/random.h"
#include "ops/creation/creation.h"
#include <float.h>
#include <math.h>

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
 * included) */
static void gamma_all(GeneratorObject *gen, const double *alpha, int64_t n, char *out, int f32)
{
    for (int64_t i = 0; i < n; i++) {
        if (f32) {
            float s = (float)gamma_one(gen, alpha[i], 1);
            ((float *)out)[i] = s > FLT_MIN ? s : FLT_MIN;
        } else {
            double s = gamma_one(gen, alpha[i], 0);
            ((double *)out)[i] = s > DBL_MIN ? s : DBL_MIN;
        }
    }
}

PyObject *cddp_py_gamma_draw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"alpha", "generator", "dirichlet", NULL};
    PyObject *v[3] = {NULL}, *res = NULL;
    TensorObject *a, *out = NULL, *g64 = NULL;
    GeneratorObject *gen;
    PyThreadState *ts;
    double *alpha = NULL;
    int dir = 0, f32;
    int64_t n;
    (void)m;
    for (Py_ssize_t i = 0; i < nargs && i < 3; i++)
        v[i] = args[i];
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "_gamma_draw() takes at most 3 arguments");
        return NULL;
    }
    if (cddp_kw_parse("_gamma_draw", args, nargs, kw, names, v) < 0 ||
        !(gen = cddp_generator_get(v[1], "_gamma_draw")) || cddp_parse_flag(v[2], &dir) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0]) ||
        (((TensorObject *)v[0])->dtype != CDDP_FLOAT32 &&
         ((TensorObject *)v[0])->dtype != CDDP_FLOAT64)) {
        PyErr_SetString(PyExc_TypeError, "_gamma_draw(): alpha must be a float32 or float64 "
                        "tensor");
        return NULL;
    }
    a = (TensorObject *)v[0];
    f32 = a->dtype == CDDP_FLOAT32;
    n = cddp_numel(a);
    if (!(alpha = read_alpha(a, n)) || !(out = cddp_tensor_new(a->dtype, a->ndim, a->shape, 0)))
        goto done;
    if (dir && !(g64 = cddp_tensor_new(CDDP_FLOAT64, a->ndim, a->shape, 0)))
        goto done;
    ts = n > 65536 ? PyEval_SaveThread() : NULL;          /* big draws: without the GIL */
    cddp_gen_acquire(gen, ts != NULL);
    if (dir)
        dirichlet_rows(gen, alpha, n, a->ndim ? a->shape[a->ndim - 1] : 1,
                       (double *)cddp_data(g64), cddp_data(out), f32);
    else
        gamma_all(gen, alpha, n, cddp_data(out), f32);
    cddp_gen_release(gen);
    if (ts)
        PyEval_RestoreThread(ts);
    res = dir ? PyTuple_Pack(2, (PyObject *)out, (PyObject *)g64) : Py_NewRef(out);
done:
    PyMem_Free(alpha);
    Py_XDECREF(out);
    Py_XDECREF(g64);
    return res;
}
