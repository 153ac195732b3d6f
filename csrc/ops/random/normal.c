/* ops/random/normal.c — contiguous normal fills (torch's normal_fill): the float32 Box-Muller of
 * torch's AVX2 kernel, reproduced bit for bit, and the float64 one.
 *
 * Mirrors aten/src/ATen/native/cpu/DistributionTemplates.h normal_fill / normal_fill_AVX2:
 * all uniforms are drawn first (float32: 24-bit, float64: 53-bit), then each block of 16
 * becomes 16 normals (u1 = 1 - d[j], u2 = d[j + 8]: d[j] = r cos, d[j + 8] = r sin); a ragged
 * tail redraws 16 fresh uniforms for the last 16 slots; float16/bfloat16 go through the
 * float32 kernel block by block. Used for numel >= 16 contiguous tensors; smaller or strided
 * ones use normal_distribution<double> (ops/random/dist.c).
 */
#include "ops/random/random.h"
#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CDDP_X86_AVX2 1
#endif

static const double PI_D = 3.14159265358979323846;   /* c10::pi<double> */

/* ---- float32 normal_fill: torch's AVX2 kernel, one lane at a time ----------------------
 *
 * On x86 CPUs with AVX2 (torch's AVX2 and AVX512 builds) torch fills float32 normals with
 * normal_fill_16_AVX2, whose log and sin/cos are the Cephes single-precision polynomials of
 * avx_mathfun.h, compiled with fused multiply-adds. The scalar code below evaluates the same
 * polynomials with the same roundings (fmaf exactly where GCC fuses the intrinsics' mul+add,
 * plain float ops elsewhere: this file is built in ISO C mode, so no other contraction), which
 * reproduces torch.randn bit for bit. */

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Cephes logf: x = m * 2^e with m in [sqrt(.5), sqrt(2)), log(1 + (m-1)) by a degree-9
 * polynomial; x <= 0 gives NaN (log256_ps). */
static inline __attribute__((always_inline)) float cephes_logf(float x)
{
    int invalid = !(x > 0);
    uint32_t bits;
    float e, y, z, tmp;
    int small;
    if (x < 1.17549435e-38f)
        x = 1.17549435e-38f;                       /* no denormals */
    bits = f2u(x);
    e = (float)((int32_t)(bits >> 23) - 0x7f) + 1.0f;
    x = u2f((bits & ~0x7f800000u) | 0x3f000000u);  /* mantissa in [0.5, 1) */
    small = x < 0.707106781186547524f;
    tmp = small ? x : 0.0f;
    x = x - 1.0f;
    e = e - (small ? 1.0f : 0.0f);
    x = x + tmp;
    z = x * x;
    y = 7.0376836292E-2f;
    y = fmaf(y, x, -1.1514610310E-1f);
    y = fmaf(y, x, 1.1676998740E-1f);
    y = fmaf(y, x, -1.2420140846E-1f);
    y = fmaf(y, x, 1.4249322787E-1f);
    y = fmaf(y, x, -1.6668057665E-1f);
    y = fmaf(y, x, 2.0000714765E-1f);
    y = fmaf(y, x, -2.4999993993E-1f);
    y = fmaf(y, x, 3.3333331174E-1f);
    y = y * x;
    y = fmaf(y, z, e * -2.12194440e-4f);
    y = fmaf(z, -0.5f, y);
    x = x + y;
    x = fmaf(e, 0.693359375f, x);
    return invalid ? NAN : x;
}

/* Cephes sinf/cosf: reduce by multiples of pi/4 (3-part extended-precision pi), then one of
 * two polynomials per octant (sincos256_ps). */
static inline __attribute__((always_inline)) void cephes_sincosf(float x, float *s, float *c)
{
    uint32_t sign_sin = f2u(x) & 0x80000000u, sign_cos, swap;
    int32_t j;
    int use_cos_poly;
    float y, z, yc, ys;
    x = fabsf(x);
    j = (int32_t)(x * 1.27323954473516f);          /* 4 / pi, truncated */
    j = (j + 1) & ~1;
    y = (float)j;
    swap = (uint32_t)(j & 4) << 29;
    use_cos_poly = (j & 2) == 0;
    sign_cos = (uint32_t)(~(j - 2) & 4) << 29;
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    sign_sin ^= swap;
    z = x * x;
    yc = 2.443315711809948E-005f;
    yc = fmaf(yc, z, -1.388731625493765E-003f);
    yc = fmaf(yc, z, 4.166664568298827E-002f);
    yc = yc * z;
    yc = fmaf(yc, z, -(z * 0.5f));
    yc = yc + 1.0f;
    ys = -1.9515295891E-4f;
    ys = fmaf(ys, z, 8.3321608736E-3f);
    ys = fmaf(ys, z, -1.6666654611E-1f);
    ys = ys * z;
    ys = fmaf(ys, x, x);
    *s = u2f(f2u(use_cos_poly ? ys : yc) ^ sign_sin);
    *c = u2f(f2u(use_cos_poly ? yc : ys) ^ sign_cos);
}

