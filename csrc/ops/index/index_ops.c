/* ops/index/index_ops.c — writes along one dim picked by an index vector, and scatter with a
 * reduction. The top of the indexing files (see ops/index/index.h): runs index_adv.c's plans
 * and shares its backward where it fits.
 *
 * Mirrors torch (each as Tensor.op_ in place, Tensor.op and torch.op on a copy):
 *   index_add(dim, index, source, *, alpha=1)   self[.., index[i], ..] += alpha * source[.., i, ..]
 *                                               IndexAddBackward0
 *   index_copy(dim, index, source)              self[.., index[i], ..] = source[.., i, ..]
 *                                               IndexCopyBackward0
 *   index_fill(dim, index, value)               self[.., index[i], ..] = value
 *                                               IndexFillBackward0 (number) / 1 (0-d tensor)
 *   scatter_reduce(dim, index, src, reduce, *, include_self=True)
 *       reduce: sum | prod | mean | amax | amin  ScatterReduceBackward0
 *
 * Legend: self (s_0 .. s_{n-1}); index (k,) for the index_* ops, with source (s_0 .. k .. );
 * for scatter_reduce, index has self's rank and r is a multi-index over index's shape:
 *   out[r with r[dim] = index[r]] (+)= src[r].
 *
 * scatter_reduce computes in double (int64 for integer dtypes; mean floors, as torch) and
 * its backward follows torch's rules per output position p, over the set S_p of what was
 * reduced there (self[p] when include_self, and the src elements sent to p; positions that
 * receive nothing keep self and pass the gradient through):
 *   sum: g[p] to each;  mean: g[p] / |S_p|;  amax/amin: g[p] shared evenly by the elements
 *   equal to the result;  prod: the product of the others (exact with zeros: counted, not
 *   divided by).
 */
#include "amp/amp.h"
#include "ops/shape/shape.h"
#include "ops/index/index.h"
#include "module.h"
#include <math.h>
#include <string.h>

#define DATA(t) ((void *)cddp_data(t))

/* ---- plans along one dim -------------------------------------------------------------- */

/* Plan writing index (n,) along dim of t: the walk has t's shape with dim replaced by n; for
 * a 0-d t, one element. real: t's storage; virt (optional): t's contiguous layout. Bounds
 * [0, size) unless wrap (negatives count from the end). IndexError/RuntimeError as torch. */
static int plan_dim(TensorObject *t, int dim, TensorObject *idx, int wrap, const char *fn,
                    cddp_iplan *real, cddp_iplan *virt)
{
    int64_t n = cddp_numel(idx), size = t->ndim ? t->shape[dim] : 1, tv[CDDP_MAX_DIMS];
    int64_t ist = idx->ndim ? idx->strides[0] : 0;
    int nd = t->ndim ? t->ndim : 1;       /* a 0-d target: planned as shape [1] along dim 0, */
    cddp_contiguous_strides(t->ndim, t->shape, tv);   /* so an empty index plans nothing */
    if (cddp_ix_plan_alloc(real, n) < 0 || (virt && cddp_ix_plan_alloc(virt, n) < 0))
        return -1;
    for (int q = 0; q < 2; q++) {
        cddp_iplan *p = q ? virt : real;
        if (!p)
            continue;
        p->ndim = nd;
        p->base = q ? 0 : t->offset;
        for (int d = 0; d < nd; d++) {
            p->shape[d] = d == dim ? n : t->shape[d];
            p->sstride[d] = d == dim ? 0 : q ? tv[d] : t->strides[d];
            p->bstride[d] = d == dim ? 1 : 0;
        }
    }
    for (int64_t e = 0; e < n; e++) {
        int64_t v = cddp_ix_read_index(idx, cddp_data(idx) + e * ist *
                                            (int64_t)cddp_dtype_size[idx->dtype]);
        if (v < (wrap ? -size : 0) || v >= size) {
            PyErr_Format(fn ? PyExc_IndexError : PyExc_RuntimeError,
                         "%s%sindex %lld is out of bounds for dimension %d with size %lld",
                         fn ? fn : "", fn ? "(): " : "", (long long)v, dim, (long long)size);
            return -1;
        }
        v += v < 0 ? size : 0;
        real->off[e] = t->ndim ? v * t->strides[dim] : 0;
        if (virt)
            virt->off[e] = t->ndim ? v * tv[dim] : 0;
    }
    return 0;
}

