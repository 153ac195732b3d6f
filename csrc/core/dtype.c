/* core/dtype.c — cddp.dtype objects (float32, float64, int64, int32, bool) and promotion.
 *
 * Mirrors torch.dtype: `cddp.float32`, `.is_floating_point`, `.itemsize`; aliases float/double/
 * long/int as torch has them. Promotion follows torch's category order for tensor-tensor ops.
 */
#include "core/cddp.h"
#include "module.h"
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

const size_t cddp_dtype_size[CDDP_NDTYPES] = {4, 8, 8, 4, 1};
const char *const cddp_dtype_name[CDDP_NDTYPES] = {"float32", "float64", "int64", "int32", "bool"};

typedef struct {
    PyObject_HEAD
    cddp_dtype dtype;
} DtypeObject;

cddp_dtype cddp_promote(cddp_dtype a, cddp_dtype b)
{
    /* rank: bool 0 < int32 1 < int64 2 < float32 3 < float64 4 */
    static const int rank[CDDP_NDTYPES] = {3, 4, 2, 1, 0};
    static const cddp_dtype by_rank[5] = {CDDP_BOOL, CDDP_INT32, CDDP_INT64, CDDP_FLOAT32, CDDP_FLOAT64};
    return by_rank[rank[a] > rank[b] ? rank[a] : rank[b]];
}

static PyObject *dtype_repr(PyObject *self)
{
    return PyUnicode_FromFormat("cddp.%s", cddp_dtype_name[((DtypeObject *)self)->dtype]);
}

static PyObject *dtype_is_floating(PyObject *self, void *c)
{
    return PyBool_FromLong(cddp_is_floating(((DtypeObject *)self)->dtype));
}

static PyObject *dtype_itemsize(PyObject *self, void *c)
{
    return PyLong_FromSize_t(cddp_dtype_size[((DtypeObject *)self)->dtype]);
}

static PyObject *dtype_is_signed(PyObject *self, void *c)
{
    return PyBool_FromLong(((DtypeObject *)self)->dtype != CDDP_BOOL);
}

static PyObject *dtype_reduce(PyObject *self, PyObject *unused)
{
    /* dtypes pickle by name so DataLoader workers can ship them */
    return PyUnicode_FromString(cddp_dtype_name[((DtypeObject *)self)->dtype]);
}

static PyGetSetDef dtype_getset[] = {
    {"is_floating_point", dtype_is_floating, NULL, NULL, NULL},
    {"itemsize", dtype_itemsize, NULL, NULL, NULL},
    {"is_signed", dtype_is_signed, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", dtype_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot dtype_slots[] = {
    {Py_tp_repr, dtype_repr},
    {Py_tp_getset, dtype_getset},
    {Py_tp_methods, dtype_methods},
    {Py_tp_doc, "A tensor element type (cddp.float32, cddp.float64, cddp.int64, cddp.int32, cddp.bool)."},
    {0, NULL},
};

static PyType_Spec dtype_spec = {
    .name = "cddp.dtype",
    .basicsize = sizeof(DtypeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = dtype_slots,
};

/* Create the dtype type and its five instances; add them (and torch's aliases) to module m. */
int cddp_dtype_init(PyObject *m, cddp_state_t *st)
{
    static const char *aliases[][2] = {{"float", "float32"}, {"double", "float64"},
                                       {"long", "int64"}, {"int", "int32"}};
    st->dtype_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &dtype_spec, NULL);
    if (!st->dtype_type)
        return -1;
    if (PyModule_AddObjectRef(m, "dtype", (PyObject *)st->dtype_type) < 0)
        return -1;
    for (int d = 0; d < CDDP_NDTYPES; d++) {
        DtypeObject *o = PyObject_New(DtypeObject, st->dtype_type);
        if (!o)
            return -1;
        o->dtype = (cddp_dtype)d;
        st->dtypes[d] = (PyObject *)o;
        if (PyModule_AddObjectRef(m, cddp_dtype_name[d], (PyObject *)o) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        PyObject *o = PyObject_GetAttrString(m, aliases[i][1]);
        if (!o || PyModule_AddObject(m, aliases[i][0], o) < 0) {
            Py_XDECREF(o);
            return -1;
        }
    }
    return 0;
}

PyObject *cddp_dtype_to_py(cddp_dtype d)
{
    return cddp_state()->dtypes[d];
}

/* Accepts cddp dtypes, Python's float/int/bool types (torch: float -> float64) and anything
 * numpy.dtype() understands among the five supported types. TypeError otherwise. */
int cddp_dtype_from_py(PyObject *o, cddp_dtype *out)
{
    cddp_state_t *st = cddp_state();
    PyArray_Descr *descr = NULL;
    if (Py_IS_TYPE(o, st->dtype_type)) {
        *out = ((DtypeObject *)o)->dtype;
        return 0;
    }
    if (o == (PyObject *)&PyFloat_Type) { *out = CDDP_FLOAT64; return 0; }
    if (o == (PyObject *)&PyLong_Type) { *out = CDDP_INT64; return 0; }
    if (o == (PyObject *)&PyBool_Type) { *out = CDDP_BOOL; return 0; }
    if (o == Py_None || !PyArray_DescrConverter2(o, &descr) || !descr)
        goto fail;
    switch (descr->type_num) {
    case NPY_FLOAT32: *out = CDDP_FLOAT32; break;
    case NPY_FLOAT64: *out = CDDP_FLOAT64; break;
    case NPY_INT64: *out = CDDP_INT64; break;
    case NPY_INT32: *out = CDDP_INT32; break;
    case NPY_BOOL: *out = CDDP_BOOL; break;
    default: Py_DECREF(descr); goto fail;
    }
    Py_DECREF(descr);
    return 0;
fail:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "dtype must be one of cddp.float32, float64, int64, int32, bool; got %R", o);
    return -1;
}
