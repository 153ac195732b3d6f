/* distributed/store/client.c — the rendezvous store's client: one blocking TCP connection per
 * store object, every wait bounded by a deadline (pure C, no Python.h; callers drop the GIL).
 *
 * Mirrors: c10d's TCPStore client side (TCPClient: connect with retries while rank 0's server
 * comes up, then one request/reply at a time).
 *
 *   open:  until the deadline: resolve host, connect (nonblocking + poll), say HELLO;
 *          refused/unreachable -> back off (10 ms doubling to 1 s) and retry
 *   call:  take a free connection (or open another, up to MAX_CONNS, so a thread blocked in
 *          get() never holds up another thread's set() on the same store) -> send frame ->
 *          read the reply frame -> give the connection back
 *
 * A reply that does not come by the deadline, or a wait cut short by a signal, leaves the
 * connection out of step (a reply may still be on its way): the socket is dropped and the
 * next call connects afresh. A server that closes the connection marks the client broken:
 * later calls fail at once instead of waiting out a timeout per call.
 */
#include "distributed/store/proto.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_ATTEMPT_MS 10000     /* one SYN that is never answered is retried after this */
#define MAX_CONNS 16                 /* concurrent requests per client (threads sharing it) */

struct cddp_store_client {
    pthread_mutex_t mu;              /* guards the slots and `broken` */
    pthread_cond_t freed;            /* a slot was released (monotonic clock) */
    int fds[MAX_CONNS];              /* -1: not connected (or out of step): connect first */
    char busy[MAX_CONNS];
    int nconns;
    int broken;                      /* the server closed the connection */
    int port;
    char host[256];
    size_t token_len;
    uint8_t token[CDDP_STORE_MAX_TOKEN];
};

static int (*interrupt_hook)(void);

void cddp_store_set_interrupt_hook(int (*hook)(void))
{
    interrupt_hook = hook;
}

static int64_t deadline_in(int64_t ms)
{
    int64_t now = cddp_store_now_ms();
    return ms > INT64_MAX / 4 ? INT64_MAX / 2 : now + (ms < 0 ? 0 : ms);
}

static int remaining_ms(int64_t deadline)
{
    int64_t r = deadline - cddp_store_now_ms();
    return r <= 0 ? 0 : r > 60000 ? 60000 : (int)r;
}

/* Waits for `ev` on fd until the deadline: 1 ready, 0 timed out, CDDP_STORE_EINTR. */
static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        struct pollfd p = {fd, ev, 0};
        int ms = remaining_ms(deadline), rc = poll(&p, 1, ms);
        if (rc > 0)
            return 1;
        if (rc < 0 && errno == EINTR) {
            if (interrupt_hook && interrupt_hook())
                return CDDP_STORE_EINTR;
            continue;
        }
        if (rc < 0)
            return 1;                        /* let the following send/recv report it */
        if (cddp_store_now_ms() >= deadline)
            return 0;
    }
}

/* Sleeps until min(now + ms, deadline); CDDP_STORE_EINTR if the hook says stop. */
static int nap(int ms, int64_t deadline)
{
    int64_t until = cddp_store_now_ms() + ms;
    if (until > deadline)
        until = deadline;
    while (cddp_store_now_ms() < until)
        if (poll(NULL, 0, remaining_ms(until)) < 0 && errno == EINTR && interrupt_hook &&
            interrupt_hook())
            return CDDP_STORE_EINTR;
    return 0;
}

/* Sends iov[0..n) fully: OK, ETIMEOUT, ECLOSED, EINTR. */
static int send_all(int fd, struct iovec *iov, int n, int64_t deadline)
{
    while (n > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0) {
            int w;
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return CDDP_STORE_ECLOSED;
            if ((w = wait_fd(fd, POLLOUT, deadline)) <= 0)
                return w == 0 ? CDDP_STORE_ETIMEOUT : w;
            continue;
        }
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return CDDP_STORE_OK;
}

/* Receives exactly n bytes: OK, ETIMEOUT, ECLOSED (EOF or reset), EINTR. */
static int recv_all(int fd, uint8_t *buf, size_t n, int64_t deadline)
{
    while (n > 0) {
        ssize_t k = recv(fd, buf, n, MSG_DONTWAIT);
        if (k > 0) {
            buf += k;
            n -= (size_t)k;
        } else if (k == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
            return CDDP_STORE_ECLOSED;
        } else if (errno != EINTR) {
            int w = wait_fd(fd, POLLIN, deadline);
            if (w <= 0)
                return w == 0 ? CDDP_STORE_ETIMEOUT : w;
        }
    }
    return CDDP_STORE_OK;
}

