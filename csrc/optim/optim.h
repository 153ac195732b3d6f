/* optim/optim.h — private to the optimizer files: checks shared by the fused update loops.
 *
 * Order: optim.c (SGD, Adam/AdamW, and these helpers) <- fused.c (the other optimizers).
 * Every loop updates a parameter in place, so parameters and state tensors must be
 * contiguous tensors of the parameter's floating dtype and size (the Python optimizers make
 * them so); gradients may be any layout or dtype (copied when they differ).
 */
#ifndef CDDP_OPTIM_H
#define CDDP_OPTIM_H
#include "core/cddp.h"

/* The kernels walk a parameter, its gradient and its state as flat arrays, element k of each
 * the same element of the parameter: so all three are dense with the same memory order (a
 * contiguous parameter, or a permuted one as torch allows: its zeros_like state is laid out
 * as it is). */

/* Parameter i of the list: a dense floating tensor (borrowed), or NULL + RuntimeError. */
TensorObject *cddp_optim_param(PyObject *params, Py_ssize_t i);
/* State slot i of `list` (`what` names it in the error): a tensor of like's dtype, size and
 * memory order (borrowed), or NULL + RuntimeError. */
TensorObject *cddp_optim_state(PyObject *list, Py_ssize_t i, TensorObject *like, const char *what);
/* The gradient object go of parameter i of p in p's dtype and memory order (new reference: go
 * itself, or a copy), or NULL + RuntimeError when its size differs. */
TensorObject *cddp_optim_grad(TensorObject *p, PyObject *go, Py_ssize_t i);

#endif
