/* distributed/store/server.c — the rendezvous store's TCP server: one background pthread, a
 * poll() loop over nonblocking sockets (pure C, no Python.h); the map and the request handlers
 * are in distributed/store/ops.c, which this file calls (never the other way round:
 * distributed/store/server.h).
 *
 * Mirrors: c10d's TCPStore server (TCPStoreBackend.cpp / the libuv backend), which rank 0's
 * process hosts on MASTER_ADDR:MASTER_PORT.
 *
 *   server thread:
 *       loop: poll(listen fd, wake eventfd, every client)  -- timeout = nearest deadline
 *             accept; read into the client's buffer; run each complete frame;
 *             a GET/WAIT whose keys are missing stays parked (its frame kept unconsumed)
 *             and is rerun after every change to the map, or answered TIMEOUT at its deadline
 *
 * Unauthenticated peers are bounded twice: each by HELLO_DEADLINE_MS, and all together by
 * s->max_unauthed (a quarter of RLIMIT_NOFILE): accepting one more closes the oldest one still
 * without HELLO, so bare connections can neither exhaust the process's descriptors (its own
 * open() calls) nor keep a legitimate client waiting in the backlog. A new connection's HELLO
 * is read at once when it is already there, so a real client is never the one counted.
 *
 * Per client at most one request is in flight: a client's next frame is not read while a
 * reply is unsent or a request is parked, so buffers stay bounded by one frame each, and a
 * peer that never reads cannot make the server queue replies. Buffers grow as bytes arrive,
 * never to a length a peer merely announces.
 *
 * fork(): the process may fork while the thread runs (multiprocessing's default start
 * method). A pthread_atfork handler takes each server's lock in the parent around fork(),
 * so the child gets a consistent copy, then closes the copy's sockets in the child: a child
 * must not keep the port or a client connection open after the parent lets go of it.
 */
#include "distributed/store/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_CLIENTS 16384
#define HELLO_DEADLINE_MS 10000              /* a silent unauthenticated peer is dropped */
#define ACCEPT_PAUSE_MS 100                  /* after EMFILE: the listen fd stays readable */

/* ---- fork safety ---------------------------------------------------------------------- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static cddp_store_server *reg_head;
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&reg_mu);
    for (cddp_store_server *s = reg_head; s; s = s->reg_next)
        pthread_mutex_lock(&s->mu);
}

static void fork_parent(void)
{
    for (cddp_store_server *s = reg_head; s; s = s->reg_next)
        pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&reg_mu);
}

/* The child has no server thread; its copies of the sockets would keep the port bound and
 * clients' connections half-open after the parent closes them. */
static void fork_child(void)
{
    for (cddp_store_server *s = reg_head; s; s = s->reg_next) {
        s->forked = 1;
        close(s->lfd);
        close(s->efd);
        for (size_t i = 0; i < s->nconns; i++)
            close(s->conns[i]->fd);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&reg_mu);
}

