/* amp/grad_scaler.c — GradScaler's kernels (torch.amp.GradScaler's two ATen ops,
 * aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp).
 *
 *   _amp_foreach_non_finite_check_and_unscale_(grads: list[Tensor], found_inf: Tensor (1,),
 *                                              inv_scale: Tensor (1,))
 *       one pass over all grads (float32/float64/float16/bfloat16, any mix): every element
 *       g = g * inv_scale (float16/bfloat16: in float32, rounded back); found_inf = 1.0 when any
 *       element was inf/NaN before scaling (else left as it was). The pass runs without the GIL.
 *   _amp_update_scale_(scale: float32 (1,), growth_tracker: int32 (1,), found_inf: float32 (1,),
 *                      growth_factor, backoff_factor, growth_interval) -> scale
 *       found_inf != 0: scale *= backoff, tracker = 0; else tracker + 1 == interval: scale *=
 *       growth (kept only if finite), tracker = 0; else tracker += 1. Float arithmetic as torch.
 */
#include "amp/amp.h"
#include "module.h"
#include <math.h>
#include <string.h>

#define MAX_GRADS_ON_STACK 64

/* Compiled for AVX-512, AVX2 and the baseline, picked at load time (common/clones.h). */
#include "common/clones.h"

#define HALF_BLOCK 512

/* Each kernel: scale n elements in place, return 1 when any input element was inf/NaN. The
 * non-finite test is on the exponent bits (all ones), an integer OR the compiler vectorises. */
CDDP_CLONES_AVX512 static int unscale_f32(float *p, int64_t n, float s)
{
    uint32_t top = 0;                   /* the largest exponent field seen: all ones = bad */
    for (int64_t i = 0; i < n; i++) {
        float v = p[i];
        uint32_t b;
        memcpy(&b, &v, 4);                          /* one load: the bits and the value */
        b &= 0x7f800000u;
        top = b > top ? b : top;
        p[i] = v * s;
    }
    return top == 0x7f800000u;
}

CDDP_CLONES_AVX512 static int unscale_f64(double *p, int64_t n, float s)
{
    const uint64_t *u = (const uint64_t *)p;
    uint64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bad |= (uint64_t)((u[i] & 0x7ff0000000000000ull) == 0x7ff0000000000000ull);
        p[i] = p[i] * (double)s;
    }
    return bad != 0;
}

CDDP_CLONES_AVX512 static uint32_t half_bad(const uint16_t *p, int64_t n, uint16_t mask)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= (p[i] & mask) == mask;
    return bad;
}

CDDP_CLONES_AVX512 static void scale_block(float *w, int64_t n, float s)
{
    for (int64_t i = 0; i < n; i++)
        w[i] *= s;
}

/* bfloat16 in one fused pass: widen (bits << 16), multiply, round to nearest even, NaN ->
 * 0x7FC0 (common/half.h's cddp_f32_to_bf16, written branch-free so it vectorises). */
CDDP_CLONES_AVX512 static int unscale_bf16_portable(uint16_t *p, int64_t n, float s)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)p[i] << 16, r;
        float v;
        bad |= (p[i] & 0x7f80u) == 0x7f80u;
        memcpy(&v, &u, 4);
        v *= s;
        memcpy(&u, &v, 4);
        r = (u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16;
        p[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7FC0u : r);
    }
    return bad != 0;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* The same pass, 8 elements per step with AVX2 (the compiler's version packs 32 -> 16 bits
 * poorly): identical results, element for element. */
__attribute__((target("avx2"))) static int unscale_bf16_avx2(uint16_t *p, int64_t n, float s)
{
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i expm = _mm256_set1_epi32(0x7f800000), one = _mm256_set1_epi32(1);
    const __m256i bias = _mm256_set1_epi32(0x7fff), absm = _mm256_set1_epi32(0x7fffffff);
    const __m256i qnan = _mm256_set1_epi32(0x7fc0);
    __m256i bad = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + i))), 16);
        bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, expm), expm));
        __m256i w = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(u), vs));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(w, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(w, _mm256_add_epi32(lsb, bias)), 16);
        r = _mm256_blendv_epi8(r, qnan, _mm256_cmpgt_epi32(_mm256_and_si256(w, absm), expm));
        _mm_storeu_si128((__m128i *)(p + i), _mm_packus_epi32(_mm256_castsi256_si128(r),
                                                              _mm256_extracti128_si256(r, 1)));
    }
    int tail = unscale_bf16_portable(p + i, n - i, s);     /* always run: it scales too */
    return tail || !_mm256_testz_si256(bad, bad);
}
#endif

static int unscale_bf16(uint16_t *p, int64_t n, float s)
{
#if defined(__x86_64__) && defined(__GNUC__)
    static int avx2 = -1;                 /* a benign race: every thread computes the same */
    if (avx2 < 0)
        avx2 = __builtin_cpu_supports("avx2");
    if (avx2)
        return unscale_bf16_avx2(p, n, s);
#endif
    return unscale_bf16_portable(p, n, s);
}

/* float16 by blocks: widen to float32 (core/narrow.c: F16C / AVX2), multiply, narrow
 * back rounding to nearest even — torch's static_cast<scalar_t>(float(v) * inv_scale). */
static int unscale_half(uint16_t *p, int64_t n, float s, cddp_dtype dt)
{
    float w[HALF_BLOCK];
    uint32_t bad = 0;
    uint16_t mask = 0x7c00u;
    for (int64_t i = 0; i < n; i += HALF_BLOCK) {
        int64_t k = n - i < HALF_BLOCK ? n - i : HALF_BLOCK;
        bad |= half_bad(p + i, k, mask);
        cddp_widen(dt, w, (const char *)(p + i), 2, k);
        scale_block(w, k, s);
        cddp_narrow(dt, (char *)(p + i), 2, w, k);
    }
    return bad != 0;
}

