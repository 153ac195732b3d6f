/* distributed/ddp/reducer.c — DistributedDataParallel's gradient reducer (torch's C++ Reducer, in C).
 *
 *   r = _C.Reducer(params, buckets, process_group, world_size, grad_as_bucket_view,
 *                  inplace_min_bytes)
 *       params:  list[Tensor]                 the module's trainable parameters
 *       buckets: list[list[int]]              parameter indices per bucket, in launch order
 *   r.prepare_for_backward(unused, skip=None) start an iteration; `unused` indices count as
 *                                             ready with zero gradient (find_unused_parameters);
 *                                             `skip` ones (unused on every rank) keep their .grad
 *                                             untouched, as torch leaves them
 *   r.after_forward(sync)                     the same with nothing unused, when sync is true
 *                                             and grad mode is on; else set_sync(False)
 *   r.mark_ready(i, param=None)               post-accumulate-grad hook of parameter i
 *   r.finalize()                              wait for every unit, leave averaged grads in .grad
 *   r.set_sync(flag)                          no_sync(): hooks do nothing while False
 *   r.set_divide_factor(n)                    this iteration's gradients are sums divided by n
 *                                             (Join's divide_by_initial_world_size=False: the
 *                                             ranks still active), not by the group's size;
 *                                             0 or the end of the iteration restores that
 *   r.unready() -> list[int]                  parameters of an unfinished iteration
 *   r.set_comm_hook(fn | None)                fn(bucket_index, buffer) -> object with wait()
 *                                             returning the reduced buffer
 *   r.buckets -> list[Tensor]                 the flat bucket buffers (one dtype each)
 *   r.units() -> list[(numel, dtype, bucket)] the collectives of one iteration, in issue order
 *   r.stats() / r.reset_stats()               seconds spent per phase (the profile of bench/ddp.py)
 *
 * Units. A bucket's parameters of at least inplace_min_bytes are reduced in place on
 * param.grad, one collective each (backward writes the gradient once, the all_reduce reads and
 * writes it there, the optimizer reads the same memory — no copies). The bucket's smaller
 * parameters share one flat buffer (their grads are copied in, or, with grad_as_bucket_view,
 * live there as views once the first iteration has re-pointed them) and one collective.
 * Each of those collectives is a "unit"; units launch strictly in order — a ready unit waits
 * for the ones before it — so every rank issues the same sequence whatever order its
 * gradients arrive in, and a unit launches the moment its last gradient arrives (a large
 * gradient does not wait for the rest of its bucket).
 * Averaging is the collective's ReduceOp.AVG (the division folded into the reduction); with
 * a comm hook every parameter goes through the flat buffers (whole buckets, torch's
 * GradBucket) and the hook averages.
 *
 * World size 1 without a comm hook: nothing is copied and no collective runs; the reducer
 * keeps only the bookkeeping behind torch's errors (a parameter marked ready twice, an
 * unfinished reduction before the next forward).
 *
 * Shared arena: from the end of forward to the end of the iteration the reducer arms it
 * (common/arena.h), so the backward the engine runs allocates there, as do the flat buffers:
 * the gradients lie where the host's other ranks map them, and the shared-memory transport
 * all-reduces them in place (distributed/pg/shm.c).
 *
 * The all-reduces run on the group's worker thread while the autograd engine keeps computing
 * earlier layers; the last unit runs inline on this thread (nothing left to overlap), and the
 * hook that completes the last unit waits for all of them (torch's finalize callback).
 */
#include "module.h"
#include "distributed/pg/reduce_kernels.h"
#include <string.h>
#include <time.h>

typedef struct {
    Py_ssize_t param;         /* in-place unit: its parameter; -1: its bucket's flat buffer */
    Py_ssize_t bucket;
    int64_t pending;          /* parameters still to arrive this iteration */
    PyObject *work;           /* in-flight Work (or hook future) */
    PyObject *tensor;         /* what it reduces, held until finalize */
} unit_t;

