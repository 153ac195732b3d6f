/* nn/activation.c — the parametrised activations of torch.nn.functional as elementwise C
 * kernels with fused backwards, table driven like ops/elementwise/unary.c (whose runner,
 * in-place protocol and history recording they reuse), and PReLU.
 *
 * Mirrors torch._C._nn.leaky_relu / elu (selu, celu) / gelu (approximate 'none' | 'tanh') /
 * silu / softplus / hardtanh (relu6) / mish / hardswish / hardsigmoid, their in-place forms,
 * torch.prelu, and their nodes (LeakyReluBackward0, EluBackward0, GeluBackward0, ...,
 * PreluKernelBackward0).
 *
 *   _<op>(input, *params, inplace) -> output       params per op: see `acts` below
 *   _prelu(input (N, C, *) | (*), weight (C,) | (1,)) -> output
 *
 * Float32/float64 only (torch's "<kernel>" not implemented for 'Long' otherwise). The
 * backward reads the saved input; an in-place call on a tensor with history runs out of place
 * on a copy of the old value and writes back (the elementwise in-place protocol), so the
 * backward still sees the input. Parameters live in node->d[0..2] and reach the kernels
 * through ew_ctx (p0.f64, p1.f64, d0).
 */
/* selects stay selects, so loops vectorize; a*b+c fuses in the FMA clone (common/clones.h) */
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#include "ops/elementwise/elementwise.h"
#include "ops/reduce/reduce.h"                /* cddp_exp_f32: a vectorizable float exp */
#include "module.h"
#include <tgmath.h>

/* ---- float32 math the vectorizer can inline ----------------------------------------------
 * libm's expf/tanhf/erff are calls per element. float32 kernels use cddp_exp_f32 (<= 1 ulp),
 * a tanh built on it (Cephes: an odd polynomial below |x| = 0.625, 1 - 2/(e^2|x| + 1) above)
 * and, for GELU only, erf by Abramowitz-Stegun 7.1.26 (absolute error < 1.5e-7, the formula
 * torch's vectorized GELU uses; erf only ever enters as 1 + erf there). float64 keeps libm. */

CDDP_MATH_INLINE float act_tanhf(float x)
{
    float ax = fabsf(x), z = x * x;
    float p = ((((-5.70498872745E-3f * z + 2.06390887954E-2f) * z - 5.37397155531E-2f) * z +
                1.33314422036E-1f) * z - 3.33332819422E-1f) * z * x + x;
    float q = copysignf(1.0f - 2.0f / (cddp_exp_f32(2.0f * ax) + 1.0f), x);
    return ax < 0.625f ? p : q;
}

/* erf(x) given e = exp(-x*x): GELU's backward has e already (its pdf), so one exp serves both */
CDDP_MATH_INLINE float act_erff_e(float x, float e)
{
    float t = 1.0f / (0.3275911f * fabsf(x) + 1.0f);
    float r = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t +
              0.254829592f;
    return copysignf(1.0f - r * t * e, x);
}

CDDP_MATH_INLINE float act_erff(float x) { return act_erff_e(x, cddp_exp_f32(-x * x)); }

static inline double act_exp_d(double x) { return exp(x); }
static inline double act_tanh_d(double x) { return tanh(x); }
static inline double act_erf_d(double x) { return erf(x); }
static inline double act_erf_e_d(double x, double e) { (void)e; return erf(x); }
#define EXP(v) _Generic((v), float: cddp_exp_f32, default: act_exp_d)(v)
#define TANH(v) _Generic((v), float: act_tanhf, default: act_tanh_d)(v)
#define ERF(v) _Generic((v), float: act_erff, default: act_erf_d)(v)
#define ERF_E(v, e) _Generic((v), float: act_erff_e, default: act_erf_e_d)(v, e)

/* ---- scalar helpers, per float type --------------------------------------------------- */

