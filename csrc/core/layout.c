/* core/layout.c — memory layouts: which order a new tensor's dims take in memory.
 *
 * Mirrors: TensorIterator's output layout (compute_fast_setup_type, reorder_dimensions,
 * compatible_stride), empty_like's preserve_format (infer_dense_strides), is_non_overlapping_
 * and_dense, the channels-last stride formulas. An elementwise result, a clone, a *_like and a
 * dtype conversion are laid out as their inputs are, so a permuted input gives a permuted
 * output (strides, and the memory order a random fill of it follows) exactly as torch's.
 * Strides are in elements.
 */
#include "core/cddp.h"
#include <string.h>

int cddp_is_dense(int nd, const int64_t *shape, const int64_t *st)
{
    int idx[CDDP_MAX_DIMS], n = 0;
    int64_t want = 1;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0)
            return 1;
        if (shape[d] > 1)
            idx[n++] = d;
    }
    for (int i = 1; i < n; i++) {      /* by increasing stride (insertion: n is small) */
        int k = idx[i], j = i;
        for (; j > 0 && st[idx[j - 1]] > st[k]; j--)
            idx[j] = idx[j - 1];
        idx[j] = k;
    }
    for (int i = 0; i < n; i++) {
        if (st[idx[i]] != want)
            return 0;
        want *= shape[idx[i]];
    }
    return 1;
}

int cddp_same_strides(int nd, const int64_t *shape, const int64_t *a, const int64_t *b)
{
    for (int d = 0; d < nd; d++)
        if (shape[d] > 1 && a[d] != b[d])
            return 0;
    return 1;
}

int cddp_same_layout(const TensorObject *a, const TensorObject *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * b->ndim) &&
           cddp_same_strides(b->ndim, b->shape, a->strides, b->strides);
}

/* torch's channels-last orders: C innermost, then the spatial dims innermost first, then N */
static const int cl_order[2][5] = {{1, 3, 2, 0}, {1, 4, 3, 2, 0}};

int cddp_channels_last_strides(int nd, const int64_t *shape, int64_t *st)
{
    if (nd != 4 && nd != 5)
        return -1;
    int64_t s = 1;
    for (int i = 0; i < nd; i++) {
        int d = cl_order[nd - 4][i];
        st[d] = s;
        s *= shape[d];
    }
    return 0;
}

static int is_channels_last(const TensorObject *t)
{
    int64_t want = 1;
    if (t->ndim != 4 && t->ndim != 5)
        return 0;
    for (int i = 0; i < t->ndim; i++) {
        int d = cl_order[t->ndim - 4][i];
        if (t->shape[d] != 1) {
            if (t->strides[d] != want)
                return 0;
            want *= t->shape[d];
        }
    }
    return 1;
}

/* The strides of a dense tensor whose dims lie in memory in order perm (perm[0] innermost),
 * as TensorIterator's compatible_stride: the product of the inner sizes. */
static void strides_of_order(int nd, const int64_t *shape, const int *perm, int64_t *st)
{
    int64_t s = 1;
    for (int i = 0; i < nd; i++) {
        st[perm[i]] = s;
        s *= shape[perm[i]];
    }
}

/* TensorIterator's reorder_dimensions: the operands vote, first operand first, on whether dim
 * a lies outside dim b; a broadcast (stride 0) dim abstains, equal strides put the larger dim
 * outside. The insertion sort keeps ambiguous pairs in their place, starting from C order. */
static int should_swap(int nops, const int64_t (*st)[CDDP_MAX_DIMS], const int64_t *shape,
                       int a, int b)
{
    for (int k = 0; k < nops; k++) {
        int64_t sa = st[k][a], sb = st[k][b];
        if (sa == 0 || sb == 0)
            continue;
        if (sa < sb)
            return -1;
        if (sa > sb)
            return 1;
        if (shape[a] > shape[b])
            return 1;
    }
    return 0;
}

void cddp_layout_order(int nd, const int64_t *shape, int nops,
                       const int64_t (*st)[CDDP_MAX_DIMS], int *perm)
{
    for (int i = 0; i < nd; i++)
        perm[i] = nd - 1 - i;
    for (int i = 1; i < nd; i++) {
        int d1 = i;
        for (int d0 = i - 1; d0 >= 0; d0--) {
            int c = should_swap(nops, st, shape, perm[d0], perm[d1]);
            if (c > 0) {
                int tmp = perm[d0];
                perm[d0] = perm[d1];
                perm[d1] = tmp;
                d1 = d0;
            } else if (c < 0) {
                break;
            }
        }
    }
}

