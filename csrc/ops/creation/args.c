/* ops/creation/args.c — what the factory functions share: torch's keyword conventions (size as
 * *ints or one sequence, dtype=, device=, requires_grad=), Python scalars as fill values, and
 * the in-place bookkeeping (leaf check, zero-gradient history).
 *
 * Mirrors the argument parsing of torch.zeros / full / rand ... (torch/csrc/utils/python_arg_parser)
 * with its error wording where it is short: "zeros(): argument 'size' (position 1) must be
 * tuple of ints, not float", "Trying to create tensor with negative dimension -1: [-1]".
 */
#include "ops/creation/creation.h"
#include <math.h>
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

#define NOGIL_NUMEL 65536

/* ---- keywords ------------------------------------------------------------------------- */

int cddp_kw_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  const char *const *names, PyObject **vals)
{
    Py_ssize_t nk;
    if (!kwnames)
        return 0;
    nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        for (; names[j]; j++)
            if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0)
                break;
        if (!names[j]) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                         key);
            return -1;
        }
        if (vals[j]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[j]);
            return -1;
        }
        vals[j] = args[nargs + k];
    }
    return 0;
}

/* ---- sizes ---------------------------------------------------------------------------- */

static int is_int_like(PyObject *o)
{
    return PyLong_Check(o) || (PyIndex_Check(o) && !PyFloat_Check(o));
}

/* one size element; pos < 0 means "the only positional argument" for the message */
static int size_elem(const char *fname, PyObject *o, Py_ssize_t pos, int64_t *out)
{
    if (PyLong_CheckExact(o)) {
        *out = PyLong_AsLongLong(o);
        return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyBool_Check(o) || !is_int_like(o)) {
        if (pos < 0)
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument 'size' (position 1) must be tuple of ints, not %s", fname,
                         Py_TYPE(o)->tp_name);
        else
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument 'size' must be tuple of ints, but found element of type "
                         "%s at pos %zd", fname, Py_TYPE(o)->tp_name, pos);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i)
        return -1;
    *out = PyLong_AsLongLong(i);
    Py_DECREF(i);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int too_many_dims(Py_ssize_t n)
{
    PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %zd",
                 CDDP_MAX_DIMS, n);
    return -1;
}

int cddp_parse_size_obj(const char *fname, PyObject *o, int *ndim, int64_t *shape)
{
    PyObject *fast;
    Py_ssize_t n;
    if (PyBool_Check(o) || PyFloat_Check(o) || PyUnicode_Check(o) || PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'size' (position 1) must be tuple of ints, not %s", fname,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (is_int_like(o) && !PySequence_Check(o)) {
        *ndim = 1;
        return size_elem(fname, o, -1, shape);
    }
    fast = PySequence_Fast(o, "");
    if (!fast) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'size' (position 1) must be tuple of ints, not %s", fname,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > CDDP_MAX_DIMS) {
        Py_DECREF(fast);
        return too_many_dims(n);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (size_elem(fname, PySequence_Fast_GET_ITEM(fast, i), i, &shape[i]) < 0) {
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    *ndim = (int)n;
    return 0;
}

int cddp_parse_size(const char *fname, PyObject *const *args, Py_ssize_t n, PyObject *size_kw,
                    int *ndim, int64_t *shape)
{
    if (size_kw) {
        if (n) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument 'size'", fname);
            return -1;
        }
        return cddp_parse_size_obj(fname, size_kw, ndim, shape);
    }
    if (n == 1 && !PyLong_CheckExact(args[0]))
        return cddp_parse_size_obj(fname, args[0], ndim, shape);
    if (n > CDDP_MAX_DIMS)
        return too_many_dims(n);
    for (Py_ssize_t i = 0; i < n; i++)
        if (size_elem(fname, args[i], i, &shape[i]) < 0)
            return -1;
    *ndim = (int)n;
    return 0;
}