#define ACT_HELPERS(T, SFX)                                                                \
    static inline T gelu_##SFX(T x)                                                        \
    {                                                                                      \
        return x * (T)0.5 * (1 + ERF(x * (T)M_SQRT1_2));                                   \
    }                                                                                      \
    static inline T gelu_bw_##SFX(T g, T x)    /* e = exp(-x^2 / 2): erf's and the pdf's */ \
    {                                                                                      \
        T z = x * (T)M_SQRT1_2, e = EXP(-z * z);                                           \
        T cdf = (T)0.5 * (1 + ERF_E(z, e));                                                \
        T pdf = e * (T)(M_2_SQRTPI * M_SQRT1_2 * 0.5);                                     \
        return g * (cdf + x * pdf);                                                        \
    }                                                                                      \
    static inline T gelu_tanh_##SFX(T x)                                                   \
    {                                                                                      \
        const T beta = (T)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = (T)0.044715;               \
        return (T)0.5 * x * (1 + TANH(beta * (x + kappa * x * x * x)));                    \
    }                                                                                      \
    static inline T gelu_tanh_bw_##SFX(T g, T x)                                           \
    {                                                                                      \
        const T beta = (T)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = (T)0.044715;               \
        T t = TANH(beta * (x + kappa * x * x * x));                                        \
        T left = (T)0.5 * x, right = 1 + t;                                                \
        T dl = (T)0.5 * right, dr = left * (1 - t * t) * beta * (1 + 3 * kappa * x * x);   \
        return g * (dl + dr);                                                              \
    }                                                                                      \
    static inline T silu_bw_##SFX(T g, T x)                                                \
    {                                                                                      \
        T s = 1 / (1 + EXP(-x));                                                           \
        return g * s * (1 + x * (1 - s));                                                  \
    }                                                                                      \
    static inline T softplus_##SFX(T x, T beta, T thr)                                     \
    {                                                                                      \
        return x * beta > thr ? x : log1p(exp(x * beta)) / beta;                           \
    }                                                                                      \
    static inline T softplus_bw_##SFX(T g, T x, T beta, T thr)                             \
    {                                                                                      \
        T z = EXP(x * beta);                                                               \
        return x * beta > thr ? g : g * z / (z + 1);                                       \
    }                                                                                      \
    /* tanh(softplus(x)) = n / (n + 2), n = e^x (e^x + 2): no log; 1 above x = 20 */       \
    static inline T tanh_softplus_##SFX(T x)                                               \
    {                                                                                      \
        T e = EXP(x < 20 ? x : (T)20), nn = e * (e + 2);                                   \
        return x < 20 ? nn / (nn + 2) : (T)1;                                              \
    }                                                                                      \
    static inline T mish_bw_##SFX(T g, T x)                                                \
    {                                                                                      \
        T s = 1 / (1 + EXP(-x)), t = tanh_softplus_##SFX(x);                               \
        return g * (t + x * s * (1 - t * t));                                              \
    }                                                                                      \
    static inline T hardswish_##SFX(T x)                                                   \
    {                                                                                      \
        T r = x + 3;                                                                       \
        r = r < 0 ? 0 : r > 6 ? 6 : r;                                                     \
        return x * r / 6;                                                                  \
    }
ACT_HELPERS(float, f)
ACT_HELPERS(double, d)
#define GEN(fn, v) _Generic((v), float: fn##_f, default: fn##_d)

/* ---- kernels: forward o = EXPR(x); backward o = EXPR(x = grad, y = saved input) --------
 * The parameters are read once into locals ALPHA, BETA, GAMMA (ctx->p0.f64, p1.f64, d0): a
 * load inside the loop could alias the output and would keep it scalar. */

#define ACT_PARAMS(T)                                                                      \
    typedef T scalar_t;                                                                    \
    const ew_ctx *ctx = ctx_;                                                              \
    const T ALPHA = (T)ctx->p0.f64, BETA = (T)ctx->p1.f64, GAMMA = (T)ctx->d0;             \
    (void)ALPHA; (void)BETA; (void)GAMMA; (void)(scalar_t)0

