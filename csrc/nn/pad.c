/* nn/pad.c — torch.nn.functional.pad with autograd: constant (any number of dims, negative
 * padding crops), reflect, replicate and circular (the last 1, 2 or 3 dims).
 *
 *   _pad(x, pad (p_last_left, p_last_right, p_prev_left, ...), mode, value) -> y
 *   mode: 0 constant, 1 reflect, 2 replicate, 3 circular
 *
 * Constant: y is filled with the value, then the box x and y share is copied (strided, any
 * dtype); backward copies that box of dy into a zero dx. The other modes map every output
 * index of a padded dim to the input index it reads (reflect: mirror without repeating the
 * edge; replicate: clamp; circular: wrap around the span negative pads leave), one table per
 * dim; forward gathers through the
 * tables, backward adds dy back through them (an input element read k times gets k
 * contributions). x (B, D, H, W): B = the unpadded leading dims, D/H absent (size 1) when
 * fewer dims are padded.
 *
 * Mirrors: at::constant_pad_nd, at::reflection_pad{1,2,3}d, at::replication_pad{1,2,3}d,
 * at::_pad_circular (their shapes, checks and messages; cddp/nn/functional.py does the rest).
 */
#include "nn/conv.h"
#include "module.h"
#include <string.h>

enum { PAD_CONSTANT = 0, PAD_REFLECT = 1, PAD_REPLICATE = 2, PAD_CIRCULAR = 3 };

/* Left/right padding of dim d of an ndim tensor, from torch's last-dim-first list. */
static void pad_of(const int64_t *pad, int npad, int ndim, int d, int64_t *l, int64_t *r)
{
    int k = ndim - 1 - d;                 /* 0 for the last dim */
    *l = 2 * k + 1 < npad ? pad[2 * k] : 0;
    *r = 2 * k + 1 < npad ? pad[2 * k + 1] : 0;
}

/* ---- constant --------------------------------------------------------------------------- */

/* Views of the box x and y share: x's part starts after a crop, y's after a pad. Either may
 * be empty (then *xv = *yv = NULL and 0 is returned). */
static int shared_box(TensorObject *x, TensorObject *y, const int64_t *pad, int npad,
                      TensorObject **xv, TensorObject **yv)
{
    int64_t shape[CDDP_MAX_DIMS], xo = x->offset, yo = y->offset;
    *xv = *yv = NULL;
    for (int d = 0; d < x->ndim; d++) {
        int64_t l, r;
        pad_of(pad, npad, x->ndim, d, &l, &r);
        int64_t xs = l < 0 ? -l : 0, ys = l > 0 ? l : 0;
        shape[d] = x->shape[d] - xs - (r < 0 ? -r : 0);
        if (shape[d] <= 0)
            return 0;
        xo += xs * x->strides[d];
        yo += ys * y->strides[d];
    }
    *xv = cddp_tensor_alias(x, x->ndim, shape, x->strides, xo);
    *yv = *xv ? cddp_tensor_alias(y, y->ndim, shape, y->strides, yo) : NULL;
    if (!*yv) {
        Py_CLEAR(*xv);
        return -1;
    }
    return 0;
}

/* y's part of the shared box := x's part (x and y related by `pad`, as in the forward). */
static int copy_box(TensorObject *x, TensorObject *y, const int64_t *pad, int npad)
{
    TensorObject *xv, *yv;
    if (shared_box(x, y, pad, npad, &xv, &yv) < 0)
        return -1;
    int rc = xv ? cddp_copy_into(yv, xv) : 0;
    Py_XDECREF(xv);
    Py_XDECREF(yv);
    return rc;
}

/* ConstantPadNdBackward0: dx (zeros) gets dy's shared box. i[0] = npad, i[1..] = pad. */
static int constant_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *mt = &self->meta[0];
    TensorObject *gy;
    int rc = -1;
    if (!gout[0] || !self->next[0].node)
        return 0;
    if (!(gy = cddp_tensor_cast_raw(gout[0], mt->dtype)))
        return -1;
    if (!(gin[0] = cddp_tensor_new(mt->dtype, mt->ndim, mt->shape, 1)))
        goto done;
    /* the box of y in x's frame: pads negated (a pad of y is a crop of dx and vice versa) */
    int64_t neg[2 * CDDP_MAX_DIMS];
    for (int k = 0; k < self->i[0]; k++)
        neg[k] = -self->i[1 + k];
    rc = copy_box(gy, gin[0], neg, (int)self->i[0]);
