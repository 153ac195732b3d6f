/* distributed/pg/tcp_mesh.c — the TCP transport's mesh: the listener, the address peers reach
 * this rank at, connecting to every lower rank and accepting every higher one (two connections
 * per pair: collectives, send/recv), socket tuning with the heartbeat, and teardown.
 *
 * Mirrors: gloo's transport/tcp pair setup (connectFullMesh) and its socket options; the
 * heartbeat is what gloo lacks: torch waits for its whole timeout when a peer goes silent.
 *
 * Heartbeat (CDDP_HEARTBEAT_S, default 10 s; 0 turns it off): every mesh socket gets kernel TCP
 * keepalive probes once it has been quiet for half that time, one a second after that, and a
 * TCP_USER_TIMEOUT of the whole of it. A peer whose host stopped answering (link cut, host
 * frozen or powered off: no FIN, no RST) thus turns into a socket error (ETIMEDOUT) within
 * about CDDP_HEARTBEAT_S seconds, whether the connection was idle or had data in flight, and
 * the transport's poll loop (tcp.c) fails the op naming the rank and its host. A live process
 * that is merely stuck (SIGSTOP, a long computation) still answers probes from its kernel: that
 * is the collective timeout's business, not this.
 *
 * Called by tcp.c's ops table (init / fini) and by rendezvous (listen, local address).
 */
#include "distributed/pg/tcp_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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

#define HELLO_MAGIC 0x6364647068656cULL
#define PEER_NAME 96            /* bytes per entry of tcp_t.names */

/* ---- the listener and this rank's address ---------------------------------------------- */

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

/* ---- socket tuning and the heartbeat --------------------------------------------------- */

double cddp_tcp_heartbeat_s(void)
{
    const char *s = getenv("CDDP_HEARTBEAT_S");
    char *end;
    double v;
    if (!s || !*s)
        return 10.0;
    v = strtod(s, &end);
    if (end == s || !isfinite(v) || v < 0)
        return 10.0;
    return v > 0 && v < 1 ? 1.0 : v > 86400 ? 86400 : v;   /* the kernel counts whole seconds */
}

/* No delay, the buffer size knob, non-blocking, and the heartbeat of hb seconds (0: none):
 * keepalive probes after hb / 2 s of silence, then every second; TCP_USER_TIMEOUT hb makes
 * the kernel drop the connection once nothing came back (probe answers, acks) for hb seconds. */
static void tune(int fd, double hb)
{
    int one = 1, buf = (int)cddp_pg_env_size("CDDP_TCP_BUF", 0, 0, 256 << 20);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (buf > 0) {             /* 0: the kernel's autotuning (usually best on loopback) */
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    }
    if (hb > 0) {
        int idle = hb >= 2 ? (int)(hb / 2) : 1, intvl = 1, cnt = (int)hb + 1;
        unsigned user_ms = (unsigned)(hb * 1000);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof user_ms);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

const char *cddp_tcp_peer(const tcp_t *t, int j)
{
    return t->names && j >= 0 && j < t->n ? t->names + (size_t)j * PEER_NAME : "?";
}

/* ---- connecting ---------------------------------------------------------------------- */

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

void cddp_tcp_mesh_fini(cddp_pg *pg)
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
    free(t->names);
    free(t);
    pg->tr = NULL;
}

