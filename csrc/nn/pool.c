/* nn/pool.c — max and average pooling over image planes with autograd:
 * torch.nn.functional.max_pool2d (return_indices) / avg_pool2d; the 1-D ones run here with
 * H = 1 (cddp/nn/functional.py adds and removes that dim).
 *
 *   _max_pool2d(x (*, H, W), kernel, stride, padding, dilation, ceil_mode)
 *       -> (y (*, OH, OW), indices (*, OH, OW) int64: flat h*W + w inside the plane)
 *   _avg_pool2d(x (*, H, W), kernel, stride, padding, ceil_mode, count_include_pad,
 *               divisor_override (0 = none)) -> y (*, OH, OW)
 *   _adaptive_avg_pool2d(x (*, H, W), (OH, OW)) -> y (*, OH, OW)
 *   _adaptive_max_pool2d(x (*, H, W), (OH, OW)) -> (y, indices)
 *
 * Adaptive windows: rows [floor(oh*H/OH), ceil((oh+1)*H/OH)), likewise columns, so
 * neighbouring windows overlap when OH does not divide H (torch's start_index/end_index).
 *
 * x is 3-D (C, H, W) or 4-D (N, C, H, W); every leading index is one plane. Output sizes,
 * window bounds, the first-maximum-wins rule with NaN propagation (a NaN is always taken), and
 * the average's divisor follow at::native's CPU kernels exactly, so values and indices equal
 * torch's. Backward: max scatters dy to the saved indices; avg spreads dy / divisor over each
 * window.
 */
#include "nn/conv.h"
#include "module.h"
#include <math.h>
#include <string.h>

typedef struct {
    int64_t planes, H, W, OH, OW;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int count_include_pad;
    int64_t divisor;              /* avg: divisor_override, 0 = none */
} pool2d;

/* torch's pooling_output_shape: floor or ceil division, and in ceil mode the last window must
 * start inside the input or its left padding. */
static int64_t pool_out(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, int ceil_mode)
{
    int64_t num = in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + pad)
        o--;
    return o;
}

/* Parse and check the arguments (torch's messages and order of checks); fills p's window and
 * output size from x. */
static int pool_setup(TensorObject *x, PyObject *const *a, int has_dilation, int ceil_mode,
                      pool2d *p)
{
    int64_t k[2], s[2], pad[2], d[2] = {1, 1};
    char xs[160];
    if (cddp_refuse_narrow(x, "pool2d") < 0)   /* float16/bfloat16 come as float32 (Python) */
        return -1;
    if (cddp_int_list(a[0], 2, "kernel_size", k) < 0 || cddp_int_list(a[1], 2, "stride", s) < 0 ||
        cddp_int_list(a[2], 2, "padding", pad) < 0 ||
        (has_dilation && cddp_int_list(a[3], 2, "dilation", d) < 0))
        return -1;
    if (k[0] <= 0 || k[1] <= 0) {
        PyErr_Format(PyExc_RuntimeError, "kernel size should be greater than zero, but got kH: "
                     "%lld kW: %lld", (long long)k[0], (long long)k[1]);
        return -1;
    }
    if (s[0] == 0 || s[1] == 0) {
        PyErr_SetString(PyExc_RuntimeError, "stride should not be zero");
        return -1;
    }
    if (s[0] < 0 || s[1] < 0) {
        PyErr_Format(PyExc_RuntimeError, "stride should be greater than zero, but got dH: %lld "
                     "dW: %lld", (long long)s[0], (long long)s[1]);
        return -1;
    }
    if (d[0] <= 0 || d[1] <= 0) {
        PyErr_Format(PyExc_RuntimeError, "dilation should be greater than zero, but got "
                     "dilationH: %lld dilationW: %lld", (long long)d[0], (long long)d[1]);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        if (pad[i] < 0) {
            PyErr_Format(PyExc_RuntimeError, "pad must be non-negative, but got pad: %lld",
                         (long long)pad[i]);
            return -1;
        }
        if (pad[i] > ((k[i] - 1) * d[i] + 1) / 2) {
            PyErr_Format(PyExc_RuntimeError, "pad should be at most half of effective kernel "
                         "size, but got pad=%lld, kernel_size=%lld and dilation=%lld",
                         (long long)pad[i], (long long)k[i], (long long)d[i]);
            return -1;
        }
    }
    int nd = x->ndim;
    if ((nd != 3 && nd != 4) || x->shape[nd - 1] == 0 || x->shape[nd - 2] == 0 ||
        (nd == 4 && x->shape[1] == 0)) {
        PyErr_Format(PyExc_RuntimeError, "Expected 3D or 4D (batch mode) tensor with optional 0 "
                     "dim batch size for input, but got:%s",
                     cddp_shape_str(nd, x->shape, xs, sizeof xs));
        return -1;
    }
    if (!cddp_is_floating(x->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "pooling: expected a floating point input (float32 or "
                     "float64), but got %s", cddp_dtype_name[x->dtype]);
        return -1;
    }
    *p = (pool2d){.H = x->shape[nd - 2], .W = x->shape[nd - 1], .kh = k[0], .kw = k[1],
                  .sh = s[0], .sw = s[1], .ph = pad[0], .pw = pad[1], .dh = d[0], .dw = d[1]};
    p->planes = cddp_numel(x) / (p->H * p->W);
    p->OH = pool_out(p->H, k[0], pad[0], s[0], d[0], ceil_mode);
    p->OW = pool_out(p->W, k[1], pad[1], s[1], d[1], ceil_mode);
    if (p->OH < 1 || p->OW < 1) {
        int64_t C = x->shape[nd - 3];
        PyErr_Format(PyExc_RuntimeError, "Given input size: (%lldx%lldx%lld). Calculated output "
                     "size: (%lldx%lldx%lld). Output size is too small", (long long)C,
                     (long long)p->H, (long long)p->W, (long long)C, (long long)p->OH,
                     (long long)p->OW);
        return -1;
    }
    return 0;
}

