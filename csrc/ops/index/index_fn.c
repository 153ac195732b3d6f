/* ops/index/index_fn.c — the named indexing ops, all built on ops/index/index_adv.c's element
 * plans, and the method tables of the whole folder (the top of ops/index/, see index.h):
 *
 *   index_select(input, dim, index)        out = input with dim picked by 1-D index  (copy)
 *   gather(input, dim, index)              out[r] = input[r with r[dim] = index[r]]
 *   scatter(input, dim, index, src|value)  out = input; out[r with r[dim] = index[r]] = src[r]
 *   scatter_add(input, dim, index, src)    the same with +=            (+ in-place variants)
 *   masked_fill(input, mask, value)        out = input where ~mask else value (+ masked_fill_;
 *                                          kernels in ops/index/mask.c)
 *   index_put(input, indices, values, accumulate=False)   (+ index_put_; in ops/index/index.c)
 *
 * Mirrors torch's ops of the same names, with their backwards (IndexSelectBackward0,
 * GatherBackward0 = scatter-add, ScatterBackward0/1, ScatterAddBackward0, MaskedFillBackward0,
 * IndexPutBackward0). In-place forms on a tensor with history re-point its grad_fn.
 * Dimension legend: r a multi-index over index's shape.
 */
#include "ops/creation/creation.h"
#include "ops/index/index.h"
#include "module.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

/* ---- argument helpers ----------------------------------------------------------------- */

/* METH_FASTCALL|METH_KEYWORDS arguments by position or name into out[0..nmax) (NULL when
 * absent); the first nreq are required. TypeError like Python's for everything else. */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int nreq, int nmax, PyObject **out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (int i = 0; i < nmax; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (nargs > nmax) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments (%zd given)", fn, nmax,
                     nargs);
        return -1;
    }
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        while (j < nmax && PyUnicode_CompareWithASCIIString(kw, names[j]) != 0)
            j++;
        if (j == nmax) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, kw);
            return -1;
        }
        if (out[j]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                         names[j]);
            return -1;
        }
        out[j] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fn,
                         names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

static int parse_dim(PyObject *o, int ndim, int *out)
{
    long long d;
    int n = ndim > 0 ? ndim : 1;
    if (cddp_tensor_check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "dim must be an int, not %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    d = PyLong_AsLongLong(o);
    if (d == -1 && PyErr_Occurred())
        return -1;
    if (d < -n || d >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                     -n, n - 1, d);
        return -1;
    }
    *out = (int)(d < 0 ? d + n : d);
    return 0;
}

static TensorObject *tensor_arg(const char *fn, const char *name, PyObject *o)
{
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not %s", fn, name,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (TensorObject *)o;
}

/* A number argument as a 0-dim tensor; TypeError naming the argument otherwise. */
static TensorObject *number_arg(const char *fn, const char *name, PyObject *v)
{
    TensorObject *t = NULL;
    int r = cddp_ix_number(v, &t);
    if (r == 0)
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Number or Tensor, not %s", fn,
                     name, Py_TYPE(v)->tp_name);
    return r > 0 ? t : NULL;
}

static int index_dtype_ok(const TensorObject *i)
{
    return i->dtype == CDDP_INT64 || i->dtype == CDDP_INT32;
}

/* ---- index_select --------------------------------------------------------------------- */