static void reg_init(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- per-client buffers --------------------------------------------------------------- */

static void conn_free(store_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

/* Sends what it can without blocking; a dead peer marks the client dead. */
static void conn_flush(store_conn *c)
{
    while (!c->dead && c->out_off < c->out_len) {
        ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0)
            c->out_off += (size_t)k;
        else if (k < 0 && errno == EINTR)
            continue;
        else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        else
            c->dead = 1;
    }
    if (c->out_off == c->out_len) {
        c->out_off = c->out_len = 0;
        if (c->out_cap > BUF_KEEP) {
            free(c->out);
            c->out = NULL;
            c->out_cap = 0;
        }
        if (c->closing)
            c->dead = 1;
    }
}

/* Length of the frame at the head of the input (after its 4-byte length field), 0 when the
 * length is not complete yet, -1 when it breaks the caps. */
static int64_t frame_len(const store_conn *c)
{
    uint32_t n;
    if (c->in_len - c->in_off < 4)
        return 0;
    n = cddp_ld_u32(c->in + c->in_off);
    if (n == 0 || n > CDDP_STORE_MAX_FRAME || (!c->authed && n > CDDP_STORE_MAX_HELLO))
        return -1;
    return n;
}

/* One recv into the input buffer, growing it toward the announced frame length only as far
 * as bytes actually arrive (doubling). 0 ok (possibly nothing read), -1 close the client. */
static int conn_read(store_conn *c)
{
    int64_t flen;
    ssize_t k;
    if (c->in_off > 0) {                     /* compact: the head frame starts at 0 */
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    if ((flen = frame_len(c)) < 0)
        return -1;
    if (c->in_len == c->in_cap) {
        size_t want = flen ? 4 + (size_t)flen : BUF_MIN, cap;
        uint8_t *p;
        if (c->in_len >= want)
            return 0;                        /* a whole frame is waiting to be run */
        cap = c->in_cap ? c->in_cap * 2 : BUF_MIN;
        if (cap > want && want > BUF_MIN)
            cap = want;
        if (!(p = realloc(c->in, cap)))
            return -1;
        c->in = p;
        c->in_cap = cap;
    }
    k = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (k > 0) {
        c->in_len += (size_t)k;
        return frame_len(c) < 0 ? -1 : 0;
    }
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return -1;                               /* EOF or error */
}

static void consume_frame(store_conn *c)
{
    c->in_off += 4 + (size_t)cddp_ld_u32(c->in + c->in_off);
    if (c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
        if (c->in_cap > BUF_KEEP) {
            free(c->in);
            c->in = NULL;
            c->in_cap = 0;
        }
    }
}

static void drop(cddp_store_server *s, store_conn *c)
{
    if (!c->dead)
        __atomic_add_fetch(&s->n_dropped, 1, __ATOMIC_RELAXED);
    c->dead = 1;
}

/* Runs complete frames while the client has no reply pending and nothing parked. */
static void conn_service(cddp_store_server *s, store_conn *c, int64_t now)
{
    for (;;) {
        int64_t flen;
        int rc;
        if (c->dead || c->closing || c->parked || c->out_off < c->out_len)
            return;
        if ((flen = frame_len(c)) < 0) {
            drop(s, c);
            return;
        }
        if (flen == 0 || c->in_len - c->in_off < 4 + (size_t)flen)
            return;
        rc = cddp_store_run_frame(s, c, now);
        if (rc < 0) {
            drop(s, c);
            return;
        }
        if (rc == 0) {
            consume_frame(c);
            conn_flush(c);
        }
    }
}

/* Reruns parked GET/WAITs after a change; answers those past their deadline. */
static void rerun_parked(cddp_store_server *s, int64_t now)
{
    int rounds = 0;
    do {
        int expired_only = !s->changed;
        s->changed = 0;
        for (size_t i = 0; i < s->nconns; i++) {
            store_conn *c = s->conns[i];
            if (c->dead || !c->parked)
                continue;
            if (!expired_only) {
                int64_t deadline = c->deadline;
                int rc;
                c->parked = 0;
                if ((rc = cddp_store_run_frame(s, c, now)) == 0) {
                    consume_frame(c);
                    c->deadline = NO_DEADLINE;
                    conn_flush(c);
                    conn_service(s, c, now);
                    continue;
                }
                if (rc < 0) {                /* cannot happen: the frame parsed when parked */
                    drop(s, c);
                    continue;
                }
                c->deadline = deadline;      /* parked again: the first deadline stands */
            }
            if (now >= c->deadline) {
                c->parked = 0;
                c->deadline = NO_DEADLINE;
                consume_frame(c);
                cddp_store_reply_begin(c, CDDP_STORE_ST_TIMEOUT, 0);
                conn_flush(c);
                conn_service(s, c, now);
            }
        }
    } while (s->changed && ++rounds < 64);
}

/* ---- the loop ------------------------------------------------------------------------- */

/* At most max_unauthed connections wait for their HELLO, the one just accepted included:
 * close the oldest such one beyond that (conns are kept in accept order). */
static void evict_unauthed(cddp_store_server *s)
{
    size_t waiting = 0;
    store_conn *oldest = NULL;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn *c = s->conns[i];
        if (c->dead || c->authed || c->closing)
            continue;
        if (!oldest)
            oldest = c;
        waiting++;
    }
    if (oldest && waiting > s->max_unauthed) {
        oldest->dead = 1;
        close(oldest->fd);                   /* now: the descriptor is what is scarce */
        oldest->fd = -1;
        __atomic_add_fetch(&s->n_evicted, 1, __ATOMIC_RELAXED);
    }
}

static void accept_clients(cddp_store_server *s, int64_t now)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
        store_conn *c;
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                s->accept_pause_until = now + ACCEPT_PAUSE_MS;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            return;
        }
        if (s->nconns >= MAX_CLIENTS) {
            close(fd);
            continue;
        }
        if (s->nconns == s->cap_conns) {
            size_t cap = s->cap_conns ? s->cap_conns * 2 : 16;
            store_conn **p = realloc(s->conns, cap * sizeof(store_conn *));
            if (!p) {
                close(fd);
                continue;
            }
            s->conns = p;
            s->cap_conns = cap;
        }
        if (!(c = calloc(1, sizeof(store_conn)))) {
            close(fd);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->deadline = now + HELLO_DEADLINE_MS;
        if (conn_read(c) < 0)                /* its HELLO is usually here already */
            c->dead = 1;
        /* in the table (and in stats) before its HELLO is answered: a client told it is in
         * is counted */
        s->conns[s->nconns++] = c;
        __atomic_store_n(&s->n_clients, (int64_t)s->nconns, __ATOMIC_RELAXED);
        conn_service(s, c, now);
        if (!c->dead && !c->authed && !c->closing)
            evict_unauthed(s);
    }
}

