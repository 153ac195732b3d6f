/* nn/rnn/rnn.c — _rnn_layer: one layer of torch.nn.RNN / LSTM / GRU in one direction (the
 * cells are a one-step layer), with its autograd node. cddp/nn/modules/rnn.py stacks layers
 * and directions, checks arguments with torch's messages and takes views of the results.
 *
 *   _rnn_layer(mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, batch_sizes)
 *       -> (y, fin)
 *   mode         0 LSTM, 1 GRU, 2 RNN tanh, 3 RNN relu
 *   x            (T, N, I), or (R, I) packed with batch_sizes (T,) int64 (non-increasing)
 *   h0 | None    (N, P)            c0 | None   (N, H), LSTM only
 *   w_ih (G, I), w_hh (G, P), b_ih | None (G), b_hh | None (G), w_hr | None (P, H) LSTM only
 *   y            (T, N, P), or (R, P) packed
 *   fin          GRU/RNN: h_n (N, P); LSTM: (N*P + N*H,) = h_n then c_n, flat so both are
 *                contiguous views
 *
 * Autograd (Note [one node per layer-direction]): a node has at most 2 outputs and 4 saved
 * tensors (core/cddp.h), so the layer is ONE node with outputs (y, fin) and edges
 * x h0 c0 w_ih w_hh b_ih b_hh w_hr. Saved: x (contiguous), w_ih, w_hh and the workspace
 * (states, cells, gates: rnn.h); w_hr, when present, rides in the node's `extra` with its
 * version recorded and checked by hand. The final states reach h0/c0's gradients through the
 * backward's carry, so gradients of h_n, c_n, y and initial states all flow through one node.
 *
 * Dimension legend: rnn.h.
 */
#include "core/cddp.h"
#include "module.h"
#include "nn/rnn/rnn.h"
#include <string.h>

static const char *const node_names[4] = {
    "LstmLayerBackward0", "GruLayerBackward0", "RnnTanhLayerBackward0", "RnnReluLayerBackward0",
};
static const char *const mode_names[4] = {"LSTM", "GRU", "RNN_TANH", "RNN_RELU"};
static const char *const arg_names[9] = {
    "input", "h0", "c0", "w_ih", "w_hh", "b_ih", "b_hh", "w_hr", "batch_sizes",
};

enum { A_X, A_H0, A_C0, A_WIH, A_WHH, A_BIH, A_BHH, A_WHR, A_BS, A_N };

/* ---- arguments ------------------------------------------------------------------------ */

/* "[a, b, c]" of n sizes (-1 printed as "*") into buf. */
static void fmt_sizes(char *buf, size_t cap, int n, const int64_t *s)
{
    size_t k = 0;
    buf[k++] = '[';
    for (int d = 0; d < n && k + 24 < cap; d++)
        k += (size_t)(s[d] < 0 ? snprintf(buf + k, cap - k, d ? ", *" : "*")
                               : snprintf(buf + k, cap - k, d ? ", %lld" : "%lld",
                                          (long long)s[d]));
    snprintf(buf + k, cap - k, "]");
}

/* Check t is `ndim`-D with the given sizes (-1: any), naming the argument on failure. */
static int check_shape(TensorObject *t, const char *name, int ndim, int64_t d0, int64_t d1)
{
    int64_t want[2] = {d0, d1};
    char ws[64], got[320];
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = want[d] < 0 || t->shape[d] == want[d];
    if (ok)
        return 0;
    fmt_sizes(ws, sizeof ws, ndim, want);
    fmt_sizes(got, sizeof got, t->ndim, t->shape);
    PyErr_Format(PyExc_RuntimeError, "_rnn_layer: expected %s of size %s, got %s", name, ws, got);
    return -1;
}

/* batch_sizes (T,) int64: every size in [1, the previous one], summing to R. Fills p->T, N and
 * the per-step tables ibuf[0:T] (sizes) and ibuf[T:2T] (row offsets); PyMem_Malloc'd. */
