/* distributed/pg/ring.c — the ring algorithms of the TCP transport: a pipelined byte stream to
 * the next rank and from the previous one, and the collectives built on it.
 *
 * Mirrors: gloo's allreduce_ring_chunked.h (reduce-scatter then all-gather around the ring) and
 * its broadcast / allgather rings, as torch's ProcessGroupGloo runs them between hosts.
 *
 *   all_reduce / reduce   eager when small (the data rides in the header exchange; every rank
 *                         reduces all inputs in rank order, so every rank gets the same bits);
 *                         else a ring: reduce-scatter then all-gather as ONE byte stream per
 *                         direction; a byte may be sent once `lead` + (bytes received and
 *                         reduced) allow it, so sends, receives and reductions overlap at chunk
 *                         granularity (CDDP_TCP_CHUNK)
 *   broadcast             chain from the root (same stream, lead 0); star when small
 *   all_gather            ring; reduce_scatter: ring reduce-scatter on a scratch copy
 *
 * Called by tcp.c's run() (one function per collective) and by hier.c (the ring between host
 * leaders); moves bytes only through the transport calls of distributed/pg/tcp_internal.h.
 * Every function returns 0, or -1 with w->err set (the transport has told the peers).
 */
#include "distributed/pg/tcp_internal.h"
#include "distributed/pg/reduce_kernels.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ring stream (engine 2; engine 1 is tcp.c's independent transfers) ------------ */

enum { ACT_COPY = 0, ACT_REDUCE = 1, ACT_REDUCE_AVG = 2 };
typedef struct {
    char *p;
    size_t len;
    int act;
} rseg;

/* Send ss[] to `next` and receive rs[] from `prev` (either may be -1 / empty), never sending
 * stream byte S before lead + R bytes have been received and applied (R counts completed
 * bytes). Receives into the destination for ACT_COPY, through the staging buffer for the
 * reducing actions. */
static int run_ring(cddp_pg *pg, tcp_t *t, cddp_work *w, int next, const rseg *ss, int ns,
                    int prev, const rseg *rs, int nr, size_t lead)
{
    const cddp_pg_args *a = &w->a;
    size_t es = cddp_pg_dtype_size[a->dtype];
    size_t S = 0, R = 0, Stot = 0, Rtot = 0, soff = 0, roff = 0, have = 0;
    int si = 0, ri = 0;
    short *ev = t->want;
    for (int i = 0; i < ns; i++) Stot += ss[i].len;
    for (int i = 0; i < nr; i++) Rtot += rs[i].len;
    while (si < ns && ss[si].len == 0) si++;
    while (ri < nr && rs[ri].len == 0) ri++;
    for (;;) {
        int progress = 1;
        while (progress) {
            progress = 0;
            /* send what the dependency allows */
            while (S < Stot && S < lead + R) {
                size_t allow = lead + R - S, rem = ss[si].len - soff;
                size_t m = rem < allow ? rem : allow;
                ssize_t k = cddp_tcp_io_send(pg, t, w, next, ss[si].p + soff, m);
                if (k < 0)
                    return -1;
                if (k == 0)
                    break;
                S += (size_t)k;
                soff += (size_t)k;
                progress = 1;
                if (soff == ss[si].len) {
                    soff = 0;
                    si++;
                    while (si < ns && ss[si].len == 0) si++;
                }
            }
            /* receive, applying whole elements */
            while (R < Rtot) {
                const rseg *g = &rs[ri];
                size_t rem = g->len - roff;
                ssize_t k;
                if (g->act == ACT_COPY) {
                    k = cddp_tcp_io_recv(pg, t, w, prev, g->p + roff,
                                         rem < t->chunk ? rem : t->chunk);
                    if (k < 0)
                        return -1;
                    if (k == 0)
                        break;
                    roff += (size_t)k;
                    R += (size_t)k;
                } else {
                    size_t room = t->chunk - have, m = rem - have < room ? rem - have : room;
                    k = cddp_tcp_io_recv(pg, t, w, prev, t->stage + have, m);
                    if (k < 0)
                        return -1;
                    if (k == 0)
                        break;
                    have += (size_t)k;
                    size_t full = have / es * es;
                    if (full) {
                        pg_reduce2(g->p + roff, g->p + roff, t->stage, (int64_t)(full / es),
                                   a->dtype, a->redop);
                        if (g->act == ACT_REDUCE_AVG)
                            pg_divide(g->p + roff, (int64_t)(full / es), a->dtype, t->n);
                        memmove(t->stage, t->stage + full, have - full);
                        have -= full;
                        roff += full;
                        R += full;
                    }
                }
                progress = 1;
                if (roff == g->len) {
                    roff = 0;
                    ri++;
                    while (ri < nr && rs[ri].len == 0) ri++;
                }
            }
        }
        if (S == Stot && R == Rtot)
            return 0;
        memset(ev, 0, sizeof *ev * (size_t)t->n);
        if (S < Stot && S < lead + R)
            ev[next] |= POLLOUT;
        if (R < Rtot)
            ev[prev] |= POLLIN | POLLRDHUP;
        if (cddp_tcp_poll(pg, t, w, ev, R < Rtot ? prev : next) < 0)
            return -1;
    }
}

