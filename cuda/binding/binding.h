/* binding.h — shared parts of cddp._cuda's Python binding (cuda/binding/): turning a recorded
 * check.h error into the matching Python exception, and each file's method table.
 */
#ifndef CDDP_CUDA_BINDING_H
#define CDDP_CUDA_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Raise the exception for code `rc` (< 0) with the message recorded by check.h, clear the
 * record, return NULL: CDDP_CUDA_EOOM -> cddp._cuda.OutOfMemoryError (a RuntimeError, as
 * torch.OutOfMemoryError), EARG -> ValueError, ENOMEM -> MemoryError, others RuntimeError. */
PyObject *cddp_cuda_raise(int rc);

extern PyMethodDef cddp_cuda_testing_methods[];   /* binding/testing.c */
extern PyMethodDef cddp_cuda_kernel_methods[];    /* binding/kernels.c */

#endif