static int read_batch_sizes(TensorObject *bs, int64_t R, cddp_rnn_plan *p, int64_t **ibuf)
{
    int64_t T = bs->shape[0], sum = 0;
    if (bs->dtype != CDDP_INT64 || bs->ndim != 1 || T < 1) {
        PyErr_SetString(PyExc_RuntimeError, "_rnn_layer: batch_sizes must be a non-empty 1-D "
                        "int64 tensor");
        return -1;
    }
    *ibuf = PyMem_Malloc((size_t)(2 * T) * sizeof(int64_t));
    if (!*ibuf) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t t = 0; t < T; t++) {
        int64_t b = (int64_t)cddp_get_double(bs, t);
        if (b < 1 || (t && b > (*ibuf)[t - 1]) || sum > R - b) {
            PyErr_Format(PyExc_RuntimeError, "_rnn_layer: batch_sizes must be positive, "
                         "non-increasing and sum to the packed input's %lld rows (step %lld: "
                         "%lld)", (long long)R, (long long)t, (long long)b);
            return -1;
        }
        (*ibuf)[t] = b;
        (*ibuf)[T + t] = sum;
        sum += b;
    }
    if (sum != R) {
        PyErr_Format(PyExc_RuntimeError, "_rnn_layer: batch_sizes sum to %lld, but the packed "
                     "input has %lld rows", (long long)sum, (long long)R);
        return -1;
    }
    p->T = T;
    p->N = (*ibuf)[0];
    return 0;
}

/* The unpacked tables: T steps of N rows each. */
static int full_batch_sizes(cddp_rnn_plan *p, int64_t **ibuf)
{
    if (p->T < 1) {
        PyErr_SetString(PyExc_RuntimeError, "Expected sequence length to be larger than 0 in RNN");
        return -1;
    }
    *ibuf = PyMem_Malloc((size_t)(2 * p->T) * sizeof(int64_t));
    if (!*ibuf) {
        PyErr_NoMemory();
        return -1;
    }
    for (int64_t t = 0; t < p->T; t++) {
        (*ibuf)[t] = p->N;
        (*ibuf)[p->T + t] = t * p->N;
    }
    return 0;
}

/* Validate every argument and fill the plan (dims, per-step tables in *ibuf, layout). */
static int check_args(TensorObject **a, int mode, cddp_rnn_plan *p, int64_t **ibuf)
{
    TensorObject *x = a[A_X];
    int64_t k = mode == CDDP_RNN_LSTM ? 4 : mode == CDDP_RNN_GRU ? 3 : 1;
    if (cddp_refuse_narrow(x, "_rnn_layer") < 0)
        return -1;
    if (!cddp_is_floating(x->dtype) || x->ndim != (a[A_BS] ? 2 : 3)) {
        PyErr_Format(PyExc_RuntimeError, "_rnn_layer: input must be a %d-D float32 or float64 "
                     "tensor, got %d-D %s", a[A_BS] ? 2 : 3, x->ndim, cddp_dtype_name[x->dtype]);
        return -1;
    }
    for (int i = 1; i < A_BS; i++)
        if (a[i] && a[i]->dtype != x->dtype) {
            PyErr_Format(PyExc_RuntimeError, "_rnn_layer: %s is %s but input is %s",
                         arg_names[i], cddp_dtype_name[a[i]->dtype], cddp_dtype_name[x->dtype]);
            return -1;
        }
    p->mode = mode;
    p->dt = x->dtype;
    p->I = x->shape[x->ndim - 1];
    if (check_shape(a[A_WIH], "w_ih", 2, -1, p->I) < 0 ||
        check_shape(a[A_WHH], "w_hh", 2, a[A_WIH]->shape[0], -1) < 0)
        return -1;
    p->H = a[A_WIH]->shape[0] / k;
    p->P = a[A_WHH]->shape[1];
    p->proj = a[A_WHR] != NULL;
    if (a[A_WIH]->shape[0] % k || p->H < 1 || (!p->proj && p->P != p->H) ||
        ((a[A_WHR] || a[A_C0]) && mode != CDDP_RNN_LSTM)) {
        PyErr_Format(PyExc_RuntimeError, "_rnn_layer: w_ih (%lld rows) and w_hh (%lld columns) "
                     "do not describe a %s layer", (long long)a[A_WIH]->shape[0],
                     (long long)p->P, mode_names[mode]);
        return -1;
    }
    if ((a[A_WHR] && check_shape(a[A_WHR], "w_hr", 2, p->P, p->H) < 0) ||
        (a[A_BIH] && check_shape(a[A_BIH], "b_ih", 1, k * p->H, 0) < 0) ||
        (a[A_BHH] && check_shape(a[A_BHH], "b_hh", 1, k * p->H, 0) < 0))
        return -1;
    p->packed = a[A_BS] != NULL;
    p->R = x->shape[0] * (p->packed ? 1 : x->shape[1]);
    if (p->packed) {
        if (read_batch_sizes(a[A_BS], p->R, p, ibuf) < 0)
            return -1;
    } else {
        p->T = x->shape[0];
        p->N = x->shape[1];
        if (full_batch_sizes(p, ibuf) < 0)
            return -1;
    }
    if ((a[A_H0] && check_shape(a[A_H0], "h0", 2, p->N, p->P) < 0) ||
        (a[A_C0] && check_shape(a[A_C0], "c0", 2, p->N, p->H) < 0))
        return -1;
    /* the workspace and the backward's scratch must stay far from int64 overflow */
    double big = (double)(p->T + 1) * (double)p->N * (double)(p->P + p->H) +
                 (double)p->R * (double)(p->P + 9 * p->H);
    if (big > 1e17) {
        PyErr_SetString(PyExc_MemoryError, "_rnn_layer: the sequence's workspace is too large");
        return -1;
    }
    p->bs = *ibuf;
    p->off = *ibuf + p->T;
    cddp_rnn_plan_layout(p);
    return 0;
}