/* ---- collectives ---------------------------------------------------------------------- */

/* Element range of block j when count elements split across n blocks. */
static void block(int64_t count, int n, int j, int64_t *lo, int64_t *len)
{
    int64_t q = count / n, rem = count % n;
    *lo = (int64_t)j * q + (j < rem ? j : rem);
    *len = q + (j < rem);
}

static inline int mod(int a, int n) { return ((a % n) + n) % n; }

/* Ring all-reduce in place on buf (count elements) among members mem[0..nm) (global ranks;
 * NULL: every rank), this rank being mem[me]. AVG divides by the whole group's size. */
int cddp_tcp_ring_allreduce(cddp_pg *pg, tcp_t *t, cddp_work *w, char *buf, const int *mem,
                            int nm, int me)
{
    int m = 2 * (nm - 1);
    size_t es = cddp_pg_dtype_size[w->a.dtype];
    rseg *ss;
    rseg *rs;
    int64_t lo, len;
    int rc;
    if (nm == 1)
        return 0;
    ss = malloc(sizeof *ss * (size_t)(2 * m));
    if (!ss) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    rs = ss + m;
    for (int s = 0; s < nm - 1; s++) {                /* reduce-scatter */
        block(w->a.count, nm, mod(me - s, nm), &lo, &len);
        ss[s] = (rseg){buf + lo * es, (size_t)len * es, 0};
        block(w->a.count, nm, mod(me - s - 1, nm), &lo, &len);
        rs[s] = (rseg){buf + lo * es, (size_t)len * es,
                       s == nm - 2 && w->a.redop == CDDP_RED_AVG ? ACT_REDUCE_AVG : ACT_REDUCE};
    }
    for (int s = 0; s < nm - 1; s++) {                /* all-gather */
        block(w->a.count, nm, mod(me + 1 - s, nm), &lo, &len);
        ss[nm - 1 + s] = (rseg){buf + lo * es, (size_t)len * es, 0};
        block(w->a.count, nm, mod(me - s, nm), &lo, &len);
        rs[nm - 1 + s] = (rseg){buf + lo * es, (size_t)len * es, ACT_COPY};
    }
    block(w->a.count, nm, me, &lo, &len);
    rc = run_ring(pg, t, w, mem ? mem[mod(me + 1, nm)] : mod(me + 1, nm), ss, m,
                  mem ? mem[mod(me - 1, nm)] : mod(me - 1, nm), rs, m, (size_t)len * es);
    free(ss);
    return rc;
}

/* all_reduce and reduce: eager through the header exchange when small, else the ring (reduce
 * runs the whole all-reduce; non-root ranks work on a scratch copy). */
int cddp_tcp_allreduce(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t es = cddp_pg_dtype_size[a->dtype], B = (size_t)a->count * es;
    int n = t->n, r = t->r;
    char *buf;
    if (B <= t->small_max) {
        const void **src = malloc(sizeof *src * (size_t)n);
        if (!src) {
            cddp_pg_seterr(w->err, "out of memory");
            return -1;
        }
        if (cddp_tcp_exchange_headers(pg, t, w, a->in, B) < 0) {
            free(src);
            return -1;
        }
        if (a->op == CDDP_PG_ALLREDUCE || r == a->root) {
            for (int j = 0; j < n; j++)
                src[j] = j == r ? a->in : t->scratch + (size_t)(j < r ? j : j - 1) * B;
            pg_reduce_n(a->out, src, n, a->count, a->dtype, a->redop, n);
        }
        free(src);
        return 0;
    }
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0)
        return -1;
    buf = a->out;
    if (a->op == CDDP_PG_REDUCE && r != a->root) {    /* keep non-root tensors unchanged */
        if (cddp_tcp_scratch(t, w, B) < 0)
            return -1;
        memcpy(t->scratch, a->in, B);
        buf = t->scratch;
    }
    return cddp_tcp_ring_allreduce(pg, t, w, buf, NULL, n, r);
}

