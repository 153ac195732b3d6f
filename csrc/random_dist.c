/* random_dist.c — distributions over cddp.Generator, drawing exactly as torch's CPU kernels.
 *
 * Mirrors: Tensor.uniform_ / normal_ / random_ / bernoulli_, torch.rand / randn / randint /
 * randperm / rand_like / randn_like / randint_like / normal / bernoulli / multinomial.
 * Draw order follows torch's aten/src/ATen/native/cpu/DistributionTemplates.h:
 *   uniform float32: 24 low bits of one random(); float64: 53 low bits of random64()
 *   normal, contiguous and numel >= 16: "normal_fill" — all uniforms first, then Box-Muller on
 *       blocks of 16 (u1 = 1 - d[j], u2 = d[j + 8]); a ragged tail redraws the last 16
 *   normal otherwise: normal_distribution<double> (one pair per two values, the second cached
 *       in the generator)
 *   random_(from, to): (draw % range) + from, random64 when range >= 2**32 (64-bit dtypes)
 * Elements are visited in memory order (TensorIterator's order for one output).
 */
#include "random.h"
#include "creation.h"
#include <math.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CDDP_X86_AVX2 1
#endif

#define NOGIL_NUMEL 65536
static const double PI_D = 3.14159265358979323846;

/* torch's C++ dtype names, used in its NotImplementedError messages */
static const char *const cpp_name[CDDP_NDTYPES] = {"Float", "Double", "Long", "Int", "Bool"};

static inline float uniform_f32(GeneratorObject *g)
{
    return (float)(cddp_gen_random(g) & 0xFFFFFFu) * (1.0f / 16777216.0f);
}

static inline double uniform_f64(GeneratorObject *g)
{
    return (double)(cddp_gen_random64(g) & 0x1FFFFFFFFFFFFFULL) * (1.0 / 9007199254740992.0);
}

/* normal_distribution<double>(mean, std) with the generator's Box-Muller cache */
static inline double normal_f64(GeneratorObject *g, double mean, double std)
{
    double u1, u2, r, theta;
    if (g->has_next_double) {
        g->has_next_double = 0;
        return fma(g->next_double, std, mean);
    }
    u1 = uniform_f64(g);
    u2 = uniform_f64(g);
    r = sqrt(-2.0 * log1p(-u2));
    theta = 2.0 * PI_D * u1;
    g->next_double = r * sin(theta);
    g->has_next_double = 1;
    return fma(r * cos(theta), std, mean);     /* torch's val * std + mean, fused */
}

/* ---- the strided draw loop ------------------------------------------------------------ */

enum { D_UNIFORM, D_NORMAL, D_FROM_TO, D_FULL64, D_DEFAULT, D_BERNOULLI, D_EXPONENTIAL };

typedef struct {
    GeneratorObject *g;
    int kind;
    cddp_dtype dt;
    double a, b;               /* uniform from/to, normal mean/std, bernoulli p, lambda */
    uint64_t range;
    int64_t base;
} draw_ctx;

static inline void store_i64(cddp_dtype dt, char *p, int64_t v)
{
    switch (dt) {
    case CDDP_FLOAT32: *(float *)p = (float)v; break;
    case CDDP_FLOAT64: *(double *)p = (double)v; break;
    case CDDP_INT64: *(int64_t *)p = v; break;
    case CDDP_INT32: *(int32_t *)p = (int32_t)v; break;
    default: *(uint8_t *)p = v != 0; break;
    }
}

