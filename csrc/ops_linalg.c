/* ops_linalg.c — STUB (to be implemented): matmul/mm/bmm through BLAS. */
#include "cddp.h"

PyObject *cddp_nb_matmul(PyObject *a, PyObject *b)
{
    PyErr_SetString(PyExc_NotImplementedError, "cddp: matmul is not implemented yet");
    return NULL;
}

PyMethodDef cddp_linalg_tensor_methods[] = {{NULL}};
PyMethodDef cddp_linalg_module_methods[] = {{NULL}};
