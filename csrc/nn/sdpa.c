/* nn/sdpa.c — scaled dot-product attention with autograd
 * (torch.nn.functional.scaled_dot_product_attention; also the explicit-weights path of
 * torch.nn.functional.multi_head_attention_forward).
 *
 *   _sdpa(q (..., L, E), k (..., S, E), v (..., S, Ev), attn_mask (..., L, S)|None,
 *         dropout_p, is_causal, scale|None, enable_gqa, need_weights)
 *     -> out (..., L, Ev)                      need_weights false
 *     -> (out, attn (..., L, S))               need_weights true
 *
 * Dimension legend: B = product of the broadcast batch dims "...", L query length, S key
 * length, E query/key width, Ev value width. q, k, v (and the mask) broadcast over the batch
 * dims as torch.matmul does; with enable_gqa, dim -3 of k and v (heads) may divide q's, and
 * query head h reads key/value head h / (Hq / Hkv), as torch's repeat_interleave does.
 *
 * Per batch b, the math backend of torch, fused:
 *   P_b (L,S) = softmax(scale * Q_b @ K_b^T + mask)   one GEMM, then one pass per row
 *   Pd_b      = P_b * noise_b                          noise = bernoulli(1-p) / (1-p)
 *   O_b (L,Ev) = Pd_b @ V_b                            one GEMM
 * The mask is bool (True = attend) or float (added); is_causal masks j > i (torch's tril).
 * A row with every score -inf comes out as zeros for scaled_dot_product_attention (torch's
 * _safe_softmax) and as NaN on the need_weights path (torch's plain softmax there).
 * The dropout noise is drawn over the whole (..., L, S) tensor from the default generator
 * before any batch runs, in the order torch's dropout draws it, so a seeded run matches.
 * q, k and v are read in place through their strides (per-batch offsets, row and column
 * strides): a (B, L, H, E) tensor transposed to (B, H, L, E) is not copied.
 *
 * Backward (ScaledDotProductAttentionBackward0), per batch, from P and the noise:
 *   dV_b += Pd_b^T @ dO_b          dPd = dO_b @ V_b^T (+ d attn)      dP = dPd * noise_b
 *   dS = P * (dP - rowsum(dP * P))  dQ_b += scale dS @ K_b   dK_b += scale dS^T @ Q_b
 *   d mask = dS summed to the mask's shape (float masks that require grad)
 * Gradients accumulate (GEMM beta = 1) so broadcast and shared (GQA) batches sum.
 * P (B, L, S) is materialized per call, as in torch's math backend.
 */
#if defined(__GNUC__) && !defined(__clang__)   /* softmax's exp: see ops/reduce/softmax.c */
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif
#include "core/cddp.h"
#include "module.h"
#include "ops/linalg/blas.h"
#include "ops/random/random.h"
#include "ops/reduce/reduce.h"
#include <math.h>
#include <string.h>

enum { MASK_NONE = 0, MASK_BOOL = 1, MASK_FLOAT = 2 };
enum { OFF_Q, OFF_K, OFF_V, OFF_M, OFF_GQ, OFF_GK, OFF_GV, N_OFF };

/* The shapes of one call and, per batch, where each operand's matrix starts. */
typedef struct {
    cddp_dtype dt;
    int nb;                          /* broadcast batch dims */
    int64_t bshape[CDDP_MAX_DIMS];
    int64_t B, L, S, E, Ev;
    int64_t gk, gv;                  /* GQA: query heads per key / value head (1: none) */
    double scale;
    int64_t *off;                    /* (N_OFF, B) element offsets, PyMem */
} sdpa_plan;

/* The pointers and strides one forward or backward pass reads and writes. */
typedef struct {
    const char *q, *k, *v;
    int64_t qrs, qcs, krs, kcs, vrs, vcs;    /* row / column strides of the matrices */
    const char *m;                           /* mask (MASK_FLOAT: in dt) or NULL */
    int mkind;
    int64_t mrs, mcs;
    int causal, safe;
    const char *noise;                       /* (B, L, S) dropout noise or NULL */
    char *p;                                 /* (B, L, S) probabilities, or (L, S) scratch */
    int p_per_batch;                         /* p holds every batch (else reused) */
    char *pd;                                /* (B, L, S) dropped-out weights returned, or NULL */
    char *out;                               /* (B, L, Ev) */
    char *scratch;                           /* (L, S) */
    /* backward */
    const char *dout, *dattn;                /* (B, L, Ev), (B, L, S) or NULL */
    char *dq, *dk, *dv, *dmask;              /* contiguous gradients or NULL */
} sdpa_io;

