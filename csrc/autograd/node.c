/* autograd/node.c — the autograd graph: Node objects, their edges and saved tensors, the
 * history a forward op attaches to its outputs, and the leaf's AccumulateGrad node
 * (torch.autograd.graph.Node, torch/csrc/autograd/function.h, functions/accumulate_grad.cpp).
 *
 *   class Node:                  # grad_fn objects: AddBackward0, AccumulateGrad, ...
 *       name() -> str
 *       next_functions -> ((Node|None, input_nr), ...)
 *       variable                 # AccumulateGrad only: the leaf it feeds
 *       metadata -> dict
 *
 * Every op builds its node through cddp_maybe_node / cddp_node_set_input / cddp_node_save /
 * cddp_set_history (declared in core/cddp.h); autograd/engine.c runs the graph.
 * AccumulateGrad lives here rather than in the engine because wiring an edge to a leaf
 * (cddp_node_set_input) creates it: keeping it here keeps node.c below engine.c.
 * Grad mode (cddp_grad_enabled) is defined here too: it decides whether ops record history.
 */
#include "autograd/autograd.h"
#include "module.h"
#include <string.h>
#include <structmember.h>

_Thread_local int cddp_grad_enabled = 1;
_Thread_local int cddp_accumulate_off = 0;

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
    for (int i = 0; self->inbuf_ext && i < self->n_out; i++)
        Py_VISIT(self->inbuf_ext[i]);
    Py_VISIT(self->extra);
    Py_VISIT(self->variable);
    Py_VISIT(self->pre_hooks);
    Py_VISIT(self->retain);
    Py_VISIT(self->fn_hooks[0]);
    Py_VISIT(self->fn_hooks[1]);
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
    for (int i = 0; self->inbuf_ext && i < self->n_out; i++)
        Py_CLEAR(self->inbuf_ext[i]);
    Py_CLEAR(self->extra);
    if (self->variable && self->variable->grad_acc == self)
        self->variable->grad_acc = NULL;
    Py_CLEAR(self->variable);
    Py_CLEAR(self->pre_hooks);
    Py_CLEAR(self->retain);
    Py_CLEAR(self->fn_hooks[0]);
    Py_CLEAR(self->fn_hooks[1]);
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
    PyMem_Free(self->inbuf_ext);
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

/* ---- what the higher-order engine reads (cddp/autograd/_higher.py) ---------------------
 * Private: these expose a node's internal slots to the Python formulas that differentiate a
 * backward (create_graph=True). The slots' meaning is per node type (the op's C file says). */

static PyObject *node_sequence_nr(NodeObject *self, PyObject *unused)
{
    return PyLong_FromLongLong(self->seq);
}

/* _saved(slot) -> the saved object (a Tensor as backward would read it, with torch's released
 * and modified-in-place errors), or None for an empty slot */
static PyObject *node_saved_slot(NodeObject *self, PyObject *arg)
{
    long slot = PyLong_AsLong(arg);
    PyObject *o;
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot < 0 || slot >= CDDP_NODE_MAX_SAVED) {
        PyErr_Format(PyExc_IndexError, "%s has no saved slot %ld", self->name, slot);
        return NULL;
    }
    o = self->saved[slot];
    if (o && cddp_tensor_check(o))
        o = (PyObject *)cddp_node_saved(self, (int)slot);
    else if (!o && self->released)
        o = (PyObject *)cddp_node_saved(self, (int)slot);       /* raises the released error */
    if (!o)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    return Py_NewRef(o);
}

/* _scalars() -> (d: 4 floats, i: the integer slots, extra object or None) */
static PyObject *node_scalars(NodeObject *self, PyObject *unused)
{
    enum { NI = (int)(sizeof self->i / sizeof self->i[0]) };
    PyObject *d = PyTuple_New(4), *i = PyTuple_New(NI), *r = NULL;
    if (!d || !i)
        goto done;
    for (int k = 0; k < 4; k++) {
        PyObject *v = PyFloat_FromDouble(self->d[k]);
        if (!v)
            goto done;
        PyTuple_SET_ITEM(d, k, v);
    }
    for (int k = 0; k < NI; k++) {
        PyObject *v = PyLong_FromLongLong(self->i[k]);
        if (!v)
            goto done;
        PyTuple_SET_ITEM(i, k, v);
    }
    r = PyTuple_Pack(3, d, i, self->extra ? self->extra : Py_None);
done:
    Py_XDECREF(d);
    Py_XDECREF(i);
    return r;
}

/* _input_meta() -> ((shape tuple, dtype name), ...) per edge, as the forward's inputs were */
static PyObject *node_input_meta(NodeObject *self, PyObject *unused)
{
    PyObject *tup = PyTuple_New(self->n_next);
    for (int k = 0; tup && k < self->n_next; k++) {
        const cddp_meta *m = &self->meta[k];
        PyObject *shape = PyTuple_New(m->ndim), *pair;
        for (int d = 0; shape && d < m->ndim; d++) {
            PyObject *v = PyLong_FromLongLong(m->shape[d]);
            if (!v)
                Py_CLEAR(shape);
            else
                PyTuple_SET_ITEM(shape, d, v);
        }
        pair = shape ? Py_BuildValue("(Os)", shape, cddp_dtype_name[m->dtype]) : NULL;
        Py_XDECREF(shape);
        if (!pair)
            Py_CLEAR(tup);
        else
            PyTuple_SET_ITEM(tup, k, pair);
    }
    return tup;
}

