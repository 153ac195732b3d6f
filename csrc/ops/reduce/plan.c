/* ops/reduce/plan.c — the reduction plan (cddp_rplan, contracts in ops/reduce/reduce.h):
 * views an input as a contiguous (outer, R, inner) block, permuting and copying only when the
 * reduced dims do not form one run, and maps results and gradients back to the input's shape.
 * Every reduction file (sum, var, scan, all_any, minmax, norm, softmax) runs on it.
 *
 * Layout legend: outer = product of the kept dims before the reduced run, R = product of the
 * reduced dims, inner = product of the kept dims after it; outputs are (outer, inner).
 */
#include "ops/reduce/reduce.h"
#include <string.h>

/* ---- plan ----------------------------------------------------------------------------- */

void cddp_rplan_init(cddp_rplan *p, int ndim, const int64_t *shape, uint32_t mask,
                     int keepdim, int rows)
{
    int first = -1, last = -1, run = 1, k = 0;
    p->ndim = ndim;
    memcpy(p->shape, shape, sizeof(int64_t) * (size_t)ndim);
    p->mask = mask;
    p->keepdim = keepdim;
    p->permuted = 0;
    p->R = 1;
    for (int d = 0; d < ndim; d++) {
        int red = (mask >> d) & 1;
        if (red) {
            p->R *= shape[d];
            if (shape[d] != 1) {
                if (first < 0)
                    first = d;
                last = d;
            }
        }
        if (!red || keepdim)
            p->out_shape[k++] = red ? 1 : shape[d];
    }
    p->out_ndim = k;
    for (int d = first + 1; first >= 0 && d < last; d++)
        if (shape[d] != 1 && !((mask >> d) & 1))
            run = 0;
    p->outer = 1;
    p->inner = 1;
    if (first < 0) {
        /* only size-1 dims reduced: every element is its own row */
        for (int d = 0; d < ndim; d++)
            p->outer *= shape[d];
        return;
    }
    for (int d = last + 1; d < ndim; d++)
        p->inner *= shape[d];
    if (run && (!rows || p->inner == 1)) {
        for (int d = 0; d < first; d++)
            p->outer *= shape[d];
        return;
    }
    /* reduced dims that are not one run (or rows wanted): kept dims first, reduced last */
    p->permuted = 1;
    p->inner = 1;
    k = 0;
    for (int d = 0; d < ndim; d++)
        if (!((mask >> d) & 1)) {
            p->perm[k++] = d;
            p->outer *= shape[d];
        }
    for (int d = 0; d < ndim; d++)
        if ((mask >> d) & 1)
            p->perm[k++] = d;
}

void cddp_rplan_from_node(cddp_rplan *p, NodeObject *node, int rows)
{
    cddp_rplan_init(p, node->meta[0].ndim, node->meta[0].shape, (uint32_t)node->i[0],
                    (int)node->i[1], rows);
}

TensorObject *cddp_rplan_layout(const cddp_rplan *p, TensorObject *x, cddp_dtype dt)
{
    TensorObject *src, *out;
    if (p->permuted) {
        int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
        for (int k = 0; k < p->ndim; k++) {
            sh[k] = x->shape[p->perm[k]];
            st[k] = x->strides[p->perm[k]];
        }
        src = cddp_tensor_alias(x, p->ndim, sh, st, x->offset);
        if (!src)
            return NULL;
    } else {
        src = (TensorObject *)Py_NewRef(x);
    }
    if (src->dtype == dt && cddp_is_contiguous(src))
        return src;
    out = cddp_tensor_new(dt, src->ndim, src->shape, 0);
    if (out && cddp_copy_into(out, src) < 0)
        Py_CLEAR(out);
    Py_DECREF(src);
    return out;
}

TensorObject *cddp_rplan_new_layout(const cddp_rplan *p, cddp_dtype dt, int zero)
{
    int64_t sh[CDDP_MAX_DIMS];
    for (int k = 0; k < p->ndim; k++)
        sh[k] = p->permuted ? p->shape[p->perm[k]] : p->shape[k];
    return cddp_tensor_new(dt, p->ndim, sh, zero);
}

TensorObject *cddp_rplan_unlayout(const cddp_rplan *p, TensorObject *y)
{
    int64_t st[CDDP_MAX_DIMS];
    TensorObject *out, *view;
    if (!p->permuted)
        return (TensorObject *)Py_NewRef(y);
    out = cddp_tensor_new(y->dtype, p->ndim, p->shape, 0);
    if (!out)
        return NULL;
    for (int k = 0; k < p->ndim; k++)
        st[k] = out->strides[p->perm[k]];
    view = cddp_tensor_alias(out, y->ndim, y->shape, st, 0);
    if (!view || cddp_copy_into(view, y) < 0)
        Py_CLEAR(out);
    Py_XDECREF(view);
    return out;
}

TensorObject *cddp_rplan_grad(const cddp_rplan *p, TensorObject *g, cddp_dtype dt)
{
    TensorObject *c, *out;
    if (g->dtype == dt && cddp_is_contiguous(g))
        return (TensorObject *)Py_NewRef(g);
    c = cddp_tensor_new(dt, g->ndim, g->shape, 0);
    if (!c)
        return NULL;
    out = c;
    if (cddp_copy_into(c, g) < 0)
        Py_CLEAR(out);
    return out;
}
