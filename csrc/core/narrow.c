/* core/narrow.c — blocked conversions between a storage dtype (float16, bfloat16, uint8, int8,
 * int16) and the compute dtype its kernels run in (cddp_kdt: float32 / int32), and the
 * converting copy between any two of the ten dtypes.
 *
 * Mirrors: what at::vec's convert_to_float / convert_from_float and c10's static_casts do
 * around torch's CPU kernels for reduced-precision and small integer types, and
 * at::native::copy_'s dtype conversion. The elementwise runner (ops/elementwise) calls
 * cddp_widen / cddp_narrow on blocks of a few hundred elements, so its temporaries stay in L1.
 *
 *   cddp_widen(dt, dst, src, sstride, n)    dst[i] (kdt, contiguous) = src[i] (dt, strided)
 *   cddp_narrow(dt, dst, dstride, src, n)   dst[i] (dt, strided) = src[i] (kdt, contiguous)
 *   cddp_convert(ddt, dst, ds, sdt, src, ss, n)  any dtype to any dtype, strided both sides
 * Strides are in bytes.
 */
#include "core/cddp.h"

/* CDDP_CLONES (common/clones.h): the float16 bit tricks vectorize. */
#include "common/clones.h"

/* ---- float16 with the F16C instructions --------------------------------------------------
 * x86 CPUs since 2012 convert 8 float16 values per instruction (VCVTPH2PS / VCVTPS2PH, round
 * to nearest even): an order of magnitude faster than the portable bit tricks of
 * common/half.h, and the same results for every non-NaN value (a NaN keeps the top of its
 * payload here, becomes 0x7E00 there: NaN either way; torch's AVX paths use F16C too).
 * Chosen at run time, so the build needs no -mf16c. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NARROW_F16C 1

static int have_f16c(void)
{
    static int known = -1;                /* a benign race: every thread computes the same */
    if (known < 0)
        known = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return known;
}

__attribute__((target("avx,f16c"))) static void f16_widen_f16c(float *d, const uint16_t *s,
                                                                int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (; i < n; i++)
        d[i] = _cvtsh_ss(s[i]);
}

__attribute__((target("avx,f16c"))) static void f16_narrow_f16c(uint16_t *d, const float *s,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}
#endif

/* d[i] = EXPR(v) with v the i-th source element of type ST, i < n */
#define WIDEN_LOOP(DT, ST, EXPR)                                                         \
    do {                                                                                 \
        DT *d = (DT *)dst;                                                               \
        if (ss == (int64_t)sizeof(ST)) {                                                 \
            const ST *s = (const ST *)src;                                               \
            for (int64_t i = 0; i < n; i++) { ST v = s[i]; d[i] = (EXPR); }              \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                ST v = *(const ST *)(src + i * ss);                                      \
                d[i] = (EXPR);                                                           \
            }                                                                            \
        }                                                                                \
    } while (0)

CDDP_CLONES void cddp_widen(cddp_dtype dt, void *dst, const char *src, int64_t ss, int64_t n)
{
#ifdef NARROW_F16C
    if (dt == CDDP_FLOAT16 && ss == 2 && have_f16c()) {
        f16_widen_f16c(dst, (const uint16_t *)src, n);
        return;
    }
#endif
    switch (dt) {
    case CDDP_FLOAT16: WIDEN_LOOP(float, uint16_t, cddp_f16_to_f32(v)); break;
    case CDDP_BFLOAT16: WIDEN_LOOP(float, uint16_t, cddp_bf16_to_f32(v)); break;
    case CDDP_UINT8: WIDEN_LOOP(int32_t, uint8_t, (int32_t)v); break;
    case CDDP_INT8: WIDEN_LOOP(int32_t, int8_t, (int32_t)v); break;
    case CDDP_INT16: WIDEN_LOOP(int32_t, int16_t, (int32_t)v); break;
    default: {                              /* a compute dtype: a plain (strided) copy */
        size_t sz = cddp_dtype_size[dt];
        for (int64_t i = 0; i < n; i++)
            memcpy((char *)dst + i * (int64_t)sz, src + i * ss, sz);
    }
    }
}

/* *(DT *)dst[i] = EXPR(v) with v the i-th (contiguous) compute value of type ST */
#define NARROW_LOOP(DT, ST, EXPR)                                                        \
    do {                                                                                 \
        const ST *s = (const ST *)src;                                                   \
        if (ds == (int64_t)sizeof(DT)) {                                                 \
            DT *d = (DT *)dst;                                                           \
            for (int64_t i = 0; i < n; i++) { ST v = s[i]; d[i] = (EXPR); }              \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                ST v = s[i];                                                             \
                *(DT *)(dst + i * ds) = (EXPR);                                          \
            }                                                                            \
        }                                                                                \
    } while (0)

CDDP_CLONES void cddp_narrow(cddp_dtype dt, char *dst, int64_t ds, const void *src, int64_t n)
{
#ifdef NARROW_F16C
    if (dt == CDDP_FLOAT16 && ds == 2 && have_f16c()) {
        f16_narrow_f16c((uint16_t *)dst, src, n);
        return;
    }
#endif
    switch (dt) {
    case CDDP_FLOAT16: NARROW_LOOP(uint16_t, float, cddp_f32_to_f16(v)); break;
    case CDDP_BFLOAT16: NARROW_LOOP(uint16_t, float, cddp_f32_to_bf16(v)); break;
    /* integers keep their low bits: arithmetic wraps modulo 2^8 / 2^16 as torch's */
    case CDDP_UINT8: NARROW_LOOP(uint8_t, int32_t, (uint8_t)(uint32_t)v); break;
    case CDDP_INT8: NARROW_LOOP(int8_t, int32_t, (int8_t)(uint8_t)(uint32_t)v); break;
    case CDDP_INT16: NARROW_LOOP(int16_t, int32_t, (int16_t)(uint16_t)(uint32_t)v); break;
    default: {
        size_t sz = cddp_dtype_size[dt];
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * ds, (const char *)src + i * (int64_t)sz, sz);
    }
    }
}

