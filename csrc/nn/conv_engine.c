/* nn/conv_engine.c — the convolution engine: every convolution (conv1d/conv2d and the
 * transposed ones, forward and backward) is im2col + one GEMM per chunk of samples and group.
 *
 * Mirrors: at::native's slow_conv2d forward/backward (the unfold-then-GEMM scheme); the
 * results equal torch.nn.functional.conv2d's up to summation order.
 *
 * Legend (nn/conv.h): x (N, C, H, W), w (OC, Cg, kh, kw) = (OC, K) as a matrix, y (N, OC, OH, OW),
 * P = OH*OW, a chunk = m consecutive samples.
 *
 *   forward   cols (K, m*P) = im2col of the chunk's samples side by side (one group)
 *             Y (OCg, m*P) = W_g (OCg, K) @ cols                 -> y, bias added on the way
 *   backward  dY (OCg, m*P) = the chunk's output gradients side by side
 *             dW_g (OCg, K) += dY @ cols^T                        (cols recomputed, not kept)
 *             dcols (K, m*P) = W_g^T @ dY                         -> col2im -> dx
 *
 * Why chunks of samples: ResNet's late layers have P = 1..16, and a GEMM per sample would be
 * a matrix-vector product; putting m samples side by side gives BLAS a wide right-hand side
 * (m*P columns) at the price of one reshuffle of y / dy, which is K times cheaper than the
 * GEMM. m is chosen so the column buffer stays near g_cols_budget elements. A chunk of one
 * sample writes y / reads dy in place (their per-sample slices already are (OCg, P) matrices).
 * A 1x1, stride-1, unpadded conv needs no im2col at all when chunks are single samples: x's
 * slice is the column matrix and dx's slice receives dcols directly.
 *
 * Pure C; scratch comes from aligned_alloc and every function returns -1 when it cannot get
 * it (the caller raises MemoryError). Callers release the GIL around these.
 */
#include "nn/conv.h"
#include "ops/linalg/blas.h"
#include <stdlib.h>
#include <string.h>

/* Elements of the column buffer a chunk aims at (4 MiB of float32). Wider chunks mean fewer,
 * longer GEMMs: ResNet-18's training step at batch 64 was fastest at 1M of 128K..4M with
 * ops/linalg/sgemm_avx512.c (115 against 128 ms at 128K, whose buffer stayed in L2), and flat
 * (149-152 ms) on OpenBLAS. A variable so tests can shrink it and reach the multi-chunk paths
 * with small tensors (cddp._C._conv_cols_budget). */
static int64_t g_cols_budget = 1 << 20;
#define DIRECT_MIN_P 256        /* 1x1 convs with planes this large skip im2col sample by sample */

int64_t cddp_conv_cols_budget(int64_t elems)
{
    int64_t old = g_cols_budget;
    if (elems > 0)
        g_cols_budget = elems;
    return old;
}

static int64_t conv_k(const cddp_conv *cv) { return cv->win.C * cv->win.kh * cv->win.kw; }
static int64_t conv_p(const cddp_conv *cv) { return cv->win.OH * cv->win.OW; }

/* 1x1 window, stride 1, no padding: the column matrix of a sample is its input slice. */
static int is_pointwise(const cddp_conv *cv)
{
    const cddp_win2d *g = &cv->win;
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
           g->OH == g->H && g->OW == g->W;
}

/* Samples per chunk (>= 1, <= max(N, 1)). Pointwise convs over large planes go one sample at
 * a time so they read x in place. */
static int64_t chunk_samples(const cddp_conv *cv)
{
    int64_t per = conv_k(cv) * conv_p(cv), m;
    if (is_pointwise(cv) && conv_p(cv) >= DIRECT_MIN_P)
        return 1;
    m = per > 0 ? g_cols_budget / per : cv->N;
    if (m > cv->N)
        m = cv->N;
    return m < 1 ? 1 : m;
}

static void *scratch(int64_t elems, size_t isz)
{
    size_t bytes = (size_t)(elems > 0 ? elems : 1) * isz;
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* Where a chunk's column matrices come from: the gather path (zero-bordered chunk copy + one
 * offset table, nn/im2col.c) for short or strided rows, per-sample im2col spans for long
 * unit-stride rows (where a span is one memcpy); for pointwise convs no im2col at all: x's
 * slices themselves (single-sample chunks) or copied side by side (several samples).
 * All buffers are carved from one scratch block. */
