/* ops_elementwise.c — STUB (to be implemented): arithmetic, unary math, comparisons. */
#include "cddp.h"

static PyObject *nyi(const char *what)
{
    PyErr_Format(PyExc_NotImplementedError, "cddp: %s is not implemented yet", what);
    return NULL;
}
PyObject *cddp_nb_add(PyObject *a, PyObject *b) { return nyi("add"); }
PyObject *cddp_nb_sub(PyObject *a, PyObject *b) { return nyi("sub"); }
PyObject *cddp_nb_mul(PyObject *a, PyObject *b) { return nyi("mul"); }
PyObject *cddp_nb_truediv(PyObject *a, PyObject *b) { return nyi("div"); }
PyObject *cddp_nb_pow(PyObject *a, PyObject *b, PyObject *m) { return nyi("pow"); }
PyObject *cddp_nb_neg(PyObject *a) { return nyi("neg"); }
PyObject *cddp_nb_abs(PyObject *a) { return nyi("abs"); }
PyObject *cddp_nb_iadd(PyObject *a, PyObject *b) { return nyi("add_"); }
PyObject *cddp_nb_isub(PyObject *a, PyObject *b) { return nyi("sub_"); }
PyObject *cddp_nb_imul(PyObject *a, PyObject *b) { return nyi("mul_"); }
PyObject *cddp_nb_itruediv(PyObject *a, PyObject *b) { return nyi("div_"); }
PyObject *cddp_nb_and(PyObject *a, PyObject *b) { return nyi("and"); }
PyObject *cddp_nb_or(PyObject *a, PyObject *b) { return nyi("or"); }
PyObject *cddp_nb_xor(PyObject *a, PyObject *b) { return nyi("xor"); }
PyObject *cddp_nb_invert(PyObject *a) { return nyi("invert"); }
PyObject *cddp_richcompare(PyObject *a, PyObject *b, int op) { Py_RETURN_NOTIMPLEMENTED; }

PyMethodDef cddp_elementwise_tensor_methods[] = {{NULL}};
PyMethodDef cddp_elementwise_module_methods[] = {{NULL}};
