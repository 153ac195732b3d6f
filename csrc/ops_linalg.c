/* ops_linalg.c — matrix products with autograd: matmul (the @ operator), mm, bmm, mv, dot,
 * outer, addmm.
 *
 * Mirrors: torch.matmul / mm / bmm / mv / dot / outer / addmm (and the Tensor methods) on CPU,
 * with torch's shape rules, error messages and grad_fn names.
 *
 * Legend: a (..., M, K) @ b (..., K, N) -> (..., M, N); the "..." batch dims broadcast.
 *
 * One engine does every product: bmm_raw multiplies batches of matrices through cddp_gemm
 * (blas.h). 1-D operands enter as (1,K) / (K,1) views and the added dim is dropped from the
 * result; a transpose is a view with the last two strides swapped, which cddp_gemm hands to
 * BLAS as a Trans flag — so neither forward on NumPy's .T views nor backward (dA = dC @ B^T,
 * dB = A^T @ dC) copies an operand to transpose it. Operands BLAS cannot address (stride-0
 * broadcasts, every-other-column slices) are made contiguous once, not per batch.
 */
#include "blas.h"
#include <string.h>

/* Work (multiply-adds) above which the GIL is released around the GEMMs. */
#define GIL_RELEASE_WORK 32768.0

/* torch's two spellings of a dtype in error messages */
static const char *c_name(cddp_dtype d)
{
    static const char *n[CDDP_NDTYPES] = {"float", "double", "long int", "int", "bool"};
    return n[d];
}

static const char *scalar_name(cddp_dtype d)
{
    static const char *n[CDDP_NDTYPES] = {"Float", "Double", "Long", "Int", "Bool"};
    return n[d];
}

/* ---- views (no copies, no autograd) --------------------------------------------------- */

/* t with its last two dims swapped: the transposed operand, same memory. New ref. */
static TensorObject *transposed(TensorObject *t)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS], tmp;
    int n = t->ndim;
    memcpy(sh, t->shape, sizeof(int64_t) * n);
    memcpy(st, t->strides, sizeof(int64_t) * n);
    tmp = sh[n - 1]; sh[n - 1] = sh[n - 2]; sh[n - 2] = tmp;
    tmp = st[n - 1]; st[n - 1] = st[n - 2]; st[n - 2] = tmp;
    return cddp_tensor_alias(t, n, sh, st, t->offset);
}

/* t with a size-1 dim inserted at `dim` (0..ndim). New ref. */
static TensorObject *unsqueezed(TensorObject *t, int dim)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    int n = t->ndim;
    if (n + 1 > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return NULL;
    }
    for (int d = 0, s = 0; d <= n; d++) {
        if (d == dim) {
            sh[d] = 1;
            st[d] = dim < n ? t->strides[dim] * (t->shape[dim] > 1 ? t->shape[dim] : 1) : 1;
        } else {
            sh[d] = t->shape[s];
            st[d] = t->strides[s];
            s++;
        }
    }
    return cddp_tensor_alias(t, n + 1, sh, st, t->offset);
}

/* Contiguous t seen as `shape` (same numel, only size-1 dims added or dropped). New ref. */
static TensorObject *as_shape(TensorObject *t, int ndim, const int64_t *shape)
{
    int64_t st[CDDP_MAX_DIMS];
    cddp_contiguous_strides(ndim, shape, st);
    return cddp_tensor_alias(t, ndim, shape, st, t->offset);
}

/* t itself when BLAS reads its matrices in place (or there is no BLAS path for it), else a
 * contiguous copy. Copying costs O(n^2) against the O(n^3) GEMM it unlocks. New ref. */
static TensorObject *blas_ready(TensorObject *t)
{
    int n = t->ndim;
    if (!cddp_blas_available() || !cddp_is_floating(t->dtype) || cddp_numel(t) == 0 ||
        cddp_blas_addressable(t->dtype, t->shape[n - 2], t->shape[n - 1], t->strides[n - 2],
                              t->strides[n - 1]))
        return (TensorObject *)Py_NewRef(t);
    cddp_blas_operand_copies++;
    return cddp_tensor_contiguous_raw(t);
}

/* Whether batch dims (shape/strides over nb dims) step evenly by `inner` elements — the
 * stride the next-outer dim of a (rows or cols) run of length `len` and stride `st` needs —
 * so batch and that dim fuse into one dim of stride `st`. Size-1 batch dims never matter. */
static int fuses(int nb, const int64_t *bshape, const int64_t *bstr, int64_t len, int64_t st)
{
    int64_t expect = st * len;
    for (int d = nb - 1; d >= 0; d--) {
        if (bshape[d] == 1)
            continue;
        if (bstr[d] != expect)
            return 0;
        expect *= bshape[d];
    }
    return 1;
}

/* Strides of t's batch dims (all but its last two) broadcast over bshape (nb dims). */
static void batch_strides(const TensorObject *t, int nb, const int64_t *bshape, int64_t *out)
{
    int tb = t->ndim - 2;
    for (int d = 0; d < nb; d++) {
        int td = d - (nb - tb);
        out[d] = td >= 0 && t->shape[td] == bshape[d] ? t->strides[td] : 0;
    }
}

