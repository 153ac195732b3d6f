/* nn/fold.c — torch.nn.functional.unfold (im2col) and fold (col2im) with autograd; each is the
 * other's backward. cddp/nn/functional.py adds and removes the batch dim of unbatched inputs.
 *
 *   _unfold(x (N, C, H, W), kernel, dilation, padding, stride) -> cols (N, C*kh*kw, L)
 *   _fold(cols (N, C*kh*kw, L), output_size, kernel, dilation, padding, stride) -> y (N, C, H, W)
 *
 * L = OH*OW windows, OH = (H + 2*ph - dh*(kh-1) - 1)/sh + 1 (likewise OW). Row (c, i, j) of
 * cols holds x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw] for every window, zeros where the
 * window reads padding (nn/im2col.c); fold sums every entry back to where unfold read it.
 *
 * Mirrors: at::im2col / at::col2im (their argument checks and messages).
 */
#include "nn/conv.h"
#include "module.h"

/* i[]: N C H W OH OW kh kw sh sw ph pw dh dw — enough to run either direction. */
typedef struct {
    int64_t N, C;
    cddp_win2d g;
} foldgeom;

static void geom_store(NodeObject *n, const foldgeom *f)
{
    const cddp_win2d *g = &f->g;
    int64_t v[14] = {f->N, f->C, g->H, g->W, g->OH, g->OW, g->kh, g->kw, g->sh, g->sw, g->ph,
                     g->pw, g->dh, g->dw};
    for (int k = 0; k < 14; k++)
        n->i[k] = v[k];
}

static void geom_load(NodeObject *n, foldgeom *f)
{
    const int64_t *v = n->i;
    f->N = v[0];
    f->C = v[1];
    f->g = (cddp_win2d){.C = v[1], .H = v[2], .W = v[3], .OH = v[4], .OW = v[5], .kh = v[6],
                        .kw = v[7], .sh = v[8], .sw = v[9], .ph = v[10], .pw = v[11],
                        .dh = v[12], .dw = v[13]};
}

/* cols (N, K, L) from x (N, C, H, W) when to_cols, else x (zeroed by the caller) += fold of
 * cols. Both buffers contiguous. */
static void fold_run(cddp_dtype dt, const foldgeom *f, char *x, char *cols, int to_cols)
{
    size_t isz = cddp_dtype_size[dt];
    int64_t L = f->g.OH * f->g.OW, K = f->C * f->g.kh * f->g.kw, HW = f->g.H * f->g.W;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t n = 0; n < f->N; n++) {
        char *xs = x + (size_t)(n * f->C * HW) * isz, *cs = cols + (size_t)(n * K * L) * isz;
        if (to_cols)
            cddp_im2col(dt, xs, &f->g, cs, L);
        else
            cddp_col2im(dt, cs, L, &f->g, xs);
    }
    Py_END_ALLOW_THREADS
}

/* Im2ColBackward0 (dx = fold(dcols)) and Col2ImBackward0 (dcols = unfold(dy)); i[14] = 1 for
 * the former. */
static int fold_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *mt = &self->meta[0];
    TensorObject *gy;
    foldgeom f;
    int is_unfold = (int)self->i[14];
    if (!gout[0] || !self->next[0].node)
        return 0;
    geom_load(self, &f);
    gy = cddp_tensor_cast_raw(gout[0], mt->dtype);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        return -1;
    if (!(gin[0] = cddp_tensor_new(mt->dtype, mt->ndim, mt->shape, is_unfold))) {
        Py_DECREF(gy);
        return -1;
    }
    if (is_unfold)
        fold_run(mt->dtype, &f, cddp_data(gin[0]), cddp_data(gy), 0);
    else
        fold_run(mt->dtype, &f, cddp_data(gy), cddp_data(gin[0]), 1);
    Py_DECREF(gy);
    return 0;
}