static PyObject *index_select_impl(TensorObject *x, PyObject *dimo, PyObject *idxo)
{
    TensorObject *idx = tensor_arg("index_select", "index", idxo), *out = NULL;
    cddp_iplan rp = {0}, vp = {0};
    NodeObject *node = NULL;
    cddp_ix_key k;
    int dim, err, need_grad = cddp_grad_enabled && cddp_needs_grad(x);
    int64_t len;
    if (!idx || parse_dim(dimo, x->ndim, &dim) < 0)
        return NULL;
    if (!index_dtype_ok(idx)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "index_select(): Expected dtype int32 or int64 for index");
        return NULL;
    }
    if (idx->ndim > 1) {
        PyErr_SetString(PyExc_IndexError, "index_select(): Index is supposed to be a vector");
        return NULL;
    }
    len = cddp_numel(idx);
    if (x->ndim == 0 && len != 1) {
        PyErr_Format(PyExc_IndexError,
                     "index_select(): Index to scalar can have only 1 value, got %lld value(s)",
                     (long long)len);
        return NULL;
    }
    /* the key (:, ..., index, ...) on x; a 0-dim x acts as a 1-element vector */
    k.nd = x->ndim ? x->ndim : 1;
    k.name = "IndexSelectBackward0";
    k.oob = "index out of range in self";
    if (x->ndim) {
        memcpy(k.shape, x->shape, sizeof(int64_t) * x->ndim);
        memcpy(k.st[0], x->strides, sizeof(int64_t) * x->ndim);
        cddp_contiguous_strides(x->ndim, x->shape, k.st[1]);
    } else {
        k.shape[0] = 1;
        k.st[0][0] = k.st[1][0] = 0;
    }
    k.off[0] = x->offset;
    k.off[1] = 0;
    k.nadv = 1;
    k.adim[0] = k.adim_in[0] = dim;
    k.aspan[0] = 1;
    k.amask[0] = 0;
    k.aidx[0] = cddp_tensor_alias(idx, 1, &len, idx->ndim ? idx->strides : &(int64_t){0},
                                  idx->offset);
    if (!k.aidx[0])
        return NULL;
    if (cddp_ix_plan_adv(&k, &rp, need_grad ? &vp : NULL) < 0)
        goto done;
    if (x->ndim == 0)
        rp.ndim = vp.ndim = 0;       /* the single element, without the vector dim */
    out = cddp_tensor_new(x->dtype, rp.ndim, rp.shape, 0);
    if (!out)
        goto done;
    cddp_ix_plan_run(IX_GATHER, x->dtype, (char *)x->storage->data, &rp, cddp_data(out),
                     out->strides);
    if (need_grad) {
        node = cddp_ix_node(k.name, IX_GATHER, 0, 0, x, NULL, &vp, &err);
        if (err)
            Py_CLEAR(out);
        else if (node)
            cddp_set_history(out, node, 0);
    }
done:
    Py_XDECREF(node);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    cddp_ix_key_clear(&k);
    return (PyObject *)out;
}

/* ---- gather / scatter ----------------------------------------------------------------- */

/* Plans over index's shape into t along dim: element r <-> t[r with r[dim] = index[r]].
 * real: t's storage (strides, offset); virt (optional): t's contiguous layout. A 0-dim t acts
 * as a 1-element vector. RuntimeError (torch's text) on an index out of range. */
static int plan_along(TensorObject *t, int dim, TensorObject *idx, cddp_iplan *real,
                      cddp_iplan *virt)
{
    int64_t tv[CDDP_MAX_DIMS], ist[CDDP_MAX_DIMS], pos = 0, e_idx[CDDP_MAX_DIMS] = {0};
    int64_t tsize = t->ndim ? t->shape[dim] : 1, nb = cddp_numel(idx);
    int64_t st0 = t->ndim ? t->strides[dim] : 0, st1;
    const char *data = cddp_data(idx);
    cddp_contiguous_strides(t->ndim, t->shape, tv);
    st1 = t->ndim ? tv[dim] : 0;
    cddp_contiguous_strides(idx->ndim, idx->shape, ist);
    if (cddp_ix_plan_alloc(real, nb) < 0 || (virt && cddp_ix_plan_alloc(virt, nb) < 0))
        return -1;
    for (int q = 0; q < 2; q++) {
        cddp_iplan *p = q ? virt : real;
        if (!p)
            continue;
        p->ndim = idx->ndim;
        memcpy(p->shape, idx->shape, sizeof(int64_t) * idx->ndim);
        memcpy(p->bstride, ist, sizeof(int64_t) * idx->ndim);
        for (int d = 0; d < idx->ndim; d++)
            p->sstride[d] = d == dim || !t->ndim ? 0 : q ? tv[d] : t->strides[d];
        p->base = q ? 0 : t->offset;
    }
    for (int64_t e = 0; e < nb; e++) {
        int64_t v = cddp_ix_read_index(idx, data + pos * (int64_t)cddp_dtype_size[idx->dtype]);
        if (v < -tsize || v >= tsize) {
            PyErr_Format(PyExc_RuntimeError,
                         "index %lld is out of bounds for dimension %d with size %lld",
                         (long long)v, dim, (long long)tsize);
            return -1;
        }
        if (v < 0)
            v += tsize;
        real->off[e] = v * st0;
        if (virt)
            virt->off[e] = v * st1;
        for (int d = idx->ndim - 1; d >= 0; d--) {   /* odometer over index */
            if (++e_idx[d] < idx->shape[d]) {
                pos += idx->strides[d];
                break;
            }
            pos -= idx->strides[d] * (idx->shape[d] - 1);
            e_idx[d] = 0;
        }
    }
    return 0;
}

