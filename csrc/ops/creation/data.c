/* ops/creation/data.c — tensors from Python data and back: tensor(), as_tensor(), new_tensor(),
 * tolist().
 *
 * Mirrors torch.tensor's data parser (torch/csrc/utils/tensor_new.cpp): nested lists/tuples of
 * numbers are read directly in C in two passes —
 *   1. scan: the shape comes from the first element at each depth (compute_sizes); every
 *      sequence is checked against it ("expected sequence of length 3 at dim 1 (got 2)") and,
 *      when no dtype is given, every leaf's type is promoted (infer_scalar_type): Python
 *      float -> default dtype, int -> int64, bool -> bool, NumPy scalars and tensors -> their
 *      own dtype; strings raise TypeError, other objects RuntimeError.
 *   2. store: leaves are converted straight into the new tensor's buffer.
 * NumPy arrays (also nested in lists) and tensors inside lists are copied whole. NumPy dtypes
 * cddp lacks are widened: uint16/32/64 -> int64.
 */
#include "ops/creation/creation.h"
#include <string.h>
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

PyObject *cddp_tensor_to_numpy(TensorObject *t);   /* core/tensor_core.c */

/* ---- NumPy dtypes --------------------------------------------------------------------- */

/* The cddp dtype holding a NumPy type (widened where cddp has no such type). -1: none. */
static int npy_to_cddp(int tn, cddp_dtype *out)
{
    switch (tn) {
    case NPY_FLOAT32: *out = CDDP_FLOAT32; return 0;
    case NPY_FLOAT64: *out = CDDP_FLOAT64; return 0;
    case NPY_HALF: *out = CDDP_FLOAT16; return 0;
    case NPY_INT32: *out = CDDP_INT32; return 0;
    case NPY_BOOL: *out = CDDP_BOOL; return 0;
    case NPY_UINT8: *out = CDDP_UINT8; return 0;
    case NPY_INT8: *out = CDDP_INT8; return 0;
    case NPY_INT16: *out = CDDP_INT16; return 0;
    default:
        if (PyTypeNum_ISINTEGER(tn)) {
            *out = CDDP_INT64;
            return 0;
        }
        return -1;
    }
}

static void bad_numpy_type(PyArrayObject *a)
{
    PyErr_Format(PyExc_TypeError,
                 "can't convert np.ndarray of type %s. The only supported types are: float64, "
                 "float32, float16, int64, int32, int16, int8, uint64, uint32, uint16, uint8, "
                 "and bool.", PyArray_DESCR(a)->typeobj->tp_name);
}

/* dst (any layout, shape == array's) = array values, converted by NumPy (bfloat16, which
 * NumPy lacks: through a float64 copy, then double -> float -> bfloat16 as torch rounds). */
static int copy_from_numpy(TensorObject *dst, PyArrayObject *a)
{
    PyObject *view;
    int rc;
    if (dst->dtype == CDDP_BFLOAT16) {
        TensorObject *tmp = cddp_tensor_new(CDDP_FLOAT64, dst->ndim, dst->shape, 0);
        if (!tmp)
            return -1;
        rc = copy_from_numpy(tmp, a);
        if (rc == 0)
            rc = cddp_copy_into(dst, tmp);
        Py_DECREF(tmp);
        return rc;
    }
    view = cddp_tensor_to_numpy(dst);
    if (!view)
        return -1;
    rc = PyArray_CopyInto((PyArrayObject *)view, a);
    Py_DECREF(view);
    return rc;
}

/* ---- pass 1: scan --------------------------------------------------------------------- */

typedef struct {
    int ndim;                     /* leaf depth; -1 until the first leaf or empty sequence */
    int known;                    /* shape entries fixed so far (from first elements) */
    int64_t shape[CDDP_MAX_DIMS];
    int infer;                    /* dtype inference wanted */
    int have;                     /* a leaf type was seen */
    cddp_dtype dtype;
} scan_t;

static void promote_into(scan_t *s, cddp_dtype d)
{
    s->dtype = s->have ? cddp_promote(s->dtype, d) : d;
    s->have = 1;
}