/* Reads one reply frame into a malloc'd buffer (status byte first). */
static int recv_frame(int fd, int64_t deadline, uint8_t **out, size_t *out_len, char *err,
                      size_t errlen)
{
    uint8_t hdr[4], *buf;
    uint32_t n;
    int rc = recv_all(fd, hdr, 4, deadline);
    if (rc)
        return rc;
    n = cddp_ld_u32(hdr);
    if (n == 0 || n > CDDP_STORE_MAX_FRAME) {
        snprintf(err, errlen, "malformed reply (frame length %u)", n);
        return CDDP_STORE_EPROTO;
    }
    if (!(buf = malloc(n))) {
        snprintf(err, errlen, "out of memory for a %u-byte reply", n);
        return CDDP_STORE_ESYS;
    }
    if ((rc = recv_all(fd, buf, n, deadline))) {
        free(buf);
        return rc;
    }
    *out = buf;
    *out_len = n;
    return CDDP_STORE_OK;
}

/* A connect to a free local port in the ephemeral range can "succeed" onto itself (TCP
 * simultaneous open) while we retry for a server that is not up yet. */
static int connected_to_self(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(fd, (struct sockaddr *)&a, &la) < 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) < 0)
        return 0;
    return la == lb && memcmp(&a, &b, la) == 0;
}

/* HELLO with our token on a connected socket: OK, EREFUSED, EPROTO, ECLOSED, ETIMEOUT... */
static int handshake(cddp_store_client *c, int fd, int64_t deadline, char *err, size_t errlen)
{
    uint8_t hdr[13], *reply = NULL;
    size_t rlen;
    struct iovec iov[2] = {{hdr, sizeof hdr}, {c->token, c->token_len}};
    int rc;
    cddp_wr_u32(hdr, (uint32_t)(9 + c->token_len));
    hdr[4] = CDDP_STORE_OP_HELLO;
    cddp_wr_u32(hdr + 5, CDDP_STORE_MAGIC);
    cddp_wr_u32(hdr + 9, CDDP_STORE_VERSION);
    if ((rc = send_all(fd, iov, c->token_len ? 2 : 1, deadline)) ||
        (rc = recv_frame(fd, deadline, &reply, &rlen, err, errlen)))
        return rc;
    switch (reply[0]) {
    case CDDP_STORE_ST_OK:
        rc = rlen == 1 ? CDDP_STORE_OK : CDDP_STORE_EPROTO;
        break;
    case CDDP_STORE_ST_REFUSED:
        rc = CDDP_STORE_EREFUSED;
        break;
    default:
        snprintf(err, errlen, "handshake failed: %.*s", (int)(rlen - 1), (const char *)reply + 1);
        rc = CDDP_STORE_EPROTO;
    }
    if (rc == CDDP_STORE_EPROTO && reply[0] == CDDP_STORE_ST_OK)
        snprintf(err, errlen, "malformed handshake reply");
    free(reply);
    return rc;
}

/* One nonblocking connect to ai, bounded by the deadline (and CONNECT_ATTEMPT_MS).
 * The fd, or -1 with *why (errno) set and *intr = 1 if the interrupt hook said stop. */
static int connect_once(const struct addrinfo *ai, int64_t deadline, int *why, int *intr)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    int64_t attempt = cddp_store_now_ms() + CONNECT_ATTEMPT_MS;
    int one = 1, soerr = 0, w;
    socklen_t sl = sizeof soerr;
    if (fd < 0) {
        *why = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            *why = errno;
            close(fd);
            return -1;
        }
        w = wait_fd(fd, POLLOUT, attempt < deadline ? attempt : deadline);
        if (w <= 0) {
            *why = ETIMEDOUT;
            *intr = w == CDDP_STORE_EINTR;
            close(fd);
            return -1;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
            *why = soerr ? soerr : errno;
            close(fd);
            return -1;
        }
    }
    if (connected_to_self(fd)) {
        *why = ECONNREFUSED;
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* A new connection that passed HELLO, in *out_fd, retrying until the deadline. */
static int client_connect(cddp_store_client *c, int64_t deadline, int *out_fd, char *err,
                          size_t errlen)
{
    char port[16], last[400] = "no attempt finished";
    int backoff = 10;
    snprintf(port, sizeof port, "%d", c->port);
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV}, *res = NULL;
        int g = getaddrinfo(c->host, port, &hints, &res), rc;
        if (g != 0)
            snprintf(last, sizeof last, "cannot resolve %.255s: %.100s", c->host, gai_strerror(g));
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int why = 0, intr = 0, fd = connect_once(ai, deadline, &why, &intr);
            if (intr) {
                freeaddrinfo(res);
                return CDDP_STORE_EINTR;
            }
            if (fd < 0) {
                snprintf(last, sizeof last, "%s", strerror(why));
                continue;
            }
            rc = handshake(c, fd, deadline, err, errlen);
            if (rc == CDDP_STORE_OK) {
                freeaddrinfo(res);
                *out_fd = fd;
                return CDDP_STORE_OK;
            }
            close(fd);
            if (rc != CDDP_STORE_ECLOSED && rc != CDDP_STORE_ETIMEOUT) {
                freeaddrinfo(res);
                return rc;                   /* refused, not our protocol, interrupted */
            }
            snprintf(last, sizeof last, rc == CDDP_STORE_ETIMEOUT
                     ? "no answer to the handshake before the deadline"
                     : "the server closed the connection during the handshake");
        }
        if (res)
            freeaddrinfo(res);
        if (cddp_store_now_ms() >= deadline) {
            snprintf(err, errlen, "last error: %s", last);
            return CDDP_STORE_ETIMEOUT;
        }
        if (nap(backoff, deadline))
            return CDDP_STORE_EINTR;
        backoff = backoff >= 500 ? 1000 : backoff * 2;
    }
}