/* Box-Muller on 16 uniforms: u1 = 1 - d[j], u2 = d[j + 8] (normal_fill_16_AVX2). Two
 * versions with identical results, picked at run time: AVX2 + FMA lanes, and this portable
 * one (fmaf from libm). */
static inline __attribute__((always_inline)) void normal16_body(float *d, float mean, float std)
{
    const float two_pi = (float)(2.0f * PI_D);
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - d[j], u2 = d[j + 8];
        float radius = sqrtf(-2.0f * cephes_logf(u1));
        float theta = two_pi * u2, sn, cs;
        cephes_sincosf(theta, &sn, &cs);
        d[j] = fmaf(radius * cs, std, mean);
        d[j + 8] = fmaf(radius * sn, std, mean);
    }
}

#ifdef CDDP_X86_AVX2
/* The same 8 lanes with AVX2 + FMA: operation for operation the scalar code above (and the
 * kernel torch runs), 8 values at a time. */
__attribute__((target("avx2,fma"))) static inline __m256 logf8(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OQ);
    __m256i bits, ei;
    __m256 e, y, z, small, tmp;
    x = _mm256_max_ps(x, _mm256_set1_ps(1.17549435e-38f));
    bits = _mm256_castps_si256(x);
    ei = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(0x7f));
    bits = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(~0x7f800000)),
                           _mm256_set1_epi32(0x3f000000));
    x = _mm256_castsi256_ps(bits);
    e = _mm256_add_ps(_mm256_cvtepi32_ps(ei), one);
    small = _mm256_cmp_ps(x, _mm256_set1_ps(0.707106781186547524f), _CMP_LT_OQ);
    tmp = _mm256_and_ps(small, x);
    x = _mm256_sub_ps(x, one);
    e = _mm256_sub_ps(e, _mm256_and_ps(small, one));
    x = _mm256_add_ps(x, tmp);
    z = _mm256_mul_ps(x, x);
    y = _mm256_set1_ps(7.0376836292E-2f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.1514610310E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.1676998740E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.2420140846E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.4249322787E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-1.6668057665E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(2.0000714765E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(-2.4999993993E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(3.3333331174E-1f));
    y = _mm256_mul_ps(y, x);
    y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, _mm256_set1_ps(-2.12194440e-4f)));
    y = _mm256_fmadd_ps(z, _mm256_set1_ps(-0.5f), y);
    x = _mm256_add_ps(x, y);
    x = _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), x);
    return _mm256_or_ps(x, invalid);               /* NaN where x <= 0 */
}

__attribute__((target("avx2,fma"))) static inline void sincosf8(__m256 x, __m256 *s, __m256 *c)
{
    const __m256 signmask = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256i two = _mm256_set1_epi32(2), four = _mm256_set1_epi32(4);
    __m256 sign_sin = _mm256_and_ps(x, signmask), sign_cos, y, z, yc, ys, poly;
    __m256i j;
    x = _mm256_andnot_ps(signmask, x);
    j = _mm256_cvttps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(1.27323954473516f)));
    j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
    y = _mm256_cvtepi32_ps(j);
    sign_sin = _mm256_xor_ps(sign_sin,
                             _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, four), 29)));
    poly = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(j, two), _mm256_setzero_si256()));
    sign_cos = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_andnot_si256(_mm256_sub_epi32(j, two), four), 29));
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(-0.78515625f), x);
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(-2.4187564849853515625e-4f), x);
    x = _mm256_fmadd_ps(y, _mm256_set1_ps(-3.77489497744594108e-8f), x);
    z = _mm256_mul_ps(x, x);
    yc = _mm256_set1_ps(2.443315711809948E-005f);
    yc = _mm256_fmadd_ps(yc, z, _mm256_set1_ps(-1.388731625493765E-003f));
    yc = _mm256_fmadd_ps(yc, z, _mm256_set1_ps(4.166664568298827E-002f));
    yc = _mm256_mul_ps(yc, z);
    yc = _mm256_fmadd_ps(yc, z, _mm256_xor_ps(_mm256_mul_ps(z, _mm256_set1_ps(0.5f)), signmask));
    yc = _mm256_add_ps(yc, _mm256_set1_ps(1.0f));
    ys = _mm256_set1_ps(-1.9515295891E-4f);
    ys = _mm256_fmadd_ps(ys, z, _mm256_set1_ps(8.3321608736E-3f));
    ys = _mm256_fmadd_ps(ys, z, _mm256_set1_ps(-1.6666654611E-1f));
    ys = _mm256_mul_ps(ys, z);
    ys = _mm256_fmadd_ps(ys, x, x);
    *s = _mm256_xor_ps(_mm256_blendv_ps(yc, ys, poly), sign_sin);
    *c = _mm256_xor_ps(_mm256_blendv_ps(ys, yc, poly), sign_cos);
}

