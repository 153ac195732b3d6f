/* distributed/python/py_pg.c — Python binding of the process-group engine: _C.ProcessGroupCPU, _C.Work and the
 * exception classes, created on first use by _C._pg_types() (module.c has no type hook).
 *
 * Mirrors: torch.distributed.ProcessGroup (gloo) + torch.distributed.Work.
 *
 *   class ProcessGroupCPU:
 *       def __init__(store, rank, size, timeout=1800.0, group_name="default",
 *                    transport="auto"): ...       # rendezvous through store.set/get/add
 *       rank, size, transport ("shm" | "tcp"), timeout, group_name
 *       allreduce(t, op=0, sync=False) -> Work | None     # sync=True: wait, return None
 *       broadcast(t, root, sync) / reduce(t, root, op, sync)
 *       allgather(out_flat | [outs], inp, sync) / gather(out | [outs] | None, inp, root, sync)
 *       scatter(out, inp | [inps] | None, root, sync) / reduce_scatter(out, inp | [inps], op, sync)
 *           (a list of world_size tensors is written / read in place, no flat copy)
 *       alltoall(out_flat, inp_flat, sync) / send(t, dst, tag, sync) / recv(t, src, tag, sync)
 *       barrier(sync) / shutdown(timeout=None)
 *   class Work:
 *       wait(timeout=None) -> True | raises; is_completed(); is_success(); exception(); result()
 *
 * Tensors must be contiguous cddp Tensors (the Python layer makes copies). A Work keeps its
 * tensors alive; the group keeps every unfinished Work alive (a FIFO swept at each submit),
 * so dropping a Work before completion is safe. The C engine never touches Python objects.
 */
#include "module.h"
#include "distributed/pg/pg.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    cddp_pg *pg;
    int rank, size, transport;
    double timeout;
    PyObject *name;
    PyObject **pend;                   /* ring of unfinished Work objects (strong refs) */
    Py_ssize_t phead, plen, pcap;
} PGObject;

typedef struct {
    PyObject_HEAD
    cddp_work *w;
    PyObject *pg;
    PyObject *keep;                    /* tuple: tensors the op reads or writes */
    Py_ssize_t rfrom, rcount;          /* result() = list(keep[rfrom:rfrom + rcount]) */
    PyObject *exc;                     /* cached exception instance */
} WorkObject;


/* ---- Work ---------------------------------------------------------------------------- */

static void work_dealloc(WorkObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    cddp_work_decref(self->w);
    Py_XDECREF(self->pg);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->exc);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *exception_class(const cddp_work *w)
{
    return w->err_kind == CDDP_ERR_VALUE ? PyExc_ValueError
           : w->err_kind == CDDP_ERR_TIMEOUT ? cddp_state()->dist_timeout_error
                                             : cddp_state()->dist_backend_error;
}

/* The failed op's exception (created once). New reference. */
static PyObject *work_exception_obj(WorkObject *self)
{
    if (!self->exc) {
        self->exc = PyObject_CallFunction(exception_class(self->w), "s", self->w->err);
        if (!self->exc)
            return NULL;
    }
    return Py_NewRef(self->exc);
}

static int raise_work_error(WorkObject *self)
{
    PyObject *e = work_exception_obj(self);
    if (!e)
        return -1;
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
    return -1;
}

/* Wait with the GIL released in 0.1 s slices so Ctrl-C stays responsive.
 * 0 done, -1 failed, 1 timed out, -2 Python error (signal). */
