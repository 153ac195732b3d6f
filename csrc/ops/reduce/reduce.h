/* ops/reduce/reduce.h — private to the reduction files of ops/reduce/: the hot-loop helpers
 * (vector max/find, pairwise sums, float32 exp), argument parsing for METH_FASTCALL entry
 * points (args.c), dim lists, the reduction plan that views an input as a contiguous
 * (outer, R, inner) block (plan.c), and the entry points reduce.c lists in its tables.
 * File order: reduce.c's header.
 *
 * Plan: the reduced dims are a bitmask over the input's dims. When, ignoring size-1 dims,
 * they form one run, a contiguous input is already (outer, R, inner): no copy. Otherwise (or
 * when a kernel wants contiguous rows, `rows`) the input is permuted so kept dims come first
 * and reduced dims last, and copied: (outer, R, 1). The output of a reduction is always
 * (outer, inner) contiguous, which is the kept dims in their original order.
 */
#ifndef CDDP_OPS_REDUCE_H
#define CDDP_OPS_REDUCE_H
#include "core/cddp.h"
#include <string.h>

/* loops over more elements than this run with the GIL released */
#define CDDP_REDUCE_NOGIL_MIN 65536

#define CDDP_REDUCE_NOGIL(nelem, stmt)                                                   \
    do {                                                                                 \
        if ((nelem) > CDDP_REDUCE_NOGIL_MIN) {                                           \
            Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS                            \
        } else {                                                                         \
            stmt;                                                                        \
        }                                                                                \
    } while (0)

/* ---- vector helpers ------------------------------------------------------------------- */

/* Hot kernels are CDDP_CLONES (common/clones.h): one clone per instruction set, picked by the
 * loader. Only files that opt into contraction (softmax.c, ce_rows.c) round differently in
 * the FMA clone; the reductions round alike in all. */
#include "common/clones.h"

/* exp(x) for float32 in plain C the vectorizer turns into SIMD (libm's expf is a scalar
 * call): Cephes' range reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for
 * e^r, and 2^n built in two factors so results down to the subnormals round correctly.
 * At most 1 ulp from the exact value; exp(-inf) = 0, exp(inf) = inf, NaN stays NaN.
 * The clamps are selects on floats: files using this in loops compile with
 * no-trapping-math (GCC's default would keep those selects as branches). */
CDDP_MATH_INLINE float cddp_exp_f32(float x)
{
    x = x < -104.f ? -104.f : x;                  /* below: e^x rounds to 0 */
    x = x > 89.f ? 89.f : x;                      /* above: overflows to inf */
    float t = x * 1.44269504088896341f + 12582912.f;   /* 1.5 * 2^23: rounds to integer n */
    float n = t - 12582912.f;
    uint32_t ut;
    memcpy(&ut, &t, 4);
    int32_t ni = (int32_t)(ut - 0x4B400000u);     /* n as an integer, from t's low bits */
    float r = x - n * 0.693359375f;               /* ln2 split in two for exactness */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.f;
    int32_t n1 = ni / 2, n2 = ni - n1;
    uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return p * s1 * s2;
}

/* Maximum (or minimum) of a contiguous run, n >= 1, with explicit vectors: compilers do not
 * vectorize a float max reduction under IEEE rules. Four 8-wide accumulators hide the
 * compare/blend latency. *nan says whether the run holds a NaN; the value returned is then
 * unspecified and callers decide what the NaN means. */
typedef float cddp_v8f __attribute__((vector_size(32)));
typedef int32_t cddp_v8i __attribute__((vector_size(32)));
typedef double cddp_v8d __attribute__((vector_size(64)));
typedef int64_t cddp_v8l __attribute__((vector_size(64)));

/* b = v CMP b ? v : b, lane-wise */
#define CDDP_TAKE(VT, VI, v, b, CMP)                                                     \
    do {                                                                                 \
        VI take_ = (VI)((v)CMP(b));                                                      \
        (b) = (VT)(((VI)(v) & take_) | ((VI)(b) & ~take_));                              \
    } while (0)