static void draw_loop(char **ptrs, const int64_t *strides, int64_t n, void *vctx)
{
    draw_ctx *c = vctx;
    GeneratorObject *g = c->g;
    char *p = ptrs[0];
    int64_t s = strides[0];
    int is64 = c->dt == CDDP_FLOAT64 || c->dt == CDDP_INT64;
    for (int64_t i = 0; i < n; i++, p += s) {
        switch (c->kind) {
        case D_UNIFORM:
            /* torch's x * (to - from) + from is compiled to a fused multiply-add */
            if (c->dt == CDDP_FLOAT32) {
                float from = (float)c->a, to = (float)c->b;
                *(float *)p = fmaf(uniform_f32(g), to - from, from);
            } else {
                *(double *)p = fma(uniform_f64(g), c->b - c->a, c->a);
            }
            break;
        case D_NORMAL: {
            double v = normal_f64(g, c->a, c->b);
            if (c->dt == CDDP_FLOAT32) *(float *)p = (float)v; else *(double *)p = v;
            break;
        }
        case D_FROM_TO: {
            uint64_t r = (c->range >= (1ULL << 32) && c->dt != CDDP_INT32 && c->dt != CDDP_BOOL)
                             ? cddp_gen_random64(g) : cddp_gen_random(g);
            store_i64(c->dt, p, (int64_t)(r % c->range + (uint64_t)c->base));
            break;
        }
        case D_FULL64:
            store_i64(c->dt, p, (int64_t)cddp_gen_random64(g));
            break;
        case D_DEFAULT: {
            uint64_t r = is64 ? cddp_gen_random64(g) : cddp_gen_random(g);
            switch (c->dt) {
            case CDDP_BOOL: *(uint8_t *)p = (uint8_t)(r & 1); break;
            case CDDP_INT64: *(int64_t *)p = (int64_t)(r % (1ULL << 63)); break;
            case CDDP_INT32: *(int32_t *)p = (int32_t)(r % (1ULL << 31)); break;
            case CDDP_FLOAT32: *(float *)p = (float)(r % ((1ULL << 24) + 1)); break;
            default: *(double *)p = (double)(r % ((1ULL << 53) + 1)); break;
            }
            break;
        }
        case D_BERNOULLI:
            store_i64(c->dt, p, uniform_f64(g) < c->a);
            break;
        default: /* D_EXPONENTIAL: -1/lambda * log(1 - u), not torch's MKL stream */
        {
            double v = -1.0 / c->a * log(1.0 - uniform_f64(g));
            if (c->dt == CDDP_FLOAT32) *(float *)p = (float)v; else *(double *)p = v;
            break;
        }
        }
    }
}

/* Dims of t reordered outermost-largest-stride first, so a C-order walk is a memory-order
 * walk. -1 (RuntimeError) when two elements share memory (a 0 stride on a dim > 1). */
static int memory_order(TensorObject *t, int64_t *shape, int64_t (*bst)[CDDP_MAX_DIMS])
{
    int perm[CDDP_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] > 1 && t->strides[d] == 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "unsupported operation: more than one element of the written-to "
                            "tensor refers to a single memory location. Please clone() the "
                            "tensor before performing the operation.");
            return -1;
        }
        perm[d] = d;
    }
    for (int i = 1; i < t->ndim; i++) {           /* stable insertion sort, stride desc */
        int k = perm[i], j = i - 1;
        while (j >= 0 && t->strides[perm[j]] < t->strides[k]) {
            perm[j + 1] = perm[j];
            j--;
        }
        perm[j + 1] = k;
    }
    for (int d = 0; d < t->ndim; d++) {
        shape[d] = t->shape[perm[d]];
        bst[0][d] = t->strides[perm[d]] * (int64_t)cddp_dtype_size[t->dtype];
    }
    return 0;
}

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

static void normal_fill(GeneratorObject *g, TensorObject *t, int64_t n, double mean, double std)
{
    if (t->dtype == CDDP_FLOAT32) {
        float *d = (float *)cddp_data(t);
        for (int64_t i = 0; i < n; i++)
            d[i] = uniform_f32(g);
        for (int64_t i = 0; i < n - 15; i += 16)
            normal16_f32(d + i, (float)mean, (float)std);
        if (n % 16) {
            d += n - 16;
            for (int i = 0; i < 16; i++)
                d[i] = uniform_f32(g);
            normal16_f32(d, (float)mean, (float)std);
        }
    } else {
        double *d = (double *)cddp_data(t);
        for (int64_t i = 0; i < n; i++)
            d[i] = uniform_f64(g);
        for (int64_t i = 0; i < n - 15; i += 16)
            normal16_f64(d + i, mean, std);
        if (n % 16) {
            d += n - 16;
            for (int i = 0; i < 16; i++)
                d[i] = uniform_f64(g);
            normal16_f64(d, mean, std);
        }
    }
}

