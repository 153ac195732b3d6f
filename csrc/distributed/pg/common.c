/* distributed/pg/common.c — what every transport of the process-group engine shares, apart from
 * the group object itself: op / reduce-op / dtype names, the clock, error formatting, the env
 * size knob, peer liveness (pidfd), the broken state, and the per-op header every rank compares.
 *
 * Mirrors: the small utilities of c10d's ProcessGroup (op names in messages, the sequence
 * number and op-type consistency check of TORCH_DISTRIBUTED_DEBUG=DETAIL, here always on).
 *
 * Built into cddp._C (with engine.c and the transports) and, as its own copy, into cddp._mpi,
 * whose transport (distributed/mpi/) runs on groups created by _C's engine: these functions
 * only touch the cddp_pg fields pg.h defines, so either copy serves any group.
 *
 * Header (int64[6]): sequence number, op, dtype, element count, root, reduce op.
 */
#include "distributed/pg/pg.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const cddp_pg_op_name[CDDP_PG_NOPS] = {
    "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter",
    "reduce_scatter", "all_to_all", "barrier", "send", "recv",
};

void cddp_pg_op_prefix(const cddp_work *w, char *buf, size_t len)
{
    if (w->a.op == CDDP_PG_RECV && w->a.root == CDDP_PG_ANY)
        snprintf(buf, len, "recv from any rank");
    else if (w->a.op == CDDP_PG_SEND || w->a.op == CDDP_PG_RECV)
        snprintf(buf, len, "%s %s rank %d", cddp_pg_op_name[w->a.op],
                 w->a.op == CDDP_PG_SEND ? "to" : "from", w->a.root);
    else
        snprintf(buf, len, "%s #%lld", cddp_pg_op_name[w->a.op], (long long)w->seq);
}
const char *const cddp_pg_redop_name[CDDP_RED_NOPS] = {
    "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR",
};
const char *const cddp_pg_dtype_name[CDDP_PG_NDTYPES] = {
    "float32", "float64", "int64", "int32", "bool", "float16", "bfloat16", "uint8", "int8",
    "int16"};
const size_t cddp_pg_dtype_size[CDDP_PG_NDTYPES] = {4, 8, 8, 4, 1, 2, 2, 1, 1, 2};

/* ---- small helpers ------------------------------------------------------------------- */

double cddp_pg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cddp_pg_seterr(char *err, const char *fmt, ...)
{
    va_list ap;
    if (err[0])
        return;
    va_start(ap, fmt);
    vsnprintf(err, CDDP_PG_ERRLEN, fmt, ap);
    va_end(ap);
}

size_t cddp_pg_env_size(const char *name, size_t dflt, size_t lo, size_t hi)
{
    const char *s = getenv(name);
    char *end;
    unsigned long long v;
    if (!s || !*s)
        return dflt;
    v = strtoull(s, &end, 10);
    if (*end == 'k' || *end == 'K') v <<= 10;
    else if (*end == 'm' || *end == 'M') v <<= 20;
    if (v < lo) v = lo;
    if (v > hi) v = hi;
    return (size_t)v;
}

int cddp_pg_peer_dead(cddp_pg *pg, int r)
{
    if (r == pg->rank || !pg->local[r])
        return 0;
    if (pg->pidfds[r] >= 0) {
        struct pollfd p = {.fd = pg->pidfds[r], .events = POLLIN};
        return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
    }
    return kill(pg->pids[r], 0) < 0 && errno == ESRCH;
}

int cddp_pg_interrupted(cddp_work *w)
{
    double now;
    if (!w->intr)
        return 0;
    now = cddp_pg_now();
    if (now - w->intr_last < 0.05)
        return 0;
    w->intr_last = now;
    return w->intr(w->intr_ctx) != 0;
}

void cddp_pg_mark_broken(cddp_pg *pg, const char *msg)
{
    pthread_mutex_lock(&pg->mu);
    if (!atomic_load(&pg->broken)) {
        snprintf(pg->broken_msg, sizeof pg->broken_msg, "%s", msg);
        atomic_store(&pg->broken, 1);
    }
    pthread_mutex_unlock(&pg->mu);
}

void cddp_pg_make_header(const cddp_work *w, int64_t hdr[6])
{
    hdr[0] = w->seq;
    hdr[1] = w->a.op;
    hdr[2] = w->a.dtype;
    hdr[3] = w->a.count;
    hdr[4] = w->a.root;
    hdr[5] = w->a.redop;
}

/* Which header fields an op's ranks must agree on (root only for rooted ops, reduce op only
 * for reducing ones). */
int cddp_pg_uses_root(int op)
{
    return op == CDDP_PG_BROADCAST || op == CDDP_PG_REDUCE || op == CDDP_PG_GATHER ||
           op == CDDP_PG_SCATTER;
}
int cddp_pg_uses_redop(int op)
{
    return op == CDDP_PG_ALLREDUCE || op == CDDP_PG_REDUCE || op == CDDP_PG_REDUCE_SCATTER;
}

static const char *dtname(int64_t d)
{
    return d >= 0 && d < CDDP_PG_NDTYPES ? cddp_pg_dtype_name[d] : "?";
}

int cddp_pg_check_headers(const int64_t (*h)[6], int size, char *err)
{
    const int64_t *h0 = h[0];
    for (int r = 1; r < size; r++) {
        const int64_t *x = h[r];
        const char *name = (h0[1] >= 0 && h0[1] < CDDP_PG_NOPS) ? cddp_pg_op_name[h0[1]] : "?";
        if (x[0] != h0[0]) {
            cddp_pg_seterr(err, "%s #%lld: rank %d is at collective #%lld, rank 0 at #%lld "
                           "(ranks issued different numbers of collectives)",
                           name, (long long)h0[0], r, (long long)x[0], (long long)h0[0]);
            return -1;
        }
        if (x[1] != h0[1]) {
            const char *xn = (x[1] >= 0 && x[1] < CDDP_PG_NOPS) ? cddp_pg_op_name[x[1]] : "?";
            cddp_pg_seterr(err, "collective #%lld: rank %d called %s, rank 0 called %s",
                           (long long)h0[0], r, xn, name);
            return -1;
        }
        if (x[2] != h0[2] && h0[1] != CDDP_PG_BARRIER) {
            cddp_pg_seterr(err, "%s #%lld: rank %d passed %s tensors, rank 0 passed %s",
                           name, (long long)h0[0], r, dtname(x[2]), dtname(h0[2]));
            return -1;
        }
        if (x[3] != h0[3]) {
            cddp_pg_seterr(err, "%s #%lld: rank %d passed %lld %s elements, rank 0 passed %lld",
                           name, (long long)h0[0], r, (long long)x[3], dtname(h0[2]),
                           (long long)h0[3]);
            return -1;
        }
        if (cddp_pg_uses_root((int)h0[1]) && x[4] != h0[4]) {
            cddp_pg_seterr(err, "%s #%lld: rank %d passed root rank %lld, rank 0 passed %lld",
                           name, (long long)h0[0], r, (long long)x[4], (long long)h0[4]);
            return -1;
        }
        if (cddp_pg_uses_redop((int)h0[1]) && x[5] != h0[5]) {
            cddp_pg_seterr(err, "%s #%lld: rank %d passed op=ReduceOp.%s, rank 0 passed "
                           "op=ReduceOp.%s", name, (long long)h0[0], r,
                           cddp_pg_redop_name[x[5] % CDDP_RED_NOPS],
                           cddp_pg_redop_name[h0[5] % CDDP_RED_NOPS]);
            return -1;
        }
    }
    return 0;
}
