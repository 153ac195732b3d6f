/* autograd/function.c — custom autograd Functions: the graph node of a Python
 * `torch.autograd.Function` and its `apply` (torch/csrc/autograd/python_function.cpp:
 * THPFunction_apply, _wrap_outputs, _save_variables; custom_function.cpp: PyNode::apply,
 * validate_outputs).
 *
 *   class _FunctionBase(Node):          # the ctx of one application; Python subclasses it as
 *       saved_tensors -> tuple          #   BackwardCFunction, then one <Name>Backward per Function
 *       # in the instance __dict__ (set by Python's FunctionCtx): to_save, dirty_tensors,
 *       # non_differentiable, materialize_grads, needs_input_grad, user attributes
 *
 *   _function_apply(cls, backward_cls, new_style, args, kwargs):
 *       ctx = backward_cls()                      # a Node with an edge per tensor argument
 *       with no_grad: out = cls.forward(ctx, *args, **kwargs)
 *                     (new style: out = cls.forward(*args, **kwargs)
 *                                 cls.setup_context(ctx, args, out))
 *       outputs get history (ctx, i); ctx.to_save is kept for backward
 *   backward (a node of the C engine, grad mode off): grads -> ctx.apply(*grads) -> the user's
 *       backward; its result is checked (count, None for non-tensor arguments, shapes
 *       broadcastable to the input's and summed down, dtype cast to the input's).
 *
 * No cycles: outputs saved by save_for_backward are kept as history-free aliases (as C nodes
 * keep theirs), so output -> ctx -> saved output does not loop; saved_tensors gives them back
 * with their history. The node's saved tuple lives in Node.saved[0], so the engine releases it
 * after a backward without retain_graph exactly as it releases a C node's.
 * Dimension legend: none (any shapes).
 */
#include "autograd/autograd.h"
#include "module.h"
#include <string.h>

typedef struct {
    NodeObject node;
    char *name;                /* "<Name>Backward" (node.name points here), PyMem */
    int n_args;                /* forward inputs: positional arguments after binding */
    int *input_of;             /* n_args: which tensor input (edge) argument p is, or -1 */
    cddp_meta *out_meta;       /* n_out: each output's shape and dtype (zeros to materialize) */
    char *out_tensor;          /* n_out: 1 when output k is a tensor */
    int n_saved;               /* entries of the saved tuple (Node.saved[0]) */
    int64_t *saved_version;    /* n_saved: version counter when saved */
    int *saved_out;            /* n_saved: output number of a saved output, else -1 */
} FunctionNode;

static void function_dealloc(FunctionNode *self)
{
    /* NULLed: a deferred (trashcan) dealloc may come back here */
    PyMem_Free(self->name);
    self->name = NULL;
    self->node.name = "Function";
    PyMem_Free(self->input_of);
    self->input_of = NULL;
    PyMem_Free(self->out_meta);
    self->out_meta = NULL;
    PyMem_Free(self->out_tensor);
    self->out_tensor = NULL;
    PyMem_Free(self->saved_version);
    self->saved_version = NULL;
    PyMem_Free(self->saved_out);
    self->saved_out = NULL;
    cddp_state()->node_type->tp_dealloc((PyObject *)self);
}

/* Node's own traverse: the Python objects of a Function node all live in its NodeObject. */
static int function_traverse(PyObject *self, visitproc visit, void *arg)
{
    return cddp_state()->node_type->tp_traverse(self, visit, arg);
}

/* ---- saved tensors -------------------------------------------------------------------- */

/* ctx.<name> into *out (new reference): 1 found, 0 absent (*out NULL), -1 error. */
static int ctx_attr(PyObject *ctx, const char *name, PyObject **out)
{
    *out = PyObject_GetAttrString(ctx, name);
    if (*out)
        return 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return -1;
    PyErr_Clear();
    return 0;
}

/* ctx.saved_tensors: checked (released graph, in-place modification) as torch unpacks them;
 * saved outputs come back with their history. */