static int unscale_one(TensorObject *g, float s)
{
    void *p = cddp_data(g);
    int64_t n = cddp_numel(g);
    switch (g->dtype) {
    case CDDP_FLOAT32: return unscale_f32(p, n, s);
    case CDDP_FLOAT64: return unscale_f64(p, n, s);
    case CDDP_BFLOAT16: return unscale_bf16(p, n, s);
    default:           return unscale_half(p, n, s, g->dtype);
    }
}

/* t is a one-element float32 (or int32 when want_int) tensor; else RuntimeError "<msg>". */
static int one_element(PyObject *o, int want_int, const char *msg)
{
    TensorObject *t = (TensorObject *)o;
    if (!cddp_tensor_check(o) || cddp_numel(t) != 1 ||
        t->dtype != (want_int ? CDDP_INT32 : CDDP_FLOAT32)) {
        PyErr_SetString(PyExc_RuntimeError, msg);
        return -1;
    }
    return 0;
}

/* The pass over gs[0..n): contiguous grads in place, the others through a contiguous copy
 * (work[i]) written back afterwards. */
static int unscale_all(TensorObject **gs, TensorObject **work, Py_ssize_t n, float s)
{
    int bad = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (cddp_is_contiguous(gs[i]))
            continue;
        if (!(work[i] = cddp_tensor_new(gs[i]->dtype, gs[i]->ndim, gs[i]->shape, 0)) ||
            cddp_copy_into(work[i], gs[i]) < 0)
            return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        bad |= unscale_one(work[i] ? work[i] : gs[i], s);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        if (work[i] && cddp_copy_into(gs[i], work[i]) < 0)
            return -1;
        else if (!work[i])
            cddp_bump_version(gs[i]);                /* an in-place write, as copy_into's */
    return bad;
}

static PyObject *py_unscale(PyObject *m, PyObject *args)
{
    PyObject *grads, *found, *inv, *seq = NULL, *res = NULL;
    TensorObject *stack_g[MAX_GRADS_ON_STACK], *stack_w[MAX_GRADS_ON_STACK];
    TensorObject **gs = stack_g, **work = stack_w;
    Py_ssize_t n = 0, i;
    int bad;
    if (!PyArg_ParseTuple(args, "OOO:_amp_foreach_non_finite_check_and_unscale_", &grads,
                          &found, &inv) ||
        one_element(found, 0, "found_inf must be a 1-element float tensor.") < 0 ||
        one_element(inv, 0, "inv_scale must be a 1-element float tensor.") < 0 ||
        !(seq = PySequence_Fast(grads, "scaled_grads must be a list of Tensors")))
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_GRADS_ON_STACK &&
        (!(gs = PyMem_Calloc(n, sizeof(*gs))) || !(work = PyMem_Calloc(n, sizeof(*work))))) {
        PyErr_NoMemory();
        n = 0;
        goto done;
    }
    for (i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        work[i] = NULL;
        if (!cddp_tensor_check(o) || !cddp_is_floating(((TensorObject *)o)->dtype)) {
            PyErr_Format(PyExc_RuntimeError, "_amp_foreach_non_finite_check_and_unscale_: "
                         "grad %zd is not a floating point Tensor", i);
            n = i;
            goto done;
        }
        gs[i] = (TensorObject *)o;
    }
    if ((bad = unscale_all(gs, work, n, *(float *)cddp_data((TensorObject *)inv))) < 0)
        goto done;
    if (bad)
        *(float *)cddp_data((TensorObject *)found) = 1.0f;
    res = Py_NewRef(Py_None);
done:
    for (i = 0; work && i < n; i++)
        Py_XDECREF(work[i]);
    if (gs != stack_g)
        PyMem_Free(gs);
    if (work && work != stack_w)
        PyMem_Free(work);
    Py_DECREF(seq);
    return res;
}

static PyObject *py_update_scale(PyObject *m, PyObject *args)
{
    PyObject *scale, *tracker, *found;
    double growth, backoff;
    long long interval;
    if (!PyArg_ParseTuple(args, "OOOddL:_amp_update_scale_", &scale, &tracker, &found, &growth,
                          &backoff, &interval) ||
        one_element(tracker, 1, "growth_tracker must be a single-element int tensor.") < 0 ||
        one_element(scale, 0, "current_scale must be a single-element float tensor.") < 0 ||
        one_element(found, 0, "found_inf must be a single-element float tensor.") < 0)
        return NULL;
    float *s = (float *)cddp_data((TensorObject *)scale);
    int32_t *gt = (int32_t *)cddp_data((TensorObject *)tracker);
    if (*(float *)cddp_data((TensorObject *)found)) {
        *s = (float)(*s * backoff);
        *gt = 0;
    } else {
        int32_t successful = *gt + 1;
        if (successful == interval) {
            float next = (float)(*s * growth);
            if (isfinite(next))                 /* a scale that would overflow stays put */
                *s = next;
            *gt = 0;
        } else {
            *gt = successful;
        }
    }
    cddp_bump_version((TensorObject *)scale);
    cddp_bump_version((TensorObject *)tracker);
    return Py_NewRef(scale);
}

PyMethodDef cddp_grad_scaler_module_methods[] = {
    {"_amp_foreach_non_finite_check_and_unscale_", py_unscale, METH_VARARGS,
     "_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)"},
    {"_amp_update_scale_", py_update_scale, METH_VARARGS,
     "_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor, "
     "growth_interval)"},
    {NULL, NULL, 0, NULL},
};
