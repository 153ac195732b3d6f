/* autograd/autograd.c — graph nodes and the backward engine (torch.autograd in C).
 *
 *   class Node:                  # grad_fn objects: AddBackward0, AccumulateGrad, ...
 *       name() -> str
 *       next_functions -> ((Node|None, input_nr), ...)
 *       variable                 # AccumulateGrad only: the leaf it feeds
 *
 * Engine (micrograd's recipe, with torch's ordering): count, for every node reachable from the
 * roots, how many edges lead into it; then repeatedly run the ready node with the highest
 * sequence number (the most recently created, so the walk is a reverse topological order that
 * reaches each leaf's AccumulateGrad as soon as all its gradient has arrived — what DDP's
 * overlap needs). Each node's incoming gradients are summed in its inbuf before it runs.
 */
#include "core/cddp.h"
#include "module.h"
#include <string.h>
#include "structmember.h"

_Thread_local int cddp_grad_enabled = 1;

/* ---- Node type ------------------------------------------------------------------------ */

static int node_traverse(NodeObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (int i = 0; i < self->n_next; i++)
        Py_VISIT(self->next[i].node);
    for (int i = 0; i < self->n_saved; i++)
        Py_VISIT(self->saved[i]);
    for (int i = 0; i < CDDP_NODE_MAX_OUT; i++)
        Py_VISIT(self->inbuf[i]);
    Py_VISIT(self->extra);
    Py_VISIT(self->variable);
    Py_VISIT(self->pre_hooks);
    Py_VISIT(self->retain);
    Py_VISIT(self->dict);
    return 0;
}

static int node_clear(NodeObject *self)
{
    for (int i = 0; i < self->n_next; i++)
        Py_CLEAR(self->next[i].node);
    for (int i = 0; i < self->n_saved; i++)
        Py_CLEAR(self->saved[i]);
    for (int i = 0; i < CDDP_NODE_MAX_OUT; i++)
        Py_CLEAR(self->inbuf[i]);
    Py_CLEAR(self->extra);
    if (self->variable && self->variable->grad_acc == self)
        self->variable->grad_acc = NULL;
    Py_CLEAR(self->variable);
    Py_CLEAR(self->pre_hooks);
    Py_CLEAR(self->retain);
    Py_CLEAR(self->dict);
    return 0;
}

static void node_dealloc(NodeObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    /* long chains free recursively; the trashcan bounds the C stack depth */
    Py_TRASHCAN_BEGIN(self, node_dealloc)
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    node_clear(self);
    PyMem_Free(self->next);
    PyMem_Free(self->meta);
    PyMem_Free(self->ibuf);
    tp->tp_free(self);
    Py_DECREF(tp);
    Py_TRASHCAN_END
}

static PyObject *node_name(NodeObject *self, PyObject *unused)
{
    return PyUnicode_FromString(self->name);
}

static PyObject *node_repr(NodeObject *self)
{
    return PyUnicode_FromFormat("<%s object at %p>", self->name, self);
}

static PyObject *node_next_functions(NodeObject *self, void *c)
{
    PyObject *tup = PyTuple_New(self->n_next);
    if (!tup)
        return NULL;
    for (int i = 0; i < self->n_next; i++) {
        PyObject *n = self->next[i].node ? (PyObject *)self->next[i].node : Py_None;
        PyObject *pair = Py_BuildValue("(Oi)", n, self->next[i].input_nr);
        if (!pair) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, pair);
    }
    return tup;
}

static PyObject *node_variable(NodeObject *self, void *c)
{
    if (!self->variable) {
        PyErr_SetString(PyExc_AttributeError, "only AccumulateGrad nodes have .variable");
        return NULL;
    }
    return Py_NewRef(self->variable);
}

static PyObject *node_metadata(NodeObject *self, void *c)
{
    if (!self->dict && !(self->dict = PyDict_New()))
        return NULL;
    return Py_NewRef(self->dict);
}

static PyMemberDef node_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(NodeObject, weakreflist), READONLY},
    {NULL},
};

static PyGetSetDef node_getset[] = {
    {"next_functions", (getter)node_next_functions, NULL, NULL, NULL},
    {"variable", (getter)node_variable, NULL, NULL, NULL},
    {"metadata", (getter)node_metadata, NULL, NULL, NULL},
    {NULL},
};