/* Index and t must have the same rank, a 0-dim tensor counting as 1-dim (torch's
 * ensure_nonempty_dim: zeros(10).scatter_(0, tensor(3), value=1) is allowed). */
static int same_rank(const TensorObject *t, const TensorObject *idx, const char *what)
{
    if ((idx->ndim ? idx->ndim : 1) == (t->ndim ? t->ndim : 1))
        return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "Index tensor must have the same number of dimensions as %s tensor", what);
    return -1;
}

static PyObject *gather_impl(TensorObject *x, PyObject *dimo, PyObject *idxo)
{
    TensorObject *idx = tensor_arg("gather", "index", idxo), *out = NULL;
    cddp_iplan rp = {0}, vp = {0};
    NodeObject *node = NULL;
    int dim, err, need_grad = cddp_grad_enabled && cddp_needs_grad(x);
    if (!idx || parse_dim(dimo, x->ndim, &dim) < 0)
        return NULL;
    if (!index_dtype_ok(idx)) {
        PyErr_SetString(PyExc_RuntimeError, "gather(): Expected dtype int32/int64 for index");
        return NULL;
    }
    if (same_rank(x, idx, "input") < 0)
        return NULL;
    for (int d = 0; d < x->ndim; d++) {
        if (d != dim && idx->shape[d] > x->shape[d]) {
            char bi[256], bx[256];
            cddp_ix_format_shape(bi, sizeof bi, idx->ndim, idx->shape);
            cddp_ix_format_shape(bx, sizeof bx, x->ndim, x->shape);
            PyErr_Format(PyExc_RuntimeError,
                         "Size does not match at dimension %d expected index %s to be no larger "
                         "than self %s apart from dimension %d", d, bi, bx, dim);
            return NULL;
        }
    }
    if (plan_along(x, dim, idx, &rp, need_grad ? &vp : NULL) < 0)
        goto done;
    out = cddp_tensor_new(x->dtype, idx->ndim, idx->shape, 0);
    if (!out)
        goto done;
    cddp_ix_plan_run(IX_GATHER, x->dtype, (char *)x->storage->data, &rp, cddp_data(out),
                     out->strides);
    if (need_grad) {
        node = cddp_ix_node("GatherBackward0", IX_GATHER, 0, 0, x, NULL, &vp, &err);
        if (err)
            Py_CLEAR(out);
        else if (node)
            cddp_set_history(out, node, 0);
    }
done:
    Py_XDECREF(node);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    return (PyObject *)out;
}

/* scatter_add into float16/bfloat16 dst: torch sums every destination in float (its
 * base value included) and rounds once, so the sums run on float32 copies. 0 / -1. */
static int scatter_add_float(TensorObject *dst, int dim, TensorObject *idx, TensorObject *src)
{
    TensorObject *w = cddp_tensor_cast_raw(dst, CDDP_FLOAT32), *s = NULL;
    cddp_iplan wp = {0};
    int rc = -1;
    /* src has dst's (16-bit) dtype: its float32 copy is new and contiguous */
    if (!w || !(s = cddp_tensor_cast_raw(src, CDDP_FLOAT32)) ||
        plan_along(w, dim, idx, &wp, NULL) < 0)
        goto done;
    cddp_ix_plan_run(IX_ACC, CDDP_FLOAT32, (char *)w->storage->data, &wp, cddp_data(s),
                     s->strides);
    rc = cddp_copy_into(dst, w);
done:
    cddp_ix_plan_free(&wp);
    Py_XDECREF(w);
    Py_XDECREF(s);
    return rc;
}

