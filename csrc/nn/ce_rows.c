/* nn/ce_rows.c — cross entropy's float32 kernels (contract in nn/ce_rows.h).
 *
 * Mirrors: torch's cross_entropy = log_softmax + nll_loss on float32, fused. Rows (inner = 1,
 * the language-model head): a vector max, the sum of exp(x - max) (ops/reduce/reduce.h's
 * cddp_row_sumexp_f32, as log_softmax's), lp = (x - max) - log(sum) in a third pass while the
 * row is in cache. K-dimensional inputs (inner > 1, segmentation): LANES positions at a time,
 * the loops over C outside and the positions inside, so each pass vectorizes across positions
 * and no transposed copy is made. Backward writes A exp(lp) and subtracts the target's (and
 * smoothing's) share. A NaN in a row or position gives NaN, as torch's.
 */
#if defined(__GNUC__) && !defined(__clang__)
/* cddp_exp_f32's selects stay selects; a*b+c fuses in the FMA clone (common/clones.h) */
#pragma GCC optimize("no-trapping-math", "fp-contract=fast")
#endif
#include "nn/ce_rows.h"
#include "ops/reduce/reduce.h"
#include <math.h>
#include <string.h>

#define LANES 256            /* positions per block of the K-dimensional kernels */

/* The loss at a position from its log-probabilities lp[c * stride]. */
static inline double position_loss(const cddp_ce_rows *p, const float *lp, int64_t stride,
                                   int64_t y)
{
    double li = -(1 - p->eps) * (p->w ? p->w[y] : 1.0) * (double)lp[y * stride];
    if (p->eps > 0) {
        double s = 0;
        for (int64_t c = 0; c < p->C; c++)
            s += (p->w ? p->w[c] : 1.0) * (double)lp[c * stride];
        li -= p->eps / (double)p->C * s;
    }
    return li;
}

CDDP_CLONES static void forward_rows(const cddp_ce_rows *p, const float *x, float *lp, double *loss)
{
    const int64_t C = p->C;
    for (int64_t i = 0; i < p->outer; i++) {
        const float *row = x + i * C;
        float *out = p->logits ? lp + i * C : (float *)row;
        if (p->logits && C > 0) {
            int nan;
            float m = cddp_rowmax_f32(row, C, 0, &nan);
            float ls = nan ? NAN : (float)log(cddp_row_sumexp_f32(row, NULL, C, m, 0));
            for (int64_t c = 0; c < C; c++)
                out[c] = (row[c] - m) - ls;
        }
        loss[i] = p->y[i] == p->ignore ? 0 : position_loss(p, out, 1, p->y[i]);
    }
}

CDDP_CLONES static void forward_lanes(const cddp_ce_rows *p, const float *x, float *lp,
                                      double *loss)
{
    const int64_t C = p->C, S = p->inner;
    for (int64_t n = 0; n < p->outer; n++) {
        for (int64_t s0 = 0; s0 < S; s0 += LANES) {
            int64_t nb = S - s0 < LANES ? S - s0 : LANES;
            const float *xb = x + n * C * S + s0;
            float *ob = p->logits ? lp + n * C * S + s0 : (float *)xb;
            if (p->logits && C > 0) {
                float m[LANES], acc[LANES];
                for (int64_t k = 0; k < nb; k++) {
                    m[k] = xb[k];
                    acc[k] = 0;
                }
                for (int64_t c = 1; c < C; c++)      /* NaN propagates: max keeps NaN */
                    for (int64_t k = 0; k < nb; k++)
                        m[k] = (xb[c * S + k] > m[k] || xb[c * S + k] != xb[c * S + k])
                                   ? xb[c * S + k] : m[k];
                for (int64_t c = 0; c < C; c++)
                    for (int64_t k = 0; k < nb; k++)
                        acc[k] += cddp_exp_f32(xb[c * S + k] - m[k]);
                for (int64_t k = 0; k < nb; k++)
                    acc[k] = m[k] + logf(acc[k]);     /* max + log(sum): the row's lse */
                for (int64_t c = 0; c < C; c++)
                    for (int64_t k = 0; k < nb; k++)
                        ob[c * S + k] = xb[c * S + k] - acc[k];
            }
            for (int64_t k = 0; k < nb; k++) {
                int64_t i = n * S + s0 + k, y = p->y[i];
                loss[i] = y == p->ignore ? 0 : position_loss(p, ob + k, S, y);
            }
        }
    }
}

