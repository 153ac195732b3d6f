/* optim/fused.c — one fused loop per parameter for torch.optim's Adadelta, Adagrad, RMSprop,
 * Adamax, NAdam, RAdam and ASGD (torch/optim/<name>.py, _single_tensor_<name>: torch's CPU
 * path). Every intermediate torch materialises (the decayed gradient, std, the delta ...) is a
 * register here; the operations are torch's, in torch's order, with the scalars cast to the
 * parameter's dtype as ATen does, so float64 trajectories agree with torch to rounding and
 * float32 ones to about 1e-6 (torch's vectorised kernels fuse some multiply-adds).
 *
 *   _fused_step(kind, params, grads, states, hs, ps)
 *       kind     0 adadelta .. 6 asgd (the table below; cddp/optim/_fused.py names them)
 *       params   [Tensor] updated in place; grads parallel, None skips the parameter
 *       states   tuple of lists parallel to params, one list per state tensor of the kind
 *                (an optional one may be None when the kind's flags do not use it)
 *       hs       tuple of floats: the group's hyper-parameters and flags
 *       ps       list (parallel to params) of tuples of per-parameter scalars that depend on
 *                the parameter's step (bias corrections, eta ...), or None
 *
 * float16/bfloat16 parameters keep their state in their dtype (as torch) and run the float32
 * loop on widened blocks (step_reduced).
 *
 * Dimension legend: every tensor is a flat run of n elements (the parameter's numel).
 */
#include "optim/optim.h"
#include "module.h"
#include <math.h>

#define MAX_STATE 3
#define MAX_HS 8
#define MAX_PS 3

/* Vectorisation: GCC vectorises these loops only without control flow in them, so every
 * per-element choice is a pure select (loop-invariant flags, torch's lerp formula, the NaN
 * rule of torch.maximum), every store is unconditional, and state pointers are restrict. The
 * RMSprop variants that touch different state get their own loops. sqrt needs the build's
 * -fno-math-errno (setup.py) for the same reason: else a branch to libm per element. */

/* torch's lerp (ATen Lerp.h): the weight picks the formula that is exact at its end. */
#define LERP(a, b, w, one, small) \
    ((small) ? (a) + (w) * ((b) - (a)) : (b) - ((b) - (a)) * ((one) - (w)))
#define SMALL(w) ((w) < 0.5 && (w) > -0.5)

