/* core/tensor_core.c — the C API every op file builds on: allocation, views, NumPy interop,
 * dtype-converting copies, broadcasting and its reduction for autograd.
 *
 * Mirrors: at::empty / as_strided / contiguous / to(dtype) / copy_ / infer_size / sum_to.
 * Strides are in elements; byte strides appear only inside iteration.
 */
#include "core/cddp.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

cddp_state_t *cddp_state_ptr;

int64_t cddp_numel(const TensorObject *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

void cddp_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 1 ? shape[d] : 1;
    }
}

int cddp_span_end(int nd, const int64_t *shape, const int64_t *st, int64_t off,
                  int64_t *end)
{
    int64_t step;
    *end = off;
    for (int d = 0; d < nd; d++)
        if (shape[d] == 0)
            return 0;
    if (__builtin_add_overflow(off, 1, end))
        return -1;
    for (int d = 0; d < nd; d++)
        if (__builtin_mul_overflow(shape[d] - 1, st[d], &step) ||
            __builtin_add_overflow(*end, step, end))
            return -1;
    return 0;
}

int cddp_self_overlapping(int nd, const int64_t *shape, const int64_t *st)
{
    int idx[CDDP_MAX_DIMS], n = 0;
    int64_t reach = 1;                 /* elements spanned by the dims taken so far */
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0)
            return 0;
        if (shape[d] > 1)
            idx[n++] = d;
    }
    for (int i = 1; i < n; i++) {      /* by increasing stride */
        int k = idx[i], j = i;
        for (; j > 0 && st[idx[j - 1]] > st[k]; j--)
            idx[j] = idx[j - 1];
        idx[j] = k;
    }
    for (int i = 0; i < n; i++) {
        if (st[idx[i]] < reach)
            return 1;
        reach += (shape[idx[i]] - 1) * st[idx[i]];
    }
    return 0;
}

int cddp_is_contiguous(const TensorObject *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 0)
            return 1;
        if (t->shape[d] != 1 && t->strides[d] != s)
            return 0;
        s *= t->shape[d];
    }
    return 1;
}

void cddp_vcounter_release(TensorObject *t)
{
    if (t->vc && --t->vc->refcnt == 0)
        PyMem_Free(t->vc);
    t->vc = NULL;
}

static TensorObject *tensor_alloc(void)
{
    PyTypeObject *tp = cddp_state()->tensor_type;
    return (TensorObject *)tp->tp_alloc(tp, 0);
}

/* zero: 0 uninitialized, 1 zeroed, 2 a meta storage */
static TensorObject *tensor_new(cddp_dtype dt, int ndim, const int64_t *shape, int zero)
{
    int64_t n = 1;
    TensorObject *t = NULL;
    if (ndim < 0 || ndim > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %d",
                     CDDP_MAX_DIMS, ndim);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "Trying to create tensor with negative dimension %lld: dimension %d",
                         (long long)shape[d], d);
            return NULL;
        }
        if (shape[d] && n > INT64_MAX / 16 / shape[d]) {
            PyErr_SetString(PyExc_RuntimeError, "tensor size overflows int64");
            return NULL;
        }
        n *= shape[d];
    }
    t = tensor_alloc();
    if (!t)
        return NULL;
    t->storage = zero == 2 ? cddp_storage_new_meta((size_t)n * cddp_dtype_size[dt])
                           : cddp_storage_new((size_t)n * cddp_dtype_size[dt], zero);
    if (!t->storage) {
        Py_DECREF(t);
        return NULL;
    }
    t->ndim = ndim;
    t->dtype = dt;
    if (ndim)
        memcpy(t->shape, shape, sizeof(int64_t) * ndim);
    cddp_contiguous_strides(ndim, t->shape, t->strides);
    return t;
}

TensorObject *cddp_tensor_new(cddp_dtype dt, int ndim, const int64_t *shape, int zero)
{
    return tensor_new(dt, ndim, shape, zero != 0);
}

TensorObject *cddp_tensor_new_meta(cddp_dtype dt, int ndim, const int64_t *shape)
{
    return tensor_new(dt, ndim, shape, 2);
}

