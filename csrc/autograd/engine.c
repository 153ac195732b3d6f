/* autograd/engine.c — the backward engine (torch/csrc/autograd/engine.cpp; what
 * Tensor.backward() and torch.autograd.backward() run).
 *
 * micrograd's recipe, with torch's ordering: count, for every node reachable from the roots,
 * how many edges lead into it (its consumers); then repeatedly run the ready node with the
 * highest sequence number (the most recently created, so the walk is a reverse topological
 * order that reaches each leaf's AccumulateGrad as soon as all its gradient has arrived —
 * what DDP's overlap needs). Each node's incoming gradients are summed in its inbuf before it
 * runs; tensor hooks on non-leaf outputs and retain_grad() run on that sum first. Saved
 * tensors are freed after a node runs unless retain_graph. Runs nest: a backward function may
 * call backward (a reentrant checkpoint does); see "nested runs".
 */
#include "autograd/autograd.h"
#include <string.h>

/* ---- work lists ----------------------------------------------------------------------- */

int cddp_node_vec_push(cddp_node_vec *q, NodeObject *n)
{
    if (q->n == q->cap) {
        Py_ssize_t cap = q->cap ? q->cap * 2 : 64;
        NodeObject **v = PyMem_Realloc(q->v, sizeof(NodeObject *) * (size_t)cap);
        if (!v) {
            PyErr_NoMemory();
            return -1;
        }
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = n;
    return 0;
}

/* The ready set: a max-heap on seq, so the newest ready node runs first. */
static int heap_push(cddp_node_vec *h, NodeObject *n)
{
    if (cddp_node_vec_push(h, n) < 0)
        return -1;
    Py_ssize_t i = h->n - 1;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (h->v[p]->seq >= h->v[i]->seq)
            break;
        NodeObject *t = h->v[p]; h->v[p] = h->v[i]; h->v[i] = t;
        i = p;
    }
    return 0;
}

static NodeObject *heap_pop(cddp_node_vec *h)
{
    NodeObject *top = h->v[0];
    h->v[0] = h->v[--h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->v[l]->seq > h->v[m]->seq) m = l;
        if (r < h->n && h->v[r]->seq > h->v[m]->seq) m = r;
        if (m == i)
            break;
        NodeObject *t = h->v[m]; h->v[m] = h->v[i]; h->v[i] = t;
        i = m;
    }
    return top;
}

/* ---- running nodes -------------------------------------------------------------------- */

/* Add g into node->inbuf[k]: the first arrival is kept, later ones summed out of place (the
 * first may be a tensor some other code still holds). */
static int inbuf_add(NodeObject *node, int k, TensorObject *g)
{
    int nb;
    TensorObject **ib = cddp_node_inbufs(node, &nb), *cur, *sum;
    if (k < 0 || k >= nb) {
        PyErr_SetString(PyExc_SystemError, "autograd: output index out of range");
        return -1;
    }
    cur = ib[k];
    if (!cur) {
        ib[k] = (TensorObject *)Py_NewRef(g);
        return 0;
    }
    if (cur->ndim == g->ndim && memcmp(cur->shape, g->shape, sizeof(int64_t) * g->ndim) == 0 &&
        cur->dtype == g->dtype) {
        sum = cddp_tensor_new(cur->dtype, cur->ndim, cur->shape, 0);
        if (!sum || cddp_copy_into(sum, cur) < 0 || cddp_accumulate_into(sum, g) < 0) {
            Py_XDECREF(sum);
            return -1;
        }
    } else {
        PyErr_Format(PyExc_RuntimeError,
                     "autograd: gradients for output %d of %s disagree in shape or dtype",
                     k, node->name);
        return -1;
    }
    Py_SETREF(ib[k], sum);
    return 0;
}