/* Record a dimension of length n at depth, checking it against the shape seen first. */
static int scan_dim(scan_t *s, int depth, int64_t n)
{
    if (depth >= CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions", CDDP_MAX_DIMS);
        return -1;
    }
    if (s->ndim >= 0 && depth >= s->ndim) {
        PyErr_Format(PyExc_TypeError, "expected a number at dim %d, got a sequence", depth);
        return -1;
    }
    if (depth < s->known) {
        if (s->shape[depth] != n) {
            PyErr_Format(PyExc_ValueError, "expected sequence of length %lld at dim %d (got %lld)",
                         (long long)s->shape[depth], depth, (long long)n);
            return -1;
        }
        return 0;
    }
    s->shape[depth] = n;
    s->known = depth + 1;
    return 0;
}

/* A leaf (or the end of an empty sequence / array) at depth. */
static int scan_leaf_depth(scan_t *s, int depth)
{
    if (s->ndim < 0) {
        s->ndim = depth;
        return 0;
    }
    if (depth != s->ndim) {
        PyErr_SetString(PyExc_TypeError, "not a sequence");
        return -1;
    }
    return 0;
}

static int scan_scalar_type(PyObject *o, cddp_dtype *d)
{
    if (PyArray_IsScalar(o, Generic)) {
        PyArray_Descr *descr = PyArray_DescrFromScalar(o);
        int rc;
        if (!descr)
            return -1;
        rc = npy_to_cddp(descr->type_num, d);
        Py_DECREF(descr);
        if (rc < 0) {
            PyErr_Format(PyExc_TypeError, "can't convert np.%s to a tensor element",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        return 0;
    }
    if (PyFloat_Check(o)) { *d = cddp_state()->default_dtype; return 0; }
    if (PyBool_Check(o)) { *d = CDDP_BOOL; return 0; }
    if (PyLong_Check(o)) { *d = CDDP_INT64; return 0; }
    return 1;   /* not a number */
}

/* Set by scan when the data holds a Python complex number (read by cddp_py_tensor). */
static int complex_seen;

static int scan(scan_t *s, PyObject *o, int depth)
{
    cddp_dtype d;
    int rc;
    if (PyFloat_CheckExact(o) || PyLong_CheckExact(o) || PyBool_Check(o)) {
        if (scan_leaf_depth(s, depth) < 0)
            return -1;
        if (s->infer)
            promote_into(s, PyFloat_CheckExact(o) ? cddp_state()->default_dtype :
                            PyBool_Check(o) ? CDDP_BOOL : CDDP_INT64);
        return 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (scan_dim(s, depth, n) < 0)
            return -1;
        if (n == 0)
            return scan_leaf_depth(s, depth + 1);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(o, i);
            if (Py_EnterRecursiveCall(" while reading tensor data"))
                return -1;
            rc = scan(s, item, depth + 1);
            Py_LeaveRecursiveCall();
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    if (cddp_tensor_check(o) && depth > 0) {
        /* torch: a tensor inside a sequence is one number (tensor([loss_a, loss_b]) is 1-d
         * whether the losses are 0-d or hold one element); it stores as a 1-element block */
        if (cddp_numel((TensorObject *)o) != 1) {
            PyErr_SetString(PyExc_ValueError,
                            "only one element tensors can be converted to Python scalars");
            return -1;
        }
        if (scan_leaf_depth(s, depth) < 0)
            return -1;
        if (s->infer)
            promote_into(s, ((TensorObject *)o)->dtype);
        return 0;
    }
    if (cddp_tensor_check(o) || PyArray_Check(o)) {
        /* a whole block (the data itself, or an array inside a sequence): its dims continue
         * the shape */
        int nd;
        const npy_intp *dims = NULL;
        const int64_t *tdims = NULL;
        if (cddp_tensor_check(o)) {
            nd = ((TensorObject *)o)->ndim;
            tdims = ((TensorObject *)o)->shape;
            d = ((TensorObject *)o)->dtype;
        } else {
            nd = PyArray_NDIM((PyArrayObject *)o);
            dims = PyArray_DIMS((PyArrayObject *)o);
            if (npy_to_cddp(PyArray_TYPE((PyArrayObject *)o), &d) < 0) {
                bad_numpy_type((PyArrayObject *)o);
                return -1;
            }
        }
        for (int k = 0; k < nd; k++)
            if (scan_dim(s, depth + k, tdims ? tdims[k] : (int64_t)dims[k]) < 0)
                return -1;
        if (scan_leaf_depth(s, depth + nd) < 0)
            return -1;
        if (s->infer)
            promote_into(s, d);
        return 0;
    }
    rc = scan_scalar_type(o, &d);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        if (scan_leaf_depth(s, depth) < 0)
            return -1;
        if (s->infer)
            promote_into(s, d);
        return 0;
    }
    if (PyUnicode_Check(o) || PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "new(): invalid data type '%s'", Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PySequence_Check(o)) {
        PyObject *fast = PySequence_Fast(o, "expected a sequence");
        if (!fast)
            return -1;
        rc = scan(s, fast, depth);
        Py_DECREF(fast);
        return rc;
    }
    if (PyComplex_Check(o))
        complex_seen = 1;                /* torch.tensor hands the data to cddp/_complex.py */
    PyErr_Format(PyExc_RuntimeError, "Could not infer dtype of %s", Py_TYPE(o)->tp_name);
    return -1;
}

/* ---- pass 2: store -------------------------------------------------------------------- */

typedef struct {
    TensorObject *out;
    char *p;                     /* next element to write (out is contiguous) */
    size_t isz;
    int ndim;
} store_t;

static int store_block(store_t *st, PyObject *o);

/* One Python leaf into *p (0-d tensors and arrays go through store_block). */
static int store_leaf(store_t *st, PyObject *o)
{
    cddp_scalar v;
    cddp_dtype dt = st->out->dtype;
    if (cddp_tensor_check(o) || PyArray_Check(o))
        return store_block(st, o);
    if (PyFloat_CheckExact(o) && dt == CDDP_FLOAT32) {       /* the common cases first */
        *(float *)st->p = (float)PyFloat_AS_DOUBLE(o);
    } else if (PyFloat_CheckExact(o) && dt == CDDP_FLOAT64) {
        *(double *)st->p = PyFloat_AS_DOUBLE(o);
    } else if (PyLong_CheckExact(o) && dt == CDDP_INT64) {
        int64_t x = PyLong_AsLongLong(o);
        if (x == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "Overflow when unpacking long long");
            }
            return -1;
        }
        *(int64_t *)st->p = x;
    } else {
        if (PyLong_CheckExact(o) && cddp_is_floating(dt)) {
            v.kind = 2;
            v.d = PyLong_AsDouble(o);
            if (v.d == -1.0 && PyErr_Occurred())
                return -1;
        } else if (cddp_scalar_from_py(o, &v, "tensor") < 0) {
            return -1;
        } else if (v.kind == 2 && PyLong_Check(o) && !cddp_is_floating(dt)) {
            PyErr_SetString(PyExc_ValueError, "Overflow when unpacking long long");
            return -1;
        }
        if (cddp_is_narrow(dt)) {
            /* torch's tensor(): float16/bfloat16 take any value (overflow -> inf), small
             * integers are range-checked (uint8 wraps from down to -255) */
            if (!cddp_is_floating(dt) && cddp_scalar_overflows(dt, v.kind == 2, v.d, v.i)) {
                PyErr_Format(PyExc_RuntimeError,
                             "value cannot be converted to type %s without overflow",
                             cddp_dtype_name[dt]);
                return -1;
            }
            if (v.kind == 2)
                cddp_store_double(dt, st->p, v.d);
            else
                cddp_store_int64(dt, st->p, v.i);
        } else if (cddp_scalar_store(&v, dt, st->p) < 0) {
            return -1;
        }
    }
    st->p += st->isz;
    return 0;
}