/* ---- kernels ---------------------------------------------------------------------------- */

/* Windows ow in [lo, hi) whose column ow*s + off lies inside [0, W) (clipped to [0, OW]). */
static void tap_span(int64_t off, int64_t s, int64_t W, int64_t OW, int64_t *lo, int64_t *hi)
{
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = W - off <= 0 ? 0 : (W - off + s - 1) / s;
    *lo = a < OW ? a : OW;
    *hi = b < OW ? b : OW;
    if (*hi < *lo)
        *hi = *lo;
}

/* The first of start, start + d, start + 2d, ... that is >= 0 (a window starting in the
 * padding: its first tap inside the input). */
static int64_t first_tap(int64_t start, int64_t d)
{
    return start >= 0 ? start : start + (-start + d - 1) / d * d;
}

/* Kernel columns j in [*j0, *j1) whose column ow*sw + j*dw - pw is inside [0, W) for some
 * window ow: the others read only padding, so a huge kernel costs only the taps that land. */
static void tap_range(const pool2d *p, int64_t *j0, int64_t *j1)
{
    int64_t lo = p->pw - (p->OW - 1) * p->sw, hi = p->W - 1 + p->pw;   /* bounds of j*dw */
    *j0 = lo <= 0 ? 0 : (lo + p->dw - 1) / p->dw;
    *j1 = hi / p->dw + 1 < p->kw ? hi / p->dw + 1 : p->kw;
    if (*j0 > *j1)
        *j0 = *j1;
}

#define DEFINE_POOL(T, SFX)                                                                    \
/* One tap of one input row against the windows ow in [lo, hi): a NaN always wins, else only  \
 * a strictly larger value (the first maximum stays). Branch-free: the data decides nothing. */\
static inline void max_tap_##SFX(const T *restrict row, int64_t rowbase, int64_t off,           \
                                 int64_t s, int64_t lo, int64_t hi, T *restrict m,              \
                                 int64_t *restrict best)                                        \
{                                                                                              \
    for (int64_t ow = lo; ow < hi; ow++) {                                                     \
        T v = row[ow * s + off];                                                               \
        int up = (v > m[ow]) | (v != v);                                                       \
        m[ow] = up ? v : m[ow];                                                                \
        best[ow] = up ? rowbase + ow * s + off : best[ow];                                     \
    }                                                                                          \
}                                                                                              \
                                                                                               \
