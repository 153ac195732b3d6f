/* nn/norm/kernels.c — the loops under every normalization layer (batch, sync batch, group and
 * instance norm): per-row/per-column moments, the normalize+affine pass, the backward
 * reductions and the dx pass. Pure C over contiguous float32/float64 memory; no Python, so the
 * callers run them with the GIL released. Contracts in nn/norm/norm.h.
 *
 * Layouts (norm.h): rows r (R, S) with coefficients at r % cmod; columns j of an (N, W) block.
 *
 * Centring subtracts the mean in two float parts (hi = (T)m, lo = (T)(m - hi)): x - hi is exact
 * near the mean (Sterbenz), so float32 outputs keep their precision even when the mean dwarfs
 * the spread, at one extra subtraction per element.
 *
 * Sums are double whatever the data (torch's CPU accumulate type for float32 is double too).
 * Row loops accumulate in explicit double vectors (8 lanes, fixed order: results do not depend
 * on the ISA, no -ffast-math); column loops are vectorized across columns by the compiler.
 * Every kernel is CDDP_CLONES (common/clones.h), rounding alike in every clone.
 */
#include "nn/norm/norm.h"
#include "common/clones.h"
#include <string.h>

/* Row sums use explicit 4-wide double vectors (GCC vector extensions; plain loops with
 * several scalar accumulators are left scalar by the vectorizer): 8 values per step as two
 * vectors, converted from float32 where the data are float32. */
/* The helpers below are always inlined: called out of line from the avx2 clone (a -O0 build
 * does not inline), a 32-byte vector passed by value would cross from AVX to non-AVX code, two
 * different calling conventions (the wrong numbers a CDDP_DEBUG=1 build gave under valgrind). */
#define NORM_INLINE static inline __attribute__((always_inline))
typedef float nv4f __attribute__((vector_size(16)));
typedef double nv4d __attribute__((vector_size(32)));

NORM_INLINE void load8_f32(const float *p, nv4d *lo, nv4d *hi)
{
    nv4f a, b;
    memcpy(&a, p, sizeof a);
    memcpy(&b, p + 4, sizeof b);
    *lo = __builtin_convertvector(a, nv4d);
    *hi = __builtin_convertvector(b, nv4d);
}

NORM_INLINE void load8_f64(const double *p, nv4d *lo, nv4d *hi)
{
    memcpy(lo, p, sizeof *lo);
    memcpy(hi, p + 4, sizeof *hi);
}

NORM_INLINE double hsum(nv4d a, nv4d b)
{
    nv4d c = a + b;
    return (c[0] + c[1]) + (c[2] + c[3]);
}

/* ---- moments ------------------------------------------------------------------------------ */

#define ROWS_MOMENTS(NAME, T, SFX)                                                           \
    CDDP_CLONES static void NAME(const T *x, int64_t R, int64_t S, const double *K,             \
                              int64_t cmod, double *s1, double *s2)                          \
    {                                                                                        \
        for (int64_t r = 0; r < R; r++) {                                                    \
            const T *p = x + r * S;                                                          \
            const double k = K[r % cmod];                                                    \
            const nv4d kv = {k, k, k, k};                                                    \
            nv4d a1l = {0}, a1h = {0}, a2l = {0}, a2h = {0}, lo, hi;                         \
            double t1 = 0, t2 = 0;                                                           \
            int64_t s = 0;                                                                   \
            for (; s + 8 <= S; s += 8) {                                                     \
                load8_##SFX(p + s, &lo, &hi);                                                \
                lo -= kv;                                                                    \
                hi -= kv;                                                                    \
                a1l += lo;                                                                   \
                a1h += hi;                                                                   \
                a2l += lo * lo;                                                              \
                a2h += hi * hi;                                                              \
            }                                                                                \
            for (; s < S; s++) {                                                             \
                double d = (double)p[s] - k;                                                 \
                t1 += d;                                                                     \
                t2 += d * d;                                                                 \
            }                                                                                \
            s1[r] = t1 + hsum(a1l, a1h);                                                     \
            s2[r] = t2 + hsum(a2l, a2h);                                                     \
        }                                                                                    \
    }
ROWS_MOMENTS(rows_moments_f32, float, f32)
ROWS_MOMENTS(rows_moments_f64, double, f64)