typedef struct {
    PyObject_HEAD
    PyObject *params;         /* list[Tensor] */
    PyObject *bucket_lists;   /* list[list[int]], as given */
    PyObject *pg;             /* process group (allreduce(t, op, sync) -> Work) */
    PyObject *hook;           /* comm hook or NULL */
    Py_ssize_t nparams, nbuckets, nunits;
    TensorObject **buf;       /* [nbuckets] flat buffer of the bucket's small params, or NULL */
    unit_t *u;                /* [nunits] */
    int64_t *pbucket, *poffset, *punit;   /* per parameter; poffset -1: reduced in place */
    char *ready, *skip, *unused;          /* per parameter, this iteration */
    Py_ssize_t next_launch;   /* first unit not yet launched */
    Py_ssize_t nready;        /* parameters ready this iteration */
    int64_t inplace_min;      /* bytes */
    int world;
    int sync;
    int in_iter;              /* between prepare_for_backward and finalize */
    int started;              /* some parameter became ready since prepare */
    int as_view;
    int bypass;               /* world 1, no hook: bookkeeping only */
    int inline_all;           /* every unit runs synchronously on the calling thread */
    int divide;               /* > 0: reduce as SUM, then divide by it (this iteration only) */
    double t_copy, t_launch, t_wait, t_write;   /* seconds, since reset_stats */
    int64_t n_iters, n_launches, copy_bytes;
} ReducerObject;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int reducer_traverse(ReducerObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->params);
    Py_VISIT(self->bucket_lists);
    Py_VISIT(self->pg);
    Py_VISIT(self->hook);
    for (Py_ssize_t k = 0; self->buf && k < self->nbuckets; k++)
        Py_VISIT(self->buf[k]);
    for (Py_ssize_t j = 0; self->u && j < self->nunits; j++) {
        Py_VISIT(self->u[j].work);
        Py_VISIT(self->u[j].tensor);
    }
    return 0;
}

static void clear_units(ReducerObject *self)
{
    for (Py_ssize_t j = 0; self->u && j < self->nunits; j++) {
        Py_CLEAR(self->u[j].work);
        Py_CLEAR(self->u[j].tensor);
    }
}

static int reducer_clear(ReducerObject *self)
{
    Py_CLEAR(self->params);
    Py_CLEAR(self->bucket_lists);
    Py_CLEAR(self->pg);
    Py_CLEAR(self->hook);
    for (Py_ssize_t k = 0; self->buf && k < self->nbuckets; k++)
        Py_CLEAR(self->buf[k]);
    clear_units(self);
    return 0;
}

static void reducer_dealloc(ReducerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    reducer_clear(self);
    PyMem_Free(self->buf);
    PyMem_Free(self->u);
    PyMem_Free(self->pbucket);
    PyMem_Free(self->poffset);
    PyMem_Free(self->punit);
    PyMem_Free(self->ready);
    PyMem_Free(self->skip);
    PyMem_Free(self->unused);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static TensorObject *param_at(ReducerObject *self, Py_ssize_t i)
{
    return (TensorObject *)PyList_GET_ITEM(self->params, i);
}

static int64_t param_bytes(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i);
    return cddp_numel(p) * (int64_t)cddp_dtype_size[p->dtype];
}

/* ---- the plan: flat buffers and units ----------------------------------------------------- */

/* Bucket k's flat buffer of `flat` elements, from the shared arena (the transport reduces it
 * in place there): one past the shm one-step path's 16 KiB but under the block cache's 64 KiB
 * (smaller blocks never come from the arena) is a 64 KiB storage viewed as its first `flat`
 * elements. 0, or -1 with an exception. */