/* One output row at a time: each tap is swept across the row's windows, so the inner loop    \
 * runs over ow without a loop-carried dependency (and vectorizes); each window still sees     \
 * its taps in torch's order (window rows, then columns), so ties and NaNs resolve alike. */   \
CDDP_CLONES static void max_fwd_##SFX(const pool2d *p, const T *x, T *y, int64_t *idx)          \
{                                                                                              \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                 \
        for (int64_t oh = 0; oh < p->OH; oh++) {                                               \
            const T *xp = x + pl * p->H * p->W;                                                \
            T *yr = y + (pl * p->OH + oh) * p->OW;                                             \
            int64_t *ir = idx + (pl * p->OH + oh) * p->OW;                                     \
            int64_t h0 = oh * p->sh - p->ph, h1 = h0 + (p->kh - 1) * p->dh + 1;                \
            if (h1 > p->H) h1 = p->H;                                                          \
            h0 = first_tap(h0, p->dh);                                                         \
            for (int64_t ow = 0; ow < p->OW; ow++) {                                           \
                yr[ow] = -INFINITY;                                                            \
                ir[ow] = h0 * p->W + first_tap(ow * p->sw - p->pw, p->dw);                     \
            }                                                                                  \
            int64_t j0, j1;                                                                    \
            tap_range(p, &j0, &j1);                                                            \
            for (int64_t h = h0; h < h1; h += p->dh)                                           \
                for (int64_t j = j0; j < j1; j++) {                                            \
                    int64_t off = j * p->dw - p->pw, lo, hi;                                   \
                    tap_span(off, p->sw, p->W, p->OW, &lo, &hi);                               \
                    max_tap_##SFX(xp + h * p->W, h * p->W, off, p->sw, lo, hi, yr, ir);        \
                }                                                                              \
        }                                                                                      \
}                                                                                              \
                                                                                               \
static void max_bwd_##SFX(const pool2d *p, const T *dy, const int64_t *idx, T *dx)            \
{                                                                                              \
    int64_t HW = p->H * p->W, OHW = p->OH * p->OW;                                             \
    for (int64_t pl = 0; pl < p->planes; pl++)                                                 \
        for (int64_t o = 0; o < OHW; o++) {                                                    \
            int64_t i = idx[pl * OHW + o];                                                     \
            if (i >= 0 && i < HW)                                                              \
                dx[pl * HW + i] += dy[pl * OHW + o];                                           \
        }                                                                                      \
}                                                                                              \
                                                                                               \
/* avg: each window's bounds and divisor; dir 0 forward (y = mean), 1 backward (dx += dy/d) */ \
static void avg_##SFX(const pool2d *p, const T *in, T *out, int dir)                           \
{                                                                                              \
    for (int64_t pl = 0; pl < p->planes; pl++) {                                               \
        const T *xp = dir ? NULL : in + pl * p->H * p->W;                                      \
        T *dxp = dir ? out + pl * p->H * p->W : NULL;                                          \
        for (int64_t oh = 0; oh < p->OH; oh++)                                                 \
            for (int64_t ow = 0; ow < p->OW; ow++) {                                           \
                int64_t h0 = oh * p->sh - p->ph, w0 = ow * p->sw - p->pw;                      \
                int64_t h1 = h0 + p->kh, w1 = w0 + p->kw;                                      \
                if (h1 > p->H + p->ph) h1 = p->H + p->ph;                                      \
                if (w1 > p->W + p->pw) w1 = p->W + p->pw;                                      \
                int64_t pool_size = (h1 - h0) * (w1 - w0);                                     \
                if (h0 < 0) h0 = 0;                                                            \
                if (w0 < 0) w0 = 0;                                                            \
                if (h1 > p->H) h1 = p->H;                                                      \
                if (w1 > p->W) w1 = p->W;                                                      \
                int64_t o = (pl * p->OH + oh) * p->OW + ow;                                    \
                if (h0 >= h1 || w0 >= w1) {                                                    \
                    if (!dir)                                                                  \
                        out[o] = 0;                                                            \
                    continue;                                                                  \
                }                                                                              \
                int64_t div = p->divisor ? p->divisor : p->count_include_pad ? pool_size       \
                              : (h1 - h0) * (w1 - w0);                                         \
                if (dir) {                                                                     \
                    T g = in[o] / (T)div;                                                      \
                    for (int64_t h = h0; h < h1; h++)                                          \
                        for (int64_t w = w0; w < w1; w++)                                      \
                            dxp[h * p->W + w] += g;                                            \
                } else {                                                                       \
                    T s = 0;                                                                   \
                    for (int64_t h = h0; h < h1; h++)                                          \
                        for (int64_t w = w0; w < w1; w++)                                      \
                            s += xp[h * p->W + w];                                             \
                    out[o] = s / (T)div;                                                       \
                }                                                                              \
            }                                                                                  \
    }                                                                                          \
}

