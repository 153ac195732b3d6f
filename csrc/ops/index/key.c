/* ops/index/key.c — indexing keys: a Python key parsed against a tensor into a cddp_ix_key
 * (ops/index/index.h), the bottom of the indexing files.
 *
 * Mirrors the key rules of torch's python_variable_indexing.cpp (= NumPy's, as torch applies
 * them):
 *
 *   key: int | slice (step > 0) | None | ... | bool | 0-dim int/bool tensor |
 *        int/bool tensor, NumPy array, range or (nested) list | tuple of those
 *
 * A list or range is one index array (x[[0, 2]], x[range(1, 3)], x[[[0, 1], [2, 3]]] a 2-D
 * index): the rule NumPy follows and torch's deprecation warning announces; torch 2.x still
 * reads a short list holding lists, tensors, slices, None or ... as a tuple (with that
 * warning), which cddp refuses or reads as an index array.
 *
 * Each item is classified (int, slice, None, ellipsis, bool, index tensor, mask), then the
 * items are laid over the tensor's dims: ints, slices, None and bools give the basic view's
 * geometry (kept twice: in the real storage and in the contiguous layout of the shape, for
 * backward), index tensors and masks become the advanced indices on the view's dims. A mask's
 * true elements are turned into offsets here, once. Errors are torch's IndexError texts.
 */
#include "ops/index/index.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

