/* distributed/pg/tcp.c — the TCP transport: a full mesh of connections (one for collectives, one
 * for send/recv per pair of ranks), every op driven by non-blocking sockets under poll().
 *
 * Mirrors: gloo's TCP transport (transport/tcp: pairs, the event loop); the algorithms that
 * drive it are ring.c and direct.c, as gloo's are its allreduce_ring_chunked.h and friends.
 *
 * Every collective starts with a header exchange with all peers (8 int64: magic, seq, op,
 * dtype, count, root, reduce op, eager bytes): it is the barrier, the mismatch check, and for
 * small all_reduce it also carries the data. After a mismatch every rank has consumed exactly
 * what the others sent, so the connections stay usable. run() then hands the op to its
 * algorithm (distributed/pg/tcp_internal.h lists them).
 *
 * Failures: EOF / reset on a connection we need fails the op naming that rank (and "exited"
 * when its pidfd says so, its host when it runs on another one); a connection whose peer
 * stopped answering fails with ETIMEDOUT (or the no-route error that preceded it) after the
 * heartbeat (tcp_mesh.c), on any connection of the poll set, not only the ones the op waits
 * on. The rank that notices sends every peer one out-of-band byte naming the failed rank, then
 * shuts its sockets for writing, so ranks blocked on OTHER peers learn it within a poll round
 * instead of at their timeout.
 *
 * Called by the engine through cddp_pg_tcp_ops (distributed/pg/engine.c) and by hier.c, which
 * layers a host level on this mesh; the mesh itself (setup, teardown, the listener rendezvous
 * opens, the address peers connect to) is tcp_mesh.c's.
 */
#include "distributed/pg/tcp_internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_MAGIC 0x63646470746370ULL   /* "cddptcp" */
#define P2P_MAGIC 0x70327063u

enum { P2P_HDR = 32 };   /* magic, tag, dtype, 0 (int32 each), count, bytes (int64 each) */

typedef struct {
    uint64_t ticket;
    size_t hdr_done, off;
    int started;
    unsigned char hdr[P2P_HDR];
} tp2p;

/* ---- failure handling ---------------------------------------------------------------- */

/* A local peer's process: wait up to 100 ms for its exit to become visible (its sockets close
 * a moment before its pidfd turns readable). */
static int confirm_dead(cddp_pg *pg, int j)
{
    if (j < 0 || j >= pg->size || !pg->local[j])
        return 0;
    if (pg->pidfds[j] >= 0) {
        struct pollfd p = {.fd = pg->pidfds[j], .events = POLLIN};
        return poll(&p, 1, 100) > 0;
    }
    for (int i = 0; i < 20; i++) {
        if (cddp_pg_peer_dead(pg, j))
            return 1;
        usleep(5000);
    }
    return 0;
}

/* Tell every peer that rank `who` failed, then stop writing: peers blocked on us see the
 * notice or EOF at once. The notice is one urgent byte on the send/recv connection (normally
 * idle, so there is room for it even when the collective connection's buffer is full) and on
 * the collective one. Connections stay open (no RST) until the group ends. */