__attribute__((target("avx2,fma"))) static void normal16_fma(float *d, float mean, float std)
{
    __m256 u1 = _mm256_sub_ps(_mm256_set1_ps(1.0f), _mm256_loadu_ps(d));
    __m256 u2 = _mm256_loadu_ps(d + 8);
    __m256 radius = _mm256_sqrt_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), logf8(u1)));
    __m256 theta = _mm256_mul_ps(_mm256_set1_ps((float)(2.0f * PI_D)), u2), sn, cs;
    sincosf8(theta, &sn, &cs);
    _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_mul_ps(radius, cs), _mm256_set1_ps(std),
                                        _mm256_set1_ps(mean)));
    _mm256_storeu_ps(d + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, sn), _mm256_set1_ps(std),
                                            _mm256_set1_ps(mean)));
}
#endif

static void normal16_plain(float *d, float mean, float std)
{
    normal16_body(d, mean, std);
}

static void normal16_f32(float *d, float mean, float std)
{
#ifdef CDDP_X86_AVX2
    static int have_fma = -1;
    if (have_fma < 0) {
        __builtin_cpu_init();
        have_fma = __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    }
    if (have_fma) {
        normal16_fma(d, mean, std);
        return;
    }
#endif
    normal16_plain(d, mean, std);
}

static void normal16_f64(double *d, double mean, double std)
{
    for (int j = 0; j < 8; j++) {
        const double u1 = 1 - d[j];
        const double u2 = d[j + 8];
        const double radius = sqrt(-2 * log(u1));
        const double theta = 2.0f * PI_D * u2;
        d[j] = fma(radius * cos(theta), std, mean);
        d[j + 8] = fma(radius * sin(theta), std, mean);
    }
}

/* float16 / bfloat16 (torch 2.x): each block of 16 draws its 16 float32 uniforms and goes
 * through the float32 kernel, then rounds into the tensor; a ragged tail draws 16 more for the
 * last 16 slots. (Unlike float32, uniforms are drawn block by block, so the tail's come right
 * after the last full block's.) */
static void normal_fill_reduced(GeneratorObject *g, TensorObject *t, int64_t n, float mean,
                                float std)
{
    float buf[16];
    char *d = cddp_data(t);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        for (int k = 0; k < 16; k++)
            buf[k] = cddp_uniform_f32(g);
        normal16_f32(buf, mean, std);
        cddp_narrow(t->dtype, d + 2 * i, 2, buf, 16);
    }
    if (n % 16) {
        for (int k = 0; k < 16; k++)
            buf[k] = cddp_uniform_f32(g);
        normal16_f32(buf, mean, std);
        cddp_narrow(t->dtype, d + 2 * (n - 16), 2, buf, 16);
    }
}

void cddp_normal_fill_contig(GeneratorObject *g, TensorObject *t, int64_t n, double mean,
                             double std)
{
    if (cddp_is_reduced(t->dtype)) {
        normal_fill_reduced(g, t, n, (float)mean, (float)std);
    } else if (t->dtype == CDDP_FLOAT32) {
        float *d = (float *)cddp_data(t);
        for (int64_t i = 0; i < n; i++)
            d[i] = cddp_uniform_f32(g);
        for (int64_t i = 0; i < n - 15; i += 16)
            normal16_f32(d + i, (float)mean, (float)std);
        if (n % 16) {
            d += n - 16;
            for (int i = 0; i < 16; i++)
                d[i] = cddp_uniform_f32(g);
            normal16_f32(d, (float)mean, (float)std);
        }
    } else {
        double *d = (double *)cddp_data(t);
        for (int64_t i = 0; i < n; i++)
            d[i] = cddp_uniform_f64(g);
        for (int64_t i = 0; i < n - 15; i += 16)
            normal16_f64(d + i, mean, std);
        if (n % 16) {
            d += n - 16;
            for (int i = 0; i < 16; i++)
                d[i] = cddp_uniform_f64(g);
            normal16_f64(d, mean, std);
        }
    }
}