static int wait_loop(cddp_work *w, double timeout)
{
    double end = timeout >= 0 ? cddp_pg_now() + timeout : 0;
    int rc = cddp_work_state(w);
    if (rc >= CDDP_WORK_DONE)
        return rc == CDDP_WORK_DONE ? 0 : -1;
    for (;;) {
        double slice = 0.1;
        if (timeout >= 0) {
            double left = end - cddp_pg_now();
            if (left < slice)
                slice = left > 0 ? left : 0;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = cddp_work_wait(w, slice);
        Py_END_ALLOW_THREADS
        if (rc != 1)
            return rc;
        if (PyErr_CheckSignals() < 0)
            return -2;
        if (timeout >= 0 && cddp_pg_now() >= end)
            return 1;
    }
}

/* seconds from None / number / timedelta-like (total_seconds()); -1 for None */
static int parse_timeout(PyObject *o, double *out)
{
    if (!o || o == Py_None) {
        *out = -1;
        return 0;
    }
    if (PyObject_HasAttrString(o, "total_seconds")) {
        PyObject *v = PyObject_CallMethod(o, "total_seconds", NULL);
        if (!v)
            return -1;
        *out = PyFloat_AsDouble(v);
        Py_DECREF(v);
    } else {
        *out = PyFloat_AsDouble(o);
    }
    if (*out == -1.0 && PyErr_Occurred())
        return -1;
    if (*out < 0)
        *out = 0;
    return 0;
}

static PyObject *work_wait(WorkObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *to = NULL;
    double timeout;
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &to) ||
        parse_timeout(to, &timeout) < 0)
        return NULL;
    rc = wait_loop(self->w, timeout);
    if (rc == -2)
        return NULL;
    if (rc == 1) {
        const cddp_work *w = self->w;
        char msg[160];
        snprintf(msg, sizeof msg, "Work.wait: %s #%lld still running after %.3f s",
                 cddp_pg_op_name[w->a.op], (long long)w->seq, timeout);
        PyErr_SetString(cddp_state()->dist_timeout_error, msg);
        return NULL;
    }
    if (rc < 0)
        return raise_work_error(self), NULL;
    Py_RETURN_TRUE;
}

static PyObject *work_is_completed(WorkObject *self, PyObject *unused)
{
    return PyBool_FromLong(cddp_work_state(self->w) >= CDDP_WORK_DONE);
}

static PyObject *work_is_success(WorkObject *self, PyObject *unused)
{
    return PyBool_FromLong(cddp_work_state(self->w) == CDDP_WORK_DONE);
}

static PyObject *work_exception(WorkObject *self, PyObject *unused)
{
    if (cddp_work_state(self->w) != CDDP_WORK_FAILED)
        Py_RETURN_NONE;
    return work_exception_obj(self);
}

static PyObject *work_result(WorkObject *self, PyObject *unused)
{
    PyObject *t, *l;
    if (!self->keep || self->rcount <= 0)
        return PyList_New(0);
    t = PyTuple_GetSlice(self->keep, self->rfrom, self->rfrom + self->rcount);
    if (!t)
        return NULL;
    l = PySequence_List(t);
    Py_DECREF(t);
    return l;
}

static PyMethodDef work_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> True; raises the op's error, or TimeoutError after timeout s"},
    {"synchronize", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS, NULL},
    {"is_completed", (PyCFunction)work_is_completed, METH_NOARGS, NULL},
    {"is_success", (PyCFunction)work_is_success, METH_NOARGS, NULL},
    {"exception", (PyCFunction)work_exception, METH_NOARGS, NULL},
    {"result", (PyCFunction)work_result, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot work_slots[] = {
    {Py_tp_dealloc, work_dealloc},
    {Py_tp_methods, work_methods},
    {Py_tp_doc, "Handle of an asynchronous collective (torch.distributed.Work)."},
    {0, NULL},
};
static PyType_Spec work_spec = {"cddp._C.Work", sizeof(WorkObject), 0, Py_TPFLAGS_DEFAULT,
                                work_slots};

/* ---- the pending-work ring ----------------------------------------------------------- */

static int ring_push(PGObject *self, PyObject *w)
{
    if (self->plen == self->pcap) {
        Py_ssize_t cap = self->pcap ? 2 * self->pcap : 16;
        PyObject **n = PyMem_Malloc(sizeof *n * (size_t)cap);
        if (!n)
            return PyErr_NoMemory(), -1;
        for (Py_ssize_t i = 0; i < self->plen; i++)
            n[i] = self->pend[(self->phead + i) % self->pcap];
        PyMem_Free(self->pend);
        self->pend = n;
        self->pcap = cap;
        self->phead = 0;
    }
    self->pend[(self->phead + self->plen) % self->pcap] = Py_NewRef(w);
    self->plen++;
    return 0;
}

/* Drop finished Work from the front (ops finish in issue order, send/recv aside). */
static void ring_sweep(PGObject *self, int all)
{
    while (self->plen) {
        WorkObject *w = (WorkObject *)self->pend[self->phead];
        if (!all && cddp_work_state(w->w) < CDDP_WORK_DONE)
            break;
        self->phead = (self->phead + 1) % self->pcap;
        self->plen--;
        Py_DECREF(w);
    }
}

/* ---- ProcessGroupCPU: rendezvous ----------------------------------------------------- */

static void read_boot_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    snprintf(buf, len, "-");
    if (f) {
        if (fgets(buf, (int)len, f))
            buf[strcspn(buf, "\n ")] = 0;
        fclose(f);
    }
}

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

