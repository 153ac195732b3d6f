/* ops/linalg/linalg_engine.c — the batched-product engine under every matrix op, and the autograd
 * backward of the matmul family and addmm.
 *
 * Mirrors: at::bmm / at::matmul's folding, MmBackward0 / BmmBackward0 / AddmmBackward0.
 * Legend: a (..., M, K) @ b (..., K, N) -> (..., M, N); the "..." batch dims broadcast.
 *
 * cddp_bmm_raw multiplies batches of matrices through cddp_gemm (ops/linalg/blas.h). 1-D operands enter
 * as (1,K) / (K,1) views and the added dim is dropped from the result; a transpose is a view
 * with the last two strides swapped, which cddp_gemm hands to BLAS as a Trans flag — so
 * neither forward on NumPy's .T views nor backward (dA = dC @ B^T, dB = A^T @ dC) copies an
 * operand to transpose it. Operands BLAS cannot address (stride-0 broadcasts, every-other-
 * column slices) are made contiguous once, not per batch.
 */
#include "ops/linalg/blas.h"
#include <string.h>

/* Work (multiply-adds) above which the GIL is released around the GEMMs. */
#define GIL_RELEASE_WORK 32768.0

/* ---- views (no copies, no autograd) --------------------------------------------------- */

/* t with its last two dims swapped: the transposed operand, same memory. New ref. */
TensorObject *cddp_transposed(TensorObject *t)
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

static TensorObject *bmm_core(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                              double beta, int bf16);
static TensorObject *bmm_sum_core(TensorObject *x, TensorObject *y, double alpha, int bf16);

/* Whether a product of dtype dt runs on bf16 operands in place (cddp_gemm_bf16: float32
 * results of the bf16 values, no float32 copies of the operands). */
static int bf16_direct(cddp_dtype dt)
{
    return dt == CDDP_BFLOAT16 && cddp_gemm_bf16_wanted();
}

/* Storage dtypes (float16, bfloat16, small integers): the product in their compute dtype
 * (float accumulation, as torch's Half GEMM; int32 wrapping, exact modulo 2^8 / 2^16), rounded
 * into dt once. bfloat16 on an AVX512-BF16 CPU multiplies the operands in place into float32
 * (bf16_direct); the others multiply compute-dtype copies. out (addmm), when given, is read and
 * written in dt. New reference. */
static TensorObject *bmm_narrow(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                                double beta)
{
    cddp_dtype dt = a->dtype, kt = cddp_kdt(dt);
    int direct = bf16_direct(dt);
    TensorObject *ka = NULL, *kb = NULL, *ko = NULL, *r = NULL;
    if ((!direct && (!(ka = cddp_tensor_cast_raw(a, kt)) || !(kb = cddp_tensor_cast_raw(b, kt)))) ||
        (out && !(ko = cddp_tensor_cast_raw(out, kt))))
        goto done;
    if (!(r = direct ? bmm_core(a, b, alpha, ko, beta, 1) : bmm_core(ka, kb, alpha, ko, beta, 0)))
        goto done;
    if (out) {
        Py_SETREF(r, cddp_copy_into(out, r) < 0 ? NULL : (TensorObject *)Py_NewRef(out));
    } else {
        Py_SETREF(r, cddp_tensor_cast_raw(r, dt));
    }
done:
    Py_XDECREF(ka);
    Py_XDECREF(kb);
    Py_XDECREF(ko);
    return r;
}

/* out(bshape..., M, N) = alpha * a(..., M, K) @ b(..., K, N) [+ beta * out].
 * a, b: >= 2-D, same dtype, matching K, batch dims broadcastable (checked by callers; the
 * broadcast is rechecked here). `out`: NULL to allocate, else a contiguous tensor of the
 * result shape whose contents are scaled by beta (addmm). No autograd. New reference. */
TensorObject *cddp_bmm_raw(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                           double beta)
{
    if (cddp_is_narrow(a->dtype))
        return bmm_narrow(a, b, alpha, out, beta);
    return bmm_core(a, b, alpha, out, beta, 0);
}

/* cddp_bmm_raw on a wide dtype, or (bf16 != 0) on bfloat16 operands read in place into a
 * float32 out (cddp_gemm_bf16 takes any strides: nothing is made contiguous). */
