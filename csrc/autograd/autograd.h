/* autograd/autograd.h — private to the autograd files: what node.c, engine.c and
 * py_autograd.c share beyond the public autograd API of core/cddp.h.
 *
 * Dependency order (a file calls only the files to its left, and core/):
 *   node.c (graph, AccumulateGrad)  <-  engine.c (backward)  <-  py_autograd.c (Python side)
 */
#ifndef CDDP_AUTOGRAD_H
#define CDDP_AUTOGRAD_H
#include "core/cddp.h"

/* ---- autograd/node.c ------------------------------------------------------------------ */

/* The AccumulateGrad node of `leaf` (a tensor with requires_grad and no grad_fn), created on
 * first use and cached in leaf->grad_acc. The node owns the leaf; the leaf only points back
 * (cleared when the node dies), so no cycle keeps either alive. New reference, or NULL with
 * an exception. */
NodeObject *cddp_grad_accumulator(TensorObject *leaf);

/* Call each hook of the list `hooks` (NULL: none) as hook(g); a non-None result replaces g
 * for the hooks after it, and must be a Tensor (TypeError otherwise). Returns a new reference
 * to the final gradient (g itself, increfed, when no hook replaced it), or NULL. */
TensorObject *cddp_run_tensor_hooks(PyObject *hooks, TensorObject *g);

/* ---- autograd/engine.c ---------------------------------------------------------------- */

/* A growable array of borrowed node pointers (the engine's work lists, graph walks).
 * Zero-initialize; release with PyMem_Free(vec.v). */
typedef struct {
    NodeObject **v;
    Py_ssize_t n, cap;
} cddp_node_vec;

/* Append n (borrowed). 0, or -1 with MemoryError (the vector is left as it was). */
int cddp_node_vec_push(cddp_node_vec *q, NodeObject *n);

#endif
