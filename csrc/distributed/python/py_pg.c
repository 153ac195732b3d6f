/* distributed/python/py_pg.c — Python binding of the process-group engine: _C.ProcessGroupCPU
 * and the exception classes, created on first use by _C._pg_types() (module.c has no type
 * hook); the Work type is distributed/python/py_work.c.
 *
 * Mirrors: torch.distributed.ProcessGroup (gloo) + torch.distributed.Work.
 *
 *   class ProcessGroupCPU:
 *       def __init__(store, rank, size, timeout=1800.0, group_name="default",
 *                    transport="auto"): ...       # rendezvous through store.set/get/add
 *       @classmethod _external(capsule, rank, size, timeout, group_name)  # MPI: no store
 *       rank, size, transport ("shm" | "tcp" | "hier" | "mpi"), timeout, group_name
 *       allreduce(t, op=0, sync=False) -> Work | None     # sync=True: wait, return None
 *       broadcast(t, root, sync) / reduce(t, root, op, sync)
 *       allgather(out_flat | [outs], inp, sync) / gather(out | [outs] | None, inp, root, sync)
 *       scatter(out, inp | [inps] | None, root, sync) / reduce_scatter(out, inp | [inps], op, sync)
 *           (a list of world_size tensors is written / read in place, no flat copy)
 *       alltoall(out_flat, inp_flat, sync) / send(t, dst, tag, sync) / recv(t, src, tag, sync)
 *       barrier(sync) / shutdown(timeout=None)
 *
 * The constructor wraps the Python store in the C rendezvous's callback table and runs
 * rendezvous + group creation (distributed/pg/rendezvous.c) with the GIL released; its C error
 * becomes an exception in one place (rendezvous_error). Tensors must be contiguous cddp Tensors
 * (the Python layer makes copies). A Work keeps its tensors alive; the group keeps every
 * unfinished Work alive (a FIFO swept at each submit), so dropping a Work before completion is
 * safe. The C engine never touches Python objects.
 */
#include "distributed/python/py_pg.h"
#include "distributed/pg/rendezvous.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- ProcessGroupCPU: construction --------------------------------------------------- */

/* The store as rendezvous sees it (distributed/pg/rendezvous.h). Rendezvous runs with the GIL
 * released; each callback takes it back for one call of the Python store's method, and a
 * Python exception stays pending: it is the error ProcessGroupCPU() raises. */
typedef struct {
    PyObject *store;
    PyThreadState *ts;          /* this thread's state while rendezvous runs without the GIL */
} store_ctx;

static PyObject *store_call(PyObject *store, const char *meth, const char *fmt, ...)
{
    va_list ap;
    PyObject *args, *fn, *res;
    fn = PyObject_GetAttrString(store, meth);
    if (!fn)
        return NULL;
    va_start(ap, fmt);
    args = Py_VaBuildValue(fmt, ap);
    va_end(ap);
    if (!args) {
        Py_DECREF(fn);
        return NULL;
    }
    res = PyObject_CallObject(fn, args);
    Py_DECREF(fn);
    Py_DECREF(args);
    return res;
}

static int store_add(void *p, const char *key, int64_t delta, int64_t *value)
{
    store_ctx *c = p;
    PyObject *v;
    int rc = -1;
    PyEval_RestoreThread(c->ts);
    v = store_call(c->store, "add", "(sL)", key, (long long)delta);
    if (v) {
        long x = PyLong_AsLong(v);
        if (!(x == -1 && PyErr_Occurred())) {
            *value = x;
            rc = 0;
        }
        Py_DECREF(v);
    }
    c->ts = PyEval_SaveThread();
    return rc;
}

static int store_set(void *p, const char *key, const char *value)
{
    store_ctx *c = p;
    PyObject *v;
    PyEval_RestoreThread(c->ts);
    v = store_call(c->store, "set", "(ss)", key, value);
    Py_XDECREF(v);
    c->ts = PyEval_SaveThread();
    return v ? 0 : -1;
}