static int flat_buffer(ReducerObject *self, Py_ssize_t k, cddp_dtype dt, int64_t flat)
{
    int64_t es = (int64_t)cddp_dtype_size[dt], one = 1, b = flat * es;
    int64_t alloc = b > (16 << 10) && b < (64 << 10) ? (64 << 10) / es : flat;
    int scope = cddp_arena_scope;
    TensorObject *whole;
    cddp_arena_scope = 1;
    whole = cddp_tensor_new(dt, 1, &alloc, 1);
    cddp_arena_scope = scope;
    self->buf[k] = whole && alloc != flat ? cddp_tensor_alias(whole, 1, &flat, &one, 0) : whole;
    Py_XDECREF(alloc != flat ? whole : NULL);      /* the alias holds the storage */
    return self->buf[k] ? 0 : -1;
}

/* Lay the buckets out for the current mode (hook or not): which parameters are reduced in
 * place, each flat buffer, the unit list. Drops the previous plan. 0, or -1 with an
 * exception. Called at construction and when a comm hook is set (before any backward). */
static int plan(ReducerObject *self)
{
    Py_ssize_t nu = 0;
    int inplace_ok = !self->hook && self->world > 1;
    clear_units(self);
    for (Py_ssize_t k = 0; k < self->nbuckets; k++)
        Py_CLEAR(self->buf[k]);
    PyMem_Free(self->u);
    self->u = NULL;
    self->nunits = 0;
    self->bypass = !self->hook && self->world == 1;
    if (self->bypass)
        return 0;
    self->u = PyMem_Calloc((size_t)self->nparams + (size_t)self->nbuckets + 1, sizeof(unit_t));
    if (!self->u) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < self->nbuckets; k++) {
        PyObject *idx = PyList_GET_ITEM(self->bucket_lists, k);
        int64_t flat = 0;
        cddp_dtype dt = param_at(self, PyLong_AsSsize_t(PyList_GET_ITEM(idx, 0)))->dtype;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(idx); j++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
            if (inplace_ok && param_bytes(self, i) >= self->inplace_min) {
                self->poffset[i] = -1;
                self->punit[i] = nu;
                self->u[nu++] = (unit_t){.param = i, .bucket = k};
            } else {
                self->poffset[i] = flat;
                flat += cddp_numel(param_at(self, i));
            }
        }
        if (flat == 0)
            continue;
        if (flat_buffer(self, k, dt, flat) < 0)
            return -1;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(idx); j++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
            if (self->poffset[i] >= 0)
                self->punit[i] = nu;
        }
        self->u[nu++] = (unit_t){.param = -1, .bucket = k};
    }
    self->nunits = nu;
    self->next_launch = nu;                 /* nothing in flight until prepare */
    return 0;
}

/* Check the bucket lists: every parameter in exactly one bucket, one dtype per bucket. */
static int check_buckets(ReducerObject *self)
{
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        PyObject *p = PyList_GET_ITEM(self->params, i);
        if (!cddp_tensor_check(p) || !cddp_is_floating(((TensorObject *)p)->dtype)) {
            PyErr_Format(PyExc_TypeError, "Reducer: parameter %zd is not a floating tensor", i);
            return -1;
        }
        self->pbucket[i] = -1;
    }
    for (Py_ssize_t k = 0; k < self->nbuckets; k++) {
        PyObject *idx = PyList_GET_ITEM(self->bucket_lists, k);
        if (!PyList_Check(idx) || PyList_GET_SIZE(idx) == 0) {
            PyErr_Format(PyExc_ValueError, "Reducer: bucket %zd must be a non-empty list", k);
            return -1;
        }
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(idx); j++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
            if (i == -1 && PyErr_Occurred())
                return -1;
            if (i < 0 || i >= self->nparams || self->pbucket[i] != -1) {
                PyErr_Format(PyExc_ValueError, "Reducer: bad or repeated parameter index %zd", i);
                return -1;
            }
            if (j > 0 && param_at(self, i)->dtype !=
                             param_at(self, PyLong_AsSsize_t(PyList_GET_ITEM(idx, 0)))->dtype) {
                PyErr_Format(PyExc_ValueError, "Reducer: bucket %zd mixes dtypes", k);
                return -1;
            }
            self->pbucket[i] = k;
        }
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        if (self->pbucket[i] < 0) {
            PyErr_Format(PyExc_ValueError, "Reducer: parameter %zd is in no bucket", i);
            return -1;
        }
    }
    return 0;
}