static void reap(cddp_store_server *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        store_conn *c = s->conns[i];
        if (c->dead)
            conn_free(c);
        else
            s->conns[k++] = c;
    }
    s->nconns = k;
    __atomic_store_n(&s->n_clients, (int64_t)k, __ATOMIC_RELAXED);
}

static int poll_timeout(cddp_store_server *s, int64_t now)
{
    int64_t next = NO_DEADLINE;
    if (s->changed)
        return 0;                            /* parked requests still to rerun */
    for (size_t i = 0; i < s->nconns; i++)
        if (s->conns[i]->deadline < next)
            next = s->conns[i]->deadline;
    if (s->accept_pause_until > now && s->accept_pause_until < next)
        next = s->accept_pause_until;
    if (next == NO_DEADLINE)
        return -1;
    if (next <= now)
        return 0;
    return next - now > 60000 ? 60000 : (int)(next - now);
}

static void *server_main(void *arg)
{
    cddp_store_server *s = arg;
    struct pollfd *pfd = NULL;
    size_t pcap = 0;
    pthread_mutex_lock(&s->mu);
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        size_t n = s->nconns, np = n + 2;
        int64_t now = cddp_store_now_ms();
        int timeout, rc;
        if (np > pcap) {
            struct pollfd *p = realloc(pfd, np * 2 * sizeof *p);
            if (!p) {                        /* retry after a pause; nothing is lost */
                pthread_mutex_unlock(&s->mu);
                poll(NULL, 0, 10);
                pthread_mutex_lock(&s->mu);
                continue;
            }
            pfd = p;
            pcap = np * 2;
        }
        pfd[0] = (struct pollfd){s->lfd, now >= s->accept_pause_until ? POLLIN : 0, 0};
        pfd[1] = (struct pollfd){s->efd, POLLIN, 0};
        for (size_t i = 0; i < n; i++) {
            store_conn *c = s->conns[i];
            short ev = POLLRDHUP;
            if (!c->parked && !c->closing && c->out_off == c->out_len)
                ev |= POLLIN;
            if (c->out_off < c->out_len)
                ev |= POLLOUT;
            pfd[i + 2] = (struct pollfd){c->fd, ev, 0};
        }
        timeout = poll_timeout(s, now);
        pthread_mutex_unlock(&s->mu);
        rc = poll(pfd, np, timeout);
        pthread_mutex_lock(&s->mu);
        if (rc < 0 && errno != EINTR) {
            pthread_mutex_unlock(&s->mu);
            poll(NULL, 0, 10);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        now = cddp_store_now_ms();
        if (rc > 0 && (pfd[1].revents & POLLIN)) {
            uint64_t v;
            if (read(s->efd, &v, sizeof v) < 0) { /* drained; the stop flag says why */ }
        }
        for (size_t i = 0; rc > 0 && i < n; i++) {
            store_conn *c = s->conns[i];
            short re = pfd[i + 2].revents;
            if (re & (POLLERR | POLLNVAL))
                c->dead = 1;
            if (!c->dead && (re & POLLOUT))
                conn_flush(c);
            if (!c->dead && (re & POLLIN)) {
                if (conn_read(c) < 0) {
                    if (frame_len(c) < 0)
                        drop(s, c);
                    c->dead = 1;
                }
            } else if (!c->dead && (re & (POLLHUP | POLLRDHUP))) {
                c->dead = 1;                 /* gone while parked or sending */
            }
            conn_service(s, c, now);
        }
        for (size_t i = 0; i < n; i++) {      /* hello / closing deadlines */
            store_conn *c = s->conns[i];
            if (!c->dead && !c->parked && now >= c->deadline)
                c->dead = 1;
        }
        rerun_parked(s, now);
        if (rc > 0 && (pfd[0].revents & POLLIN))
            accept_clients(s, now);
        reap(s);
    }
    for (size_t i = 0; i < s->nconns; i++)
        conn_free(s->conns[i]);
    s->nconns = 0;
    pthread_mutex_unlock(&s->mu);
    free(pfd);
    return NULL;
}