/* ---- the engine ----------------------------------------------------------------------- */

/* out(bshape..., M, N) = alpha * a(..., M, K) @ b(..., K, N) [+ beta * out].
 * a, b: >= 2-D, same dtype, matching K, batch dims broadcastable (checked by callers; the
 * broadcast is rechecked here). `out`: NULL to allocate, else a contiguous tensor of the
 * result shape whose contents are scaled by beta (addmm). No autograd. New reference. */
static TensorObject *bmm_raw(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                             double beta)
{
    TensorObject *ac = NULL, *bc = NULL;
    int an = a->ndim, bn = b->ndim, nb;
    int64_t bshape[CDDP_MAX_DIMS], astr[CDDP_MAX_DIMS], bstr[CDDP_MAX_DIMS];
    int64_t idx[CDDP_MAX_DIMS] = {0};
    int64_t M = a->shape[an - 2], K = a->shape[an - 1], N = b->shape[bn - 1], nbatch = 1;
    cddp_dtype dt = a->dtype;
    if (cddp_broadcast_shapes(an - 2, a->shape, bn - 2, b->shape, &nb, bshape) < 0)
        return NULL;
    if (nb + 2 > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return NULL;
    }
    bshape[nb] = M;
    bshape[nb + 1] = N;
    if (out) {
        Py_INCREF(out);
    } else {
        out = cddp_tensor_new(dt, nb + 2, bshape, 0);
        beta = 0;
        if (!out)
            return NULL;
    }
    for (int d = 0; d < nb; d++)
        nbatch *= bshape[d];
    if (nbatch == 0 || M == 0 || N == 0)
        return out;
    ac = blas_ready(a);
    bc = blas_ready(b);
    if (!ac || !bc)
        goto fail;
    batch_strides(ac, nb, bshape, astr);
    batch_strides(bc, nb, bshape, bstr);
    int64_t ars = ac->strides[an - 2], acs = ac->strides[an - 1];
    int64_t brs = bc->strides[bn - 2], bcs = bc->strides[bn - 1];

    /* b shared by every batch and a's batches stack its rows evenly: one tall GEMM
     * (B*M, K) @ (K, N) instead of B small ones — the Linear-on-3-D-input case */
    if (nbatch > 1 && fuses(nb, bshape, astr, M, ars)) {
        int shared = 1;
        for (int d = 0; d < nb; d++)
            shared &= bstr[d] == 0;
        if (shared && (!cddp_blas_available() || !cddp_is_floating(dt) ||
                       cddp_blas_addressable(dt, nbatch * M, K, ars, acs))) {
            M *= nbatch;
            nbatch = 1;
        }
    }

    {
        size_t isz = cddp_dtype_size[dt];
        const char *pa = cddp_data(ac), *pb = cddp_data(bc);
        char *pc = cddp_data(out);
        int64_t aoff = 0, boff = 0;
        PyThreadState *ts = NULL;
        if ((double)nbatch * M * N * K >= GIL_RELEASE_WORK)
            ts = PyEval_SaveThread();
        for (int64_t i = 0; i < nbatch; i++) {
            cddp_gemm(dt, M, N, K, alpha, pa + aoff * (int64_t)isz, ars, acs,
                      pb + boff * (int64_t)isz, brs, bcs, beta, pc + i * M * N * (int64_t)isz, N);
            for (int d = nb - 1; d >= 0; d--) {      /* odometer over the batch dims */
                aoff += astr[d];
                boff += bstr[d];
                if (++idx[d] < bshape[d])
                    break;
                aoff -= astr[d] * bshape[d];
                boff -= bstr[d] * bshape[d];
                idx[d] = 0;
            }
        }
        if (ts)
            PyEval_RestoreThread(ts);
    }
    Py_DECREF(ac);
    Py_DECREF(bc);
    return out;
fail:
    Py_XDECREF(ac);
    Py_XDECREF(bc);
    Py_DECREF(out);
    return NULL;
}

/* sum over the batch of alpha * x_b @ y_b: x (B..., M, K), y (B..., K, N) with the same batch
 * shape -> (M, N). The gradient of a 2-D operand shared by a batch: when x's batches stack its
 * columns evenly and y's its rows, the batch fuses into K and the sum is one GEMM with inner
 * dim B*K; otherwise the per-batch products are summed. New reference. */
