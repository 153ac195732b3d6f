/* nn/conv.c — convolutions with autograd: torch.nn.functional.conv1d / conv2d and
 * conv_transpose1d / conv_transpose2d (their batched cores; cddp/nn/functional.py handles
 * unbatched inputs and padding strings).
 *
 *   _conv(x (N, C, [H,] W), w (OC, C/G, [kh,] kw), b (OC,) | None, stride, padding, dilation,
 *         groups) -> y (N, OC, [OH,] OW)
 *   _conv_transpose(x (N, C, [H,] W), w (C, OC/G, [kh,] kw), b (OC,) | None, stride, padding,
 *                   output_padding, groups, dilation) -> y (N, OC, [OH,] OW)
 *
 * stride, dilation, output_padding: one int per spatial dim; padding: one int per dim
 * (symmetric) or a (left, right) pair per dim, as padding='same' needs for even kernels.
 * Both ops record torch's ConvolutionBackward0 node. 1-D tensors run as 2-D ones with H = 1.
 *
 * A transposed convolution is the adjoint of an ordinary one: conv_transpose(x, w) maps x
 * through the conv whose input is y's shape and whose weight is w (w's layout (C, OC/G, k) IS
 * that conv's (out, in/G, k) layout). So its forward is the conv's input-gradient, its input
 * gradient is the conv's forward, and its weight gradient is the conv's weight gradient with
 * the roles of x and dy exchanged; the engine (nn/conv_engine.c) serves all of them.
 */
#include "nn/conv.h"
#include "amp/amp.h"
#include "ops/shape/shape.h"
#include "module.h"
#include <stdio.h>

typedef struct {
    int nd;                                   /* spatial dims: 1 or 2 */
    int64_t stride[2], pad[2][2], dil[2], outpad[2], groups;
} conv_args;

/* Parse stride/padding/dilation(/output_padding) of an nd-dim convolution. */
static int parse_args(PyObject *stride, PyObject *pad, PyObject *dil, PyObject *outpad,
                      PyObject *groups, int nd, conv_args *a)
{
    int64_t p[4];
    a->nd = nd;
    if (cddp_int_list(stride, nd, "stride", a->stride) < 0 ||
        cddp_int_list(dil, nd, "dilation", a->dil) < 0)
        return -1;
    a->outpad[0] = a->outpad[1] = 0;
    if (outpad && cddp_int_list(outpad, nd, "output_padding", a->outpad) < 0)
        return -1;
    if (PyTuple_Check(pad) && PyTuple_GET_SIZE(pad) == nd &&
        PyTuple_Check(PyTuple_GET_ITEM(pad, 0))) {
        for (int d = 0; d < nd; d++)          /* ((left, right), ...): padding='same' */
            if (cddp_int_list(PyTuple_GET_ITEM(pad, d), 2, "padding", p + 2 * d) < 0)
                return -1;
    } else {
        int64_t q[2];
        if (cddp_int_list(pad, nd, "padding", q) < 0)
            return -1;
        for (int d = 0; d < nd; d++)
            p[2 * d] = p[2 * d + 1] = q[d];
    }
    for (int d = 0; d < nd; d++) {
        a->pad[d][0] = p[2 * d];
        a->pad[d][1] = p[2 * d + 1];
    }
    a->groups = PyLong_AsLongLong(groups);
    if (a->groups == -1 && PyErr_Occurred())
        return -1;
    for (int d = 0; d < nd; d++) {
        if (a->stride[d] <= 0) {
            PyErr_SetString(PyExc_RuntimeError, "non-positive stride is not supported");
            return -1;
        }
        if (a->pad[d][0] < 0 || a->pad[d][1] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "negative padding is not supported");
            return -1;
        }
        if (a->dil[d] <= 0) {
            PyErr_Format(PyExc_RuntimeError, "dilation should be greater than zero, but got "
                         "dilation=%lld", (long long)a->dil[d]);
            return -1;
        }
        if (a->outpad[d] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "negative output_padding is not supported");
            return -1;
        }
    }
    if (a->groups <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "non-positive groups is not supported");
        return -1;
    }
    return 0;
}

