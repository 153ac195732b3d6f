/* distributed/pg/hier.c — the hierarchical transport: ranks on several hosts, some hosts holding
 * several ranks. Every op runs on the TCP mesh (distributed/pg/tcp.c) except large all_reduce,
 * which goes in three steps so that only one rank per host touches the network:
 *
 *   reduce to the host leader through shared memory (a thread-less shm subgroup per host)
 *   ring all-reduce between the host leaders over TCP (distributed/pg/ring.c)
 *   broadcast from the leader through shared memory
 *
 * Mirrors: NCCL's hierarchical (intra-node then inter-node) all-reduce; torch's gloo has none.
 *
 * Leaders are the lowest rank of each host, in host order; the subgroup of a host is the
 * segment /cddp-<leader's pid>-<nonce>-<leader>. A failure on either level breaks the whole
 * group: the host's other ranks are released from the shm step, the other hosts are told
 * over TCP which rank failed.
 * Called by the engine through cddp_pg_hier_ops (distributed/pg/engine.c picks it for
 * CDDP_PG_HIER, which rendezvous chooses; CDDP_TRANSPORT=hier forces it).
 */
#include "distributed/pg/tcp_internal.h"
#include "distributed/pg/reduce_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tcp_t.hier */
struct cddp_hier {
    cddp_pg *local;           /* this host's shared-memory subgroup (NULL: alone on its host) */
    int *leaders;             /* [nleaders] global rank of each host's leader, in host order */
    int nleaders, lidx;       /* lidx: this rank's place among the leaders, or -1 */
    int64_t lseq;             /* ops run on the subgroup */
};

/* ---- all_reduce ---------------------------------------------------------------------- */

/* Run a sub-op (reduce / broadcast from the host leader) on this host's shared-memory group.
 * Its error is re-worded as the parent op's, the whole group breaks and the other hosts are
 * told which rank failed. */
static int local_op(cddp_pg *pg, tcp_t *t, cddp_work *w, int op, int redop)
{
    cddp_hier *h = t->hier;
    cddp_work sub = *w;
    char *c, host[160] = "";
    int who;
    sub.a.op = op;
    sub.a.root = 0;
    sub.a.redop = redop;
    sub.seq = ++h->lseq;
    sub.err[0] = 0;
    if (cddp_pg_shm_ops.run(h->local, &sub) == 0)
        return 0;
    who = cddp_pg_shm_broken_rank(h->local);
    c = strstr(sub.err, ": ");
    if (who >= 0 && who < t->n && !pg->local[who] && !strstr(sub.err, cddp_tcp_peer(t, who)))
        snprintf(host, sizeof host, " (rank %d is on host %s)", who, cddp_tcp_peer(t, who));
    cddp_pg_seterr(w->err, "%s #%lld: %s%s", cddp_pg_op_name[w->a.op], (long long)w->seq,
                   c ? c + 2 : sub.err, host);
    w->err_kind = sub.err_kind;
    cddp_pg_mark_broken(pg, c ? c + 2 : sub.err);
    cddp_tcp_break(t, who >= 0 ? who : t->r);
    return -1;
}

/* HIER all_reduce: reduce to the host leader through shared memory, ring between leaders
 * over TCP, broadcast back through shared memory. Only the leaders touch the network. */
static int hier_allreduce(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    cddp_hier *h = t->hier;
    /* AVG: sum on both levels, divide once at the end */
    int red = w->a.redop == CDDP_RED_AVG ? CDDP_RED_SUM : w->a.redop;
    if (h->local && local_op(pg, t, w, CDDP_PG_REDUCE, red) < 0)
        return -1;
    if (h->lidx >= 0 &&
        cddp_tcp_ring_allreduce(pg, t, w, w->a.out, h->leaders, h->nleaders, h->lidx) < 0) {
        if (h->local)          /* the host's other ranks wait in the broadcast: release them */
            cddp_pg_shm_break_remote(h->local, t->broke ? t->failed : t->r, t->r);
        return -1;
    }
    if (h->nleaders == 1 && w->a.redop == CDDP_RED_AVG && h->lidx >= 0)
        pg_divide(w->a.out, w->a.count, w->a.dtype, t->n);
    return h->local ? local_op(pg, t, w, CDDP_PG_BROADCAST, 0) : 0;
}

/* A failure this rank saw on the mesh also breaks the host's shared-memory group (naming the
 * failed rank): a host peer may already wait there for this rank in the same op (its header
 * exchange ended first), and would otherwise only see this rank exit, not why. */
