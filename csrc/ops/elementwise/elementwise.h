/* ops/elementwise/elementwise.h — what the elementwise op files share: operands (tensor or Python
 * scalar), torch's result-type rules, the runner that drives a kernel over broadcast operands,
 * the loop-generator macros every kernel is written with, and the in-place protocol.
 *
 *   ops/elementwise/elementwise.c         operands, promotion, runner, argument parsing, type slots, tables
 *   ops/elementwise/binary_driver.c       the two-operand driver shared by the binary op files
 *   ops/elementwise/binary.c              add sub mul div remainder fmod, the arithmetic slots
 *   ops/elementwise/binary_pow.c          pow, maximum, minimum
 *   ops/elementwise/binary_compare.c      comparisons, logical and bitwise ops (no gradients)
 *   ops/elementwise/unary.c               exp log sqrt ... sigmoid tanh relu abs neg sign, predicates
 *   ops/elementwise/select.c  clamp (scalar or tensor bounds), where
 *
 * Kernels are cddp_loop_fn's over 1-D runs (byte strides): out first, inputs after. Each loop
 * has a contiguous fast path (and, for two inputs, "one input is a scalar": stride 0) that the
 * compiler vectorizes, and a generic strided path. Integer arithmetic wraps (computed unsigned)
 * as torch's does, so no input can reach C's undefined behaviour.
 */
#ifndef CDDP_KERNELS_ELEMENTWISE_H
#define CDDP_KERNELS_ELEMENTWISE_H

#include "core/cddp.h"
#include <math.h>
#include <string.h>

/* A value in one of the five compute dtypes: scalars converted to a kernel's compute dtype
 * (a float16 scalar is held as the float32 it widens to, a uint8 one as int32). */
typedef union {
    float f32;
    double f64;
    int64_t i64;
    int32_t i32;
    uint8_t b8;
} ew_scalar;

/* Op parameters, in the compute dtype; err is set by kernels that can fail (1 = integer
 * division by zero) and turned into an exception by the caller once the loop is over. */
typedef struct {
    ew_scalar p0, p1;       /* alpha, clamp bounds, ... */
    double d0;              /* float parameter: pow's exponent, a scalar base, ... */
    int err;
} ew_ctx;

/* An operand of a Python-level op: a tensor, or a Python scalar ("wrapped number" in torch's
 * promotion rules). kind: 0 bool, 1 int, 2 float. owned: a tensor made from a NumPy array. */
typedef struct {
    TensorObject *t;        /* borrowed (or owned, see below); NULL for a scalar */
    TensorObject *owned;    /* to release with cddp_ew_operand_clear */
    int kind;
    double d;
    int64_t l;
} ew_operand;

/* One input of the runner: a tensor (any dtype: cast to the kernel's when it differs) or a
 * scalar already stored in the kernel's dtype. */
typedef struct {
    TensorObject *t;
    ew_scalar s;
} ew_src;

/* ---- loop generators -------------------------------------------------------------------- */

/* Every kernel is CDDP_CLONES (common/clones.h): compiled per instruction set, the loader
 * picking one per CPU, so loops vectorize 8 floats wide without a -march flag. Results do not
 * depend on the clone except in files that opt into FMA contraction (unary.c's exp, sigmoid,
 * tanh; nn/activation.c). */
#include "common/clones.h"

/* Inside a kernel, `scalar_t` is the compute type and EW_P(ctx->p0) the parameter in it. */
#define EW_P(u) _Generic((scalar_t)0, float: (u).f32, double: (u).f64, int64_t: (u).i64, \
                         int32_t: (u).i32, default: (u).b8)
#define EW_SZ(T) ((int64_t)sizeof(T))

/* o = EXPR(x) */
#define EW_LOOP1(NAME, OT, T, EXPR)                                                        \
    CDDP_CLONES static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_)          \
    {                                                                                      \
        typedef T scalar_t;                                                                \
        ew_ctx *ctx = ctx_;                                                          \
        (void)ctx; (void)(scalar_t)0;                                                      \
        if (s[0] == EW_SZ(OT) && s[1] == EW_SZ(T)) {                                       \
            OT *o = (OT *)p[0]; const T *a = (const T *)p[1];                              \
            for (int64_t i = 0; i < n; i++) { T x = a[i]; (void)x; o[i] = (OT)(EXPR); }            \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                T x = *(const T *)(p[1] + i * s[1]);                                       \
                (void)x;                                                                   \
                *(OT *)(p[0] + i * s[0]) = (OT)(EXPR);                                     \
            }                                                                              \
        }                                                                                  \
    }