static TensorObject *bmm_sum_raw(TensorObject *x, TensorObject *y, double alpha)
{
    TensorObject *xc = NULL, *yc = NULL, *out = NULL, *full = NULL;
    int nb = x->ndim - 2;
    int64_t M = x->shape[nb], K = x->shape[nb + 1], N = y->shape[nb + 1], nbatch = 1;
    int64_t shape[2] = {M, N};
    cddp_dtype dt = x->dtype;
    for (int d = 0; d < nb; d++)
        nbatch *= x->shape[d];
    xc = blas_ready(x);
    yc = blas_ready(y);
    if (!xc || !yc)
        goto fail;
    int64_t xrs = xc->strides[nb], xcs = xc->strides[nb + 1];
    int64_t yrs = yc->strides[nb], ycs = yc->strides[nb + 1];
    int blas = cddp_blas_available() && cddp_is_floating(dt);
    if (nbatch > 0 && fuses(nb, xc->shape, xc->strides, K, xcs) &&
        fuses(nb, yc->shape, yc->strides, K, yrs) &&
        (!blas || (cddp_blas_addressable(dt, M, nbatch * K, xrs, xcs) &&
                   cddp_blas_addressable(dt, nbatch * K, N, yrs, ycs)))) {
        out = cddp_tensor_new(dt, 2, shape, 0);
        if (!out)
            goto fail;
        int64_t KK = nbatch * K;
        PyThreadState *ts = (double)M * N * KK >= GIL_RELEASE_WORK ? PyEval_SaveThread() : NULL;
        cddp_gemm(dt, M, N, KK, alpha, cddp_data(xc), xrs, xcs, cddp_data(yc), yrs, ycs, 0,
                  cddp_data(out), N);
        if (ts)
            PyEval_RestoreThread(ts);
    } else {
        full = bmm_raw(xc, yc, alpha, NULL, 0);
        if (!full)
            goto fail;
        out = cddp_sum_to(full, 2, shape);
    }
fail:
    Py_XDECREF(xc);
    Py_XDECREF(yc);
    Py_XDECREF(full);
    return out;
}

/* alpha * x @ y reduced (summed over broadcast batch dims) to the ndim/shape of the operand
 * whose gradient it is. x, y >= 2-D. New reference. */
static TensorObject *product_sum_to(TensorObject *x, TensorObject *y, double alpha, int ndim,
                                    const int64_t *shape)
{
    TensorObject *full, *r;
    if (ndim == 2 && x->ndim > 2 && x->ndim == y->ndim &&
        memcmp(x->shape, y->shape, sizeof(int64_t) * (x->ndim - 2)) == 0)
        return bmm_sum_raw(x, y, alpha);
    full = bmm_raw(x, y, alpha, NULL, 0);
    if (!full)
        return NULL;
    r = cddp_sum_to(full, ndim, shape);
    Py_DECREF(full);
    return r;
}

/* ---- matmul family: forward views and the shared backward ----------------------------- */

/* How the two operands become matrices: as torch.matmul does, or as outer (a column times
 * a row). Stored in node->i[0]. */
enum { VIEW_MATMUL = 0, VIEW_OUTER = 1 };

/* The >= 2-D views of a, b (and of the result's gradient g when g != NULL) that bmm_raw
 * multiplies. 1-D a -> (1, K), 1-D b -> (K, 1); outer: a -> (N, 1), b -> (1, M). */
static int matrix_views(int how, TensorObject *a, TensorObject *b, TensorObject *g,
                        TensorObject **a2, TensorObject **b2, TensorObject **g2)
{
    *a2 = *b2 = NULL;
    if (g2)
        *g2 = NULL;
    if (how == VIEW_OUTER) {
        *a2 = unsqueezed(a, 1);
        *b2 = unsqueezed(b, 0);
    } else {
        *a2 = a->ndim == 1 ? unsqueezed(a, 0) : (TensorObject *)Py_NewRef(a);
        *b2 = b->ndim == 1 ? unsqueezed(b, 1) : (TensorObject *)Py_NewRef(b);
    }
    if (!*a2 || !*b2)
        goto fail;
    if (g2) {
        if (how == VIEW_OUTER || (a->ndim > 1 && b->ndim > 1)) {
            *g2 = (TensorObject *)Py_NewRef(g);
        } else if (a->ndim == 1 && b->ndim == 1) {   /* 0-dim gradient of a dot */
            int64_t one[2] = {1, 1}, zero[2] = {0, 0};
            *g2 = cddp_tensor_alias(g, 2, one, zero, g->offset);
        } else {
            *g2 = unsqueezed(g, a->ndim == 1 ? g->ndim - 1 : g->ndim);
        }
        if (!*g2)
            goto fail;
    }
    return 0;
fail:
    Py_CLEAR(*a2);
    Py_CLEAR(*b2);
    return -1;
}

/* a @ b (or outer) without autograd; shapes and dtypes already validated. New ref. */
static TensorObject *product_raw(int how, TensorObject *a, TensorObject *b)
{
    TensorObject *a2, *b2, *r;
    if (matrix_views(how, a, b, NULL, &a2, &b2, NULL) < 0)
        return NULL;
    r = bmm_raw(a2, b2, 1.0, NULL, 0);
    Py_DECREF(a2);
    Py_DECREF(b2);
    if (r && how == VIEW_MATMUL && (a->ndim == 1 || b->ndim == 1)) {
        /* drop the dims the 1-D operands gained: (..., 1, N) -> (..., N) etc. */
        int64_t shape[CDDP_MAX_DIMS];
        int n = r->ndim - 2, k = n;
        memcpy(shape, r->shape, sizeof(int64_t) * n);
        if (a->ndim > 1)
            shape[k++] = r->shape[n];
        if (b->ndim > 1)
            shape[k++] = r->shape[n + 1];
        Py_SETREF(r, as_shape(r, k, shape));
    }
    return r;
}