/* _as_output(t, output_nr) -> an alias of t whose history is (this node, output_nr): a saved
 * output made differentiable again, as torch's SavedVariable does for outputs */
static PyObject *node_as_output(NodeObject *self, PyObject *args)
{
    PyObject *t;
    int k;
    TensorObject *a;
    if (!PyArg_ParseTuple(args, "Oi:_as_output", &t, &k))
        return NULL;
    if (!cddp_tensor_check(t) || k < 0 || k >= self->n_out) {
        PyErr_Format(PyExc_ValueError, "_as_output: a Tensor and an output of %s expected",
                     self->name);
        return NULL;
    }
    a = cddp_tensor_alias((TensorObject *)t, ((TensorObject *)t)->ndim,
                          ((TensorObject *)t)->shape, ((TensorObject *)t)->strides,
                          ((TensorObject *)t)->offset);
    if (a)
        cddp_set_history(a, self, k);
    return (PyObject *)a;
}

/* _hooks() -> (pre_hooks dict | None, retain dict | None, leaf hooks | None,
 *              post-accumulate hooks | None, node pre-hooks dict | None,
 *              node hooks dict | None); leaf and post-accumulate hooks for AccumulateGrad */
static PyObject *node_hooks(NodeObject *self, PyObject *unused)
{
    TensorObject *v = self->variable;
    return PyTuple_Pack(6, self->pre_hooks ? self->pre_hooks : Py_None,
                        self->retain ? self->retain : Py_None,
                        v && v->hooks ? v->hooks : Py_None,
                        v && v->post_acc_hooks ? v->post_acc_hooks : Py_None,
                        self->fn_hooks[0] ? self->fn_hooks[0] : Py_None,
                        self->fn_hooks[1] ? self->fn_hooks[1] : Py_None);
}

/* register_prehook(fn) / register_hook(fn): fn(grad_outputs) or fn(grad_inputs,
 * grad_outputs) around this node's backward (engine.c); a handle whose remove() drops it
 * (cddp.utils.hooks.RemovableHandle over the node's dict). */
static PyObject *add_fn_hook(NodeObject *self, PyObject *fn, int which)
{
    PyObject *mod, *handle = NULL, *id;
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "expected a callable hook, got %s", Py_TYPE(fn)->tp_name);
        return NULL;
    }
    if (!self->fn_hooks[which] && !(self->fn_hooks[which] = PyDict_New()))
        return NULL;
    mod = PyImport_ImportModule("cddp.utils.hooks");
    if (mod)
        handle = PyObject_CallMethod(mod, "RemovableHandle", "O", self->fn_hooks[which]);
    Py_XDECREF(mod);
    id = handle ? PyObject_GetAttrString(handle, "id") : NULL;
    if (!id || PyDict_SetItem(self->fn_hooks[which], id, fn) < 0)
        Py_CLEAR(handle);
    Py_XDECREF(id);
    return handle;
}

static PyObject *node_register_prehook(NodeObject *self, PyObject *fn)
{
    return add_fn_hook(self, fn, 0);
}

