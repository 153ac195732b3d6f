/* ops/elementwise/binary_pow.c — pow (tensor ** tensor, tensor ** scalar with torch's fast exponents,
 * scalar ** tensor) and maximum / minimum, with autograd.
 *
 * Mirrors: torch.pow / Tensor.pow_ / the ** slot, torch.maximum / minimum; nodes PowBackward0
 * (tensor ** scalar), PowBackward1 (tensor ** tensor), PowBackward2 (scalar ** tensor),
 * MaximumBackward0, MinimumBackward0. pow's exponent gradient uses log(base), zero where
 * base == 0 and exponent >= 0, as torch; maximum/minimum split the gradient on ties.
 */
#include "ops/elementwise/elementwise.h"
#include <tgmath.h>

/* Integer power with wraparound; negative exponents as torch: 1, -1 or 0. */
static inline int64_t ew_ipow(int64_t base, int64_t e)
{
    uint64_t r = 1, b = (uint64_t)base;
    if (e < 0)
        return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
    while (e) {
        if (e & 1)
            r *= b;
        b *= b;
        e >>= 1;
    }
    return (int64_t)r;
}

EW_NUM_LOOPS2(pow, pow(x, y), (scalar_t)ew_ipow(x, y))
EW_ALL_LOOPS2(maximum, (x > y || x != x) ? x : y, x > y ? x : y, x | y)
EW_ALL_LOOPS2(minimum, (x < y || x != x) ? x : y, x < y ? x : y, x & y)
static const cddp_loop_fn pow_loops[] = EW_NUM_TABLE(pow), maximum_loops[] = EW_ALL_TABLE(maximum),
                          minimum_loops[] = EW_ALL_TABLE(minimum);

/* tensor ** scalar: torch's special cases (sqrt for 0.5, x*x for 2, ...) then pow */
#define POWS_LOOPS(op, EF)                                                                 \
    EW_FLOAT_LOOPS1(op, EF)                                                                \
    static const cddp_loop_fn op##_loops[] = EW_FLOAT_TABLE(op);
POWS_LOOPS(pows, pow(x, (scalar_t)ctx->d0))
POWS_LOOPS(pows_sq, x * x)
POWS_LOOPS(pows_cube, x * x * x)
POWS_LOOPS(pows_sqrt, sqrt(x))
POWS_LOOPS(pows_rsqrt, (scalar_t)1 / sqrt(x))
POWS_LOOPS(pows_recip, (scalar_t)1 / x)
POWS_LOOPS(pows_recip_sq, (scalar_t)1 / (x * x))
EW_FLOAT_LOOPS2(pows_mul, float, double, x * y)
static const cddp_loop_fn pows_mul_loops[] = EW_FLOAT_TABLE(pows_mul);
EW_LOOP1(ipows_i64, int64_t, int64_t, ew_ipow(x, ctx->p0.i64))
EW_LOOP1(ipows_i32, int32_t, int32_t, (int32_t)ew_ipow(x, ctx->p0.i64))
EW_LOOP1(ipows_b8, uint8_t, uint8_t, ctx->p0.i64 ? x : 1)

/* backward kernels: x is the incoming gradient */
EW_FLOAT_LOOPS2(pows_bw, float, double,
                x * ((scalar_t)ctx->d0 * pow(y, (scalar_t)(ctx->d0 - 1))))
EW_FLOAT_LOOPS3(pow_base_bw, float, float, double, double, z == 0 ? 0 : x * (z * pow(y, z - 1)))
EW_FLOAT_LOOPS3(pow_exp_bw, float, float, double, double,
                (y == 0 && z >= 0) ? 0 : x * (pow(y, z) * log(y)))
EW_FLOAT_LOOPS2(pow_sbase_bw, float, double,
                ((scalar_t)ctx->d0 == 0 && y >= 0) ? 0
                : x * (pow((scalar_t)ctx->d0, y) * log((scalar_t)ctx->d0)))
/* maximum/minimum: ties split the gradient in half, as torch */
EW_FLOAT_LOOPS3(keep_ge_bw, float, float, double, double, y == z ? x / 2 : (y < z ? 0 : x))
EW_FLOAT_LOOPS3(keep_le_bw, float, float, double, double, y == z ? x / 2 : (y > z ? 0 : x))
static const cddp_loop_fn pows_bw_loops[] = EW_FLOAT_TABLE(pows_bw),
                          pow_base_bw_loops[] = EW_FLOAT_TABLE(pow_base_bw),
                          pow_exp_bw_loops[] = EW_FLOAT_TABLE(pow_exp_bw),
                          pow_sbase_bw_loops[] = EW_FLOAT_TABLE(pow_sbase_bw),
                          keep_ge_bw_loops[] = EW_FLOAT_TABLE(keep_ge_bw),
                          keep_le_bw_loops[] = EW_FLOAT_TABLE(keep_le_bw);

