/* ops/index/mask.c — boolean-mask kernels: out[mask] = v, and the sum of g[mask]
 * (the forward and the value gradient of torch.Tensor.masked_fill, and the x[mask] = scalar
 * fast path of __setitem__). Below every other indexing file: needs only core/.
 *
 * The mask is broadcast to the output's shape and walked with cddp_iterate alongside it.
 */
#include "ops/index/index.h"
#include <string.h>

typedef struct {
    size_t isz;
    uint64_t val;                    /* the fill value's bytes in the output dtype */
} fill_ctx;

/* contiguous runs: a branch-free select the compiler vectorizes (masks are often random) */
#define FILL_LOOP(T)                                                                      \
    do {                                                                                  \
        T v;                                                                              \
        memcpy(&v, &c->val, sizeof v);                                                    \
        if (st[0] == (int64_t)sizeof(T) && st[1] == 1) {                                  \
            T *d = (T *)p[0];                                                             \
            const uint8_t *m = (const uint8_t *)p[1];                                     \
            for (int64_t i = 0; i < n; i++)                                               \
                d[i] = m[i] ? v : d[i];                                                   \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++)                                               \
                if (*(const uint8_t *)(p[1] + i * st[1]))                                 \
                    *(T *)(p[0] + i * st[0]) = v;                                         \
        }                                                                                 \
    } while (0)

static void fill_loop(char **p, const int64_t *st, int64_t n, void *ctx)
{
    const fill_ctx *c = ctx;
    if (c->isz == 8)
        FILL_LOOP(uint64_t);
    else if (c->isz == 4)
        FILL_LOOP(uint32_t);
    else if (c->isz == 2)
        FILL_LOOP(uint16_t);
    else
        FILL_LOOP(uint8_t);
}

typedef struct {
    cddp_dtype dt;
    double sum;
} msum_ctx;

static void masked_sum_loop(char **p, const int64_t *st, int64_t n, void *ctx)
{
    msum_ctx *c = ctx;
    for (int64_t i = 0; i < n; i++)
        if (*(const uint8_t *)(p[1] + i * st[1]))
            c->sum += cddp_load_double(c->dt, p[0] + i * st[0]);
}

/* Iterate out with mask broadcast to out's shape (mask already checked to fit). */
static int mask_iterate(TensorObject *out, TensorObject *mask, cddp_loop_fn fn, void *ctx)
{
    int64_t mst[CDDP_MAX_DIMS], bst[2][CDDP_MAX_DIMS];
    char *ptrs[2] = {cddp_data(out), cddp_data(mask)};
    if (cddp_broadcast_strides(mask, out->ndim, out->shape, mst) < 0)
        return -1;
    for (int d = 0; d < out->ndim; d++) {
        bst[0][d] = out->strides[d] * (int64_t)cddp_dtype_size[out->dtype];
        bst[1][d] = mst[d];
    }
    cddp_iterate(2, out->ndim, out->shape, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])bst, fn, ctx);
    return 0;
}

/* Contract in ops/index/index.h. */
int cddp_ix_masked_fill_raw(TensorObject *out, TensorObject *mask, TensorObject *v)
{
    fill_ctx c = {cddp_dtype_size[out->dtype], 0};
    TensorObject *cv = cddp_tensor_cast_raw(v, out->dtype);
    if (!cv)
        return -1;
    memcpy(&c.val, cddp_data(cv), c.isz);
    Py_DECREF(cv);
    return mask_iterate(out, mask, fill_loop, &c);
}

/* Contract in ops/index/index.h. */
int cddp_ix_masked_sum(TensorObject *g, TensorObject *mask, double *sum)
{
    msum_ctx c = {g->dtype, 0.0};
    if (mask_iterate(g, mask, masked_sum_loop, &c) < 0)
        return -1;
    *sum = c.sum;
    return 0;
}