/* Tensor hooks registered on non-leaf outputs, and retain_grad(). */
static int run_pre_hooks(NodeObject *node, TensorObject **gout)
{
    for (int k = 0; k < node->n_out; k++) {
        if (!gout[k])
            continue;
        if (node->pre_hooks) {
            PyObject *key = PyLong_FromLong(k), *hooks;
            if (!key)
                return -1;
            hooks = PyDict_GetItemWithError(node->pre_hooks, key);
            Py_DECREF(key);
            if (!hooks && PyErr_Occurred())
                return -1;
            if (hooks) {
                TensorObject *g = cddp_run_tensor_hooks(hooks, gout[k]);
                if (!g)
                    return -1;
                Py_SETREF(gout[k], g);
            }
        }
        if (node->retain) {
            PyObject *key = PyLong_FromLong(k), *ref, *obj;
            if (!key)
                return -1;
            ref = PyDict_GetItemWithError(node->retain, key);
            Py_DECREF(key);
            if (!ref && PyErr_Occurred())
                return -1;
            obj = ref ? PyWeakref_GetObject(ref) : NULL;
            /* an entry whose tensor got newer history since (an in-place op) is stale: the
             * newer node holds its entry (cddp_retain_on_history) */
            if (obj && obj != Py_None && ((TensorObject *)obj)->grad_fn == node &&
                ((TensorObject *)obj)->output_nr == k) {
                TensorObject *t = (TensorObject *)obj;
                if (t->grad && cddp_tensor_check(t->grad)) {
                    TensorObject *s = cddp_tensor_new(t->dtype, t->ndim, t->shape, 0);
                    if (!s || cddp_copy_into(s, (TensorObject *)t->grad) < 0 ||
                        cddp_accumulate_into(s, gout[k]) < 0) {
                        Py_XDECREF(s);
                        return -1;
                    }
                    Py_XSETREF(t->grad, (PyObject *)s);
                } else {
                    TensorObject *c = cddp_tensor_new(t->dtype, t->ndim, t->shape, 0);
                    if (!c || cddp_copy_into(c, gout[k]) < 0) {
                        Py_XDECREF(c);
                        return -1;
                    }
                    Py_XSETREF(t->grad, (PyObject *)c);
                }
            }
        }
    }
    return 0;
}

/* A tuple of the n gradients g (None where NULL): what a node's own hooks are handed. */
static PyObject *grads_tuple(TensorObject **g, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int k = 0; t && k < n; k++)
        PyTuple_SET_ITEM(t, k, Py_NewRef(g && g[k] ? (PyObject *)g[k] : Py_None));
    return t;
}

/* g[0..n) := the hook's result r, a tuple or list of n Tensors / None. 0, or -1. */
static int grads_replace(PyObject *r, TensorObject **g, int n, const char *what)
{
    PyObject *seq = PySequence_Fast(r, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Clear();
        PyErr_Format(PyExc_RuntimeError, "hook '%s' returned %s, expected a tuple of %d %s",
                     what, Py_TYPE(r)->tp_name, n, "gradients (Tensors or None)");
        Py_XDECREF(seq);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, k);
        if (x != Py_None && !cddp_tensor_check(x)) {
            PyErr_Format(PyExc_TypeError, "hook '%s' returned a %s among its gradients",
                         what, Py_TYPE(x)->tp_name);
            Py_DECREF(seq);
            return -1;
        }
    }
    for (int k = 0; k < n; k++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, k);
        Py_XSETREF(g[k], x == Py_None ? NULL : (TensorObject *)Py_NewRef(x));
    }
    Py_DECREF(seq);
    return 0;
}

/* The node's own hooks, in registration order: register_prehook's fn(grad_outputs) before
 * its backward (which 0), register_hook's fn(grad_inputs, grad_outputs) after it (1); a
 * non-None result replaces grad_outputs / grad_inputs. 0, or -1 with an exception. */
