/* distributed/ddp/reducer.c — DistributedDataParallel's gradient reducer (torch's C++ Reducer, in C).
 *
 *   r = _C.Reducer(params, buckets, process_group, world_size, grad_as_bucket_view)
 *       params:  list[Tensor]                 the module's trainable parameters
 *       buckets: list[list[int]]              parameter indices per bucket, in launch order
 *   r.prepare_for_backward(unused, skip=None) start an iteration; `unused` indices count as
 *                                             ready with zero gradient (find_unused_parameters);
 *                                             `skip` ones (unused on every rank) keep their .grad
 *                                             untouched, as torch leaves them
 *   r.mark_ready(i)                           post-accumulate-grad hook of parameter i
 *   r.finalize()                              wait for every bucket, write averaged grads back
 *   r.set_sync(flag)                          no_sync(): hooks do nothing while False
 *   r.unready() -> list[int]                  parameters of an unfinished iteration
 *   r.set_comm_hook(fn | None)                fn(bucket_index, buffer) -> object with wait()
 *                                             returning the reduced buffer
 *   r.buckets -> list[Tensor]                 the flat bucket buffers (one dtype each)
 *
 * A bucket is one contiguous buffer; parameter i owns [offset_i, offset_i + numel_i). Its grad
 * is divided by world_size as it is copied in (torch does the division in the bucket too), so
 * the SUM all-reduce yields the mean. Buckets launch strictly in index order — a ready bucket
 * waits for the ones before it — so every rank issues the same collective sequence whatever
 * order its gradients arrive in. The all-reduce runs on the group's worker thread while the
 * autograd engine keeps computing earlier layers; the hook that completes the last bucket
 * waits for all of them and writes the results to .grad (torch's finalize callback).
 */
#include "module.h"
#include <string.h>

typedef struct {
    TensorObject *buf;        /* (numel,) contiguous, the bucket's dtype */
    int64_t pending;          /* parameters still to arrive this iteration */
    PyObject *work;           /* in-flight Work (or hook future) */
} bucket_t;

typedef struct {
    PyObject_HEAD
    PyObject *params;         /* list[Tensor] */
    PyObject *pg;             /* process group (allreduce(t, op) -> Work) */
    PyObject *hook;           /* comm hook or NULL */
    Py_ssize_t nparams, nbuckets;
    bucket_t *b;
    int64_t *pbucket, *poffset;   /* per parameter */
    char *ready;              /* per parameter, this iteration */
    char *skip;               /* per parameter: unused on every rank, .grad left alone */
    Py_ssize_t next_launch;   /* first bucket not yet launched */
    int world;
    int sync;
    int in_iter;              /* between prepare_for_backward and finalize */
    int started;              /* some parameter became ready since prepare */
    int as_view;
} ReducerObject;


static int reducer_traverse(ReducerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->params);
    Py_VISIT(self->pg);
    Py_VISIT(self->hook);
    for (Py_ssize_t k = 0; self->b && k < self->nbuckets; k++) {
        Py_VISIT(self->b[k].buf);
        Py_VISIT(self->b[k].work);
    }
    return 0;
}

static int reducer_clear(ReducerObject *self)
{
    Py_CLEAR(self->params);
    Py_CLEAR(self->pg);
    Py_CLEAR(self->hook);
    for (Py_ssize_t k = 0; self->b && k < self->nbuckets; k++) {
        Py_CLEAR(self->b[k].buf);
        Py_CLEAR(self->b[k].work);
    }
    return 0;
}

