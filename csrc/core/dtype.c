/* core/dtype.c — cddp.dtype objects (float32 float64 int64 int32 bool float16 bfloat16 uint8
 * int8 int16) and promotion.
 *
 * Mirrors torch.dtype: `cddp.float32`, `.is_floating_point`, `.is_signed`, `.is_complex`,
 * `.itemsize`, `.to_real()`; aliases float/double/long/int/half/short as torch has them.
 * cddp_promote is c10's promoteTypes table for these ten types (tests check every pair
 * against torch.promote_types).
 */
#include <float.h>
#include "core/cddp.h"
#include "module.h"
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL cddp_ARRAY_API
#include <numpy/arrayobject.h>

const size_t cddp_dtype_size[CDDP_NDTYPES] = {4, 8, 8, 4, 1, 2, 2, 1, 1, 2};
const char *const cddp_dtype_name[CDDP_NDTYPES] = {"float32", "float64", "int64", "int32", "bool",
                                                   "float16", "bfloat16", "uint8", "int8",
                                                   "int16"};
const char *const cddp_dtype_torch_name[CDDP_NDTYPES] = {"Float", "Double", "Long", "Int", "Bool",
                                                         "Half", "BFloat16", "Byte", "Char",
                                                         "Short"};
const char *const cddp_dtype_cpp_name[CDDP_NDTYPES] = {
    "float", "double", "int64_t", "int", "bool", "c10::Half", "c10::BFloat16", "uint8_t", "int8_t",
    "int16_t"};
const char *const cddp_dtype_c_name[CDDP_NDTYPES] = {
    "float", "double", "long int", "int", "bool", "c10::Half", "c10::BFloat16", "unsigned char",
    "signed char", "short int"};
const char *const cddp_dtype_legacy_name[CDDP_NDTYPES] = {
    "FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor", "HalfTensor",
    "BFloat16Tensor", "ByteTensor", "CharTensor", "ShortTensor"};

typedef struct {
    PyObject_HEAD
    cddp_dtype dtype;
} DtypeObject;

cddp_dtype cddp_promote(cddp_dtype a, cddp_dtype b)
{
    int fa = cddp_is_floating(a), fb = cddp_is_floating(b);
    if (a == b || b == CDDP_BOOL)
        return a;
    if (a == CDDP_BOOL)
        return b;
    if (fa != fb)                         /* integer + floating: the floating one */
        return fa ? a : b;
    if (fa)                               /* float16 + bfloat16 meet in float32 */
        return cddp_is_reduced(a) && cddp_is_reduced(b) ? CDDP_FLOAT32
               : cddp_dtype_size[a] > cddp_dtype_size[b] ? a : b;
    if (a == CDDP_UINT8 || b == CDDP_UINT8) {    /* unsigned + signed: a signed type holding both */
        cddp_dtype o = a == CDDP_UINT8 ? b : a;
        return o == CDDP_INT8 ? CDDP_INT16 : o;
    }
    return cddp_dtype_size[a] > cddp_dtype_size[b] ? a : b;
}

double cddp_float_max(cddp_dtype dt)
{
    switch (dt) {
    case CDDP_FLOAT64: return DBL_MAX;
    case CDDP_FLOAT16: return 65504.0;
    case CDDP_BFLOAT16: return 3.3895313892515355e38;
    default: return (double)FLT_MAX;
    }
}

int cddp_scalar_overflows(cddp_dtype dt, int is_float, double d, int64_t l)
{
    double lo, hi;
    switch (dt) {
    case CDDP_FLOAT16: case CDDP_BFLOAT16: hi = cddp_float_max(dt); lo = -hi; break;
    case CDDP_UINT8: lo = 0; hi = 255; break;
    case CDDP_INT8: lo = -128; hi = 127; break;
    case CDDP_INT16: lo = -32768; hi = 32767; break;
    default: return 0;
    }
    if (is_float) {
        if (d != d || d - d != 0)         /* NaN, inf: fine in a floating dtype only */
            return !cddp_is_floating(dt);
        return d < lo || d > hi;
    }
    if (dt == CDDP_UINT8)                 /* two's complement wrap from below, as c10 allows */
        return l > 255 || l < -255;
    return (double)l < lo || (double)l > hi;
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
    cddp_dtype d = ((DtypeObject *)self)->dtype;
    return PyBool_FromLong(d != CDDP_BOOL && d != CDDP_UINT8);
}

