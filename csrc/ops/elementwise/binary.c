/* ops/elementwise/binary.c — arithmetic between two operands (tensor or Python scalar, either side) with
 * broadcasting, torch's dtype promotion and autograd: add/sub (with alpha, one pass), mul, div
 * (true, 'trunc', 'floor'), remainder, fmod; their in-place forms; the +, -, *, / slots (and
 * // and % ready for theirs).
 *
 * Mirrors: torch.add / sub / mul / div / true_divide / floor_divide / remainder / fmod,
 * Tensor.add_ / sub_ / mul_ / div_, and the nodes AddBackward0, SubBackward0, MulBackward0,
 * DivBackward0 (DivBackward1 with a rounding mode: zero gradient), RemainderBackward0,
 * FmodBackward0.
 *
 * Every op is `TensorObject *op(a, b, params, into)`: into == NULL computes a new tensor and
 * records history; into != NULL writes the result into that tensor (the in-place fast path,
 * never recorded — cddp_ew_inplace_begin decides which path runs).
 */
#include "ops/elementwise/elementwise.h"
#include <tgmath.h>

/* ---- scalar helpers --------------------------------------------------------------------- */

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

/* float16 / bfloat16 tensor // tensor as torch's Vectorized<Half> kernel computes it: every
 * step of div_floor_floating rounded to the dtype (dt in ctx->p1.i32), so a quotient that
 * lands on a tie can end an ulp away from the exact floor, as torch's does. */
#define RH(v) cddp_round_to((cddp_dtype)dt, (v))
static inline float ew_floordiv_rh(float a, float b, int dt)
{
    float mod, div, fl;
    if (b == 0)
        return a / b;
    mod = RH(fmodf(a, b));
    div = RH(RH(a - mod) / b);
    if (mod != 0 && (b < 0) != (mod < 0))
        div = RH(div - 1);
    if (div != 0) {
        fl = floorf(div);
        if (RH(div - fl) > 0.5f)
            fl = RH(fl + 1);
    } else {
        fl = copysignf(0, RH(a / b));
    }
    return fl;
}
#undef RH

#define IDIV_GUARD(x, y, EXPR)                                                             \
    ((y) == 0 ? (ctx->err = 1, (scalar_t)0)                                                \
              : (y) == -1 ? (scalar_t)(0 - U64(x)) : (scalar_t)(EXPR))

#define IMOD_GUARD(x, y, EXPR)                                                             \
    ((y) == 0 ? (ctx->err = 1, (scalar_t)0) : (y) == -1 ? (scalar_t)0 : (scalar_t)(EXPR))

/* torch's remainder on floats: fmod moved to the divisor's sign */
#define EW_DEF_REMAINDER(T, SUF)                                                           \
    static inline T ew_remainder_##SUF(T a, T b)                                           \
    {                                                                                      \
        T mod = fmod(a, b);                                                                \
        return (mod != 0 && (b < 0) != (mod < 0)) ? mod + b : mod;                         \
    }
EW_DEF_REMAINDER(float, f32)
EW_DEF_REMAINDER(double, f64)
#define EW_REMAINDER(x, y) _Generic((x), float: ew_remainder_f32, default: ew_remainder_f64)(x, y)

/* ---- kernels ---------------------------------------------------------------------------- */

EW_ALL_LOOPS2(add, x + y, (scalar_t)(U64(x) + U64(y)), x | y)
EW_ALL_LOOPS2(axpy, x + EW_P(ctx->p0) * y, (scalar_t)(U64(x) + U64(EW_P(ctx->p0)) * U64(y)),
              x | (EW_P(ctx->p0) & y))
EW_NUM_LOOPS2(sub, x - y, (scalar_t)(U64(x) - U64(y)))
EW_ALL_LOOPS2(mul, x * y, (scalar_t)(U64(x) * U64(y)), x & y)
EW_FLOAT_LOOPS2(truediv, float, double, x / y)
EW_NUM_LOOPS2(truncdiv, trunc(x / y), IDIV_GUARD(x, y, x / y))
EW_NUM_LOOPS2(floordiv, EW_FLOORDIV(x, y), IDIV_GUARD(x, y, ew_ifloordiv(x, y)))
EW_NUM_LOOPS2(remainder, EW_REMAINDER(x, y), IMOD_GUARD(x, y, ew_iremainder(x, y)))
EW_NUM_LOOPS2(fmod, fmod(x, y), IMOD_GUARD(x, y, x % y))

EW_LOOP2(floordiv_rh, float, float, float, ew_floordiv_rh(x, y, ctx->p1.i32))
EW_LOOP2(truncdiv_rh, float, float, float, truncf(cddp_round_to((cddp_dtype)ctx->p1.i32, x / y)))