int cddp_store_client_open(const char *host, int port, const uint8_t *token, size_t token_len,
                           int64_t timeout_ms, cddp_store_client **out, char *err, size_t errlen)
{
    cddp_store_client *c;
    pthread_condattr_t ca;
    int rc, fd = -1;
    if (strlen(host) >= sizeof c->host || token_len > CDDP_STORE_MAX_TOKEN) {
        snprintf(err, errlen, "host name or CDDP_TOKEN too long");
        return CDDP_STORE_EPROTO;
    }
    if (!(c = calloc(1, sizeof *c))) {
        snprintf(err, errlen, "out of memory");
        return CDDP_STORE_ESYS;
    }
    c->port = port;
    strcpy(c->host, host);
    c->token_len = token_len;
    if (token_len)
        memcpy(c->token, token, token_len);
    if ((rc = client_connect(c, deadline_in(timeout_ms), &fd, err, errlen))) {
        free(c);
        return rc;
    }
    c->fds[0] = fd;
    c->nconns = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->freed, &ca);
    pthread_condattr_destroy(&ca);
    *out = c;
    return CDDP_STORE_OK;
}

/* A slot index for one request (marked busy), waiting for one to free up until the
 * deadline when all MAX_CONNS are busy; -1 on timeout. */
static int take_slot(cddp_store_client *c, int64_t deadline)
{
    int slot = -1;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        struct timespec ts;
        for (int i = 0; i < c->nconns && slot < 0; i++)
            if (!c->busy[i])
                slot = i;
        if (slot < 0 && c->nconns < MAX_CONNS) {
            slot = c->nconns++;
            c->fds[slot] = -1;
        }
        if (slot >= 0 || cddp_store_now_ms() >= deadline)
            break;
        ts.tv_sec = deadline / 1000;
        ts.tv_nsec = (deadline % 1000) * 1000000;
        pthread_cond_timedwait(&c->freed, &c->mu, &ts);
    }
    if (slot >= 0)
        c->busy[slot] = 1;
    pthread_mutex_unlock(&c->mu);
    return slot;
}

static void give_slot(cddp_store_client *c, int slot, int fd, int broken)
{
    pthread_mutex_lock(&c->mu);
    c->fds[slot] = fd;
    c->busy[slot] = 0;
    c->broken |= broken;
    pthread_cond_signal(&c->freed);
    pthread_mutex_unlock(&c->mu);
}

int cddp_store_client_call(cddp_store_client *c, uint8_t op, const uint8_t *head, size_t head_len,
                           const uint8_t *tail, size_t tail_len, int64_t timeout_ms,
                           uint8_t **reply, size_t *reply_len, char *err, size_t errlen)
{
    int64_t deadline = deadline_in(timeout_ms);
    uint8_t hdr[5];
    struct iovec iov[3];
    int rc, slot, fd, broken;
    if (1 + head_len + tail_len > CDDP_STORE_MAX_FRAME) {
        snprintf(err, errlen, "request of %zu bytes is over the frame limit", head_len + tail_len);
        return CDDP_STORE_EPROTO;
    }
    if ((slot = take_slot(c, deadline)) < 0) {
        snprintf(err, errlen, "%d other requests on this store did not finish", MAX_CONNS);
        return CDDP_STORE_ETIMEOUT;
    }
    pthread_mutex_lock(&c->mu);
    fd = c->fds[slot];
    broken = c->broken;
    pthread_mutex_unlock(&c->mu);
    if (broken) {
        give_slot(c, slot, fd, 0);
        return CDDP_STORE_ECLOSED;
    }
    if (fd < 0 && (rc = client_connect(c, deadline, &fd, err, errlen))) {
        give_slot(c, slot, -1, 0);
        return rc;
    }
    cddp_wr_u32(hdr, (uint32_t)(1 + head_len + tail_len));
    hdr[4] = op;
    iov[0] = (struct iovec){hdr, 5};
    iov[1] = (struct iovec){(void *)head, head_len};
    iov[2] = (struct iovec){(void *)tail, tail_len};
    rc = send_all(fd, iov, 3, deadline);
    if (rc == CDDP_STORE_OK)
        rc = recv_frame(fd, deadline, reply, reply_len, err, errlen);
    broken = rc == CDDP_STORE_ECLOSED || rc == CDDP_STORE_EPROTO;
    if (rc != CDDP_STORE_OK) {               /* gone, or out of step: a reply may still come */
        close(fd);
        fd = -1;
    }
    give_slot(c, slot, fd, broken);
    return rc;
}

void cddp_store_client_close(cddp_store_client *c)
{
    if (!c)
        return;
    /* close, never shutdown: a forked child may hold a copy of this object */
    for (int i = 0; i < c->nconns; i++)
        if (c->fds[i] >= 0)
            close(c->fds[i]);
    pthread_cond_destroy(&c->freed);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