/* ---- start / stop --------------------------------------------------------------------- */

static int is_loopback_host(const char *h)
{
    return strcmp(h, "localhost") == 0 || strncmp(h, "127.", 4) == 0 || strcmp(h, "::1") == 0;
}

/* socket + SO_REUSEADDR + bind + listen; the fd, or -1 with errno kept in *e. */
static int listen_on(const struct sockaddr *sa, socklen_t sl, int *e)
{
    int one = 1, zero = 0;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *e = errno;
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (sa->sa_family == AF_INET6)          /* [::] also takes IPv4 clients */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, sa, sl) == 0 && listen(fd, 2048) == 0)
        return fd;
    *e = errno;
    close(fd);
    return -1;
}

/* A listening nonblocking socket for host:port (the policy: cddp_store_server_start), or -1
 * with a message. */
static int open_listener(const char *host, int port, char *err, size_t errlen)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
    int fd, e = 0;
    if (strcmp(host, "::1") == 0) {
        a6.sin6_addr = in6addr_loopback;
        fd = listen_on((struct sockaddr *)&a6, sizeof a6, &e);
    } else if (is_loopback_host(host)) {
        if (inet_pton(AF_INET, host, &a4.sin_addr) != 1)
            a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fd = listen_on((struct sockaddr *)&a4, sizeof a4, &e);
    } else {
        a6.sin6_addr = in6addr_any;
        fd = listen_on((struct sockaddr *)&a6, sizeof a6, &e);
        if (fd < 0 && e != EADDRINUSE) {     /* no IPv6 here */
            a4.sin_addr.s_addr = htonl(INADDR_ANY);
            fd = listen_on((struct sockaddr *)&a4, sizeof a4, &e);
        }
    }
    if (fd < 0)
        snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port, strerror(e));
    return fd;
}

/* How many connections may wait for their HELLO at once: a quarter of the descriptors this
 * process may open, within [16, 1024]. */
static size_t unauthed_cap(void)
{
    struct rlimit rl;
    rlim_t cap = 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        cap = rl.rlim_cur / 4;
    return cap < 16 ? 16 : cap > 1024 ? 1024 : (size_t)cap;
}

