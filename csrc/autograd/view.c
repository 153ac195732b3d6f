/* Autograd through views: torch's differentiable views, CopySlices and view regeneration.
 *
 * A view made with grad mode on by a view op (view/reshape, basic indexing, select, narrow,
 * transpose, permute, squeeze/unsqueeze, diagonal, split/chunk/unbind ...) remembers its root
 * base: the tensor it was cut from that is no such view itself. Two things follow, as in torch:
 *  - An in-place op on the view writes into the base, so the base's history must see it:
 *    cddp_set_inplace_history makes a CopySlices node the base's grad_fn (its gradient keeps
 *    the base's gradient outside the view's region and sends the region to the op's node) and
 *    gives the view an AsStridedBackward0 node over the base's new history.
 *  - A view whose storage version moved since its history was recorded (the base or another
 *    view of it was written in place) has stale history: cddp_view_sync rebuilds it from the
 *    base's current history before anything reads it (cddp_node_set_input, the engine's roots,
 *    grad_fn, hooks, the in-place checks). cddp_needs_grad answers for a stale view without
 *    rebuilding it.
 * A view made with grad mode off (or cut from one) keeps no history and is never rebuilt; an
 * in-place op on it with grad mode on that would be recorded is refused with torch's error,
 * since nothing says whether the write should be tracked. Views that overlap themselves
 * (expand, unfold, overlapping as_strided) and views of such bases are not tracked (their
 * history is never rebuilt: that would need a scatter-add); they keep their base only so that
 * an in-place op on them, which no CopySlices would record, is refused while the base needs
 * grad (torch's leaf message for a leaf base).
 *
 * Node geometry (node->ibuf): [view ndim, view offset - base offset, view shape..., view
 * strides..., base strides...]; the base's shape and dtype are node->meta[0]. Gradients are
 * laid out like the base over a buffer spanning its elements, so the view's strides address
 * its region in them directly.
 */
#include "autograd/autograd.h"
#include <string.h>

static int negative_stride(const TensorObject *t)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] < 0)
            return 1;
    return 0;
}

void cddp_view_mark(TensorObject *in, TensorObject *out)
{
    TensorObject *base = in->view_base ? in->view_base : in;
    if (out == base || out->view_base || out->storage != base->storage ||
        out->dtype != base->dtype || !cddp_is_floating(base->dtype))
        return;
    out->view_base = (TensorObject *)Py_NewRef(base);
    out->view_version = out->storage->version;
    out->view_nograd = !cddp_grad_enabled || (in->view_base && in->view_nograd);
}

/* Whether view t's place in its base b can be addressed by strides from b's first element and
 * neither overlaps itself (checked when the relation is used, not at every view op). */
static int trackable(const TensorObject *t, const TensorObject *b)
{
    return t->offset >= b->offset && !negative_stride(b) && !negative_stride(t) &&
           !cddp_self_overlapping(b->ndim, b->shape, b->strides) &&
           !cddp_self_overlapping(t->ndim, t->shape, t->strides);
}

/* ---- the two nodes -------------------------------------------------------------------- */

static int set_geometry(NodeObject *n, const TensorObject *base, const TensorObject *v)
{
    size_t vn = (size_t)v->ndim, bn = (size_t)base->ndim;
    int64_t *g = PyMem_Malloc(sizeof(int64_t) * (2 + 2 * vn + bn));
    if (!g) {
        PyErr_NoMemory();
        return -1;
    }
    g[0] = v->ndim;
    g[1] = v->offset - base->offset;
    memcpy(g + 2, v->shape, sizeof(int64_t) * vn);
    memcpy(g + 2 + vn, v->strides, sizeof(int64_t) * vn);
    memcpy(g + 2 + 2 * vn, base->strides, sizeof(int64_t) * bn);
    PyMem_Free(n->ibuf);
    n->ibuf = g;
    return 0;
}

/* Fresh memory laid out like the base (*gb, zeroed when `zero`) and the view's region of it
 * (*region). 0, or -1 with an exception and nothing returned. */