/* A tensor or array block of `nd` dims at the write position. */
static int store_block(store_t *st, PyObject *o)
{
    TensorObject *view;
    int nd, rc;
    int64_t shape[CDDP_MAX_DIMS], strides[CDDP_MAX_DIMS], n = 1;
    if (cddp_tensor_check(o)) {
        nd = ((TensorObject *)o)->ndim;
        memcpy(shape, ((TensorObject *)o)->shape, sizeof(int64_t) * nd);
    } else {
        nd = PyArray_NDIM((PyArrayObject *)o);
        for (int k = 0; k < nd; k++)
            shape[k] = PyArray_DIMS((PyArrayObject *)o)[k];
    }
    for (int k = 0; k < nd; k++)
        n *= shape[k];
    cddp_contiguous_strides(nd, shape, strides);
    view = cddp_tensor_alias(st->out, nd, shape, strides,
                             st->out->offset + (int64_t)((st->p - cddp_data(st->out)) / (ptrdiff_t)st->isz));
    if (!view)
        return -1;
    if (cddp_tensor_check(o))
        rc = cddp_copy_into(view, (TensorObject *)o);
    else
        rc = copy_from_numpy(view, (PyArrayObject *)o);
    Py_DECREF(view);
    if (rc < 0)
        return -1;
    st->p += (size_t)n * st->isz;
    return 0;
}

