/* nn/norm/norm.h — private to the normalization files: the row and column kernels every norm
 * layer is written with (kernels.c), and the small helpers the entry points share (common.c).
 *
 *   kernels.c     pure loops, no Python: moments, normalize+affine, backward reduce, dx
 *   common.c      argument checks, per-channel parameter reads, the shared stats/affine plans
 *   batch_norm.c  _batch_norm (torch.nn.functional.batch_norm) with NativeBatchNormBackward0
 *   sync_bn.c     the SyncBatchNorm primitives (torch.batch_norm_stats / _gather_stats_with_counts
 *                 / _elemt / _backward_reduce / _backward_elemt), no autograd
 *   group_norm.c  _group_norm (torch.nn.functional.group_norm) with NativeGroupNormBackward0
 *
 * Dimension legend: an input x (N, C, *) is viewed as a contiguous (N, C, S) block, S the
 * product of the spatial dims. Two layouts of the same memory drive the loops:
 *   rows    R rows of S contiguous elements (row r = n*C + c for batch norm, or (n, g) with
 *           S = C/G * spatial for group norm's statistics); per-row coefficients are read at
 *           index r % cmod, so batch norm passes (C,) arrays with cmod = C and group norm
 *           (N*C,) arrays with cmod = R.
 *   cols    N rows of W = C*S elements, coefficients per column (W,): the layout for small S,
 *           where rows of S elements would be too short to vectorize ((N, C) inputs).
 * Statistics accumulate in double. A moments pass returns, per row or column, the sums of
 * d = x - K and of d*d around a given centre K: with K close to the mean both sums are
 * accurate in one pass (float32 data: K = a sample of the channel; float64 data: a second pass
 * with K = the mean, torch's two-pass accuracy).
 */
#ifndef CDDP_NN_NORM_H
#define CDDP_NN_NORM_H
#include "core/cddp.h"

/* ---- kernels.c: dt is CDDP_FLOAT32 or CDDP_FLOAT64; x, y, dy, dx contiguous of dt ---------- */

/* s1[r] = sum_s (x[r,s] - K[r % cmod]), s2[r] = sum_s (x[r,s] - K[r % cmod])^2. */
void cddp_norm_rows_moments(cddp_dtype dt, const void *x, int64_t R, int64_t S,
                            const double *K, int64_t cmod, double *s1, double *s2);
/* The same per column j of an (N, W) block: sums over the N rows around K[j]. */
void cddp_norm_cols_moments(cddp_dtype dt, const void *x, int64_t N, int64_t W,
                            const double *K, double *s1, double *s2);

/* y = (x - m) * a + b with (m, a, b) per row (index r % cmod) or per column. y may be x. */
void cddp_norm_rows_affine(cddp_dtype dt, const void *x, void *y, int64_t R, int64_t S,
                           const double *m, const double *a, const double *b, int64_t cmod);
void cddp_norm_cols_affine(cddp_dtype dt, const void *x, void *y, int64_t N, int64_t W,
                           const double *m, const double *a, const double *b);

/* Backward reductions: sdy[r] = sum_s dy, sdyx[r] = sum_s dy * (x - m[r % cmod]) (x may be
 * NULL when only sdy is wanted, then sdyx is not written). Column form over N rows. */
void cddp_norm_rows_reduce(cddp_dtype dt, const void *dy, const void *x, int64_t R, int64_t S,
                           const double *m, int64_t cmod, double *sdy, double *sdyx);
void cddp_norm_cols_reduce(cddp_dtype dt, const void *dy, const void *x, int64_t N, int64_t W,
                           const double *m, double *sdy, double *sdyx);

/* dx = dy * p + (x - m) * q + r, coefficients per row (index r % cmod) or per column. x may
 * be NULL when every q is 0. dx may be dy. */
void cddp_norm_rows_elemt(cddp_dtype dt, const void *dy, const void *x, void *dx, int64_t R,
                          int64_t S, const double *m, const double *p, const double *q,
                          const double *r, int64_t cmod);
void cddp_norm_cols_elemt(cddp_dtype dt, const void *dy, const void *x, void *dx, int64_t N,
                          int64_t W, const double *m, const double *p, const double *q,
                          const double *r);

/* ---- common.c ------------------------------------------------------------------------------ */

/* Rows of S elements shorter than this use the column layout. */
#define CDDP_NORM_COLS_BELOW 16

/* x (N, C, S) as a batch norm plan: how the kernels walk it. */
typedef struct {
    cddp_dtype dt;
    int64_t N, C, S;
    int cols;                     /* S < CDDP_NORM_COLS_BELOW: column layout, W = C*S */
} cddp_bn_plan;

void cddp_bn_plan_init(cddp_bn_plan *p, const TensorObject *x);

/* Per-channel mean (C,) and sum of squared deviations m2 (C,) of x (N, C, S) viewed by p, in
 * double; scratch of the plan's size is allocated here. GIL released on big inputs. 0 or -1
 * with MemoryError. M = N*S == 0 gives mean 0, m2 0. */
int cddp_bn_moments(const cddp_bn_plan *p, const void *x, double *mean, double *m2);

/* Per-channel sums of dy and dy * (x - mean[c]) (x NULL: sdy only), in double. */
int cddp_bn_reduce(const cddp_bn_plan *p, const void *dy, const void *x, const double *mean,
                   double *sdy, double *sdyx);

/* Per-channel y = (x - m) * a + b (kind 0) or dx = dy * a + (x - m) * q + r (kind 1, `b` is
 * then q and `r` the constant), coefficient arrays of (C,). */
int cddp_bn_affine(const cddp_bn_plan *p, const void *x, void *y, const double *m,
                   const double *a, const double *b);
int cddp_bn_elemt(const cddp_bn_plan *p, const void *dy, const void *x, void *dx,
                  const double *m, const double *pc, const double *q, const double *r);

/* Tensor argument or None: NULL for None; TypeError naming fname/what for anything else. */
int cddp_norm_opt_tensor(PyObject *o, const char *fname, const char *what, TensorObject **out);
/* A (C,) parameter or buffer: RuntimeError "<what> should contain C elements not K" (torch's
 * text) when it has another size, and torch's mixed-dtype error when its dtype is not dt. */
int cddp_norm_check_param(TensorObject *t, const char *what, int64_t C, cddp_dtype dt);
/* Element c of a 1-D tensor of any stride, as double (weight[c], running_mean[c]). */
double cddp_norm_at(const TensorObject *t, int64_t c);
/* Store v into element c of a 1-D float tensor (running stats updates). */
void cddp_norm_set(TensorObject *t, int64_t c, double v);
/* A new 1-D tensor of dtype dt from C doubles. */
TensorObject *cddp_norm_from_doubles(const double *v, int64_t C, cddp_dtype dt);
/* The gradient of a (C,)-element parameter, of the parameter's shape and dtype (meta), from C
 * doubles. New reference or NULL. */
TensorObject *cddp_norm_param_grad(const cddp_meta *m, const double *v, int64_t C);
/* Doubles of a 1-D tensor of C elements into v. */
void cddp_norm_to_doubles(const TensorObject *t, int64_t C, double *v);

#endif