static TensorObject *bmm_core(TensorObject *a, TensorObject *b, double alpha, TensorObject *out,
                              double beta, int bf16)
{
    TensorObject *ac = NULL, *bc = NULL;
    int an = a->ndim, bn = b->ndim, nb, err = 0;
    int64_t bshape[CDDP_MAX_DIMS], astr[CDDP_MAX_DIMS], bstr[CDDP_MAX_DIMS];
    int64_t idx[CDDP_MAX_DIMS] = {0};
    int64_t M = a->shape[an - 2], K = a->shape[an - 1], N = b->shape[bn - 1], nbatch = 1;
    cddp_dtype dt = a->dtype, ot = bf16 ? CDDP_FLOAT32 : dt;
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
        out = cddp_tensor_new(ot, nb + 2, bshape, 0);
        beta = 0;
        if (!out)
            return NULL;
    }
    for (int d = 0; d < nb; d++)
        nbatch *= bshape[d];
    if (nbatch == 0 || M == 0 || N == 0)
        return out;
    ac = bf16 ? (TensorObject *)Py_NewRef(a) : blas_ready(a);
    bc = bf16 ? (TensorObject *)Py_NewRef(b) : blas_ready(b);
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
        if (shared && (bf16 || !cddp_blas_available() || !cddp_is_floating(dt) ||
                       cddp_blas_addressable(dt, nbatch * M, K, ars, acs))) {
            M *= nbatch;
            nbatch = 1;
        }
    }

    {
        size_t isz = cddp_dtype_size[dt], osz = cddp_dtype_size[ot];
        const char *pa = cddp_data(ac), *pb = cddp_data(bc);
        char *pc = cddp_data(out);
        int64_t aoff = 0, boff = 0;
        PyThreadState *ts = NULL;
        if ((double)nbatch * M * N * K >= GIL_RELEASE_WORK)
            ts = PyEval_SaveThread();
        for (int64_t i = 0; i < nbatch && !err; i++) {
            err = cddp_gemm_either(bf16, dt, M, N, K, alpha, pa + aoff * (int64_t)isz, ars, acs,
                              pb + boff * (int64_t)isz, brs, bcs, beta,
                              pc + i * M * N * (int64_t)osz, N);
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
    if (err) {
        PyErr_NoMemory();
        goto fail;
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
 * dim B*K; otherwise the per-batch products are summed. Storage dtypes as bmm_narrow. New
 * reference. */
static TensorObject *bmm_sum_raw(TensorObject *x, TensorObject *y, double alpha)
{
    cddp_dtype dt = x->dtype, kt = cddp_kdt(dt);
    TensorObject *kx = NULL, *ky = NULL, *r = NULL;
    if (!cddp_is_narrow(dt))
        return bmm_sum_core(x, y, alpha, 0);
    if (bf16_direct(dt))
        r = bmm_sum_core(x, y, alpha, 1);
    else if ((kx = cddp_tensor_cast_raw(x, kt)) && (ky = cddp_tensor_cast_raw(y, kt)))
        r = bmm_sum_core(kx, ky, alpha, 0);
    if (r)                                  /* computed in float32 / int32, rounded once */
        Py_SETREF(r, cddp_tensor_cast_raw(r, dt));
    Py_XDECREF(kx);
    Py_XDECREF(ky);
    return r;
}

/* bmm_sum_raw on a wide dtype, or (bf16 != 0) on bfloat16 operands into a float32 result. */
static TensorObject *bmm_sum_core(TensorObject *x, TensorObject *y, double alpha, int bf16)
{
    TensorObject *xc = NULL, *yc = NULL, *out = NULL, *full = NULL;
    int nb = x->ndim - 2, err;
    int64_t M = x->shape[nb], K = x->shape[nb + 1], N = y->shape[nb + 1], nbatch = 1;
    int64_t shape[2] = {M, N};
    cddp_dtype dt = x->dtype;
    for (int d = 0; d < nb; d++)
        nbatch *= x->shape[d];
    xc = bf16 ? (TensorObject *)Py_NewRef(x) : blas_ready(x);
    yc = bf16 ? (TensorObject *)Py_NewRef(y) : blas_ready(y);
    if (!xc || !yc)
        goto fail;
    int64_t xrs = xc->strides[nb], xcs = xc->strides[nb + 1];
    int64_t yrs = yc->strides[nb], ycs = yc->strides[nb + 1];
    int blas = !bf16 && cddp_blas_available() && cddp_is_floating(dt);
    if (nbatch > 0 && fuses(nb, xc->shape, xc->strides, K, xcs) &&
        fuses(nb, yc->shape, yc->strides, K, yrs) &&
        (!blas || (cddp_blas_addressable(dt, M, nbatch * K, xrs, xcs) &&
                   cddp_blas_addressable(dt, nbatch * K, N, yrs, ycs)))) {
        out = cddp_tensor_new(bf16 ? CDDP_FLOAT32 : dt, 2, shape, 0);
        if (!out)
            goto fail;
        int64_t KK = nbatch * K;
        PyThreadState *ts = (double)M * N * KK >= GIL_RELEASE_WORK ? PyEval_SaveThread() : NULL;
        err = cddp_gemm_either(bf16, dt, M, N, KK, alpha, cddp_data(xc), xrs, xcs, cddp_data(yc), yrs,
                          ycs, 0, cddp_data(out), N);
        if (ts)
            PyEval_RestoreThread(ts);
        if (err) {
            PyErr_NoMemory();
            Py_CLEAR(out);
        }
    } else {
        full = bmm_core(xc, yc, alpha, NULL, 0, bf16);
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
    full = cddp_bmm_raw(x, y, alpha, NULL, 0);
    if (!full)
        return NULL;
    r = cddp_sum_to(full, ndim, shape);
    Py_DECREF(full);
    return r;
}

/* ---- matmul family: forward views and the shared backward ----------------------------- */

/* The >= 2-D views of a, b (and of the result's gradient g when g != NULL) that bmm_raw
 * multiplies. 1-D a -> (1, K), 1-D b -> (K, 1); outer: a -> (N, 1), b -> (1, M). */
static int matrix_views(int how, TensorObject *a, TensorObject *b, TensorObject *g,
                        TensorObject **a2, TensorObject **b2, TensorObject **g2)
{
    *a2 = *b2 = NULL;
    if (g2)
        *g2 = NULL;
    if (how == CDDP_VIEW_OUTER) {
        *a2 = unsqueezed(a, 1);
        *b2 = unsqueezed(b, 0);
    } else {
        *a2 = a->ndim == 1 ? unsqueezed(a, 0) : (TensorObject *)Py_NewRef(a);
        *b2 = b->ndim == 1 ? unsqueezed(b, 1) : (TensorObject *)Py_NewRef(b);
    }
    if (!*a2 || !*b2)
        goto fail;
    if (g2) {
        if (how == CDDP_VIEW_OUTER || (a->ndim > 1 && b->ndim > 1)) {
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
    r = cddp_bmm_raw(a2, b2, 1.0, NULL, 0);
    Py_DECREF(a2);
    Py_DECREF(b2);
    if (r && how == CDDP_VIEW_MATMUL && (a->ndim == 1 || b->ndim == 1)) {
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
        if (!(tr = cddp_transposed(b2)))
            goto fail;
        gin[0] = as_meta(product_sum_to(g2, tr, 1.0, a2->ndim, a2->shape), &self->meta[0]);
        Py_CLEAR(tr);
        if (!gin[0])
            goto fail;
    }
    if (self->next[1].node) {
        if (!(tr = cddp_transposed(a2)))
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
PyObject *cddp_product_with_grad(int how, TensorObject *a, TensorObject *b, const char *name,
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

/* ---- addmm backward ------------------------------------------------------------------- */

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
    if (cddp_is_reduced(r->dtype)) {      /* each product rounded to the dtype, as torch's mul */
        for (int64_t i = 0; i < n; i++) {
            uint16_t *p = (uint16_t *)cddp_data(r) + i;
            cddp_store_double(r->dtype, p, (float)cddp_load_double(r->dtype, p) * (float)s);
        }
    } else if (r->dtype == CDDP_FLOAT32) {
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
int cddp_addmm_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
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
        if (!(tr = cddp_transposed(m2)))
            goto fail;
        gin[1] = cddp_bmm_raw(g, tr, alpha, NULL, 0);
        Py_CLEAR(tr);
        if (!gin[1])
            goto fail;
    }
    if (self->next[2].node) {
        if (!(tr = cddp_transposed(m1)))
            goto fail;
        gin[2] = cddp_bmm_raw(tr, g, alpha, NULL, 0);
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