/* get() may return str or bytes; the value is copied out as bytes (str as UTF-8). */
static char *store_get(void *p, const char *key)
{
    store_ctx *c = p;
    PyObject *v;
    char *s, *copy = NULL;
    Py_ssize_t n;
    PyEval_RestoreThread(c->ts);
    v = store_call(c->store, "get", "(s)", key);
    if (v && PyUnicode_Check(v))
        Py_SETREF(v, PyUnicode_AsUTF8String(v));
    if (v && PyBytes_AsStringAndSize(v, &s, &n) == 0) {
        if ((copy = malloc((size_t)n + 1)))
            memcpy(copy, s, (size_t)n + 1);          /* bytes keep a trailing NUL */
        else
            PyErr_NoMemory();
    }
    Py_XDECREF(v);
    c->ts = PyEval_SaveThread();
    return copy;
}

/* The one place a failed rendezvous becomes an exception: the store's own (already pending),
 * MemoryError, ValueError for bad arguments, else DistBackendError with the C message. */
static PyObject *rendezvous_error(int kind, const char *err)
{
    PyObject *msg;
    if (kind == CDDP_ERR_STORE && PyErr_Occurred())
        return NULL;
    if (kind == CDDP_ERR_NOMEM)
        return PyErr_NoMemory();
    msg = PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace");
    if (msg) {
        PyErr_SetObject(kind == CDDP_ERR_VALUE ? PyExc_ValueError
                                               : cddp_state()->dist_backend_error, msg);
        Py_DECREF(msg);
    }
    return NULL;
}

/* Wrap a created group (the constructors' common tail): the new object, or NULL with the
 * group destroyed. */
static PyObject *pg_wrap(PyTypeObject *tp, cddp_pg *pg, int rank, int size, const char *name)
{
    PGObject *self = (PGObject *)tp->tp_alloc(tp, 0);
    if (!self) {
        Py_BEGIN_ALLOW_THREADS
        cddp_pg_destroy(pg);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    self->pg = pg;
    self->rank = rank;
    self->size = size;
    self->transport = pg->transport;
    self->timeout = pg->timeout_s;     /* the default already applied */
    if (!(self->name = PyUnicode_FromString(name)))
        Py_CLEAR(self);                /* pg_dealloc destroys the group */
    return (PyObject *)self;
}

/* ProcessGroupCPU(store, rank, size, timeout=1800.0, group_name="default", transport="auto"):
 * rendezvous and group creation in C (distributed/pg/rendezvous.c), without the GIL. */
static PyObject *pg_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"store", "rank", "size", "timeout", "group_name", "transport", NULL};
    cddp_pg_rdzv_args ra = {.timeout_s = 1800.0, .group_name = "default", .transport = "auto"};
    store_ctx sc = {NULL, NULL};
    cddp_pg_store st = {&sc, store_add, store_set, store_get};
    char err[CDDP_PG_RDZV_ERRLEN];
    int kind;
    cddp_pg *pg;
    if (!cddp_state()->dist_backend_error) {     /* its errors need the classes _pg_types makes */
        PyErr_SetString(PyExc_RuntimeError, "ProcessGroupCPU: call _C._pg_types() first "
                        "(importing cddp.distributed does)");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oii|dss:ProcessGroupCPU", kwlist, &sc.store,
                                     &ra.rank, &ra.size, &ra.timeout_s, &ra.group_name,
                                     &ra.transport))
        return NULL;
    sc.ts = PyEval_SaveThread();
    pg = cddp_pg_rendezvous(&st, &ra, err, sizeof err, &kind);
    PyEval_RestoreThread(sc.ts);
    if (!pg)
        return rendezvous_error(kind, err);
    return pg_wrap(tp, pg, ra.rank, ra.size, ra.group_name);
}