#define COLS_MOMENTS(NAME, T)                                                                \
    CDDP_CLONES static void NAME(const T *x, int64_t N, int64_t W, const double *K, double *s1, \
                              double *s2)                                                    \
    {                                                                                        \
        for (int64_t j = 0; j < W; j++)                                                      \
            s1[j] = s2[j] = 0;                                                               \
        for (int64_t n = 0; n < N; n++) {                                                    \
            const T *p = x + n * W;                                                          \
            for (int64_t j = 0; j < W; j++) {                                                \
                double d = (double)p[j] - K[j];                                              \
                s1[j] += d;                                                                  \
                s2[j] += d * d;                                                              \
            }                                                                                \
        }                                                                                    \
    }
COLS_MOMENTS(cols_moments_f32, float)
COLS_MOMENTS(cols_moments_f64, double)

void cddp_norm_rows_moments(cddp_dtype dt, const void *x, int64_t R, int64_t S,
                            const double *K, int64_t cmod, double *s1, double *s2)
{
    if (dt == CDDP_FLOAT32)
        rows_moments_f32(x, R, S, K, cmod, s1, s2);
    else
        rows_moments_f64(x, R, S, K, cmod, s1, s2);
}

void cddp_norm_cols_moments(cddp_dtype dt, const void *x, int64_t N, int64_t W,
                            const double *K, double *s1, double *s2)
{
    if (dt == CDDP_FLOAT32)
        cols_moments_f32(x, N, W, K, s1, s2);
    else
        cols_moments_f64(x, N, W, K, s1, s2);
}

/* ---- normalize + affine: y = (x - m) * a + b, in the data's precision ---------------------- */

#define ROWS_AFFINE(NAME, T)                                                                 \
    CDDP_CLONES static void NAME(const T *x, T *y, int64_t R, int64_t S, const double *m,       \
                              const double *a, const double *b, int64_t cmod)                \
    {                                                                                        \
        for (int64_t r = 0; r < R; r++) {                                                    \
            const T *p = x + r * S;                                                          \
            T *o = y + r * S;                                                                \
            const T mh = (T)m[r % cmod], ml = (T)(m[r % cmod] - (double)mh);                  \
            const T aa = (T)a[r % cmod], bb = (T)b[r % cmod];                                \
            for (int64_t s = 0; s < S; s++)                                                  \
                o[s] = ((p[s] - mh) - ml) * aa + bb;                                         \
        }                                                                                    \
    }
ROWS_AFFINE(rows_affine_f32, float)
ROWS_AFFINE(rows_affine_f64, double)

/* Column kernels convert their coefficients to T once per block of CB columns (on the stack),
 * so the loop over the N rows is pure T arithmetic. */
#define CB 256
#define BLOCK(j0, W) ((W) - (j0) < CB ? (W) - (j0) : CB)

#define COLS_AFFINE(NAME, T)                                                                 \
    CDDP_CLONES static void NAME(const T *x, T *y, int64_t N, int64_t W, const double *m,       \
                              const double *a, const double *b)                              \
    {                                                                                        \
        T mh[CB], ml[CB], aa[CB], bb[CB];                                                    \
        for (int64_t j0 = 0; j0 < W; j0 += CB) {                                             \
            int64_t nb = BLOCK(j0, W);                                                       \
            for (int64_t j = 0; j < nb; j++) {                                               \
                mh[j] = (T)m[j0 + j];                                                        \
                ml[j] = (T)(m[j0 + j] - (double)mh[j]);                                      \
                aa[j] = (T)a[j0 + j];                                                        \
                bb[j] = (T)b[j0 + j];                                                        \
            }                                                                                \
            for (int64_t n = 0; n < N; n++) {                                                \
                const T *p = x + n * W + j0;                                                 \
                T *o = y + n * W + j0;                                                       \
                for (int64_t j = 0; j < nb; j++)                                             \
                    o[j] = ((p[j] - mh[j]) - ml[j]) * aa[j] + bb[j];                         \
            }                                                                                \
        }                                                                                    \
    }
COLS_AFFINE(cols_affine_f32, float)
COLS_AFFINE(cols_affine_f64, double)

void cddp_norm_rows_affine(cddp_dtype dt, const void *x, void *y, int64_t R, int64_t S,
                           const double *m, const double *a, const double *b, int64_t cmod)
{
    if (dt == CDDP_FLOAT32)
        rows_affine_f32(x, y, R, S, m, a, b, cmod);
    else
        rows_affine_f64(x, y, R, S, m, a, b, cmod);
}

