/* core/storage.c — refcounted byte blocks behind tensors (torch's StorageImpl), and the block
 * cache large tensors are allocated from (what torch's CachingHostAllocator and NumPy's small
 * block cache do: reuse freed memory instead of asking the kernel for fresh pages).
 *
 * A storage owns CPU memory or borrows memory from a Python object (a NumPy array for
 * from_numpy); `release` decides how it is given back, so a CUDA allocation is just another
 * release function. Refcounts change only with the GIL held, and so does the cache (every
 * allocation and every last decref runs with the GIL: no lock of its own).
 *
 * Three paths, by size:
 *   nbytes <= INLINE_MAX (4 KiB)  the struct and the data in one aligned block (tiny ops)
 *   < CACHE_MIN (64 KiB)          posix_memalign, free (glibc's bins serve these well)
 *   >= CACHE_MIN                  a size class (8 per power of two: at most 12.5% slack); a
 *                                 freed block goes back to its class's free list and the next
 *                                 request of that class takes it, without a syscall or a page
 *                                 fault. Classes from THP_MIN (2 MiB) on are mmap'ed at a 2 MiB
 *                                 boundary with madvise(MADV_HUGEPAGE): one fault per 2 MiB
 *                                 instead of 512, and fewer TLB misses in bandwidth-bound loops.
 * Why: a training step frees and reallocates the same large activations and gradients every
 * iteration. glibc's dynamic mmap threshold sends such blocks to the heap, whose top it trims
 * on free (brk), so each step page-faulted and zeroed them again (~10% of a small MLP step).
 *
 * The cache holds at most `limit` bytes (CDDP_ALLOC_CACHE_MB, default 256; 0 caches nothing);
 * past that it gives the least recently freed blocks back to the system.
 * _C._alloc_stats() reports it, _C._alloc_empty_cache() empties it (torch's
 * cuda.memory_stats / empty_cache), _C._alloc_cache_limit([bytes]) reads or sets the limit,
 * _C._arena_scope([flag]) reads or sets cddp_arena_scope (below).
 *
 * While DDP's reducer sets cddp_arena_scope (a backward under way), cache-path blocks come
 * from the shared arena (core/arena.c) instead, on class lists of their own: the gradients
 * then lie where the other ranks on this host can all-reduce them without a copy.
 *
 * Shared memory (torch's Storage.share_memory_, file_descriptor strategy): a storage can move
 * its bytes into a memfd mapped MAP_SHARED, so fork children write into the same pages and
 * the fd can be passed to other processes (cddp/multiprocessing/reductions.py); its cached
 * block goes back to the cache when the storage dies.
 */
#include "module.h"
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
#define CACHE_MIN ((size_t)64 << 10)
#define THP_MIN ((size_t)2 << 20)
#define THP_ALIGN ((size_t)2 << 20)

static size_t round_up(size_t n)
{
    size_t r = (n + CDDP_ALIGN - 1) / CDDP_ALIGN * CDDP_ALIGN;
    return r ? r : CDDP_ALIGN;
}

/* ---- the block cache ------------------------------------------------------------------- */

/* A cached (free) block: on its class's list (most recent first) and on the LRU list of all
 * cached blocks (oldest first), so eviction drops the block unused the longest. */
typedef struct cblock {
    void *data;
    size_t bytes;                      /* the class size: what was mapped / allocated */
    struct cblock *cnext, *cprev;      /* class list */
    struct cblock *lnext, *lprev;      /* LRU list */
} cblock;

#define NCLASS 400                     /* 8 per power of two from 32 KiB to 2^64 */

static struct {
    cblock *cls[NCLASS];               /* per class: newest first */
    cblock *lru_head, *lru_tail;       /* oldest .. newest */
    size_t cached_bytes, cached_blocks, limit;
    size_t live_bytes, live_blocks;    /* cache-path blocks in use (class sizes) */
    size_t thp_blocks, thp_bytes;      /* madvise(MADV_HUGEPAGE)d blocks, live or cached */
    uint64_t hits, misses, evictions;
    int limit_read;
} cache;

/* Class of a request n >= CACHE_MIN (already rounded by round_up) and its size in *bytes:
 * the next of 8 steps per power of two. */