int cddp_refuse_meta(const TensorObject *t, const char *op)
{
    if (!cddp_is_meta(t))
        return 0;
    PyErr_Format(PyExc_NotImplementedError,
                 "%s: the tensor is on the meta device and has no data (materialize it first, "
                 "e.g. module.to_empty(device='cpu') and initialize it)", op);
    return -1;
}

TensorObject *cddp_tensor_alias(TensorObject *base, int ndim, const int64_t *shape,
                                const int64_t *strides, int64_t offset)
{
    TensorObject *t;
    int64_t n = 1;
    if (ndim > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return NULL;
    }
    int over = 0, neg = 0, zero = 0;
    for (int d = 0; d < ndim; d++) {    /* the same bound as tensor_new: numel * 16 fits */
        neg |= shape[d] < 0;
        zero |= shape[d] == 0;
        over |= __builtin_mul_overflow(n, shape[d], &n);
    }
    if (neg || (!zero && (over || n > INT64_MAX / 16))) {
        PyErr_SetString(PyExc_RuntimeError, neg ? "a view with a negative size"
                        : "numel: integer multiplication overflow (the view's element count "
                          "overflows int64)");
        return NULL;
    }
    t = tensor_alloc();
    if (!t)
        return NULL;
    t->storage = base->storage;
    cddp_storage_incref(t->storage);
    if ((t->vc = base->vc))
        t->vc->refcnt++;
    t->offset = offset;
    t->ndim = ndim;
    t->dtype = base->dtype;
    if (ndim) {
        memcpy(t->shape, shape, sizeof(int64_t) * ndim);
        memcpy(t->strides, strides, sizeof(int64_t) * ndim);
    }
    return t;
}

TensorObject *cddp_scalar_tensor(double v, cddp_dtype dt)
{
    TensorObject *t = cddp_tensor_new(dt, 0, NULL, 0);
    if (!t)
        return NULL;
    cddp_store_double(dt, cddp_data(t), v);
    return t;
}

double cddp_get_double(const TensorObject *t, int64_t flat)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (flat % t->shape[d]) * t->strides[d];
        flat /= t->shape[d];
    }
    char *p = (char *)t->storage->data + (t->offset + off) * (int64_t)cddp_dtype_size[t->dtype];
    return cddp_load_double(t->dtype, p);
}

/* ---- converting copy ------------------------------------------------------------------ */

typedef struct { cddp_dtype dst, src; } copy_ctx;

static void copy_loop(char **p, const int64_t *st, int64_t n, void *ctx)
{
    const copy_ctx *c = ctx;
    int64_t s0 = st[0], s1 = st[1];
    if (c->src == c->dst) {
        size_t sz = cddp_dtype_size[c->dst];
        if (s0 == (int64_t)sz && s1 == (int64_t)sz) {
            memmove(p[0], p[1], (size_t)n * sz);
            return;
        }
    }
    cddp_convert(c->dst, p[0], s0, c->src, p[1], s1, n);
}

int cddp_check_writable(const TensorObject *t)
{
    int shared = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0)
            return 0;
        shared |= t->strides[d] == 0 && t->shape[d] > 1;
    }
    if (!shared)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "unsupported operation: more than one element of the "
                    "written-to tensor refers to a single memory location. Please clone() the "
                    "tensor before performing the operation.");
    return -1;
}

int cddp_copy_into(TensorObject *dst, TensorObject *src)
{
    int64_t bst[2][CDDP_MAX_DIMS];
    int64_t sst[CDDP_MAX_DIMS];
    char *ptrs[2] = {cddp_data(dst), cddp_data(src)};
    copy_ctx c = {dst->dtype, src->dtype};
    if (cddp_broadcast_strides(src, dst->ndim, dst->shape, sst) < 0)
        return -1;
    if (cddp_is_meta(dst))              /* shapes checked; a meta tensor keeps no values */
        return 0;
    for (int d = 0; d < dst->ndim; d++) {
        bst[0][d] = dst->strides[d] * (int64_t)cddp_dtype_size[dst->dtype];
        bst[1][d] = sst[d] * (int64_t)cddp_dtype_size[src->dtype];
    }
    if (cddp_numel(dst) > CDDP_GIL_FREE_ELEMS) {     /* pure C below: let other threads run */
        Py_BEGIN_ALLOW_THREADS
        cddp_iterate_ordered(2, dst->ndim, dst->shape, ptrs,
                             (const int64_t (*)[CDDP_MAX_DIMS])bst, copy_loop, &c);
        Py_END_ALLOW_THREADS
    } else {
        cddp_iterate_ordered(2, dst->ndim, dst->shape, ptrs,
                             (const int64_t (*)[CDDP_MAX_DIMS])bst, copy_loop, &c);
    }
    cddp_bump_version(dst);
    return 0;
}

