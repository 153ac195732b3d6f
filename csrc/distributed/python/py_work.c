/* distributed/python/py_work.c — _C.Work, the handle of an asynchronous collective, and how
 * an op becomes one: submit (the sync fast path runs inline with the GIL released and makes no
 * Work), the wait loop (GIL released in 0.1 s slices so Ctrl-C stays responsive), and the ring
 * of unfinished Work each group keeps so dropping a Work early is safe.
 *
 * Mirrors: torch.distributed.Work (c10d::Work's Python binding).
 *
 *   class Work:
 *       wait(timeout=None) -> True | raises; synchronize(); is_completed(); is_success();
 *       exception(); result()
 *
 * A failed op raises DistBackendError (DistTimeoutError after the group's deadline,
 * ValueError for a bad argument the engine caught), with the engine's message. Called by
 * distributed/python/py_pg.c (submit, the timeout parser, the ring sweep; py_pg.h).
 */
#include "distributed/python/py_pg.h"

#include <stdio.h>

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
int cddp_pypg_parse_timeout(PyObject *o, double *out)
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
        cddp_pypg_parse_timeout(to, &timeout) < 0)
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

/* The group rank a recv got its message from (torch's Work._source_rank); -1 while a recv
 * from any sender is unmatched. */
static PyObject *work_source_rank(WorkObject *self, PyObject *unused)
{
    if (self->w->a.op != CDDP_PG_RECV) {
        PyErr_SetString(PyExc_RuntimeError, "Work._source_rank: this Work is not a recv");
        return NULL;
    }
    return PyLong_FromLong(cddp_work_state(self->w) >= CDDP_WORK_DONE ? self->w->a.root : -1);
}

static PyMethodDef work_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> True; raises the op's error, or TimeoutError after timeout s"},
    {"synchronize", (PyCFunction)(void (*)(void))work_wait, METH_VARARGS | METH_KEYWORDS, NULL},
    {"is_completed", (PyCFunction)work_is_completed, METH_NOARGS, NULL},
    {"is_success", (PyCFunction)work_is_success, METH_NOARGS, NULL},
    {"exception", (PyCFunction)work_exception, METH_NOARGS, NULL},
    {"result", (PyCFunction)work_result, METH_NOARGS, NULL},
    {"_source_rank", (PyCFunction)work_source_rank, METH_NOARGS, NULL},
    {NULL},
};

static PyType_Slot work_slots[] = {
    {Py_tp_dealloc, work_dealloc},
    {Py_tp_methods, work_methods},
    {Py_tp_doc, "Handle of an asynchronous collective (torch.distributed.Work)."},
    {0, NULL},
};
PyType_Spec cddp_pypg_work_spec = {"cddp._C.Work", sizeof(WorkObject), 0, Py_TPFLAGS_DEFAULT,
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
void cddp_pypg_sweep(PGObject *self, int all)
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

/* ---- submit: an op becomes a Work ---------------------------------------------------- */

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
PyObject *cddp_pypg_submit(PGObject *self, cddp_pg_args *a, PyObject *keep, Py_ssize_t rfrom,
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
    cddp_pypg_sweep(self, 0);
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
