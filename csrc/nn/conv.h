/* nn/conv.h — the convolution family's private contracts: the sliding-window geometry, the
 * im2col/col2im kernels (nn/im2col.c), the GEMM-based convolution engine (nn/conv_engine.c) and
 * the argument helpers the op files share (nn/conv_args.c).
 *
 * Mirrors: at::native's im2col/col2im (Unfold2d) and slow_conv2d, as used by torch.nn.functional
 * conv1d/conv2d/conv_transpose2d, unfold and fold.
 *
 * Dimension legend: x (N, C, H, W) input, w (OC, C/G, kh, kw) weight, y (N, OC, OH, OW)
 * output, G groups, Cg = C/G, OCg = OC/G, K = Cg*kh*kw rows of a column matrix, P = OH*OW.
 * 1-D ops use the same code with H = OH = kh = 1.
 *
 * Order of the files: im2col.c <- conv_engine.c <- conv.c, conv_transpose.c, fold.c;
 * conv_args.c is below all of the op files. Everything here except the conv_args helpers is
 * pure C (no Python objects): safe with the GIL released.
 */
#ifndef CDDP_NN_CONV_H
#define CDDP_NN_CONV_H

#include "core/cddp.h"

/* Hot spatial kernels are CDDP_CLONES (common/clones.h). Results do not depend on the clone:
 * no FMA contraction in these files, same operation order. */
#include "common/clones.h"

/* One image plane stack and the windows slid over it. A window (oh, ow) reads input rows
 * oh*sh - ph + i*dh (i < kh) and columns ow*sw - pw + j*dw (j < kw); reads outside
 * [0,H) x [0,W) are zeros. OH/OW are given explicitly (not recomputed from the padding), so an
 * asymmetric padding (padding='same' with an even kernel) is the left pad plus a larger OH. */
typedef struct {
    int64_t C, H, W;          /* channels in the plane stack, input height, width */
    int64_t OH, OW;           /* window positions */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
} cddp_win2d;

/* cols (C*kh*kw, P) with row stride ldc (>= P) from x (C, H, W) contiguous:
 *   cols[(c*kh*kw + i*kw + j)*ldc + oh*OW + ow] = x[c, oh*sh-ph+i*dh, ow*sw-pw+j*dw] or 0.
 * dt float32 or float64. */
void cddp_im2col(cddp_dtype dt, const void *x, const cddp_win2d *g, void *cols, int64_t ldc);

/* The adjoint: x (C, H, W) += each cols entry at the position im2col read it from (entries of
 * padding positions are dropped). */
void cddp_col2im(cddp_dtype dt, const void *cols, int64_t ldc, const cddp_win2d *g, void *x);

/* The gather path for small planes (nn/im2col.c): a chunk of m samples' planes is copied
 * into xp (m, C, Hp, Wp) with the padding as zeros, and one table base (m*OH*OW int32)
 * addresses every column matrix row from it. */
typedef struct {
    int64_t Hp, Wp;           /* padded plane: covers every position a window touches */
    int64_t m;                /* samples side by side */
} cddp_gather_plan;

void cddp_gather_plan_init(cddp_gather_plan *gp, const cddp_win2d *g, int64_t m);
/* Whether the chunk's offsets fit the int32 table. */
int cddp_gather_plan_fits(const cddp_win2d *g, int64_t m);
/* base[q], q = (s, oh, ow) < m*OH*OW: the offset of window (oh, ow) of sample s in xp. */
void cddp_gather_plan_table(const cddp_gather_plan *gp, const cddp_win2d *g, int32_t *base);
/* Between m samples' planes (sample s at x + s*xstride, (C, H, W) contiguous) and the padded
 * interior of xp: to_padded copies x -> xp, else xp -> x. xp's border is the caller's (zero it
 * once). */
void cddp_pad_copy(cddp_dtype dt, const void *x, int64_t xstride, const cddp_gather_plan *gp,
                   const cddp_win2d *g, int64_t m, void *xp, int to_padded);
