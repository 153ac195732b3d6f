/* ops/index/index.c — Tensor.__getitem__ / __setitem__: key parsing, basic (view) indexing, and the
 * entry points that hand advanced keys to the element plans of ops/index/index_adv.c.
 *
 * Mirrors torch's python_variable_indexing.cpp (= NumPy's rules, as torch applies them):
 *
 *   t[key]          key: int | slice (step > 0) | None | ... | bool | 0-dim int/bool tensor |
 *                        int/bool tensor, NumPy array or (nested) list | tuple of those
 *       basic items (ints, slices, None, ...) -> a VIEW sharing t's storage (no copy);
 *       any advanced item (index tensors, masks, bools) -> a COPY (gather through a plan).
 *   t[key] = value  value: Tensor (broadcast, dtype converted) or Python scalar; in place.
 *
 * Like torch (and unlike NumPy), ints are applied as views *before* advanced indexing, so
 * `y[0, :, [0, 1]]` on a (3, 4, 5) tensor has shape (4, 2). A list key is always an index
 * array (NumPy >= 1.23; torch's deprecated list-as-tuple reading is not reproduced).
 *
 * Autograd: a view gets one node (named after the last view op: SelectBackward0,
 * SliceBackward0, UnsqueezeBackward0, AliasBackward0) whose backward scatters the gradient into
 * zeros of the input's shape; advanced keys get IndexBackward0 (accumulating duplicates);
 * setitem on a tensor with history records CopySlices / IndexPutBackward0 on the tensor itself.
 * index_put(_) shares setitem's path.
 *
 * Known trap: cddp tensors do not know their view base, so writing into a view (`v = y[0];
 * v[1] = w`) re-points v's grad_fn only: y's history does not see the write (torch rebases y
 * through CopySlices), and a view of a leaf that requires grad is not refused.
 */
#include "ops/index/index.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

enum { K_INT, K_SLICE, K_NONE, K_ELL, K_BOOL, K_ADV, K_MASK };

typedef struct {
    int kind;
    int64_t v;                       /* K_INT value, K_BOOL truth */
    Py_ssize_t start, stop, step;    /* K_SLICE, unadjusted */
    TensorObject *t;                 /* K_ADV / K_MASK: owned */
} ix_item;

/* Tuples longer than this cannot be valid: every item but `...` consumes or adds a dim. */
#define IX_MAX_ITEMS (2 * CDDP_MAX_DIMS + 2)

static const char *const legacy_name[CDDP_NDTYPES] = {
    "FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor"};