/* Reducer(params, buckets, process_group, world_size, grad_as_bucket_view,
 *         inplace_min_bytes=2**62) */
static PyObject *reducer_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *params, *buckets, *pg;
    int world, as_view;
    long long inplace_min = (long long)1 << 62;
    int inline_all = 0;
    ReducerObject *self;
    size_t np;
    if (!PyArg_ParseTuple(args, "O!O!Oip|Lp:Reducer", &PyList_Type, &params, &PyList_Type,
                          &buckets, &pg, &world, &as_view, &inplace_min, &inline_all))
        return NULL;
    if (world <= 0) {
        PyErr_SetString(PyExc_ValueError, "Reducer: world_size must be positive");
        return NULL;
    }
    self = (ReducerObject *)tp->tp_alloc(tp, 0);
    if (!self)
        return NULL;
    self->params = Py_NewRef(params);
    self->bucket_lists = Py_NewRef(buckets);
    self->pg = Py_NewRef(pg);
    self->world = world;
    self->as_view = as_view;
    self->inplace_min = inplace_min < 0 ? 0 : inplace_min;
    self->inline_all = inline_all;
    self->sync = 1;
    self->nparams = PyList_GET_SIZE(params);
    self->nbuckets = PyList_GET_SIZE(buckets);
    np = (size_t)(self->nparams ? self->nparams : 1);
    self->buf = PyMem_Calloc((size_t)(self->nbuckets ? self->nbuckets : 1), sizeof(TensorObject *));
    self->pbucket = PyMem_Calloc(np, sizeof(int64_t));
    self->poffset = PyMem_Calloc(np, sizeof(int64_t));
    self->punit = PyMem_Calloc(np, sizeof(int64_t));
    self->ready = PyMem_Calloc(np, 1);
    self->skip = PyMem_Calloc(np, 1);
    self->unused = PyMem_Calloc(np, 1);
    if (!self->buf || !self->pbucket || !self->poffset || !self->punit || !self->ready ||
        !self->skip || !self->unused) {
        PyErr_NoMemory();
        goto fail;
    }
    if (check_buckets(self) < 0 || plan(self) < 0)
        goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* ---- gradients and slots ---------------------------------------------------------------- */

/* The slot of flat parameter i in its bucket, as a view shaped like the parameter. */
static TensorObject *slot_view(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *buf = self->buf[self->pbucket[i]];
    int64_t strides[CDDP_MAX_DIMS];
    cddp_contiguous_strides(p->ndim, p->shape, strides);
    return cddp_tensor_alias(buf, p->ndim, p->shape, strides, buf->offset + self->poffset[i]);
}

/* Whether g can be reduced in place as parameter p's gradient: a contiguous tensor of p's
 * dtype and shape. */
static int grad_usable(TensorObject *p, PyObject *g)
{
    TensorObject *t = (TensorObject *)g;
    if (!g || !cddp_tensor_check(g) || t->dtype != p->dtype || t->ndim != p->ndim ||
        !cddp_is_contiguous(t))
        return 0;
    return memcmp(t->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim) == 0;
}

/* Whether flat parameter i's .grad already is its slot (a view left by an earlier finalize). */
static int grad_is_slot(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *buf = self->buf[self->pbucket[i]];
    TensorObject *g = (TensorObject *)p->grad;
    return grad_usable(p, p->grad) && g->storage == buf->storage &&
           g->offset == buf->offset + self->poffset[i];
}

