/* ops/shape/repeat.c — copies that rearrange or replicate elements: repeat / tile,
 * repeat_interleave, roll, flip (fliplr, flipud), narrow_copy, and movedim / moveaxis
 * (a permute view).
 *
 * Mirrors torch:
 *   Tensor.repeat(*sizes), tile(input, dims)                    RepeatBackward0
 *   repeat_interleave(input, repeats, dim=None, *, output_size=None)
 *       int repeats: the repeat kernel (RepeatBackward0); tensor repeats: index_select with
 *       the repeated indices (IndexSelectBackward0, as torch); repeat_interleave(repeats)
 *       alone returns those indices
 *   roll(input, shifts, dims=None)                              RollBackward0
 *   flip(input, dims), fliplr, flipud                           FlipBackward0
 *   narrow_copy(input, dim, start, length)   (narrow + a contiguous copy)
 *   movedim / moveaxis(input, source, destination)              PermuteBackward0
 *
 * Legend: x (s_0, ..., s_{m-1}) after padding with leading 1s, reps (r_0, ..., r_{m-1}); the
 * repeat output is (r_0 s_0, ..., r_{m-1} s_{m-1}), contiguous. Repeat writes the first copy
 * of each block once (strided reads of x) and duplicates it with memcpy; its backward sums
 * the r_d copies back into each input element. Flip is a copy from a view with negated
 * strides (internal only: no tensor a user sees ever has a negative stride); roll copies the
 * 2^k blocks the k rolled dims cut the input into, each once.
 */
#include "ops/shape/shape.h"
#include "module.h"
#include <string.h>

/* ---- the repeat kernel ---------------------------------------------------------------- */

typedef struct {
    int m;
    int64_t xs[CDDP_MAX_DIMS];       /* input sizes, padded to m dims */
    int64_t r[CDDP_MAX_DIMS];        /* repeats per dim */
    int64_t sst[CDDP_MAX_DIMS];      /* input element strides (padded dims: 0) */
    int64_t ost[CDDP_MAX_DIMS];      /* output (contiguous, r*s) element strides */
    int64_t ist[CDDP_MAX_DIMS];      /* input contiguous strides (backward) */
    size_t isz;
} rep_plan;

/* Plan for x's elements laid as `xs` (m dims, same numel as x; x's strides apply when x has m
 * dims, else contiguous strides of a copy are used by the caller) repeated r times. */
static void rep_plan_init(rep_plan *p, int m, const int64_t *xs, const int64_t *sst,
                          const int64_t *r, size_t isz)
{
    int64_t o = 1, i = 1;
    p->m = m;
    p->isz = isz;
    for (int d = m - 1; d >= 0; d--) {
        p->xs[d] = xs[d];
        p->r[d] = r[d];
        p->sst[d] = sst ? sst[d] : 0;
        p->ost[d] = o;
        p->ist[d] = i;
        o *= xs[d] * r[d];
        i *= xs[d];
    }
}

/* dst[0..n) (contiguous) = src[0, sst, 2 sst, ...] */
static void copy_run(char *dst, const char *src, int64_t n, int64_t sst, size_t isz)
{
    if (sst == 1) {
        memcpy(dst, src, (size_t)n * isz);
        return;
    }
    switch (isz) {
    case 8: for (int64_t j = 0; j < n; j++) memcpy(dst + 8 * j, src + 8 * j * sst, 8); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(dst + 4 * j, src + 4 * j * sst, 4); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(dst + 2 * j, src + 2 * j * sst, 2); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(dst + isz * j, src + isz * j * sst, isz);
    }
}

/* The block of dims d.. at dst: the first repetition from src, then r[d] - 1 memcpys. */
static void rep_fwd(const rep_plan *p, int d, const char *src, char *dst)
{
    int64_t bl = p->xs[d] * p->ost[d];
    if (d == p->m - 1)
        copy_run(dst, src, p->xs[d], p->sst[d], p->isz);
    else
        for (int64_t j = 0; j < p->xs[d]; j++)
            rep_fwd(p, d + 1, src + j * p->sst[d] * (int64_t)p->isz,
                    dst + j * p->ost[d] * (int64_t)p->isz);
    for (int64_t k = 1; k < p->r[d]; k++)
        memcpy(dst + k * bl * (int64_t)p->isz, dst, (size_t)bl * p->isz);
}