/* ---- pow -------------------------------------------------------------------------------- */

/* tensor ** scalar: d[2] holds the exponent (the scalar operand's slot) */
static int pow_scalar_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src x;
    ew_ctx ctx = {0};
    if (!g || !EW_WANTS(0))
        return 0;
    ctx.d0 = self->d[2];
    if (ctx.d0 == 0.0) {
        gin[0] = cddp_ew_zeros_like_meta(&self->meta[0]);
        return gin[0] ? 0 : -1;
    }
    if (cddp_ew_saved_src(self, 0, &x, g->dtype) < 0)
        return -1;
    gin[0] = cddp_ew_grad_to(cddp_ew_bw_map(pows_bw_loops, g, 1, &x, &ctx), &self->meta[0]);
    return gin[0] ? 0 : -1;
}

/* tensor ** tensor, and scalar ** tensor (slot 0 empty: the base is node->d[1]) */
static int pow_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src s[2];
    ew_ctx ctx = {0};
    if (!g)
        return 0;
    if (cddp_ew_saved_src(self, 1, &s[1], g->dtype) < 0)
        return -1;
    if (EW_WANTS(0)) {
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            !(gin[0] = cddp_ew_grad_to(cddp_ew_bw_map(pow_base_bw_loops, g, 2, s, NULL),
                                       &self->meta[0])))
            return -1;
    }
    if (EW_WANTS(1)) {
        TensorObject *r;
        if (self->saved[0] || self->released) {
            if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0)
                return -1;
            r = cddp_ew_bw_map(pow_exp_bw_loops, g, 2, s, NULL);
        } else {
            ctx.d0 = self->d[1];
            r = cddp_ew_bw_map(pow_sbase_bw_loops, g, 1, &s[1], &ctx);
        }
        if (!(gin[1] = cddp_ew_grad_to(r, &self->meta[1])))
            return -1;
    }
    return 0;
}

/* bfloat16 ** 3 and ** -2 as torch's kernel computes them in BFloat16 arithmetic: the square
 * rounded to bfloat16, then times the base / its reciprocal rounded again. New reference. */
static TensorObject *pow_bf16_rounded(TensorObject *x, double e)
{
    cddp_dtype dt = CDDP_BFLOAT16;
    ew_src s[2] = {{x}, {x}};
    cddp_dtype want[2] = {dt, dt};
    TensorObject *sq = cddp_ew_map(dt, 1, s, want, pows_sq_loops[dt], NULL, NULL), *r;
    if (!sq)
        return NULL;
    s[0].t = sq;
    if (e == 3.0)
        r = cddp_ew_map(dt, 2, s, want, pows_mul_loops[dt], NULL, NULL);
    else
        r = cddp_ew_map(dt, 1, s, want, pows_recip_loops[dt], NULL, NULL);
    Py_DECREF(sq);
    return r;
}

static TensorObject *pow_tensor_scalar(ew_operand *a, ew_operand *b, cddp_dtype cdt,
                                       TensorObject *into)
{
    ew_ctx ctx = {0};
    const cddp_loop_fn *tbl = pows_loops;
    cddp_loop_fn fn;
    ew_src s = {a->t};
    TensorObject *out = NULL;
    double e = b->d;
    if (!cddp_is_floating(cdt)) {
        if (b->kind != 2 && b->l < 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Integers to negative integer powers are not allowed.");
            return NULL;
        }
        if (cddp_is_narrow(cdt) && cddp_scalar_overflows(cdt, 0, 0, b->l)) {
            PyErr_Format(PyExc_RuntimeError,
                         "value cannot be converted to type %s without overflow",
                         cddp_dtype_cpp_name[cdt]);
            return NULL;
        }
        ctx.p0.i64 = b->l;
        /* bool ** bool stays bool (x ** True is x, x ** False is True), as torch */
        fn = cddp_kdt(cdt) == CDDP_INT64 ? ipows_i64 : cddp_kdt(cdt) == CDDP_INT32 ? ipows_i32
                                                                                 : ipows_b8;
    } else {
        if (cddp_is_reduced(cdt)) {       /* torch reads the exponent as a Half / BFloat16 */
            ew_scalar r;
            cddp_ew_scalar_from_double(&r, cdt, e);
            e = r.f32;
        }
        tbl = e == 2.0 ? pows_sq_loops : e == 3.0 ? pows_cube_loops
            : e == 0.5 ? pows_sqrt_loops : e == -0.5 ? pows_rsqrt_loops
            : e == -1.0 ? pows_recip_loops : e == -2.0 ? pows_recip_sq_loops : pows_loops;
        if (cdt == CDDP_FLOAT16)          /* torch: std::pow(float, float) for any exponent */
            tbl = pows_loops;
        ctx.d0 = e;
        fn = tbl[cdt];
    }
    if (cdt == CDDP_BFLOAT16 && (e == 3.0 || e == -2.0)) {
        out = pow_bf16_rounded(a->t, e);
        if (into)
            return (TensorObject *)cddp_ew_inplace_finish(into, out);
        return cddp_ew_record2(out, "PowBackward0", pow_scalar_backward, a, b, 1, 0);
    }
    if (!into) {
        out = cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, NULL);
        return cddp_ew_record2(out, "PowBackward0", pow_scalar_backward, a, b, 1, 0);
    }
    if (cddp_ew_check_cast(cdt, into) < 0)
        return NULL;
    if (into->dtype == cdt)
        return cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, into);
    out = cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, NULL);
    return (TensorObject *)cddp_ew_inplace_finish(into, out);
}