void cddp_result_strides(int nd, const int64_t *shape, int nops, TensorObject *const *ops,
                         int64_t *out)
{
    int64_t bst[CDDP_ITER_MAX_OPS][CDDP_MAX_DIMS];
    int perm[CDDP_MAX_DIMS], k = 0, same = 1, contig = 1, cl = 1, dense = 1;
    cddp_contiguous_strides(nd, shape, out);
    /* the common case first: contiguous operands give a contiguous result (broadcast ones
     * too: every vote keeps C order; only a size-1 dim's stride could differ from torch's) */
    for (int i = 0; i < nops && contig; i++)
        contig = !ops[i] || cddp_is_contiguous(ops[i]);
    if (contig || nd <= 1)
        return;
    for (int i = 0; i < nops; i++) {
        const TensorObject *t = ops[i];
        if (!t) {                          /* a Python scalar: a 0-dim operand in torch */
            same = 0;
            continue;
        }
        same &= t->ndim == nd && (nd == 0 || !memcmp(t->shape, shape, sizeof(int64_t) * nd));
        cl &= is_channels_last(t);
        dense &= cddp_is_dense(t->ndim, t->shape, t->strides);
    }
    if (same) {                            /* compute_fast_setup_type */
        if (cl) {
            cddp_channels_last_strides(nd, shape, out);
            return;
        }
        if (dense) {
            const TensorObject *last = NULL;
            for (int i = nops - 1; i >= 0; i--) {
                if (!ops[i])
                    continue;
                if (last && memcmp(ops[i]->strides, last->strides, sizeof(int64_t) * nd))
                    dense = 0;
                last = ops[i];
            }
            if (dense && last) {
                memcpy(out, last->strides, sizeof(int64_t) * nd);
                return;
            }
        }
    }
    for (int i = 0; i < nops; i++)
        if (ops[i] && cddp_broadcast_strides(ops[i], nd, shape, bst[k++]) < 0) {
            PyErr_Clear();                 /* not broadcastable: the caller reports that */
            return;
        }
    cddp_layout_order(nd, shape, k, (const int64_t (*)[CDDP_MAX_DIMS])bst, perm);
    for (int i = 0; i < nd; i++)
        if (perm[i] != nd - 1 - i) {
            strides_of_order(nd, shape, perm, out);
            return;
        }
}

void cddp_like_strides(const TensorObject *t, int64_t *out)
{
    int perm[CDDP_MAX_DIMS];
    if (cddp_is_dense(t->ndim, t->shape, t->strides)) {
        memcpy(out, t->strides, sizeof(int64_t) * t->ndim);
        return;
    }
    /* infer_dense_strides: the one operand's vote */
    cddp_layout_order(t->ndim, t->shape, 1, (const int64_t (*)[CDDP_MAX_DIMS])&t->strides, perm);
    strides_of_order(t->ndim, t->shape, perm, out);
}

TensorObject *cddp_tensor_new_strided(cddp_dtype dt, int nd, const int64_t *shape,
                                      const int64_t *strides, int zero)
{
    TensorObject *t = zero == 2 ? cddp_tensor_new_meta(dt, nd, shape)
                                : cddp_tensor_new(dt, nd, shape, zero);
    if (t && nd)
        memcpy(t->strides, strides, sizeof(int64_t) * nd);
    return t;
}

int cddp_parse_memory_format(PyObject *o, int *fmt)
{
    static const char *const names[] = {"preserve_format", "contiguous_format", "channels_last",
                                        "channels_last_3d"};
    PyObject *name;
    *fmt = CDDP_MF_PRESERVE;
    if (!o || o == Py_None)
        return 0;
    name = PyObject_GetAttrString(o, "name");
    if (!name || !PyUnicode_Check(name) ||
        strcmp(Py_TYPE(o)->tp_name, "memory_format") != 0) {
        Py_XDECREF(name);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "argument 'memory_format' must be torch.memory_format, "
                     "not %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        if (PyUnicode_CompareWithASCIIString(name, names[i]) == 0) {
            *fmt = i;
            Py_DECREF(name);
            return 0;
        }
    }
    Py_DECREF(name);
    PyErr_SetString(PyExc_TypeError, "unknown memory_format");
    return -1;
}

int cddp_format_strides(const TensorObject *x, int fmt, int64_t *st)
{
    switch (fmt) {
    case CDDP_MF_PRESERVE:
        cddp_like_strides(x, st);
        return 0;
    case CDDP_MF_CONTIGUOUS:
        cddp_contiguous_strides(x->ndim, x->shape, st);
        return 0;
    default:
        if (x->ndim == (fmt == CDDP_MF_CHANNELS_LAST ? 4 : 5))
            return cddp_channels_last_strides(x->ndim, x->shape, st);
        PyErr_Format(PyExc_RuntimeError, "required rank %d tensor to use %s format",
                     fmt == CDDP_MF_CHANNELS_LAST ? 4 : 5,
                     fmt == CDDP_MF_CHANNELS_LAST ? "channels_last" : "channels_last_3d");
        return -1;
    }
}

/* is_channels_last_strides_2d / _3d: strides growing over C, the spatial dims, N; the
 * ambiguous cases (a trivial C, N111) read as contiguous, as torch's do. */
static int strides_like_channels_last(const TensorObject *x)
{
    int64_t min = 0;
    const int *order = cl_order[x->ndim - 4];
    if (x->strides[1] == 0)
        return 0;
    for (int i = 0; i < x->ndim; i++) {
        int d = order[i];
        if (x->shape[d] == 0 || x->strides[d] < min)
            return 0;
        if (d == 0 && min == x->strides[1])
            return 0;
        min = x->strides[d];
        if (x->shape[d] > 1)
            min *= x->shape[d];
    }
    return 1;
}

int cddp_suggest_memory_format(const TensorObject *x)
{
    if ((x->ndim == 4 || x->ndim == 5) && strides_like_channels_last(x))
        return x->ndim == 4 ? CDDP_MF_CHANNELS_LAST : CDDP_MF_CHANNELS_LAST_3D;
    return CDDP_MF_CONTIGUOUS;
}