#define ACT_LOOP1(NAME, T, EXPR)                                                           \
    CDDP_CLONES static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_)          \
    {                                                                                      \
        ACT_PARAMS(T);                                                                     \
        if (s[0] == EW_SZ(T) && s[1] == EW_SZ(T)) {                                        \
            T *o = (T *)p[0];                                                              \
            const T *a = (const T *)p[1];                                                  \
            for (int64_t i = 0; i < n; i++) { T x = a[i]; o[i] = (EXPR); }                 \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                T x = *(const T *)(p[1] + i * s[1]);                                       \
                *(T *)(p[0] + i * s[0]) = (EXPR);                                          \
            }                                                                              \
        }                                                                                  \
    }

#define ACT_LOOP2(NAME, T, EXPR)                                                           \
    CDDP_CLONES static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_)          \
    {                                                                                      \
        ACT_PARAMS(T);                                                                     \
        if (s[0] == EW_SZ(T) && s[1] == EW_SZ(T) && s[2] == EW_SZ(T)) {                    \
            T *o = (T *)p[0];                                                              \
            const T *a = (const T *)p[1], *b = (const T *)p[2];                            \
            for (int64_t i = 0; i < n; i++) { T x = a[i], y = b[i]; o[i] = (EXPR); }       \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                T x = *(const T *)(p[1] + i * s[1]), y = *(const T *)(p[2] + i * s[2]);    \
                *(T *)(p[0] + i * s[0]) = (EXPR);                                          \
            }                                                                              \
        }                                                                                  \
    }