void cddp_norm_cols_affine(cddp_dtype dt, const void *x, void *y, int64_t N, int64_t W,
                           const double *m, const double *a, const double *b)
{
    if (dt == CDDP_FLOAT32)
        cols_affine_f32(x, y, N, W, m, a, b);
    else
        cols_affine_f64(x, y, N, W, m, a, b);
}

/* ---- backward reductions: sum dy, sum dy * (x - m) --------------------------------------- */

#define ROWS_REDUCE(NAME, T, SFX)                                                            \
    CDDP_CLONES static void NAME(const T *dy, const T *x, int64_t R, int64_t S,                 \
                              const double *m, int64_t cmod, double *sdy, double *sdyx)      \
    {                                                                                        \
        for (int64_t r = 0; r < R; r++) {                                                    \
            const T *g = dy + r * S, *p = x ? x + r * S : NULL;                              \
            const double mm = m ? m[r % cmod] : 0.0;                                         \
            const nv4d mv = {mm, mm, mm, mm};                                                \
            nv4d a1l = {0}, a1h = {0}, a2l = {0}, a2h = {0}, gl, gh, xl, xh;                 \
            double t1 = 0, t2 = 0;                                                           \
            int64_t s = 0;                                                                   \
            if (p) {                                                                         \
                for (; s + 8 <= S; s += 8) {                                                 \
                    load8_##SFX(g + s, &gl, &gh);                                            \
                    load8_##SFX(p + s, &xl, &xh);                                            \
                    a1l += gl;                                                               \
                    a1h += gh;                                                               \
                    a2l += gl * (xl - mv);                                                   \
                    a2h += gh * (xh - mv);                                                   \
                }                                                                            \
                for (; s < S; s++) {                                                         \
                    t1 += (double)g[s];                                                      \
                    t2 += (double)g[s] * ((double)p[s] - mm);                                \
                }                                                                            \
            } else {                                                                         \
                for (; s + 8 <= S; s += 8) {                                                 \
                    load8_##SFX(g + s, &gl, &gh);                                            \
                    a1l += gl;                                                               \
                    a1h += gh;                                                               \
                }                                                                            \
                for (; s < S; s++)                                                           \
                    t1 += (double)g[s];                                                      \
            }                                                                                \
            sdy[r] = t1 + hsum(a1l, a1h);                                                    \
            if (p)                                                                           \
                sdyx[r] = t2 + hsum(a2l, a2h);                                               \
        }                                                                                    \
    }
ROWS_REDUCE(rows_reduce_f32, float, f32)
ROWS_REDUCE(rows_reduce_f64, double, f64)

#define COLS_REDUCE(NAME, T)                                                                 \
    CDDP_CLONES static void NAME(const T *dy, const T *x, int64_t N, int64_t W,                 \
                              const double *m, double *sdy, double *sdyx)                    \
    {                                                                                        \
        for (int64_t j = 0; j < W; j++) {                                                    \
            sdy[j] = 0;                                                                      \
            if (x)                                                                           \
                sdyx[j] = 0;                                                                 \
        }                                                                                    \
        for (int64_t n = 0; n < N; n++) {                                                    \
            const T *g = dy + n * W;                                                         \
            if (x) {                                                                         \
                const T *p = x + n * W;                                                      \
                for (int64_t j = 0; j < W; j++) {                                            \
                    sdy[j] += (double)g[j];                                                  \
                    sdyx[j] += (double)g[j] * ((double)p[j] - m[j]);                         \
                }                                                                            \
            } else {                                                                         \
                for (int64_t j = 0; j < W; j++)                                              \
                    sdy[j] += (double)g[j];                                                  \
            }                                                                                \
        }                                                                                    \
    }
COLS_REDUCE(cols_reduce_f32, float)
COLS_REDUCE(cols_reduce_f64, double)

void cddp_norm_rows_reduce(cddp_dtype dt, const void *dy, const void *x, int64_t R, int64_t S,
                           const double *m, int64_t cmod, double *sdy, double *sdyx)
{
    if (dt == CDDP_FLOAT32)
        rows_reduce_f32(dy, x, R, S, m, cmod, sdy, sdyx);
    else
        rows_reduce_f64(dy, x, R, S, m, cmod, sdy, sdyx);
}