static PyMethodDef node_methods[] = {
    {"name", (PyCFunction)node_name, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_traverse, node_traverse},
    {Py_tp_clear, node_clear},
    {Py_tp_repr, node_repr},
    {Py_tp_getset, node_getset},
    {Py_tp_members, node_members},
    {Py_tp_methods, node_methods},
    {Py_tp_doc, "An autograd graph node (a tensor's grad_fn)."},
    {0, NULL},
};

static PyType_Spec node_spec = {
    .name = "cddp.autograd.Node",
    .basicsize = sizeof(NodeObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = node_slots,
};

int cddp_node_type_init(PyObject *m, cddp_state_t *st)
{
    st->node_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &node_spec, NULL);
    if (!st->node_type)
        return -1;
    return PyModule_AddObjectRef(m, "Node", (PyObject *)st->node_type);
}

/* ---- building graphs ------------------------------------------------------------------ */

NodeObject *cddp_node_new(const char *name, cddp_backward_fn fn, int n_next)
{
    cddp_state_t *st = cddp_state();
    NodeObject *n = (NodeObject *)st->node_type->tp_alloc(st->node_type, 0);
    if (!n)
        return NULL;
    n->name = name;
    n->backward = fn;
    n->seq = ++st->node_seq;
    n->n_out = 1;
    if (n_next > 0) {
        n->next = PyMem_Calloc((size_t)n_next, sizeof(cddp_edge));
        n->meta = PyMem_Calloc((size_t)n_next, sizeof(cddp_meta));
        if (!n->next || !n->meta) {
            Py_DECREF(n);
            return (NodeObject *)PyErr_NoMemory();
        }
    }
    n->n_next = n_next;
    return n;
}

static int accumulate_grad_backward(NodeObject *self, TensorObject **gout, TensorObject **gin);

/* The leaf's AccumulateGrad, created on first use; the node owns the leaf, the leaf only
 * points back (cleared when the node dies), so no cycle keeps either alive. New ref. */
static NodeObject *grad_accumulator(TensorObject *leaf)
{
    NodeObject *n = leaf->grad_acc;
    if (n)
        return (NodeObject *)Py_NewRef(n);
    n = cddp_node_new("AccumulateGrad", accumulate_grad_backward, 0);
    if (!n)
        return NULL;
    n->seq = INT64_MAX;             /* run as soon as ready: DDP hooks fire early */
    n->variable = (TensorObject *)Py_NewRef(leaf);
    leaf->grad_acc = n;
    return n;
}

int cddp_node_set_input(NodeObject *n, int i, TensorObject *input)
{
    cddp_meta *m = &n->meta[i];
    m->ndim = input->ndim;
    m->dtype = input->dtype;
    memcpy(m->shape, input->shape, sizeof(int64_t) * input->ndim);
    if (input->grad_fn) {
        n->next[i].node = (NodeObject *)Py_NewRef(input->grad_fn);
        n->next[i].input_nr = input->output_nr;
    } else if (input->requires_grad) {
        n->next[i].node = grad_accumulator(input);
        n->next[i].input_nr = 0;
        if (!n->next[i].node)
            return -1;
    }
    return 0;
}

int cddp_node_save(NodeObject *n, int slot, TensorObject *t)
{
    if (slot >= CDDP_NODE_MAX_SAVED) {
        PyErr_SetString(PyExc_SystemError, "cddp_node_save: slot out of range");
        return -1;
    }
    Py_XSETREF(n->saved[slot], Py_NewRef(t));
    n->saved_version[slot] = t->storage->version;
    if (slot >= n->n_saved)
        n->n_saved = slot + 1;
    return 0;
}

int cddp_node_save_output(NodeObject *n, int slot, TensorObject *out)
{
    /* an alias without history: saving the output itself would make a node<->tensor cycle */
    TensorObject *a = cddp_tensor_alias(out, out->ndim, out->shape, out->strides, out->offset);
    int rc;
    if (!a)
        return -1;
    rc = cddp_node_save(n, slot, a);
    Py_DECREF(a);
    return rc;
}