static int bad_key(PyObject *o)
{
    PyErr_Format(PyExc_IndexError,
                 "only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                 "Variables are valid indices (got %s)", Py_TYPE(o)->tp_name);
    return -1;
}

static int item_from_tensor(TensorObject *t, ix_item *it)
{
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
    } else if (PyArray_Check(o) || PyList_Check(o) || PyTuple_Check(o)) {
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
            if (len > 0) {           /* an empty slice may start past the end: stay in bounds */
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

/* Parse `key` against x into k (k->nadv owned index tensors; cddp_ix_key_clear releases
 * them, also after a failure). IndexError/ValueError/TypeError with torch's texts. */
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

/* ---- __getitem__ ---------------------------------------------------------------------- */

static PyObject *getitem_adv(TensorObject *x, cddp_ix_key *k, int need_grad)
{
    cddp_iplan rp = {0}, vp = {0};
    TensorObject *out = NULL;
    NodeObject *node = NULL;
    int err;
    if (cddp_ix_plan_adv(k, &rp, need_grad ? &vp : NULL) < 0)
        goto fail;
    out = cddp_tensor_new(x->dtype, rp.ndim, rp.shape, 0);
    if (!out)
        goto fail;
    cddp_ix_plan_run(IX_GATHER, x->dtype, (char *)x->storage->data, &rp, cddp_data(out),
                     out->strides);
    if (need_grad) {
        node = cddp_ix_node("IndexBackward0", IX_GATHER, 0, 0, x, NULL, &vp, &err);
        if (err)
            goto fail;
        if (node)
            cddp_set_history(out, node, 0);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(node);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    return (PyObject *)out;
}

PyObject *cddp_mp_subscript(PyObject *self, PyObject *key)
{
    TensorObject *x = (TensorObject *)self, *out = NULL;
    cddp_ix_key k;
    int need_grad = cddp_grad_enabled && cddp_needs_grad(x);
    if (cddp_ix_parse(x, key, &k) < 0)
        return NULL;
    if (k.nadv) {
        out = (TensorObject *)getitem_adv(x, &k, need_grad);
        goto done;
    }
    out = cddp_tensor_alias(x, k.nd, k.shape, k.st[0], k.off[0]);
    if (out && need_grad) {          /* the view's place in x, for the scatter in backward */
        cddp_iplan vp = {0};
        NodeObject *node = NULL;
        int err = 1;
        if (cddp_ix_plan_alloc(&vp, 1) == 0) {
            cddp_ix_plan_basic(&k, 1, &vp);
            node = cddp_ix_node(k.name, IX_GATHER, 0, 0, x, NULL, &vp, &err);
        }
        cddp_ix_plan_free(&vp);
        if (err)
            Py_CLEAR(out);
        else if (node)
            cddp_set_history(out, node, 0);
        Py_XDECREF(node);
    }
done:
    cddp_ix_key_clear(&k);
    return (PyObject *)out;
}

/* ---- __setitem__ ---------------------------------------------------------------------- */

/* A Python / NumPy number as a 0-dim tensor: bool -> bool, float -> float64, int -> int64
 * (exact, so large values reach int64 targets intact). 1 converted into *out, 0 when v is no
 * number (nothing set), -1 with an exception. */
int cddp_ix_number(PyObject *v, TensorObject **out)
{
    int64_t none[1];
    if (PyBool_Check(v) || PyArray_IsScalar(v, Bool)) {
        int b = PyObject_IsTrue(v);
        if (b < 0)
            return -1;
        *out = cddp_tensor_new(CDDP_BOOL, 0, none, 0);
        if (*out)
            *(uint8_t *)cddp_data(*out) = (uint8_t)b;
    } else if (PyFloat_Check(v) || PyArray_IsScalar(v, Floating)) {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred())
            return -1;
        *out = cddp_tensor_new(CDDP_FLOAT64, 0, none, 0);
        if (*out)
            *(double *)cddp_data(*out) = d;
    } else if (PyLong_Check(v) || PyArray_IsScalar(v, Integer)) {
        PyObject *i = PyNumber_Index(v);
        long long x = i ? PyLong_AsLongLong(i) : -1;
        Py_XDECREF(i);
        if (x == -1 && PyErr_Occurred())
            return -1;
        *out = cddp_tensor_new(CDDP_INT64, 0, none, 0);
        if (*out)
            *(int64_t *)cddp_data(*out) = x;
    } else {
        return 0;
    }
    return *out ? 1 : -1;
}

/* value as a tensor: tensors as they are, numbers as 0-dim tensors; TypeError like torch. */
static TensorObject *setitem_value(TensorObject *x, PyObject *v)
{
    TensorObject *t = NULL;
    int r;
    if (cddp_tensor_check(v))
        return (TensorObject *)Py_NewRef(v);
    r = cddp_ix_number(v, &t);
    if (r == 0)
        PyErr_Format(PyExc_TypeError, "can't assign a %s to a cddp.%s", Py_TYPE(v)->tp_name,
                     legacy_name[x->dtype]);
    return r > 0 ? t : NULL;
}

/* v without its leading size-1 dims (torch strips them so `x[0] = ones(1, n)` works), and
 * copied when it shares x's memory, so overlapping reads and writes cannot mix. */
static TensorObject *prepare_source(TensorObject *x, TensorObject *v)
{
    int s = 0;
    TensorObject *a;
    while (s < v->ndim && v->shape[s] == 1)
        s++;
    a = cddp_tensor_alias(v, v->ndim - s, v->shape + s, v->strides + s, v->offset);
    if (a && a->storage == x->storage) {
        TensorObject *c = cddp_tensor_new(a->dtype, a->ndim, a->shape, 0);
        if (c && cddp_copy_into(c, a) < 0)
            Py_CLEAR(c);
        Py_SETREF(a, c);
    }
    return a;
}

/* x[plan] = src (or += with acc) for an advanced key: src broadcast to the indexing result,
 * cast to x's dtype. */
static int setitem_adv(TensorObject *x, cddp_ix_key *k, TensorObject *src, int acc,
                       cddp_iplan *rp, cddp_iplan *vp)
{
    int64_t sst[CDDP_MAX_DIMS];
    TensorObject *c = NULL;
    int rc = -1;
    if (cddp_ix_plan_adv(k, rp, vp) < 0)
        return -1;
    if (cddp_broadcast_strides(src, rp->ndim, rp->shape, sst) < 0) {
        char bv[256], bt[256];
        PyErr_Clear();
        cddp_ix_format_shape(bv, sizeof bv, src->ndim, src->shape);
        cddp_ix_format_shape(bt, sizeof bt, rp->ndim, rp->shape);
        PyErr_Format(PyExc_RuntimeError,
                     "shape mismatch: value tensor of shape %s cannot be broadcast to indexing "
                     "result of shape %s", bv, bt);
        return -1;
    }
    c = cddp_tensor_cast_raw(src, x->dtype);
    if (!c)
        return -1;
    if (c != src && cddp_broadcast_strides(c, rp->ndim, rp->shape, sst) < 0)
        goto done;
    cddp_ix_plan_run(acc ? IX_ACC : IX_PUT, x->dtype, (char *)x->storage->data, rp,
                     cddp_data(c), sst);
    cddp_bump_version(x);
    rc = 0;
done:
    Py_DECREF(c);
    return rc;
}

/* x[key] = v (x[key] += v with acc), recording history on x when x or v (an autograd input
 * when v_input) needs it. 0 / -1. */
static int setitem_impl(TensorObject *x, PyObject *key, TensorObject *v, int v_input, int acc)
{
    TensorObject *src = NULL;
    cddp_iplan rp = {0}, vp = {0};
    NodeObject *node = NULL;
    cddp_ix_key k;
    int rc = -1, err = 0;
    int need_grad = cddp_grad_enabled && cddp_is_floating(x->dtype) &&
                    (cddp_needs_grad(x) || (v_input && cddp_needs_grad(v)));
    if (!need_grad && !acc && v->ndim == 0 && cddp_tensor_check(key) && x->ndim > 0) {
        TensorObject *m = (TensorObject *)key;   /* x[mask] = scalar: a masked fill, as torch */
        if (m->dtype == CDDP_BOOL && m->ndim == x->ndim &&
            !memcmp(m->shape, x->shape, sizeof(int64_t) * x->ndim)) {
            rc = cddp_ix_masked_fill_raw(x, m, v);
            if (rc == 0)
                cddp_bump_version(x);
            return rc;
        }
    }
    if (cddp_ix_parse(x, key, &k) < 0)
        return -1;
    if (cddp_grad_enabled && x->requires_grad && !x->grad_fn) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.");
        goto done;
    }
    src = prepare_source(x, v);
    if (!src)
        goto done;
    if (k.nadv) {
        if (setitem_adv(x, &k, src, acc, &rp, need_grad ? &vp : NULL) < 0)
            goto done;
    } else {
        TensorObject *view = cddp_tensor_alias(x, k.nd, k.shape, k.st[0], k.off[0]);
        int r = !view ? -1 : acc ? cddp_accumulate_into(view, src) : cddp_copy_into(view, src);
        Py_XDECREF(view);
        if (r < 0)
            goto done;
        if (need_grad) {
            if (cddp_ix_plan_alloc(&vp, 1) < 0)
                goto done;
            cddp_ix_plan_basic(&k, 1, &vp);
        }
    }
    if (need_grad) {                 /* history goes on x: its old grad_fn becomes input 0 */
        node = cddp_ix_node(k.nadv || acc ? "IndexPutBackward0" : "CopySlices", IX_PUT, acc, 0,
                            x, v_input ? v : NULL, &vp, &err);
        if (err)
            goto done;
        if (node)
            cddp_set_history(x, node, 0);
    }
    rc = 0;
done:
    Py_XDECREF(node);
    Py_XDECREF(src);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    cddp_ix_key_clear(&k);
    return rc;
}

int cddp_mp_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    TensorObject *v;
    int rc;
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "'Tensor' object does not support item deletion");
        return -1;
    }
    v = setitem_value((TensorObject *)self, value);
    if (!v)
        return -1;
    rc = setitem_impl((TensorObject *)self, key, v, cddp_tensor_check(value), 0);
    Py_DECREF(v);
    return rc;
}

