/* nn/ce_rows.h — cross entropy's float32 row kernels (nn/ce_rows.c), the fast path of nn/loss.c
 * for float32 inputs with class-index targets: no float64 copy of the (N, C) input, one
 * vectorized exp pass per row forward and one backward, no per-class coefficient rows.
 *
 * Rows x (N, C) float32, targets y (N) int64 (ignore_index rows contribute nothing), optional
 * class weights w (C) float64 summing to wsum (C when w is NULL), label smoothing eps. Cross
 * entropy (logits = 1) writes the rows' log-softmax lp (N, C), which backward reads (torch
 * saves the same); nll (logits = 0) reads log-probabilities lp = x and needs nothing saved:
 *   loss_i = -(1 - eps) w_y lp_iy - eps / C sum_c w_c lp_ic
 *   d loss_i / d x_ic = A_i exp(lp_ic) - a_ic,   a_ic = eps / C w_c + (1 - eps) w_y [c == y],
 *   A_i = eps / C wsum + (1 - eps) w_y        (nll: -w_y at c == y only)
 */
#ifndef CDDP_NN_CE_ROWS_H
#define CDDP_NN_CE_ROWS_H
#include <stdint.h>

typedef struct {
    int64_t N, C, ignore;
    const int64_t *y;
    const double *w;         /* (C) or NULL */
    double wsum, eps;
    int logits;
} cddp_ce_rows;

/* loss[i] for every row; with logits, lp (N, C) receives the log-softmax of x (lp == x for
 * nll: x already holds it). */
void cddp_ce_rows_forward(const cddp_ce_rows *p, const float *x, float *lp, double *loss);
/* gx (N, C) = scale_i * d loss_i / d x_i (scale: the upstream gradient per row); lp as
 * forward left it (unused for nll). */
void cddp_ce_rows_backward(const cddp_ce_rows *p, const float *lp, const double *scale,
                           float *gx);

#endif