/* ProcessGroupCPU._external(capsule, rank, size, timeout=1800.0, group_name="default"): a group
 * on a transport another extension supplies (a "cddp.pg_ext" capsule, pg.h), with rank and size
 * known already (MPI: no store, no rendezvous). The transport's init runs without the GIL (it
 * may be collective over the ranks). */
static PyObject *pg_external(PyObject *cls, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"capsule", "rank", "size", "timeout", "group_name", NULL};
    cddp_pg_info info = {.timeout_s = 1800.0, .transport = CDDP_PG_EXT, .listen_fd = -1};
    const char *name = "default";
    char err[CDDP_PG_ERRLEN] = "";
    PyObject *cap;
    cddp_pg_ext *ext;
    cddp_pg *pg;
    if (!cddp_state()->dist_backend_error) {
        PyErr_SetString(PyExc_RuntimeError, "ProcessGroupCPU: call _C._pg_types() first "
                        "(importing cddp.distributed does)");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oii|ds:_external", kwlist, &cap, &info.rank,
                                     &info.size, &info.timeout_s, &name))
        return NULL;
    if (!(ext = PyCapsule_GetPointer(cap, "cddp.pg_ext")))
        return NULL;
    if (info.size < 1 || info.size > CDDP_PG_MAX_RANKS || info.rank < 0 || info.rank >= info.size)
        return PyErr_Format(PyExc_ValueError, "Invalid rank %d for a group of size %d",
                            info.rank, info.size);
    info.ext_ops = ext->ops;
    info.ext_arg = ext->arg;
    snprintf(info.group_name, sizeof info.group_name, "%s", name);
    info.pids = PyMem_Calloc((size_t)info.size, sizeof(int));     /* no pidfds: all remote */
    info.local = PyMem_Calloc((size_t)info.size, 1);
    if (!info.pids || !info.local) {
        PyMem_Free(info.pids);
        PyMem_Free(info.local);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    pg = cddp_pg_create(&info, err);
    Py_END_ALLOW_THREADS
    PyMem_Free(info.pids);
    PyMem_Free(info.local);
    if (!pg)
        return rendezvous_error(CDDP_ERR_RUNTIME, err);
    return pg_wrap((PyTypeObject *)cls, pg, info.rank, info.size, name);
}

