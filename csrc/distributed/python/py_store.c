/* distributed/python/py_store.c — Python bindings of the rendezvous store (distributed/store/server.c, distributed/store/client.c).
 *
 * Mirrors: the C half of torch.distributed.TCPStore; cddp/distributed/store.py builds
 * TCPStore / PrefixStore on these and adds timedelta handling and torch's signatures.
 *
 *   _C._store_server_start(host, port, token=None, listen_fd=-1) -> _StoreServer
 *       .port, .close(), .stats() -> (clients connected, clients dropped for bad frames,
 *                                     connections closed before HELLO to make room)
 *   _C._store_client_connect(host, port, token=None, timeout=300.0) -> _StoreClient
 *       .set(k, v) .get(k) -> bytes .add(k, n) -> int .wait(keys, timeout=None)
 *       .check(keys) -> bool .compare_set(k, expected, desired) -> bytes
 *       .delete_key(k) -> bool .num_keys() -> int .append(k, v) .close()
 *       .timeout (float seconds, settable), .host, .port
 *   _C._store_set_exceptions(timeout_cls, network_cls, store_cls)   (store.py, at import)
 *   _C._store_feed(data, step=0, token=None) -> (replies, sent, dropped)   (fuzzing hook)
 *
 * Keys are str (UTF-8) or bytes; values str or any contiguous buffer. Every network wait
 * runs with the GIL released; errors become: timeout_cls (a TimeoutError), PermissionError
 * (token refused), network_cls (connection closed / not a cddp store), store_cls (an error
 * the server reported, e.g. add() on a non-integer value). The two types are heap types made
 * on first use (module.c has no type hook) and cached for the process, as _C is.
 */
#include <Python.h>
#include <math.h>

#include "module.h"
#include "distributed/store/proto.h"

#define ERRLEN 256
#define REPLY_GRACE_MS 2000   /* server answers GET/WAIT timeouts itself; this covers latency */


typedef struct {
    PyObject_HEAD
    cddp_store_server *srv;
    int port;
} ServerObject;

typedef struct {
    PyObject_HEAD
    cddp_store_client *cli;
    PyObject *host;          /* str */
    int port;
    double timeout;          /* seconds: get / wait default / every reply */
    int inflight;            /* calls running with the GIL released */
    int closed;              /* close() asked while inflight: the last call frees */
} ClientObject;

/* ---- conversions ---------------------------------------------------------------------- */

/* Seconds -> ms: NaN is an error, negatives are 0, huge values mean "no deadline". */
static int seconds_to_ms(PyObject *o, int64_t *ms)
{
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(s)) {
        PyErr_SetString(PyExc_ValueError, "store timeout must not be NaN");
        return -1;
    }
    *ms = s <= 0 ? 0 : s >= 1e15 ? (int64_t)1 << 50 : (int64_t)ceil(s * 1000.0);
    return 0;
}

static int64_t timeout_ms(double s)
{
    return s <= 0 ? 0 : s >= 1e15 ? (int64_t)1 << 50 : (int64_t)ceil(s * 1000.0);
}