static void reducer_dealloc(ReducerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    reducer_clear(self);
    PyMem_Free(self->b);
    PyMem_Free(self->pbucket);
    PyMem_Free(self->poffset);
    PyMem_Free(self->ready);
    PyMem_Free(self->skip);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static TensorObject *param_at(ReducerObject *self, Py_ssize_t i)
{
    return (TensorObject *)PyList_GET_ITEM(self->params, i);
}

/* Reducer(params, buckets, process_group, world_size, grad_as_bucket_view) */
static PyObject *reducer_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *params, *buckets, *pg;
    int world, as_view;
    ReducerObject *self;
    if (!PyArg_ParseTuple(args, "O!O!Oip:Reducer", &PyList_Type, &params, &PyList_Type,
                          &buckets, &pg, &world, &as_view))
        return NULL;
    if (world <= 0) {
        PyErr_SetString(PyExc_ValueError, "Reducer: world_size must be positive");
        return NULL;
    }
    self = (ReducerObject *)tp->tp_alloc(tp, 0);
    if (!self)
        return NULL;
    self->params = Py_NewRef(params);
    self->pg = Py_NewRef(pg);
    self->world = world;
    self->as_view = as_view;
    self->sync = 1;
    self->nparams = PyList_GET_SIZE(params);
    self->nbuckets = PyList_GET_SIZE(buckets);
    self->b = PyMem_Calloc((size_t)(self->nbuckets ? self->nbuckets : 1), sizeof(bucket_t));
    self->pbucket = PyMem_Calloc((size_t)(self->nparams ? self->nparams : 1), sizeof(int64_t));
    self->poffset = PyMem_Calloc((size_t)(self->nparams ? self->nparams : 1), sizeof(int64_t));
    self->ready = PyMem_Calloc((size_t)(self->nparams ? self->nparams : 1), 1);
    self->skip = PyMem_Calloc((size_t)(self->nparams ? self->nparams : 1), 1);
    if (!self->b || !self->pbucket || !self->poffset || !self->ready || !self->skip) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        PyObject *p = PyList_GET_ITEM(params, i);
        if (!cddp_tensor_check(p) || !cddp_is_floating(((TensorObject *)p)->dtype)) {
            PyErr_Format(PyExc_TypeError, "Reducer: parameter %zd is not a floating tensor", i);
            goto fail;
        }
        self->pbucket[i] = -1;
    }
    for (Py_ssize_t k = 0; k < self->nbuckets; k++) {
        PyObject *idx = PyList_GET_ITEM(buckets, k);
        int64_t total = 0;
        cddp_dtype dt = CDDP_FLOAT32;
        if (!PyList_Check(idx) || PyList_GET_SIZE(idx) == 0) {
            PyErr_Format(PyExc_ValueError, "Reducer: bucket %zd must be a non-empty list", k);
            goto fail;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(idx); j++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
            if (i == -1 && PyErr_Occurred())
                goto fail;
            if (i < 0 || i >= self->nparams || self->pbucket[i] != -1) {
                PyErr_Format(PyExc_ValueError, "Reducer: bad or repeated parameter index %zd", i);
                goto fail;
            }
            TensorObject *p = param_at(self, i);
            if (j == 0)
                dt = p->dtype;
            else if (p->dtype != dt) {
                PyErr_Format(PyExc_ValueError, "Reducer: bucket %zd mixes dtypes", k);
                goto fail;
            }
            self->pbucket[i] = k;
            self->poffset[i] = total;
            total += cddp_numel(p);
        }
        self->b[k].buf = cddp_tensor_new(dt, 1, &total, 1);
        if (!self->b[k].buf)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        if (self->pbucket[i] < 0) {
            PyErr_Format(PyExc_ValueError, "Reducer: parameter %zd is in no bucket", i);
            goto fail;
        }
    }
    self->next_launch = self->nbuckets;         /* nothing in flight until prepare */
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* The slot of parameter i in its bucket, as a view shaped like the parameter. */
static TensorObject *slot_view(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *buf = self->b[self->pbucket[i]].buf;
    int64_t strides[CDDP_MAX_DIMS];
    cddp_contiguous_strides(p->ndim, p->shape, strides);
    return cddp_tensor_alias(buf, p->ndim, p->shape, strides, buf->offset + self->poffset[i]);
}