static PyObject *function_saved_tensors(FunctionNode *self, void *c)
{
    PyObject *saved = self->node.saved[0], *out;
    if (cddp_saved_check(&self->node, NULL, 0) < 0)      /* released by a backward */
        return NULL;
    if (!saved)
        return PyTuple_New(0);
    out = PyTuple_New(self->n_saved);
    if (!out)
        return NULL;
    for (int j = 0; j < self->n_saved; j++) {
        PyObject *o = PyTuple_GET_ITEM(saved, j);
        TensorObject *t = (TensorObject *)o, *a;
        if (o == Py_None) {
            PyTuple_SET_ITEM(out, j, Py_NewRef(o));
            continue;
        }
        if (cddp_saved_is_packed(t)) {              /* saved under saved_tensors_hooks */
            a = cddp_saved_unpack(t);
        } else {
            if (cddp_saved_check(&self->node, t, self->saved_version[j]) < 0)
                goto fail;
            a = (TensorObject *)Py_NewRef(t);
        }
        if (!a)
            goto fail;
        if (self->saved_out[j] >= 0) {
            Py_SETREF(a, cddp_tensor_alias(a, a->ndim, a->shape, a->strides, a->offset));
            if (!a)
                goto fail;
            cddp_set_history(a, &self->node, self->saved_out[j]);
        }
        PyTuple_SET_ITEM(out, j, (PyObject *)a);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* Index of o among the n objects of items (identity), or -1. */
static int find_obj(PyObject *const *items, Py_ssize_t n, PyObject *o)
{
    for (Py_ssize_t i = 0; i < n; i++)
        if (items[i] == o)
            return (int)i;
    return -1;
}

/* ctx.to_save -> Node.saved[0] after the outputs are final: versions recorded now (after the
 * forward's own in-place work, as torch), outputs kept as history-free aliases. */
static int save_variables(FunctionNode *f, PyObject *outs)
{
    PyObject *ctx = (PyObject *)f, *to_save = NULL, *fast = NULL, *saved = NULL;
    Py_ssize_t n;
    int rc = -1;
    if (ctx_attr(ctx, "to_save", &to_save) < 0)
        return -1;
    if (!to_save || to_save == Py_None) {
        rc = 0;
        goto done;
    }
    fast = PySequence_Fast(to_save, "save_for_backward expects tensors");
    if (!fast)
        goto done;
    n = PySequence_Fast_GET_SIZE(fast);
    saved = PyTuple_New(n);
    f->saved_version = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int64_t));
    f->saved_out = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    if (!saved || !f->saved_version || !f->saved_out) {
        if (saved)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, j);
        TensorObject *t = (TensorObject *)o;
        int k;
        f->saved_out[j] = -1;
        if (o == Py_None) {
            PyTuple_SET_ITEM(saved, j, Py_NewRef(o));
            continue;
        }
        if (!cddp_tensor_check(o)) {
            PyErr_Format(PyExc_TypeError, "save_for_backward can only save variables, but "
                         "argument %zd is of type %s", j, Py_TYPE(o)->tp_name);
            goto done;
        }
        f->saved_version[j] = *cddp_version(t);
        k = find_obj(PySequence_Fast_ITEMS(outs), PySequence_Fast_GET_SIZE(outs), o);
        if (k >= 0 && t->grad_fn == &f->node) {
            f->saved_out[j] = k;
            o = (PyObject *)cddp_tensor_alias(t, t->ndim, t->shape, t->strides, t->offset);
            if (!o)
                goto done;
        } else {
            Py_INCREF(o);
        }
        Py_SETREF(o, (PyObject *)cddp_saved_pack((TensorObject *)o));
        if (!o)
            goto done;
        PyTuple_SET_ITEM(saved, j, o);
    }
    f->n_saved = (int)n;
    Py_XSETREF(f->node.saved[0], Py_NewRef(saved));
    f->node.n_saved = 1;
    rc = 0;
done:
    Py_XDECREF(to_save);
    Py_XDECREF(fast);
    Py_XDECREF(saved);
    return rc;
}

