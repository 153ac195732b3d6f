/* ops_binary.c — arithmetic between two operands (tensor or Python scalar, either side) with
 * broadcasting, torch's dtype promotion and autograd: add/sub (with alpha), mul, div (true,
 * 'trunc', 'floor'), pow, maximum/minimum; their in-place forms; the +, -, *, /, ** slots.
 *
 * Mirrors: torch.add / sub / mul / div / true_divide / floor_divide / remainder / fmod / pow /
 * maximum / minimum,
 * Tensor.add_ / sub_ / mul_ / div_ / pow_, and the nodes AddBackward0, SubBackward0,
 * MulBackward0, DivBackward0, PowBackward0 (tensor ** scalar), PowBackward1 (tensor ** tensor),
 * PowBackward2 (scalar ** tensor), MaximumBackward0, MinimumBackward0.
 *
 * Every op is `TensorObject *op(a, b, params, into)`: into == NULL computes a new tensor and
 * records history; into != NULL writes the result into that tensor (the in-place fast path,
 * never recorded — cddp_ew_inplace_begin decides which path runs).
 */
#include "kernels_elementwise.h"
#include <tgmath.h>

/* ---- scalar helpers --------------------------------------------------------------------- */

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

/* Python-style floor division of integers; b != 0 and b != -1 (both handled by the caller). */
static inline int64_t ew_ifloordiv(int64_t a, int64_t b)
{
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        q--;
    return q;
}

/* Python's % on integers (sign of the divisor); b != 0 and b != -1 (caller). */
static inline int64_t ew_iremainder(int64_t a, int64_t b)
{
    int64_t r = a % b;
    if (r != 0 && ((r < 0) != (b < 0)))
        r += b;
    return r;
}

/* torch's div_floor_floating: floor of the quotient computed from fmod so that results agree
 * with Python's // on floats. */
#define EW_DEF_FLOORDIV(T, SUF)                                                            \
    static inline T ew_floordiv_##SUF(T a, T b)                                            \
    {                                                                                      \
        T mod, div, fl;                                                                    \
        if (b == 0)                                                                        \
            return a / b;                                                                  \
        mod = fmod(a, b);                                                                  \
        div = (a - mod) / b;                                                               \
        if (mod != 0 && (b < 0) != (mod < 0))                                              \
            div -= 1;                                                                      \
        if (div != 0) {                                                                    \
            fl = floor(div);                                                               \
            if (div - fl > (T)0.5)                                                         \
                fl += 1;                                                                   \
        } else {                                                                           \
            fl = copysign((T)0, a / b);                                                    \
        }                                                                                  \
        return fl;                                                                         \
    }
EW_DEF_FLOORDIV(float, f32)
EW_DEF_FLOORDIV(double, f64)
#define EW_FLOORDIV(x, y) _Generic((x), float: ew_floordiv_f32, default: ew_floordiv_f64)(x, y)

/* integer ops computed unsigned: wraparound instead of undefined behaviour */
#define U64(v) ((uint64_t)(int64_t)(v))
#define IDIV_GUARD(x, y, EXPR)                                                             \
    ((y) == 0 ? (ctx->err = 1, (scalar_t)0)                                                \
              : (y) == -1 ? (scalar_t)(0 - U64(x)) : (scalar_t)(EXPR))

#define IMOD_GUARD(x, y, EXPR)                                                             \
    ((y) == 0 ? (ctx->err = 1, (scalar_t)0) : (y) == -1 ? (scalar_t)0 : (scalar_t)(EXPR))
#define EW_REMAINDER(x, y)                                                                 \
    ((fmod(x, y) != 0 && ((y) < 0) != (fmod(x, y) < 0)) ? fmod(x, y) + (y) : fmod(x, y))

/* ---- kernels ---------------------------------------------------------------------------- */