/* gin (contiguous xs) += every repetition of g (contiguous r*s) */
#define REP_BWD(NAME, T)                                                                   \
    static void NAME(const rep_plan *p, int d, T *gin, const T *g)                        \
    {                                                                                      \
        for (int64_t k = 0; k < p->r[d]; k++)                                              \
            for (int64_t j = 0; j < p->xs[d]; j++) {                                       \
                const T *gb = g + (k * p->xs[d] + j) * p->ost[d];                          \
                if (d == p->m - 1)                                                         \
                    gin[j] += *gb;                                                         \
                else                                                                       \
                    NAME(p, d + 1, gin + j * p->ist[d], gb);                               \
            }                                                                              \
    }
REP_BWD(rep_bwd_f32, float)
REP_BWD(rep_bwd_f64, double)

/* Node ints: i[0] = m, i[1..m] = xs, i[1+m..2m] = r. */
static int repeat_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    rep_plan p;
    int m = (int)self->i[0];
    const cddp_meta *mt = &self->meta[0];
    TensorObject *g, *out;
    if (!gout[0] || !self->next[0].node)
        return 0;
    cddp_dtype kd = cddp_kdt(mt->dtype);     /* float16/bfloat16 sum in float32, round once */
    rep_plan_init(&p, m, self->i + 1, NULL, self->i + 1 + m, cddp_dtype_size[kd]);
    g = cddp_tensor_cast_raw(gout[0], kd);
    if (g)
        Py_SETREF(g, cddp_tensor_contiguous_raw(g));
    out = g ? cddp_tensor_new(kd, mt->ndim, mt->shape, 1) : NULL;
    if (!out) {
        Py_XDECREF(g);
        return -1;
    }
    if (m == 0)
        memcpy(cddp_data(out), cddp_data(g), p.isz);
    else if (cddp_numel(g) > 0 && kd == CDDP_FLOAT32)
        rep_bwd_f32(&p, 0, (float *)cddp_data(out), (const float *)cddp_data(g));
    else if (cddp_numel(g) > 0)
        rep_bwd_f64(&p, 0, (double *)cddp_data(out), (const double *)cddp_data(g));
    Py_DECREF(g);
    gin[0] = kd == mt->dtype ? out : cddp_tensor_cast_steal(out, mt->dtype);
    return gin[0] ? 0 : -1;
}

/* x's elements as xs (m dims) repeated r times, into a new tensor of shape oshape (numel
 * prod(xs r)); sst: x's strides over xs (NULL: x is made contiguous first). History
 * RepeatBackward0 to x. */
static PyObject *repeat_run(TensorObject *x, int m, const int64_t *xs, const int64_t *sst,
                            const int64_t *r, int ond, const int64_t *oshape)
{
    rep_plan p;
    int64_t iparams[1 + 2 * CDDP_MAX_DIMS], cst[CDDP_MAX_DIMS];
    TensorObject *src = sst ? (TensorObject *)Py_NewRef(x) : cddp_tensor_contiguous_raw(x);
    TensorObject *out;
    if (!src)
        return NULL;
    if (!sst) {
        cddp_contiguous_strides(m, xs, cst);
        sst = cst;
    }
    out = cddp_tensor_new(x->dtype, ond, oshape, 0);   /* first: it checks the sizes' product */
    if (out)
        rep_plan_init(&p, m, xs, sst, r, cddp_dtype_size[x->dtype]);
    if (out && cddp_numel(out) > 0) {
        if (m == 0) {
            memcpy(cddp_data(out), cddp_data(src), p.isz);
        } else if (cddp_numel(out) > CDDP_GIL_FREE_ELEMS) {
            Py_BEGIN_ALLOW_THREADS
            rep_fwd(&p, 0, cddp_data(src), cddp_data(out));
            Py_END_ALLOW_THREADS
        } else {
            rep_fwd(&p, 0, cddp_data(src), cddp_data(out));
        }
    }
    Py_DECREF(src);
    if (!out || !cddp_is_floating(x->dtype))
        return (PyObject *)out;
    iparams[0] = m;
    memcpy(iparams + 1, xs, sizeof(int64_t) * m);
    memcpy(iparams + 1 + m, r, sizeof(int64_t) * m);
    return cddp_shape_finish(x, out, "RepeatBackward0", repeat_backward, iparams, 1 + 2 * m);
}