done:
    Py_DECREF(gy);
    return rc;
}

/* ---- reflect / replicate / circular ---------------------------------------------------- */

typedef struct {
    int64_t B, in[3], out[3];    /* leading planes; the padded dims (1 when absent) */
    int64_t *map[3];             /* output index -> input index, per padded dim */
} padplan;

static void plan_free(padplan *pp)
{
    for (int k = 0; k < 3; k++)
        PyMem_Free(pp->map[k]);
}

/* The plan for an ndim tensor of `shape` padded along its last npad/2 dims. */
static int plan_init(padplan *pp, int ndim, const int64_t *shape, const int64_t *pad, int npad,
                     int mode)
{
    int k = npad / 2;
    memset(pp, 0, sizeof *pp);
    pp->B = 1;
    for (int d = 0; d < ndim - k; d++)
        pp->B *= shape[d];
    for (int j = 0; j < 3; j++) {
        int d = ndim - 3 + j;                    /* j-th of the 3 innermost slots */
        int64_t l = 0, r = 0, I = 1;
        if (d >= ndim - k) {
            pad_of(pad, npad, ndim, d, &l, &r);
            I = shape[d];
        }
        pp->in[j] = I;
        pp->out[j] = I + l + r;
        int64_t J = I - (l < 0 ? -l : 0) - (r < 0 ? -r : 0);   /* circular: the kept span */
        size_t nmap = (size_t)(pp->out[j] > 0 ? pp->out[j] : 1);
        if (!(pp->map[j] = PyMem_Malloc(sizeof(int64_t) * nmap))) {
            plan_free(pp);
            PyErr_NoMemory();
            return -1;
        }
        for (int64_t o = 0; o < pp->out[j]; o++) {
            int64_t i = o - l;
            if (mode == PAD_REFLECT)
                i = i < 0 ? -i : i >= I ? 2 * (I - 1) - i : i;
            else if (mode == PAD_REPLICATE)
                i = i < 0 ? 0 : i >= I ? I - 1 : i;
            else                  /* wraps inside what the negative pads leave (torch's) */
                i = (l < 0 ? -l : 0) + (((o - (l > 0 ? l : 0)) % J) + J) % J;
            pp->map[j][o] = i;
        }
    }
    return 0;
}

/* y[b, od, oh, ow] = x[b, map0[od], map1[oh], map2[ow]] by element size (1, 2, 4, 8 bytes);
 * backward: dx[...] += dy[...] through the same maps, in float32 or float64 (map_backward
 * widens float16 / bfloat16 to float32 first). */
#define DEFINE_PADMAP(T, SFX)                                                                  \
static void pad_gather_##SFX(const padplan *pp, const T *x, T *y, int add)                     \
{                                                                                              \
    for (int64_t b = 0; b < pp->B; b++)                                                        \
        for (int64_t od = 0; od < pp->out[0]; od++)                                            \
            for (int64_t oh = 0; oh < pp->out[1]; oh++) {                                      \
                int64_t xr = ((b * pp->in[0] + pp->map[0][od]) * pp->in[1] + pp->map[1][oh])   \
                             * pp->in[2];                                                      \
                int64_t yr = ((b * pp->out[0] + od) * pp->out[1] + oh) * pp->out[2];           \
                if (add)                                                                       \
                    for (int64_t ow = 0; ow < pp->out[2]; ow++)                                \
                        ((T *)x)[xr + pp->map[2][ow]] += y[yr + ow];                           \
                else                                                                           \
                    for (int64_t ow = 0; ow < pp->out[2]; ow++)                                \
                        y[yr + ow] = x[xr + pp->map[2][ow]];                                   \
            }                                                                                  \
}
DEFINE_PADMAP(uint8_t, u8)
DEFINE_PADMAP(uint16_t, u16)
DEFINE_PADMAP(uint32_t, u32)
DEFINE_PADMAP(uint64_t, u64)
DEFINE_PADMAP(float, f32)
DEFINE_PADMAP(double, f64)