static const cddp_loop_fn add_loops[] = EW_ALL_TABLE(add), axpy_loops[] = EW_ALL_TABLE(axpy),
                          sub_loops[] = EW_NUM_TABLE(sub), mul_loops[] = EW_ALL_TABLE(mul),
                          truediv_loops[] = EW_FLOAT_TABLE(truediv),
                          truncdiv_loops[] = EW_NUM_TABLE(truncdiv),
                          floordiv_loops[] = EW_NUM_TABLE(floordiv),
                          remainder_loops[] = EW_NUM_TABLE(remainder),
                          fmod_loops[] = EW_NUM_TABLE(fmod);

/* backward kernels: x is the incoming gradient */
EW_FLOAT_LOOPS3(div_other_bw, float, float, double, double, -x * ((y / z) / z))
/* remainder / fmod: d/db (a - b * q) = -q with q the floor / truncated quotient */
EW_FLOAT_LOOPS3(remainder_other_bw, float, float, double, double, -x * EW_FLOORDIV(y, z))
EW_FLOAT_LOOPS3(fmod_other_bw, float, float, double, double, -x * trunc(y / z))
static const cddp_loop_fn div_other_bw_loops[] = EW_FLOAT_TABLE(div_other_bw),
                          remainder_other_bw_loops[] = EW_FLOAT_TABLE(remainder_other_bw),
                          fmod_other_bw_loops[] = EW_FLOAT_TABLE(fmod_other_bw);

/* ---- helpers ---------------------------------------------------------------------------- */

/* which inputs a product-like backward needs: each input's grad uses the other input */
static int save_others(const ew_operand *a, const ew_operand *b)
{
    return (cddp_ew_operand_needs_grad(b) ? 1 : 0) | (cddp_ew_operand_needs_grad(a) ? 2 : 0);
}

static TensorObject *scale(TensorObject *g, double v)
{
    ew_src s;
    s.t = NULL;
    cddp_ew_scalar_from_double(&s.s, g->dtype, v);
    return cddp_ew_bw_map(mul_loops, g, 1, &s, NULL);
}

/* ---- add / sub -------------------------------------------------------------------------- */

static int add_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    if (!g)
        return 0;
    if (EW_WANTS(0) && !(gin[0] = cddp_ew_grad_to((TensorObject *)Py_NewRef(g), &self->meta[0])))
        return -1;
    if (EW_WANTS(1)) {
        TensorObject *gb = self->d[0] == 1 ? (TensorObject *)Py_NewRef(g) : scale(g, self->d[0]);
        if (!(gin[1] = cddp_ew_grad_to(gb, &self->meta[1])))
            return -1;
    }
    return 0;
}

/* a + alpha * b, or a - alpha * b: one pass either way */
static TensorObject *op_add_sub(ew_operand *a, ew_operand *b, const ew_bparams *p,
                                TensorObject *into)
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
        if (cddp_is_narrow(cdt) && cddp_scalar_overflows(cdt, al.kind == 2, al.d, al.l)) {
            PyErr_Format(PyExc_RuntimeError,          /* torch's alpha.to<scalar_t>() */
                         "value cannot be converted to type %s without overflow",
                         cddp_dtype_cpp_name[cdt]);
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
    out = cddp_ew_binary_run(a, b, cdt, cdt, fn, &ctx, into);
    if (into)
        return out;
    return cddp_ew_record2(out, p->sub ? "SubBackward0" : "AddBackward0", add_backward, a, b, 0,
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
        if (!EW_WANTS(i))
            continue;
        if (cddp_ew_saved_src(self, 1 - i, &other, g->dtype) < 0 ||
            !(gin[i] = cddp_ew_grad_to(cddp_ew_bw_map(mul_loops, g, 1, &other, NULL),
                                       &self->meta[i])))
            return -1;
    }
    return 0;
}

/* a op b with b's scalar read as torch's reduced-float kernels read it (see
 * cddp_ew_opmath_scalar), else as every other op. */
static TensorObject *run_opmath(ew_operand *a, ew_operand *b, cddp_dtype cdt, cddp_loop_fn fn,
                                ew_ctx *ctx, TensorObject *into)
{
    ew_src s[2];
    if (!cddp_ew_opmath_scalar(b, cdt, &s[1]))
        return cddp_ew_binary_run(a, b, cdt, cdt, fn, ctx, into);
    cddp_ew_src_from(&s[0], a, cdt);
    return cddp_ew_binary_run_srcs(s, cdt, cdt, fn, ctx, into);
}