/* Copy flat parameter i's gradient into its slot (unless it lives there). */
static int copy_to_slot(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *view;
    int rc;
    if (grad_is_slot(self, i))
        return 0;
    view = slot_view(self, i);
    if (!view)
        return -1;
    if (grad_usable(p, p->grad)) {
        memcpy(cddp_data(view), cddp_data((TensorObject *)p->grad),
               (size_t)param_bytes(self, i));
        rc = 0;
    } else {
        rc = cddp_copy_into(view, (TensorObject *)p->grad);
    }
    self->copy_bytes += param_bytes(self, i);
    Py_DECREF(view);
    return rc;
}

/* The tensor in-place unit j reduces this iteration (new reference): param.grad, replaced by
 * a contiguous copy when it cannot be reduced in place; zeros when the parameter was unused
 * here (into .grad, as torch's zeroed bucket view) or on every rank (a scratch: .grad stays). */
static PyObject *inplace_tensor(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *t;
    if (self->skip[i] || (self->unused[i] && !grad_usable(p, p->grad))) {
        t = cddp_tensor_new(p->dtype, p->ndim, p->shape, 1);
        if (t && !self->skip[i])
            Py_XSETREF(p->grad, Py_NewRef((PyObject *)t));
        return (PyObject *)t;
    }
    if (self->unused[i]) {
        memset(cddp_data((TensorObject *)p->grad), 0, (size_t)param_bytes(self, i));
        return Py_NewRef(p->grad);
    }
    if (grad_usable(p, p->grad))
        return Py_NewRef(p->grad);
    t = cddp_tensor_new(p->dtype, p->ndim, p->shape, 0);
    if (t && cddp_copy_into(t, (TensorObject *)p->grad) < 0)
        Py_CLEAR(t);
    if (t)
        Py_XSETREF(p->grad, Py_NewRef((PyObject *)t));
    return (PyObject *)t;
}

/* ---- launching and finishing ---------------------------------------------------------- */

static int launch(ReducerObject *self, Py_ssize_t j)
{
    unit_t *u = &self->u[j];
    PyObject *w, *t;
    /* The last unit has nothing left to overlap with: it runs synchronously (inline on this
     * thread when the group is idle), sparing a hand-off to the worker thread and back. */
    int sync = self->inline_all || j == self->nunits - 1;
    double t0 = now_s();
    t = u->param >= 0 ? inplace_tensor(self, u->param) : Py_NewRef((PyObject *)self->buf[u->bucket]);
    if (!t)
        return -1;
    Py_XSETREF(u->tensor, t);
    if (self->hook)
        w = PyObject_CallFunction(self->hook, "nO", u->bucket, t);
    else
        w = PyObject_CallMethod(self->pg, "allreduce", "Oii", t,
                                self->divide > 0 ? CDDP_RED_SUM : CDDP_RED_AVG, sync);
    if (!w)
        return -1;
    if (w == Py_None)                 /* done already: nothing to wait for in finalize */
        Py_CLEAR(w);
    Py_XSETREF(u->work, w);
    self->n_launches++;
    self->t_launch += now_s() - t0;
    return 0;
}

/* Launch every ready unit in order, from next_launch on. */
static int launch_ready(ReducerObject *self)
{
    while (self->next_launch < self->nunits && self->u[self->next_launch].pending == 0) {
        if (launch(self, self->next_launch) < 0)
            return -1;
        self->next_launch++;
    }
    return 0;
}

static void end_iteration(ReducerObject *self)
{
    cddp_arena_armed = 0;
    self->divide = 0;
    self->started = 0;
    self->in_iter = 0;
    self->n_iters++;
}