/* self itself (in place, after the leaf check) or a fresh copy of it. */
static TensorObject *target(TensorObject *self, int inplace)
{
    TensorObject *dst;
    if (inplace)
        return cddp_check_inplace(self) < 0 || cddp_check_writable(self) < 0
               ? NULL : (TensorObject *)Py_NewRef(self);
    dst = cddp_tensor_new(self->dtype, self->ndim, self->shape, 0);
    if (dst && cddp_copy_into(dst, self) < 0)
        Py_CLEAR(dst);
    return dst;
}

static const char *scalar_name(cddp_dtype d)
{
    return cddp_dtype_torch_name[d];
}

/* The index vector checks of index_add_/index_copy_/index_fill_ (torch's texts). */
static int check_index(const char *fn, TensorObject *idx)
{
    if (idx->dtype != CDDP_INT64 && idx->dtype != CDDP_INT32) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Expected dtype int32/int64 for index but got: "
                     "%s", fn, scalar_name(idx->dtype));
        return -1;
    }
    if (idx->ndim > 1) {
        char b[256];
        cddp_ix_format_shape(b, sizeof b, idx->ndim, idx->shape);
        PyErr_Format(PyExc_IndexError, "%s(): Index is supposed to be a vector, but got dim: %d "
                     "with type: %s and size: %s", fn, idx->ndim, scalar_name(idx->dtype), b);
        return -1;
    }
    return 0;
}

/* source must be self's shape with dim of size numel(index) (0-d self: a 0-d source). */
static int check_source(const char *fn, TensorObject *self, int dim, TensorObject *idx,
                        TensorObject *src, int copy)
{
    int64_t n = cddp_numel(idx);
    if (self->dtype != src->dtype) {
        PyErr_Format(PyExc_RuntimeError, "%s(): self (%s) and source (%s) must have the same "
                     "scalar type", fn, scalar_name(self->dtype), scalar_name(src->dtype));
        return -1;
    }
    if (self->ndim == 0 || src->ndim == 0) {
        if (cddp_numel(src) != n || cddp_numel(self) != 1 || n != 1)
            goto bad;
        return 0;
    }
    if (src->ndim != self->ndim)
        goto bad;
    if (src->shape[dim] != n) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Number of indices (%lld) should be equal to "
                     "source.size(dim): (%lld), for dim: %d", fn, (long long)n,
                     (long long)src->shape[dim], dim);
        return -1;
    }
    for (int d = 0; d < self->ndim; d++) {
        if (d != dim && self->shape[d] != src->shape[d]) {
            if (copy) {
                PyErr_Format(PyExc_RuntimeError, "%s(): Source/destination tensor must have "
                             "same slice shapes. Destination slice shape: %lld at dimension %d "
                             "and source slice shape: %lld at dimension %d.", fn,
                             (long long)self->shape[d], d, (long long)src->shape[d], d);
                return -1;
            }
            goto bad;
        }
    }
    return 0;
bad:
    {
        char b1[256], b2[256];
        cddp_ix_format_shape(b1, sizeof b1, self->ndim, self->shape);
        cddp_ix_format_shape(b2, sizeof b2, src->ndim, src->shape);
        PyErr_Format(PyExc_RuntimeError, "source tensor shape must match self tensor shape, "
                     "excluding the specified dimension. Got self.shape = %s source.shape = %s",
                     b1, b2);
    }
    return -1;
}

/* ---- index_add / index_copy / index_fill ---------------------------------------------- */

enum { OP_ADD, OP_COPY, OP_FILL };

/* The three ops after argument parsing: src is the source tensor (add/copy) or the value
 * (fill: a 0-d tensor, number already converted). Returns the result (self when in place). */