static void tell_host(tcp_t *t)
{
    if (t->hier->local && t->broke && t->failed != t->r)
        cddp_pg_shm_break_remote(t->hier->local, t->failed, t->r);
}

static int mesh_run(cddp_pg *pg, tcp_t *t, cddp_work *w)
{
    if (cddp_pg_tcp_ops.run(pg, w) == 0)
        return 0;
    tell_host(t);
    return -1;
}

/* Large all_reduce goes through the hosts' leaders; everything else (small all_reduce too: it
 * rides in one header exchange) is the TCP mesh's. A group whose every host holds one rank has
 * no host level and runs the plain ring. */
static int hier_run(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    cddp_hier *h = t->hier;
    size_t B = (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype];
    if (w->a.op != CDDP_PG_ALLREDUCE || B <= t->small_max || t->broke ||
        (!h->local && h->nleaders == t->n))
        return mesh_run(pg, t, w);
    if (cddp_tcp_exchange_headers(pg, t, w, NULL, 0) < 0) {
        tell_host(t);
        return -1;
    }
    return hier_allreduce(pg, t, w);
}

/* ---- send / recv: the mesh's ---------------------------------------------------------- */

static int hier_p2p_start(cddp_pg *pg, cddp_work *w) { return cddp_pg_tcp_ops.p2p_start(pg, w); }
static int hier_p2p_progress(cddp_pg *pg, cddp_work *w)
{
    return cddp_pg_tcp_ops.p2p_progress(pg, w);
}
static void hier_p2p_cancel(cddp_pg *pg, cddp_work *w) { cddp_pg_tcp_ops.p2p_cancel(pg, w); }
static void hier_p2p_wait(cddp_pg *pg, double max_s) { cddp_pg_tcp_ops.p2p_wait(pg, max_s); }
static int hier_p2p_probe(cddp_pg *pg, cddp_work *w) { return cddp_pg_tcp_ops.p2p_probe(pg, w); }
static void hier_doorbell(cddp_pg *pg) { cddp_pg_tcp_ops.doorbell(pg); }

/* ---- setup ---------------------------------------------------------------------------- */

/* The mesh first (its fini closes the sockets), then the host level, as before the split. */
static void hier_fini(cddp_pg *pg)
{
    tcp_t *t = pg->tr;
    cddp_hier *h = t ? t->hier : NULL;
    cddp_pg_tcp_ops.fini(pg);
    if (!h)
        return;
    cddp_pg_destroy(h->local);
    free(h->leaders);
    free(h);
}

/* The TCP mesh, then the leaders (lowest rank of each host, in host order) and, when this host
 * holds several ranks, its shared-memory subgroup on /cddp-<leader's pid>-<nonce>-<leader>.
 * Blocks up to the group's timeout (the mesh, then every local rank mapping the segment). */
static int hier_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    tcp_t *t;
    cddp_hier *h;
    int n, r, nm = 0, *mem = NULL;
    if (cddp_pg_tcp_ops.init(pg, info, err) < 0)
        return -1;
    t = pg->tr;
    n = t->n;
    r = t->r;
    h = t->hier = calloc(1, sizeof *h);
    mem = malloc(sizeof(int) * (size_t)n);
    if (h)
        h->leaders = malloc(sizeof(int) * (size_t)n);
    if (!h || !mem || !h->leaders) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;
    }
    h->lidx = -1;
    for (int j = 0; j < n; j++) {
        int first = 1;
        for (int i = 0; i < j; i++)
            if (info->host[i] == info->host[j])
                first = 0;
        if (first) {
            if (j == r)
                h->lidx = h->nleaders;
            h->leaders[h->nleaders++] = j;
        }
        if (info->host[j] == info->host[r])
            mem[nm++] = j;
    }
    if (nm > 1) {
        char name[80];
        snprintf(name, sizeof name, "%.40s-%d", info->shm_name, mem[0]);
        if (!(h->local = cddp_pg_sub_create(pg, mem, nm, name, err)))
            goto fail;
    }
    free(mem);
    return 0;
fail:
    free(mem);
    hier_fini(pg);
    return -1;
}

const cddp_pg_transport_ops cddp_pg_hier_ops = {
    .name = "hier",
    .init = hier_init,
    .run = hier_run,
    .p2p_start = hier_p2p_start,
    .p2p_progress = hier_p2p_progress,
    .p2p_cancel = hier_p2p_cancel,
    .p2p_wait = hier_p2p_wait,
    .p2p_probe = hier_p2p_probe,
    .doorbell = hier_doorbell,
    .fini = hier_fini,
};