DEFINE_POOL(float, f32)
DEFINE_POOL(double, f64)

/* ---- nodes ------------------------------------------------------------------------------ */

static void pool_store(NodeObject *n, const pool2d *p)
{
    int64_t v[15] = {p->planes, p->H, p->W, p->OH, p->OW, p->kh, p->kw, p->sh, p->sw, p->ph,
                     p->pw, p->dh, p->dw, p->count_include_pad, p->divisor};
    memcpy(n->i, v, sizeof v);
}

static void pool_load(NodeObject *n, pool2d *p)
{
    const int64_t *v = n->i;
    *p = (pool2d){.planes = v[0], .H = v[1], .W = v[2], .OH = v[3], .OW = v[4], .kh = v[5],
                  .kw = v[6], .sh = v[7], .sw = v[8], .ph = v[9], .pw = v[10], .dh = v[11],
                  .dw = v[12], .count_include_pad = (int)v[13], .divisor = v[14]};
}

/* Shared backward shape: dy cast to the input's dtype and made contiguous, dx zeroed. */
static int pool_grads(NodeObject *self, TensorObject *gout, TensorObject **gy, TensorObject **dx)
{
    cddp_meta *mt = &self->meta[0];
    *gy = cddp_tensor_cast_raw(gout, mt->dtype);
    if (*gy && !cddp_is_contiguous(*gy))
        Py_SETREF(*gy, cddp_tensor_contiguous_raw(*gy));
    if (!*gy)
        return -1;
    *dx = cddp_tensor_new(mt->dtype, mt->ndim, mt->shape, 1);
    return *dx ? 0 : -1;
}

/* MaxPool2DWithIndicesBackward0: saved indices. */
static int max_pool_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *idx = cddp_node_saved(self, 0), *gy = NULL;
    pool2d p;
    if (!idx)
        return -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    pool_load(self, &p);
    if (pool_grads(self, gout[0], &gy, &gin[0]) < 0) {
        Py_XDECREF(gy);
        return -1;
    }
    const int64_t *ip = (const int64_t *)cddp_data(idx);
    void *dy = cddp_data(gy), *dx = cddp_data(gin[0]);
    Py_BEGIN_ALLOW_THREADS
    if (gy->dtype == CDDP_FLOAT32)
        max_bwd_f32(&p, dy, ip, dx);
    else
        max_bwd_f64(&p, dy, ip, dx);
    Py_END_ALLOW_THREADS
    Py_DECREF(gy);
    return 0;
}

/* AvgPool2DBackward0: geometry only. */
static int avg_pool_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *gy = NULL;
    pool2d p;
    if (!gout[0] || !self->next[0].node)
        return 0;
    pool_load(self, &p);
    if (pool_grads(self, gout[0], &gy, &gin[0]) < 0) {
        Py_XDECREF(gy);
        return -1;
    }
    void *dy = cddp_data(gy), *dx = cddp_data(gin[0]);
    Py_BEGIN_ALLOW_THREADS
    if (gy->dtype == CDDP_FLOAT32)
        avg_f32(&p, dy, dx, 1);
    else
        avg_f64(&p, dy, dx, 1);
    Py_END_ALLOW_THREADS
    Py_DECREF(gy);
    return 0;
}

/* y's shape: x's leading dims, then (OH, OW). */
static void out_shape(const TensorObject *x, const pool2d *p, int64_t *shape)
{
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 2] = p->OH;
    shape[x->ndim - 1] = p->OW;
}

