/* ops/reduce/args.c — argument parsing shared by every reduction (contracts in
 * ops/reduce/reduce.h): FASTCALL positionals and keywords by name, keepdim / dtype / dim
 * arguments, and the module-function form cddp.<op>(input, ...) of a Tensor method.
 *
 * Mirrors the argument rules of torch's reduction signatures (torch/_C/_VariableFunctions):
 * `dim` also answers to `axis` and `keepdim` to `keepdims` (NumPy's spellings, which torch's
 * parser maps for every function), keepdim must be a bool, dims are normalized against ndim with
 * torch's IndexError text, duplicate dims are a RuntimeError.
 */
#include "ops/reduce/reduce.h"
#include <string.h>

/* ---- argument helpers ----------------------------------------------------------------- */

static int kw_is(PyObject *key, const char *name)
{
    return PyUnicode_CompareWithASCIIString(key, name) == 0;
}

int cddp_reduce_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int npos,
                     PyObject **out)
{
    for (int k = 0; k < n; k++)
        out[k] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional argument%s (%zd given)",
                     fname, npos, npos == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    if (!kwnames)
        return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(kwnames); j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        int k = 0;
        for (; k < n; k++)
            if (kw_is(key, names[k]) || (strcmp(names[k], "dim") == 0 && kw_is(key, "axis")) ||
                (strcmp(names[k], "keepdim") == 0 && kw_is(key, "keepdims")))
                break;
        if (k == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         fname, key);
            return -1;
        }
        if (out[k]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname,
                         names[k]);
            return -1;
        }
        out[k] = args[nargs + j];
    }
    return 0;
}

PyObject *cddp_reduce_as_function(const char *fname, cddp_reduce_meth impl,
                                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *input = NULL, *kw = NULL, *res = NULL;
    PyObject *rest[16];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0, k = 0;
    if (nargs >= 1) {
        input = args[0];
        if (!cddp_tensor_check(input))
            goto bad_input;
        return impl(input, args + 1, nargs - 1, kwnames);
    }
    /* input passed by keyword: rebuild the keyword part without it */
    if (nkw > 16) {
        PyErr_Format(PyExc_TypeError, "%s(): too many keyword arguments", fname);
        return NULL;
    }
    if (!(kw = PyTuple_New(nkw ? nkw - 1 : 0)))
        return NULL;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, j);
        if (!input && kw_is(key, "input")) {
            input = args[j];
        } else if (k < PyTuple_GET_SIZE(kw)) {
            PyTuple_SET_ITEM(kw, k, Py_NewRef(key));
            rest[k++] = args[j];
        }
    }
    if (!input) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'input' (pos 1)", fname);
        goto done;
    }
    if (!cddp_tensor_check(input))
        goto bad_input;
    res = impl(input, rest, 0, PyTuple_GET_SIZE(kw) ? kw : NULL);
    goto done;
bad_input:
    if (cddp_is_complex_obj(input))
        cddp_arg_type_error(fname, "input", "Tensor", input);
    else
        PyErr_Format(PyExc_TypeError, "%s(): argument 'input' (position 1) must be Tensor, not "
                     "%s", fname, Py_TYPE(input)->tp_name);
done:
    Py_XDECREF(kw);
    return res;
}

int cddp_reduce_bool(const char *fname, const char *argname, PyObject *o, int dflt)
{
    if (!o)
        return dflt;
    if (!PyBool_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be bool, not %s", fname,
                     argname, Py_TYPE(o)->tp_name);
        return -1;
    }
    return o == Py_True;
}

int cddp_reduce_dtype(PyObject *o, int *has, cddp_dtype *dt)
{
    *has = 0;
    if (!o || o == Py_None)
        return 0;
    if (cddp_dtype_from_py(o, dt) < 0)
        return -1;
    *has = 1;
    return 0;
}

int cddp_reduce_norm_dim(int64_t dim, int ndim, int *out)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                     -n, n - 1, (long long)dim);
        return -1;
    }
    *out = (int)(dim < 0 ? dim + n : dim);
    return 0;
}

static int is_int_arg(PyObject *o)
{
    return PyIndex_Check(o) && !PyBool_Check(o) && !cddp_tensor_check(o);
}

static int dim_value(const char *fname, PyObject *o, int ndim, int *out)
{
    int64_t v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        PyObject *i = PyNumber_Index(o);
        if (!i)
            return -1;
        v = PyLong_AsLongLong(i);
        Py_DECREF(i);
        if (v == -1 && PyErr_Occurred())
            return -1;
    }
    return cddp_reduce_norm_dim(v, ndim, out);
}

int cddp_reduce_int_dim(const char *fname, PyObject *o, int ndim, int *out)
{
    if (!o || !is_int_arg(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be int, not %s", fname,
                     o ? Py_TYPE(o)->tp_name : "NoneType");
        return -1;
    }
    return dim_value(fname, o, ndim, out);
}

int cddp_reduce_dims(const char *fname, PyObject *o, int ndim, int allow_seq, int empty_all,
                     uint32_t *mask)
{
    uint32_t all = ndim ? (uint32_t)((1u << ndim) - 1) : 0, seen = 0;
    int d;
    if (!o || o == Py_None) {
        *mask = all;
        return 0;
    }
    if (is_int_arg(o)) {
        if (dim_value(fname, o, ndim, &d) < 0)
            return -1;
        *mask = ndim ? 1u << d : 0;
        return 0;
    }
    if (!allow_seq || !(PyTuple_Check(o) || PyList_Check(o))) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be %s, not %s", fname,
                     allow_seq ? "int or tuple of ints" : "int", Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    if (n == 0) {
        *mask = empty_all ? all : 0;
        return 0;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(o, k);
        if (!is_int_arg(item)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument 'dim' must be tuple of ints, but found element of "
                         "type %s at pos %zd", fname, Py_TYPE(item)->tp_name, k);
            return -1;
        }
        if (dim_value(fname, item, ndim, &d) < 0)
            return -1;
        if (seen & (1u << d)) {
            PyErr_Format(PyExc_RuntimeError, "dim %d appears multiple times in the list of dims",
                         d);
            return -1;
        }
        seen |= 1u << d;
    }
    *mask = ndim ? seen : 0;
    return 0;
}

const char *cddp_reduce_torch_name(cddp_dtype d)
{
    return cddp_dtype_torch_name[d];
}