static int store(store_t *st, PyObject *o, int depth)
{
    int rc;
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (depth == st->ndim - 1 && st->out->dtype == CDDP_FLOAT32) {
            /* innermost float32 row: the hot loop of tensor([[...]]) */
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *item = PySequence_Fast_GET_ITEM(o, i);
                if (PyFloat_CheckExact(item)) {
                    *(float *)st->p = (float)PyFloat_AS_DOUBLE(item);
                    st->p += 4;
                } else if (store_leaf(st, item) < 0) {
                    return -1;
                }
            }
            return 0;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(o, i);
            if (depth == st->ndim - 1 && !cddp_tensor_check(item) && !PyArray_Check(item))
                rc = store_leaf(st, item);
            else
                rc = store(st, item, depth + 1);
            if (rc < 0)
                return -1;
        }
        return 0;
    }
    if (cddp_tensor_check(o) || PyArray_Check(o))
        return store_block(st, o);
    if (depth == st->ndim)
        return store_leaf(st, o);
    {
        PyObject *fast = PySequence_Fast(o, "expected a sequence");
        if (!fast)
            return -1;
        rc = store(st, fast, depth);
        Py_DECREF(fast);
        return rc;
    }
}

/* ---- entry points --------------------------------------------------------------------- */

static TensorObject *from_numpy_copy(PyArrayObject *a, int has_dtype, cddp_dtype dtype)
{
    int64_t shape[CDDP_MAX_DIMS];
    TensorObject *out;
    int nd = PyArray_NDIM(a);
    if (!has_dtype && npy_to_cddp(PyArray_TYPE(a), &dtype) < 0) {
        bad_numpy_type(a);
        return NULL;
    }
    if (has_dtype && ((!PyTypeNum_ISNUMBER(PyArray_TYPE(a)) && PyArray_TYPE(a) != NPY_BOOL) ||
                      PyTypeNum_ISCOMPLEX(PyArray_TYPE(a)))) {
        bad_numpy_type(a);
        return NULL;
    }
    if (nd > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %d",
                     CDDP_MAX_DIMS, nd);
        return NULL;
    }
    for (int d = 0; d < nd; d++) {
        if (PyArray_STRIDES(a)[d] < 0) {
            PyErr_SetString(PyExc_ValueError,
                            "At least one stride in the given numpy array is negative, and "
                            "tensors with negative strides are not currently supported. (You can "
                            "probably work around this by making a copy of your array  with "
                            "array.copy().) ");
            return NULL;
        }
        shape[d] = PyArray_DIMS(a)[d];
    }
    out = cddp_tensor_new(dtype, nd, shape, 0);
    if (out && copy_from_numpy(out, a) < 0)
        Py_CLEAR(out);
    return out;
}