/* Draw every element of t from c (t's layout any; c->g locked here). 0 / -1. */
static int draw_into(TensorObject *t, draw_ctx *c)
{
    int64_t shape[CDDP_MAX_DIMS], bst[1][CDDP_MAX_DIMS];
    char *ptr = cddp_data(t);
    int64_t n = cddp_numel(t);
    int fast_normal = c->kind == D_NORMAL && n >= 16 && cddp_is_contiguous(t);
    GeneratorObject *g = c->g;
    if (n == 0)
        return 0;
    if (!fast_normal && memory_order(t, shape, bst) < 0)
        return -1;
    Py_INCREF(g);
    if (n >= NOGIL_NUMEL) {
        Py_BEGIN_ALLOW_THREADS
        cddp_gen_acquire(g, 1);
        if (fast_normal)
            normal_fill(g, t, n, c->a, c->b);
        else
            cddp_iterate(1, t->ndim, shape, &ptr, (const int64_t (*)[CDDP_MAX_DIMS])bst,
                         draw_loop, c);
        cddp_gen_release(g);
        Py_END_ALLOW_THREADS
    } else {
        cddp_gen_acquire(g, 0);
        if (fast_normal)
            normal_fill(g, t, n, c->a, c->b);
        else
            cddp_iterate(1, t->ndim, shape, &ptr, (const int64_t (*)[CDDP_MAX_DIMS])bst,
                         draw_loop, c);
        cddp_gen_release(g);
    }
    Py_DECREF(g);
    return 0;
}

/* ---- argument checks shared by the in-place methods and the factories ------------------ */

static int check_floating(cddp_dtype dt, const char *kernel)
{
    if (cddp_is_floating(dt))
        return 0;
    PyErr_Format(PyExc_NotImplementedError, "\"%s\" not implemented for '%s'", kernel,
                 cpp_name[dt]);
    return -1;
}

static int setup_uniform(draw_ctx *c, TensorObject *t, double from, double to)
{
    if (check_floating(t->dtype, "check_uniform_bounds") < 0)
        return -1;
    if (!(from <= to)) {
        char bf[64], bt[64];
        PyOS_snprintf(bf, sizeof bf, "%g", from);
        PyOS_snprintf(bt, sizeof bt, "%g", to);
        PyErr_Format(PyExc_RuntimeError,
                     "uniform_ expects to return a [from, to) range, but found from=%s > to=%s",
                     bf, bt);
        return -1;
    }
    c->kind = D_UNIFORM;
    c->dt = t->dtype;
    c->a = from;
    c->b = to;
    return 0;
}

static int setup_normal(draw_ctx *c, TensorObject *t, double mean, double std)
{
    if (check_floating(t->dtype, "normal_kernel_cpu") < 0)
        return -1;
    if (!(std >= 0.0)) {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%g", std);
        PyErr_Format(PyExc_RuntimeError, "normal expects std >= 0.0, but found std %s", buf);
        return -1;
    }
    c->kind = D_NORMAL;
    c->dt = t->dtype;
    c->a = mean;
    c->b = std;
    return 0;
}