/* all five dtypes: float expression, integer expression, bool expression */
#define ALL_LOOPS2(op, EF, EI, EB)                                                         \
    EW_LOOP2(op##_f32, float, float, float, EF)                                            \
    EW_LOOP2(op##_f64, double, double, double, EF)                                         \
    EW_LOOP2(op##_i64, int64_t, int64_t, int64_t, EI)                                      \
    EW_LOOP2(op##_i32, int32_t, int32_t, int32_t, EI)                                      \
    EW_LOOP2(op##_b8, uint8_t, uint8_t, uint8_t, EB)
#define ALL_TABLE(op) {op##_f32, op##_f64, op##_i64, op##_i32, op##_b8}
#define NUM_LOOPS2(op, EF, EI)                                                             \
    EW_LOOP2(op##_f32, float, float, float, EF)                                            \
    EW_LOOP2(op##_f64, double, double, double, EF)                                         \
    EW_LOOP2(op##_i64, int64_t, int64_t, int64_t, EI)                                      \
    EW_LOOP2(op##_i32, int32_t, int32_t, int32_t, EI)
#define NUM_TABLE(op) {op##_f32, op##_f64, op##_i64, op##_i32, NULL}

ALL_LOOPS2(add, x + y, (scalar_t)(U64(x) + U64(y)), x | y)
ALL_LOOPS2(axpy, x + EW_P(ctx->p0) * y, (scalar_t)(U64(x) + U64(EW_P(ctx->p0)) * U64(y)),
           x | (EW_P(ctx->p0) & y))
NUM_LOOPS2(sub, x - y, (scalar_t)(U64(x) - U64(y)))
ALL_LOOPS2(mul, x * y, (scalar_t)(U64(x) * U64(y)), x & y)
EW_FLOAT_LOOPS2(truediv, float, double, x / y)
NUM_LOOPS2(truncdiv, trunc(x / y), IDIV_GUARD(x, y, x / y))
NUM_LOOPS2(floordiv, EW_FLOORDIV(x, y), IDIV_GUARD(x, y, ew_ifloordiv(x, y)))
NUM_LOOPS2(remainder, EW_REMAINDER(x, y), IMOD_GUARD(x, y, ew_iremainder(x, y)))
NUM_LOOPS2(fmod, fmod(x, y), IMOD_GUARD(x, y, x % y))
NUM_LOOPS2(pow, pow(x, y), (scalar_t)ew_ipow(x, y))
ALL_LOOPS2(maximum, (x > y || x != x) ? x : y, x > y ? x : y, x | y)
ALL_LOOPS2(minimum, (x < y || x != x) ? x : y, x < y ? x : y, x & y)

static const cddp_loop_fn add_loops[] = ALL_TABLE(add), axpy_loops[] = ALL_TABLE(axpy),
                          sub_loops[] = NUM_TABLE(sub), mul_loops[] = ALL_TABLE(mul),
                          truediv_loops[] = EW_FLOAT_TABLE(truediv),
                          truncdiv_loops[] = NUM_TABLE(truncdiv),
                          floordiv_loops[] = NUM_TABLE(floordiv), pow_loops[] = NUM_TABLE(pow),
                          remainder_loops[] = NUM_TABLE(remainder),
                          fmod_loops[] = NUM_TABLE(fmod),
                          maximum_loops[] = ALL_TABLE(maximum),
                          minimum_loops[] = ALL_TABLE(minimum);

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
EW_LOOP1(ipows_i64, int64_t, int64_t, ew_ipow(x, ctx->p0.i64))
EW_LOOP1(ipows_i32, int32_t, int32_t, (int32_t)ew_ipow(x, ctx->p0.i64))
EW_LOOP1(ipows_b8, uint8_t, uint8_t, ctx->p0.i64 ? x : 1)

/* backward kernels: x is the incoming gradient */
EW_FLOAT_LOOPS3(div_other_bw, float, float, double, double, -x * ((y / z) / z))
EW_FLOAT_LOOPS2(pows_bw, float, double,
                x * ((scalar_t)ctx->d0 * pow(y, (scalar_t)(ctx->d0 - 1))))
EW_FLOAT_LOOPS3(pow_base_bw, float, float, double, double, z == 0 ? 0 : x * (z * pow(y, z - 1)))
EW_FLOAT_LOOPS3(pow_exp_bw, float, float, double, double,
                (y == 0 && z >= 0) ? 0 : x * (pow(y, z) * log(y)))
EW_FLOAT_LOOPS2(pow_sbase_bw, float, double,
                ((scalar_t)ctx->d0 == 0 && y >= 0) ? 0
                : x * (pow((scalar_t)ctx->d0, y) * log((scalar_t)ctx->d0)))
/* remainder / fmod: d/db (a - b * q) = -q with q the floor / truncated quotient */
EW_FLOAT_LOOPS3(remainder_other_bw, float, float, double, double, -x * EW_FLOORDIV(y, z))
EW_FLOAT_LOOPS3(fmod_other_bw, float, float, double, double, -x * trunc(y / z))
/* maximum/minimum: ties split the gradient in half, as torch */
EW_FLOAT_LOOPS3(keep_ge_bw, float, float, double, double, y == z ? x / 2 : (y < z ? 0 : x))
EW_FLOAT_LOOPS3(keep_le_bw, float, float, double, double, y == z ? x / 2 : (y > z ? 0 : x))
static const cddp_loop_fn div_other_bw_loops[] = EW_FLOAT_TABLE(div_other_bw),
                          pows_bw_loops[] = EW_FLOAT_TABLE(pows_bw),
                          pow_base_bw_loops[] = EW_FLOAT_TABLE(pow_base_bw),
                          pow_exp_bw_loops[] = EW_FLOAT_TABLE(pow_exp_bw),
                          pow_sbase_bw_loops[] = EW_FLOAT_TABLE(pow_sbase_bw),
                          keep_ge_bw_loops[] = EW_FLOAT_TABLE(keep_ge_bw),
                          keep_le_bw_loops[] = EW_FLOAT_TABLE(keep_le_bw),
                          remainder_other_bw_loops[] = EW_FLOAT_TABLE(remainder_other_bw),
                          fmod_other_bw_loops[] = EW_FLOAT_TABLE(fmod_other_bw);

/* ---- driver ----------------------------------------------------------------------------- */

typedef struct {
    const ew_operand *alpha;    /* add/sub: NULL means 1 */
    int sub;                    /* add_sub: subtract */
    int mode;                   /* div: 0 true, 1 'trunc', 2 'floor' */
} bparams;

typedef TensorObject *(*binary_fn)(ew_operand *a, ew_operand *b, const bparams *p,
                                   TensorObject *into);

static int not_implemented_for(const char *kname, cddp_dtype dt)
{
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'", kname,
                 cddp_ew_torch_dtype_name[dt]);
    return -1;
}

/* out = fn(a, b) with a, b read in cdt and out written in odt; into: in place, see top. */
static TensorObject *binary_run(ew_operand *a, ew_operand *b, cddp_dtype cdt, cddp_dtype odt,
                                cddp_loop_fn fn, ew_ctx *ctx, TensorObject *into)
{
    ew_src s[2];
    cddp_dtype want[2] = {cdt, cdt};
    TensorObject *r;
    cddp_ew_src_from(&s[0], a, cdt);
    cddp_ew_src_from(&s[1], b, cdt);
    if (!into)
        return cddp_ew_map(odt, 2, s, want, fn, ctx, NULL);
    if (cddp_ew_check_cast(odt, into) < 0)
        return NULL;
    if (into->dtype == odt)
        return cddp_ew_map(odt, 2, s, want, fn, ctx, into);
    /* e.g. int32 += int64: computed in int64, then cast into the int32 tensor */
    r = cddp_ew_map(odt, 2, s, want, fn, ctx, NULL);
    return (TensorObject *)cddp_ew_inplace_finish(into, r);
}

/* History for a floating result of a (new, not in place) binary op. Steals out. */
static TensorObject *record2(TensorObject *out, const char *name, cddp_backward_fn fn,
                             ew_operand *a, ew_operand *b, int save, double d0)
{
    ew_operand ops[2] = {*a, *b};
    NodeObject *node;
    int err = 0;
    if (!out || !cddp_grad_enabled || !cddp_is_floating(out->dtype))
        return out;
    node = cddp_ew_record(out, name, fn, 2, ops, save, &err);
    if (err) {
        Py_DECREF(out);
        return NULL;
    }
    if (node)
        node->d[0] = d0;
    return out;
}

/* which inputs a product-like backward needs: each input's grad uses the other input */
static int save_others(const ew_operand *a, const ew_operand *b)
{
    return (cddp_ew_operand_needs_grad(b) ? 1 : 0) | (cddp_ew_operand_needs_grad(a) ? 2 : 0);
}

/* ---- backward helpers ------------------------------------------------------------------- */

/* fn over (g, srcs...) in g's dtype; nin extra sources. New reference. */
static TensorObject *bw_map(const cddp_loop_fn *tbl, TensorObject *g, int nin, ew_src *extra,
                            ew_ctx *ctx)
{
    ew_src s[3] = {{g}};
    cddp_dtype want[3] = {g->dtype, g->dtype, g->dtype};
    for (int i = 0; i < nin; i++)
        s[1 + i] = extra[i];
    return cddp_ew_map(g->dtype, 1 + nin, s, want, tbl[g->dtype], ctx, NULL);
}

static TensorObject *scale(TensorObject *g, double v)
{
    ew_src s;
    s.t = NULL;
    cddp_ew_scalar_from_double(&s.s, g->dtype, v);
    return bw_map(mul_loops, g, 1, &s, NULL);
}

/* gin[i] = grad_to(r) when input i wants a gradient (r computed lazily by the caller). */
#define WANTS(i) (self->next[(i)].node != NULL)

/* ---- add / sub -------------------------------------------------------------------------- */

static int add_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    if (!g)
        return 0;
    if (WANTS(0) && !(gin[0] = cddp_ew_grad_to((TensorObject *)Py_NewRef(g), &self->meta[0])))
        return -1;
    if (WANTS(1)) {
        TensorObject *gb = self->d[0] == 1 ? (TensorObject *)Py_NewRef(g) : scale(g, self->d[0]);
        if (!(gin[1] = cddp_ew_grad_to(gb, &self->meta[1])))
            return -1;
    }
    return 0;
}

/* a + alpha * b, or a - alpha * b: one pass either way */
static TensorObject *op_add_sub(ew_operand *a, ew_operand *b, const bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b}, al = {0};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    ew_ctx ctx = {0};
    cddp_loop_fn fn;
    TensorObject *out;
    double alpha = 1.0;
    int plain = 1;
    if (p->sub) {
        /* torch refuses any bool operand, a Python bool included */
        int ba = a->t ? a->t->dtype == CDDP_BOOL : a->kind == 0;
        int bb = b->t ? b->t->dtype == CDDP_BOOL : b->kind == 0;
        if (ba && bb) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Subtraction, the `-` operator, with two bool tensors is not "
                            "supported. Use the `^` or `logical_xor()` operator instead.");
            return NULL;
        }
        if (ba || bb) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Subtraction, the `-` operator, with a bool tensor is not "
                            "supported. If you are trying to invert a mask, use the `~` or "
                            "`logical_not()` operator instead.");
            return NULL;
        }
    }
    if (p->alpha) {
        al = *p->alpha;
        if (al.kind == 2 && !cddp_is_floating(cdt)) {
            PyErr_SetString(PyExc_RuntimeError, "For integral input tensors, argument alpha "
                                                "must not be a floating point number.");
            return NULL;
        }
        if (al.kind == 0 && cdt != CDDP_BOOL) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Boolean alpha only supported for Boolean results.");
            return NULL;
        }
        alpha = al.d;
        plain = al.kind == 2 ? al.d == 1.0 : al.l == 1;
    }
    if (plain) {
        fn = (p->sub ? sub_loops : add_loops)[cdt];
    } else {
        if (p->sub) {                     /* a - alpha*b == a + (-alpha)*b */
            al.d = -al.d;
            al.l = (int64_t)(0 - (uint64_t)al.l);
        }
        cddp_ew_scalar_set(&ctx.p0, cdt, &al);
        fn = axpy_loops[cdt];
    }
    out = binary_run(a, b, cdt, cdt, fn, &ctx, into);
    if (into)
        return out;
    return record2(out, p->sub ? "SubBackward0" : "AddBackward0", add_backward, a, b, 0,
                   p->sub ? -alpha : alpha);
}

/* ---- mul -------------------------------------------------------------------------------- */

static int mul_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src other;
    if (!g)
        return 0;
    for (int i = 0; i < 2; i++) {
        if (!WANTS(i))
            continue;
        if (cddp_ew_saved_src(self, 1 - i, &other, g->dtype) < 0 ||
            !(gin[i] = cddp_ew_grad_to(bw_map(mul_loops, g, 1, &other, NULL), &self->meta[i])))
            return -1;
    }
    return 0;
}

