/* module.c — cddp._cuda, the CUDA extension's Python face: device count and build facts
 * (torch.cuda.device_count, torch.version.cuda), the loader of cuBLAS/cuBLASLt/NCCL (runtime/
 * libs.c) with the wheel search roots from sys.path, and the per-device allocator's stats
 * (torch.cuda.memory_allocated & co.). cddp/cuda.py wraps it; nothing here needs a GPU to import.
 */
#include "binding.h"

#include "allocator.h"
#include "check.h"
#include "cublas_api.h"
#include "device.h"
#include "libs.h"
#include "loader.h"
#include "nccl_api.h"

#ifndef CDDP_CUDA_ARCHS
#define CDDP_CUDA_ARCHS "unknown"
#endif

static PyObject *oom_error;

PyObject *cddp_cuda_raise(int rc)
{
    PyObject *type = rc == CDDP_CUDA_EOOM ? oom_error : rc == CDDP_CUDA_EARG ? PyExc_ValueError
                   : rc == CDDP_CUDA_ENOMEM ? PyExc_MemoryError : PyExc_RuntimeError;
    const char *msg = cddp_cuda_errmsg();
    PyErr_SetString(type, msg[0] ? msg : "CUDA error (no message recorded)");
    cddp_cuda_clearerr();
    return NULL;
}

static PyObject *py_device_count(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(cddp_cuda_device_count(NULL));
}

/* {"cuda": "13.0", "archs": "...", "driver": 0, "device_count_error": 35} */
static PyObject *py_build_info(PyObject *self, PyObject *noargs)
{
    int v = cddp_cuda_runtime_version(), err = 0;
    int n = cddp_cuda_device_count(&err);
    return Py_BuildValue("{s:N,s:s,s:i,s:i,s:i}", "cuda",
                         PyUnicode_FromFormat("%d.%d", v / 1000, v % 1000 / 10), "archs",
                         CDDP_CUDA_ARCHS, "driver", cddp_cuda_driver_version(), "device_count", n,
                         "device_count_error", err);
}

/* A list of str (sys.path) -> a malloc'd array of borrowed UTF-8 pointers (valid while `list`
 * lives). NULL with an exception set on a bad argument. */
static const char **path_list(PyObject *list, Py_ssize_t *n)
{
    const char **dirs;
    if (!PyList_Check(list))
        return PyErr_Format(PyExc_TypeError, "dirs must be a list of str"), NULL;
    *n = PyList_GET_SIZE(list);
    if (!(dirs = PyMem_Calloc((size_t)*n + 1, sizeof *dirs)))
        return (const char **)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *o = PyList_GET_ITEM(list, i);
        dirs[i] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;   /* non-str entries: skipped */
        if (PyErr_Occurred())
            return PyMem_Free(dirs), NULL;
    }
    return dirs;
}

static int lib_index(const char *key)
{
    int i = cddp_libs_find(key);
    if (i < 0)
        PyErr_Format(PyExc_ValueError, "unknown library '%s' (cublas, cublasLt, nccl)", key);
    return i;
}