/* Shape, dtype and channel checks shared by both ops (torch's messages). in_ch is how many
 * input channels w implies (w.shape[1]*G for a conv, w.shape[0] for a transposed one). */
static int check_tensors(TensorObject *x, TensorObject *w, TensorObject *b, const conv_args *a,
                         int transposed, int64_t out_ch)
{
    char ws[160], xs[160];
    int nd = a->nd;
    if (x->ndim != nd + 2 || w->ndim != nd + 2) {
        PyErr_Format(PyExc_RuntimeError, "conv%s%dd: expected a %dD input (N, C, ...) and a %dD "
                     "weight, but got input of size %s and weight of size %s",
                     transposed ? "_transpose" : "", nd, nd + 2, nd + 2,
                     cddp_shape_str(x->ndim, x->shape, xs, sizeof xs),
                     cddp_shape_str(w->ndim, w->shape, ws, sizeof ws));
        return -1;
    }
    cddp_shape_str(w->ndim, w->shape, ws, sizeof ws);
    cddp_shape_str(x->ndim, x->shape, xs, sizeof xs);
    if (w->shape[0] % a->groups != 0) {
        PyErr_Format(PyExc_RuntimeError, "Given groups=%lld, expected weight to be divisible by "
                     "%lld at dimension 0, but got weight of size %s instead",
                     (long long)a->groups, (long long)a->groups, ws);
        return -1;
    }
    int64_t in_ch = transposed ? w->shape[0] : w->shape[1] * a->groups;
    if (x->shape[1] != in_ch) {
        if (transposed)
            PyErr_Format(PyExc_RuntimeError, "Given transposed=1, weight of size %s, expected "
                         "input%s to have %lld channels, but got %lld channels instead", ws, xs,
                         (long long)in_ch, (long long)x->shape[1]);
        else
            PyErr_Format(PyExc_RuntimeError, "Given groups=%lld, weight of size %s, expected "
                         "input%s to have %lld channels, but got %lld channels instead",
                         (long long)a->groups, ws, xs, (long long)in_ch, (long long)x->shape[1]);
        return -1;
    }
    if (b && (b->ndim != 1 || b->shape[0] != out_ch)) {
        char bs[160];
        PyErr_Format(PyExc_RuntimeError, "Given weight of size %s, expected bias to be "
                     "1-dimensional with %lld elements, but got bias of size %s instead", ws,
                     (long long)out_ch, cddp_shape_str(b->ndim, b->shape, bs, sizeof bs));
        return -1;
    }
    if (!cddp_is_floating(x->dtype) || x->dtype != w->dtype || (b && b->dtype != x->dtype)) {
        TensorObject *other = x->dtype != w->dtype ? w : (b ? b : w);
        PyErr_Format(PyExc_RuntimeError, "conv%s%dd: expected input, weight and bias of one "
                     "floating dtype (float32 or float64), but got %s input and %s %s",
                     transposed ? "_transpose" : "", nd, cddp_dtype_name[x->dtype],
                     cddp_dtype_name[other->dtype], other == w ? "weight" : "bias");
        return -1;
    }
    return 0;
}

/* Set by narrow_call while its float32 copies of bfloat16 tensors run through a body, so the
 * engine may multiply them on the bf16 kernel. Per thread: the engine runs without the GIL,
 * and another thread's float32 conv may start meanwhile. */
static _Thread_local int t_bf16_values;

/* The engine's geometry from a conv's input (N, C, H, W) and weight, its arguments and its
 * output plane (OH, OW). 1-D: H = OH = kh = 1. */
static void make_geom(cddp_conv *cv, cddp_dtype dt, const int64_t *in, int64_t OC,
                      const int64_t *wshape, const conv_args *a, int64_t OH, int64_t OW)
{
    int two = a->nd == 2;
    cv->dt = dt;
    cv->N = in[0];
    cv->C = in[1];
    cv->OC = OC;
    cv->G = a->groups;
    cv->win = (cddp_win2d){
        .C = in[1] / a->groups, .H = two ? in[2] : 1, .W = in[a->nd + 1], .OH = OH, .OW = OW,
        .kh = two ? wshape[2] : 1, .kw = wshape[a->nd + 1],
        .sh = two ? a->stride[0] : 1, .sw = a->stride[a->nd - 1],
        .ph = two ? a->pad[0][0] : 0, .pw = a->pad[a->nd - 1][0],
        .dh = two ? a->dil[0] : 1, .dw = a->dil[a->nd - 1]};
    cv->bf16 = t_bf16_values;
    t_bf16_values = 0;                 /* consumed here: convs that run later on this
                                          thread (forward hooks, nested calls) see 0 */
}

