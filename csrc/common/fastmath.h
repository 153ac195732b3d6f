/* common/fastmath.h — float32 exp and tanh without libm calls, for loops that must vectorize.
 *
 * glibc's expf/tanhf are a call per element (tanhf through expm1f), which keeps a loop scalar.
 * These are branch-free (the clamps and the final choices are selects through bit masks, so no
 * FP compare becomes control flow) and inline, so exp, sigmoid, tanh and the LSTM/GRU gate
 * loops vectorize. Cephes' range reduction x = n ln2 + r and polynomials: within 2 ulp of the
 * exact values (tests check against float64); NaN, infinities and tanh(-0) = -0 as libm.
 * float64 code keeps libm, which agrees with torch's float64 to an ulp.
 *
 * Users: ops/elementwise/unary.c (exp, sigmoid, tanh) and nn/rnn/gates.c (the gate kernels).
 * ops/reduce/reduce.h's cddp_exp_f32 is a separate exp (no NaN select, integer n from the
 * rounding constant's bits) that softmax and the activations use.
 */
#ifndef CDDP_FASTMATH_H
#define CDDP_FASTMATH_H
#include "common/clones.h"      /* CDDP_MATH_INLINE */
#include <stdint.h>
#include <string.h>

/* c ? a : b on the bits (a mask, not a branch) */
CDDP_MATH_INLINE float cddp_sel_f32(int c, float a, float b)
{
    uint32_t ua, ub, m = 0u - (uint32_t)c, r;
    float f;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    r = (ua & m) | (ub & ~m);
    memcpy(&f, &r, 4);
    return f;
}

CDDP_MATH_INLINE float cddp_pow2i_f32(int32_t n)      /* 2^n, n in [-126, 127] */
{
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

CDDP_MATH_INLINE float cddp_fast_expf(float x)
{
    /* clamp (NaN to 0: it is restored at the end) so the integer conversion is defined */
    float xc = cddp_sel_f32(x > 88.8f, 88.8f, x);
    xc = cddp_sel_f32(xc < -104.0f, -104.0f, xc);
    xc = cddp_sel_f32(x != x, 0.0f, xc);
    float fx = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  /* round(x/ln2) */
    int32_t n = (int32_t)fx, h = n >> 1;
    float r = xc - fx * 0.693359375f;
    r = r - fx * -2.12194440e-4f;
    float y = ((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r +
                4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f;
    y = y * (r * r) + r + 1.0f;
    y = y * cddp_pow2i_f32(h) * cddp_pow2i_f32(n - h);  /* two halves reach subnormals, inf */
    return cddp_sel_f32(x != x, x, y);
}

CDDP_MATH_INLINE float cddp_fast_tanhf(float x)
{
    float ax = cddp_sel_f32(x < 0, -x, x);
    float z = x * x;                              /* |x| < 0.625: odd polynomial */
    float p = ((((-5.70498872745E-3f * z + 2.06390887954E-2f) * z - 5.37397155531E-2f) * z +
                1.33314422036E-1f) * z - 3.33332819422E-1f) * z * x + x;
    float q = 1.0f - 2.0f / (cddp_fast_expf(2.0f * ax) + 1.0f);
    q = cddp_sel_f32(x < 0, -q, q);
    p = cddp_sel_f32(x == 0, x, p);               /* tanh(-0) = -0 */
    return cddp_sel_f32(ax < 0.625f, p, q);
}

#endif