static TensorObject *op_pow(ew_operand *a, ew_operand *b, const ew_bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    TensorObject *out;
    if (a->t && !b->t)
        return pow_tensor_scalar(a, b, cdt, into);
    if (cdt == CDDP_BOOL) {
        cddp_ew_not_implemented("pow", cdt);
        return NULL;
    }
    out = cddp_ew_binary_run(a, b, cdt, cdt, pow_loops[cdt], NULL, into);
    if (into)
        return out;
    /* both gradients read base and exponent */
    return cddp_ew_record2(out, a->t ? "PowBackward1" : "PowBackward2", pow_backward, a, b, 3, 0);
}

/* ---- maximum / minimum ------------------------------------------------------------------ */

static int minmax_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src s[2];
    int is_max = self->i[0] != 0;
    if (!g)
        return 0;
    if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
        cddp_ew_saved_src(self, 1, &s[1], g->dtype) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        const cddp_loop_fn *tbl = (i == 0) == is_max ? keep_ge_bw_loops : keep_le_bw_loops;
        if (EW_WANTS(i) &&
            !(gin[i] = cddp_ew_grad_to(cddp_ew_bw_map(tbl, g, 2, s, NULL), &self->meta[i])))
            return -1;
    }
    return 0;
}

static TensorObject *minmax(ew_operand *a, ew_operand *b, int is_max)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = is_max ? maximum_loops : minimum_loops;
    TensorObject *out = cddp_ew_binary_run(a, b, cdt, cdt, tbl[cdt], NULL, NULL);
    out = cddp_ew_record2(out, is_max ? "MaximumBackward0" : "MinimumBackward0",
                          minmax_backward, a, b, 3, 0);
    if (out && out->grad_fn && out->grad_fn->backward == minmax_backward)
        out->grad_fn->i[0] = is_max;
    return out;
}

/* ---- Python entry points ---------------------------------------------------------------- */

static const ew_bparams plain_params = {NULL, 0, 0};

static PyObject *pow_impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_pow, &plain_params, "pow", "exponent", 0);
}
static PyObject *pow__impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_pow, &plain_params, "pow_", "exponent", 1);
}
EW_DEFINE_PY(pow, "pow", pow_impl, 1, 1, "exponent")
EW_DEFINE_PY(pow_, "pow_", pow__impl, 1, 1, "exponent")

static PyObject *minmax_impl(PyObject *s, PyObject **argv, int is_max)
{
    const char *fname = is_max ? "maximum" : "minimum";
    ew_operand a = {0}, b = {0};
    if (!cddp_ew_tensor_arg(s, fname, "input") || !cddp_ew_tensor_arg(argv[0], fname, "other"))
        return NULL;
    a.t = (TensorObject *)s;
    b.t = (TensorObject *)argv[0];
    return (PyObject *)minmax(&a, &b, is_max);
}
static PyObject *maximum_impl(PyObject *s, PyObject **argv) { return minmax_impl(s, argv, 1); }
static PyObject *minimum_impl(PyObject *s, PyObject **argv) { return minmax_impl(s, argv, 0); }
EW_DEFINE_PY(maximum, "maximum", maximum_impl, 1, 1, "other")
EW_DEFINE_PY(minimum, "minimum", minimum_impl, 1, 1, "other")

PyObject *cddp_nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None)
        Py_RETURN_NOTIMPLEMENTED;
    return cddp_ew_slot_binary(a, b, op_pow, &plain_params, "pow");
}