/* Tensor.repeat(*sizes) and tile(dims) (tile pads short dims with leading 1s). */
static PyObject *repeat_impl(TensorObject *x, int n, const int64_t *sizes, int tile)
{
    int64_t r[CDDP_MAX_DIMS], xs[CDDP_MAX_DIMS], sst[CDDP_MAX_DIMS], osh[CDDP_MAX_DIMS];
    int m = n, pad;
    if (tile && n < x->ndim) {
        m = x->ndim;
        for (int d = 0; d < m; d++)
            r[d] = d < m - n ? 1 : sizes[d - (m - n)];
    } else {
        memcpy(r, sizes, sizeof(int64_t) * n);
    }
    if (m < x->ndim) {
        PyErr_SetString(PyExc_RuntimeError, "Number of dimensions of repeat dims can not be "
                        "smaller than number of dimensions of tensor");
        return NULL;
    }
    pad = m - x->ndim;
    for (int d = 0; d < m; d++) {
        xs[d] = d < pad ? 1 : x->shape[d - pad];
        sst[d] = d < pad ? 0 : x->strides[d - pad];
        if (__builtin_mul_overflow(xs[d], r[d], &osh[d])) {
            PyErr_SetString(PyExc_RuntimeError, "repeat: the output size overflows int64");
            return NULL;
        }
    }
    for (int d = 0; d < m; d++) {
        if (r[d] < 0) {
            char buf[256];
            cddp_shape_format(buf, sizeof buf, m, osh);
            PyErr_Format(PyExc_RuntimeError,
                         "Trying to create tensor with negative dimension %lld: %s",
                         (long long)osh[d], buf);
            return NULL;
        }
    }
    return repeat_run(x, m, xs, sst, r, m, osh);
}

/* ---- repeat_interleave ---------------------------------------------------------------- */

/* The indices repeat_interleave(repeats) returns: i repeated reps[i] times. reps: 0-D/1-D
 * int64/int32 tensor. New int64 tensor; RuntimeError on negatives or an output_size (>= 0)
 * that does not match the total. */
static TensorObject *repeated_indices(TensorObject *reps, int64_t output_size)
{
    TensorObject *rc = cddp_tensor_cast_raw(reps, CDDP_INT64), *out = NULL;
    int64_t n, total = 0;
    const int64_t *rv;
    if (rc)
        Py_SETREF(rc, cddp_tensor_contiguous_raw(rc));
    if (!rc)
        return NULL;
    n = cddp_numel(rc);
    rv = (const int64_t *)cddp_data(rc);
    for (int64_t i = 0; i < n; i++) {
        if (rv[i] < 0) {
            PyErr_SetString(PyExc_RuntimeError, "repeats can not be negative");
            goto done;
        }
        if (__builtin_add_overflow(total, rv[i], &total)) {
            PyErr_SetString(PyExc_RuntimeError, "repeat_interleave: the total of repeats "
                            "overflows int64");
            goto done;
        }
    }
    if (output_size >= 0 && output_size != total) {
        PyErr_SetString(PyExc_RuntimeError, "allocated size does not match required size");
        goto done;
    }
    out = cddp_tensor_new(CDDP_INT64, 1, &total, 0);
    if (out) {
        int64_t *o = (int64_t *)cddp_data(out), k = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < rv[i]; j++)
                o[k++] = i;
    }
done:
    Py_DECREF(rc);
    return out;
}

