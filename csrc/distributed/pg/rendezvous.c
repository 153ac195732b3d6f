/* distributed/pg/rendezvous.c — a new process group's rendezvous over the store and its transport
 * choice (pure C, no Python.h; the store is a callback table, distributed/pg/rendezvous.h).
 *
 * Mirrors: the store exchange in torch's ProcessGroupGloo constructor (connectFullMesh through
 * the store), and the choice between gloo's devices.
 *
 *   check the arguments, read CDDP_TRANSPORT
 *   this rank: host + boot id (or CDDP_HOST_ID), a random nonce, a TCP listener when TCP may be
 *              needed (opened BEFORE publishing, so the published port already accepts)
 *   gen = (add(prefix/gen, 1) - 1) / size; set(prefix/gen/info/rank); get every rank's entry
 *   local[j] = same host and boot id; transport; cddp_pg_create
 *
 * Called by the Python binding (distributed/python/py_pg.c: ProcessGroupCPU.__new__) with the
 * GIL released; the binding's store callbacks take it back.
 */
#include "distributed/pg/rendezvous.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Where a failure is reported: the caller's buffer and the kind of failure. */
typedef struct {
    char *msg;
    size_t len;
    int *kind;
} rdzv_err;

/* This rank, as it publishes itself. */
typedef struct {
    char host[256], boot[64], addr[64];
    unsigned long long nonce;
    int port, lfd;             /* TCP listener (cddp_pg_tcp_listen), or 0 / -1 */
} self_info;

/* One rank's published entry. */
typedef struct {
    int pid, port, size;
    char host[256], boot[64], addr[64];
    unsigned long long nonce;
} peer_info;