/* scatter / scatter_add, in place or on a copy of self. src: a Tensor, or (scatter only) a
 * number. Returns self (in place) or the new tensor. */
static PyObject *scatter_impl(TensorObject *self, PyObject *dimo, PyObject *idxo, PyObject *srco,
                              int inplace, int acc)
{
    const char *fn = acc ? "scatter_add" : "scatter";
    TensorObject *idx = tensor_arg(fn, "index", idxo), *src = NULL, *dst = NULL;
    cddp_iplan rp = {0}, vp = {0};
    NodeObject *node = NULL;
    int64_t ost[CDDP_MAX_DIMS] = {0};
    int dim, err, is_tensor = cddp_tensor_check(srco), need_grad;
    PyObject *res = NULL;
    if (!idx || parse_dim(dimo, self->ndim, &dim) < 0)
        return NULL;
    if (!index_dtype_ok(idx)) {
        PyErr_SetString(PyExc_RuntimeError, "scatter(): Expected dtype int32/int64 for index");
        return NULL;
    }
    if (same_rank(self, idx, "self") < 0)
        return NULL;
    if (is_tensor) {
        src = (TensorObject *)Py_NewRef(srco);
        if (src->dtype != self->dtype) {
            PyErr_SetString(PyExc_RuntimeError,
                            "scatter(): Expected self.dtype to be equal to src.dtype");
            goto done;
        }
        if (same_rank(src, idx, "src") < 0)
            goto done;
    } else if (acc) {
        tensor_arg(fn, "src", srco);
        return NULL;
    } else {
        TensorObject *num = number_arg(fn, "value", srco);
        src = num ? cddp_tensor_cast_raw(num, self->dtype) : NULL;
        Py_XDECREF(num);
        if (!src)
            return NULL;
    }
    for (int d = 0; d < idx->ndim; d++) {
        if ((is_tensor && idx->shape[d] > (src->ndim ? src->shape[d] : 1)) ||
            (d != dim && self->ndim && idx->shape[d] > self->shape[d])) {
            char bi[256], bs[256], bsrc[256];
            cddp_ix_format_shape(bi, sizeof bi, idx->ndim, idx->shape);
            cddp_ix_format_shape(bs, sizeof bs, self->ndim, self->shape);
            cddp_ix_format_shape(bsrc, sizeof bsrc, src->ndim, src->shape);
            PyErr_Format(PyExc_RuntimeError,
                         "Expected index %s to be no larger than self %s apart from dimension %d "
                         "and to be no larger size than src %s", bi, bs, dim, bsrc);
            goto done;
        }
    }
    if (inplace && (cddp_check_inplace(self) < 0 || cddp_check_writable(self) < 0))
        goto done;
    need_grad = cddp_grad_enabled && cddp_is_floating(self->dtype) &&
                (cddp_needs_grad(self) || (is_tensor && cddp_needs_grad(src)));
    if (inplace) {
        dst = (TensorObject *)Py_NewRef(self);
    } else {
        dst = cddp_tensor_new(self->dtype, self->ndim, self->shape, 0);
        if (!dst || cddp_copy_into(dst, self) < 0)
            goto done;
    }
    if (plan_along(dst, dim, idx, &rp, need_grad ? &vp : NULL) < 0)
        goto done;
    if (is_tensor) {
        if (src->storage == dst->storage) {       /* overlapping read and write: copy first */
            TensorObject *c = cddp_tensor_new(src->dtype, src->ndim, src->shape, 0);
            if (!c || cddp_copy_into(c, src) < 0) {
                Py_XDECREF(c);
                goto done;
            }
            Py_SETREF(src, c);
        }
        memcpy(ost, src->strides, sizeof(int64_t) * src->ndim);
    }
    if (acc && cddp_is_reduced(dst->dtype)) {
        if (scatter_add_float(dst, dim, idx, src) < 0)
            goto done;
    } else {
        cddp_ix_plan_run(acc ? IX_ACC : IX_PUT, dst->dtype, (char *)dst->storage->data, &rp,
                         cddp_data(src), ost);
    }
    cddp_bump_version(dst);
    if (need_grad) {
        const char *name = acc ? "ScatterAddBackward0"
                               : is_tensor ? "ScatterBackward0" : "ScatterBackward1";
        node = cddp_ix_node(name, IX_PUT, acc, 1, self, is_tensor ? (TensorObject *)srco : NULL,
                            &vp, &err);
        if (err || (node && cddp_set_inplace_history(dst, node, 0) < 0))
            goto done;                /* (dst is fresh, no view, when not in place) */
    }
    res = Py_NewRef(dst);
done:
    Py_XDECREF(node);
    Py_XDECREF(dst);
    Py_XDECREF(src);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    return res;
}

