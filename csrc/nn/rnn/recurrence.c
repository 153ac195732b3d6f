/* nn/rnn/recurrence.c — forward and backward through time of one recurrent layer in one
 * direction (torch.nn.RNN / LSTM / GRU's per-layer loop, at::native::_rnn_impl), pure C.
 *
 * Forward: the input projection of every step is ONE GEMM, gates (R, G) = x (R, I) @ W_ih^T,
 * accumulated onto rows that start as the biases; then per step one GEMM adds
 * h_prev (B, P) @ W_hh^T into the step's gate rows (GRU: into a (B, 3H) scratch, since r
 * multiplies its n part) and one fused pointwise kernel (gates.c) applies the activations,
 * the cell update and writes the new state; LSTM with a projection adds
 * h (B, P) = hraw (B, H) @ W_hr^T.
 * Backward, steps in reverse order: the fused pointwise backward turns dh (and dc) into the
 * gate gradients dG (B, G), one GEMM dh_prev = dG @ W_hh. After the loop, whole-sequence
 * GEMMs: dx = dG @ W_ih, dW_ih = dG^T @ x, dW_hh = dG^T @ h_prev (one GEMM when unpacked, one
 * per step accumulated when packed), dW_hr = dh^T @ hraw; db = column sums of dG.
 *
 * Dimension legend and the workspace layout: rnn.h. No allocation, no failure, no GIL.
 */
#include "nn/rnn/rnn.h"
#include "ops/linalg/blas.h"
#include <string.h>

#define AT(base, k) ((char *)(base) + (size_t)(k) * es)

void cddp_rnn_plan_layout(cddp_rnn_plan *p)
{
    int64_t H = p->H, slots = (p->T + 1) * p->N;
    int lstm = p->mode == CDDP_RNN_LSTM;
    p->G = lstm ? 4 * H : p->mode == CDDP_RNN_GRU ? 3 * H : H;
    p->GS = p->mode == CDDP_RNN_GRU ? 4 * H : p->G;     /* GRU keeps h W_hn + b_hn too */
    p->hs_at = 0;
    p->cs_at = slots * p->P;
    p->gates_at = p->cs_at + (lstm ? slots * H : 0);
    p->hraw_at = p->gates_at + p->R * p->GS;
    p->ws_numel = p->hraw_at + (p->proj ? p->R * H : 0);
}

/* dst rows (rows, width) with leading dimension ld = b1 + b2 (either may be NULL). */
#define BIAS_ROWS(T)                                                                          \
    do {                                                                                      \
        const T *x = b1, *y = b2;                                                             \
        T *d = dst;                                                                           \
        for (int64_t j = 0; j < width; j++)                                                   \
            d[j] = (x ? x[j] : (T)0) + (y ? y[j] : (T)0);                                     \
        for (int64_t r = 1; r < rows; r++)                                                    \
            memcpy(d + r * ld, d, (size_t)width * sizeof(T));                                 \
    } while (0)

static void bias_rows(cddp_dtype dt, int64_t rows, int64_t width, int64_t ld, const void *b1,
                      const void *b2, void *dst)
{
    if (rows <= 0)
        return;
    if (dt == CDDP_FLOAT32)
        BIAS_ROWS(float);
    else
        BIAS_ROWS(double);
}

/* dst (n) += src (n). */
static void add_into(cddp_dtype dt, int64_t n, void *dst, const void *src)
{
    if (dt == CDDP_FLOAT32)
        for (int64_t k = 0; k < n; k++)
            ((float *)dst)[k] += ((const float *)src)[k];
    else
        for (int64_t k = 0; k < n; k++)
            ((double *)dst)[k] += ((const double *)src)[k];
}

/* dst (cols) = column sums of src (rows, cols), accumulated in double; column blocks keep
 * the walk over src row-major (a column-at-a-time walk strides through memory). */
