/* ops/creation/creation.c — factory functions and in-place fills, plus this file family's method tables.
 *
 * Mirrors: torch.zeros / ones / empty / full (+ *_like), Tensor.new_zeros / new_ones /
 * new_empty / new_full, Tensor.zero_ / fill_ / copy_ / item.
 * The data constructors (tensor, as_tensor, tolist) are in ops/creation/data.c, ranges in
 * ops/creation/range.c, repr in core/repr.c, random functions in random_*.c; this file's method tables
 * at the bottom list all of them (module.c adds them to the Tensor type and the module).
 *
 * dtype defaults follow torch: zeros/ones/empty -> default float dtype; full -> inferred from
 * the fill value (bool -> bool, int -> int64, float -> default).
 */
#include "ops/creation/creation.h"
#include "module.h"
#include "ops/random/random.h"
#include <math.h>
#include <string.h>

/* ---- zeros / ones / empty / full ------------------------------------------------------ */

/* fill: 0 zeros, 1 ones, 2 uninitialized; meta: no values at all (nothing filled) */
static PyObject *make_filled(const char *fname, int ndim, const int64_t *shape, cddp_dtype dt,
                             int fill, int rg, int meta, const int64_t *st)
{
    TensorObject *t;
    if (cddp_check_sizes(fname, ndim, shape) < 0)
        return NULL;
    t = st ? cddp_tensor_new_strided(dt, ndim, shape, st, meta ? 2 : fill == 0)
           : meta ? cddp_tensor_new_meta(dt, ndim, shape) : cddp_tensor_new(dt, ndim, shape, fill == 0);
    if (t && fill == 1 && !meta) {
        cddp_scalar one = {1, 1, 1.0};
        if (cddp_fill_raw(t, &one) < 0)
            Py_CLEAR(t);
    }
    return cddp_factory_finish(t, rg, 0);
}

static const char *const sized_names[] = {"size", "dtype", "device", "requires_grad", "layout",
                                          "pin_memory", "out", "memory_format", NULL};

static PyObject *sized_factory(const char *fname, int fill, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kw)
{
    PyObject *v[8] = {NULL};
    int ndim, has_dt, rg, meta, fmt;
    int64_t shape[CDDP_MAX_DIMS], st[CDDP_MAX_DIMS];
    cddp_dtype dt;
    if (cddp_kw_parse(fname, args, nargs, kw, sized_names, v) < 0 ||
        cddp_parse_size(fname, args, nargs, v[0], &ndim, shape) < 0 ||
        cddp_parse_dtype_opt(v[1], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[2], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[3], &rg) < 0 || cddp_parse_memory_format(v[7], &fmt) < 0)
        return NULL;
    if (v[6] && v[6] != Py_None) {
        PyErr_Format(PyExc_TypeError, "%s(): out= is not supported by cddp", fname);
        return NULL;
    }
    /* channels_last(_3d) lays the new tensor out that way; the others are row-major */
    if (fmt >= CDDP_MF_CHANNELS_LAST) {
        TensorObject probe;
        probe.ndim = ndim;
        memcpy(probe.shape, shape, sizeof(int64_t) * ndim);
        if (cddp_format_strides(&probe, fmt, st) < 0)
            return NULL;
    }
    return make_filled(fname, ndim, shape, has_dt ? dt : cddp_state()->default_dtype, fill, rg,
                       meta, fmt >= CDDP_MF_CHANNELS_LAST ? st : NULL);
}

static PyObject *py_zeros(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return sized_factory("zeros", 0, args, nargs, kw);
}

static PyObject *py_ones(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return sized_factory("ones", 1, args, nargs, kw);
}

static PyObject *py_empty(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return sized_factory("empty", 2, args, nargs, kw);
}

static PyObject *make_full(const char *fname, int ndim, const int64_t *shape, PyObject *value,
                           int has_dt, cddp_dtype dt, int rg, int meta, const int64_t *st)
{
    cddp_scalar s;
    TensorObject *t;
    if (cddp_scalar_from_py(value, &s, fname) < 0 || cddp_check_sizes(fname, ndim, shape) < 0)
        return NULL;
    if (!has_dt)
        dt = cddp_scalar_dtype(&s);
    t = st ? cddp_tensor_new_strided(dt, ndim, shape, st, meta ? 2 : 0)
           : meta ? cddp_tensor_new_meta(dt, ndim, shape) : cddp_tensor_new(dt, ndim, shape, 0);
    if (t && !meta && cddp_fill_raw(t, &s) < 0)
        Py_CLEAR(t);
    return cddp_factory_finish(t, rg, 0);
}

