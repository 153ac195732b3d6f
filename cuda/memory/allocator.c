/* allocator.c — the caching device allocator of allocator.h: size classes, per-(stream, size)
 * free lists, record_stream events, empty_cache, stats with peaks, and OOM -> release the cache
 * -> retry -> an error naming the size. torch.cuda's caching allocator, minus block splitting.
 * Pure C over the backend's function pointers (tested on the CPU with memory/fake.c).
 *
 * Blocks: every block handed out is in `live` (hashed by pointer); a freed block goes to the
 * bucket of (stream, size) in `cache`, or, when record_stream added streams, to `pending` with
 * one event per extra stream until all have completed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "check.h"

#define NBUCKETS 1024

typedef struct block {
    void *ptr;
    size_t size;             /* the size class */
    size_t requested;
    void *stream;            /* the allocation stream */
    void **streams;          /* other streams it was used on (record_stream) */
    void **events;           /* one per stream while pending */
    int nstreams, cap_streams;
    struct block *next;
} block;

struct cddp_allocator {
    cddp_alloc_backend be;
    pthread_mutex_t mu;
    block *live[NBUCKETS];
    block *cache[NBUCKETS];
    block *pending;
    cddp_alloc_stats st;
};

static size_t hash_ptr(const void *p)
{
    uintptr_t x = (uintptr_t)p >> 9;
    return (size_t)((x ^ (x >> 13)) % NBUCKETS);
}

static size_t hash_key(const void *stream, size_t size)
{
    uintptr_t x = (uintptr_t)stream * 31u + size / CDDP_ALLOC_SMALL_ROUND;
    return (size_t)((x ^ (x >> 17)) % NBUCKETS);
}

size_t cddp_allocator_round(size_t size)
{
    size_t r = size <= CDDP_ALLOC_SMALL_MAX ? CDDP_ALLOC_SMALL_ROUND : CDDP_ALLOC_LARGE_ROUND;
    if (size > SIZE_MAX - r)
        return 0;
    return (size + r - 1) / r * r;
}

/* "20.00 MiB" */
static void fmt_bytes(char *buf, size_t cap, size_t n)
{
    if (n >= (size_t)1 << 30)
        snprintf(buf, cap, "%.2f GiB", (double)n / (double)(1u << 30));
    else if (n >= (size_t)1 << 20)
        snprintf(buf, cap, "%.2f MiB", (double)n / (double)(1u << 20));
    else if (n >= 1024)
        snprintf(buf, cap, "%.2f KiB", (double)n / 1024.0);
    else
        snprintf(buf, cap, "%zu bytes", n);
}

static void block_free(cddp_allocator *a, block *b)
{
    a->be.raw_free(a->be.ctx, b->ptr, b->size);
    a->st.reserved -= b->size;
    a->st.n_raw_free++;
    free(b->streams);
    free(b->events);
    free(b);
}

static void cache_push(cddp_allocator *a, block *b)
{
    size_t h = hash_key(b->stream, b->size);
    b->nstreams = 0;         /* a cached block starts its next life on its own stream only */
    b->next = a->cache[h];
    a->cache[h] = b;
}

static void drop_events(cddp_allocator *a, block *b)
{
    for (int i = 0; i < b->nstreams; i++)
        if (b->events && b->events[i])
            a->be.event_destroy(a->be.ctx, b->events[i]);
    free(b->events);
    b->events = NULL;
}

/* Move pending blocks whose events have all completed to the cache. `all`: the device has been
 * synchronized, so every event is complete whatever it says. */
static void process_pending(cddp_allocator *a, int all)
{
    block **pp = &a->pending;
    while (*pp) {
        block *b = *pp;
        int done = 1;
        for (int i = 0; i < b->nstreams && done && !all; i++)
            done = a->be.event_query(a->be.ctx, b->events[i]) != 0;   /* an error: treat as done after sync */
        if (!done) {
            pp = &b->next;
            continue;
        }
        *pp = b->next;
        drop_events(a, b);
        a->st.n_pending--;
        cache_push(a, b);
    }
}

