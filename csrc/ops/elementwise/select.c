/* ops/elementwise/select.c — ops that pick between values: clamp (bounds are scalars, tensors
 * or absent) and where(condition, x, y); gradients flow to whichever operand was picked.
 *
 * Mirrors: torch.clamp / clip, Tensor.clamp_ / clip_, torch.where(cond, x, y),
 * Tensor.where(cond, y); nodes ClampBackward1 (scalar bounds), ClampBackward0 (tensor bounds),
 * WhereBackward0.
 *
 * clamp's backward needs to know, per element, who was picked: the forward (when recording)
 * writes a one-byte code — 0 x, 1 min, 2 max, 3 nobody (NaN) — with torch's tie rules (x gets
 * the gradient where min <= x <= max), so the backward is one masked copy per input and
 * clamp_ needs no copy of the old x.
 */
#include "ops/elementwise/elementwise.h"

/* o = min(max(x, lo), hi): NaN x stays NaN; lo > hi gives hi (torch); a NaN bound makes the
 * result NaN (torch's NaN-propagating max / min). The casts keep the integer loops free of
 * a self-comparison (always false there). */
#define CLAMP(x, lo, hi) ((((x) < (lo)) ? (lo) : (x)) > (hi) ? (hi) : (((x) < (lo)) ? (lo) : (x)))
#define NAN_BOUND(lo, hi) ((double)(lo) != (double)(lo) || (double)(hi) != (double)(hi))
#define CLAMP_NAN(x, lo, hi) (NAN_BOUND(lo, hi) ? (lo) + (hi) : CLAMP(x, lo, hi))
#define CLAMP_LOOP(SUF, T)                                                                 \
    CDDP_CLONES static void clamp_##SUF(char **p, const int64_t *s, int64_t n, void *ctx)    \
    {                                                                                      \
        (void)ctx;                                                                         \
        if (s[0] == EW_SZ(T) && s[1] == EW_SZ(T) && s[2] == 0 && s[3] == 0) {              \
            T *o = (T *)p[0];                                                              \
            const T *a = (const T *)p[1], lo = *(const T *)p[2], hi = *(const T *)p[3];    \
            if (NAN_BOUND(lo, hi)) {                                                       \
                for (int64_t i = 0; i < n; i++)                                            \
                    o[i] = (T)(lo + hi);                                                   \
                return;                                                                    \
            }                                                                              \
            for (int64_t i = 0; i < n; i++)                                                \
                o[i] = CLAMP(a[i], lo, hi);                                                \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                T x = *(const T *)(p[1] + i * s[1]);                                       \
                T lo = *(const T *)(p[2] + i * s[2]), hi = *(const T *)(p[3] + i * s[3]);  \
                *(T *)(p[0] + i * s[0]) = (T)CLAMP_NAN(x, lo, hi);                         \
            }                                                                              \
        }                                                                                  \
    }
CLAMP_LOOP(f32, float)
CLAMP_LOOP(f64, double)
CLAMP_LOOP(i64, int64_t)
CLAMP_LOOP(i32, int32_t)
CLAMP_LOOP(b8, uint8_t)
static const cddp_loop_fn clamp_loops[] = EW_TABLE(clamp_f32, clamp_f64, clamp_i64, clamp_i32,
                                                  clamp_b8);

/* who receives the gradient (torch's clamp_backward / clamp_backward_min_max) */
#define CLAMP_CODE(x, y, z)                                                                \
    (((x) >= (y) && (x) <= (z)) ? 0 : ((x) < (y) && (y) < (z)) ? 1                         \
                                    : ((x) > (z) || (z) < (y)) ? 2 : 3)
EW_LOOP3(clamp_code_f32, uint8_t, float, float, float, CLAMP_CODE(x, y, z))
EW_LOOP3(clamp_code_f64, uint8_t, double, double, double, CLAMP_CODE(x, y, z))
static const cddp_loop_fn clamp_code_loops[] = EW_FLOAT_TABLE(clamp_code);

/* gradient where the code/condition equals ctx->p0.b8, else 0 */
EW_FLOAT_LOOPS2(pick, uint8_t, uint8_t, y == ctx->p0.b8 ? x : 0)
static const cddp_loop_fn pick_loops[] = EW_FLOAT_TABLE(pick);