typedef struct {
    const cddp_conv *cv;
    int64_t nb;                 /* samples per chunk */
    int pack;                   /* pointwise, several samples: cols = x's slices side by side */
    int gather, dirty;          /* gather path; xp's border holds scatter leftovers */
    cddp_gather_plan gp;
    char *block;                /* the scratch block everything below lives in */
    char *cols;                 /* (K, nb*P), NULL for pointwise single-sample chunks */
    char *mat;                  /* (OCg, nb*P): y or dy of a chunk side by side (nb > 1) */
    char *xp;                   /* (nb, Cg, Hp, Wp), zero border (gather) */
    int32_t *base;              /* (nb*P) offsets into xp (gather) */
} colbuf;

static void colbuf_free(colbuf *cb)
{
    cddp_scratch_give(cb->block);
}

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

static int colbuf_init(colbuf *cb, const cddp_conv *cv)
{
    size_t isz = cddp_dtype_size[cv->dt], off[5] = {0};
    const cddp_win2d *g = &cv->win;
    int64_t P = conv_p(cv), xpn = 0;
    memset(cb, 0, sizeof *cb);
    cb->cv = cv;
    cb->nb = chunk_samples(cv);
    int need_cols = !(is_pointwise(cv) && cb->nb == 1);
    cb->pack = need_cols && is_pointwise(cv);
    cb->gather = need_cols && !cb->pack && (g->OW < 32 || g->sw != 1) &&
                 cddp_gather_plan_fits(g, cb->nb);
    if (cb->gather) {
        cddp_gather_plan_init(&cb->gp, g, cb->nb);
        xpn = cb->nb * g->C * cb->gp.Hp * cb->gp.Wp;
    }
    /* layout: cols | mat | xp | base */
    off[1] = off[0] + (need_cols ? round64((size_t)(conv_k(cv) * cb->nb * P) * isz) : 0);
    off[2] = off[1] + (cb->nb > 1 ? round64((size_t)(cv->OC / cv->G * cb->nb * P) * isz) : 0);
    off[3] = off[2] + round64((size_t)xpn * isz);
    off[4] = off[3] + (cb->gather ? round64((size_t)(cb->nb * P) * sizeof(int32_t)) : 0);
    if (!(cb->block = cddp_scratch_take(off[4] ? off[4] : 64)))
        return -1;
    cb->cols = need_cols ? cb->block + off[0] : NULL;
    cb->mat = cb->nb > 1 ? cb->block + off[1] : NULL;
    if (cb->gather) {
        cb->xp = cb->block + off[2];
        cb->base = (int32_t *)(cb->block + off[3]);
        cddp_gather_plan_table(&cb->gp, g, cb->base);
        memset(cb->xp, 0, (size_t)xpn * isz);
    }
    return 0;
}

/* Sample n0's group-g slice of an (N, C, H, W) tensor. */
static const char *slice(const cddp_conv *cv, const void *t, int64_t n0, int64_t g)
{
    int64_t HW = cv->win.H * cv->win.W;
    return (const char *)t + (size_t)((n0 * cv->C + g * cv->win.C) * HW) * cddp_dtype_size[cv->dt];
}

/* The column matrix (K, m*P) of samples n0.. n0+m-1, group g: cb->cols, or x's slice itself
 * for a pointwise single-sample chunk. */