/* ---- outputs -------------------------------------------------------------------------- */

/* A tensor-valued ctx attribute list (dirty_tensors, non_differentiable) as a new tuple, or
 * an empty one when unset. */
static PyObject *ctx_tuple(PyObject *ctx, const char *name)
{
    PyObject *v = NULL, *t;
    if (ctx_attr(ctx, name, &v) < 0)
        return NULL;
    if (!v || v == Py_None) {
        Py_XDECREF(v);
        return PyTuple_New(0);
    }
    t = PySequence_Tuple(v);
    Py_DECREF(v);
    return t;
}

/* One output tensor o (number k) as torch's _wrap_outputs leaves it: a new reference to what
 * the caller returns (o itself, or an alias of it). */
static TensorObject *wrap_output(FunctionNode *f, TensorObject *o, int k, int executable,
                                 int is_input, int is_dirty, int non_diff)
{
    NodeObject *node = &f->node;
    TensorObject *a;
    int diff = executable && !non_diff && cddp_is_floating(o->dtype);
    if (!diff) {
        /* no history: inputs come back as aliases (never the input object itself) */
        if ((is_input && !is_dirty) || (is_input && cddp_needs_grad(o)) ||
            (!o->grad_fn && o->requires_grad))
            return cddp_tensor_alias(o, o->ndim, o->shape, o->strides, o->offset);
        Py_CLEAR(o->grad_fn);           /* an intermediate built with grad on: detach_ */
        return (TensorObject *)Py_NewRef(o);
    }
    if (is_dirty) {
        if (!o->grad_fn && o->requires_grad) {
            PyErr_SetString(PyExc_RuntimeError,
                            "a leaf Variable that requires grad has been used in an in-place "
                            "operation.");
            return NULL;
        }
        /* rebase: the input (and its base, when it is a view) now comes out of this node */
        if (cddp_set_inplace_history(o, node, k) < 0)
            return NULL;
        return (TensorObject *)Py_NewRef(o);
    }
    /* an input returned as is, a leaf, or an output listed twice gets an alias with history */
    if (is_input || o->grad_fn == node || (!o->grad_fn && o->requires_grad))
        a = cddp_tensor_alias(o, o->ndim, o->shape, o->strides, o->offset);
    else
        a = (TensorObject *)Py_NewRef(o);
    if (a)
        cddp_set_history(a, node, k);
    return a;
}

/* The forward's result with every output wrapped; records each output's metadata. New
 * reference (a tuple when the forward returned one), or NULL. */
static PyObject *wrap_outputs(FunctionNode *f, PyObject *raw, PyObject *args, int executable)
{
    PyObject *ctx = (PyObject *)f, *outs, *res = NULL, *dirty = NULL, *nondiff = NULL;
    int is_tuple = PyTuple_Check(raw);
    Py_ssize_t n;
    outs = is_tuple ? Py_NewRef(raw) : PyTuple_Pack(1, raw);
    if (!outs)
        return NULL;
    n = PyTuple_GET_SIZE(outs);
    dirty = ctx_tuple(ctx, "dirty_tensors");
    nondiff = ctx_tuple(ctx, "non_differentiable");
    if (!dirty || !nondiff || !(res = PyTuple_New(n)))
        goto fail;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dirty); i++)
        if (find_obj(PySequence_Fast_ITEMS(outs), n, PyTuple_GET_ITEM(dirty, i)) < 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "Some elements marked as dirty during the forward method were not "
                            "returned as output. The inputs that are modified inplace must all "
                            "be outputs of the Function.");
            goto fail;
        }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dirty); i++)   /* torch's _mark_dirty */
        if (cddp_tensor_check(PyTuple_GET_ITEM(dirty, i)))
            cddp_bump_version((TensorObject *)PyTuple_GET_ITEM(dirty, i));
    if (n > INT_MAX / 2 || (executable && cddp_node_set_n_out(&f->node, (int)n) < 0))
        goto fail;
    f->out_meta = PyMem_Calloc((size_t)(n ? n : 1), sizeof(cddp_meta));
    f->out_tensor = PyMem_Calloc((size_t)(n ? n : 1), 1);
    if (!f->out_meta || !f->out_tensor) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *o = PyTuple_GET_ITEM(outs, k);
        TensorObject *w;
        if (!cddp_tensor_check(o)) {
            PyTuple_SET_ITEM(res, k, Py_NewRef(o));
            continue;
        }
        w = wrap_output(f, (TensorObject *)o, (int)k, executable,
                        find_obj(PySequence_Fast_ITEMS(args), PyTuple_GET_SIZE(args), o) >= 0,
                        find_obj(PySequence_Fast_ITEMS(dirty), PyTuple_GET_SIZE(dirty), o) >= 0,
                        find_obj(PySequence_Fast_ITEMS(nondiff), PyTuple_GET_SIZE(nondiff),
                                 o) >= 0);
        if (!w)
            goto fail;
        PyTuple_SET_ITEM(res, k, (PyObject *)w);
        f->out_tensor[k] = 1;
        f->out_meta[k].ndim = w->ndim;
        f->out_meta[k].dtype = w->dtype;
        memcpy(f->out_meta[k].shape, w->shape, sizeof(int64_t) * (size_t)w->ndim);
    }
    Py_DECREF(outs);
    Py_DECREF(dirty);
    Py_DECREF(nondiff);
    return res;