/* torch's check_from_to_in_range + "from < to" for random_(from, to) */
static int setup_from_to(draw_ctx *c, TensorObject *t, int64_t from, int64_t to)
{
    static const char *lname[CDDP_NDTYPES] = {"float", "double", "long", "int", "bool"};
    int64_t lo, hi;
    if (from >= to) {
        PyErr_Format(PyExc_RuntimeError,
                     "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                     (long long)from, (long long)to);
        return -1;
    }
    switch (t->dtype) {
    case CDDP_FLOAT32: lo = -(1LL << 24); hi = 1LL << 24; break;
    case CDDP_FLOAT64: lo = -(1LL << 53); hi = 1LL << 53; break;
    case CDDP_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
    case CDDP_BOOL: lo = 0; hi = 1; break;
    default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    if (from < lo || from > hi || to - 1 < lo || to - 1 > hi) {
        const char *which = (from < lo || from > hi) ? "from" : "to - 1";
        if (cddp_is_floating(t->dtype)) {
            /* torch only warns here (precision), then draws anyway */
            if (PyErr_WarnFormat(PyExc_UserWarning, 1,
                                 "%s is out of bounds [-(2^%d), 2^%d]. Due to precision "
                                 "limitations %s can support discrete uniform distribution "
                                 "only within this range.", which,
                                 t->dtype == CDDP_FLOAT32 ? 24 : 53,
                                 t->dtype == CDDP_FLOAT32 ? 24 : 53, lname[t->dtype]) < 0)
                return -1;
        } else {
            PyErr_Format(PyExc_RuntimeError, "%s is out of bounds for %s", which,
                         lname[t->dtype]);
            return -1;
        }
    }
    c->kind = D_FROM_TO;
    c->dt = t->dtype;
    c->range = (uint64_t)to - (uint64_t)from;
    c->base = from;
    return 0;
}

/* ---- in-place methods ----------------------------------------------------------------- */

/* In-place random fills: leaf check, draw, version bump, and on a non-leaf a history whose
 * gradient is zero (torch's UniformBackward0 / NormalBackward0 ...). */
static PyObject *finish_inplace(TensorObject *t, draw_ctx *c, const char *node_name)
{
    if (cddp_check_inplace(t) < 0 || draw_into(t, c) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_inplace_zero_history(t, node_name) < 0)
        return NULL;
    return Py_NewRef(t);
}

/* positional/keyword pair -> double (default d); TypeError naming the argument */
static int arg_double(PyObject *o, double d, double *out, const char *fname, const char *arg)
{
    if (!o) {
        *out = d;
        return 0;
    }
    if (cddp_tensor_check(o) || PyBool_Check(o) || !PyNumber_Check(o) || PyComplex_Check(o)) {
        if (!(cddp_tensor_check(o) && cddp_numel((TensorObject *)o) == 1)) {
            PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be float, not %s", fname, arg,
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    }
    *out = PyFloat_AsDouble(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int arg_int64(PyObject *o, int64_t *out, const char *fname, const char *arg)
{
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %s", fname, arg,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    *out = PyLong_AsLongLong(i);
    Py_DECREF(i);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Two optional positional-or-keyword arguments then keyword-only `generator`. */
static int parse_two(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kw,
                     const char *const *names, PyObject **v)
{
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 2 positional arguments (%zd given)",
                     fname, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (v[i] != args[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[i]);
            return -1;
        }
    }
    return 0;
}

PyObject *cddp_tensor_uniform_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    static const char *const names[] = {"from", "to", "generator", "a", "b", NULL};
    PyObject *v[5] = {NULL, NULL, NULL, NULL, NULL};
    double from, to;
    draw_ctx c = {0};
    if (parse_two("uniform_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (arg_double(v[0] ? v[0] : v[3], 0.0, &from, "uniform_", "from") < 0 ||
        arg_double(v[1] ? v[1] : v[4], 1.0, &to, "uniform_", "to") < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "uniform_")) ||
        setup_uniform(&c, (TensorObject *)self, from, to) < 0)
        return NULL;
    return finish_inplace((TensorObject *)self, &c, "UniformBackward0");
}

PyObject *cddp_tensor_normal_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"mean", "std", "generator", NULL};
    PyObject *v[3] = {NULL, NULL, NULL};
    double mean, std;
    draw_ctx c = {0};
    if (parse_two("normal_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (arg_double(v[0], 0.0, &mean, "normal_", "mean") < 0 ||
        arg_double(v[1], 1.0, &std, "normal_", "std") < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "normal_")) ||
        setup_normal(&c, (TensorObject *)self, mean, std) < 0)
        return NULL;
    return finish_inplace((TensorObject *)self, &c, "NormalBackward0");
}