TensorObject *cddp_tensor_contiguous_raw(TensorObject *t)
{
    TensorObject *out;
    if (cddp_is_contiguous(t))
        return (TensorObject *)Py_NewRef(t);
    out = cddp_tensor_new(t->dtype, t->ndim, t->shape, 0);
    if (out && cddp_copy_into(out, t) < 0)
        Py_CLEAR(out);
    return out;
}

TensorObject *cddp_tensor_cast_raw(TensorObject *t, cddp_dtype dt)
{
    TensorObject *out;
    if (t->dtype == dt)
        return (TensorObject *)Py_NewRef(t);
    out = cddp_tensor_new(dt, t->ndim, t->shape, 0);
    if (out && cddp_copy_into(out, t) < 0)
        Py_CLEAR(out);
    return out;
}

TensorObject *cddp_tensor_cast_steal(TensorObject *t, cddp_dtype dt)
{
    TensorObject *c;
    if (!t || t->dtype == dt)
        return t;
    c = cddp_tensor_cast_raw(t, dt);
    Py_DECREF(t);
    return c;
}

/* ---- broadcasting --------------------------------------------------------------------- */

static void format_shape(char *buf, size_t cap, int nd, const int64_t *s)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < nd && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)s[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

int cddp_broadcast_shapes(int na, const int64_t *sa, int nb, const int64_t *sb,
                          int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    int64_t res[CDDP_MAX_DIMS];          /* out may alias sa/sb: write it only at the end */
    if (n > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return -1;
    }
    for (int i = n - 1; i >= 0; i--) {        /* from the last dim: torch names that mismatch */
        int ia = na - n + i, ib = nb - n + i;
        int64_t a = ia >= 0 ? sa[ia] : 1, b = ib >= 0 ? sb[ib] : 1;
        if (a != b && a != 1 && b != 1) {
            char ba[256], bb[256];
            format_shape(ba, sizeof ba, na, sa);
            format_shape(bb, sizeof bb, nb, sb);
            PyErr_Format(PyExc_RuntimeError,
                         "The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                         "non-singleton dimension %d (shapes %s and %s)",
                         (long long)a, (long long)b, i, ba, bb);
            return -1;
        }
        res[i] = a == 1 ? b : a;
    }
    memcpy(out, res, sizeof(int64_t) * (size_t)n);
    *nout = n;
    return 0;
}

int cddp_broadcast_strides(const TensorObject *t, int ndim, const int64_t *shape,
                           int64_t *strides)
{
    int off = ndim - t->ndim, d = 0;
    if (off < 0)
        goto fail;
    for (; d < ndim; d++) {
        int td = d - off;
        if (td < 0) {
            strides[d] = 0;
        } else if (t->shape[td] == shape[d]) {
            strides[d] = t->strides[td];
        } else if (t->shape[td] == 1) {
            strides[d] = 0;
        } else {
            goto fail;
        }
    }
    return 0;
fail:
    if (off >= 0) {                  /* torch's words (copy_, expand_as, in-place operands) */
        PyErr_Format(PyExc_RuntimeError, "The size of tensor a (%lld) must match the size of "
                     "tensor b (%lld) at non-singleton dimension %d", (long long)shape[d],
                     (long long)t->shape[d - off], d);
    } else {
        char bt[256], bs[256];
        format_shape(bt, sizeof bt, t->ndim, t->shape);
        format_shape(bs, sizeof bs, ndim, shape);
        PyErr_Format(PyExc_RuntimeError,
                     "The expanded size of the tensor %s must match the target size %s", bt, bs);
    }
    return -1;
}

/* dst (+)= src elementwise over dst's shape, src viewed with byte strides. */
typedef struct { cddp_dtype dt; } acc_ctx;

/* dst (+)= src for a storage dtype: both widened in blocks, added in the compute dtype
 * (integers wrap), rounded once per element as torch's `grad += new_grad` in float16. */
static void acc_narrow(cddp_dtype dt, char **p, const int64_t *st, int64_t n)
{
    union { float f[256]; uint32_t u[256]; } a, b;
    for (int64_t k = 0; k < n; k += 256) {
        int64_t m = n - k < 256 ? n - k : 256;
        cddp_widen(dt, a.f, p[0] + k * st[0], st[0], m);
        cddp_widen(dt, b.f, p[1] + k * st[1], st[1], m);
        if (cddp_is_floating(dt))
            for (int64_t i = 0; i < m; i++)
                a.f[i] += b.f[i];
        else
            for (int64_t i = 0; i < m; i++)
                a.u[i] += b.u[i];
        cddp_narrow(dt, p[0] + k * st[0], st[0], a.f, m);
    }
}

static void acc_loop(char **p, const int64_t *st, int64_t n, void *ctx)
{
    const acc_ctx *c = ctx;
    if (c->dt == CDDP_FLOAT32) {
        if (st[0] == 4 && st[1] == 4) {
            float *d = (float *)p[0]; const float *s = (const float *)p[1];
            for (int64_t i = 0; i < n; i++) d[i] += s[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                *(float *)(p[0] + i * st[0]) += *(const float *)(p[1] + i * st[1]);
        }
    } else if (c->dt == CDDP_FLOAT64) {
        if (st[0] == 8 && st[1] == 8) {
            double *d = (double *)p[0]; const double *s = (const double *)p[1];
            for (int64_t i = 0; i < n; i++) d[i] += s[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                *(double *)(p[0] + i * st[0]) += *(const double *)(p[1] + i * st[1]);
        }
    } else if (c->dt == CDDP_INT64) {
        for (int64_t i = 0; i < n; i++)
            *(int64_t *)(p[0] + i * st[0]) += *(const int64_t *)(p[1] + i * st[1]);
    } else if (c->dt == CDDP_INT32) {
        for (int64_t i = 0; i < n; i++)
            *(int32_t *)(p[0] + i * st[0]) += *(const int32_t *)(p[1] + i * st[1]);
    } else if (cddp_is_narrow(c->dt)) {
        acc_narrow(c->dt, p, st, n);
    } else {
        for (int64_t i = 0; i < n; i++)
            *(uint8_t *)(p[0] + i * st[0]) |= *(const uint8_t *)(p[1] + i * st[1]);
    }
}

/* Iterate over `shape` with dst strides dstr and src strides sstr (elements). */
static void acc_strided(TensorObject *dst, const int64_t *dstr, TensorObject *src,
                        const int64_t *sstr, int ndim, const int64_t *shape)
{
    int64_t bst[2][CDDP_MAX_DIMS];
    size_t isz = cddp_dtype_size[dst->dtype];
    char *ptrs[2] = {cddp_data(dst), cddp_data(src)};
    acc_ctx c = {dst->dtype};
    for (int d = 0; d < ndim; d++) {
        bst[0][d] = dstr[d] * (int64_t)isz;
        bst[1][d] = sstr[d] * (int64_t)isz;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    if (n > CDDP_GIL_FREE_ELEMS) {
        Py_BEGIN_ALLOW_THREADS
        cddp_iterate(2, ndim, shape, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])bst, acc_loop, &c);
        Py_END_ALLOW_THREADS
    } else {
        cddp_iterate(2, ndim, shape, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])bst, acc_loop, &c);
    }
}

