/* nn/rnn/rnn.h — the recurrent layers' internal API: one layer in one direction of
 * torch.nn.RNN / LSTM / GRU (and the cells, as one step of it), forward and backward through
 * time. Order: gates.c (pointwise gate kernels) <- recurrence.c (the time loops, pure C)
 * <- rnn.c (the _rnn_layer op: arguments, the autograd node).
 *
 * Mirrors: at::native's _rnn_impl / lstm_cell / gru_cell (torch's gate order: LSTM i f g o,
 * GRU r z n with n = tanh(x W_in + b_in + r * (h W_hn + b_hn))).
 *
 * Dimension legend: T steps, N batch (the largest one when packed), I input features,
 * H hidden features, P state width (proj_size, or H without projection), G gate width
 * (4H LSTM, 3H GRU, H RNN), R rows of the packed sequence (sum of the batch sizes; T*N when
 * not packed).
 *
 * Every step t works on the first B_t rows of the batch (B_t = N unless packed; torch's packed
 * batch sizes never grow). Step t's rows sit at packed row off_t of x (R, I) and y (R, P)
 * (off_t = t*N unpacked, so an unpacked (T, N, *) tensor is its own packed form).
 *
 * The workspace (one buffer of the layer's dtype, saved for backward) holds
 *   hs    (T+1, N, P)  states: slot 0 is h0 forward, slot T reversed; step t reads slot
 *                     prev(t) and writes slot out(t) (forward t -> t+1, reversed t+1 -> t)
 *   cs    (T+1, N, H)  LSTM cell states, slots as hs
 *   gates (R, GS)     per row: LSTM i f g o after their activations (GS = 4H); GRU r z n and
 *                     h W_hn + b_hn (GS = 4H); RNN the input projection (GS = H)
 *   hraw  (R, H)      LSTM with projection: o * tanh(c) before W_hr
 * Rows b >= B_t of a step's out slot carry the prev slot's rows (their sequence has ended, or
 * in the reversed direction not begun), so slot out(last step) holds every sequence's final
 * state, and gradients flow back through the carry unchanged.
 */
#ifndef CDDP_NN_RNN_H
#define CDDP_NN_RNN_H

#include "core/cddp.h"

typedef enum { CDDP_RNN_LSTM = 0, CDDP_RNN_GRU = 1, CDDP_RNN_TANH = 2, CDDP_RNN_RELU = 3 }
    cddp_rnn_mode;

typedef struct {
    cddp_rnn_mode mode;
    cddp_dtype dt;                 /* float32 or float64 */
    int64_t T, N, I, H, P, G, GS, R;
    int reverse;
    const int64_t *bs;             /* (T) batch size of each step */
    const int64_t *off;            /* (T) packed row of each step's first row */
    int packed;                    /* bs came from a PackedSequence (else B_t = N, off = t*N) */
    int proj;                      /* LSTM with a projection W_hr (P < H) */
    /* workspace layout, in elements from its start (cddp_rnn_plan_layout) */
    int64_t hs_at, cs_at, gates_at, hraw_at, ws_numel;
} cddp_rnn_plan;

/* Weights of one layer-direction. Matrices by element strides (any layout BLAS or the portable
 * kernel can read); biases contiguous or NULL; w_hr NULL without projection. */
typedef struct {
    const void *w_ih; int64_t ih_rs, ih_cs;   /* (G, I) */
    const void *w_hh; int64_t hh_rs, hh_cs;   /* (G, P) */
    const void *w_hr; int64_t hr_rs, hr_cs;   /* (P, H) */
    const void *b_ih, *b_hh;                  /* (G) */
} cddp_rnn_weights;

/* Gradients to produce; a NULL pointer means "not wanted". All contiguous, zero-initialised
 * is not required (each is overwritten). */
typedef struct {
    void *dx;      /* (R, I) */
    void *dh0;     /* (N, P) */
    void *dc0;     /* (N, H) */
    void *dw_ih;   /* (G, I) */
    void *dw_hh;   /* (G, P) */
    void *db_ih;   /* (G) */
    void *db_hh;   /* (G) */
    void *dw_hr;   /* (P, H) */
} cddp_rnn_grads;