/* "a x b" (2-D) or "a" (1-D), as torch prints per-channel sizes. */
static const char *dims_str(int nd, const int64_t *v, char *buf, size_t len)
{
    if (nd == 2)
        snprintf(buf, len, "%lld x %lld", (long long)v[0], (long long)v[1]);
    else
        snprintf(buf, len, "%lld", (long long)v[0]);
    return buf;
}

/* The node keeps the geometry in i[]: N C OC G, the window (13 values), transposed, bf16. */
static void geom_store(NodeObject *node, const cddp_conv *cv, int transposed)
{
    const cddp_win2d *g = &cv->win;
    int64_t v[19] = {cv->N, cv->C, cv->OC, cv->G, g->C, g->H, g->W, g->OH, g->OW, g->kh, g->kw,
                     g->sh, g->sw, g->ph, g->pw, g->dh, g->dw, transposed, cv->bf16};
    for (int k = 0; k < 19; k++)
        node->i[k] = v[k];
}

static int geom_load(NodeObject *node, cddp_conv *cv, cddp_dtype dt)
{
    const int64_t *v = node->i;
    cv->dt = dt;
    cv->N = v[0];
    cv->C = v[1];
    cv->OC = v[2];
    cv->G = v[3];
    cv->win = (cddp_win2d){.C = v[4], .H = v[5], .W = v[6], .OH = v[7], .OW = v[8], .kh = v[9],
                           .kw = v[10], .sh = v[11], .sw = v[12], .ph = v[13], .pw = v[14],
                           .dh = v[15], .dw = v[16]};
    cv->bf16 = (int)v[18];
    return (int)v[17];
}

/* ConvolutionBackward0. Saved: x, w as the caller gave them (torch saves its inputs, so a
 * later write through .data reaches the backward, as Tacotron2's masking does), made
 * contiguous here. Plain conv: dx, dw from the engine's backward, db = channel sums of dy.
 * Transposed: dx = conv(dy), dw = the conv's weight gradient with x and dy exchanged, db =
 * channel sums of dy. */
static int conv_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *xs = cddp_node_saved(self, 0), *ws = cddp_node_saved(self, 1), *gy = NULL;
    TensorObject *x = NULL, *w = NULL;
    cddp_conv cv;
    int rc = -1, err = 0;
    if (!xs || !ws)
        return -1;
    if (!gout[0])
        return 0;
    x = cddp_tensor_contiguous_raw(xs);
    w = x ? cddp_tensor_contiguous_raw(ws) : NULL;
    if (!w)
        goto done;
    int transposed = geom_load(self, &cv, x->dtype);
    gy = cddp_tensor_cast_raw(gout[0], x->dtype);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        goto done;
    for (int k = 0; k < self->n_next; k++)
        if (self->next[k].node) {
            if (!(gin[k] = cddp_tensor_new(x->dtype, self->meta[k].ndim, self->meta[k].shape, 0)))
                goto done;
        }
    void *dx = gin[0] ? cddp_data(gin[0]) : NULL, *dw = gin[1] ? cddp_data(gin[1]) : NULL;
    const void *xp = cddp_data(x), *wp = cddp_data(w), *dy = cddp_data(gy);
    Py_BEGIN_ALLOW_THREADS
    if (!transposed) {
        if (dx || dw)
            err = cddp_conv_backward(&cv, xp, dy, wp, dx, dw);
        if (self->n_next > 2 && gin[2])
            cddp_channel_sum(cv.dt, dy, cv.N, cv.OC, cv.win.OH * cv.win.OW, cddp_data(gin[2]));
    } else {
        if (dx)
            err = cddp_conv_forward(&cv, dy, wp, NULL, dx);
        if (dw && !err)
            err = cddp_conv_backward(&cv, dy, xp, wp, NULL, dw);
        if (self->n_next > 2 && gin[2])
            cddp_channel_sum(cv.dt, dy, cv.N, cv.C, cv.win.H * cv.win.W, cddp_data(gin[2]));
    }
    Py_END_ALLOW_THREADS
    if (err) {
        PyErr_NoMemory();
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(gy);
    Py_XDECREF(x);
    Py_XDECREF(w);
    return rc;
}