static PyObject *dtype_false(PyObject *self, void *c)
{
    Py_RETURN_FALSE;                      /* no complex dtypes */
}

static PyObject *dtype_to_real(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);               /* every cddp dtype is real */
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
    {"is_complex", dtype_false, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef dtype_methods[] = {
    {"__reduce__", dtype_reduce, METH_NOARGS, NULL},
    {"to_real", dtype_to_real, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot dtype_slots[] = {
    {Py_tp_repr, dtype_repr},
    {Py_tp_getset, dtype_getset},
    {Py_tp_methods, dtype_methods},
    {Py_tp_doc, "A tensor element type (cddp.float32, float64, float16, bfloat16, int64, int32, "
                "int16, int8, uint8, bool)."},
    {0, NULL},
};

static PyType_Spec dtype_spec = {
    .name = "cddp.dtype",
    .basicsize = sizeof(DtypeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = dtype_slots,
};

/* Create the dtype type and its ten instances; add them (and torch's aliases) to module m. */
int cddp_dtype_init(PyObject *m, cddp_state_t *st)
{
    static const char *aliases[][2] = {{"float", "float32"}, {"double", "float64"},
                                       {"long", "int64"}, {"int", "int32"},
                                       {"half", "float16"}, {"short", "int16"}};
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
 * numpy.dtype() understands among the supported types (NumPy has no bfloat16). TypeError
 * otherwise. */
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
    case NPY_FLOAT16: *out = CDDP_FLOAT16; break;
    case NPY_UINT8: *out = CDDP_UINT8; break;
    case NPY_INT8: *out = CDDP_INT8; break;
    case NPY_INT16: *out = CDDP_INT16; break;
    default: Py_DECREF(descr); goto fail;
    }
    Py_DECREF(descr);
    return 0;
fail:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "dtype must be one of cddp.float32, float64, float16, bfloat16, int64, int32, "
                 "int16, int8, uint8, bool; got %R", o);
    return -1;
}

/* ---- torch.promote_types / torch.can_cast --------------------------------------------- */

/* o must be a cddp.dtype (torch accepts only torch.dtype here): TypeError as torch's parser. */
static int dtype_arg(PyObject *o, const char *fname, const char *name, int pos, cddp_dtype *d)
{
    if (!Py_IS_TYPE(o, cddp_state()->dtype_type)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' (position %d) must be cddp.dtype, "
                     "not %s", fname, name, pos, Py_TYPE(o)->tp_name);
        return -1;
    }
    *d = ((DtypeObject *)o)->dtype;
    return 0;
}

static PyObject *py_promote_types(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"type1", "type2", NULL};
    PyObject *a, *b;
    cddp_dtype x, y;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:promote_types", kwlist, &a, &b) ||
        dtype_arg(a, "promote_types", "type1", 1, &x) < 0 ||
        dtype_arg(b, "promote_types", "type2", 2, &y) < 0)
        return NULL;
    return Py_NewRef(cddp_dtype_to_py(cddp_promote(x, y)));
}

/* c10's canCast: no floating -> integral, nothing but bool -> bool */
static PyObject *py_can_cast(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"from_", "to", NULL};
    PyObject *a, *b;
    cddp_dtype x, y;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:can_cast", kwlist, &a, &b) ||
        dtype_arg(a, "can_cast", "from_", 1, &x) < 0 || dtype_arg(b, "can_cast", "to", 2, &y) < 0)
        return NULL;
    return PyBool_FromLong(!(cddp_is_floating(x) && !cddp_is_floating(y)) &&
                           !(x != CDDP_BOOL && y == CDDP_BOOL));
}

int cddp_refuse_narrow(const TensorObject *t, const char *op)
{
    if (!t || !cddp_is_narrow(t->dtype))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s tensors are not supported (float32 or float64 only)",
                 op, cddp_dtype_name[t->dtype]);
    return -1;
}

PyMethodDef cddp_dtype_module_methods[] = {
    {"promote_types", (PyCFunction)(void (*)(void))py_promote_types,
     METH_VARARGS | METH_KEYWORDS, "promote_types(type1, type2) -> dtype (torch's table)"},
    {"can_cast", (PyCFunction)(void (*)(void))py_can_cast, METH_VARARGS | METH_KEYWORDS,
     "can_cast(from_, to) -> bool (torch's casting rule)"},
    {NULL},
};
