/* nn/linear.c — the Linear layer's math (torch.nn.functional.linear) with autograd.
 *
 *   _linear(x (*, K), W (N, K), b (N,) | None) -> y (*, N)
 *
 * Forward: one GEMM; the bias rides along (rows of y start as the bias and the GEMM
 * accumulates with beta=1, or it is added by the transpose-copy of the swapped product — see
 * linear_forward). W^T is addressed through strides, never copied.
 * Backward: dX (M,K) = dY @ W and dW (N,K) = dY^T @ X as two GEMMs; db (N) = column sums of
 * dY in one reduction. M is the product of x's leading dims.
 * float16/bfloat16: both passes accumulate in float32 (as torch's Half GEMM) and each result
 * is rounded to the dtype once. bfloat16 on an AVX512-BF16 CPU (cddp_gemm_bf16_wanted) reads
 * the bf16 operands in place (blas.h: cddp_gemm_bf16); otherwise the GEMMs run on float32
 * copies.
 */
#include "core/cddp.h"
#include "amp/amp.h"
#include "common/clones.h"
#include "module.h"
#include "ops/linalg/blas.h"
#include <string.h>

#define GIL_FREE_FLOPS (1 << 16)

/* db (N) += the column sums of dY (M, N) contiguous, row by row (each db[n] sums in m order,
 * float32 for float32 and bf16 rows, double for float64): vectorized along n by the clones. */
CDDP_CLONES static void colsum_bf16(const uint16_t *restrict g, int64_t M, int64_t N,
                                    float *restrict db)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            db[n] += cddp_bf16_to_f32(g[m * N + n]);
}

CDDP_CLONES static void colsum_f32(const float *restrict g, int64_t M, int64_t N,
                                   float *restrict db)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            db[n] += g[m * N + n];
}

CDDP_CLONES static void colsum_f64(const double *restrict g, int64_t M, int64_t N,
                                   double *restrict db)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            db[n] += g[m * N + n];
}

static int linear_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *w = cddp_node_saved(self, 1), *gy = NULL;
    int rc = -1, err = 0;
    if (!x || !w)
        return -1;
    if (!gout[0])
        return 0;
    int64_t M = self->i[0], K = self->i[1], N = self->i[2];
    /* dt: the results' compute dtype (float16 / bfloat16: float32); st: the operands' —
     * bfloat16 itself when the bf16 kernel reads them in place, else dt */
    cddp_dtype odt = x->dtype, dt = cddp_kdt(odt);
    int bf16 = odt == CDDP_BFLOAT16 && cddp_gemm_bf16_wanted();
    cddp_dtype st = bf16 ? odt : dt;
    x = cddp_tensor_cast_raw(x, st);                   /* new references from here on */
    w = x ? cddp_tensor_cast_raw(w, st) : NULL;
    gy = w ? cddp_tensor_cast_raw(gout[0], st) : NULL;
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        goto done;
    const char *dy = cddp_data(gy);
    if (self->next[0].node) {                              /* dX (M,K) = dY (M,N) @ W (N,K) */
        gin[0] = cddp_tensor_new(dt, self->meta[0].ndim, self->meta[0].shape, 0);
        if (!gin[0])
            goto done;
        char *dx = cddp_data(gin[0]);
        const char *wp = cddp_data(w);
        Py_BEGIN_ALLOW_THREADS
        err = cddp_gemm_either(bf16, st, M, K, N, 1.0, dy, N, 1, wp, w->strides[0], w->strides[1],
                               0.0, dx, K);
        Py_END_ALLOW_THREADS
    }
    if (self->next[1].node && !err) {                      /* dW (N,K) = dY^T (N,M) @ X (M,K) */
        gin[1] = cddp_tensor_new(dt, 2, self->meta[1].shape, 0);
        if (!gin[1])
            goto done;
        char *dw = cddp_data(gin[1]);
        const char *xp = cddp_data(x);
        Py_BEGIN_ALLOW_THREADS
        err = cddp_gemm_either(bf16, st, N, K, M, 1.0, dy, 1, N, xp, K, 1, 0.0, dw, K);
        Py_END_ALLOW_THREADS
    }
    if (err) {
        PyErr_NoMemory();
        goto done;
    }
    if (self->n_next > 2 && self->next[2].node) {          /* db (N) = sum over rows of dY */
        gin[2] = cddp_tensor_new(dt, 1, &N, 1);
        if (!gin[2])
            goto done;
        if (bf16)
            colsum_bf16((const uint16_t *)dy, M, N, (float *)cddp_data(gin[2]));
        else if (dt == CDDP_FLOAT32)
            colsum_f32((const float *)dy, M, N, (float *)cddp_data(gin[2]));
        else
            colsum_f64((const double *)dy, M, N, (double *)cddp_data(gin[2]));
    }
    rc = 0;
    for (int i = 0; i < self->n_next && odt != dt; i++)     /* rounded to the params' dtype */
        if (gin[i] && !(gin[i] = cddp_tensor_cast_steal(gin[i], odt)))
            rc = -1;