int cddp_check_sizes(const char *fname, int ndim, const int64_t *shape)
{
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char buf[256];
            size_t k = 0;
            for (int e = 0; e < ndim && k < sizeof buf - 24; e++)
                k += (size_t)PyOS_snprintf(buf + k, sizeof buf - k, e ? ", %lld" : "%lld",
                                           (long long)shape[e]);
            buf[k] = 0;
            PyErr_Format(PyExc_RuntimeError,
                         "Trying to create tensor with negative dimension %lld: [%s]",
                         (long long)shape[d], buf);
            return -1;
        }
    }
    return 0;
}

/* ---- dtype / device / flags ----------------------------------------------------------- */

int cddp_parse_dtype_opt(PyObject *o, int *has, cddp_dtype *dt)
{
    *has = 0;
    if (!o || o == Py_None)
        return 0;
    if (cddp_dtype_from_py(o, dt) < 0)
        return -1;
    *has = 1;
    return 0;
}

/* set_default_device("meta") / `with cddp.device("meta")`: factories without a device make
 * meta tensors. Read and written with the GIL held. */
static int default_meta;

int cddp_default_meta(void)
{
    return default_meta;
}

int cddp_parse_device_opt(PyObject *o, int dflt)
{
    cddp_state_t *st = cddp_state();
    PyObject *dev, *type;
    int meta;
    if (!o || o == Py_None)
        return dflt;
    if (o == st->device_cpu)
        return 0;
    if (PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, "cpu") == 0)
        return 0;
    if (!st->device_factory)
        return 0;
    /* validates "cuda:1", device objects, ordinals; CUDA tensors are not built yet, so the
     * tensor stays on the CPU */
    dev = PyObject_CallOneArg(st->device_factory, o);
    if (!dev)
        return -1;
    type = PyObject_GetAttrString(dev, "type");
    Py_DECREF(dev);
    if (!type)
        return -1;
    meta = PyUnicode_Check(type) && PyUnicode_CompareWithASCIIString(type, "meta") == 0;
    Py_DECREF(type);
    return meta;
}

/* _C._set_default_meta(flag) -> the previous flag (cddp.set_default_device); None only
 * reads it (get_default_device) */
PyObject *cddp_py_set_default_meta(PyObject *m, PyObject *flag)
{
    int v = flag == Py_None ? default_meta : PyObject_IsTrue(flag), old = default_meta;
    if (v < 0)
        return NULL;
    default_meta = v;
    return PyBool_FromLong(old);
}

PyObject *cddp_factory_place(PyObject *res, int meta)
{
    TensorObject *t = (TensorObject *)res, *m;
    cddp_storage *s;
    if (!res || meta != 1 || cddp_is_meta(t))
        return res;
    /* a fresh result (no other reference to the object, none to its storage) is turned into
     * a meta tensor in place, so requires_grad stays; anything shared (as_tensor returns its
     * input) gets a new meta tensor instead */
    if (Py_REFCNT(res) == 1 && t->storage->refcnt == 1 && t->offset == 0 && !t->grad_fn &&
        cddp_is_contiguous(t)) {
        if (!(s = cddp_storage_new_meta(t->storage->nbytes)))
            goto fail;
        cddp_storage_decref(t->storage);
        t->storage = s;
        return res;
    }
    m = cddp_tensor_new_meta(t->dtype, t->ndim, t->shape);
    Py_DECREF(res);
    return (PyObject *)m;
fail:
    Py_DECREF(res);
    return NULL;
}

int cddp_parse_flag(PyObject *o, int *out)
{
    *out = 0;
    if (!o)
        return 0;
    *out = PyObject_IsTrue(o);
    return *out < 0 ? -1 : 0;
}

PyObject *cddp_factory_finish(TensorObject *t, int requires_grad, int meta)
{
    if (!(t = (TensorObject *)cddp_factory_place((PyObject *)t, meta)))
        return NULL;
    if (requires_grad) {
        if (!cddp_is_floating(t->dtype)) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Only Tensors of floating point and complex dtype can require "
                            "gradients");
            Py_DECREF(t);
            return NULL;
        }
        t->requires_grad = 1;
    }
    return (PyObject *)t;
}

/* ---- in-place bookkeeping ------------------------------------------------------------- */