/* dst = src / world over n elements (src any layout via a contiguous copy when needed). */
static int copy_scaled(TensorObject *dst, TensorObject *src, int world)
{
    TensorObject *s = src->dtype == dst->dtype ? cddp_tensor_contiguous_raw(src)
                                               : cddp_tensor_cast_raw(src, dst->dtype);
    int64_t n = cddp_numel(dst);
    if (!s)
        return -1;
    if (dst->dtype == CDDP_FLOAT32) {
        float *d = (float *)cddp_data(dst), w = (float)world;
        const float *v = (const float *)cddp_data(s);
        for (int64_t k = 0; k < n; k++) d[k] = v[k] / w;
    } else if (dst->dtype == CDDP_FLOAT64) {
        double *d = (double *)cddp_data(dst), w = (double)world;
        const double *v = (const double *)cddp_data(s);
        for (int64_t k = 0; k < n; k++) d[k] = v[k] / w;
    } else {                              /* float16/bfloat16: torch's div_ in the dtype */
        char *d = cddp_data(dst);
        const char *v = cddp_data(s);
        float w = (float)world;
        for (int64_t k = 0; k < n; k++)
            cddp_store_double(dst->dtype, d + 2 * k, (float)cddp_load_double(dst->dtype, v + 2 * k) / w);
    }
    Py_DECREF(s);
    return 0;
}

static int launch(ReducerObject *self, Py_ssize_t k)
{
    PyObject *w;
    /* The last bucket has nothing left to overlap with, and a world of one nothing to wait
     * for: those run synchronously (inline on this thread when the group is idle), sparing a
     * hand-off to the worker thread and back. */
    int sync = k == self->nbuckets - 1 || self->world == 1;
    if (self->hook)
        w = PyObject_CallFunction(self->hook, "nO", k, self->b[k].buf);
    else
        w = PyObject_CallMethod(self->pg, "allreduce", "Oii", self->b[k].buf, 0, sync);
    if (!w)
        return -1;
    if (w == Py_None)                 /* done already: nothing to wait for in finalize */
        Py_CLEAR(w);
    Py_XSETREF(self->b[k].work, w);
    return 0;
}

/* Launch every ready bucket in index order, from next_launch on. */
static int launch_ready(ReducerObject *self)
{
    while (self->next_launch < self->nbuckets && self->b[self->next_launch].pending == 0) {
        if (launch(self, self->next_launch) < 0)
            return -1;
        self->next_launch++;
    }
    return 0;
}

/* Wait for every bucket and write each parameter's averaged gradient to .grad. */
static int finalize(ReducerObject *self)
{
    for (Py_ssize_t k = 0; k < self->nbuckets; k++) {
        PyObject *w = self->b[k].work, *r;
        if (!w)
            continue;
        self->b[k].work = NULL;
        r = PyObject_CallMethod(w, "wait", NULL);
        Py_DECREF(w);
        if (!r)
            return -1;
        if (self->hook && cddp_tensor_check(r) && r != (PyObject *)self->b[k].buf) {
            /* a comm hook's future yields the reduced bucket (maybe another tensor) */
            if (cddp_copy_into(self->b[k].buf, (TensorObject *)r) < 0) {
                Py_DECREF(r);
                return -1;
            }
        }
        Py_DECREF(r);
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        TensorObject *p = param_at(self, i), *view, *g = (TensorObject *)p->grad;
        int rc = 0;
        if (self->skip[i])
            continue;
        view = slot_view(self, i);
        if (!view)
            return -1;
        if (self->as_view) {
            Py_XSETREF(p->grad, (PyObject *)view);
            continue;
        }
        if (g && cddp_tensor_check((PyObject *)g) && g->dtype == p->dtype &&
            cddp_numel(g) == cddp_numel(p) && g->storage != view->storage) {
            rc = cddp_copy_into(g, view);
        } else {
            TensorObject *c = cddp_tensor_new(p->dtype, p->ndim, p->shape, 0);
            rc = c ? cddp_copy_into(c, view) : -1;
            if (c && rc == 0)
                Py_XSETREF(p->grad, (PyObject *)c);
            else
                Py_XDECREF(c);
        }
        Py_DECREF(view);
        if (rc < 0)
            return -1;
    }
    self->started = 0;
    self->in_iter = 0;
    return 0;
}