static void pg_dealloc(PGObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    cddp_pypg_sweep(self, 1);
    if (self->pg) {
        Py_BEGIN_ALLOW_THREADS
        cddp_pg_destroy(self->pg);
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(self->pend);
    Py_XDECREF(self->name);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *pg_shutdown(PGObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    double drain;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:shutdown", kwlist, &to) ||
        cddp_pypg_parse_timeout(to, &drain) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    cddp_pg_shutdown(self->pg, drain);
    Py_END_ALLOW_THREADS
    cddp_pypg_sweep(self, 1);
    Py_RETURN_NONE;
}

/* ---- ops ----------------------------------------------------------------------------- */

static TensorObject *tensor_arg(const char *op, PyObject *o, const char *what)
{
    TensorObject *t;
    if (!cddp_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a Tensor for %s, got %.80s", op, what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    t = (TensorObject *)o;
    if (!cddp_is_contiguous(t)) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be contiguous", op, what);
        return NULL;
    }
    return t;
}

static int opt_int(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t i, int dflt, int *out)
{
    if (i >= nargs || args[i] == Py_None) {
        *out = dflt;
        return 0;
    }
    if (!PyLong_Check(args[i]) && PyObject_HasAttrString(args[i], "value")) {  /* enum member */
        PyObject *v = PyObject_GetAttrString(args[i], "value");
        if (!v)
            return -1;
        *out = (int)PyLong_AsLong(v);
        Py_DECREF(v);
    } else {
        *out = (int)PyLong_AsLong(args[i]);
    }
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int nargs_check(const char *name, Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi)
{
    if (nargs < lo || nargs > hi) {
        PyErr_Format(PyExc_TypeError, "%s takes %zd to %zd arguments (%zd given)", name, lo, hi,
                     nargs);
        return -1;
    }
    return 0;
}

/* allreduce(t, op=0, sync=False) */
static PyObject *pg_allreduce(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_ALLREDUCE};
    TensorObject *t;
    int sync;
    if (nargs_check("allreduce", nargs, 1, 3) < 0 ||
        !(t = tensor_arg("all_reduce", args[0], "tensor")) ||
        opt_int(args, nargs, 1, 0, &a.redop) < 0 || opt_int(args, nargs, 2, 0, &sync) < 0)
        return NULL;
    a.dtype = t->dtype;
    a.count = cddp_numel(t);
    a.in = a.out = cddp_data(t);
    return cddp_pypg_submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
}

/* broadcast(t, root, sync=False) */
static PyObject *pg_broadcast(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_BROADCAST};
    TensorObject *t;
    int sync;
    if (nargs_check("broadcast", nargs, 2, 3) < 0 ||
        !(t = tensor_arg("broadcast", args[0], "tensor")) ||
        opt_int(args, nargs, 1, 0, &a.root) < 0 || opt_int(args, nargs, 2, 0, &sync) < 0)
        return NULL;
    a.dtype = t->dtype;
    a.count = cddp_numel(t);
    a.in = a.out = cddp_data(t);
    return cddp_pypg_submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
}

/* reduce(t, root, op=0, sync=False) */
static PyObject *pg_reduce(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_REDUCE};
    TensorObject *t;
    int sync;
    if (nargs_check("reduce", nargs, 2, 4) < 0 ||
        !(t = tensor_arg("reduce", args[0], "tensor")) ||
        opt_int(args, nargs, 1, 0, &a.root) < 0 || opt_int(args, nargs, 2, 0, &a.redop) < 0 ||
        opt_int(args, nargs, 3, 0, &sync) < 0)
        return NULL;
    a.dtype = t->dtype;
    a.count = cddp_numel(t);
    a.in = a.out = cddp_data(t);
    return cddp_pypg_submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
}

/* A blocked buffer: one flat tensor of size * m elements, or a list/tuple of `size` tensors
 * of m elements each (written/read in place: no flat copy); all contiguous, of dtype dt.
 * Sets *base or *blocks (malloc'ed, owned by the Work once submitted) and appends the tensors
 * to `keep`. */
static int blocked_arg(PGObject *self, const char *op, PyObject *o, const char *what,
                       cddp_dtype dt, int64_t m, void **base, void ***blocks, PyObject *keep)
{
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t k = PySequence_Fast_GET_SIZE(o);
        PyObject **items = PySequence_Fast_ITEMS(o);
        if (k != self->size) {
            PyErr_Format(PyExc_ValueError, "%s: %s must hold world_size (%d) tensors, got %zd",
                         op, what, self->size, k);
            return -1;
        }
        *blocks = malloc(sizeof(void *) * (size_t)k);
        if (!*blocks)
            return PyErr_NoMemory(), -1;
        for (Py_ssize_t j = 0; j < k; j++) {
            TensorObject *t = tensor_arg(op, items[j], what);
            if (!t)
                goto fail;
            if (t->dtype != dt || cddp_numel(t) != m) {
                PyErr_Format(PyExc_ValueError, "%s: %s[%zd] must be a %s tensor of %lld "
                             "elements, got %s with %lld", op, what, j, cddp_pg_dtype_name[dt],
                             (long long)m, cddp_pg_dtype_name[t->dtype], (long long)cddp_numel(t));
                goto fail;
            }
            (*blocks)[j] = cddp_data(t);
            if (PyList_Append(keep, items[j]) < 0)
                goto fail;
        }
        return 0;
fail:
        free(*blocks);
        *blocks = NULL;
        return -1;
    }
    TensorObject *t = tensor_arg(op, o, what);
    if (!t)
        return -1;
    if (t->dtype != dt) {
        PyErr_Format(PyExc_TypeError, "%s: %s is %s but the other tensor is %s", op, what,
                     cddp_pg_dtype_name[t->dtype], cddp_pg_dtype_name[dt]);
        return -1;
    }
    if (cddp_numel(t) != (int64_t)self->size * m) {
        PyErr_Format(PyExc_ValueError, "%s: %s must hold world_size (%d) x %lld = %lld "
                     "elements, got %lld", op, what, self->size, (long long)m,
                     (long long)self->size * m, (long long)cddp_numel(t));
        return -1;
    }
    *base = cddp_data(t);
    return PyList_Append(keep, o);
}