/* Record the node of y (the forward is done): x, w are the caller's tensors, its edges and
 * what it saves. */
static PyObject *finish(TensorObject *x, TensorObject *w, TensorObject *b, TensorObject *y,
                        const cddp_conv *cv, int transposed)
{
    int err;
    TensorObject *ins[3] = {x, w, b};
    NodeObject *node = cddp_maybe_node("ConvolutionBackward0", conv_backward, b ? 3 : 2, ins,
                                       &err);
    if (err)
        goto fail;
    if (node) {
        cddp_set_history(y, node, 0);
        geom_store(node, cv, transposed);
        int bad = cddp_node_save(node, 0, x) < 0 || cddp_node_save(node, 1, w) < 0;
        Py_DECREF(node);
        if (bad)
            goto fail;
    }
    return (PyObject *)y;
fail:
    Py_DECREF(y);
    return NULL;
}

/* Output spatial size of a conv along one dim, after torch's "kernel larger than input"
 * check; -1 with RuntimeError when the padded input is smaller than the dilated kernel. */
static int conv_out_sizes(const TensorObject *x, const TensorObject *w, const conv_args *a,
                          int64_t *out)
{
    int nd = a->nd, bad = 0;
    int64_t padded[2], kern[2];
    for (int d = 0; d < nd; d++) {
        padded[d] = x->shape[2 + d] + a->pad[d][0] + a->pad[d][1];
        kern[d] = a->dil[d] * (w->shape[2 + d] - 1) + 1;
        bad |= padded[d] < kern[d];
        out[d] = (padded[d] - kern[d]) / a->stride[d] + 1;
    }
    if (!bad)
        return 0;
    char ps[64], ks[64];
    PyErr_Format(PyExc_RuntimeError, "Calculated padded input size per channel: (%s). Kernel "
                 "size: (%s). Kernel size can't be greater than actual input size",
                 dims_str(nd, padded, ps, sizeof ps), dims_str(nd, kern, ks, sizeof ks));
    return -1;
}

/* Allocate y (N, OC, *osz) and run the op: a conv's forward, or a transposed conv's forward
 * (the adjoint conv's input gradient, plus the bias). Records the node. */
static PyObject *conv_run(TensorObject *x, TensorObject *w, TensorObject *b, const conv_args *a,
                          int transposed, const int64_t *osz)
{
    TensorObject *xc = NULL, *wc = NULL, *bc = NULL, *y = NULL;
    cddp_conv cv;
    int nd = a->nd, err;
    int64_t shape[4] = {x->shape[0], transposed ? w->shape[1] * a->groups : w->shape[0]};
    for (int d = 0; d < nd; d++)
        shape[2 + d] = osz[d];
    if (!transposed)
        make_geom(&cv, x->dtype, x->shape, w->shape[0], w->shape, a, nd == 2 ? osz[0] : 1,
                  osz[nd - 1]);
    else                               /* the adjoint conv runs from y's shape to x's */
        make_geom(&cv, x->dtype, shape, w->shape[0], w->shape, a, nd == 2 ? x->shape[2] : 1,
                  x->shape[nd + 1]);
    xc = cddp_tensor_contiguous_raw(x);
    wc = xc ? cddp_tensor_contiguous_raw(w) : NULL;
    bc = wc && b ? cddp_tensor_contiguous_raw(b) : NULL;
    y = wc && (!b || bc) ? cddp_tensor_new(x->dtype, nd + 2, shape, 0) : NULL;
    if (!y)
        goto fail;
    const void *xp = cddp_data(xc), *wp = cddp_data(wc), *bp = bc ? cddp_data(bc) : NULL;
    void *yp = cddp_data(y);
    Py_BEGIN_ALLOW_THREADS
    if (!transposed) {
        err = cddp_conv_forward(&cv, xp, wp, bp, yp);
    } else {
        err = cddp_conv_backward(&cv, NULL, xp, wp, yp, NULL);
        if (!err && bp)
            cddp_add_channel_bias(cv.dt, yp, cv.N, cv.C, cv.win.H * cv.win.W, bp);
    }
    Py_END_ALLOW_THREADS
    if (err) {
        PyErr_NoMemory();
        goto fail;
    }
    PyObject *res = finish(x, w, b, y, &cv, transposed);
    Py_DECREF(xc);
    Py_DECREF(wc);
    Py_XDECREF(bc);
    return res;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(wc);
    Py_XDECREF(bc);
    Py_XDECREF(y);
    return NULL;
}