/* kernels: (w, g, st, n, hs, ps); T and SQRT come from the instantiation */
#define KERNELS(T, SQRT, SFX)                                                                 \
static void adadelta_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,            \
                           const double *hs, const double *ps)                               \
{   /* hs: lr rho eps wd maximize; st: square_avg acc_delta */                               \
    T *restrict sa = st[0], *restrict ad = st[1];                                             \
    const T nlr = (T)-hs[0], rho = (T)hs[1], rho1 = (T)(1 - hs[1]), eps = (T)hs[2];           \
    const T wd = (T)hs[3];                                                                    \
    const int has_wd = hs[3] != 0, mx = hs[4] != 0;                                           \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = mx ? -g[k] : g[k];                                                              \
        d = has_wd ? d + wd * w[k] : d;                                                       \
        T s = sa[k] * rho + rho1 * d * d;                                                     \
        T dl = SQRT(ad[k] + eps) / SQRT(s + eps) * d;                                         \
        sa[k] = s;                                                                            \
        ad[k] = ad[k] * rho + rho1 * dl * dl;                                                 \
        w[k] = w[k] + nlr * dl;                                                               \
    }                                                                                         \
}                                                                                             \
static void adagrad_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,             \
                          const double *hs, const double *ps)                                \
{   /* hs: wd eps maximize; st: sum; ps: clr */                                               \
    T *restrict s = st[0];                                                                    \
    const T wd = (T)hs[0], eps = (T)hs[1], nclr = (T)-ps[0];                                  \
    const int has_wd = hs[0] != 0, mx = hs[2] != 0;                                           \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = mx ? -g[k] : g[k];                                                              \
        d = has_wd ? d + wd * w[k] : d;                                                       \
        T v = s[k] + d * d;                                                                   \
        s[k] = v;                                                                             \
        w[k] = w[k] + nclr * d / (SQRT(v) + eps);                                             \
    }                                                                                         \
}                                                                                             \
static inline __attribute__((always_inline)) void                                            \
rmsprop_loop_##SFX(T *restrict w, const T *restrict g, T *restrict sa, T *restrict ga,       \
                   T *restrict b, int64_t n, const double *hs, const int centered,           \
                   const int has_mom)                                                        \
{   /* hs: lr alpha eps wd momentum centered maximize */                                      \
    const T nlr = (T)-hs[0], al = (T)hs[1], al1 = (T)(1 - hs[1]), eps = (T)hs[2];             \
    const T wd = (T)hs[3], mom = (T)hs[4], one = (T)1;                                        \
    const int has_wd = hs[3] != 0, mx = hs[6] != 0, small = SMALL(al1);                       \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = mx ? -g[k] : g[k], avg, s;                                                      \
        d = has_wd ? d + wd * w[k] : d;                                                       \
        s = sa[k] * al + al1 * d * d;                                                         \
        sa[k] = s;                                                                            \
        if (centered) {                                                                       \
            T a = LERP(ga[k], d, al1, one, small);                                            \
            ga[k] = a;                                                                        \
            avg = SQRT(s + (-one) * a * a) + eps;                                             \
        } else {                                                                              \
            avg = SQRT(s) + eps;                                                              \
        }                                                                                     \
        if (has_mom) {                                                                        \
            T v = b[k] * mom + d / avg;                                                       \
            b[k] = v;                                                                         \
            w[k] = w[k] + nlr * v;                                                            \
        } else {                                                                              \
            w[k] = w[k] + nlr * d / avg;                                                      \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
static void rmsprop_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,             \
                          const double *hs, const double *ps)                                \
{   /* st: square_avg grad_avg (centered) momentum_buffer (momentum > 0) */                   \
    const int centered = hs[5] != 0, has_mom = hs[4] > 0;                                     \
    if (centered && has_mom)                                                                  \
        rmsprop_loop_##SFX(w, g, st[0], st[1], st[2], n, hs, 1, 1);                           \
    else if (centered)                                                                        \
        rmsprop_loop_##SFX(w, g, st[0], st[1], NULL, n, hs, 1, 0);                            \
    else if (has_mom)                                                                         \
        rmsprop_loop_##SFX(w, g, st[0], NULL, st[2], n, hs, 0, 1);                            \
    else                                                                                      \
        rmsprop_loop_##SFX(w, g, st[0], NULL, NULL, n, hs, 0, 0);                             \
}                                                                                             \
static void adamax_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,              \
                         const double *hs, const double *ps)                                 \
{   /* hs: beta1 beta2 eps wd maximize; st: exp_avg exp_inf; ps: clr */                       \
    T *restrict m = st[0], *restrict ei = st[1];                                              \
    const T b1w = (T)(1 - hs[0]), b2 = (T)hs[1], eps = (T)hs[2], wd = (T)hs[3];               \
    const T nclr = (T)-ps[0], one = (T)1;                                                     \
    const int has_wd = hs[3] != 0, mx = hs[4] != 0, small = SMALL(b1w);                       \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = mx ? -g[k] : g[k];                                                              \
        d = has_wd ? d + wd * w[k] : d;                                                       \
        T mk = LERP(m[k], d, b1w, one, small);                                                \
        T a = ei[k] * b2, c = (d < 0 ? -d : d) + eps;                                         \
        T e = a > c ? a : c;                                                                  \
        e = a != a ? a : e;                        /* torch.maximum: NaN wins */              \
        m[k] = mk;                                                                            \
        ei[k] = e;                                                                            \
        w[k] = w[k] + nclr * mk / e;                                                          \
    }                                                                                         \
}                                                                                             \
static void nadam_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,               \
                        const double *hs, const double *ps)                                  \
{   /* hs: lr beta1 beta2 eps wd decoupled maximize; st: exp_avg exp_avg_sq;                  \
     * ps: bias_correction2, -lr(1-mu)/(1-mu_product), -lr mu_next/(1-mu_product_next) */     \
    T *restrict m = st[0], *restrict v = st[1];                                               \
    const T b1w = (T)(1 - hs[1]), b2 = (T)hs[2], b2w = (T)(1 - hs[2]), eps = (T)hs[3];        \
    const int dec = hs[4] != 0 && hs[5] != 0, cwd = hs[4] != 0 && hs[5] == 0;                 \
    const T wd = (T)hs[4], decay = dec ? (T)(1 - hs[0] * hs[4]) : (T)1, one = (T)1;           \
    const T sgn = hs[6] != 0 ? (T)-1 : (T)1;          /* exact: -g, or g */                   \
    const T bc2 = (T)ps[0], c1 = (T)ps[1], c2 = (T)ps[2];                                     \
    const int small = SMALL(b1w);                                                             \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = sgn * g[k], p = w[k] * decay;               /* decay 1 unless decoupled */      \
        d = cwd ? d + wd * p : d;                                                             \
        T mk = LERP(m[k], d, b1w, one, small);                                                \
        T vk = v[k] * b2 + b2w * d * d;                                                       \
        T den = SQRT(vk / bc2) + eps;                                                         \
        m[k] = mk;                                                                            \
        v[k] = vk;                                                                            \
        p = p + c1 * d / den;                                                                 \
        w[k] = p + c2 * mk / den;                                                             \
    }                                                                                         \
}                                                                                             \
static void radam_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,               \
                        const double *hs, const double *ps)                                  \
{   /* hs: lr beta1 beta2 eps wd decoupled maximize; st: exp_avg exp_avg_sq;                  \
     * ps: bias_correction1, sqrt(bias_correction2), rect (0: not rectified this step) */     \
    T *restrict m = st[0], *restrict v = st[1];                                               \
    const T lr = (T)hs[0], b1w = (T)(1 - hs[1]), b2 = (T)hs[2], b2w = (T)(1 - hs[2]);         \
    const int dec = hs[4] != 0 && hs[5] != 0, cwd = hs[4] != 0 && hs[5] == 0;                 \
    const T eps = (T)hs[3], wd = (T)hs[4], one = (T)1;                                        \
    const T decay = dec ? (T)(1 - hs[0] * hs[4]) : (T)1, sgn = hs[6] != 0 ? (T)-1 : (T)1;    \
    const T bc1 = (T)ps[0], sbc2 = (T)ps[1], rect = (T)ps[2];                                 \
    const int small = SMALL(b1w), rectified = ps[2] != 0;                                     \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = sgn * g[k], p = w[k] * decay, u;                                                \
        d = cwd ? d + wd * p : d;                                                             \
        T mk = LERP(m[k], d, b1w, one, small);                                                \
        T vk = v[k] * b2 + b2w * d * d;                                                       \
        m[k] = mk;                                                                            \
        v[k] = vk;                                                                            \
        u = mk / bc1 * lr;                                                                    \
        u = rectified ? u * (sbc2 / (SQRT(vk) + eps)) * rect : u;                             \
        w[k] = p + (-one) * u;                                                                \
    }                                                                                         \
}                                                                                             \
static void asgd_##SFX(T *restrict w, const T *restrict g, T **st, int64_t n,                \
                       const double *hs, const double *ps)                                   \
{   /* hs: lambd wd maximize; st: ax; ps: eta mu (their state values) */                      \
    T *restrict ax = st[0];                                                                   \
    const T wd = (T)hs[1], decay = (T)(1 - hs[0] * ps[0]), neta = (T)-ps[0], mu = (T)ps[1];   \
    const int has_wd = hs[1] != 0, mx = hs[2] != 0, avg = ps[1] != 1;                         \
    for (int64_t k = 0; k < n; k++) {                                                         \
        T d = mx ? -g[k] : g[k];                                                              \
        d = has_wd ? d + wd * w[k] : d;                                                       \
        T p = w[k] * decay + neta * d;                                                        \
        w[k] = p;                                                                             \
        ax[k] = avg ? ax[k] + (p - ax[k]) * mu : p;                                           \
    }                                                                                         \
}