/* ---- plan ----------------------------------------------------------------------------- */

/* Operand strides aligned to the plan's batch dims (right-aligned; 0 where it broadcasts). */
static void aligned_strides(const sdpa_plan *pl, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t *bstr)
{
    int nbx = ndim - 2, lead = pl->nb - nbx;
    for (int d = 0; d < pl->nb; d++) {
        int xd = d - lead;
        bstr[d] = (xd >= 0 && shape[xd] != 1) ? strides[xd] : 0;
    }
}

/* out[b] = element offset of batch b's matrix, batch index on dim nb-1 divided by gdiv. */
static void fill_offsets(const sdpa_plan *pl, const int64_t *bstr, int64_t gdiv, int64_t *out)
{
    int64_t idx[CDDP_MAX_DIMS] = {0};
    for (int64_t b = 0; b < pl->B; b++) {
        int64_t o = 0;
        for (int d = 0; d < pl->nb; d++)
            o += (d == pl->nb - 1 ? idx[d] / gdiv : idx[d]) * bstr[d];
        out[b] = o;
        for (int d = pl->nb - 1; d >= 0; d--) {
            if (++idx[d] < pl->bshape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* Offsets of x's matrices (through its strides, or its contiguous layout for gradients). */
static void operand_offsets(sdpa_plan *pl, TensorObject *x, int64_t gdiv, int which,
                            int grad_which)
{
    int64_t bstr[CDDP_MAX_DIMS], cs[CDDP_MAX_DIMS];
    aligned_strides(pl, x->ndim, x->shape, x->strides, bstr);
    fill_offsets(pl, bstr, gdiv, pl->off + which * pl->B);
    cddp_contiguous_strides(x->ndim, x->shape, cs);
    aligned_strides(pl, x->ndim, x->shape, cs, bstr);
    fill_offsets(pl, bstr, gdiv, pl->off + grad_which * pl->B);
}

/* Shapes, broadcast batch dims and per-batch offsets of q, k, v. 0, or -1 with torch's
 * error. The caller frees pl->off (PyMem_Free). */
static int plan_init(sdpa_plan *pl, TensorObject *q, TensorObject *k, TensorObject *v, int gqa)
{
    int64_t kb[CDDP_MAX_DIMS], vb[CDDP_MAX_DIMS];
    int nq = q->ndim - 2, nk = k->ndim - 2, nv = v->ndim - 2;
    memset(pl, 0, sizeof *pl);
    pl->dt = q->dtype;
    pl->L = q->shape[nq];
    pl->E = q->shape[nq + 1];
    pl->S = k->shape[nk];
    pl->Ev = v->shape[nv + 1];
    pl->gk = pl->gv = 1;
    if (k->shape[nk + 1] != pl->E || v->shape[nv] != pl->S) {
        PyErr_Format(PyExc_RuntimeError, "scaled_dot_product_attention: expected key (..., S, "
                     "E=%lld) and value (..., S, Ev) with key's S equal to value's, but got "
                     "key (..., %lld, %lld) and value (..., %lld, %lld)", (long long)pl->E,
                     (long long)pl->S, (long long)k->shape[nk + 1], (long long)v->shape[nv],
                     (long long)pl->Ev);
        return -1;
    }
    memcpy(kb, k->shape, sizeof(int64_t) * nk);
    memcpy(vb, v->shape, sizeof(int64_t) * nv);
    if (gqa && nq >= 1 && nk >= 1 && nv >= 1) {
        int64_t hq = q->shape[nq - 1], hk = kb[nk - 1], hv = vb[nv - 1];
        if (hk < 1 || hv < 1 || hq % hk || hq % hv) {
            PyErr_SetString(PyExc_RuntimeError, "Number of heads in key and value must divide "
                            "the number of heads in query");
            return -1;
        }
        pl->gk = hk > 1 ? hq / hk : 1;          /* hk == 1 broadcasts instead */
        pl->gv = hv > 1 ? hq / hv : 1;
        kb[nk - 1] = vb[nv - 1] = hq;
    }
    if (cddp_broadcast_shapes(nq, q->shape, nk, kb, &pl->nb, pl->bshape) < 0 ||
        cddp_broadcast_shapes(pl->nb, pl->bshape, nv, vb, &pl->nb, pl->bshape) < 0)
        return -1;
    pl->B = 1;
    for (int d = 0; d < pl->nb; d++)
        pl->B *= pl->bshape[d];
    pl->off = PyMem_Calloc((size_t)(N_OFF * (pl->B ? pl->B : 1)), sizeof(int64_t));
    if (!pl->off) {
        PyErr_NoMemory();
        return -1;
    }
    operand_offsets(pl, q, 1, OFF_Q, OFF_GQ);
    operand_offsets(pl, k, pl->gk, OFF_K, OFF_GK);
    operand_offsets(pl, v, pl->gv, OFF_V, OFF_GV);
    return 0;
}

/* ---- row kernels ---------------------------------------------------------------------- */

/* Scores (L,S) in p become probabilities: mask, causal cut (j > i is 0), then softmax per
 * row. A row whose max is -inf is zeros (safe) or NaN; a NaN score makes its row NaN. */
#define SDPA_SOFTMAX(NAME, T, SFX)                                                       \
    CDDP_CLONES static void NAME(T *p, int64_t L, int64_t S, const sdpa_io *io, int64_t moff) \
    {                                                                                    \
        for (int64_t i = 0; i < L; i++) {                                                \
            T *r = p + i * S;                                                            \
            int64_t n = io->causal && i + 1 < S ? i + 1 : S;                             \
            if (io->mkind == MASK_BOOL) {                                                \
                const char *mr = io->m + moff + i * io->mrs;                             \
                for (int64_t j = 0; j < n; j++)                                          \
                    r[j] = mr[j * io->mcs] ? r[j] : (T)-INFINITY;                        \
            } else if (io->mkind == MASK_FLOAT) {                                        \
                const T *mr = (const T *)io->m + moff + i * io->mrs;                     \
                for (int64_t j = 0; j < n; j++)                                          \
                    r[j] += mr[j * io->mcs];                                             \
            }                                                                            \
            for (int64_t j = n; j < S; j++)                                              \
                r[j] = 0;                                                                \
            if (n == 0)                                                                  \
                continue;                                                                \
            int nan;                                                                     \
            T mx = cddp_rowmax_##SFX(r, n, 0, &nan);                                     \
            if (nan)                                                                     \
                mx = (T)NAN;                                                             \
            else if (mx == (T)-INFINITY && io->safe) {                                   \
                memset(r, 0, sizeof(T) * (size_t)n);                                     \
                continue;                                                                \
            }                                                                            \
            for (int64_t j = 0; j < n; j++)                                              \
                r[j] = EXP_##SFX(r[j] - mx);                                             \
            T inv = (T)(1.0 / cddp_pw_sum_##SFX(r, n));                                  \
            for (int64_t j = 0; j < n; j++)                                              \
                r[j] *= inv;                                                             \
        }                                                                                \
    }

/* dp (L,S) holds dPd (or nothing: zero when `have`=0); becomes dS = P * (dP - rowsum(dP*P))
 * with dP = (dPd + dattn) * noise. `tmp` (S) is scratch. */
#define SDPA_DSOFTMAX(NAME, T, SFX)                                                      \
    CDDP_CLONES static void NAME(T *dp, int have, const T *p, const T *noise, const T *dattn, \
                              int64_t L, int64_t S, T *tmp)                              \
    {                                                                                    \
        for (int64_t i = 0; i < L; i++) {                                                \
            T *d = dp + i * S;                                                           \
            const T *pr = p + i * S;                                                     \
            if (!have)                                                                   \
                memset(d, 0, sizeof(T) * (size_t)S);                                     \
            if (dattn)                                                                   \
                for (int64_t j = 0; j < S; j++)                                          \
                    d[j] += dattn[i * S + j];                                            \
            if (noise)                                                                   \
                for (int64_t j = 0; j < S; j++)                                          \
                    d[j] *= noise[i * S + j];                                            \
            for (int64_t j = 0; j < S; j++)                                              \
                tmp[j] = d[j] * pr[j];                                                   \
            T s = (T)cddp_pw_sum_##SFX(tmp, S);                                          \
            for (int64_t j = 0; j < S; j++)                                              \
                d[j] = pr[j] * (d[j] - s);                                               \
        }                                                                                \
    }

static inline double exp_f64(double x)
{
    return exp(x);
}
#define EXP_f32 cddp_exp_f32
#define EXP_f64 exp_f64

SDPA_SOFTMAX(softmax_rows_f32, float, f32)
SDPA_SOFTMAX(softmax_rows_f64, double, f64)
SDPA_DSOFTMAX(dsoftmax_rows_f32, float, f32)
SDPA_DSOFTMAX(dsoftmax_rows_f64, double, f64)

/* out[i] = a[i] * b[i], n elements of dt */
static void mul_into(cddp_dtype dt, char *out, const char *a, const char *b, int64_t n)
{
    if (dt == CDDP_FLOAT32) {
        float *o = (float *)out;
        const float *x = (const float *)a, *y = (const float *)b;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] * y[i];
    } else {
        double *o = (double *)out;
        const double *x = (const double *)a, *y = (const double *)b;
        for (int64_t i = 0; i < n; i++)
            o[i] = x[i] * y[i];
    }
}

/* ---- forward and backward over the batches (pure C: runs without the GIL) -------------- */

static void sdpa_forward_batches(const sdpa_plan *pl, const sdpa_io *io)
{
    size_t isz = cddp_dtype_size[pl->dt];
    int64_t L = pl->L, S = pl->S, E = pl->E, Ev = pl->Ev, LS = L * S;
    const int64_t *off = pl->off;
    for (int64_t b = 0; b < pl->B; b++) {
        char *p = io->p + (io->p_per_batch ? (size_t)(b * LS) * isz : 0);
        /* P (L,S) = scale * Q (L,E) @ K^T (E,S) */
        cddp_gemm(pl->dt, L, S, E, pl->scale, io->q + off[OFF_Q * pl->B + b] * (int64_t)isz,
                  io->qrs, io->qcs, io->k + off[OFF_K * pl->B + b] * (int64_t)isz, io->kcs,
                  io->krs, 0.0, p, S);
        int64_t moff = io->m ? off[OFF_M * pl->B + b] : 0;
        if (pl->dt == CDDP_FLOAT32)
            softmax_rows_f32((float *)p, L, S, io, moff);
        else
            softmax_rows_f64((double *)p, L, S, io, moff);
        const char *src = p;
        if (io->noise) {                     /* Pd = P * noise (returned, or scratch) */
            char *pd = io->pd ? io->pd + (size_t)(b * LS) * isz : io->scratch;
            mul_into(pl->dt, pd, p, io->noise + (size_t)(b * LS) * isz, LS);
            src = pd;
        }
        /* O (L,Ev) = Pd (L,S) @ V (S,Ev) */
        cddp_gemm(pl->dt, L, Ev, S, 1.0, src, S, 1, io->v + off[OFF_V * pl->B + b] * (int64_t)isz,
                  io->vrs, io->vcs, 0.0, io->out + (size_t)(b * L * Ev) * isz, Ev);
    }
}

/* io->scratch holds 2 * L * S + S elements: dP, Pd, a row. */
static void sdpa_backward_batches(const sdpa_plan *pl, const sdpa_io *io)
{
    size_t isz = cddp_dtype_size[pl->dt];
    int64_t L = pl->L, S = pl->S, E = pl->E, Ev = pl->Ev, LS = L * S, B = pl->B;
    const int64_t *off = pl->off;
    char *dp = io->scratch, *pdbuf = io->scratch + (size_t)LS * isz;
    char *tmp = io->scratch + (size_t)(2 * LS) * isz;
    for (int64_t b = 0; b < B; b++) {
        const char *p = io->p + (size_t)(b * LS) * isz;
        const char *noise = io->noise ? io->noise + (size_t)(b * LS) * isz : NULL;
        const char *qb = io->q + off[OFF_Q * B + b] * (int64_t)isz;
        const char *kb = io->k + off[OFF_K * B + b] * (int64_t)isz;
        const char *vb = io->v + off[OFF_V * B + b] * (int64_t)isz;
        if (io->dout) {
            const char *dob = io->dout + (size_t)(b * L * Ev) * isz, *pd = p;
            if (noise) {
                mul_into(pl->dt, pdbuf, p, noise, LS);
                pd = pdbuf;
            }
            if (io->dv)            /* dV (S,Ev) += Pd^T (S,L) @ dO (L,Ev) */
                cddp_gemm(pl->dt, S, Ev, L, 1.0, pd, 1, S, dob, Ev, 1, 1.0,
                          io->dv + off[OFF_GV * B + b] * (int64_t)isz, Ev);
            /* dPd (L,S) = dO (L,Ev) @ V^T (Ev,S) */
            cddp_gemm(pl->dt, L, S, Ev, 1.0, dob, Ev, 1, vb, io->vcs, io->vrs, 0.0, dp, S);
        }
        const char *da = io->dattn ? io->dattn + (size_t)(b * LS) * isz : NULL;
        if (pl->dt == CDDP_FLOAT32)
            dsoftmax_rows_f32((float *)dp, io->dout != NULL, (const float *)p,
                              (const float *)noise, (const float *)da, L, S, (float *)tmp);
        else
            dsoftmax_rows_f64((double *)dp, io->dout != NULL, (const double *)p,
                              (const double *)noise, (const double *)da, L, S, (double *)tmp);
        if (io->dmask)
            memcpy(io->dmask + (size_t)(b * LS) * isz, dp, (size_t)LS * isz);
        if (io->dq)                /* dQ (L,E) += scale dS (L,S) @ K (S,E) */
            cddp_gemm(pl->dt, L, E, S, pl->scale, dp, S, 1, kb, io->krs, io->kcs, 1.0,
                      io->dq + off[OFF_GQ * B + b] * (int64_t)isz, E);
        if (io->dk)                /* dK (S,E) += scale dS^T (S,L) @ Q (L,E) */
            cddp_gemm(pl->dt, S, E, L, pl->scale, dp, 1, S, qb, io->qrs, io->qcs, 1.0,
                      io->dk + off[OFF_GK * B + b] * (int64_t)isz, E);
    }
}

/* ---- autograd ------------------------------------------------------------------------- */

static void io_operands(sdpa_io *io, TensorObject *q, TensorObject *k, TensorObject *v)
{
    io->q = cddp_data(q);
    io->k = cddp_data(k);
    io->v = cddp_data(v);
    io->qrs = q->strides[q->ndim - 2];
    io->qcs = q->strides[q->ndim - 1];
    io->krs = k->strides[k->ndim - 2];
    io->kcs = k->strides[k->ndim - 1];
    io->vrs = v->strides[v->ndim - 2];
    io->vcs = v->strides[v->ndim - 1];
}

/* A contiguous copy of g in dtype dt (new reference), or NULL for no gradient. */
static int grad_in(TensorObject *g, cddp_dtype dt, TensorObject **out)
{
    *out = NULL;
    if (!g)
        return 0;
    *out = cddp_tensor_cast_raw(g, dt);
    if (*out && !cddp_is_contiguous(*out))
        Py_SETREF(*out, cddp_tensor_contiguous_raw(*out));
    return *out ? 0 : -1;
}

/* The float mask's gradient: dS over (batch..., L, S) summed to the mask's shape and dtype. */
static TensorObject *mask_grad(TensorObject *full, const cddp_meta *m)
{
    TensorObject *s = cddp_sum_to(full, m->ndim, m->shape), *c;
    if (!s)
        return NULL;
    c = cddp_tensor_cast_raw(s, m->dtype);
    Py_DECREF(s);
    return c;
}

/* saved: q, k, v, P (batch..., L, S); extra: the noise or None. d[0] scale, i[0] enable_gqa.
 * Edges: q, k, v, float mask. */
static int sdpa_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *q = cddp_node_saved(self, 0), *k = cddp_node_saved(self, 1);
    TensorObject *v = cddp_node_saved(self, 2), *p = cddp_node_saved(self, 3);
    TensorObject *dout = NULL, *dattn = NULL, *dmask = NULL;
    sdpa_plan pl = {0};
    sdpa_io io = {0};
    char *scratch = NULL;
    int rc = -1;
    if (!q || !k || !v || !p)
        return -1;
    if (!gout[0] && !gout[1])
        return 0;
    if (plan_init(&pl, q, k, v, (int)self->i[0]) < 0)
        return -1;
    pl.scale = self->d[0];
    size_t isz = cddp_dtype_size[pl.dt];
    int64_t full[CDDP_MAX_DIMS];
    memcpy(full, pl.bshape, sizeof(int64_t) * pl.nb);
    full[pl.nb] = pl.L;
    full[pl.nb + 1] = pl.S;
    if (grad_in(gout[0], pl.dt, &dout) < 0 || grad_in(gout[1], pl.dt, &dattn) < 0)
        goto done;
    for (int i = 0; i < 3; i++)
        if (self->next[i].node &&
            !(gin[i] = cddp_tensor_new(pl.dt, self->meta[i].ndim, self->meta[i].shape, 1)))
            goto done;
    if (self->next[3].node && !(dmask = cddp_tensor_new(pl.dt, pl.nb + 2, full, 0)))
        goto done;
    scratch = PyMem_Malloc((size_t)(2 * pl.L * pl.S + pl.S + 1) * isz);
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    io_operands(&io, q, k, v);
    io.p = cddp_data(p);
    io.noise = self->extra && self->extra != Py_None ? cddp_data((TensorObject *)self->extra)
                                                     : NULL;
    io.dout = dout ? cddp_data(dout) : NULL;
    io.dattn = dattn ? cddp_data(dattn) : NULL;
    io.dq = gin[0] ? cddp_data(gin[0]) : NULL;
    io.dk = gin[1] ? cddp_data(gin[1]) : NULL;
    io.dv = gin[2] ? cddp_data(gin[2]) : NULL;
    io.dmask = dmask ? cddp_data(dmask) : NULL;
    io.scratch = scratch;
    Py_BEGIN_ALLOW_THREADS
    sdpa_backward_batches(&pl, &io);
    Py_END_ALLOW_THREADS
    if (dmask && !(gin[3] = mask_grad(dmask, &self->meta[3])))
        goto done;
    rc = 0;
done:
    PyMem_Free(pl.off);
    PyMem_Free(scratch);
    Py_XDECREF(dout);
    Py_XDECREF(dattn);
    Py_XDECREF(dmask);
    return rc;
}

/* ---- the Python entry point ----------------------------------------------------------- */

/* q, k, v: Tensors of at least 2 dims and one float dtype; the mask: bool or floating, and
 * not together with is_causal. torch's messages. */
static int check_args(TensorObject *q, TensorObject *k, TensorObject *v, TensorObject *mask,
                      int causal)
{
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2) {
        PyErr_Format(PyExc_RuntimeError, "Expected query, key, and value to all be  at least 2 "
                     "dimensional, but got query.dim: %d key.dim: %d and value.dim: %d instead.",
                     q->ndim, k->ndim, v->ndim);
        return -1;
    }
    if (q->dtype != k->dtype || q->dtype != v->dtype) {
        PyErr_Format(PyExc_RuntimeError, "Expected query, key, and value to have the same dtype, "
                     "but got query.dtype: %s key.dtype: %s and value.dtype: %s instead.",
                     cddp_dtype_name[q->dtype], cddp_dtype_name[k->dtype],
                     cddp_dtype_name[v->dtype]);
        return -1;
    }
    if (q->dtype != CDDP_FLOAT32 && q->dtype != CDDP_FLOAT64) {
        PyErr_Format(PyExc_RuntimeError, "scaled_dot_product_attention: expected float32 or "
                     "float64 query, key and value, got %s", cddp_dtype_name[q->dtype]);
        return -1;
    }
    if (mask && mask->dtype != CDDP_BOOL && mask->dtype != CDDP_FLOAT32 &&
        mask->dtype != CDDP_FLOAT64) {
        PyErr_Format(PyExc_RuntimeError, "Expected attn_mask dtype to be bool or float or to "
                     "match query dtype, but got attn_mask.dtype: %s and  query.dtype: %s "
                     "instead.", cddp_dtype_name[mask->dtype], cddp_dtype_name[q->dtype]);
        return -1;
    }
    if (mask && causal) {
        PyErr_SetString(PyExc_RuntimeError, "_scaled_dot_product_attention: Explicit attn_mask "
                        "should not be set when is_causal=True");
        return -1;
    }
    return 0;
}

/* x itself when BLAS reads its (rows, cols) matrices in place, else a contiguous copy. */
static TensorObject *addressable(TensorObject *x)
{
    int64_t r = x->shape[x->ndim - 2], c = x->shape[x->ndim - 1];
    if (cddp_blas_addressable(x->dtype, r, c, x->strides[x->ndim - 2], x->strides[x->ndim - 1]))
        return (TensorObject *)Py_NewRef(x);
    return cddp_tensor_contiguous_raw(x);
}

/* The dropout noise (B, L, S) in dt: bernoulli(1 - p) / (1 - p) drawn as torch's dropout
 * does (p == 1: zeros, nothing drawn). */
static TensorObject *draw_noise(cddp_dtype dt, int nd, const int64_t *shape, double p)
{
    TensorObject *t = cddp_tensor_new(dt, nd, shape, p >= 1.0);
    PyObject *keep = NULL;
    GeneratorObject *g = cddp_generator_get(NULL, "scaled_dot_product_attention");
    if (!t || !g || p >= 1.0)
        return t;
    if (!(keep = PyFloat_FromDouble(1.0 - p)) || cddp_random_bernoulli_fill(t, keep, g) < 0) {
        Py_XDECREF(keep);
        Py_DECREF(t);
        return NULL;
    }
    Py_DECREF(keep);
    int64_t n = cddp_numel(t);
    if (dt == CDDP_FLOAT32) {
        float *x = (float *)cddp_data(t), d = (float)(1.0 - p);
        for (int64_t i = 0; i < n; i++)
            x[i] /= d;
    } else {
        double *x = (double *)cddp_data(t), d = 1.0 - p;
        for (int64_t i = 0; i < n; i++)
            x[i] /= d;
    }
    return t;
}

/* What py_sdpa parsed. */
typedef struct {
    TensorObject *q, *k, *v, *mask;
    double p, scale;
    int causal, gqa, weights, has_scale;
} sdpa_args;

static int parse_args(PyObject *const *args, Py_ssize_t nargs, sdpa_args *a)
{
    if (nargs != 9 || !cddp_tensor_check(args[0]) || !cddp_tensor_check(args[1]) ||
        !cddp_tensor_check(args[2]) || (args[3] != Py_None && !cddp_tensor_check(args[3]))) {
        PyErr_SetString(PyExc_TypeError, "_sdpa(query, key, value, attn_mask, dropout_p, "
                        "is_causal, scale, enable_gqa, need_weights): Tensors expected");
        return -1;
    }
    a->q = (TensorObject *)args[0];
    a->k = (TensorObject *)args[1];
    a->v = (TensorObject *)args[2];
    a->mask = args[3] == Py_None ? NULL : (TensorObject *)args[3];
    a->p = PyFloat_AsDouble(args[4]);
    a->has_scale = args[6] != Py_None;
    a->scale = a->has_scale ? PyFloat_AsDouble(args[6]) : 0.0;
    if (PyErr_Occurred())
        return -1;
    if (!(a->p >= 0.0 && a->p <= 1.0)) {
        PyErr_Format(PyExc_RuntimeError, "dropout probability has to be between 0 and 1, but got "
                     "%R", args[4]);
        return -1;
    }
    if ((a->causal = PyObject_IsTrue(args[5])) < 0 || (a->gqa = PyObject_IsTrue(args[7])) < 0 ||
        (a->weights = PyObject_IsTrue(args[8])) < 0)
        return -1;
    return check_args(a->q, a->k, a->v, a->mask, a->causal);
}

/* The mask as the kernel reads it: bool as is, float cast to dt; strides over
 * (batch..., L, S); per-batch offsets into pl->off. New reference in *mc. */
static int prepare_mask(sdpa_plan *pl, TensorObject *mask, sdpa_io *io, TensorObject **mc)
{
    int64_t full[CDDP_MAX_DIMS], mstr[CDDP_MAX_DIMS];
    *mc = NULL;
    if (!mask)
        return 0;
    memcpy(full, pl->bshape, sizeof(int64_t) * pl->nb);
    full[pl->nb] = pl->L;
    full[pl->nb + 1] = pl->S;
    *mc = mask->dtype == CDDP_BOOL ? (TensorObject *)Py_NewRef(mask)
                                   : cddp_tensor_cast_raw(mask, pl->dt);
    if (!*mc || cddp_broadcast_strides(*mc, pl->nb + 2, full, mstr) < 0)
        return -1;
    fill_offsets(pl, mstr, 1, pl->off + OFF_M * pl->B);
    io->m = cddp_data(*mc);
    io->mkind = mask->dtype == CDDP_BOOL ? MASK_BOOL : MASK_FLOAT;
    io->mrs = mstr[pl->nb];
    io->mcs = mstr[pl->nb + 1];
    return 0;
}

/* Record the node: edges q, k, v, float mask; saves and outputs as sdpa_backward reads them. */
static int record(NodeObject *node, sdpa_args *a, TensorObject *qc, TensorObject *kc,
                  TensorObject *vc, TensorObject *P, TensorObject *noise, TensorObject *out,
                  TensorObject *attn)
{
    cddp_set_history(out, node, 0);
    if (attn)
        cddp_set_history(attn, node, 1);
    node->d[0] = a->scale;
    node->i[0] = a->gqa;
    if (noise)
        node->extra = Py_NewRef((PyObject *)noise);
    if (cddp_node_save(node, 0, qc) < 0 || cddp_node_save(node, 1, kc) < 0 ||
        cddp_node_save(node, 2, vc) < 0)
        return -1;
    return attn == P ? cddp_node_save_output(node, 3, P) : cddp_node_save(node, 3, P);
}

/* _sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, need_weights) */
static PyObject *py_sdpa(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    sdpa_args a = {0};
    sdpa_plan pl = {0};
    sdpa_io io = {0};
    TensorObject *qc = NULL, *kc = NULL, *vc = NULL, *mc = NULL, *noise = NULL;
    TensorObject *P = NULL, *out = NULL, *attn = NULL;
    NodeObject *node = NULL;
    PyObject *res = NULL;
    int err;
    if (parse_args(args, nargs, &a) < 0 || plan_init(&pl, a.q, a.k, a.v, a.gqa) < 0)
        goto done;
    pl.scale = a.has_scale ? a.scale : 1.0 / sqrt((double)pl.E);
    a.scale = pl.scale;
    if (!(qc = addressable(a.q)) || !(kc = addressable(a.k)) || !(vc = addressable(a.v)) ||
        prepare_mask(&pl, a.mask, &io, &mc) < 0)
        goto done;
    TensorObject *ins[4] = {a.q, a.k, a.v, mc && io.mkind == MASK_FLOAT ? a.mask : NULL};
    node = cddp_maybe_node("ScaledDotProductAttentionBackward0", sdpa_backward, 4, ins, &err);
    if (err)
        goto done;
    int64_t full[CDDP_MAX_DIMS];
    memcpy(full, pl.bshape, sizeof(int64_t) * pl.nb);
    full[pl.nb] = pl.L;
    full[pl.nb + 1] = pl.Ev;
    if (!(out = cddp_tensor_new(pl.dt, pl.nb + 2, full, 0)))
        goto done;
    full[pl.nb + 1] = pl.S;
    int keep_p = node || a.weights, dropout = a.p > 0.0;
    if (dropout && !(noise = draw_noise(pl.dt, pl.nb + 2, full, a.p)))
        goto done;
    if (keep_p) {
        if (!(P = cddp_tensor_new(pl.dt, pl.nb + 2, full, 0)))
            goto done;
        if (a.weights && dropout && !(attn = cddp_tensor_new(pl.dt, pl.nb + 2, full, 0)))
            goto done;
        if (a.weights && !dropout)
            attn = (TensorObject *)Py_NewRef(P);
    }
    size_t isz = cddp_dtype_size[pl.dt];
    char *scratch = PyMem_Malloc((size_t)(2 * pl.L * pl.S + 1) * isz);
    if (!scratch) {
        PyErr_NoMemory();
        goto done;
    }
    io_operands(&io, qc, kc, vc);
    io.causal = a.causal;
    io.safe = !a.weights;
    io.noise = noise ? cddp_data(noise) : NULL;
    io.p = P ? cddp_data(P) : scratch + (size_t)(pl.L * pl.S) * isz;
    io.p_per_batch = P != NULL;
    io.pd = attn && attn != P ? cddp_data(attn) : NULL;
    io.out = cddp_data(out);
    io.scratch = scratch;
    Py_BEGIN_ALLOW_THREADS
    sdpa_forward_batches(&pl, &io);
    Py_END_ALLOW_THREADS
    PyMem_Free(scratch);
    if (node && record(node, &a, qc, kc, vc, P, noise, out, attn) < 0)
        goto done;
    res = a.weights ? PyTuple_Pack(2, (PyObject *)out, (PyObject *)attn) : Py_NewRef(out);
done:
    PyMem_Free(pl.off);
    Py_XDECREF(node);
    Py_XDECREF(qc);
    Py_XDECREF(kc);
    Py_XDECREF(vc);
    Py_XDECREF(mc);
    Py_XDECREF(noise);
    Py_XDECREF(P);
    Py_XDECREF(out);
    Py_XDECREF(attn);
    return res;
}

PyMethodDef cddp_sdpa_module_methods[] = {
    {"_sdpa", (PyCFunction)(void (*)(void))py_sdpa, METH_FASTCALL,
     "_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, "
     "need_weights): scaled dot-product attention (out, or (out, attn))"},
    {NULL},
};