/* full(size, fill_value, *, dtype=None, ...) */
static PyObject *py_full(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"size", "fill_value", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", "out", NULL};
    PyObject *v[8] = {NULL};
    int ndim, has_dt, rg, meta;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "full() takes 2 positional arguments but %zd were given",
                     nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("full", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !v[1]) {
        PyErr_SetString(PyExc_TypeError, "full() missing required argument 'size' or 'fill_value'");
        return NULL;
    }
    if (PyLong_Check(v[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "full(): argument 'size' (position 1) must be tuple of ints, not int");
        return NULL;
    }
    if (cddp_parse_size_obj("full", v[0], &ndim, shape) < 0 ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    return make_full("full", ndim, shape, v[1], has_dt, dt, rg, meta, NULL);
}

/* zeros_like / ones_like / empty_like / full_like(input, [fill_value,] *, dtype=None, ...) */
static PyObject *like_factory(const char *fname, int fill, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"input", "fill_value", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory",
                                        "memory_format", NULL};
    PyObject *v[8] = {NULL};
    Py_ssize_t npos = fill == 3 ? 2 : 1;
    int has_dt, rg, meta, fmt;
    int64_t st[CDDP_MAX_DIMS];
    cddp_dtype dt;
    TensorObject *in;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd positional argument(s) but %zd were given",
                     fname, npos, nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", fname,
                     v[0] ? Py_TYPE(v[0])->tp_name : "nothing");
        return NULL;
    }
    if ((fill == 3) != (v[1] != NULL)) {
        PyErr_Format(PyExc_TypeError, "%s() got an unexpected or missing 'fill_value'", fname);
        return NULL;
    }
    in = (TensorObject *)v[0];
    if (cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_is_meta(in))) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (cddp_parse_memory_format(v[7], &fmt) < 0 || cddp_format_strides(in, fmt, st) < 0)
        return NULL;
    if (!has_dt)
        dt = in->dtype;
    if (fill == 3)
        return make_full(fname, in->ndim, in->shape, v[1], 1, dt, rg, meta, st);
    return make_filled(fname, in->ndim, in->shape, dt, fill, rg, meta, st);
}

static PyObject *py_zeros_like(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return like_factory("zeros_like", 0, a, n, kw);
}

static PyObject *py_ones_like(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return like_factory("ones_like", 1, a, n, kw);
}

static PyObject *py_empty_like(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return like_factory("empty_like", 2, a, n, kw);
}

static PyObject *py_full_like(PyObject *m, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return like_factory("full_like", 3, a, n, kw);
}

/* ---- Tensor.new_* --------------------------------------------------------------------- */

/* new_zeros(*size, dtype=None, ...): self's dtype unless overridden */
static PyObject *new_sized(TensorObject *self, const char *fname, int fill, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kw)
{
    PyObject *v[8] = {NULL};
    int ndim, has_dt, rg, meta;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    if (cddp_kw_parse(fname, args, nargs, kw, sized_names, v) < 0 ||
        cddp_parse_size(fname, args, nargs, v[0], &ndim, shape) < 0 ||
        cddp_parse_dtype_opt(v[1], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[2], cddp_is_meta(self))) < 0 ||
        cddp_parse_flag(v[3], &rg) < 0)
        return NULL;
    return make_filled(fname, ndim, shape, has_dt ? dt : self->dtype, fill, rg, meta, NULL);
}

static PyObject *t_new_zeros(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return new_sized((TensorObject *)s, "new_zeros", 0, a, n, kw);
}

static PyObject *t_new_ones(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return new_sized((TensorObject *)s, "new_ones", 1, a, n, kw);
}

static PyObject *t_new_empty(PyObject *s, PyObject *const *a, Py_ssize_t n, PyObject *kw)
{
    return new_sized((TensorObject *)s, "new_empty", 2, a, n, kw);
}

