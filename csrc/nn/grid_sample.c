/* nn/grid_sample.c — torch.nn.functional.grid_sample on 4-D inputs, with autograd for both
 * the input and the grid (the spatial transformer's sampler).
 *
 *   _grid_sample(input (N, C, H, W), grid (N, Ho, Wo, 2), mode, padding, align_corners)
 *       -> out (N, C, Ho, Wo)
 *   mode: 0 bilinear, 1 nearest; padding: 0 zeros, 1 border, 2 reflection.
 *
 * grid[n, i, j] = (x, y) in [-1, 1] names a point of input[n]: x along W, y along H. It maps to
 * the pixel coordinate
 *   align_corners:  (g + 1) / 2 * (size - 1)     (-1 and 1 are the corner pixels' centres)
 *   otherwise:      ((g + 1) * size - 1) / 2      (-1 and 1 are the image's outer edges)
 * then padding: zeros reads 0 outside the image; border clips the coordinate to
 * [0, size - 1]; reflection folds it back about the edges (the corner centres with
 * align_corners, -0.5 and size - 0.5 otherwise) and then clips. Bilinear mixes the four
 * neighbours of the point; nearest takes the pixel at nearbyint (half to even, as torch).
 *
 * Backward: d input scatter-adds each output gradient into the pixels it was read from with
 * the same weights; d grid (bilinear only; nearest has none) is the bilinear weights'
 * derivative along x and y, times the coordinate map's slope (size/2 or (size-1)/2, and 0
 * where border/reflection clipped, -1 where a reflection flipped the direction).
 * Arithmetic is in the tensors' own type (float or double), as torch's CPU kernel.
 */
#include "nn/conv.h"
#include "module.h"
#include <math.h>
#include <string.h>

enum { GS_BILINEAR = 0, GS_NEAREST = 1 };
enum { GS_ZEROS = 0, GS_BORDER = 1, GS_REFLECTION = 2 };

typedef struct {
    int64_t N, C, H, W, Ho, Wo;
    int mode, padding, align;
} gs_args;

#define DEFINE_GRID_SAMPLE(T, SFX)                                                             \
/* the pixel coordinate of grid value g along a dim of `size`, and d coord / d g */           \
static T gs_coord_##SFX(const gs_args *a, T g, int64_t size, T *slope)                        \
{                                                                                              \
    T c, s;                                                                                    \
    if (a->align) {                                                                            \
        s = (T)(size - 1) / 2;                                                                 \
        c = (g + 1) * s;                                                                       \
    } else {                                                                                   \
        s = (T)size / 2;                                                                       \
        c = ((g + 1) * size - 1) / 2;                                                          \
    }                                                                                          \
    if (a->padding == GS_REFLECTION) {                                                         \
        /* fold c into [lo, lo + span] by reflections, tracking the direction */              \
        T lo = a->align ? 0 : (T)-0.5, span = a->align ? (T)(size - 1) : (T)size;              \
        T dir = 1;                                                                             \
        if (span <= 0) {                                                                       \
            c = 0;                                                                             \
            dir = 0;                                                                           \
        } else {                                                                               \
            T d = c - lo;                                                                      \
            if (d < 0) {                                                                       \
                d = -d;                                                                        \
                dir = -dir;                                                                    \
            }                                                                                  \
            T flips = floor(d / span), rest = fmod(d, span);                                   \
            if (fmod(flips, (T)2) == 0) {                                                      \
                c = lo + rest;                                                                 \
            } else {                                                                           \
                c = lo + span - rest;                                                          \
                dir = -dir;                                                                    \
            }                                                                                  \
        }                                                                                      \
        s *= dir;                                                                              \
    }                                                                                          \
    if (a->padding != GS_ZEROS) {                                                              \
        if (c <= 0) {                                                                          \
            c = 0;                                                                             \
            s = 0;                                                                             \
        } else if (c >= (T)(size - 1)) {                                                       \
            c = (T)(size - 1);                                                                 \
            s = 0;                                                                             \
        }                                                                                      \
    }                                                                                          \
    *slope = s;                                                                                \
    return c;                                                                                  \
}                                                                                              \
                                                                                               \
