/* nn/interpolate.c — resampling with autograd: torch.nn.functional.interpolate's nearest,
 * nearest-exact, (bi)linear modes (cddp/nn/functional.py maps 3-D inputs to H = 1).
 *
 *   _upsample(x (N, C, H, W), OH, OW, scale_h, scale_w, mode, align_corners) -> y (N, C, OH, OW)
 *   mode: 0 nearest, 1 nearest-exact, 2 bilinear, 3 nearest without the shortcuts below (torch's
 *   1-D kernel has none); scale_*: the user's scale factor (used for the source index, as
 *   torch does) or 0 when the size was given.
 *
 * Source indices follow aten/src/ATen/native/UpSample.h exactly, in its arithmetic type (float
 * for nearest and for float32 bilinear, double for float64 bilinear):
 *   nearest        src = min(floor(dst * s), in - 1), s = 1/scale or in/out (shortcuts: out ==
 *                  in copies, out == 2*in halves)
 *   nearest-exact  src = min(floor((dst + 0.5) * s), in - 1)
 *   bilinear       align_corners: real = dst * (in-1)/(out-1); else real = max((dst + 0.5) * s
 *                  - 0.5, 0); i0 = min(floor(real), in-1), i1 = i0 + (i0 < in-1), w1 = clamp(real
 *                  - i0, 0, 1), w0 = 1 - w1; out == in copies.
 * One index (and weight) table per dim is built once per call; backward scatters dy through the
 * same tables.
 */
#include "nn/conv.h"
#include "module.h"
#include <math.h>
#include <string.h>

enum { UP_NEAREST = 0, UP_NEAREST_EXACT = 1, UP_BILINEAR = 2, UP_NEAREST_PLAIN = 3 };

typedef struct {
    int64_t planes, H, W, OH, OW;
    int mode, align;
    double scale_h, scale_w;       /* user scale factors, 0 = none */
} upsample;

typedef struct {                   /* per output index along one dim */
    int64_t *i0, *i1;
    double *w0, *w1;               /* bilinear weights (float-rounded for float32) */
} axis;

static void axis_free(axis *a)
{
    PyMem_Free(a->i0);
    PyMem_Free(a->i1);
    PyMem_Free(a->w0);
    PyMem_Free(a->w1);
}

/* compute_scales_value<float> / area_pixel_compute_scale<opmath> */
static float scale_f(double scale, int64_t in, int64_t out)
{
    return scale > 0.0 ? (float)(1.0 / scale) : (float)in / (float)out;
}

static void nearest_axis(axis *a, int mode, int64_t in, int64_t out, double scale)
{
    float s = scale_f(scale, in, out);
    int shortcuts = mode == UP_NEAREST;
    for (int64_t o = 0; o < out; o++) {
        int64_t i;
        if (mode == UP_NEAREST_EXACT)
            i = (int64_t)floorf((float)(((double)o + 0.5) * (double)s));
        else if (shortcuts && out == in)
            i = o;
        else if (shortcuts && out == 2 * in)
            i = o >> 1;
        else
            i = (int64_t)floorf((float)o * s);
        a->i0[o] = i < in - 1 ? i : in - 1;
    }
}

/* compute_source_index_and_lambda in float (f32) or double (f64) arithmetic. */
static void linear_axis(axis *a, int f64, int align, int64_t in, int64_t out, double scale)
{
    for (int64_t o = 0; o < out; o++) {
        int64_t i0;
        double w1;
        if (out == in) {
            a->i0[o] = a->i1[o] = o;
            a->w0[o] = 1.0;
            a->w1[o] = 0.0;
            continue;
        }
        if (f64) {
            double s = align ? (out > 1 ? (double)(in - 1) / (double)(out - 1) : 0.0)
                             : (scale > 0.0 ? 1.0 / scale : (double)in / (double)out);
            double r = align ? s * (double)o : s * ((double)o + 0.5) - 0.5;
            r = (!align && r < 0.0) ? 0.0 : r;
            i0 = (int64_t)floorf((float)r);      /* torch's floorf on the double, as written */
            i0 = i0 < in - 1 ? i0 : in - 1;
            w1 = fmin(fmax(r - (double)i0, 0.0), 1.0);
            a->w0[o] = 1.0 - w1;
        } else {
            float s = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f)
                            : scale_f(scale, in, out);
            float r = align ? s * (float)o : s * ((float)o + 0.5f) - 0.5f;
            r = (!align && r < 0.0f) ? 0.0f : r;
            i0 = (int64_t)floorf(r);
            i0 = i0 < in - 1 ? i0 : in - 1;
            float l1 = fminf(fmaxf(r - (float)i0, 0.0f), 1.0f);
            w1 = l1;
            a->w0[o] = 1.0f - l1;
        }
        a->i0[o] = i0;
        a->i1[o] = i0 + (i0 < in - 1 ? 1 : 0);
        a->w1[o] = w1;
    }
}

