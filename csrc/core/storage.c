/* core/storage.c — refcounted byte blocks behind tensors (torch's StorageImpl).
 *
 * A storage owns CPU memory (aligned malloc) or borrows memory from a Python object (a NumPy
 * array for from_numpy); `release` decides how it is given back, so a CUDA allocation is just
 * another release function. Refcounts change only with the GIL held.
 * Shared memory (torch's Storage.share_memory_, file_descriptor strategy): a storage can move
 * its bytes into a memfd mapped MAP_SHARED, so fork children write into the same pages and
 * the fd can be passed to other processes (cddp/multiprocessing/reductions.py).
 */
#include "core/cddp.h"
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <sys/mman.h>

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
        if (s->release)                 /* bytes moved out of the block (shared memory) */
            s->release(s);
        free(s);
        return;
    }
    if (s->release)
        s->release(s);
    else
        free(s->data);
    PyMem_RawFree(s);
}

/* ---- shared memory -------------------------------------------------------------------- */

typedef struct {                 /* a shared storage's owner */
    int fd;                      /* the memfd (kept: other processes are sent duplicates) */
    void *map;
    size_t map_size;
    /* the storage's memory before cddp_storage_share: kept until the storage dies, because
     * NumPy arrays made by .numpy() may still point into it */
    void *old_data, *old_owner;
    void (*old_release)(cddp_storage *);
    int old_kind;                /* 0 none, 1 free(old_data), 2 old_release with old_owner */
} shm_info;

static void release_shm(cddp_storage *s)
{
    shm_info *info = s->owner;
    munmap(info->map, info->map_size);
    close(info->fd);
    if (info->old_kind == 1) {
        free(info->old_data);
    } else if (info->old_kind == 2) {
        s->owner = info->old_owner;
        s->data = info->old_data;
        info->old_release(s);
    }
    free(info);
}

int cddp_storage_shared_fd(const cddp_storage *s)
{
    return s->release == release_shm ? ((shm_info *)s->owner)->fd : -1;
}

/* Map fd (size >= nbytes) into a new shm_info. NULL + OSError. */
static shm_info *map_fd(int fd, size_t nbytes)
{
    shm_info *info = calloc(1, sizeof *info);
    if (!info)
        return (shm_info *)PyErr_NoMemory();
    info->fd = fd;
    info->map_size = nbytes ? nbytes : 1;
    info->map = mmap(NULL, info->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (info->map == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        free(info);
        return NULL;
    }
    return info;
}

int cddp_storage_share(cddp_storage *s)
{
    shm_info *info;
    int fd;
    if (s->release == release_shm)
        return 0;
    if (s->device >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "share_memory_: only CPU storages can be shared");
        return -1;
    }
    fd = memfd_create("cddp-shared", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)(s->nbytes ? s->nbytes : 1)) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    info = map_fd(fd, s->nbytes);
    if (!info) {
        close(fd);
        return -1;
    }
    if (s->nbytes)
        memcpy(info->map, s->data, s->nbytes);
    info->old_data = s->data;
    info->old_owner = s->owner;
    info->old_release = s->release;
    info->old_kind = s->inline_block ? 0 : s->release ? 2 : 1;
    s->data = info->map;
    s->owner = info;
    s->release = release_shm;
    return 0;
}

cddp_storage *cddp_storage_from_fd(int fd, size_t nbytes)
{
    cddp_storage *s = PyMem_RawCalloc(1, sizeof *s);
    shm_info *info;
    off_t end = lseek(fd, 0, SEEK_END);
    if (!s)
        return (cddp_storage *)PyErr_NoMemory();
    if (end < 0 || (size_t)end < nbytes) {
        PyErr_Format(PyExc_ValueError, "shared storage: the file descriptor holds %lld bytes, "
                     "%zu expected", (long long)end, nbytes);
        goto fail;
    }
    info = map_fd(fd, nbytes);
    if (!info)
        goto fail;
    s->refcnt = 1;
    s->data = info->map;
    s->nbytes = nbytes;
    s->device = -1;
    s->owner = info;
    s->release = release_shm;
    return s;
fail:
    PyMem_RawFree(s);
    return NULL;
}