static int class_of(size_t n, size_t *bytes)
{
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^k < n <= 2^(k+1) */
    size_t step = ((size_t)1 << k) / 8;                          /* >= 4 KiB: whole pages */
    size_t sz = (n + step - 1) / step * step;
    int c = (k - 15) * 8 + (int)((sz - ((size_t)1 << k)) / step) - 1;
    *bytes = sz;
    return c;          /* n = 64 KiB: class 7; every larger n a higher one, < NCLASS */
}

static size_t cache_limit(void)
{
    if (!cache.limit_read) {
        const char *e = getenv("CDDP_ALLOC_CACHE_MB");
        cache.limit = (size_t)256 << 20;
        if (e && *e)
            cache.limit = (size_t)strtoull(e, NULL, 10) << 20;
        cache.limit_read = 1;
    }
    return cache.limit;
}

/* Fresh memory for a class: a 2 MiB-aligned huge-page mapping from THP_MIN on (zeroed by the
 * kernel: *fresh_zero = 1), else posix_memalign. NULL when the system refuses. */
static void *block_map(size_t bytes, int *fresh_zero)
{
    void *p = NULL;
    *fresh_zero = 0;
    if (bytes >= THP_MIN) {
        char *m = mmap(NULL, bytes + THP_ALIGN, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        size_t lead;
        if (m == MAP_FAILED)
            return NULL;
        lead = (THP_ALIGN - ((uintptr_t)m & (THP_ALIGN - 1))) & (THP_ALIGN - 1);
        if (lead)
            munmap(m, lead);
        munmap(m + lead + bytes, THP_ALIGN - lead);
        p = m + lead;
#ifdef MADV_HUGEPAGE
        madvise(p, bytes, MADV_HUGEPAGE);      /* advice only: a refusal changes nothing */
#endif
        cache.thp_blocks++;
        cache.thp_bytes += bytes;
        *fresh_zero = 1;
        return p;
    }
    return posix_memalign(&p, CDDP_ALIGN, bytes) == 0 ? p : NULL;
}

static void block_unmap(void *p, size_t bytes)
{
    if (bytes >= THP_MIN) {
        munmap(p, bytes);
        cache.thp_blocks--;
        cache.thp_bytes -= bytes;
    } else {
        free(p);
    }
}

static void lru_unlink(cblock *b)
{
    if (b->lprev) b->lprev->lnext = b->lnext; else cache.lru_head = b->lnext;
    if (b->lnext) b->lnext->lprev = b->lprev; else cache.lru_tail = b->lprev;
}

/* Take block b off both lists (it stays allocated). */
static void cache_unlink(cblock *b, int c)
{
    if (b->cprev) b->cprev->cnext = b->cnext; else cache.cls[c] = b->cnext;
    if (b->cnext) b->cnext->cprev = b->cprev;
    lru_unlink(b);
    cache.cached_bytes -= b->bytes;
    cache.cached_blocks--;
}

/* Give the oldest cached blocks back until at most `keep` bytes stay cached. */
static void cache_trim(size_t keep)
{
    while (cache.lru_head && cache.cached_bytes > keep) {
        cblock *b = cache.lru_head;
        size_t bytes;
        cache_unlink(b, class_of(b->bytes, &bytes));
        block_unmap(b->data, b->bytes);
        PyMem_RawFree(b);
        cache.evictions++;
    }
}

static void release_cached(cddp_storage *s)
{
    size_t bytes;
    int c = class_of(round_up(s->nbytes), &bytes);
    cblock *b = NULL;
    cache.live_bytes -= bytes;
    cache.live_blocks--;
    if (bytes <= cache_limit())
        b = PyMem_RawMalloc(sizeof *b);
    if (!b) {
        block_unmap(s->data, bytes);
        return;
    }
    cache_trim(cache_limit() - bytes);
    *b = (cblock){.data = s->data, .bytes = bytes, .cnext = cache.cls[c],
                  .lprev = cache.lru_tail};
    if (cache.cls[c]) cache.cls[c]->cprev = b;
    cache.cls[c] = b;
    if (cache.lru_tail) cache.lru_tail->lnext = b; else cache.lru_head = b;
    cache.lru_tail = b;
    cache.cached_bytes += bytes;
    cache.cached_blocks++;
}

/* Data for a cache-path storage: a cached block of the class, else fresh memory. */
static void *cache_alloc(size_t nbytes, int zero)
{
    size_t bytes;
    int c = class_of(nbytes, &bytes), fresh_zero = 0;
    void *p = NULL;
    if (cache.cls[c]) {
        cblock *b = cache.cls[c];
        cache_unlink(b, c);
        p = b->data;
        PyMem_RawFree(b);
        cache.hits++;
    } else {
        cache.misses++;
        p = block_map(bytes, &fresh_zero);
        if (!p && cache.cached_blocks) {          /* the system said no: retry uncached */
            cache_trim(0);
            p = block_map(bytes, &fresh_zero);
        }
        if (!p)
            return NULL;
    }
    if (zero && !fresh_zero)
        memset(p, 0, nbytes);
    cache.live_bytes += bytes;
    cache.live_blocks++;
    return p;
}

/* ---- arena blocks ---------------------------------------------------------------------- */

/* Blocks from the shared arena (core/arena.c), taken while cddp_arena_scope is set: their own
 * class lists, never unmapped. Past the cache limit a freed block is hollowed instead (its
 * pages go back, its addresses stay on the list for the next block of its class). */
typedef struct ablock {
    void *data;
    size_t bytes;                      /* the class size */
    int hollow;                        /* pages given back: reads as zeros */
    struct ablock *next;
} ablock;

static struct {
    ablock *cls[NCLASS];
    size_t cached_bytes, live_bytes;   /* not counting hollow blocks */
} acache;

static void release_arena(cddp_storage *s)
{
    size_t bytes;
    int c = class_of(round_up(s->nbytes), &bytes);
    ablock *b;
    acache.live_bytes -= bytes;
    if (!cddp_arena_owns(s->data, bytes))   /* a fork child's inherited block: the parent's */
        return;
    b = PyMem_RawMalloc(sizeof *b);
    if (!b) {                               /* its addresses are lost, not its pages */
        cddp_arena_hollow(s->data, bytes);
        return;
    }
    *b = (ablock){.data = s->data, .bytes = bytes, .next = acache.cls[c]};
    if (acache.cached_bytes + bytes > cache_limit()) {
        cddp_arena_hollow(s->data, bytes);
        b->hollow = 1;
    } else {
        acache.cached_bytes += bytes;
    }
    acache.cls[c] = b;
}

/* Data for a storage while cddp_arena_scope is set: a freed arena block of the class, else
 * fresh arena bytes; NULL when there is no arena or it is exhausted (the caller falls back
 * to the private cache). */
static void *arena_alloc(size_t nbytes, int zero)
{
    size_t bytes;
    int c = class_of(nbytes, &bytes), fresh_zero = 1;
    void *p;
    for (;;) {
        ablock *b = acache.cls[c];
        if (!b) {
            if (!(p = cddp_arena_take(bytes)))
                return NULL;
            break;
        }
        acache.cls[c] = b->next;
        p = b->data;
        fresh_zero = b->hollow;
        if (!b->hollow)
            acache.cached_bytes -= bytes;
        PyMem_RawFree(b);
        if (cddp_arena_owns(p, bytes))    /* not a block a fork child inherited */
            break;
    }
    if (zero && !fresh_zero)
        memset(p, 0, nbytes);
    acache.live_bytes += bytes;
    return p;
}

/* Hollow every cached arena block (empty_cache). */
static void arena_trim(void)
{
    for (int c = 0; c < NCLASS; c++)
        for (ablock *b = acache.cls[c]; b; b = b->next)
            if (!b->hollow) {
                cddp_arena_hollow(b->data, b->bytes);
                acache.cached_bytes -= b->bytes;
                b->hollow = 1;
            }
}

/* ---- storages ------------------------------------------------------------------------ */

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
        if (alloc >= CACHE_MIN) {
            if (cddp_arena_scope && (data = arena_alloc(alloc, zero)))
                s->release = release_arena;
            else if ((data = cache_alloc(alloc, zero)))
                s->release = release_cached;
            else
                goto fail;
        } else {
            if (posix_memalign(&data, CDDP_ALIGN, alloc) != 0)
                goto fail;
            if (zero)
                memset(data, 0, alloc);
        }
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

static void release_meta(cddp_storage *s)
{
    munmap(s->data, round_up(s->nbytes));
}

cddp_storage *cddp_storage_new_meta(size_t nbytes)
{
    cddp_storage *s = PyMem_RawCalloc(1, sizeof *s);
    void *p;
    if (!s)
        return (cddp_storage *)PyErr_NoMemory();
    /* MAP_NORESERVE: not counted against the commit limit, so a model larger than the
     * machine can be described; untouched pages read as the kernel's shared zero page */
    p = mmap(NULL, round_up(nbytes), PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        PyMem_RawFree(s);
        PyErr_Format(PyExc_MemoryError, "cddp: cannot reserve %zu bytes of address space for "
                     "a meta tensor", nbytes);
        return NULL;
    }
    s->refcnt = 1;
    s->data = p;
    s->nbytes = nbytes;
    s->device = CDDP_DEVICE_META;
    s->release = release_meta;
    return s;
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

/* ---- Python: statistics and control (underscored: not torch API) ------------------------ */

static PyObject *py_alloc_stats(PyObject *m, PyObject *unused)
{
    return Py_BuildValue(
        "{s:n,s:n,s:n,s:n,s:n,s:n,s:K,s:K,s:K,s:n,s:n,s:n,s:n,s:n}",
        "cached_bytes", (Py_ssize_t)cache.cached_bytes,
        "cached_blocks", (Py_ssize_t)cache.cached_blocks,
        "live_bytes", (Py_ssize_t)cache.live_bytes,
        "live_blocks", (Py_ssize_t)cache.live_blocks,
        "thp_blocks", (Py_ssize_t)cache.thp_blocks,
        "thp_bytes", (Py_ssize_t)cache.thp_bytes,
        "hits", (unsigned long long)cache.hits,
        "misses", (unsigned long long)cache.misses,
        "evictions", (unsigned long long)cache.evictions,
        "limit", (Py_ssize_t)cache_limit(),
        "cache_min", (Py_ssize_t)CACHE_MIN,
        "thp_min", (Py_ssize_t)THP_MIN,
        "arena_live_bytes", (Py_ssize_t)acache.live_bytes,
        "arena_cached_bytes", (Py_ssize_t)acache.cached_bytes);
}

static PyObject *py_alloc_empty_cache(PyObject *m, PyObject *unused)
{
    cache_trim(0);
    arena_trim();
    Py_RETURN_NONE;
}

/* _alloc_cache_limit(nbytes=None) -> the limit before the call; a new limit trims at once. */
static PyObject *py_alloc_cache_limit(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    size_t old = cache_limit();
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "_alloc_cache_limit(nbytes=None)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        Py_ssize_t v = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0) {
            PyErr_SetString(PyExc_ValueError, "_alloc_cache_limit: nbytes must be >= 0");
            return NULL;
        }
        cache.limit = (size_t)v;
        cache_trim(cache.limit);
    }
    return PyLong_FromSize_t(old);
}