/* Synchronize and give every cached block back to the backend. */
static int release_cache(cddp_allocator *a)
{
    int rc = a->be.synchronize(a->be.ctx);
    if (rc < 0)
        return rc;
    process_pending(a, 1);
    for (size_t h = 0; h < NBUCKETS; h++)
        while (a->cache[h]) {
            block *b = a->cache[h];
            a->cache[h] = b->next;
            block_free(a, b);
        }
    return 0;
}

cddp_allocator *cddp_allocator_new(const cddp_alloc_backend *backend)
{
    cddp_allocator *a = calloc(1, sizeof *a);
    if (!a) {
        cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "host out of memory creating a device allocator");
        return NULL;
    }
    a->be = *backend;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

void cddp_allocator_destroy(cddp_allocator *a)
{
    if (!a)
        return;
    (void)release_cache(a);   /* a failed sync still frees: the process is letting go */
    process_pending(a, 1);
    for (size_t h = 0; h < NBUCKETS; h++) {
        while (a->cache[h]) {
            block *b = a->cache[h];
            a->cache[h] = b->next;
            block_free(a, b);
        }
        while (a->live[h]) {
            block *b = a->live[h];
            a->live[h] = b->next;
            block_free(a, b);
        }
    }
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* A cached block of class `size` for `stream`, unlinked, or NULL. */
static block *cache_take(cddp_allocator *a, size_t size, void *stream)
{
    for (block **pp = &a->cache[hash_key(stream, size)]; *pp; pp = &(*pp)->next)
        if ((*pp)->size == size && (*pp)->stream == stream) {
            block *b = *pp;
            *pp = b->next;
            return b;
        }
    return NULL;
}

/* A new block from the backend, retrying once after releasing the cache on EOOM. */
static int fresh_block(cddp_allocator *a, size_t size, size_t requested, void *stream, block **out)
{
    void *p = NULL;
    char want[32], held[32], res[32], why[512];
    block *b;
    int rc = a->be.raw_alloc(a->be.ctx, size, &p);
    if (rc == CDDP_CUDA_EOOM) {
        a->st.n_oom_retries++;
        if ((rc = release_cache(a)) < 0)
            return rc;
        rc = a->be.raw_alloc(a->be.ctx, size, &p);
    }
    if (rc == CDDP_CUDA_EOOM) {
        a->st.n_ooms++;
        snprintf(why, sizeof why, "%s", cddp_cuda_errmsg());   /* the backend's; seterr overwrites it */
        fmt_bytes(want, sizeof want, requested);
        fmt_bytes(held, sizeof held, a->st.allocated);
        fmt_bytes(res, sizeof res, a->st.reserved);
        return cddp_cuda_seterr(CDDP_CUDA_EOOM,
                                "CUDA out of memory. Tried to allocate %s (%zu bytes, size class %zu) "
                                "on device %d; %s is allocated by cddp and %s reserved after "
                                "freeing the cache (%s)", want, requested, size, a->be.device,
                                held, res, why);
    }
    if (rc < 0)
        return rc;
    if (!(b = calloc(1, sizeof *b))) {
        a->be.raw_free(a->be.ctx, p, size);
        return cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "host out of memory for a block record");
    }
    b->ptr = p;
    b->size = size;
    b->stream = stream;
    a->st.n_raw_alloc++;
    a->st.reserved += size;
    if (a->st.reserved > a->st.peak_reserved)
        a->st.peak_reserved = a->st.reserved;
    *out = b;
    return 0;
}

int cddp_allocator_malloc(cddp_allocator *a, size_t size, void *stream, void **out)
{
    size_t cls = cddp_allocator_round(size);
    block *b = NULL;
    int rc = 0;
    *out = NULL;
    if (size == 0)
        return 0;
    if (cls == 0)
        return cddp_cuda_seterr(CDDP_CUDA_EOOM, "CUDA out of memory. Tried to allocate %zu bytes "
                                "on device %d: larger than any device", size, a->be.device);
    pthread_mutex_lock(&a->mu);
    process_pending(a, 0);
    if ((b = cache_take(a, cls, stream)) != NULL)
        a->st.n_cache_hits++;
    else if ((rc = fresh_block(a, cls, size, stream, &b)) < 0)
        goto done;
    b->requested = size;
    b->next = a->live[hash_ptr(b->ptr)];
    a->live[hash_ptr(b->ptr)] = b;
    a->st.allocated += cls;
    a->st.requested += size;
    a->st.n_alloc++;
    if (a->st.allocated > a->st.peak_allocated)
        a->st.peak_allocated = a->st.allocated;
    *out = b->ptr;
done:
    pthread_mutex_unlock(&a->mu);
    return rc;
}

