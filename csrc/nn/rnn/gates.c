/* nn/rnn/gates.c — the fused pointwise kernels of one recurrent step, forward and backward:
 * activations, cell update and output of LSTM (i f g o), GRU (r z n) and the Elman RNN
 * (tanh / relu), each one pass over the step's (B, H) elements.
 *
 * Mirrors: at::native's LSTMCell / GRUCell / SimpleCell math in torch's operand order
 * (c = f*c_prev + i*g, h = o*tanh(c); n = tanh(x_n + r*(h W_hn + b_hn)),
 * h = n + z*(h_prev - n)), so float64 results agree with torch's to rounding.
 *
 * Dimension legend (rnn.h): B rows of this step, H hidden features; gate buffers are (B, GS)
 * rows with the gates side by side, H columns each. Contracts in rnn.h. Pure C, no GIL.
 */
#if defined(__GNUC__) && !defined(__clang__)   /* a*b+c fuse in the FMA clone (common/clones.h) */
#pragma GCC optimize("fp-contract=fast")
#endif
#include "nn/rnn/rnn.h"
#include "common/fastmath.h"
#include <math.h>

/* Kernels are CDDP_CLONES (common/clones.h); this file opts into FMA contraction (its first
 * line), so the x86-64-v3 clone's gates round a*b+c once. */
#include "common/clones.h"

/* float32 exp / tanh: common/fastmath.h's branch-free Cephes versions, so the gate loops
 * vectorize (glibc's tanhf was a third of an LSTM forward's time); float64 keeps libm. */

/* One definition per element type: T the C type, S the suffix, EXP/TANH the exp and tanh.
 * Each kernel is a loop over rows calling a row function whose pointers are `restrict` (the
 * gates of one row are disjoint H-long runs of one buffer): that is what lets the compiler
 * vectorize the row. */
#define R restrict
#define DEFINE_GATES(T, S, EXP, TANH)                                                        \
CDDP_MATH_INLINE T sig_##S(T a) { return (T)1 / ((T)1 + EXP(-a)); }                         \
                                                                                             \
CDDP_MATH_INLINE void lstm_fwd_row_##S(int64_t H, T *R gi, T *R gf, T *R gg, T *R go,        \
                                       const T *R c0, T *R c1, T *R h1)                      \
{                                                                                            \
    for (int64_t j = 0; j < H; j++) {                                                        \
        T i = sig_##S(gi[j]), f = sig_##S(gf[j]), c = TANH(gg[j]), o = sig_##S(go[j]);       \
        T cn = f * c0[j] + i * c;                                                            \
        gi[j] = i; gf[j] = f; gg[j] = c; go[j] = o;                                          \
        c1[j] = cn;                                                                          \
        h1[j] = o * TANH(cn);                                                                \
    }                                                                                        \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void lstm_fwd_##S(int64_t B, int64_t H, T *g, const T *cp, T *co, T *ho)   \
{                                                                                            \
    for (int64_t b = 0; b < B; b++) {                                                        \
        T *gi = g + b * 4 * H;                                                               \
        lstm_fwd_row_##S(H, gi, gi + H, gi + 2 * H, gi + 3 * H, cp + b * H, co + b * H,      \
                         ho + b * H);                                                        \
    }                                                                                        \
}                                                                                            \
                                                                                             \
CDDP_MATH_INLINE void lstm_bwd_row_##S(int64_t H, const T *R g, const T *R cp, const T *R co, \
                                       const T *R dh, T *R dc, T *R dg)                      \
{                                                                                            \
    for (int64_t j = 0; j < H; j++) {                                                        \
        T i = g[j], f = g[H + j], c = g[2 * H + j], o = g[3 * H + j], tc = TANH(co[j]);      \
        T dct = dc[j] + dh[j] * o * ((T)1 - tc * tc);         /* d c_out, both paths */      \
        dg[j] = dct * c * i * ((T)1 - i);                                                    \
        dg[H + j] = dct * cp[j] * f * ((T)1 - f);                                            \
        dg[2 * H + j] = dct * i * ((T)1 - c * c);                                            \
        dg[3 * H + j] = dh[j] * tc * o * ((T)1 - o);                                         \
        dc[j] = dct * f;                                                                     \
    }                                                                                        \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void lstm_bwd_##S(int64_t B, int64_t H, const T *g, const T *cp,           \
                                    const T *co, const T *dh, T *dc, T *dg)                  \
{                                                                                            \
    for (int64_t b = 0; b < B; b++)                                                          \
        lstm_bwd_row_##S(H, g + b * 4 * H, cp + b * H, co + b * H, dh + b * H, dc + b * H,   \
                         dg + b * 4 * H);                                                    \
}                                                                                            \
                                                                                             \
CDDP_MATH_INLINE void gru_fwd_row_##S(int64_t H, T *R g, const T *R gh, const T *R h0,       \
                                   T *R h1)                                                  \
{                                                                                            \
    for (int64_t j = 0; j < H; j++) {                                                        \
        T r = sig_##S(gh[j] + g[j]), z = sig_##S(gh[H + j] + g[H + j]);                      \
        T hn = gh[2 * H + j], n = TANH(g[2 * H + j] + hn * r);                               \
        g[j] = r; g[H + j] = z; g[2 * H + j] = n; g[3 * H + j] = hn;                         \
        h1[j] = (h0[j] - n) * z + n;                                                         \
    }                                                                                        \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void gru_fwd_##S(int64_t B, int64_t H, T *g, const T *gh, const T *hp,     \
                                   T *ho)                                                    \
{                                                                                            \
    for (int64_t b = 0; b < B; b++)                                                          \
        gru_fwd_row_##S(H, g + b * 4 * H, gh + b * 3 * H, hp + b * H, ho + b * H);           \
}                                                                                            \
                                                                                             \