/* keep list -> the Work's tuple (steals keep); result() = keep[rfrom:rfrom + rcount] */
static PyObject *submit_blocked(PGObject *self, cddp_pg_args *a, PyObject *keep,
                                Py_ssize_t rfrom, Py_ssize_t rcount, int sync)
{
    PyObject *tup = PyList_AsTuple(keep);
    Py_DECREF(keep);
    return cddp_pypg_submit(self, a, tup, rfrom, rcount, sync);
}

/* allgather(out_flat | [out_0..out_{n-1}], inp, sync=False) */
static PyObject *pg_allgather(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_ALLGATHER};
    TensorObject *i;
    PyObject *keep;
    int sync;
    if (nargs_check("allgather", nargs, 2, 3) < 0 ||
        !(i = tensor_arg("all_gather", args[1], "input")) ||
        opt_int(args, nargs, 2, 0, &sync) < 0 || !(keep = PyList_New(0)))
        return NULL;
    if (PyList_Append(keep, (PyObject *)i) < 0 ||
        blocked_arg(self, "all_gather", args[0], "output", i->dtype, cddp_numel(i), &a.out,
                    &a.oblk, keep) < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    a.dtype = i->dtype;
    a.count = cddp_numel(i);
    a.in = cddp_data(i);
    return submit_blocked(self, &a, keep, 1, PyList_GET_SIZE(keep) - 1, sync);
}

/* gather(out_flat | [outs] | None, inp, root, sync=False): outputs only on root */
static PyObject *pg_gather(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_GATHER};
    TensorObject *i;
    PyObject *keep;
    int sync;
    if (nargs_check("gather", nargs, 3, 4) < 0 ||
        !(i = tensor_arg("gather", args[1], "input")) ||
        opt_int(args, nargs, 2, 0, &a.root) < 0 || opt_int(args, nargs, 3, 0, &sync) < 0 ||
        !(keep = PyList_New(0)))
        return NULL;
    if (PyList_Append(keep, (PyObject *)i) < 0)
        goto fail;
    if (a.root == self->rank) {
        if (args[0] == Py_None) {
            PyErr_SetString(PyExc_ValueError, "gather: the destination rank needs an output tensor");
            goto fail;
        }
        if (blocked_arg(self, "gather", args[0], "output", i->dtype, cddp_numel(i), &a.out,
                        &a.oblk, keep) < 0)
            goto fail;
    }
    a.dtype = i->dtype;
    a.count = cddp_numel(i);
    a.in = cddp_data(i);
    return submit_blocked(self, &a, keep, 1, PyList_GET_SIZE(keep) - 1, sync);
fail:
    Py_DECREF(keep);
    return NULL;
}

