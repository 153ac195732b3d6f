/* distributed/python/py_mpi.c — cddp._mpi, the MPI backend's extension module: MPI's start and
 * end, the world's rank and size, communicators for the process-group engine, and a raw
 * MPI_Allreduce loop for bench/collectives.py. Built (setup.py) only when an MPI library is
 * found; cddp._C never links libmpi, so `pip install .` works without one.
 *
 * Mirrors: the MPI half of c10d::ProcessGroupMPI (initMPIOnce, createProcessGroupMPI: the world
 * from MPI, subgroups by MPI_Comm_split).
 *
 *   _mpi.init() -> (rank, size, thread level name)     MPI_Init_thread(MULTIPLE) unless MPI is
 *                                                       up already (mpi4py): then its level
 *   _mpi.transport(color=None, key=0, timeout=1800.0) -> "cddp.pg_ext" capsule | None
 *       color None: the world; else MPI_Comm_split of the world (color < 0: not a member ->
 *       None), after a non-blocking barrier under `timeout` (a rank that never calls it makes
 *       the others raise instead of hang). ProcessGroupCPU._external takes the capsule.
 *   _mpi.finalize() / _mpi.finalized() / _mpi.abort(code) / _mpi.version()
 *   _mpi.osu_allreduce(nbytes, iters, dtype=0) -> seconds per MPI_Allreduce (in place)
 *
 * Every call that may wait releases the GIL. World communicators get MPI_ERRORS_RETURN.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "distributed/mpi/mpi_transport.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

static MPI_Comm g_world = MPI_COMM_NULL;    /* our dup of MPI_COMM_WORLD: group management */
static MPI_Comm g_bench = MPI_COMM_NULL;    /* another, for osu_allreduce */
static int g_we_init;                       /* MPI_Init_thread was ours (so is finalize) */
static int g_level = -1;

/* The capsule's block: what ProcessGroupCPU._external reads (ext first), and the split
 * communicator it owns. */
typedef struct {
    cddp_pg_ext ext;
    cddp_mpi_arg arg;
    int owns;
} ext_block;

static int mpi_up(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static PyObject *mpi_error(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len > 0 && len <= MPI_MAX_ERROR_STRING ? len : 0] = 0;
    return PyErr_Format(PyExc_RuntimeError, "%s failed: %s", what, msg);
}

static const char *level_name(int l)
{
    return l == MPI_THREAD_MULTIPLE ? "multiple" : l == MPI_THREAD_SERIALIZED ? "serialized"
         : l == MPI_THREAD_FUNNELED ? "funneled" : "single";
}

/* init() -> (rank, size, thread level) */
static PyObject *py_init(PyObject *m, PyObject *unused)
{
    int init = 0, fin = 0, rc = MPI_SUCCESS, rank = 0, size = 0, level = 0;
    MPI_Finalized(&fin);
    if (fin)
        return PyErr_Format(PyExc_RuntimeError, "MPI was finalized already in this process; "
                            "it cannot start again");
    MPI_Initialized(&init);
    Py_BEGIN_ALLOW_THREADS
    if (!init) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &level);
        g_we_init = rc == MPI_SUCCESS;
    } else {
        MPI_Query_thread(&level);
    }
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Init_thread");
    if (level < MPI_THREAD_SERIALIZED)
        return PyErr_Format(PyExc_RuntimeError, "MPI runs at thread level MPI_THREAD_%s; the "
                            "MPI backend calls MPI from its worker thread and needs "
                            "MPI_THREAD_MULTIPLE (or SERIALIZED): initialise MPI with it "
                            "(mpi4py: mpi4py.rc.thread_level = 'multiple')",
                            level == MPI_THREAD_FUNNELED ? "FUNNELED" : "SINGLE");
    g_level = level;
    cddp_mpi_set_serialized(level < MPI_THREAD_MULTIPLE);
    if (g_world == MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        Py_BEGIN_ALLOW_THREADS
        rc = MPI_Comm_dup(MPI_COMM_WORLD, &g_world);
        Py_END_ALLOW_THREADS
        if (rc != MPI_SUCCESS)
            return mpi_error(rc, "MPI_Comm_dup(MPI_COMM_WORLD)");
        MPI_Comm_set_errhandler(g_world, MPI_ERRORS_RETURN);
    }
    MPI_Comm_rank(g_world, &rank);
    MPI_Comm_size(g_world, &size);
    return Py_BuildValue("iis", rank, size, level_name(level));
}