#define SUM_BLOCK 256
static void col_sums(cddp_dtype dt, int64_t rows, int64_t cols, const void *src, void *dst)
{
    double acc[SUM_BLOCK];
    for (int64_t j0 = 0; j0 < cols; j0 += SUM_BLOCK) {
        int64_t w = cols - j0 < SUM_BLOCK ? cols - j0 : SUM_BLOCK;
        memset(acc, 0, sizeof acc);
        for (int64_t r = 0; r < rows; r++) {
            if (dt == CDDP_FLOAT32) {
                const float *row = (const float *)src + r * cols + j0;
                for (int64_t j = 0; j < w; j++)
                    acc[j] += row[j];
            } else {
                const double *row = (const double *)src + r * cols + j0;
                for (int64_t j = 0; j < w; j++)
                    acc[j] += row[j];
            }
        }
        for (int64_t j = 0; j < w; j++) {
            if (dt == CDDP_FLOAT32)
                ((float *)dst)[j0 + j] = (float)acc[j];
            else
                ((double *)dst)[j0 + j] = acc[j];
        }
    }
}

/* Step t of the forward: reads state slot prev(t), writes slot out(t) and y's rows. */
static void step_forward(const cddp_rnn_plan *p, const cddp_rnn_weights *w,
                         const cddp_gemm_fixed *whh, int64_t t, char *ws, void *scratch, char *y)
{
    cddp_dtype dt = p->dt;
    size_t es = cddp_dtype_size[dt];
    int64_t N = p->N, H = p->H, P = p->P, G = p->G, GS = p->GS;
    int64_t B = p->bs[t], row = p->off[t];
    char *hp = AT(ws, p->hs_at + cddp_rnn_prev(p, t) * N * P);
    char *ho = AT(ws, p->hs_at + cddp_rnn_out(p, t) * N * P);
    char *g = AT(ws, p->gates_at + row * GS);
    if (p->mode == CDDP_RNN_LSTM) {
        char *cp = AT(ws, p->cs_at + cddp_rnn_prev(p, t) * N * H);
        char *co = AT(ws, p->cs_at + cddp_rnn_out(p, t) * N * H);
        char *hdst = p->proj ? AT(ws, p->hraw_at + row * H) : ho;
        /* gates (B, 4H) += h_prev (B, P) @ W_hh^T */
        cddp_gemm_fixed_run(whh, dt, B, 1.0, hp, P, 1, 1.0, g, GS);
        cddp_lstm_fwd(dt, B, H, g, cp, co, hdst);
        if (p->proj)                                   /* h (B, P) = hraw (B, H) @ W_hr^T */
            cddp_gemm(dt, B, P, H, 1.0, hdst, H, 1, w->w_hr, w->hr_cs, w->hr_rs, 0.0, ho, P);
        memcpy(AT(co, B * H), AT(cp, B * H), (size_t)((N - B) * H) * es);
    } else if (p->mode == CDDP_RNN_GRU) {
        /* gh (B, 3H) = h_prev @ W_hh^T + b_hh */
        if (w->b_hh)
            bias_rows(dt, B, G, G, w->b_hh, NULL, scratch);
        cddp_gemm_fixed_run(whh, dt, B, 1.0, hp, P, 1, w->b_hh ? 1.0 : 0.0, scratch, G);
        cddp_gru_fwd(dt, B, H, g, scratch, hp, ho);
    } else {
        cddp_gemm_fixed_run(whh, dt, B, 1.0, hp, P, 1, 1.0, g, GS);
        cddp_rnn_act_fwd(dt, B * H, p->mode == CDDP_RNN_RELU, g, ho);
    }
    memcpy(AT(ho, B * P), AT(hp, B * P), (size_t)((N - B) * P) * es);   /* rows past B carry */
    memcpy(AT(y, row * P), ho, (size_t)(B * P) * es);
}