fail:
    Py_DECREF(outs);
    Py_XDECREF(dirty);
    Py_XDECREF(nondiff);
    Py_XDECREF(res);
    return NULL;
}

/* ---- backward ------------------------------------------------------------------------- */

static int function_backward(NodeObject *self, TensorObject **gout, TensorObject **gin);

/* "[2, 3]" into buf. */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && k < cap - 24; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    snprintf(buf + k, cap - k, "]");
}

/* Whether `shape` broadcasts to g's shape (torch's is_expandable_to), so summing g down to
 * it is the gradient. */
static int expandable_to(const cddp_meta *m, const TensorObject *g)
{
    if (m->ndim > g->ndim)
        return 0;
    for (int d = 1; d <= m->ndim; d++) {
        int64_t s = m->shape[m->ndim - d], t = g->shape[g->ndim - d];
        if (s != t && s != 1)
            return 0;
    }
    return 1;
}

/* The user's gradient r for tensor input i, checked and brought to the input's shape and
 * dtype (validate_outputs). New reference, or NULL with an exception. */
static TensorObject *check_grad(FunctionNode *f, int i, PyObject *r)
{
    const cddp_meta *m = &f->node.meta[i];
    TensorObject *g = (TensorObject *)r, *s, *c;
    if (!cddp_tensor_check(r)) {
        PyErr_Format(PyExc_RuntimeError, "expected Variable or None (got %s)",
                     Py_TYPE(r)->tp_name);
        return NULL;
    }
    if (g->ndim == m->ndim && memcmp(g->shape, m->shape, sizeof(int64_t) * m->ndim) == 0) {
        s = (TensorObject *)Py_NewRef(g);
    } else if (expandable_to(m, g)) {
        s = cddp_sum_to(g, m->ndim, m->shape);
        if (!s)
            return NULL;
    } else {
        char got[160], want[160];
        format_shape(got, sizeof got, g->ndim, g->shape);
        format_shape(want, sizeof want, m->ndim, m->shape);
        PyErr_Format(PyExc_RuntimeError, "Function %s returned an invalid gradient at index %d "
                     "- got %s but expected shape compatible with %s", f->node.name, i, got, want);
        return NULL;
    }
    c = cddp_tensor_cast_raw(s, m->dtype);
    Py_DECREF(s);
    return c;
}

/* The grads the user's backward receives: one per output; None where no gradient arrived
 * (zeros instead when ctx.materialize_grads and the output is a tensor). New tuple. */