/* kernel, dilation, padding, stride from args[0..3]; torch's checks. */
static int parse_window(PyObject *const *a, cddp_win2d *g)
{
    int64_t k[2], d[2], p[2], s[2];
    if (cddp_int_list(a[0], 2, "kernel_size", k) < 0 || cddp_int_list(a[1], 2, "dilation", d) < 0 ||
        cddp_int_list(a[2], 2, "padding", p) < 0 || cddp_int_list(a[3], 2, "stride", s) < 0)
        return -1;
    static const char *const msg[4] = {
        "kernel size should be greater than zero, but got kernel_height: %lld kernel_width: %lld",
        "stride should be greater than zero, but got stride_height: %lld stride_width: %lld",
        "dilation should be greater than zero, but got dilation_height: %lld dilation_width: %lld",
        "padding should be non-negative, but got pad_height: %lld pad_width: %lld"};
    const int64_t *vals[4] = {k, s, d, p};
    for (int t = 0; t < 4; t++) {
        int64_t lo = t == 3 ? 0 : 1;
        if (vals[t][0] < lo || vals[t][1] < lo) {
            PyErr_Format(PyExc_RuntimeError, msg[t], (long long)vals[t][0], (long long)vals[t][1]);
            return -1;
        }
    }
    *g = (cddp_win2d){.kh = k[0], .kw = k[1], .dh = d[0], .dw = d[1], .ph = p[0], .pw = p[1],
                      .sh = s[0], .sw = s[1]};
    return 0;
}

/* Windows along one dim; -1 when an intermediate overflows int64 (absurd sizes). */
static int64_t blocks(int64_t in, int64_t k, int64_t p, int64_t d, int64_t s)
{
    int64_t pp, reach, span;
    if (__builtin_mul_overflow(p, 2, &pp) || __builtin_add_overflow(in, pp, &span) ||
        __builtin_mul_overflow(d, k - 1, &reach) || __builtin_add_overflow(reach, 1, &reach) ||
        __builtin_sub_overflow(span, reach, &span))
        return -1;
    return span < 0 ? 0 : span / s + 1;
}

/* *out = a * b * c; RuntimeError naming `fn` when it does not fit int64. */
static int product3(const char *fn, int64_t a, int64_t b, int64_t c, int64_t *out)
{
    if (__builtin_mul_overflow(a, b, out) || __builtin_mul_overflow(*out, c, out)) {
        PyErr_Format(PyExc_RuntimeError, "%s: the sizes (%lld x %lld x %lld) overflow int64",
                     fn, (long long)a, (long long)b, (long long)c);
        return -1;
    }
    return 0;
}

/* Record the node (is_unfold selects the name and the direction of its backward). */
static PyObject *fold_finish(TensorObject *in, TensorObject *out, const foldgeom *f,
                             int is_unfold)
{
    int err;
    NodeObject *node = cddp_maybe_node(is_unfold ? "Im2ColBackward0" : "Col2ImBackward0",
                                       fold_backward, 1, &in, &err);
    if (err) {
        Py_DECREF(out);
        return NULL;
    }
    if (node) {
        cddp_set_history(out, node, 0);
        geom_store(node, f);
        node->i[14] = is_unfold;
        Py_DECREF(node);
    }
    return (PyObject *)out;
}

/* _unfold(input, kernel_size, dilation, padding, stride) */
static PyObject *py_unfold(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc, *y;
    foldgeom f;
    char xs[160];
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_unfold(input, kernel_size, dilation, padding, stride)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "unfold", "input", 0)) ||
        cddp_refuse_narrow(x, "unfold") < 0 || parse_window(args + 1, &f.g) < 0)
        return NULL;
    if (x->ndim != 4 || x->shape[1] == 0 || x->shape[2] == 0 || x->shape[3] == 0) {
        PyErr_Format(PyExc_RuntimeError, "Expected 3D or 4D (batch mode) tensor with optional 0 "
                     "dim batch size for input, but got: %s",
                     cddp_shape_str(x->ndim, x->shape, xs, sizeof xs));
        return NULL;
    }
    f.N = x->shape[0];
    f.C = f.g.C = x->shape[1];
    f.g.H = x->shape[2];
    f.g.W = x->shape[3];
    f.g.OH = blocks(f.g.H, f.g.kh, f.g.ph, f.g.dh, f.g.sh);
    f.g.OW = blocks(f.g.W, f.g.kw, f.g.pw, f.g.dw, f.g.sw);
    int64_t K, L;
    if (f.g.OH < 0 || f.g.OW < 0 || product3("unfold", f.C, f.g.kh, f.g.kw, &K) < 0 ||
        product3("unfold", f.g.OH, f.g.OW, 1, &L) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "unfold: the window sizes overflow int64");
        return NULL;
    }
    if (f.g.OH < 1 || f.g.OW < 1) {
        PyErr_Format(PyExc_RuntimeError, "Given input with spatial size (%lld, %lld), "
                     "kernel_size=(%lld, %lld), dilation=(%lld, %lld), padding=(%lld, %lld), "
                     "calculated shape of the array of sliding blocks as (%lld, %lld), but its "
                     "components must be at least one.", (long long)f.g.H, (long long)f.g.W,
                     (long long)f.g.kh, (long long)f.g.kw, (long long)f.g.dh, (long long)f.g.dw,
                     (long long)f.g.ph, (long long)f.g.pw, (long long)f.g.OH, (long long)f.g.OW);
        return NULL;
    }
    if (!(xc = cddp_float_contiguous(x, "unfold")))
        return NULL;
    int64_t shape[3] = {f.N, K, L};
    if (!(y = cddp_tensor_new(x->dtype, 3, shape, 0))) {
        Py_DECREF(xc);
        return NULL;
    }
    fold_run(x->dtype, &f, cddp_data(xc), cddp_data(y), 1);
    Py_DECREF(xc);
    return fold_finish(x, y, &f, 1);
}