TensorObject *cddp_tensor_from_data(PyObject *data, int has_dtype, cddp_dtype dtype)
{
    scan_t s;
    store_t st;
    TensorObject *out;
    if (cddp_tensor_check(data)) {
        TensorObject *t = (TensorObject *)data;
        out = cddp_tensor_new(has_dtype ? dtype : t->dtype, t->ndim, t->shape, 0);
        if (out && cddp_copy_into(out, t) < 0)
            Py_CLEAR(out);
        return out;
    }
    if (PyArray_Check(data))
        return from_numpy_copy((PyArrayObject *)data, has_dtype, dtype);
    s.ndim = -1;
    s.known = 0;
    s.infer = !has_dtype;
    s.have = 0;
    s.dtype = cddp_state()->default_dtype;
    if (scan(&s, data, 0) < 0)
        return NULL;
    if (s.ndim < 0)
        s.ndim = s.known;
    if (has_dtype)
        s.dtype = dtype;
    out = cddp_tensor_new(s.dtype, s.ndim, s.shape, 0);
    if (!out)
        return NULL;
    st.out = out;
    st.p = cddp_data(out);
    st.isz = cddp_dtype_size[s.dtype];
    st.ndim = s.ndim;
    if (store(&st, data, 0) < 0)
        Py_CLEAR(out);
    return out;
}

static PyObject *finish_data(TensorObject *t, int rg)
{
    if (!t)
        return NULL;
    if (rg && !cddp_is_floating(t->dtype)) {
        Py_DECREF(t);
        PyErr_SetString(PyExc_RuntimeError,
                        "Only Tensors of floating point and complex dtype can require gradients");
        return NULL;
    }
    t->requires_grad = (char)rg;
    return (PyObject *)t;
}

/* tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False) */
PyObject *cddp_py_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"data", "dtype", "device", "requires_grad",
                                        "pin_memory", NULL};
    PyObject *v[5] = {NULL};
    int has_dt, rg, meta;
    cddp_dtype dt;
    if (nargs != 1 && !(nargs == 0 && kw)) {
        PyErr_Format(PyExc_TypeError, "tensor() takes 1 positional argument but %zd were given",
                     nargs);
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("tensor", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "tensor() missing required argument 'data'");
        return NULL;
    }
    if ((v[1] && cddp_is_complex_obj(v[1])) ||         /* dtype=torch.complex64 */
        (PyArray_Check(v[0]) && PyArray_ISCOMPLEX((PyArrayObject *)v[0])))
        return cddp_complex_call("_tensor_call", NULL, args, nargs, kw);
    if (cddp_parse_dtype_opt(v[1], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[2], cddp_default_meta())) < 0 ||
        cddp_parse_flag(v[3], &rg) < 0)
        return NULL;
    complex_seen = 0;
    {
        TensorObject *t = cddp_tensor_from_data(v[0], has_dt, dt);
        if (!t && complex_seen && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
            PyErr_Clear();                                 /* complex numbers in the data */
            return cddp_complex_call("_tensor_call", NULL, args, nargs, kw);
        }
        return cddp_factory_place(finish_data(t, rg), meta);
    }
}

/* as_tensor(data, dtype=None, device=None): shares memory with a tensor of that dtype (the
 * same object) or a NumPy array of a cddp dtype; copies anything else. */
PyObject *cddp_py_as_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw)
{
    static const char *const names[] = {"data", "dtype", "device", NULL};
    PyObject *v[3] = {NULL};
    int has_dt, meta;
    cddp_dtype dt;
    if (nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "as_tensor() takes at most 3 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (cddp_kw_parse("as_tensor", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "as_tensor() missing required argument 'data'");
        return NULL;
    }
    if ((v[1] && cddp_is_complex_obj(v[1])) ||
        (PyArray_Check(v[0]) && PyArray_ISCOMPLEX((PyArrayObject *)v[0])))
        return cddp_complex_call("_as_tensor_call", NULL, args, nargs, kw);
    if (cddp_parse_dtype_opt(v[1], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[2], cddp_default_meta())) < 0)
        return NULL;
    if (cddp_tensor_check(v[0])) {
        TensorObject *t = (TensorObject *)v[0];
        if (!has_dt || t->dtype == dt)
            return cddp_factory_place(Py_NewRef(v[0]), meta);
        /* through Tensor.to when another file provides it, so autograd sees the cast */
        if (PyObject_HasAttrString(v[0], "to"))
            return cddp_factory_place(
                PyObject_CallMethod(v[0], "to", "O", cddp_dtype_to_py(dt)), meta);
        return cddp_factory_place((PyObject *)cddp_tensor_cast_raw(t, dt), meta);
    }
    if (PyArray_Check(v[0])) {
        PyArrayObject *a = (PyArrayObject *)v[0];
        int tn = PyArray_TYPE(a);
        cddp_dtype own;
        int shareable = (tn == NPY_FLOAT32 || tn == NPY_FLOAT64 || tn == NPY_INT64 ||
                         tn == NPY_INT32 || tn == NPY_BOOL || tn == NPY_FLOAT16 ||
                         tn == NPY_UINT8 || tn == NPY_INT8 || tn == NPY_INT16) &&
                        PyArray_ISNOTSWAPPED(a) &&
                        npy_to_cddp(tn, &own) == 0 && (!has_dt || own == dt);
        for (int d = 0; shareable && d < PyArray_NDIM(a); d++)
            shareable = PyArray_STRIDES(a)[d] >= 0 &&
                        PyArray_STRIDES(a)[d] % (npy_intp)PyArray_ITEMSIZE(a) == 0;
        if (shareable)
            return cddp_factory_place((PyObject *)cddp_tensor_from_numpy(v[0]), meta);
    }
    return cddp_factory_place((PyObject *)cddp_tensor_from_data(v[0], has_dt, dt), meta);
}