void cddp_tcp_break(tcp_t *t, int who)
{
    unsigned char b = (unsigned char)(who + 1 < 255 ? who + 1 : 255);
    if (t->broke)
        return;
    t->broke = 1;
    t->failed = who;
    for (int j = 0; j < t->n; j++) {
        if (t->pfd[j] >= 0)
            send(t->pfd[j], &b, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
        if (t->fd[j] >= 0)
            send(t->fd[j], &b, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    for (int j = 0; j < t->n; j++) {
        if (t->fd[j] >= 0)
            shutdown(t->fd[j], SHUT_WR);
        if (t->pfd[j] >= 0)
            shutdown(t->pfd[j], SHUT_WR);
    }
}

/* Whether socket error e means the heartbeat's TCP_USER_TIMEOUT gave up on the peer. The
 * kernel reports the connection's last soft error in place of ETIMEDOUT when there is one:
 * a host whose own link went down has had its sends fail with no route, and says so. */
static int heartbeat_lost(int e)
{
    return e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == EHOSTDOWN ||
           e == ENETDOWN;
}

/* What happened to rank j's connection (error e, 0: end of stream), as a sentence. */
static void describe_loss(cddp_pg *pg, tcp_t *t, int j, int e, char *msg, size_t len)
{
    /* ECONNABORTED: this host's kernel tore the connection down (ss -K, a firewall, an
     * exhausted retransmission), not the peer */
    const char *how = e == ECONNABORTED ? "the connection to rank %d was aborted on this host (%s)"
                                        : "rank %d closed its connection (%s)";
    if (confirm_dead(pg, j))
        snprintf(msg, len, "rank %d (pid %d) exited", j, pg->pids[j]);
    else if (pg->local[j])
        snprintf(msg, len, how, j, e ? strerror(e) : "end of stream");
    else if (e == ECONNABORTED)
        snprintf(msg, len, "the connection to rank %d on host %s was aborted on this host (%s)",
                 j, cddp_tcp_peer(t, j), strerror(e));
    else if (heartbeat_lost(e))
        snprintf(msg, len, "rank %d on host %s stopped answering: no reply to TCP heartbeats "
                 "for %.0f s (CDDP_HEARTBEAT_S%s%s); the network link to that host is down or "
                 "the host is frozen", j, cddp_tcp_peer(t, j), t->hb_s,
                 e == ETIMEDOUT ? "" : "; ", e == ETIMEDOUT ? "" : strerror(e));
    else
        snprintf(msg, len, "rank %d on host %s closed its connection (%s)", j,
                 cddp_tcp_peer(t, j), e ? strerror(e) : "end of stream");
}

/* Connection to rank j failed (EOF, reset, error `e`). Sets w->err; -1. */
static int fail_peer(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, int e)
{
    char pre[96], msg[CDDP_PG_ERRLEN - 128];
    cddp_pg_op_prefix(w, pre, sizeof pre);
    describe_loss(pg, t, j, e, msg, sizeof msg);
    cddp_pg_seterr(w->err, "%s: %s while rank %d was waiting for it", pre, msg, t->r);
    cddp_pg_mark_broken(pg, msg);
    cddp_tcp_break(t, j);
    return -1;
}

/* Peer j sent an urgent byte (on either connection): some rank failed. */
static int fail_notice(cddp_pg *pg, tcp_t *t, cddp_work *w, int j)
{
    unsigned char b = 0;
    char pre[96], msg[CDDP_PG_ERRLEN];
    int d;
    if (recv(t->pfd[j], &b, 1, MSG_OOB | MSG_DONTWAIT) != 1 &&
        recv(t->fd[j], &b, 1, MSG_OOB | MSG_DONTWAIT) != 1)
        return fail_peer(pg, t, w, j, 0);
    d = b >= 1 && b < 255 ? b - 1 : -1;
    cddp_pg_op_prefix(w, pre, sizeof pre);
    if (d == j)
        snprintf(msg, sizeof msg, "rank %d aborted (shut down or interrupted) during a "
                 "collective", j);
    else if (d == t->r)      /* j gave up on us: its wait for this rank timed out or broke */
        snprintf(msg, sizeof msg, "rank %d stopped waiting for this rank (rank %d) and left "
                 "the collective: it timed out (this rank arrived late) or lost its "
                 "connection to it", j, d);
    else if (d >= 0 && d < pg->size && confirm_dead(pg, d))
        snprintf(msg, sizeof msg, "rank %d (pid %d) exited (reported by rank %d)", d,
                 pg->pids[d], j);
    else if (d >= 0 && d < pg->size && !pg->local[d])
        snprintf(msg, sizeof msg, "rank %d on host %s failed (reported by rank %d)", d,
                 cddp_tcp_peer(t, d), j);
    else if (d >= 0 && d < pg->size)
        snprintf(msg, sizeof msg, "rank %d failed (reported by rank %d)", d, j);
    else
        snprintf(msg, sizeof msg, "a rank failed (reported by rank %d)", j);
    cddp_pg_seterr(w->err, "%s: %s", pre, msg);
    cddp_pg_mark_broken(pg, msg);
    cddp_tcp_break(t, d >= 0 ? d : j);
    return -1;
}

/* Deadline and shutdown checks between polls; `j` is a rank we wait for (for the message). */
static int check_time(cddp_pg *pg, tcp_t *t, cddp_work *w, int j)
{
    char pre[96];
    if (cddp_pg_aborting(pg) || cddp_pg_interrupted(w)) {
        cddp_pg_op_prefix(w, pre, sizeof pre);
        cddp_pg_seterr(w->err, "%s: process group was shut down or interrupted", pre);
        cddp_pg_mark_broken(pg, "process group was shut down or interrupted");
        cddp_tcp_break(t, t->r);
        return -1;
    }
    if (cddp_pg_now() - w->t_start > pg->timeout_s) {
        cddp_pg_op_prefix(w, pre, sizeof pre);
        cddp_pg_seterr(w->err, "%s: rank %d timed out after %.1f s waiting for rank %d", pre,
                       t->r, pg->timeout_s, j);
        w->err_kind = CDDP_ERR_TIMEOUT;
        cddp_pg_mark_broken(pg, w->err);
        cddp_tcp_break(t, j);
        return -1;
    }
    return 0;
}

/* ---- the poll set -------------------------------------------------------------------- */

/* One poll round over the doorbell and every collective connection: ev[j] are the events
 * wanted from rank j, plus POLLPRI everywhere so failure notices arrive from anyone. Then the
 * shutdown and deadline checks (`waitfor`: the rank named if the deadline passed). */
int cddp_tcp_poll(cddp_pg *pg, tcp_t *t, cddp_work *w, const short *ev, int waitfor)
{
    struct pollfd stack_p[129], *p = stack_p;
    int stack_peer[129], *peer = stack_peer, np = 0, rc, to_ms, notice = -1;
    int lost = -1, lost_fd = -1;        /* a connection in error (the first seen) */
    double left = w->t_start + pg->timeout_s - cddp_pg_now();
    if (2 * t->n + 1 > 129) {
        p = malloc(sizeof *p * (size_t)(2 * t->n + 1));
        peer = malloc(sizeof *peer * (size_t)(2 * t->n + 1));
        if (!p || !peer) {
            if (p != stack_p) free(p);
            if (peer != stack_peer) free(peer);
            cddp_pg_seterr(w->err, "out of memory");
            return -1;
        }
    }
    p[np] = (struct pollfd){.fd = t->evfd, .events = POLLIN};
    peer[np++] = -1;
    for (int j = 0; j < t->n; j++)
        if (t->fd[j] >= 0) {
            p[np] = (struct pollfd){.fd = t->fd[j], .events = (short)(ev[j] | POLLPRI)};
            peer[np++] = j;
            p[np] = (struct pollfd){.fd = t->pfd[j], .events = POLLPRI};
            peer[np++] = j;
        }
    to_ms = left <= 0 ? 0 : left > 0.1 ? 100 : (int)(left * 1000) + 1;
    rc = poll(p, (nfds_t)np, to_ms);
    if (rc > 0) {
        for (int i = 1; i < np && notice < 0; i++) {
            if (p[i].revents & POLLPRI)
                notice = peer[i];
            /* an error with data still to read (a peer that finished this op and then died:
             * its RST) is the reader's to find once it has drained what the peer sent */
            else if ((p[i].revents & POLLERR) && !(p[i].revents & POLLIN) && lost < 0 &&
                     !(p[i].fd == t->pfd[peer[i]] && t->p2p_dead[peer[i]])) {
                lost = peer[i];     /* e.g. the heartbeat gave up on that peer (ETIMEDOUT) */
                lost_fd = p[i].fd;
            }
        }
        if (p[0].revents & POLLIN) {
            uint64_t v;
            if (read(t->evfd, &v, sizeof v) < 0) { /* drained already: fine */ }
        }
    }
    if (p != stack_p) free(p);
    if (peer != stack_peer) free(peer);
    if (notice >= 0)
        return fail_notice(pg, t, w, notice);
    if (lost >= 0) {
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(lost_fd, SOL_SOCKET, SO_ERROR, &e, &el);
        return fail_peer(pg, t, w, lost, e);
    }
    return check_time(pg, t, w, waitfor);
}

/* ---- non-blocking I/O ------------------------------------------------------------------ */

/* EOF or reset from rank j: a failure notice from j may trail its FIN by a moment (it
 * travels on the other connection) — prefer naming the rank that failed first. */
static int fail_closed(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, int e)
{
    struct pollfd p[2] = {{.fd = t->fd[j], .events = POLLPRI}, {.fd = t->pfd[j], .events = POLLPRI}};
    if (poll(p, 2, 20) > 0 && ((p[0].revents | p[1].revents) & POLLPRI))
        return fail_notice(pg, t, w, j);
    return fail_peer(pg, t, w, j, e);
}

/* Move up to len bytes; returns bytes moved (0 on EAGAIN), -1 with w->err on failure. */
ssize_t cddp_tcp_io_send(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, const char *buf, size_t len)
{
    ssize_t k;
    if (!len)
        return 0;
    k = send(t->fd[j], buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k >= 0)
        return k;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return fail_closed(pg, t, w, j, errno);
}

ssize_t cddp_tcp_io_recv(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, char *buf, size_t len)
{
    ssize_t k;
    if (!len)
        return 0;
    k = recv(t->fd[j], buf, len, MSG_DONTWAIT);
    if (k > 0)
        return k;
    if (k == 0)
        return fail_closed(pg, t, w, j, 0);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return fail_closed(pg, t, w, j, errno);
}

/* ---- engine 1: independent transfers with several peers ------------------------------ */

int cddp_tcp_run_xfers(cddp_pg *pg, tcp_t *t, cddp_work *w, tcp_xfer *x, int nx)
{
    short *ev = t->want;
    for (;;) {
        int pending = 0, waitfor = -1;
        memset(ev, 0, sizeof *ev * (size_t)t->n);
        for (int i = 0; i < nx; i++) {
            while (x[i].done < x[i].len) {
                char *p = x[i].buf + x[i].done;
                size_t left = x[i].len - x[i].done;
                ssize_t k = x[i].send ? cddp_tcp_io_send(pg, t, w, x[i].peer, p, left)
                                      : cddp_tcp_io_recv(pg, t, w, x[i].peer, p, left);
                if (k < 0)
                    return -1;
                if (k == 0)
                    break;
                x[i].done += (size_t)k;
            }
            if (x[i].done < x[i].len) {
                pending++;
                ev[x[i].peer] |= x[i].send ? POLLOUT : POLLIN;
                if (waitfor < 0 || !x[i].send)
                    waitfor = x[i].peer;
            }
        }
        if (!pending)
            return 0;
        if (cddp_tcp_poll(pg, t, w, ev, waitfor) < 0)
            return -1;
    }
}

/* ---- header exchange ----------------------------------------------------------------- */

int cddp_tcp_scratch(tcp_t *t, cddp_work *w, size_t bytes)
{
    if (bytes > t->scratch_cap) {
        char *p = realloc(t->scratch, bytes);
        if (!p) {
            cddp_pg_seterr(w->err, "out of memory (%zu bytes of scratch)", bytes);
            return -1;
        }
        t->scratch = p;
        t->scratch_cap = bytes;
    }
    return 0;
}

/* Exchange headers (plus `eager` payload bytes of `eager_buf`) with every peer. Peers'
 * payloads land in scratch[(j < r ? j : j - 1) * eager] when the headers agree; otherwise they
 * are read and dropped so the streams stay in step. -1 (w->err) on mismatch or failure. */
int cddp_tcp_exchange_headers(cddp_pg *pg, tcp_t *t, cddp_work *w, const char *eager_buf,
                            size_t eager)
{
    int n = t->n, r = t->r, nx = 0;
    int64_t mine[TCP_NHDR], hdr6[6];
    tcp_xfer *x = malloc(sizeof *x * (size_t)(4 * n));
    int rc = -1;
    if (!x) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    cddp_pg_make_header(w, hdr6);
    mine[0] = (int64_t)TCP_MAGIC;
    memcpy(mine + 1, hdr6, sizeof hdr6);
    mine[7] = (int64_t)eager;
    memcpy(t->hdrs[r], mine, sizeof mine);
    for (int j = 0; j < n; j++) {
        if (j == r)
            continue;
        x[nx++] = (tcp_xfer){j, 1, (char *)mine, sizeof mine, 0};
        if (eager)
            x[nx++] = (tcp_xfer){j, 1, (char *)eager_buf, eager, 0};
        x[nx++] = (tcp_xfer){j, 0, (char *)t->hdrs[j], sizeof mine, 0};
    }
    if (cddp_tcp_run_xfers(pg, t, w, x, nx) < 0)
        goto done;
    /* payloads: sized by each sender's own header */
    {
        int ok = 1;
        size_t drop = 0;
        for (int j = 0; j < n; j++) {
            if (t->hdrs[j][0] != (int64_t)TCP_MAGIC || t->hdrs[j][7] < 0 ||
                t->hdrs[j][7] > (int64_t)1 << 40) {
                cddp_pg_seterr(w->err, "%s #%lld: garbage header from rank %d (the connection "
                               "is out of step)", cddp_pg_op_name[w->a.op], (long long)w->seq, j);
                cddp_pg_mark_broken(pg, w->err);
                cddp_tcp_break(t, j);
                goto done;
            }
            if (t->hdrs[j][7] != (int64_t)eager)
                ok = 0;
            if ((size_t)t->hdrs[j][7] > drop)
                drop = (size_t)t->hdrs[j][7];
        }
        nx = 0;
        if (ok && eager) {
            if (cddp_tcp_scratch(t, w, (size_t)(n - 1) * eager) < 0)
                goto done;
            for (int j = 0; j < n; j++)
                if (j != r)
                    x[nx++] = (tcp_xfer){j, 0, t->scratch + (size_t)(j < r ? j : j - 1) * eager,
                                         eager, 0};
        } else if (!ok) {
            if (cddp_tcp_scratch(t, w, drop) < 0)
                goto done;
            for (int j = 0; j < n; j++)
                if (j != r && t->hdrs[j][7] > 0)
                    x[nx++] = (tcp_xfer){j, 0, t->scratch, (size_t)t->hdrs[j][7], 0};
            /* several peers may write the same scratch: contents are discarded anyway */
        }
        if (nx && cddp_tcp_run_xfers(pg, t, w, x, nx) < 0)
            goto done;
    }
    {
        int64_t(*h)[6] = malloc(sizeof *h * (size_t)n);
        if (!h) {
            cddp_pg_seterr(w->err, "out of memory");
            goto done;
        }
        for (int j = 0; j < n; j++)
            memcpy(h[j], t->hdrs[j] + 1, sizeof h[j]);
        rc = cddp_pg_check_headers((const int64_t(*)[6])h, n, w->err);
        free(h);
    }
done:
    free(x);
    return rc;
}

/* ---- collectives: the algorithms are ring.c's and direct.c's --------------------------- */

static int tcp_run(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    if (t->broke) {
        char pre[96];
        cddp_pg_op_prefix(w, pre, sizeof pre);
        cddp_pg_seterr(w->err, "%s: the group's connections were closed after an earlier "
                       "failure", pre);
        return -1;
    }
    switch (w->a.op) {
    case CDDP_PG_ALLREDUCE: case CDDP_PG_REDUCE: return cddp_tcp_allreduce(pg, t, w);
    case CDDP_PG_BROADCAST: return cddp_tcp_broadcast(pg, t, w);
    case CDDP_PG_ALLGATHER: return cddp_tcp_allgather(pg, t, w);
    case CDDP_PG_GATHER: case CDDP_PG_SCATTER: case CDDP_PG_ALLTOALL:
        return cddp_tcp_direct(pg, t, w);
    case CDDP_PG_REDUCE_SCATTER: return cddp_tcp_reduce_scatter(pg, t, w);
    case CDDP_PG_BARRIER: return cddp_tcp_exchange_headers(pg, t, w, NULL, 0);
    default:
        cddp_pg_seterr(w->err, "%s is not a collective", cddp_pg_op_name[w->a.op]);
        return -1;
    }
}

/* ---- send / recv ------------------------------------------------------------------------ */

static int tcp_p2p_start(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    tp2p *st = calloc(1, sizeof *st);
    int send_ = w->a.op == CDDP_PG_SEND;
    if (!st) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    st->ticket = send_ ? t->tx_next[w->a.root]++ : t->rx_next[w->a.root]++;
    if (send_) {             /* wire header: magic, tag, dtype, 0, count, bytes */
        uint32_t m = P2P_MAGIC;
        int32_t tag = w->a.tag, dt = w->a.dtype, z = 0;
        int64_t c = w->a.count, b = w->a.count * (int64_t)cddp_pg_dtype_size[w->a.dtype];
        memcpy(st->hdr, &m, 4);
        memcpy(st->hdr + 4, &tag, 4);
        memcpy(st->hdr + 8, &dt, 4);
        memcpy(st->hdr + 12, &z, 4);
        memcpy(st->hdr + 16, &c, 8);
        memcpy(st->hdr + 24, &b, 8);
    }
    w->p2p = st;
    return 0;
}

static void p2p_finish(tcp_t *t, cddp_work *w)
{
    if (w->a.op == CDDP_PG_SEND)
        t->tx_serve[w->a.root]++;
    else
        t->rx_serve[w->a.root]++;
    free(w->p2p);
    w->p2p = NULL;
}

static int p2p_fail(cddp_pg *pg, tcp_t *t, cddp_work *w, int e)
{
    int j = w->a.root;
    char pre[96], msg[CDDP_PG_ERRLEN - 128];
    cddp_pg_op_prefix(w, pre, sizeof pre);
    t->p2p_dead[j] = 1;
    if (confirm_dead(pg, j) || (!pg->local[j] && heartbeat_lost(e))) {
        describe_loss(pg, t, j, e, msg, sizeof msg);
        cddp_pg_seterr(w->err, "%s: %s while rank %d was waiting for it", pre, msg, t->r);
        cddp_pg_mark_broken(pg, msg);
        cddp_tcp_break(t, j);
    } else if (!pg->local[j]) {
        cddp_pg_seterr(w->err, "%s on host %s: connection closed (%s)", pre, cddp_tcp_peer(t, j),
                       e ? strerror(e) : "end of stream");
    } else {
        cddp_pg_seterr(w->err, "%s: connection closed (%s)", pre, e ? strerror(e) : "end of stream");
    }
    return -1;
}

static int tcp_p2p_progress(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    tp2p *st = w->p2p;
    int j = w->a.root, fd = t->pfd[j];
    int send_ = w->a.op == CDDP_PG_SEND;
    size_t total = (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype];
    ssize_t k;
    if (t->p2p_dead[j]) {
        char pre[96];
        cddp_pg_op_prefix(w, pre, sizeof pre);
        cddp_pg_seterr(w->err, "%s: the send/recv channel between ranks %d and %d failed earlier",
                       pre, t->r, j);
        return -1;
    }
    if (st->ticket != (send_ ? t->tx_serve[j] : t->rx_serve[j]))
        return 0;
    if (send_) {
        while (st->hdr_done < sizeof st->hdr || st->off < total) {
            if (st->hdr_done < sizeof st->hdr)
                k = send(fd, st->hdr + st->hdr_done, sizeof st->hdr - st->hdr_done,
                         MSG_NOSIGNAL | MSG_DONTWAIT | (total ? MSG_MORE : 0));
            else
                k = send(fd, (char *)w->a.in + st->off, total - st->off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    t->want[j] |= POLLOUT;
                    return 0;
                }
                return p2p_fail(pg, t, w, errno);
            }
            st->started = 1;
            if (st->hdr_done < sizeof st->hdr)
                st->hdr_done += (size_t)k;
            else
                st->off += (size_t)k;
        }
        p2p_finish(t, w);
        return 1;
    }
    while (st->hdr_done < sizeof st->hdr || st->off < total) {
        if (st->hdr_done < sizeof st->hdr)
            k = recv(fd, st->hdr + st->hdr_done, sizeof st->hdr - st->hdr_done, MSG_DONTWAIT);
        else
            k = recv(fd, (char *)w->a.out + st->off, total - st->off, MSG_DONTWAIT);
        if (k == 0)
            return p2p_fail(pg, t, w, 0);
        if (k < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                t->want[j] |= POLLIN;
                return 0;
            }
            return p2p_fail(pg, t, w, errno);
        }
        st->started = 1;
        if (st->hdr_done < sizeof st->hdr) {
            st->hdr_done += (size_t)k;
            if (st->hdr_done == sizeof st->hdr) {
                uint32_t m;
                int32_t tag, dt;
                int64_t c, b;
                memcpy(&m, st->hdr, 4);
                memcpy(&tag, st->hdr + 4, 4);
                memcpy(&dt, st->hdr + 8, 4);
                memcpy(&c, st->hdr + 16, 8);
                memcpy(&b, st->hdr + 24, 8);
                if (m != P2P_MAGIC || tag != w->a.tag || dt != w->a.dtype || b != (int64_t)total) {
                    int d = dt >= 0 && dt < CDDP_PG_NDTYPES ? dt : 0;
                    cddp_pg_seterr(w->err, "recv from rank %d: rank %d sent %lld %s elements with "
                                   "tag %d, rank %d expected %lld %s elements with tag %d", j, j,
                                   (long long)c, cddp_pg_dtype_name[d], tag, t->r,
                                   (long long)w->a.count, cddp_pg_dtype_name[w->a.dtype], w->a.tag);
                    t->p2p_dead[j] = 1;
                    shutdown(fd, SHUT_RDWR);
                    return -1;
                }
            }
        } else {
            st->off += (size_t)k;
        }
    }
    p2p_finish(t, w);
    return 1;
}

static void tcp_p2p_cancel(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    tp2p *st = w->p2p;
    if (!st)
        return;
    if (st->started && !t->p2p_dead[w->a.root]) {      /* half a message: out of step */
        t->p2p_dead[w->a.root] = 1;
        shutdown(t->pfd[w->a.root], SHUT_RDWR);
    }
    p2p_finish(t, w);
}

/* A recv from any sender: the first peer (from rank+1 on) whose connection holds a whole
 * message header with `w`'s tag (peeked, left in the socket) and has no recv of ours queued
 * on it. A connection that closed or failed fails `w`, naming that peer, as a recv from it
 * would. */
static int tcp_p2p_probe(cddp_pg *pg, cddp_work *w)
{
    tcp_t *t = pg->tr;
    for (int k = 1; k < t->n; k++) {
        int j = (t->r + k) % t->n;
        unsigned char hdr[P2P_HDR];
        int32_t tag;
        if (t->p2p_dead[j] || t->rx_next[j] != t->rx_serve[j])
            continue;
        ssize_t got = recv(t->pfd[j], hdr, sizeof hdr, MSG_PEEK | MSG_DONTWAIT);
        if (got == (ssize_t)sizeof hdr) {
            memcpy(&tag, hdr + 4, 4);
            if (tag == w->a.tag)
                return j;
        } else if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                                errno != EINTR)) {
            w->a.root = j;
            p2p_fail(pg, t, w, got == 0 ? 0 : errno);
            return -2;
        } else {
            t->want[j] |= POLLIN;
        }
    }
    return -1;
}