static int run_fn_hooks(NodeObject *node, int which, TensorObject **gout, int nout,
                        TensorObject **gin)
{
    PyObject *fns;
    int rc = 0;
    if (!PyDict_GET_SIZE(node->fn_hooks[which]))
        return 0;
    if (!(fns = PyDict_Values(node->fn_hooks[which])))     /* a snapshot: hooks may remove */
        return -1;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(fns); i++) {
        PyObject *fn = PyList_GET_ITEM(fns, i), *go = grads_tuple(gout, nout), *gi = NULL, *r;
        if (which)
            gi = grads_tuple(gin, node->n_next);
        r = !go || (which && !gi) ? NULL
            : which ? PyObject_CallFunctionObjArgs(fn, gi, go, NULL)
                    : PyObject_CallOneArg(fn, go);
        if (!r)
            rc = -1;
        else if (r != Py_None)
            rc = which ? (gin ? grads_replace(r, gin, node->n_next, "register_hook") : 0)
                       : grads_replace(r, gout, nout, "register_prehook");
        Py_XDECREF(r);
        Py_XDECREF(go);
        Py_XDECREF(gi);
    }
    Py_DECREF(fns);
    return rc;
}

/* Drop every gradient buffered in n. */
static void clear_inbufs(NodeObject *n)
{
    int nb;
    TensorObject **ib = cddp_node_inbufs(n, &nb);
    for (int k = 0; k < nb; k++)
        Py_CLEAR(ib[k]);
}

static void release_saved(NodeObject *n)
{
    for (int i = 0; i < n->n_saved; i++)
        Py_CLEAR(n->saved[i]);
    if (n->n_saved)
        n->released = 1;
}

/* The node a root tensor's gradient enters (new ref), or NULL + error. */
static NodeObject *root_node(TensorObject *t, int *input_nr)
{
    if (cddp_view_sync(t) < 0)
        return NULL;
    if (t->grad_fn) {
        *input_nr = t->output_nr;
        return (NodeObject *)Py_NewRef(t->grad_fn);
    }
    if (t->requires_grad) {
        *input_nr = 0;
        return cddp_grad_accumulator(t);
    }
    PyErr_SetString(PyExc_RuntimeError,
                    "element 0 of tensors does not require grad and does not have a grad_fn");
    return NULL;
}

/* ---- nested runs ---------------------------------------------------------------------- */

/* A backward function may itself call backward (a reentrant checkpoint recomputes its segment
 * and differentiates it inside its own backward). The inner run reaches nodes the outer runs
 * are still using — the AccumulateGrad nodes of shared leaves — whose scratch (epoch, deps,
 * buffered gradients) it would overwrite: it lends that scratch out and gives it back when it
 * ends. outer_epoch is the epoch of this thread's outermost active run (0: none). */
static _Thread_local int64_t outer_epoch;

/* The final callbacks queued during the innermost active run (NULL: none active): torch's
 * Variable._execution_engine.queue_callback, run in order once that run's graph is done. */
static _Thread_local PyObject *run_callbacks;

int cddp_queue_final_callback(PyObject *cb)
{
    if (!run_callbacks) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Final callbacks can only be installed during backward pass.");
        return -1;
    }
    return PyList_Append(run_callbacks, cb);
}