/* repeat_interleave(x, repeats, dim, output_size): dimo NULL/None = over the flattened x. */
static PyObject *repeat_interleave_impl(TensorObject *x, PyObject *ro, PyObject *dimo,
                                        int64_t output_size)
{
    int64_t dim = 0, reps, n;
    PyObject *flat = NULL, *res = NULL;
    TensorObject *src = x;
    if (dimo && dimo != Py_None) {
        if (cddp_shape_get_int(dimo, "repeat_interleave", "dim", &dim) < 0 ||
            cddp_shape_wrap_dim(dim, x->ndim, &dim) < 0)
            return NULL;
    } else {                         /* over the flattened input */
        if (!(flat = PyObject_CallMethod((PyObject *)x, "reshape", "(i)", -1)))
            return NULL;
        src = (TensorObject *)flat;
    }
    n = src->ndim ? src->shape[dim] : 1;
    if (cddp_tensor_check(ro)) {
        TensorObject *rt = (TensorObject *)ro, *idx;
        if (rt->ndim > 1) {
            PyErr_SetString(PyExc_RuntimeError, "repeats must be 0-dim or 1-dim tensor");
            goto done;
        }
        if (rt->dtype != CDDP_INT64 && rt->dtype != CDDP_INT32) {
            PyErr_Format(PyExc_NotImplementedError,
                         "\"repeat_interleave_cpu\" not implemented for '%s'",
                         rt->dtype == CDDP_FLOAT32 ? "Float" : rt->dtype == CDDP_FLOAT64 ? "Double"
                         : "Bool");
            goto done;
        }
        if (cddp_numel(rt) == 1 && n != 1) {       /* one count for every slice */
            TensorObject *r64 = cddp_tensor_cast_raw(rt, CDDP_INT64);
            if (!r64)
                goto done;
            reps = *(const int64_t *)cddp_data(r64);
            Py_DECREF(r64);
        } else {
            if (cddp_numel(rt) != n) {
                PyErr_Format(PyExc_RuntimeError, "repeats must have the same size as input "
                             "along dim, but got repeats.size(0) = %lld and input.size(%lld) = "
                             "%lld", (long long)cddp_numel(rt), (long long)dim, (long long)n);
                goto done;
            }
            if (!(idx = repeated_indices(rt, output_size)))
                goto done;
            res = PyObject_CallMethod((PyObject *)src, "index_select", "(LO)", (long long)dim,
                                      (PyObject *)idx);
            Py_DECREF(idx);
            goto done;
        }
    } else if (cddp_shape_get_int(ro, "repeat_interleave", "repeats", &reps) < 0) {
        goto done;
    }
    if (reps < 0) {
        PyErr_SetString(PyExc_RuntimeError, "Repeats must be non-negative");
        goto done;
    }
    if (reps > 0 && n > INT64_MAX / reps) {
        PyErr_SetString(PyExc_RuntimeError, "repeat_interleave: the output size overflows int64");
        goto done;
    }
    if (output_size >= 0 && output_size != n * reps) {
        PyErr_SetString(PyExc_RuntimeError, "allocated size does not match required size");
        goto done;
    }
    {
        /* src (.., n, ..) seen as (.., n, 1, ..) repeated (1.., reps, ..): the r copies of
         * each slice land next to it */
        int64_t xs[CDDP_MAX_DIMS], sst[CDDP_MAX_DIMS], r[CDDP_MAX_DIMS], osh[CDDP_MAX_DIMS];
        int m = src->ndim + 1, k = 0;
        if (src->ndim == 0) {
            xs[0] = 1; sst[0] = 0; r[0] = reps;
            return repeat_run(src, 1, xs, sst, r, 1, r);
        }
        if (m > CDDP_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions",
                         CDDP_MAX_DIMS);
            goto done;
        }
        for (int d = 0; d < src->ndim; d++) {
            xs[k] = src->shape[d];
            sst[k] = src->strides[d];
            r[k++] = 1;
            osh[d] = src->shape[d] * (d == dim ? reps : 1);
            if (d == dim) {
                xs[k] = 1;
                sst[k] = 0;
                r[k++] = reps;
            }
        }
        res = repeat_run(src, m, xs, sst, r, src->ndim, osh);
    }
done:
    Py_XDECREF(flat);
    return res;
}

/* ---- flip / roll ---------------------------------------------------------------------- */

/* A new contiguous copy of x with the dims in `mask` reversed. */
static TensorObject *flip_raw(TensorObject *x, uint32_t mask)
{
    int64_t st[CDDP_MAX_DIMS], off = x->offset;
    TensorObject *v, *out = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
    if (!out)
        return NULL;
    if (cddp_numel(x) == 0)
        return out;
    for (int d = 0; d < x->ndim; d++) {
        st[d] = x->strides[d];
        if (mask >> d & 1) {         /* start at the last element, step backwards */
            off += (x->shape[d] - 1) * x->strides[d];
            st[d] = -st[d];
        }
    }
    v = cddp_tensor_alias(x, x->ndim, x->shape, st, off);
    if (!v || cddp_copy_into(out, v) < 0)
        Py_CLEAR(out);
    Py_XDECREF(v);
    return out;
}

static int flip_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = flip_raw(gout[0], (uint32_t)self->i[0]);
    return gin[0] ? 0 : -1;
}

static PyObject *flip_impl(TensorObject *x, int n, const int64_t *dims)
{
    uint32_t mask = 0;
    int64_t p[1];
    for (int k = 0; k < n; k++) {
        int64_t d;
        if (cddp_shape_wrap_dim(dims[k], x->ndim, &d) < 0)
            return NULL;
        if (mask >> d & 1) {
            PyErr_Format(PyExc_RuntimeError, "dim %lld appears multiple times in the list of dims",
                         (long long)d);
            return NULL;
        }
        mask |= x->ndim ? 1u << d : 0;
    }
    p[0] = mask;
    return cddp_shape_finish(x, flip_raw(x, mask), "FlipBackward0", flip_backward, p, 1);
}