/* A key as bytes (borrowed from o). */
static int as_key(PyObject *o, const char **p, Py_ssize_t *n)
{
    if (PyUnicode_Check(o)) {
        if (!(*p = PyUnicode_AsUTF8AndSize(o, n)))
            return -1;
    } else if (PyBytes_Check(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
    } else {
        PyErr_Format(PyExc_TypeError, "store keys must be str or bytes, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((size_t)*n > CDDP_STORE_MAX_KEY) {
        PyErr_Format(PyExc_ValueError, "store key of %zd bytes is over the %u-byte limit", *n,
                     CDDP_STORE_MAX_KEY);
        return -1;
    }
    return 0;
}

/* A value as a buffer (release with PyBuffer_Release). str is taken as UTF-8. */
static int as_value(PyObject *o, Py_buffer *b)
{
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(o, &n);
        if (!p || PyBuffer_FillInfo(b, o, (void *)p, n, 1, PyBUF_SIMPLE) < 0)
            return -1;
    } else if (PyObject_GetBuffer(o, b, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "store values must be str or bytes-like, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((size_t)b->len > CDDP_STORE_MAX_VALUE) {
        PyErr_Format(PyExc_ValueError, "store value of %zd bytes is over the %u-byte limit",
                     b->len, CDDP_STORE_MAX_VALUE);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

/* "0.3", "300": seconds as short text for messages. */
static void fmt_seconds(char *buf, size_t n, int64_t ms)
{
    snprintf(buf, n, "%.6g", (double)ms / 1000.0);
}

/* ---- errors --------------------------------------------------------------------------- */

/* Sets the exception for a failed call. what: "get" ...; keys: the key or key list (for the
 * timeout message); waited_ms: the wait that ran out. */
static void raise_store_error(PyObject *host, int port, int rc, const char *what, PyObject *keys,
                              int64_t waited_ms, const char *err)
{
    char secs[32];
    fmt_seconds(secs, sizeof secs, waited_ms);
    switch (rc) {
    case CDDP_STORE_EINTR:
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyboardInterrupt, "");
        return;
    case CDDP_STORE_ETIMEOUT:
        if (strcmp(what, "connect") == 0)
            PyErr_Format(cddp_state()->store_exc[0], "cddp store at %U:%d: timed out after %s s connecting (%s)",
                         host, port, secs, err);
        else if (strcmp(what, "get") == 0)
            PyErr_Format(cddp_state()->store_exc[0], "cddp store at %U:%d: timed out after %s s waiting for key %R",
                         host, port, secs, keys);
        else if (strcmp(what, "wait") == 0)
            PyErr_Format(cddp_state()->store_exc[0],
                         "cddp store at %U:%d: timed out after %s s waiting for keys %R",
                         host, port, secs, keys);
        else
            PyErr_Format(cddp_state()->store_exc[0],
                         "cddp store at %U:%d: timed out after %s s waiting for the reply to "
                         "%s(%R)%s%s", host, port, secs, what, keys, *err ? ": " : "", err);
        return;
    case CDDP_STORE_EREFUSED:
        PyErr_Format(PyExc_PermissionError,
                     "cddp store at %U:%d refused the connection: bad or missing CDDP_TOKEN",
                     host, port);
        return;
    case CDDP_STORE_ECLOSED:
        PyErr_Format(cddp_state()->store_exc[1], "cddp store at %U:%d closed the connection", host, port);
        return;
    default:
        PyErr_Format(cddp_state()->store_exc[1], "cddp store at %U:%d: %s", host, port, err);
    }
}

/* ---- server --------------------------------------------------------------------------- */

static void server_dealloc(ServerObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->srv)
        cddp_store_server_stop(self->srv);   /* joins in milliseconds; no GIL needed by it */
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyObject *server_close(ServerObject *self, PyObject *unused)
{
    cddp_store_server *srv = self->srv;
    self->srv = NULL;
    if (srv) {
        Py_BEGIN_ALLOW_THREADS
        cddp_store_server_stop(srv);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *server_stats(ServerObject *self, PyObject *unused)
{
    int64_t clients = 0, dropped = 0, evicted = 0;
    if (self->srv)
        cddp_store_server_stats(self->srv, &clients, &dropped, &evicted);
    return Py_BuildValue("LLL", (long long)clients, (long long)dropped, (long long)evicted);
}

static PyObject *server_get_port(ServerObject *self, void *unused)
{
    return PyLong_FromLong(self->port);
}

static PyObject *server_get_closed(ServerObject *self, void *unused)
{
    return PyBool_FromLong(self->srv == NULL);
}

static PyMethodDef server_methods[] = {
    {"close", (PyCFunction)server_close, METH_NOARGS, "stop the server thread, close its sockets"},
    {"stats", (PyCFunction)server_stats, METH_NOARGS,
     "(clients connected, clients dropped, connections evicted before HELLO)"},
    {NULL},
};

static PyGetSetDef server_getset[] = {
    {"port", (getter)server_get_port, NULL, "bound port", NULL},
    {"closed", (getter)server_get_closed, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot server_slots[] = {
    {Py_tp_dealloc, server_dealloc},
    {Py_tp_methods, server_methods},
    {Py_tp_getset, server_getset},
    {Py_tp_doc, "cddp store server: a background thread serving the rendezvous map"},
    {0, NULL},
};

static PyType_Spec server_spec = {
    "cddp._C._StoreServer", sizeof(ServerObject), 0, Py_TPFLAGS_DEFAULT, server_slots,
};

/* ---- client: plumbing ----------------------------------------------------------------- */

static void client_free_native(ClientObject *self)
{
    cddp_store_client_close(self->cli);
    self->cli = NULL;
}

static void client_dealloc(ClientObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    client_free_native(self);
    Py_XDECREF(self->host);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* One request with the GIL released. On success returns the malloc'd reply (status byte
 * first) after checking its status; on failure NULL with the exception set. A reply status
 * other than OK becomes an exception here too. */
static uint8_t *client_call(ClientObject *self, uint8_t op, const uint8_t *head, size_t head_len,
                            const uint8_t *tail, size_t tail_len, int64_t io_ms, const char *what,
                            PyObject *keys, int64_t waited_ms, size_t *reply_len)
{
    uint8_t *reply = NULL;
    char err[ERRLEN] = "";
    int rc;
    cddp_store_client *cli = self->cli;
    if (!cli || self->closed) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed store");
        return NULL;
    }
    self->inflight++;
    Py_BEGIN_ALLOW_THREADS
    rc = cddp_store_client_call(cli, op, head, head_len, tail, tail_len, io_ms, &reply, reply_len,
                                err, sizeof err);
    Py_END_ALLOW_THREADS
    if (--self->inflight == 0 && self->closed)
        client_free_native(self);
    if (rc != CDDP_STORE_OK) {
        raise_store_error(self->host, self->port, rc, what, keys, waited_ms, err);
        return NULL;
    }
    if (reply[0] == CDDP_STORE_ST_OK)
        return reply;
    if (reply[0] == CDDP_STORE_ST_TIMEOUT) {
        raise_store_error(self->host, self->port, CDDP_STORE_ETIMEOUT, what, keys, waited_ms, "");
    } else {
        snprintf(err, sizeof err, "%.*s", (int)(*reply_len - 1), (const char *)reply + 1);
        PyErr_Format(cddp_state()->store_exc[2], "cddp store at %U:%d: %s(%R) failed: %s", self->host, self->port,
                     what, keys, err);
    }
    free(reply);
    return NULL;
}

/* Checks that a reply carries exactly `n` payload bytes (else: not our server). */
static int reply_size(ClientObject *self, uint8_t *reply, size_t len, size_t n)
{
    if (len == n + 1)
        return 0;
    free(reply);
    PyErr_Format(cddp_state()->store_exc[1], "cddp store at %U:%d: malformed reply", self->host, self->port);
    return -1;
}

/* head = u32 n | n * str: the key list of WAIT / CHECK, after `pre` bytes of room. */
static uint8_t *encode_keys(PyObject *keys, size_t pre, size_t *len)
{
    PyObject *seq = PySequence_Fast(keys, "store keys must be a list of str");
    Py_ssize_t n, i;
    size_t total;
    uint8_t *buf = NULL, *p;
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)n > CDDP_STORE_MAX_KEYS) {
        PyErr_Format(PyExc_ValueError, "at most %u keys per call", CDDP_STORE_MAX_KEYS);
        goto done;
    }
    total = pre + 4;
    for (i = 0; i < n; i++) {
        const char *k;
        Py_ssize_t kn;
        if (as_key(PySequence_Fast_GET_ITEM(seq, i), &k, &kn) < 0)
            goto done;
        total += 4 + (size_t)kn;
    }
    if (!(buf = PyMem_Malloc(total))) {
        PyErr_NoMemory();
        goto done;
    }
    p = cddp_wr_u32(buf + pre, (uint32_t)n);
    for (i = 0; i < n; i++) {            /* checked above: cannot fail now */
        const char *k = NULL;
        Py_ssize_t kn = 0;
        as_key(PySequence_Fast_GET_ITEM(seq, i), &k, &kn);
        p = cddp_wr_str(p, k, (uint32_t)kn);
    }
    *len = total;
done:
    Py_DECREF(seq);
    return buf;
}

/* ---- client: the operations ----------------------------------------------------------- */

static PyObject *client_set_impl(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 uint8_t op, const char *what)
{
    const char *k;
    Py_ssize_t kn;
    Py_buffer v;
    uint8_t head[4 + CDDP_STORE_MAX_KEY], *reply;
    size_t rlen;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s(key, value) takes 2 arguments (%zd given)", what, nargs);
        return NULL;
    }
    if (as_key(args[0], &k, &kn) < 0 || as_value(args[1], &v) < 0)
        return NULL;
    cddp_wr_str(head, k, (uint32_t)kn);
    reply = client_call(self, op, head, 4 + (size_t)kn, v.buf, (size_t)v.len,
                        timeout_ms(self->timeout), what, args[0], timeout_ms(self->timeout), &rlen);
    PyBuffer_Release(&v);
    if (!reply || reply_size(self, reply, rlen, 0) < 0)
        return NULL;
    free(reply);
    Py_RETURN_NONE;
}

static PyObject *client_set(ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return client_set_impl(self, args, nargs, CDDP_STORE_OP_SET, "set");
}

static PyObject *client_append(ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    return client_set_impl(self, args, nargs, CDDP_STORE_OP_APPEND, "append");
}

static PyObject *client_get(ClientObject *self, PyObject *key)
{
    const char *k;
    Py_ssize_t kn;
    uint8_t head[12 + CDDP_STORE_MAX_KEY], *reply;
    size_t rlen;
    int64_t ms = timeout_ms(self->timeout);
    PyObject *out;
    if (as_key(key, &k, &kn) < 0)
        return NULL;
    cddp_wr_str(cddp_wr_u64(head, (uint64_t)ms), k, (uint32_t)kn);
    reply = client_call(self, CDDP_STORE_OP_GET, head, 12 + (size_t)kn, NULL, 0,
                        ms + REPLY_GRACE_MS, "get", key, ms, &rlen);
    if (!reply)
        return NULL;
    out = PyBytes_FromStringAndSize((const char *)reply + 1, (Py_ssize_t)rlen - 1);
    free(reply);
    return out;
}

static PyObject *client_add(ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *k;
    Py_ssize_t kn;
    long long amount;
    uint8_t head[12 + CDDP_STORE_MAX_KEY], *reply;
    size_t rlen;
    int64_t v;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add(key, amount) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (as_key(args[0], &k, &kn) < 0)
        return NULL;
    if (!PyLong_Check(args[1]) && !PyIndex_Check(args[1])) {
        PyErr_Format(PyExc_TypeError, "add(): amount must be an int, not %.100s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    amount = PyLong_AsLongLong(args[1]);
    if (amount == -1 && PyErr_Occurred())
        return NULL;
    cddp_wr_str(cddp_wr_u64(head, (uint64_t)amount), k, (uint32_t)kn);
    reply = client_call(self, CDDP_STORE_OP_ADD, head, 12 + (size_t)kn, NULL, 0,
                        timeout_ms(self->timeout), "add", args[0], timeout_ms(self->timeout), &rlen);
    if (!reply || reply_size(self, reply, rlen, 8) < 0)
        return NULL;
    v = (int64_t)cddp_ld_u64(reply + 1);
    free(reply);
    return PyLong_FromLongLong(v);
}

static PyObject *client_wait(ClientObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", "timeout", NULL};
    PyObject *keys, *tmo = Py_None;
    uint8_t *head, *reply;
    size_t hl, rlen;
    int64_t ms = timeout_ms(self->timeout);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:wait", kwlist, &keys, &tmo))
        return NULL;
    if (tmo != Py_None && seconds_to_ms(tmo, &ms) < 0)
        return NULL;
    if (!(head = encode_keys(keys, 8, &hl)))
        return NULL;
    cddp_wr_u64(head, (uint64_t)ms);
    reply = client_call(self, CDDP_STORE_OP_WAIT, head, hl, NULL, 0, ms + REPLY_GRACE_MS, "wait",
                        keys, ms, &rlen);
    PyMem_Free(head);
    if (!reply || reply_size(self, reply, rlen, 0) < 0)
        return NULL;
    free(reply);
    Py_RETURN_NONE;
}

static PyObject *client_check(ClientObject *self, PyObject *keys)
{
    uint8_t *head, *reply;
    size_t hl, rlen;
    int all;
    if (!(head = encode_keys(keys, 0, &hl)))
        return NULL;
    reply = client_call(self, CDDP_STORE_OP_CHECK, head, hl, NULL, 0, timeout_ms(self->timeout),
                        "check", keys, timeout_ms(self->timeout), &rlen);
    PyMem_Free(head);
    if (!reply || reply_size(self, reply, rlen, 1) < 0)
        return NULL;
    all = reply[1] != 0;
    free(reply);
    return PyBool_FromLong(all);
}

static PyObject *client_compare_set(ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *k;
    Py_ssize_t kn;
    Py_buffer x, d;
    uint8_t *head = NULL, *reply = NULL;
    size_t hl, rlen;
    PyObject *out = NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError,
                     "compare_set(key, expected_value, desired_value) takes 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    if (as_key(args[0], &k, &kn) < 0 || as_value(args[1], &x) < 0)
        return NULL;
    if (as_value(args[2], &d) < 0) {
        PyBuffer_Release(&x);
        return NULL;
    }
    hl = 8 + (size_t)kn + (size_t)x.len;
    if (!(head = PyMem_Malloc(hl))) {
        PyErr_NoMemory();
        goto done;
    }
    cddp_wr_str(cddp_wr_str(head, k, (uint32_t)kn), x.buf, (uint32_t)x.len);
    reply = client_call(self, CDDP_STORE_OP_CAS, head, hl, d.buf, (size_t)d.len,
                        timeout_ms(self->timeout), "compare_set", args[0],
                        timeout_ms(self->timeout), &rlen);
    if (reply)
        out = PyBytes_FromStringAndSize((const char *)reply + 1, (Py_ssize_t)rlen - 1);
done:
    free(reply);
    PyMem_Free(head);
    PyBuffer_Release(&x);
    PyBuffer_Release(&d);
    return out;
}

static PyObject *client_delete_key(ClientObject *self, PyObject *key)
{
    const char *k;
    Py_ssize_t kn;
    uint8_t head[4 + CDDP_STORE_MAX_KEY], *reply;
    size_t rlen;
    int existed;
    if (as_key(key, &k, &kn) < 0)
        return NULL;
    cddp_wr_str(head, k, (uint32_t)kn);
    reply = client_call(self, CDDP_STORE_OP_DELETE, head, 4 + (size_t)kn, NULL, 0,
                        timeout_ms(self->timeout), "delete_key", key, timeout_ms(self->timeout),
                        &rlen);
    if (!reply || reply_size(self, reply, rlen, 1) < 0)
        return NULL;
    existed = reply[1] != 0;
    free(reply);
    return PyBool_FromLong(existed);
}

static PyObject *client_num_keys(ClientObject *self, PyObject *unused)
{
    uint8_t *reply;
    size_t rlen;
    int64_t n;
    reply = client_call(self, CDDP_STORE_OP_NUM_KEYS, NULL, 0, NULL, 0, timeout_ms(self->timeout),
                        "num_keys", Py_None, timeout_ms(self->timeout), &rlen);
    if (!reply || reply_size(self, reply, rlen, 8) < 0)
        return NULL;
    n = (int64_t)cddp_ld_u64(reply + 1);
    free(reply);
    return PyLong_FromLongLong(n);
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
    if (self->inflight)
        self->closed = 1;            /* the running call frees it when it returns */
    else
        client_free_native(self);
    Py_RETURN_NONE;
}

static PyObject *client_get_timeout(ClientObject *self, void *unused)
{
    return PyFloat_FromDouble(self->timeout);
}

static int client_set_timeout(ClientObject *self, PyObject *v, void *unused)
{
    double s;
    if (!v) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete timeout");
        return -1;
    }
    s = PyFloat_AsDouble(v);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(s)) {
        PyErr_SetString(PyExc_ValueError, "store timeout must not be NaN");
        return -1;
    }
    self->timeout = s;
    return 0;
}

static PyObject *client_get_host(ClientObject *self, void *unused)
{
    return Py_NewRef(self->host);
}

static PyObject *client_get_port(ClientObject *self, void *unused)
{
    return PyLong_FromLong(self->port);
}

static PyMethodDef client_methods[] = {
    {"set", (PyCFunction)(void (*)(void))client_set, METH_FASTCALL, "set(key, value)"},
    {"append", (PyCFunction)(void (*)(void))client_append, METH_FASTCALL, "append(key, value)"},
    {"get", (PyCFunction)client_get, METH_O, "get(key) -> bytes; waits up to timeout"},
    {"add", (PyCFunction)(void (*)(void))client_add, METH_FASTCALL, "add(key, amount) -> int"},
    {"wait", (PyCFunction)(void (*)(void))client_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(keys, timeout=None seconds)"},
    {"check", (PyCFunction)client_check, METH_O, "check(keys) -> bool"},
    {"compare_set", (PyCFunction)(void (*)(void))client_compare_set, METH_FASTCALL,
     "compare_set(key, expected, desired) -> bytes"},
    {"delete_key", (PyCFunction)client_delete_key, METH_O, "delete_key(key) -> bool"},
    {"num_keys", (PyCFunction)client_num_keys, METH_NOARGS, "num_keys() -> int"},
    {"close", (PyCFunction)client_close, METH_NOARGS, "close the connection"},
    {NULL},
};

static PyGetSetDef client_getset[] = {
    {"timeout", (getter)client_get_timeout, (setter)client_set_timeout, "seconds", NULL},
    {"host", (getter)client_get_host, NULL, NULL, NULL},
    {"port", (getter)client_get_port, NULL, NULL, NULL},
    {NULL},
};

static PyType_Slot client_slots[] = {
    {Py_tp_dealloc, client_dealloc},
    {Py_tp_methods, client_methods},
    {Py_tp_getset, client_getset},
    {Py_tp_doc, "cddp store client: one connection to a cddp store server"},
    {0, NULL},
};

static PyType_Spec client_spec = {
    "cddp._C._StoreClient", sizeof(ClientObject), 0, Py_TPFLAGS_DEFAULT, client_slots,
};

/* ---- module functions ----------------------------------------------------------------- */

/* Runs Python's signal handlers from inside a blocked client wait (see distributed/store/proto.h). */
static int interrupt_hook(void)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = PyErr_CheckSignals() < 0;
    PyGILState_Release(g);
    return stop;
}

/* Types and default exception classes in the module state (module.h's contract). */
int cddp_store_types_init(PyObject *m, cddp_state_t *st)
{
    st->store_server_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &server_spec, NULL);
    st->store_client_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &client_spec, NULL);
    if (!st->store_server_type || !st->store_client_type)
        return -1;
    st->store_exc[0] = Py_NewRef(PyExc_TimeoutError);
    st->store_exc[1] = Py_NewRef(PyExc_RuntimeError);
    st->store_exc[2] = Py_NewRef(PyExc_RuntimeError);
    cddp_store_set_interrupt_hook(interrupt_hook);
    return 0;
}

/* token: None or str/bytes -> pointer + length (borrowed from the object). */
static int as_token(PyObject *o, const char **p, Py_ssize_t *n)
{
    *p = NULL;
    *n = 0;
    if (o == Py_None)
        return 0;
    if (PyUnicode_Check(o))
        return (*p = PyUnicode_AsUTF8AndSize(o, n)) ? 0 : -1;
    if (PyBytes_Check(o)) {
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "token must be None, str or bytes");
    return -1;
}

static int check_port(int port)
{
    if (port < 0 || port > 65535) {
        PyErr_Format(PyExc_ValueError, "port must be in [0, 65535], got %d", port);
        return -1;
    }
    return 0;
}

static PyObject *py_store_server_start(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"host", "port", "token", "listen_fd", NULL};
    const char *host, *tok;
    Py_ssize_t tn;
    int port, lfd = -1, rc;
    PyObject *token = Py_None;
    char err[ERRLEN] = "";
    cddp_store_server *srv = NULL;
    ServerObject *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "si|Oi:_store_server_start", kwlist, &host,
                                     &port, &token, &lfd))
        return NULL;
    if (check_port(port) < 0 || as_token(token, &tok, &tn) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cddp_store_server_start(host, port, lfd, (const uint8_t *)tok, (size_t)tn, &srv, err,
                                 sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != CDDP_STORE_OK) {
        PyErr_Format(cddp_state()->store_exc[1], "cddp store server: %s", err);
        return NULL;
    }
    if (!(self = PyObject_New(ServerObject, cddp_state()->store_server_type))) {
        cddp_store_server_stop(srv);
        return NULL;
    }
    self->srv = srv;
    self->port = cddp_store_server_port(srv);
    return (PyObject *)self;
}

