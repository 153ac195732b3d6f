/* ops/shape/convert.c — copies and conversions: contiguous(), clone(), to(...), float()/double()/
 * long()/int()/bool(), type(), cpu(), cuda(), and the device policy for CUDA requests.
 *
 * Mirrors torch.Tensor:
 *   contiguous()           self when already contiguous, else a copy   CloneBackward0
 *   clone()                always a copy                                CloneBackward0
 *   to(dtype, non_blocking=False, copy=False)
 *   to(device=None, dtype=None, non_blocking=False, copy=False)
 *   to(other, non_blocking=False, copy=False)                           ToCopyBackward0
 *       self when nothing changes (and copy=False); a floating->floating cast keeps history
 *       (the gradient is cast back), a cast to an integer/bool dtype is detached.
 *   float() double() long() int() bool() half() bfloat16() byte() char() short() = to(dtype)
 *   type() -> 'torch.FloatTensor'...; type(dtype or 'torch.XTensor') -> to(...)
 *   cpu(), cuda(device=None, non_blocking=False)
 *
 * Device policy (cddp_device_fallback): cddp has no CUDA backend yet, so a CUDA request runs on
 * the CPU after one UserWarning per process; CDDP_STRICT_DEVICE=1 turns it into a RuntimeError
 * for users who would rather fail than train on the CPU by accident. "meta" is a real device:
 * to("meta") / clone / casts of a meta tensor give meta tensors without copying anything, and
 * leaving meta (to("cpu"), cpu(), cuda()) raises torch's NotImplementedError.
 */
#include "ops/shape/shape.h"
#include <stdlib.h>
#include <string.h>

/* ---- device specs --------------------------------------------------------------------- */

static int warned_cuda_fallback;          /* once per process: module state is one per process */

/* the kind of device a spec names */
enum { DEV_CPU = 0, DEV_CUDA = 1, DEV_META = 2 };

/* "cpu", "cpu:N", "cuda", "cuda:N", "meta" -> *kind (a DEV_* kind), *index (-1 when
 * absent). RuntimeError with torch's wording otherwise. */
static int parse_device_string(PyObject *s, int *kind, long *index)
{
    Py_ssize_t n;
    const char *str = PyUnicode_AsUTF8AndSize(s, &n), *colon, *p;
    size_t tlen;
    if (!str)
        return -1;
    colon = memchr(str, ':', (size_t)n);
    tlen = colon ? (size_t)(colon - str) : (size_t)n;
    if (tlen == 3 && memcmp(str, "cpu", 3) == 0)
        *kind = DEV_CPU;
    else if (tlen == 4 && memcmp(str, "cuda", 4) == 0)
        *kind = DEV_CUDA;
    else if (tlen == 4 && memcmp(str, "meta", 4) == 0)
        *kind = DEV_META;
    else {
        PyErr_Format(PyExc_RuntimeError,
                     "Expected one of cpu, cuda, meta device type at start of device string: %s",
                     str);
        return -1;
    }
    *index = -1;
    if (!colon)
        return 0;
    p = colon + 1;
    if (!*p || strlen(p) > 9 || (p[0] == '0' && p[1]))
        goto bad;
    for (const char *q = p; *q; q++)
        if (*q < '0' || *q > '9')
            goto bad;
    *index = strtol(p, NULL, 10);
    return 0;
bad:
    PyErr_Format(PyExc_RuntimeError, "Invalid device string: '%s'", str);
    return -1;
}

/* Any device spec torch accepts: None (no device), str, int (a CUDA ordinal), cddp.device or an
 * object with .type/.index (torch.device too), a Tensor (its device). */