TensorObject *cddp_node_saved(NodeObject *n, int slot)
{
    TensorObject *t;
    if (n->released) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Trying to backward through the graph a second time (or directly access "
                        "saved tensors after they have already been freed). Saved intermediate "
                        "values of the graph are freed when you call .backward() or "
                        "autograd.grad(). Specify retain_graph=True if you need to backward "
                        "through the graph a second time or if you need to access saved tensors "
                        "after calling backward.");
        return NULL;
    }
    t = (TensorObject *)n->saved[slot];
    if (t && t->storage->version != n->saved_version[slot]) {
        char shape[128];
        size_t k = 0;
        for (int d = 0; d < t->ndim && k < sizeof shape - 24; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, d ? ", %lld" : "%lld",
                                  (long long)t->shape[d]);
        shape[k] = 0;
        PyErr_Format(PyExc_RuntimeError,
                     "one of the variables needed for gradient computation has been modified "
                     "by an inplace operation: [cddp.%s [%s]], which is saved by %s, is at "
                     "version %lld; expected version %lld instead. Hint: the operation that "
                     "modified it ran after the forward pass; clone() the tensor before "
                     "modifying it in place.",
                     cddp_dtype_name[t->dtype], shape, n->name,
                     (long long)t->storage->version, (long long)n->saved_version[slot]);
        return NULL;
    }
    return t;
}

void cddp_set_history(TensorObject *out, NodeObject *n, int output_nr)
{
    Py_XSETREF(out->grad_fn, (NodeObject *)Py_NewRef(n));
    out->output_nr = output_nr;
    out->requires_grad = 0;
    if (output_nr + 1 > n->n_out)
        n->n_out = output_nr + 1;
}

NodeObject *cddp_maybe_node(const char *name, cddp_backward_fn fn, int k,
                            TensorObject **inputs, int *err)
{
    NodeObject *n;
    int any = 0;
    *err = 0;
    if (!cddp_grad_enabled)
        return NULL;
    for (int i = 0; i < k; i++)
        any |= inputs[i] && cddp_needs_grad(inputs[i]);
    if (!any)
        return NULL;
    n = cddp_node_new(name, fn, k);
    if (!n)
        goto fail;
    for (int i = 0; i < k; i++) {
        if (inputs[i] && cddp_node_set_input(n, i, inputs[i]) < 0)
            goto fail;
    }
    return n;
fail:
    Py_XDECREF(n);
    *err = 1;
    return NULL;
}

/* ---- leaf accumulation ---------------------------------------------------------------- */

/* Call each hook as hook(g); a non-None result replaces g. Returns new ref or NULL. */
static TensorObject *run_tensor_hooks(PyObject *hooks, TensorObject *g)
{
    Py_INCREF(g);
    if (!hooks)
        return g;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hooks); i++) {
        PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(hooks, i), (PyObject *)g);
        if (!r)
            goto fail;
        if (r == Py_None) {
            Py_DECREF(r);
            continue;
        }
        if (!cddp_tensor_check(r)) {
            PyErr_Format(PyExc_TypeError, "a gradient hook must return a Tensor or None, got %s",
                         Py_TYPE(r)->tp_name);
            Py_DECREF(r);
            goto fail;
        }
        Py_SETREF(g, (TensorObject *)r);
    }
    return g;
fail:
    Py_DECREF(g);
    return NULL;
}

/* A fresh contiguous tensor owned by nobody else, or g itself when it already is one. */
static TensorObject *own_grad(TensorObject *g, TensorObject *like)
{
    TensorObject *out;
    if (Py_REFCNT(g) <= 2 && g->storage->refcnt == 1 && g->offset == 0 &&
        cddp_is_contiguous(g) && g->dtype == like->dtype &&
        cddp_numel(g) == cddp_numel(like) && (int64_t)g->storage->nbytes ==
        cddp_numel(g) * (int64_t)cddp_dtype_size[g->dtype])
        return (TensorObject *)Py_NewRef(g);
    out = cddp_tensor_new(like->dtype, like->ndim, like->shape, 0);
    if (out && cddp_copy_into(out, g) < 0)
        Py_CLEAR(out);
    return out;
}

static int accumulate_grad_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *var = self->variable, *g = NULL;
    if (!gout[0])
        return 0;
    g = run_tensor_hooks(var->hooks, gout[0]);
    if (!g)
        return -1;
    if (var->grad && cddp_tensor_check(var->grad)) {
        if (cddp_accumulate_into((TensorObject *)var->grad, g) < 0)
            goto fail;
    } else {
        TensorObject *own = own_grad(g, var);
        if (!own)
            goto fail;
        Py_XSETREF(var->grad, (PyObject *)own);
    }
    Py_DECREF(g);
    if (var->post_acc_hooks) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(var->post_acc_hooks); i++) {
            PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(var->post_acc_hooks, i),
                                              (PyObject *)var);
            if (!r)
                return -1;
            Py_DECREF(r);
        }
    }
    return 0;