/* out = x rolled by shift[d] (0 <= shift < size) along every dim d: 2^k block copies over
 * the k dims with a nonzero shift. */
static TensorObject *roll_raw(TensorObject *x, const int64_t *shift)
{
    int dims[CDDP_MAX_DIMS], k = 0;
    TensorObject *out = cddp_tensor_new(x->dtype, x->ndim, x->shape, 0);
    if (!out)
        return NULL;
    for (int d = 0; d < x->ndim; d++)
        if (shift[d])
            dims[k++] = d;
    for (uint32_t b = 0; b < (1u << k); b++) {
        int64_t sh[CDDP_MAX_DIMS], soff = x->offset, doff = 0;
        TensorObject *s, *t;
        memcpy(sh, x->shape, sizeof(int64_t) * x->ndim);
        for (int j = 0; j < k; j++) {
            int d = dims[j];
            int64_t n = x->shape[d], s0 = shift[d];
            /* bit set: the tail [n - s0, n) goes to the front [0, s0); else the head shifts */
            sh[d] = b >> j & 1 ? s0 : n - s0;
            soff += (b >> j & 1 ? n - s0 : 0) * x->strides[d];
            doff += (b >> j & 1 ? 0 : s0) * out->strides[d];
        }
        s = cddp_tensor_alias(x, x->ndim, sh, x->strides, soff);
        t = s ? cddp_tensor_alias(out, x->ndim, sh, out->strides, doff) : NULL;
        if (!t || cddp_copy_into(t, s) < 0) {
            Py_XDECREF(s);
            Py_XDECREF(t);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(s);
        Py_DECREF(t);
    }
    return out;
}

/* RollBackward0: i[0..ndim) the forward shifts; the gradient rolls back. */
static int roll_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    int64_t back[CDDP_MAX_DIMS];
    TensorObject *g = gout[0];
    if (!g || !self->next[0].node)
        return 0;
    for (int d = 0; d < g->ndim; d++)
        back[d] = self->i[d] ? g->shape[d] - self->i[d] : 0;
    gin[0] = roll_raw(g, back);
    return gin[0] ? 0 : -1;
}

static PyObject *roll_impl(TensorObject *x, int ns, const int64_t *shifts, int nd,
                           const int64_t *dims)
{
    int64_t shift[CDDP_MAX_DIMS] = {0};
    if (ns == 0) {
        PyErr_SetString(PyExc_RuntimeError, "`shifts` required");
        return NULL;
    }
    if (nd == 0) {                   /* roll the flattened tensor, then restore the shape */
        PyObject *flat, *rolled, *res;
        if (ns != 1) {
            PyErr_Format(PyExc_RuntimeError, "shifts and dimensions must align. shifts: %d, "
                         "dims:0", ns);
            return NULL;
        }
        flat = PyObject_CallMethod((PyObject *)x, "reshape", "(i)", -1);
        if (!flat)
            return NULL;
        rolled = roll_impl((TensorObject *)flat, 1, shifts, 1, &(int64_t){0});
        Py_DECREF(flat);
        if (!rolled)
            return NULL;
        res = PyObject_CallMethod(rolled, "view", "(N)", cddp_size_from(x->ndim, x->shape));
        Py_DECREF(rolled);
        return res;
    }
    if (ns != nd) {
        PyErr_Format(PyExc_RuntimeError, "shifts and dimensions must align. shifts: %d, dims:%d",
                     ns, nd);
        return NULL;
    }
    for (int k = 0; k < nd; k++) {
        int64_t d, n;
        if (cddp_shape_wrap_dim(dims[k], x->ndim, &d) < 0)
            return NULL;
        n = x->ndim ? x->shape[d] : 1;
        if (x->ndim && n > 0)        /* a repeated dim rolls by the sum of its shifts */
            shift[d] = ((shift[d] + shifts[k]) % n + n) % n;
    }
    return cddp_shape_finish(x, roll_raw(x, shift), "RollBackward0", roll_backward, shift,
                             x->ndim);
}

/* ---- movedim -------------------------------------------------------------------------- */