static TensorObject *op_mul(ew_operand *a, ew_operand *b, const bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    TensorObject *out = binary_run(a, b, cdt, cdt, mul_loops[cdt], NULL, into);
    if (into)
        return out;
    return record2(out, "MulBackward0", mul_backward, a, b, save_others(a, b), 0);
}

/* ---- div -------------------------------------------------------------------------------- */

static int div_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src s[2];
    if (!g)
        return 0;
    if (cddp_ew_saved_src(self, 1, &s[1], g->dtype) < 0)
        return -1;
    if (WANTS(0) &&
        !(gin[0] = cddp_ew_grad_to(bw_map(truediv_loops, g, 1, &s[1], NULL), &self->meta[0])))
        return -1;
    if (WANTS(1)) {
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            !(gin[1] = cddp_ew_grad_to(bw_map(div_other_bw_loops, g, 2, s, NULL),
                                       &self->meta[1])))
            return -1;
    }
    return 0;
}

/* rounding divisions are piecewise constant: zero gradients, as torch */
static int zero_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    for (int i = 0; i < self->n_next; i++)
        if (gout[0] && WANTS(i) && !(gin[i] = cddp_ew_zeros_like_meta(&self->meta[i])))
            return -1;
    return 0;
}

static TensorObject *op_div(ew_operand *a, ew_operand *b, const bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = p->mode == 0 ? truediv_loops
                            : p->mode == 1 ? truncdiv_loops : floordiv_loops;
    ew_ctx ctx = {0};
    TensorObject *out;
    if (p->mode == 0 && !cddp_is_floating(cdt))
        cdt = cddp_state()->default_dtype;   /* true division of integers */
    if (!tbl[cdt]) {
        not_implemented_for(p->mode == 1 ? "div_trunc_cpu" : "div_floor_cpu", cdt);
        return NULL;
    }
    out = binary_run(a, b, cdt, cdt, tbl[cdt], &ctx, into);
    if (into)
        return out;
    if (p->mode)
        return record2(out, "DivBackward1", zero_backward, a, b, 0, 0);
    return record2(out, "DivBackward0", div_backward, a, b,
                   (cddp_ew_operand_needs_grad(b) ? 1 : 0) | 2, 0);
}