/* o = EXPR(x, y); scalar_t is TA */
#define EW_LOOP2(NAME, OT, TA, TB, EXPR)                                                   \
    CDDP_CLONES static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_)          \
    {                                                                                      \
        typedef TA scalar_t;                                                               \
        ew_ctx *ctx = ctx_;                                                          \
        (void)ctx; (void)(scalar_t)0;                                                      \
        OT *o = (OT *)p[0]; const TA *a = (const TA *)p[1]; const TB *b = (const TB *)p[2]; \
        if (s[0] == EW_SZ(OT) && s[1] == EW_SZ(TA) && s[2] == EW_SZ(TB)) {                 \
            for (int64_t i = 0; i < n; i++) { TA x = a[i]; TB y = b[i]; o[i] = (OT)(EXPR); } \
        } else if (s[0] == EW_SZ(OT) && s[1] == EW_SZ(TA) && s[2] == 0) {                  \
            const TB y = *b;                                                               \
            for (int64_t i = 0; i < n; i++) { TA x = a[i]; o[i] = (OT)(EXPR); }           \
        } else if (s[0] == EW_SZ(OT) && s[1] == 0 && s[2] == EW_SZ(TB)) {                  \
            const TA x = *a;                                                               \
            for (int64_t i = 0; i < n; i++) { TB y = b[i]; o[i] = (OT)(EXPR); }           \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                TA x = *(const TA *)(p[1] + i * s[1]);                                     \
                TB y = *(const TB *)(p[2] + i * s[2]);                                     \
                *(OT *)(p[0] + i * s[0]) = (OT)(EXPR);                                     \
            }                                                                              \
        }                                                                                  \
    }

/* o = EXPR(x, y, z); scalar_t is TA */
#define EW_LOOP3(NAME, OT, TA, TB, TC, EXPR)                                               \
    CDDP_CLONES static void NAME(char **p, const int64_t *s, int64_t n, void *ctx_)          \
    {                                                                                      \
        typedef TA scalar_t;                                                               \
        ew_ctx *ctx = ctx_;                                                          \
        (void)ctx; (void)(scalar_t)0;                                                      \
        if (s[0] == EW_SZ(OT) && s[1] == EW_SZ(TA) && s[2] == EW_SZ(TB) &&                 \
            s[3] == EW_SZ(TC)) {                                                           \
            OT *o = (OT *)p[0]; const TA *a = (const TA *)p[1];                            \
            const TB *b = (const TB *)p[2]; const TC *c = (const TC *)p[3];                \
            for (int64_t i = 0; i < n; i++) {                                              \
                TA x = a[i]; TB y = b[i]; TC z = c[i]; o[i] = (OT)(EXPR);                  \
            }                                                                              \
        } else {                                                                           \
            for (int64_t i = 0; i < n; i++) {                                              \
                TA x = *(const TA *)(p[1] + i * s[1]);                                     \
                TB y = *(const TB *)(p[2] + i * s[2]);                                     \
                TC z = *(const TC *)(p[3] + i * s[3]);                                     \
                *(OT *)(p[0] + i * s[0]) = (OT)(EXPR);                                     \
            }                                                                              \
        }                                                                                  \
    }

