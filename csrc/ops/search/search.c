/* ops/search/search.c — binary searches and counting: searchsorted / bucketize, isin,
 * bincount, histc. None is differentiable (torch's neither).
 *
 * Mirrors torch:
 *   searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
 *                sorter=None)   boundaries (L,) or (*B, L) with input (*B, K); input may be a
 *                               number (0-d result). left: first i with seq[i] >= v; right:
 *                               first i with seq[i] > v
 *   bucketize(input, boundaries, *, out_int32=False, right=False)    boundaries (L,)
 *   isin(elements, test_elements, *, assume_unique=False, invert=False)
 *   bincount(input, weights=None, minlength=0)   int64 counts, or sums of weights (float32
 *                                                weights: float32, others: float64)
 *   histc(input, bins=100, min=0, max=0)          min == max: the data's range (widened by
 *                                                 1 when flat); values outside are ignored
 *
 * Values are compared as double when either side is floating, else as int64: each input is
 * read once into a contiguous copy of that type. Legend: L boundaries per row, n inputs.
 */
#include "core/cddp.h"
#include "module.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DATA(t) ((void *)cddp_data(t))

/* Contiguous copy of t in dtype dt (new reference; t itself when it already is one). */
static TensorObject *as_dt(TensorObject *t, cddp_dtype dt)
{
    TensorObject *c = cddp_tensor_cast_raw(t, dt);
    if (c)
        Py_SETREF(c, cddp_tensor_contiguous_raw(c));
    return c;
}

/* a Python number or tensor argument as a tensor (new reference) */
static TensorObject *tensor_or_number(PyObject *o, const char *fn, const char *name)
{
    if (cddp_tensor_check(o))
        return (TensorObject *)Py_NewRef(o);
    if (PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o)) {
        cddp_dtype dt = PyFloat_Check(o) ? CDDP_FLOAT64 : PyBool_Check(o) ? CDDP_BOOL : CDDP_INT64;
        double v = PyFloat_AsDouble(o);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (dt == CDDP_INT64) {      /* exact for large ints */
            TensorObject *t = cddp_tensor_new(CDDP_INT64, 0, NULL, 0);
            long long iv = PyLong_AsLongLong(o);
            if (!t || (iv == -1 && PyErr_Occurred())) {
                Py_XDECREF(t);
                return NULL;
            }
            *(int64_t *)DATA(t) = iv;
            return t;
        }
        return cddp_scalar_tensor(v, dt);
    }
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor or Number, not %s", fn,
                 name, Py_TYPE(o)->tp_name);
    return NULL;
}

/* (input?, positional..., keywords) into a[0..n): a[0] = self for methods; kwonly: the
 * first keyword-only index; the first nreq are required. TypeError as Python's. */
static int parse(const char *fn, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kw, const char *const *names, int n, int kwonly, int nreq,
                 PyObject **a)
{
    int off = self ? 1 : 0;
    Py_ssize_t nkw = kw ? PyTuple_GET_SIZE(kw) : 0;
    for (int i = 0; i < n; i++)
        a[i] = NULL;
    a[0] = self;
    if (nargs > kwonly - off) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given",
                     fn, kwonly - off, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i + off] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kw, k);
        int i = off;
        while (i < n && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == n || a[i]) {
            PyErr_Format(PyExc_TypeError, i == n ? "%s() got an unexpected keyword argument '%U'"
                         : "%s() got multiple values for argument '%U'", fn, key);
            return -1;
        }
        a[i] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!a[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
            return -1;
        }
    }
    return 0;
}

static int flag(PyObject *o, int dflt)
{
    return o && o != Py_None ? PyObject_IsTrue(o) : dflt;
}

static const char *type_name(cddp_dtype d)
{
    return cddp_dtype_torch_name[d];
}

/* ---- searchsorted / bucketize --------------------------------------------------------- */

/* First i in [0, L) with seq[perm[i]] >= v (right: > v), L when none; perm NULL = identity. */
#define BOUND(NAME, T)                                                                     \
    static int64_t NAME(const T *seq, const int64_t *perm, int64_t L, T v, int right)     \
    {                                                                                      \
        int64_t lo = 0, hi = L;                                                            \
        while (lo < hi) {                                                                  \
            int64_t mid = lo + (hi - lo) / 2;                                              \
            T s = seq[perm ? perm[mid] : mid];                                             \
            if (right ? !(v < s) : s < v)                                                  \
                lo = mid + 1;                                                              \
            else                                                                           \
                hi = mid;                                                                  \
        }                                                                                  \
        return lo;                                                                         \
    }