static PyObject *index_write(int op, TensorObject *self, int dim, TensorObject *idx,
                             TensorObject *src, int src_is_tensor, int inplace)
{
    static const char *const names[] = {"IndexAddBackward0", "IndexCopyBackward0",
                                        "IndexFillBackward0"};
    TensorObject *dst = NULL, *sv = NULL;
    cddp_iplan rp = {0}, vp = {0};
    NodeObject *node = NULL;
    int64_t sst[CDDP_MAX_DIMS] = {0};
    int need_grad, err;
    PyObject *res = NULL;
    need_grad = cddp_grad_enabled && cddp_is_floating(self->dtype) &&
                (cddp_needs_grad(self) || (src_is_tensor && cddp_needs_grad(src)));
    /* the target first: the plan addresses its storage (in place: self's) */
    if (!(dst = target(self, inplace)) ||
        plan_dim(dst, dim, idx, op == OP_FILL, op == OP_COPY ? "index_copy_" : NULL, &rp,
                 need_grad ? &vp : NULL) < 0)
        goto done;
    /* the values to write, in self's dtype, copied when they share the target's memory */
    sv = cddp_tensor_cast_raw(src, self->dtype);
    if (sv && sv->storage == dst->storage) {
        TensorObject *c = cddp_tensor_new(sv->dtype, sv->ndim, sv->shape, 0);
        if (!c || cddp_copy_into(c, sv) < 0) {
            Py_XDECREF(c);
            goto done;
        }
        Py_SETREF(sv, c);
    }
    if (!sv)
        goto done;
    /* a fill value, or a 0-d source under a 1-element key, is read at one place */
    if (op != OP_FILL && sv->ndim)
        memcpy(sst, sv->strides, sizeof(int64_t) * sv->ndim);
    cddp_ix_plan_run(op == OP_ADD ? IX_ACC : IX_PUT, dst->dtype, (char *)dst->storage->data, &rp,
                     cddp_data(sv), sst);
    cddp_bump_version(dst);
    if (need_grad) {
        const char *name = op == OP_FILL && src_is_tensor ? "IndexFillBackward1" : names[op];
        node = cddp_ix_node(name, IX_PUT, op == OP_ADD, op != OP_FILL, self,
                            src_is_tensor ? src : NULL, &vp, &err);
        if (err || (node && cddp_set_inplace_history(dst, node, 0) < 0))
            goto done;                /* (dst is fresh, no view, when not in place) */
    }
    res = Py_NewRef(dst);
done:
    Py_XDECREF(node);
    Py_XDECREF(dst);
    Py_XDECREF(sv);
    cddp_ix_plan_free(&rp);
    cddp_ix_plan_free(&vp);
    return res;
}

/* ---- scatter_reduce ------------------------------------------------------------------- */

enum { R_SUM, R_PROD, R_MEAN, R_AMAX, R_AMIN };

/* Per element e of index (C order): pos[e] = flat contiguous position in self, soff[e] =
 * element offset in src. RuntimeError on an index out of [0, size). */
static int reduce_positions(TensorObject *self, int dim, TensorObject *idx, TensorObject *src,
                            int64_t *pos, int64_t *soff)
{
    int64_t sv[CDDP_MAX_DIMS], r[CDDP_MAX_DIMS] = {0}, io = 0, so = 0, n = cddp_numel(idx);
    int nd = idx->ndim;
    int64_t size = self->ndim ? self->shape[dim] : 1;
    cddp_contiguous_strides(self->ndim, self->shape, sv);
    for (int64_t e = 0; e < n; e++) {
        int64_t v = cddp_ix_read_index(idx, cddp_data(idx) +
                                                 io * (int64_t)cddp_dtype_size[idx->dtype]);
        int64_t p = 0;
        if (v < 0 || v >= size) {
            PyErr_Format(PyExc_RuntimeError, "index %lld is out of bounds for dimension %d with "
                         "size %lld", (long long)v, dim, (long long)size);
            return -1;
        }
        for (int d = 0; d < self->ndim; d++)
            p += (d == dim ? v : r[d]) * sv[d];
        pos[e] = p;
        soff[e] = so;
        for (int d = nd - 1; d >= 0; d--) {          /* odometer over index's shape */
            io += idx->strides[d];
            so += src->ndim ? src->strides[d] : 0;
            if (++r[d] < idx->shape[d])
                break;
            io -= idx->strides[d] * idx->shape[d];
            so -= (src->ndim ? src->strides[d] : 0) * idx->shape[d];
            r[d] = 0;
        }
    }
    return 0;
}