#define ACT(op, FWD, BWD)                                                                  \
    ACT_LOOP1(op##_f32, float, FWD) ACT_LOOP1(op##_f64, double, FWD)                       \
    ACT_LOOP2(op##_bw_f32, float, BWD) ACT_LOOP2(op##_bw_f64, double, BWD)

/* leaky_relu(x; slope = ALPHA) */
ACT(leaky_relu, x > 0 ? x : x * ALPHA, y > 0 ? x : x * ALPHA)
/* elu(x; alpha = ALPHA, scale = BETA, input_scale = GAMMA), torch's elu/selu/celu */
ACT(elu, x <= 0 ? expm1(x * GAMMA) * (ALPHA * BETA) : x * BETA,
    y <= 0 ? x * GAMMA * (ALPHA * BETA) * EXP(y * GAMMA) : x * BETA)
ACT(gelu, GEN(gelu, x)(x), GEN(gelu_bw, x)(x, y))
ACT(gelu_tanh, GEN(gelu_tanh, x)(x), GEN(gelu_tanh_bw, x)(x, y))
ACT(silu, x / (1 + EXP(-x)), GEN(silu_bw, x)(x, y))
/* softplus(x; beta = ALPHA, threshold = BETA) */
ACT(softplus, GEN(softplus, x)(x, ALPHA, BETA), GEN(softplus_bw, x)(x, y, ALPHA, BETA))
/* hardtanh(x; min = ALPHA, max = BETA); NaN passes through as clamp's does */
ACT(hardtanh, x < ALPHA ? ALPHA : x > BETA ? BETA : x, (y <= ALPHA || y >= BETA) ? 0 : x)
ACT(mish, x * GEN(tanh_softplus, x)(x), GEN(mish_bw, x)(x, y))
ACT(hardswish, GEN(hardswish, x)(x), y <= -3 ? 0 : y < 3 ? x * (y / 3 + (scalar_t)0.5) : x)
ACT(hardsigmoid, x <= -3 ? 0 : x >= 3 ? 1 : x / 6 + (scalar_t)0.5, (y > -3 && y < 3) ? x / 6 : 0)

/* ---- the table ------------------------------------------------------------------------- */

typedef struct {
    const char *kname;            /* torch's kernel name in dtype errors */
    const char *node, *node_inplace;
    int nparam;                   /* 0..3, in the order ALPHA, BETA, GAMMA */
    cddp_loop_fn fwd[2], bw[2];   /* float32, float64 */
} actop;

#define K2(op) {op##_f32, op##_f64}, {op##_bw_f32, op##_bw_f64}
enum { A_LEAKY, A_ELU, A_CELU, A_GELU, A_GELU_TANH, A_SILU, A_SOFTPLUS, A_HARDTANH, A_MISH,
       A_HARDSWISH, A_HARDSIGMOID, A_COUNT };
static const actop acts[A_COUNT] = {
    [A_LEAKY] = {"leaky_relu_cpu", "LeakyReluBackward0", "LeakyReluBackward1", 1, K2(leaky_relu)},
    [A_ELU] = {"elu_cpu", "EluBackward0", "EluBackward1", 3, K2(elu)},
    [A_CELU] = {"elu_cpu", "CeluBackward0", "CeluBackward1", 3, K2(elu)},
    [A_GELU] = {"GeluKernelImpl", "GeluBackward0", NULL, 0, K2(gelu)},
    [A_GELU_TANH] = {"GeluKernelImpl", "GeluBackward0", NULL, 0, K2(gelu_tanh)},
    [A_SILU] = {"silu_cpu", "SiluBackward0", NULL, 0, K2(silu)},
    [A_SOFTPLUS] = {"softplus_cpu", "SoftplusBackward0", NULL, 2, K2(softplus)},
    [A_HARDTANH] = {"hardtanh_cpu", "HardtanhBackward0", NULL, 2, K2(hardtanh)},
    [A_MISH] = {"mish_cpu", "MishBackward0", NULL, 0, K2(mish)},
    [A_HARDSWISH] = {"hardswish_cpu", "HardswishBackward0", NULL, 0, K2(hardswish)},
    [A_HARDSIGMOID] = {"hardsigmoid_cpu", "HardsigmoidBackward0", NULL, 0, K2(hardsigmoid)},
};

static void ctx_from(ew_ctx *ctx, cddp_dtype dt, const double *prm)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->p0.f64 = prm[0];             /* read as doubles by ACT_PARAMS whatever the dtype */
    ctx->p1.f64 = prm[1];
    ctx->d0 = prm[2];
}

static int act_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    const actop *a = &acts[self->i[0]];
    TensorObject *g = gout[0], *x;
    ew_ctx ctx;
    if (!g || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)))
        return -1;
    cddp_dtype dt = x->dtype;
    ew_src s[2] = {{g}, {x}};
    cddp_dtype want[2] = {dt, dt};
    ctx_from(&ctx, dt, self->d);
    TensorObject *r = cddp_ew_map(dt, 2, s, want, a->bw[dt == CDDP_FLOAT64], &ctx, NULL);
    gin[0] = cddp_ew_grad_to(r, &self->meta[0]);
    return gin[0] ? 0 : -1;
}

/* a(x) as a new tensor with history (node name `node`), or written into `into` (no history). */
static TensorObject *act_apply(const actop *a, TensorObject *x, const double *prm,
                               const char *node, TensorObject *into)
{
    cddp_dtype dt = x->dtype;
    ew_ctx ctx;
    if (!cddp_is_floating(dt)) {
        cddp_ew_not_implemented(a->kname, dt);
        return NULL;
    }
    ctx_from(&ctx, dt, prm);
    cddp_loop_fn fn = a->fwd[dt == CDDP_FLOAT64];
    if (into) {
        ew_src s = {x};
        return cddp_ew_map(dt, 1, &s, &dt, fn, &ctx, into);
    }
    TensorObject *out = cddp_ew_map1(dt, x, dt, fn, &ctx);
    if (out && cddp_grad_enabled && cddp_needs_grad(x)) {
        ew_operand op = {x};
        int err = 0;
        NodeObject *n = cddp_ew_record(out, node, act_backward, 1, &op, 1, &err);
        if (err) {
            Py_DECREF(out);
            return NULL;
        }
        if (n) {
            n->i[0] = a - acts;
            memcpy(n->d, prm, 3 * sizeof(double));
        }
    }
    return out;
}