/* _fold(input, output_size, kernel_size, dilation, padding, stride) */
static PyObject *py_fold(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc, *y;
    foldgeom f;
    int64_t osz[2];
    char xs[160];
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "_fold(input, output_size, kernel_size, dilation, "
                        "padding, stride)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "fold", "input", 0)) ||
        cddp_refuse_narrow(x, "fold") < 0 ||
        cddp_int_list(args[1], 2, "output_size", osz) < 0 || parse_window(args + 2, &f.g) < 0)
        return NULL;
    if (x->ndim != 3 || x->shape[1] == 0 || x->shape[2] == 0) {
        PyErr_Format(PyExc_RuntimeError, "Expected 2D or 3D (batch mode) tensor with optional 0 "
                     "dim batch size for input, but got: %s",
                     cddp_shape_str(x->ndim, x->shape, xs, sizeof xs));
        return NULL;
    }
    int64_t kk, L;
    if (product3("fold", f.g.kh, f.g.kw, 1, &kk) < 0)
        return NULL;
    if (x->shape[1] % kk != 0) {
        PyErr_Format(PyExc_RuntimeError, "Expected size of input's dimension 1 to be divisible "
                     "by the product of kernel_size, but got input.size(1)=%lld and "
                     "kernel_size=(%lld, %lld).", (long long)x->shape[1], (long long)f.g.kh,
                     (long long)f.g.kw);
        return NULL;
    }
    f.N = x->shape[0];
    f.C = f.g.C = x->shape[1] / kk;
    f.g.H = osz[0];
    f.g.W = osz[1];
    f.g.OH = blocks(osz[0], f.g.kh, f.g.ph, f.g.dh, f.g.sh);
    f.g.OW = blocks(osz[1], f.g.kw, f.g.pw, f.g.dw, f.g.sw);
    if (f.g.OH < 0 || f.g.OW < 0 || product3("fold", f.g.OH, f.g.OW, 1, &L) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "fold: the window sizes overflow int64");
        return NULL;
    }
    if (osz[0] < 1 || osz[1] < 1 || L != x->shape[2] || f.g.OH < 1 || f.g.OW < 1) {
        PyErr_Format(PyExc_RuntimeError, "Given output_size=(%lld, %lld), kernel_size=(%lld, "
                     "%lld), dilation=(%lld, %lld), padding=(%lld, %lld), stride=(%lld, %lld), "
                     "expected size of input's dimension 2 to match the calculated number of "
                     "sliding blocks %lld * %lld = %lld, but got input.size(2)=%lld.",
                     (long long)osz[0], (long long)osz[1], (long long)f.g.kh, (long long)f.g.kw,
                     (long long)f.g.dh, (long long)f.g.dw, (long long)f.g.ph, (long long)f.g.pw,
                     (long long)f.g.sh, (long long)f.g.sw, (long long)f.g.OH, (long long)f.g.OW,
                     (long long)L, (long long)x->shape[2]);
        return NULL;
    }
    if (!(xc = cddp_float_contiguous(x, "fold")))
        return NULL;
    int64_t shape[4] = {f.N, f.C, osz[0], osz[1]};
    if (!(y = cddp_tensor_new(x->dtype, 4, shape, 1))) {
        Py_DECREF(xc);
        return NULL;
    }
    fold_run(x->dtype, &f, cddp_data(y), cddp_data(xc), 0);
    Py_DECREF(xc);
    return fold_finish(x, y, &f, 0);
}

PyMethodDef cddp_fold_module_methods[] = {
    {"_unfold", (PyCFunction)(void (*)(void))py_unfold, METH_FASTCALL,
     "_unfold(input, kernel_size, dilation, padding, stride) -> (N, C*kh*kw, L)"},
    {"_fold", (PyCFunction)(void (*)(void))py_fold, METH_FASTCALL,
     "_fold(input, output_size, kernel_size, dilation, padding, stride) -> (N, C, H, W)"},
    {NULL},
};