/* a (numel) starts as self's values; cnt[p] = reduced count at p (0: untouched). */
static void reduce_f64(int red, int incl, double *a, int64_t *cnt, int64_t n, const int64_t *pos,
                       const double *s, int64_t numel)
{
    for (int64_t p = 0; p < numel; p++)
        cnt[p] = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t p = pos[e];
        double v = s[e];
        if (cnt[p] == 0) {
            cnt[p] = incl ? 1 : 0;
            if (!incl) {
                a[p] = v;
                cnt[p] = 1;
                continue;
            }
        }
        cnt[p]++;
        switch (red) {
        case R_SUM: case R_MEAN: a[p] += v; break;
        case R_PROD: a[p] *= v; break;
        case R_AMAX: a[p] = (v > a[p] || isnan(v)) && !isnan(a[p]) ? v : a[p]; break;
        default: a[p] = (v < a[p] || isnan(v)) && !isnan(a[p]) ? v : a[p]; break;
        }
    }
    if (red == R_MEAN)
        for (int64_t p = 0; p < numel; p++)
            if (cnt[p])
                a[p] /= (double)cnt[p];
}

static void reduce_i64(int red, int incl, int64_t *a, int64_t *cnt, int64_t n, const int64_t *pos,
                       const int64_t *s, int64_t numel)
{
    for (int64_t p = 0; p < numel; p++)
        cnt[p] = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t p = pos[e], v = s[e];
        if (cnt[p] == 0 && !incl) {
            a[p] = v;
            cnt[p] = 1;
            continue;
        }
        cnt[p] += cnt[p] == 0 ? 2 : 1;
        switch (red) {
        case R_SUM: case R_MEAN: a[p] = (int64_t)((uint64_t)a[p] + (uint64_t)v); break;
        case R_PROD: a[p] = (int64_t)((uint64_t)a[p] * (uint64_t)v); break;
        case R_AMAX: a[p] = v > a[p] ? v : a[p]; break;
        default: a[p] = v < a[p] ? v : a[p]; break;
        }
    }
    if (red == R_MEAN)                /* floor division, as torch's integer mean */
        for (int64_t p = 0; p < numel; p++)
            if (cnt[p]) {
                int64_t q = a[p] / cnt[p];
                a[p] = q - ((a[p] % cnt[p] != 0) && ((a[p] < 0) != (cnt[p] < 0)));
            }
}

/* Contiguous float64 copy of t. */
static TensorObject *f64(TensorObject *t)
{
    TensorObject *c = cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0);
    if (c && cddp_copy_into(c, t) < 0)
        Py_CLEAR(c);
    return c;
}

/* d out[p] / d (element of value v reduced at p), times g[p]; the per-position statistics
 * (cnt, neq equal-to-result count, nz zero count, pnz product of the nonzeros) precomputed. */
static double reduce_grad(int red, double v, double out, double g, int64_t cnt, int64_t neq,
                          int64_t nz, double pnz)
{
    switch (red) {
    case R_SUM: return g;
    case R_MEAN: return g / (double)cnt;
    case R_PROD: return nz == 0 ? g * pnz / v : nz == 1 && v == 0 ? g * pnz : 0;
    default: return v == out || (isnan(v) && isnan(out)) ? g / (double)neq : 0;
    }
}

/* ScatterReduceBackward0: saved self (0, its values before the op), src (1), index (2),
 * result (3); i[0] reduce, i[1] include_self, i[2] dim. */