#define CDDP_ROWBEST(NAME, T, VT, VI, CMP)                                               \
    CDDP_MATH_INLINE T NAME(const T *x, int64_t n, int *nan)                             \
    {                                                                                    \
        int64_t r = 1;                                                                   \
        int bad = x[0] != x[0];                                                          \
        T m = x[0];                                                                      \
        if (n >= 64) {                                                                   \
            VT b0, b1, b2, b3, v0, v1, v2, v3;                                           \
            VI nm;                                                                       \
            memcpy(&b0, x, sizeof b0);                                                   \
            memcpy(&b1, x + 8, sizeof b1);                                               \
            memcpy(&b2, x + 16, sizeof b2);                                              \
            memcpy(&b3, x + 24, sizeof b3);                                              \
            nm = (VI)(b0 != b0) | (VI)(b1 != b1) | (VI)(b2 != b2) | (VI)(b3 != b3);      \
            for (r = 32; r + 32 <= n; r += 32) {                                         \
                memcpy(&v0, x + r, sizeof v0);                                           \
                memcpy(&v1, x + r + 8, sizeof v1);                                       \
                memcpy(&v2, x + r + 16, sizeof v2);                                      \
                memcpy(&v3, x + r + 24, sizeof v3);                                      \
                CDDP_TAKE(VT, VI, v0, b0, CMP);                                          \
                CDDP_TAKE(VT, VI, v1, b1, CMP);                                          \
                CDDP_TAKE(VT, VI, v2, b2, CMP);                                          \
                CDDP_TAKE(VT, VI, v3, b3, CMP);                                          \
                nm |= (VI)(v0 != v0) | (VI)(v1 != v1) | (VI)(v2 != v2) | (VI)(v3 != v3); \
            }                                                                            \
            CDDP_TAKE(VT, VI, b1, b0, CMP);                                              \
            CDDP_TAKE(VT, VI, b3, b2, CMP);                                              \
            CDDP_TAKE(VT, VI, b2, b0, CMP);                                              \
            m = b0[0];                                                                   \
            for (int k = 0; k < 8; k++) {                                                \
                bad |= nm[k] != 0;                                                       \
                m = b0[k] CMP m ? b0[k] : m;                                             \
            }                                                                            \
        }                                                                                \
        for (; r < n; r++) {                                                             \
            T v = x[r];                                                                  \
            bad |= v != v;                                                               \
            m = v CMP m ? v : m;                                                         \
        }                                                                                \
        *nan = bad;                                                                      \
        return m;                                                                        \
    }
CDDP_ROWBEST(cddp_rowmax_f32_, float, cddp_v8f, cddp_v8i, >)
CDDP_ROWBEST(cddp_rowmin_f32_, float, cddp_v8f, cddp_v8i, <)
CDDP_ROWBEST(cddp_rowmax_f64_, double, cddp_v8d, cddp_v8l, >)
CDDP_ROWBEST(cddp_rowmin_f64_, double, cddp_v8d, cddp_v8l, <)

CDDP_MATH_INLINE float cddp_rowmax_f32(const float *x, int64_t n, int ismin, int *nan)
{
    return ismin ? cddp_rowmin_f32_(x, n, nan) : cddp_rowmax_f32_(x, n, nan);
}

CDDP_MATH_INLINE double cddp_rowmax_f64(const double *x, int64_t n, int ismin, int *nan)
{
    return ismin ? cddp_rowmin_f64_(x, n, nan) : cddp_rowmax_f64_(x, n, nan);
}

/* First index r < n with x[r] == m, or with x[r] a NaN when m is one; n when none. Checks 8
 * elements per step with a vector compare. */
#define CDDP_FIND(NAME, T, VT, VI)                                                       \
    CDDP_MATH_INLINE int64_t NAME(const T *x, int64_t n, T m)                            \
    {                                                                                    \
        int64_t r = 0;                                                                   \
        int isnan_m = m != m;                                                            \
        for (; r + 8 <= n; r += 8) {                                                     \
            VT v;                                                                        \
            uint64_t w[sizeof(VI) / 8], any = 0;                                         \
            memcpy(&v, x + r, sizeof v);                                                 \
            VI hit = isnan_m ? (VI)(v != v) : (VI)(v == m);                              \
            memcpy(w, &hit, sizeof w);                                                   \
            for (size_t k = 0; k < sizeof w / 8; k++)                                    \
                any |= w[k];                                                             \
            if (any)                                                                     \
                break;                                                                   \
        }                                                                                \
        for (; r < n; r++)                                                               \
            if (isnan_m ? x[r] != x[r] : x[r] == m)                                      \
                return r;                                                                \
        return n;                                                                        \
    }
CDDP_FIND(cddp_find_f32, float, cddp_v8f, cddp_v8i)
CDDP_FIND(cddp_find_f64, double, cddp_v8d, cddp_v8l)

/* Pairwise summation in double: blocks of CDDP_PW_BLOCK summed with 8 accumulators, block
 * sums combined as a balanced binary tree (a counter merges equal-size partial sums, as
 * NumPy's recursive pairwise sum does, without recursion so hot kernels can inline it).
 * Error grows as O(log n) ulps instead of O(n). */
#define CDDP_PW_BLOCK 128

typedef struct {
    double stack[64];
    int depth;
    int64_t count;
} cddp_pw_acc;

CDDP_MATH_INLINE void cddp_pw_push(cddp_pw_acc *a, double block_sum)
{
    a->stack[a->depth++] = block_sum;
    for (int64_t c = ++a->count; !(c & 1) && a->depth > 1; c >>= 1, a->depth--)
        a->stack[a->depth - 2] += a->stack[a->depth - 1];
}