/* ---- index_put ------------------------------------------------------------------------ */

/* x.index_put_(indices, values, accumulate) / x.index_put(...): indices a tuple or list of
 * index tensors (None = every position of that dim); values a tensor of x's dtype. The
 * out-of-place form works on a copy that keeps x's history (CloneBackward0). */
PyObject *cddp_ix_index_put(TensorObject *x, PyObject *indices, PyObject *values, int acc,
                            int inplace)
{
    const char *fn = inplace ? "index_put_" : "index_put";
    PyObject *key = NULL, *fast = NULL;
    TensorObject *v = (TensorObject *)values, *out = NULL;
    Py_ssize_t n;
    if (!PyTuple_Check(indices) && !PyList_Check(indices)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'indices' must be tuple of Tensors, not %s",
                     fn, Py_TYPE(indices)->tp_name);
        return NULL;
    }
    if (!cddp_tensor_check(values)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'values' must be Tensor, not %s", fn,
                     Py_TYPE(values)->tp_name);
        return NULL;
    }
    if (v->dtype != x->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "Index put requires the source and destination dtypes match, got %s for "
                     "the destination and %s for the source.", cddp_dtype_name[x->dtype],
                     cddp_dtype_name[v->dtype]);
        return NULL;
    }
    fast = PySequence_Fast(indices, "indices must be a sequence");
    n = fast ? PySequence_Fast_GET_SIZE(fast) : 0;
    key = fast ? PyTuple_New(n) : NULL;
    for (Py_ssize_t i = 0; key && i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (o == Py_None) {
            o = PySlice_New(NULL, NULL, NULL);
        } else if (cddp_tensor_check(o)) {
            Py_INCREF(o);
        } else {
            PyErr_Format(PyExc_TypeError, "%s(): expected Tensor as element %zd in argument "
                         "'indices', but got %s", fn, i, Py_TYPE(o)->tp_name);
            o = NULL;
        }
        if (!o)
            Py_CLEAR(key);
        else
            PyTuple_SET_ITEM(key, i, o);
    }
    if (!key)
        goto done;
    if (inplace) {
        out = (TensorObject *)Py_NewRef(x);
    } else {
        out = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
        if (!out || cddp_copy_into(out, x) < 0)
            goto fail;
        if (cddp_grad_enabled && cddp_needs_grad(x)) {
            cddp_iplan vp = {0};
            NodeObject *node = NULL;
            int err = 1;
            if (cddp_ix_plan_alloc(&vp, 1) == 0) {      /* identity plan: gradient passes */
                vp.ndim = x->ndim;
                memcpy(vp.shape, x->shape, sizeof(int64_t) * x->ndim);
                cddp_contiguous_strides(x->ndim, x->shape, vp.sstride);
                memset(vp.bstride, 0, sizeof vp.bstride);
                vp.base = vp.off[0] = 0;
                node = cddp_ix_node("CloneBackward0", IX_GATHER, 0, 0, x, NULL, &vp, &err);
            }
            cddp_ix_plan_free(&vp);
            if (err)
                goto fail;
            if (node)
                cddp_set_history(out, node, 0);
            Py_XDECREF(node);
        }
    }
    if (setitem_impl(out, key, v, 1, acc) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(key);
    Py_XDECREF(fast);
    return (PyObject *)out;
}
