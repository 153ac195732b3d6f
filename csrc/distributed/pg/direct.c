/* distributed/pg/direct.c — the direct algorithms of the TCP transport: gather, scatter and
 * all_to_all as transfers with every peer at once (no forwarding, so each byte crosses the
 * network once and no rank waits on a chain).
 *
 * Mirrors: gloo's gather / scatter / alltoall, which post one send or receive per peer.
 *
 * Called by tcp.c's run(); moves bytes through the transport's independent-transfer engine
 * (cddp_tcp_run_xfers, distributed/pg/tcp_internal.h). Returns 0, or -1 with w->err set.
 */
#include "distributed/pg/tcp_internal.h"

#include <stdlib.h>
#include <string.h>

/* gather / scatter / all_to_all: direct transfers with every peer at once */
int cddp_tcp_direct(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t es = cddp_pg_dtype_size[a->dtype];
    int n = t->n, r = t->r, nx = 0, rc;
    size_t Bm = (size_t)(a->op == CDDP_PG_ALLTOALL ? a->count / n : a->count) * es;
    const char *in = a->in;
    tcp_xfer *x;
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0)
        return -1;
    if (!Bm)
        return 0;
    x = malloc(sizeof *x * (size_t)(2 * n));
    if (!x) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    switch (a->op) {
    case CDDP_PG_GATHER:
        if (r == a->root) {
            memcpy(cddp_pg_block(a->out, a->oblk, r, Bm), in, Bm);
            for (int j = 0; j < n; j++)
                if (j != r)
                    x[nx++] = (tcp_xfer){j, 0, cddp_pg_block(a->out, a->oblk, j, Bm), Bm, 0};
        } else {
            x[nx++] = (tcp_xfer){a->root, 1, (char *)in, Bm, 0};
        }
        break;
    case CDDP_PG_SCATTER:
        if (r == a->root) {
            memcpy(a->out, cddp_pg_block(a->in, a->iblk, r, Bm), Bm);
            for (int j = 0; j < n; j++)
                if (j != r)
                    x[nx++] = (tcp_xfer){j, 1, cddp_pg_block(a->in, a->iblk, j, Bm), Bm, 0};
        } else {
            x[nx++] = (tcp_xfer){a->root, 0, a->out, Bm, 0};
        }
        break;
    default:                                            /* all_to_all */
        if (in == a->out) {                             /* in place: send from a copy */
            if (cddp_tcp_scratch(t, w, (size_t)n * Bm) < 0) {
                free(x);
                return -1;
            }
            memcpy(t->scratch, in, (size_t)n * Bm);
            in = t->scratch;
        }
        memmove((char *)a->out + (size_t)r * Bm, in + (size_t)r * Bm, Bm);
        for (int j = 0; j < n; j++)
            if (j != r) {
                x[nx++] = (tcp_xfer){j, 1, (char *)in + (size_t)j * Bm, Bm, 0};
                x[nx++] = (tcp_xfer){j, 0, (char *)a->out + (size_t)j * Bm, Bm, 0};
            }
    }
    rc = cddp_tcp_run_xfers(pg, t, w, x, nx);
    free(x);
    return rc;
}