static TensorObject *op_mul(ew_operand *a, ew_operand *b, const ew_bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    TensorObject *out;
    if (!a->t && b->t && cddp_is_reduced(cdt)) {
        ew_operand *t = a;                /* number * tensor is torch's tensor.__rmul__(number) */
        a = b;
        b = t;
    }
    out = run_opmath(a, b, cdt, mul_loops[cdt], NULL, into);
    if (into)
        return out;
    return cddp_ew_record2(out, "MulBackward0", mul_backward, a, b, save_others(a, b), 0);
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
    if (EW_WANTS(0) &&
        !(gin[0] = cddp_ew_grad_to(cddp_ew_bw_map(truediv_loops, g, 1, &s[1], NULL),
                                   &self->meta[0])))
        return -1;
    if (EW_WANTS(1)) {
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            !(gin[1] = cddp_ew_grad_to(cddp_ew_bw_map(div_other_bw_loops, g, 2, s, NULL),
                                       &self->meta[1])))
            return -1;
    }
    return 0;
}

/* rounding divisions are piecewise constant: zero gradients, as torch */
static int zero_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    for (int i = 0; i < self->n_next; i++)
        if (gout[0] && EW_WANTS(i) && !(gin[i] = cddp_ew_zeros_like_meta(&self->meta[i])))
            return -1;
    return 0;
}

/* number / tensor in float16/bfloat16: torch's Tensor.__rtruediv__ is reciprocal(tensor) *
 * number (the reciprocal rounded to the dtype first), with those two nodes. */
static TensorObject *rdiv_reduced(ew_operand *num, ew_operand *t, cddp_dtype cdt)
{
    PyObject *r = PyObject_CallMethod((PyObject *)t->t, "reciprocal", NULL), *res;
    ew_operand ro = {0};
    if (!r)
        return NULL;
    ro.t = (TensorObject *)r;
    res = (PyObject *)op_mul(&ro, num, NULL, NULL);
    Py_DECREF(r);
    return (TensorObject *)res;
}

static TensorObject *op_div(ew_operand *a, ew_operand *b, const ew_bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = p->mode == 0 ? truediv_loops
                            : p->mode == 1 ? truncdiv_loops : floordiv_loops;
    ew_ctx ctx = {0};
    cddp_loop_fn fn;
    TensorObject *out;
    if (p->mode == 0 && !cddp_is_floating(cdt))
        cdt = cddp_state()->default_dtype;   /* true division of integers */
    if (!tbl[cdt]) {
        cddp_ew_not_implemented(p->mode == 1 ? "div_trunc_cpu" : "div_floor_cpu", cdt);
        return NULL;
    }
    if (!a->t && b->t && cddp_is_reduced(cdt) && p->mode == 0 && !into)
        return rdiv_reduced(a, b, cdt);
    fn = tbl[cdt];
    if (p->mode && cddp_is_reduced(cdt) && b->t && b->t->ndim > 0) {   /* tensor operands */
        ctx.p1.i32 = cdt;
        fn = p->mode == 1 ? truncdiv_rh : floordiv_rh;
    }
    out = run_opmath(a, b, cdt, fn, &ctx, into);
    if (into)
        return out;
    if (p->mode)
        return cddp_ew_record2(out, "DivBackward1", zero_backward, a, b, 0, 0);
    return cddp_ew_record2(out, "DivBackward0", div_backward, a, b,
                   (cddp_ew_operand_needs_grad(b) ? 1 : 0) | 2, 0);
}

/* ---- remainder / fmod ------------------------------------------------------------------- */

static int mod_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    ew_src s[2];
    if (!g)
        return 0;
    if (EW_WANTS(0) && !(gin[0] = cddp_ew_grad_to((TensorObject *)Py_NewRef(g), &self->meta[0])))
        return -1;
    if (EW_WANTS(1)) {
        const cddp_loop_fn *tbl = self->i[0] ? remainder_other_bw_loops : fmod_other_bw_loops;
        if (cddp_ew_saved_src(self, 0, &s[0], g->dtype) < 0 ||
            cddp_ew_saved_src(self, 1, &s[1], g->dtype) < 0 ||
            !(gin[1] = cddp_ew_grad_to(cddp_ew_bw_map(tbl, g, 2, s, NULL), &self->meta[1])))
            return -1;
    }
    return 0;
}