/* ---- any dtype to any dtype ----------------------------------------------------------- */

#define CONV_LOOP(DT, ST, EXPR)                                                          \
    do {                                                                                 \
        if (ds == (int64_t)sizeof(DT) && ss == (int64_t)sizeof(ST)) {                    \
            DT *d = (DT *)dst; const ST *s = (const ST *)src;                            \
            for (int64_t i = 0; i < n; i++) { ST v = s[i]; d[i] = (DT)(EXPR); }          \
        } else {                                                                         \
            for (int64_t i = 0; i < n; i++) {                                            \
                ST v = *(const ST *)(src + i * ss);                                      \
                *(DT *)(dst + i * ds) = (DT)(EXPR);                                      \
            }                                                                            \
        }                                                                                \
    } while (0)

/* between two compute dtypes: C's conversions (torch's static_cast), bool as v != 0 */
#define CONV_FROM(DT, TOBOOL)                                                            \
    switch (sdt) {                                                                       \
    case CDDP_FLOAT32: CONV_LOOP(DT, float, TOBOOL ? (v != 0) : v); break;               \
    case CDDP_FLOAT64: CONV_LOOP(DT, double, TOBOOL ? (v != 0) : v); break;              \
    case CDDP_INT64: CONV_LOOP(DT, int64_t, TOBOOL ? (v != 0) : v); break;               \
    case CDDP_INT32: CONV_LOOP(DT, int32_t, TOBOOL ? (v != 0) : v); break;               \
    default: CONV_LOOP(DT, uint8_t, TOBOOL ? (v != 0) : v); break;                       \
    }

CDDP_CLONES static void convert_wide(cddp_dtype ddt, char *dst, int64_t ds, cddp_dtype sdt,
                                       const char *src, int64_t ss, int64_t n)
{
    switch (ddt) {
    case CDDP_FLOAT32: CONV_FROM(float, 0); break;
    case CDDP_FLOAT64: CONV_FROM(double, 0); break;
    case CDDP_INT64: CONV_FROM(int64_t, 0); break;
    case CDDP_INT32: CONV_FROM(int32_t, 0); break;
    default: CONV_FROM(uint8_t, 1); break;
    }
}

/* A floating value (float32 / float64 compute) to a small integer dtype, through int32 as
 * x86's truncating conversion (defined for every input here). */
static void float_to_small(cddp_dtype ddt, char *dst, int64_t ds, cddp_dtype sdt,
                           const char *src, int64_t ss, int64_t n)
{
    int32_t tmp[256];
    for (int64_t b = 0; b < n; b += 256) {
        int64_t m = n - b < 256 ? n - b : 256;
        for (int64_t i = 0; i < m; i++) {
            const char *p = src + (b + i) * ss;
            tmp[i] = cddp_double_to_i32(sdt == CDDP_FLOAT32 ? (double)*(const float *)p
                                                             : *(const double *)p);
        }
        cddp_narrow(ddt, dst + b * ds, ds, tmp, m);
    }
}

#define CONV_BLOCK 256

void cddp_convert(cddp_dtype ddt, char *dst, int64_t ds, cddp_dtype sdt, const char *src,
                  int64_t ss, int64_t n)
{
    cddp_dtype kd = cddp_kdt(ddt), ks = cddp_kdt(sdt);
    /* 8-byte slots: a block of any compute dtype */
    int64_t a[CONV_BLOCK], b[CONV_BLOCK];
    if (!cddp_is_narrow(ddt) && !cddp_is_narrow(sdt)) {
        convert_wide(ddt, dst, ds, sdt, src, ss, n);
        return;
    }
    if (ddt == sdt) {                       /* data movement: every bit kept (NaN payloads) */
        size_t sz = cddp_dtype_size[ddt];
        for (int64_t i = 0; i < n; i++)
            memcpy(dst + i * ds, src + i * ss, sz);
        return;
    }
    if (ks == ddt) {                        /* float16 -> float32, uint8 -> int32 */
        if (ds == (int64_t)cddp_dtype_size[ddt]) {
            cddp_widen(sdt, dst, src, ss, n);
            return;
        }
    } else if (kd == sdt && ss == (int64_t)cddp_dtype_size[sdt]) {
        cddp_narrow(ddt, dst, ds, src, n);  /* float32 -> float16, int32 -> int8 */
        return;
    }
    for (int64_t k = 0; k < n; k += CONV_BLOCK) {
        int64_t m = n - k < CONV_BLOCK ? n - k : CONV_BLOCK;
        const char *s = src + k * ss;
        char *d = dst + k * ds;
        int64_t s_step = ss;
        /* source in its compute dtype, contiguous in a */
        if (cddp_is_narrow(sdt)) {
            cddp_widen(sdt, a, s, ss, m);
            s = (const char *)a;
            s_step = (int64_t)cddp_dtype_size[ks];
        }
        if (cddp_is_floating(ks) && kd == CDDP_INT32 && cddp_is_narrow(ddt)) {
            float_to_small(ddt, d, ds, ks, s, s_step, m);
        } else if (cddp_is_narrow(ddt)) {
            convert_wide(kd, (char *)b, (int64_t)cddp_dtype_size[kd], ks, s, s_step, m);
            cddp_narrow(ddt, d, ds, b, m);
        } else {
            convert_wide(ddt, d, ds, ks, s, s_step, m);
        }
    }
}
