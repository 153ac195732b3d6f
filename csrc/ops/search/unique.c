/* ops/search/unique.c — torch.unique: the distinct elements (or slices along a dim), sorted,
 * with the inverse map and the counts on request.
 *
 * Mirrors torch.unique(input, sorted=True, return_inverse=False, return_counts=False,
 * dim=None) and Tensor.unique: returns the values alone, or a tuple (values, inverse?,
 * counts?) in that order. Values keep the input's dtype; inverse and counts are int64.
 * dim=None: over the flattened input, inverse has the input's shape. dim=d: the distinct
 * slices x[.., i, ..] in lexicographic order, inverse (size_d,). The output is always sorted
 * (torch's sorted=False leaves the order unspecified; sorted is a valid one). NaNs sort last
 * and each is distinct (NaN != NaN), as in torch. Not differentiable (torch neither).
 *
 * Values are compared as double (floats) or int64 (integers, bool): one contiguous copy, a
 * stable sort of positions — LSD radix on order-preserving 64-bit keys for single elements
 * (bytes every key shares are skipped: small integer ranges take two passes), qsort_r with
 * ties by position for slices — then one pass for the groups. Legend: n elements, or S slices of M elements each (dim given).
 */
#include "core/cddp.h"
#include "module.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int flt;                         /* values are double, else int64 */
    const void *v;                   /* S * M values */
    int64_t M;
} cmp_ctx;

/* -1, 0, 1 ordering of elements a, b (NaN last, NaN equal to NaN for sorting only) */
static int cmp_elem(const cmp_ctx *c, int64_t a, int64_t b)
{
    if (c->flt) {
        double x = ((const double *)c->v)[a], y = ((const double *)c->v)[b];
        int nx = isnan(x), ny = isnan(y);
        if (nx || ny)
            return nx - ny;
        return x < y ? -1 : x > y;
    }
    {
        int64_t x = ((const int64_t *)c->v)[a], y = ((const int64_t *)c->v)[b];
        return x < y ? -1 : x > y;
    }
}

/* slices a, b (M elements each) in lexicographic order */
static int cmp_slice(const cmp_ctx *c, int64_t a, int64_t b)
{
    for (int64_t k = 0; k < c->M; k++) {
        int r = cmp_elem(c, a * c->M + k, b * c->M + k);
        if (r)
            return r;
    }
    return 0;
}

static int qcmp(const void *pa, const void *pb, void *ctx)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int r = cmp_slice(ctx, a, b);
    return r ? r : (a > b) - (a < b);
}

/* Whether slices a, b are the same group: equal, NaNs never equal. */
static int same(const cmp_ctx *c, int64_t a, int64_t b)
{
    for (int64_t k = 0; k < c->M; k++) {
        if (c->flt) {
            double x = ((const double *)c->v)[a * c->M + k], y = ((const double *)c->v)[b * c->M + k];
            if (!(x == y))
                return 0;
        } else if (((const int64_t *)c->v)[a * c->M + k] != ((const int64_t *)c->v)[b * c->M + k]) {
            return 0;
        }
    }
    return 1;
}

/* ---- the element sort: LSD radix on order-preserving 64-bit keys --------------------- */

/* The value's bits as an unsigned key whose order is the value's: int64 with the sign bit
 * flipped; doubles sign-flipped (negatives: all bits), every NaN one key above +inf. */
static inline uint64_t sort_key(int flt, const void *v, int64_t i)
{
    uint64_t b;
    if (!flt)
        return (uint64_t)((const int64_t *)v)[i] ^ (1ull << 63);
    double d = ((const double *)v)[i];
    if (isnan(d))
        d = NAN;
    if (d == 0)                      /* -0.0 == 0.0: one key */
        d = 0.0;
    memcpy(&b, &d, 8);
    return b >> 63 ? ~b : b | (1ull << 63);
}

/* The key every NaN gets. */
static uint64_t nan_key(void)
{
    double d = NAN;
    return sort_key(1, &d, 0);
}