static PyObject *grads_for_user(FunctionNode *f, TensorObject **gout)
{
    PyObject *mat = NULL, *grads = NULL;
    int materialize = 1;
    if (ctx_attr((PyObject *)f, "materialize_grads", &mat) < 0)
        return NULL;
    if (mat) {
        materialize = PyObject_IsTrue(mat);
        Py_DECREF(mat);
        if (materialize < 0)
            return NULL;
    }
    grads = PyTuple_New(f->node.n_out);
    if (!grads)
        return NULL;
    for (int k = 0; k < f->node.n_out; k++) {
        PyObject *g = (PyObject *)gout[k];
        if (g) {
            Py_INCREF(g);
        } else if (materialize && f->out_tensor[k]) {
            const cddp_meta *m = &f->out_meta[k];
            g = (PyObject *)cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
            if (!g) {
                Py_DECREF(grads);
                return NULL;
            }
        } else {
            g = Py_NewRef(Py_None);
        }
        PyTuple_SET_ITEM(grads, k, g);
    }
    return grads;
}

/* Checks the user's result (one gradient per forward argument) and fills gin. */
static int collect_grads(FunctionNode *f, PyObject *res, TensorObject **gin)
{
    Py_ssize_t n = PyTuple_GET_SIZE(res);
    while (n > f->n_args && PyTuple_GET_ITEM(res, n - 1) == Py_None)
        n--;                            /* torch drops extra trailing Nones */
    if (n != f->n_args) {
        PyErr_Format(PyExc_RuntimeError, "function %s returned an incorrect number of "
                     "gradients (expected %d, got %zd)", f->node.name, f->n_args,
                     PyTuple_GET_SIZE(res));
        return -1;
    }
    for (int p = 0; p < f->n_args; p++) {
        PyObject *r = PyTuple_GET_ITEM(res, p);
        int i = f->input_of[p];
        if (i < 0) {
            if (r != Py_None) {
                PyErr_Format(PyExc_RuntimeError, "function %s returned a gradient different "
                             "than None at position %d, but the corresponding forward input "
                             "was not a Variable", f->node.name, p + 1);
                return -1;
            }
            continue;
        }
        if (r == Py_None || !f->node.next[i].node)
            continue;
        if (!(gin[i] = check_grad(f, i, r)))
            return -1;
    }
    return 0;
}

/* The engine's backward for a Function node: calls ctx.apply(*grads) (BackwardCFunction.apply,
 * which calls the user's backward) with grad mode off (the engine's). */
static int function_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    FunctionNode *f = (FunctionNode *)self;
    PyObject *grads = NULL, *apply = NULL, *res = NULL, *tup = NULL;
    int rc = -1;
    grads = grads_for_user(f, gout);
    if (!grads)
        goto done;
    apply = PyObject_GetAttrString((PyObject *)self, "apply");
    if (!apply)
        goto done;
    res = PyObject_Call(apply, grads, NULL);
    if (!res)
        goto done;
    tup = PyTuple_Check(res) ? Py_NewRef(res) : PyTuple_Pack(1, res);
    if (!tup)
        goto done;
    rc = collect_grads(f, tup, gin);
done:
    Py_XDECREF(grads);
    Py_XDECREF(apply);
    Py_XDECREF(res);
    Py_XDECREF(tup);
    return rc;
}

/* ---- apply ---------------------------------------------------------------------------- */

/* A fresh ctx of type bwd for the n_args arguments `args`: edges to the tensor arguments when
 * executable, name from the class, input_of filled. New reference or NULL. */