/* scatter(out, inp_flat | [inps] | None, root, sync=False): inputs only on root */
static PyObject *pg_scatter(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_SCATTER};
    TensorObject *o;
    PyObject *keep;
    int sync;
    if (nargs_check("scatter", nargs, 3, 4) < 0 ||
        !(o = tensor_arg("scatter", args[0], "output")) ||
        opt_int(args, nargs, 2, 0, &a.root) < 0 || opt_int(args, nargs, 3, 0, &sync) < 0 ||
        !(keep = PyList_New(0)))
        return NULL;
    if (PyList_Append(keep, (PyObject *)o) < 0)
        goto fail;
    if (a.root == self->rank) {
        if (args[1] == Py_None) {
            PyErr_SetString(PyExc_ValueError, "scatter: the source rank needs an input tensor");
            goto fail;
        }
        if (blocked_arg(self, "scatter", args[1], "input", o->dtype, cddp_numel(o), &a.in,
                        &a.iblk, keep) < 0)
            goto fail;
    }
    a.dtype = o->dtype;
    a.count = cddp_numel(o);
    a.out = cddp_data(o);
    return submit_blocked(self, &a, keep, 0, 1, sync);
fail:
    Py_DECREF(keep);
    return NULL;
}

/* reduce_scatter(out, inp_flat | [inps], op=0, sync=False) */
static PyObject *pg_reduce_scatter(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_REDUCE_SCATTER};
    TensorObject *o;
    PyObject *keep;
    int sync;
    if (nargs_check("reduce_scatter", nargs, 2, 4) < 0 ||
        !(o = tensor_arg("reduce_scatter", args[0], "output")) ||
        opt_int(args, nargs, 2, 0, &a.redop) < 0 || opt_int(args, nargs, 3, 0, &sync) < 0 ||
        !(keep = PyList_New(0)))
        return NULL;
    if (PyList_Append(keep, (PyObject *)o) < 0 ||
        blocked_arg(self, "reduce_scatter", args[1], "input", o->dtype, cddp_numel(o), &a.in,
                    &a.iblk, keep) < 0) {
        Py_DECREF(keep);
        return NULL;
    }
    a.dtype = o->dtype;
    a.count = cddp_numel(o);
    a.out = cddp_data(o);
    return submit_blocked(self, &a, keep, 0, 1, sync);
}

/* alltoall(out_flat, inp_flat, sync=False): equal splits */
static PyObject *pg_alltoall(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_ALLTOALL};
    TensorObject *o, *i;
    int sync;
    if (nargs_check("alltoall", nargs, 2, 3) < 0 ||
        !(o = tensor_arg("all_to_all", args[0], "output")) ||
        !(i = tensor_arg("all_to_all", args[1], "input")) ||
        opt_int(args, nargs, 2, 0, &sync) < 0)
        return NULL;
    if (o->dtype != i->dtype || cddp_numel(o) != cddp_numel(i)) {
        PyErr_Format(PyExc_ValueError, "all_to_all: output (%lld %s) and input (%lld %s) must "
                     "match", (long long)cddp_numel(o), cddp_pg_dtype_name[o->dtype],
                     (long long)cddp_numel(i), cddp_pg_dtype_name[i->dtype]);
        return NULL;
    }
    a.dtype = i->dtype;
    a.count = cddp_numel(i);
    a.in = cddp_data(i);
    a.out = cddp_data(o);
    return cddp_pypg_submit(self, &a, PyTuple_Pack(2, o, i), 0, 1, sync);
}

static PyObject *p2p(PGObject *self, PyObject *const *args, Py_ssize_t nargs, int op)
{
    cddp_pg_args a = {.op = op};
    const char *name = op == CDDP_PG_SEND ? "send" : "recv";
    TensorObject *t;
    int sync;
    if (nargs_check(name, nargs, 2, 4) < 0 || !(t = tensor_arg(name, args[0], "tensor")) ||
        opt_int(args, nargs, 1, 0, &a.root) < 0 || opt_int(args, nargs, 2, 0, &a.tag) < 0 ||
        opt_int(args, nargs, 3, 0, &sync) < 0)
        return NULL;
    a.dtype = t->dtype;
    a.count = cddp_numel(t);
    a.in = a.out = cddp_data(t);
    return cddp_pypg_submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
}

static PyObject *pg_send(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return p2p(self, args, nargs, CDDP_PG_SEND);
}