/* order[0..n) = positions of v's n elements in sorted order, stable (NaNs last, in position
 * order), and keys[0..n) their sorted keys: 8-bit LSD radix passes over (key, position),
 * skipping the bytes all keys share. 0, or -1 + MemoryError. */
static int sort_elements(int flt, const void *v, int64_t n, int64_t *order, uint64_t *keys)
{
    uint64_t *k = PyMem_Malloc(sizeof(uint64_t) * (size_t)(n + 1));
    int64_t *ix = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (!k || !ix) {
        PyMem_Free(k);
        PyMem_Free(ix);
        PyErr_NoMemory();
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    uint64_t *ks = keys, *kd = k;
    int64_t *is = order, *id = ix;
    for (int64_t i = 0; i < n; i++) {
        ks[i] = sort_key(flt, v, i);
        is[i] = i;
    }
    for (int shift = 0; shift < 64; shift += 8) {
        int64_t count[256] = {0}, at = 0;
        int skip = 0;
        for (int64_t i = 0; i < n; i++)
            count[(ks[i] >> shift) & 255]++;
        for (int b = 0; b < 256; b++) {
            int64_t c = count[b];
            skip |= c == n;
            count[b] = at;
            at += c;
        }
        if (skip)                    /* every key has this byte: the order stands */
            continue;
        for (int64_t i = 0; i < n; i++) {
            int64_t dst = count[(ks[i] >> shift) & 255]++;
            kd[dst] = ks[i];
            id[dst] = is[i];
        }
        uint64_t *tk = ks; ks = kd; kd = tk;
        int64_t *ti = is; is = id; id = ti;
    }
    if (is != order) {
        memcpy(order, is, sizeof(int64_t) * (size_t)n);
        memcpy(keys, ks, sizeof(uint64_t) * (size_t)n);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(k);
    PyMem_Free(ix);
    return 0;
}

/* x with dim moved to the front as a contiguous (S, M) copy in the compare dtype. */
static TensorObject *front_copy(TensorObject *x, int dim, cddp_dtype wdt)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    TensorObject *v, *c;
    int k = 1;
    sh[0] = x->ndim ? x->shape[dim] : 1;
    st[0] = x->ndim ? x->strides[dim] : 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d == dim)
            continue;
        sh[k] = x->shape[d];
        st[k++] = x->strides[d];
    }
    v = cddp_tensor_alias(x, x->ndim ? x->ndim : 1, sh, st, x->offset);
    if (!v)
        return NULL;
    c = cddp_tensor_new(wdt, v->ndim, v->shape, 0);
    if (c && cddp_copy_into(c, v) < 0)
        Py_CLEAR(c);
    Py_DECREF(v);
    return c;
}

/* The unique values (G slices of the sorted groups, x's dtype) laid out as x with dim of size
 * G (dim < 0: 1-D). grp_first[g] = a slice index of group g in w (S, M). */
static TensorObject *gather_groups(TensorObject *x, int dim, TensorObject *w, const int64_t *first,
                                   int64_t G, int64_t M)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], cs[CDDP_MAX_DIMS];
    size_t isz = cddp_dtype_size[w->dtype];
    TensorObject *front, *out, *view;
    int nd = dim < 0 ? 1 : x->ndim, k = 1;
    sh[0] = G;
    for (int d = 0; dim >= 0 && d < x->ndim; d++)
        if (d != dim)
            sh[k++] = x->shape[d];
    front = cddp_tensor_new(w->dtype, nd, sh, 0);     /* (G, rest) in w's dtype */
    if (!front)
        return NULL;
    for (int64_t g = 0; g < G; g++)
        memcpy(cddp_data(front) + g * M * (int64_t)isz, cddp_data(w) + first[g] * M * (int64_t)isz,
               (size_t)M * isz);
    if (dim < 0) {
        out = cddp_tensor_cast_raw(front, x->dtype);
        Py_DECREF(front);
        return out;
    }
    /* back to x's dim order: out (.., G, ..) viewed as (G, rest) receives front */
    memcpy(cs, x->shape, sizeof(int64_t) * x->ndim);
    cs[dim] = G;
    out = cddp_tensor_new(x->dtype, x->ndim, cs, 0);
    if (!out)
        goto done;
    st[0] = out->strides[dim];
    k = 1;
    for (int d = 0; d < x->ndim; d++)
        if (d != dim)
            st[k++] = out->strides[d];
    view = cddp_tensor_alias(out, nd, sh, st, 0);
    if (!view || cddp_copy_into(view, front) < 0)
        Py_CLEAR(out);
    Py_XDECREF(view);