/* ---- remainder / fmod ------------------------------------------------------------------- */

static int mod_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src s[2];
    if (!g)
        return 0;
    if (WANTS(0) && !(gin[0] = cddp_ew_grad_to((TensorObject *)Py_NewRef(g), &self->meta[0])))
        return -1;
    if (WANTS(1)) {
        const cddp_loop_fn *tbl = self->i[0] ? remainder_other_bw_loops : fmod_other_bw_loops;
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            cddp_ew_saved_src(self, 1, &s[1], g->dtype) < 0 ||
            !(gin[1] = cddp_ew_grad_to(bw_map(tbl, g, 2, s, NULL), &self->meta[1])))
            return -1;
    }
    return 0;
}

/* p->mode: 1 fmod (sign of the dividend), 2 remainder (sign of the divisor, Python's %) */
static TensorObject *op_mod(ew_operand *a, ew_operand *b, const bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = p->mode == 2 ? remainder_loops : fmod_loops;
    ew_ctx ctx = {0};
    TensorObject *out;
    if (!tbl[cdt]) {
        not_implemented_for(p->mode == 2 ? "remainder_cpu" : "fmod_cpu", cdt);
        return NULL;
    }
    out = binary_run(a, b, cdt, cdt, tbl[cdt], &ctx, into);
    if (into)
        return out;
    out = record2(out, p->mode == 2 ? "RemainderBackward0" : "FmodBackward0", mod_backward, a,
                  b, cddp_ew_operand_needs_grad(b) ? 3 : 0, 0);
    if (out && out->grad_fn && out->grad_fn->backward == mod_backward)
        out->grad_fn->i[0] = p->mode == 2;
    return out;
}