/* Contiguous result r of a gradient product viewed as the operand's shape and dtype in m. */
static TensorObject *as_meta(TensorObject *r, const cddp_meta *m)
{
    TensorObject *v;
    if (!r)
        return NULL;
    v = as_shape(r, m->ndim, m->shape);
    Py_DECREF(r);
    if (v && v->dtype != m->dtype)
        Py_SETREF(v, cddp_tensor_cast_raw(v, m->dtype));
    return v;
}

/* C = A @ B  =>  dA = dC @ B^T,  dB = A^T @ dC, each summed over the batch dims its operand
 * was broadcast along. The transposes are stride-swapped views: BLAS Trans flags, no copies. */
static int matmul_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *a = cddp_node_saved(self, 0), *b, *a2 = NULL, *b2 = NULL, *g2 = NULL, *tr = NULL;
    int how = (int)self->i[0];
    if (!a || !(b = cddp_node_saved(self, 1)))
        return -1;
    if (!gout[0])
        return 0;
    if (matrix_views(how, a, b, gout[0], &a2, &b2, &g2) < 0)
        return -1;
    if (self->next[0].node) {
        if (!(tr = transposed(b2)))
            goto fail;
        gin[0] = as_meta(product_sum_to(g2, tr, 1.0, a2->ndim, a2->shape), &self->meta[0]);
        Py_CLEAR(tr);
        if (!gin[0])
            goto fail;
    }
    if (self->next[1].node) {
        if (!(tr = transposed(a2)))
            goto fail;
        gin[1] = as_meta(product_sum_to(tr, g2, 1.0, b2->ndim, b2->shape), &self->meta[1]);
        Py_CLEAR(tr);
        if (!gin[1])
            goto fail;
    }
    Py_DECREF(a2);
    Py_DECREF(b2);
    Py_DECREF(g2);
    return 0;
fail:
    Py_XDECREF(a2);
    Py_XDECREF(b2);
    Py_XDECREF(g2);
    Py_CLEAR(gin[0]);
    return -1;
}

/* Forward of every matmul-family op once validated: compute a @ b, then record `name` with
 * edges to ea, eb — the tensors the caller was given, which differ from a, b only when outer
 * cast them to a common dtype (backward casts the gradients back). */
static PyObject *product_with_grad(int how, TensorObject *a, TensorObject *b, const char *name,
                                   TensorObject *ea, TensorObject *eb)
{
    int err;
    TensorObject *ins[2] = {ea, eb};
    NodeObject *node;
    TensorObject *out = product_raw(how, a, b);
    if (!out || !cddp_is_floating(out->dtype))
        return (PyObject *)out;
    node = cddp_maybe_node(name, matmul_backward, 2, ins, &err);
    if (err)
        goto fail;
    if (node) {
        cddp_set_history(out, node, 0);
        node->i[0] = how;
        if (cddp_node_save(node, 0, a) < 0 || cddp_node_save(node, 1, b) < 0) {
            Py_DECREF(node);
            goto fail;
        }
        Py_DECREF(node);
    }
    return (PyObject *)out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- validation with torch's wording -------------------------------------------------- */

static int not_bool(TensorObject *a, const char *kernel)
{
    if (a->dtype != CDDP_BOOL)
        return 0;
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for 'Bool'", kernel);
    return -1;
}

static int mm_checks(TensorObject *a, TensorObject *b, int64_t rows_a)
{
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "expected m1 and m2 to have the same dtype, but got: %s != %s",
                     c_name(a->dtype), c_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "addmm_impl_cpu_") < 0)
        return -1;
    int64_t K = a->shape[a->ndim - 1], Kb = b->shape[0], N = b->ndim > 1 ? b->shape[1] : 1;
    if (K != Kb) {
        PyErr_Format(PyExc_RuntimeError,
                     "mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                     (long long)rows_a, (long long)K, (long long)Kb, (long long)N);
        return -1;
    }
    return 0;
}

static int mv_checks(TensorObject *m, TensorObject *v, int64_t rows)
{
    if (m->dtype != v->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "addmv input tensors must have the same dtype, but got %s, %s, and %s",
                     scalar_name(v->dtype), scalar_name(m->dtype), scalar_name(v->dtype));
        return -1;
    }
    if (not_bool(m, "addmv_impl_cpu") < 0)
        return -1;
    if (m->shape[m->ndim - 1] != v->shape[0]) {
        PyErr_Format(PyExc_RuntimeError, "size mismatch, got input (%lld), mat (%lldx%lld), "
                     "vec (%lld)", (long long)rows, (long long)rows,
                     (long long)m->shape[m->ndim - 1], (long long)v->shape[0]);
        return -1;
    }
    return 0;
}