static PyObject *pg_recv(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return p2p(self, args, nargs, CDDP_PG_RECV);
}

/* barrier(sync=False) */
static PyObject *pg_barrier(PGObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    cddp_pg_args a = {.op = CDDP_PG_BARRIER};
    int sync;
    if (nargs_check("barrier", nargs, 0, 1) < 0 || opt_int(args, nargs, 0, 0, &sync) < 0)
        return NULL;
    return cddp_pypg_submit(self, &a, PyTuple_New(0), 0, 0, sync);
}

/* _handle() -> PyCapsule "cddp._C.pg" holding the cddp_pg * (distributed/pg/pg.h), for C code such as a DDP
 * reducer that submits work without Python in between. The caller keeps this object alive. */
static PyObject *pg_handle(PGObject *self, PyObject *unused)
{
    if (!self->pg) {
        PyErr_SetString(PyExc_RuntimeError, "process group is not initialized");
        return NULL;
    }
    return PyCapsule_New(self->pg, "cddp._C.pg", NULL);
}

static PyObject *pg_get_rank(PGObject *self, void *c) { return PyLong_FromLong(self->rank); }
static PyObject *pg_get_size(PGObject *self, void *c) { return PyLong_FromLong(self->size); }
static PyObject *pg_get_timeout(PGObject *self, void *c) { return PyFloat_FromDouble(self->timeout); }
static PyObject *pg_get_name(PGObject *self, void *c) { return Py_NewRef(self->name); }
static PyObject *pg_get_transport(PGObject *self, void *c)
{
    if (self->pg && self->pg->ops && self->pg->ops->name)
        return PyUnicode_FromString(self->pg->ops->name);
    return PyUnicode_FromString(self->transport == CDDP_PG_SHM   ? "shm"
                                : self->transport == CDDP_PG_TCP ? "tcp"
                                                                 : "hier");
}

static PyGetSetDef pg_getset[] = {
    {"rank", (getter)pg_get_rank, NULL, NULL, NULL},
    {"size", (getter)pg_get_size, NULL, NULL, NULL},
    {"timeout", (getter)pg_get_timeout, NULL, NULL, NULL},
    {"group_name", (getter)pg_get_name, NULL, NULL, NULL},
    {"transport", (getter)pg_get_transport, NULL, NULL, NULL},
    {NULL},
};

#define FAST(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
static PyMethodDef pg_methods[] = {
    {"allreduce", FAST(pg_allreduce), "allreduce(t, op=0, sync=False)"},
    {"broadcast", FAST(pg_broadcast), "broadcast(t, root, sync=False)"},
    {"reduce", FAST(pg_reduce), "reduce(t, root, op=0, sync=False)"},
    {"allgather", FAST(pg_allgather), "allgather(out_flat | [outs], inp, sync=False)"},
    {"gather", FAST(pg_gather), "gather(out_flat | [outs] | None, inp, root, sync=False)"},
    {"scatter", FAST(pg_scatter), "scatter(out, inp_flat | [inps] | None, root, sync=False)"},
    {"reduce_scatter", FAST(pg_reduce_scatter),
     "reduce_scatter(out, inp_flat | [inps], op=0, sync=False)"},
    {"alltoall", FAST(pg_alltoall), "alltoall(out_flat, inp_flat, sync=False)"},
    {"send", FAST(pg_send), "send(t, dst, tag=0, sync=False)"},
    {"recv", FAST(pg_recv), "recv(t, src, tag=0, sync=False)"},
    {"barrier", FAST(pg_barrier), "barrier(sync=False)"},
    {"_external", (PyCFunction)(void (*)(void))pg_external,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "_external(capsule, rank, size, timeout=1800.0, group_name='default'): a group on a "
     "transport from another extension (the MPI backend)"},
    {"_handle", (PyCFunction)pg_handle, METH_NOARGS,
     "_handle() -> PyCapsule('cddp._C.pg') of the C group (for C callers of cddp_pg_submit)"},
    {"shutdown", (PyCFunction)(void (*)(void))pg_shutdown, METH_VARARGS | METH_KEYWORDS,
     "shutdown(timeout=None): finish queued work (up to timeout s, default the group's), "
     "then stop"},
    {NULL},
};