static const char *colbuf_fill(colbuf *cb, const void *x, int64_t n0, int64_t m, int64_t g)
{
    const cddp_conv *cv = cb->cv;
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t P = conv_p(cv), HW = cv->win.H * cv->win.W;
    if (!cb->cols)
        return slice(cv, x, n0, g);
    if (cb->pack) {
        for (int64_t j = 0; j < m; j++)
            for (int64_t c = 0; c < cv->win.C; c++)
                memcpy(cb->cols + (size_t)(c * m * P + j * P) * isz,
                       slice(cv, x, n0 + j, g) + (size_t)(c * HW) * isz, (size_t)P * isz);
        return cb->cols;
    }
    if (!cb->gather) {
        for (int64_t j = 0; j < m; j++)
            cddp_im2col(cv->dt, slice(cv, x, n0 + j, g), &cv->win,
                        cb->cols + (size_t)(j * P) * isz, m * P);
        return cb->cols;
    }
    if (cb->dirty) {
        memset(cb->xp, 0, (size_t)(m * cv->win.C * cb->gp.Hp * cb->gp.Wp) * isz);
        cb->dirty = 0;
    }
    cddp_pad_copy(cv->dt, slice(cv, x, n0, g), cv->C * HW, &cb->gp, &cv->win, m, cb->xp, 1);
    cddp_gather_cols(cv->dt, cb->xp, &cb->gp, &cv->win, cb->base, m * P, cb->cols, 0);
    return cb->cols;
}

/* dx's slices of the chunk, group g, from dcols in cb->cols: the pointwise and gather paths
 * write them (the gather path scatters into a zeroed xp and copies the interior out), im2col
 * spans add into them (dx zeroed by the caller). */
static void colbuf_adjoint(colbuf *cb, void *dx, int64_t n0, int64_t m, int64_t g)
{
    const cddp_conv *cv = cb->cv;
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t P = conv_p(cv), HW = cv->win.H * cv->win.W;
    if (cb->pack) {                           /* each dx element receives exactly one entry */
        for (int64_t j = 0; j < m; j++)
            for (int64_t c = 0; c < cv->win.C; c++)
                memcpy((char *)slice(cv, dx, n0 + j, g) + (size_t)(c * HW) * isz,
                       cb->cols + (size_t)(c * m * P + j * P) * isz, (size_t)P * isz);
        return;
    }
    if (!cb->gather) {
        for (int64_t j = 0; j < m; j++)
            cddp_col2im(cv->dt, cb->cols + (size_t)(j * P) * isz, m * P, &cv->win,
                        (void *)slice(cv, dx, n0 + j, g));
        return;
    }
    memset(cb->xp, 0, (size_t)(m * cv->win.C * cb->gp.Hp * cb->gp.Wp) * isz);
    cddp_gather_cols(cv->dt, cb->xp, &cb->gp, &cv->win, cb->base, m * P, cb->cols, 1);
    cddp_pad_copy(cv->dt, slice(cv, dx, n0, g), cv->C * HW, &cb->gp, &cv->win, m, cb->xp, 0);
    cb->dirty = 1;
}

/* Between the per-sample layout t (N, OC, P) and a chunk matrix M (OCg, m*P) of group g:
 * to_chunk != 0 packs M from t, else unpacks M into t (adding bias[oc] when bias != NULL). */
#define DEFINE_SHUFFLE(T, SFX)                                                                 \
static void shuffle_##SFX(const cddp_conv *cv, T *t, T *M, int64_t n0, int64_t m, int64_t g,   \
                          const T *bias, int to_chunk)                                         \
{                                                                                              \
    int64_t OCg = cv->OC / cv->G, P = conv_p(cv);                                              \
    for (int64_t o = 0; o < OCg; o++)                                                          \
        for (int64_t j = 0; j < m; j++) {                                                      \
            T *ts = t + ((n0 + j) * cv->OC + g * OCg + o) * P;                                 \
            T *ms = M + (o * m + j) * P;                                                       \
            if (to_chunk) {                                                                    \
                for (int64_t p = 0; p < P; p++)                                                \
                    ms[p] = ts[p];                                                             \
            } else {                                                                           \
                T bv = bias ? bias[g * OCg + o] : (T)0;                                        \
                for (int64_t p = 0; p < P; p++)                                                \
                    ts[p] = ms[p] + bv;                                                        \
            }                                                                                  \
        }                                                                                      \
}
DEFINE_SHUFFLE(float, f32)
DEFINE_SHUFFLE(double, f64)