#define WHERE_LOOP(SUF, T) EW_LOOP3(where_##SUF, T, uint8_t, T, T, x ? y : z)
WHERE_LOOP(f32, float)
WHERE_LOOP(f64, double)
WHERE_LOOP(i64, int64_t)
WHERE_LOOP(i32, int32_t)
WHERE_LOOP(b8, uint8_t)
static const cddp_loop_fn where_loops[] = EW_TABLE(where_f32, where_f64, where_i64, where_i32,
                                                  where_b8);

/* grad_in[i] = g where code == value[i], summed to input i's shape; code in saved slot `slot` */
static int pick_backward(NodeObject *self, TensorObject **gout, TensorObject **gin, int slot,
                         const uint8_t *value)
{
    TensorObject *g = gout[0], *code;
    if (!g)
        return 0;
    if (!(code = cddp_node_saved(self, slot)))
        return -1;
    for (int i = 0; i < self->n_next; i++) {
        ew_src s[2] = {{g}, {code}};
        cddp_dtype want[2] = {g->dtype, CDDP_BOOL};
        ew_ctx ctx = {0};
        if (!self->next[i].node)
            continue;
        ctx.p0.b8 = value[i];
        gin[i] = cddp_ew_grad_to(cddp_ew_map(g->dtype, 2, s, want, pick_loops[g->dtype], &ctx,
                                             NULL), &self->meta[i]);
        if (!gin[i])
            return -1;
    }
    return 0;
}

/* ---- clamp ------------------------------------------------------------------------------ */

static int clamp_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    static const uint8_t who[3] = {0, 1, 2};
    return pick_backward(self, gout, gin, 0, who);
}

/* the bound that never clamps, for an absent min (hi = 0) or max (hi = 1) */
static void no_bound(ew_scalar *s, cddp_dtype dt, int hi)
{
    switch (cddp_kdt(dt)) {               /* held in the compute dtype, as every scalar */
    case CDDP_FLOAT32: s->f32 = hi ? INFINITY : -INFINITY; break;
    case CDDP_FLOAT64: s->f64 = hi ? INFINITY : -INFINITY; break;
    case CDDP_INT64: s->i64 = hi ? INT64_MAX : INT64_MIN; break;
    case CDDP_INT32: s->i32 = hi ? INT32_MAX : INT32_MIN; break;
    default: s->b8 = hi ? 1 : 0; break;
    }
}

/* The Python-number operands of an op computing in narrow dtype cdt must fit it (torch converts
 * them with checked_convert: where(c, int8, 1000) raises instead of wrapping). 0 / -1. */
static int check_scalars(int n, const ew_operand *ops, cddp_dtype cdt)
{
    for (int i = 0; i < n && cddp_is_narrow(cdt); i++) {
        if (!ops[i].t && cddp_scalar_overflows(cdt, ops[i].kind == 2, ops[i].d, ops[i].l)) {
            PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without "
                         "overflow", cddp_dtype_cpp_name[cdt]);
            return -1;
        }
    }
    return 0;
}

/* clamp(x, lo, hi) (lo/hi NULL when absent), new with history or into `into` in place. */
static TensorObject *clamp(ew_operand *x, ew_operand *lo, ew_operand *hi, TensorObject *into)
{
    ew_operand ops[3], none = {0};
    ew_src s[3];
    cddp_dtype cdt, want[3];
    TensorObject *out, *code = NULL;
    NodeObject *node;
    int n = 0, err = 0;
    if (!lo && !hi) {
        PyErr_SetString(PyExc_RuntimeError,
                        "torch.clamp: At least one of 'min' or 'max' must not be None");
        return NULL;
    }
    ops[n++] = *x;
    if (lo)
        ops[n++] = *lo;
    if (hi)
        ops[n++] = *hi;
    cdt = cddp_ew_result_type(n, ops);
    if (check_scalars(n - 1, ops + 1, cdt) < 0)                /* torch's min.to<scalar_t>() */
        return NULL;
    want[0] = want[1] = want[2] = cdt;
    cddp_ew_src_from(&s[0], x, cdt);
    if (lo)
        cddp_ew_src_from(&s[1], lo, cdt);
    else
        s[1].t = NULL, no_bound(&s[1].s, cdt, 0);
    if (hi)
        cddp_ew_src_from(&s[2], hi, cdt);
    else
        s[2].t = NULL, no_bound(&s[2].s, cdt, 1);
    if (into) {
        if (cddp_ew_check_cast(cdt, into) < 0)
            return NULL;
        if (into->dtype == cdt)
            return cddp_ew_map(cdt, 3, s, want, clamp_loops[cdt], NULL, into);
        out = cddp_ew_map(cdt, 3, s, want, clamp_loops[cdt], NULL, NULL);
        return (TensorObject *)cddp_ew_inplace_finish(into, out);
    }
    out = cddp_ew_map(cdt, 3, s, want, clamp_loops[cdt], NULL, NULL);
    if (!out || !cddp_is_floating(cdt) || !cddp_grad_enabled ||
        !(cddp_ew_operand_needs_grad(x) || (lo && cddp_ew_operand_needs_grad(lo)) ||
          (hi && cddp_ew_operand_needs_grad(hi))))
        return out;
    code = cddp_ew_map(CDDP_BOOL, 3, s, want, clamp_code_loops[cdt], NULL, NULL);
    if (!code)
        goto fail;
    ops[0] = *x;
    ops[1] = lo ? *lo : none;
    ops[2] = hi ? *hi : none;
    node = cddp_ew_record(out, (lo && lo->t) || (hi && hi->t) ? "ClampBackward0"
                                                               : "ClampBackward1",
                          clamp_backward, 3, ops, 0, &err);
    if (err || (node && cddp_node_save(node, 0, code) < 0))
        goto fail;
    Py_DECREF(code);
    return out;
fail:
    Py_XDECREF(code);
    Py_DECREF(out);
    return NULL;
}