/* _conv(input, weight, bias, stride, padding, dilation, groups) */
static PyObject *conv_body(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *w, *b;
    conv_args a;
    int64_t osz[2];
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "_conv(input, weight, bias, stride, padding, dilation, "
                        "groups)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "conv", "input", 0)) ||
        !(w = cddp_tensor_arg(args, 1, "conv", "weight", 0)) ||
        !(b = cddp_tensor_arg(args, 2, "conv", "bias", 1)))
        return NULL;
    b = (PyObject *)b == Py_None ? NULL : b;
    if (parse_args(args[3], args[4], args[5], NULL, args[6], w->ndim == 3 ? 1 : 2, &a) < 0 ||
        check_tensors(x, w, b, &a, 0, w->shape[0]) < 0 || conv_out_sizes(x, w, &a, osz) < 0)
        return NULL;
    return conv_run(x, w, b, &a, 0, osz);
}

/* Output size of a transposed conv: (in-1)*s - pl - pr + d*(k-1) + output_padding + 1, after
 * torch's output_padding < max(stride, dilation) rule. */
static int convt_out_sizes(const TensorObject *x, const TensorObject *w, const conv_args *a,
                           int64_t *out)
{
    int nd = a->nd, bad = 0;
    for (int d = 0; d < nd; d++)
        if (a->outpad[d] >= a->stride[d] && a->outpad[d] >= a->dil[d]) {
            int h = nd == 2;
            PyErr_Format(PyExc_RuntimeError, "output padding must be smaller than either stride "
                         "or dilation, but got output_padding_height: %lld output_padding_width: "
                         "%lld stride_height: %lld stride_width: %lld dilation_height: %lld "
                         "dilation_width: %lld", (long long)(h ? a->outpad[0] : 0),
                         (long long)a->outpad[nd - 1], (long long)(h ? a->stride[0] : 1),
                         (long long)a->stride[nd - 1], (long long)(h ? a->dil[0] : 1),
                         (long long)a->dil[nd - 1]);
            return -1;
        }
    for (int d = 0; d < nd; d++) {
        out[d] = (x->shape[2 + d] - 1) * a->stride[d] - a->pad[d][0] - a->pad[d][1] +
                 a->dil[d] * (w->shape[2 + d] - 1) + a->outpad[d] + 1;
        bad |= out[d] <= 0;
    }
    if (bad) {
        char is[64], os[64];
        PyErr_Format(PyExc_RuntimeError, "Given input size per channel: (%s). Calculated output "
                     "size per channel: (%s). Output size is too small",
                     dims_str(nd, x->shape + 2, is, sizeof is), dims_str(nd, out, os, sizeof os));
        return -1;
    }
    return 0;
}

/* _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation) */
static PyObject *convt_body(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *w, *b;
    conv_args a;
    int64_t osz[2];
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "_conv_transpose(input, weight, bias, stride, padding, "
                        "output_padding, groups, dilation)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "conv_transpose", "input", 0)) ||
        !(w = cddp_tensor_arg(args, 1, "conv_transpose", "weight", 0)) ||
        !(b = cddp_tensor_arg(args, 2, "conv_transpose", "bias", 1)))
        return NULL;
    b = (PyObject *)b == Py_None ? NULL : b;
    if (parse_args(args[3], args[4], args[7], args[5], args[6], w->ndim == 3 ? 1 : 2, &a) < 0 ||
        check_tensors(x, w, b, &a, 1, w->ndim >= 2 ? w->shape[1] * a.groups : 0) < 0 ||
        convt_out_sizes(x, w, &a, osz) < 0)
        return NULL;
    return conv_run(x, w, b, &a, 1, osz);
}