/* Fill G, GS and the workspace layout from mode, T, N, H, P, R, proj. Pure arithmetic. */
void cddp_rnn_plan_layout(cddp_rnn_plan *p);

/* Slot indices of step t's input and output states. */
static inline int64_t cddp_rnn_prev(const cddp_rnn_plan *p, int64_t t)
{
    return p->reverse ? t + 1 : t;
}
static inline int64_t cddp_rnn_out(const cddp_rnn_plan *p, int64_t t)
{
    return p->reverse ? t : t + 1;
}

/* ---- recurrence.c: pure C, safe without the GIL, cannot fail --------------------------- */

/* Forward through time. x (R, I) contiguous; h0 (N, P) / c0 (N, H) contiguous or NULL (zeros);
 * ws (ws_numel); scratch (N, 3H) for GRU (else unused); y (R, P); fin the final states:
 * (N, P) for GRU/RNN, h_n (N, P) then c_n (N, H) for LSTM. */
void cddp_rnn_forward(const cddp_rnn_plan *p, const cddp_rnn_weights *w, const void *x,
                      const void *h0, const void *c0, void *ws, void *scratch, void *y,
                      void *fin);

/* Backward through time. dy (R, P) and dfin (fin's layout) contiguous or NULL (zeros);
 * x, ws as the forward left them. Scratch buffers (caller-allocated, contiguous):
 *   dh (N, P), dc (N, H), dgi (R, G), dgh (R, G) GRU only (else NULL: dgi serves both),
 *   dhs (R, P) and dhraw (N, H) with projection only (else NULL). */
void cddp_rnn_backward(const cddp_rnn_plan *p, const cddp_rnn_weights *w, const void *x,
                       const void *ws, const void *dy, const void *dfin, void *dh, void *dc,
                       void *dgi, void *dgh, void *dhs, void *dhraw, const cddp_rnn_grads *g);

/* ---- gates.c: the fused pointwise step kernels (B rows, widths as named) --------------- */

/* LSTM step: gates (B, GS) hold pre-activations i f g o (x and h projections and both biases
 * summed); replaced by their activations. c_out = f*c_prev + i*g, h_out = o*tanh(c_out).
 * c_prev, c_out, h_out (B, H) contiguous. */
void cddp_lstm_fwd(cddp_dtype dt, int64_t B, int64_t H, void *gates, const void *c_prev,
                   void *c_out, void *h_out);
/* LSTM step backward. dh (B, H) the gradient of h_out; dc (B, H) in: of c_out, out: of c_prev.
 * dg (B, 4H) the gate pre-activations' gradient. */
void cddp_lstm_bwd(cddp_dtype dt, int64_t B, int64_t H, const void *gates, const void *c_prev,
                   const void *c_out, const void *dh, void *dc, void *dg);

/* GRU step: gates (B, 4H) in: x W_ih + b_ih in its first 3H columns; gh (B, 3H) = h W_hh +
 * b_hh. Writes r z n and gh's n part into gates, h_out = n + z*(h_prev - n). */
void cddp_gru_fwd(cddp_dtype dt, int64_t B, int64_t H, void *gates, const void *gh,
                  const void *h_prev, void *h_out);
/* GRU step backward. dh (B, H) in: the gradient of h_out, out: its direct part into h_prev
 * (dh*z). dgi (B, 3H): gradient of x W_ih + b_ih; dgh (B, 3H): of h W_hh + b_hh. */
void cddp_gru_bwd(cddp_dtype dt, int64_t B, int64_t H, const void *gates, const void *h_prev,
                  void *dh, void *dgi, void *dgh);

/* Elman step: h_out (n) = tanh or relu of pre (n). */
void cddp_rnn_act_fwd(cddp_dtype dt, int64_t n, int relu, const void *pre, void *h_out);
/* dpre (n) = dh * act'(.) expressed through the output h_out. */
void cddp_rnn_act_bwd(cddp_dtype dt, int64_t n, int relu, const void *h_out, const void *dh,
                      void *dpre);

#endif