/* broadcast: a star from the root when small, else a chain forwarding bytes as they arrive */
int cddp_tcp_broadcast(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t B = (size_t)a->count * cddp_pg_dtype_size[a->dtype];
    int n = t->n, r = t->r, root = a->root, pos = mod(r - root, n);
    rseg seg = {a->out, B, ACT_COPY};
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0)
        return -1;
    if (!B)
        return 0;
    if (B <= t->small_max) {                            /* star: one hop */
        if (r != root) {
            tcp_xfer x = {root, 0, a->out, B, 0};
            return cddp_tcp_run_xfers(pg, t, w, &x, 1);
        }
        tcp_xfer *x = malloc(sizeof *x * (size_t)n);
        int nx = 0, rc;
        if (!x) {
            cddp_pg_seterr(w->err, "out of memory");
            return -1;
        }
        for (int j = 0; j < n; j++)
            if (j != r)
                x[nx++] = (tcp_xfer){j, 1, a->out, B, 0};
        rc = cddp_tcp_run_xfers(pg, t, w, x, nx);
        free(x);
        return rc;
    }
    /* chain root -> root+1 -> ... -> root-1, forwarding as bytes arrive */
    return run_ring(pg, t, w, pos == n - 1 ? -1 : mod(r + 1, n), &seg, pos == n - 1 ? 0 : 1,
                    pos == 0 ? -1 : mod(r - 1, n), &seg, pos == 0 ? 0 : 1, pos == 0 ? B : 0);
}

/* all_gather: n - 1 ring steps; step s forwards the block received at step s - 1 */
int cddp_tcp_allgather(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t Bm = (size_t)a->count * cddp_pg_dtype_size[a->dtype];
    int n = t->n, r = t->r, rc;
    char *out = a->out;
    rseg *ss, *rs;
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0)
        return -1;
    if (cddp_pg_block(out, a->oblk, r, Bm) != (char *)a->in)
        memmove(cddp_pg_block(out, a->oblk, r, Bm), a->in, Bm);
    if (!Bm)
        return 0;
    ss = malloc(sizeof *ss * (size_t)(2 * n));
    if (!ss) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    rs = ss + n;
    for (int s = 0; s < n - 1; s++) {
        ss[s] = (rseg){cddp_pg_block(out, a->oblk, mod(r - s, n), Bm), Bm, 0};
        rs[s] = (rseg){cddp_pg_block(out, a->oblk, mod(r - s - 1, n), Bm), Bm, ACT_COPY};
    }
    rc = run_ring(pg, t, w, mod(r + 1, n), ss, n - 1, mod(r - 1, n), rs, n - 1, Bm);
    free(ss);
    return rc;
}

/* ring reduce-scatter on a scratch copy of the input; rank r ends with block r */
int cddp_tcp_reduce_scatter(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t Bm = (size_t)a->count * cddp_pg_dtype_size[a->dtype];
    int n = t->n, r = t->r, rc;
    rseg *ss, *rs;
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0)
        return -1;
    if (!Bm)
        return 0;
    if (cddp_tcp_scratch(t, w, (size_t)n * Bm) < 0)
        return -1;
    for (int j = 0; j < n; j++)
        memcpy(t->scratch + (size_t)j * Bm, cddp_pg_block(a->in, a->iblk, j, Bm), Bm);
    ss = malloc(sizeof *ss * (size_t)(2 * n));
    if (!ss) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    rs = ss + n;
    for (int s = 0; s < n - 1; s++) {
        ss[s] = (rseg){t->scratch + (size_t)mod(r - s - 1, n) * Bm, Bm, 0};
        rs[s] = (rseg){t->scratch + (size_t)mod(r - s - 2, n) * Bm, Bm,
                       s == n - 2 && a->redop == CDDP_RED_AVG ? ACT_REDUCE_AVG : ACT_REDUCE};
    }
    rc = run_ring(pg, t, w, mod(r + 1, n), ss, n - 1, mod(r - 1, n), rs, n - 1, Bm);
    free(ss);
    if (rc == 0)
        memcpy(a->out, t->scratch + (size_t)r * Bm, Bm);
    return rc;
}