/* Set flags[i] = 1 for every index in seq (None: none); IndexError out of range. */
static int index_flags(ReducerObject *self, PyObject *seq, char *flags)
{
    PyObject *fast;
    memset(flags, 0, (size_t)self->nparams);
    if (seq == Py_None)
        return 0;
    fast = PySequence_Fast(seq, "expected a sequence of parameter indices");
    if (!fast)
        return -1;
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fast); j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, j));
        if ((i == -1 && PyErr_Occurred()) || i < 0 || i >= self->nparams) {
            Py_DECREF(fast);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "parameter index out of range");
            return -1;
        }
        flags[i] = 1;
    }
    Py_DECREF(fast);
    return 0;
}

static PyObject *reducer_prepare(ReducerObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *unused, *skip = Py_None;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "prepare_for_backward(unused, skip=None)");
        return NULL;
    }
    unused = args[0];
    if (nargs == 2)
        skip = args[1];
    if (index_flags(self, skip, self->skip) < 0)
        return NULL;
    for (Py_ssize_t k = 0; k < self->nbuckets; k++)
        Py_CLEAR(self->b[k].work);
    memset(self->ready, 0, (size_t)self->nparams);
    for (Py_ssize_t k = 0; k < self->nbuckets; k++)
        self->b[k].pending = 0;
    for (Py_ssize_t i = 0; i < self->nparams; i++)
        self->b[self->pbucket[i]].pending++;
    self->next_launch = 0;
    self->started = 0;
    self->in_iter = 1;
    if (unused != Py_None) {
        char *flags = PyMem_Calloc((size_t)(self->nparams ? self->nparams : 1), 1);
        if (!flags)
            return PyErr_NoMemory();
        if (index_flags(self, unused, flags) < 0) {
            PyMem_Free(flags);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < self->nparams; i++) {
            if (!flags[i])
                continue;
            TensorObject *view = slot_view(self, i);
            if (!view) {
                PyMem_Free(flags);
                return NULL;
            }
            memset(cddp_data(view), 0,
                   (size_t)(cddp_numel(view) * (int64_t)cddp_dtype_size[view->dtype]));
            Py_DECREF(view);
            self->ready[i] = 1;
            self->b[self->pbucket[i]].pending--;
        }
        PyMem_Free(flags);
    }
    if (launch_ready(self) < 0)
        return NULL;
    if (self->next_launch == self->nbuckets && self->nparams > 0 && finalize(self) < 0)
        return NULL;                  /* every parameter unused: nothing left to wait for */
    Py_RETURN_NONE;
}