typedef struct {
    int pid, port;
    char host[256], boot[64], addr[64];
    unsigned long long nonce;
} peer_info;

/* Exchange "pid host boot addr port nonce" with every rank under prefix/gen/info/. */
static int exchange(PyObject *store, const char *prefix, int rank, int size, const char *mine,
                    peer_info *peers)
{
    char key[512];
    long gen;
    PyObject *v;
    snprintf(key, sizeof key, "%sgen", prefix);
    v = store_call(store, "add", "(si)", key, 1);
    if (!v)
        return -1;
    gen = (PyLong_AsLong(v) - 1) / size;        /* re-created groups get fresh keys */
    Py_DECREF(v);
    if (gen < 0 && PyErr_Occurred())
        return -1;
    snprintf(key, sizeof key, "%s%ld/info/%d", prefix, gen, rank);
    v = store_call(store, "set", "(ss)", key, mine);
    if (!v)
        return -1;
    Py_DECREF(v);
    for (int j = 0; j < size; j++) {
        char *s;
        Py_ssize_t n;
        snprintf(key, sizeof key, "%s%ld/info/%d", prefix, gen, j);
        v = store_call(store, "get", "(s)", key);
        if (!v)
            return -1;
        if (PyUnicode_Check(v)) {
            PyObject *b = PyUnicode_AsUTF8String(v);
            Py_DECREF(v);
            if (!(v = b))
                return -1;
        }
        if (PyBytes_AsStringAndSize(v, &s, &n) < 0) {
            Py_DECREF(v);
            return -1;
        }
        peer_info *p = &peers[j];
        if (sscanf(s, "%d %255s %63s %63s %d %llx", &p->pid, p->host, p->boot, p->addr,
                   &p->port, &p->nonce) != 6) {
            PyErr_Format(cddp_state()->dist_backend_error, "process group rendezvous: malformed entry for "
                         "rank %d: %.100s", j, s);
            Py_DECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

static PyObject *pg_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"store", "rank", "size", "timeout", "group_name", "transport", NULL};
    PyObject *store;
    int rank, size, port = 0, lfd = -1, want;
    double timeout = 1800.0;
    const char *gname = "default", *transport = "auto", *env;
    char err[CDDP_PG_ERRLEN] = "", host[256], boot[64], addr[64], mine[512], prefix[256];
    unsigned long long nonce = 0;
    peer_info *peers = NULL;
    cddp_pg_info info = {0};
    PGObject *self = NULL;
    cddp_pg *pg;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Oii|dss:ProcessGroupCPU", kwlist, &store,
                                     &rank, &size, &timeout, &gname, &transport))
        return NULL;
    if (size < 1 || size > CDDP_PG_MAX_RANKS) {
        PyErr_Format(PyExc_ValueError, "world size must be in [1, %d], got %d",
                     CDDP_PG_MAX_RANKS, size);
        return NULL;
    }
    if (rank < 0 || rank >= size) {
        PyErr_Format(PyExc_ValueError, "Invalid rank %d for a group of size %d", rank, size);
        return NULL;
    }
    if (!(timeout > 0))
        timeout = 1800.0;
    env = getenv("CDDP_TRANSPORT");
    if (env && *env)
        transport = env;
    if (!strcmp(transport, "auto")) want = 0;
    else if (!strcmp(transport, "shm")) want = CDDP_PG_SHM;
    else if (!strcmp(transport, "tcp")) want = CDDP_PG_TCP;
    else if (!strcmp(transport, "hier")) want = CDDP_PG_HIER;
    else {
        PyErr_Format(PyExc_ValueError, "transport must be 'auto', 'shm', 'tcp' or 'hier' "
                     "(CDDP_TRANSPORT), got '%s'", transport);
        return NULL;
    }
    if (gethostname(host, sizeof host) < 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    read_boot_id(boot, sizeof boot);
    env = getenv("CDDP_HOST_ID");       /* tests: pretend ranks of one machine sit on several */
    if (env && *env) {
        snprintf(host, sizeof host, "%s", env);
        snprintf(boot, sizeof boot, "simulated");
    }
    for (char *c = host; *c; c++)
        if (*c == ' ') *c = '_';
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (unsigned long long)getpid() * 0x9e3779b97f4a7c15ULL ^ (unsigned long long)(cddp_pg_now() * 1e9);
    if (size > 1 && want != CDDP_PG_SHM) {        /* TCP may be needed: listen before publishing */
        lfd = cddp_pg_tcp_listen(&port, err);
        if (lfd < 0) {
            PyErr_SetString(cddp_state()->dist_backend_error, err);
            return NULL;
        }
    }
    cddp_pg_local_addr(addr, sizeof addr);
    snprintf(mine, sizeof mine, "%d %s %s %s %d %016llx", (int)getpid(), host, boot, addr,
             port, nonce);
    snprintf(prefix, sizeof prefix, "cddp/pg/%s/", gname);
    peers = PyMem_Calloc((size_t)size, sizeof *peers);
    info.pids = PyMem_Calloc((size_t)size, sizeof(int));
    info.local = PyMem_Calloc((size_t)size, 1);
    info.addrs = PyMem_Calloc((size_t)size, sizeof(char *));
    info.ports = PyMem_Calloc((size_t)size, sizeof(int));
    info.host = PyMem_Calloc((size_t)size, sizeof(int));
    if (!peers || !info.pids || !info.local || !info.addrs || !info.ports || !info.host) {
        PyErr_NoMemory();
        goto fail;
    }
    if (exchange(store, prefix, rank, size, mine, peers) < 0)
        goto fail;
    int all_local = 1, shared_host = 0;
    for (int j = 0; j < size; j++) {
        info.pids[j] = peers[j].pid;
        info.local[j] = !strcmp(peers[j].host, host) && !strcmp(peers[j].boot, boot);
        info.addrs[j] = peers[j].addr;
        info.ports[j] = peers[j].port;
        info.host[j] = j;
        for (int i = 0; i < j; i++)       /* host index: the first rank seen on that host */
            if (!strcmp(peers[i].host, peers[j].host) && !strcmp(peers[i].boot, peers[j].boot)) {
                info.host[j] = info.host[i];
                shared_host = 1;
                break;
            }
        all_local &= info.local[j];
    }
    if (want == CDDP_PG_SHM && !all_local) {
        PyErr_SetString(PyExc_ValueError, "transport 'shm' needs every rank on one host");
        goto fail;
    }
    /* one host: shared memory; several, some with several ranks: hierarchical; else TCP */
    info.transport = want ? want : all_local ? CDDP_PG_SHM
                                 : shared_host ? CDDP_PG_HIER : CDDP_PG_TCP;
    if (size == 1)
        info.transport = CDDP_PG_SHM;
    if (info.transport != CDDP_PG_SHM && lfd < 0) {
        PyErr_SetString(cddp_state()->dist_backend_error, "TCP transport chosen but no listener was created");
        goto fail;
    }
    if (info.transport == CDDP_PG_SHM && lfd >= 0) {
        close(lfd);
        lfd = -1;
    }
    info.rank = rank;
    info.size = size;
    info.timeout_s = timeout;
    info.nonce = peers[0].nonce;
    info.listen_fd = lfd;
    snprintf(info.shm_name, sizeof info.shm_name, "/cddp-%016llx", peers[0].nonce);
    snprintf(info.group_name, sizeof info.group_name, "%s", gname);
    Py_BEGIN_ALLOW_THREADS
    pg = cddp_pg_create(&info, err);
    Py_END_ALLOW_THREADS
    lfd = -1;                          /* the transport owns (and closed) it */
    if (!pg) {
        PyErr_Format(cddp_state()->dist_backend_error, "process group '%s' (rank %d of %d): %s", gname, rank,
                     size, err);
        goto fail;
    }
    self = (PGObject *)tp->tp_alloc(tp, 0);
    if (!self) {
        Py_BEGIN_ALLOW_THREADS
        cddp_pg_destroy(pg);
        Py_END_ALLOW_THREADS
        goto fail;
    }
    self->pg = pg;
    self->rank = rank;
    self->size = size;
    self->transport = info.transport;
    self->timeout = timeout;
    self->name = PyUnicode_FromString(gname);
fail:
    if (lfd >= 0)
        close(lfd);
    PyMem_Free(peers);
    PyMem_Free(info.pids);
    PyMem_Free(info.local);
    PyMem_Free(info.addrs);
    PyMem_Free(info.ports);
    PyMem_Free(info.host);
    if (self && !self->name)
        Py_CLEAR(self);
    return (PyObject *)self;
}