/* ---- masked_fill ---------------------------------------------------------------------- */

/* gin0 = g with masked positions zeroed, summed to input's shape; gin1 = sum of g[mask]. */
static int masked_fill_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0], *mask;
    if (!g)
        return 0;
    mask = cddp_node_saved(self, 0);
    if (!mask)
        return -1;
    if (self->next[0].node) {
        const cddp_meta *m = &self->meta[0];
        TensorObject *c = cddp_tensor_new(g->dtype, g->ndim, g->shape, 0);
        TensorObject *zero = cddp_scalar_tensor(0.0, g->dtype);
        if (c && zero && cddp_copy_into(c, g) == 0 && cddp_ix_masked_fill_raw(c, mask, zero) == 0)
            gin[0] = cddp_sum_to(c, m->ndim, m->shape);
        Py_XDECREF(c);
        Py_XDECREF(zero);
        if (!gin[0])
            return -1;
    }
    if (self->n_next > 1 && self->next[1].node) {
        double sum;
        if (cddp_ix_masked_sum(g, mask, &sum) < 0)
            return -1;
        gin[1] = cddp_scalar_tensor(sum, self->meta[1].dtype);
        if (!gin[1])
            return -1;
    }
    return 0;
}

static PyObject *masked_fill_impl(TensorObject *x, PyObject *masko, PyObject *valo, int inplace)
{
    TensorObject *mask = tensor_arg("masked_fill", "mask", masko), *v = NULL, *out = NULL;
    NodeObject *node = NULL;
    int is_tensor = cddp_tensor_check(valo), need_grad, err, nd;
    int64_t shape[CDDP_MAX_DIMS];
    if (!mask)
        return NULL;
    if (mask->dtype != CDDP_BOOL) {
        PyErr_Format(PyExc_RuntimeError,
                     "masked_fill_ only supports boolean masks, but got mask with dtype %s",
                     cddp_dtype_c_name[mask->dtype]);
        return NULL;
    }
    if (is_tensor && ((TensorObject *)valo)->ndim != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                     "with %d dimension(s).", ((TensorObject *)valo)->ndim);
        return NULL;
    }
    if (!is_tensor && cddp_is_narrow(x->dtype)) {
        /* torch converts the value to x's dtype with checked_convert: 300 into int8 raises */
        cddp_scalar sc;
        if (cddp_scalar_from_py(valo, &sc, "masked_fill") < 0)
            return NULL;
        if (cddp_scalar_overflows(x->dtype, sc.kind == 2, sc.d, sc.i)) {
            PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without "
                         "overflow", cddp_dtype_cpp_name[x->dtype]);
            return NULL;
        }
    }
    v = is_tensor ? (TensorObject *)Py_NewRef(valo) : number_arg("masked_fill", "value", valo);
    if (!v)
        return NULL;
    if (cddp_broadcast_shapes(x->ndim, x->shape, mask->ndim, mask->shape, &nd, shape) < 0)
        goto fail;
    if (inplace) {
        if (nd != x->ndim || memcmp(shape, x->shape, sizeof(int64_t) * nd)) {
            char bx[256], bb[256];
            cddp_ix_format_shape(bx, sizeof bx, x->ndim, x->shape);
            cddp_ix_format_shape(bb, sizeof bb, nd, shape);
            PyErr_Format(PyExc_RuntimeError,
                         "output with shape %s doesn't match the broadcast shape %s", bx, bb);
            goto fail;
        }
        if (cddp_check_inplace(x) < 0 || cddp_check_writable(x) < 0)
            goto fail;
        out = (TensorObject *)Py_NewRef(x);
    } else {
        out = cddp_tensor_new(x->dtype, nd, shape, 0);
        if (!out || cddp_copy_into(out, x) < 0)
            goto fail;
    }
    need_grad = cddp_grad_enabled && cddp_is_floating(x->dtype) &&
                (cddp_needs_grad(x) || (is_tensor && cddp_needs_grad(v)));
    if (need_grad) {                 /* before the fill: x's old history is the input */
        TensorObject *ins[2] = {x, is_tensor ? v : NULL};
        node = cddp_maybe_node("MaskedFillBackward0", masked_fill_backward, 2, ins, &err);
        if (err || (node && cddp_node_save(node, 0, mask) < 0))
            goto fail;
    }
    if (cddp_ix_masked_fill_raw(out, mask, v) < 0)
        goto fail;
    cddp_bump_version(out);
    if (node && cddp_set_inplace_history(out, node, 0) < 0)   /* out: x, or fresh */
        goto fail;
    Py_XDECREF(node);
    Py_DECREF(v);
    return (PyObject *)out;