static void pad_map_run(cddp_dtype dt, const padplan *pp, const void *x, void *y, int add)
{
    size_t isz = cddp_dtype_size[dt];
    if (add && dt == CDDP_FLOAT32)
        pad_gather_f32(pp, x, y, 1);
    else if (add)                         /* float64: the only other dtype backward passes */
        pad_gather_f64(pp, x, y, 1);
    else if (isz == 1)
        pad_gather_u8(pp, x, y, 0);
    else if (isz == 2)
        pad_gather_u16(pp, x, y, 0);
    else if (isz == 4)
        pad_gather_u32(pp, x, y, 0);
    else
        pad_gather_u64(pp, x, y, 0);
}

/* ReflectionPad/ReplicationPad/CircularPad backward: i[0] = npad, i[1..6] pad, i[7] mode. */
static int map_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *mt = &self->meta[0];
    cddp_dtype acc = mt->dtype == CDDP_FLOAT64 ? CDDP_FLOAT64 : CDDP_FLOAT32;  /* sums' dtype */
    TensorObject *gy, *dx;
    padplan pp;
    if (!gout[0] || !self->next[0].node)
        return 0;
    gy = cddp_tensor_cast_raw(gout[0], acc);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        return -1;
    if (plan_init(&pp, mt->ndim, mt->shape, self->i + 1, (int)self->i[0], (int)self->i[7]) < 0) {
        Py_DECREF(gy);
        return -1;
    }
    if (!(dx = cddp_tensor_new(acc, mt->ndim, mt->shape, 1))) {
        plan_free(&pp);
        Py_DECREF(gy);
        return -1;
    }
    void *dxp = cddp_data(dx), *dyp = cddp_data(gy);
    Py_BEGIN_ALLOW_THREADS
    pad_map_run(acc, &pp, dxp, dyp, 1);
    Py_END_ALLOW_THREADS
    plan_free(&pp);
    Py_DECREF(gy);
    gin[0] = acc == mt->dtype ? dx : cddp_tensor_cast_raw(dx, mt->dtype);
    if (acc != mt->dtype)
        Py_DECREF(dx);
    return gin[0] ? 0 : -1;
}

/* ---- entry ------------------------------------------------------------------------------ */

/* Output shape and torch's checks; -1 with the exception set. */
static int pad_shape(TensorObject *x, const int64_t *pad, int npad, int mode, int64_t *shape)
{
    char xs[160];
    for (int d = 0; d < x->ndim; d++) {
        int64_t l, r;
        pad_of(pad, npad, x->ndim, d, &l, &r);
        shape[d] = x->shape[d] + l + r;
        int padded = x->ndim - 1 - d < npad / 2;
        if (mode == PAD_REFLECT && padded && (l >= x->shape[d] || r >= x->shape[d])) {
            PyErr_Format(PyExc_RuntimeError, "Argument #4: Padding size should be less than the "
                         "corresponding input dimension, but got: padding (%lld, %lld) at "
                         "dimension %d of input %s", (long long)l, (long long)r, d,
                         cddp_shape_str(x->ndim, x->shape, xs, sizeof xs));
            return -1;
        }
        if (mode != PAD_CONSTANT && padded && x->shape[d] == 0) {
            PyErr_Format(PyExc_RuntimeError, "%s padding needs non-empty padded dimensions, but "
                         "got input of size %s", mode == PAD_REFLECT ? "reflect" :
                         mode == PAD_REPLICATE ? "replicate" : "circular",
                         cddp_shape_str(x->ndim, x->shape, xs, sizeof xs));
            return -1;
        }
        if (mode == PAD_CIRCULAR && padded &&
            x->shape[d] - (l < 0 ? -l : 0) - (r < 0 ? -r : 0) <= 0) {
            PyErr_SetString(PyExc_RuntimeError, "Negative padding value is resulting in an empty "
                            "dimension.");
            return -1;
        }
        if (mode == PAD_CIRCULAR && padded && (l > x->shape[d] || r > x->shape[d])) {
            PyErr_SetString(PyExc_RuntimeError, "Padding value causes wrapping around more than "
                            "once.");
            return -1;
        }
        if (shape[d] < 0 || (mode != PAD_CONSTANT && padded && shape[d] <= 0)) {
            PyErr_Format(PyExc_RuntimeError, "The input size %lld, plus negative padding %lld "
                         "and %lld resulted in a negative output size, which is invalid. Check "
                         "dimension %d of your input.", (long long)x->shape[d], (long long)l,
                         (long long)r, d);
            return -1;
        }
    }
    return 0;
}