/* ---- pow -------------------------------------------------------------------------------- */

/* tensor ** scalar: d[2] holds the exponent (the scalar operand's slot) */
static int pow_scalar_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src x;
    ew_ctx ctx = {0};
    if (!g || !WANTS(0))
        return 0;
    ctx.d0 = self->d[2];
    if (ctx.d0 == 0.0) {
        gin[0] = cddp_ew_zeros_like_meta(&self->meta[0]);
        return gin[0] ? 0 : -1;
    }
    if (cddp_ew_saved_src(self, 0, &x, g->dtype) < 0)
        return -1;
    gin[0] = cddp_ew_grad_to(bw_map(pows_bw_loops, g, 1, &x, &ctx), &self->meta[0]);
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
    if (WANTS(0)) {
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            !(gin[0] = cddp_ew_grad_to(bw_map(pow_base_bw_loops, g, 2, s, NULL),
                                       &self->meta[0])))
            return -1;
    }
    if (WANTS(1)) {
        TensorObject *r;
        if (self->saved[0] || self->released) {
            if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0)
                return -1;
            r = bw_map(pow_exp_bw_loops, g, 2, s, NULL);
        } else {
            ctx.d0 = self->d[1];
            r = bw_map(pow_sbase_bw_loops, g, 1, &s[1], &ctx);
        }
        if (!(gin[1] = cddp_ew_grad_to(r, &self->meta[1])))
            return -1;
    }
    return 0;
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
        ctx.p0.i64 = b->l;
        /* bool ** bool stays bool (x ** True is x, x ** False is True), as torch */
        fn = cdt == CDDP_INT64 ? ipows_i64 : cdt == CDDP_INT32 ? ipows_i32 : ipows_b8;
    } else {
        tbl = e == 2.0 ? pows_sq_loops : e == 3.0 ? pows_cube_loops
            : e == 0.5 ? pows_sqrt_loops : e == -0.5 ? pows_rsqrt_loops
            : e == -1.0 ? pows_recip_loops : e == -2.0 ? pows_recip_sq_loops : pows_loops;
        ctx.d0 = e;
        fn = tbl[cdt];
    }
    if (!into) {
        out = cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, NULL);
        return record2(out, "PowBackward0", pow_scalar_backward, a, b, 1, 0);
    }
    if (cddp_ew_check_cast(cdt, into) < 0)
        return NULL;
    if (into->dtype == cdt)
        return cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, into);
    out = cddp_ew_map(cdt, 1, &s, &cdt, fn, &ctx, NULL);
    return (TensorObject *)cddp_ew_inplace_finish(into, out);
}