/* _<op>(input, *params, inplace): parameters as doubles (defaults are Python's business). */
static PyObject *act_py(int op, PyObject *const *args, Py_ssize_t nargs, const double *fixed)
{
    const actop *a = &acts[op];
    double prm[3] = {0, 0, 0};
    int np = fixed ? 0 : a->nparam, inplace, rc;
    TensorObject *x, *old, *r;
    if (nargs != 2 + np) {
        PyErr_Format(PyExc_TypeError, "_%s takes (input, %d parameters, inplace)", a->kname, np);
        return NULL;
    }
    if (!(x = cddp_ew_tensor_arg(args[0], a->kname, "input")))
        return NULL;
    for (int i = 0; i < np; i++)
        prm[i] = PyFloat_AsDouble(args[1 + i]);
    if (fixed)
        memcpy(prm, fixed, sizeof prm);
    if ((inplace = PyObject_IsTrue(args[1 + np])) < 0 || PyErr_Occurred())
        return NULL;
    if (!inplace)
        return (PyObject *)act_apply(a, x, prm, a->node, NULL);
    if (!cddp_is_floating(x->dtype))
        return cddp_ew_not_implemented(a->kname, x->dtype), NULL;
    if ((rc = cddp_ew_inplace_begin(x, 0, &old)) < 0)
        return NULL;
    if (rc == 1) {
        PyObject *res = cddp_ew_inplace_finish(
            x, act_apply(a, old, prm, a->node_inplace ? a->node_inplace : a->node, NULL));
        Py_DECREF(old);
        return res;
    }
    if (!(r = act_apply(a, x, prm, NULL, x)))
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(x);
}

/* selu's constants (torch's) and elu's parameter order: alpha, scale, input_scale. */
#define SELU_ALPHA 1.6732632423543772848170429916717
#define SELU_SCALE 1.0507009873554804934193349852946

#define ACT_ENTRY(name, op, fixed)                                                         \
    static PyObject *py_##name(PyObject *m, PyObject *const *args, Py_ssize_t nargs)       \
    {                                                                                      \
        return act_py(op, args, nargs, fixed);                                             \
    }
static const double selu_prm[3] = {SELU_ALPHA, SELU_SCALE, 1.0};
ACT_ENTRY(leaky_relu, A_LEAKY, NULL)
ACT_ENTRY(elu, A_ELU, NULL)
ACT_ENTRY(selu, A_ELU, selu_prm)
ACT_ENTRY(celu, A_CELU, NULL)
ACT_ENTRY(gelu, A_GELU, NULL)
ACT_ENTRY(gelu_tanh, A_GELU_TANH, NULL)
ACT_ENTRY(silu, A_SILU, NULL)
ACT_ENTRY(softplus, A_SOFTPLUS, NULL)
ACT_ENTRY(hardtanh, A_HARDTANH, NULL)
ACT_ENTRY(mish, A_MISH, NULL)
ACT_ENTRY(hardswish, A_HARDSWISH, NULL)
ACT_ENTRY(hardsigmoid, A_HARDSIGMOID, NULL)

/* ---- PReLU: y = x > 0 ? x : w[c] x, c the index on dim 1 (one weight: every element) ---- */

typedef struct {
    int64_t N, C, S;          /* x (N, C, S); C = 1 when weight has one element */
} prelu_plan;

static void prelu_plan_init(prelu_plan *p, const TensorObject *x, int64_t nw)
{
    int64_t n = cddp_numel(x);
    p->C = nw;
    p->N = nw == 1 ? 1 : x->shape[0];
    p->S = 1;
    if (nw == 1)
        p->S = n;
    else
        for (int d = 2; d < x->ndim; d++)
            p->S *= x->shape[d];
}

#define PRELU_FWD(NAME, T)                                                                 \
    static void NAME(const prelu_plan *p, const T *x, const T *w, T *y)                    \
    {                                                                                      \
        for (int64_t n = 0; n < p->N; n++)                                                 \
            for (int64_t c = 0; c < p->C; c++) {                                           \
                const T *xi = x + (n * p->C + c) * p->S;                                   \
                T *yi = y + (n * p->C + c) * p->S, wc = w[c];                              \
                for (int64_t s = 0; s < p->S; s++)                                         \
                    yi[s] = xi[s] > 0 ? xi[s] : wc * xi[s];                                \
            }                                                                              \
    }