/* d(overwritten)/d(old value) = 0 */
static int zero_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = cddp_tensor_new(self->meta[0].dtype, self->meta[0].ndim, self->meta[0].shape, 1);
    return gin[0] ? 0 : -1;
}

int cddp_inplace_zero_history(TensorObject *t, const char *name)
{
    NodeObject *node;
    int rc;
    if (!cddp_grad_enabled || !cddp_needs_grad(t))
        return 0;
    node = cddp_node_new(name, zero_backward, 1);
    if (!node)
        return -1;
    if (cddp_node_set_input(node, 0, t) < 0) {     /* edge to t's old history */
        Py_DECREF(node);
        return -1;
    }
    rc = cddp_set_inplace_history(t, node, 0);
    Py_DECREF(node);
    return rc;
}

/* ---- scalars -------------------------------------------------------------------------- */

int cddp_scalar_from_py(PyObject *o, cddp_scalar *s, const char *fname)
{
    if (PyFloat_CheckExact(o)) {
        s->kind = 2;
        s->d = PyFloat_AS_DOUBLE(o);
        return 0;
    }
    if (PyBool_Check(o)) {
        s->kind = 0;
        s->i = o == Py_True;
        s->d = (double)s->i;
        return 0;
    }
    if (PyLong_CheckExact(o)) {
        int overflow;
        s->kind = 1;
        s->i = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            s->kind = 2;
            s->d = PyLong_AsDouble(o);
            return (s->d == -1.0 && PyErr_Occurred()) ? -1 : 0;
        }
        s->d = (double)s->i;
        return (s->i == -1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (cddp_tensor_check(o)) {
        TensorObject *t = (TensorObject *)o;
        const char *p = cddp_data(t);
        if (cddp_numel(t) != 1) {
            PyErr_Format(PyExc_RuntimeError,
                         "%s: expected a 0-dimension (or 1-element) tensor as a scalar value, "
                         "got %d dimensions with %lld elements", fname, t->ndim,
                         (long long)cddp_numel(t));
            return -1;
        }
        if (t->dtype == CDDP_INT64) {
            s->kind = 1;
            s->i = *(const int64_t *)p;
            s->d = (double)s->i;
        } else if (t->dtype == CDDP_BOOL) {
            s->kind = 0;
            s->i = *(const uint8_t *)p != 0;
            s->d = (double)s->i;
        } else {
            s->kind = cddp_is_floating(t->dtype) ? 2 : 1;
            s->d = cddp_load_double(t->dtype, p);
            s->i = s->kind == 1 ? (int64_t)s->d : 0;
        }
        return 0;
    }
    if (PyArray_IsScalar(o, Bool)) {
        s->kind = 0;
        s->i = PyObject_IsTrue(o);
        s->d = (double)s->i;
        return s->i < 0 ? -1 : 0;
    }
    if (PyArray_IsScalar(o, Floating) || PyFloat_Check(o)) {
        s->kind = 2;
        s->d = PyFloat_AsDouble(o);
        return (s->d == -1.0 && PyErr_Occurred()) ? -1 : 0;
    }
    if (PyArray_IsScalar(o, Integer) || PyLong_Check(o)) {
        PyObject *i = PyNumber_Index(o);
        int rc;
        if (!i)
            return -1;
        rc = cddp_scalar_from_py(i, s, fname);
        Py_DECREF(i);
        return rc;
    }
    PyErr_Format(PyExc_TypeError, "%s(): expected a number (bool, int, float or a 1-element "
                 "tensor), got %s", fname, Py_TYPE(o)->tp_name);
    return -1;
}

cddp_dtype cddp_scalar_dtype(const cddp_scalar *s)
{
    return s->kind == 0 ? CDDP_BOOL : s->kind == 1 ? CDDP_INT64 : cddp_state()->default_dtype;
}

int cddp_scalar_store(const cddp_scalar *s, cddp_dtype dt, char *p)
{
    if (cddp_is_narrow(dt)) {
        if (cddp_scalar_overflows(dt, s->kind == 2, s->d, s->i))
            goto overflow;
        if (s->kind == 2)
            cddp_store_double(dt, p, s->d);
        else
            cddp_store_int64(dt, p, s->i);
        return 0;
    }
    switch (dt) {
    case CDDP_FLOAT32:
        *(float *)p = s->kind == 2 ? (float)s->d : (float)s->i;
        return 0;
    case CDDP_FLOAT64:
        *(double *)p = s->kind == 2 ? s->d : (double)s->i;
        return 0;
    case CDDP_BOOL:
        *(uint8_t *)p = s->kind == 2 ? s->d != 0 : s->i != 0;
        return 0;
    case CDDP_INT64:
        if (s->kind != 2) {
            *(int64_t *)p = s->i;
            return 0;
        }
        if (!(s->d >= -9223372036854775808.0 && s->d < 9223372036854775808.0))
            goto overflow;
        *(int64_t *)p = (int64_t)s->d;
        return 0;
    default:
        if (s->kind != 2) {
            if (s->i < INT32_MIN || s->i > INT32_MAX)
                goto overflow;
            *(int32_t *)p = (int32_t)s->i;
            return 0;
        }
        if (!(s->d > -2147483649.0 && s->d < 2147483648.0))
            goto overflow;
        *(int32_t *)p = (int32_t)s->d;
        return 0;
    }
overflow:
    PyErr_Format(PyExc_RuntimeError, "value cannot be converted to type %s without overflow",
                 cddp_is_narrow(dt) ? cddp_dtype_cpp_name[dt] : cddp_dtype_name[dt]);
    return -1;
}

typedef struct {
    char v[8];
    size_t isz;
    int zero;
} fill_ctx;

static void fill_loop(char **ptrs, const int64_t *strides, int64_t n, void *vctx)
{
    const fill_ctx *c = vctx;
    char *p = ptrs[0];
    int64_t s = strides[0];
    if (s == (int64_t)c->isz && c->zero) {
        memset(p, 0, (size_t)n * c->isz);
        return;
    }
    switch (c->isz) {
    case 8: {
        int64_t v;
        memcpy(&v, c->v, 8);
        if (s == 8)
            for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = v;
        else
            for (int64_t i = 0; i < n; i++) *(int64_t *)(p + i * s) = v;
        break;
    }
    case 4: {
        int32_t v;
        memcpy(&v, c->v, 4);
        if (s == 4)
            for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = v;
        else
            for (int64_t i = 0; i < n; i++) *(int32_t *)(p + i * s) = v;
        break;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, c->v, 2);
        if (s == 2)
            for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v;
        else
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(p + i * s) = v;
        break;
    }
    default:
        if (s == 1)
            memset(p, c->v[0], (size_t)n);
        else
            for (int64_t i = 0; i < n; i++) p[i * s] = c->v[0];
        break;
    }
}