/* Contract in ops/index/index.h. */
void cddp_ix_format_shape(char *buf, size_t cap, int nd, const int64_t *s)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < nd && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)s[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* ---- classifying items ---------------------------------------------------------------- */

enum { K_INT, K_SLICE, K_NONE, K_ELL, K_BOOL, K_ADV, K_MASK };

typedef struct {
    int kind;
    int64_t v;                       /* K_INT value, K_BOOL truth */
    Py_ssize_t start, stop, step;    /* K_SLICE, unadjusted */
    TensorObject *t;                 /* K_ADV / K_MASK: owned */
} ix_item;

/* Tuples longer than this cannot be valid: every item but `...` consumes or adds a dim. */
#define IX_MAX_ITEMS (2 * CDDP_MAX_DIMS + 2)

static int bad_key(PyObject *o)
{
    PyErr_Format(PyExc_IndexError,
                 "only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                 "Variables are valid indices (got %s)", Py_TYPE(o)->tp_name);
    return -1;
}

static int item_from_tensor(TensorObject *t, ix_item *it)
{
    if (t->dtype == CDDP_UINT8) {        /* torch: a uint8 index is a (deprecated) bool mask */
        TensorObject *m;
        int rc;
        if (PyErr_WarnEx(PyExc_UserWarning, "indexing with dtype torch.uint8 is now deprecated, "
                         "please use a dtype torch.bool instead.", 1) < 0 ||
            !(m = cddp_tensor_cast_raw(t, CDDP_BOOL)))
            return -1;
        rc = item_from_tensor(m, it);
        Py_DECREF(m);
        return rc;
    }
    if (t->dtype != CDDP_BOOL && t->dtype != CDDP_INT64 && t->dtype != CDDP_INT32) {
        PyErr_SetString(PyExc_IndexError,
                        "tensors used as indices must be long, int, byte or bool tensors");
        return -1;
    }
    if (t->ndim == 0) {              /* a 0-dim tensor acts as the scalar it holds */
        int64_t v = cddp_ix_read_index(t, cddp_data(t));
        it->kind = t->dtype == CDDP_BOOL ? K_BOOL : K_INT;
        it->v = t->dtype == CDDP_BOOL ? v != 0 : v;
        return 0;
    }
    it->kind = t->dtype == CDDP_BOOL ? K_MASK : K_ADV;
    it->t = (TensorObject *)Py_NewRef(t);
    return 0;
}

/* NumPy array or (nested) list/tuple: through NumPy into an int64 or bool tensor. An empty
 * list is an empty int64 index (NumPy would say float64). */
static int item_from_array(PyObject *o, ix_item *it)
{
    PyObject *arr = NULL, *c = NULL;
    TensorObject *t = NULL;
    int tn, want, rc = -1;
    arr = PyArray_FromAny(o, NULL, 0, 0, 0, NULL);
    if (!arr) {
        if (PyErr_ExceptionMatches(PyExc_ValueError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            bad_key(o);
        }
        goto done;
    }
    tn = PyArray_TYPE((PyArrayObject *)arr);
    if (tn == NPY_BOOL) {
        want = NPY_BOOL;
    } else if (PyTypeNum_ISINTEGER(tn) || (PyArray_SIZE((PyArrayObject *)arr) == 0 &&
                                          !PyArray_Check(o))) {
        want = NPY_INT64;
    } else if (PyTypeNum_ISNUMBER(tn)) {
        PyErr_SetString(PyExc_IndexError,
                        "tensors used as indices must be long, int, byte or bool tensors");
        goto done;
    } else {
        bad_key(o);
        goto done;
    }
    c = PyArray_FromAny(arr, PyArray_DescrFromType(want), 0, 0,
                        NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST, NULL);
    if (!c)
        goto done;
    t = cddp_tensor_from_numpy(c);
    if (!t)
        goto done;
    rc = item_from_tensor(t, it);
done:
    Py_XDECREF(t);
    Py_XDECREF(c);
    Py_XDECREF(arr);
    return rc;
}

/* One key element -> item. Slices keep their raw bounds; adjusting needs the dim's size. */
static int classify(PyObject *o, ix_item *it)
{
    it->t = NULL;
    if (o == Py_None) {
        it->kind = K_NONE;
    } else if (o == Py_Ellipsis) {
        it->kind = K_ELL;
    } else if (PySlice_Check(o)) {
        it->kind = K_SLICE;
        if (PySlice_Unpack(o, &it->start, &it->stop, &it->step) < 0)
            return -1;
        if (it->step < 0) {
            PyErr_SetString(PyExc_ValueError, "step must be greater than zero");
            return -1;
        }
    } else if (PyBool_Check(o)) {
        it->kind = K_BOOL;
        it->v = o == Py_True;
    } else if (PyLong_Check(o)) {
        it->kind = K_INT;
        it->v = PyLong_AsLongLong(o);
        if (it->v == -1 && PyErr_Occurred())
            return -1;
    } else if (cddp_tensor_check(o)) {
        return item_from_tensor((TensorObject *)o, it);
    } else if (PyArray_Check(o) || PyList_Check(o) || PyTuple_Check(o) || PyRange_Check(o)) {
        return item_from_array(o, it);
    } else if (PyIndex_Check(o)) {    /* NumPy integer scalars and other __index__ objects */
        PyObject *i = PyNumber_Index(o);
        if (!i)
            return -1;
        it->kind = K_INT;
        it->v = PyLong_AsLongLong(i);
        Py_DECREF(i);
        if (it->v == -1 && PyErr_Occurred())
            return -1;
    } else {
        return bad_key(o);
    }
    return 0;
}

/* ---- laying items over the tensor ----------------------------------------------------- */

/* Contract in ops/index/index.h. */
void cddp_ix_key_clear(cddp_ix_key *k)
{
    for (int j = 0; j < k->nadv; j++)
        Py_CLEAR(k->aidx[j]);
    k->nadv = 0;
}

static int add_dim(cddp_ix_key *k, int64_t size, int64_t st0, int64_t st1)
{
    if (k->nd >= CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_IndexError,
                     "indexing result would have more than %d dimensions (cddp's limit)",
                     CDDP_MAX_DIMS);
        return -1;
    }
    k->shape[k->nd] = size;
    k->st[0][k->nd] = st0;
    k->st[1][k->nd] = st1;
    k->nd++;
    return 0;
}

/* Record index tensor t (new reference stolen) on the last `span` V dims just added. */
static void add_adv(cddp_ix_key *k, TensorObject *t, int din, int span, int mask)
{
    k->adim[k->nadv] = k->nd - span;
    k->aspan[k->nadv] = span;
    k->amask[k->nadv] = (char)mask;
    k->adim_in[k->nadv] = din;
    k->aidx[k->nadv++] = t;
}

/* Offsets of bool tensor m's true elements (C order) along two stride sets rs / vs (m's dims
 * laid over x's): a (nnz,) int64 view with stride 2 whose element e is the offset along rs,
 * followed in memory by the offset along vs. Branch-free inner loop: masks are often random. */
static TensorObject *mask_offsets(TensorObject *m, const int64_t *rs, const int64_t *vs)
{
    int kd = m->ndim;
    int64_t inner = m->shape[kd - 1], ms = m->strides[kd - 1], total = cddp_numel(m);
    int64_t rows = inner ? total / inner : 0, cnt = 0, buflen, two = 2;
    const uint8_t *p0 = (const uint8_t *)cddp_data(m);
    TensorObject *buf = NULL, *out;
    int64_t *o = NULL;
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[CDDP_MAX_DIMS] = {0}, mp = 0, ro = 0, vo = 0;
        if (pass == 1) {
            buflen = 2 * (cnt + 1);                  /* + a spare slot for the last write */
            buf = cddp_tensor_new(CDDP_INT64, 1, &buflen, 0);
            if (!buf)
                return NULL;
            o = (int64_t *)cddp_data(buf);
        }
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *p = p0 + mp;
            if (pass == 0) {
                int64_t c = 0;               /* a local: cnt's address escapes below */
                for (int64_t i = 0; i < inner; i++)
                    c += p[i * ms] != 0;
                cnt += c;
            } else {
                for (int64_t i = 0; i < inner; i++) {
                    o[0] = ro + i * rs[kd - 1];
                    o[1] = vo + i * vs[kd - 1];
                    o += 2 * (p[i * ms] != 0);
                }
            }
            for (int d = kd - 2; d >= 0; d--) {      /* odometer over the outer dims */
                mp += m->strides[d];
                ro += rs[d];
                vo += vs[d];
                if (++idx[d] < m->shape[d])
                    break;
                mp -= m->strides[d] * m->shape[d];
                ro -= rs[d] * m->shape[d];
                vo -= vs[d] * m->shape[d];
                idx[d] = 0;
            }
        }
    }
    out = cddp_tensor_alias(buf, 1, &cnt, &two, 0);
    Py_DECREF(buf);
    return out;
}