static PyObject *t_new_full(PyObject *s, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"size", "fill_value", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[7] = {NULL};
    int ndim, has_dt, rg, meta;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "new_full() takes 2 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("new_full", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !v[1]) {
        PyErr_SetString(PyExc_TypeError, "new_full() missing required argument 'size' or "
                        "'fill_value'");
        return NULL;
    }
    if (cddp_parse_size_obj("new_full", v[0], &ndim, shape) < 0 ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_is_meta((TensorObject *)s))) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    return make_full("new_full", ndim, shape, v[1], 1, has_dt ? dt : ((TensorObject *)s)->dtype,
                     rg, meta, NULL);
}

/* ---- in-place: zero_ / fill_ / copy_ -------------------------------------------------- */

static PyObject *t_zero_(PyObject *self, PyObject *unused)
{
    TensorObject *t = (TensorObject *)self;
    cddp_scalar z = {1, 0, 0.0};
    if (cddp_check_inplace(t) < 0 || cddp_fill_raw(t, &z) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_inplace_zero_history(t, "ZeroBackward0") < 0)
        return NULL;
    return Py_NewRef(self);
}

/* Backward of an op that overwrites dst with src (copy_, and fill_ with a 0-dim tensor value):
 * the old dst gets zeros; src gets the gradient summed to its shape (a broadcast scalar's
 * gradient is the total), in its dtype. */
static int overwrite_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    if (!g)
        return 0;
    if (self->next[0].node &&
        !(gin[0] = cddp_tensor_new(self->meta[0].dtype, self->meta[0].ndim, self->meta[0].shape, 1)))
        return -1;
    if (self->next[1].node) {
        TensorObject *s = cddp_sum_to(g, self->meta[1].ndim, self->meta[1].shape);
        if (!s)
            return -1;
        gin[1] = cddp_tensor_cast_raw(s, self->meta[1].dtype);
        Py_DECREF(s);
        if (!gin[1])
            return -1;
    }
    return 0;
}

static PyObject *t_fill_(PyObject *self, PyObject *value)
{
    TensorObject *t = (TensorObject *)self;
    cddp_scalar s;
    if (cddp_tensor_check(value) && ((TensorObject *)value)->ndim != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "fill_ only supports 0-dimension value tensor but got tensor with %d "
                     "dimensions.", ((TensorObject *)value)->ndim);
        return NULL;
    }
    if (cddp_scalar_from_py(value, &s, "fill_") < 0 || cddp_check_inplace(t) < 0 ||
        cddp_fill_raw(t, &s) < 0)
        return NULL;
    cddp_bump_version(t);
    if (cddp_tensor_check(value) && cddp_needs_grad((TensorObject *)value) &&
        cddp_is_floating(t->dtype)) {
        int err;
        TensorObject *ins[2] = {t, (TensorObject *)value};
        NodeObject *node = cddp_maybe_node("FillBackward3", overwrite_backward, 2, ins, &err);
        if (err)
            return NULL;
        if (node) {
            int rc = cddp_set_inplace_history(t, node, 0);
            Py_DECREF(node);
            if (rc < 0)
                return NULL;
        }
    } else if (cddp_inplace_zero_history(t, "FillBackward2") < 0) {
        return NULL;
    }
    return Py_NewRef(self);
}

/* fill_(value) or fill_(value=...) */
static PyObject *t_fill_kw(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw != 1 ||
        (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "value"))) {
        PyErr_SetString(PyExc_TypeError, "fill_() takes exactly one argument (value)");
        return NULL;
    }
    return t_fill_(self, args[0]);
}

/* [lo, hi) bytes a tensor can touch */
static void byte_range(const TensorObject *t, uintptr_t *lo, uintptr_t *hi)
{
    intptr_t a = 0, b = 0, isz = (intptr_t)cddp_dtype_size[t->dtype];
    for (int d = 0; d < t->ndim; d++) {
        intptr_t ext = (intptr_t)(t->shape[d] - 1) * (intptr_t)t->strides[d] * isz;
        if (t->shape[d] == 0)
            ext = 0;
        if (ext < 0) a += ext; else b += ext;
    }
    *lo = (uintptr_t)cddp_data(t) + (uintptr_t)a;
    *hi = (uintptr_t)cddp_data(t) + (uintptr_t)b + (uintptr_t)isz;
}