static int dot_checks(TensorObject *a, TensorObject *b)
{
    if (a->ndim != 1 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "1D tensors expected, but got %dD and %dD tensors",
                     a->ndim, b->ndim);
        return -1;
    }
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError,
                     "dot : expected both vectors to have same dtype, but found %s and %s",
                     scalar_name(a->dtype), scalar_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "dot") < 0)
        return -1;
    if (a->shape[0] != b->shape[0]) {
        PyErr_Format(PyExc_RuntimeError,
                     "inconsistent tensor size, expected tensor [%lld] and src [%lld] to have "
                     "the same number of elements, but got %lld and %lld elements respectively",
                     (long long)a->shape[0], (long long)b->shape[0], (long long)a->shape[0],
                     (long long)b->shape[0]);
        return -1;
    }
    return 0;
}

/* Both batched-product checks torch makes: batch dims broadcast, then (B, K) agree, where B
 * is the broadcast batch count. */
static int bmm_checks(TensorObject *a, TensorObject *b)
{
    int an = a->ndim, bn = b->ndim, nb;
    int64_t bshape[CDDP_MAX_DIMS], nbatch = 1;
    int64_t K = a->shape[an - 1], Kb = bn > 1 ? b->shape[bn - 2] : b->shape[0];
    if (cddp_broadcast_shapes(an > 2 ? an - 2 : 0, a->shape, bn > 2 ? bn - 2 : 0, b->shape,
                              &nb, bshape) < 0)
        return -1;
    if (a->dtype != b->dtype) {
        PyErr_Format(PyExc_RuntimeError, "expected scalar type %s but found %s",
                     scalar_name(a->dtype), scalar_name(b->dtype));
        return -1;
    }
    if (not_bool(a, "bmm") < 0)
        return -1;
    for (int d = 0; d < nb; d++)
        nbatch *= bshape[d];
    if (K != Kb) {
        PyErr_Format(PyExc_RuntimeError, "Expected size for first two dimensions of batch2 "
                     "tensor to be: [%lld, %lld] but got: [%lld, %lld].", (long long)nbatch,
                     (long long)K, (long long)nbatch, (long long)Kb);
        return -1;
    }
    return 0;
}

/* torch.matmul: dispatch on the operands' dims, validate as the op torch would use does. */
static PyObject *matmul_impl(TensorObject *a, TensorObject *b)
{
    int an = a->ndim, bn = b->ndim;
    const char *name;
    if (an == 0 || bn == 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "both arguments to matmul need to be at least 1D, but they are %dD and %dD",
                     an, bn);
        return NULL;
    }
    if (an == 1 && bn == 1) {
        if (dot_checks(a, b) < 0)
            return NULL;
        name = "DotBackward0";
    } else if (bn == 1) {                       /* (..., M, K) @ (K,): a matrix-vector product */
        int64_t rows = 1;
        for (int d = 0; d < an - 1; d++)
            rows *= a->shape[d];
        if (mv_checks(a, b, rows) < 0)
            return NULL;
        name = an == 2 ? "MvBackward0" : "UnsafeViewBackward0";
    } else if (an <= 2 && bn == 2) {
        if (mm_checks(a, b, an == 2 ? a->shape[0] : 1) < 0)
            return NULL;
        name = an == 2 ? "MmBackward0" : "SqueezeBackward4";
    } else if (bn == 2) {                       /* (..., M, K) @ (K, N): folded into one mm */
        int64_t rows = 1;
        for (int d = 0; d < an - 1; d++)
            rows *= a->shape[d];
        if (mm_checks(a, b, rows) < 0)
            return NULL;
        name = "UnsafeViewBackward0";
    } else {
        if (bmm_checks(a, b) < 0)
            return NULL;
        name = "UnsafeViewBackward0";
    }
    return product_with_grad(VIEW_MATMUL, a, b, name, a, b);
}

/* ---- argument parsing ----------------------------------------------------------------- */

/* Fill out[0..nnames) from positional args (at most npos) and keywords named `names`;
 * the first nreq are required, the rest stay NULL when absent. TypeError as Python's. */
static int parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, const char *const *names, int nnames, int npos,
                      int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given",
                     fname, npos, nargs);
        return -1;
    }
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < nnames && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == nnames) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         key);
            return -1;
        }
        if (out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fname,
                         names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

static int want_tensor(const char *fname, const char *arg, int pos, PyObject *o)
{
    if (cddp_tensor_check(o))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' (position %d) must be Tensor, not %s",
                 fname, arg, pos, Py_TYPE(o)->tp_name);
    return -1;
}

/* Two tensors, from (a, b) module-call arguments or (self; b) method arguments. */
static int two_tensors(const char *fname, PyObject *self, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
                       TensorObject **a, TensorObject **b)
{
    PyObject *o[2];
    if (self) {
        if (parse_args(fname, args, nargs, kwnames, names + 1, 1, 1, 1, o + 1) < 0)
            return -1;
        o[0] = self;
    } else if (parse_args(fname, args, nargs, kwnames, names, 2, 2, 2, o) < 0) {
        return -1;
    }
    if (want_tensor(fname, names[0], 1, o[0]) < 0 || want_tensor(fname, names[1], 2, o[1]) < 0)
        return -1;
    *a = (TensorObject *)o[0];
    *b = (TensorObject *)o[1];
    return 0;
}

