/* autograd/py_autograd.c — the Python face of autograd: Tensor.backward / register_hook /
 * register_post_accumulate_grad_hook / retain_grad, torch.autograd.backward (as
 * cddp._C._backward), grad mode (torch.is_grad_enabled, torch.set_grad_enabled's setter), the
 * saved-tensor hooks switch (_set_saved_tensors_hooks) and _reachable_leaves (the graph walk
 * behind DDP's find_unused_parameters).
 *
 * Mirrors torch/csrc/autograd/python_engine.cpp and python_variable.cpp: arguments are checked
 * and the seed gradients built here (torch's messages), then autograd/engine.c runs.
 */
#include "autograd/autograd.h"
#include "module.h"
#include <string.h>

/* ---- backward ------------------------------------------------------------------------- */

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
    if (PyObject_IsTrue(create) == 1 || inputs != Py_None) {
        /* higher-order gradients and inputs= run the Python engine (cddp/autograd/_higher.py) */
        PyObject *mod = PyImport_ImportModule("cddp.autograd._higher"), *res;
        if (!mod)
            return NULL;
        res = PyObject_CallMethod(mod, "backward", "OOOOO", (PyObject *)self, grad, retain,
                                  create, inputs);
        Py_DECREF(mod);
        return res;
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

/* ---- hooks ---------------------------------------------------------------------------- */

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
    if (!check_callable(fn) || cddp_view_sync(self) < 0)
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

int cddp_retain_on_history(TensorObject *t)
{
    NodeObject *n = t->grad_fn;
    PyObject *key, *ref;
    int rc;
    if (!n->retain && !(n->retain = PyDict_New()))
        return -1;
    key = PyLong_FromLong(t->output_nr);
    ref = PyWeakref_NewRef((PyObject *)t, NULL);
    rc = key && ref ? PyDict_SetItem(n->retain, key, ref) : -1;
    Py_XDECREF(key);
    Py_XDECREF(ref);
    return rc;
}

static PyObject *tensor_retain_grad(TensorObject *self, PyObject *unused)
{
    if (cddp_view_sync(self) < 0)
        return NULL;
    if (!cddp_needs_grad(self)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "can't retain_grad on Tensor that has requires_grad=False");
        return NULL;
    }
    if (!self->grad_fn)
        Py_RETURN_NONE;                   /* leaves retain their grad anyway */
    self->retains_grad = 1;
    if (cddp_retain_on_history(self) < 0)
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

/* ---- module functions ----------------------------------------------------------------- */

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

/* anomaly mode (engine.c checks each node's gradients for NaN while it is on) */
static PyObject *py_set_detect_anomaly(PyObject *m, PyObject *arg)
{
    int prev = cddp_detect_anomaly, v = PyObject_IsTrue(arg);
    if (v < 0)
        return NULL;
    cddp_detect_anomaly = v;
    return PyBool_FromLong(prev);
}

/* _accumulate_off() -> whether this thread is inside an autograd.grad run (nothing lands in
 * .grad): a reentrant checkpoint refuses to run there, as torch's _is_checkpoint_valid */
static PyObject *py_accumulate_off(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(cddp_accumulate_off);
}

static PyObject *py_queue_callback(PyObject *m, PyObject *cb)
{
    if (!PyCallable_Check(cb)) {
        PyErr_SetString(PyExc_TypeError, "queue_callback(): the callback must be callable");
        return NULL;
    }
    if (cddp_queue_final_callback(cb) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_is_anomaly_enabled(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(cddp_detect_anomaly);
}

static PyObject *py_backward(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"tensors", "grad_tensors", "retain_graph", "capture_only", NULL};
    PyObject *ts, *gs = Py_None;
    int retain = 0, capture = 0, prev = cddp_accumulate_off, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Opp:_backward", kwlist, &ts, &gs, &retain,
                                     &capture))
        return NULL;
    /* capture_only (autograd.grad): leaves' hooks see their gradient, .grad is left alone;
     * set per run, so a backward nested in a node's backward (a checkpoint) accumulates */
    cddp_accumulate_off = capture;
    rc = backward_seq(ts, gs, retain);
    cddp_accumulate_off = prev;
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _reachable_leaves(tensors) -> set of id() of the leaves whose gradient the graph of
 * `tensors` would produce (DDP's find_unused_parameters). Iterative DFS over next_functions. */
static PyObject *py_reachable_leaves(PyObject *m, PyObject *arg)
{
    PyObject *fast = PySequence_Fast(arg, "_reachable_leaves expects a sequence of tensors");
    PyObject *out = NULL;
    cddp_node_vec stack = {0};
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
        if (cddp_view_sync(t) < 0)
            goto fail;
        if (t->grad_fn) {
            if (t->grad_fn->epoch != epoch) {
                t->grad_fn->epoch = epoch;
                if (cddp_node_vec_push(&stack, t->grad_fn) < 0)
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
                if (cddp_node_vec_push(&stack, c) < 0)
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

/* _set_saved_tensors_hooks(pack, unpack) -> the previous (pack, unpack); (None, None) turns
 * them off. cddp/autograd/graph.py keeps the stack of saved_tensors_hooks contexts. */
static PyObject *py_set_saved_tensors_hooks(PyObject *m, PyObject *args)
{
    PyObject *pack, *unpack, *res;
    if (!PyArg_ParseTuple(args, "OO:_set_saved_tensors_hooks", &pack, &unpack))
        return NULL;
    if ((pack == Py_None) != (unpack == Py_None) ||
        (pack != Py_None && (!PyCallable_Check(pack) || !PyCallable_Check(unpack)))) {
        PyErr_SetString(PyExc_TypeError, "saved_tensors_hooks: pack_hook and unpack_hook must "
                        "both be callables (or both None)");
        return NULL;
    }
    pack = pack == Py_None ? NULL : Py_NewRef(pack);
    unpack = unpack == Py_None ? NULL : Py_NewRef(unpack);
    cddp_saved_hooks_swap(&pack, &unpack);        /* now the previous ones, owned */
    res = Py_BuildValue("(OO)", pack ? pack : Py_None, unpack ? unpack : Py_None);
    Py_XDECREF(pack);
    Py_XDECREF(unpack);
    return res;
}

PyMethodDef cddp_autograd_module_methods[] = {
    {"_set_saved_tensors_hooks", py_set_saved_tensors_hooks, METH_VARARGS, NULL},
    {"_reachable_leaves", py_reachable_leaves, METH_O, NULL},
    {"_view_positions", cddp_view_positions, METH_O, NULL},
    {"_set_grad_enabled", py_set_grad_enabled, METH_O, "set grad mode; returns the previous"},
    {"is_grad_enabled", py_is_grad_enabled, METH_NOARGS, NULL},
    {"_set_detect_anomaly", py_set_detect_anomaly, METH_O,
     "set anomaly mode (NaN checks on every backward node's output); returns the previous"},
    {"_is_anomaly_enabled", py_is_anomaly_enabled, METH_NOARGS, NULL},
    {"_accumulate_off", py_accumulate_off, METH_NOARGS, NULL},
    {"_queue_callback", py_queue_callback, METH_O, NULL},
    {"_backward", (PyCFunction)py_backward, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL},
};