/* p->mode: 1 fmod (sign of the dividend), 2 remainder (sign of the divisor, Python's %) */
static TensorObject *op_mod(ew_operand *a, ew_operand *b, const ew_bparams *p, TensorObject *into)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops);
    const cddp_loop_fn *tbl = p->mode == 2 ? remainder_loops : fmod_loops;
    ew_ctx ctx = {0};
    TensorObject *out;
    if (!tbl[cdt]) {
        cddp_ew_not_implemented(p->mode == 2 ? "remainder_cpu" : "fmod_cpu", cdt);
        return NULL;
    }
    out = cddp_ew_binary_run(a, b, cdt, cdt, tbl[cdt], &ctx, into);
    if (into)
        return out;
    out = cddp_ew_record2(out, p->mode == 2 ? "RemainderBackward0" : "FmodBackward0",
                          mod_backward, a, b, cddp_ew_operand_needs_grad(b) ? 3 : 0, 0);
    if (out && out->grad_fn && out->grad_fn->backward == mod_backward)
        out->grad_fn->i[0] = p->mode == 2;
    return out;
}

/* ---- Python entry points ---------------------------------------------------------------- */

/* alpha: a Python number, or a 0-dim tensor read as the number it holds (torch's Scalar
 * arguments take both; custom optimizers pass step sizes computed from tensor state) */
static int parse_alpha(PyObject *o, ew_operand *alpha, const char *fname)
{
    PyObject *num = NULL;
    int rc;
    if (!o)
        return 0;
    if (cddp_tensor_check(o) && ((TensorObject *)o)->ndim == 0 &&
        !(num = PyObject_CallMethod(o, "item", NULL)))
        return -1;
    rc = cddp_ew_operand(num ? num : o, alpha);
    Py_XDECREF(num);
    if (rc <= 0 || alpha->t) {
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
    ew_bparams p = {NULL, sub, 0};
    int rc = parse_alpha(argv[1], &alpha, fname);
    if (rc < 0)
        return NULL;
    p.alpha = rc ? &alpha : NULL;
    return cddp_ew_py_binary(self, argv[0], op_add_sub, &p, fname, "other", inplace);
}

static PyObject *add_impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 0, 0); }
static PyObject *sub_impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 1, 0); }
static PyObject *add__impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 0, 1); }
static PyObject *sub__impl(PyObject *s, PyObject **argv) { return add_sub_impl(s, argv, 1, 1); }
EW_DEFINE_PY(add, "add", add_impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(sub, "sub", sub_impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(add_, "add_", add__impl, 1, 1, "other", "alpha")
EW_DEFINE_PY(sub_, "sub_", sub__impl, 1, 1, "other", "alpha")

/* torch's deprecated overloads x.add_(Number alpha, Tensor other) (and add, sub, sub_),
 * still in old tutorials (p.data.add_(-lr, p.grad.data)) and in DARTS (p.data.add_(R, v)
 * with R a 0-d tensor, which torch's parser takes as a Number): two positionals, a number or
 * 0-d tensor then a tensor, become (other, alpha=) with torch's warning (the new signature
 * takes alpha by keyword only, so two positionals are never it); anything else parses as
 * above. */
static PyObject *deprecated_alpha(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames, const char *fname,
                                  PyObject *(*impl)(PyObject *, PyObject **),
                                  PyObject *(*parsed)(PyObject *, PyObject *const *, Py_ssize_t,
                                                      PyObject *))
{
    PyObject *alpha, *argv[2], *res;
    int scalar_tensor;
    if (nargs != 2 || kwnames || !cddp_tensor_check(args[1]))
        return parsed(self, args, nargs, kwnames);
    scalar_tensor = cddp_tensor_check(args[0]) && ((TensorObject *)args[0])->ndim == 0;
    if (!scalar_tensor && (cddp_tensor_check(args[0]) || !PyNumber_Check(args[0])))
        return parsed(self, args, nargs, kwnames);
    if (PyErr_WarnFormat(PyExc_UserWarning, 1, "This overload of %s is deprecated:\n\t"
                         "%s(Number alpha, Tensor other)\nConsider using one of the "
                         "following signatures instead:\n\t%s(Tensor other, *, Number "
                         "alpha = 1)", fname, fname, fname) < 0)
        return NULL;
    alpha = scalar_tensor ? PyObject_CallMethod(args[0], "item", NULL) : Py_NewRef(args[0]);
    if (!alpha)
        return NULL;
    argv[0] = args[1];
    argv[1] = alpha;
    res = impl(self, argv);
    Py_DECREF(alpha);
    return res;
}

#define DEPRECATED_ALPHA(op, fname)                                                        \
    PyObject *cddp_ew_m_##op##_compat(PyObject *self, PyObject *const *args,                \
                                      Py_ssize_t nargs, PyObject *kwnames)                 \
    {                                                                                      \
        return deprecated_alpha(self, args, nargs, kwnames, fname, op##_impl,             \
                                cddp_ew_m_##op);                                           \
    }
DEPRECATED_ALPHA(add, "add")
DEPRECATED_ALPHA(sub, "sub")
DEPRECATED_ALPHA(add_, "add_")
DEPRECATED_ALPHA(sub_, "sub_")

/* the module functions' form of the same overload: torch.add(input, Number alpha, other) */
#define DEPRECATED_ALPHA_F(op, fname)                                                      \
    PyObject *cddp_ew_f_##op##_compat(PyObject *mod, PyObject *const *args,                 \
                                      Py_ssize_t nargs, PyObject *kwnames)                 \
    {                                                                                      \
        if (nargs == 3 && !kwnames)                                                        \
            return deprecated_alpha(args[0], args + 1, 2, NULL, fname, op##_impl,         \
                                    cddp_ew_m_##op);                                       \
        return cddp_ew_f_##op(mod, args, nargs, kwnames);                                  \
    }
DEPRECATED_ALPHA_F(add, "add")
DEPRECATED_ALPHA_F(sub, "sub")

static const ew_bparams plain_params = {NULL, 0, 0};

static PyObject *mul_impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_mul, &plain_params, "mul", "other", 0);
}
static PyObject *mul__impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_mul, &plain_params, "mul_", "other", 1);
}
EW_DEFINE_PY(mul, "mul", mul_impl, 1, 1, "other")
EW_DEFINE_PY(mul_, "mul_", mul__impl, 1, 1, "other")