/* _load_library(key, dirs) -> (path, version): open once per process (libs.c's registry). */
static PyObject *py_load_library(PyObject *self, PyObject *args)
{
    const char *key;
    PyObject *list;
    const char **dirs;
    Py_ssize_t n;
    char path[4096], version[32];
    int i, rc;
    if (!PyArg_ParseTuple(args, "sO", &key, &list) || (i = lib_index(key)) < 0)
        return NULL;
    if (!(dirs = path_list(list, &n)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cddp_libs_load(i, dirs, (size_t)n);
    Py_END_ALLOW_THREADS
    PyMem_Free(dirs);
    if (rc < 0)
        return cddp_cuda_raise(rc);
    cddp_libs_status(i, path, sizeof path, version, sizeof version);
    return Py_BuildValue("(ss)", path, version);
}

/* _probe_library(key, dirs) -> {"path", "version", "report"}: the same search, outside the
 * registry (opened, read, closed): the loader's tests and cddp.cuda's diagnostics. */
static PyObject *py_probe_library(PyObject *self, PyObject *args)
{
    union { cddp_cublas_api a; cddp_cublaslt_api b; cddp_nccl_api c; } table;
    const char *key;
    PyObject *list, *res;
    const char **dirs;
    Py_ssize_t n;
    cddp_lib *lib;
    char version[32];
    int i, rc;
    if (!PyArg_ParseTuple(args, "sO", &key, &list) || (i = lib_index(key)) < 0)
        return NULL;
    if (!(dirs = path_list(list, &n)))
        return NULL;
    if (!(lib = PyMem_Calloc(1, sizeof *lib))) {
        PyMem_Free(dirs);
        return PyErr_NoMemory();
    }
    rc = cddp_lib_open(cddp_libs_spec(i), dirs, (size_t)n, lib, &table);
    PyMem_Free(dirs);
    if (rc < 0) {
        PyMem_Free(lib);
        return cddp_cuda_raise(rc);
    }
    cddp_libs_version(cddp_libs_spec(i), &table, version, sizeof version);
    res = Py_BuildValue("{s:s,s:s,s:s}", "path", lib->path, "version", version, "report", lib->report);
    cddp_lib_close(lib);
    PyMem_Free(lib);
    return res;
}

/* _library_status(key) -> (path, version) when loaded, else None. */
static PyObject *py_library_status(PyObject *self, PyObject *args)
{
    const char *key;
    char path[4096], version[32];
    int i;
    if (!PyArg_ParseTuple(args, "s", &key) || (i = lib_index(key)) < 0)
        return NULL;
    if (cddp_libs_status(i, path, sizeof path, version, sizeof version) != 1)
        Py_RETURN_NONE;
    return Py_BuildValue("(ss)", path, version);
}

/* A stats struct as the dict cddp.cuda.memory_stats builds on. */
PyObject *cddp_cuda_stats_dict(const cddp_alloc_stats *s)
{
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n,s:n}",
        "allocated", (Py_ssize_t)s->allocated, "peak_allocated", (Py_ssize_t)s->peak_allocated,
        "reserved", (Py_ssize_t)s->reserved, "peak_reserved", (Py_ssize_t)s->peak_reserved,
        "requested", (Py_ssize_t)s->requested, "n_alloc", (Py_ssize_t)s->n_alloc,
        "n_free", (Py_ssize_t)s->n_free, "n_raw_alloc", (Py_ssize_t)s->n_raw_alloc,
        "n_raw_free", (Py_ssize_t)s->n_raw_free, "n_cache_hits", (Py_ssize_t)s->n_cache_hits,
        "n_oom_retries", (Py_ssize_t)s->n_oom_retries, "n_ooms", (Py_ssize_t)s->n_ooms,
        "n_pending", (Py_ssize_t)s->n_pending);
}

/* _memory(op, device): op "stats" -> dict (zeros before the first allocation), "reset_peak",
 * "empty_cache" -> None. Never creates an allocator, so it answers without a GPU. */
static PyObject *py_memory(PyObject *self, PyObject *args)
{
    const char *op;
    int device, rc = 0;
    cddp_allocator *a;
    cddp_alloc_stats s = {0};
    if (!PyArg_ParseTuple(args, "si", &op, &device))
        return NULL;
    a = cddp_cuda_allocator_peek(device);
    if (strcmp(op, "stats") == 0) {
        if (a)
            cddp_allocator_stats(a, &s);
        return cddp_cuda_stats_dict(&s);
    }
    if (strcmp(op, "reset_peak") == 0) {
        if (a)
            cddp_allocator_reset_peak(a);
    } else if (strcmp(op, "empty_cache") == 0) {
        if (a) {
            Py_BEGIN_ALLOW_THREADS
            rc = cddp_allocator_empty_cache(a);
            Py_END_ALLOW_THREADS
        }
    } else {
        return PyErr_Format(PyExc_ValueError, "unknown memory op '%s'", op);
    }
    if (rc < 0)
        return cddp_cuda_raise(rc);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"device_count", py_device_count, METH_NOARGS, "Number of CUDA devices (0 without a GPU)."},
    {"_build_info", py_build_info, METH_NOARGS, "What this extension was built with."},
    {"_load_library", py_load_library, METH_VARARGS, "Load cublas/cublasLt/nccl once: (path, version)."},
    {"_probe_library", py_probe_library, METH_VARARGS, "Search for a library without keeping it."},
    {"_library_status", py_library_status, METH_VARARGS, "(path, version) of a loaded library, or None."},
    {"_memory", py_memory, METH_VARARGS, "Allocator stats / reset_peak / empty_cache of a device."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "cddp._cuda",
                                    "cddp's CUDA extension (cuda/).", -1, NULL};

static int add_methods(PyObject *m, PyMethodDef *defs)
{
    return PyModule_AddFunctions(m, defs);
}

PyMODINIT_FUNC PyInit__cuda(void)
{
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    oom_error = PyErr_NewExceptionWithDoc("cddp._cuda.OutOfMemoryError",
                                          "The CUDA caching allocator could not allocate.",
                                          PyExc_RuntimeError, NULL);
    if (!oom_error || PyModule_AddObjectRef(m, "OutOfMemoryError", oom_error) < 0 ||
        add_methods(m, methods) < 0 || add_methods(m, cddp_cuda_testing_methods) < 0 ||
        add_methods(m, cddp_cuda_kernel_methods) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
