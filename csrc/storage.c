/* storage.c — refcounted byte blocks behind tensors (torch's StorageImpl).
 *
 * A storage owns CPU memory (aligned malloc) or borrows memory from a Python object (a NumPy
 * array for from_numpy); `release` decides how it is given back, so a CUDA allocation is just
 * another release function. Refcounts change only with the GIL held.
 */
#include "cddp.h"
#include <stdlib.h>
#include <string.h>

static void release_pyowner(cddp_storage *s)
{
    Py_XDECREF((PyObject *)s->owner);
}

cddp_storage *cddp_storage_new(size_t nbytes, int zero)
{
    cddp_storage *s = PyMem_RawCalloc(1, sizeof *s);
    void *data = NULL;
    if (!s)
        goto fail;
    /* round up so the tail of a vectorized loop never reads past the block */
    size_t alloc = (nbytes + CDDP_ALIGN - 1) / CDDP_ALIGN * CDDP_ALIGN;
    if (alloc == 0)
        alloc = CDDP_ALIGN;
    if (posix_memalign(&data, CDDP_ALIGN, alloc) != 0)
        goto fail;
    if (zero)
        memset(data, 0, alloc);
    s->refcnt = 1;
    s->data = data;
    s->nbytes = nbytes;
    s->device = -1;
    return s;
fail:
    PyMem_RawFree(s);
    PyErr_Format(PyExc_MemoryError, "cddp: cannot allocate %zu bytes for a tensor", nbytes);
    return NULL;
}

cddp_storage *cddp_storage_from_pyobject(void *data, size_t nbytes, PyObject *owner)
{
    cddp_storage *s = PyMem_RawCalloc(1, sizeof *s);
    if (!s)
        return (cddp_storage *)PyErr_NoMemory();
    s->refcnt = 1;
    s->data = data;
    s->nbytes = nbytes;
    s->device = -1;
    s->owner = Py_NewRef(owner);
    s->release = release_pyowner;
    return s;
}

void cddp_storage_decref(cddp_storage *s)
{
    if (!s || --s->refcnt > 0)
        return;
    if (s->release)
        s->release(s);
    else
        free(s->data);
    PyMem_RawFree(s);
}