static int scatter_reduce_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *src = cddp_node_saved(self, 1);
    TensorObject *idx = cddp_node_saved(self, 2), *res = cddp_node_saved(self, 3);
    TensorObject *xd = NULL, *sd = NULL, *rd = NULL, *gd = NULL, *gx = NULL, *gs = NULL;
    int red = (int)self->i[0], incl = (int)self->i[1], dim = (int)self->i[2], rc = -1;
    int64_t n, numel, *pos = NULL, *soff = NULL, *cnt = NULL, *neq = NULL, *nz = NULL;
    double *pnz = NULL;
    if (!x || !src || !idx || !res)
        return -1;
    if (!gout[0])
        return 0;
    n = cddp_numel(idx);
    numel = cddp_numel(x);
    if (!(xd = f64(x)) || !(sd = f64(src)) || !(rd = f64(res)) || !(gd = f64(gout[0])))
        goto done;
    pos = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    soff = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    cnt = PyMem_Calloc((size_t)numel + 1, sizeof(int64_t));
    neq = PyMem_Calloc((size_t)numel + 1, sizeof(int64_t));
    nz = PyMem_Calloc((size_t)numel + 1, sizeof(int64_t));
    pnz = PyMem_Malloc(sizeof(double) * (size_t)(numel + 1));
    if (!pos || !soff || !cnt || !neq || !nz || !pnz) {
        PyErr_NoMemory();
        goto done;
    }
    if (reduce_positions(x, dim, idx, sd, pos, soff) < 0)    /* sd contiguous: src offsets */
        goto done;
    {
        const double *xv = DATA(xd), *sv = DATA(sd), *rv = DATA(rd);
        const double *gv = DATA(gd);
        double *gxv, *gsv;
        for (int64_t p = 0; p < numel; p++)
            pnz[p] = 1;
        for (int64_t e = 0; e < n; e++) {             /* the statistics of every S_p */
            int64_t p = pos[e];
            if (cnt[p] == 0 && incl) {
                cnt[p] = 1;
                neq[p] += xv[p] == rv[p] || (isnan(xv[p]) && isnan(rv[p]));
                nz[p] += xv[p] == 0;
                pnz[p] *= xv[p] == 0 ? 1 : xv[p];
            }
            cnt[p]++;
            neq[p] += sv[soff[e]] == rv[p] || (isnan(sv[soff[e]]) && isnan(rv[p]));
            nz[p] += sv[soff[e]] == 0;
            pnz[p] *= sv[soff[e]] == 0 ? 1 : sv[soff[e]];
        }
        if (!(gx = cddp_tensor_new(CDDP_FLOAT64, x->ndim, x->shape, 0)) ||
            !(gs = cddp_tensor_new(CDDP_FLOAT64, src->ndim, src->shape, 1)))
            goto done;
        gxv = DATA(gx);
        gsv = DATA(gs);
        for (int64_t p = 0; p < numel; p++)
            gxv[p] = cnt[p] == 0 ? gv[p] : !incl ? 0
                   : reduce_grad(red, xv[p], rv[p], gv[p], cnt[p], neq[p], nz[p], pnz[p]);
        for (int64_t e = 0; e < n; e++) {
            int64_t p = pos[e];
            gsv[soff[e]] = reduce_grad(red, sv[soff[e]], rv[p], gv[p], cnt[p], neq[p], nz[p],
                                       pnz[p]);
        }
    }
    if (self->next[0].node && !(gin[0] = cddp_tensor_cast_raw(gx, self->meta[0].dtype)))
        goto done;
    if (self->next[1].node && !(gin[1] = cddp_tensor_cast_raw(gs, self->meta[1].dtype)))
        goto done;
    rc = 0;
done:
    if (rc < 0)
        Py_CLEAR(gin[0]);
    Py_XDECREF(xd);
    Py_XDECREF(sd);
    Py_XDECREF(rd);
    Py_XDECREF(gd);
    Py_XDECREF(gx);
    Py_XDECREF(gs);
    PyMem_Free(pos);
    PyMem_Free(soff);
    PyMem_Free(cnt);
    PyMem_Free(neq);
    PyMem_Free(nz);
    PyMem_Free(pnz);
    return rc;
}

/* Shape checks as torch's scatter family. */
static int check_scatter(TensorObject *self, int dim, TensorObject *idx, TensorObject *src)
{
    if (idx->dtype != CDDP_INT64) {
        PyErr_SetString(PyExc_RuntimeError, "scatter_reduce(): Expected dtype int64 for index");
        return -1;
    }
    if (src->dtype != self->dtype) {
        PyErr_SetString(PyExc_RuntimeError,
                        "scatter_reduce(): Expected self.dtype to be equal to src.dtype");
        return -1;
    }
    if ((idx->ndim != self->ndim && !(self->ndim == 0 && idx->ndim <= 1)) ||
        (idx->ndim != src->ndim && !(src->ndim == 0 && idx->ndim <= 1))) {
        PyErr_SetString(PyExc_RuntimeError, "Index tensor must have the same number of "
                        "dimensions as self tensor");
        return -1;
    }
    for (int d = 0; d < idx->ndim; d++) {
        if ((src->ndim && idx->shape[d] > src->shape[d]) ||
            (d != dim && self->ndim && idx->shape[d] > self->shape[d])) {
            char bi[256], bs[256], bsrc[256];
            cddp_ix_format_shape(bi, sizeof bi, idx->ndim, idx->shape);
            cddp_ix_format_shape(bs, sizeof bs, self->ndim, self->shape);
            cddp_ix_format_shape(bsrc, sizeof bsrc, src->ndim, src->shape);
            PyErr_Format(PyExc_RuntimeError, "Expected index %s to be no larger than self %s "
                         "apart from dimension %d and to be no larger size than src %s", bi, bs,
                         dim, bsrc);
            return -1;
        }
    }
    return 0;
}