TensorObject *cddp_sum_to(TensorObject *g, int ndim, const int64_t *shape)
{
    int64_t ostr[CDDP_MAX_DIMS];
    TensorObject *out, *gc;
    int same = g->ndim == ndim && memcmp(g->shape, shape, sizeof(int64_t) * ndim) == 0;
    if (same)
        return (TensorObject *)Py_NewRef(g);
    if (cddp_is_narrow(g->dtype)) {
        /* summed in the compute dtype and rounded once, as torch's sum of float16 */
        TensorObject *w = cddp_tensor_cast_raw(g, cddp_kdt(g->dtype)), *r;
        if (!w)
            return NULL;
        r = cddp_sum_to(w, ndim, shape);
        Py_DECREF(w);
        if (!r)
            return NULL;
        Py_SETREF(r, cddp_tensor_cast_raw(r, g->dtype));
        return r;
    }
    out = cddp_tensor_new(g->dtype, ndim, shape, 1);
    if (!out)
        return NULL;
    /* out viewed at g's shape: 0 strides on the dims that were broadcast */
    if (cddp_broadcast_strides(out, g->ndim, g->shape, ostr) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    gc = (TensorObject *)Py_NewRef(g);
    acc_strided(out, ostr, gc, gc->strides, g->ndim, g->shape);
    Py_DECREF(gc);
    return out;
}

int cddp_accumulate_into(TensorObject *dst, TensorObject *src)
{
    int64_t sstr[CDDP_MAX_DIMS];
    TensorObject *s = src;
    if (src->dtype != dst->dtype) {
        s = cddp_tensor_cast_raw(src, dst->dtype);
        if (!s)
            return -1;
    } else {
        Py_INCREF(s);
    }
    if (cddp_broadcast_strides(s, dst->ndim, dst->shape, sstr) < 0) {
        Py_DECREF(s);
        return -1;
    }
    acc_strided(dst, dst->strides, s, sstr, dst->ndim, dst->shape);
    Py_DECREF(s);
    cddp_bump_version(dst);
    return 0;
}

/* ---- NumPy ---------------------------------------------------------------------------- */

static int npy_to_dtype(int type_num, cddp_dtype *out)
{
    switch (type_num) {
    case NPY_FLOAT32: *out = CDDP_FLOAT32; return 0;
    case NPY_FLOAT64: *out = CDDP_FLOAT64; return 0;
    case NPY_INT64: *out = CDDP_INT64; return 0;
    case NPY_INT32: *out = CDDP_INT32; return 0;
    case NPY_BOOL: *out = CDDP_BOOL; return 0;
    case NPY_FLOAT16: *out = CDDP_FLOAT16; return 0;
    case NPY_UINT8: *out = CDDP_UINT8; return 0;
    case NPY_INT8: *out = CDDP_INT8; return 0;
    case NPY_INT16: *out = CDDP_INT16; return 0;
    default: return -1;
    }
}

/* NumPy's type number for d; -1 for bfloat16, which NumPy has no dtype for. */
int cddp_dtype_to_npy(cddp_dtype d)
{
    static const int map[CDDP_NDTYPES] = {NPY_FLOAT32, NPY_FLOAT64, NPY_INT64, NPY_INT32,
                                          NPY_BOOL, NPY_FLOAT16, -1, NPY_UINT8, NPY_INT8,
                                          NPY_INT16};
    return map[d];
}

TensorObject *cddp_tensor_from_numpy(PyObject *obj)
{
    PyArrayObject *arr = (PyArrayObject *)obj;
    cddp_dtype dt;
    TensorObject *t = NULL;
    int nd;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "expected np.ndarray (got %s)", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (npy_to_dtype(PyArray_TYPE(arr), &dt) < 0 || !PyArray_ISNOTSWAPPED(arr)) {
        PyErr_Format(PyExc_TypeError,
                     "can't convert np.ndarray of type %R. The only supported types are: "
                     "float64, float32, float16, int64, int32, int16, int8, uint8, and bool "
                     "(native byte order).",
                     (PyObject *)PyArray_DESCR(arr));
        return NULL;
    }
    if (!PyArray_ISALIGNED(arr)) {
        PyErr_SetString(PyExc_ValueError,
                        "given numpy array is not aligned to its element size; tensors need "
                        "aligned memory. Copy it first with array.copy().");
        return NULL;
    }
    nd = PyArray_NDIM(arr);
    if (nd > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %d",
                     CDDP_MAX_DIMS, nd);
        return NULL;
    }
    size_t isz = cddp_dtype_size[dt];
    for (int d = 0; d < nd; d++) {
        npy_intp s = PyArray_STRIDES(arr)[d];
        if (s < 0) {
            PyErr_SetString(PyExc_ValueError,
                            "At least one stride in the given numpy array is negative, and "
                            "tensors with negative strides are not currently supported. "
                            "(You can probably work around this by making a copy of your array "
                            " with array.copy().)");
            return NULL;
        }
        if (s % (npy_intp)isz) {
            PyErr_SetString(PyExc_ValueError,
                            "given numpy array strides not a multiple of the element byte size. "
                            "Copy the numpy array to reallocate the memory.");
            return NULL;
        }
    }
    t = tensor_alloc();
    if (!t)
        return NULL;
    /* extent: bytes from data to one past the last element */
    size_t extent = isz;
    for (int d = 0; d < nd; d++)
        extent += (size_t)(PyArray_DIMS(arr)[d] > 0 ? PyArray_DIMS(arr)[d] - 1 : 0) *
                  (size_t)PyArray_STRIDES(arr)[d];
    t->storage = cddp_storage_from_pyobject(PyArray_DATA(arr), extent, obj);
    if (!t->storage) {
        Py_DECREF(t);
        return NULL;
    }
    t->dtype = dt;
    t->ndim = nd;
    for (int d = 0; d < nd; d++) {
        t->shape[d] = PyArray_DIMS(arr)[d];
        t->strides[d] = PyArray_STRIDES(arr)[d] / (npy_intp)isz;
    }
    return t;
}