static PyObject *reducer_mark_ready(ReducerObject *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    TensorObject *p, *view;
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (!self->sync)
        Py_RETURN_NONE;
    if (i < 0 || i >= self->nparams) {
        PyErr_SetString(PyExc_IndexError, "Reducer.mark_ready: index out of range");
        return NULL;
    }
    if (!self->in_iter)       /* as torch: hooks outside an iteration (a second backward */
        Py_RETURN_NONE;       /* on the same forward, no_sync forwards) reduce nothing */
    if (self->ready[i]) {
        PyErr_Format(PyExc_RuntimeError,
                     "Expected to mark a variable ready only once. This error is caused by one "
                     "of the following reasons: 1) Use of a module parameter outside the "
                     "`forward` function. 2) Reused parameters in multiple reentrant backward "
                     "passes. Parameter index %zd was marked ready twice in this iteration "
                     "(with find_unused_parameters=True a parameter used after forward also "
                     "triggers this).", i);
        return NULL;
    }
    p = param_at(self, i);
    if (!p->grad || !cddp_tensor_check(p->grad)) {
        PyErr_Format(PyExc_RuntimeError, "Reducer: parameter %zd has no gradient when marked "
                     "ready", i);
        return NULL;
    }
    view = slot_view(self, i);
    if (!view)
        return NULL;
    /* torch: with a comm hook the hook owns the averaging (allreduce_hook divides) */
    int rc = copy_scaled(view, (TensorObject *)p->grad, self->hook ? 1 : self->world);
    Py_DECREF(view);
    if (rc < 0)
        return NULL;
    self->ready[i] = 1;
    self->started = 1;
    self->b[self->pbucket[i]].pending--;
    if (launch_ready(self) < 0)
        return NULL;
    if (self->next_launch == self->nbuckets && finalize(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *reducer_finalize(ReducerObject *self, PyObject *unused)
{
    if (!self->in_iter)
        Py_RETURN_NONE;
    if (self->next_launch < self->nbuckets) {
        PyErr_SetString(PyExc_RuntimeError, "Reducer.finalize: some buckets are not ready");
        return NULL;
    }
    if (finalize(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Parameters of an iteration whose backward started but did not finish. */
static PyObject *reducer_unready(ReducerObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    if (!out || !self->in_iter || !self->started)
        return out;
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        if (!self->ready[i]) {
            PyObject *v = PyLong_FromSsize_t(i);
            if (!v || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(v);
        }
    }
    return out;
}

static PyObject *reducer_set_sync(ReducerObject *self, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0)
        return NULL;
    self->sync = v;
    Py_RETURN_NONE;
}

static PyObject *reducer_set_comm_hook(ReducerObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "comm hook must be callable or None");
        return NULL;
    }
    Py_XSETREF(self->hook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *reducer_buckets(ReducerObject *self, void *c)
{
    PyObject *out = PyList_New(self->nbuckets);
    for (Py_ssize_t k = 0; out && k < self->nbuckets; k++)
        PyList_SET_ITEM(out, k, Py_NewRef(self->b[k].buf));
    return out;
}

static PyObject *reducer_bucket_params(ReducerObject *self, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    PyObject *out;
    if ((k == -1 && PyErr_Occurred()))
        return NULL;
    if (k < 0 || k >= self->nbuckets) {
        PyErr_SetString(PyExc_IndexError, "bucket index out of range");
        return NULL;
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < self->nparams; i++) {
        if (self->pbucket[i] == k) {
            PyObject *v = PyLong_FromSsize_t(i);
            if (!v || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                Py_CLEAR(out);
            }
            Py_XDECREF(v);
        }
    }
    return out;
}

static PyMethodDef reducer_methods[] = {
    {"prepare_for_backward", (PyCFunction)(void (*)(void))reducer_prepare, METH_FASTCALL, NULL},
    {"mark_ready", (PyCFunction)reducer_mark_ready, METH_O, NULL},
    {"finalize", (PyCFunction)reducer_finalize, METH_NOARGS, NULL},
    {"unready", (PyCFunction)reducer_unready, METH_NOARGS, NULL},
    {"set_sync", (PyCFunction)reducer_set_sync, METH_O, NULL},
    {"set_comm_hook", (PyCFunction)reducer_set_comm_hook, METH_O, NULL},
    {"bucket_params", (PyCFunction)reducer_bucket_params, METH_O, NULL},
    {NULL},
};

static PyGetSetDef reducer_getset[] = {
    {"buckets", (getter)reducer_buckets, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot reducer_slots[] = {
    {Py_tp_new, reducer_new},
    {Py_tp_dealloc, reducer_dealloc},
    {Py_tp_traverse, reducer_traverse},
    {Py_tp_clear, reducer_clear},
    {Py_tp_methods, reducer_methods},
    {Py_tp_getset, reducer_getset},
    {Py_tp_doc, "DDP gradient reducer: buckets, ordered launches, averaged grads."},
    {0, NULL},
};

static PyType_Spec reducer_spec = {
    .name = "cddp._C.Reducer",
    .basicsize = sizeof(ReducerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = reducer_slots,
};

int cddp_reducer_init(PyObject *m, cddp_state_t *st)
{
    st->reducer_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &reducer_spec, NULL);
    if (!st->reducer_type)
        return -1;
    return PyModule_AddObjectRef(m, "Reducer", (PyObject *)st->reducer_type);
}