static PyObject *node_register_hook(NodeObject *self, PyObject *fn)
{
    return add_fn_hook(self, fn, 1);
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
    {"_sequence_nr", (PyCFunction)node_sequence_nr, METH_NOARGS, NULL},
    {"_saved", (PyCFunction)node_saved_slot, METH_O, NULL},
    {"_scalars", (PyCFunction)node_scalars, METH_NOARGS, NULL},
    {"_input_meta", (PyCFunction)node_input_meta, METH_NOARGS, NULL},
    {"_as_output", (PyCFunction)node_as_output, METH_VARARGS, NULL},
    {"_hooks", (PyCFunction)node_hooks, METH_NOARGS, NULL},
    {"register_hook", (PyCFunction)node_register_hook, METH_O,
     "register_hook(fn): fn(grad_inputs, grad_outputs) after this node's backward; a "
     "non-None result replaces grad_inputs. Returns a handle with remove()."},
    {"register_prehook", (PyCFunction)node_register_prehook, METH_O,
     "register_prehook(fn): fn(grad_outputs) before this node's backward; a non-None result "
     "replaces grad_outputs. Returns a handle with remove()."},
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
    /* BASETYPE: autograd.Function's nodes subclass it (autograd/function.c) */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
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

/* Contract in autograd/autograd.h. */
NodeObject *cddp_node_new_of_type(PyTypeObject *tp, const char *name, cddp_backward_fn fn,
                                  int n_next)
{
    cddp_state_t *st = cddp_state();
    NodeObject *n = (NodeObject *)tp->tp_alloc(tp, 0);
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

NodeObject *cddp_node_new(const char *name, cddp_backward_fn fn, int n_next)
{
    return cddp_node_new_of_type(cddp_state()->node_type, name, fn, n_next);
}

/* Contract in autograd/autograd.h. */
int cddp_node_set_n_out(NodeObject *n, int n_out)
{
    if (n->n_out > 1 || n->inbuf_ext || n_out < 1) {
        PyErr_SetString(PyExc_SystemError, "cddp_node_set_n_out: outputs already set");
        return -1;
    }
    if (n_out > CDDP_NODE_MAX_OUT) {
        n->inbuf_ext = PyMem_Calloc((size_t)n_out, sizeof(TensorObject *));
        if (!n->inbuf_ext) {
            PyErr_NoMemory();
            return -1;
        }
    }
    n->n_out = n_out;
    return 0;
}

static int accumulate_grad_backward(NodeObject *self, TensorObject **gout, TensorObject **gin);

/* Contract in autograd/autograd.h. */
NodeObject *cddp_grad_accumulator(TensorObject *leaf)
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
    if (cddp_view_sync(input) < 0)
        return -1;
    m->ndim = input->ndim;
    m->dtype = input->dtype;
    memcpy(m->shape, input->shape, sizeof(int64_t) * input->ndim);
    if (input->grad_fn) {
        n->next[i].node = (NodeObject *)Py_NewRef(input->grad_fn);
        n->next[i].input_nr = input->output_nr;
    } else if (input->requires_grad) {
        n->next[i].node = cddp_grad_accumulator(input);
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
    TensorObject *kept = cddp_saved_pack(t);        /* t, or a placeholder under hooks */
    if (!kept)
        return -1;
    Py_XSETREF(n->saved[slot], (PyObject *)kept);
    n->saved_version[slot] = *cddp_version(t);
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

/* Contract in autograd/autograd.h. */
int cddp_saved_check(NodeObject *n, TensorObject *t, int64_t version)
{
    char shape[128];
    size_t k = 0;
    if (n->released) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Trying to backward through the graph a second time (or directly access "
                        "saved tensors after they have already been freed). Saved intermediate "
                        "values of the graph are freed when you call .backward() or "
                        "autograd.grad(). Specify retain_graph=True if you need to backward "
                        "through the graph a second time or if you need to access saved tensors "
                        "after calling backward.");
        return -1;
    }
    if (!t || *cddp_version(t) == version)
        return 0;
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
                 (long long)*cddp_version(t), (long long)version);
    return -1;
}

TensorObject *cddp_node_saved(NodeObject *n, int slot)
{
    TensorObject *t = n->released ? NULL : (TensorObject *)n->saved[slot];
    /* backward functions fetch several slots before checking any: once one failed (an
     * unpack hook raised), the rest must not run Python code under that exception */
    if (PyErr_Occurred())
        return NULL;
    if (t && cddp_saved_is_packed(t)) {
        /* saved under saved_tensors_hooks: unpack once; the node keeps the result until it
         * releases its saved tensors (a retained graph keeps it) */
        if (!(t = cddp_saved_unpack(t)))
            return NULL;
        Py_SETREF(n->saved[slot], (PyObject *)t);
        n->saved_version[slot] = *cddp_version(t);
    }
    if (cddp_saved_check(n, t, n->saved_version[slot]) < 0)
        return NULL;
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

/* Contract in autograd/autograd.h. */
TensorObject *cddp_run_tensor_hooks(PyObject *hooks, TensorObject *g)
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

/* torch's gradient layout contract: a leaf's .grad is laid out as the leaf when the leaf is
 * dense (a permuted or channels-last parameter's gradient has its strides, so an optimizer
 * walks both in one order), else row-major. g itself when it already is so and nobody else
 * holds it, else a fresh copy. */
static TensorObject *own_grad(TensorObject *g, TensorObject *like)
{
    TensorObject *out;
    int64_t st[CDDP_MAX_DIMS];
    int dense = cddp_is_dense(like->ndim, like->shape, like->strides);
    int permuted = dense && !cddp_is_contiguous(like);
    if (dense)
        memcpy(st, like->strides, sizeof(int64_t) * like->ndim);
    else
        cddp_contiguous_strides(like->ndim, like->shape, st);
    if (Py_REFCNT(g) <= 2 && g->storage->refcnt == 1 && g->offset == 0 &&
        g->dtype == like->dtype && cddp_numel(g) == cddp_numel(like) &&
        (int64_t)g->storage->nbytes == cddp_numel(g) * (int64_t)cddp_dtype_size[g->dtype] &&
        (permuted ? cddp_same_layout(g, like) : cddp_is_contiguous(g)))
        return (TensorObject *)Py_NewRef(g);
    out = cddp_tensor_new_strided(like->dtype, like->ndim, like->shape, st, 0);
    if (out && cddp_copy_into(out, g) < 0)
        Py_CLEAR(out);
    return out;
}

static int accumulate_grad_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *var = self->variable, *g = NULL;
    if (!gout[0])
        return 0;
    g = cddp_run_tensor_hooks(var->hooks, gout[0]);
    if (!g)
        return -1;
    if (cddp_accumulate_off) {       /* autograd.grad: the hooks captured what it wants */
        Py_DECREF(g);
        return 0;
    }
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