done:
    Py_DECREF(front);
    return out;
}

/* dim < 0: flattened. Returns values or the tuple torch returns. */
static PyObject *unique_impl(TensorObject *x, int dim, int want_inv, int want_cnt, int consec)
{
    int flt = cddp_is_floating(x->dtype);
    TensorObject *w = NULL, *vals = NULL, *inv = NULL, *cnt = NULL;
    int64_t S, M, G = 0, *order = NULL, *first = NULL;
    uint64_t *keys = NULL;
    PyObject *res = NULL;
    cmp_ctx c;
    if (dim < 0) {                   /* the elements in C order, as a (n,) copy */
        int64_t n = cddp_numel(x), one = 1;
        TensorObject *c = cddp_tensor_contiguous_raw(x), *flat;
        flat = c ? cddp_tensor_alias(c, 1, &n, &one, c->offset) : NULL;
        w = flat ? cddp_tensor_cast_raw(flat, flt ? CDDP_FLOAT64 : CDDP_INT64) : NULL;
        Py_XDECREF(c);
        Py_XDECREF(flat);
    } else {
        w = front_copy(x, dim, flt ? CDDP_FLOAT64 : CDDP_INT64);
    }
    if (!w)
        return NULL;
    S = w->ndim ? w->shape[0] : 1;
    M = S ? cddp_numel(w) / S : 0;
    order = PyMem_Malloc(sizeof(int64_t) * (size_t)(S + 1));
    first = PyMem_Malloc(sizeof(int64_t) * (size_t)(S + 1));
    inv = cddp_tensor_new(CDDP_INT64, dim < 0 ? x->ndim : 1, dim < 0 ? x->shape : &S, 0);
    if (!order || !first || !inv) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    c.flt = flt;
    c.v = cddp_data(w);
    c.M = M;
    if (consec) {                    /* unique_consecutive: runs in the given order */
        for (int64_t i = 0; i < S; i++)
            order[i] = i;
    } else if (M == 1) {
        keys = PyMem_Malloc(sizeof(uint64_t) * (size_t)(S + 1));
        if (!keys) {
            PyErr_NoMemory();
            goto done;
        }
        if (sort_elements(flt, c.v, S, order, keys) < 0)
            goto done;
    } else {
        for (int64_t i = 0; i < S; i++)
            order[i] = i;
        Py_BEGIN_ALLOW_THREADS
        qsort_r(order, (size_t)S, sizeof(int64_t), qcmp, &c);
        Py_END_ALLOW_THREADS
    }
    {
        int64_t *iv = (int64_t *)(void *)cddp_data(inv);
        /* groups: sorted keys compare sequentially (each NaN its own group); slices
         * compare their values */
        uint64_t nk = nan_key();
        for (int64_t k = 0; k < S; k++) {
            int fresh = k == 0 || (keys ? keys[k] != keys[k - 1] || (flt && keys[k] == nk)
                                        : !same(&c, order[k - 1], order[k]));
            if (fresh)
                first[G++] = order[k];
            iv[order[k]] = G - 1;
        }
    }
    cnt = cddp_tensor_new(CDDP_INT64, 1, &G, 1);
    if (!cnt)
        goto done;
    {
        const int64_t *iv = (const int64_t *)(void *)cddp_data(inv);
        int64_t *cv = (int64_t *)(void *)cddp_data(cnt);
        for (int64_t k = 0; k < S; k++)
            cv[iv[k]]++;
    }
    if (!(vals = gather_groups(x, dim, w, first, G, M)))
        goto done;
    if (!want_inv && !want_cnt)
        res = Py_NewRef(vals);
    else if (want_inv && want_cnt)
        res = PyTuple_Pack(3, vals, inv, cnt);
    else
        res = PyTuple_Pack(2, vals, want_inv ? inv : cnt);
done:
    Py_XDECREF(w);
    Py_XDECREF(vals);
    Py_XDECREF(inv);
    Py_XDECREF(cnt);
    PyMem_Free(order);
    PyMem_Free(first);
    PyMem_Free(keys);
    return res;
}

/* unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None), or
 * (consec) unique_consecutive(input, return_inverse=False, return_counts=False, dim=None) */
static PyObject *unique_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kw, int consec)
{
    static const char *const unames[] = {"input", "sorted", "return_inverse", "return_counts",
                                         "dim"};
    static const char *const cnames[] = {"input", "", "return_inverse", "return_counts", "dim"};
    const char *const *names = consec ? cnames : unames;
    const char *fn = consec ? "unique_consecutive" : "unique";
    static const int useq[] = {0, 1, 2, 3, 4}, cseq[] = {0, 2, 3, 4};
    const int *seq = consec ? cseq : useq;      /* the slot of each positional argument */
    PyObject *a[5] = {self, NULL, NULL, NULL, NULL};
    int first = self ? 1 : 0, npos = consec ? 4 : 5, flags[3] = {1, 0, 0}, dim = -1;
    Py_ssize_t nkw = kw ? PyTuple_GET_SIZE(kw) : 0;
    TensorObject *x;
    if (nargs > npos - first) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn,
                     npos - first, nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[seq[first + i]] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kw, k);
        int i = self ? 1 : 0;
        while (i < 5 && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == 5 || a[i]) {
            PyErr_Format(PyExc_TypeError, i == 5 ? "%s() got an unexpected keyword argument "
                         "'%U'" : "%s() got multiple values for argument '%U'", fn, key);
            return NULL;
        }
        a[i] = args[nargs + k];
    }
    if (!a[0] || !cddp_tensor_check(a[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", fn,
                     a[0] ? Py_TYPE(a[0])->tp_name : "nothing");
        return NULL;
    }
    x = (TensorObject *)a[0];
    for (int i = 0; i < 3; i++)
        if (a[i + 1] && (flags[i] = PyObject_IsTrue(a[i + 1])) < 0)
            return NULL;
    if (a[4] && a[4] != Py_None) {
        long long d = PyLong_AsLongLong(a[4]);
        int n = x->ndim ? x->ndim : 1;
        if (d == -1 && PyErr_Occurred())
            return NULL;
        if (d < -n || d >= n) {
            PyErr_Format(PyExc_IndexError, "Dimension out of range (expected to be in range of "
                         "[%d, %d], but got %lld)", -n, n - 1, d);
            return NULL;
        }
        dim = (int)(d < 0 ? d + n : d);
    }
    return unique_impl(x, dim, flags[1], flags[2], consec);
}

static PyObject *t_unique(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return unique_binding(s, a, n, kw, 0);
}

static PyObject *m_unique(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return unique_binding(NULL, a, n, kw, 0);
}

static PyObject *t_unique_consecutive(PyObject *s, PyObject *const *a, Py_ssize_t n,
                                      PyObject *kw)
{
    return unique_binding(s, a, n, kw, 1);
}

static PyObject *m_unique_consecutive(PyObject *m, PyObject *const *a, Py_ssize_t n,
                                      PyObject *kw)
{
    return unique_binding(NULL, a, n, kw, 1);
}

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_unique_tensor_methods[] = {
    {"unique", FN(t_unique), FK,
     "unique(sorted=True, return_inverse=False, return_counts=False, dim=None)"},
    {"unique_consecutive", FN(t_unique_consecutive), FK,
     "unique_consecutive(return_inverse=False, return_counts=False, dim=None)"},
    {NULL},
};

PyMethodDef cddp_unique_module_methods[] = {
    {"unique", FN(m_unique), FK,
     "unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None)"},
    {"unique_consecutive", FN(m_unique_consecutive), FK,
     "unique_consecutive(input, return_inverse=False, return_counts=False, dim=None)"},
    {NULL},
};