static void shuffle(const cddp_conv *cv, void *t, void *M, int64_t n0, int64_t m, int64_t g,
                    const void *bias, int to_chunk)
{
    if (cv->dt == CDDP_FLOAT32)
        shuffle_f32(cv, (float *)t, (float *)M, n0, m, g, (const float *)bias, to_chunk);
    else
        shuffle_f64(cv, (double *)t, (double *)M, n0, m, g, (const double *)bias, to_chunk);
}

/* The engine's GEMMs, in cv->dt; bf16-valued float32 operands (cv->bf16) run on the bf16
 * kernel where it runs (twice the float32 rate), the float32 GEMM otherwise or when it has
 * no memory. */
static void conv_gemm(const cddp_conv *cv, int64_t M, int64_t N, int64_t K, const void *A,
                      int64_t ars, int64_t acs, const void *B, int64_t brs, int64_t bcs,
                      double beta, void *C, int64_t ldc)
{
    if (cddp_gemm_either(cv->bf16 && cddp_gemm_bf16_wanted(), cv->dt, M, N, K, 1.0, A, ars, acs,
                         B, brs, bcs, beta, C, ldc) < 0)
        cddp_gemm(cv->dt, M, N, K, 1.0, A, ars, acs, B, brs, bcs, beta, C, ldc);
}

/* Rows of y's slice (OCg, P) start as the bias, so the GEMM accumulates onto it. */
static void fill_bias(cddp_dtype dt, char *ys, const char *b, int64_t OCg, int64_t P)
{
    for (int64_t o = 0; o < OCg; o++) {
        if (dt == CDDP_FLOAT32) {
            float v = ((const float *)b)[o], *r = (float *)ys + o * P;
            for (int64_t p = 0; p < P; p++)
                r[p] = v;
        } else {
            double v = ((const double *)b)[o], *r = (double *)ys + o * P;
            for (int64_t p = 0; p < P; p++)
                r[p] = v;
        }
    }
}

static int forward_full(const cddp_conv *cv, const void *x, const void *w, const void *b, void *y)
{
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t K = conv_k(cv), P = conv_p(cv), OCg = cv->OC / cv->G;
    colbuf cb;
    char *yp = y;
    const char *wp = w, *bp = b;
    int rc = -1;
    if (colbuf_init(&cb, cv) < 0)
        goto done;
    char *tmp = cb.mat;
    for (int64_t n0 = 0; n0 < cv->N; n0 += cb.nb) {
        int64_t m = cv->N - n0 < cb.nb ? cv->N - n0 : cb.nb;
        for (int64_t g = 0; g < cv->G; g++) {
            const char *wg = wp + (size_t)(g * OCg * K) * isz;
            const char *B = colbuf_fill(&cb, x, n0, m, g);
            if (m == 1) {                             /* y's slice is the GEMM's output */
                char *ys = yp + (size_t)((n0 * cv->OC + g * OCg) * P) * isz;
                if (bp)
                    fill_bias(cv->dt, ys, bp + (size_t)(g * OCg) * isz, OCg, P);
                conv_gemm(cv, OCg, P, K, wg, K, 1, B, P, 1, bp ? 1.0 : 0.0, ys, P);
            } else {
                conv_gemm(cv, OCg, m * P, K, wg, K, 1, B, m * P, 1, 0.0, tmp, m * P);
                shuffle(cv, yp, tmp, n0, m, g, bp, 0);
            }
        }
    }
    rc = 0;
done:
    colbuf_free(&cb);
    return rc;
}

/* One chunk and group of the backward: dY (OCg, m*P) at A with row stride lda. */
static void backward_chunk(colbuf *cb, const void *x, const char *A, int64_t lda,
                           const char *w, void *dx, char *dw, int64_t n0, int64_t m, int64_t g)
{
    const cddp_conv *cv = cb->cv;
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t K = conv_k(cv), P = conv_p(cv), OCg = cv->OC / cv->G;
    const char *wg = w + (size_t)(g * OCg * K) * isz;
    if (dw) {                                 /* dW_g (OCg, K) += dY (OCg, m*P) @ cols^T */
        const char *B = colbuf_fill(cb, x, n0, m, g);
        conv_gemm(cv, OCg, K, m * P, A, lda, 1, B, 1, m * P, 1.0,
                  dw + (size_t)(g * OCg * K) * isz, K);
    }
    if (dx) {                                 /* dcols (K, m*P) = W_g^T (K, OCg) @ dY */
        if (!cb->cols) {                      /* pointwise: dcols is dx's slice */
            conv_gemm(cv, K, P, OCg, wg, 1, K, A, lda, 1, 0.0,
                      (void *)slice(cv, dx, n0, g), P);
            return;
        }
        conv_gemm(cv, K, m * P, OCg, wg, 1, K, A, lda, 1, 0.0, cb->cols, m * P);
        colbuf_adjoint(cb, dx, n0, m, g);
    }
}