fail:
    Py_DECREF(g);
    return -1;
}

/* ---- engine --------------------------------------------------------------------------- */

typedef struct {
    NodeObject **v;
    Py_ssize_t n, cap;
} node_vec;

static int vec_push(node_vec *q, NodeObject *n)
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

/* max-heap on seq */
static int heap_push(node_vec *h, NodeObject *n)
{
    if (vec_push(h, n) < 0)
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

static NodeObject *heap_pop(node_vec *h)
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

/* Add g into node->inbuf[k]: the first arrival is kept, later ones summed out of place (the
 * first may be a tensor some other code still holds). */
static int inbuf_add(NodeObject *node, int k, TensorObject *g)
{
    TensorObject *cur = node->inbuf[k], *sum;
    if (k >= CDDP_NODE_MAX_OUT) {
        PyErr_SetString(PyExc_SystemError, "autograd: output index out of range");
        return -1;
    }
    if (!cur) {
        node->inbuf[k] = (TensorObject *)Py_NewRef(g);
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
    Py_SETREF(node->inbuf[k], sum);
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
                TensorObject *g = run_tensor_hooks(hooks, gout[k]);
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
            if (obj && obj != Py_None) {
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
    if (t->grad_fn) {
        *input_nr = t->output_nr;
        return (NodeObject *)Py_NewRef(t->grad_fn);
    }
    if (t->requires_grad) {
        *input_nr = 0;
        return grad_accumulator(t);
    }
    PyErr_SetString(PyExc_RuntimeError,
                    "element 0 of tensors does not require grad and does not have a grad_fn");
    return NULL;
}

int cddp_run_backward(int n, TensorObject **roots, TensorObject **grads, int retain_graph)
{
    cddp_state_t *st = cddp_state();
    int64_t epoch = ++st->engine_epoch;
    node_vec seen = {0}, ready = {0};
    NodeObject **rn = PyMem_Calloc((size_t)(n ? n : 1), sizeof(NodeObject *));
    int saved_mode = cddp_grad_enabled, rc = -1;
    if (!rn) {
        PyErr_NoMemory();
        return -1;
    }
    /* 1. discover the graph and count incoming edges */
    for (int r = 0; r < n; r++) {
        int nr;
        rn[r] = root_node(roots[r], &nr);
        if (!rn[r])
            goto done;
        if (rn[r]->epoch != epoch) {
            rn[r]->epoch = epoch;
            rn[r]->deps = 0;
            if (vec_push(&seen, rn[r]) < 0)
                goto done;
        }
    }
    for (Py_ssize_t i = 0; i < seen.n; i++) {
        NodeObject *node = seen.v[i];
        for (int e = 0; e < node->n_next; e++) {
            NodeObject *c = node->next[e].node;
            if (!c)
                continue;
            if (c->epoch != epoch) {
                c->epoch = epoch;
                c->deps = 0;
                for (int k = 0; k < CDDP_NODE_MAX_OUT; k++)
                    Py_CLEAR(c->inbuf[k]);
                if (vec_push(&seen, c) < 0)
                    goto done;
            }
            c->deps++;
        }
    }
    /* 2. seed the roots' gradients */
    for (int r = 0; r < n; r++) {
        int nr = roots[r]->grad_fn ? roots[r]->output_nr : 0;
        if (inbuf_add(rn[r], nr, grads[r]) < 0)
            goto done;
    }
    for (Py_ssize_t i = 0; i < seen.n; i++)
        if (seen.v[i]->deps == 0 && heap_push(&ready, seen.v[i]) < 0)
            goto done;
    /* 3. walk: run each node once all its consumers have delivered */
    cddp_grad_enabled = 0;
    while (ready.n) {
        NodeObject *node = heap_pop(&ready);
        TensorObject *gout[CDDP_NODE_MAX_OUT] = {0};
        TensorObject **gin = NULL;
        int any = 0, err = 0;
        for (int k = 0; k < CDDP_NODE_MAX_OUT; k++) {
            gout[k] = node->inbuf[k];     /* steal */
            node->inbuf[k] = NULL;
            any |= gout[k] != NULL;
        }
        if (any && node->n_next) {
            gin = PyMem_Calloc((size_t)node->n_next, sizeof(TensorObject *));
            err = !gin;
            if (err)
                PyErr_NoMemory();
        }
        if (any && !err)
            err = run_pre_hooks(node, gout) < 0 || node->backward(node, gout, gin) < 0;
        for (int k = 0; k < CDDP_NODE_MAX_OUT; k++)
            Py_XDECREF(gout[k]);
        if (!retain_graph && !err)
            release_saved(node);
        for (int e = 0; e < node->n_next; e++) {
            NodeObject *c = node->next[e].node;
            if (gin && gin[e]) {
                if (!err && c && inbuf_add(c, node->next[e].input_nr, gin[e]) < 0)
                    err = 1;
                Py_DECREF(gin[e]);
            }
            if (c && !err && --c->deps == 0 && heap_push(&ready, c) < 0)
                err = 1;
        }
        PyMem_Free(gin);
        if (err)
            goto done;
    }
    rc = 0;
done:
    cddp_grad_enabled = saved_mode;
    for (Py_ssize_t i = 0; i < seen.n; i++)
        for (int k = 0; k < CDDP_NODE_MAX_OUT; k++)
            Py_CLEAR(seen.v[i]->inbuf[k]);
    for (int r = 0; r < n; r++)
        Py_XDECREF(rn[r]);
    PyMem_Free(rn);
    PyMem_Free(seen.v);
    PyMem_Free(ready.v);
    return rc;
}

/* ---- Python entry points -------------------------------------------------------------- */

static int shapes_equal(const TensorObject *a, const TensorObject *b)
{
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, sizeof(int64_t) * a->ndim) == 0;
}

/* backward over parallel sequences of tensors and grads (None entries allowed in grads). */
static int backward_seq(PyObject *tensors, PyObject *grads, int retain)
{
    PyObject *tf = NULL, *gf = NULL;
    TensorObject **roots = NULL, **gs = NULL;
    Py_ssize_t n = 0;
    int rc = -1;
    tf = PySequence_Fast(tensors, "tensors must be a Tensor or a sequence of Tensors");
    if (!tf)
        return -1;
    n = PySequence_Fast_GET_SIZE(tf);
    if (grads != Py_None) {
        gf = PySequence_Fast(grads, "grad_tensors must be a sequence");
        if (!gf)
            goto done;
        if (PySequence_Fast_GET_SIZE(gf) != n) {
            PyErr_Format(PyExc_RuntimeError, "got %zd tensors and %zd gradients", n,
                         PySequence_Fast_GET_SIZE(gf));
            goto done;
        }
    }
    roots = PyMem_Calloc((size_t)(n ? n : 1), sizeof *roots);
    gs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *gs);
    if (!roots || !gs) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(tf, i);
        PyObject *g = gf ? PySequence_Fast_GET_ITEM(gf, i) : Py_None;
        if (!cddp_tensor_check(t)) {
            PyErr_Format(PyExc_TypeError, "backward: expected a Tensor, got %s", Py_TYPE(t)->tp_name);
            goto done;
        }
        roots[i] = (TensorObject *)t;
        if (!cddp_needs_grad(roots[i])) {
            PyErr_Format(PyExc_RuntimeError,
                         "element %zd of tensors does not require grad and does not have a grad_fn", i);
            goto done;
        }
        if (g == Py_None) {
            if (cddp_numel(roots[i]) != 1) {
                PyErr_SetString(PyExc_RuntimeError,
                                "grad can be implicitly created only for scalar outputs");
                goto done;
            }
            gs[i] = cddp_tensor_new(roots[i]->dtype, roots[i]->ndim, roots[i]->shape, 0);
            if (!gs[i])
                goto done;
            TensorObject *one = cddp_scalar_tensor(1.0, roots[i]->dtype);
            if (!one || cddp_copy_into(gs[i], one) < 0) {
                Py_XDECREF(one);
                goto done;
            }
            Py_DECREF(one);
        } else if (!cddp_tensor_check(g)) {
            PyErr_Format(PyExc_TypeError, "gradient must be a Tensor or None, got %s",
                         Py_TYPE(g)->tp_name);
            goto done;
        } else if (!shapes_equal((TensorObject *)g, roots[i])) {
            PyObject *gs_ = cddp_size_from(((TensorObject *)g)->ndim, ((TensorObject *)g)->shape);
            PyObject *ts_ = cddp_size_from(roots[i]->ndim, roots[i]->shape);
            if (gs_ && ts_)
                PyErr_Format(PyExc_RuntimeError,
                             "Mismatch in shape: grad_output[%zd] has a shape of %R and "
                             "output[%zd] has a shape of %R.", i, gs_, i, ts_);
            Py_XDECREF(gs_);
            Py_XDECREF(ts_);
            goto done;
        } else {
            gs[i] = cddp_tensor_cast_raw((TensorObject *)g, roots[i]->dtype);
            if (!gs[i])
                goto done;
        }
    }
    rc = cddp_run_backward((int)n, roots, gs, retain);
done:
    for (Py_ssize_t i = 0; gs && i < n; i++)
        Py_XDECREF(gs[i]);
    PyMem_Free(roots);
    PyMem_Free(gs);
    Py_XDECREF(tf);
    Py_XDECREF(gf);
    return rc;
}

