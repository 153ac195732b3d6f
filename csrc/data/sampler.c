/* data/sampler.c — the index lists of torch.utils.data.DistributedSampler, in C.
 *
 *   _distributed_sampler_indices(n, num_replicas, rank, shuffle, seed, drop_last) -> list[int]
 *
 * torch's recipe exactly: shuffle = randperm(n) on a generator seeded with seed (the caller
 * passes seed + epoch); without drop_last the list is padded by repeating it from the start up
 * to num_samples * num_replicas, with drop_last it is cut to that size; then rank takes every
 * num_replicas-th index starting at rank. num_samples = ceil(n / R), or with drop_last and
 * n % R != 0, ceil((n - R) / R).
 */
#include "core/cddp.h"
#include "module.h"

static PyObject *py_sampler_indices(PyObject *m, PyObject *args)
{
    long long n, reps, rank, seed;
    int shuffle, drop_last;
    int64_t *perm = NULL;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "LLLpLp:_distributed_sampler_indices", &n, &reps, &rank,
                          &shuffle, &seed, &drop_last))
        return NULL;
    if (n < 0 || reps <= 0 || rank < 0 || rank >= reps) {
        PyErr_Format(PyExc_ValueError, "Invalid rank %lld, rank should be in the interval "
                     "[0, %lld] (dataset length %lld)", rank, reps - 1, n);
        return NULL;
    }
    /* ceil((n - R) / R) = (n - 1) / R when dropping (n - R may be negative: 0 then), else
     * ceil(n / R), written so that n near INT64_MAX does not overflow */
    int64_t num_samples = (drop_last && n % reps != 0) ? (n - 1) / reps
                                                        : n / reps + (n % reps != 0);
    if (shuffle) {                              /* unshuffled, the list is 0..n-1: no table */
        if ((uint64_t)n > PY_SSIZE_T_MAX / sizeof(int64_t)) {
            PyErr_Format(PyExc_MemoryError, "DistributedSampler: cannot shuffle %lld indices "
                         "(the permutation would not fit in memory)", n);
            return NULL;
        }
        if (!(perm = PyMem_Malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1))))
            return PyErr_NoMemory();
        PyObject *gen = PyObject_CallMethod(PyImport_AddModule("cddp._C"), "Generator", NULL);
        PyObject *r = gen ? PyObject_CallMethod(gen, "manual_seed", "L", seed) : NULL;
        int rc = r ? cddp_randperm_fill(gen, n, perm) : -1;
        Py_XDECREF(r);
        Py_XDECREF(gen);
        if (rc < 0)
            goto done;
    }
    out = PyList_New(num_samples);
    if (!out)
        goto done;
    for (int64_t k = 0; k < num_samples; k++) {
        int64_t pos = rank + k * reps;          /* position in the padded/cut list */
        int64_t at = n ? pos % n : 0;           /* padding repeats the list from its start */
        int64_t v = perm ? perm[at] : at;
        PyObject *o = PyLong_FromLongLong(v);
        if (!o) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, o);
    }
done:
    PyMem_Free(perm);
    return out;
}

PyMethodDef cddp_sampler_module_methods[] = {
    {"_distributed_sampler_indices", py_sampler_indices, METH_VARARGS,
     "_distributed_sampler_indices(n, num_replicas, rank, shuffle, seed, drop_last)"},
    {NULL},
};