static int backward_full(const cddp_conv *cv, const void *x, const void *dy, const void *w,
                         void *dx, void *dw)
{
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t K = conv_k(cv), P = conv_p(cv), OCg = cv->OC / cv->G;
    colbuf cb;
    int rc = -1;
    if (colbuf_init(&cb, cv) < 0)
        goto done;
    char *dyc = cb.mat;
    if (dx && cb.cols && !cb.gather && !cb.pack)          /* col2im accumulates */
        memset(dx, 0, (size_t)(cv->N * cv->C * cv->win.H * cv->win.W) * isz);
    if (dw)
        memset(dw, 0, (size_t)(cv->OC * K) * isz);
    for (int64_t n0 = 0; n0 < cv->N; n0 += cb.nb) {
        int64_t m = cv->N - n0 < cb.nb ? cv->N - n0 : cb.nb;
        for (int64_t g = 0; g < cv->G; g++) {
            const char *A = (const char *)dy + (size_t)((n0 * cv->OC + g * OCg) * P) * isz;
            int64_t lda = P;
            if (m > 1) {
                shuffle(cv, (void *)dy, dyc, n0, m, g, NULL, 1);
                A = dyc;
                lda = m * P;
            }
            backward_chunk(&cb, x, A, lda, w, dx, dw, n0, m, g);
        }
    }
    rc = 0;
done:
    colbuf_free(&cb);
    return rc;
}

/* ---- dead taps -------------------------------------------------------------------------
 * A kernel tap whose every window reads padding contributes nothing: on ResNet's 1x1 planes
 * (layer4, 3x3 kernel, padding 1) only the centre tap of nine reads data. The taps that can
 * read data form a box [i0, i1] x [j0, j1]; the engine runs the equivalent conv with that
 * smaller kernel (padding shifted by i0*dh, j0*dw) on the matching slice of w, and writes dw
 * back into the full kernel (zeros for dead taps). */

/* First and last tap along one dim whose window span [t*d - p, t*d - p + (O-1)*s] meets
 * [0, I). */
static void live_taps(int64_t k, int64_t s, int64_t p, int64_t d, int64_t I, int64_t O,
                      int64_t *t0, int64_t *t1)
{
    *t0 = 0;
    *t1 = k - 1;
    while (*t0 < *t1 && *t0 * d - p + (O - 1) * s < 0)
        (*t0)++;
    while (*t1 > *t0 && *t1 * d - p > I - 1)
        (*t1)--;
}

/* The trimmed conv in *tc (same as *cv when nothing can be trimmed; then 0 is returned). */
static int trim_taps(const cddp_conv *cv, cddp_conv *tc, int64_t *i0, int64_t *j0)
{
    const cddp_win2d *g = &cv->win;
    int64_t i1, j1;
    *tc = *cv;
    live_taps(g->kh, g->sh, g->ph, g->dh, g->H, g->OH, i0, &i1);
    live_taps(g->kw, g->sw, g->pw, g->dw, g->W, g->OW, j0, &j1);
    if ((i1 - *i0 + 1) * (j1 - *j0 + 1) == g->kh * g->kw || *i0 * g->dh > g->ph ||
        *j0 * g->dw > g->pw)
        return 0;
    tc->win.kh = i1 - *i0 + 1;
    tc->win.kw = j1 - *j0 + 1;
    tc->win.ph = g->ph - *i0 * g->dh;
    tc->win.pw = g->pw - *j0 * g->dw;
    return 1;
}

/* Between the full kernel w (OC, Cg, kh, kw) and the trimmed one t (OC, Cg, kh', kw') at
 * taps (i0.., j0..): to_trimmed copies w's box into t, else writes t into w's box and zeros
 * the dead taps. */