/* Wait for every unit; a comm hook's future may yield another tensor: copy it back. */
static int wait_all(ReducerObject *self)
{
    double t0 = now_s();
    for (Py_ssize_t j = 0; j < self->nunits; j++) {
        unit_t *u = &self->u[j];
        PyObject *w = u->work, *r;
        if (!w)
            continue;
        u->work = NULL;
        r = PyObject_CallMethod(w, "wait", NULL);
        Py_DECREF(w);
        if (!r)
            return -1;
        if (self->hook && cddp_tensor_check(r) && r != u->tensor &&
            cddp_copy_into((TensorObject *)u->tensor, (TensorObject *)r) < 0) {
            Py_DECREF(r);
            return -1;
        }
        Py_DECREF(r);
    }
    self->t_wait += now_s() - t0;
    return 0;
}

/* Write flat parameter i's reduced gradient to .grad: the slot itself (as a view) with
 * grad_as_bucket_view, else copied into the existing .grad or a new tensor. */
static int write_back(ReducerObject *self, Py_ssize_t i)
{
    TensorObject *p = param_at(self, i), *view, *g = (TensorObject *)p->grad;
    int rc = 0;
    if (grad_is_slot(self, i))
        return 0;
    view = slot_view(self, i);
    if (!view)
        return -1;
    if (self->as_view) {
        Py_XSETREF(p->grad, (PyObject *)view);
        return 0;
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
    return rc;
}

/* Wait for every unit and leave each parameter's averaged gradient in .grad. */
static int finalize(ReducerObject *self)
{
    double t0;
    if (wait_all(self) < 0)
        return -1;
    t0 = now_s();
    for (Py_ssize_t j = 0; self->divide > 0 && !self->hook && j < self->nunits; j++) {
        TensorObject *t = (TensorObject *)self->u[j].tensor;    /* contiguous (launch) */
        if (t)
            pg_divide(cddp_data(t), cddp_numel(t), t->dtype, self->divide);
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++)
        if (!self->skip[i] && self->poffset[i] >= 0 && write_back(self, i) < 0)
            return -1;
    clear_units(self);
    self->t_write += now_s() - t0;
    end_iteration(self);
    return 0;
}

/* ---- the iteration's entry points ------------------------------------------------------ */

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

/* With grad_as_bucket_view: a flat buffer whose storage some tensor holds besides the
 * bucket and its parameters' current .grad views (a .grad the user kept across
 * zero_grad(set_to_none=True)) is replaced by a fresh one before backward writes it, so the
 * kept tensor keeps its values, as torch's does. 0, or -1 with an exception. */
static int renew_held_buffers(ReducerObject *self)
{
    for (Py_ssize_t k = 0; self->as_view && !self->bypass && k < self->nbuckets; k++) {
        PyObject *idx = PyList_GET_ITEM(self->bucket_lists, k);
        TensorObject *old = self->buf[k];
        Py_ssize_t views = 0, flats = 0;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(idx); j++) {   /* plan(): none if !old */
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(idx, j));
            flats += self->poffset[i] >= 0;
            views += self->poffset[i] >= 0 && grad_is_slot(self, i);
        }
        if (!old || views == flats || old->storage->refcnt <= 1 + views)
            continue;
        self->buf[k] = NULL;
        if (flat_buffer(self, k, old->dtype, cddp_numel(old)) < 0) {
            self->buf[k] = old;
            return -1;
        }
        Py_DECREF(old);
    }
    return 0;
}

/* Start an iteration with the unused / skip flags already set: reset the counts, count the
 * unused parameters as ready (their flat slots zeroed), launch what is ready. 0, or -1. */