/* out = self with src reduced in at index along dim (a copy, or self when in place). */
static PyObject *scatter_reduce_impl(TensorObject *self, int dim, TensorObject *idx,
                                     TensorObject *src, int red, int incl, int inplace)
{
    int flt = cddp_is_floating(self->dtype), err;
    cddp_dtype wdt = flt ? CDDP_FLOAT64 : CDDP_INT64;
    int64_t n = cddp_numel(idx), numel = cddp_numel(self), *pos = NULL, *soff = NULL, *cnt = NULL;
    TensorObject *acc = NULL, *sw = NULL, *dst = NULL, *orig = NULL, *res = NULL;
    int need_grad = cddp_grad_enabled && flt && (cddp_needs_grad(self) || cddp_needs_grad(src));
    if (check_scatter(self, dim, idx, src) < 0)
        return NULL;
    /* private contiguous working copies in the compute dtype */
    acc = cddp_tensor_new(wdt, self->ndim, self->shape, 0);
    sw = cddp_tensor_new(wdt, src->ndim, src->shape, 0);
    if (!acc || !sw || cddp_copy_into(acc, self) < 0 || cddp_copy_into(sw, src) < 0)
        goto done;
    pos = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    soff = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
    cnt = PyMem_Malloc(sizeof(int64_t) * (size_t)(numel + 1));
    if (!pos || !soff || !cnt) {
        PyErr_NoMemory();
        goto done;
    }
    if (reduce_positions(self, dim, idx, sw, pos, soff) < 0)
        goto done;
    {
        /* src values in index order (soff: offsets in the contiguous sw) */
        if (flt) {
            double *sv = PyMem_Malloc(sizeof(double) * (size_t)(n + 1));
            if (!sv) {
                PyErr_NoMemory();
                goto done;
            }
            for (int64_t e = 0; e < n; e++)
                sv[e] = ((double *)cddp_data(sw))[soff[e]];
            reduce_f64(red, incl, DATA(acc), cnt, n, pos, sv, numel);
            PyMem_Free(sv);
        } else {
            int64_t *sv = PyMem_Malloc(sizeof(int64_t) * (size_t)(n + 1));
            if (!sv) {
                PyErr_NoMemory();
                goto done;
            }
            for (int64_t e = 0; e < n; e++)
                sv[e] = ((int64_t *)cddp_data(sw))[soff[e]];
            reduce_i64(red, incl, DATA(acc), cnt, n, pos, sv, numel);
            PyMem_Free(sv);
        }
    }
    if (inplace && need_grad && !(orig = f64(self)))   /* backward needs self's old values */
        goto done;
    if (!(dst = target(self, inplace)) || cddp_copy_into(dst, acc) < 0)
        goto done;
    if (need_grad) {
        TensorObject *ins[2] = {self, src};
        NodeObject *node = cddp_maybe_node("ScatterReduceBackward0", scatter_reduce_backward, 2,
                                           ins, &err);
        if (err)
            goto done;
        if (node) {
            node->i[0] = red;
            node->i[1] = incl;
            node->i[2] = dim;
            err = cddp_node_save(node, 0, orig ? orig : self) < 0 ||
                  cddp_node_save(node, 1, src) < 0 || cddp_node_save(node, 2, idx) < 0;
            err = err || cddp_set_inplace_history(dst, node, 0) < 0 ||
                  cddp_node_save_output(node, 3, dst) < 0;
            Py_DECREF(node);
            if (err)
                goto done;
        }
    }
    res = dst;
    dst = NULL;
done:
    Py_XDECREF(acc);
    Py_XDECREF(sw);
    Py_XDECREF(dst);
    Py_XDECREF(orig);
    PyMem_Free(pos);
    PyMem_Free(soff);
    PyMem_Free(cnt);
    return (PyObject *)res;
}