static int may_overlap(const TensorObject *a, const TensorObject *b)
{
    uintptr_t alo, ahi, blo, bhi;
    if (cddp_numel(a) == 0 || cddp_numel(b) == 0)
        return 0;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

static int same_view(const TensorObject *a, const TensorObject *b)
{
    return cddp_data(a) == cddp_data(b) && a->ndim == b->ndim &&
           a->dtype == b->dtype &&
           memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) == 0 &&
           memcmp(a->strides, b->strides, sizeof(int64_t) * a->ndim) == 0;
}

/* copy_(src, non_blocking=False): dst[...] = src broadcast, converting dtype */
static PyObject *t_copy_(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"src", "non_blocking", NULL};
    PyObject *v[2] = {NULL, NULL};
    TensorObject *dst = (TensorObject *)self, *src, *tmp = NULL;
    int rc;
    if (nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "copy_() takes at most 2 positional arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("copy_", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0])) {
        PyErr_Format(PyExc_TypeError, "copy_(): argument 'src' must be Tensor, not %s",
                     v[0] ? Py_TYPE(v[0])->tp_name : "nothing");
        return NULL;
    }
    src = (TensorObject *)v[0];
    if (cddp_is_meta(src) && !cddp_is_meta(dst)) {
        PyErr_SetString(PyExc_NotImplementedError, "Cannot copy out of meta tensor; no data!");
        return NULL;
    }
    if (cddp_check_inplace(dst) < 0 || cddp_check_writable(dst) < 0)
        return NULL;
    if (!same_view(src, dst) && may_overlap(src, dst)) {
        /* overlapping memory: copy through a temporary so no element is read after it was
         * overwritten */
        tmp = cddp_tensor_new(src->dtype, src->ndim, src->shape, 0);
        if (!tmp || cddp_copy_into(tmp, src) < 0) {
            Py_XDECREF(tmp);
            return NULL;
        }
    }
    if (same_view(src, dst)) {
        cddp_bump_version(dst);
        rc = 0;
    } else {
        rc = cddp_copy_into(dst, tmp ? tmp : src);
    }
    Py_XDECREF(tmp);
    if (rc < 0)
        return NULL;
    if (cddp_is_floating(dst->dtype)) {
        int err;
        TensorObject *ins[2] = {dst, cddp_is_floating(src->dtype) ? src : NULL};
        NodeObject *node = cddp_maybe_node("CopyBackwards", overwrite_backward, 2, ins, &err);
        if (err)
            return NULL;
        if (node) {
            rc = cddp_set_inplace_history(dst, node, 0);
            Py_DECREF(node);
            if (rc < 0)
                return NULL;
        }
    }
    return Py_NewRef(self);
}

static PyObject *t_item(PyObject *self, PyObject *unused)
{
    return cddp_tensor_item((TensorObject *)self);
}

PyObject *cddp_tensor_item(TensorObject *t)
{
    char *p = cddp_data(t);   /* one element: every index is 0 */
    if (cddp_is_meta(t)) {
        PyErr_SetString(PyExc_RuntimeError, "Tensor.item() cannot be called on meta tensors");
        return NULL;
    }
    if (cddp_numel(t) != 1) {
        PyErr_Format(PyExc_RuntimeError,
                     "a Tensor with %lld elements cannot be converted to Scalar",
                     (long long)cddp_numel(t));
        return NULL;
    }
    switch (t->dtype) {
    case CDDP_FLOAT32: return PyFloat_FromDouble(*(float *)p);
    case CDDP_FLOAT64: return PyFloat_FromDouble(*(double *)p);
    case CDDP_INT64: return PyLong_FromLongLong(*(int64_t *)p);
    case CDDP_INT32: return PyLong_FromLong(*(int32_t *)p);
    case CDDP_BOOL: return PyBool_FromLong(*(uint8_t *)p != 0);
    default:
        if (cddp_is_floating(t->dtype))
            return PyFloat_FromDouble(cddp_load_double(t->dtype, p));
        return PyLong_FromLong((long)cddp_load_double(t->dtype, p));
    }
}

/* ---- tables --------------------------------------------------------------------------- */

#define FK(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL | METH_KEYWORDS, doc}