BOUND(bound_f64, double)
BOUND(bound_i64, int64_t)

/* out (v's shape, int64 or int32) = bound of every v in its row of seq. */
static PyObject *search_impl(TensorObject *seq, TensorObject *v, int right, int out32,
                             TensorObject *sorter, const char *fn)
{
    int flt = cddp_is_floating(seq->dtype) || cddp_is_floating(v->dtype);
    cddp_dtype wdt = flt ? CDDP_FLOAT64 : CDDP_INT64;
    TensorObject *s = NULL, *x = NULL, *p = NULL, *out = NULL;
    int64_t L = seq->ndim ? seq->shape[seq->ndim - 1] : 1, n = cddp_numel(v), K;
    if (seq->ndim == 0) {
        PyErr_Format(PyExc_RuntimeError, "%s(): boundaries tensor should have positive "
                     "dimension, but got 0 dimension", fn);
        return NULL;
    }
    if (seq->ndim > 1 && (v->ndim != seq->ndim ||
                          memcmp(v->shape, seq->shape, sizeof(int64_t) * (seq->ndim - 1)))) {
        char b1[256], b2[256];
        size_t k1 = 0, k2 = 0;
        b1[0] = b2[0] = 0;
        for (int d = 0; d < seq->ndim && k1 < 200; d++)
            k1 += (size_t)snprintf(b1 + k1, sizeof b1 - k1, d ? ", %lld" : "%lld",
                                   (long long)seq->shape[d]);
        for (int d = 0; d < v->ndim && k2 < 200; d++)
            k2 += (size_t)snprintf(b2 + k2, sizeof b2 - k2, d ? ", %lld" : "%lld",
                                   (long long)v->shape[d]);
        PyErr_Format(PyExc_RuntimeError, "torch.searchsorted(): boundaries tensor should be 1 "
                     "dimension or the first N-1 dimensions of boundaries tensor and input value "
                     "tensor must match, but we got boundaries tensor [%s] and input value "
                     "tensor [%s]", b1, b2);
        return NULL;
    }
    if (sorter && (sorter->dtype != CDDP_INT64 || sorter->ndim != seq->ndim ||
                   memcmp(sorter->shape, seq->shape, sizeof(int64_t) * seq->ndim))) {
        PyErr_SetString(PyExc_RuntimeError, "torch.searchsorted(): sorter must be a tensor of "
                        "long dtype and the same shape as boundaries");
        return NULL;
    }
    if (!(s = as_dt(seq, wdt)) || !(x = as_dt(v, wdt)) || (sorter && !(p = as_dt(sorter, CDDP_INT64))))
        goto done;
    K = seq->ndim > 1 ? (v->ndim ? v->shape[v->ndim - 1] : 1) : n;
    if (p) {
        const int64_t *pv = DATA(p);
        for (int64_t i = 0; i < cddp_numel(p); i++) {
            if (pv[i] < 0 || pv[i] >= L) {
                PyErr_SetString(PyExc_RuntimeError, "torch.searchsorted(): sorter index out of "
                                "range");
                goto done;
            }
        }
    }
    out = cddp_tensor_new(out32 ? CDDP_INT32 : CDDP_INT64, v->ndim, v->shape, 0);
    if (!out)
        goto done;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = seq->ndim > 1 && K ? i / K : 0, b;
        const int64_t *perm = p ? (const int64_t *)DATA(p) + r * L : NULL;
        if (flt)
            b = bound_f64((const double *)DATA(s) + r * L, perm, L, ((const double *)DATA(x))[i],
                          right);
        else
            b = bound_i64((const int64_t *)DATA(s) + r * L, perm, L, ((const int64_t *)DATA(x))[i],
                          right);
        if (out32)
            ((int32_t *)DATA(out))[i] = (int32_t)b;
        else
            ((int64_t *)DATA(out))[i] = b;
    }
done:
    Py_XDECREF(s);
    Py_XDECREF(x);
    Py_XDECREF(p);
    return (PyObject *)out;
}

