/* core/iter.c — strided N-d iteration over up to 4 operands of one shape.
 *
 * Plan: drop size-1 dims, merge dims that are contiguous with their inner neighbour for every
 * operand, then walk the outer dims with a counter and hand the innermost dim to the kernel as
 * a 1-D run (ptrs, byte strides, n). A fully contiguous tensor becomes a single run.
 */
#include "core/cddp.h"
#include <string.h>

void cddp_iterate(int nops, int ndim, const int64_t *shape, char **ptrs,
                  const int64_t (*byte_strides)[CDDP_MAX_DIMS], cddp_loop_fn fn, void *ctx)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_ITER_MAX_OPS][CDDP_MAX_DIMS];
    char *p[CDDP_ITER_MAX_OPS];
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return;                       /* empty: nothing to visit */
        if (shape[d] == 1)
            continue;
        sh[nd] = shape[d];
        for (int k = 0; k < nops; k++)
            st[k][nd] = byte_strides[k][d];
        nd++;
    }
    /* coalesce: dim d-1 and d merge when stride[d-1] == stride[d] * shape[d] for all ops */
    int out = 0;
    for (int d = 0; d < nd; d++) {
        if (out > 0) {
            int ok = 1;
            for (int k = 0; k < nops; k++)
                ok &= st[k][out - 1] == st[k][d] * sh[d];
            if (ok) {
                sh[out - 1] *= sh[d];
                for (int k = 0; k < nops; k++)
                    st[k][out - 1] = st[k][d];
                continue;
            }
        }
        sh[out] = sh[d];
        for (int k = 0; k < nops; k++)
            st[k][out] = st[k][d];
        out++;
    }
    nd = out;
    for (int k = 0; k < nops; k++)
        p[k] = ptrs[k];
    if (nd == 0) {                        /* a single element */
        int64_t z[CDDP_ITER_MAX_OPS] = {0};
        fn(p, z, 1, ctx);
        return;
    }
    int64_t inner[CDDP_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++)
        inner[k] = st[k][nd - 1];
    int64_t n = sh[nd - 1];
    int64_t idx[CDDP_MAX_DIMS] = {0};
    for (;;) {
        fn(p, inner, n, ctx);
        int d = nd - 2;
        for (; d >= 0; d--) {             /* odometer over the outer dims */
            idx[d]++;
            for (int k = 0; k < nops; k++)
                p[k] += st[k][d];
            if (idx[d] < sh[d])
                break;
            for (int k = 0; k < nops; k++)
                p[k] -= st[k][d] * sh[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

void cddp_iterate_ordered(int nops, int ndim, const int64_t *shape, char **ptrs,
                          const int64_t (*byte_strides)[CDDP_MAX_DIMS], cddp_loop_fn fn,
                          void *ctx)
{
    int64_t sh[CDDP_MAX_DIMS], st[CDDP_ITER_MAX_OPS][CDDP_MAX_DIMS];
    int perm[CDDP_MAX_DIMS];
    cddp_layout_order(ndim, shape, 1, byte_strides, perm);
    for (int i = 0; i < ndim; i++) {      /* perm[0] innermost: C order's last dim */
        sh[ndim - 1 - i] = shape[perm[i]];
        for (int k = 0; k < nops; k++)
            st[k][ndim - 1 - i] = byte_strides[k][perm[i]];
    }
    cddp_iterate(nops, ndim, sh, ptrs, (const int64_t (*)[CDDP_MAX_DIMS])st, fn, ctx);
}