/* Record node `name` on y with p's geometry, saving `keep` (or nothing). */
static int pool_record(TensorObject *x, TensorObject *y, const char *name, cddp_backward_fn fn,
                       const pool2d *p, TensorObject *keep)
{
    int err;
    NodeObject *node = cddp_maybe_node(name, fn, 1, &x, &err);
    if (err)
        return -1;
    if (!node)
        return 0;
    cddp_set_history(y, node, 0);
    pool_store(node, p);
    int bad = keep && cddp_node_save(node, 0, keep) < 0;
    Py_DECREF(node);
    return bad ? -1 : 0;
}

/* _max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode) -> (y, indices) */
static PyObject *py_max_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc = NULL, *y = NULL, *idx = NULL;
    pool2d p;
    int64_t shape[4];
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_max_pool2d(input, kernel_size, stride, padding, "
                        "dilation, ceil_mode)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "max_pool2d", "input", 0)) ||
        pool_setup(x, args + 1, 1, PyObject_IsTrue(args[5]) == 1, &p) < 0)
        return NULL;
    out_shape(x, &p, shape);
    xc = cddp_tensor_contiguous_raw(x);
    y = xc ? cddp_tensor_new(x->dtype, x->ndim, shape, 0) : NULL;
    idx = y ? cddp_tensor_new(CDDP_INT64, x->ndim, shape, 0) : NULL;
    if (!idx)
        goto fail;
    const void *xp = cddp_data(xc);
    void *yp = cddp_data(y);
    int64_t *ip = (int64_t *)cddp_data(idx);
    Py_BEGIN_ALLOW_THREADS
    if (x->dtype == CDDP_FLOAT32)
        max_fwd_f32(&p, xp, yp, ip);
    else
        max_fwd_f64(&p, xp, yp, ip);
    Py_END_ALLOW_THREADS
    if (pool_record(x, y, "MaxPool2DWithIndicesBackward0", max_pool_backward, &p, idx) < 0)
        goto fail;
    Py_DECREF(xc);
    return Py_BuildValue("(NN)", y, idx);
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    Py_XDECREF(idx);
    return NULL;
}

/* _avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
 *             divisor_override) */
static PyObject *py_avg_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc = NULL, *y = NULL;
    pool2d p;
    int64_t shape[4], div = 0;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "_avg_pool2d(input, kernel_size, stride, padding, "
                        "ceil_mode, count_include_pad, divisor_override)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "avg_pool2d", "input", 0)) ||
        pool_setup(x, args + 1, 0, PyObject_IsTrue(args[4]) == 1, &p) < 0)
        return NULL;
    if (args[6] != Py_None) {
        div = PyLong_AsLongLong(args[6]);
        if (div == -1 && PyErr_Occurred())
            return NULL;
        if (div == 0) {
            PyErr_SetString(PyExc_RuntimeError, "divisor must be not zero");
            return NULL;
        }
    }
    p.divisor = div;
    p.count_include_pad = PyObject_IsTrue(args[5]) == 1;
    out_shape(x, &p, shape);
    xc = cddp_tensor_contiguous_raw(x);
    y = xc ? cddp_tensor_new(x->dtype, x->ndim, shape, 0) : NULL;
    if (!y)
        goto fail;
    const void *xp = cddp_data(xc);
    void *yp = cddp_data(y);
    Py_BEGIN_ALLOW_THREADS
    if (x->dtype == CDDP_FLOAT32)
        avg_f32(&p, xp, yp, 0);
    else
        avg_f64(&p, xp, yp, 0);
    Py_END_ALLOW_THREADS
    if (pool_record(x, y, "AvgPool2DBackward0", avg_pool_backward, &p, NULL) < 0)
        goto fail;
    Py_DECREF(xc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    return NULL;
}

/* ---- adaptive pooling ------------------------------------------------------------------- */

static int64_t ad_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
static int64_t ad_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

#define DEFINE_ADAPTIVE(T, SFX)                                                                \
/* mode 0: avg forward, 1: avg backward (in = dy, out = dx +=), 2: max forward (idx).          \
 * hb/wb: [start, end) of each output row / column's window. */                               \