static PyObject *m_searchsorted(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kw)
{
    static const char *const names[] = {"sorted_sequence", "input", "out_int32", "right", "side",
                                        "sorter"};
    PyObject *a[6], *res;
    TensorObject *v;
    int right, out32;
    if (parse("searchsorted", NULL, args, nargs, kw, names, 6, 2, 2, a) < 0)
        return NULL;
    if (!cddp_tensor_check(a[0])) {
        PyErr_Format(PyExc_TypeError, "searchsorted(): argument 'sorted_sequence' must be "
                     "Tensor, not %s", Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    if ((right = flag(a[3], 0)) < 0 || (out32 = flag(a[2], 0)) < 0)
        return NULL;
    if (a[4] && a[4] != Py_None) {
        int is_right = PyUnicode_Check(a[4]) && !PyUnicode_CompareWithASCIIString(a[4], "right");
        if (!PyUnicode_Check(a[4]) || (!is_right &&
                                       PyUnicode_CompareWithASCIIString(a[4], "left"))) {
            PyErr_SetString(PyExc_RuntimeError, "torch.searchsorted(): side can only be 'left' "
                            "or 'right'");
            return NULL;
        }
        if (right && !is_right) {
            PyErr_SetString(PyExc_RuntimeError, "torch.searchsorted(): side and right can't be "
                            "set to opposites, got side of left while right was True");
            return NULL;
        }
        right = is_right;
    }
    if (a[5] && a[5] != Py_None && !cddp_tensor_check(a[5])) {
        PyErr_SetString(PyExc_TypeError, "searchsorted(): argument 'sorter' must be Tensor");
        return NULL;
    }
    if (!(v = tensor_or_number(a[1], "searchsorted", "input")))
        return NULL;
    res = search_impl((TensorObject *)a[0], v, right, out32,
                      a[5] && a[5] != Py_None ? (TensorObject *)a[5] : NULL, "torch.searchsorted");
    Py_DECREF(v);
    return res;
}

static PyObject *bucketize_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kw)
{
    static const char *const names[] = {"input", "boundaries", "out_int32", "right"};
    PyObject *a[4], *res;
    TensorObject *v, *b;
    int right, out32;
    if (parse("bucketize", self, args, nargs, kw, names, 4, 2, 2, a) < 0)
        return NULL;
    if (!cddp_tensor_check(a[1])) {
        PyErr_Format(PyExc_TypeError, "bucketize(): argument 'boundaries' must be Tensor, not %s",
                     Py_TYPE(a[1])->tp_name);
        return NULL;
    }
    b = (TensorObject *)a[1];
    if (b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "boundaries tensor must be 1 dimension, but got dim(%d)",
                     b->ndim);
        return NULL;
    }
    if ((right = flag(a[3], 0)) < 0 || (out32 = flag(a[2], 0)) < 0)
        return NULL;
    if (!(v = tensor_or_number(a[0], "bucketize", "input")))
        return NULL;
    res = search_impl(b, v, right, out32, NULL, "torch.bucketize");
    Py_DECREF(v);
    return res;
}

/* ---- isin ----------------------------------------------------------------------------- */

static int cmp_f64(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return isnan(x) || isnan(y) ? isnan(x) - isnan(y) : (x > y) - (x < y);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static PyObject *isin_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"elements", "test_elements", "assume_unique", "invert"};
    PyObject *a[4];
    TensorObject *e = NULL, *t = NULL, *ec = NULL, *tc = NULL, *out = NULL;
    int invert, flt;
    int64_t n, m;
    if (parse("isin", self, args, nargs, kw, names, 4, 2, 2, a) < 0 || (invert = flag(a[3], 0)) < 0)
        return NULL;
    if (!cddp_tensor_check(a[0]) && !cddp_tensor_check(a[1])) {
        PyErr_SetString(PyExc_TypeError, "isin(): at least one of 'elements' and "
                        "'test_elements' must be a Tensor");
        return NULL;
    }
    if (!(e = tensor_or_number(a[0], "isin", "elements")) ||
        !(t = tensor_or_number(a[1], "isin", "test_elements")))
        goto done;
    flt = cddp_is_floating(e->dtype) || cddp_is_floating(t->dtype);
    m = cddp_numel(t);
    if (!(ec = as_dt(e, flt ? CDDP_FLOAT64 : CDDP_INT64)) ||
        !(tc = cddp_tensor_new(flt ? CDDP_FLOAT64 : CDDP_INT64, 1, &m, 0)))
        goto done;
    {
        /* test values, sorted (a private copy), then one binary search per element */
        TensorObject *tv = as_dt(t, tc->dtype);
        if (!tv)
            goto done;
        memcpy(DATA(tc), DATA(tv), (size_t)m * 8);
        Py_DECREF(tv);
    }
    qsort(DATA(tc), (size_t)m, 8, flt ? cmp_f64 : cmp_i64);
    n = cddp_numel(e);
    if (!(out = cddp_tensor_new(CDDP_BOOL, e->ndim, e->shape, 0)))
        goto done;
    for (int64_t i = 0; i < n; i++) {
        int64_t k;
        int hit;
        if (flt) {
            double v = ((const double *)DATA(ec))[i];
            k = bound_f64(DATA(tc), NULL, m, v, 0);
            hit = k < m && ((const double *)DATA(tc))[k] == v;
        } else {
            int64_t v = ((const int64_t *)DATA(ec))[i];
            k = bound_i64(DATA(tc), NULL, m, v, 0);
            hit = k < m && ((const int64_t *)DATA(tc))[k] == v;
        }
        ((uint8_t *)DATA(out))[i] = (uint8_t)(hit != invert);
    }