/* A bool mask over x dims [din, din + kd): checked against x's shape, then one advanced entry
 * spanning as many new V dims, holding the true elements' offsets. */
static int walk_mask(TensorObject *x, int din, TensorObject *m, const int64_t *xv,
                     cddp_ix_key *k)
{
    TensorObject *offs;
    for (int j = 0; j < m->ndim; j++) {
        if (m->shape[j] != x->shape[din + j]) {
            char bm[256], bx[256];
            cddp_ix_format_shape(bm, sizeof bm, m->ndim, m->shape);
            cddp_ix_format_shape(bx, sizeof bx, x->ndim, x->shape);
            PyErr_Format(PyExc_IndexError,
                         "The shape of the mask %s at index %d does not match the shape of the "
                         "indexed tensor %s at index %d", bm, j, bx, din + j);
            return -1;
        }
    }
    for (int j = 0; j < m->ndim; j++)
        if (add_dim(k, x->shape[din + j], x->strides[din + j], xv[din + j]) < 0)
            return -1;
    offs = mask_offsets(m, x->strides + din, xv + din);
    if (!offs)
        return -1;
    add_adv(k, offs, din, m->ndim, 1);
    return 0;
}

/* Lay the classified items over x: V's geometry and the advanced indices on V's dims. */
static int walk(TensorObject *x, ix_item *items, Py_ssize_t n, int consumed, cddp_ix_key *k)
{
    int64_t xv[CDDP_MAX_DIMS];       /* strides of x's shape laid out contiguously */
    int din = 0;
    cddp_contiguous_strides(x->ndim, x->shape, xv);
    k->off[0] = x->offset;
    k->off[1] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        ix_item *it = &items[i];
        switch (it->kind) {
        case K_INT: {
            int64_t size = x->shape[din], v = it->v;
            if (v < -size || v >= size) {
                PyErr_Format(PyExc_IndexError,
                             "index %lld is out of bounds for dimension %d with size %lld",
                             (long long)v, din, (long long)size);
                return -1;
            }
            if (v < 0)
                v += size;
            k->off[0] += v * x->strides[din];
            k->off[1] += v * xv[din];
            din++;
            k->name = "SelectBackward0";
            break;
        }
        case K_SLICE: {
            Py_ssize_t start = it->start, stop = it->stop, size = (Py_ssize_t)x->shape[din];
            Py_ssize_t len = PySlice_AdjustIndices(size, &start, &stop, it->step);
            if (add_dim(k, len, x->strides[din] * it->step, xv[din] * it->step) < 0)
                return -1;
            /* torch keeps an empty slice's start as its offset (an out= resize of it writes
             * there); AdjustIndices clamps a forward slice's start to [0, size], so the offset
             * is at most the end of the dim. A backward slice's empty start may be -1: 0. */
            if (len > 0 || it->step > 0) {
                k->off[0] += start * x->strides[din];
                k->off[1] += start * xv[din];
            }
            if (!(start == 0 && len == size && it->step == 1))
                k->name = "SliceBackward0";   /* torch skips full slices */
            din++;
            break;
        }
        case K_NONE:
        case K_BOOL: {
            /* unsqueeze's stride, as torch computes it */
            int64_t s0 = din < x->ndim ? x->shape[din] * x->strides[din] : 1;
            int64_t s1 = din < x->ndim ? x->shape[din] * xv[din] : 1;
            if (add_dim(k, 1, s0, s1) < 0)
                return -1;
            if (it->kind == K_NONE) {
                k->name = "UnsqueezeBackward0";
            } else {                 /* True selects the new dim's only element, False none */
                int64_t len = it->v ? 1 : 0;
                TensorObject *z = cddp_tensor_new(CDDP_INT64, 1, &len, 1);
                if (!z)
                    return -1;
                add_adv(k, z, -1, 1, 0);
            }
            break;
        }
        case K_ADV:
            if (add_dim(k, x->shape[din], x->strides[din], xv[din]) < 0)
                return -1;
            add_adv(k, (TensorObject *)Py_NewRef(it->t), din, 1, 0);
            din++;
            break;
        case K_MASK:
            if (walk_mask(x, din, it->t, xv, k) < 0)
                return -1;
            din += it->t->ndim;
            break;
        default:                     /* K_ELL: the dims no other item consumes */
            for (int e = 0; e < x->ndim - consumed; e++, din++)
                if (add_dim(k, x->shape[din], x->strides[din], xv[din]) < 0)
                    return -1;
            break;
        }
    }
    for (; din < x->ndim; din++)
        if (add_dim(k, x->shape[din], x->strides[din], xv[din]) < 0)
            return -1;
    return 0;
}