done:
    Py_XDECREF(x);
    Py_XDECREF(w);
    Py_XDECREF(gy);
    return rc;
}

/* Y (M,N) = X (M,K) @ W^T + b. For a batch smaller than the output width (the common
 * training shape), OpenBLAS is ~20% faster computing the transposed product T (N,M) =
 * W @ X^T and the transpose-copy back costs far less — and carries the bias add, so the bias
 * still costs no pass of its own. Otherwise rows of Y start as the bias and one GEMM with
 * beta=1 accumulates into them. */
#define T_TILE 32

static int linear_forward(TensorObject *xc, TensorObject *w, TensorObject *b, TensorObject *y,
                          int64_t M, int64_t K, int64_t N)
{
    cddp_dtype dt = xc->dtype;
    size_t isz = cddp_dtype_size[dt];
    const char *xp = cddp_data(xc), *wp = cddp_data(w);
    char *yp = cddp_data(y);
    TensorObject *bc = b ? cddp_tensor_contiguous_raw(b) : NULL;
    const char *bp = bc ? cddp_data(bc) : NULL;
    int big = M * N * K > GIL_FREE_FLOPS, swap = big && M < N && M >= 8;
    int64_t tshape[2] = {N, M};
    TensorObject *tmp = swap ? cddp_tensor_new(dt, 2, tshape, 0) : NULL;
    if ((b && !bc) || (swap && !tmp)) {
        Py_XDECREF(bc);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    if (swap) {
        char *tp = cddp_data(tmp);
        /* T (N,M) = W (N,K) @ X^T (K,M) */
        cddp_gemm(dt, N, M, K, 1.0, wp, w->strides[0], w->strides[1], xp, 1, K, 0.0, tp, M);
        for (int64_t j0 = 0; j0 < N; j0 += T_TILE)
            for (int64_t i0 = 0; i0 < M; i0 += T_TILE) {
                int64_t j1 = j0 + T_TILE < N ? j0 + T_TILE : N;
                int64_t i1 = i0 + T_TILE < M ? i0 + T_TILE : M;
                if (dt == CDDP_FLOAT32) {
                    const float *t = (const float *)tp, *bv = (const float *)bp;
                    float *o = (float *)yp;
                    for (int64_t i = i0; i < i1; i++)
                        for (int64_t j = j0; j < j1; j++)
                            o[i * N + j] = t[j * M + i] + (bv ? bv[j] : 0.0f);
                } else {
                    const double *t = (const double *)tp, *bv = (const double *)bp;
                    double *o = (double *)yp;
                    for (int64_t i = i0; i < i1; i++)
                        for (int64_t j = j0; j < j1; j++)
                            o[i * N + j] = t[j * M + i] + (bv ? bv[j] : 0.0);
                }
            }
    } else {
        if (bp)                           /* every row of y starts as the bias */
            for (int64_t r = 0; r < M; r++)
                memcpy(yp + (size_t)(r * N) * isz, bp, (size_t)N * isz);
        cddp_gemm(dt, M, N, K, 1.0, xp, K, 1, wp, w->strides[1], w->strides[0], 1.0, yp, N);
    }
    Py_END_ALLOW_THREADS
    Py_XDECREF(bc);
    Py_XDECREF(tmp);
    return 0;
}

/* float16/bfloat16 forward: y accumulated in float32 and rounded once (torch's Half addmm
 * accumulates in float and adds the bias before rounding) — bfloat16 operands read in place by
 * the bf16 kernel (rows of y start as the bias, beta = 1), otherwise linear_forward on float32
 * copies. New reference. */
static TensorObject *linear_narrow(TensorObject *xc, TensorObject *w, TensorObject *b,
                                   const int64_t *shape, int64_t M, int64_t K, int64_t N)
{
    cddp_dtype dt = xc->dtype, kt = cddp_kdt(dt);
    int bf16 = dt == CDDP_BFLOAT16 && cddp_gemm_bf16_wanted(), err = 0;
    TensorObject *xk = NULL, *wk = NULL, *bk = NULL, *yk = NULL, *y = NULL;
    if ((b && !(bk = cddp_tensor_cast_raw(b, kt))) ||
        !(yk = cddp_tensor_new(kt, xc->ndim, shape, b == NULL)))
        goto done;
    if (bf16) {
        float *yp = (float *)cddp_data(yk);
        const float *bp = bk ? (const float *)cddp_data(bk) : NULL;
        int64_t bs = bk ? bk->strides[0] : 0;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t r = 0; bp && r < M; r++)      /* every row of y starts as the bias */
            for (int64_t n = 0; n < N; n++)
                yp[r * N + n] = bp[n * bs];
        err = cddp_gemm_bf16(dt, M, N, K, 1.0, cddp_data(xc), K, 1, cddp_data(w), w->strides[1],
                             w->strides[0], bp ? 1.0 : 0.0, yp, N);
        Py_END_ALLOW_THREADS
        if (err) {
            PyErr_NoMemory();
            goto done;
        }
    } else if (!(xk = cddp_tensor_cast_raw(xc, kt)) || !(wk = cddp_tensor_cast_raw(w, kt)) ||
               linear_forward(xk, wk, bk, yk, M, K, N) < 0) {
        goto done;
    }
    y = cddp_tensor_cast_raw(yk, dt);
done:
    Py_XDECREF(xk);
    Py_XDECREF(wk);
    Py_XDECREF(bk);
    Py_XDECREF(yk);
    return y;
}

