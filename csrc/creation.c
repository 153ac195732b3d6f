/* creation.c — tensor(data), item(), repr (minimal; to be completed). */
#include "cddp.h"
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

/* Copy of arbitrary data through NumPy's parser; Python floats become the default dtype. */
TensorObject *cddp_tensor_from_data(PyObject *data, int has_dtype, cddp_dtype dtype)
{
    PyObject *arr = NULL;
    TensorObject *view = NULL, *out = NULL;
    if (cddp_tensor_check(data)) {
        TensorObject *t = (TensorObject *)data;
        out = cddp_tensor_new(has_dtype ? dtype : t->dtype, t->ndim, t->shape, 0);
        if (out && cddp_copy_into(out, t) < 0)
            Py_CLEAR(out);
        return out;
    }
    arr = PyArray_FromAny(data, NULL, 0, 0, NPY_ARRAY_DEFAULT | NPY_ARRAY_ENSUREARRAY, NULL);
    if (!arr)
        return NULL;
    if (!has_dtype) {
        int tn = PyArray_TYPE((PyArrayObject *)arr);
        int from_py = !PyArray_Check(data);
        if (tn == NPY_FLOAT64 && from_py)
            dtype = cddp_state()->default_dtype;
        else if (tn == NPY_FLOAT64) dtype = CDDP_FLOAT64;
        else if (tn == NPY_FLOAT32) dtype = CDDP_FLOAT32;
        else if (tn == NPY_INT32) dtype = CDDP_INT32;
        else if (tn == NPY_BOOL) dtype = CDDP_BOOL;
        else if (PyTypeNum_ISINTEGER(tn)) dtype = CDDP_INT64;
        else if (PyTypeNum_ISFLOAT(tn)) dtype = CDDP_FLOAT32;
        else {
            PyErr_Format(PyExc_TypeError, "cddp.tensor: cannot make a tensor from %s data",
                         Py_TYPE(data)->tp_name);
            goto done;
        }
    }
    {
        PyObject *c = PyArray_FromAny(arr, PyArray_DescrFromType(
            dtype == CDDP_FLOAT32 ? NPY_FLOAT32 : dtype == CDDP_FLOAT64 ? NPY_FLOAT64 :
            dtype == CDDP_INT64 ? NPY_INT64 : dtype == CDDP_INT32 ? NPY_INT32 : NPY_BOOL),
            0, 0, NPY_ARRAY_DEFAULT | NPY_ARRAY_FORCECAST, NULL);
        if (!c)
            goto done;
        Py_SETREF(arr, c);
    }
    view = cddp_tensor_from_numpy(arr);
    if (!view)
        goto done;
    out = cddp_tensor_new(dtype, view->ndim, view->shape, 0);
    if (out && cddp_copy_into(out, view) < 0)
        Py_CLEAR(out);
done:
    Py_XDECREF(view);
    Py_XDECREF(arr);
    return out;
}

PyObject *cddp_tensor_item(TensorObject *t)
{
    char *p = cddp_data(t);   /* one element: every index is 0 */
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
    default: return PyBool_FromLong(*(uint8_t *)p != 0);
    }
}

PyObject *cddp_tensor_repr(PyObject *self)
{
    TensorObject *t = (TensorObject *)self;
    PyObject *arr = NULL, *s = NULL;
    TensorObject *c = cddp_tensor_contiguous_raw(t);
    if (!c)
        return NULL;
    extern PyObject *cddp_tensor_to_numpy(TensorObject *);
    arr = cddp_tensor_to_numpy(c);
    if (arr)
        s = PyUnicode_FromFormat("tensor(%R, dtype=cddp.%s)", arr, cddp_dtype_name[t->dtype]);
    Py_XDECREF(arr);
    Py_DECREF(c);
    return s;
}

static PyObject *py_tensor(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "dtype", "device", "requires_grad", "pin_memory", NULL};
    PyObject *data, *dtypeo = Py_None, *device = Py_None, *pin = Py_False;
    int rg = 0;
    cddp_dtype dt = CDDP_FLOAT32;
    TensorObject *t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOpO:tensor", kwlist, &data, &dtypeo,
                                     &device, &rg, &pin))
        return NULL;
    if (dtypeo != Py_None && cddp_dtype_from_py(dtypeo, &dt) < 0)
        return NULL;
    t = cddp_tensor_from_data(data, dtypeo != Py_None, dt);
    if (t && rg) {
        if (!cddp_is_floating(t->dtype)) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Only Tensors of floating point dtype can require gradients");
            Py_DECREF(t);
            return NULL;
        }
        t->requires_grad = 1;
    }
    return (PyObject *)t;
}

static PyObject *tensor_item(PyObject *self, PyObject *unused)
{
    return cddp_tensor_item((TensorObject *)self);
}

PyMethodDef cddp_creation_tensor_methods[] = {
    {"item", tensor_item, METH_NOARGS, NULL},
    {NULL},
};
PyMethodDef cddp_creation_module_methods[] = {
    {"tensor", (PyCFunction)py_tensor, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL},
};
