/* distributed/pg/reduce_kernels.h — reduction kernels of the process group: dst = a op b per dtype and ReduceOp,
 * and the n-source form the collectives use (sources in rank order 0..n-1, so every rank that
 * reduces the same data gets the same bits).
 *
 * Mirrors: gloo's sum/product/min/max/band/bor/bxor functions as torch's ProcessGroupGloo
 * applies them (bool: SUM/MAX/BOR = or, PRODUCT/MIN/BAND = and, BXOR = xor). Integer SUM and
 * PRODUCT wrap (two's complement) instead of overflowing into undefined behaviour.
 * float16/bfloat16: each step computed in float32 and rounded to the dtype, as gloo's float16
 * operators do (so an n-rank sum rounds n - 1 times, in rank order); uint8/int8/int16 wrap in
 * their own width.
 * AVG = SUM divided by n (floating dtypes only; the binding rejects the others).
 */
#ifndef CDDP_PG_REDUCE_H
#define CDDP_PG_REDUCE_H

#include <stdint.h>
#include <string.h>
#include "common/half.h"
#include "distributed/pg/pg.h"

/* two loops so each can be vectorized without runtime alias checks: in place (dst == a)
 * and out of place (no overlap) */
#define PG_RED_LOOP(T, EXPR)                                                              \
    do {                                                                                  \
        const T *restrict b_ = (const T *)b;                                              \
        if (dst == a) {                                                                   \
            T *restrict d_ = (T *)dst;                                                    \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = d_[i], y = b_[i];                                                   \
                d_[i] = (EXPR);                                                           \
            }                                                                             \
        } else {                                                                          \
            T *restrict d_ = (T *)dst;                                                    \
            const T *restrict a_ = (const T *)a;                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = a_[i], y = b_[i];                                                   \
                d_[i] = (EXPR);                                                           \
            }                                                                             \
        }                                                                                 \
    } while (0)

/* integer ops through the unsigned type so overflow wraps */
#define PG_RED_INT(T, U)                                                                  \
    switch (op) {                                                                         \
    case CDDP_RED_SUM: PG_RED_LOOP(T, (T)((U)x + (U)y)); break;                            \
    case CDDP_RED_PRODUCT: PG_RED_LOOP(T, (T)((U)x * (U)y)); break;                        \
    case CDDP_RED_MIN: PG_RED_LOOP(T, x < y ? x : y); break;                               \
    case CDDP_RED_MAX: PG_RED_LOOP(T, x > y ? x : y); break;                               \
    case CDDP_RED_BAND: PG_RED_LOOP(T, x & y); break;                                      \
    case CDDP_RED_BOR: PG_RED_LOOP(T, x | y); break;                                       \
    case CDDP_RED_BXOR: PG_RED_LOOP(T, x ^ y); break;                                      \
    default: break;                                                                       \
    }

#define PG_RED_FLOAT(T)                                                                   \
    switch (op) {                                                                         \
    case CDDP_RED_SUM: case CDDP_RED_AVG: PG_RED_LOOP(T, x + y); break;                    \
    case CDDP_RED_PRODUCT: PG_RED_LOOP(T, x * y); break;                                   \
    case CDDP_RED_MIN: PG_RED_LOOP(T, x < y ? x : y); break;                               \
    case CDDP_RED_MAX: PG_RED_LOOP(T, x > y ? x : y); break;                               \
    default: break;                                                                       \
    }

/* 16-bit floats: x, y are the stored bits; TO/FROM convert to and from float */
#define PG_RED_HALF(TO, FROM)                                                             \
    switch (op) {                                                                         \
    case CDDP_RED_SUM: case CDDP_RED_AVG:                                                 \
        PG_RED_LOOP(uint16_t, FROM(TO(x) + TO(y))); break;                                \
    case CDDP_RED_PRODUCT: PG_RED_LOOP(uint16_t, FROM(TO(x) * TO(y))); break;             \
    case CDDP_RED_MIN: PG_RED_LOOP(uint16_t, TO(x) < TO(y) ? x : y); break;               \
    case CDDP_RED_MAX: PG_RED_LOOP(uint16_t, TO(x) > TO(y) ? x : y); break;               \
    default: break;                                                                       \
    }