static int parse_device(PyObject *spec, int *kind, long *index)
{
    *kind = DEV_CPU;
    *index = -1;
    if (!spec || spec == Py_None)
        return 0;
    if (PyUnicode_Check(spec))
        return parse_device_string(spec, kind, index);
    if (PyLong_Check(spec) && !PyBool_Check(spec)) {
        long v = PyLong_AsLong(spec);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0) {
            PyErr_SetString(PyExc_RuntimeError, "Device index must not be negative");
            return -1;
        }
        *kind = DEV_CUDA;
        *index = v;
        return 0;
    }
    if (cddp_tensor_check(spec)) {
        int dev = ((TensorObject *)spec)->storage->device;
        *kind = dev >= 0 ? DEV_CUDA : dev == CDDP_DEVICE_META ? DEV_META : DEV_CPU;
        *index = dev >= 0 ? dev : -1;
        return 0;
    }
    if (!PyType_Check(spec)) {
        PyObject *type = PyObject_GetAttrString(spec, "type"), *idx = NULL;
        int rc = -1;
        if (!type || !PyUnicode_Check(type))
            goto not_device;
        idx = PyObject_GetAttrString(spec, "index");
        if (!idx || (idx != Py_None && !PyLong_Check(idx)))
            goto not_device;
        if (parse_device_string(type, kind, index) < 0)
            goto done;
        if (idx != Py_None && (*index = PyLong_AsLong(idx)) == -1 && PyErr_Occurred())
            goto done;
        rc = 0;
        goto done;
    not_device:
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "expected a device (str, int or cddp.device), got %s",
                     Py_TYPE(spec)->tp_name);
    done:
        Py_XDECREF(type);
        Py_XDECREF(idx);
        return rc;
    }
    PyErr_Format(PyExc_TypeError, "expected a device (str, int or cddp.device), got %s",
                 Py_TYPE(spec)->tp_name);
    return -1;
}

static int strict_device(void)
{
    const char *v = getenv("CDDP_STRICT_DEVICE");
    return v && *v && strcmp(v, "0") != 0;
}

/* A CUDA request (ordinal index, -1 = current) when no GPU backend is present. */
static int cuda_fallback(long index)
{
    long ix = index < 0 ? 0 : index;
    if (strict_device()) {
        PyErr_Format(PyExc_RuntimeError,
                     "cddp: CUDA requested (cuda:%ld) but no GPU is available, and "
                     "CDDP_STRICT_DEVICE=1 forbids running on the CPU instead", ix);
        return -1;
    }
    if (!warned_cuda_fallback) {
        /* only a delivered warning counts: under -W error every request keeps raising */
        if (PyErr_WarnFormat(PyExc_UserWarning, 1,
                             "cddp: CUDA requested (cuda:%ld) but no GPU is available; running "
                             "on the CPU", ix) < 0)
            return -1;
        warned_cuda_fallback = 1;
    }
    return 0;
}

/* Contract: 0 when tensors may stay on (or go to) the CPU for this device request — a CPU
 * spec, no spec (None/NULL), or a CUDA spec under the warn-once fallback; 1 for the meta
 * device; -1 with an exception for malformed specs (RuntimeError/TypeError as torch) and CUDA
 * under CDDP_STRICT_DEVICE=1. */
int cddp_device_fallback(PyObject *device_spec)
{
    int kind;
    long index;
    if (parse_device(device_spec, &kind, &index) < 0)
        return -1;
    if (kind == DEV_META)
        return 1;
    return kind == DEV_CUDA ? cuda_fallback(index) : 0;
}

/* torch's message for moving a meta tensor off the meta device (Module.to adds the advice) */
static PyObject *meta_copy_out(void)
{
    PyErr_SetString(PyExc_NotImplementedError, "Cannot copy out of meta tensor; no data!");
    return NULL;
}

/* ---- copies with history -------------------------------------------------------------- */

static int clone_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (gout[0] && self->next[0].node)
        gin[0] = (TensorObject *)Py_NewRef(gout[0]);
    return 0;
}

static int to_copy_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    if (!gout[0] || !self->next[0].node)
        return 0;
    gin[0] = cddp_tensor_cast_raw(gout[0], self->meta[0].dtype);
    return gin[0] ? 0 : -1;
}

/* A fresh copy of x in dtype dt laid out in memory format fmt (preserve: as x is), with
 * history `name` when both dtypes are floating (a cast to integers has no gradient, as in
 * torch). */