static PyObject *tensor_backward(TensorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"gradient", "retain_graph", "create_graph", "inputs", NULL};
    PyObject *grad = Py_None, *retain = Py_None, *create = Py_False, *inputs = Py_None;
    PyObject *ts = NULL, *gs = NULL;
    int r, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOO:backward", kwlist, &grad, &retain,
                                     &create, &inputs))
        return NULL;
    if (PyObject_IsTrue(create) == 1) {
        PyErr_SetString(PyExc_NotImplementedError,
                        "cddp: create_graph=True (higher-order gradients) is not supported");
        return NULL;
    }
    if (inputs != Py_None) {
        PyErr_SetString(PyExc_NotImplementedError, "cddp: backward(inputs=...) is not supported");
        return NULL;
    }
    r = retain == Py_None ? 0 : PyObject_IsTrue(retain);
    if (r < 0)
        return NULL;
    ts = PyTuple_Pack(1, self);
    gs = PyTuple_Pack(1, grad);
    rc = ts && gs ? backward_seq(ts, gs, r) : -1;
    Py_XDECREF(ts);
    Py_XDECREF(gs);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *check_callable(PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "hook must be callable, got %s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    return fn;
}

/* Returns a handle whose remove() takes the hook out (cddp.utils.hooks.RemovableHandle
 * semantics, kept minimal: a (list, fn) pair the Python layer wraps). */