/* dims given as an int or a sequence of ints, wrapped and checked for repeats */
static int dim_seq(TensorObject *x, PyObject *o, const char *what, int *n, int64_t *out)
{
    char seen[CDDP_MAX_DIMS] = {0};
    if (PyLong_Check(o) || (!PySequence_Check(o) && PyIndex_Check(o))) {
        *n = 1;
        if (cddp_shape_get_int(o, "movedim", what, &out[0]) < 0)
            return -1;
    } else if (cddp_shape_int_list("movedim", &o, 1, n, out) < 0) {
        return -1;
    }
    for (int k = 0; k < *n; k++) {
        if (cddp_shape_wrap_dim(out[k], x->ndim, &out[k]) < 0)
            return -1;
        if (x->ndim && seen[out[k]]++) {
            char buf[256];
            cddp_shape_format(buf, sizeof buf, *n, out);
            PyErr_Format(PyExc_RuntimeError, "movedim: repeated dim in `%s` (%s)", what, buf);
            return -1;
        }
    }
    return 0;
}

static PyObject *movedim_impl(TensorObject *x, PyObject *so, PyObject *dso)
{
    int ns, nd;
    int64_t src[CDDP_MAX_DIMS], dst[CDDP_MAX_DIMS], perm[CDDP_MAX_DIMS];
    char used_src[CDDP_MAX_DIMS] = {0}, used_dst[CDDP_MAX_DIMS] = {0};
    PyObject *tup, *res;
    if (dim_seq(x, so, "source", &ns, src) < 0 || dim_seq(x, dso, "destination", &nd, dst) < 0)
        return NULL;
    if (ns != nd) {
        char b1[256], b2[256];
        cddp_shape_format(b1, sizeof b1, ns, src);
        cddp_shape_format(b2, sizeof b2, nd, dst);
        PyErr_Format(PyExc_RuntimeError, "movedim: Invalid source or destination dims: source "
                     "(%s dims) should contain the same number of dims as destination (%s dims)",
                     b1, b2);
        return NULL;
    }
    if (x->ndim == 0)
        return PyObject_CallMethod((PyObject *)x, "view", "(())");
    /* the moved dims take their destinations; the rest keep their order in the gaps */
    for (int k = 0; k < ns; k++) {
        perm[dst[k]] = src[k];
        used_src[src[k]] = used_dst[dst[k]] = 1;
    }
    for (int d = 0, s = 0; d < x->ndim; d++) {
        if (used_dst[d])
            continue;
        while (used_src[s])
            s++;
        perm[d] = s++;
    }
    tup = PyTuple_New(x->ndim);
    if (!tup)
        return NULL;
    for (int d = 0; d < x->ndim; d++) {
        PyObject *v = PyLong_FromLongLong(perm[d]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, d, v);
    }
    res = PyObject_CallMethod((PyObject *)x, "permute", "(O)", tup);
    Py_DECREF(tup);
    return res;
}

/* ---- bindings ------------------------------------------------------------------------- */

/* The input: self for methods; for module functions the first positional (or `input`). */
static TensorObject *take_input(PyObject *self, PyObject *const **args, Py_ssize_t *nargs,
                                const char *fn)
{
    if (self)
        return (TensorObject *)self;
    if (*nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'input' (pos 1)", fn);
        return NULL;
    }
    if (cddp_shape_check_tensor((*args)[0], fn, "input") < 0)
        return NULL;
    (*nargs)--;
    return (TensorObject *)(*args)++[0];
}

/* Tensor.repeat(*sizes) */
static PyObject *t_repeat(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    static const char *const names[] = {"repeats"};
    PyObject *buf[1];
    int n;
    int64_t sizes[CDDP_MAX_DIMS];
    if (cddp_shape_keywords_as_positional("repeat", &args, &nargs, kwnames, names, 1,
                                          buf) < 0 ||
        cddp_shape_int_list("repeat", args, nargs, &n, sizes) < 0)
        return NULL;
    return repeat_impl((TensorObject *)self, n, sizes, 0);
}

static PyObject *tile_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"dims"};
    PyObject *a[1];
    int n;
    int64_t sizes[CDDP_MAX_DIMS];
    TensorObject *x = take_input(self, &args, &nargs, "tile");
    if (!x)
        return NULL;
    if (self && nargs > 1 && !kw)    /* Tensor.tile(2, 3) as well as tile((2, 3)) */
        a[0] = NULL;
    else if (cddp_shape_parse_args("tile", args, nargs, kw, names, 1, 1, a) < 0)
        return NULL;
    if (a[0] ? cddp_shape_int_list("tile", a, 1, &n, sizes) < 0
             : cddp_shape_int_list("tile", args, nargs, &n, sizes) < 0)
        return NULL;
    return repeat_impl(x, n, sizes, 1);
}