done:
    Py_XDECREF(e);
    Py_XDECREF(t);
    Py_XDECREF(ec);
    Py_XDECREF(tc);
    return (PyObject *)out;
}

/* ---- bincount / histc ----------------------------------------------------------------- */

static PyObject *bincount_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kw)
{
    static const char *const names[] = {"input", "weights", "minlength"};
    PyObject *a[3] = {NULL, NULL, NULL};
    TensorObject *x, *w = NULL, *xc = NULL, *wc = NULL, *out = NULL;
    int64_t n, len = 0, minlength = 0;
    int off = self ? 1 : 0;
    if (nargs > 3 - off || (nargs + off < 1 && !kw)) {
        PyErr_SetString(PyExc_TypeError, "bincount(input, weights=None, minlength=0)");
        return NULL;
    }
    a[0] = self;
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i + off] = args[i];
    for (Py_ssize_t k = 0; kw && k < PyTuple_GET_SIZE(kw); k++) {
        int i = off;
        while (i < 3 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kw, k), names[i]))
            i++;
        if (i == 3 || a[i]) {
            PyErr_Format(PyExc_TypeError, "bincount() got an unexpected or repeated keyword "
                         "argument '%U'", PyTuple_GET_ITEM(kw, k));
            return NULL;
        }
        a[i] = args[nargs + k];
    }
    if (!a[0] || !cddp_tensor_check(a[0]) ||
        (a[1] && a[1] != Py_None && !cddp_tensor_check(a[1]))) {
        PyErr_SetString(PyExc_TypeError, "bincount(): input and weights must be Tensors");
        return NULL;
    }
    x = (TensorObject *)a[0];
    w = a[1] && a[1] != Py_None ? (TensorObject *)a[1] : NULL;
    if (a[2] && ((minlength = PyLong_AsLongLong(a[2])) == -1 && PyErr_Occurred()))
        return NULL;
    if (cddp_is_floating(x->dtype) || x->dtype == CDDP_BOOL) {
        PyErr_Format(PyExc_NotImplementedError, "\"bincount_cpu\" not implemented for '%s'",
                     type_name(x->dtype));
        return NULL;
    }
    if (minlength < 0) {
        PyErr_SetString(PyExc_RuntimeError, "minlength should be >= 0");
        return NULL;
    }
    n = cddp_numel(x);
    if (x->ndim != 1) {
        PyErr_SetString(PyExc_RuntimeError, "bincount only supports 1-d non-negative integral "
                        "inputs.");
        return NULL;
    }
    if (w && (w->ndim != 1 || w->shape[0] != n)) {
        PyErr_SetString(PyExc_RuntimeError, "weights should be 1-d and have the same length as "
                        "input");
        return NULL;
    }
    if (!(xc = as_dt(x, CDDP_INT64)) || (w && !(wc = as_dt(w, CDDP_FLOAT64))))
        goto done;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ((const int64_t *)DATA(xc))[i];
        if (v < 0) {
            PyErr_SetString(PyExc_RuntimeError, "bincount only supports 1-d non-negative "
                            "integral inputs.");
            goto done;
        }
        len = v + 1 > len ? v + 1 : len;
    }
    len = len > minlength ? len : minlength;
    if (!(out = cddp_tensor_new(w ? CDDP_FLOAT64 : CDDP_INT64, 1, &len, 1)))
        goto done;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = ((const int64_t *)DATA(xc))[i];
        if (w)
            ((double *)DATA(out))[v] += ((const double *)DATA(wc))[i];
        else
            ((int64_t *)DATA(out))[v]++;
    }
    if (w && w->dtype == CDDP_FLOAT32)   /* torch: float32 weights count in float32 */
        Py_SETREF(out, cddp_tensor_cast_raw(out, CDDP_FLOAT32));