/* ---- the parser ----------------------------------------------------------------------- */

/* Contract in ops/index/index.h. */
int cddp_ix_parse(TensorObject *x, PyObject *key, cddp_ix_key *k)
{
    ix_item items[IX_MAX_ITEMS];
    PyObject *const *objs = &key;
    Py_ssize_t n = 1, ni = 0;
    int consumed = 0, ell = 0, first_int = -1, rc = -1;
    k->nd = 0;
    k->nadv = 0;
    k->name = "AliasBackward0";
    k->oob = NULL;
    if (PyTuple_Check(key)) {
        n = PyTuple_GET_SIZE(key);
        objs = &PyTuple_GET_ITEM(key, 0);
    }
    if (n > IX_MAX_ITEMS) {
        PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", x->ndim);
        return -1;
    }
    for (; ni < n; ni++) {
        ix_item *it = &items[ni];
        if (classify(objs[ni], it) < 0)
            goto done;
        if (it->kind == K_INT || it->kind == K_SLICE || it->kind == K_ADV) {
            if (it->kind == K_INT && consumed == 0)
                first_int = (int)ni;
            consumed++;
        } else if (it->kind == K_MASK) {
            consumed += it->t->ndim;
        } else if (it->kind == K_ELL && ++ell > 1) {
            PyErr_SetString(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
            ni++;
            goto done;
        }
    }
    if (consumed > x->ndim) {
        if (x->ndim == 0 && first_int >= 0)
            PyErr_SetString(PyExc_IndexError,
                            "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                            "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number");
        else
            PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d",
                         x->ndim);
        goto done;
    }
    rc = walk(x, items, n, consumed, k);
done:
    for (Py_ssize_t i = 0; i < ni; i++)
        Py_XDECREF(items[i].t);
    if (rc < 0)
        cddp_ix_key_clear(k);
    return rc;
}