void cddp_rnn_forward(const cddp_rnn_plan *p, const cddp_rnn_weights *w, const void *x,
                      const void *h0, const void *c0, void *ws, void *scratch, void *y,
                      void *fin)
{
    cddp_dtype dt = p->dt;
    size_t es = cddp_dtype_size[dt];
    int64_t N = p->N, H = p->H, P = p->P;
    int64_t first = p->reverse ? p->T : 0, last = p->reverse ? 0 : p->T;
    int gru = p->mode == CDDP_RNN_GRU, lstm = p->mode == CDDP_RNN_LSTM;
    size_t hbytes = (size_t)(N * P) * es, cbytes = (size_t)(N * H) * es;
    char *hs = AT(ws, p->hs_at), *cs = AT(ws, p->cs_at), *gates = AT(ws, p->gates_at);
    if (h0)
        memcpy(AT(hs, first * N * P), h0, hbytes);
    else
        memset(AT(hs, first * N * P), 0, hbytes);
    if (lstm && c0)
        memcpy(AT(cs, first * N * H), c0, cbytes);
    else if (lstm)
        memset(AT(cs, first * N * H), 0, cbytes);
    /* every step's input projection at once: gates (R, G) = biases + x (R, I) @ W_ih^T
     * (GRU's b_hh stays apart: r scales h W_hn + b_hn) */
    const void *b2 = gru ? NULL : w->b_hh;
    int has_bias = w->b_ih || b2;
    if (has_bias)
        bias_rows(dt, p->R, p->G, p->GS, w->b_ih, b2, gates);
    cddp_gemm(dt, p->R, p->G, p->I, 1.0, x, p->I, 1, w->w_ih, w->ih_cs, w->ih_rs,
              has_bias ? 1.0 : 0.0, gates, p->GS);
    /* W_hh^T (P, G) is the right operand of every step's product: packed once */
    cddp_gemm_fixed whh;
    cddp_gemm_fixed_init(&whh, dt, P, p->G, w->w_hh, w->hh_cs, w->hh_rs);
    for (int64_t s = 0; s < p->T; s++)
        step_forward(p, w, &whh, p->reverse ? p->T - 1 - s : s, ws, scratch, y);
    cddp_gemm_fixed_free(&whh);
    memcpy(fin, AT(hs, last * N * P), hbytes);
    if (lstm)
        memcpy(AT(fin, N * P), AT(cs, last * N * H), cbytes);
}

/* Step t of the backward: dh (N, P) in: the gradient of slot out(t) (y's rows not yet
 * added), out: of slot prev(t); dc likewise for LSTM cells. Rows past B_t are left alone:
 * their state was carried, so is their gradient. */
static void step_backward(const cddp_rnn_plan *p, const cddp_rnn_weights *w,
                          const cddp_gemm_fixed *whh, int64_t t, const char *ws, const char *dy,
                          char *dh, char *dc, char *dgi, char *dgh, char *dhs, char *dhraw)
{
    cddp_dtype dt = p->dt;
    size_t es = cddp_dtype_size[dt];
    int64_t N = p->N, H = p->H, P = p->P, G = p->G;
    int64_t B = p->bs[t], row = p->off[t];
    const char *hp = AT(ws, p->hs_at + cddp_rnn_prev(p, t) * N * P);
    const char *ho = AT(ws, p->hs_at + cddp_rnn_out(p, t) * N * P);
    const char *g = AT(ws, p->gates_at + row * p->GS);
    char *gi = AT(dgi, row * G), *gh = AT(dgh, row * G);
    if (dy)
        add_into(dt, B * P, dh, AT(dy, row * P));
    if (p->mode == CDDP_RNN_LSTM) {
        const char *cp = AT(ws, p->cs_at + cddp_rnn_prev(p, t) * N * H);
        const char *co = AT(ws, p->cs_at + cddp_rnn_out(p, t) * N * H);
        const char *src = dh;
        if (p->proj) {               /* dhraw (B, H) = dh (B, P) @ W_hr; dh kept for dW_hr */
            memcpy(AT(dhs, row * P), dh, (size_t)(B * P) * es);
            cddp_gemm(dt, B, H, P, 1.0, dh, P, 1, w->w_hr, w->hr_rs, w->hr_cs, 0.0, dhraw, H);
            src = dhraw;
        }
        cddp_lstm_bwd(dt, B, H, g, cp, co, src, dc, gi);
        cddp_gemm_fixed_run(whh, dt, B, 1.0, gi, G, 1, 0.0, dh, P);    /* dh = dG @ W_hh */
    } else if (p->mode == CDDP_RNN_GRU) {
        cddp_gru_bwd(dt, B, H, g, hp, dh, gi, gh);     /* dh becomes dh * z */
        cddp_gemm_fixed_run(whh, dt, B, 1.0, gh, G, 1, 1.0, dh, P);
    } else {
        cddp_rnn_act_bwd(dt, B * H, p->mode == CDDP_RNN_RELU, ho, dh, gi);
        cddp_gemm_fixed_run(whh, dt, B, 1.0, gi, G, 1, 0.0, dh, P);
    }
}