static int begin_iteration(ReducerObject *self)
{
    clear_units(self);
    if (renew_held_buffers(self) < 0)
        return -1;
    memset(self->ready, 0, (size_t)self->nparams);
    for (Py_ssize_t j = 0; j < self->nunits; j++)
        self->u[j].pending = 0;
    for (Py_ssize_t i = 0; !self->bypass && i < self->nparams; i++)
        self->u[self->punit[i]].pending++;
    self->next_launch = 0;
    self->nready = 0;
    self->started = 0;
    self->in_iter = 1;
    cddp_arena_armed = !self->bypass;     /* the backward's gradients in the shared arena */
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        if (!self->unused[i])
            continue;
        self->ready[i] = 1;
        self->nready++;
        if (self->bypass)
            continue;               /* unused at world 1 = unused everywhere: .grad left alone */
        if (self->poffset[i] >= 0) {
            TensorObject *view = slot_view(self, i);
            if (!view)
                return -1;
            memset(cddp_data(view), 0, (size_t)param_bytes(self, i));
            Py_DECREF(view);
        }
        self->u[self->punit[i]].pending--;
    }
    if (self->nparams > 0 && self->nready == self->nparams) {
        if (self->bypass) {         /* every parameter unused: nothing left to wait for */
            end_iteration(self);
            return 0;
        }
        return launch_ready(self) < 0 || finalize(self) < 0 ? -1 : 0;
    }
    return self->bypass ? 0 : launch_ready(self);
}

static PyObject *reducer_prepare(ReducerObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "prepare_for_backward(unused, skip=None)");
        return NULL;
    }
    if (index_flags(self, nargs == 2 ? args[1] : Py_None, self->skip) < 0 ||
        index_flags(self, args[0], self->unused) < 0 || begin_iteration(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* after_forward(sync): the end of DistributedDataParallel.forward without unused-parameter
 * search: reduce in the coming backward when sync is true and grad mode is on (then start
 * the iteration, nothing unused), else let the hooks do nothing (no_sync, no_grad). */
static PyObject *reducer_after_forward(ReducerObject *self, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0)
        return NULL;
    self->sync = v && cddp_grad_enabled;
    /* no_sync: what this backward accumulates is reduced later, so it too goes in the arena;
     * no grad mode: no backward (disarms what an interrupted one left) */
    cddp_arena_armed = !self->bypass && cddp_grad_enabled;
    if (!self->sync)
        Py_RETURN_NONE;
    memset(self->skip, 0, (size_t)self->nparams);
    memset(self->unused, 0, (size_t)self->nparams);
    if (begin_iteration(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* mark_ready(i, param=None): the parameter's post-accumulate-grad hook (functools.partial
 * of this bound method passes the parameter along; it is not needed). */
static PyObject *reducer_mark_ready(ReducerObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t i;
    TensorObject *p;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "mark_ready(index, param=None)");
        return NULL;
    }
    i = PyLong_AsSsize_t(args[0]);
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
    self->ready[i] = 1;
    self->started = 1;
    self->nready++;
    if (self->bypass) {
        if (self->nready == self->nparams)
            end_iteration(self);
        Py_RETURN_NONE;
    }
    if (self->poffset[i] >= 0) {
        double t0 = now_s();
        int rc = copy_to_slot(self, i);
        self->t_copy += now_s() - t0;
        if (rc < 0)
            return NULL;
    }
    self->u[self->punit[i]].pending--;
    if (launch_ready(self) < 0)
        return NULL;
    if (self->next_launch == self->nunits && finalize(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *reducer_finalize(ReducerObject *self, PyObject *unused)
{
    if (!self->in_iter)
        Py_RETURN_NONE;
    if (self->nready < self->nparams) {
        PyErr_SetString(PyExc_RuntimeError, "Reducer.finalize: some buckets are not ready");
        return NULL;
    }
    if (self->bypass) {
        end_iteration(self);
        Py_RETURN_NONE;
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

/* ---- configuration and introspection --------------------------------------------------- */

static PyObject *reducer_set_sync(ReducerObject *self, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0)
        return NULL;
    self->sync = v;
    Py_RETURN_NONE;
}

static PyObject *reducer_set_divide_factor(ReducerObject *self, PyObject *arg)
{
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > self->world) {
        PyErr_Format(PyExc_ValueError, "set_divide_factor: %ld is not in [0, %d]", n,
                     self->world);
        return NULL;
    }
    self->divide = (int)n;
    Py_RETURN_NONE;
}

static PyObject *reducer_set_comm_hook(ReducerObject *self, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "comm hook must be callable or None");
        return NULL;
    }
    if (self->in_iter && self->started) {
        PyErr_SetString(PyExc_RuntimeError, "register_comm_hook must be called before a "
                        "backward pass starts, not during one");
        return NULL;
    }
    Py_XSETREF(self->hook, fn == Py_None ? NULL : Py_NewRef(fn));
    if (plan(self) < 0 || (self->in_iter && begin_iteration(self) < 0))
        return NULL;                /* an iteration prepared by forward: re-prepared */
    Py_RETURN_NONE;
}

static PyObject *reducer_buckets(ReducerObject *self, void *c)
{
    PyObject *out = PyList_New(0);
    for (Py_ssize_t k = 0; out && k < self->nbuckets; k++)
        if (self->buf[k] && PyList_Append(out, (PyObject *)self->buf[k]) < 0)
            Py_CLEAR(out);
    return out;
}

static PyObject *reducer_units(ReducerObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(self->nunits);
    for (Py_ssize_t j = 0; out && j < self->nunits; j++) {
        unit_t *u = &self->u[j];
        TensorObject *t = u->param >= 0 ? param_at(self, u->param) : self->buf[u->bucket];
        PyObject *e = Py_BuildValue("LOn", (long long)cddp_numel(t), cddp_dtype_to_py(t->dtype),
                                    u->bucket);
        if (!e)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, j, e);
    }
    return out;
}

static PyObject *reducer_bucket_params(ReducerObject *self, PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if ((k == -1 && PyErr_Occurred()))
        return NULL;
    if (k < 0 || k >= self->nbuckets) {
        PyErr_SetString(PyExc_IndexError, "bucket index out of range");
        return NULL;
    }
    return PySequence_List(PyList_GET_ITEM(self->bucket_lists, k));
}

static PyObject *reducer_stats(ReducerObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:d,s:d,s:d,s:d,s:L,s:L,s:L,s:n,s:i}", "copy_s", self->t_copy,
                         "launch_s", self->t_launch, "wait_s", self->t_wait,
                         "write_s", self->t_write, "iterations", (long long)self->n_iters,
                         "launches", (long long)self->n_launches,
                         "copy_bytes", (long long)self->copy_bytes, "units", self->nunits,
                         "bypass", self->bypass);
}

