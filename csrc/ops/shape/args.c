/* ops/shape/args.c — argument parsing shared by the shape files (contracts in
 * ops/shape/shape.h): FASTCALL positionals and keywords by name, ints through __index__,
 * torch's dim wrapping, int lists given as *ints or one sequence (IntArrayRef), and shapes
 * formatted for messages.
 *
 * Mirrors torch's python_arg_parser rules and texts for these signatures (TypeError on too
 * many positionals or unknown keywords, IndexError "Dimension out of range ...").
 */
#include "ops/shape/shape.h"
#include <string.h>

/* ---- argument helpers ----------------------------------------------------------------- */

int cddp_shape_keywords_as_positional(const char *fname, PyObject *const **args,
                                      Py_ssize_t *nargs, PyObject *kwnames,
                                      const char *const *names, int n, PyObject **buf)
{
    int k = 0;
    if (!kwnames)
        return 0;
    if (cddp_shape_parse_args(fname, *args, *nargs, kwnames, names, n, n, buf) < 0)
        return -1;
    while (k < n && buf[k])
        k++;
    for (int i = k; i < n; i++)
        if (buf[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname,
                         names[k]);
            return -1;
        }
    *args = buf;
    *nargs = k;
    return 0;
}

int cddp_shape_parse_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames, const char *const *names, int nparams, int npos,
                          PyObject **out)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (int i = 0; i < nparams; i++)
        out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional argument%s (%zd given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        for (; i < nparams; i++)             /* "dim" also answers to NumPy's "axis", as torch */
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0 ||
                (strcmp(names[i], "dim") == 0 &&
                 PyUnicode_CompareWithASCIIString(key, "axis") == 0))
                break;
        if (i == nparams) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        if (out[i]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
                         fname, names[i]);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    return 0;
}

int cddp_shape_get_int(PyObject *o, const char *fname, const char *argname, int64_t *v)
{
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        *v = PyLong_AsLongLong(o);
        return *v == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (o && !PyBool_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o)) {
        PyObject *i = PyNumber_Index(o);
        if (!i)
            return -1;
        *v = PyLong_AsLongLong(i);
        Py_DECREF(i);
        return *v == -1 && PyErr_Occurred() ? -1 : 0;
    }
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %s", fname, argname,
                 o ? Py_TYPE(o)->tp_name : "None");
    return -1;
}

int cddp_shape_wrap_dim(int64_t dim, int ndim, int64_t *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                     -n, n - 1, (long long)dim);
        return -1;
    }
    *out = dim < 0 ? dim + n : dim;
    return 0;
}

void cddp_shape_format(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* Ints given as (*ints) or as one sequence (tuple, list, Size): torch's IntArrayRef args.
 * Negative values are kept (callers give -1 its meaning). */
int cddp_shape_int_list(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                          int *ndim, int64_t *out)
{
    PyObject *fast = NULL;
    PyObject *const *items = args;
    Py_ssize_t n = nargs;
    int rc = -1;
    if (nargs == 1 && !PyLong_Check(args[0]) && !PyIndex_Check(args[0])) {
        fast = PySequence_Fast(args[0], "");
        if (!fast) {
            PyErr_Format(PyExc_TypeError, "%s(): argument 'size' must be tuple of ints, not %s",
                         fname, Py_TYPE(args[0])->tp_name);
            return -1;
        }
        items = PySequence_Fast_ITEMS(fast);
        n = PySequence_Fast_GET_SIZE(fast);
    }
    if (n > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions, got %zd",
                     CDDP_MAX_DIMS, n);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = items[i];
        if (PyLong_CheckExact(o)) {
            out[i] = PyLong_AsLongLong(o);
            if (out[i] == -1 && PyErr_Occurred())
                goto done;
        } else if (!PyBool_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o)) {
            if (cddp_shape_get_int(o, fname, "size", &out[i]) < 0)
                goto done;
        } else {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument 'size' must be tuple of ints, but found element of "
                         "type %s at pos %zd", fname, Py_TYPE(o)->tp_name, i);
            goto done;
        }
    }
    *ndim = (int)n;
    rc = 0;
done:
    Py_XDECREF(fast);
    return rc;
}

int cddp_shape_check_tensor(PyObject *o, const char *fname, const char *argname)
{
    if (o && cddp_tensor_check(o))
        return 0;
    return cddp_arg_type_error(fname, argname, "Tensor", o);
}