static PyObject *copy_as(TensorObject *x, cddp_dtype dt, const char *name, cddp_backward_fn fn,
                         int meta, int fmt)
{
    int64_t st[CDDP_MAX_DIMS];
    if (cddp_format_strides(x, fmt, st) < 0)
        return NULL;
    TensorObject *out = cddp_tensor_new_strided(dt, x->ndim, x->shape, st, meta ? 2 : 0);
    NodeObject *node;
    int err = 0;
    if (!out)
        return NULL;
    if (!meta && cddp_numel(x) > 0 && cddp_copy_into(out, x) < 0)
        goto fail;
    out->storage->version = 0;           /* a new tensor: its filling is not a modification */
    if (cddp_is_floating(dt) && cddp_is_floating(x->dtype)) {
        node = cddp_shape_record(x, out, name, fn, &err);
        if (err)
            goto fail;
        Py_XDECREF(node);
    }
    return (PyObject *)out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---- contiguous / clone --------------------------------------------------------------- */

static const char *const memfmt_names[] = {"memory_format"};

PyObject *cddp_convert_contiguous(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    PyObject *a[1] = {NULL};
    TensorObject *x = (TensorObject *)self;
    int fmt = CDDP_MF_CONTIGUOUS;
    if ((nargs || kwnames) &&
        cddp_shape_parse_args("contiguous", args, nargs, kwnames, memfmt_names, 1, 1, a) < 0)
        return NULL;
    if (a[0] && cddp_parse_memory_format(a[0], &fmt) < 0)
        return NULL;
    if (fmt == CDDP_MF_PRESERVE) {      /* torch asks is_contiguous() first */
        if (cddp_is_contiguous(x))
            return Py_NewRef(self);
        PyErr_SetString(PyExc_RuntimeError,
                        "preserve memory format is unsupported by the contiguous operator");
        return NULL;
    }
    return cddp_convert_as_format(x, fmt);
}

PyObject *cddp_convert_clone(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *a[1] = {NULL};
    TensorObject *x = (TensorObject *)self;
    int fmt;
    if ((nargs || kwnames) &&
        cddp_shape_parse_args("clone", args, nargs, kwnames, memfmt_names, 1, 0, a) < 0)
        return NULL;
    if (cddp_parse_memory_format(a[0], &fmt) < 0)
        return NULL;
    return copy_as(x, x->dtype, "CloneBackward0", clone_backward, cddp_is_meta(x), fmt);
}

/* cddp.clone(input, *, memory_format=None) */
PyObject *cddp_convert_clone_fn(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    if (nargs < 1 || !cddp_tensor_check(args[0])) {
        PyErr_Format(PyExc_TypeError, "clone(): argument 'input' must be Tensor, not %s",
                     nargs < 1 ? "nothing" : Py_TYPE(args[0])->tp_name);
        return NULL;
    }
    return cddp_convert_clone(args[0], args + 1, nargs - 1, kwnames);
}

/* ---- to ------------------------------------------------------------------------------- */

/* The result of to(): self when nothing changes, else a copy (see copy_as). A meta tensor
 * stays meta without a device, goes to meta with one, and cannot leave it (no values). */
static PyObject *to_impl(TensorObject *x, int has_dtype, cddp_dtype dt, PyObject *device,
                         int copy, int fmt)
{
    int meta = cddp_is_meta(x), to_meta = meta;
    if (device) {
        int onto_meta = cddp_device_fallback(device);
        if (onto_meta < 0)
            return NULL;
        if (device != Py_None)
            to_meta = onto_meta;
    }
    if (meta && !to_meta)
        return meta_copy_out();
    if (!has_dtype)
        dt = x->dtype;
    if (dt == x->dtype && !copy && meta == to_meta &&
        (fmt == CDDP_MF_PRESERVE || fmt == cddp_suggest_memory_format(x)))
        return Py_NewRef(x);
    return copy_as(x, dt, "ToCopyBackward0", to_copy_backward, to_meta, fmt);
}

PyObject *cddp_shape_to_dtype(TensorObject *x, cddp_dtype dt)
{
    return to_impl(x, 1, dt, NULL, 0, CDDP_MF_PRESERVE);
}

static int is_dtype_obj(PyObject *o)
{
    return Py_IS_TYPE(o, cddp_state()->dtype_type) || o == (PyObject *)&PyFloat_Type ||
           o == (PyObject *)&PyLong_Type || o == (PyObject *)&PyBool_Type;
}

/* Device-like first positional of to(): str / int / None / a device object. */
static int is_device_obj(PyObject *o)
{
    PyObject *f = cddp_state()->device_factory;
    if (o == Py_None || PyUnicode_Check(o) || (PyLong_Check(o) && !PyBool_Check(o)))
        return 1;
    if (f && PyType_Check(f) && PyObject_TypeCheck(o, (PyTypeObject *)f))
        return 1;
    /* torch.device or any duck-typed device: .type and .index, and not a class */
    return !PyType_Check(o) && PyObject_HasAttrString(o, "type") &&
           PyObject_HasAttrString(o, "index");
}

static int truthy(PyObject *o, int *out)
{
    int v = o ? PyObject_IsTrue(o) : 0;
    if (v < 0)
        return -1;
    *out = v;
    return 0;
}

PyObject *cddp_convert_to(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    /* the union of torch's three overloads; which one is meant follows from args[0] */
    static const char *const names[] = {"device", "dtype", "non_blocking", "copy",
                                        "memory_format", "other"};
    enum { DEV, DT, NB, CP, MF, OTHER, NP };
    PyObject *a[NP] = {0}, *kw[NP];
    TensorObject *x = (TensorObject *)self;
    cddp_dtype dt = x->dtype;
    int copy = 0, has_dtype = 0, fmt;
    Py_ssize_t p = 0;
    /* fast paths: x.to(dtype) and x.to("cpu") / x.to(device) */
    if (nargs == 1 && !kwnames) {
        if (Py_IS_TYPE(args[0], cddp_state()->dtype_type)) {
            if (cddp_dtype_from_py(args[0], &dt) < 0)
                return NULL;
            return to_impl(x, 1, dt, NULL, 0, CDDP_MF_PRESERVE);
        }
    }
    /* a complex dtype (x.to(torch.complex64)): cddp/_complex.py makes the complex tensor */
    for (Py_ssize_t i = 0; i < nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0); i++)
        if (cddp_is_complex_obj(args[i]))
            return cddp_complex_call("_real_to_call", self, args, nargs, kwnames);
    if (nargs > 0) {
        PyObject *a0 = args[0];
        if (cddp_tensor_check(a0)) {
            a[OTHER] = a0;
            p = 1;
        } else if (is_dtype_obj(a0)) {
            a[DT] = a0;
            p = 1;
        } else if (is_device_obj(a0)) {
            a[DEV] = a0;
            p = 1;
            if (nargs > 1 && args[1] != Py_None && !PyBool_Check(args[1])) {
                a[DT] = args[1];
                p = 2;
            } else if (nargs > 1 && args[1] == Py_None) {
                p = 2;
            }
        } else {
            a[DT] = a0;                   /* numpy dtypes etc.: cddp_dtype_from_py decides */
            p = 1;
        }
        if (nargs - p > 2) {
            PyErr_Format(PyExc_TypeError, "to() received an invalid combination of arguments "
                         "(%zd positional arguments)", nargs);
            return NULL;
        }
        if (nargs > p)
            a[NB] = args[p];
        if (nargs > p + 1)
            a[CP] = args[p + 1];
    }
    if (kwnames) {
        if (cddp_shape_parse_args("to", args + nargs, 0, kwnames, names, NP, 0, kw) < 0)
            return NULL;
        for (int i = 0; i < NP; i++) {
            if (!kw[i])
                continue;
            if (a[i]) {
                PyErr_Format(PyExc_TypeError, "to() got multiple values for argument '%s'",
                             names[i]);
                return NULL;
            }
            a[i] = kw[i];
        }
    }
    if (a[OTHER]) {
        TensorObject *o;
        if ((a[DEV] && a[DEV] != Py_None) || (a[DT] && a[DT] != Py_None) ||
            !cddp_tensor_check(a[OTHER])) {
            PyErr_SetString(PyExc_TypeError, "to() received an invalid combination of arguments: "
                            "to(other) takes no device or dtype");
            return NULL;
        }
        o = (TensorObject *)a[OTHER];
        dt = o->dtype;
        has_dtype = 1;
        a[DEV] = a[OTHER];                /* its device, through parse_device */
    }
    if (a[DT] && a[DT] != Py_None && !a[OTHER]) {
        if (cddp_dtype_from_py(a[DT], &dt) < 0)
            return NULL;
        has_dtype = 1;
    }
    for (int i = NB; i <= CP; i++) {
        if (a[i] && !PyLong_Check(a[i])) {      /* bool (an int subclass) or int */
            PyErr_Format(PyExc_TypeError, "to() received an invalid combination of arguments: "
                         "'%s' must be bool, not %s", names[i], Py_TYPE(a[i])->tp_name);
            return NULL;
        }
    }
    if (truthy(a[CP], &copy) < 0 || cddp_parse_memory_format(a[MF], &fmt) < 0)
        return NULL;
    return to_impl(x, has_dtype, dt, a[DEV], copy, fmt);
}