done:
    Py_XDECREF(xc);
    Py_XDECREF(wc);
    return (PyObject *)out;
}

static PyObject *histc_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    static const char *const names[] = {"input", "bins", "min", "max"};
    PyObject *a[4];
    TensorObject *x, *xc = NULL, *out = NULL;
    long long bins = 100;
    double lo = 0, hi = 0;
    int64_t n;
    if (parse("histc", self, args, nargs, kw, names, 4, 4, 1, a) < 0)
        return NULL;
    if (!cddp_tensor_check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "histc(): argument 'input' must be Tensor");
        return NULL;
    }
    x = (TensorObject *)a[0];
    if ((a[1] && (bins = PyLong_AsLongLong(a[1])) == -1 && PyErr_Occurred()) ||
        (a[2] && (lo = PyFloat_AsDouble(a[2])) == -1 && PyErr_Occurred()) ||
        (a[3] && (hi = PyFloat_AsDouble(a[3])) == -1 && PyErr_Occurred()))
        return NULL;
    if (!cddp_is_floating(x->dtype)) {
        PyErr_Format(PyExc_NotImplementedError, "\"histogram_cpu\" not implemented for '%s'",
                     type_name(x->dtype));
        return NULL;
    }
    if (bins <= 0) {
        PyErr_Format(PyExc_RuntimeError, "torch.histogram(): bins must be > 0, but got %lld for "
                     "dimension 0", bins);
        return NULL;
    }
    if (lo > hi) {
        PyErr_SetString(PyExc_RuntimeError, "torch.histc: max must be larger than min");
        return NULL;
    }
    if (!(xc = as_dt(x, CDDP_FLOAT64)))
        return NULL;
    n = cddp_numel(x);
    const double *v = DATA(xc);
    if (lo == hi && n > 0) {         /* the data's own range (finite values) */
        lo = INFINITY;
        hi = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
    }
    if (lo == hi) {
        lo -= 1;
        hi += 1;
    }
    if (!isfinite(lo) || !isfinite(hi)) {
        char b[96];                  /* PyErr_Format has no %g */
        snprintf(b, sizeof b, "[%g, %g]", lo, hi);
        PyErr_Format(PyExc_RuntimeError, "torch.histogram(): range of %s is not finite", b);
        goto done;
    }
    {
        int64_t nb = bins;
        if (!(out = cddp_tensor_new(CDDP_FLOAT64, 1, &nb, 1)))
            goto done;
        for (int64_t i = 0; i < n; i++) {
            int64_t b;
            if (!(v[i] >= lo && v[i] <= hi))
                continue;
            b = (int64_t)((v[i] - lo) * (double)bins / (hi - lo));
            b = b >= nb ? nb - 1 : b;
            ((double *)DATA(out))[b] += 1;
        }
        Py_SETREF(out, cddp_tensor_cast_raw(out, x->dtype));
    }
done:
    Py_XDECREF(xc);
    return (PyObject *)out;
}

/* ---- tables --------------------------------------------------------------------------- */

#define PAIR(NAME, CALL)                                                                   \
    static PyObject *t_##NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(s, a, n, kw);                                                          \
    }                                                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(NULL, a, n, kw);                                                       \
    }
static PyObject *m_bucketize(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return bucketize_binding(NULL, a, n, kw);
}
PAIR(bincount, bincount_binding)
PAIR(histc, histc_binding)

static PyObject *m_isin(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return isin_binding(NULL, a, n, kw);
}

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_search_tensor_methods[] = {
    {"bincount", FN(t_bincount), FK, "bincount(weights=None, minlength=0)"},
    {"histc", FN(t_histc), FK, "histc(bins=100, min=0, max=0)"},
    {NULL},
};

PyMethodDef cddp_search_module_methods[] = {
    {"searchsorted", FN(m_searchsorted), FK,
     "searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, "
     "sorter=None)"},
    {"bucketize", FN(m_bucketize), FK,
     "bucketize(input, boundaries, *, out_int32=False, right=False)"},
    {"isin", FN(m_isin), FK, "isin(elements, test_elements, *, assume_unique=False, invert=False)"},
    {"bincount", FN(m_bincount), FK, "bincount(input, weights=None, minlength=0)"},
    {"histc", FN(m_histc), FK, "histc(input, bins=100, min=0, max=0)"},
    {NULL},
};