/* The whole-sequence weight gradients once every step's dG is known. */
static void weight_grads(const cddp_rnn_plan *p, const cddp_rnn_weights *w, const void *x,
                         const char *ws, const char *dgi, const char *dgh, const char *dhs,
                         const cddp_rnn_grads *g)
{
    cddp_dtype dt = p->dt;
    size_t es = cddp_dtype_size[dt];
    int64_t N = p->N, P = p->P, G = p->G, R = p->R, I = p->I;
    if (g->dx)                                       /* dx (R, I) = dG (R, G) @ W_ih (G, I) */
        cddp_gemm(dt, R, I, G, 1.0, dgi, G, 1, w->w_ih, w->ih_rs, w->ih_cs, 0.0, g->dx, I);
    if (g->dw_ih)                                    /* dW_ih (G, I) = dG^T @ x */
        cddp_gemm(dt, G, I, R, 1.0, dgi, 1, G, x, I, 1, 0.0, g->dw_ih, I);
    if (g->dw_hh && !p->packed) {     /* dW_hh (G, P) = dG^T @ h_prev: the prev slots of all
                                       * steps are one (T*N, P) block of hs */
        const char *hprev = AT(ws, p->hs_at + (p->reverse ? N * P : 0));
        cddp_gemm(dt, G, P, R, 1.0, dgh, 1, G, hprev, P, 1, 0.0, g->dw_hh, P);
    } else if (g->dw_hh) {
        memset(g->dw_hh, 0, (size_t)(G * P) * es);
        for (int64_t t = 0; t < p->T; t++)
            cddp_gemm(dt, G, P, p->bs[t], 1.0, AT(dgh, p->off[t] * G), 1, G,
                      AT(ws, p->hs_at + cddp_rnn_prev(p, t) * N * P), P, 1, 1.0, g->dw_hh, P);
    }
    if (g->db_ih)
        col_sums(dt, R, G, dgi, g->db_ih);
    if (g->db_hh)
        col_sums(dt, R, G, dgh, g->db_hh);
    if (g->dw_hr)                                    /* dW_hr (P, H) = dh^T (P, R) @ hraw */
        cddp_gemm(dt, P, p->H, R, 1.0, dhs, 1, P, AT(ws, p->hraw_at), p->H, 1, 0.0,
                  g->dw_hr, p->H);
}

void cddp_rnn_backward(const cddp_rnn_plan *p, const cddp_rnn_weights *w, const void *x,
                       const void *ws, const void *dy, const void *dfin, void *dh, void *dc,
                       void *dgi, void *dgh, void *dhs, void *dhraw, const cddp_rnn_grads *g)
{
    size_t es = cddp_dtype_size[p->dt];
    int64_t N = p->N, H = p->H, P = p->P;
    int lstm = p->mode == CDDP_RNN_LSTM;
    size_t hbytes = (size_t)(N * P) * es, cbytes = (size_t)(N * H) * es;
    if (dfin)
        memcpy(dh, dfin, hbytes);
    else
        memset(dh, 0, hbytes);
    if (lstm && dfin)
        memcpy(dc, AT(dfin, N * P), cbytes);
    else if (lstm)
        memset(dc, 0, cbytes);
    if (!dgh)
        dgh = dgi;                       /* LSTM, RNN: both projections see the same dG */
    /* the forward's steps, last first; W_hh (G, P) is every step's right operand: packed once */
    cddp_gemm_fixed whh;
    cddp_gemm_fixed_init(&whh, p->dt, p->G, P, w->w_hh, w->hh_rs, w->hh_cs);
    for (int64_t s = p->T - 1; s >= 0; s--)
        step_backward(p, w, &whh, p->reverse ? p->T - 1 - s : s, ws, dy, dh, dc, dgi, dgh,
                      dhs, dhraw);
    cddp_gemm_fixed_free(&whh);
    if (g->dh0)
        memcpy(g->dh0, dh, hbytes);
    if (g->dc0)
        memcpy(g->dc0, dc, cbytes);
    weight_grads(p, w, x, ws, dgi, dgh, dhs, g);
}