static FunctionNode *function_node_new(PyTypeObject *bwd, PyObject *args, int n_tensors,
                                       int executable)
{
    FunctionNode *f;
    const char *nm = bwd->tp_name, *dot = strrchr(nm, '.');
    int n_args = (int)PyTuple_GET_SIZE(args), i = 0;
    f = (FunctionNode *)cddp_node_new_of_type(bwd, "Function", function_backward,
                                              executable ? n_tensors : 0);
    if (!f)
        return NULL;
    nm = dot ? dot + 1 : nm;
    f->name = PyMem_Malloc(strlen(nm) + 1);
    f->input_of = PyMem_Calloc((size_t)(n_args ? n_args : 1), sizeof(int));
    if (!f->name || !f->input_of) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(f->name, nm, strlen(nm) + 1);
    f->node.name = f->name;
    f->n_args = n_args;
    for (int p = 0; p < n_args; p++) {
        PyObject *a = PyTuple_GET_ITEM(args, p);
        if (!cddp_tensor_check(a)) {
            f->input_of[p] = -1;
            continue;
        }
        f->input_of[p] = i;
        if (executable && cddp_node_set_input(&f->node, i, (TensorObject *)a) < 0)
            goto fail;
        i++;
    }
    return f;
fail:
    Py_DECREF(f);
    return NULL;
}

/* Runs the user's forward (and setup_context) with grad mode off. New reference or NULL. */
static PyObject *run_forward(PyObject *cls, PyObject *ctx, int new_style, PyObject *args,
                             PyObject *kwargs)
{
    int saved_mode = cddp_grad_enabled;
    PyObject *fwd = NULL, *out = NULL, *call_args = NULL, *r;
    cddp_grad_enabled = 0;
    fwd = PyObject_GetAttrString(cls, "forward");
    if (!fwd)
        goto done;
    if (new_style) {
        out = PyObject_Call(fwd, args, kwargs);
        if (!out)
            goto done;
        r = PyObject_CallMethod(cls, "setup_context", "OOO", ctx, args, out);
        if (!r)
            Py_CLEAR(out);
        Py_XDECREF(r);
        goto done;
    }
    call_args = PyTuple_New(PyTuple_GET_SIZE(args) + 1);
    if (!call_args)
        goto done;
    PyTuple_SET_ITEM(call_args, 0, Py_NewRef(ctx));
    for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(args); p++)
        PyTuple_SET_ITEM(call_args, p + 1, Py_NewRef(PyTuple_GET_ITEM(args, p)));
    out = PyObject_Call(fwd, call_args, kwargs);
done:
    cddp_grad_enabled = saved_mode;
    Py_XDECREF(fwd);
    Py_XDECREF(call_args);
    return out;
}

/* _function_apply(cls, backward_cls, new_style, args, kwargs): Function.apply once Python
 * has bound the arguments (args: a tuple, one entry per forward input; kwargs: dict or None,
 * keyword-only arguments, passed to forward but not inputs). */
static PyObject *py_function_apply(PyObject *m, PyObject *a)
{
    PyObject *cls, *bwd, *args, *kwargs, *needs = NULL, *raw = NULL, *res = NULL, *d;
    FunctionNode *f = NULL;
    int new_style, n_tensors = 0, any = 0, executable;
    static const char *drop[] = {"to_save", "dirty_tensors", "non_differentiable"};
    if (!PyArg_ParseTuple(a, "OOpO!O:_function_apply", &cls, &bwd, &new_style, &PyTuple_Type,
                          &args, &kwargs))
        return NULL;
    if (!PyType_Check(bwd) || !PyType_IsSubtype((PyTypeObject *)bwd, cddp_state()->function_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "_function_apply: backward_cls must subclass _FunctionBase");
        return NULL;
    }
    if (kwargs == Py_None)
        kwargs = NULL;
    needs = PyTuple_New(PyTuple_GET_SIZE(args));
    if (!needs)
        return NULL;
    for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(args); p++) {
        PyObject *o = PyTuple_GET_ITEM(args, p);
        int ng = cddp_tensor_check(o) && cddp_needs_grad((TensorObject *)o);
        n_tensors += cddp_tensor_check(o);
        any |= ng;
        PyTuple_SET_ITEM(needs, p, PyBool_FromLong(ng));
    }
    executable = cddp_grad_enabled && any;
    f = function_node_new((PyTypeObject *)bwd, args, n_tensors, executable);
    if (!f || PyObject_SetAttrString((PyObject *)f, "needs_input_grad", needs) < 0 ||
        PyObject_SetAttrString((PyObject *)f, "materialize_grads", Py_True) < 0)
        goto done;
    raw = run_forward(cls, (PyObject *)f, new_style, args, kwargs);
    if (!raw)
        goto done;
    res = wrap_outputs(f, raw, args, executable);
    if (!res)
        goto done;
    if (executable && save_variables(f, res) < 0)
        Py_CLEAR(res);
    d = res ? PyObject_GenericGetDict((PyObject *)f, NULL) : NULL;
    for (int k = 0; d && k < 3; k++)               /* forward-only state, as torch drops it */
        if (PyDict_GetItemString(d, drop[k]) && PyDict_DelItemString(d, drop[k]) < 0)
            Py_CLEAR(res);
    if (!d)
        Py_CLEAR(res);
    Py_XDECREF(d);
    if (res && !PyTuple_Check(raw))
        Py_SETREF(res, Py_NewRef(PyTuple_GET_ITEM(res, 0)));