/* Unlink live block `ptr`, or NULL. */
static block *live_take(cddp_allocator *a, void *ptr)
{
    for (block **pp = &a->live[hash_ptr(ptr)]; *pp; pp = &(*pp)->next)
        if ((*pp)->ptr == ptr) {
            block *b = *pp;
            *pp = b->next;
            return b;
        }
    return NULL;
}

/* Record one event per extra stream of `b` and park it on `pending`. On a failed record the
 * device is synchronized instead (correct, only slower) and the block cached at once. */
static int park(cddp_allocator *a, block *b)
{
    int rc = 0;
    if (!(b->events = calloc((size_t)b->nstreams, sizeof *b->events)))
        rc = cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "host out of memory for stream events");
    for (int i = 0; rc == 0 && i < b->nstreams; i++)
        rc = a->be.event_record(a->be.ctx, b->streams[i], &b->events[i]);
    if (rc == 0) {
        b->next = a->pending;
        a->pending = b;
        a->st.n_pending++;
        return 0;
    }
    drop_events(a, b);
    rc = a->be.synchronize(a->be.ctx);
    cache_push(a, b);
    return rc;
}

int cddp_allocator_release(cddp_allocator *a, void *ptr)
{
    block *b;
    int rc = 0;
    if (!ptr)
        return 0;
    pthread_mutex_lock(&a->mu);
    if (!(b = live_take(a, ptr))) {
        rc = cddp_cuda_seterr(CDDP_CUDA_EARG, "free of %p: not a live block of the device %d "
                              "allocator (double free?)", ptr, a->be.device);
        goto done;
    }
    a->st.allocated -= b->size;
    a->st.requested -= b->requested;
    a->st.n_free++;
    if (b->nstreams > 0)
        rc = park(a, b);
    else
        cache_push(a, b);
done:
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int cddp_allocator_record_stream(cddp_allocator *a, void *ptr, void *stream)
{
    block *b;
    int rc = 0;
    pthread_mutex_lock(&a->mu);
    for (b = a->live[hash_ptr(ptr)]; b && b->ptr != ptr; b = b->next)
        ;
    if (!b) {
        rc = cddp_cuda_seterr(CDDP_CUDA_EARG, "record_stream of %p: not a live block of the "
                              "device %d allocator", ptr, a->be.device);
        goto done;
    }
    if (stream == b->stream)
        goto done;
    for (int i = 0; i < b->nstreams; i++)
        if (b->streams[i] == stream)
            goto done;
    if (b->nstreams == b->cap_streams) {
        int cap = b->cap_streams ? 2 * b->cap_streams : 4;
        void **s = realloc(b->streams, (size_t)cap * sizeof *s);
        if (!s) {
            rc = cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "host out of memory in record_stream");
            goto done;
        }
        b->streams = s;
        b->cap_streams = cap;
    }
    b->streams[b->nstreams++] = stream;
done:
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int cddp_allocator_empty_cache(cddp_allocator *a)
{
    int rc;
    pthread_mutex_lock(&a->mu);
    rc = release_cache(a);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void cddp_allocator_stats(cddp_allocator *a, cddp_alloc_stats *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    pthread_mutex_unlock(&a->mu);
}

void cddp_allocator_reset_peak(cddp_allocator *a)
{
    pthread_mutex_lock(&a->mu);
    a->st.peak_allocated = a->st.allocated;
    a->st.peak_reserved = a->st.reserved;
    pthread_mutex_unlock(&a->mu);
}

void *cddp_allocator_ctx(cddp_allocator *a)
{
    return a->be.ctx;
}