void cddp_norm_cols_reduce(cddp_dtype dt, const void *dy, const void *x, int64_t N, int64_t W,
                           const double *m, double *sdy, double *sdyx)
{
    if (dt == CDDP_FLOAT32)
        cols_reduce_f32(dy, x, N, W, m, sdy, sdyx);
    else
        cols_reduce_f64(dy, x, N, W, m, sdy, sdyx);
}

/* ---- dx = dy * p + (x - m) * q + r ------------------------------------------------------- */

#define ROWS_ELEMT(NAME, T)                                                                  \
    CDDP_CLONES static void NAME(const T *dy, const T *x, T *dx, int64_t R, int64_t S,          \
                              const double *m, const double *pc, const double *q,            \
                              const double *rc, int64_t cmod)                                \
    {                                                                                        \
        for (int64_t r = 0; r < R; r++) {                                                    \
            const T *g = dy + r * S;                                                         \
            T *o = dx + r * S;                                                               \
            const int64_t c = r % cmod;                                                      \
            const T pp = (T)pc[c], rr = (T)rc[c];                                            \
            if (x) {                                                                         \
                const T *p = x + r * S, mh = (T)m[c], qq = (T)q[c];                          \
                const T ml = (T)(m[c] - (double)mh);                                         \
                for (int64_t s = 0; s < S; s++)                                              \
                    o[s] = g[s] * pp + ((p[s] - mh) - ml) * qq + rr;                         \
            } else {                                                                         \
                for (int64_t s = 0; s < S; s++)                                              \
                    o[s] = g[s] * pp + rr;                                                   \
            }                                                                                \
        }                                                                                    \
    }
ROWS_ELEMT(rows_elemt_f32, float)
ROWS_ELEMT(rows_elemt_f64, double)

#define COLS_ELEMT(NAME, T)                                                                  \
    CDDP_CLONES static void NAME(const T *dy, const T *x, T *dx, int64_t N, int64_t W,          \
                              const double *m, const double *pc, const double *q,            \
                              const double *rc)                                              \
    {                                                                                        \
        T mh[CB], ml[CB], pp[CB], qq[CB], rr[CB];                                            \
        for (int64_t j0 = 0; j0 < W; j0 += CB) {                                             \
            int64_t nb = BLOCK(j0, W);                                                       \
            for (int64_t j = 0; j < nb; j++) {                                               \
                mh[j] = x ? (T)m[j0 + j] : 0;                                                \
                ml[j] = x ? (T)(m[j0 + j] - (double)mh[j]) : 0;                              \
                pp[j] = (T)pc[j0 + j];                                                       \
                qq[j] = (T)q[j0 + j];                                                        \
                rr[j] = (T)rc[j0 + j];                                                       \
            }                                                                                \
            for (int64_t n = 0; n < N; n++) {                                                \
                const T *g = dy + n * W + j0;                                                \
                T *o = dx + n * W + j0;                                                      \
                if (x) {                                                                     \
                    const T *p = x + n * W + j0;                                             \
                    for (int64_t j = 0; j < nb; j++)                                         \
                        o[j] = g[j] * pp[j] + ((p[j] - mh[j]) - ml[j]) * qq[j] + rr[j];      \
                } else {                                                                     \
                    for (int64_t j = 0; j < nb; j++)                                         \
                        o[j] = g[j] * pp[j] + rr[j];                                         \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }
COLS_ELEMT(cols_elemt_f32, float)
COLS_ELEMT(cols_elemt_f64, double)

void cddp_norm_rows_elemt(cddp_dtype dt, const void *dy, const void *x, void *dx, int64_t R,
                          int64_t S, const double *m, const double *p, const double *q,
                          const double *r, int64_t cmod)
{
    if (dt == CDDP_FLOAT32)
        rows_elemt_f32(dy, x, dx, R, S, m, p, q, r, cmod);
    else
        rows_elemt_f64(dy, x, dx, R, S, m, p, q, r, cmod);
}

void cddp_norm_cols_elemt(cddp_dtype dt, const void *dy, const void *x, void *dx, int64_t N,
                          int64_t W, const double *m, const double *p, const double *q,
                          const double *r)
{
    if (dt == CDDP_FLOAT32)
        cols_elemt_f32(dy, x, dx, N, W, m, p, q, r);
    else
        cols_elemt_f64(dy, x, dx, N, W, m, p, q, r);
}