/* ---- bindings ------------------------------------------------------------------------- */

static int get_dim(PyObject *o, int ndim, int *out)
{
    long long d;
    int n = ndim > 0 ? ndim : 1;
    if (!o || cddp_tensor_check(o) || PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "dim must be an int, not %s",
                     o ? Py_TYPE(o)->tp_name : "nothing");
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

/* (input?, dim, index, source|value, extra...) by position or name into a[0..n): a[0] is
 * self for methods. Keyword-only names (from kwonly on) cannot be positional. */
static int parse(const char *fn, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kw, const char *const *names, int n, int nreq, int kwonly,
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
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fn,
                         names[i], i + 1 - off);
            return -1;
        }
    }
    for (int i = 0; i < 3 && i < nreq; i++) {
        if (i != 1 && !cddp_tensor_check(a[i])) {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not %s", fn,
                         names[i], Py_TYPE(a[i])->tp_name);
            return -1;
        }
    }
    return 0;
}

static PyObject *index_op_binding(int op, PyObject *self, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kw, int inplace)
{
    static const char *const names[3][5] = {
        {"input", "dim", "index", "source", "alpha"},
        {"input", "dim", "index", "source", NULL},
        {"input", "dim", "index", "value", NULL}};
    static const char *const fns[] = {"index_add_", "index_copy_", "index_fill_"};
    const char *fn = fns[op];
    PyObject *a[5];
    TensorObject *x, *idx, *src = NULL;
    TensorObject *promoted = NULL;   /* x in the autocast-promoted dtype, or NULL */
    PyObject *res = NULL;
    int dim, is_tensor = 1;
    if (parse(inplace ? fn : (op == OP_ADD ? "index_add" : op == OP_COPY ? "index_copy"
                              : "index_fill"), self, args, nargs, kw, names[op],
              op == OP_ADD ? 5 : 4, 4, 4, a) < 0)
        return NULL;
    x = (TensorObject *)a[0];
    idx = (TensorObject *)a[2];
    if (get_dim(a[1], x->ndim, &dim) < 0 || check_index(fn, idx) < 0)
        return NULL;
    if (op == OP_FILL) {
        is_tensor = cddp_tensor_check(a[3]);
        if (is_tensor && ((TensorObject *)a[3])->ndim != 0) {
            PyErr_Format(PyExc_RuntimeError, "index_fill_ only supports a 0-dimensional value "
                         "tensor, but got tensor with %d dimension(s).",
                         ((TensorObject *)a[3])->ndim);
            return NULL;
        }
        if (is_tensor)
            src = (TensorObject *)Py_NewRef(a[3]);
        else if (cddp_ix_number(a[3], &src) <= 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "index_fill(): argument 'value' must be Number, "
                             "not %s", Py_TYPE(a[3])->tp_name);
            return NULL;
        }
        if (x->ndim == 0 && cddp_numel(idx) > 1) {
            PyErr_Format(PyExc_IndexError, "index_fill_(): Index to scalar can have only 1 "
                         "value, got %lld value(s)", (long long)cddp_numel(idx));
            Py_DECREF(src);
            return NULL;
        }
    } else {
        if (!cddp_tensor_check(a[3])) {
            PyErr_Format(PyExc_TypeError, "%s(): argument 'source' must be Tensor, not %s", fn,
                         Py_TYPE(a[3])->tp_name);
            return NULL;
        }
        src = (TensorObject *)Py_NewRef(a[3]);
        if (op == OP_COPY && !inplace && CDDP_AUTOCAST_ON() && src->dtype != x->dtype &&
            cddp_is_floating(x->dtype) && cddp_is_floating(src->dtype)) {
            /* torch's autocast "promote" rule for index_copy: both in the wider dtype */
            cddp_dtype to = cddp_promote(x->dtype, src->dtype);
            Py_SETREF(src, (TensorObject *)cddp_shape_to_dtype(src, to));
            if (!src || !(promoted = (TensorObject *)cddp_shape_to_dtype(x, to)))
                goto done;
            x = promoted;
        }
        if (check_source(fn, x, dim, idx, src, op == OP_COPY) < 0)
            goto done;
        if (op == OP_ADD && a[4]) {  /* alpha: a differentiable scaling of the source */
            if (!cddp_is_floating(x->dtype) && PyFloat_Check(a[4])) {
                PyErr_SetString(PyExc_RuntimeError, "For integral input tensors, argument alpha "
                                "must not be a floating point number.");
                goto done;
            }
            Py_SETREF(src, (TensorObject *)PyNumber_Multiply((PyObject *)src, a[4]));
            if (!src)
                goto done;
        }
    }
    res = index_write(op, x, dim, idx, src, is_tensor, inplace);
