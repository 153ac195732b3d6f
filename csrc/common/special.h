/* common/special.h — special functions libm lacks, in double: the inverse error function, the
 * digamma and trigamma functions. The float kernels call these and round once, so float32
 * results are the correctly rounded double ones (torch computes float32 in float32, so the two
 * can differ by an ulp).
 *
 * Contract: pure functions of one double, no errno, no global state (safe in the parallel
 * elementwise loops). Domain edges as torch: erfinv(±1) = ±inf, |y| > 1 or NaN gives NaN;
 * digamma(+0) = -inf and digamma(-0) = +inf (torch's), a negative integer gives NaN; trigamma at 0 or a negative integer gives +inf.
 */
#ifndef CDDP_COMMON_SPECIAL_H
#define CDDP_COMMON_SPECIAL_H

#include <math.h>

/* erfinv: Giles' single-precision approximation ("Approximating the erfinv function", GPU
 * Computing Gems, 2011) as the start, then two Newton steps on erf(x) - y, each of which
 * squares the relative error (1e-7 -> 1e-14 -> below double's rounding). */
static inline double cddp_erfinv(double y)
{
    double w, p, x;
    int k;
    if (!(y > -1.0 && y < 1.0)) {
        if (y == 1.0)
            return INFINITY;
        if (y == -1.0)
            return -INFINITY;
        return NAN;
    }
    w = -log((1.0 - y) * (1.0 + y));
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    x = p * y;
    /* d/dx erf(x) = 2/sqrt(pi) exp(-x^2) */
    for (k = 0; k < 2; k++)
        x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
    return x;
}

/* digamma: reflection below 1/2, recurrence up to 10, then the asymptotic series
 * ln x - 1/(2x) - sum B2k / (2k x^2k) to k = 7 (the first omitted term is below 1e-17 at 10). */
static inline double cddp_digamma(double x)
{
    double r = 0.0, z;
    if (x == 0.0)                 /* the pole's sign from the side the zero's sign names */
        return signbit(x) ? INFINITY : -INFINITY;
    if (x < 0.0 && x == floor(x))
        return NAN;
    if (x < 0.5)  /* psi(1 - x) - psi(x) = pi cot(pi x) */
        return cddp_digamma(1.0 - x) - 3.141592653589793 / tan(3.141592653589793 * x);
    while (x < 10.0) {
        r -= 1.0 / x;
        x += 1.0;
    }
    z = 1.0 / (x * x);
    return r + log(x) - 0.5 / x -
           z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 -
           z * (1.0 / 132 - z * (691.0 / 32760 - z / 12))))));
}

/* trigamma (the derivative of digamma): reflection below 1/2, recurrence up to 10, then
 * 1/x + 1/(2x^2) + sum B2k / x^(2k+1) to k = 7. */
static inline double cddp_trigamma(double x)
{
    double r = 0.0, z, s;
    if (x <= 0.0 && x == floor(x))
        return INFINITY;
    if (x < 0.5) {  /* psi1(1 - x) + psi1(x) = pi^2 / sin^2(pi x) */
        s = sin(3.141592653589793 * x);
        return 9.869604401089358 / (s * s) - cddp_trigamma(1.0 - x);
    }
    while (x < 10.0) {
        r += 1.0 / (x * x);
        x += 1.0;
    }
    z = 1.0 / (x * x);
    return r + 1.0 / x + 0.5 * z +
           z / x * (1.0 / 6 - z * (1.0 / 30 - z * (1.0 / 42 - z * (1.0 / 30 -
           z * (5.0 / 66 - z * (691.0 / 2730 - z * 7.0 / 6))))));
}

/* lgamma without the global signgam glibc's lgamma writes (the loops run on several threads) */
static inline double cddp_lgamma(double x)
{
    int sign;
    return lgamma_r(x, &sign);
}

#endif