/* float()/double()/... take only memory_format. */
static PyObject *cast_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, const char *fname, cddp_dtype dt)
{
    PyObject *a[1] = {NULL};
    int fmt;
    if ((nargs || kwnames) &&
        cddp_shape_parse_args(fname, args, nargs, kwnames, memfmt_names, 1, 0, a) < 0)
        return NULL;
    if (cddp_parse_memory_format(a[0], &fmt) < 0)
        return NULL;
    return to_impl((TensorObject *)self, 1, dt, NULL, 0, fmt);
}

#define CAST_METHOD(NAME, DT)                                                              \
    PyObject *cddp_convert_##NAME(PyObject *self, PyObject *const *args, Py_ssize_t nargs,  \
                                  PyObject *kwnames)                                        \
    {                                                                                       \
        return cast_method(self, args, nargs, kwnames, #NAME, DT);                          \
    }
CAST_METHOD(float, CDDP_FLOAT32)
CAST_METHOD(double, CDDP_FLOAT64)
CAST_METHOD(long, CDDP_INT64)
CAST_METHOD(int, CDDP_INT32)
CAST_METHOD(bool, CDDP_BOOL)
CAST_METHOD(half, CDDP_FLOAT16)
CAST_METHOD(bfloat16, CDDP_BFLOAT16)
CAST_METHOD(byte, CDDP_UINT8)
CAST_METHOD(char, CDDP_INT8)
CAST_METHOD(short, CDDP_INT16)

/* ---- type / cpu / cuda ---------------------------------------------------------------- */

#define legacy_names cddp_dtype_legacy_name

/* type(dtype=None, non_blocking=False): without dtype, torch's legacy type string (kept as
 * 'torch.*' so scripts comparing against torch's strings work under `import cddp as torch`). */
PyObject *cddp_convert_type(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"dtype", "non_blocking"};
    PyObject *a[2];
    TensorObject *x = (TensorObject *)self;
    cddp_dtype dt;
    if (cddp_shape_parse_args("type", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    if (a[0] && cddp_is_complex_obj(a[0]))          /* x.type(torch.complex64) */
        return cddp_complex_call("_real_to_call", self, a, 1, NULL);
    if (!a[0] || a[0] == Py_None)
        return PyUnicode_FromFormat("torch.%s%s", x->storage->device >= 0 ? "cuda."
                                    : cddp_is_meta(x) ? "meta." : "",
                                    legacy_names[x->dtype]);
    if (PyUnicode_Check(a[0])) {
        const char *s = PyUnicode_AsUTF8(a[0]), *tail;
        int cuda = 0;
        if (!s)
            return NULL;
        if (strncmp(s, "torch.", 6) == 0)
            tail = s + 6;
        else if (strncmp(s, "cddp.", 5) == 0)
            tail = s + 5;
        else
            tail = NULL;
        if (tail && strncmp(tail, "cuda.", 5) == 0) {
            cuda = 1;
            tail += 5;
        }
        for (int d = 0; tail && d < CDDP_NDTYPES; d++) {
            if (strcmp(tail, legacy_names[d]) == 0) {
                if (cuda && cuda_fallback(-1) < 0)
                    return NULL;
                return to_impl(x, 1, (cddp_dtype)d, NULL, 0, CDDP_MF_PRESERVE);
            }
        }
        PyErr_Format(PyExc_ValueError, "invalid type: '%s'", s);
        return NULL;
    }
    if (cddp_dtype_from_py(a[0], &dt) < 0)
        return NULL;
    return to_impl(x, 1, dt, NULL, 0, CDDP_MF_PRESERVE);
}

PyObject *cddp_convert_cpu(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    PyObject *a[1];
    if ((nargs || kwnames) &&
        cddp_shape_parse_args("cpu", args, nargs, kwnames, memfmt_names, 1, 0, a) < 0)
        return NULL;
    if (((TensorObject *)self)->storage->device >= 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cddp: copying a CUDA tensor to the CPU needs the CUDA backend "
                        "(cddp._cuda)");
        return NULL;
    }
    if (cddp_is_meta((TensorObject *)self))
        return meta_copy_out();
    return Py_NewRef(self);
}

PyObject *cddp_convert_cuda(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    static const char *const names[] = {"device", "non_blocking", "memory_format"};
    PyObject *a[3];
    int kind;
    long index;
    if (cddp_shape_parse_args("cuda", args, nargs, kwnames, names, 3, 2, a) < 0)
        return NULL;
    if (parse_device(a[0], &kind, &index) < 0)
        return NULL;
    if (a[0] && a[0] != Py_None && kind != DEV_CUDA) {
        PyErr_SetString(PyExc_RuntimeError, "Invalid device, must be cuda device");
        return NULL;
    }
    if (cuda_fallback(index) < 0)
        return NULL;
    if (cddp_is_meta((TensorObject *)self))
        return meta_copy_out();
    return Py_NewRef(self);
}

/* ---- channels-last results ------------------------------------------------------------ */

PyObject *cddp_convert_as_format(TensorObject *out, int fmt)
{
    int64_t st[CDDP_MAX_DIMS];
    if (fmt == CDDP_MF_PRESERVE || (fmt == CDDP_MF_CONTIGUOUS && cddp_is_contiguous(out)))
        return Py_NewRef(out);
    if (cddp_format_strides(out, fmt, st) < 0)
        return NULL;
    if (fmt != CDDP_MF_CONTIGUOUS && cddp_same_strides(out->ndim, out->shape, out->strides, st))
        return Py_NewRef(out);
    return copy_as(out, out->dtype, "CloneBackward0", clone_backward, cddp_is_meta(out), fmt);
}

/* _keep_channels_last(out, *like): torch's CPU convolution, normalization, pooling, padding
 * and resampling kernels write a channels-last result when their input (for a convolution:
 * or weight) is channels-last strided; cddp's kernels write row-major, so the wrappers in
 * nn/ pass their result through here: out itself, or its channels-last copy (with history). */
PyObject *cddp_convert_keep_channels_last(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    TensorObject *out;
    if (nargs < 1 || !cddp_tensor_check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "_keep_channels_last(out, *like): out must be a Tensor");
        return NULL;
    }
    out = (TensorObject *)args[0];
    for (Py_ssize_t i = 1; i < nargs; i++) {
        TensorObject *t = (TensorObject *)args[i];
        if (!cddp_tensor_check(args[i]) || t->ndim != out->ndim)
            continue;
        int fmt = cddp_suggest_memory_format(t);
        if (fmt != CDDP_MF_CONTIGUOUS)
            return cddp_convert_as_format(out, fmt);
    }
    return Py_NewRef(out);
}