/* Run the callbacks of a finished run (those they queue too, as torch's loop does). */
static int run_final_callbacks(PyObject *cbs)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(cbs); i++) {
        PyObject *r = PyObject_CallNoArgs(PyList_GET_ITEM(cbs, i));
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

typedef struct {
    NodeObject *node;                 /* owned */
    int64_t epoch, deps;
    int nb;
    TensorObject **bufs;              /* nb buffered gradients (owned), PyMem */
} lent_scratch;

typedef struct {                      /* one run's bookkeeping */
    int64_t epoch;
    cddp_node_vec seen, ready;
    lent_scratch *lent;
    Py_ssize_t n_lent, cap_lent;
} run_t;

/* Move c's scratch aside (c belongs to an outer run). 0, or -1 with MemoryError. */
static int lend(run_t *run, NodeObject *c)
{
    lent_scratch *l;
    TensorObject **ib;
    if (run->n_lent == run->cap_lent) {
        Py_ssize_t cap = run->cap_lent ? 2 * run->cap_lent : 8;
        lent_scratch *v = PyMem_Realloc(run->lent, sizeof *v * (size_t)cap);
        if (!v)
            goto nomem;
        run->lent = v;
        run->cap_lent = cap;
    }
    l = &run->lent[run->n_lent];
    ib = cddp_node_inbufs(c, &l->nb);
    l->bufs = PyMem_Calloc((size_t)l->nb, sizeof *l->bufs);
    if (!l->bufs)
        goto nomem;
    memcpy(l->bufs, ib, sizeof *ib * (size_t)l->nb);
    memset(ib, 0, sizeof *ib * (size_t)l->nb);
    l->node = (NodeObject *)Py_NewRef(c);
    l->epoch = c->epoch;
    l->deps = c->deps;
    run->n_lent++;
    return 0;
nomem:
    PyErr_NoMemory();
    return -1;
}

/* Give every lent scratch back (this run's buffers of those nodes are dropped). */
static void give_back(run_t *run)
{
    for (Py_ssize_t i = run->n_lent - 1; i >= 0; i--) {
        lent_scratch *l = &run->lent[i];
        int nb;
        TensorObject **ib = cddp_node_inbufs(l->node, &nb);
        clear_inbufs(l->node);
        memcpy(ib, l->bufs, sizeof *ib * (size_t)(nb < l->nb ? nb : l->nb));
        l->node->epoch = l->epoch;
        l->node->deps = l->deps;
        PyMem_Free(l->bufs);
        Py_DECREF(l->node);
    }
    PyMem_Free(run->lent);
}

/* First visit of c in this run: claim its scratch. 0, or -1 with an exception. */
static int visit(run_t *run, NodeObject *c)
{
    if (c->epoch == run->epoch)
        return 0;
    if (outer_epoch && c->epoch >= outer_epoch && lend(run, c) < 0)
        return -1;
    c->epoch = run->epoch;
    c->deps = 0;
    clear_inbufs(c);
    return cddp_node_vec_push(&run->seen, c);
}

/* ---- the walk ------------------------------------------------------------------------- */

/* Discover the graph from the root nodes rn and count each node's incoming edges. */
static int discover(run_t *run, int n, NodeObject **rn)
{
    for (int r = 0; r < n; r++)
        if (visit(run, rn[r]) < 0)
            return -1;
    for (Py_ssize_t i = 0; i < run->seen.n; i++) {
        NodeObject *node = run->seen.v[i];
        for (int e = 0; e < node->n_next; e++) {
            NodeObject *c = node->next[e].node;
            if (!c)
                continue;
            if (visit(run, c) < 0)
                return -1;
            c->deps++;
        }
    }
    return 0;
}

/* torch.autograd.set_detect_anomaly: every node's gradients are checked for NaN as they are
 * made (read through cddp_get_double: a debugging mode, slow as torch's). */
int cddp_detect_anomaly = 0;

/* Contract: 0 when no gradient the node produced holds NaN, else -1 with torch's
 * RuntimeError naming the node and the output. */
static int check_anomaly(const NodeObject *node, TensorObject **gin)
{
    for (int e = 0; e < node->n_next; e++) {
        TensorObject *g = gin[e];
        int64_t n;
        if (!g || !cddp_is_floating(g->dtype))
            continue;
        n = cddp_numel(g);
        for (int64_t i = 0; i < n; i++) {
            double v = cddp_get_double(g, i);
            if (v != v) {
                PyErr_Format(PyExc_RuntimeError, "Function '%s' returned nan values in its %dth "
                             "output.", node->name, e);
                return -1;
            }
        }
    }
    return 0;
}

/* Run one ready node and hand its input gradients on. 0, or -1 with an exception. */
static int run_node(run_t *run, NodeObject *node, int retain_graph)
{
    TensorObject *gsmall[CDDP_NODE_MAX_OUT] = {0}, **gout = gsmall, **gin = NULL, **ib;
    int any = 0, err = 0, nb;
    ib = cddp_node_inbufs(node, &nb);
    if (nb > CDDP_NODE_MAX_OUT && !(gout = PyMem_Calloc((size_t)nb, sizeof *gout))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int k = 0; k < nb; k++) {
        gout[k] = ib[k];              /* steal */
        ib[k] = NULL;
        any |= gout[k] != NULL;
    }
    if (any && node->n_next) {
        gin = PyMem_Calloc((size_t)node->n_next, sizeof(TensorObject *));
        err = !gin;
        if (err)
            PyErr_NoMemory();
    }
    if (any && !err)
        err = run_pre_hooks(node, gout) < 0 ||       /* node hooks: rare, tested inline */
              (node->fn_hooks[0] && run_fn_hooks(node, 0, gout, node->n_out, NULL) < 0) ||
              node->backward(node, gout, gin) < 0 ||
              (node->fn_hooks[1] && run_fn_hooks(node, 1, gout, node->n_out, gin) < 0) ||
              (cddp_detect_anomaly && gin && check_anomaly(node, gin) < 0);
    for (int k = 0; k < nb; k++)
        Py_XDECREF(gout[k]);
    if (gout != gsmall)
        PyMem_Free(gout);
    if (!retain_graph && !err)
        release_saved(node);
    for (int e = 0; e < node->n_next; e++) {
        NodeObject *c = node->next[e].node;
        if (gin && gin[e]) {
            if (!err && c && inbuf_add(c, node->next[e].input_nr, gin[e]) < 0)
                err = 1;
            Py_DECREF(gin[e]);
        }
        if (c && !err && --c->deps == 0 && heap_push(&run->ready, c) < 0)
            err = 1;
    }
    PyMem_Free(gin);
    return err ? -1 : 0;
}

int cddp_run_backward(int n, TensorObject **roots, TensorObject **grads, int retain_graph)
{
    run_t run = {.epoch = ++cddp_state()->engine_epoch};
    NodeObject **rn = PyMem_Calloc((size_t)(n ? n : 1), sizeof(NodeObject *));
    int saved_mode = cddp_grad_enabled, saved_scope = cddp_arena_scope, rc = -1;
    int outermost = outer_epoch == 0;
    PyObject *outer_callbacks = run_callbacks, *callbacks = PyList_New(0);
    if (!rn || !callbacks) {
        PyMem_Free(rn);
        Py_XDECREF(callbacks);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    run_callbacks = callbacks;
    if (outermost)
        outer_epoch = run.epoch;
    /* 1. discover the graph and count incoming edges */
    for (int r = 0; r < n; r++) {
        int nr;
        if (!(rn[r] = root_node(roots[r], &nr)))
            goto done;
    }
    if (discover(&run, n, rn) < 0)
        goto done;
    /* 2. seed the roots' gradients */
    for (int r = 0; r < n; r++) {
        int nr = roots[r]->grad_fn ? roots[r]->output_nr : 0;
        if (inbuf_add(rn[r], nr, grads[r]) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < run.seen.n; i++)
        if (run.seen.v[i]->deps == 0 && heap_push(&run.ready, run.seen.v[i]) < 0)
            goto done;
    /* 3. walk: run each node once all its consumers have delivered; a backward DDP will
     * reduce allocates in the shared arena (common/arena.h) */
    cddp_grad_enabled = 0;
    cddp_arena_scope = cddp_arena_armed;
    while (run.ready.n)
        if (run_node(&run, heap_pop(&run.ready), retain_graph) < 0)
            goto done;
    cddp_arena_scope = saved_scope;
    cddp_grad_enabled = saved_mode;
    /* 4. the final callbacks, with the caller's grad mode (still inside this run: a
     * callback may queue another) */
    if (run_final_callbacks(callbacks) < 0)
        goto done;
    rc = 0;
done:
    run_callbacks = outer_callbacks;
    Py_DECREF(callbacks);
    cddp_arena_scope = saved_scope;
    cddp_grad_enabled = saved_mode;
    for (Py_ssize_t i = 0; i < run.seen.n; i++)
        clear_inbufs(run.seen.v[i]);
    give_back(&run);
    if (outermost)
        outer_epoch = 0;
    for (int r = 0; r < n; r++)
        Py_XDECREF(rn[r]);
    PyMem_Free(rn);
    PyMem_Free(run.seen.v);
    PyMem_Free(run.ready.v);
    return rc;
}
