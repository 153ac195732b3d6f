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
#include "nn/rnn/rnn.h"
#include <math.h>

/* One definition per element type: T the C type, S the suffix, EXP/TANH the libm calls. */
#define DEFINE_GATES(T, S, EXP, TANH)                                                        \
static inline T sig_##S(T a) { return (T)1 / ((T)1 + EXP(-a)); }                            \
                                                                                             \
static void lstm_fwd_##S(int64_t B, int64_t H, T *g, const T *cp, T *co, T *ho)             \
{                                                                                            \
    for (int64_t b = 0; b < B; b++) {                                                        \
        T *gi = g + b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;                     \
        const T *c0 = cp + b * H;                                                            \
        T *c1 = co + b * H, *h1 = ho + b * H;                                                \
        for (int64_t j = 0; j < H; j++) {                                                    \
            T i = sig_##S(gi[j]), f = sig_##S(gf[j]), c = TANH(gg[j]), o = sig_##S(go[j]);   \
            T cn = f * c0[j] + i * c;                                                        \
            gi[j] = i; gf[j] = f; gg[j] = c; go[j] = o;                                      \
            c1[j] = cn;                                                                      \
            h1[j] = o * TANH(cn);                                                            \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
                                                                                             \
static void lstm_bwd_##S(int64_t B, int64_t H, const T *g, const T *cp, const T *co,         \
                         const T *dh, T *dc, T *dg)                                          \
{                                                                                            \
    for (int64_t b = 0; b < B; b++) {                                                        \
        const T *gi = g + b * 4 * H, *gf = gi + H, *gg = gf + H, *go = gg + H;               \
        T *di = dg + b * 4 * H, *df = di + H, *dgg = df + H, *dgo = dgg + H;                 \
        for (int64_t j = 0; j < H; j++) {                                                    \
            int64_t e = b * H + j;                                                           \
            T i = gi[j], f = gf[j], c = gg[j], o = go[j], tc = TANH(co[e]);                  \
            T dct = dc[e] + dh[e] * o * ((T)1 - tc * tc);     /* d c_out, both paths */      \
            di[j] = dct * c * i * ((T)1 - i);                                                \
            df[j] = dct * cp[e] * f * ((T)1 - f);                                            \
            dgg[j] = dct * i * ((T)1 - c * c);                                               \
            dgo[j] = dh[e] * tc * o * ((T)1 - o);                                            \
            dc[e] = dct * f;                                                                 \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
                                                                                             \
static void gru_fwd_##S(int64_t B, int64_t H, T *g, const T *gh, const T *hp, T *ho)        \
{                                                                                            \
    for (int64_t b = 0; b < B; b++) {                                                        \
        T *gr = g + b * 4 * H, *gz = gr + H, *gn = gz + H, *ghn = gn + H;                    \
        const T *hr = gh + b * 3 * H, *hz = hr + H, *hn = hz + H, *h0 = hp + b * H;          \
        T *h1 = ho + b * H;                                                                  \
        for (int64_t j = 0; j < H; j++) {                                                    \
            T r = sig_##S(hr[j] + gr[j]), z = sig_##S(hz[j] + gz[j]);                        \
            T n = TANH(gn[j] + hn[j] * r);                                                   \
            gr[j] = r; gz[j] = z; gn[j] = n; ghn[j] = hn[j];                                 \
            h1[j] = (h0[j] - n) * z + n;                                                     \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
                                                                                             \
static void gru_bwd_##S(int64_t B, int64_t H, const T *g, const T *hp, T *dh, T *dgi,        \
                        T *dgh)                                                              \
{                                                                                            \
    for (int64_t b = 0; b < B; b++) {                                                        \
        const T *gr = g + b * 4 * H, *gz = gr + H, *gn = gz + H, *ghn = gn + H;              \
        T *ir = dgi + b * 3 * H, *iz = ir + H, *in = iz + H;                                 \
        T *hr = dgh + b * 3 * H, *hz = hr + H, *hn = hz + H;                                 \
        for (int64_t j = 0; j < H; j++) {                                                    \
            int64_t e = b * H + j;                                                           \
            T r = gr[j], z = gz[j], n = gn[j], d = dh[e];                                    \
            T dn = d * ((T)1 - z) * ((T)1 - n * n);          /* d of n's pre-activation */   \
            T dr = dn * ghn[j] * r * ((T)1 - r);                                             \
            T dz = d * (hp[e] - n) * z * ((T)1 - z);                                         \
            ir[j] = hr[j] = dr;                                                              \
            iz[j] = hz[j] = dz;                                                              \
            in[j] = dn;                                                                      \
            hn[j] = dn * r;                                                                  \
            dh[e] = d * z;                                                                   \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
                                                                                             \
static void act_fwd_##S(int64_t n, int relu, const T *pre, T *h)                             \
{                                                                                            \
    if (relu)                                                                                \
        for (int64_t k = 0; k < n; k++)                                                      \
            h[k] = pre[k] > 0 ? pre[k] : (T)0;                                               \
    else                                                                                     \
        for (int64_t k = 0; k < n; k++)                                                      \
            h[k] = TANH(pre[k]);                                                             \
}                                                                                            \
                                                                                             \
static void act_bwd_##S(int64_t n, int relu, const T *h, const T *dh, T *dp)                 \
{                                                                                            \
    if (relu)                                                                                \
        for (int64_t k = 0; k < n; k++)                                                      \
            dp[k] = h[k] > 0 ? dh[k] : (T)0;                                                 \
    else                                                                                     \
        for (int64_t k = 0; k < n; k++)                                                      \
            dp[k] = dh[k] * ((T)1 - h[k] * h[k]);                                            \
}

DEFINE_GATES(float, f32, expf, tanhf)
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