static PyObject *reducer_reset_stats(ReducerObject *self, PyObject *unused)
{
    self->t_copy = self->t_launch = self->t_wait = self->t_write = 0;
    self->n_iters = self->n_launches = self->copy_bytes = 0;
    Py_RETURN_NONE;
}

#define FAST(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
static PyMethodDef reducer_methods[] = {
    {"prepare_for_backward", FAST(reducer_prepare), NULL},
    {"mark_ready", FAST(reducer_mark_ready), NULL},
    {"after_forward", (PyCFunction)reducer_after_forward, METH_O, NULL},
    {"finalize", (PyCFunction)reducer_finalize, METH_NOARGS, NULL},
    {"unready", (PyCFunction)reducer_unready, METH_NOARGS, NULL},
    {"set_sync", (PyCFunction)reducer_set_sync, METH_O, NULL},
    {"set_comm_hook", (PyCFunction)reducer_set_comm_hook, METH_O, NULL},
    {"set_divide_factor", (PyCFunction)reducer_set_divide_factor, METH_O, NULL},
    {"bucket_params", (PyCFunction)reducer_bucket_params, METH_O, NULL},
    {"units", (PyCFunction)reducer_units, METH_NOARGS, NULL},
    {"stats", (PyCFunction)reducer_stats, METH_NOARGS, NULL},
    {"reset_stats", (PyCFunction)reducer_reset_stats, METH_NOARGS, NULL},
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
    {Py_tp_doc, "DDP gradient reducer: buckets, in-place units, ordered launches, averaged grads."},
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
