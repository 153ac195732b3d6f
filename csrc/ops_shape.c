/* ops_shape.c — STUB (to be implemented): views, conversions, cat/stack, iteration. */
#include "cddp.h"

PyObject *cddp_tensor_iter(PyObject *self)
{
    PyErr_SetString(PyExc_NotImplementedError, "cddp: iterating a tensor is not implemented yet");
    return NULL;
}

PyMethodDef cddp_shape_tensor_methods[] = {{NULL}};
PyMethodDef cddp_shape_module_methods[] = {{NULL}};