PRELU_FWD(prelu_fwd_f32, float)
PRELU_FWD(prelu_fwd_f64, double)

/* dx (NULL: not wanted) and dw[c] = sum over channel c of (x > 0 ? 0 : x g), in double */
#define PRELU_BWD(NAME, T)                                                                 \
    static void NAME(const prelu_plan *p, const T *x, const T *w, const T *g, T *dx,       \
                     double *dw)                                                           \
    {                                                                                      \
        for (int64_t c = 0; c < p->C; c++)                                                 \
            dw[c] = 0;                                                                     \
        for (int64_t n = 0; n < p->N; n++)                                                 \
            for (int64_t c = 0; c < p->C; c++) {                                           \
                int64_t o = (n * p->C + c) * p->S;                                         \
                const T *xi = x + o, *gi = g + o, wc = w[c];                               \
                double acc = 0;                                                            \
                for (int64_t s = 0; s < p->S; s++)                                         \
                    acc += xi[s] > 0 ? 0.0 : (double)xi[s] * (double)gi[s];                \
                dw[c] += acc;                                                              \
                if (dx)                                                                    \
                    for (int64_t s = 0; s < p->S; s++)                                     \
                        dx[o + s] = xi[s] > 0 ? gi[s] : wc * gi[s];                        \
            }                                                                              \
    }
PRELU_BWD(prelu_bwd_f32, float)
PRELU_BWD(prelu_bwd_f64, double)

static int prelu_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *w = cddp_node_saved(self, 1), *g = NULL;
    double *dw = NULL;
    int rc = -1;
    if (!x || !w)
        return -1;
    if (!gout[0])
        return 0;
    prelu_plan p;
    prelu_plan_init(&p, x, cddp_numel(w));
    cddp_dtype dt = x->dtype;
    g = cddp_tensor_cast_raw(gout[0], dt);
    if (g && !cddp_is_contiguous(g))
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    dw = PyMem_Malloc(sizeof(double) * (size_t)(p.C + 1));
    if (!g || !dw)
        goto done;
    if (self->next[0].node && !(gin[0] = cddp_tensor_new(dt, x->ndim, x->shape, 0)))
        goto done;
    void *dx = gin[0] ? cddp_data(gin[0]) : NULL;
    const void *xp = cddp_data(x), *wp = cddp_data(w), *gp = cddp_data(g);
    Py_BEGIN_ALLOW_THREADS
    if (dt == CDDP_FLOAT32)
        prelu_bwd_f32(&p, xp, wp, gp, dx, dw);
    else
        prelu_bwd_f64(&p, xp, wp, gp, dx, dw);
    Py_END_ALLOW_THREADS
    if (self->next[1].node) {
        const cddp_meta *m = &self->meta[1];
        if (!(gin[1] = cddp_tensor_new(m->dtype, m->ndim, m->shape, 0)))
            goto done;
        for (int64_t c = 0; c < p.C; c++) {
            if (dt == CDDP_FLOAT32)
                ((float *)cddp_data(gin[1]))[c] = (float)dw[c];
            else
                ((double *)cddp_data(gin[1]))[c] = dw[c];
        }
    }
    rc = 0;
done:
    Py_XDECREF(g);
    PyMem_Free(dw);
    return rc;
}

