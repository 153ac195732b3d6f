/* nn/ce_rows.h — cross entropy's float32 kernels (nn/ce_rows.c), the fast path of nn/loss.c
 * for float32 inputs with class-index targets: no float64 copy of the input, vectorized exp,
 * no per-class coefficient rows, the input read in its own layout.
 *
 * Layout: x (outer, C, inner) contiguous — (N, C) rows have inner = 1, (N, C, d1, ..) inputs
 * inner = d1 * ..; position i = n * inner + s has target y[i] (ignore_index: contributes
 * nothing), optional class weights w (C) float64 summing to wsum (C when w is NULL), label
 * smoothing eps. Cross entropy (logits = 1) writes the log-softmax lp over C in x's layout,
 * which backward reads (torch saves the same); nll (logits = 0) reads log-probabilities
 * lp = x and needs nothing saved:
 *   loss_i = -(1 - eps) w_y lp_iy - eps / C sum_c w_c lp_ic
 *   d loss_i / d x_ic = A_i exp(lp_ic) - a_ic,   a_ic = eps / C w_c + (1 - eps) w_y [c == y],
 *   A_i = eps / C wsum + (1 - eps) w_y        (nll: -w_y at c == y only)
 */
#ifndef CDDP_NN_CE_ROWS_H
#define CDDP_NN_CE_ROWS_H
#include <stdint.h>

typedef struct {
    int64_t outer, C, inner, ignore;
    const int64_t *y;        /* (outer * inner) */
    const double *w;         /* (C) or NULL */
    double wsum, eps;
    int logits;
} cddp_ce_rows;

/* loss[i] for every position; with logits, lp (x's layout) receives log-softmax(x) over C. */
void cddp_ce_rows_forward(const cddp_ce_rows *p, const float *x, float *lp, double *loss);
/* gx (x's layout) = scale_i * d loss_i / d x_i (scale: the upstream gradient per position);
 * lp as forward left it (unused for nll). */
void cddp_ce_rows_backward(const cddp_ce_rows *p, const float *lp, const double *scale,
                           float *gx);

#endif