/* random_(), random_(to), random_(from, to) — torch's three overloads */
PyObject *cddp_tensor_random_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"from", "to", "generator", NULL};
    PyObject *v[3] = {NULL, NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    draw_ctx c = {0};
    int64_t from = 0, to = 0;
    if (parse_two("random_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!(c.g = cddp_generator_get(v[2], "random_")))
        return NULL;
    if (nargs == 1 && !v[1]) {                 /* random_(to) */
        v[1] = v[0];
        v[0] = NULL;
    }
    if (v[0] && arg_int64(v[0], &from, "random_", "from") < 0)
        return NULL;
    if (v[1] && v[1] != Py_None && arg_int64(v[1], &to, "random_", "to") < 0)
        return NULL;
    if (v[1] && v[1] != Py_None) {
        if (setup_from_to(&c, t, from, to) < 0)
            return NULL;
    } else if (v[0] && from == INT64_MIN) {    /* the full 64-bit range */
        if (t->dtype == CDDP_INT32 || t->dtype == CDDP_BOOL) {
            PyErr_SetString(PyExc_RuntimeError, "from is out of bounds for int");
            return NULL;
        }
        c.kind = D_FULL64;
        c.dt = t->dtype;
    } else if (v[0]) {                         /* random_(from, None): [from, max] */
        int64_t hi = t->dtype == CDDP_FLOAT32 ? (1LL << 24) : t->dtype == CDDP_FLOAT64 ?
                     (1LL << 53) : t->dtype == CDDP_INT32 ? INT32_MAX :
                     t->dtype == CDDP_BOOL ? 1 : INT64_MAX;
        if (from > hi) {
            PyErr_Format(PyExc_RuntimeError, "random_ expects 'from' casted to dtype to be "
                         "less than or equal to 'to_inc' casted to dtype, but got from=%lld > "
                         "to_inc=%lld", (long long)from, (long long)hi);
            return NULL;
        }
        c.kind = D_FROM_TO;
        c.dt = t->dtype;
        c.range = (uint64_t)hi - (uint64_t)from + 1;
        c.base = from;
    } else {
        c.kind = D_DEFAULT;
        c.dt = t->dtype;
    }
    return finish_inplace(t, &c, "RandomBackward0");
}

/* Every element of t = (u < p) with u a float64 uniform; p a number, or a tensor of
 * probabilities broadcast to t. No autograd, no version bump. 0 / -1. */
int cddp_random_bernoulli_fill(TensorObject *t, PyObject *p_obj, GeneratorObject *g)
{
    draw_ctx c = {0};
    double p = 0.5;
    c.g = g;
    if (p_obj && cddp_tensor_check(p_obj)) {
        /* per-element probabilities: bernoulli_distribution<float> for float32 p (24-bit
         * uniforms), <double> for float64 p; uniforms drawn in t's (contiguous) order */
        TensorObject *pt = (TensorObject *)p_obj, *u = NULL, *pb = NULL, *pd = NULL, *ud = NULL;
        int64_t pst[CDDP_MAX_DIMS], n = cddp_numel(t);
        int rc = -1;
        if (!cddp_is_floating(pt->dtype)) {
            PyErr_Format(PyExc_NotImplementedError,
                         "\"bernoulli_tensor_cpu_p_\" not implemented for '%s'",
                         cpp_name[pt->dtype]);
            return -1;
        }
        if (cddp_broadcast_strides(pt, t->ndim, t->shape, pst) < 0)
            return -1;
        if (!(pb = cddp_tensor_alias(pt, t->ndim, t->shape, pst, pt->offset)) ||
            !(pd = cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0)) ||
            cddp_copy_into(pd, pb) < 0)
            goto pdone;
        const double *pv = (const double *)cddp_data(pd);
        for (int64_t i = 0; i < n; i++) {
            if (!(pv[i] >= 0 && pv[i] <= 1)) {
                PyErr_SetString(PyExc_RuntimeError,
                                "Expected p_in >= 0 && p_in <= 1 to be true, but got false.");
                goto pdone;
            }
        }
        c.kind = D_UNIFORM;
        c.dt = pt->dtype;
        c.a = 0.0;
        c.b = 1.0;
        if (!(u = cddp_tensor_new(pt->dtype, t->ndim, t->shape, 0)) || draw_into(u, &c) < 0 ||
            !(ud = cddp_tensor_cast_raw(u, CDDP_FLOAT64)))
            goto pdone;
        {
            double *uv = (double *)cddp_data(ud);     /* exact: float32 widens losslessly */
            if (ud == u) {
                Py_SETREF(ud, cddp_tensor_new(CDDP_FLOAT64, t->ndim, t->shape, 0));
                if (!ud)
                    goto pdone;
                memcpy(cddp_data(ud), cddp_data(u), (size_t)n * sizeof(double));
                uv = (double *)cddp_data(ud);
            }
            for (int64_t i = 0; i < n; i++)
                uv[i] = uv[i] < pv[i];
        }
        rc = cddp_copy_into(t, ud);
pdone:
        Py_XDECREF(pb);
        Py_XDECREF(pd);
        Py_XDECREF(u);
        Py_XDECREF(ud);
        return rc;
    }
    if (p_obj && arg_double(p_obj, 0.5, &p, "bernoulli", "p") < 0)
        return -1;
    if (!(p >= 0 && p <= 1)) {
        char buf[64];
        PyOS_snprintf(buf, sizeof buf, "%g", p);
        PyErr_Format(PyExc_RuntimeError, "bernoulli_ expects p to be in [0, 1], but got p=%s",
                     buf);
        return -1;
    }
    c.kind = D_BERNOULLI;
    c.dt = t->dtype;
    c.a = p;
    return draw_into(t, &c);
}

/* bernoulli_(p=0.5, *, generator=None): p a float or a tensor of probabilities */
PyObject *cddp_tensor_bernoulli_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kw)
{
    static const char *const names[] = {"p", "generator", NULL};
    PyObject *v[2] = {NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    GeneratorObject *g;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "bernoulli_() takes at most 1 positional argument");
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("bernoulli_", args, nargs, kw, names, v) < 0 ||
        !(g = cddp_generator_get(v[1], "bernoulli_")) || cddp_check_inplace(t) < 0 ||
        cddp_random_bernoulli_fill(t, v[0], g) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_inplace_zero_history(t, "BernoulliBackward0") < 0)
        return NULL;
    return Py_NewRef(self);
}