/* _pad(input, pad, mode, value) */
static PyObject *py_pad(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *y = NULL, *xc = NULL, *fill = NULL;
    int64_t pad[2 * CDDP_MAX_DIMS], shape[CDDP_MAX_DIMS];
    padplan pp;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_pad(input, pad, mode, value)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "pad", "input", 0)))
        return NULL;
    Py_ssize_t npad = PySequence_Check(args[1]) ? PySequence_Size(args[1]) : -1;
    int mode = (int)PyLong_AsLong(args[2]);
    double value = PyFloat_AsDouble(args[3]);
    if (npad < 0 || npad > 2 * x->ndim || npad % 2 || (mode != PAD_CONSTANT && npad > 6)) {
        PyErr_SetString(PyExc_RuntimeError, "_pad: pad must be a sequence of an even number of "
                        "ints, at most two per input dimension");
        return NULL;
    }
    if (PyErr_Occurred() || (npad && cddp_int_list(args[1], (int)npad, "pad", pad) < 0) ||
        pad_shape(x, pad, (int)npad, mode, shape) < 0)
        return NULL;
    if (!(y = cddp_tensor_new(x->dtype, x->ndim, shape, 0)))
        return NULL;
    if (mode == PAD_CONSTANT) {
        fill = cddp_scalar_tensor(value, x->dtype);
        if (!fill || cddp_copy_into(y, fill) < 0 || copy_box(x, y, pad, (int)npad) < 0)
            goto fail;
    } else {
        if (!(xc = cddp_tensor_contiguous_raw(x)) ||
            plan_init(&pp, x->ndim, x->shape, pad, (int)npad, mode) < 0)
            goto fail;
        const void *xp = cddp_data(xc);
        void *yp = cddp_data(y);
        Py_BEGIN_ALLOW_THREADS
        pad_map_run(x->dtype, &pp, xp, yp, 0);
        Py_END_ALLOW_THREADS
        plan_free(&pp);
    }
    if (cddp_is_floating(x->dtype)) {
        static const char *names[] = {"ConstantPadNdBackward0", "ReflectionPad2DBackward0",
                                      "ReplicationPad2DBackward0", "CircularPad2DBackward0"};
        int err;
        NodeObject *node = cddp_maybe_node(names[mode & 3], mode == PAD_CONSTANT ?
                                           constant_backward : map_backward, 1, &x, &err);
        if (err)
            goto fail;
        if (node) {
            cddp_set_history(y, node, 0);
            node->i[0] = npad;
            memcpy(node->i + 1, pad, sizeof(int64_t) * (size_t)npad);
            if (mode != PAD_CONSTANT)
                node->i[7] = mode;
            Py_DECREF(node);
        }
    }
    Py_XDECREF(fill);
    Py_XDECREF(xc);
    return (PyObject *)y;
fail:
    Py_XDECREF(fill);
    Py_XDECREF(xc);
    Py_XDECREF(y);
    return NULL;
}

PyMethodDef cddp_pad_module_methods[] = {
    {"_pad", (PyCFunction)(void (*)(void))py_pad, METH_FASTCALL,
     "_pad(input, pad, mode, value): mode 0 constant, 1 reflect, 2 replicate, 3 circular"},
    {NULL},
};