static TensorObject *op_pow(ew_operand *a, ew_operand *b, const bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    TensorObject *out;
    if (a->t && !b->t)
        return pow_tensor_scalar(a, b, cdt, into);
    if (cdt == CDDP_BOOL) {
        not_implemented_for("pow", cdt);
        return NULL;
    }
    out = binary_run(a, b, cdt, cdt, pow_loops[cdt], NULL, into);
    if (into)
        return out;
    /* both gradients read base and exponent */
    return record2(out, a->t ? "PowBackward1" : "PowBackward2", pow_backward, a, b, 3, 0);
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
        if (WANTS(i) && !(gin[i] = cddp_ew_grad_to(bw_map(tbl, g, 2, s, NULL), &self->meta[i])))
            return -1;
    }
    return 0;
}

static TensorObject *minmax(ew_operand *a, ew_operand *b, int is_max)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = is_max ? maximum_loops : minimum_loops;
    TensorObject *out = binary_run(a, b, cdt, cdt, tbl[cdt], NULL, NULL);
    out = record2(out, is_max ? "MaximumBackward0" : "MinimumBackward0", minmax_backward, a, b,
                  3, 0);
    if (out && out->grad_fn && out->grad_fn->backward == minmax_backward)
        out->grad_fn->i[0] = is_max;
    return out;
}

/* ---- Python entry points ---------------------------------------------------------------- */

/* op(self, other) from Python: operands parsed (TypeError naming the argument), in place
 * through the protocol of kernels_elementwise.h when inplace. */