/* ---- public ops ----------------------------------------------------------------------- */

PyObject *cddp_nb_matmul(PyObject *a, PyObject *b)
{
    if (!cddp_tensor_check(a) || !cddp_tensor_check(b))
        Py_RETURN_NOTIMPLEMENTED;
    return matmul_impl((TensorObject *)a, (TensorObject *)b);
}

static const char *const matmul_names[] = {"input", "other"};

static PyObject *matmul_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("matmul", self, args, nargs, kw, matmul_names, &a, &b) < 0)
        return NULL;
    return matmul_impl(a, b);
}

static PyObject *py_matmul(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return matmul_common(NULL, args, nargs, kw);
}

static PyObject *t_matmul(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return matmul_common(self, args, nargs, kw);
}

static const char *const mm_names[] = {"input", "mat2"};

static PyObject *mm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("mm", self, args, nargs, kw, mm_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 2 || b->ndim != 2) {
        PyErr_SetString(PyExc_RuntimeError,
                        a->ndim != 2 ? "self must be a matrix" : "mat2 must be a matrix");
        return NULL;
    }
    if (mm_checks(a, b, a->shape[0]) < 0)
        return NULL;
    return product_with_grad(VIEW_MATMUL, a, b, "MmBackward0", a, b);
}

static PyObject *py_mm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mm_common(NULL, args, nargs, kw);
}

static PyObject *t_mm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mm_common(self, args, nargs, kw);
}

static PyObject *bmm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("bmm", self, args, nargs, kw, mm_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 3 || b->ndim != 3) {
        PyErr_SetString(PyExc_RuntimeError, a->ndim != 3 ? "batch1 must be a 3D tensor"
                                                         : "batch2 must be a 3D tensor");
        return NULL;
    }
    if (a->shape[0] != b->shape[0] || a->shape[2] != b->shape[1]) {    /* no broadcasting */
        PyErr_Format(PyExc_RuntimeError, "Expected size for first two dimensions of batch2 "
                     "tensor to be: [%lld, %lld] but got: [%lld, %lld].",
                     (long long)a->shape[0], (long long)a->shape[2], (long long)b->shape[0],
                     (long long)b->shape[1]);
        return NULL;
    }
    if (bmm_checks(a, b) < 0)
        return NULL;
    return product_with_grad(VIEW_MATMUL, a, b, "BmmBackward0", a, b);
}

static PyObject *py_bmm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return bmm_common(NULL, args, nargs, kw);
}

static PyObject *t_bmm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return bmm_common(self, args, nargs, kw);
}

static const char *const mv_names[] = {"input", "vec"};

static PyObject *mv_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("mv", self, args, nargs, kw, mv_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 2 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "vector + matrix @ vector expected, got 1, %d, %d",
                     a->ndim, b->ndim);
        return NULL;
    }
    if (mv_checks(a, b, a->shape[0]) < 0)
        return NULL;
    return product_with_grad(VIEW_MATMUL, a, b, "MvBackward0", a, b);
}

static PyObject *py_mv(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mv_common(NULL, args, nargs, kw);
}

static PyObject *t_mv(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return mv_common(self, args, nargs, kw);
}

static const char *const dot_names[] = {"input", "tensor"};

static PyObject *dot_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    TensorObject *a, *b;
    if (two_tensors("dot", self, args, nargs, kw, dot_names, &a, &b) < 0)
        return NULL;
    if (dot_checks(a, b) < 0)
        return NULL;
    return product_with_grad(VIEW_MATMUL, a, b, "DotBackward0", a, b);
}

static PyObject *py_dot(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return dot_common(NULL, args, nargs, kw);
}

static PyObject *t_dot(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return dot_common(self, args, nargs, kw);
}

/* outer(a (N,), b (M,)) -> (N, M), a rank-1 GEMM. Promotes dtypes as torch's a[:, None] * b;
 * bool (logical and) goes through int32 since the GEMM kernels have no bool. */
static const char *const outer_names[] = {"input", "vec2"};

static PyObject *outer_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    TensorObject *a, *b, *ac = NULL, *bc = NULL, *r = NULL;
    cddp_dtype dt;
    if (two_tensors("outer", self, args, nargs, kw, outer_names, &a, &b) < 0)
        return NULL;
    if (a->ndim != 1 || b->ndim != 1) {
        PyErr_Format(PyExc_RuntimeError, "outer: Expected 1-D argument %s, but got %d-D",
                     a->ndim != 1 ? "self" : "vec2", a->ndim != 1 ? a->ndim : b->ndim);
        return NULL;
    }
    dt = cddp_promote(a->dtype, b->dtype);
    ac = cddp_tensor_cast_raw(a, dt == CDDP_BOOL ? CDDP_INT32 : dt);
    bc = cddp_tensor_cast_raw(b, dt == CDDP_BOOL ? CDDP_INT32 : dt);
    if (!ac || !bc)
        goto done;
    r = (TensorObject *)product_with_grad(VIEW_OUTER, ac, bc, "MulBackward0", a, b);
    if (r && dt == CDDP_BOOL)
        Py_SETREF(r, cddp_tensor_cast_raw(r, CDDP_BOOL));