static int axis_init(axis *a, const upsample *u, int f64, int64_t in, int64_t out, double scale)
{
    size_t n = (size_t)(out > 0 ? out : 1);
    memset(a, 0, sizeof *a);
    a->i0 = PyMem_Malloc(n * sizeof(int64_t));
    a->i1 = PyMem_Malloc(n * sizeof(int64_t));
    a->w0 = PyMem_Malloc(n * sizeof(double));
    a->w1 = PyMem_Malloc(n * sizeof(double));
    if (!a->i0 || !a->i1 || !a->w0 || !a->w1) {
        axis_free(a);
        PyErr_NoMemory();
        return -1;
    }
    if (u->mode == UP_BILINEAR)
        linear_axis(a, f64, u->align, in, out, scale);
    else
        nearest_axis(a, u->mode, in, out, scale);
    return 0;
}

/* dir 0: y = resample(x); dir 1: dx += adjoint(dy) (x is dx, y is dy). */
#define DEFINE_UPSAMPLE(T, SFX)                                                                \
static void up_##SFX(const upsample *u, const axis *ah, const axis *aw, T *x, T *y, int dir)  \
{                                                                                              \
    int64_t HW = u->H * u->W;                                                                  \
    for (int64_t pl = 0; pl < u->planes; pl++) {                                               \
        T *xp = x + pl * HW;                                                                   \
        for (int64_t oh = 0; oh < u->OH; oh++) {                                               \
            T *yr = y + (pl * u->OH + oh) * u->OW;                                             \
            int64_t r0 = ah->i0[oh] * u->W, r1 = u->mode == UP_BILINEAR ? ah->i1[oh] * u->W : 0; \
            if (u->mode != UP_BILINEAR) {                                                      \
                for (int64_t ow = 0; ow < u->OW; ow++) {                                       \
                    if (dir)                                                                   \
                        xp[r0 + aw->i0[ow]] += yr[ow];                                         \
                    else                                                                       \
                        yr[ow] = xp[r0 + aw->i0[ow]];                                          \
                }                                                                              \
                continue;                                                                      \
            }                                                                                  \
            T h0 = (T)ah->w0[oh], h1 = (T)ah->w1[oh];                                          \
            for (int64_t ow = 0; ow < u->OW; ow++) {                                           \
                int64_t c0 = aw->i0[ow], c1 = aw->i1[ow];                                      \
                T v0 = (T)aw->w0[ow], v1 = (T)aw->w1[ow];                                      \
                if (dir) {                                                                     \
                    T g = yr[ow];                                                              \
                    xp[r0 + c0] += h0 * v0 * g;                                                \
                    xp[r0 + c1] += h0 * v1 * g;                                                \
                    xp[r1 + c0] += h1 * v0 * g;                                                \
                    xp[r1 + c1] += h1 * v1 * g;                                                \
                } else {                                                                       \
                    T t0 = xp[r0 + c0] * v0 + xp[r0 + c1] * v1;                                \
                    T t1 = xp[r1 + c0] * v0 + xp[r1 + c1] * v1;                                \
                    yr[ow] = t0 * h0 + t1 * h1;                                                \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
}
DEFINE_UPSAMPLE(float, f32)
DEFINE_UPSAMPLE(double, f64)

/* Build both axes and run one direction. -1 with MemoryError. */
static int up_run(const upsample *u, cddp_dtype dt, void *x, void *y, int dir)
{
    axis ah, aw;
    int f64 = dt == CDDP_FLOAT64;
    if (axis_init(&ah, u, f64, u->H, u->OH, u->scale_h) < 0)
        return -1;
    if (axis_init(&aw, u, f64, u->W, u->OW, u->scale_w) < 0) {
        axis_free(&ah);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    if (f64)
        up_f64(u, &ah, &aw, x, y, dir);
    else
        up_f32(u, &ah, &aw, x, y, dir);
    Py_END_ALLOW_THREADS
    axis_free(&ah);
    axis_free(&aw);
    return 0;
}

static void up_store(NodeObject *n, const upsample *u)
{
    int64_t v[7] = {u->planes, u->H, u->W, u->OH, u->OW, u->mode, u->align};
    memcpy(n->i, v, sizeof v);
    n->d[0] = u->scale_h;
    n->d[1] = u->scale_w;
}

/* UpsampleNearest2DBackward0 / UpsampleBilinear2DBackward0 */
static int upsample_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    cddp_meta *mt = &self->meta[0];
    const int64_t *v = self->i;
    upsample u = {.planes = v[0], .H = v[1], .W = v[2], .OH = v[3], .OW = v[4],
                  .mode = (int)v[5], .align = (int)v[6], .scale_h = self->d[0],
                  .scale_w = self->d[1]};
    TensorObject *gy;
    if (!gout[0] || !self->next[0].node)
        return 0;
    gy = cddp_tensor_cast_raw(gout[0], mt->dtype);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        return -1;
    int rc = -1;
    if ((gin[0] = cddp_tensor_new(mt->dtype, mt->ndim, mt->shape, 1)))
        rc = up_run(&u, mt->dtype, cddp_data(gin[0]), cddp_data(gy), 1);
    Py_DECREF(gy);
    return rc;
}

/* _upsample(input, OH, OW, scale_h, scale_w, mode, align_corners) */
static PyObject *py_upsample(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *xc = NULL, *y = NULL;
    upsample u;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "_upsample(input, OH, OW, scale_h, scale_w, mode, "
                        "align_corners)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "interpolate", "input", 0)) ||
        cddp_refuse_narrow(x, "interpolate") < 0)
        return NULL;
    u.OH = PyLong_AsLongLong(args[1]);
    u.OW = PyLong_AsLongLong(args[2]);
    u.scale_h = PyFloat_AsDouble(args[3]);
    u.scale_w = PyFloat_AsDouble(args[4]);
    u.mode = (int)PyLong_AsLong(args[5]);
    u.align = PyObject_IsTrue(args[6]) == 1;
    if (PyErr_Occurred())
        return NULL;
    if (x->ndim != 4 || u.mode < 0 || u.mode > 3) {
        PyErr_SetString(PyExc_RuntimeError, "_upsample: expected a 4-D input and mode 0..3");
        return NULL;
    }
    u.H = x->shape[2];
    u.W = x->shape[3];
    if (u.H <= 0 || u.W <= 0 || u.OH <= 0 || u.OW <= 0) {
        PyErr_Format(PyExc_RuntimeError, "Input and output sizes should be greater than 0, but "
                     "got input (H: %lld, W: %lld) output (H: %lld, W: %lld)", (long long)u.H,
                     (long long)u.W, (long long)u.OH, (long long)u.OW);
        return NULL;
    }
    if (!cddp_is_floating(x->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "interpolate: expected a floating point input (float32 "
                     "or float64), but got %s", cddp_dtype_name[x->dtype]);
        return NULL;
    }
    u.planes = x->shape[0] * x->shape[1];
    int64_t shape[4] = {x->shape[0], x->shape[1], u.OH, u.OW};
    xc = cddp_tensor_contiguous_raw(x);
    y = xc ? cddp_tensor_new(x->dtype, 4, shape, 0) : NULL;
    if (!y || up_run(&u, x->dtype, cddp_data(xc), cddp_data(y), 0) < 0)
        goto fail;
    int err;
    NodeObject *node = cddp_maybe_node(u.mode == UP_BILINEAR ? "UpsampleBilinear2DBackward0"
                                       : "UpsampleNearest2DBackward0", upsample_backward, 1, &x,
                                       &err);
    if (err)
        goto fail;
    if (node) {
        cddp_set_history(y, node, 0);
        up_store(node, &u);
        Py_DECREF(node);
    }
    Py_DECREF(xc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(y);
    return NULL;
}

PyMethodDef cddp_interpolate_module_methods[] = {
    {"_upsample", (PyCFunction)(void (*)(void))py_upsample, METH_FASTCALL,
     "_upsample(input, OH, OW, scale_h, scale_w, mode, align_corners): 0 nearest, "
     "1 nearest-exact, 2 bilinear, 3 nearest without size shortcuts"},
    {NULL},
};