static int prelu_check(TensorObject *x, TensorObject *w)
{
    int64_t nw = cddp_numel(w), ch = x->ndim > 1 ? x->shape[1] : 1;
    if (cddp_refuse_narrow(x, "prelu") < 0 || cddp_refuse_narrow(w, "prelu") < 0)
        return -1;
    if (x->dtype != w->dtype || !cddp_is_floating(x->dtype)) {
        if (x->dtype == w->dtype)
            return cddp_ew_not_implemented("prelu_cpu", x->dtype);
        PyErr_Format(PyExc_RuntimeError, "prelu: Type promoting not supported. Got %s and %s",
                     cddp_ew_torch_dtype_name[x->dtype], cddp_ew_torch_dtype_name[w->dtype]);
        return -1;
    }
    if (w->ndim > 1) {
        PyErr_Format(PyExc_RuntimeError, "prelu: Expected `weight` to be a scalar or 1D tensor, "
                     "but got: ndim = %d", w->ndim);
        return -1;
    }
    if (nw != 1 && x->ndim == 0) {
        PyErr_SetString(PyExc_RuntimeError, "Not allow zero-dim input tensor.");
        return -1;
    }
    if (nw != 1 && nw != ch) {
        PyErr_Format(PyExc_RuntimeError, "Mismatch of parameter numbers and input channel size. "
                     "Found parameter numbers = %lld and channel size = %lld.", (long long)nw,
                     (long long)ch);
        return -1;
    }
    return 0;
}

static PyObject *py_prelu(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *w, *xc = NULL, *wc = NULL, *y = NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_prelu(input, weight)");
        return NULL;
    }
    if (!(x = cddp_ew_tensor_arg(args[0], "prelu", "input")) ||
        !(w = cddp_ew_tensor_arg(args[1], "prelu", "weight")) || prelu_check(x, w) < 0)
        return NULL;
    prelu_plan p;
    prelu_plan_init(&p, x, cddp_numel(w));
    xc = cddp_tensor_contiguous_raw(x);
    wc = cddp_tensor_contiguous_raw(w);
    if (!xc || !wc || !(y = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0)))
        goto fail;
    const void *xp = cddp_data(xc), *wp = cddp_data(wc);
    void *yp = cddp_data(y);
    Py_BEGIN_ALLOW_THREADS
    if (x->dtype == CDDP_FLOAT32)
        prelu_fwd_f32(&p, xp, wp, yp);
    else
        prelu_fwd_f64(&p, xp, wp, yp);
    Py_END_ALLOW_THREADS
    int err;
    TensorObject *ins[2] = {x, w};
    NodeObject *node = cddp_maybe_node("PreluKernelBackward0", prelu_backward, 2, ins, &err);
    if (err)
        goto fail;
    if (node) {
        cddp_set_history(y, node, 0);
        int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, wc) < 0;
        Py_DECREF(node);
        if (bad)
            goto fail;
    }
    Py_DECREF(xc);
    Py_DECREF(wc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(wc);
    Py_XDECREF(y);
    return NULL;
}

#define FAST(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
PyMethodDef cddp_activation_module_methods[] = {
    {"_leaky_relu", FAST(py_leaky_relu), "_leaky_relu(input, negative_slope, inplace)"},
    {"_elu", FAST(py_elu), "_elu(input, alpha, scale, input_scale, inplace)"},
    {"_selu", FAST(py_selu), "_selu(input, inplace)"},
    {"_celu", FAST(py_celu), "_celu(input, alpha, scale, input_scale, inplace)"},
    {"_gelu", FAST(py_gelu), "_gelu(input, inplace): approximate='none'"},
    {"_gelu_tanh", FAST(py_gelu_tanh), "_gelu_tanh(input, inplace): approximate='tanh'"},
    {"_silu", FAST(py_silu), "_silu(input, inplace)"},
    {"_softplus", FAST(py_softplus), "_softplus(input, beta, threshold, inplace)"},
    {"_hardtanh", FAST(py_hardtanh), "_hardtanh(input, min_val, max_val, inplace)"},
    {"_mish", FAST(py_mish), "_mish(input, inplace)"},
    {"_hardswish", FAST(py_hardswish), "_hardswish(input, inplace)"},
    {"_hardsigmoid", FAST(py_hardsigmoid), "_hardsigmoid(input, inplace)"},
    {"_prelu", FAST(py_prelu), "_prelu(input, weight)"},
    {NULL},
};