done:
    Py_XDECREF(ac);
    Py_XDECREF(bc);
    return (PyObject *)r;
}

static PyObject *py_outer(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return outer_common(NULL, args, nargs, kw);
}

static PyObject *t_outer(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return outer_common(self, args, nargs, kw);
}

/* ---- addmm ---------------------------------------------------------------------------- */

/* g * s as a new contiguous tensor (s == 1: g itself). */
static TensorObject *scaled(TensorObject *g, double s)
{
    TensorObject *r;
    int64_t n;
    if (s == 1)
        return (TensorObject *)Py_NewRef(g);
    r = cddp_tensor_new(g->dtype, g->ndim, g->shape, 0);
    if (!r || cddp_copy_into(r, g) < 0) {
        Py_XDECREF(r);
        return NULL;
    }
    n = cddp_numel(r);
    if (r->dtype == CDDP_FLOAT32) {
        float *p = (float *)cddp_data(r);
        for (int64_t i = 0; i < n; i++)
            p[i] *= (float)s;
    } else {
        double *p = (double *)cddp_data(r);
        for (int64_t i = 0; i < n; i++)
            p[i] *= s;
    }
    return r;
}

/* out = beta * input + alpha * m1 @ m2  =>  d input = beta * g (summed to input's shape),
 * d m1 = alpha * g @ m2^T, d m2 = alpha * m1^T @ g. */
static int addmm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *m1 = cddp_node_saved(self, 0), *m2, *tr = NULL, *g = gout[0], *s;
    double alpha = self->d[0], beta = self->d[1];
    if (!m1 || !(m2 = cddp_node_saved(self, 1)))
        return -1;
    if (!g)
        return 0;
    if (self->next[0].node) {
        if (!(s = scaled(g, beta)))
            goto fail;
        gin[0] = cddp_sum_to(s, self->meta[0].ndim, self->meta[0].shape);
        Py_DECREF(s);
        if (!gin[0])
            goto fail;
    }
    if (self->next[1].node) {
        if (!(tr = transposed(m2)))
            goto fail;
        gin[1] = bmm_raw(g, tr, alpha, NULL, 0);
        Py_CLEAR(tr);
        if (!gin[1])
            goto fail;
    }
    if (self->next[2].node) {
        if (!(tr = transposed(m1)))
            goto fail;
        gin[2] = bmm_raw(tr, g, alpha, NULL, 0);
        Py_CLEAR(tr);
        if (!gin[2])
            goto fail;
    }
    return 0;
fail:
    Py_CLEAR(gin[0]);
    Py_CLEAR(gin[1]);
    return -1;
}

/* A Python number (or 0-dim tensor) as double; truncated toward zero for integer tensors,
 * as torch's addmm does (alpha=1.5 on int64 acts as 1). */
