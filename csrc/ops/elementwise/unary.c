/* ops/elementwise/unary.c — one-input elementwise ops, table driven: each op is a row of kernels (forward
 * per dtype, backward per float dtype) plus its dtype rule and what its backward reads.
 *
 * Mirrors: torch.neg / abs / exp / log / log2 / log10 / log1p / expm1 / sqrt / rsqrt / sin / cos
 * / asin / acos / atan / sinh / cosh (and the arc* aliases) / tan / tanh / sigmoid / erf / reciprocal / relu / sign / square / floor / ceil / round / trunc
 * / logical_not / bitwise_not / isnan / isinf / isfinite / asinh / acosh / atanh / erfc / erfinv /
 * exp2 / lgamma / digamma / frac / deg2rad / rad2deg (and sgn, fix, arcsinh... as aliases),
 * their Tensor methods and in-place
 * forms (exp_, relu_, ...), the unary -x, abs(x), ~x slots, and torch's nodes (ExpBackward0,
 * SigmoidBackward0, ReluBackward0, ...).
 *
 * dtype rules: U_FLOAT ops compute integers/bools in the default dtype (torch.exp(int) is
 * float32), U_SAME ops keep the input's dtype, U_BOOL ops return bool. Backwards are fused: one
 * loop over (grad, saved) — sigmoid's reads its saved output, relu's its output's sign.
 */
#if defined(__GNUC__) && !defined(__clang__)   /* exp/tanh's a*b+c fuse in the FMA clone */
#pragma GCC optimize("fp-contract=fast")       /* (common/clones.h); before any inline code */
#endif
#include "ops/elementwise/elementwise.h"
#include "common/fastmath.h"
#include "common/special.h"
#include <tgmath.h>

enum { U_FLOAT, U_SAME, U_BOOL };
enum { S_NONE, S_IN, S_OUT };         /* what the backward reads besides the gradient */

typedef struct {
    const char *name;                 /* torch's name in messages */
    const char *node;                 /* autograd node; NULL: never differentiable */
    int mode, save;
    cddp_loop_fn fwd[CDDP_NDTYPES];   /* by compute dtype; NULL: refused (msg) */
    cddp_loop_fn bw[2];               /* float32, float64; NULL with a node: zero gradient */
    const char *msg;                  /* message for a refused dtype (NULL: torch's generic) */
    int notimpl;                      /* ... raised as NotImplementedError, else RuntimeError */
} unop;


/* float32 exp / tanh without libm calls (common/fastmath.h), so exp, sigmoid, tanh vectorize */
#define EXP_EXPR(x) _Generic((x), float: cddp_fast_expf, default: exp)(x)
#define TANH_EXPR(x) _Generic((x), float: cddp_fast_tanhf, default: tanh)(x)