static void adaptive_##SFX(const pool2d *p, const int64_t *hb, const int64_t *wb, const T *in, \
                           T *out, int64_t *idx, int mode)                                     \
{                                                                                              \
    for (int64_t pl = 0; pl < p->planes; pl++) {                                               \
        int64_t base = pl * p->H * p->W;                                                       \
        for (int64_t oh = 0; oh < p->OH; oh++)                                                 \
            for (int64_t ow = 0; ow < p->OW; ow++) {                                           \
                int64_t h0 = hb[2 * oh], h1 = hb[2 * oh + 1];                                  \
                int64_t w0 = wb[2 * ow], w1 = wb[2 * ow + 1];                                  \
                int64_t o = (pl * p->OH + oh) * p->OW + ow;                                    \
                T area = (T)((h1 - h0) * (w1 - w0)), s = 0, m = -INFINITY;                     \
                int64_t best = h0 * p->W + w0;                                                 \
                if (mode == 1) {                                                               \
                    T g = in[o] / area;                                                        \
                    for (int64_t h = h0; h < h1; h++)                                          \
                        for (int64_t w = w0; w < w1; w++)                                      \
                            out[base + h * p->W + w] += g;                                     \
                } else if (mode == 0) {                                                        \
                    for (int64_t h = h0; h < h1; h++)                                          \
                        for (int64_t w = w0; w < w1; w++)                                      \
                            s += in[base + h * p->W + w];                                      \
                    out[o] = s / area;                                                         \
                } else {                                                                       \
                    for (int64_t h = h0; h < h1; h++)                                          \
                        for (int64_t w = w0; w < w1; w++) {                                    \
                            T v = in[base + h * p->W + w];                                     \
                            int up = (v > m) | (v != v);                                       \
                            m = up ? v : m;                                                    \
                            best = up ? h * p->W + w : best;                                   \
                        }                                                                      \
                    out[o] = m;                                                                \
                    idx[o] = best;                                                             \
                }                                                                              \
            }                                                                                  \
    }                                                                                          \
}
DEFINE_ADAPTIVE(float, f32)
DEFINE_ADAPTIVE(double, f64)

/* Window tables, then the kernel without the GIL. -1 with MemoryError. */
static int adaptive_run(cddp_dtype dt, const pool2d *p, const void *in, void *out,
                        int64_t *idx, int mode)
{
    int64_t *hb = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * p->OH + 2 * p->OW + 2));
    if (!hb) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t *wb = hb + 2 * p->OH;
    for (int64_t o = 0; o < p->OH; o++) {
        hb[2 * o] = ad_start(o, p->H, p->OH);
        hb[2 * o + 1] = ad_end(o, p->H, p->OH);
    }
    for (int64_t o = 0; o < p->OW; o++) {
        wb[2 * o] = ad_start(o, p->W, p->OW);
        wb[2 * o + 1] = ad_end(o, p->W, p->OW);
    }
    Py_BEGIN_ALLOW_THREADS
    if (p->OH == p->H && p->OW == p->W && mode != 2) {  /* every window is one element */
        size_t isz = cddp_dtype_size[dt], n = (size_t)(p->planes * p->H * p->W);
        if (mode == 0)
            memcpy(out, in, n * isz);
        else if (dt == CDDP_FLOAT32)
            for (size_t k = 0; k < n; k++)
                ((float *)out)[k] += ((const float *)in)[k];
        else
            for (size_t k = 0; k < n; k++)
                ((double *)out)[k] += ((const double *)in)[k];
    } else if (dt == CDDP_FLOAT32)
        adaptive_f32(p, hb, wb, in, out, idx, mode);
    else
        adaptive_f64(p, hb, wb, in, out, idx, mode);
    Py_END_ALLOW_THREADS
    PyMem_Free(hb);
    return 0;
}

/* AdaptiveAvgPool2DBackward0 */
static int adaptive_avg_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *gy = NULL;
    pool2d p;
    if (!gout[0] || !self->next[0].node)
        return 0;
    pool_load(self, &p);
    if (pool_grads(self, gout[0], &gy, &gin[0]) < 0) {
        Py_XDECREF(gy);
        return -1;
    }
    int rc = adaptive_run(gy->dtype, &p, cddp_data(gy), cddp_data(gin[0]), NULL, 1);
    Py_DECREF(gy);
    return rc;
}

