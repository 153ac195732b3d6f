/* ops/reduce/minmax.c — value-selecting reductions.
 *
 * Mirrors torch:
 *   max() / min()                      -> 0-dim value        MaxBackward1 (ties share evenly)
 *   max(dim, keepdim=False) / min(...) -> return_types.max(values, indices)   MaxBackward0
 *   max(other) / min(other)            -> cddp.maximum / cddp.minimum (elementwise)
 *   amax(dim=(), keepdim=False) / amin -> values only        AmaxBackward0 (ties share evenly)
 *   argmax(dim=None, keepdim=False) / argmin -> int64 indices (dim=None: into the flattened input)
 * Semantics as torch's CPU kernels: NaN propagates (the first NaN is selected); among equal
 * values the first index wins; bool and integer inputs work (no gradient). Known difference:
 * when amax/amin selects a NaN, its gradient is shared among the NaNs (as torch's max() does)
 * where torch's amax gives NaN everywhere.
 *
 * Rows (inner == 1) take a vector path: a 32-wide max, then a vector search for the first
 * index holding it. Columns (inner > 1) compare LANES positions at once.
 *
 * Layout legend: input as (outer, R, inner) with R the reduced extent (ops/reduce/reduce.h).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")   /* lets the float selects vectorize (as clang) */
#endif
#include "ops/reduce/reduce.h"
#include "module.h"
#include <math.h>
#include <string.h>

#define LANES 256

/* ---- return_types --------------------------------------------------------------------- */

static PyStructSequence_Field rt_fields[] = {
    {"values", "the selected values"}, {"indices", "their positions along dim"}, {NULL, NULL},
};
static PyStructSequence_Desc rt_desc[2] = {
    {"cddp.return_types.max", "max(dim) result: (values, indices)", rt_fields, 2},
    {"cddp.return_types.min", "min(dim) result: (values, indices)", rt_fields, 2},
};

int cddp_return_types_init(PyObject *m, cddp_state_t *st)
{
    for (int k = 0; k < 2; k++)
        if (!(st->return_types[k] = PyStructSequence_NewType(&rt_desc[k])))
            return -1;
    return 0;
}

/* (values, indices) as a return_types.max/min named tuple; steals both references. */
static PyObject *return_pair(int ismin, TensorObject *vals, TensorObject *idx)
{
    PyObject *res = PyStructSequence_New(cddp_state()->return_types[ismin]);
    if (!res) {
        Py_DECREF(vals);
        Py_DECREF(idx);
        return NULL;
    }
    PyStructSequence_SetItem(res, 0, (PyObject *)vals);
    PyStructSequence_SetItem(res, 1, (PyObject *)idx);
    return res;
}

/* ---- kernels -------------------------------------------------------------------------- */

/* Best of one contiguous row (R >= 1) and, when bi is not NULL, its first index. Floats: the
 * vector max, then a vector search for the first element equal to it, or for the first NaN
 * when there is one (a NaN beats any number). Integers and bool: one scalar pass. */
#define FLOAT_ROW(NAME, T, SFX)                                                          \
    static inline T NAME(const T *x, int64_t R, int ismin, int64_t *bi)                  \
    {                                                                                    \
        int nan;                                                                         \
        T m = cddp_rowmax_##SFX(x, R, ismin, &nan);                                      \
        if (nan)                                                                         \
            m = (T)NAN;                                                                  \
        if (!bi)                                                                         \
            return m;                                                                    \
        int64_t r = cddp_find_##SFX(x, R, m);                                            \
        r = r < R ? r : 0;                                                               \
        *bi = r;                                                                         \
        return x[r];                                                                     \
    }
FLOAT_ROW(row_f32, float, f32)
FLOAT_ROW(row_f64, double, f64)

#define INT_ROW(NAME, T)                                                                 \
    static inline T NAME(const T *x, int64_t R, int ismin, int64_t *bi)                  \
    {                                                                                    \
        T b = x[0];                                                                      \
        int64_t best = 0;                                                                \
        for (int64_t r = 1; r < R; r++)                                                  \
            if (ismin ? x[r] < b : x[r] > b) {                                           \
                b = x[r];                                                                \
                best = r;                                                                \
            }                                                                            \
        if (bi)                                                                          \
            *bi = best;                                                                  \
        return b;                                                                        \
    }