/* forward kernels: float expression, integer expression, bool expression */
#define SAME_LOOPS(op, EF, EI, EB)                                                         \
    EW_FLOAT_LOOPS1(op, EF)                                                                \
    EW_LOOP1(op##_i64, int64_t, int64_t, EI)                                               \
    EW_LOOP1(op##_i32, int32_t, int32_t, EI)                                               \
    EW_LOOP1(op##_b8, uint8_t, uint8_t, EB)
#define SAME_NOBOOL_LOOPS(op, EF, EI)                                                      \
    EW_FLOAT_LOOPS1(op, EF)                                                                \
    EW_LOOP1(op##_i64, int64_t, int64_t, EI)                                               \
    EW_LOOP1(op##_i32, int32_t, int32_t, EI)
#define BOOL_LOOPS(op, EF, EI)                                                             \
    EW_LOOP1(op##_f32, uint8_t, float, EF)                                                 \
    EW_LOOP1(op##_f64, uint8_t, double, EF)                                                \
    EW_LOOP1(op##_i64, uint8_t, int64_t, EI)                                               \
    EW_LOOP1(op##_i32, uint8_t, int32_t, EI)                                               \
    EW_LOOP1(op##_b8, uint8_t, uint8_t, EI)
#define ALL5(op) EW_TABLE(op##_f32, op##_f64, op##_i64, op##_i32, op##_b8)
#define NUM4(op) EW_TABLE(op##_f32, op##_f64, op##_i64, op##_i32, NULL)
#define FLT2(op) EW_TABLE(op##_f32, op##_f64, NULL, NULL, NULL)
#define INTB3(op) EW_TABLE(NULL, NULL, op##_i64, op##_i32, op##_b8)
/* backward kernels: x is the incoming gradient, y the saved input or output */
#define BW1(op, EXPR) EW_FLOAT_LOOPS1(op##_bw, EXPR)
#define BW2(op, EXPR) EW_FLOAT_LOOPS2(op##_bw, float, double, EXPR)
#define BWT(op) {op##_bw_f32, op##_bw_f64}

SAME_NOBOOL_LOOPS(neg, -x, (scalar_t)(0 - U64(x)))
BW1(neg, -x)
SAME_NOBOOL_LOOPS(abs, fabs(x), x < 0 ? (scalar_t)(0 - U64(x)) : x)
BW2(abs, x * (scalar_t)((y > 0) - (y < 0)))
EW_FLOAT_LOOPS1(exp, EXP_EXPR(x))
BW2(exp, x * y)
EW_FLOAT_LOOPS1(log, log(x))
BW2(log, x / y)
EW_FLOAT_LOOPS1(log2, log2(x))
BW2(log2, x / (y * (scalar_t)0.6931471805599453))
EW_FLOAT_LOOPS1(log10, log10(x))
BW2(log10, x / (y * (scalar_t)2.3025850929940456))
EW_FLOAT_LOOPS1(log1p, log1p(x))
BW2(log1p, x / (y + 1))
EW_FLOAT_LOOPS1(expm1, expm1(x))
BW2(expm1, x * (y + 1))
EW_FLOAT_LOOPS1(sqrt, sqrt(x))
BW2(sqrt, x / (2 * y))
EW_FLOAT_LOOPS1(rsqrt, 1 / sqrt(x))
BW2(rsqrt, (scalar_t)-0.5 * x * (y * y * y))
EW_FLOAT_LOOPS1(sin, sin(x))
BW2(sin, x * cos(y))
EW_FLOAT_LOOPS1(cos, cos(x))
BW2(cos, x * -sin(y))
EW_FLOAT_LOOPS1(tan, tan(x))
BW2(tan, x * (1 + y * y))
EW_FLOAT_LOOPS1(asin, asin(x))
BW2(asin, x / sqrt(1 - y * y))
EW_FLOAT_LOOPS1(acos, acos(x))
BW2(acos, -x / sqrt(1 - y * y))
EW_FLOAT_LOOPS1(atan, atan(x))
BW2(atan, x / (1 + y * y))
EW_FLOAT_LOOPS1(sinh, sinh(x))
BW2(sinh, x * cosh(y))
EW_FLOAT_LOOPS1(cosh, cosh(x))
BW2(cosh, x * sinh(y))
EW_FLOAT_LOOPS1(tanh, TANH_EXPR(x))
BW2(tanh, x * (1 - y * y))
EW_FLOAT_LOOPS1(sigmoid, 1 / (1 + EXP_EXPR(-x)))
BW2(sigmoid, x * (1 - y) * y)
EW_FLOAT_LOOPS1(erf, erf(x))
BW2(erf, (scalar_t)1.1283791670955126 * exp(-(y * y)) * x)
EW_FLOAT_LOOPS1(reciprocal, 1 / x)
BW2(reciprocal, -x * (y * y))
SAME_NOBOOL_LOOPS(relu, x < 0 ? 0 : x, x < 0 ? 0 : x)
BW2(relu, y <= 0 ? 0 : x)             /* NaN passes the gradient, as torch's threshold_backward */
SAME_LOOPS(sign, (scalar_t)((0 < x) - (x < 0)), (scalar_t)((0 < x) - (x < 0)), x)
SAME_NOBOOL_LOOPS(square, x * x, (scalar_t)(U64(x) * U64(x)))
BW2(square, x * (2 * y))
SAME_NOBOOL_LOOPS(floor, floor(x), x)
SAME_NOBOOL_LOOPS(ceil, ceil(x), x)
SAME_NOBOOL_LOOPS(round, nearbyint(x), x)
SAME_NOBOOL_LOOPS(trunc, trunc(x), x)
BOOL_LOOPS(logical_not, !x, !x)
EW_LOOP1(bitwise_not_i64, int64_t, int64_t, ~x)
EW_LOOP1(bitwise_not_i32, int32_t, int32_t, ~x)
EW_LOOP1(bitwise_not_b8, uint8_t, uint8_t, !x)
/* a bool byte must be 0 or 1: glibc's isinf() is -1 for -inf (stored as 255, which sums,
 * compares and casts as 255) */
BOOL_LOOPS(isnan, x != x, 0)
BOOL_LOOPS(isinf, isinf(x) != 0, 0)
BOOL_LOOPS(isfinite, isfinite(x) != 0, 1)
EW_FLOAT_LOOPS1(asinh, asinh(x))
BW2(asinh, x / sqrt(y * y + 1))
EW_FLOAT_LOOPS1(acosh, acosh(x))
BW2(acosh, x / sqrt(y * y - 1))
EW_FLOAT_LOOPS1(atanh, atanh(x))
BW2(atanh, x / (1 - y * y))
EW_FLOAT_LOOPS1(erfc, erfc(x))
BW2(erfc, (scalar_t)-1.1283791670955126 * exp(-(y * y)) * x)
EW_FLOAT_LOOPS1(erfinv, (scalar_t)cddp_erfinv((double)x))
BW2(erfinv, (scalar_t)0.886226925452758 * exp(y * y) * x)
EW_FLOAT_LOOPS1(exp2, exp2(x))
BW2(exp2, x * y * (scalar_t)0.6931471805599453)
EW_FLOAT_LOOPS1(lgamma, (scalar_t)cddp_lgamma((double)x))
BW2(lgamma, x * (scalar_t)cddp_digamma((double)y))
EW_FLOAT_LOOPS1(digamma, (scalar_t)cddp_digamma((double)x))
BW2(digamma, x * (scalar_t)cddp_trigamma((double)y))
EW_FLOAT_LOOPS1(frac, x - trunc(x))
BW1(frac, x)
EW_FLOAT_LOOPS1(deg2rad, x * (scalar_t)0.017453292519943295)
BW1(deg2rad, x * (scalar_t)0.017453292519943295)
EW_FLOAT_LOOPS1(rad2deg, x * (scalar_t)57.29577951308232)
BW1(rad2deg, x * (scalar_t)57.29577951308232)

#define UENUM(op) U_##op,
enum { EW_UNARY_LIST(UENUM) U_COUNT };

#define NOGRAD {NULL, NULL}
static const unop unops[U_COUNT] = {
    [U_neg] = {"neg", "NegBackward0", U_SAME, S_NONE, NUM4(neg), BWT(neg),
               "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
               "to invert a mask, use the `~` or `logical_not()` operator instead."},
    [U_abs] = {"abs", "AbsBackward0", U_SAME, S_IN, NUM4(abs), BWT(abs),
               "\"abs_cpu\" not implemented for 'Bool'", 1},
    [U_exp] = {"exp", "ExpBackward0", U_FLOAT, S_OUT, FLT2(exp), BWT(exp)},
    [U_log] = {"log", "LogBackward0", U_FLOAT, S_IN, FLT2(log), BWT(log)},
    [U_log2] = {"log2", "Log2Backward0", U_FLOAT, S_IN, FLT2(log2), BWT(log2)},
    [U_log10] = {"log10", "Log10Backward0", U_FLOAT, S_IN, FLT2(log10), BWT(log10)},
    [U_log1p] = {"log1p", "Log1PBackward0", U_FLOAT, S_IN, FLT2(log1p), BWT(log1p)},
    [U_expm1] = {"expm1", "Expm1Backward0", U_FLOAT, S_OUT, FLT2(expm1), BWT(expm1)},
    [U_sqrt] = {"sqrt", "SqrtBackward0", U_FLOAT, S_OUT, FLT2(sqrt), BWT(sqrt)},
    [U_rsqrt] = {"rsqrt", "RsqrtBackward0", U_FLOAT, S_OUT, FLT2(rsqrt), BWT(rsqrt)},
    [U_sin] = {"sin", "SinBackward0", U_FLOAT, S_IN, FLT2(sin), BWT(sin)},
    [U_cos] = {"cos", "CosBackward0", U_FLOAT, S_IN, FLT2(cos), BWT(cos)},
    [U_tan] = {"tan", "TanBackward0", U_FLOAT, S_OUT, FLT2(tan), BWT(tan)},
    [U_asin] = {"asin", "AsinBackward0", U_FLOAT, S_IN, FLT2(asin), BWT(asin)},
    [U_acos] = {"acos", "AcosBackward0", U_FLOAT, S_IN, FLT2(acos), BWT(acos)},
    [U_atan] = {"atan", "AtanBackward0", U_FLOAT, S_IN, FLT2(atan), BWT(atan)},
    [U_sinh] = {"sinh", "SinhBackward0", U_FLOAT, S_IN, FLT2(sinh), BWT(sinh)},
    [U_cosh] = {"cosh", "CoshBackward0", U_FLOAT, S_IN, FLT2(cosh), BWT(cosh)},
    [U_tanh] = {"tanh", "TanhBackward0", U_FLOAT, S_OUT, FLT2(tanh), BWT(tanh)},
    [U_sigmoid] = {"sigmoid", "SigmoidBackward0", U_FLOAT, S_OUT, FLT2(sigmoid), BWT(sigmoid)},
    [U_erf] = {"erf", "ErfBackward0", U_FLOAT, S_IN, FLT2(erf), BWT(erf)},
    [U_reciprocal] = {"reciprocal", "ReciprocalBackward0", U_FLOAT, S_OUT, FLT2(reciprocal),
                      BWT(reciprocal)},
    [U_relu] = {"relu", "ReluBackward0", U_SAME, S_OUT, NUM4(relu), BWT(relu),
                "Boolean inputs not supported for relu"},
    [U_sign] = {"sign", "SignBackward0", U_SAME, S_NONE, ALL5(sign), NOGRAD},
    /* square(bool) is pow(bool, 2): int64, handled in unary() */
    [U_square] = {"square", "PowBackward0", U_SAME, S_IN, NUM4(square), BWT(square)},
    [U_floor] = {"floor", "FloorBackward0", U_SAME, S_NONE, NUM4(floor), NOGRAD,
                  "\"floor_vml_cpu\" not implemented for 'Bool'", 1},
    [U_ceil] = {"ceil", "CeilBackward0", U_SAME, S_NONE, NUM4(ceil), NOGRAD,
                 "\"ceil_vml_cpu\" not implemented for 'Bool'", 1},
    [U_round] = {"round", "RoundBackward0", U_SAME, S_NONE, NUM4(round), NOGRAD,
                  "\"round_vml_cpu\" not implemented for 'Bool'", 1},
    [U_trunc] = {"trunc", "TruncBackward0", U_SAME, S_NONE, NUM4(trunc), NOGRAD,
                  "\"trunc_vml_cpu\" not implemented for 'Bool'", 1},
    [U_logical_not] = {"logical_not", NULL, U_BOOL, S_NONE, ALL5(logical_not), NOGRAD},
    [U_bitwise_not] = {"bitwise_not", NULL, U_SAME, S_NONE, INTB3(bitwise_not), NOGRAD},
    [U_isnan] = {"isnan", NULL, U_BOOL, S_NONE, ALL5(isnan), NOGRAD},
    [U_isinf] = {"isinf", NULL, U_BOOL, S_NONE, ALL5(isinf), NOGRAD},
    [U_isfinite] = {"isfinite", NULL, U_BOOL, S_NONE, ALL5(isfinite), NOGRAD},
    [U_asinh] = {"asinh", "AsinhBackward0", U_FLOAT, S_IN, FLT2(asinh), BWT(asinh)},
    [U_acosh] = {"acosh", "AcoshBackward0", U_FLOAT, S_IN, FLT2(acosh), BWT(acosh)},
    [U_atanh] = {"atanh", "AtanhBackward0", U_FLOAT, S_IN, FLT2(atanh), BWT(atanh)},
    [U_erfc] = {"erfc", "ErfcBackward0", U_FLOAT, S_IN, FLT2(erfc), BWT(erfc)},
    [U_erfinv] = {"erfinv", "ErfinvBackward0", U_FLOAT, S_OUT, FLT2(erfinv), BWT(erfinv)},
    [U_exp2] = {"exp2", "Exp2Backward0", U_FLOAT, S_OUT, FLT2(exp2), BWT(exp2)},
    [U_lgamma] = {"lgamma", "LgammaBackward0", U_FLOAT, S_IN, FLT2(lgamma), BWT(lgamma)},
    [U_digamma] = {"digamma", "DigammaBackward0", U_FLOAT, S_IN, FLT2(digamma), BWT(digamma)},
    /* frac keeps the dtype and refuses integers and bools, as torch's "frac_cpu" */
    [U_frac] = {"frac", "FracBackward0", U_SAME, S_NONE, FLT2(frac), BWT(frac)},
    [U_deg2rad] = {"deg2rad", "Deg2RadBackward0", U_FLOAT, S_NONE, FLT2(deg2rad),
                   BWT(deg2rad)},
    [U_rad2deg] = {"rad2deg", "Rad2DegBackward0", U_FLOAT, S_NONE, FLT2(rad2deg),
                   BWT(rad2deg)},
};

/* ---- backward --------------------------------------------------------------------------- */

static int unary_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    const unop *u = &unops[self->i[0]];
    TensorObject *g = gout[0], *r;
    cddp_dtype dt;
    if (!g || !self->next[0].node)
        return 0;
    if (!u->bw[0]) {
        gin[0] = cddp_ew_zeros_like_meta(&self->meta[0]);
        return gin[0] ? 0 : -1;
    }
    dt = g->dtype;
    if (u->save == S_NONE) {
        r = cddp_ew_map1(dt, g, dt, u->bw[dt == CDDP_FLOAT64], NULL);
    } else {
        ew_src s[2] = {{g}, {NULL}};
        cddp_dtype want[2] = {dt, dt};
        /* cddp_ew_record saves the input in slot 0 and the output in slot 1 */
        if (!(s[1].t = cddp_node_saved(self, u->save == S_IN ? 0 : 1)))
            return -1;
        r = cddp_ew_map(dt, 2, s, want, u->bw[dt == CDDP_FLOAT64], NULL, NULL);
    }
    gin[0] = cddp_ew_grad_to(r, &self->meta[0]);
    return gin[0] ? 0 : -1;
}

/* ---- forward ---------------------------------------------------------------------------- */

/* u(x) as a new tensor with history, or written into `into` (in place, no history). */
static TensorObject *unary(const unop *u, TensorObject *x, TensorObject *into)
{
    cddp_dtype cdt = x->dtype, odt;
    cddp_loop_fn fn;
    TensorObject *out;
    if (u->mode == U_FLOAT && !cddp_is_floating(cdt))
        cdt = cddp_state()->default_dtype;
    if (u == &unops[U_square] && cdt == CDDP_BOOL)
        cdt = CDDP_INT64;
    odt = u->mode == U_BOOL ? CDDP_BOOL : cdt;
    fn = u->fwd[cdt];
    if (!fn) {
        if (u->msg)
            PyErr_SetString(u->notimpl ? PyExc_NotImplementedError : PyExc_RuntimeError, u->msg);
        else
            PyErr_Format(PyExc_NotImplementedError, "\"%s_cpu\" not implemented for '%s'",
                         u->name, cddp_ew_torch_dtype_name[cdt]);
        return NULL;
    }
    if (into) {
        if (cddp_ew_check_cast(odt, into) < 0)
            return NULL;
        if (into->dtype == odt) {
            ew_src s = {x};
            return cddp_ew_map(odt, 1, &s, &cdt, fn, NULL, into);
        }
        return (TensorObject *)cddp_ew_inplace_finish(into, cddp_ew_map1(odt, x, cdt, fn, NULL));
    }
    out = cddp_ew_map1(odt, x, cdt, fn, NULL);
    if (out && u->node && cddp_is_floating(odt) && cddp_grad_enabled && cddp_needs_grad(x)) {
        ew_operand op = {x};
        int err = 0;
        int mask = u->save == S_IN ? 1 : u->save == S_OUT ? EW_SAVE_OUT : 0;
        NodeObject *node = cddp_ew_record(out, u->node, unary_backward, 1, &op, mask, &err);
        if (err) {
            Py_DECREF(out);
            return NULL;
        }
        if (node)
            node->i[0] = u - unops;
    }
    return out;
}

static PyObject *unary_py(const unop *u, PyObject *arg, int inplace)
{
    TensorObject *x = cddp_ew_tensor_arg(arg, u->name, "input"), *old, *r;
    int rc;
    if (!x)
        return NULL;
    if (!inplace)
        return (PyObject *)unary(u, x, NULL);
    rc = cddp_ew_inplace_begin(x, 0, &old);
    if (rc < 0)
        return NULL;
    if (rc == 1) {
        PyObject *res = cddp_ew_inplace_finish(x, unary(u, old, NULL));
        Py_DECREF(old);
        return res;
    }
    r = unary(u, x, x);
    if (!r)
        return NULL;
    Py_DECREF(r);
    return Py_NewRef(x);
}

#define UDEF(op)                                                                           \
    PyObject *cddp_ew_u_##op(PyObject *self, PyObject *arg)                                \
    {                                                                                      \
        return unary_py(&unops[U_##op], arg ? arg : self, 0);                              \
    }                                                                                      \
    PyObject *cddp_ew_u_##op##_(PyObject *self, PyObject *arg)                             \
    {                                                                                      \
        return unary_py(&unops[U_##op], arg ? arg : self, 1);                              \
    }
EW_UNARY_LIST(UDEF)

/* ---- slots ------------------------------------------------------------------------------ */

PyObject *cddp_nb_neg(PyObject *a) { return unary_py(&unops[U_neg], a, 0); }
PyObject *cddp_nb_abs(PyObject *a) { return unary_py(&unops[U_abs], a, 0); }

PyObject *cddp_nb_invert(PyObject *a)
{
    if (cddp_tensor_check(a) && cddp_is_floating(((TensorObject *)a)->dtype)) {
        PyErr_SetString(PyExc_TypeError, "~ (operator.invert) is only implemented on integer "
                                         "and Boolean-type tensors");
        return NULL;
    }
    return unary_py(&unops[U_bitwise_not], a, 0);
}