PyMethodDef cddp_creation_tensor_methods[] = {
    {"item", t_item, METH_NOARGS, "item() -> Python number of a 1-element tensor"},
    {"tolist", cddp_tensor_tolist, METH_NOARGS, "tolist() -> nested lists of Python numbers"},
    {"zero_", t_zero_, METH_NOARGS, NULL},
    FK("fill_", t_fill_kw, "fill_(value) -> self"),
    FK("copy_", t_copy_, "copy_(src, non_blocking=False) -> self (broadcasts, converts dtype)"),
    FK("new_zeros", t_new_zeros, NULL),
    FK("new_ones", t_new_ones, NULL),
    FK("new_empty", t_new_empty, NULL),
    FK("new_full", t_new_full, NULL),
    FK("new_tensor", cddp_tensor_new_tensor, NULL),
    FK("uniform_", cddp_tensor_uniform_, "uniform_(from=0, to=1, *, generator=None) -> self"),
    FK("normal_", cddp_tensor_normal_, "normal_(mean=0, std=1, *, generator=None) -> self"),
    FK("random_", cddp_tensor_random_, "random_([from,] to=None, *, generator=None) -> self"),
    FK("bernoulli_", cddp_tensor_bernoulli_, "bernoulli_(p=0.5, *, generator=None) -> self"),
    FK("exponential_", cddp_tensor_exponential_, "exponential_(lambd=1, *, generator=None)"),
    {NULL},
};

PyMethodDef cddp_creation_module_methods[] = {
    FK("tensor", cddp_py_tensor,
       "tensor(data, *, dtype=None, device=None, requires_grad=False) -> Tensor (a copy)"),
    FK("as_tensor", cddp_py_as_tensor, "as_tensor(data, dtype=None, device=None) -> Tensor"),
    FK("zeros", py_zeros, "zeros(*size, dtype=None, device=None, requires_grad=False)"),
    FK("ones", py_ones, "ones(*size, dtype=None, device=None, requires_grad=False)"),
    FK("empty", py_empty, "empty(*size, dtype=None, device=None, requires_grad=False)"),
    FK("full", py_full, "full(size, fill_value, *, dtype=None, ...)"),
    FK("zeros_like", py_zeros_like, NULL),
    FK("ones_like", py_ones_like, NULL),
    FK("empty_like", py_empty_like, NULL),
    FK("full_like", py_full_like, NULL),
    FK("arange", cddp_py_arange, "arange(end) / arange(start, end, step=1, *, dtype=None, ...)"),
    FK("linspace", cddp_py_linspace, "linspace(start, end, steps, *, dtype=None, ...)"),
    FK("eye", cddp_py_eye, "eye(n, m=None, *, dtype=None, ...)"),
    FK("rand", cddp_py_rand, "rand(*size, generator=None, dtype=None, requires_grad=False)"),
    FK("randn", cddp_py_randn, "randn(*size, generator=None, dtype=None, requires_grad=False)"),
    FK("randint", cddp_py_randint, "randint(low=0, high, size, *, generator=None, dtype=int64)"),
    FK("randperm", cddp_py_randperm, "randperm(n, *, generator=None, dtype=int64)"),
    FK("rand_like", cddp_py_rand_like, NULL),
    FK("randn_like", cddp_py_randn_like, NULL),
    FK("randint_like", cddp_py_randint_like, NULL),
    FK("normal", cddp_py_normal, "normal(mean, std, size=None, *, generator=None, ...)"),
    FK("bernoulli", cddp_py_bernoulli, "bernoulli(input, p=None, *, generator=None)"),
    FK("multinomial", cddp_py_multinomial,
       "multinomial(input, num_samples, replacement=False, *, generator=None)"),
    FK("_gamma_draw", cddp_py_gamma_draw,
       "_gamma_draw(alpha, generator=None, dirichlet=False): torch's CPU gamma / dirichlet "
       "draws (ops/random/rejection.c)"),
    FK("_poisson_draw", cddp_py_poisson_draw,
       "_poisson_draw(rate, generator=None): torch's CPU Poisson draws (ops/random/rejection.c)"),
    FK("_binomial_draw", cddp_py_binomial_draw,
       "_binomial_draw(count, prob, generator=None): torch's CPU binomial draws "
       "(ops/random/rejection.c)"),
    {"_set_default_meta", cddp_py_set_default_meta, METH_O,
     "_set_default_meta(flag) -> previous (None: read only): factories without a device "
     "make meta tensors"},
    {"set_printoptions", (PyCFunction)(void (*)(void))cddp_py_set_printoptions,
     METH_VARARGS | METH_KEYWORDS,
     "set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, "
     "profile=None, sci_mode=None)"},
    {NULL},
};