static PyObject *hook_handle(PyObject *list, PyObject *fn)
{
    return Py_BuildValue("(OO)", list, fn);
}

static PyObject *tensor_register_hook(TensorObject *self, PyObject *fn)
{
    PyObject *list;
    if (!check_callable(fn))
        return NULL;
    if (!cddp_needs_grad(self)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cannot register a hook on a tensor that doesn't require gradient");
        return NULL;
    }
    if (!self->grad_fn) {
        if (!self->hooks && !(self->hooks = PyList_New(0)))
            return NULL;
        list = self->hooks;
    } else {
        NodeObject *n = self->grad_fn;
        PyObject *key = PyLong_FromLong(self->output_nr);
        if (!key)
            return NULL;
        if (!n->pre_hooks && !(n->pre_hooks = PyDict_New())) {
            Py_DECREF(key);
            return NULL;
        }
        list = PyDict_GetItemWithError(n->pre_hooks, key);
        if (!list) {
            if (PyErr_Occurred() || !(list = PyList_New(0))) {
                Py_DECREF(key);
                return NULL;
            }
            if (PyDict_SetItem(n->pre_hooks, key, list) < 0) {
                Py_DECREF(key);
                Py_DECREF(list);
                return NULL;
            }
            Py_DECREF(list);
        }
        Py_DECREF(key);
    }
    if (PyList_Append(list, fn) < 0)
        return NULL;
    return hook_handle(list, fn);
}

static PyObject *tensor_register_post_acc_hook(TensorObject *self, PyObject *fn)
{
    if (!check_callable(fn))
        return NULL;
    if (self->grad_fn || !self->requires_grad) {
        PyErr_SetString(PyExc_RuntimeError,
                        "post accumulate grad hooks cannot be registered on non-leaf tensors");
        return NULL;
    }
    if (!self->post_acc_hooks && !(self->post_acc_hooks = PyList_New(0)))
        return NULL;
    if (PyList_Append(self->post_acc_hooks, fn) < 0)
        return NULL;
    return hook_handle(self->post_acc_hooks, fn);
}