int cddp_fill_raw(TensorObject *t, const cddp_scalar *s)
{
    fill_ctx c;
    int64_t bst[1][CDDP_MAX_DIMS];
    char *ptr = cddp_data(t);
    memset(&c, 0, sizeof c);
    c.isz = cddp_dtype_size[t->dtype];
    if (cddp_scalar_store(s, t->dtype, c.v) < 0)
        return -1;
    if (cddp_is_meta(t))                /* checked (the overflow error above), not written */
        return 0;
    c.zero = 1;
    for (size_t k = 0; k < c.isz; k++)
        c.zero &= c.v[k] == 0;
    for (int d = 0; d < t->ndim; d++)
        bst[0][d] = t->strides[d] * (int64_t)c.isz;
    if (cddp_numel(t) >= NOGIL_NUMEL) {
        Py_BEGIN_ALLOW_THREADS
        cddp_iterate(1, t->ndim, t->shape, &ptr, (const int64_t (*)[CDDP_MAX_DIMS])bst,
                     fill_loop, &c);
        Py_END_ALLOW_THREADS
    } else {
        cddp_iterate(1, t->ndim, t->shape, &ptr, (const int64_t (*)[CDDP_MAX_DIMS])bst,
                     fill_loop, &c);
    }
    return 0;
}