KERNELS(float, sqrtf, f)
KERNELS(double, sqrt, d)

typedef void (*kernel_f)(float *restrict, const float *restrict, float **, int64_t,
                         const double *, const double *);
typedef void (*kernel_d)(double *restrict, const double *restrict, double **, int64_t,
                         const double *, const double *);

static const struct {
    const char *name;
    int n_state, n_hs, n_ps;
    unsigned optional;                /* bit j: state j may be None */
    const char *state_names[MAX_STATE];
    kernel_f f;
    kernel_d d;
} kinds[] = {
    {"adadelta", 2, 5, 0, 0, {"square_avg", "acc_delta"}, adadelta_f, adadelta_d},
    {"adagrad", 1, 3, 1, 0, {"sum"}, adagrad_f, adagrad_d},
    {"rmsprop", 3, 7, 0, 6, {"square_avg", "grad_avg", "momentum_buffer"}, rmsprop_f, rmsprop_d},
    {"adamax", 2, 5, 1, 0, {"exp_avg", "exp_inf"}, adamax_f, adamax_d},
    {"nadam", 2, 7, 3, 0, {"exp_avg", "exp_avg_sq"}, nadam_f, nadam_d},
    {"radam", 2, 7, 3, 0, {"exp_avg", "exp_avg_sq"}, radam_f, radam_d},
    {"asgd", 1, 3, 2, 0, {"ax"}, asgd_f, asgd_d},
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))