/* The weights' data pointers and strides (biases already contiguous, or NULL). */
static cddp_rnn_weights weights_of(TensorObject *w_ih, TensorObject *w_hh, TensorObject *w_hr,
                                   TensorObject *b_ih, TensorObject *b_hh)
{
    cddp_rnn_weights w = {
        cddp_data(w_ih), w_ih->strides[0], w_ih->strides[1],
        cddp_data(w_hh), w_hh->strides[0], w_hh->strides[1],
        w_hr ? cddp_data(w_hr) : NULL, w_hr ? w_hr->strides[0] : 0, w_hr ? w_hr->strides[1] : 0,
        b_ih ? cddp_data(b_ih) : NULL, b_hh ? cddp_data(b_hh) : NULL,
    };
    return w;
}

/* ---- backward ------------------------------------------------------------------------- */

/* New contiguous dtype-dt copy of a gradient (or a new reference to it), NULL for NULL. */
static int grad_in(TensorObject *g, cddp_dtype dt, TensorObject **out)
{
    *out = NULL;
    if (!g)
        return 0;
    *out = cddp_tensor_cast_raw(g, dt);
    if (*out && !cddp_is_contiguous(*out))
        Py_SETREF(*out, cddp_tensor_contiguous_raw(*out));
    return *out ? 0 : -1;
}

static void plan_from_node(NodeObject *self, cddp_rnn_plan *p, cddp_dtype dt)
{
    memset(p, 0, sizeof *p);
    p->mode = (cddp_rnn_mode)self->i[0];
    p->dt = dt;
    p->T = self->i[1]; p->N = self->i[2]; p->I = self->i[3]; p->H = self->i[4];
    p->P = self->i[5]; p->R = self->i[6]; p->reverse = (int)self->i[7];
    p->packed = (int)self->i[8]; p->proj = (int)self->i[9];
    p->bs = self->ibuf;
    p->off = self->ibuf + p->T;
    cddp_rnn_plan_layout(p);
}

/* The saved w_hr (node extra) if it is unchanged since the forward. Borrowed; NULL + error. */
static TensorObject *saved_w_hr(NodeObject *self)
{
    TensorObject *w = (TensorObject *)self->extra;
    if (*cddp_version(w) != self->i[10]) {
        PyErr_Format(PyExc_RuntimeError, "one of the variables needed for gradient computation "
                     "has been modified by an inplace operation: [cddp.%s [%lld, %lld]], which "
                     "is saved by %s, is at version %lld; expected version %lld instead.",
                     cddp_dtype_name[w->dtype], (long long)w->shape[0], (long long)w->shape[1],
                     self->name, (long long)*cddp_version(w), (long long)self->i[10]);
        return NULL;
    }
    return w;
}

