/* device.c — allocator.h's backend over the CUDA runtime (cudaMalloc, cudaFree, events,
 * cudaDeviceSynchronize) and the process-wide allocator per device ordinal, created at first
 * use: torch.cuda's per-device caching allocators. Pure C over cuda_runtime_api.h.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "allocator.h"
#include "check.h"
#include "device.h"

#define MAX_DEVICES 64

/* The backend's ctx is the ordinal itself (cast), so no state needs freeing. */
#define DEV(ctx) ((int)(intptr_t)(ctx))

/* Run `call` with `dev` current, restoring the caller's device before checking its result. */
#define ON_DEVICE(dev, call)                                                            \
    do {                                                                                \
        int prev_ = -1;                                                                 \
        cudaError_t r_;                                                                 \
        (void)cudaGetDevice(&prev_);                                                    \
        if (prev_ != (dev))                                                             \
            CHECK_CUDA(cudaSetDevice(dev));                                             \
        r_ = (call);                                                                    \
        if (prev_ >= 0 && prev_ != (dev))                                               \
            (void)cudaSetDevice(prev_);                                                 \
        CHECK_CUDA(r_);                                                                 \
    } while (0)

static int cu_alloc(void *ctx, size_t size, void **out)
{
    int rc = 0;
    ON_DEVICE(DEV(ctx), cudaMalloc(out, size));
fail:
    return rc;
}

static void cu_free(void *ctx, void *ptr, size_t size)
{
    int prev = -1;
    (void)size;
    (void)cudaGetDevice(&prev);
    (void)cudaSetDevice(DEV(ctx));
    (void)cudaFree(ptr);   /* nothing useful to do with an error while letting memory go */
    if (prev >= 0)
        (void)cudaSetDevice(prev);
}

static int cu_sync(void *ctx)
{
    int rc = 0;
    ON_DEVICE(DEV(ctx), cudaDeviceSynchronize());
fail:
    return rc;
}

static int cu_record(void *ctx, void *stream, void **event)
{
    int rc = 0;
    cudaEvent_t ev = NULL;
    ON_DEVICE(DEV(ctx), cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CHECK_CUDA(cudaEventRecord(ev, (cudaStream_t)stream));
    *event = ev;
    return 0;
fail:
    if (ev)
        (void)cudaEventDestroy(ev);
    return rc;
}

static int cu_query(void *ctx, void *event)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)event);
    (void)ctx;
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    return 1;   /* done, or failed: a failed event never completes, the later sync decides */
}

static void cu_destroy(void *ctx, void *event)
{
    (void)ctx;
    (void)cudaEventDestroy((cudaEvent_t)event);
}

static cddp_allocator *allocators[MAX_DEVICES];
static pthread_mutex_t allocators_mu = PTHREAD_MUTEX_INITIALIZER;

cddp_allocator *cddp_cuda_allocator_peek(int device)
{
    cddp_allocator *a;
    if (device < 0 || device >= MAX_DEVICES)
        return NULL;
    pthread_mutex_lock(&allocators_mu);
    a = allocators[device];
    pthread_mutex_unlock(&allocators_mu);
    return a;
}

cddp_allocator *cddp_cuda_allocator(int device)
{
    cddp_allocator *a = NULL;
    int n = cddp_cuda_device_count(NULL);
    if (device < 0 || device >= n || device >= MAX_DEVICES) {
        cddp_cuda_seterr(CDDP_CUDA_ENODEV, "CUDA device %d out of range (%d device%s)", device, n,
                         n == 1 ? "" : "s");
        return NULL;
    }
    pthread_mutex_lock(&allocators_mu);
    if (!allocators[device]) {
        cddp_alloc_backend be = {
            (void *)(intptr_t)device, device, cu_alloc, cu_free, cu_sync, cu_record, cu_query,
            cu_destroy,
        };
        allocators[device] = cddp_allocator_new(&be);
    }
    a = allocators[device];
    pthread_mutex_unlock(&allocators_mu);
    return a;
}