/* a whole-pixel coordinate as an index: NaN and anything beyond [-2, size + 1] (outside   \
 * the image either way) become -2 / size + 1, so the cast to int64 is always defined      */ \
static int64_t gs_index_##SFX(T v, int64_t size)                                              \
{                                                                                              \
    if (!(v > -2))                                                                             \
        return -2;                                                                             \
    return v > (T)(size + 1) ? size + 1 : (int64_t)v;                                          \
}                                                                                              \
                                                                                               \
/* dir 0: out = sample(x, grid); dir 1: gx += scatter(gy), ggrid = d out / d grid . gy.       \
 * x (N, C, H, W), grid (N, Ho, Wo, 2), y / gy (N, C, Ho, Wo); gx zeroed by the caller.      */ \
static void gs_run_##SFX(const gs_args *a, const T *x, const T *grid, T *y, T *gx, T *ggrid,  \
                         int dir)                                                              \
{                                                                                              \
    const int64_t H = a->H, W = a->W, plane = H * W, oplane = a->Ho * a->Wo;                  \
    for (int64_t n = 0; n < a->N; n++) {                                                       \
        const T *xn = x + n * a->C * plane;                                                    \
        T *gxn = gx ? gx + n * a->C * plane : NULL;                                            \
        for (int64_t p = 0; p < oplane; p++) {                                                 \
            const T *g = grid + (n * oplane + p) * 2;                                          \
            T sx, sy;                                                                          \
            T ix = gs_coord_##SFX(a, g[0], W, &sx), iy = gs_coord_##SFX(a, g[1], H, &sy);      \
            T *yp = y + n * a->C * oplane + p; /* y or gy, stride oplane per channel */        \
            if (a->mode == GS_NEAREST) {                                                       \
                int64_t jx = gs_index_##SFX(nearbyint(ix), W);                                 \
                int64_t jy = gs_index_##SFX(nearbyint(iy), H);                                 \
                int in = jx >= 0 && jx < W && jy >= 0 && jy < H;                               \
                for (int64_t c = 0; c < a->C; c++) {                                           \
                    if (!dir)                                                                  \
                        yp[c * oplane] = in ? xn[c * plane + jy * W + jx] : 0;                 \
                    else if (in && gxn)                                                        \
                        gxn[c * plane + jy * W + jx] += yp[c * oplane];                        \
                }                                                                              \
                if (dir && ggrid)                                                              \
                    ggrid[(n * oplane + p) * 2] = ggrid[(n * oplane + p) * 2 + 1] = 0;         \
                continue;                                                                      \
            }                                                                                  \
            T fx = floor(ix), fy = floor(iy);                                                  \
            int64_t x0 = gs_index_##SFX(fx, W), y0 = gs_index_##SFX(fy, H);                    \
            int64_t x1 = x0 + 1, y1 = y0 + 1;                                                  \
            T wx1 = ix - fx, wx0 = 1 - wx1, wy1 = iy - fy, wy0 = 1 - wy1;                      \
            int ok00 = x0 >= 0 && x0 < W && y0 >= 0 && y0 < H;                                 \
            int ok01 = x1 >= 0 && x1 < W && y0 >= 0 && y0 < H;                                 \
            int ok10 = x0 >= 0 && x0 < W && y1 >= 0 && y1 < H;                                 \
            int ok11 = x1 >= 0 && x1 < W && y1 >= 0 && y1 < H;                                 \
            T gix = 0, giy = 0;                                                                \
            for (int64_t c = 0; c < a->C; c++) {                                               \
                const T *xc = xn + c * plane;                                                  \
                T v00 = 0, v01 = 0, v10 = 0, v11 = 0; /* read unless only d input is wanted */ \
                if (!dir || ggrid) {                                                           \
                    v00 = ok00 ? xc[y0 * W + x0] : 0;                                          \
                    v01 = ok01 ? xc[y0 * W + x1] : 0;                                          \
                    v10 = ok10 ? xc[y1 * W + x0] : 0;                                          \
                    v11 = ok11 ? xc[y1 * W + x1] : 0;                                          \
                }                                                                              \
                if (!dir) {                                                                    \
                    yp[c * oplane] = v00 * wx0 * wy0 + v01 * wx1 * wy0 + v10 * wx0 * wy1 +     \
                                     v11 * wx1 * wy1;                                          \
                    continue;                                                                  \
                }                                                                              \
                T go = yp[c * oplane];                                                         \
                if (gxn) {                                                                     \
                    T *gc = gxn + c * plane;                                                   \
                    if (ok00) gc[y0 * W + x0] += go * wx0 * wy0;                               \
                    if (ok01) gc[y0 * W + x1] += go * wx1 * wy0;                               \
                    if (ok10) gc[y1 * W + x0] += go * wx0 * wy1;                               \
                    if (ok11) gc[y1 * W + x1] += go * wx1 * wy1;                               \
                }                                                                              \
                if (ggrid) {                                                                   \
                    gix += go * ((v01 - v00) * wy0 + (v11 - v10) * wy1);                       \
                    giy += go * ((v10 - v00) * wx0 + (v11 - v01) * wx1);                       \
                }                                                                              \
            }                                                                                  \
            if (dir && ggrid) {                                                                \
                ggrid[(n * oplane + p) * 2] = gix * sx;                                        \
                ggrid[(n * oplane + p) * 2 + 1] = giy * sy;                                    \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
}
DEFINE_GRID_SAMPLE(float, f32)
DEFINE_GRID_SAMPLE(double, f64)

static void gs_run(const gs_args *a, cddp_dtype dt, const void *x, const void *grid, void *y,
                   void *gx, void *ggrid, int dir)
{
    Py_BEGIN_ALLOW_THREADS
    if (dt == CDDP_FLOAT64)
        gs_run_f64(a, x, grid, y, gx, ggrid, dir);
    else
        gs_run_f32(a, x, grid, y, gx, ggrid, dir);
    Py_END_ALLOW_THREADS
}

static void gs_load(const NodeObject *n, gs_args *a)
{
    const int64_t *v = n->i;
    *a = (gs_args){.N = v[0], .C = v[1], .H = v[2], .W = v[3], .Ho = v[4], .Wo = v[5],
                   .mode = (int)v[6], .padding = (int)v[7], .align = (int)v[8]};
}

/* GridSampler2DBackward0: gin[0] (N, C, H, W) and gin[1] (N, Ho, Wo, 2), each when wanted */
static int grid_sample_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *x = cddp_node_saved(self, 0), *grid = cddp_node_saved(self, 1), *gy = NULL;
    TensorObject *gx = NULL, *gg = NULL;
    gs_args a;
    int rc = -1;
    if (!x || !grid)
        return -1;
    if (!gout[0])
        return 0;
    gs_load(self, &a);
    gy = cddp_tensor_cast_raw(gout[0], x->dtype);
    if (gy && !cddp_is_contiguous(gy))
        Py_SETREF(gy, cddp_tensor_contiguous_raw(gy));
    if (!gy)
        return -1;
    if (self->next[0].node && !(gx = cddp_tensor_new(x->dtype, 4, x->shape, 1)))
        goto done;
    if (self->next[1].node && !(gg = cddp_tensor_new(x->dtype, 4, grid->shape, 1)))
        goto done;
    gs_run(&a, x->dtype, cddp_data(x), cddp_data(grid), cddp_data(gy),
           gx ? cddp_data(gx) : NULL, gg ? cddp_data(gg) : NULL, 1);
    gin[0] = gx;
    gin[1] = gg;
    gx = gg = NULL;
    rc = 0;
done:
    Py_XDECREF(gx);
    Py_XDECREF(gg);
    Py_DECREF(gy);
    return rc;
}

/* _grid_sample(input, grid, mode, padding, align_corners) */
static PyObject *py_grid_sample(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *x, *g, *xc = NULL, *gc = NULL, *y = NULL;
    gs_args a;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_grid_sample(input, grid, mode, padding, "
                        "align_corners)");
        return NULL;
    }
    if (!(x = cddp_tensor_arg(args, 0, "grid_sample", "input", 0)) ||
        !(g = cddp_tensor_arg(args, 1, "grid_sample", "grid", 0)) ||
        cddp_refuse_narrow(x, "grid_sample") < 0 || cddp_refuse_narrow(g, "grid_sample") < 0)
        return NULL;
    a.mode = (int)PyLong_AsLong(args[2]);
    a.padding = (int)PyLong_AsLong(args[3]);
    a.align = PyObject_IsTrue(args[4]) == 1;
    if (PyErr_Occurred())
        return NULL;
    if (x->ndim != 4 || g->ndim != 4 || g->shape[3] != 2 || g->shape[0] != x->shape[0] ||
        a.mode < 0 || a.mode > 1 || a.padding < 0 || a.padding > 2) {
        PyErr_SetString(PyExc_RuntimeError, "_grid_sample: expected input (N, C, H, W), grid "
                        "(N, Ho, Wo, 2), mode 0..1 and padding 0..2");
        return NULL;
    }
    if (!cddp_is_floating(x->dtype) || x->dtype != g->dtype) {
        PyErr_Format(PyExc_RuntimeError, "grid_sampler(): expected input and grid to have "
                     "the same floating point dtype, but input has %s and grid has %s",
                     cddp_dtype_name[x->dtype], cddp_dtype_name[g->dtype]);
        return NULL;
    }
    a.N = x->shape[0];
    a.C = x->shape[1];
    a.H = x->shape[2];
    a.W = x->shape[3];
    a.Ho = g->shape[1];
    a.Wo = g->shape[2];
    int64_t shape[4] = {a.N, a.C, a.Ho, a.Wo};
    xc = cddp_tensor_contiguous_raw(x);
    gc = xc ? cddp_tensor_contiguous_raw(g) : NULL;
    y = gc ? cddp_tensor_new(x->dtype, 4, shape, 0) : NULL;
    if (!y)
        goto fail;
    gs_run(&a, x->dtype, cddp_data(xc), cddp_data(gc), cddp_data(y), NULL, NULL, 0);
    {
        int err;
        TensorObject *ins[2] = {x, g};
        NodeObject *node = cddp_maybe_node("GridSampler2DBackward0", grid_sample_backward, 2,
                                           ins, &err);
        if (err)
            goto fail;
        if (node) {
            int64_t v[9] = {a.N, a.C, a.H, a.W, a.Ho, a.Wo, a.mode, a.padding, a.align};
            cddp_set_history(y, node, 0);
            memcpy(node->i, v, sizeof v);
            int bad = cddp_node_save(node, 0, xc) < 0 || cddp_node_save(node, 1, gc) < 0;
            Py_DECREF(node);
            if (bad)
                goto fail;
        }
    }
    Py_DECREF(xc);
    Py_DECREF(gc);
    return (PyObject *)y;
fail:
    Py_XDECREF(xc);
    Py_XDECREF(gc);
    Py_XDECREF(y);
    return NULL;
}

PyMethodDef cddp_grid_sample_module_methods[] = {
    {"_grid_sample", (PyCFunction)(void (*)(void))py_grid_sample, METH_FASTCALL,
     "_grid_sample(input, grid, mode, padding, align_corners): mode 0 bilinear, 1 nearest; "
     "padding 0 zeros, 1 border, 2 reflection"},
    {NULL},
};
