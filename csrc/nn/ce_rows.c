/* nn/ce_rows.c — cross entropy's float32 row kernels (contract in nn/ce_rows.h).
 *
 * Mirrors: torch's cross_entropy = log_softmax + nll_loss on float32, fused: a row's max
 * (vector), exp(x - max) through cddp_exp_f32 (vectorized) and its pairwise sum in double,
 * lp = (x - max) - log(sum) written while the row is in cache; backward writes A exp(lp) and
 * subtracts the target's (and smoothing's) share. A row with a NaN gives NaN, as torch's.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")     /* cddp_exp_f32's selects stay selects */
#endif
#include "nn/ce_rows.h"
#include "ops/reduce/reduce.h"
#include <math.h>
#include <string.h>

CDDP_HOT void cddp_ce_rows_forward(const cddp_ce_rows *p, const float *x, float *lp,
                                   double *loss)
{
    const int64_t C = p->C;
    for (int64_t i = 0; i < p->N; i++) {
        const float *row = x + i * C;
        float *out = p->logits ? lp + i * C : (float *)row;
        if (p->logits && C > 0) {
            int nan;
            float m = cddp_rowmax_f32(row, C, 0, &nan);
            for (int64_t c = 0; c < C; c++)
                out[c] = cddp_exp_f32(row[c] - m);
            float ls = nan ? NAN : (float)log(cddp_pw_sum_f32(out, C));
            for (int64_t c = 0; c < C; c++)
                out[c] = (row[c] - m) - ls;
        }
        int64_t y = p->y[i];
        if (y == p->ignore) {
            loss[i] = 0;
            continue;
        }
        double li = -(1 - p->eps) * (p->w ? p->w[y] : 1.0) * (double)out[y];
        if (p->eps > 0) {
            double s = 0;
            if (p->w)
                for (int64_t c = 0; c < C; c++)
                    s += p->w[c] * (double)out[c];
            else
                s = cddp_pw_sum_f32(out, C);
            li -= p->eps / (double)C * s;
        }
        loss[i] = li;
    }
}

CDDP_HOT void cddp_ce_rows_backward(const cddp_ce_rows *p, const float *lp, const double *scale,
                                    float *gx)
{
    const int64_t C = p->C;
    for (int64_t i = 0; i < p->N; i++) {
        float *g = gx + i * C;
        int64_t y = p->y[i];
        double wy = y == p->ignore ? 0 : p->w ? p->w[y] : 1.0, s = scale[i];
        if (y == p->ignore || !p->logits) {
            memset(g, 0, sizeof(float) * (size_t)C);
            if (y != p->ignore)
                g[y] = (float)(-s * wy);
            continue;
        }
        const float *row = lp + i * C;
        float a = (float)(s * ((1 - p->eps) * wy + p->eps / (double)C * p->wsum));
        for (int64_t c = 0; c < C; c++)
            g[c] = a * cddp_exp_f32(row[c]);
        if (p->eps > 0) {
            double k = s * p->eps / (double)C;
            for (int64_t c = 0; c < C; c++)
                g[c] -= (float)(k * (p->w ? p->w[c] : 1.0));
        }
        g[y] -= (float)(s * (1 - p->eps) * wy);
    }
}