static int scalar_arg(PyObject *o, const char *name, cddp_dtype dt, double *out)
{
    if (!o) {
        *out = 1.0;
        return 0;
    }
    if (cddp_tensor_check(o) && ((TensorObject *)o)->ndim == 0) {
        *out = cddp_get_double((TensorObject *)o, 0);
    } else if (PyLong_Check(o) || PyFloat_Check(o)) {
        *out = PyFloat_AsDouble(o);
        if (*out == -1 && PyErr_Occurred())
            return -1;
    } else {
        PyErr_Format(PyExc_TypeError, "addmm(): argument '%s' must be Number, not %s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!cddp_is_floating(dt))
        *out = (double)(int64_t)*out;
    return 0;
}

/* input must expand to (M, N): torch's expand() wording. */
static int expands_to(TensorObject *in, const int64_t *shape)
{
    char ts[64], ins[256];
    int off = 2 - in->ndim, bad = -1;
    size_t k = 0;
    for (int d = in->ndim - 1; d >= 0 && d + off >= 0; d--)
        if (in->shape[d] != 1 && in->shape[d] != shape[d + off])
            bad = d;
    if (in->ndim <= 2 && bad < 0)
        return 0;
    for (int e = 0; e < in->ndim && k < sizeof ins - 24; e++)
        k += (size_t)snprintf(ins + k, sizeof ins - k, e ? ", %lld" : "%lld",
                              (long long)in->shape[e]);
    ins[k] = 0;
    snprintf(ts, sizeof ts, "%lld, %lld", (long long)shape[0], (long long)shape[1]);
    if (in->ndim > 2)
        PyErr_Format(PyExc_RuntimeError, "expand(cddp.Tensor{[%s]}, size=[%s]): the number of "
                     "sizes provided (2) must be greater or equal to the number of dimensions "
                     "in the tensor (%d)", ins, ts, in->ndim);
    else
        PyErr_Format(PyExc_RuntimeError, "The expanded size of the tensor (%lld) must match the "
                     "existing size (%lld) at non-singleton dimension %d.  Target sizes: [%s].  "
                     "Tensor sizes: [%s]", (long long)shape[bad + off], (long long)in->shape[bad],
                     bad + off, ts, ins);
    return -1;
}

static const char *const addmm_names[] = {"input", "mat1", "mat2", "beta", "alpha"};

static PyObject *addmm_common(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    PyObject *o[5];
    TensorObject *in, *m1, *m2, *out = NULL;
    int64_t shape[2];
    double alpha, beta;
    int err;
    if (self) {
        if (parse_args("addmm", args, nargs, kw, addmm_names + 1, 4, 2, 2, o + 1) < 0)
            return NULL;
        o[0] = self;
    } else if (parse_args("addmm", args, nargs, kw, addmm_names, 5, 3, 3, o) < 0) {
        return NULL;
    }
    for (int i = 0; i < 3; i++)
        if (want_tensor("addmm", addmm_names[i], i + 1, o[i]) < 0)
            return NULL;
    in = (TensorObject *)o[0];
    m1 = (TensorObject *)o[1];
    m2 = (TensorObject *)o[2];
    if (m1->ndim != 2 || m2->ndim != 2) {
        PyErr_Format(PyExc_RuntimeError, "%s must be a matrix, got %d-D tensor",
                     m1->ndim != 2 ? "mat1" : "mat2", m1->ndim != 2 ? m1->ndim : m2->ndim);
        return NULL;
    }
    if (in->dtype != m2->dtype) {
        PyErr_Format(PyExc_RuntimeError, "self and mat2 must have the same dtype, but got %s "
                     "and %s", scalar_name(in->dtype), scalar_name(m2->dtype));
        return NULL;
    }
    if (mm_checks(m1, m2, m1->shape[0]) < 0)
        return NULL;
    if (scalar_arg(o[3], "beta", in->dtype, &beta) < 0 ||
        scalar_arg(o[4], "alpha", in->dtype, &alpha) < 0)
        return NULL;
    shape[0] = m1->shape[0];
    shape[1] = m2->shape[1];
    if (expands_to(in, shape) < 0)                         /* even when beta == 0, as torch */
        return NULL;
    out = cddp_tensor_new(in->dtype, 2, shape, 0);
    if (!out)
        return NULL;
    if (beta != 0 && cddp_copy_into(out, in) < 0)
        goto fail;
    Py_SETREF(out, bmm_raw(m1, m2, alpha, out, beta));
    if (!out || !cddp_is_floating(out->dtype))
        return (PyObject *)out;
    {
        TensorObject *ins[3] = {in, m1, m2};
        NodeObject *node = cddp_maybe_node("AddmmBackward0", addmm_backward, 3, ins, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(out, node, 0);
            node->d[0] = alpha;
            node->d[1] = beta;
            if (cddp_node_save(node, 0, m1) < 0 || cddp_node_save(node, 1, m2) < 0) {
                Py_DECREF(node);
                goto fail;
            }
            Py_DECREF(node);
        }
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *py_addmm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return addmm_common(NULL, args, nargs, kw);
}

static PyObject *t_addmm(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return addmm_common(self, args, nargs, kw);
}

/* ---- tables --------------------------------------------------------------------------- */

#define FK (METH_FASTCALL | METH_KEYWORDS)

PyMethodDef cddp_linalg_tensor_methods[] = {
    {"matmul", (PyCFunction)(void (*)(void))t_matmul, FK, "matmul(other) -> Tensor"},
    {"mm", (PyCFunction)(void (*)(void))t_mm, FK, "mm(mat2) -> Tensor"},
    {"bmm", (PyCFunction)(void (*)(void))t_bmm, FK, "bmm(mat2) -> Tensor"},
    {"mv", (PyCFunction)(void (*)(void))t_mv, FK, "mv(vec) -> Tensor"},
    {"dot", (PyCFunction)(void (*)(void))t_dot, FK, "dot(tensor) -> Tensor"},
    {"outer", (PyCFunction)(void (*)(void))t_outer, FK, "outer(vec2) -> Tensor"},
    {"addmm", (PyCFunction)(void (*)(void))t_addmm, FK,
     "addmm(mat1, mat2, *, beta=1, alpha=1) -> Tensor"},
    {NULL},
};

PyMethodDef cddp_linalg_module_methods[] = {
    {"matmul", (PyCFunction)(void (*)(void))py_matmul, FK,
     "matmul(input, other) -> Tensor: torch.matmul's rules (dot, mv, mm, broadcast bmm)"},
    {"mm", (PyCFunction)(void (*)(void))py_mm, FK, "mm(input, mat2) -> Tensor"},
    {"bmm", (PyCFunction)(void (*)(void))py_bmm, FK, "bmm(input, mat2) -> Tensor"},
    {"mv", (PyCFunction)(void (*)(void))py_mv, FK, "mv(input, vec) -> Tensor"},
    {"dot", (PyCFunction)(void (*)(void))py_dot, FK, "dot(input, tensor) -> Tensor"},
    {"outer", (PyCFunction)(void (*)(void))py_outer, FK, "outer(input, vec2) -> Tensor"},
    {"addmm", (PyCFunction)(void (*)(void))py_addmm, FK,
     "addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor: beta*input + alpha*(mat1@mat2)"},
    {NULL},
};