static int rnn_layer_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *w_ih = cddp_node_saved(self, 1);
    TensorObject *w_hh = cddp_node_saved(self, 2), *ws = cddp_node_saved(self, 3);
    TensorObject *w_hr = NULL, *dy = NULL, *dfin = NULL, *scratch = NULL;
    void *out[A_BS] = {0};
    cddp_rnn_plan p;
    int rc = -1;
    if (!x || !w_ih || !w_hh || !ws || (self->extra && !(w_hr = saved_w_hr(self))))
        return -1;
    plan_from_node(self, &p, x->dtype);
    int gru = p.mode == CDDP_RNN_GRU;
    size_t es = cddp_dtype_size[p.dt];
    int64_t n_dh = p.N * p.P, n_dc = p.N * p.H, n_dg = p.R * p.G;
    int64_t n_dhs = p.proj ? p.R * p.P : 0;
    int64_t n_scr = n_dh + n_dc + n_dg * (gru ? 2 : 1) + n_dhs + (p.proj ? n_dc : 0);
    if (grad_in(gout[0], p.dt, &dy) < 0 || grad_in(gout[1], p.dt, &dfin) < 0)
        goto done;
    for (int e = 0; e < A_BS && e < self->n_next; e++) {
        if (!self->next[e].node)
            continue;
        gin[e] = cddp_tensor_new(p.dt, self->meta[e].ndim, self->meta[e].shape, 0);
        if (!gin[e])
            goto done;
        out[e] = cddp_data(gin[e]);
    }
    /* scratch: dh (N, P), dc (N, H), dgi (R, G), [dgh (R, G)], [dhs (R, P), dhraw (N, H)] */
    scratch = cddp_tensor_new(p.dt, 1, &n_scr, 0);
    if (!scratch)
        goto done;
    char *dh = cddp_data(scratch), *dc = dh + n_dh * es, *dgi = dc + n_dc * es;
    char *dgh = gru ? dgi + n_dg * es : NULL, *dhs = dgi + n_dg * (gru ? 2 : 1) * es;
    char *dhraw = p.proj ? dhs + n_dhs * es : NULL;
    cddp_rnn_weights w = weights_of(w_ih, w_hh, w_hr, NULL, NULL);
    cddp_rnn_grads g = {out[A_X], out[A_H0], out[A_C0], out[A_WIH], out[A_WHH],
                        out[A_BIH], out[A_BHH], out[A_WHR]};
    const char *xp = cddp_data(x), *wsp = cddp_data(ws);
    const char *dyp = dy ? cddp_data(dy) : NULL, *dfp = dfin ? cddp_data(dfin) : NULL;
    Py_BEGIN_ALLOW_THREADS
    cddp_rnn_backward(&p, &w, xp, wsp, dyp, dfp, dh, dc, dgi, dgh, p.proj ? dhs : NULL, dhraw,
                      &g);
    Py_END_ALLOW_THREADS
    rc = 0;
done:
    Py_XDECREF(dy);
    Py_XDECREF(dfin);
    Py_XDECREF(scratch);
    return rc;
}

/* ---- forward -------------------------------------------------------------------------- */

/* Record the node (when grad mode is on and an input needs a gradient): outputs y, fin; it
 * takes *ibuf over. 0 / -1. */
static int attach_node(TensorObject **a, cddp_rnn_plan *p, TensorObject *xc, TensorObject *ws,
                       TensorObject *y, TensorObject *fin, int64_t **ibuf)
{
    int err, bad;
    NodeObject *node = cddp_maybe_node(node_names[p->mode], rnn_layer_backward, A_BS, a, &err);
    if (!node)
        return err ? -1 : 0;
    cddp_set_history(y, node, 0);
    cddp_set_history(fin, node, 1);
    int64_t ints[10] = {p->mode, p->T, p->N, p->I, p->H, p->P, p->R, p->reverse, p->packed,
                        p->proj};
    memcpy(node->i, ints, sizeof ints);
    node->ibuf = *ibuf;
    *ibuf = NULL;
    if (a[A_WHR]) {
        node->extra = Py_NewRef(a[A_WHR]);
        node->i[10] = *cddp_version(a[A_WHR]);
    }
    bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, a[A_WIH]) < 0 ||
          cddp_node_save(node, 2, a[A_WHH]) < 0 || cddp_node_save(node, 3, ws) < 0;
    Py_DECREF(node);
    return bad ? -1 : 0;
}

