/* nn/im2col.c — im2col and its adjoint col2im, the data movement under every convolution,
 * unfold and fold.
 *
 * Mirrors: at::native::im2col / col2im (aten/src/ATen/native/im2col.h), the row layout
 * torch.nn.functional.unfold returns.
 *
 *   im2col: x (C, H, W) -> cols (C*kh*kw, OH*OW)      row (c, i, j), column (oh, ow)
 *   col2im: cols (C*kh*kw, OH*OW) -> x (C, H, W) +=   (the transpose of the same linear map)
 *
 * Every column row is filled one output row (oh) at a time: the valid span of ow (where the
 * input column ow*sw - pw + j*dw lies inside [0, W)) is computed once per (j), so the inner
 * loop has no bounds test — a memcpy (im2col) or a unit-stride add (col2im) at stride 1.
 * Pure C; callers may run it with the GIL released.
 */
#include "nn/conv.h"
#include <string.h>

/* First ow whose input column ow*s + off is >= 0, and first ow whose column is >= W, both
 * clipped to [0, OW]: the span [lo, hi) reads inside the row. */
static void valid_span(int64_t off, int64_t s, int64_t W, int64_t OW, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = W - off <= 0 ? 0 : (W - off + s - 1) / s;
    if (a > OW)
        a = OW;
    if (b > OW)
        b = OW;
    if (b < a)
        b = a;
    *lo = a;
    *hi = b;
}

#define DEFINE_IM2COL(T, SFX)                                                                  \
static void im2col_##SFX(const T *x, const cddp_win2d *g, T *cols, int64_t ldc)               \
{                                                                                              \
    int64_t OW = g->OW;                                                                        \
    for (int64_t c = 0; c < g->C; c++)                                                         \
        for (int64_t i = 0; i < g->kh; i++)                                                    \
            for (int64_t j = 0; j < g->kw; j++) {                                              \
                T *row = cols + ((c * g->kh + i) * g->kw + j) * ldc;                           \
                int64_t off = j * g->dw - g->pw, lo, hi;                                       \
                valid_span(off, g->sw, g->W, OW, &lo, &hi);                                    \
                for (int64_t oh = 0; oh < g->OH; oh++) {                                       \
                    T *dst = row + oh * OW;                                                    \
                    int64_t ih = oh * g->sh - g->ph + i * g->dh;                               \
                    if (ih < 0 || ih >= g->H) {                                                \
                        for (int64_t ow = 0; ow < OW; ow++)                                    \
                            dst[ow] = 0;                                                       \
                        continue;                                                              \
                    }                                                                          \
                    const T *src = x + (c * g->H + ih) * g->W;                                 \
                    for (int64_t ow = 0; ow < lo; ow++)                                        \
                        dst[ow] = 0;                                                           \
                    if (g->sw == 1 && hi - lo >= 64)                                           \
                        memcpy(dst + lo, src + lo + off, (size_t)(hi - lo) * sizeof(T));       \
                    else if (g->sw == 1)                                                       \
                        for (int64_t ow = lo; ow < hi; ow++)                                   \
                            dst[ow] = src[ow + off];                                           \
                    else                                                                       \
                        for (int64_t ow = lo; ow < hi; ow++)                                   \
                            dst[ow] = src[ow * g->sw + off];                                   \
                    for (int64_t ow = hi; ow < OW; ow++)                                       \
                        dst[ow] = 0;                                                           \
                }                                                                              \
            }                                                                                  \
}                                                                                              \
                                                                                               \
static void col2im_##SFX(const T *cols, int64_t ldc, const cddp_win2d *g, T *x)               \
{                                                                                              \
    int64_t OW = g->OW;                                                                        \
    for (int64_t c = 0; c < g->C; c++)                                                         \
        for (int64_t i = 0; i < g->kh; i++)                                                    \
            for (int64_t j = 0; j < g->kw; j++) {                                              \
                const T *row = cols + ((c * g->kh + i) * g->kw + j) * ldc;                     \
                int64_t off = j * g->dw - g->pw, lo, hi;                                       \
                valid_span(off, g->sw, g->W, OW, &lo, &hi);                                    \
                for (int64_t oh = 0; oh < g->OH; oh++) {                                       \
                    int64_t ih = oh * g->sh - g->ph + i * g->dh;                               \
                    if (ih < 0 || ih >= g->H)                                                  \
                        continue;                                                              \
                    const T *src = row + oh * OW;                                              \
                    T *dst = x + (c * g->H + ih) * g->W;                                       \
                    if (g->sw == 1)                                                            \
                        for (int64_t ow = lo; ow < hi; ow++)                                   \
                            dst[ow + off] += src[ow];                                          \
                    else                                                                       \
                        for (int64_t ow = lo; ow < hi; ow++)                                   \
                            dst[ow * g->sw + off] += src[ow];                                  \
                }                                                                              \
            }                                                                                  \
}