static PyObject *ri_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw)
{
    static const char *const names[] = {"repeats", "dim", "output_size"};
    PyObject *a[3];
    int64_t osize = -1;
    TensorObject *x = take_input(self, &args, &nargs, "repeat_interleave");
    if (!x || cddp_shape_parse_args("repeat_interleave", args, nargs, kw, names, 3, 2, a) < 0)
        return NULL;
    if (a[2] && a[2] != Py_None &&
        cddp_shape_get_int(a[2], "repeat_interleave", "output_size", &osize) < 0)
        return NULL;
    if (!a[0]) {                     /* repeat_interleave(repeats): the repeated indices */
        if (x->ndim > 1) {
            PyErr_SetString(PyExc_RuntimeError, "repeats must be 0-dim or 1-dim tensor");
            return NULL;
        }
        if (x->dtype != CDDP_INT64 && x->dtype != CDDP_INT32) {
            PyErr_SetString(PyExc_RuntimeError, "repeats has to be Long or Int tensor");
            return NULL;
        }
        return (PyObject *)repeated_indices(x, osize);
    }
    return repeat_interleave_impl(x, a[0], a[1], osize);
}

static PyObject *roll_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"shifts", "dims"};
    PyObject *a[2];
    int ns = 0, nd = 0;
    int64_t shifts[CDDP_MAX_DIMS], dims[CDDP_MAX_DIMS];
    TensorObject *x = take_input(self, &args, &nargs, "roll");
    if (!x || cddp_shape_parse_args("roll", args, nargs, kw, names, 2, 2, a) < 0)
        return NULL;
    if (a[0] && cddp_shape_int_list("roll", a, 1, &ns, shifts) < 0)
        return NULL;
    if (a[1] && a[1] != Py_None && cddp_shape_int_list("roll", a + 1, 1, &nd, dims) < 0)
        return NULL;
    if (a[1] && a[1] != Py_None && nd == 0 && ns) {
        PyErr_Format(PyExc_RuntimeError, "shifts and dimensions must align. shifts: %d, dims:0",
                     ns);
        return NULL;
    }
    return roll_impl(x, ns, shifts, nd, dims);
}

/* flip(dims) (module: flip(input, dims)); the method also takes flip(0, 1) */
static PyObject *flip_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kw)
{
    static const char *const names[] = {"dims"};
    PyObject *a[1];
    int n;
    int64_t dims[CDDP_MAX_DIMS];
    TensorObject *x = take_input(self, &args, &nargs, "flip");
    if (!x)
        return NULL;
    if (!kw && nargs >= 1) {
        if (cddp_shape_int_list("flip", args, nargs, &n, dims) < 0)
            return NULL;
    } else {
        if (cddp_shape_parse_args("flip", args, nargs, kw, names, 1, 1, a) < 0)
            return NULL;
        if (!a[0]) {
            PyErr_SetString(PyExc_TypeError, "flip() missing required argument 'dims' (pos 1)");
            return NULL;
        }
        if (cddp_shape_int_list("flip", a, 1, &n, dims) < 0)
            return NULL;
    }
    return flip_impl(x, n, dims);
}

/* fliplr (lr = 1: dim 1 of a >= 2-D input) / flipud (dim 0 of a >= 1-D input) */
static PyObject *flip2(PyObject *o, int lr)
{
    TensorObject *x = (TensorObject *)o;
    int64_t d = lr;
    if (cddp_shape_check_tensor(o, lr ? "fliplr" : "flipud", "input") < 0)
        return NULL;
    if (x->ndim < 1 + lr) {
        PyErr_Format(PyExc_RuntimeError, "Input must be >= %d-d.", 1 + lr);
        return NULL;
    }
    return flip_impl(x, 1, &d);
}

static PyObject *t_fliplr(PyObject *self, PyObject *unused) { return flip2(self, 1); }
static PyObject *t_flipud(PyObject *self, PyObject *unused) { return flip2(self, 0); }
static PyObject *m_fliplr(PyObject *m, PyObject *x) { return flip2(x, 1); }
static PyObject *m_flipud(PyObject *m, PyObject *x) { return flip2(x, 0); }