INT_ROW(row_i64, int64_t)
INT_ROW(row_i32, int32_t)
INT_ROW(row_u8, uint8_t)

/* vals/idx (outer, inner) = best over R of x (outer, R, inner); either output may be NULL.
 * Columns (inner > 1) run LANES positions at a time: `v CMP b` picks a strictly better value,
 * so ties keep the first index; a NaN beats any number and the first NaN stays (v != v is
 * false for integer types). */
#define SELECT_KERNEL(NAME, T, ROW)                                                      \
    CDDP_CLONES static void NAME(const T *x, T *vals, int64_t *idx, int64_t outer,          \
                              int64_t R, int64_t inner, int ismin)                       \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++) {                                            \
            if (inner == 1) {                                                            \
                int64_t bi = 0;                                                          \
                T b = ROW(x + o * R, R, ismin, idx ? &bi : NULL);                        \
                if (vals)                                                                \
                    vals[o] = b;                                                         \
                if (idx)                                                                 \
                    idx[o] = bi;                                                         \
                continue;                                                                \
            }                                                                            \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                T b[LANES];                                                              \
                int64_t bi[LANES];                                                       \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                const T *xb = x + o * R * inner + i0;                                    \
                for (int64_t i = 0; i < nb; i++) {                                       \
                    b[i] = xb[i];                                                        \
                    bi[i] = 0;                                                           \
                }                                                                        \
                for (int64_t r = 1; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        T v = xb[r * inner + i];                                         \
                        int take = (ismin ? v < b[i] : v > b[i]) |                       \
                                   ((v != v) & (b[i] == b[i]));                          \
                        b[i] = take ? v : b[i];                                          \
                        bi[i] = take ? r : bi[i];                                        \
                    }                                                                    \
                for (int64_t i = 0; i < nb; i++) {                                       \
                    if (vals)                                                            \
                        vals[o * inner + i0 + i] = b[i];                                 \
                    if (idx)                                                             \
                        idx[o * inner + i0 + i] = bi[i];                                 \
                }                                                                        \
            }                                                                            \
        }                                                                                \
    }
SELECT_KERNEL(select_f32, float, row_f32)
SELECT_KERNEL(select_f64, double, row_f64)
SELECT_KERNEL(select_i64, int64_t, row_i64)
SELECT_KERNEL(select_i32, int32_t, row_i32)
SELECT_KERNEL(select_u8, uint8_t, row_u8)

static void select_run(cddp_dtype dt, int ismin, const void *x, void *vals, int64_t *idx,
                       const cddp_rplan *p)
{
    int64_t o = p->outer, R = p->R, in = p->inner;
    switch (dt) {
    case CDDP_FLOAT32: select_f32(x, vals, idx, o, R, in, ismin); break;
    case CDDP_FLOAT64: select_f64(x, vals, idx, o, R, in, ismin); break;
    case CDDP_INT64: select_i64(x, vals, idx, o, R, in, ismin); break;
    case CDDP_INT32: select_i32(x, vals, idx, o, R, in, ismin); break;
    default: select_u8(x, vals, idx, o, R, in, ismin); break;
    }
}

/* gin (outer, R, inner) = g / count where x equals the selected value m (NaN matches NaN),
 * else 0: torch's evenly_distribute_backward / amax backward. */
#define EVEN_BACKWARD(NAME, T)                                                           \
    CDDP_CLONES static void NAME(const T *x, const T *m, const T *g, T *gin, int64_t outer, \
                     int64_t R, int64_t inner)                                           \
    {                                                                                    \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i0 = 0; i0 < inner; i0 += LANES) {                              \
                int64_t cnt[LANES];                                                      \
                int64_t nb = inner - i0 < LANES ? inner - i0 : LANES;                    \
                const T *mb = m + o * inner + i0, *gb = g + o * inner + i0;              \
                for (int64_t i = 0; i < nb; i++)                                         \
                    cnt[i] = 0;                                                          \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        T v = x[(o * R + r) * inner + i0 + i];                           \
                        cnt[i] += (v == mb[i]) | ((v != v) & (mb[i] != mb[i]));          \
                    }                                                                    \
                for (int64_t r = 0; r < R; r++)                                          \
                    for (int64_t i = 0; i < nb; i++) {                                   \
                        int64_t k = (o * R + r) * inner + i0 + i;                        \
                        T v = x[k];                                                      \
                        int eq = (v == mb[i]) | ((v != v) & (mb[i] != mb[i]));           \
                        gin[k] = eq ? (T)(gb[i] / (T)cnt[i]) : (T)0;                     \
                    }                                                                    \
            }                                                                            \
    }