static void tcp_p2p_wait(cddp_pg *pg, double max_s)
{
    tcp_t *t = pg->tr;
    struct pollfd p[65];
    int np = 0;
    p[np++] = (struct pollfd){.fd = t->evfd, .events = POLLIN};
    for (int j = 0; j < t->n && np < 65; j++)
        if (t->want[j] && t->pfd[j] >= 0)
            p[np++] = (struct pollfd){.fd = t->pfd[j], .events = (short)(t->want[j] | POLLRDHUP)};
    memset(t->want, 0, sizeof *t->want * (size_t)t->n);
    if (poll(p, (nfds_t)np, (int)(max_s * 1000) + 1) > 0 && (p[0].revents & POLLIN)) {
        uint64_t v;
        if (read(t->evfd, &v, sizeof v) < 0) { /* nothing */ }
    }
}

static void tcp_doorbell(cddp_pg *pg)
{
    tcp_t *t = pg->tr;
    uint64_t one = 1;
    if (t && write(t->evfd, &one, sizeof one) < 0) { /* counter saturated: already signalled */ }
}

/* The mesh's setup and teardown are tcp_mesh.c's. */
const cddp_pg_transport_ops cddp_pg_tcp_ops = {
    .name = "tcp",
    .init = cddp_tcp_mesh_init,
    .run = tcp_run,
    .p2p_start = tcp_p2p_start,
    .p2p_progress = tcp_p2p_progress,
    .p2p_probe = tcp_p2p_probe,
    .p2p_cancel = tcp_p2p_cancel,
    .p2p_wait = tcp_p2p_wait,
    .doorbell = tcp_doorbell,
    .fini = cddp_tcp_mesh_fini,
};