/* Tensor.new_tensor(data, *, dtype=None, device=None, requires_grad=False): a copy, in
 * self's dtype unless told otherwise */
PyObject *cddp_tensor_new_tensor(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kw)
{
    static const char *const names[] = {"data", "dtype", "device", "requires_grad",
                                        "layout", "pin_memory", NULL};
    PyObject *v[6] = {NULL};
    int has_dt, rg, meta;
    cddp_dtype dt;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "new_tensor() takes 1 positional argument");
        return NULL;
    }
    if (nargs)
        v[0] = args[0];
    if (cddp_kw_parse("new_tensor", args, nargs, kw, names, v) < 0)
        return NULL;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "new_tensor() missing required argument 'data'");
        return NULL;
    }
    if (cddp_parse_dtype_opt(v[1], &has_dt, &dt) < 0 ||
        (meta = cddp_parse_device_opt(v[2], cddp_is_meta((TensorObject *)self))) < 0 ||
        cddp_parse_flag(v[3], &rg) < 0)
        return NULL;
    return cddp_factory_place(
        finish_data(cddp_tensor_from_data(v[0], 1, has_dt ? dt : ((TensorObject *)self)->dtype),
                    rg), meta);
}

/* ---- tolist --------------------------------------------------------------------------- */

static PyObject *elem_to_py(cddp_dtype dt, const char *p)
{
    switch (dt) {
    case CDDP_FLOAT32: return PyFloat_FromDouble(*(const float *)p);
    case CDDP_FLOAT64: return PyFloat_FromDouble(*(const double *)p);
    case CDDP_INT64: return PyLong_FromLongLong(*(const int64_t *)p);
    case CDDP_INT32: return PyLong_FromLong(*(const int32_t *)p);
    case CDDP_BOOL: return Py_NewRef(*(const uint8_t *)p ? Py_True : Py_False);
    default:        /* float16/bfloat16 as their exact float value; small integers exactly */
        if (cddp_is_floating(dt))
            return PyFloat_FromDouble(cddp_load_double(dt, p));
        return PyLong_FromLong((long)cddp_load_double(dt, p));
    }
}

static PyObject *tolist_rec(TensorObject *t, const char *p, int d)
{
    PyObject *list;
    int64_t step;
    if (d == t->ndim)
        return elem_to_py(t->dtype, p);
    list = PyList_New((Py_ssize_t)t->shape[d]);
    if (!list)
        return NULL;
    step = t->strides[d] * (int64_t)cddp_dtype_size[t->dtype];
    for (int64_t i = 0; i < t->shape[d]; i++) {
        PyObject *item = tolist_rec(t, p + i * step, d + 1);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

PyObject *cddp_tensor_tolist(PyObject *self, PyObject *unused)
{
    TensorObject *t = (TensorObject *)self;
    if (cddp_is_meta(t)) {
        PyErr_SetString(PyExc_NotImplementedError, "Cannot copy out of meta tensor; no data!");
        return NULL;
    }
    return tolist_rec(t, cddp_data(t), 0);
}