/* clamp(min=None, max=None) from Python; bounds are numbers or tensors */
static PyObject *clamp_py(PyObject *self, PyObject **argv, const char *fname, int inplace)
{
    ew_operand x, b[2];
    ew_operand *bp[2] = {NULL, NULL};
    TensorObject *old = NULL, *r;
    PyObject *res = NULL;
    int rc, others = 0;
    static const char *const names[2] = {"min", "max"};
    if (!cddp_ew_tensor_arg(self, fname, "input"))
        return NULL;
    x.t = (TensorObject *)self;
    x.owned = NULL;
    for (int i = 0; i < 2; i++) {
        if (!argv[i] || argv[i] == Py_None)
            continue;
        if (cddp_ew_operand_arg(argv[i], &b[i], fname, names[i]) < 0)
            goto done;
        bp[i] = &b[i];
        others |= cddp_ew_operand_needs_grad(&b[i]);
    }
    if (!inplace) {
        res = (PyObject *)clamp(&x, bp[0], bp[1], NULL);
        goto done;
    }
    rc = cddp_ew_inplace_begin(x.t, others, &old);
    if (rc == 0) {
        r = clamp(&x, bp[0], bp[1], x.t);
        res = r ? Py_NewRef(self) : NULL;
        Py_XDECREF(r);
    } else if (rc == 1) {
        ew_operand o = {old};
        res = cddp_ew_inplace_finish(x.t, clamp(&o, bp[0], bp[1], NULL));
        Py_DECREF(old);
    }
done:
    for (int i = 0; i < 2; i++)
        if (bp[i])
            cddp_ew_operand_clear(bp[i]);
    return res;
}

static PyObject *clamp_impl(PyObject *s, PyObject **argv) { return clamp_py(s, argv, "clamp", 0); }
static PyObject *clamp__impl(PyObject *s, PyObject **argv)
{
    return clamp_py(s, argv, "clamp_", 1);
}
EW_DEFINE_PY(clamp, "clamp", clamp_impl, 2, 0, "min", "max")
EW_DEFINE_PY(clamp_, "clamp_", clamp__impl, 2, 0, "min", "max")

/* clamp_min(min) / clamp_max(max): clamp with one bound */
static PyObject *clamp_one(PyObject *s, PyObject **argv, const char *fn, int hi, int inplace)
{
    PyObject *b[2] = {hi ? NULL : argv[0], hi ? argv[0] : NULL};
    if (!argv[0] || argv[0] == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn,
                     hi ? "max" : "min");
        return NULL;
    }
    return clamp_py(s, b, fn, inplace);
}
#define CLAMP_ONE(NAME, HI, INPL)                                                             \
    static PyObject *NAME##_impl(PyObject *s, PyObject **a)                                   \
    {                                                                                         \
        return clamp_one(s, a, #NAME, HI, INPL);                                              \
    }
CLAMP_ONE(clamp_min, 0, 0)
CLAMP_ONE(clamp_max, 1, 0)
CLAMP_ONE(clamp_min_, 0, 1)
CLAMP_ONE(clamp_max_, 1, 1)
EW_DEFINE_PY(clamp_min, "clamp_min", clamp_min_impl, 1, 1, "min")
EW_DEFINE_PY(clamp_max, "clamp_max", clamp_max_impl, 1, 1, "max")
EW_DEFINE_PY(clamp_min_, "clamp_min_", clamp_min__impl, 1, 1, "min")
EW_DEFINE_PY(clamp_max_, "clamp_max_", clamp_max__impl, 1, 1, "max")

/* ---- where ------------------------------------------------------------------------------ */

static int where_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    static const uint8_t picked[2] = {1, 0};     /* x where cond, y where not */
    return pick_backward(self, gout, gin, 2, picked);
}