static PyObject *tensor_retain_grad(TensorObject *self, PyObject *unused)
{
    NodeObject *n = self->grad_fn;
    PyObject *key, *ref;
    int rc;
    if (!cddp_needs_grad(self)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "can't retain_grad on Tensor that has requires_grad=False");
        return NULL;
    }
    if (!n)
        Py_RETURN_NONE;                   /* leaves retain their grad anyway */
    self->retains_grad = 1;
    if (!n->retain && !(n->retain = PyDict_New()))
        return NULL;
    key = PyLong_FromLong(self->output_nr);
    ref = PyWeakref_NewRef((PyObject *)self, NULL);
    rc = key && ref ? PyDict_SetItem(n->retain, key, ref) : -1;
    Py_XDECREF(key);
    Py_XDECREF(ref);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyMethodDef cddp_autograd_tensor_methods[] = {
    {"backward", (PyCFunction)tensor_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(gradient=None, retain_graph=None): accumulate d(self)/d(leaf) into leaf.grad"},
    {"register_hook", (PyCFunction)tensor_register_hook, METH_O, NULL},
    {"register_post_accumulate_grad_hook", (PyCFunction)tensor_register_post_acc_hook, METH_O, NULL},
    {"retain_grad", (PyCFunction)tensor_retain_grad, METH_NOARGS, NULL},
    {NULL},
};

static PyObject *py_set_grad_enabled(PyObject *m, PyObject *arg)
{
    int prev = cddp_grad_enabled, v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    cddp_grad_enabled = v;
    return PyBool_FromLong(prev);
}

static PyObject *py_is_grad_enabled(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(cddp_grad_enabled);
}

static PyObject *py_backward(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tensors", "grad_tensors", "retain_graph", NULL};
    PyObject *ts, *gs = Py_None;
    int retain = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Op:_backward", kwlist, &ts, &gs, &retain))
        return NULL;
    if (backward_seq(ts, gs, retain) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _reachable_leaves(tensors) -> set of id() of the leaves whose gradient the graph of
 * `tensors` would produce (DDP's find_unused_parameters). Iterative DFS over next_functions. */
static PyObject *py_reachable_leaves(PyObject *m, PyObject *arg)
{
    PyObject *fast = PySequence_Fast(arg, "_reachable_leaves expects a sequence of tensors");
    PyObject *out = NULL;
    node_vec stack = {0};
    int64_t epoch = ++cddp_state()->engine_epoch;
    if (!fast)
        return NULL;
    out = PySet_New(NULL);
    if (!out)
        goto fail;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        TensorObject *t = (TensorObject *)o;
        if (!cddp_tensor_check(o))
            continue;
        if (t->grad_fn) {
            if (t->grad_fn->epoch != epoch) {
                t->grad_fn->epoch = epoch;
                if (vec_push(&stack, t->grad_fn) < 0)
                    goto fail;
            }
        } else if (t->requires_grad) {
            PyObject *id = PyLong_FromVoidPtr(t);
            if (!id || PySet_Add(out, id) < 0) {
                Py_XDECREF(id);
                goto fail;
            }
            Py_DECREF(id);
        }
    }
    while (stack.n) {
        NodeObject *node = stack.v[--stack.n];
        if (node->variable) {
            PyObject *id = PyLong_FromVoidPtr(node->variable);
            if (!id || PySet_Add(out, id) < 0) {
                Py_XDECREF(id);
                goto fail;
            }
            Py_DECREF(id);
        }
        for (int e = 0; e < node->n_next; e++) {
            NodeObject *c = node->next[e].node;
            if (c && c->epoch != epoch) {
                c->epoch = epoch;
                if (vec_push(&stack, c) < 0)
                    goto fail;
            }
        }
    }
    PyMem_Free(stack.v);
    Py_DECREF(fast);
    return out;
fail:
    PyMem_Free(stack.v);
    Py_DECREF(fast);
    Py_XDECREF(out);
    return NULL;
}

PyMethodDef cddp_autograd_module_methods[] = {
    {"_reachable_leaves", py_reachable_leaves, METH_O, NULL},
    {"_set_grad_enabled", py_set_grad_enabled, METH_O, "set grad mode; returns the previous"},
    {"is_grad_enabled", py_is_grad_enabled, METH_NOARGS, NULL},
    {"_backward", (PyCFunction)py_backward, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL},
};