DEFINE_IM2COL(float, f32)
DEFINE_IM2COL(double, f64)

void cddp_im2col(cddp_dtype dt, const void *x, const cddp_win2d *g, void *cols, int64_t ldc)
{
    if (dt == CDDP_FLOAT32)
        im2col_f32((const float *)x, g, (float *)cols, ldc);
    else
        im2col_f64((const double *)x, g, (double *)cols, ldc);
}

void cddp_col2im(cddp_dtype dt, const void *cols, int64_t ldc, const cddp_win2d *g, void *x)
{
    if (dt == CDDP_FLOAT32)
        col2im_f32((const float *)cols, ldc, g, (float *)x);
    else
        col2im_f64((const double *)cols, ldc, g, (double *)x);
}

/* ---- the gather path: a zero-bordered copy of a chunk of samples, then one offset table ------
 *
 * For small planes (ResNet's 8x8 .. 1x1) the per-row spans above are a few elements long and
 * the loop overhead dominates. Instead the chunk's planes are copied once into a buffer with
 * the padding materialised as zeros (xp (m, C, Hp, Wp)); then column q = (s, oh, ow) of
 * every row (c, i, j) reads xp at  c*Hp*Wp + i*dh*Wp + j*dw + base[q]  with
 * base[q] = s*C*Hp*Wp + oh*sh*Wp + ow*sw — one table for all rows, a branch-free inner loop. */

void cddp_gather_plan_init(cddp_gather_plan *gp, const cddp_win2d *g, int64_t m)
{
    gp->Hp = g->ph + g->H;
    gp->Wp = g->pw + g->W;
    int64_t hneed = (g->OH - 1) * g->sh + (g->kh - 1) * g->dh + 1;   /* rows windows touch */
    int64_t wneed = (g->OW - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    if (hneed > gp->Hp)
        gp->Hp = hneed;
    if (wneed > gp->Wp)
        gp->Wp = wneed;
    gp->m = m;
}

int cddp_gather_plan_fits(const cddp_win2d *g, int64_t m)
{
    cddp_gather_plan gp;
    cddp_gather_plan_init(&gp, g, m);
    return m * g->C * gp.Hp * gp.Wp < INT32_MAX && m * g->OH * g->OW < INT32_MAX;
}

void cddp_gather_plan_table(const cddp_gather_plan *gp, const cddp_win2d *g, int32_t *base)
{
    int64_t q = 0, plane = g->C * gp->Hp * gp->Wp;
    for (int64_t s = 0; s < gp->m; s++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++)
                base[q++] = (int32_t)(s * plane + oh * g->sh * gp->Wp + ow * g->sw);
}

#define DEFINE_GATHER(T, SFX)                                                                  \
CDDP_CLONES static void pad_copy_##SFX(const T *x, int64_t xstride,                             \
                                     const cddp_gather_plan *gp, const cddp_win2d *g,          \
                                     int64_t m, T *xp, int to_padded)                          \
{                                                                                              \
    for (int64_t s = 0; s < m; s++)                                                            \
        for (int64_t c = 0; c < g->C; c++) {                                                   \
            T *pl = xp + ((s * g->C + c) * gp->Hp + g->ph) * gp->Wp + g->pw;                   \
            T *xs = (T *)x + s * xstride + c * g->H * g->W;                                    \
            for (int64_t h = 0; h < g->H; h++)                                                 \
                for (int64_t w = 0; w < g->W; w++) {                                           \
                    if (to_padded)                                                             \
                        pl[h * gp->Wp + w] = xs[h * g->W + w];                                 \
                    else                                                                       \
                        xs[h * g->W + w] = pl[h * gp->Wp + w];                                 \
                }                                                                              \
        }                                                                                      \
}                                                                                              \
                                                                                               \
static inline void gather_row_##SFX(T *restrict row, const T *restrict src,                  \
                                    const int32_t *restrict base, int64_t n)                   \
{                                                                                              \
    for (int64_t q = 0; q < n; q++)                                                            \
        row[q] = src[base[q]];                                                                 \
}                                                                                              \
                                                                                               \