static int base_layout(NodeObject *n, int zero, TensorObject **gb, TensorObject **region)
{
    const cddp_meta *m = &n->meta[0];
    const int64_t *g = n->ibuf;
    int vn = (int)g[0];
    const int64_t *bst = g + 2 + 2 * vn;
    int64_t span = 1;
    TensorObject *buf;
    for (int d = 0; d < m->ndim; d++)
        span += m->shape[d] > 0 ? (m->shape[d] - 1) * bst[d] : 0;
    buf = cddp_tensor_new(m->dtype, 1, &span, zero);
    if (!buf)
        return -1;
    *gb = cddp_tensor_alias(buf, m->ndim, m->shape, bst, 0);
    *region = *gb ? cddp_tensor_alias(buf, vn, g + 2, g + 2 + vn, g[1]) : NULL;
    Py_DECREF(buf);
    if (!*region) {
        Py_CLEAR(*gb);
        return -1;
    }
    return 0;
}

/* Base after an in-place op on its view: input 0 is the base before, input 1 the view after.
 * g (base shape) -> base before: g with the region zeroed; view after: the region of g. */
static int copy_slices_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *gb = NULL, *region = NULL, *zero = NULL;
    int rc = -1;
    if (!gout[0])
        return 0;
    if (base_layout(self, 0, &gb, &region) < 0)
        return -1;
    if (cddp_copy_into(gb, gout[0]) < 0)
        goto done;
    if (self->next[1].node) {
        gin[1] = cddp_tensor_new(region->dtype, region->ndim, region->shape, 0);
        if (!gin[1] || cddp_copy_into(gin[1], region) < 0)
            goto done;
    }
    if (self->next[0].node) {
        zero = cddp_scalar_tensor(0.0, region->dtype);
        if (!zero || cddp_copy_into(region, zero) < 0)
            goto done;
        gin[0] = (TensorObject *)Py_NewRef(gb);
    }
    rc = 0;
done:
    Py_XDECREF(zero);
    Py_DECREF(region);
    Py_DECREF(gb);
    return rc;
}

/* A view's history rebuilt over its base: g (view shape) lands in zeros of the base's shape.
 * Marked views do not overlap themselves, so a copy places every element once. */
static int as_strided_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *gb, *region;
    int rc;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (base_layout(self, 1, &gb, &region) < 0)
        return -1;
    rc = cddp_copy_into(region, gout[0]);
    Py_DECREF(region);
    if (rc < 0) {
        Py_DECREF(gb);
        return -1;
    }
    gin[0] = gb;
    return 0;
}

/* t's history: an AsStridedBackward0 node over base b's current history. */
static int view_of_base(TensorObject *t, TensorObject *b)
{
    NodeObject *n = cddp_node_new("AsStridedBackward0", as_strided_backward, 1);
    if (!n)
        return -1;
    if (cddp_node_set_input(n, 0, b) < 0 || set_geometry(n, b, t) < 0) {
        Py_DECREF(n);
        return -1;
    }
    cddp_set_history(t, n, 0);
    Py_DECREF(n);
    t->view_version = t->storage->version;
    return t->retains_grad ? cddp_retain_on_history(t) : 0;
}

/* ---- entry points --------------------------------------------------------------------- */

/* The base of view t while it still shares t's storage (t.data = ... or a grown storage end
 * the relation: then it is dropped) and the view is trackable, else NULL. An untrackable
 * view keeps its base so that cddp_check_inplace can refuse writes through it. Borrowed. */
static TensorObject *live_base(TensorObject *t)
{
    if (t->view_base && t->view_base->storage != t->storage)
        Py_CLEAR(t->view_base);
    return t->view_base && trackable(t, t->view_base) ? t->view_base : NULL;
}

int cddp_view_sync(TensorObject *t)
{
    TensorObject *b;
    if (!t->view_base || t->view_nograd || t->view_version == t->storage->version ||
        !(b = live_base(t)))
        return 0;
    if (!b->requires_grad && !b->grad_fn) {
        t->view_version = t->storage->version;
        return 0;
    }
    return view_of_base(t, b);
}

static int refuse_nograd_view(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "A view was created in no_grad mode and is being modified inplace with grad "
                    "mode enabled. Given that this use case is ambiguous and error-prone, it is "
                    "forbidden. You can clarify your code by moving both the view and the "
                    "inplace either both inside the no_grad block (if you don't want the "
                    "inplace to be tracked) or both outside (if you want the inplace to be "
                    "tracked).");
    return -1;
}