EVEN_BACKWARD(even_bw_f32, float)
EVEN_BACKWARD(even_bw_f64, double)

/* gin (outer, R, inner) = 0 except gin[o, idx[o, i], i] = g[o, i]. */
#define SCATTER_BACKWARD(NAME, T)                                                        \
    static void NAME(const int64_t *idx, const T *g, T *gin, int64_t outer, int64_t R,   \
                     int64_t inner)                                                      \
    {                                                                                    \
        memset(gin, 0, sizeof(T) * (size_t)(outer * R * inner));                         \
        for (int64_t o = 0; o < outer; o++)                                              \
            for (int64_t i = 0; i < inner; i++) {                                        \
                int64_t r = idx[o * inner + i];                                          \
                if (r >= 0 && r < R)                                                     \
                    gin[(o * R + r) * inner + i] = g[o * inner + i];                     \
            }                                                                            \
    }
SCATTER_BACKWARD(scatter_bw_f32, float)
SCATTER_BACKWARD(scatter_bw_f64, double)

/* ---- backward functions --------------------------------------------------------------- */

/* saved: 0 = input, 1 = output (the selected values) */
static int even_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *x, *m, *xl = NULL, *ml = NULL, *g = NULL, *y = NULL;
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(x = cddp_node_saved(self, 0)) || !(m = cddp_node_saved(self, 1)))
        return -1;
    cddp_rplan_from_node(&p, self, 0);
    if (!(xl = cddp_rplan_layout(&p, x, dt)) || !(ml = cddp_rplan_grad(&p, m, dt)) ||
        !(g = cddp_rplan_grad(&p, gout[0], dt)) || !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    int64_t n = p.outer * p.R * p.inner;
    if (dt == CDDP_FLOAT32)
        CDDP_REDUCE_NOGIL(n, even_bw_f32(RDATA(xl), RDATA(ml), RDATA(g),
                                         RDATA(y), p.outer, p.R, p.inner));
    else
        CDDP_REDUCE_NOGIL(n, even_bw_f64(RDATA(xl), RDATA(ml), RDATA(g),
                                         RDATA(y), p.outer, p.R, p.inner));
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(xl);
    Py_XDECREF(ml);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

/* saved: 0 = indices */
static int scatter_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_rplan p;
    TensorObject *idx, *il = NULL, *g = NULL, *y = NULL;
    cddp_dtype dt = cddp_kdt(self->meta[0].dtype);
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(idx = cddp_node_saved(self, 0)))
        return -1;
    cddp_rplan_from_node(&p, self, 0);
    if (!(il = cddp_rplan_grad(&p, idx, CDDP_INT64)) || !(g = cddp_rplan_grad(&p, gout[0], dt)) ||
        !(y = cddp_rplan_new_layout(&p, dt, 0)))
        goto done;
    if (dt == CDDP_FLOAT32)
        scatter_bw_f32(RDATA(il), RDATA(g), RDATA(y), p.outer, p.R, p.inner);
    else
        scatter_bw_f64(RDATA(il), RDATA(g), RDATA(y), p.outer, p.R, p.inner);
    gin[0] = cddp_reduce_to_dtype(cddp_rplan_unlayout(&p, y), self->meta[0].dtype);
    rc = gin[0] ? 0 : -1;
done:
    Py_XDECREF(il);
    Py_XDECREF(g);
    Py_XDECREF(y);
    return rc;
}

/* ---- forward -------------------------------------------------------------------------- */