/* Allocate, run the forward without the GIL, record the node. New (y, fin) tuple. */
static PyObject *rnn_run(TensorObject **a, cddp_rnn_plan *p, int64_t **ibuf)
{
    TensorObject *c[A_BS] = {0}, *ws = NULL, *y = NULL, *fin = NULL, *scr = NULL;
    PyObject *res = NULL;
    int64_t yshape[3] = {p->T, p->N, p->P}, fshape[2] = {p->N, p->P};
    int64_t nscr = p->mode == CDDP_RNN_GRU ? p->N * p->G : 0, nfin = p->N * (p->P + p->H);
    for (int i = 0; i < A_BS; i++)        /* contiguous x, states and biases */
        if (a[i] && i != A_WIH && i != A_WHH && i != A_WHR &&
            !(c[i] = cddp_tensor_contiguous_raw(a[i])))
            goto fail;
    if (p->packed) {
        yshape[0] = p->R;
        yshape[1] = p->P;
    }
    ws = cddp_tensor_new(p->dt, 1, &p->ws_numel, 0);
    y = ws ? cddp_tensor_new(p->dt, p->packed ? 2 : 3, yshape, 0) : NULL;
    fin = !y ? NULL : p->mode == CDDP_RNN_LSTM ? cddp_tensor_new(p->dt, 1, &nfin, 0)
                                                : cddp_tensor_new(p->dt, 2, fshape, 0);
    scr = fin ? cddp_tensor_new(p->dt, 1, &nscr, 0) : NULL;
    if (!scr)
        goto fail;
    {
        cddp_rnn_weights w = weights_of(a[A_WIH], a[A_WHH], a[A_WHR], c[A_BIH], c[A_BHH]);
        const char *xp = cddp_data(c[A_X]);
        const char *h0 = c[A_H0] ? cddp_data(c[A_H0]) : NULL;
        const char *c0 = c[A_C0] ? cddp_data(c[A_C0]) : NULL;
        char *wsp = cddp_data(ws), *sp = cddp_data(scr), *yp = cddp_data(y);
        char *fp = cddp_data(fin);
        Py_BEGIN_ALLOW_THREADS
        cddp_rnn_forward(p, &w, xp, h0, c0, wsp, sp, yp, fp);
        Py_END_ALLOW_THREADS
    }
    if (attach_node(a, p, c[A_X], ws, y, fin, ibuf) < 0)
        goto fail;
    res = PyTuple_Pack(2, (PyObject *)y, (PyObject *)fin);
fail:
    for (int i = 0; i < A_BS; i++)
        Py_XDECREF(c[i]);
    Py_XDECREF(ws);
    Py_XDECREF(y);
    Py_XDECREF(fin);
    Py_XDECREF(scr);
    return res;
}

static PyObject *py_rnn_layer(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    /* argument order: mode, x, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, batch_sizes */
    static const int slot[11] = {-1, A_X, A_H0, A_C0, A_WIH, A_WHH, A_BIH, A_BHH, A_WHR, -1, A_BS};
    TensorObject *a[A_N] = {0};
    cddp_rnn_plan p;
    int64_t *ibuf = NULL;
    PyObject *res = NULL;
    memset(&p, 0, sizeof p);
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "_rnn_layer(mode, input, h0, c0, w_ih, w_hh, b_ih, "
                        "b_hh, w_hr, reverse, batch_sizes)");
        return NULL;
    }
    long mode = PyLong_AsLong(args[0]);
    int reverse = PyObject_IsTrue(args[9]);
    if ((mode == -1 && PyErr_Occurred()) || reverse < 0)
        return NULL;
    if (mode < 0 || mode > 3) {
        PyErr_Format(PyExc_ValueError, "_rnn_layer: mode must be 0..3, got %ld", mode);
        return NULL;
    }
    for (int i = 1; i < 11; i++) {
        if (slot[i] < 0 || args[i] == Py_None)
            continue;
        if (!cddp_tensor_check(args[i])) {
            PyErr_Format(PyExc_TypeError, "_rnn_layer: %s must be a Tensor or None, got %s",
                         arg_names[slot[i]], Py_TYPE(args[i])->tp_name);
            return NULL;
        }
        a[slot[i]] = (TensorObject *)args[i];
    }
    if (!a[A_X] || !a[A_WIH] || !a[A_WHH]) {
        PyErr_SetString(PyExc_TypeError, "_rnn_layer: input, w_ih and w_hh are required");
        return NULL;
    }
    p.reverse = reverse;
    if (check_args(a, (int)mode, &p, &ibuf) == 0)
        res = rnn_run(a, &p, &ibuf);
    PyMem_Free(ibuf);
    return res;
}

PyMethodDef cddp_rnn_module_methods[] = {
    {"_rnn_layer", (PyCFunction)(void (*)(void))py_rnn_layer, METH_FASTCALL,
     "_rnn_layer(mode, input, h0, c0, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, batch_sizes): "
     "one recurrent layer in one direction -> (output, final states)"},
    {NULL},
};