/* cols (C*kh*kw, n) from xp (scatter == 0), or xp += the adjoint of that (scatter != 0);
 * n = m*OH*OW columns. */
void cddp_gather_cols(cddp_dtype dt, const void *xp, const cddp_gather_plan *gp,
                      const cddp_win2d *g, const int32_t *base, int64_t n, void *cols,
                      int scatter);

/* Scratch memory of the engines (nn/scratch.c): 64-byte aligned, uninitialised, bytes >= 1;
 * NULL when out of memory. Give back what was taken (NULL is ignored). Pure C, thread-safe. */
char *cddp_scratch_take(size_t bytes);
void cddp_scratch_give(char *p);

/* A whole convolution: the conv maps x (N, C, H, W) to y (N, OC, OH, OW) with w (OC, Cg, kh,
 * kw) and G groups; win.C is Cg (the per-group plane stack). Tensors passed to the engine
 * are contiguous buffers of dtype dt. */
typedef struct {
    cddp_dtype dt;
    int64_t N, C, OC, G;
    cddp_win2d win;
    int bf16;                 /* dt is float32 holding bfloat16 values (copies of bf16 tensors,
                                 and gradients that came back through their casts): the GEMMs
                                 may run on the bf16 kernel (blas.h: cddp_gemm_bf16) */
} cddp_conv;

/* y = conv(x, w) (+ bias b (OC) when b != NULL). 0, or -1 when scratch memory could not be
 * allocated (y is then undefined). Pure C. */
int cddp_conv_forward(const cddp_conv *cv, const void *x, const void *w, const void *b, void *y);

/* The conv's gradients for an output gradient dy (N, OC, OH, OW): dx (N, C, H, W) = the
 * adjoint of the conv applied to dy (overwritten), dw (OC, Cg, kh, kw) = dy (x) x correlation
 * (overwritten). Either may be NULL (not computed); x is only read when dw is wanted. 0 or -1
 * (no memory). Pure C. */
int cddp_conv_backward(const cddp_conv *cv, const void *x, const void *dy, const void *w,
                       void *dx, void *dw);

/* The column-buffer size (elements) chunks aim at; elems > 0 sets it. Returns the previous
 * value. A test knob: a small budget makes small convolutions run in several chunks. */
int64_t cddp_conv_cols_budget(int64_t elems);

/* db[c] = sum over n and p of dy (N, C, P) — the bias gradient. Pure C. */
void cddp_channel_sum(cddp_dtype dt, const void *dy, int64_t N, int64_t C, int64_t P, void *db);

/* y (N, C, P) += b[c] for every sample and position. Pure C. */
void cddp_add_channel_bias(cddp_dtype dt, void *y, int64_t N, int64_t C, int64_t P,
                           const void *b);

/* ---- argument helpers (nn/conv_args.c; these use Python) --------------------------------- */

/* Read a tuple/list of exactly n ints (or one int, repeated n times) into out. On a wrong
 * length: RuntimeError "expected <what> to be a single integer value or a list of <n> values
 * to match the convolution dimensions, but got <what>=[...]" (torch's text). -1 on error. */
int cddp_int_list(PyObject *o, int n, const char *what, int64_t *out);

/* "[a, b, c]" of a shape into buf (torch's way of printing sizes in messages). */
const char *cddp_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

/* The tensor argument at args[i] or NULL + TypeError naming fn and the argument. None is
 * accepted (returns Py_None cast) only when allow_none. */
TensorObject *cddp_tensor_arg(PyObject *const *args, Py_ssize_t i, const char *fn,
                              const char *what, int allow_none);

/* A contiguous float tensor of t's values (new reference; t itself when already so), or NULL
 * + RuntimeError when t is not float32/float64. */
TensorObject *cddp_float_contiguous(TensorObject *t, const char *fn);

#endif
