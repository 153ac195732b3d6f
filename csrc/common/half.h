/* common/half.h — bit-exact conversions between the storage dtypes and their compute dtypes:
 * float16 and bfloat16 <-> float32, and double -> integer with x86's (torch's) cast results.
 * Pure C with no dependency (common/ is what both stacks may include): core/cddp.h includes
 * it for the tensor library (core/narrow.c builds the blocked converters on it), and the
 * process group's reduction kernels (distributed/pg/reduce_kernels.h) for float16 sums.
 *
 * Mirrors c10/util/Half.h (fp16_ieee_from_fp32_value / fp16_ieee_to_fp32_value, from the FP16
 * library) and c10/util/BFloat16.h (round_to_nearest_even, bits << 16):
 *   float32 -> float16   round to nearest even; overflow -> inf; results below 2^-14 become
 *                        subnormals (rounded), below 2^-25 zero; NaN -> sign | 0x7E00
 *   float32 -> bfloat16  round to nearest even on the high 16 bits; NaN -> 0x7FC0 (c10's
 *                        scalar rule; torch's AVX paths give 0xFFFF: NaN either way)
 *   float16/bfloat16 -> float32   exact
 * The float16 routines compute with float arithmetic on purpose (the library's trick: the
 * FPU does the rounding), so they need round-to-nearest and no flush-to-zero, as torch's do.
 */
#ifndef CDDP_HALF_H
#define CDDP_HALF_H
#include <stdint.h>
#include <string.h>

static inline uint32_t cddp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float cddp_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float cddp_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    /* normal (and inf/NaN): move the exponent into float's range, then scale by 2^-112 */
    const float normalized = cddp_f32_from_bits((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    /* subnormal: the mantissa as the low bits of 0.5's representation, minus 0.5 */
    const float denormalized = cddp_f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t r = sign | (two_w < (1u << 27) ? cddp_f32_bits(denormalized)
                                                   : cddp_f32_bits(normalized));
    return cddp_f32_from_bits(r);
}

static inline uint16_t cddp_f32_to_f16(float f)
{
    /* scale up then down: the FPU rounds the mantissa to 10 bits at the right exponent */
    float base = ((f < 0 ? -f : f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = cddp_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u)
        bias = 0x71000000u;
    base = cddp_f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = cddp_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float cddp_bf16_to_f32(uint16_t b)
{
    return cddp_f32_from_bits((uint32_t)b << 16);
}

static inline uint16_t cddp_f32_to_bf16(float f)
{
    uint32_t u = cddp_f32_bits(f);
    if (f != f)
        return 0x7FC0;
    return (uint16_t)((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
}

/* double -> int64 as x86's cvttsd2si: truncation in range, INT64_MIN outside and for NaN
 * (what torch's static_cast gives on x86; undefined in C, so spelled out). */
static inline int64_t cddp_double_to_i64(double v)
{
    return v >= -9.2233720368547758e18 && v < 9.2233720368547758e18 ? (int64_t)v : INT64_MIN;
}

/* double -> int32 the same way (cvttsd2si 32-bit): the route torch's casts to uint8 / int8 /
 * int16 take before keeping the low bits. */
static inline int32_t cddp_double_to_i32(double v)
{
    return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN;
}

#endif
