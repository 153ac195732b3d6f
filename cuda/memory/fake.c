/* fake.c — a fake device for allocator.h's tests: raw blocks are malloc'd host memory up to a
 * byte limit, failures can be injected (the next k raw allocations report OOM), and events
 * complete only when the test says the work on their stream finished (or on synchronize).
 * Used only through the test binding (binding/testing.c); pure C.
 */
#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "check.h"

typedef struct fake_event {
    void *stream;
    int done;
    struct fake_event *next;
} fake_event;

static int fake_alloc(void *ctx, size_t size, void **out)
{
    cddp_fake_device *d = ctx;
    if (d->fail_next > 0) {
        d->fail_next--;
        return cddp_cuda_seterr(CDDP_CUDA_EOOM, "fake device: injected out-of-memory");
    }
    if (size > d->limit - d->held)
        return cddp_cuda_seterr(CDDP_CUDA_EOOM, "fake device: %zu of %zu bytes held", d->held, d->limit);
    if (!(*out = malloc(size)))
        return cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "fake device: host malloc(%zu) failed", size);
    memset(*out, 0xA5, size);   /* garbage, like fresh device memory */
    d->held += size;
    return 0;
}

static void fake_free(void *ctx, void *ptr, size_t size)
{
    cddp_fake_device *d = ctx;
    d->held -= size;
    free(ptr);
}

static int fake_sync(void *ctx)
{
    cddp_fake_device *d = ctx;
    d->n_sync++;
    for (fake_event *e = d->events; e; e = e->next)
        e->done = 1;
    return 0;
}

static int fake_record(void *ctx, void *stream, void **event)
{
    cddp_fake_device *d = ctx;
    fake_event *e = calloc(1, sizeof *e);
    if (!e)
        return cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "fake device: no memory for an event");
    e->stream = stream;
    e->next = d->events;
    d->events = e;
    *event = e;
    return 0;
}

static int fake_query(void *ctx, void *event)
{
    (void)ctx;
    return ((fake_event *)event)->done;
}

static void fake_destroy(void *ctx, void *event)
{
    cddp_fake_device *d = ctx;
    for (fake_event **pp = &d->events; *pp; pp = &(*pp)->next)
        if (*pp == event) {
            *pp = ((fake_event *)event)->next;
            free(event);
            return;
        }
}

int cddp_fake_backend_init(cddp_alloc_backend *b, size_t limit)
{
    cddp_fake_device *d = calloc(1, sizeof *d);
    if (!d)
        return cddp_cuda_seterr(CDDP_CUDA_ENOMEM, "host out of memory for a fake device");
    d->limit = limit;
    memset(b, 0, sizeof *b);
    b->ctx = d;
    b->device = 0;
    b->raw_alloc = fake_alloc;
    b->raw_free = fake_free;
    b->synchronize = fake_sync;
    b->event_record = fake_record;
    b->event_query = fake_query;
    b->event_destroy = fake_destroy;
    return 0;
}

void cddp_fake_backend_fini(cddp_alloc_backend *b)
{
    cddp_fake_device *d = b->ctx;
    if (!d)
        return;
    while (d->events) {
        fake_event *e = d->events;
        d->events = e->next;
        free(e);
    }
    free(d);
    b->ctx = NULL;
}

void cddp_fake_complete(cddp_fake_device *d, void *stream)
{
    for (fake_event *e = d->events; e; e = e->next)
        if (e->stream == stream)
            e->done = 1;
}
