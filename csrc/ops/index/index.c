/* ops/index/index.c — Tensor.__getitem__ / __setitem__ and index_put: basic (view) indexing,
 * and the entry points that hand advanced keys to the element plans of ops/index/index_adv.c.
 * Keys are parsed by ops/index/key.c.
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
 * setitem on a tensor with history records CopySlices / IndexPutBackward0 on the tensor itself
 * (and, when that tensor is a view, CopySlices on its base: autograd/view.c). index_put(_)
 * shares setitem's path.
 */
#include "ops/index/index.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

/* torch's legacy tensor type names, for setitem's TypeError */
#define legacy_name cddp_dtype_legacy_name

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
    if (out)
        cddp_view_mark(x, out);
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
        PyErr_SetString(PyExc_RuntimeError,    /* torch writes through a view of x here */
                        "a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.");
        goto done;
    }
    /* basic indexing checks only what it writes (x[0, 0] of an expanded x is one element) */
    if (cddp_check_inplace(x) < 0 || (k.nadv && cddp_check_writable(x) < 0))
        goto done;
    src = prepare_source(x, v);
    if (!src)
        goto done;
    if (k.nadv) {
        if (setitem_adv(x, &k, src, acc, &rp, need_grad ? &vp : NULL) < 0)
            goto done;
    } else {
        TensorObject *view = cddp_tensor_alias(x, k.nd, k.shape, k.st[0], k.off[0]);
        int r = !view || cddp_check_writable(view) < 0 ? -1
              : acc ? cddp_accumulate_into(view, src) : cddp_copy_into(view, src);
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
        if (err || (node && cddp_set_inplace_history(x, node, 0) < 0))
            goto done;
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
                     "the destination and %s for the source.", cddp_dtype_torch_name[x->dtype],
                     cddp_dtype_torch_name[v->dtype]);
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