/* Checks of x and output_size (torch's messages); fills p. */
static int adaptive_setup(TensorObject *x, PyObject *osize, const char *fn, pool2d *p)
{
    int64_t o[2];
    char xs[160];
    int nd = x->ndim;
    if (cddp_refuse_narrow(x, fn) < 0 || cddp_int_list(osize, 2, "output_size", o) < 0)
        return -1;
    if (nd != 3 && nd != 4) {
        PyErr_Format(PyExc_RuntimeError, "%s(): Expected 3D or 4D tensor, but got %s", fn,
                     cddp_shape_str(nd, x->shape, xs, sizeof xs));
        return -1;
    }
    for (int d = nd - 3; d < nd; d++)
        if (x->shape[d] == 0) {
            PyErr_Format(PyExc_RuntimeError, "%s(): Expected input to have non-zero size for "
                         "non-batch dimensions, but input has sizes %s with dimension %d being "
                         "empty", fn, cddp_shape_str(nd, x->shape, xs, sizeof xs), d);
            return -1;
        }
    if (o[0] < 0 || o[1] < 0) {
        PyErr_Format(PyExc_RuntimeError, "%s: elements of output_size must be greater than or "
                     "equal to 0 but received {%lld, %lld}", fn, (long long)o[0],
                     (long long)o[1]);
        return -1;
    }
    if (!cddp_is_floating(x->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "%s: expected a floating point input (float32 or "
                     "float64), but got %s", fn, cddp_dtype_name[x->dtype]);
        return -1;
    }
    *p = (pool2d){.H = x->shape[nd - 2], .W = x->shape[nd - 1], .OH = o[0], .OW = o[1]};
    p->planes = cddp_numel(x) / (p->H * p->W);
    return 0;
}

/* _adaptive_avg_pool2d(input, output_size) / _adaptive_max_pool2d(input, output_size) */
static PyObject *adaptive_common(PyObject *const *args, Py_ssize_t nargs, int is_max)
{
    const char *fn = is_max ? "adaptive_max_pool2d" : "adaptive_avg_pool2d";
    TensorObject *x, *xc = NULL, *y = NULL, *idx = NULL;
    pool2d p;
    int64_t shape[4];
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "_%s(input, output_size)", fn);
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, fn, "input", 0)) || adaptive_setup(x, args[1], fn, &p) < 0)
        return NULL;
    out_shape(x, &p, shape);
    xc = cddp_tensor_contiguous_raw(x);
    y = xc ? cddp_tensor_new(x->dtype, x->ndim, shape, 0) : NULL;
    idx = y && is_max ? cddp_tensor_new(CDDP_INT64, x->ndim, shape, 0) : NULL;
    if (!y || (is_max && !idx))
        goto fail;
    const void *xp = cddp_data(xc);
    void *yp = cddp_data(y);
    int64_t *ip = idx ? (int64_t *)cddp_data(idx) : NULL;
    if (adaptive_run(x->dtype, &p, xp, yp, ip, is_max ? 2 : 0) < 0 ||
        pool_record(x, y, is_max ? "AdaptiveMaxPool2DBackward0" : "AdaptiveAvgPool2DBackward0",
                    is_max ? max_pool_backward : adaptive_avg_backward, &p, idx) < 0)
        goto fail;
    Py_DECREF(xc);
    return is_max ? Py_BuildValue("(NN)", y, idx) : (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    Py_XDECREF(idx);
    return NULL;
}

static PyObject *py_adaptive_avg_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    return adaptive_common(args, nargs, 0);
}

static PyObject *py_adaptive_max_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    return adaptive_common(args, nargs, 1);
}

PyMethodDef cddp_pool_module_methods[] = {
    {"_adaptive_avg_pool2d", (PyCFunction)(void (*)(void))py_adaptive_avg_pool2d, METH_FASTCALL,
     "_adaptive_avg_pool2d(input, output_size)"},
    {"_adaptive_max_pool2d", (PyCFunction)(void (*)(void))py_adaptive_max_pool2d, METH_FASTCALL,
     "_adaptive_max_pool2d(input, output_size) -> (out, indices)"},
    {"_max_pool2d", (PyCFunction)(void (*)(void))py_max_pool2d, METH_FASTCALL,
     "_max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)"},
    {"_avg_pool2d", (PyCFunction)(void (*)(void))py_avg_pool2d, METH_FASTCALL,
     "_avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad, "
     "divisor_override)"},
    {NULL},
};