static PyType_Slot pg_slots[] = {
    {Py_tp_new, pg_new},
    {Py_tp_dealloc, pg_dealloc},
    {Py_tp_methods, pg_methods},
    {Py_tp_getset, pg_getset},
    {Py_tp_doc, "CPU process group: shared memory on one host, TCP between hosts."},
    {0, NULL},
};
static PyType_Spec pg_spec = {"cddp._C.ProcessGroupCPU", sizeof(PGObject), 0,
                              Py_TPFLAGS_DEFAULT, pg_slots};

/* ProcessGroupCPU and Work live in the module state from import on (module.h's contract). */
int cddp_pg_types_init(PyObject *m, cddp_state_t *st)
{
    st->work_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &cddp_pypg_work_spec, NULL);
    st->pg_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pg_spec, NULL);
    if (!st->work_type || !st->pg_type)
        return -1;
    if (PyModule_AddObjectRef(m, "ProcessGroupCPU", (PyObject *)st->pg_type) < 0 ||
        PyModule_AddObjectRef(m, "Work", (PyObject *)st->work_type) < 0)
        return -1;
    return 0;
}

/* _C._pg_types(base=RuntimeError) -> (ProcessGroupCPU, Work, DistBackendError,
 * DistTimeoutError). The exception classes derive from `base` (cddp.distributed.DistError,
 * a Python class), so they are made on the first call, kept in the module state and set as
 * attributes of the module; later calls return the same objects. */
static PyObject *py_pg_types(PyObject *m, PyObject *args)
{
    cddp_state_t *st = cddp_state();
    PyObject *base = PyExc_RuntimeError, *bases;
    if (!PyArg_ParseTuple(args, "|O:_pg_types", &base))
        return NULL;
    if (!st->dist_backend_error) {
        if (!PyType_Check(base) || !PyType_IsSubtype((PyTypeObject *)base,
                                                     (PyTypeObject *)PyExc_RuntimeError)) {
            PyErr_SetString(PyExc_TypeError, "_pg_types: base must be a RuntimeError subclass");
            return NULL;
        }
        st->dist_backend_error = PyErr_NewException("cddp.distributed.DistBackendError", base, NULL);
        if (!st->dist_backend_error)
            return NULL;
        bases = PyTuple_Pack(2, st->dist_backend_error, PyExc_TimeoutError);
        if (!bases)
            return NULL;
        st->dist_timeout_error = PyErr_NewException("cddp.distributed.DistTimeoutError", bases, NULL);
        Py_DECREF(bases);
        if (!st->dist_timeout_error ||
            PyObject_SetAttrString(m, "DistBackendError", st->dist_backend_error) < 0 ||
            PyObject_SetAttrString(m, "DistTimeoutError", st->dist_timeout_error) < 0)
            return NULL;
    }
    return PyTuple_Pack(4, st->pg_type, st->work_type, st->dist_backend_error,
                        st->dist_timeout_error);
}

static PyObject *py_shm_zero_copy_ops(PyObject *m, PyObject *unused)
{
    return PyLong_FromLongLong(cddp_pg_shm_zero_copy_ops);
}

PyMethodDef cddp_pg_module_methods[] = {
    {"_shm_zero_copy_ops", py_shm_zero_copy_ops, METH_NOARGS,
     "_shm_zero_copy_ops() -> all_reduces this process ran in place in the shared arenas"},
    {"_pg_types", py_pg_types, METH_VARARGS,
     "_pg_types(base=RuntimeError) -> (ProcessGroupCPU, Work, DistBackendError, "
     "DistTimeoutError)"},
    {NULL},
};