static void kernel_box(const cddp_conv *cv, const cddp_conv *tc, char *w, char *t, int64_t i0,
                       int64_t j0, int to_trimmed)
{
    size_t isz = cddp_dtype_size[cv->dt];
    int64_t kh = cv->win.kh, kw = cv->win.kw, th = tc->win.kh, tw = tc->win.kw;
    if (!to_trimmed)
        memset(w, 0, (size_t)(cv->OC * cv->win.C * kh * kw) * isz);
    for (int64_t r = 0; r < cv->OC * cv->win.C; r++)
        for (int64_t i = 0; i < th; i++) {
            char *wr = w + (size_t)((r * kh + i0 + i) * kw + j0) * isz;
            char *tr = t + (size_t)((r * th + i) * tw) * isz;
            if (to_trimmed)
                memcpy(tr, wr, (size_t)tw * isz);
            else
                memcpy(wr, tr, (size_t)tw * isz);
        }
}

int cddp_conv_forward(const cddp_conv *cv, const void *x, const void *w, const void *b, void *y)
{
    cddp_conv tc;
    int64_t i0, j0;
    if (!trim_taps(cv, &tc, &i0, &j0))
        return forward_full(cv, x, w, b, y);
    char *wt = scratch(tc.OC * tc.win.C * tc.win.kh * tc.win.kw, cddp_dtype_size[cv->dt]);
    if (!wt)
        return -1;
    kernel_box(cv, &tc, (char *)w, wt, i0, j0, 1);
    int rc = forward_full(&tc, x, wt, b, y);
    free(wt);
    return rc;
}

int cddp_conv_backward(const cddp_conv *cv, const void *x, const void *dy, const void *w,
                       void *dx, void *dw)
{
    cddp_conv tc;
    int64_t i0, j0, tk;
    char *wt = NULL, *dwt = NULL;
    int rc = -1;
    if (!trim_taps(cv, &tc, &i0, &j0))
        return backward_full(cv, x, dy, w, dx, dw);
    tk = tc.OC * tc.win.C * tc.win.kh * tc.win.kw;
    wt = scratch(tk, cddp_dtype_size[cv->dt]);
    dwt = dw ? scratch(tk, cddp_dtype_size[cv->dt]) : NULL;
    if (!wt || (dw && !dwt))
        goto done;
    kernel_box(cv, &tc, (char *)w, wt, i0, j0, 1);
    if (backward_full(&tc, x, dy, wt, dx, dwt) < 0)
        goto done;
    if (dw)
        kernel_box(cv, &tc, dw, dwt, i0, j0, 0);
    rc = 0;
done:
    free(wt);
    free(dwt);
    return rc;
}

void cddp_channel_sum(cddp_dtype dt, const void *dy, int64_t N, int64_t C, int64_t P, void *db)
{
    for (int64_t c = 0; c < C; c++) {
        double s = 0.0;
        for (int64_t n = 0; n < N; n++) {
            if (dt == CDDP_FLOAT32) {
                const float *r = (const float *)dy + (n * C + c) * P;
                float part = 0.0f;
                for (int64_t p = 0; p < P; p++)
                    part += r[p];
                s += part;
            } else {
                const double *r = (const double *)dy + (n * C + c) * P;
                for (int64_t p = 0; p < P; p++)
                    s += r[p];
            }
        }
        if (dt == CDDP_FLOAT32)
            ((float *)db)[c] = (float)s;
        else
            ((double *)db)[c] = s;
    }
}

void cddp_add_channel_bias(cddp_dtype dt, void *y, int64_t N, int64_t C, int64_t P,
                           const void *b)
{
    for (int64_t r = 0; r < N * C; r++) {
        if (dt == CDDP_FLOAT32) {
            float v = ((const float *)b)[r % C], *row = (float *)y + r * P;
            for (int64_t p = 0; p < P; p++)
                row[p] += v;
        } else {
            double v = ((const double *)b)[r % C], *row = (double *)y + r * P;
            for (int64_t p = 0; p < P; p++)
                row[p] += v;
        }
    }
}