static PyObject *py_store_client_connect(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"host", "port", "token", "timeout", NULL};
    PyObject *host, *token = Py_None, *tmo = NULL;
    const char *h, *tok;
    Py_ssize_t tn;
    int port, rc;
    int64_t ms = 300000;
    char err[ERRLEN] = "";
    cddp_store_client *cli = NULL;
    ClientObject *self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Ui|OO:_store_client_connect", kwlist, &host,
                                     &port, &token, &tmo))
        return NULL;
    if (check_port(port) < 0 || as_token(token, &tok, &tn) < 0 ||
        (tmo && seconds_to_ms(tmo, &ms) < 0) || !(h = PyUnicode_AsUTF8(host)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cddp_store_client_open(h, port, (const uint8_t *)tok, (size_t)tn, ms, &cli, err,
                                sizeof err);
    Py_END_ALLOW_THREADS
    if (rc != CDDP_STORE_OK) {
        raise_store_error(host, port, rc, "connect", Py_None, ms, err);
        return NULL;
    }
    if (!(self = PyObject_New(ClientObject, cddp_state()->store_client_type))) {
        cddp_store_client_close(cli);
        return NULL;
    }
    self->cli = cli;
    self->host = Py_NewRef(host);
    self->port = port;
    self->timeout = (double)ms / 1000.0;
    self->inflight = 0;
    self->closed = 0;
    return (PyObject *)self;
}

static PyObject *py_store_set_exceptions(PyObject *m, PyObject *args)
{
    PyObject *t, *n, *s;
    if (!PyArg_ParseTuple(args, "OOO:_store_set_exceptions", &t, &n, &s))
        return NULL;
    Py_SETREF(cddp_state()->store_exc[0], Py_NewRef(t));
    Py_SETREF(cddp_state()->store_exc[1], Py_NewRef(n));
    Py_SETREF(cddp_state()->store_exc[2], Py_NewRef(s));
    Py_RETURN_NONE;
}

/* _store_feed(data, step=0, token=None) -> (replies, bytes sent, clients dropped): the
 * server's framing and handlers over one client's byte stream (tests/fuzz: the frame parser's
 * fuzz target). RuntimeError when the server answered with a malformed frame. */
static PyObject *py_store_feed(PyObject *m, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"data", "step", "token", NULL};
    Py_buffer data;
    Py_ssize_t step = 0, tn;
    PyObject *token = Py_None;
    const char *tok;
    int64_t out[3];
    char err[ERRLEN] = "";
    int rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|nO:_store_feed", kwlist, &data, &step,
                                     &token))
        return NULL;
    if (step < 0 || as_token(token, &tok, &tn) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "step must be >= 0");
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = cddp_store_feed(data.buf, (size_t)data.len, (size_t)step, (const uint8_t *)tok,
                         (size_t)tn, out, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc < 0) {
        PyErr_Format(PyExc_RuntimeError, "_store_feed: %s", err);
        return NULL;
    }
    return Py_BuildValue("LLL", (long long)out[0], (long long)out[1], (long long)out[2]);
}

PyMethodDef cddp_store_module_methods[] = {
    {"_store_feed", (PyCFunction)(void (*)(void))py_store_feed, METH_VARARGS | METH_KEYWORDS,
     "_store_feed(data, step=0, token=None) -> (replies, bytes sent, dropped); test hook"},
    {"_store_server_start", (PyCFunction)(void (*)(void))py_store_server_start,
     METH_VARARGS | METH_KEYWORDS, "_store_server_start(host, port, token=None, listen_fd=-1)"},
    {"_store_client_connect", (PyCFunction)(void (*)(void))py_store_client_connect,
     METH_VARARGS | METH_KEYWORDS, "_store_client_connect(host, port, token=None, timeout=300.0)"},
    {"_store_set_exceptions", py_store_set_exceptions, METH_VARARGS, NULL},
    {NULL},
};