/* dst[i] = a[i] op b[i] for n elements; dst equals a or overlaps neither a nor b. */
static inline void pg_reduce2(void *dst, const void *a, const void *b, int64_t n, int dtype,
                              int op)
{
    switch (dtype) {
    case 0: PG_RED_FLOAT(float); break;
    case 1: PG_RED_FLOAT(double); break;
    case 2: PG_RED_INT(int64_t, uint64_t); break;
    case 3: PG_RED_INT(int32_t, uint32_t); break;
    case 4:
        switch (op) {   /* bools are 0/1 bytes: or / and / xor keep them 0/1 */
        case CDDP_RED_SUM: case CDDP_RED_MAX: case CDDP_RED_BOR:
            PG_RED_LOOP(uint8_t, x | y); break;
        case CDDP_RED_PRODUCT: case CDDP_RED_MIN: case CDDP_RED_BAND:
            PG_RED_LOOP(uint8_t, x & y); break;
        case CDDP_RED_BXOR: PG_RED_LOOP(uint8_t, x ^ y); break;
        default: break;
        }
        break;
    case 5: PG_RED_HALF(cddp_f16_to_f32, cddp_f32_to_f16); break;
    case 6: PG_RED_HALF(cddp_bf16_to_f32, cddp_f32_to_bf16); break;
    case 7: PG_RED_INT(uint8_t, uint8_t); break;
    case 8: PG_RED_INT(int8_t, uint8_t); break;
    case 9: PG_RED_INT(int16_t, uint16_t); break;
    default: break;
    }
}

/* x[i] /= d (AVG's final step; floating dtypes). */
static inline void pg_divide(void *x, int64_t n, int dtype, int d)
{
    if (dtype == 0) {
        float *p = x, f = (float)d;
        for (int64_t i = 0; i < n; i++) p[i] /= f;
    } else if (dtype == 1) {
        double *p = x, f = (double)d;
        for (int64_t i = 0; i < n; i++) p[i] /= f;
    } else if (dtype == 5 || dtype == 6) {         /* in float, rounded once */
        uint16_t *p = x;
        float f = (float)d;
        for (int64_t i = 0; i < n; i++)
            p[i] = dtype == 5 ? cddp_f32_to_f16(cddp_f16_to_f32(p[i]) / f)
                              : cddp_f32_to_bf16(cddp_bf16_to_f32(p[i]) / f);
    }
}

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* dst = src (n bytes). nt: non-temporal (streaming) stores, for outputs far larger than the
 * caches: they skip the read-for-ownership a normal store pays, ~1/3 of the DRAM traffic of
 * a copy. Callers issue pg_store_fence() before publishing anything that orders after it. */
static inline void pg_copy(void *dst, const void *src, size_t n, int nt)
{
#if defined(__SSE2__)
    if (nt && n >= 256) {
        char *d = dst;
        const char *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15;
        memcpy(d, s, head);
        d += head, s += head, n -= head;
        for (; n >= 64; d += 64, s += 64, n -= 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)s);
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
            _mm_stream_si128((__m128i *)d, a);
            _mm_stream_si128((__m128i *)(d + 16), b);
            _mm_stream_si128((__m128i *)(d + 32), c);
            _mm_stream_si128((__m128i *)(d + 48), e);
        }
        memcpy(d, s, n);
        return;
    }
#endif
    (void)nt;
    memcpy(dst, src, n);
}

static inline void pg_store_fence(void)
{
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

#define PG_RED_BLOCK 4096   /* bytes: the running result stays in L1 */

/* dst = srcs[0] op srcs[1] op ... op srcs[nsrc-1] (then / avg_n when op is AVG), n elements;
 * also copied to dst2 when it is not NULL. Works block by block through an L1 scratch, so
 * dst may alias any source and every source is read exactly once. nsrc >= 1.
 * nt: dst is written with streaming stores (see pg_copy). */
static inline void pg_reduce_n2(void *dst, void *dst2, const void *const *srcs, int nsrc,
                                int64_t n, int dtype, int op, int avg_n, int nt)
{
    size_t es = cddp_pg_dtype_size[dtype];
    int64_t blk = PG_RED_BLOCK / (int64_t)es;
    _Alignas(64) char tmp[PG_RED_BLOCK];
    for (int64_t off = 0; off < n; off += blk) {
        int64_t m = n - off < blk ? n - off : blk;
        size_t bo = (size_t)off * es;
        if (nsrc == 1)
            memcpy(tmp, (const char *)srcs[0] + bo, (size_t)m * es);
        else
            pg_reduce2(tmp, (const char *)srcs[0] + bo, (const char *)srcs[1] + bo, m, dtype, op);
        for (int s = 2; s < nsrc; s++)
            pg_reduce2(tmp, tmp, (const char *)srcs[s] + bo, m, dtype, op);
        if (op == CDDP_RED_AVG)
            pg_divide(tmp, m, dtype, avg_n);
        pg_copy((char *)dst + bo, tmp, (size_t)m * es, nt);
        if (dst2)
            memcpy((char *)dst2 + bo, tmp, (size_t)m * es);
    }
}

static inline void pg_reduce_n(void *dst, const void *const *srcs, int nsrc, int64_t n,
                               int dtype, int op, int avg_n)
{
    pg_reduce_n2(dst, NULL, srcs, nsrc, n, dtype, op, avg_n, 0);
}

#endif