static void capsule_free(PyObject *cap)
{
    ext_block *b = PyCapsule_GetPointer(cap, "cddp.pg_ext");
    if (!b)
        return;
    if (b->owns && b->arg.comm != MPI_COMM_NULL && mpi_up()) {
        cddp_mpi_lock();
        MPI_Comm_free(&b->arg.comm);
        cddp_mpi_unlock();
    }
    free(b);
}

static PyObject *make_capsule(MPI_Comm c, int owns)
{
    ext_block *b = calloc(1, sizeof *b);
    PyObject *cap;
    if (!b)
        return PyErr_NoMemory();
    b->arg.comm = c;
    b->owns = owns;
    b->ext.ops = &cddp_mpi_ops;
    b->ext.arg = &b->arg;
    cap = PyCapsule_New(b, "cddp.pg_ext", capsule_free);
    if (!cap)
        free(b);
    return cap;
}

/* A non-blocking barrier on the world under `timeout` seconds (GIL released): 0, or -1 with an
 * exception. */
static int world_arrival(double timeout)
{
    MPI_Request q;
    int rc, done = 0;
    double end = MPI_Wtime() + timeout;
    unsigned long spins = 0;
    Py_BEGIN_ALLOW_THREADS
    cddp_mpi_lock();
    rc = MPI_Ibarrier(g_world, &q);
    cddp_mpi_unlock();
    while (rc == MPI_SUCCESS && !done && MPI_Wtime() < end) {
        cddp_mpi_lock();
        rc = MPI_Test(&q, &done, MPI_STATUS_IGNORE);
        cddp_mpi_unlock();
        if (++spins > 2048)
            sched_yield();
    }
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Ibarrier"), -1;
    if (!done) {
        PyErr_Format(PyExc_TimeoutError, "new_group: timed out after %.1f s waiting for every "
                     "rank of the world to call new_group (MPI does not say which rank is "
                     "missing)", timeout);
        return -1;
    }
    return 0;
}

/* transport(color=None, key=0, timeout=1800.0) -> capsule | None */
static PyObject *py_transport(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"color", "key", "timeout", NULL};
    PyObject *color = Py_None;
    int key = 0, col, rc;
    double timeout = 1800.0;
    MPI_Comm c = MPI_COMM_NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oid:transport", kwlist, &color, &key, &timeout))
        return NULL;
    if (g_world == MPI_COMM_NULL || !mpi_up())
        return PyErr_Format(PyExc_RuntimeError, "MPI is not initialized (call _mpi.init())");
    if (color == Py_None)
        return make_capsule(g_world, 0);
    col = (int)PyLong_AsLong(color);
    if (col == -1 && PyErr_Occurred())
        return NULL;
    if (world_arrival(timeout) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    cddp_mpi_lock();
    rc = MPI_Comm_split(g_world, col < 0 ? MPI_UNDEFINED : col, key, &c);
    cddp_mpi_unlock();
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Comm_split");
    if (c == MPI_COMM_NULL)
        Py_RETURN_NONE;
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return make_capsule(c, 1);
}