static PyObject *movedim_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kw, const char *fn)
{
    static const char *const names[] = {"source", "destination"};
    PyObject *a[2];
    TensorObject *x = take_input(self, &args, &nargs, fn);
    if (!x || cddp_shape_parse_args(fn, args, nargs, kw, names, 2, 2, a) < 0)
        return NULL;
    if (!a[0] || !a[1]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn,
                     a[0] ? "destination" : "source");
        return NULL;
    }
    return movedim_impl(x, a[0], a[1]);
}

static PyObject *narrow_copy_binding(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kw)
{
    PyObject *v, *out;
    TensorObject *x = take_input(self, &args, &nargs, "narrow_copy");
    if (!x)
        return NULL;
    {
        PyObject *meth = PyObject_GetAttrString((PyObject *)x, "narrow");
        if (!meth)
            return NULL;
        v = PyObject_Vectorcall(meth, args, (size_t)nargs, kw);
        Py_DECREF(meth);
    }
    if (!v)
        return NULL;
    /* a contiguous copy, as torch's (clone would keep a permuted input's layout) */
    out = PyObject_CallMethod(v, "contiguous", NULL);
    if (out == v) {
        Py_DECREF(out);
        out = PyObject_CallMethod(v, "clone", NULL);
    }
    Py_DECREF(v);
    return out;
}

#define PAIR(NAME, IMPL)                                                                   \
    static PyObject *t_##NAME(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return IMPL(s, a, n, kw);                                                          \
    }                                                                                      \
    static PyObject *m_##NAME(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw) \
    {                                                                                      \
        return IMPL(NULL, a, n, kw);                                                       \
    }
PAIR(tile, tile_binding)
PAIR(repeat_interleave, ri_binding)
PAIR(roll, roll_binding)
PAIR(flip, flip_binding)
PAIR(narrow_copy, narrow_copy_binding)

static PyObject *movedim_b(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return movedim_binding(s, a, n, kw, "movedim");
}
static PyObject *moveaxis_b(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return movedim_binding(s, a, n, kw, "moveaxis");
}
PAIR(movedim, movedim_b)
PAIR(moveaxis, moveaxis_b)

#define FK (METH_FASTCALL | METH_KEYWORDS)
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef cddp_repeat_tensor_methods[] = {
    {"repeat", FN(t_repeat), METH_FASTCALL | METH_KEYWORDS,
     "repeat(*sizes): tile the tensor (a copy)"},
    {"tile", FN(t_tile), FK, "tile(dims): repeat with short dims padded by leading 1s"},
    {"repeat_interleave", FN(t_repeat_interleave), FK,
     "repeat_interleave(repeats, dim=None, *, output_size=None)"},
    {"roll", FN(t_roll), FK, "roll(shifts, dims=None)"},
    {"flip", FN(t_flip), FK, "flip(dims): reversed along dims (a copy)"},
    {"fliplr", t_fliplr, METH_NOARGS, "fliplr(): flip(1)"},
    {"flipud", t_flipud, METH_NOARGS, "flipud(): flip(0)"},
    {"narrow_copy", FN(t_narrow_copy), FK, "narrow_copy(dim, start, length): narrow, copied"},
    {"movedim", FN(t_movedim), FK, "movedim(source, destination): a permuted view"},
    {"moveaxis", FN(t_moveaxis), FK, "moveaxis(source, destination): movedim"},
    {NULL},
};

PyMethodDef cddp_repeat_module_methods[] = {
    {"tile", FN(m_tile), FK, "tile(input, dims) -> Tensor"},
    {"repeat_interleave", FN(m_repeat_interleave), FK,
     "repeat_interleave(input, repeats, dim=None, *, output_size=None) / "
     "repeat_interleave(repeats)"},
    {"roll", FN(m_roll), FK, "roll(input, shifts, dims=None) -> Tensor"},
    {"flip", FN(m_flip), FK, "flip(input, dims) -> Tensor"},
    {"fliplr", m_fliplr, METH_O, "fliplr(input) -> Tensor"},
    {"flipud", m_flipud, METH_O, "flipud(input) -> Tensor"},
    {"narrow_copy", FN(m_narrow_copy), FK, "narrow_copy(input, dim, start, length)"},
    {"movedim", FN(m_movedim), FK, "movedim(input, source, destination)"},
    {"moveaxis", FN(m_moveaxis), FK, "moveaxis(input, source, destination)"},
    {NULL},
};
