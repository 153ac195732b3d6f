/* autograd/autograd.h — private to the autograd files: what node.c, engine.c and
 * py_autograd.c share beyond the public autograd API of core/cddp.h.
 *
 * Dependency order (a file calls only the files to its left, and core/):
 *   saved.c (saved-tensor hooks)  <-  node.c (graph, AccumulateGrad)  <-  engine.c (backward)
 *   <-  py_autograd.c (Python side), function.c (autograd.Function)
 */
#ifndef CDDP_AUTOGRAD_H
#define CDDP_AUTOGRAD_H
#include "core/cddp.h"

/* ---- autograd/saved.c ----------------------------------------------------------------- */

/* What a node keeps for t: t itself (new reference), or, while saved-tensor hooks are active,
 * a placeholder holding pack_hook(t) (the hooks are off during the call). NULL on error. */
TensorObject *cddp_saved_pack(TensorObject *t);
/* Whether t is such a placeholder. */
int cddp_saved_is_packed(const TensorObject *t);
/* unpack_hook(packed) for placeholder ph: a new reference to a tensor of ph's shape and dtype
 * (contiguous when ph was), or NULL with TypeError/RuntimeError. */
TensorObject *cddp_saved_unpack(TensorObject *ph);
/* Exchange this thread's (pack, unpack) hooks with the pair the arguments point at
 * (references move both ways; NULL, NULL: no hooks). */
void cddp_saved_hooks_swap(PyObject **pack, PyObject **unpack);

/* ---- autograd/node.c ------------------------------------------------------------------ */

/* cddp_node_new for a subtype of Node (tp: the Node type or a subtype whose instances start
 * with a NodeObject, e.g. an autograd.Function's <Name>Backward class). New reference. */
NodeObject *cddp_node_new_of_type(PyTypeObject *tp, const char *name, cddp_backward_fn fn,
                                  int n_next);

/* Give a fresh node n_out outputs; above CDDP_NODE_MAX_OUT their gradient buffers live in
 * n->inbuf_ext. Once per node, before any cddp_set_history. 0, or -1 with an exception. */
int cddp_node_set_n_out(NodeObject *n, int n_out);

/* The engine's gradient buffers of n: *count slots (inbuf, or inbuf_ext when n has more
 * outputs than CDDP_NODE_MAX_OUT). */
static inline TensorObject **cddp_node_inbufs(NodeObject *n, int *count)
{
    *count = n->inbuf_ext ? n->n_out : CDDP_NODE_MAX_OUT;
    return n->inbuf_ext ? n->inbuf_ext : n->inbuf;
}

/* Checks a saved tensor t (NULL: none) of node n before use: torch's RuntimeError when n's
 * saved tensors were released by a backward without retain_graph, or when t's version moved
 * from `version` (modified in place since it was saved). 0 ok, -1 with the exception set. */
int cddp_saved_check(NodeObject *n, TensorObject *t, int64_t version);

/* While set (this thread's autograd.grad run, py_autograd.c), AccumulateGrad runs a leaf's
 * hooks and stops there: no .grad written, no post-accumulate hooks (torch's autograd.grad
 * does not touch .grad, and DDP's hooks must not fire). */
extern _Thread_local int cddp_accumulate_off;
/* Queue cb to run when the active backward run finishes (engine.c); -1 with torch's
 * RuntimeError outside a backward. */
int cddp_queue_final_callback(PyObject *cb);

/* The AccumulateGrad node of `leaf` (a tensor with requires_grad and no grad_fn), created on
 * first use and cached in leaf->grad_acc. The node owns the leaf; the leaf only points back
 * (cleared when the node dies), so no cycle keeps either alive. New reference, or NULL with
 * an exception. */
NodeObject *cddp_grad_accumulator(TensorObject *leaf);

/* Call each hook of the list `hooks` (NULL: none) as hook(g); a non-None result replaces g
 * for the hooks after it, and must be a Tensor (TypeError otherwise). Returns a new reference
 * to the final gradient (g itself, increfed, when no hook replaced it), or NULL. */
TensorObject *cddp_run_tensor_hooks(PyObject *hooks, TensorObject *g);

/* retain_grad() of t, whose grad_fn is set: t's gradient at this point of its history is
 * kept in t.grad (t->grad_fn's `retain` entry, a weak reference). A tensor that retains its
 * gradient and gets new history (an in-place op, a view's rebuilt history) registers again:
 * torch moves the retains_grad hook to the newest version, and the engine (run_pre_hooks)
 * skips entries whose tensor has since moved on, so only the last version's gradient lands.
 * 0, or -1 with an exception. */
int cddp_retain_on_history(TensorObject *t);

/* ---- autograd/view.c ------------------------------------------------------------------ */

/* _C._view_positions(node): for a CopySlices / AsStridedBackward0 node, an int64 tensor of
 * the view's shape holding each view element's flat index in the base (C order of the base's
 * shape, node->meta[0]); None for any other node. For the higher-order engine. */
PyObject *cddp_view_positions(PyObject *m, PyObject *node);

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
