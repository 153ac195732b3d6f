/* nn/conv_args.c — argument helpers shared by the spatial ops' Python entry points (conv,
 * conv_transpose, fold, pooling, padding, interpolation): int lists, tensor arguments, float
 * contiguous inputs and torch's "[a, b, c]" size text for messages.
 *
 * Mirrors: the argument checks of at::native's convolution and pooling entry points (their
 * error texts).
 */
#include "nn/conv.h"
#include <stdio.h>

/* An integer as torch takes it: a Python int or anything with __index__ (NumPy's integers);
 * not a sequence. 1 with *v set, 0 when o is no integer, -1 with an exception. */
static int index_value(PyObject *o, int64_t *v)
{
    PyObject *i;
    if (!PyLong_Check(o) && (!PyIndex_Check(o) || PySequence_Check(o)))
        return 0;
    i = PyNumber_Index(o);
    if (!i)
        return -1;
    *v = PyLong_AsLongLong(i);
    Py_DECREF(i);
    return *v == -1 && PyErr_Occurred() ? -1 : 1;
}

int cddp_int_list(PyObject *o, int n, const char *what, int64_t *out)
{
    int64_t v;
    int r = index_value(o, &v);
    if (r < 0)
        return -1;
    if (r) {
        for (int i = 0; i < n; i++)
            out[i] = v;
        return 0;
    }
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be an int or a tuple of ints, not %s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int rc = -1;
    if (len != n) {
        PyObject *r = PyObject_Repr(o);
        PyErr_Format(PyExc_RuntimeError, "expected %s to be a single integer value or a list of "
                     "%d values to match the convolution dimensions, but got %s=%S", what, n,
                     what, r ? r : o);
        Py_XDECREF(r);
        goto done;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        int ok = index_value(e, &out[i]);
        if (ok == 0)
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of ints, but element %zd is %s",
                         what, i, Py_TYPE(e)->tp_name);
        if (ok <= 0)
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(seq);
    return rc;
}

const char *cddp_shape_str(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t k = 0;
    int w = snprintf(buf, len, "[");
    k = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < ndim && k < len; d++) {
        w = snprintf(buf + k, len - k, d ? ", %lld" : "%lld", (long long)shape[d]);
        if (w < 0)
            break;
        k += (size_t)w;
    }
    if (k < len)
        snprintf(buf + k, len - k, "]");
    return buf;
}

TensorObject *cddp_tensor_arg(PyObject *const *args, Py_ssize_t i, const char *fn,
                              const char *what, int allow_none)
{
    PyObject *o = args[i];
    if (allow_none && o == Py_None)
        return (TensorObject *)Py_None;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be Tensor, not %s", fn, what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (TensorObject *)o;
}

TensorObject *cddp_float_contiguous(TensorObject *t, const char *fn)
{
    if (!cddp_is_floating(t->dtype)) {
        PyErr_Format(PyExc_RuntimeError, "%s: expected a floating point tensor (float32 or "
                     "float64), but got %s", fn, cddp_dtype_name[t->dtype]);
        return NULL;
    }
    return cddp_tensor_contiguous_raw(t);
}