static PyObject *py_binary(PyObject *self, PyObject *other, binary_fn fn, const bparams *p,
                           const char *fname, const char *argname, int inplace)
{
    ew_operand a, b;
    TensorObject *r = NULL, *old = NULL;
    PyObject *res = NULL;
    int rc;
    if (cddp_ew_operand_arg(self, &a, fname, "input") < 0)
        return NULL;
    if (cddp_ew_operand_arg(other, &b, fname, argname) < 0)
        goto done;
    if (!inplace) {
        res = (PyObject *)fn(&a, &b, p, NULL);
        goto done;
    }
    if (!a.t || a.owned) {
        PyErr_Format(PyExc_TypeError, "%s(): in-place operation needs a Tensor", fname);
        goto done;
    }
    rc = cddp_ew_inplace_begin(a.t, cddp_ew_operand_needs_grad(&b), &old);
    if (rc == 0) {
        r = fn(&a, &b, p, a.t);
        res = r ? Py_NewRef(a.t) : NULL;
        Py_XDECREF(r);
    } else if (rc == 1) {
        ew_operand o = {old};
        res = cddp_ew_inplace_finish(a.t, fn(&o, &b, p, NULL));
        Py_DECREF(old);
    }
done:
    cddp_ew_operand_clear(&a);
    cddp_ew_operand_clear(&b);
    return res;
}

static int parse_alpha(PyObject *o, ew_operand *alpha, const char *fname)
{
    if (!o)
        return 0;
    if (cddp_ew_operand(o, alpha) <= 0 || alpha->t) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s(): argument 'alpha' must be Number, not %s",
                         fname, Py_TYPE(o)->tp_name);
        cddp_ew_operand_clear(alpha);
        return -1;
    }
    return 1;
}

static PyObject *add_sub_impl(PyObject *self, PyObject **argv, int sub, int inplace)
{
    const char *fname = sub ? (inplace ? "sub_" : "sub") : (inplace ? "add_" : "add");
    ew_operand alpha;
    bparams p = {NULL, sub, 0};
    int rc = parse_alpha(argv[1], &alpha, fname);
    if (rc < 0)
        return NULL;
    p.alpha = rc ? &alpha : NULL;
    return py_binary(self, argv[0], op_add_sub, &p, fname, "other", inplace);
}

static PyObject *add_impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 0, 0); }
static PyObject *sub_impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 1, 0); }
static PyObject *add__impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 0, 1); }
static PyObject *sub__impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 1, 1); }
EW_DEFINE_PY(add, "add", add_impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(sub, "sub", sub_impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(add_, "add_", add__impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(sub_, "sub_", sub__impl, 1, 1, "other", "alpha")

static const bparams plain_params = {NULL, 0, 0};

static PyObject *mul_impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_mul, &plain_params, "mul", "other", 0);
}
static PyObject *mul__impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_mul, &plain_params, "mul_", "other", 1);
}
EW_DEFINE_PY(mul, "mul", mul_impl, 1, 1, "other")
EW_DEFINE_PY(mul_, "mul_", mul__impl, 1, 1, "other")

static PyObject *div_impl_mode(PyObject *s, PyObject **argv, const char *fname, int inplace)
{
    bparams p = {NULL, 0, 0};
    PyObject *m = argv[1];
    if (m && m != Py_None) {
        if (PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "trunc") == 0) {
            p.mode = 1;
        } else if (PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "floor") == 0) {
            p.mode = 2;
        } else {
            PyErr_Format(PyExc_RuntimeError,
                         "div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                         "found '%S'", m);
            return NULL;
        }
    }
    return py_binary(s, argv[0], op_div, &p, fname, "other", inplace);
}
static PyObject *div_impl(PyObject *s, PyObject **argv) { return div_impl_mode(s, argv, "div", 0); }
static PyObject *div__impl(PyObject *s, PyObject **argv)
{
    return div_impl_mode(s, argv, "div_", 1);
}
static PyObject *true_divide_impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_div, &plain_params, "true_divide", "other", 0);
}
static PyObject *floor_divide_impl(PyObject *s, PyObject **argv)
{
    bparams p = {NULL, 0, 2};
    return py_binary(s, argv[0], op_div, &p, "floor_divide", "other", 0);
}
EW_DEFINE_PY(div, "div", div_impl, 1, 1, "other", "rounding_mode")
EW_DEFINE_PY(div_, "div_", div__impl, 1, 1, "other", "rounding_mode")
EW_DEFINE_PY(true_divide, "true_divide", true_divide_impl, 1, 1, "other")
EW_DEFINE_PY(floor_divide, "floor_divide", floor_divide_impl, 1, 1, "other")