static PyObject *linear_impl(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    TensorObject *x, *w, *b = NULL, *xc = NULL, *y = NULL;
    PyTypeObject *tt = cddp_state()->tensor_type;
    int64_t shape[CDDP_MAX_DIMS];
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "linear(input, weight, bias=None)");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], tt) || !PyObject_TypeCheck(args[1], tt) ||
        (nargs == 3 && args[2] != Py_None && !PyObject_TypeCheck(args[2], tt))) {
        PyErr_SetString(PyExc_TypeError, "linear(): input, weight and bias must be Tensors");
        return NULL;
    }
    x = (TensorObject *)args[0];
    w = (TensorObject *)args[1];
    if (nargs == 3 && args[2] != Py_None)
        b = (TensorObject *)args[2];
    if (x->ndim < 1 || w->ndim != 2) {
        PyErr_Format(PyExc_RuntimeError, "linear(): expected input of at least 1 dimension and "
                     "a 2-D weight, got %d-D input and %d-D weight", x->ndim, w->ndim);
        return NULL;
    }
    int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = 1;
    for (int d = 0; d < x->ndim - 1; d++) {
        shape[d] = x->shape[d];
        M *= x->shape[d];
    }
    if (w->shape[1] != K) {
        PyErr_Format(PyExc_RuntimeError, "mat1 and mat2 shapes cannot be multiplied "
                     "(%lldx%lld and %lldx%lld)", (long long)M, (long long)K,
                     (long long)w->shape[1], (long long)w->shape[0]);
        return NULL;
    }
    if (x->dtype != w->dtype || (b && b->dtype != x->dtype) || !cddp_is_floating(x->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "linear(): expected input, weight and bias of one "
                     "floating dtype, but got %s input, %s weight%s%s", cddp_dtype_name[x->dtype],
                     cddp_dtype_name[w->dtype], b ? " and " : "",
                     b ? cddp_dtype_name[b->dtype] : "");
        return NULL;
    }
    if (b && (b->ndim != 1 || b->shape[0] != N)) {
        PyErr_Format(PyExc_RuntimeError, "linear(): bias must have shape (%lld,)", (long long)N);
        return NULL;
    }
    shape[x->ndim - 1] = N;
    xc = cddp_tensor_contiguous_raw(x);
    if (!xc)
        return NULL;
    if (cddp_is_narrow(x->dtype)) {
        if (!(y = linear_narrow(xc, w, b, shape, M, K, N)))
            goto fail;
    } else {
        y = cddp_tensor_new(x->dtype, x->ndim, shape, b == NULL);
        if (!y)
            goto fail;
        if (linear_forward(xc, w, b, y, M, K, N) < 0)
            goto fail;
    }
    {
        int err;
        TensorObject *ins[3] = {x, w, b};
        NodeObject *node = cddp_maybe_node(b ? "AddmmBackward0" : "MmBackward0", linear_backward,
                                           b ? 3 : 2, ins, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(y, node, 0);
            node->i[0] = M; node->i[1] = K; node->i[2] = N;
            int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, w) < 0;
            Py_DECREF(node);
            if (bad)
                goto fail;
        }
    }
    Py_DECREF(xc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    return NULL;
}

/* Under autocast, linear runs in the autocast dtype (torch's lower_precision_fp list). */
static PyObject *py_linear(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, linear_impl, m, args, nargs, NULL);
    return linear_impl(m, args, nargs, NULL);
}

PyMethodDef cddp_linear_module_methods[] = {
    {"_linear", (PyCFunction)(void (*)(void))py_linear, METH_FASTCALL,
     "_linear(input, weight, bias=None): input @ weight.T + bias"},
    {NULL},
};
