/* ops/random/factory.c — the random factories: rand, randn, randint, randperm and their *_like.
 *
 * Mirrors torch.rand / randn / randint / randperm / rand_like / randn_like / randint_like:
 * empty(size, dtype) then the in-place draw torch uses (uniform_(0, 1), normal_(0, 1),
 * random_(low, high), randperm_cpu), so the values equal torch's for the same generator state.
 */
#include "ops/random/random.h"
#include "ops/creation/creation.h"
#include <string.h>

/* Common tail of the factories: out-of-range dtype check, allocation, draw, requires_grad.
 * shape given; dtype resolved by the caller. */
static PyObject *make_random(int ndim, const int64_t *shape, cddp_dtype dt, cddp_draw *c,
                             int requires_grad, const char *fname, int meta, const int64_t *st)
{
    TensorObject *t;
    if (cddp_check_sizes(fname, ndim, shape) < 0)
        return NULL;
    if (meta)                     /* no values: nothing drawn, the generator does not advance */
        return cddp_factory_finish(st ? cddp_tensor_new_strided(dt, ndim, shape, st, 2)
                                      : cddp_tensor_new_meta(dt, ndim, shape), requires_grad, 0);
    /* drawn in memory order (cddp_draw_into): a *_like of a permuted tensor draws as torch's */
    if (!(t = st ? cddp_tensor_new_strided(dt, ndim, shape, st, 0)
                 : cddp_tensor_new(dt, ndim, shape, 0)))
        return NULL;
    if (cddp_draw_into(t, c) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return cddp_factory_finish(t, requires_grad, 0);
}

/* rand / randn: (*size, generator=None, dtype=None, device=None, requires_grad=False, ...) */
static PyObject *rand_common(const char *fname, int normal, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"size", "generator", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[7] = {NULL};
    int ndim, has_dt, rg, meta;
    int64_t shape[CDDP_MAX_DIMS];
    cddp_dtype dt;
    cddp_draw c = {0};
    TensorObject probe;
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0 ||
        cddp_parse_size(fname, args, nargs, v[0], &ndim, shape) < 0 ||
        !(c.g = cddp_generator_get(v[1], fname)) ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = cddp_state()->default_dtype;
    probe.dtype = dt;
    if (normal ? cddp_draw_normal(&c, &probe, 0.0, 1.0) < 0 : cddp_draw_uniform(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    return make_random(ndim, shape, dt, &c, rg, fname, meta, NULL);
}

PyObject *cddp_py_rand(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return rand_common("rand", 0, args, nargs, kw);
}

PyObject *cddp_py_randn(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return rand_common("randn", 1, args, nargs, kw);
}

/* randint(high, size) / randint(low, high, size); dtype defaults to int64 */
PyObject *cddp_py_randint(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"low", "high", "size", "generator", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory", NULL};
    PyObject *v[9] = {NULL};
    int ndim, has_dt, rg, meta;
    int64_t shape[CDDP_MAX_DIMS], low = 0, high;
    cddp_dtype dt;
    cddp_draw c = {0};
    TensorObject probe;
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "randint() takes at most 3 positional arguments (%zd given)",
                     nargs);
        return NULL;
    }
    /* positionals fill (low, high, size) from the right unless size (or high) comes as a
     * keyword: randint(0, 10, size=(3,)) is (low, high), randint(10, (3,)) is (high, size) */
    int size_kw = 0, high_kw = 0;
    for (Py_ssize_t k = 0; kw && k < PyTuple_GET_SIZE(kw); k++) {
        size_kw |= PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kw, k), "size") == 0;
        high_kw |= PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kw, k), "high") == 0;
    }
    if (nargs == 3 || (nargs == 2 && size_kw)) {
        for (Py_ssize_t k = 0; k < nargs; k++)
            v[k] = args[k];
    } else if (nargs == 2) {
        v[1] = args[0]; v[2] = args[1];
    } else if (nargs == 1) {
        v[high_kw ? 0 : 1] = args[0];
    }
    if (cddp_kw_parse("randint", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[1] || !v[2]) {
        PyErr_SetString(PyExc_TypeError,
                        "randint() missing required arguments: expected randint(high, size) or "
                        "randint(low, high, size)");
        return NULL;
    }
    if ((v[0] && cddp_arg_int64(v[0], &low, "randint", "low") < 0) ||
        cddp_arg_int64(v[1], &high, "randint", "high") < 0)
        return NULL;
    if (PyLong_Check(v[2]) || PyIndex_Check(v[2])) {
        PyErr_Format(PyExc_TypeError,
                     "randint(): argument 'size' must be tuple of ints, not %s",
                     Py_TYPE(v[2])->tp_name);
        return NULL;
    }
    if (cddp_parse_size_obj("randint", v[2], &ndim, shape) < 0 ||
        !(c.g = cddp_generator_get(v[3], "randint")) ||
        cddp_parse_dtype_opt(v[4], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[5], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[6], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = CDDP_INT64;
    probe.dtype = dt;
    if (cddp_draw_from_to(&c, &probe, low, high) < 0)
        return NULL;
    return make_random(ndim, shape, dt, &c, rg, "randint", meta, NULL);
}

PyObject *cddp_py_randperm(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"n", "generator", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[7] = {NULL};
    int has_dt, rg, meta;
    int64_t n, shape[1];
    cddp_dtype dt;
    TensorObject *t = NULL, *tmp;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "randperm() takes 1 positional argument (%zd given)", nargs);
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("randperm", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "randperm() missing required argument 'n'");
        return NULL;
    }
    if (cddp_arg_int64(v[0], &n, "randperm", "n") < 0 || !cddp_generator_get(v[1], "randperm") ||
        cddp_parse_dtype_opt(v[2], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[3], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[4], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = CDDP_INT64;
    if (n < 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "Trying to create tensor with negative dimension %lld: [%lld]",
                     (long long)n, (long long)n);
        return NULL;
    }
    if ((dt == CDDP_FLOAT32 && n > (1LL << 24) + 1) || (dt == CDDP_FLOAT64 && n > (1LL << 53) + 1) ||
        (dt == CDDP_INT32 && n > (int64_t)INT32_MAX + 1) || (dt == CDDP_BOOL && n > 2)) {
        static const char *pname[CDDP_NDTYPES] = {"2^24+1 for Float", "2^53+1 for Double", "",
                                                  "2147483648 for Int", "2 for Bool"};
        PyErr_Format(PyExc_RuntimeError, "n cannot be greater than %s type.", pname[dt]);
        return NULL;
    }
    if (dt == CDDP_FLOAT16 && n > 2049) {
        PyErr_SetString(PyExc_RuntimeError, "n cannot be greater than 2049 for Half type.");
        return NULL;
    }
    if (cddp_is_narrow(dt) && !cddp_is_reduced(dt) && n > 0 &&
        cddp_scalar_overflows(dt, 0, 0, n - 1)) {
        PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without overflow",
                     cddp_dtype_cpp_name[dt]);
        return NULL;
    }
    shape[0] = n;
    if (!(t = cddp_tensor_new(CDDP_INT64, 1, shape, 0)))
        return NULL;
    if (cddp_randperm_fill(v[1], n, (int64_t *)cddp_data(t)) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    if (dt != CDDP_INT64) {
        tmp = cddp_tensor_cast_raw(t, dt);
        Py_DECREF(t);
        if (!(t = tmp))
            return NULL;
    }
    return cddp_factory_finish(t, rg, meta);
}

/* rand_like / randn_like / randint_like(input, [low,] high) */
static PyObject *like_common(const char *fname, int kind, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"input", "low", "high", "generator", "dtype", "device",
                                        "requires_grad", "layout", "pin_memory",
                                        "memory_format", NULL};
    PyObject *v[10] = {NULL};
    int has_dt, rg, meta;
    cddp_dtype dt;
    cddp_draw c = {0};
    TensorObject *in, probe;
    int64_t low = 0, high = 0, st[CDDP_MAX_DIMS];
    int fmt;
    Py_ssize_t maxpos = kind == 2 ? 3 : 1;
    if (nargs > maxpos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional arguments (%zd given)",
                     fname, maxpos, nargs);
        return NULL;
    }
    if (nargs >= 1)
        v[0] = args[0];
    if (nargs == 2)
        v[2] = args[1];
    if (nargs == 3) {
        v[1] = args[1];
        v[2] = args[2];
    }
    if (cddp_kw_parse(fname, args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0] || !cddp_tensor_check(v[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' must be Tensor, not %s", fname,
                     v[0] ? Py_TYPE(v[0])->tp_name : "nothing");
        return NULL;
    }
    in = (TensorObject *)v[0];
    if (!(c.g = cddp_generator_get(v[3], fname)) ||
        cddp_parse_dtype_opt(v[4], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[5], cddp_is_meta(in))) < 0 ||
        cddp_parse_flag(v[6], &rg) < 0)
        return NULL;
    if (!has_dt)
        dt = in->dtype;
    probe.dtype = dt;
    if (kind == 0 && cddp_draw_uniform(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    if (kind == 1 && cddp_draw_normal(&c, &probe, 0.0, 1.0) < 0)
        return NULL;
    if (kind == 2) {
        if (!v[2]) {
            PyErr_SetString(PyExc_TypeError, "randint_like() missing required argument 'high'");
            return NULL;
        }
        if ((v[1] && cddp_arg_int64(v[1], &low, fname, "low") < 0) ||
            cddp_arg_int64(v[2], &high, fname, "high") < 0 || cddp_draw_from_to(&c, &probe, low, high) < 0)
            return NULL;
    }
    if (cddp_parse_memory_format(v[9], &fmt) < 0 || cddp_format_strides(in, fmt, st) < 0)
        return NULL;
    return make_random(in->ndim, in->shape, dt, &c, rg, fname, meta, st);
}

PyObject *cddp_py_rand_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return like_common("rand_like", 0, args, nargs, kw);
}

PyObject *cddp_py_randn_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    return like_common("randn_like", 1, args, nargs, kw);
}

PyObject *cddp_py_randint_like(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kw)
{
    return like_common("randint_like", 2, args, nargs, kw);
}