static const bparams fmod_params = {NULL, 0, 1}, remainder_params = {NULL, 0, 2};
static PyObject *fmod_impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_mod, &fmod_params, "fmod", "other", 0);
}
static PyObject *remainder_impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_mod, &remainder_params, "remainder", "other", 0);
}
EW_DEFINE_PY(fmod, "fmod", fmod_impl, 1, 1, "other")
EW_DEFINE_PY(remainder, "remainder", remainder_impl, 1, 1, "other")

static PyObject *pow_impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_pow, &plain_params, "pow", "exponent", 0);
}
static PyObject *pow__impl(PyObject *s, PyObject **argv)
{
    return py_binary(s, argv[0], op_pow, &plain_params, "pow_", "exponent", 1);
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

/* ---- number slots ----------------------------------------------------------------------- */

/* Slots return NotImplemented for operands that are not tensors/numbers, so Python can try the
 * other side and finally raise its TypeError. */
static PyObject *slot_binary(PyObject *a, PyObject *b, binary_fn fn, const bparams *p)
{
    ew_operand x, y;
    PyObject *res = NULL;
    int rc = cddp_ew_operand(a, &x);
    if (rc > 0) {
        rc = cddp_ew_operand(b, &y);
        if (rc > 0) {
            res = (PyObject *)fn(&x, &y, p, NULL);
            cddp_ew_operand_clear(&y);
        }
        cddp_ew_operand_clear(&x);
    }
    if (rc == 0)
        Py_RETURN_NOTIMPLEMENTED;
    return res;
}

static PyObject *slot_inplace(PyObject *a, PyObject *b, binary_fn fn, const bparams *p,
                              const char *fname)
{
    ew_operand y;
    int rc;
    if (!cddp_tensor_check(a))
        Py_RETURN_NOTIMPLEMENTED;
    rc = cddp_ew_operand(b, &y);
    if (rc == 0)
        Py_RETURN_NOTIMPLEMENTED;
    if (rc < 0)
        return NULL;
    cddp_ew_operand_clear(&y);
    return py_binary(a, b, fn, p, fname, "other", 1);
}

static const bparams sub_params = {NULL, 1, 0};

PyObject *cddp_nb_add(PyObject *a, PyObject *b) { return slot_binary(a, b, op_add_sub, &plain_params); }
PyObject *cddp_nb_sub(PyObject *a, PyObject *b) { return slot_binary(a, b, op_add_sub, &sub_params); }
PyObject *cddp_nb_mul(PyObject *a, PyObject *b) { return slot_binary(a, b, op_mul, &plain_params); }
PyObject *cddp_nb_truediv(PyObject *a, PyObject *b) { return slot_binary(a, b, op_div, &plain_params); }

PyObject *cddp_nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None)
        Py_RETURN_NOTIMPLEMENTED;
    return slot_binary(a, b, op_pow, &plain_params);
}

/* `//` and `%`: ready for the Tensor type's nb_floor_divide / nb_remainder slots */
static const bparams floordiv_params = {NULL, 0, 2};
PyObject *cddp_nb_floordiv(PyObject *a, PyObject *b)
{
    return slot_binary(a, b, op_div, &floordiv_params);
}
PyObject *cddp_nb_remainder(PyObject *a, PyObject *b)
{
    return slot_binary(a, b, op_mod, &remainder_params);
}

PyObject *cddp_nb_iadd(PyObject *a, PyObject *b)
{
    return slot_inplace(a, b, op_add_sub, &plain_params, "add_");
}
PyObject *cddp_nb_isub(PyObject *a, PyObject *b)
{
    return slot_inplace(a, b, op_add_sub, &sub_params, "sub_");
}
PyObject *cddp_nb_imul(PyObject *a, PyObject *b)
{
    return slot_inplace(a, b, op_mul, &plain_params, "mul_");
}
PyObject *cddp_nb_itruediv(PyObject *a, PyObject *b)
{
    return slot_inplace(a, b, op_div, &plain_params, "div_");
}