fail:
    Py_XDECREF(node);
    Py_XDECREF(out);
    Py_XDECREF(v);
    return NULL;
}

/* ---- Python bindings ------------------------------------------------------------------ */

static const char *const kw_dim_index[] = {"dim", "index", "sparse_grad", NULL};
static const char *const kw_in_dim_index[] = {"input", "dim", "index", "sparse_grad", NULL};
static const char *const kw_scatter[] = {"dim", "index", "src", "value", "reduce", NULL};
static const char *const kw_in_scatter[] = {"input", "dim", "index", "src", "value", "reduce",
                                            NULL};
static const char *const kw_mask[] = {"mask", "value", NULL};
static const char *const kw_in_mask[] = {"input", "mask", "value", NULL};

static TensorObject *input_arg(const char *fn, PyObject *o)
{
    return tensor_arg(fn, "input", o);
}

static PyObject *t_index_select(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[2];
    if (parse_args("index_select", args, n, kw, kw_dim_index, 2, 2, a) < 0)
        return NULL;
    return index_select_impl((TensorObject *)self, a[0], a[1]);
}

static PyObject *m_index_select(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[3];
    TensorObject *x;
    if (parse_args("index_select", args, n, kw, kw_in_dim_index, 3, 3, a) < 0 ||
        !(x = input_arg("index_select", a[0])))
        return NULL;
    return index_select_impl(x, a[1], a[2]);
}

static PyObject *t_gather(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[3];
    if (parse_args("gather", args, n, kw, kw_dim_index, 2, 3, a) < 0)
        return NULL;
    return gather_impl((TensorObject *)self, a[0], a[1]);
}

static PyObject *m_gather(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[4];
    TensorObject *x;
    if (parse_args("gather", args, n, kw, kw_in_dim_index, 3, 4, a) < 0 ||
        !(x = input_arg("gather", a[0])))
        return NULL;
    return gather_impl(x, a[1], a[2]);
}

/* scatter(dim, index, src|value, reduce='add'|'multiply'): torch's older form of
 * scatter_reduce(dim, index, src, 'sum'|'prod') with self included; a value acts as a src of
 * index's shape holding it (a stride-0 view here). */