/* Unit-stride windows: columns come in runs of L = OW consecutive input elements. Runs are  \
 * moved in blocks of 8 and 4 of constant length (one vector move each; a loop of run length   \
 * would become a memmove call per run, which costs more than the 32 bytes it moves). */       \
static inline void run_copy_##SFX(T *restrict row, const T *restrict src,                    \
                                  const int32_t *restrict base, int64_t n, int64_t L)          \
{                                                                                              \
    for (int64_t r = 0; r < n; r += L) {                                                       \
        const T *restrict s = src + base[r];                                                   \
        T *restrict d = row + r;                                                               \
        int64_t w = 0;                                                                         \
        for (; w + 8 <= L; w += 8)                                                             \
            __builtin_memcpy(d + w, s + w, 8 * sizeof(T));    /* inlined: constant size */     \
        for (; w + 4 <= L; w += 4)                                                             \
            __builtin_memcpy(d + w, s + w, 4 * sizeof(T));                                     \
        for (; w < L; w++)                                                                     \
            d[w] = s[w];                                                                       \
    }                                                                                          \
}                                                                                              \
                                                                                               \
static inline void run_add_##SFX(const T *restrict row, T *restrict dst,                      \
                                 const int32_t *restrict base, int64_t n, int64_t L)           \
{                                                                                              \
    for (int64_t r = 0; r < n; r += L) {                                                       \
        T *restrict d = dst + base[r];                                                         \
        const T *restrict s = row + r;                                                         \
        int64_t w = 0;                                                                         \
        for (; w + 8 <= L; w += 8)                                                             \
            for (int k = 0; k < 8; k++)                                                        \
                d[w + k] += s[w + k];                                                          \
        for (; w + 4 <= L; w += 4)                                                             \
            for (int k = 0; k < 4; k++)                                                        \
                d[w + k] += s[w + k];                                                          \
        for (; w < L; w++)                                                                     \
            d[w] += s[w];                                                                      \
    }                                                                                          \
}                                                                                              \
                                                                                               \
CDDP_CLONES static void gather_##SFX(const T *xp, const cddp_gather_plan *gp, const cddp_win2d *g, \
                                   const int32_t *base, int64_t n, T *cols, int scatter)       \
{                                                                                              \
    int64_t hw = gp->Hp * gp->Wp, L = g->sw == 1 && g->OW >= 4 ? g->OW : 0;                   \
    for (int64_t c = 0; c < g->C; c++)                                                         \
        for (int64_t i = 0; i < g->kh; i++)                                                    \
            for (int64_t j = 0; j < g->kw; j++) {                                              \
                T *row = cols + ((c * g->kh + i) * g->kw + j) * n;                             \
                T *src = (T *)xp + c * hw + i * g->dh * gp->Wp + j * g->dw;                    \
                if (scatter && L)                                                              \
                    run_add_##SFX(row, src, base, n, L);                                       \
                else if (scatter)                                                              \
                    for (int64_t q = 0; q < n; q++)                                            \
                        src[base[q]] += row[q];                                                \
                else if (L)                                                                    \
                    run_copy_##SFX(row, src, base, n, L);                                      \
                else                                                                           \
                    gather_row_##SFX(row, src, base, n);                                       \
            }                                                                                  \
}

DEFINE_GATHER(float, f32)
DEFINE_GATHER(double, f64)

void cddp_pad_copy(cddp_dtype dt, const void *x, int64_t xstride, const cddp_gather_plan *gp,
                   const cddp_win2d *g, int64_t m, void *xp, int to_padded)
{
    if (dt == CDDP_FLOAT32)
        pad_copy_f32((const float *)x, xstride, gp, g, m, (float *)xp, to_padded);
    else
        pad_copy_f64((const double *)x, xstride, gp, g, m, (double *)xp, to_padded);
}

void cddp_gather_cols(cddp_dtype dt, const void *xp, const cddp_gather_plan *gp,
                      const cddp_win2d *g, const int32_t *base, int64_t n, void *cols,
                      int scatter)
{
    if (dt == CDDP_FLOAT32)
        gather_f32((const float *)xp, gp, g, base, n, (float *)cols, scatter);
    else
        gather_f64((const double *)xp, gp, g, base, n, (double *)cols, scatter);
}