/* Float-only kernels for both float dtypes, and a table indexed by cddp_dtype. */
#define EW_FLOAT_LOOPS1(op, EXPR)                                                          \
    EW_LOOP1(op##_f32, float, float, EXPR)                                                 \
    EW_LOOP1(op##_f64, double, double, EXPR)
#define EW_FLOAT_LOOPS2(op, TB32, TB64, EXPR)                                              \
    EW_LOOP2(op##_f32, float, float, TB32, EXPR)                                           \
    EW_LOOP2(op##_f64, double, double, TB64, EXPR)
#define EW_FLOAT_LOOPS3(op, TB32, TC32, TB64, TC64, EXPR)                                  \
    EW_LOOP3(op##_f32, float, float, TB32, TC32, EXPR)                                     \
    EW_LOOP3(op##_f64, double, double, TB64, TC64, EXPR)
/* Kernel tables are indexed by the storage dtype; a storage dtype's entry is its compute
 * dtype's kernel (cddp_kdt), which the runner feeds with widened blocks (ops/elementwise/
 * elementwise.c, the narrow path). A NULL entry: the op refuses that dtype. */
#define EW_TABLE(f32, f64, i64, i32, b8) {f32, f64, i64, i32, b8, f32, f32, i32, i32, i32}
#define EW_FLOAT_TABLE(op) EW_TABLE(op##_f32, op##_f64, NULL, NULL, NULL)

/* ---- shared functions (ops/elementwise/elementwise.c) ----------------------------------------------- */

/* torch's spelling of dtypes in messages: "Float", "Double", "Long", "Int", "Bool", "Half" */
#define cddp_ew_torch_dtype_name cddp_dtype_torch_name

/* Parse o as an operand: 1 ok, 0 not something an elementwise op takes (no error set),
 * -1 error. Tensors are borrowed; NumPy arrays become owned tensors. */
int cddp_ew_operand(PyObject *o, ew_operand *op);
void cddp_ew_operand_clear(ew_operand *op);
/* Like cddp_ew_operand, but a TypeError naming fname/argname when o is not an operand. */
int cddp_ew_operand_arg(PyObject *o, ew_operand *op, const char *fname, const char *argname);
static inline int cddp_ew_operand_needs_grad(const ew_operand *op)
{
    return op->t && cddp_needs_grad(op->t);
}

/* torch.result_type over n operands (dimensioned tensors > 0-dim tensors > scalars, by
 * category bool < integer < floating). */
cddp_dtype cddp_ew_result_type(int n, const ew_operand *ops);
/* The operand's value in dtype dt (a scalar operand only). */
void cddp_ew_scalar_set(ew_scalar *s, cddp_dtype dt, const ew_operand *op);
void cddp_ew_scalar_from_double(ew_scalar *s, cddp_dtype dt, double v);
/* A runner input from an operand: tensors as-is, scalars converted to dt. */
void cddp_ew_src_from(ew_src *src, const ew_operand *op, cddp_dtype dt);
static inline int cddp_ew_can_cast(cddp_dtype from, cddp_dtype to)
{
    /* torch's canCast: no floating -> integral/bool, no integral -> bool */
    if (cddp_is_floating(from) && !cddp_is_floating(to))
        return 0;
    if (from != CDDP_BOOL && to == CDDP_BOOL)
        return 0;
    return 1;
}

/* Run fn elementwise: out[...] = fn(srcs...) over the broadcast shape of the tensor sources.
 * want[i] is the dtype source i is read as (tensors of another dtype are cast into a
 * temporary); fn computes in the compute dtypes: it reads source i as cddp_kdt(want[i]) and
 * writes cddp_kdt(out_dt) (scalar sources are already held in cddp_kdt(want[i])). When a
 * storage dtype is involved the runner widens and narrows around fn in small blocks.
 * out == NULL: a new contiguous tensor of out_dt; otherwise written in place (its dtype must be
 * out_dt and the broadcast shape its shape, else RuntimeError as torch). Kernel errors
 * (ctx->err) become exceptions. New reference (out increfed when given). */
TensorObject *cddp_ew_map(cddp_dtype out_dt, int nin, ew_src *srcs, const cddp_dtype *want,
                          cddp_loop_fn fn, ew_ctx *ctx, TensorObject *out);
/* fn(out, in) with nin == 1 and everything in dtype dt: the common case, written shorter. */
TensorObject *cddp_ew_map1(cddp_dtype out_dt, TensorObject *x, cddp_dtype dt, cddp_loop_fn fn,
                           ew_ctx *ctx);

/* Backward helpers: g (output shaped) summed over broadcast dims to input i's shape and cast
 * to its dtype; steals g. Zeros of input i's shape/dtype. */
TensorObject *cddp_ew_grad_to(TensorObject *g, const cddp_meta *m);
TensorObject *cddp_ew_zeros_like_meta(const cddp_meta *m);
/* Fetch a saved tensor, or (slot empty) the scalar recorded in node->d[1 + slot] as a source. */
int cddp_ew_saved_src(NodeObject *node, int slot, ew_src *src, cddp_dtype dt);
/* Record history for an op result: node named `name` with inputs ops (scalars: no edge),
 * saving the tensor inputs flagged in save_mask (bit i: input i; bit 7: the output). Scalar
 * inputs' values go to node->d[1 + i]. Returns the node (borrowed, owned by out) or NULL;
 * *err set on failure. */
NodeObject *cddp_ew_record(TensorObject *out, const char *name, cddp_backward_fn fn, int n,
                           const ew_operand *ops, int save_mask, int *err);
#define EW_SAVE_OUT 0x80

/* In-place protocol (x.op_(...)), see ops/elementwise/elementwise.c:
 *   rc = cddp_ew_inplace_begin(x, others_need_grad, &old);
 *   rc == 0: compute straight into x (the op's `out` argument), no history.
 *   rc == 1: compute r = op(old, ...) out of place, then cddp_ew_inplace_finish(x, r).
 *   rc < 0: error (leaf requiring grad, ...). */
int cddp_ew_inplace_begin(TensorObject *x, int others_need_grad, TensorObject **old);
PyObject *cddp_ew_inplace_finish(TensorObject *x, TensorObject *r);
/* RuntimeError when a result of dtype `res` cannot be written into `x`. */
int cddp_ew_check_cast(cddp_dtype res, TensorObject *x);

/* Fastcall argument parsing: names[0..nnames) with the first npos positional (the rest
 * keyword-only), the first nreq required; out[] gets borrowed objects or NULL. */
int cddp_ew_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  const char *const *names, int nnames, int npos, int nreq, PyObject **out);
/* self as a tensor for a method/function: TypeError otherwise. */
TensorObject *cddp_ew_tensor_arg(PyObject *o, const char *fname, const char *argname);

/* ---- binary ops (ops/elementwise/binary_driver.c) ----------------------------------------------------- */

/* Compute-dtype loop families: float expression, integer expression (computed unsigned via
 * U64: wraparound, never undefined behaviour), bool expression; tables indexed by cddp_dtype. */
#define U64(v) ((uint64_t)(int64_t)(v))
#define EW_ALL_LOOPS2(op, EF, EI, EB)                                                      \
    EW_LOOP2(op##_f32, float, float, float, EF)                                            \
    EW_LOOP2(op##_f64, double, double, double, EF)                                         \
    EW_LOOP2(op##_i64, int64_t, int64_t, int64_t, EI)                                      \
    EW_LOOP2(op##_i32, int32_t, int32_t, int32_t, EI)                                      \
    EW_LOOP2(op##_b8, uint8_t, uint8_t, uint8_t, EB)
#define EW_ALL_TABLE(op) EW_TABLE(op##_f32, op##_f64, op##_i64, op##_i32, op##_b8)
#define EW_NUM_LOOPS2(op, EF, EI)                                                          \
    EW_LOOP2(op##_f32, float, float, float, EF)                                            \
    EW_LOOP2(op##_f64, double, double, double, EF)                                         \
    EW_LOOP2(op##_i64, int64_t, int64_t, int64_t, EI)                                      \
    EW_LOOP2(op##_i32, int32_t, int32_t, int32_t, EI)
#define EW_NUM_TABLE(op) EW_TABLE(op##_f32, op##_f64, op##_i64, op##_i32, NULL)

/* Inside a backward function: whether input i wants a gradient. */
#define EW_WANTS(i) (self->next[(i)].node != NULL)

typedef struct {
    const ew_operand *alpha;    /* add/sub: NULL means 1 */
    int sub;                    /* add_sub: subtract */
    int mode;                   /* div: 0 true, 1 'trunc', 2 'floor'; mod: 1 fmod, 2 remainder */
} ew_bparams;

/* Every binary op: into == NULL computes a new tensor and records history; into != NULL
 * writes the result into that tensor (the in-place direct path, never recorded). */
typedef TensorObject *(*ew_binary_fn)(ew_operand *a, ew_operand *b, const ew_bparams *p,
                                      TensorObject *into);

/* NotImplementedError "\"<kname>\" not implemented for '<dtype>'" (torch's); returns -1. */
int cddp_ew_not_implemented(const char *kname, cddp_dtype dt);
/* out = fn(a, b) with a, b read in cdt and out written in odt; into as ew_binary_fn. */
TensorObject *cddp_ew_binary_run(ew_operand *a, ew_operand *b, cddp_dtype cdt, cddp_dtype odt,
                                 cddp_loop_fn fn, ew_ctx *ctx, TensorObject *into);
/* The same with the sources already made (cddp_ew_src_from, or a scalar held unrounded). */
TensorObject *cddp_ew_binary_run_srcs(ew_src *s, cddp_dtype cdt, cddp_dtype odt, cddp_loop_fn fn,
                                      ew_ctx *ctx, TensorObject *into);
/* torch's mul/div kernels for float16/bfloat16 read a second operand that is a number or a
 * 0-dim tensor at float precision (original_scalar_value<opmath_t>), not rounded to the
 * dtype: 1 and *src set to that float scalar when it applies here, else 0. */
int cddp_ew_opmath_scalar(const ew_operand *b, cddp_dtype cdt, ew_src *src);
/* History for a floating result of a binary op (d0 into node->d[0]). Steals out. */
TensorObject *cddp_ew_record2(TensorObject *out, const char *name, cddp_backward_fn fn,
                              ew_operand *a, ew_operand *b, int save, double d0);
/* tbl[g dtype] over (g, extra...) in g's dtype; nin extra sources (<= 2). New reference. */
TensorObject *cddp_ew_bw_map(const cddp_loop_fn *tbl, TensorObject *g, int nin, ew_src *extra,
                             ew_ctx *ctx);
/* op(self, other) from Python (TypeError naming the argument); in place through the protocol
 * above when inplace. */
PyObject *cddp_ew_py_binary(PyObject *self, PyObject *other, ew_binary_fn fn,
                            const ew_bparams *p, const char *fname, const char *argname,
                            int inplace);
/* A number slot: NotImplemented when either side is not a tensor or number. */
/* The number slots (a + b, ...): NotImplemented for operands that are not tensors or real
 * numbers; a Python complex number goes to cddp/_complex.py (`op`: the operator module's
 * name of the slot, "mul"). */
PyObject *cddp_ew_slot_binary(PyObject *a, PyObject *b, ew_binary_fn fn, const ew_bparams *p,
                              const char *op);

/* ---- entry points (implemented in the op files, listed in ops/elementwise/elementwise.c's tables) ---- */

/* Method / module-function pairs: cddp_ew_m_<op>(self, args, nargs, kwnames) and
 * cddp_ew_f_<op>(module, args, nargs, kwnames), generated by EW_DEFINE_PY below. */
#define EW_DECLARE_PY(op)                                                                  \
    PyObject *cddp_ew_m_##op(PyObject *self, PyObject *const *args, Py_ssize_t nargs,      \
                             PyObject *kwnames);                                           \
    PyObject *cddp_ew_f_##op(PyObject *mod, PyObject *const *args, Py_ssize_t nargs,       \
                             PyObject *kwnames);

/* The unary ops (ops/elementwise/unary.c): cddp_ew_u_<op>(self, NULL) as a method, (module, input) as a
 * function, and cddp_ew_u_<op>_ in place. */
#define EW_UNARY_LIST(X)                                                                   \
    X(neg) X(abs) X(exp) X(log) X(log2) X(log10) X(log1p) X(expm1) X(sqrt) X(rsqrt) X(sin) \
    X(cos) X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(sigmoid) X(erf) X(reciprocal) X(relu) X(sign) X(square)        \
    X(floor) X(ceil) X(round) X(trunc) X(logical_not) X(bitwise_not) X(isnan) X(isinf)     \
    X(isfinite) X(asinh) X(acosh) X(atanh) X(erfc) X(erfinv) X(exp2) X(lgamma) X(digamma)  \
    X(frac) X(deg2rad) X(rad2deg)

/* `//` and `%` (ops/elementwise/binary.c), for tp slots not wired in core/tensor_type.c yet */

/* impl(self, argv) receives the parsed arguments after self/input. */
#define EW_DEFINE_PY(op, fname, impl, npos, nreq, ...)                                     \
    PyObject *cddp_ew_m_##op(PyObject *self, PyObject *const *args, Py_ssize_t nargs,      \
                             PyObject *kwnames)                                            \
    {                                                                                      \
        static const char *const names[] = {"input", __VA_ARGS__};                         \
        PyObject *argv[sizeof names / sizeof names[0]] = {NULL};                           \
        if (cddp_ew_parse(fname, args, nargs, kwnames, names + 1,                          \
                          (int)(sizeof names / sizeof names[0]) - 1, npos, nreq, argv) < 0) \
            return NULL;                                                                   \
        return impl(self, argv);                                                           \
    }                                                                                      \
    PyObject *cddp_ew_f_##op(PyObject *mod, PyObject *const *args, Py_ssize_t nargs,       \
                             PyObject *kwnames)                                            \
    {                                                                                      \
        /* the functions take torch's keyword-only out= (ops/out_arg.c writes it) */       \
        static const char *const names[] = {"input", __VA_ARGS__, "out"};                  \
        enum { n_ = sizeof names / sizeof names[0] };                                      \
        PyObject *argv[n_] = {NULL};                                                       \
        if (cddp_ew_parse(fname, args, nargs, kwnames, names, n_, (npos) + 1, (nreq) + 1,  \
                          argv) < 0)                                                       \
            return NULL;                                                                   \
        if (argv[n_ - 1])                                                                  \
            return cddp_out_finish(fname, (PyObject *)impl(argv[0], argv + 1),             \
                                   argv[n_ - 1]);                                          \
        return impl(argv[0], argv + 1);                                                    \
    }

#endif