static PyObject *scatter_legacy_reduce(PyObject *self, PyObject *dim, PyObject *index,
                                       PyObject *src, PyObject *reduce, int inplace)
{
    const char *how = NULL;
    PyObject *res = NULL, *srct = NULL;
    TensorObject *x = (TensorObject *)self, *idx;
    if (PyUnicode_Check(reduce)) {
        if (PyUnicode_CompareWithASCIIString(reduce, "add") == 0)
            how = "sum";
        else if (PyUnicode_CompareWithASCIIString(reduce, "multiply") == 0)
            how = "prod";
    }
    if (!how) {
        PyErr_SetString(PyExc_RuntimeError, "reduce argument must be either add or multiply.");
        return NULL;
    }
    if (!(idx = tensor_arg("scatter", "index", index)))
        return NULL;
    if (cddp_tensor_check(src)) {
        srct = Py_NewRef(src);
    } else {
        int64_t zero[CDDP_MAX_DIMS] = {0};
        TensorObject *num = number_arg("scatter", "value", src), *one;
        one = num ? cddp_tensor_cast_raw(num, x->dtype) : NULL;
        Py_XDECREF(num);
        if (one)
            srct = (PyObject *)cddp_tensor_alias(one, idx->ndim, idx->shape, zero, one->offset);
        Py_XDECREF(one);
    }
    if (srct)
        res = PyObject_CallMethod(self, inplace ? "scatter_reduce_" : "scatter_reduce", "OOOs",
                                  dim, index, srct, how);
    Py_XDECREF(srct);
    return res;
}

/* scatter accepts src= or value= for its third argument, as torch's overloads do */
static PyObject *scatter_binding(PyObject *self, PyObject *const *args, Py_ssize_t n,
                                 PyObject *kw, int with_input, int inplace, int acc)
{
    const char *fn = acc ? (inplace ? "scatter_add_" : "scatter_add")
                         : (inplace ? "scatter_" : "scatter");
    PyObject *a[6], *src;
    int off = with_input;
    if (parse_args(fn, args, n, kw, with_input ? kw_in_scatter : kw_scatter, 2 + off, 5 + off,
                   a) < 0)
        return NULL;
    src = a[2 + off] ? a[2 + off] : a[3 + off];
    if (!src || (a[2 + off] && a[3 + off])) {
        PyErr_Format(PyExc_TypeError, "%s() takes exactly one of src= or value=", fn);
        return NULL;
    }
    if (with_input && !input_arg(fn, a[0]))
        return NULL;
    if (a[4 + off] && a[4 + off] != Py_None && !acc)
        return scatter_legacy_reduce(with_input ? a[0] : self, a[off], a[off + 1], src,
                                     a[4 + off], inplace);
    return scatter_impl(with_input ? (TensorObject *)a[0] : (TensorObject *)self, a[off],
                        a[off + 1], src, inplace, acc);
}

static PyObject *t_scatter(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 0, 0, 0);
}
static PyObject *t_scatter_(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 0, 1, 0);
}
static PyObject *t_scatter_add(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 0, 0, 1);
}
static PyObject *t_scatter_add_(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 0, 1, 1);
}
static PyObject *m_scatter(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 1, 0, 0);
}
static PyObject *m_scatter_add(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return scatter_binding(s, a, n, kw, 1, 0, 1);
}

static PyObject *t_masked_fill(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[2];
    if (parse_args("masked_fill", args, n, kw, kw_mask, 2, 2, a) < 0)
        return NULL;
    return masked_fill_impl((TensorObject *)self, a[0], a[1], 0);
}

static PyObject *t_masked_fill_(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[2];
    if (parse_args("masked_fill_", args, n, kw, kw_mask, 2, 2, a) < 0)
        return NULL;
    return masked_fill_impl((TensorObject *)self, a[0], a[1], 1);
}

static PyObject *m_masked_fill(PyObject *m, PyObject *const *args, Py_ssize_t n, PyObject *kw)
{
    PyObject *a[3];
    TensorObject *x;
    if (parse_args("masked_fill", args, n, kw, kw_in_mask, 3, 3, a) < 0 ||
        !(x = input_arg("masked_fill", a[0])))
        return NULL;
    return masked_fill_impl(x, a[1], a[2], 0);
}