/* ndarray sharing t's memory; the array's base keeps t (hence the storage) alive. */
PyObject *cddp_tensor_to_numpy(TensorObject *t)
{
    npy_intp dims[CDDP_MAX_DIMS], strides[CDDP_MAX_DIMS];
    PyObject *arr;
    size_t isz = cddp_dtype_size[t->dtype];
    if (cddp_dtype_to_npy(t->dtype) < 0) {
        PyErr_Format(PyExc_TypeError, "Got unsupported ScalarType %s",
                     cddp_dtype_torch_name[t->dtype]);
        return NULL;
    }
    for (int d = 0; d < t->ndim; d++) {
        dims[d] = (npy_intp)t->shape[d];
        strides[d] = (npy_intp)(t->strides[d] * (int64_t)isz);
    }
    arr = PyArray_New(&PyArray_Type, t->ndim, dims, cddp_dtype_to_npy(t->dtype), strides,
                      cddp_data(t), (int)isz, NPY_ARRAY_WRITEABLE, NULL);
    if (!arr)
        return NULL;
    if (PyArray_SetBaseObject((PyArrayObject *)arr, Py_NewRef(t)) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* ---- Python argument helpers ---------------------------------------------------------- */

PyObject *cddp_size_from(int ndim, const int64_t *shape)
{
    PyObject *tup = PyTuple_New(ndim), *res;
    if (!tup)
        return NULL;
    for (int d = 0; d < ndim; d++) {
        PyObject *v = PyLong_FromLongLong(shape[d]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, d, v);
    }
    PyObject *st = cddp_state()->size_type;
    if (!st)
        return tup;
    PyObject *args = PyTuple_Pack(1, tup);
    Py_DECREF(tup);
    if (!args)
        return NULL;
    /* tuple's own constructor for the subclass: Size.__new__ (which checks what users pass)
     * would cost a Python call on every .shape */
    res = PyTuple_Type.tp_new((PyTypeObject *)st, args, NULL);
    Py_DECREF(args);
    return res;
}

int cddp_parse_shape(PyObject *args, int *ndim, int64_t *shape)
{
    PyObject *seq = args;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 1 && !PyLong_Check(PyTuple_GET_ITEM(args, 0)) &&
        !PyIndex_Check(PyTuple_GET_ITEM(args, 0)))
        seq = PyTuple_GET_ITEM(args, 0);
    PyObject *fast = PySequence_Fast(seq, "size must be a sequence of ints");
    if (!fast)
        return -1;
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %zd",
                     CDDP_MAX_DIMS, n);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyIndex_Check(o) || PyBool_Check(o) || PyFloat_Check(o)) {
            PyErr_Format(PyExc_TypeError,
                         "size must be a tuple of ints, but element %zd is %s", i,
                         Py_TYPE(o)->tp_name);
            goto fail;
        }
        shape[i] = PyLong_AsLongLong(o);
        if (shape[i] == -1 && PyErr_Occurred())
            goto fail;
    }
    *ndim = (int)n;
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    return -1;
}

int cddp_is_py_scalar(PyObject *o)
{
    if (PyBool_Check(o))
        return 0;
    if (PyLong_Check(o))
        return 1;
    if (PyFloat_Check(o))
        return 2;
    return -1;
}