PyObject *cddp_tensor_exponential_(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kw)
{
    static const char *const names[] = {"lambd", "generator", NULL};
    PyObject *v[2] = {NULL, NULL};
    TensorObject *t = (TensorObject *)self;
    draw_ctx c = {0};
    double lambd;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "exponential_() takes at most 1 positional argument");
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("exponential_", args, nargs, kw, names, v) < 0 ||
        arg_double(v[0], 1.0, &lambd, "exponential_", "lambd") < 0 ||
        !(c.g = cddp_generator_get(v[1], "exponential_")) ||
        check_floating(t->dtype, "exponential_cpu") < 0)
        return NULL;
    if (!(lambd > 0)) {
        PyErr_Format(PyExc_RuntimeError,
                     "exponential_ expects lambda > 0.0, but found lambda=%R", v[0]);
        return NULL;
    }
    c.kind = D_EXPONENTIAL;
    c.dt = t->dtype;
    c.a = lambd;
    return finish_inplace(t, &c, "ExponentialBackward0");
}

/* ---- fills for other files ------------------------------------------------------------ */

int cddp_random_uniform_fill(TensorObject *t, GeneratorObject *g, double from, double to)
{
    draw_ctx c = {0};
    c.g = g;
    if (setup_uniform(&c, t, from, to) < 0)
        return -1;
    return draw_into(t, &c);
}

int cddp_random_normal_fill(TensorObject *t, GeneratorObject *g, double mean, double std)
{
    draw_ctx c = {0};
    c.g = g;
    if (setup_normal(&c, t, mean, std) < 0)
        return -1;
    return draw_into(t, &c);
}