int cddp_store_server_start(const char *host, int port, int listen_fd, const uint8_t *token,
                            size_t token_len, cddp_store_server **out, char *err, size_t errlen)
{
    cddp_store_server *s;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    sigset_t all, old;
    int rc;
    if (token_len > CDDP_STORE_MAX_TOKEN) {
        snprintf(err, errlen, "CDDP_TOKEN is longer than %u bytes", CDDP_STORE_MAX_TOKEN);
        return CDDP_STORE_EPROTO;
    }
    if (!(s = calloc(1, sizeof *s))) {
        snprintf(err, errlen, "out of memory");
        return CDDP_STORE_ESYS;
    }
    s->lfd = s->efd = -1;
    s->max_unauthed = unauthed_cap();
    if (cddp_store_map_init(s) < 0) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (token) {
        s->has_token = 1;
        s->token_len = token_len;
        memcpy(s->token, token, token_len);
    }
    if (listen_fd >= 0) {
        if ((s->lfd = fcntl(listen_fd, F_DUPFD_CLOEXEC, 0)) < 0 ||
            fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK) < 0 ||
            listen(s->lfd, 2048) < 0) {
            snprintf(err, errlen, "cannot use listen fd %d: %s", listen_fd, strerror(errno));
            goto fail;
        }
    } else if ((s->lfd = open_listener(host, port, err, errlen)) < 0) {
        goto fail;
    }
    if (getsockname(s->lfd, (struct sockaddr *)&ss, &sl) < 0) {
        snprintf(err, errlen, "getsockname: %s", strerror(errno));
        goto fail;
    }
    s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    if ((s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        goto fail;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->owner = getpid();
    pthread_once(&reg_once, reg_init);
    pthread_mutex_lock(&reg_mu);
    /* the thread must not take the process's signals (Python handles them on the main one) */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        s->reg_next = reg_head;
        reg_head = s;
    }
    pthread_mutex_unlock(&reg_mu);
    if (rc != 0) {
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        pthread_mutex_destroy(&s->mu);
        goto fail;
    }
    *out = s;
    return CDDP_STORE_OK;
fail:
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->efd >= 0)
        close(s->efd);
    cddp_store_map_free(s);
    free(s);
    return CDDP_STORE_ESYS;
}

int cddp_store_server_port(const cddp_store_server *s)
{
    return s->port;
}

void cddp_store_server_stats(const cddp_store_server *s, int64_t *clients, int64_t *dropped,
                             int64_t *evicted)
{
    *clients = __atomic_load_n(&s->n_clients, __ATOMIC_RELAXED);
    *dropped = __atomic_load_n(&s->n_dropped, __ATOMIC_RELAXED);
    *evicted = __atomic_load_n(&s->n_evicted, __ATOMIC_RELAXED);
}

