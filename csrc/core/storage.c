/* core/storage.c — refcounted byte blocks behind tensors (torch's StorageImpl).
 *
 * A storage owns CPU memory (aligned malloc) or borrows memory from a Python object (a NumPy
 * array for from_numpy); `release` decides how it is given back, so a CUDA allocation is just
 * another release function. Refcounts change only with the GIL held.
 */
#include "core/cddp.h"
#include <stdlib.h>
#include <string.h>

static void release_pyowner(cddp_storage *s)
{
    Py_XDECREF((PyObject *)s->owner);
}

/* Small tensors (most of a tiny model's step) get the struct and the data in one aligned
 * block: one allocation instead of two on the per-op path. */
#define INLINE_MAX 4096

static size_t round_up(size_t n)
{
    size_t r = (n + CDDP_ALIGN - 1) / CDDP_ALIGN * CDDP_ALIGN;
    return r ? r : CDDP_ALIGN;
}

cddp_storage *cddp_storage_new(size_t nbytes, int zero)
{
    cddp_storage *s = NULL;
    void *data = NULL;
    /* round up so the tail of a vectorized loop never reads past the block */
    size_t alloc = round_up(nbytes);
    if (nbytes <= INLINE_MAX) {
        size_t hdr = round_up(sizeof *s);
        void *blk = NULL;
        if (posix_memalign(&blk, CDDP_ALIGN, hdr + alloc) != 0)
            goto fail;
        s = blk;
        memset(s, 0, sizeof *s);
        s->data = (char *)blk + hdr;
        s->inline_block = 1;
        if (zero)
            memset(s->data, 0, alloc);
    } else {
        s = PyMem_RawCalloc(1, sizeof *s);
        if (!s)
            goto fail;
        if (posix_memalign(&data, CDDP_ALIGN, alloc) != 0)
            goto fail;
        if (zero)
            memset(data, 0, alloc);
        s->data = data;
    }
    s->refcnt = 1;
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
    if (s->inline_block) {
        free(s);
        return;
    }
    if (s->release)
        s->release(s);
    else
        free(s->data);
    PyMem_RawFree(s);
}