int cddp_random_exponential_fill(TensorObject *t, GeneratorObject *g, double lambd)
{
    draw_ctx c = {0};
    c.g = g;
    c.kind = D_EXPONENTIAL;
    c.dt = t->dtype;
    c.a = lambd;
    if (check_floating(t->dtype, "exponential_cpu") < 0)
        return -1;
    return draw_into(t, &c);
}

/* ---- factories ------------------------------------------------------------------------ */

/* Common tail of the factories: out-of-range dtype check, allocation, draw, requires_grad.
 * shape given; dtype resolved by the caller. */
static PyObject *make_random(int ndim, const int64_t *shape, cddp_dtype dt, draw_ctx *c,
                             int requires_grad, const char *fname)
{
    TensorObject *t;
    if (cddp_check_sizes(fname, ndim, shape) < 0 || !(t = cddp_tensor_new(dt, ndim, shape, 0)))
        return NULL;
    if (draw_into(t, c) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return cddp_factory_finish(t, requires_grad);
}

/* rand / randn: (*size, generator=None, dtype=None, device=None, requires_grad=False, ...) */
static PyObject *rand_common(const char *fname, int normal, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"size", "generator", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[7] = {NULL};
    int ndim, has_dt, rg;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    draw_ctx c = {0};
    TensorObject probe;
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0 ||
        cddp_parse_size(fname, args, nargs, v[0], &ndim, shape) < 0 ||
        !(c.g = cddp_generator_get(v[1], fname)) ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 || cddp_parse_device_opt(v[3]) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = cddp_state()->default_dtype;
    probe.dtype = dt;
    if (normal ? setup_normal(&c, &probe, 0.0, 1.0) < 0 : setup_uniform(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    return make_random(ndim, shape, dt, &c, rg, fname);
}

PyObject *cddp_py_rand(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return rand_common("rand", 0, args, nargs, kw);
}

PyObject *cddp_py_randn(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return rand_common("randn", 1, args, nargs, kw);
}

/* randint(high, size) / randint(low, high, size); dtype defaults to int64 */
PyObject *cddp_py_randint(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"low", "high", "size", "generator", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory", NULL};
    PyObject *v[9] = {NULL};
    int ndim, has_dt, rg;
    int64_t shape[CDDP_MAX_DIMS], low = 0, high;
    cddp_dtype dt;
    draw_ctx c = {0};
    TensorObject probe;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "randint() takes at most 3 positional arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (nargs == 3) {
        v[0] = args[0]; v[1] = args[1]; v[2] = args[2];
    } else if (nargs == 2) {
        v[1] = args[0]; v[2] = args[1];
    } else if (nargs == 1) {
        v[1] = args[0];
    }
    if (cddp_kw_parse("randint", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[1] || !v[2]) {
        PyErr_SetString(PyExc_TypeError,
                        "randint() missing required arguments: expected randint(high, size) or "
                        "randint(low, high, size)");
        return NULL;
    }
    if ((v[0] && arg_int64(v[0], &low, "randint", "low") < 0) ||
        arg_int64(v[1], &high, "randint", "high") < 0)
        return NULL;
    if (PyLong_Check(v[2]) || PyIndex_Check(v[2])) {
        PyErr_Format(PyExc_TypeError,
                     "randint(): argument 'size' must be tuple of ints, not %s",
                     Py_TYPE(v[2])->tp_name);
        return NULL;
    }
    if (cddp_parse_size_obj("randint", v[2], &ndim, shape) < 0 ||
        !(c.g = cddp_generator_get(v[3], "randint")) ||
        cddp_parse_dtype_opt(v[4], &has_dt, &dt) < 0 || cddp_parse_device_opt(v[5]) < 0 ||
        cddp_parse_flag(v[6], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = CDDP_INT64;
    probe.dtype = dt;
    if (setup_from_to(&c, &probe, low, high) < 0)
        return NULL;
    return make_random(ndim, shape, dt, &c, rg, "randint");
}

PyObject *cddp_py_randperm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"n", "generator", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[7] = {NULL};
    int has_dt, rg;
    int64_t n, shape[1];
    cddp_dtype dt;
    TensorObject *t = NULL, *tmp;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "randperm() takes 1 positional argument (%zd given)", nargs);
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("randperm", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "randperm() missing required argument 'n'");
        return NULL;
    }
    if (arg_int64(v[0], &n, "randperm", "n") < 0 || !cddp_generator_get(v[1], "randperm") ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 || cddp_parse_device_opt(v[3]) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = CDDP_INT64;
    if (n < 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Trying to create tensor with negative dimension %lld: [%lld]",
                     (long long)n, (long long)n);
        return NULL;
    }
    if ((dt == CDDP_FLOAT32 && n > (1LL << 24) + 1) || (dt == CDDP_FLOAT64 && n > (1LL << 53) + 1) ||
        (dt == CDDP_INT32 && n > (int64_t)INT32_MAX + 1) || (dt == CDDP_BOOL && n > 2)) {
        static const char *pname[CDDP_NDTYPES] = {"2^24+1 for Float", "2^53+1 for Double", "",
                                                  "2147483648 for Int", "2 for Bool"};
        PyErr_Format(PyExc_RuntimeError, "n cannot be greater than %s type.", pname[dt]);
        return NULL;
    }
    shape[0] = n;
    if (!(t = cddp_tensor_new(CDDP_INT64, 1, shape, 0)))
        return NULL;
    if (cddp_randperm_fill(v[1], n, (int64_t *)cddp_data(t)) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    if (dt != CDDP_INT64) {
        tmp = cddp_tensor_cast_raw(t, dt);
        Py_DECREF(t);
        if (!(t = tmp))
            return NULL;
    }
    return cddp_factory_finish(t, rg);
}

/* rand_like / randn_like / randint_like(input, [low,] high) */
static PyObject *like_common(const char *fname, int kind, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"input", "low", "high", "generator", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory",
                                        "memory_format", NULL};
    PyObject *v[10] = {NULL};
    int has_dt, rg;
    cddp_dtype dt;
    draw_ctx c = {0};
    TensorObject *in, probe;
    int64_t low = 0, high = 0;
    Py_ssize_t maxpos = kind == 2 ? 3 : 1;
    if (nargs > maxpos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional arguments (%zd given)",
                     fname, maxpos, nargs);
        return NULL;
    }
    if (nargs >= 1)
        v[0] = args[0];
    if (nargs == 2)
        v[2] = args[1];
    if (nargs == 3) {
        v[1] = args[1];
        v[2] = args[2];
    }
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", fname,
                     v[0] ? Py_TYPE(v[0])->tp_name : "nothing");
        return NULL;
    }
    in = (TensorObject *)v[0];
    if (!(c.g = cddp_generator_get(v[3], fname)) ||
        cddp_parse_dtype_opt(v[4], &has_dt, &dt) < 0 || cddp_parse_device_opt(v[5]) < 0 ||
        cddp_parse_flag(v[6], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = in->dtype;
    probe.dtype = dt;
    if (kind == 0 && setup_uniform(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    if (kind == 1 && setup_normal(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    if (kind == 2) {
        if (!v[2]) {
            PyErr_SetString(PyExc_TypeError, "randint_like() missing required argument 'high'");
            return NULL;
        }
        if ((v[1] && arg_int64(v[1], &low, fname, "low") < 0) ||
            arg_int64(v[2], &high, fname, "high") < 0 || setup_from_to(&c, &probe, low, high) < 0)
            return NULL;
    }
    return make_random(in->ndim, in->shape, dt, &c, rg, fname);
}

PyObject *cddp_py_rand_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return like_common("rand_like", 0, args, nargs, kw);
}

PyObject *cddp_py_randn_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return like_common("randn_like", 1, args, nargs, kw);
}

PyObject *cddp_py_randint_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    return like_common("randint_like", 2, args, nargs, kw);
}
