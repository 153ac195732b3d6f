/* ops_index.c — STUB (to be implemented): __getitem__ / __setitem__ with autograd. */
#include "cddp.h"

PyObject *cddp_mp_subscript(PyObject *self, PyObject *key)
{
    PyErr_SetString(PyExc_NotImplementedError, "cddp: indexing is not implemented yet");
    return NULL;
}

int cddp_mp_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    PyErr_SetString(PyExc_NotImplementedError, "cddp: index assignment is not implemented yet");
    return -1;
}

PyMethodDef cddp_index_tensor_methods[] = {{NULL}};
PyMethodDef cddp_index_module_methods[] = {{NULL}};