done:
    Py_XDECREF(needs);
    Py_XDECREF(raw);
    Py_XDECREF(f);
    return res;
}

PyMethodDef cddp_function_module_methods[] = {
    {"_function_apply", py_function_apply, METH_VARARGS,
     "_function_apply(cls, backward_cls, new_style, args, kwargs): autograd.Function.apply"},
    {NULL},
};

/* ---- the type ------------------------------------------------------------------------- */

/* For the higher-order engine (cddp/autograd/_higher/engine.py), which calls the user's
 * backward itself: _input_of -> (edge of forward argument p, or -1 for a non-tensor, ...);
 * _output_meta -> ((shape, dtype name) of tensor output k, or None, ...) */
static PyObject *function_input_of(FunctionNode *self, void *c)
{
    PyObject *tup = PyTuple_New(self->n_args);
    for (int p = 0; tup && p < self->n_args; p++) {
        PyObject *v = PyLong_FromLong(self->input_of[p]);
        if (!v)
            Py_CLEAR(tup);
        else
            PyTuple_SET_ITEM(tup, p, v);
    }
    return tup;
}

static PyObject *function_output_meta(FunctionNode *self, void *c)
{
    PyObject *tup = PyTuple_New(self->node.n_out);
    for (int k = 0; tup && k < self->node.n_out; k++) {
        const cddp_meta *m = &self->out_meta[k];
        PyObject *v = NULL, *shape;
        if (!self->out_tensor[k]) {
            v = Py_NewRef(Py_None);
        } else if ((shape = PyTuple_New(m->ndim))) {
            for (int d = 0; shape && d < m->ndim; d++) {
                PyObject *e = PyLong_FromLongLong(m->shape[d]);
                if (!e)
                    Py_CLEAR(shape);
                else
                    PyTuple_SET_ITEM(shape, d, e);
            }
            v = shape ? Py_BuildValue("(Os)", shape, cddp_dtype_name[m->dtype]) : NULL;
            Py_XDECREF(shape);
        }
        if (!v)
            Py_CLEAR(tup);
        else
            PyTuple_SET_ITEM(tup, k, v);
    }
    return tup;
}

static PyGetSetDef function_getset[] = {
    {"saved_tensors", (getter)function_saved_tensors, NULL, NULL, NULL},
    {"_input_of", (getter)function_input_of, NULL, NULL, NULL},
    {"_output_meta", (getter)function_output_meta, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot function_slots[] = {
    {Py_tp_dealloc, function_dealloc},
    {Py_tp_traverse, function_traverse},
    {Py_tp_getset, function_getset},
    {Py_tp_doc, "The graph node (and ctx) of one autograd.Function application."},
    {0, NULL},
};

static PyType_Spec function_spec = {
    .name = "cddp._C._FunctionBase",
    .basicsize = sizeof(FunctionNode),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = function_slots,
};

int cddp_function_type_init(PyObject *m, cddp_state_t *st)
{
    st->function_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &function_spec,
                                                                 (PyObject *)st->node_type);
    if (!st->function_type)
        return -1;
    return PyModule_AddObjectRef(m, "_FunctionBase", (PyObject *)st->function_type);
}