static PyObject *py_finalize(PyObject *m, PyObject *unused)
{
    int rc = MPI_SUCCESS;
    if (!mpi_up() || !g_we_init)
        Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    if (g_bench != MPI_COMM_NULL)
        MPI_Comm_free(&g_bench);
    if (g_world != MPI_COMM_NULL)
        MPI_Comm_free(&g_world);
    rc = MPI_Finalize();
    Py_END_ALLOW_THREADS
    if (rc != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Finalize");
    Py_RETURN_NONE;
}

static PyObject *py_finalized(PyObject *m, PyObject *unused)
{
    int fin = 0;
    MPI_Finalized(&fin);
    return PyBool_FromLong(fin);
}

static PyObject *py_abort(PyObject *m, PyObject *arg)
{
    int code = (int)PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    if (mpi_up())
        MPI_Abort(MPI_COMM_WORLD, code);
    Py_RETURN_NONE;
}

static PyObject *py_version(PyObject *m, PyObject *unused)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
    int len = 0;
    MPI_Get_library_version(v, &len);
    v[len > 0 && len <= MPI_MAX_LIBRARY_VERSION_STRING ? len : 0] = 0;
    v[strcspn(v, "\n")] = 0;
    return PyUnicode_FromString(v);
}

/* osu_allreduce(nbytes, iters, dtype=0) -> seconds per op: the loop osu_allreduce runs
 * (MPI_Allreduce, SUM, in place, on a buffer of ones), on its own communicator, after a
 * barrier; the slowest rank's time. */
static PyObject *py_osu_allreduce(PyObject *m, PyObject *args)
{
    Py_ssize_t nbytes;
    int iters, dtype = 0, rc = MPI_SUCCESS;
    double t = 0;
    char *buf;
    if (!PyArg_ParseTuple(args, "ni|i:osu_allreduce", &nbytes, &iters, &dtype))
        return NULL;
    if (nbytes < 0 || iters < 1 || dtype < 0 || dtype > 3)
        return PyErr_Format(PyExc_ValueError, "osu_allreduce: bad arguments");
    if (g_world == MPI_COMM_NULL || !mpi_up())
        return PyErr_Format(PyExc_RuntimeError, "MPI is not initialized (call _mpi.init())");
    if (g_bench == MPI_COMM_NULL && MPI_Comm_dup(g_world, &g_bench) != MPI_SUCCESS)
        return PyErr_Format(PyExc_RuntimeError, "MPI_Comm_dup failed");
    if (!(buf = calloc(1, (size_t)nbytes + 8)))
        return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    int n = (int)(nbytes / (Py_ssize_t)cddp_pg_dtype_size[dtype]);
    MPI_Datatype T = cddp_mpi_dtype(dtype);
    double t0;
    MPI_Barrier(g_bench);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters && rc == MPI_SUCCESS; i++)
        rc = MPI_Allreduce(MPI_IN_PLACE, buf, n, T, MPI_SUM, g_bench);
    t = (MPI_Wtime() - t0) / iters;
    if (rc == MPI_SUCCESS)
        rc = MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, g_bench);
    Py_END_ALLOW_THREADS
    free(buf);
    if (rc != MPI_SUCCESS)
        return mpi_error(rc, "MPI_Allreduce");
    return PyFloat_FromDouble(t);
}

static PyMethodDef methods[] = {
    {"init", py_init, METH_NOARGS, "init() -> (rank, size, thread level): MPI_Init_thread"},
    {"transport", (PyCFunction)(void (*)(void))py_transport, METH_VARARGS | METH_KEYWORDS,
     "transport(color=None, key=0, timeout=1800.0) -> 'cddp.pg_ext' capsule or None"},
    {"finalize", py_finalize, METH_NOARGS, "MPI_Finalize (when this module initialised MPI)"},
    {"finalized", py_finalized, METH_NOARGS, "MPI_Finalized"},
    {"abort", py_abort, METH_O, "abort(code): MPI_Abort(MPI_COMM_WORLD, code)"},
    {"version", py_version, METH_NOARGS, "MPI_Get_library_version, first line"},
    {"osu_allreduce", py_osu_allreduce, METH_VARARGS,
     "osu_allreduce(nbytes, iters, dtype=0) -> seconds per raw MPI_Allreduce"},
    {NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "cddp._mpi",
    "cddp's MPI backend: MPI start/end and communicators for the process-group engine.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__mpi(void)
{
    return PyModule_Create(&moddef);
}