static int fail_with(rdzv_err *e, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record the failure (the first one wins) and return -1. */
static int fail_with(rdzv_err *e, int kind, const char *fmt, ...)
{
    va_list ap;
    if (e->msg[0])
        return -1;
    *e->kind = kind;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->len, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- the arguments and this rank ----------------------------------------------------- */

/* Sizes, rank, and the transport name ($CDDP_TRANSPORT over args->transport) into *want
 * (0 = auto). */
static int check_args(const cddp_pg_rdzv_args *a, int *want, rdzv_err *e)
{
    const char *transport = a->transport, *env;
    if (a->size < 1 || a->size > CDDP_PG_MAX_RANKS)
        return fail_with(e, CDDP_ERR_VALUE, "world size must be in [1, %d], got %d",
                         CDDP_PG_MAX_RANKS, a->size);
    if (a->rank < 0 || a->rank >= a->size)
        return fail_with(e, CDDP_ERR_VALUE, "Invalid rank %d for a group of size %d", a->rank,
                         a->size);
    env = getenv("CDDP_TRANSPORT");
    if (env && *env)
        transport = env;
    if (!strcmp(transport, "auto")) *want = 0;
    else if (!strcmp(transport, "shm")) *want = CDDP_PG_SHM;
    else if (!strcmp(transport, "tcp")) *want = CDDP_PG_TCP;
    else if (!strcmp(transport, "hier")) *want = CDDP_PG_HIER;
    else
        return fail_with(e, CDDP_ERR_VALUE, "transport must be 'auto', 'shm', 'tcp' or 'hier' "
                         "(CDDP_TRANSPORT), got '%s'", transport);
    return 0;
}

static void read_boot_id(char *buf, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    snprintf(buf, len, "-");
    if (f) {
        if (fgets(buf, (int)len, f))
            buf[strcspn(buf, "\n ")] = 0;
        fclose(f);
    }
}

/* Host identity (hostname + boot id: a rebooted or cloned machine is another host), nonce,
 * and the listener when TCP may be needed: every transport but shm, in a group of several. */
static int describe_self(int size, int want, self_info *me, rdzv_err *e)
{
    const char *env;
    char lerr[CDDP_PG_ERRLEN] = "";
    if (gethostname(me->host, sizeof me->host) < 0)
        snprintf(me->host, sizeof me->host, "localhost");
    me->host[sizeof me->host - 1] = 0;
    read_boot_id(me->boot, sizeof me->boot);
    env = getenv("CDDP_HOST_ID");       /* tests: pretend ranks of one machine sit on several */
    if (env && *env) {
        snprintf(me->host, sizeof me->host, "%s", env);
        snprintf(me->boot, sizeof me->boot, "simulated");
    }
    for (char *c = me->host; *c; c++)
        if (*c == ' ') *c = '_';
    if (getrandom(&me->nonce, sizeof me->nonce, 0) != (ssize_t)sizeof me->nonce)
        me->nonce = (unsigned long long)getpid() * 0x9e3779b97f4a7c15ULL ^
                    (unsigned long long)(cddp_pg_now() * 1e9);
    me->port = 0;
    me->lfd = -1;
    if (size > 1 && want != CDDP_PG_SHM) {    /* TCP may be needed: listen before publishing */
        me->lfd = cddp_pg_tcp_listen(&me->port, lerr);
        if (me->lfd < 0)
            return fail_with(e, CDDP_ERR_RUNTIME, "%s", lerr);
    }
    cddp_pg_local_addr(me->addr, sizeof me->addr);
    return 0;
}

/* ---- the exchange -------------------------------------------------------------------- */

/* Publish `mine` and read every rank's entry under prefix/gen/info/. */
static int exchange(const cddp_pg_store *st, const char *prefix, int rank, int size,
                    const char *mine, peer_info *peers, rdzv_err *e)
{
    char key[512];
    int64_t v;
    long gen;
    snprintf(key, sizeof key, "%sgen", prefix);
    if (st->add(st->ctx, key, 1, &v) < 0)
        return fail_with(e, CDDP_ERR_STORE, "process group rendezvous: add(%s) failed", key);
    gen = (long)((v - 1) / size);               /* re-created groups get fresh keys */
    snprintf(key, sizeof key, "%s%ld/info/%d", prefix, gen, rank);
    if (st->set(st->ctx, key, mine) < 0)
        return fail_with(e, CDDP_ERR_STORE, "process group rendezvous: set(%s) failed", key);
    for (int j = 0; j < size; j++) {
        peer_info *p = &peers[j];
        char *s;
        snprintf(key, sizeof key, "%s%ld/info/%d", prefix, gen, j);
        if (!(s = st->get(st->ctx, key)))
            return fail_with(e, CDDP_ERR_STORE, "process group rendezvous: get(%s) failed", key);
        if (sscanf(s, "%d %255s %63s %63s %d %llx %d", &p->pid, p->host, p->boot, p->addr,
                   &p->port, &p->nonce, &p->size) != 7) {
            fail_with(e, CDDP_ERR_RUNTIME, "process group rendezvous: malformed entry for "
                      "rank %d: %.100s", j, s);
            free(s);
            return -1;
        }
        free(s);
        /* ranks that disagree on the group's size must fail here, before a transport sizes
         * its buffers for one of the two */
        if (p->size != size)
            return fail_with(e, CDDP_ERR_RUNTIME, "rank %d joined this group as one of %d ranks "
                             "but this rank (rank %d) as one of %d: every rank must create the "
                             "group with the same members", j, p->size, rank, size);
    }
    return 0;
}

/* Fill info's per-rank arrays from the entries (info->local, pids, addrs, ports, host) and
 * choose the transport. info->addrs point into peers. */
static int choose_transport(const peer_info *peers, const self_info *me, int size, int want,
                            cddp_pg_info *info, rdzv_err *e)
{
    int all_local = 1, shared_host = 0;
    for (int j = 0; j < size; j++) {
        info->pids[j] = peers[j].pid;
        info->local[j] = !strcmp(peers[j].host, me->host) && !strcmp(peers[j].boot, me->boot);
        info->addrs[j] = (char *)peers[j].addr;
        info->ports[j] = peers[j].port;
        info->host[j] = j;
        for (int i = 0; i < j; i++)       /* host index: the first rank seen on that host */
            if (!strcmp(peers[i].host, peers[j].host) && !strcmp(peers[i].boot, peers[j].boot)) {
                info->host[j] = info->host[i];
                shared_host = 1;
                break;
            }
        all_local &= info->local[j];
    }
    if (want == CDDP_PG_SHM && !all_local)
        return fail_with(e, CDDP_ERR_VALUE, "transport 'shm' needs every rank on one host");
    /* one host: shared memory; several, some with several ranks: hierarchical; else TCP */
    info->transport = want ? want : all_local ? CDDP_PG_SHM
                                  : shared_host ? CDDP_PG_HIER : CDDP_PG_TCP;
    if (size == 1)
        info->transport = CDDP_PG_SHM;
    if (info->transport != CDDP_PG_SHM && me->lfd < 0)
        return fail_with(e, CDDP_ERR_RUNTIME, "TCP transport chosen but no listener was created");
    return 0;
}

/* ---- rendezvous ---------------------------------------------------------------------- */

static void info_free(cddp_pg_info *info)
{
    free(info->pids);
    free(info->local);
    free(info->addrs);
    free(info->ports);
    free(info->host);
}

static int info_alloc(cddp_pg_info *info, int size, rdzv_err *e)
{
    info->pids = calloc((size_t)size, sizeof(int));
    info->local = calloc((size_t)size, 1);
    info->addrs = calloc((size_t)size, sizeof(char *));
    info->ports = calloc((size_t)size, sizeof(int));
    info->host = calloc((size_t)size, sizeof(int));
    if (!info->pids || !info->local || !info->addrs || !info->ports || !info->host)
        return fail_with(e, CDDP_ERR_NOMEM, "out of memory");
    return 0;
}

cddp_pg *cddp_pg_rendezvous(const cddp_pg_store *store, const cddp_pg_rdzv_args *args,
                            char *err, size_t errlen, int *kind)
{
    rdzv_err e = {err, errlen, kind};
    double timeout = args->timeout_s > 0 ? args->timeout_s : 1800.0;
    self_info me = {.lfd = -1};
    peer_info *peers = NULL;
    cddp_pg_info info = {0};
    cddp_pg *pg = NULL;
    char mine[512], prefix[256], perr[CDDP_PG_ERRLEN] = "";
    int want = 0;
    err[0] = 0;
    *kind = CDDP_ERR_RUNTIME;
    if (check_args(args, &want, &e) < 0 || describe_self(args->size, want, &me, &e) < 0)
        goto fail;
    snprintf(mine, sizeof mine, "%d %s %s %s %d %016llx %d", (int)getpid(), me.host, me.boot,
             me.addr, me.port, me.nonce, args->size);
    snprintf(prefix, sizeof prefix, "cddp/pg/%s/", args->group_name);
    peers = calloc((size_t)args->size, sizeof *peers);
    if (!peers || info_alloc(&info, args->size, &e) < 0) {
        fail_with(&e, CDDP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (exchange(store, prefix, args->rank, args->size, mine, peers, &e) < 0 ||
        choose_transport(peers, &me, args->size, want, &info, &e) < 0)
        goto fail;
    if (info.transport == CDDP_PG_SHM && me.lfd >= 0) {
        close(me.lfd);
        me.lfd = -1;
    }
    info.rank = args->rank;
    info.size = args->size;
    info.timeout_s = timeout;
    info.nonce = peers[0].nonce;
    info.listen_fd = me.lfd;
    snprintf(info.shm_name, sizeof info.shm_name, "%016llx", peers[0].nonce);
    snprintf(info.group_name, sizeof info.group_name, "%s", args->group_name);
    pg = cddp_pg_create(&info, perr);
    me.lfd = -1;                       /* the transport owns (and closed) it */
    if (!pg)
        fail_with(&e, CDDP_ERR_RUNTIME, "process group '%s' (rank %d of %d): %s",
                  args->group_name, args->rank, args->size, perr);
fail:
    if (me.lfd >= 0)
        close(me.lfd);
    free(peers);
    info_free(&info);
    return pg;
}
