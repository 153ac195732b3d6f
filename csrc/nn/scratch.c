/* nn/scratch.c — the scratch memory of the convolution engine (nn/conv_engine.c): one block
 * per engine call, kept for the next call.
 *
 * Why: ResNet's training step runs ~60 convolutions that each need megabytes of column or
 * tile buffers; a fresh mapping every time costs a page fault on every first touch. One spare
 * block is kept; it is taken and returned with atomic exchanges (engine calls run without the
 * GIL, possibly on several threads at once, and then each thread simply allocates its own).
 * The block's capacity sits in a 64-byte header before the data; blocks over SCRATCH_KEEP_MAX
 * are freed instead of kept, so a one-off huge convolution does not pin its memory.
 * Pure C.
 */
#include "nn/conv.h"
#include <stdatomic.h>
#include <stdlib.h>

#define SCRATCH_KEEP_MAX ((size_t)64 << 20)
static _Atomic(char *) g_spare;

char *cddp_scratch_take(size_t bytes)
{
    char *b = atomic_exchange(&g_spare, NULL);
    size_t cap = (bytes + 63) / 64 * 64;
    if (b && *(size_t *)b >= bytes)
        return b + 64;
    free(b);
    if (!(b = aligned_alloc(64, cap + 64)))
        return NULL;
    *(size_t *)b = cap;
    return b + 64;
}

void cddp_scratch_give(char *p)
{
    if (!p)
        return;
    char *b = p - 64;
    if (*(size_t *)b > SCRATCH_KEEP_MAX)
        free(b);
    else
        free(atomic_exchange(&g_spare, b));
}
