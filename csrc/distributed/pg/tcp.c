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
 * when its pidfd says so); the rank that notices sends every peer one out-of-band byte naming
 * the failed rank, then shuts its sockets for writing, so ranks blocked on OTHER peers learn
 * it within a poll round instead of at their timeout.
 *
 * Called by the engine through cddp_pg_tcp_ops (distributed/pg/engine.c) and by hier.c, which
 * layers a host level on this mesh; rendezvous (distributed/pg/rendezvous.c) opens the listener
 * and finds the address peers connect to.
 */
#include "distributed/pg/tcp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define TCP_MAGIC 0x63646470746370ULL   /* "cddptcp" */
#define HELLO_MAGIC 0x6364647068656cULL
#define P2P_MAGIC 0x70327063u

typedef struct {
    uint64_t ticket;
    size_t hdr_done, off;
    int started;
    unsigned char hdr[32];
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

/* Connection to rank j failed (EOF, reset, error `e`). Sets w->err; -1. */
static int fail_peer(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, int e)
{
    char pre[96], msg[CDDP_PG_ERRLEN];
    cddp_pg_op_prefix(w, pre, sizeof pre);
    if (confirm_dead(pg, j))
        snprintf(msg, sizeof msg, "rank %d (pid %d) exited", j, pg->pids[j]);
    else
        snprintf(msg, sizeof msg, "rank %d closed its connection (%s)", j,
                 e ? strerror(e) : "end of stream");
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
    else if (d >= 0 && d < pg->size && confirm_dead(pg, d))
        snprintf(msg, sizeof msg, "rank %d (pid %d) exited (reported by rank %d)", d,
                 pg->pids[d], j);
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
        for (int i = 1; i < np && notice < 0; i++)
            if (p[i].revents & POLLPRI)
                notice = peer[i];
        if (p[0].revents & POLLIN) {
            uint64_t v;
            if (read(t->evfd, &v, sizeof v) < 0) { /* drained already: fine */ }
        }
    }
    if (p != stack_p) free(p);
    if (peer != stack_peer) free(peer);
    if (notice >= 0)
        return fail_notice(pg, t, w, notice);
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
    char pre[96];
    cddp_pg_op_prefix(w, pre, sizeof pre);
    t->p2p_dead[j] = 1;
    if (confirm_dead(pg, j)) {
        char msg[128];
        snprintf(msg, sizeof msg, "rank %d (pid %d) exited", j, pg->pids[j]);
        cddp_pg_seterr(w->err, "%s: %s while rank %d was waiting for it", pre, msg, t->r);
        cddp_pg_mark_broken(pg, msg);
        cddp_tcp_break(t, j);
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

/* ---- setup --------------------------------------------------------------------------- */

int cddp_pg_tcp_listen(int *port, char *err)
{
    struct sockaddr_in sa = {0};
    socklen_t sl = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        cddp_pg_seterr(err, "socket() failed: %s", strerror(errno));
        return -1;
    }
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 256) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
        cddp_pg_seterr(err, "could not listen on a TCP port: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return fd;
}

void cddp_pg_local_addr(char *buf, size_t len)
{
    const char *e = getenv("CDDP_SOCKET_ADDR"), *m = getenv("MASTER_ADDR");
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    char host[256];
    snprintf(buf, len, "127.0.0.1");
    if (e && *e) {
        snprintf(buf, len, "%s", e);
        return;
    }
    if (m && *m && getaddrinfo(m, "9", &hints, &res) == 0 && res) {
        /* the local address of the route towards the master: a UDP connect sends nothing */
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        socklen_t sl = sizeof sa;
        if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
            inet_ntop(AF_INET, &sa.sin_addr, buf, (socklen_t)len);
            close(fd);
            freeaddrinfo(res);
            return;
        }
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        res = NULL;
    }
    if (gethostname(host, sizeof host) == 0 && getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, buf, (socklen_t)len);
        freeaddrinfo(res);
    }
}

static void tune(int fd)
{
    int one = 1, buf = (int)cddp_pg_env_size("CDDP_TCP_BUF", 0, 0, 256 << 20);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (buf > 0) {             /* 0: the kernel's autotuning (usually best on loopback) */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* write/read all with a deadline (setup only) */
static int xfer_deadline(int fd, void *buf, size_t len, int sending, double deadline)
{
    size_t done = 0;
    while (done < len) {
        ssize_t k = sending ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return -1;
        struct pollfd p = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
        double left = deadline - cddp_pg_now();
        if (left <= 0 || poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1) < 0)
            return -1;
    }
    return 0;
}

static int connect_to(cddp_pg *pg, const char *addr, int port, double deadline, char *err, int j)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        cddp_pg_seterr(err, "rank %d published a bad address '%s'", j, addr);
        return -1;
    }
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            cddp_pg_seterr(err, "socket() failed: %s", strerror(errno));
            return -1;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int e = 0;
            socklen_t el = sizeof e;
            double left = deadline - cddp_pg_now();
            if (poll(&p, 1, left > 1 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 0) > 0 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
                return fd;
        }
        close(fd);
        if (cddp_pg_peer_dead(pg, j)) {
            cddp_pg_seterr(err, "rank %d (pid %d) exited during rendezvous", j, pg->pids[j]);
            return -1;
        }
        if (cddp_pg_now() > deadline) {
            cddp_pg_seterr(err, "could not connect to rank %d at %s:%d within %.1f s", j, addr,
                           port, pg->timeout_s);
            return -1;
        }
        usleep(10000);
    }
}