static PyObject *div_impl_mode(PyObject *s, PyObject **argv, const char *fname, int inplace)
{
    ew_bparams p = {NULL, 0, 0};
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
    return cddp_ew_py_binary(s, argv[0], op_div, &p, fname, "other", inplace);
}
static PyObject *div_impl(PyObject *s, PyObject **argv) { return div_impl_mode(s, argv, "div", 0); }
static PyObject *div__impl(PyObject *s, PyObject **argv)
{
    return div_impl_mode(s, argv, "div_", 1);
}
static PyObject *true_divide_impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_div, &plain_params, "true_divide", "other", 0);
}
static PyObject *floor_divide_impl(PyObject *s, PyObject **argv)
{
    ew_bparams p = {NULL, 0, 2};
    return cddp_ew_py_binary(s, argv[0], op_div, &p, "floor_divide", "other", 0);
}
EW_DEFINE_PY(div, "div", div_impl, 1, 1, "other", "rounding_mode")
EW_DEFINE_PY(div_, "div_", div__impl, 1, 1, "other", "rounding_mode")
EW_DEFINE_PY(true_divide, "true_divide", true_divide_impl, 1, 1, "other")
EW_DEFINE_PY(floor_divide, "floor_divide", floor_divide_impl, 1, 1, "other")

static const ew_bparams fmod_params = {NULL, 0, 1}, remainder_params = {NULL, 0, 2};
static PyObject *fmod_impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_mod, &fmod_params, "fmod", "other", 0);
}
static PyObject *remainder_impl(PyObject *s, PyObject **argv)
{
    return cddp_ew_py_binary(s, argv[0], op_mod, &remainder_params, "remainder", "other", 0);
}
EW_DEFINE_PY(fmod, "fmod", fmod_impl, 1, 1, "other")
EW_DEFINE_PY(remainder, "remainder", remainder_impl, 1, 1, "other")

/* ---- number slots ----------------------------------------------------------------------- */

static PyObject *slot_inplace(PyObject *a, PyObject *b, ew_binary_fn fn,
                              const ew_bparams *p, const char *fname)
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
    return cddp_ew_py_binary(a, b, fn, p, fname, "other", 1);
}

static const ew_bparams sub_params = {NULL, 1, 0};

PyObject *cddp_nb_add(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_add_sub, &plain_params, "add");
}
PyObject *cddp_nb_sub(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_add_sub, &sub_params, "sub");
}
PyObject *cddp_nb_mul(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_mul, &plain_params, "mul");
}
PyObject *cddp_nb_truediv(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_div, &plain_params, "truediv");
}

/* `//` and `%`: ready for the Tensor type's nb_floor_divide / nb_remainder slots */
static const ew_bparams floordiv_params = {NULL, 0, 2};
PyObject *cddp_nb_floordiv(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_div, &floordiv_params, "floordiv");
}
PyObject *cddp_nb_remainder(PyObject *a, PyObject *b)
{
    return cddp_ew_slot_binary(a, b, op_mod, &remainder_params, "mod");
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
