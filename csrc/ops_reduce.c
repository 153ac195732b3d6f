/* ops_reduce.c — STUB (to be implemented): sum/mean/max/min/argmax/argmin/softmax/norm. */
#include "cddp.h"

PyMethodDef cddp_reduce_tensor_methods[] = {{NULL}};
PyMethodDef cddp_reduce_module_methods[] = {{NULL}};