/* The transport's state with every array, no connection yet. -1 (err) when out of memory. */
static int mesh_alloc(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    int n = info->size;
    tcp_t *t = calloc(1, sizeof *t);
    if (!t) {
        cddp_pg_seterr(err, "out of memory");
        return -1;
    }
    pg->tr = t;
    t->n = n;
    t->r = info->rank;
    t->hb_s = cddp_tcp_heartbeat_s();
    t->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->fd = malloc(sizeof(int) * (size_t)n * 2 + (size_t)n * (1 + sizeof(short)));
    t->hdrs = malloc(sizeof *t->hdrs * (size_t)n);
    t->tx_next = calloc((size_t)n * 4, sizeof(uint64_t));
    t->names = calloc((size_t)n, PEER_NAME);
    t->chunk = cddp_pg_env_size("CDDP_TCP_CHUNK", 256 << 10, 64, 64 << 20) & ~(size_t)7;
    t->small_max = cddp_pg_env_size("CDDP_TCP_SMALL", 16 << 10, 0, 1 << 26);
    t->stage = malloc(t->chunk + 8);
    if (t->evfd < 0 || !t->fd || !t->hdrs || !t->tx_next || !t->names || !t->stage) {
        cddp_pg_seterr(err, "out of memory");
        return -1;
    }
    t->pfd = t->fd + n;
    t->want = (short *)(t->pfd + n);
    t->p2p_dead = (unsigned char *)(t->want + n);
    memset(t->p2p_dead, 0, (size_t)n);
    t->tx_serve = t->tx_next + n;
    t->rx_next = t->tx_next + 2 * n;
    t->rx_serve = t->tx_next + 3 * n;
    for (int j = 0; j < n; j++) {
        t->fd[j] = t->pfd[j] = -1;
        snprintf(t->names + (size_t)j * PEER_NAME, PEER_NAME, "%.50s (%.40s)",
                 info->hostnames && info->hostnames[j] ? info->hostnames[j] : "?",
                 info->addrs && info->addrs[j] ? info->addrs[j] : "?");
    }
    return 0;
}

/* Two connections to every lower rank, each greeted with magic, nonce, our rank, channel. */
static int connect_lower(cddp_pg *pg, tcp_t *t, const cddp_pg_info *info, double deadline,
                         char *err)
{
    for (int j = 0; j < t->r; j++)
        for (int ch = 0; ch < 2; ch++) {
            uint64_t hello[4] = {HELLO_MAGIC, info->nonce, (uint64_t)t->r, (uint64_t)ch};
            int fd = connect_to(pg, info->addrs[j], info->ports[j], deadline, err, j);
            if (fd < 0)
                return -1;
            tune(fd, t->hb_s);
            (ch ? t->pfd : t->fd)[j] = fd;
            if (xfer_deadline(fd, hello, sizeof hello, 1, deadline) < 0) {
                cddp_pg_seterr(err, "could not greet rank %d on %s: %s", j, cddp_tcp_peer(t, j),
                               strerror(errno));
                return -1;
            }
        }
    return 0;
}

/* Accept the two connections of every higher rank; strangers and garbage are dropped. */
static int accept_higher(cddp_pg *pg, tcp_t *t, const cddp_pg_info *info, int lfd,
                         double deadline, char *err)
{
    int n = t->n, r = t->r, need = 2 * (n - 1 - r);
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    while (need > 0) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        double left = deadline - cddp_pg_now();
        uint64_t hello[4];
        int fd;
        if (left <= 0) {
            cddp_pg_seterr(err, "timed out after %.1f s waiting for %d connection(s) from "
                           "higher ranks", pg->timeout_s, need);
            return -1;
        }
        if (poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1) <= 0) {
            for (int j = r + 1; j < n; j++)
                if ((t->fd[j] < 0 || t->pfd[j] < 0) && cddp_pg_peer_dead(pg, j)) {
                    cddp_pg_seterr(err, "rank %d (pid %d) exited during rendezvous", j, pg->pids[j]);
                    return -1;
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
        tune(fd, t->hb_s);
        (hello[3] ? t->pfd : t->fd)[hello[2]] = fd;
        need--;
    }
    return 0;
}

int cddp_tcp_mesh_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    double deadline = cddp_pg_now() + pg->timeout_s;
    int lfd = info->listen_fd, rc = -1;
    if (mesh_alloc(pg, info, err) == 0 && connect_lower(pg, pg->tr, info, deadline, err) == 0 &&
        accept_higher(pg, pg->tr, info, lfd, deadline, err) == 0)
        rc = 0;
    if (lfd >= 0)
        close(lfd);                     /* the transport owns the listener from here on */
    if (rc < 0)
        cddp_tcp_mesh_fini(pg);
    return rc;
}