static void pg_dealloc(PGObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    ring_sweep(self, 1);
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
        parse_timeout(to, &drain) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    cddp_pg_shutdown(self->pg, drain);
    Py_END_ALLOW_THREADS
    ring_sweep(self, 1);
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

/* The interrupt hook of inline runs: take the GIL back for a moment and run Python's signal
 * handlers; a handler that raised (KeyboardInterrupt) stops the op. */
typedef struct {
    PyThreadState *ts;
    int raised;
} intr_ctx;

static int check_interrupt(void *p)
{
    intr_ctx *c = p;
    int rc;
    if (c->raised)
        return 1;
    PyEval_RestoreThread(c->ts);
    rc = PyErr_CheckSignals();
    c->ts = PyEval_SaveThread();
    if (rc < 0)
        c->raised = 1;
    return c->raised;
}

/* Queue (or, when sync, run and wait for) one op. `keep` (a tuple of the tensors) is
 * stolen; result() will list keep[rfrom:rfrom + rcount]. Returns the Work, or None when sync.
 * The sync fast path (run inline on this thread, GIL released) creates no Work object. */
static PyObject *submit(PGObject *self, cddp_pg_args *a, PyObject *keep, Py_ssize_t rfrom,
                        Py_ssize_t rcount, int sync)
{
    WorkObject *wo;
    cddp_work *w;
    int rc;
    if (!keep) {
        free(a->iblk);
        free(a->oblk);
        return NULL;
    }
    if (!self->pg) {
        PyErr_SetString(PyExc_RuntimeError, "process group is not initialized");
        free(a->iblk);
        free(a->oblk);
        Py_DECREF(keep);
        return NULL;
    }
    ring_sweep(self, 0);
    if (sync) {
        intr_ctx ic = {PyEval_SaveThread(), 0};
        w = cddp_pg_submit_ex(self->pg, a, 1, check_interrupt, &ic);
        PyEval_RestoreThread(ic.ts);
        if (ic.raised || !w) {  /* Ctrl-C during an inline op: it was aborted (peers told) */
            cddp_work_decref(w);
            Py_DECREF(keep);
            return w ? NULL : PyErr_NoMemory();
        }
        rc = cddp_work_state(w);
        if (rc >= CDDP_WORK_DONE) {          /* ran inline (or was refused): no Work needed */
            Py_DECREF(keep);
            if (rc == CDDP_WORK_FAILED)
                PyErr_SetString(exception_class(w), w->err);
            cddp_work_decref(w);
            if (rc == CDDP_WORK_FAILED)
                return NULL;
            Py_RETURN_NONE;
        }
    } else {
        w = cddp_pg_submit(self->pg, a, 0);
        if (!w) {
            Py_DECREF(keep);
            return PyErr_NoMemory();
        }
    }
    wo = (WorkObject *)cddp_state()->work_type->tp_alloc(cddp_state()->work_type, 0);
    if (!wo) {
        /* the op may still run: the tensors must outlive it, so they leak with it */
        cddp_work_decref(w);
        return NULL;
    }
    wo->pg = Py_NewRef(self);
    wo->keep = keep;
    wo->rfrom = rfrom;
    wo->rcount = rcount;
    wo->w = w;
    if (!sync) {
        if (cddp_work_state(w) < CDDP_WORK_DONE && ring_push(self, (PyObject *)wo) < 0) {
            Py_DECREF(wo);
            return NULL;
        }
        return (PyObject *)wo;
    }
    rc = wait_loop(w, -1);             /* queued behind async work */
    if (rc == -2) {                    /* interrupted: the op still runs, keep its tensors */
        ring_push(self, (PyObject *)wo);
        Py_DECREF(wo);
        return NULL;
    }
    if (rc < 0) {
        raise_work_error(wo);
        Py_DECREF(wo);
        return NULL;
    }
    Py_DECREF(wo);
    Py_RETURN_NONE;
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
    return submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
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
    return submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
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
    return submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
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
    return submit(self, a, tup, rfrom, rcount, sync);
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
    return submit(self, &a, PyTuple_Pack(2, o, i), 0, 1, sync);
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
    return submit(self, &a, PyTuple_Pack(1, t), 0, 1, sync);
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
    return submit(self, &a, PyTuple_New(0), 0, 0, sync);
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
    st->work_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &work_spec, NULL);
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

PyMethodDef cddp_pg_module_methods[] = {
    {"_pg_types", py_pg_types, METH_VARARGS,
     "_pg_types(base=RuntimeError) -> (ProcessGroupCPU, Work, DistBackendError, "
     "DistTimeoutError)"},
    {NULL},
};