CDDP_MATH_INLINE double cddp_pw_total(cddp_pw_acc *a, double tail)
{
    while (a->depth > 0)
        tail += a->stack[--a->depth];
    return tail;
}

#define CDDP_PW_SUM(NAME, T)                                                             \
    CDDP_MATH_INLINE double NAME##_block(const T *x, int n) /* n <= CDDP_PW_BLOCK */     \
    {                                                                                    \
        double a[8] = {0., 0., 0., 0., 0., 0., 0., 0.};                                  \
        int i = 0;                                                                       \
        for (; i + 8 <= n; i += 8)                                                       \
            for (int k = 0; k < 8; k++)                                                  \
                a[k] += (double)x[i + k];                                                \
        double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));    \
        for (; i < n; i++)                                                               \
            s += (double)x[i];                                                           \
        return s;                                                                        \
    }                                                                                    \
    CDDP_MATH_INLINE double NAME(const T *x, int64_t n)                                  \
    {                                                                                    \
        cddp_pw_acc acc = {.depth = 0, .count = 0};                                      \
        int64_t b = 0;                                                                   \
        for (; b + CDDP_PW_BLOCK <= n; b += CDDP_PW_BLOCK)                               \
            cddp_pw_push(&acc, NAME##_block(x + b, CDDP_PW_BLOCK));                      \
        return cddp_pw_total(&acc, NAME##_block(x + b, (int)(n - b)));                   \
    }
CDDP_PW_SUM(cddp_pw_sum_f32, float)
CDDP_PW_SUM(cddp_pw_sum_f64, double)

/* sum_c exp(x[c] - m) over a float32 row of n, one pass: 16 float lanes within chunks of
 * 1024 (so the loop vectorizes), each chunk folded into a double (a lane adds at most 64
 * terms in float). With keep, y[c] = exp(x[c] - m) too (softmax); y may then be x. The
 * softmax and cross-entropy row kernels share it, so both agree with each other. Always
 * inlined: an out-of-line copy is compiled for the baseline ISA, not the caller's clone. */
#define CDDP_SUMEXP_CHUNK 1024
#define CDDP_SUMEXP_LANES 16

CDDP_MATH_INLINE double cddp_row_sumexp_f32(const float *x, float *y, int64_t n, float m,
                                            int keep)
{
    double total = 0;
    for (int64_t c0 = 0; c0 < n; c0 += CDDP_SUMEXP_CHUNK) {
        int64_t len = n - c0 < CDDP_SUMEXP_CHUNK ? n - c0 : CDDP_SUMEXP_CHUNK, c = 0;
        const float *xc = x + c0;
        float acc[CDDP_SUMEXP_LANES] = {0}, e;
        if (keep) {
            float *yc = y + c0;
            for (; c + CDDP_SUMEXP_LANES <= len; c += CDDP_SUMEXP_LANES)
                for (int k = 0; k < CDDP_SUMEXP_LANES; k++) {
                    e = cddp_exp_f32(xc[c + k] - m);
                    yc[c + k] = e;
                    acc[k] += e;
                }
            for (; c < len; c++) {
                yc[c] = e = cddp_exp_f32(xc[c] - m);
                acc[0] += e;
            }
        } else {
            for (; c + CDDP_SUMEXP_LANES <= len; c += CDDP_SUMEXP_LANES)
                for (int k = 0; k < CDDP_SUMEXP_LANES; k++)
                    acc[k] += cddp_exp_f32(xc[c + k] - m);
            for (; c < len; c++)
                acc[0] += cddp_exp_f32(xc[c] - m);
        }
        double s = 0;
        for (int k = 0; k < CDDP_SUMEXP_LANES; k++)
            s += acc[k];
        total += s;
    }
    return total;
}

/* Reductions of float16/bfloat16 (and small integers) run their compute dtype's kernels
 * (cddp_kdt) on a converted layout and round the result once, as torch accumulates Half in
 * float. This casts a result (stolen; NULL passes through) to dt: new reference. */
#define cddp_reduce_to_dtype cddp_tensor_cast_steal

/* Untyped data pointer, so kernels taking typed pointers need no casts at call sites. */
#define RDATA(t) ((void *)cddp_data(t))

/* ---- arguments (ops/reduce/args.c) ---------------------------------------------------- */

/* Fill out[0..n) (borrowed, NULL when absent) from FASTCALL positional args and keywords
 * matched by names[k]; only the first npos may be given positionally. A name "dim" also
 * accepts the keywords "axis" and "keepdims" (NumPy spellings, as torch does). TypeError like torch's on too
 * many positionals, an unknown keyword or a duplicate. */
int cddp_reduce_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int npos,
                     PyObject **out);

/* Method entry point shape (self is the Tensor). */
typedef PyObject *(*cddp_reduce_meth)(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames);

/* Module function cddp.<fname>(input, ...) forwarding to the method impl: input is the first
 * positional or the keyword `input`. TypeError when it is not a Tensor. */
PyObject *cddp_reduce_as_function(const char *fname, cddp_reduce_meth impl,
                                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* keepdim (NULL/None -> 0) must be a bool, as torch insists. -1 + TypeError otherwise. */
int cddp_reduce_bool(const char *fname, const char *argname, PyObject *o, int dflt);
/* dtype argument: NULL/None -> *has = 0; else a cddp dtype. -1 on error. */
int cddp_reduce_dtype(PyObject *o, int *has, cddp_dtype *dt);
/* Normalize one dim against ndim (0-dim tensors accept -1 and 0). IndexError like torch. */
int cddp_reduce_norm_dim(int64_t dim, int ndim, int *out);
/* A single int dim (not bool/float/tuple). -1 + TypeError/IndexError. */
int cddp_reduce_int_dim(const char *fname, PyObject *o, int ndim, int *out);
/* dim argument as a bitmask of reduced dims: NULL/None (and, when empty_all, an empty
 * tuple/list) means every dim; an int, or a tuple/list of ints when allow_seq. Duplicates:
 * RuntimeError "dim 0 appears multiple times in the list of dims". */
int cddp_reduce_dims(const char *fname, PyObject *o, int ndim, int allow_seq, int empty_all,
                     uint32_t *mask);
/* torch's scalar type name for messages: Float, Double, Long, Int, Bool. */
const char *cddp_reduce_torch_name(cddp_dtype d);

/* ---- plan (ops/reduce/plan.c) --------------------------------------------------------- */

typedef struct {
    int ndim;                          /* input */
    int64_t shape[CDDP_MAX_DIMS];
    uint32_t mask;                     /* bit d set: dim d is reduced */
    int keepdim;
    int permuted;                      /* layout = input permuted by perm (kept dims first) */
    int perm[CDDP_MAX_DIMS];
    int64_t outer, R, inner;           /* layout of the input as a contiguous block */
    int out_ndim;                      /* output shape (keepdim applied) */
    int64_t out_shape[CDDP_MAX_DIMS];
} cddp_rplan;

/* Plan for reducing dims `mask` of an input of this shape; rows != 0 forces inner == 1. */
void cddp_rplan_init(cddp_rplan *p, int ndim, const int64_t *shape, uint32_t mask,
                     int keepdim, int rows);
/* x (plan's shape, any layout/dtype) as a contiguous block in the plan's layout, cast to dt.
 * New reference (x itself when it already is one). */
TensorObject *cddp_rplan_layout(const cddp_rplan *p, TensorObject *x, cddp_dtype dt);
/* A new contiguous tensor to hold an input-shaped result in the plan's layout. */
TensorObject *cddp_rplan_new_layout(const cddp_rplan *p, cddp_dtype dt, int zero);
/* y from cddp_rplan_new_layout back to the input's shape, contiguous. New reference. */
TensorObject *cddp_rplan_unlayout(const cddp_rplan *p, TensorObject *y);
/* A gradient of the output's shape as a contiguous (outer, inner) block of dtype dt. */
TensorObject *cddp_rplan_grad(const cddp_rplan *p, TensorObject *g, cddp_dtype dt);
/* Rebuild the plan in a backward from the node's meta[0] and i[0] (mask), i[1] (keepdim). */
void cddp_rplan_from_node(cddp_rplan *p, NodeObject *node, int rows);
/* Store mask/keepdim in node->i[0..1] for cddp_rplan_from_node. */
static inline void cddp_rplan_to_node(const cddp_rplan *p, NodeObject *node)
{
    node->i[0] = p->mask;
    node->i[1] = p->keepdim;
}

/* ---- entry points (listed in ops/reduce/reduce.c's tables) ---------------------------- */

/* Tensor methods, METH_FASTCALL | METH_KEYWORDS with self the Tensor; the cddp_reduce_fn_*
 * are module functions taking the input first. New reference, or NULL with an exception. */
/* sum.c */
PyObject *cddp_reduce_sum(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_mean(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_prod(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* var.c */
PyObject *cddp_reduce_var(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_std(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* scan.c */
PyObject *cddp_reduce_cumsum(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* all_any.c */
PyObject *cddp_reduce_all(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_any(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* minmax.c */
PyObject *cddp_reduce_max(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_min(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_amax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_amin(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_argmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_argmin(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_max(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_min(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* softmax.c */
PyObject *cddp_reduce_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_log_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_log_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_logsumexp(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
/* norm.c */
PyObject *cddp_reduce_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_vector_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

#endif