done:
    Py_XDECREF(src);
    Py_XDECREF(promoted);
    return res;
}

static int reduce_kind(PyObject *o, int *red)
{
    static const char *const names[] = {"sum", "prod", "mean", "amax", "amin"};
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "scatter_reduce(): argument 'reduce' must be str, not %s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    for (int k = 0; k < 5; k++) {
        if (PyUnicode_CompareWithASCIIString(o, names[k]) == 0) {
            *red = k;
            return 0;
        }
    }
    PyErr_Format(PyExc_RuntimeError, "reduce argument must be either sum, prod, mean, amax or "
                 "amin, got %U", o);
    return -1;
}

static PyObject *scatter_reduce_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kw, int inplace)
{
    static const char *const names[] = {"input", "dim", "index", "src", "reduce", "include_self"};
    const char *fn = inplace ? "scatter_reduce_" : "scatter_reduce";
    PyObject *a[6];
    TensorObject *x;
    int dim, red, incl = 1;
    if (parse(fn, self, args, nargs, kw, names, 6, 5, 5, a) < 0)
        return NULL;
    x = (TensorObject *)a[0];
    if (!cddp_tensor_check(a[3])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'src' must be Tensor, not %s", fn,
                     Py_TYPE(a[3])->tp_name);
        return NULL;
    }
    if (get_dim(a[1], x->ndim, &dim) < 0 || reduce_kind(a[4], &red) < 0)
        return NULL;
    if (a[5] && (incl = PyObject_IsTrue(a[5])) < 0)
        return NULL;
    return scatter_reduce_impl(x, dim, (TensorObject *)a[2], (TensorObject *)a[3], red, incl,
                               inplace);
}

#define OPS(NAME, CALL)                                                                    \
    static PyObject *t_##NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(s, a, n, kw, 0);                                                       \
    }                                                                                      \
    static PyObject *t_##NAME##_(PyObject *s, PyObject *const *a, Py_ssize_t n,           \
                                 PyObject *kw)                                             \
    {                                                                                      \
        return CALL(s, a, n, kw, 1);                                                       \
    }                                                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return CALL(NULL, a, n, kw, 0);                                                    \
    }
#define ADD(s, a, n, kw, ip) index_op_binding(OP_ADD, s, a, n, kw, ip)
#define COPY(s, a, n, kw, ip) index_op_binding(OP_COPY, s, a, n, kw, ip)
#define FILL(s, a, n, kw, ip) index_op_binding(OP_FILL, s, a, n, kw, ip)
OPS(index_add, ADD)
OPS(index_copy, COPY)
OPS(index_fill, FILL)
OPS(scatter_reduce, scatter_reduce_binding)

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)
#define T3(NAME, DOC)                                                                      \
    {#NAME, FN(t_##NAME), FK, DOC}, {#NAME "_", FN(t_##NAME##_), FK, "in-place " #NAME}

PyMethodDef cddp_index_ops_tensor_methods[] = {
    T3(index_add, "index_add(dim, index, source, *, alpha=1): += alpha * source at index"),
    T3(index_copy, "index_copy(dim, index, source): source's slices written at index"),
    T3(index_fill, "index_fill(dim, index, value): value written at index"),
    T3(scatter_reduce, "scatter_reduce(dim, index, src, reduce, *, include_self=True)"),
    {NULL},
};

PyMethodDef cddp_index_ops_module_methods[] = {
    {"index_add", FN(m_index_add), FK, "index_add(input, dim, index, source, *, alpha=1)"},
    {"index_copy", FN(m_index_copy), FK, "index_copy(input, dim, index, source)"},
    {"index_fill", FN(m_index_fill), FK, "index_fill(input, dim, index, value)"},
    {"scatter_reduce", FN(m_scatter_reduce), FK,
     "scatter_reduce(input, dim, index, src, reduce, *, include_self=True)"},
    {NULL},
};