CDDP_MATH_INLINE void gru_bwd_row_##S(int64_t H, const T *R g, const T *R h0, T *R dh,       \
                                   T *R di, T *R dhh)                                        \
{                                                                                            \
    for (int64_t j = 0; j < H; j++) {                                                        \
        T r = g[j], z = g[H + j], n = g[2 * H + j], d = dh[j];                               \
        T dn = d * ((T)1 - z) * ((T)1 - n * n);              /* d of n's pre-activation */   \
        T dr = dn * g[3 * H + j] * r * ((T)1 - r);                                           \
        T dz = d * (h0[j] - n) * z * ((T)1 - z);                                             \
        di[j] = dr; di[H + j] = dz; di[2 * H + j] = dn;                                      \
        dhh[j] = dr; dhh[H + j] = dz; dhh[2 * H + j] = dn * r;                               \
        dh[j] = d * z;                                                                       \
    }                                                                                        \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void gru_bwd_##S(int64_t B, int64_t H, const T *g, const T *hp, T *dh,     \
                                   T *dgi, T *dgh)                                           \
{                                                                                            \
    for (int64_t b = 0; b < B; b++)                                                          \
        gru_bwd_row_##S(H, g + b * 4 * H, hp + b * H, dh + b * H, dgi + b * 3 * H,           \
                        dgh + b * 3 * H);                                                    \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void act_fwd_##S(int64_t n, int relu, const T *R pre, T *R h)              \
{                                                                                            \
    if (relu)                                                                                \
        for (int64_t k = 0; k < n; k++)                                                      \
            h[k] = pre[k] > 0 ? pre[k] : (T)0;                                               \
    else                                                                                     \
        for (int64_t k = 0; k < n; k++)                                                      \
            h[k] = TANH(pre[k]);                                                             \
}                                                                                            \
                                                                                             \
CDDP_CLONES static void act_bwd_##S(int64_t n, int relu, const T *R h, const T *R dh, T *R dp) \
{                                                                                            \
    if (relu)                                                                                \
        for (int64_t k = 0; k < n; k++)                                                      \
            dp[k] = h[k] > 0 ? dh[k] : (T)0;                                                 \
    else                                                                                     \
        for (int64_t k = 0; k < n; k++)                                                      \
            dp[k] = dh[k] * ((T)1 - h[k] * h[k]);                                            \
}

DEFINE_GATES(float, f32, cddp_fast_expf, cddp_fast_tanhf)
DEFINE_GATES(double, f64, exp, tanh)

/* ---- dtype dispatch (contracts in rnn.h) ------------------------------------------------ */

void cddp_lstm_fwd(cddp_dtype dt, int64_t B, int64_t H, void *gates, const void *c_prev,
                   void *c_out, void *h_out)
{
    if (dt == CDDP_FLOAT32)
        lstm_fwd_f32(B, H, gates, c_prev, c_out, h_out);
    else
        lstm_fwd_f64(B, H, gates, c_prev, c_out, h_out);
}

void cddp_lstm_bwd(cddp_dtype dt, int64_t B, int64_t H, const void *gates, const void *c_prev,
                   const void *c_out, const void *dh, void *dc, void *dg)
{
    if (dt == CDDP_FLOAT32)
        lstm_bwd_f32(B, H, gates, c_prev, c_out, dh, dc, dg);
    else
        lstm_bwd_f64(B, H, gates, c_prev, c_out, dh, dc, dg);
}

void cddp_gru_fwd(cddp_dtype dt, int64_t B, int64_t H, void *gates, const void *gh,
                  const void *h_prev, void *h_out)
{
    if (dt == CDDP_FLOAT32)
        gru_fwd_f32(B, H, gates, gh, h_prev, h_out);
    else
        gru_fwd_f64(B, H, gates, gh, h_prev, h_out);
}

void cddp_gru_bwd(cddp_dtype dt, int64_t B, int64_t H, const void *gates, const void *h_prev,
                  void *dh, void *dgi, void *dgh)
{
    if (dt == CDDP_FLOAT32)
        gru_bwd_f32(B, H, gates, h_prev, dh, dgi, dgh);
    else
        gru_bwd_f64(B, H, gates, h_prev, dh, dgi, dgh);
}

void cddp_rnn_act_fwd(cddp_dtype dt, int64_t n, int relu, const void *pre, void *h_out)
{
    if (dt == CDDP_FLOAT32)
        act_fwd_f32(n, relu, pre, h_out);
    else
        act_fwd_f64(n, relu, pre, h_out);
}

void cddp_rnn_act_bwd(cddp_dtype dt, int64_t n, int relu, const void *h_out, const void *dh,
                      void *dpre)
{
    if (dt == CDDP_FLOAT32)
        act_bwd_f32(n, relu, h_out, dh, dpre);
    else
        act_bwd_f64(n, relu, h_out, dh, dpre);
}