int cddp_check_inplace(TensorObject *t)
{
    TensorObject *b = t->view_base;
    if (!cddp_grad_enabled)
        return 0;
    if (b && !t->view_nograd && b->storage == t->storage && cddp_needs_grad(b) &&
        !trackable(t, b)) {
        /* no CopySlices for it: the base's history would miss the write */
        PyErr_SetString(PyExc_RuntimeError, b->requires_grad && !b->grad_fn
                        ? "a view of a leaf Variable that requires grad is being used in an "
                          "in-place operation."
                        : "cddp does not track in-place operations on a view that overlaps "
                          "itself (expand, unfold, an overlapping as_strided) or is cut from "
                          "such a view, when its base requires grad: the base's gradient "
                          "would miss the write. Write into a clone() or out of place.");
        return -1;
    }
    if (cddp_view_sync(t) < 0)
        return -1;
    if (t->requires_grad && !t->grad_fn) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a leaf Variable that requires grad is being used in an in-place "
                        "operation.");
        return -1;
    }
    b = live_base(t);
    if (b && t->view_nograd)
        return cddp_needs_grad(b) ? refuse_nograd_view() : 0;
    if (b && b->requires_grad && !b->grad_fn) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.");
        return -1;
    }
    return 0;
}

int cddp_set_inplace_history(TensorObject *x, NodeObject *n, int output_nr)
{
    TensorObject *b;
    NodeObject *cs;
    cddp_set_history(x, n, output_nr);
    if (!(b = live_base(x)))
        return x->retains_grad ? cddp_retain_on_history(x) : 0;
    if (x->view_nograd)
        return refuse_nograd_view();
    x->view_version = x->storage->version;        /* n is x's current history: keep it */
    if (cddp_check_inplace(x) < 0)
        return -1;
    cs = cddp_node_new("CopySlices", copy_slices_backward, 2);
    if (!cs)
        return -1;
    if (cddp_node_set_input(cs, 0, b) < 0 || cddp_node_set_input(cs, 1, x) < 0 ||
        set_geometry(cs, b, x) < 0) {
        Py_DECREF(cs);
        return -1;
    }
    cddp_set_history(b, cs, 0);
    Py_DECREF(cs);
    if (b->retains_grad && cddp_retain_on_history(b) < 0)
        return -1;
    return view_of_base(x, b);
}

/* ---- for the higher-order engine -------------------------------------------------------- */

/* Storage offset of flat (C-order) element k of shape/strides. */
static int64_t offset_of(int nd, const int64_t *shape, const int64_t *st, int64_t k)
{
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (k % shape[d]) * st[d];
        k /= shape[d];
    }
    return off;
}

PyObject *cddp_view_positions(PyObject *m, PyObject *arg)
{
    NodeObject *n = (NodeObject *)arg;
    const cddp_meta *bm;
    const int64_t *g, *vsh, *vst, *bst;
    int64_t bnum = 1, vnum = 1, lo = 0, hi = 0, *map = NULL, *out;
    TensorObject *pos;
    int vn;
    if (!PyObject_TypeCheck(arg, cddp_state()->node_type)) {
        PyErr_SetString(PyExc_TypeError, "_view_positions expects an autograd Node");
        return NULL;
    }
    if ((n->backward != as_strided_backward && n->backward != copy_slices_backward) ||
        !n->ibuf || n->n_next < 1)
        Py_RETURN_NONE;
    bm = &n->meta[0];
    g = n->ibuf;
    vn = (int)g[0];
    vsh = g + 2;
    vst = g + 2 + vn;
    bst = g + 2 + 2 * vn;
    for (int d = 0; d < bm->ndim; d++) {
        bnum *= bm->shape[d];
        if (bm->shape[d] > 0 && bst[d] < 0)
            lo += (bm->shape[d] - 1) * bst[d];
        else if (bm->shape[d] > 0)
            hi += (bm->shape[d] - 1) * bst[d];
    }
    for (int d = 0; d < vn; d++)
        vnum *= vsh[d];
    pos = cddp_tensor_new(CDDP_INT64, vn, vsh, 0);
    if (!pos)
        return NULL;
    /* the base's storage offsets (relative to its first element) -> its flat index */
    if (bnum > 0 && !(map = PyMem_Malloc(sizeof(int64_t) * (size_t)(hi - lo + 1)))) {
        Py_DECREF(pos);
        return PyErr_NoMemory();
    }
    for (int64_t k = 0; k < bnum; k++)
        map[offset_of(bm->ndim, bm->shape, bst, k) - lo] = k;
    out = (int64_t *)cddp_data(pos);
    for (int64_t k = 0; k < vnum; k++)
        out[k] = map[g[1] + offset_of(vn, vsh, vst, k) - lo];
    PyMem_Free(map);
    return (PyObject *)pos;
}