CDDP_CLONES void cddp_ce_rows_forward(const cddp_ce_rows *p, const float *x, float *lp,
                                   double *loss)
{
    if (p->inner == 1)
        forward_rows(p, x, lp, loss);
    else
        forward_lanes(p, x, lp, loss);
}

/* One position's gradient into g[c * stride] (c < C): A exp(lp) - a. */
static inline void position_grad(const cddp_ce_rows *p, const float *lp, float *g,
                                 int64_t stride, int64_t y, double s)
{
    const int64_t C = p->C;
    if (y == p->ignore || !p->logits) {
        for (int64_t c = 0; c < C; c++)
            g[c * stride] = 0;
        if (y != p->ignore)
            g[y * stride] = (float)(-s * (p->w ? p->w[y] : 1.0));
        return;
    }
    double wy = p->w ? p->w[y] : 1.0;
    float a = (float)(s * ((1 - p->eps) * wy + p->eps / (double)C * p->wsum));
    for (int64_t c = 0; c < C; c++)
        g[c * stride] = a * cddp_exp_f32(lp[c * stride]);
    if (p->eps > 0) {
        double k = s * p->eps / (double)C;
        for (int64_t c = 0; c < C; c++)
            g[c * stride] -= (float)(k * (p->w ? p->w[c] : 1.0));
    }
    g[y * stride] -= (float)(s * (1 - p->eps) * wy);
}

CDDP_CLONES void cddp_ce_rows_backward(const cddp_ce_rows *p, const float *lp, const double *scale,
                                    float *gx)
{
    const int64_t C = p->C, S = p->inner;
    if (S == 1) {
        for (int64_t i = 0; i < p->outer; i++)
            position_grad(p, lp ? lp + i * C : NULL, gx + i * C, 1, p->y[i], scale[i]);
        return;
    }
    for (int64_t n = 0; n < p->outer; n++) {
        float *gb = gx + n * C * S;
        const float *lb = lp ? lp + n * C * S : NULL;
        if (!p->logits) {                     /* nll: only the targets' entries */
            memset(gb, 0, sizeof(float) * (size_t)(C * S));
            for (int64_t s = 0; s < S; s++) {
                int64_t y = p->y[n * S + s];
                if (y != p->ignore)
                    gb[y * S + s] = (float)(-scale[n * S + s] * (p->w ? p->w[y] : 1.0));
            }
            continue;
        }
        for (int64_t s0 = 0; s0 < S; s0 += LANES) {
            int64_t nb = S - s0 < LANES ? S - s0 : LANES;
            float a[LANES];
            for (int64_t k = 0; k < nb; k++) {
                int64_t i = n * S + s0 + k, y = p->y[i];
                double wy = y == p->ignore ? 0 : p->w ? p->w[y] : 1.0;
                a[k] = y == p->ignore ? 0.f : (float)(scale[i] * ((1 - p->eps) * wy +
                                                                  p->eps / (double)C * p->wsum));
            }
            for (int64_t c = 0; c < C; c++)
                for (int64_t k = 0; k < nb; k++)
                    gb[c * S + s0 + k] = a[k] * cddp_exp_f32(lb[c * S + s0 + k]);
            for (int64_t k = 0; k < nb; k++) {
                int64_t i = n * S + s0 + k, y = p->y[i];
                if (y == p->ignore)
                    continue;
                double s = scale[i], wy = p->w ? p->w[y] : 1.0;
                if (p->eps > 0)
                    for (int64_t c = 0; c < C; c++)
                        gb[c * S + s0 + k] -= (float)(s * p->eps / (double)C *
                                                      (p->w ? p->w[c] : 1.0));
                gb[y * S + s0 + k] -= (float)(s * (1 - p->eps) * wy);
            }
        }
    }
}