/* IndexError when a reduced dim is empty (no identity for max/min). */
static int check_nonempty(const char *fname, const cddp_rplan *p)
{
    if (p->R != 0)
        return 0;
    for (int d = 0; d < p->ndim; d++)
        if (((p->mask >> d) & 1) && p->shape[d] == 0) {
            PyErr_Format(PyExc_IndexError,
                         "%s(): Expected reduction dim %d to have non-zero size.", fname, d);
            return -1;
        }
    return 0;
}

/* values and/or indices of x reduced over mask; even != 0 records the evenly-shared gradient
 * (max(), amax), else the index-scatter one (max(dim)). want: 1 values, 2 indices, 3 both. */
static int select_reduce(const char *fname, const char *node_name, TensorObject *x,
                         uint32_t mask, int keep, int ismin, int want, int even,
                         TensorObject **vals, TensorObject **idx)
{
    cddp_rplan p;
    TensorObject *xl = NULL;
    cddp_dtype kt = cddp_kdt(x->dtype);     /* float16 compared as float32: exact */
    int err;
    *vals = *idx = NULL;
    cddp_rplan_init(&p, x->ndim, x->shape, mask, keep, 0);
    if (check_nonempty(fname, &p) < 0 || !(xl = cddp_rplan_layout(&p, x, kt)))
        return -1;
    if (((want & 1) && !(*vals = cddp_tensor_new(kt, p.out_ndim, p.out_shape, 0))) ||
        ((want & 2) && !(*idx = cddp_tensor_new(CDDP_INT64, p.out_ndim, p.out_shape, 0))))
        goto fail;
    void *vp = *vals ? RDATA(*vals) : NULL;
    int64_t *ip = *idx ? (int64_t *)RDATA(*idx) : NULL;
    CDDP_REDUCE_NOGIL(p.outer * p.R * p.inner, select_run(kt, ismin, RDATA(xl), vp, ip, &p));
    Py_CLEAR(xl);
    if (*vals && !(*vals = cddp_reduce_to_dtype(*vals, x->dtype)))
        goto fail;
    if (*vals && cddp_is_floating(x->dtype)) {
        NodeObject *node = cddp_maybe_node(node_name, even ? even_backward : scatter_backward,
                                           1, &x, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(*vals, node, 0);
            cddp_rplan_to_node(&p, node);
            if (even)
                err = cddp_node_save(node, 0, x) < 0 || cddp_node_save_output(node, 1, *vals) < 0;
            else
                err = cddp_node_save_output(node, 0, *idx) < 0;
            Py_DECREF(node);
            if (err)
                goto fail;
        }
    }
    return 0;
fail:
    Py_XDECREF(xl);
    Py_CLEAR(*vals);
    Py_CLEAR(*idx);
    return -1;
}

/* max(other): the elementwise op lives with the binary ops, found by name at call time. */
static PyObject *elementwise(const char *name, PyObject *a, PyObject *b)
{
    PyObject *mod = PyImport_ImportModule("cddp"), *fn = NULL, *res = NULL;
    if (!mod)
        return NULL;
    fn = PyObject_GetAttrString(mod, name);
    if (fn)
        res = PyObject_CallFunctionObjArgs(fn, a, b, NULL);
    else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_NotImplementedError, "cddp.%s is needed for max/min(input, other)",
                     name);
    }
    Py_DECREF(mod);
    Py_XDECREF(fn);
    return res;
}