static TensorObject *where(TensorObject *cond, ew_operand *a, ew_operand *b)
{
    ew_operand ops[2] = {*a, *b};
    cddp_dtype cdt = cddp_ew_result_type(2, ops), want[3];
    ew_src s[3] = {{cond}};
    TensorObject *out;
    NodeObject *node;
    int err = 0;
    if (cond->dtype == CDDP_UINT8 &&
        PyErr_WarnEx(PyExc_UserWarning, "where received a uint8 condition tensor. This behavior "
                     "is deprecated and will be removed in a future version of PyTorch. Use a "
                     "boolean condition instead.", 1) < 0)
        return NULL;
    if (cond->dtype != CDDP_BOOL && cond->dtype != CDDP_UINT8) {
        PyErr_Format(PyExc_RuntimeError, "where expected condition to be a boolean tensor, but "
                     "got a tensor with dtype %s", cddp_ew_torch_dtype_name[cond->dtype]);
        return NULL;
    }
    if (check_scalars(2, ops, cdt) < 0)
        return NULL;
    want[0] = CDDP_BOOL;
    want[1] = want[2] = cdt;
    cddp_ew_src_from(&s[1], a, cdt);
    cddp_ew_src_from(&s[2], b, cdt);
    out = cddp_ew_map(cdt, 3, s, want, where_loops[cdt], NULL, NULL);
    if (!out || !cddp_is_floating(cdt))
        return out;
    node = cddp_ew_record(out, "WhereBackward0", where_backward, 2, ops, 0, &err);
    if (err || (node && cddp_node_save(node, 2, cond) < 0)) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *where_py(PyObject *cond, PyObject *x, PyObject *y)
{
    ew_operand a, b;
    PyObject *res = NULL;
    TensorObject *c = cddp_ew_tensor_arg(cond, "where", "condition");
    if (!c)
        return NULL;
    if (cddp_ew_operand_arg(x, &a, "where", "input") < 0)
        return NULL;
    if (cddp_ew_operand_arg(y, &b, "where", "other") == 0) {
        res = (PyObject *)where(c, &a, &b);
        cddp_ew_operand_clear(&b);
    }
    cddp_ew_operand_clear(&a);
    return res;
}

PyObject *cddp_ew_where_function(PyObject *mod, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    static const char *const names[] = {"condition", "input", "other"};
    PyObject *argv[3] = {NULL, NULL, NULL};
    if (cddp_ew_parse("where", args, nargs, kwnames, names, 3, 3, 1, argv) < 0)
        return NULL;
    if (!argv[1] && !argv[2]) {      /* where(condition): nonzero(condition, as_tuple=True) */
        PyObject *name, *kw, *res = NULL;
        PyObject *call[2] = {argv[0], Py_True};
        if (!cddp_ew_tensor_arg(argv[0], "where", "condition"))
            return NULL;
        name = PyUnicode_FromString("nonzero");
        kw = Py_BuildValue("(s)", "as_tuple");
        if (name && kw)
            res = PyObject_VectorcallMethod(name, call, 1, kw);
        Py_XDECREF(name);
        Py_XDECREF(kw);
        return res;
    }
    if (!argv[1] || !argv[2]) {
        PyErr_Format(PyExc_TypeError, "where() missing required argument '%s'",
                     argv[1] ? "other" : "input");
        return NULL;
    }
    if (cddp_is_complex_obj(argv[1]) || cddp_is_complex_obj(argv[2]))  /* cddp/_complex.py */
        return cddp_complex_call("_where_call", NULL, argv, 3, NULL);
    return where_py(argv[0], argv[1], argv[2]);
}

PyObject *cddp_ew_where_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char *const names[] = {"condition", "other"};
    PyObject *argv[2] = {NULL, NULL};
    if (cddp_ew_parse("where", args, nargs, kwnames, names, 2, 2, 2, argv) < 0)
        return NULL;
    return where_py(argv[0], self, argv[1]);
}
