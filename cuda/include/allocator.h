/* allocator.h — the caching device allocator of cddp._cuda (memory/allocator.c), torch's
 * CUDACachingAllocator in miniature, written over an abstract backend so its logic runs and is
 * tested on the CPU (memory/fake.c) as well as over cudaMalloc (memory/device.c).
 *
 * Model (torch's, simplified to per-size free lists: no block splitting):
 *   - a request is rounded to its size class: to 512 bytes up to 1 MiB, to 2 MiB above;
 *   - a freed block is cached on the free list of (its allocation stream, its size class) and
 *     reused only by a request of the same class on the same stream, so no stream sees memory
 *     another stream may still be using;
 *   - record_stream(p, s): p is also used on stream s; when p is freed, an event is recorded
 *     on each such stream and the block is only reused once every event has completed;
 *   - out of memory: synchronize, release every cached block to the backend, retry once; a
 *     second failure is CDDP_CUDA_EOOM with "CUDA out of memory. Tried to allocate <size> ...";
 *   - empty_cache: synchronize and release every cached block (live blocks stay);
 *   - stats: allocated (bytes in live blocks, by size class) and reserved (bytes held from the
 *     backend), each with its peak; reset_peak sets the peaks to the current values.
 * Thread-safe: one mutex per allocator. Size 0 gives NULL and allocates nothing.
 */
#ifndef CDDP_CUDA_ALLOCATOR_H
#define CDDP_CUDA_ALLOCATOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the allocator needs from a device. Every function returns 0 or a negative CDDP_CUDA_E*
 * code with its message recorded (check.h); raw_alloc returns CDDP_CUDA_EOOM when the device
 * is out of memory (the allocator then frees its cache and retries). */
typedef struct cddp_alloc_backend {
    void *ctx;
    int device;                                            /* for messages */
    int (*raw_alloc)(void *ctx, size_t size, void **out);
    void (*raw_free)(void *ctx, void *ptr, size_t size);   /* size: as allocated */
    int (*synchronize)(void *ctx);                         /* wait for all work on the device */
    int (*event_record)(void *ctx, void *stream, void **event);
    int (*event_query)(void *ctx, void *event);            /* 1 done, 0 pending, < 0 error */
    void (*event_destroy)(void *ctx, void *event);
} cddp_alloc_backend;

typedef struct cddp_alloc_stats {
    size_t allocated, peak_allocated;     /* bytes in live blocks (size classes) */
    size_t reserved, peak_reserved;       /* bytes held from the backend (live + cached) */
    size_t requested;                     /* bytes asked for by live blocks (before rounding) */
    size_t n_alloc, n_free;               /* cddp_allocator_malloc / _release calls */
    size_t n_raw_alloc, n_raw_free;       /* backend calls */
    size_t n_cache_hits, n_oom_retries, n_ooms;
    size_t n_pending;                     /* freed blocks waiting for record_stream events */
} cddp_alloc_stats;

typedef struct cddp_allocator cddp_allocator;

#define CDDP_ALLOC_SMALL_ROUND 512u
#define CDDP_ALLOC_SMALL_MAX (1u << 20)
#define CDDP_ALLOC_LARGE_ROUND (2u << 20)

/* The size class of a request (0 for 0; 0 also when rounding would overflow size_t). */
size_t cddp_allocator_round(size_t size);

/* A new allocator over *backend (copied). NULL with the error recorded on host OOM. */
cddp_allocator *cddp_allocator_new(const cddp_alloc_backend *backend);

/* Synchronize, then give every block back to the backend (live ones too) and free `a`. */
void cddp_allocator_destroy(cddp_allocator *a);

/* *out = a block of at least `size` bytes for use on `stream`. */
int cddp_allocator_malloc(cddp_allocator *a, size_t size, void *stream, void **out);

/* Free a pointer cddp_allocator_malloc returned (NULL: nothing). CDDP_CUDA_EARG when `ptr` is
 * not a live block of `a` (a double free is reported, never corrupts the cache). */
int cddp_allocator_release(cddp_allocator *a, void *ptr);

/* Mark live block `ptr` as used on `stream` too (torch's Tensor.record_stream). */
int cddp_allocator_record_stream(cddp_allocator *a, void *ptr, void *stream);

/* Release every cached block; waits for the device first. */
int cddp_allocator_empty_cache(cddp_allocator *a);

void cddp_allocator_stats(cddp_allocator *a, cddp_alloc_stats *out);
void cddp_allocator_reset_peak(cddp_allocator *a);

/* The backend's context (for the test binding's fake). */
void *cddp_allocator_ctx(cddp_allocator *a);

/* ---- the backends ------------------------------------------------------------------------ */

/* A fake device on the host (memory/fake.c): malloc'd blocks up to `limit` bytes; the test
 * binding injects failures and completes events by hand. */
typedef struct cddp_fake_device {
    size_t limit, held;
    int fail_next;          /* fail this many coming raw_allocs with EOOM */
    size_t n_sync;
    struct fake_event *events;
} cddp_fake_device;

int cddp_fake_backend_init(cddp_alloc_backend *b, size_t limit);
void cddp_fake_backend_fini(cddp_alloc_backend *b);
/* Complete every event recorded on `stream` (fake work on that stream finished). */
void cddp_fake_complete(cddp_fake_device *d, void *stream);

/* The process-wide allocator of CUDA device `device` over cudaMalloc (memory/device.c),
 * created at first use; NULL with the error recorded when the ordinal is out of range. */
cddp_allocator *cddp_cuda_allocator(int device);
/* The allocator of `device` if it exists yet, else NULL (stats without creating one). */
cddp_allocator *cddp_cuda_allocator_peek(int device);

#ifdef __cplusplus
}
#endif
#endif