static PyObject *max_min(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames, int ismin)
{
    static const char *const names[] = {"dim", "keepdim", "other"};
    const char *fname = ismin ? "min" : "max";
    TensorObject *x = (TensorObject *)self, *vals, *idx;
    PyObject *a[3];
    uint32_t mask;
    int keep, d;
    if (cddp_reduce_args(fname, args, nargs, kwnames, names, 3, 2, a) < 0)
        return NULL;
    if (a[0] && cddp_tensor_check(a[0]) && !a[2]) {
        a[2] = a[0];
        a[0] = NULL;
    }
    if (a[2]) {
        if (a[0] || a[1] || !cddp_tensor_check(a[2])) {
            PyErr_Format(PyExc_TypeError, "%s(): expected (other: Tensor) alone, got more "
                         "arguments or a non-Tensor other", fname);
            return NULL;
        }
        return elementwise(ismin ? "minimum" : "maximum", self, a[2]);
    }
    if (!a[0] || a[0] == Py_None) {
        if (a[1]) {
            PyErr_Format(PyExc_TypeError, "%s(): keepdim needs dim", fname);
            return NULL;
        }
        if (cddp_numel(x) == 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "%s(): Expected reduction dim to be specified for input.numel() == 0. "
                         "Specify the reduction dim with the 'dim' argument.", fname);
            return NULL;
        }
        mask = x->ndim ? (uint32_t)((1u << x->ndim) - 1) : 0;
        if (select_reduce(fname, ismin ? "MinBackward1" : "MaxBackward1", x, mask, 0, ismin, 1,
                          1, &vals, &idx) < 0)
            return NULL;
        return (PyObject *)vals;
    }
    if (cddp_reduce_int_dim(fname, a[0], x->ndim, &d) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[1], 0)) < 0)
        return NULL;
    mask = x->ndim ? 1u << d : 0;
    if (select_reduce(fname, ismin ? "MinBackward0" : "MaxBackward0", x, mask, keep, ismin, 3, 0,
                      &vals, &idx) < 0)
        return NULL;
    return return_pair(ismin, vals, idx);
}

PyObject *cddp_reduce_max(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return max_min(self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_min(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return max_min(self, args, nargs, kwnames, 1);
}

PyObject *cddp_reduce_fn_max(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return cddp_reduce_as_function("max", cddp_reduce_max, args, nargs, kwnames);
}

PyObject *cddp_reduce_fn_min(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return cddp_reduce_as_function("min", cddp_reduce_min, args, nargs, kwnames);
}

static const char *const dim_keep[] = {"dim", "keepdim"};

static PyObject *amax_amin(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, int ismin)
{
    const char *fname = ismin ? "amin" : "amax";
    TensorObject *x = (TensorObject *)self, *vals, *idx;
    PyObject *a[2];
    uint32_t mask;
    int keep;
    if (cddp_reduce_args(fname, args, nargs, kwnames, dim_keep, 2, 2, a) < 0 ||
        cddp_reduce_dims(fname, a[0], x->ndim, 1, 1, &mask) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[1], 0)) < 0)
        return NULL;
    if (select_reduce(fname, ismin ? "AminBackward0" : "AmaxBackward0", x, mask, keep, ismin, 1,
                      1, &vals, &idx) < 0)
        return NULL;
    return (PyObject *)vals;
}

PyObject *cddp_reduce_amax(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    return amax_amin(self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_amin(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    return amax_amin(self, args, nargs, kwnames, 1);
}

static PyObject *arg_max_min(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, int ismin)
{
    const char *fname = ismin ? "argmin" : "argmax";
    TensorObject *x = (TensorObject *)self, *vals, *idx;
    PyObject *a[2];
    uint32_t mask;
    int keep, d;
    if (cddp_reduce_args(fname, args, nargs, kwnames, dim_keep, 2, 2, a) < 0 ||
        (keep = cddp_reduce_bool(fname, "keepdim", a[1], 0)) < 0)
        return NULL;
    if (!a[0] || a[0] == Py_None) {
        if (cddp_numel(x) == 0) {
            PyErr_Format(PyExc_IndexError,
                         "%s(): Expected reduction dim to be specified for input.numel() == 0.",
                         fname);
            return NULL;
        }
        /* every dim: the plan's row is the whole C-order input, so r is the flat index */
        mask = x->ndim ? (uint32_t)((1u << x->ndim) - 1) : 0;
    } else {
        if (cddp_reduce_int_dim(fname, a[0], x->ndim, &d) < 0)
            return NULL;
        mask = x->ndim ? 1u << d : 0;
    }
    if (select_reduce(fname, NULL, x, mask, keep, ismin, 2, 0, &vals, &idx) < 0)
        return NULL;
    return (PyObject *)idx;
}

PyObject *cddp_reduce_argmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return arg_max_min(self, args, nargs, kwnames, 0);
}

PyObject *cddp_reduce_argmin(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return arg_max_min(self, args, nargs, kwnames, 1);
}