void cddp_store_server_stop(cddp_store_server *s)
{
    pthread_mutex_lock(&reg_mu);
    for (cddp_store_server **p = &reg_head; *p; p = &(*p)->reg_next)
        if (*p == s) {
            *p = s->reg_next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
    if (!s->forked) {
        uint64_t one = 1;
        __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
        while (write(s->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
        pthread_join(s->thread, NULL);
        close(s->lfd);
        close(s->efd);
    } else {
        for (size_t i = 0; i < s->nconns; i++) {
            s->conns[i]->fd = -1;            /* closed at fork */
            conn_free(s->conns[i]);
        }
    }
    cddp_store_map_free(s);
    pthread_mutex_destroy(&s->mu);
    free(s->conns);
    free(s);
}

/* ---- test hook: one client's byte stream, no socket to the outside, no thread ---------- */

/* Follows the reply stream a chunk at a time (frames may be larger than any buffer): counts
 * whole frames; -1 when a frame breaks the wire format (length 0 or over the cap, or an
 * unknown status). */
typedef struct {
    uint8_t hdr[5];
    size_t hdr_got, body_left;
    int64_t frames;
} reply_stream;

static int check_replies(reply_stream *rs, const uint8_t *p, size_t n)
{
    while (n > 0) {
        if (rs->body_left) {
            size_t k = rs->body_left < n ? rs->body_left : n;
            rs->body_left -= k;
            p += k;
            n -= k;
            rs->frames += rs->body_left == 0;
            continue;
        }
        rs->hdr[rs->hdr_got++] = *p++;
        n--;
        if (rs->hdr_got == 5) {
            uint32_t len = cddp_ld_u32(rs->hdr);
            if (len == 0 || len > CDDP_STORE_MAX_FRAME || rs->hdr[4] > CDDP_STORE_ST_REFUSED)
                return -1;
            rs->hdr_got = 0;
            rs->body_left = len - 1;
            rs->frames += rs->body_left == 0;
        }
    }
    return 0;
}

/* One round of server_main for the single client c (its poll flags, emulated): flush, read
 * when it would poll for input, run frames, rerun parked requests. A parked request whose
 * client has sent everything is answered at its deadline (the clock jumps there), or, with
 * no deadline, ends as the loop ends it: the peer hung up. */
static void feed_round(cddp_store_server *s, store_conn *c, int hung_up, int64_t *now)
{
    if (c->out_off < c->out_len)
        conn_flush(c);
    if (!c->dead && !c->parked && !c->closing && c->out_off == c->out_len &&
        conn_read(c) < 0) {
        if (frame_len(c) < 0)
            drop(s, c);
        c->dead = 1;
    }
    conn_service(s, c, *now);
    if (!c->dead && c->parked && hung_up) {
        if (c->deadline == NO_DEADLINE)
            c->dead = 1;
        else if (c->deadline > *now)
            *now = c->deadline;
    }
    rerun_parked(s, *now);
    if (!c->dead && !c->parked && now[0] >= c->deadline)
        c->dead = 1;                         /* hello / closing deadline */
}

int cddp_store_feed(const uint8_t *data, size_t n, size_t step, const uint8_t *token,
                    size_t token_len, int64_t out[3], char *err, size_t errlen)
{
    cddp_store_server s = {.lfd = -1, .efd = -1, .max_unauthed = 16};
    store_conn *c = calloc(1, sizeof *c);
    uint8_t *rbuf = malloc(1 << 16);
    reply_stream rs = {{0}, 0, 0, 0};
    size_t off = 0;
    int sv[2] = {-1, -1}, hung_up = 0, rc = -1;
    int64_t now = cddp_store_now_ms();
    out[0] = out[1] = out[2] = 0;
    if (!c || !rbuf || cddp_store_map_init(&s) < 0 || token_len > CDDP_STORE_MAX_TOKEN ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
        snprintf(err, errlen, "cannot set up the feed: %s", strerror(errno));
        goto done;
    }
    if (token) {
        s.has_token = 1;
        s.token_len = token_len;
        memcpy(s.token, token, token_len);
    }
    c->fd = sv[0];
    c->deadline = now + HELLO_DEADLINE_MS;
    s.conns = &c;                            /* the loop's functions walk s->conns */
    s.nconns = s.cap_conns = 1;
    for (int round = 0; !c->dead && round < 1 << 20; round++) {
        ssize_t k;
        if (off < n) {                       /* the client writes `step` bytes at a time */
            k = send(sv[1], data + off, step && step < n - off ? step : n - off, MSG_NOSIGNAL);
            off += k > 0 ? (size_t)k : 0;
        } else if (!hung_up) {
            shutdown(sv[1], SHUT_WR);
            hung_up = 1;
        }
        while ((k = recv(sv[1], rbuf, 1 << 16, 0)) > 0)
            if (check_replies(&rs, rbuf, (size_t)k) < 0) {
                snprintf(err, errlen, "the server sent a malformed reply frame after %lld "
                         "good ones", (long long)rs.frames);
                rc = -2;
                goto done;
            }
        feed_round(&s, c, hung_up && off == n, &now);
    }
    conn_free(c);                            /* closes sv[0]: what was sent can be read */
    c = NULL;
    for (ssize_t k; (k = recv(sv[1], rbuf, 1 << 16, 0)) > 0;)
        if (check_replies(&rs, rbuf, (size_t)k) < 0) {
            snprintf(err, errlen, "the server sent a malformed reply frame");
            rc = -2;
            goto done;
        }
    out[0] = rs.frames;
    out[1] = (int64_t)off;
    out[2] = s.n_dropped;
    rc = 0;
done:
    if (c) {
        if (sv[0] < 0)
            c->fd = -1;
        conn_free(c);
    }
    if (sv[1] >= 0)
        close(sv[1]);
    cddp_store_map_free(&s);
    free(rbuf);
    return rc;
}