/* float16/bfloat16 (input, weight and bias all of it): the float32 engine on float32 copies,
 * the result rounded once to the dtype, as torch's CPU convolutions accumulate these dtypes
 * in float32. The casts carry history (ToCopyBackward0), so gradients come back in each
 * tensor's own dtype — and for bfloat16 every GEMM operand of the forward and the backward
 * holds bf16 values (the copies, and output gradients that are casts of bf16 ones), which is
 * what lets the engine use the bf16 kernel (cddp_conv.bf16). Mixed dtypes go to the body
 * unchanged, which refuses them. */
static PyObject *narrow_call(PyObject *(*body)(PyObject *, PyObject *const *, Py_ssize_t),
                             PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *conv[8] = {NULL}, *y = NULL, *out = NULL;
    cddp_dtype dt;
    if (nargs < 3 || nargs > 8 || !cddp_tensor_check(args[0]) || !cddp_tensor_check(args[1]))
        return body(m, args, nargs);
    dt = ((TensorObject *)args[0])->dtype;
    if ((dt != CDDP_FLOAT16 && dt != CDDP_BFLOAT16) || ((TensorObject *)args[1])->dtype != dt ||
        (args[2] != Py_None && (!cddp_tensor_check(args[2]) ||
                                ((TensorObject *)args[2])->dtype != dt)))
        return body(m, args, nargs);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        conv[i] = i < 3 && args[i] != Py_None
                      ? cddp_shape_to_dtype((TensorObject *)args[i], CDDP_FLOAT32)
                      : (Py_INCREF(args[i]), args[i]);
        if (!conv[i])
            goto done;
    }
    t_bf16_values = dt == CDDP_BFLOAT16;
    y = body(m, conv, nargs);
    t_bf16_values = 0;
    if (y)
        out = cddp_shape_to_dtype((TensorObject *)y, dt);
done:
    for (Py_ssize_t i = 0; i < nargs; i++)
        Py_XDECREF(conv[i]);
    Py_XDECREF(y);
    return out;
}

static PyObject *conv_kw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    (void)kw;
    return narrow_call(conv_body, m, args, nargs);
}

static PyObject *convt_kw(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    (void)kw;
    return narrow_call(convt_body, m, args, nargs);
}

/* Entry points: torch's CPU autocast lists conv1d/2d and conv_transpose1d/2d as
 * lower_precision_fp (their float32 tensors cast to the autocast dtype first). */
static PyObject *py_conv(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, conv_kw, m, args, nargs, NULL);
    return conv_kw(m, args, nargs, NULL);
}

static PyObject *py_conv_transpose(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    if (CDDP_AUTOCAST_ON())
        return cddp_autocast_fastcall(CDDP_AMP_LOWER, convt_kw, m, args, nargs, NULL);
    return convt_kw(m, args, nargs, NULL);
}

/* _conv_cols_budget(elems=0) -> the previous budget (elems > 0 sets a new one): tests use it
 * to reach the engine's multi-chunk paths with small tensors. */
static PyObject *py_conv_cols_budget(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    int64_t v = nargs > 0 ? PyLong_AsLongLong(args[0]) : 0;
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(cddp_conv_cols_budget(v));
}

PyMethodDef cddp_conv_module_methods[] = {
    {"_conv_cols_budget", (PyCFunction)(void (*)(void))py_conv_cols_budget, METH_FASTCALL,
     "_conv_cols_budget(elems=0): the conv engine's column-buffer budget (test knob)"},
    {"_conv", (PyCFunction)(void (*)(void))py_conv, METH_FASTCALL,
     "_conv(input, weight, bias, stride, padding, dilation, groups): batched conv1d/conv2d"},
    {"_conv_transpose", (PyCFunction)(void (*)(void))py_conv_transpose, METH_FASTCALL,
     "_conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)"},
    {NULL},
};