static const char *const kw_put[] = {"indices", "values", "accumulate", NULL};
static const char *const kw_in_put[] = {"input", "indices", "values", "accumulate", NULL};

static PyObject *put_binding(PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kw,
                             int with_input, int inplace)
{
    const char *fn = inplace ? "index_put_" : "index_put";
    PyObject *a[4];
    int off = with_input, acc = 0;
    if (parse_args(fn, args, n, kw, with_input ? kw_in_put : kw_put, 2 + off, 3 + off, a) < 0)
        return NULL;
    if (a[2 + off] && (acc = PyObject_IsTrue(a[2 + off])) < 0)
        return NULL;
    if (with_input && !input_arg(fn, a[0]))
        return NULL;
    return cddp_ix_index_put(with_input ? (TensorObject *)a[0] : (TensorObject *)self, a[off],
                             a[off + 1], acc, inplace);
}

static PyObject *t_index_put(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return put_binding(s, a, n, kw, 0, 0);
}
static PyObject *t_index_put_(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return put_binding(s, a, n, kw, 0, 1);
}
static PyObject *m_index_put(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return put_binding(s, a, n, kw, 1, 0);
}

#define FK (METH_FASTCALL | METH_KEYWORDS)
PyMethodDef cddp_index_tensor_methods[] = {
    {"index_select", (PyCFunction)(void (*)(void))t_index_select, FK,
     "index_select(dim, index) -> Tensor: the slices of dim picked by 1-D index (copy)"},
    {"gather", (PyCFunction)(void (*)(void))t_gather, FK,
     "gather(dim, index) -> Tensor: out[r] = self[r with r[dim] = index[r]]"},
    {"scatter", (PyCFunction)(void (*)(void))t_scatter, FK,
     "scatter(dim, index, src|value) -> Tensor: a copy with self[r with r[dim] = index[r]] = src[r]"},
    {"scatter_", (PyCFunction)(void (*)(void))t_scatter_, FK, "in-place scatter"},
    {"scatter_add", (PyCFunction)(void (*)(void))t_scatter_add, FK,
     "scatter_add(dim, index, src) -> Tensor: scatter that adds (duplicates accumulate)"},
    {"scatter_add_", (PyCFunction)(void (*)(void))t_scatter_add_, FK, "in-place scatter_add"},
    {"masked_fill", (PyCFunction)(void (*)(void))t_masked_fill, FK,
     "masked_fill(mask, value) -> Tensor: value where mask (broadcast), self elsewhere"},
    {"masked_fill_", (PyCFunction)(void (*)(void))t_masked_fill_, FK, "in-place masked_fill"},
    {"index_put", (PyCFunction)(void (*)(void))t_index_put, FK,
     "index_put(indices, values, accumulate=False) -> Tensor: a copy with self[indices] = values"},
    {"index_put_", (PyCFunction)(void (*)(void))t_index_put_, FK,
     "index_put_(indices, values, accumulate=False): self[indices] = values (+= when accumulate)"},
    {NULL},
};

PyMethodDef cddp_index_module_methods[] = {
    {"index_select", (PyCFunction)(void (*)(void))m_index_select, FK,
     "index_select(input, dim, index) -> Tensor"},
    {"gather", (PyCFunction)(void (*)(void))m_gather, FK, "gather(input, dim, index) -> Tensor"},
    {"scatter", (PyCFunction)(void (*)(void))m_scatter, FK,
     "scatter(input, dim, index, src|value) -> Tensor"},
    {"scatter_add", (PyCFunction)(void (*)(void))m_scatter_add, FK,
     "scatter_add(input, dim, index, src) -> Tensor"},
    {"masked_fill", (PyCFunction)(void (*)(void))m_masked_fill, FK,
     "masked_fill(input, mask, value) -> Tensor"},
    {"index_put", (PyCFunction)(void (*)(void))m_index_put, FK,
     "index_put(input, indices, values, accumulate=False) -> Tensor"},
    {"_index_plan", cddp_ix_plan_py, METH_O,
     "_index_plan(node) -> (kind, acc, embed, positions) of an indexing node, or None"},
    {NULL},
};