static void tcp_fini(cddp_pg *pg)
{
    tcp_t *t = pg->tr;
    if (!t)
        return;
    for (int j = 0; j < t->n; j++) {
        if (t->fd && t->fd[j] >= 0) close(t->fd[j]);
        if (t->pfd && t->pfd[j] >= 0) close(t->pfd[j]);
    }
    if (t->evfd >= 0)
        close(t->evfd);
    free(t->fd);
    free(t->scratch);
    free(t->stage);
    free(t->hdrs);
    free(t->tx_next);
    free(t);
    pg->tr = NULL;
}

/* Connect to every lower rank (two connections: collectives, send/recv) and accept from every
 * higher one; hello = magic, nonce, rank, channel. Strangers and garbage are dropped. */
static int tcp_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    int n = info->size, r = info->rank, lfd = info->listen_fd, need;
    double deadline = cddp_pg_now() + pg->timeout_s;
    tcp_t *t = calloc(1, sizeof *t);
    if (!t) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;          /* pg->tr is still NULL: tcp_fini does nothing */
    }
    pg->tr = t;
    t->n = n;
    t->r = r;
    t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->fd = malloc(sizeof(int) * (size_t)n * 2 + (size_t)n * (1 + sizeof(short)));
    t->hdrs = malloc(sizeof *t->hdrs * (size_t)n);
    t->tx_next = calloc((size_t)n * 4, sizeof(uint64_t));
    t->chunk = cddp_pg_env_size("CDDP_TCP_CHUNK", 256 << 10, 64, 64 << 20) & ~(size_t)7;
    t->small_max = cddp_pg_env_size("CDDP_TCP_SMALL", 16 << 10, 0, 1 << 26);
    t->stage = malloc(t->chunk + 8);
    if (t->evfd < 0 || !t->fd || !t->hdrs || !t->tx_next || !t->stage) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;
    }
    t->pfd = t->fd + n;
    t->want = (short *)(t->pfd + n);
    t->p2p_dead = (unsigned char *)(t->want + n);
    memset(t->p2p_dead, 0, (size_t)n);
    t->tx_serve = t->tx_next + n;
    t->rx_next = t->tx_next + 2 * n;
    t->rx_serve = t->tx_next + 3 * n;
    for (int j = 0; j < n; j++)
        t->fd[j] = t->pfd[j] = -1;
    for (int j = 0; j < r; j++)
        for (int ch = 0; ch < 2; ch++) {
            uint64_t hello[4] = {HELLO_MAGIC, info->nonce, (uint64_t)r, (uint64_t)ch};
            int fd = connect_to(pg, info->addrs[j], info->ports[j], deadline, err, j);
            if (fd < 0)
                goto fail;
            tune(fd);
            (ch ? t->pfd : t->fd)[j] = fd;
            if (xfer_deadline(fd, hello, sizeof hello, 1, deadline) < 0) {
                cddp_pg_seterr(err, "could not greet rank %d: %s", j, strerror(errno));
                goto fail;
            }
        }
    need = 2 * (n - 1 - r);
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    while (need > 0) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        double left = deadline - cddp_pg_now();
        uint64_t hello[4];
        int fd;
        if (left <= 0) {
            cddp_pg_seterr(err, "timed out after %.1f s waiting for %d connection(s) from "
                           "higher ranks", pg->timeout_s, need);
            goto fail;
        }
        if (poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1) <= 0) {
            for (int j = r + 1; j < n; j++)
                if ((t->fd[j] < 0 || t->pfd[j] < 0) && cddp_pg_peer_dead(pg, j)) {
                    cddp_pg_seterr(err, "rank %d (pid %d) exited during rendezvous", j, pg->pids[j]);
                    goto fail;
                }
            continue;
        }
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (xfer_deadline(fd, hello, sizeof hello, 0, cddp_pg_now() + 5.0) < 0 ||
            hello[0] != HELLO_MAGIC || hello[1] != info->nonce || hello[2] <= (uint64_t)r ||
            hello[2] >= (uint64_t)n || hello[3] > 1 ||
            (hello[3] ? t->pfd : t->fd)[hello[2]] >= 0) {
            close(fd);                  /* a stranger, or garbage: not one of ours */
            continue;
        }
        tune(fd);
        (hello[3] ? t->pfd : t->fd)[hello[2]] = fd;
        need--;
    }
    close(lfd);
    lfd = -1;
    return 0;
fail:
    tcp_fini(pg);
    if (lfd >= 0)
        close(lfd);
    return -1;
}

const cddp_pg_transport_ops cddp_pg_tcp_ops = {
    .init = tcp_init,
    .run = tcp_run,
    .p2p_start = tcp_p2p_start,
    .p2p_progress = tcp_p2p_progress,
    .p2p_cancel = tcp_p2p_cancel,
    .p2p_wait = tcp_p2p_wait,
    .doorbell = tcp_doorbell,
    .fini = tcp_fini,
};