/* _arena_scope(flag=None) -> the scope before the call; sets it when given (tests and
 * bench/ddp.py: tensors in the shared arena outside a DDP backward). */
static PyObject *py_arena_scope(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    int old = cddp_arena_scope;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "_arena_scope(flag=None)");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        int v = PyObject_IsTrue(args[0]);
        if (v < 0)
            return NULL;
        cddp_arena_scope = v;
    }
    return PyBool_FromLong(old);
}

PyMethodDef cddp_storage_module_methods[] = {
    {"_arena_scope", (PyCFunction)(void (*)(void))py_arena_scope, METH_FASTCALL,
     "_arena_scope(flag=None): whether new large tensors come from the shared arena."},
    {"_alloc_stats", py_alloc_stats, METH_NOARGS,
     "Block cache counters: cached/live bytes and blocks, huge-page blocks, hits, misses."},
    {"_alloc_empty_cache", py_alloc_empty_cache, METH_NOARGS,
     "Give every cached free block back to the system."},
    {"_alloc_cache_limit", (PyCFunction)(void (*)(void))py_alloc_cache_limit, METH_FASTCALL,
     "_alloc_cache_limit(nbytes=None): the cache's byte limit (set it when given)."},
    {NULL},
};

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
    if (s->device != -1) {
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