/* A tuple of floats (exactly n of them) into out. */
static int read_floats(PyObject *tup, int n, double *out, const char *what)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != n) {
        PyErr_Format(PyExc_ValueError, "_fused_step: %s must be a tuple of %d floats", what, n);
        return -1;
    }
    for (int j = 0; j < n; j++) {
        out[j] = PyFloat_AsDouble(PyTuple_GET_ITEM(tup, j));
        if (out[j] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* Checks the lists' lengths and the scalars of kind k. */
static int check_args(int k, PyObject *params, PyObject *grads, PyObject *states,
                      PyObject *ps, double *hs_out, PyObject *hs)
{
    Py_ssize_t np_ = PyList_GET_SIZE(params);
    if (k < 0 || k >= N_KINDS) {
        PyErr_Format(PyExc_ValueError, "_fused_step: unknown optimizer kind %d", k);
        return -1;
    }
    if (PyList_GET_SIZE(grads) != np_ || PyTuple_GET_SIZE(states) != kinds[k].n_state ||
        (kinds[k].n_ps && (!PyList_Check(ps) || PyList_GET_SIZE(ps) != np_))) {
        PyErr_Format(PyExc_ValueError, "_fused_step(%s): argument lists differ in length",
                     kinds[k].name);
        return -1;
    }
    for (int j = 0; j < kinds[k].n_state; j++) {
        PyObject *l = PyTuple_GET_ITEM(states, j);
        if (!PyList_Check(l) || PyList_GET_SIZE(l) != np_) {
            PyErr_Format(PyExc_ValueError, "_fused_step(%s): state %s must be a list of %zd",
                         kinds[k].name, kinds[k].state_names[j], np_);
            return -1;
        }
    }
    return read_floats(hs, kinds[k].n_hs, hs_out, "hs");
}

/* Kind k's float32 loop over a float16/bfloat16 parameter, its gradient and state, NB
 * elements at a time: widened, updated, each rounded back once per step (optim.c's Adam does
 * the same; torch rounds after every op of the update, so the two differ in the last bit now
 * and then). */
#define NB 512
static void step_reduced(int k, cddp_dtype dt, char *w, const char *gr, char **sp, int64_t n,
                         const double *hs, const double *pv)
{
    float wf[NB], gf[NB], sf[MAX_STATE][NB], *sb[MAX_STATE];
    for (int64_t o = 0; o < n; o += NB) {
        int64_t m = n - o < NB ? n - o : NB;
        cddp_widen(dt, wf, w + 2 * o, 2, m);
        cddp_widen(dt, gf, gr + 2 * o, 2, m);
        for (int j = 0; j < kinds[k].n_state; j++) {
            sb[j] = sp[j] ? sf[j] : NULL;
            if (sp[j])
                cddp_widen(dt, sf[j], sp[j] + 2 * o, 2, m);
        }
        kinds[k].f(wf, gf, sb, m, hs, pv);
        cddp_narrow(dt, w + 2 * o, 2, wf, m);
        for (int j = 0; j < kinds[k].n_state; j++)
            if (sp[j])
                cddp_narrow(dt, sp[j] + 2 * o, 2, sf[j], m);
    }
}

/* One parameter: its state tensors (optional ones may be absent), scalars, the loop. */
static int step_one(int k, PyObject *params, PyObject *grads, PyObject *states, PyObject *ps,
                    const double *hs, Py_ssize_t i)
{
    PyObject *go = PyList_GET_ITEM(grads, i);
    TensorObject *p, *g, *st[MAX_STATE] = {0};
    void *sp[MAX_STATE] = {0};
    double pv[MAX_PS] = {0};
    int64_t n;
    if (go == Py_None)
        return 0;
    if (!(p = cddp_optim_param(params, i)) ||
        (!cddp_is_reduced(p->dtype) && cddp_refuse_narrow(p, kinds[k].name) < 0))
        return -1;
    for (int j = 0; j < kinds[k].n_state; j++) {
        PyObject *l = PyTuple_GET_ITEM(states, j);
        if (PyList_GET_ITEM(l, i) == Py_None && (kinds[k].optional >> j & 1))
            continue;
        if (!(st[j] = cddp_optim_state(l, i, p, kinds[k].state_names[j])))
            return -1;
        sp[j] = cddp_data(st[j]);
    }
    if (kinds[k].n_ps && read_floats(PyList_GET_ITEM(ps, i), kinds[k].n_ps, pv, "ps") < 0)
        return -1;
    if (!(g = cddp_optim_grad(p, go, i)))
        return -1;
    n = cddp_numel(p);
    Py_BEGIN_ALLOW_THREADS
    if (cddp_is_reduced(p->dtype))
        step_reduced(k, p->dtype, cddp_data(p), cddp_data(g), (char **)sp, n, hs, pv);
    else if (p->dtype == CDDP_FLOAT32)
        kinds[k].f((float *)cddp_data(p), (const float *)cddp_data(g), (float **)sp, n, hs, pv);
    else
        kinds[k].d((double *)cddp_data(p), (const double *)cddp_data(g), (double **)sp, n, hs,
                   pv);
    Py_END_ALLOW_THREADS
    cddp_bump_version(p);
    for (int j = 0; j < kinds[k].n_state; j++)
        if (st[j])
            cddp_bump_version(st[j]);
    Py_DECREF(g);
    return 0;
}

static PyObject *py_fused_step(PyObject *m, PyObject *args)
{
    PyObject *params, *grads, *states, *hs, *ps;
    double hv[MAX_HS];
    int k;
    if (!PyArg_ParseTuple(args, "iO!O!O!O!O:_fused_step", &k, &PyList_Type, &params,
                          &PyList_Type, &grads, &PyTuple_Type, &states, &PyTuple_Type, &hs, &ps))
        return NULL;
    if (check_args(k, params, grads, states, ps, hv, hs) < 0)
        return NULL;
    /* rmsprop: the optional states must exist when their flag is on */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(params); i++) {
        if (k == 2 && PyList_GET_ITEM(grads, i) != Py_None &&
            ((hv[5] != 0 && PyList_GET_ITEM(PyTuple_GET_ITEM(states, 1), i) == Py_None) ||
             (hv[4] > 0 && PyList_GET_ITEM(PyTuple_GET_ITEM(states, 2), i) == Py_None))) {
            PyErr_SetString(PyExc_ValueError, "_fused_step(rmsprop): grad_avg / momentum_buffer "
                            "missing for centered / momentum");
            return NULL;
        }
        if (step_one(k, params, grads, states, ps, hv, i) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

PyMethodDef cddp_fused_optim_module_methods[] = {
    {"_fused_step", py_fused_step, METH_VARARGS,
     "_fused_step(kind, params, grads, states, hs, ps): one fused update loop per parameter "
     "(Adadelta Adagrad RMSprop Adamax NAdam RAdam ASGD)"},
    {NULL},
};
