/* distributed/store/proto.h — wire format and C API of cddp's rendezvous store (no Python.h
 * here).
 *
 * Mirrors: torch.distributed.TCPStore's server/client (c10d TCPStore.cpp), with a length-
 * checked framing and an optional shared secret (CDDP_TOKEN) that torch's store lacks.
 *
 *   every frame:   u32 len | u8 op_or_status | payload       (len counts op + payload, >= 1)
 *   integers little-endian; str = u32 n | n bytes.
 *
 *   client -> server                                   server -> client (status, payload)
 *   HELLO     u32 magic, u32 version, token (rest)     OK | REFUSED msg (then closes)
 *   SET       str key, value (rest)                    OK
 *   GET       u64 wait_ms, str key                     OK value | TIMEOUT (key absent wait_ms)
 *   ADD       i64 amount, str key                      OK i64 | ERROR msg (not an integer)
 *   WAIT      u64 wait_ms, u32 n, n * str key          OK | TIMEOUT
 *   CHECK     u32 n, n * str key                       OK u8
 *   CAS       str key, str expected, desired (rest)    OK value (torch's compare_set result)
 *   DELETE    str key                                  OK u8 (1 when it existed)
 *   NUM_KEYS  (empty)                                  OK i64
 *   APPEND    str key, value (rest)                    OK
 *
 * GET and WAIT park on the server until the keys exist (replied to at the set that makes them
 * exist) or wait_ms passes. A frame that breaks any rule here (length 0 or over the caps, an
 * unknown op, a short or overlong payload, anything but HELLO first) closes that client only.
 * Before HELLO succeeds a frame may hold at most CDDP_STORE_MAX_HELLO bytes, so an
 * unauthenticated peer cannot make the server allocate more than that; and at most
 * RLIMIT_NOFILE / 4 (16..1024) connections wait for their HELLO at once: a new one closes the
 * oldest, so idle or half-open peers cannot take the process's file descriptors.
 */
#ifndef CDDP_STORE_PROTO_H
#define CDDP_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define CDDP_STORE_MAGIC 0x54534443u          /* "CDST" */
#define CDDP_STORE_VERSION 1u
#define CDDP_STORE_MAX_KEY 4096u              /* bytes per key */
#define CDDP_STORE_MAX_VALUE (64u << 20)      /* bytes per value */
#define CDDP_STORE_MAX_KEYS 65536u            /* keys per WAIT / CHECK */
#define CDDP_STORE_MAX_TOKEN 1024u
#define CDDP_STORE_MAX_HELLO (CDDP_STORE_MAX_TOKEN + 16u)
/* CAS carries two values; everything else is smaller */
#define CDDP_STORE_MAX_FRAME (2u * CDDP_STORE_MAX_VALUE + CDDP_STORE_MAX_KEY + 64u)

enum {
    CDDP_STORE_OP_HELLO = 1,
    CDDP_STORE_OP_SET = 2,
    CDDP_STORE_OP_GET = 3,
    CDDP_STORE_OP_ADD = 4,
    CDDP_STORE_OP_WAIT = 5,
    CDDP_STORE_OP_CHECK = 6,
    CDDP_STORE_OP_CAS = 7,
    CDDP_STORE_OP_DELETE = 8,
    CDDP_STORE_OP_NUM_KEYS = 9,
    CDDP_STORE_OP_APPEND = 10,
};

enum {
    CDDP_STORE_ST_OK = 0,
    CDDP_STORE_ST_TIMEOUT = 1,
    CDDP_STORE_ST_ERROR = 2,
    CDDP_STORE_ST_REFUSED = 3,
};

/* Result codes of the C API (0 = success). The message buffer says the rest. */
enum {
    CDDP_STORE_OK = 0,
    CDDP_STORE_ETIMEOUT = -1,   /* deadline passed (connect, reply, lock) */
    CDDP_STORE_ECLOSED = -2,    /* the server closed the connection */
    CDDP_STORE_EREFUSED = -3,   /* the server refused our token */
    CDDP_STORE_EPROTO = -4,     /* the peer does not speak this protocol */
    CDDP_STORE_ESYS = -5,       /* a system call failed (errno in the message) */
    CDDP_STORE_EINTR = -6,      /* the interrupt hook asked to stop (its exception is set) */
};

/* ---- little-endian encoding ----------------------------------------------------------- */

static inline uint8_t *cddp_wr_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
    return p + 4;
}

static inline uint8_t *cddp_wr_u64(uint8_t *p, uint64_t v)
{
    p = cddp_wr_u32(p, (uint32_t)v);
    return cddp_wr_u32(p, (uint32_t)(v >> 32));
}

static inline uint8_t *cddp_wr_str(uint8_t *p, const void *s, uint32_t n)
{
    p = cddp_wr_u32(p, n);
    if (n)
        memcpy(p, s, n);
    return p + n;
}

static inline uint32_t cddp_ld_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t cddp_ld_u64(const uint8_t *p)
{
    return (uint64_t)cddp_ld_u32(p) | (uint64_t)cddp_ld_u32(p + 4) << 32;
}

/* A bounds-checked reader over a received payload: every getter returns -1 (and consumes
 * nothing) when the payload is too short or a length is over its cap. */
typedef struct {
    const uint8_t *p;
    size_t n;
} cddp_rd;

static inline int cddp_rd_u32(cddp_rd *r, uint32_t *v)
{
    if (r->n < 4)
        return -1;
    *v = cddp_ld_u32(r->p);
    r->p += 4; r->n -= 4;
    return 0;
}

static inline int cddp_rd_u64(cddp_rd *r, uint64_t *v)
{
    if (r->n < 8)
        return -1;
    *v = cddp_ld_u64(r->p);
    r->p += 8; r->n -= 8;
    return 0;
}

static inline int cddp_rd_str(cddp_rd *r, uint32_t max, const uint8_t **s, uint32_t *n)
{
    uint32_t len;
    if (r->n < 4)
        return -1;
    len = cddp_ld_u32(r->p);
    if (len > max || r->n - 4 < len)
        return -1;
    *s = r->p + 4;
    *n = len;
    r->p += 4 + (size_t)len; r->n -= 4 + (size_t)len;
    return 0;
}

/* ---- server (distributed/store/server.c) ------------------------------------------------ */

typedef struct cddp_store_server cddp_store_server;

/* Listen on host:port (port 0: ephemeral) — or adopt listen_fd (>= 0, a bound socket; it is
 * dup'ed) — and serve on a background thread. Loopback hosts ("localhost", 127.x, ::1) bind
 * loopback only; any other host binds every interface, as torch's TCPStore does, because
 * MASTER_ADDR may name this machine by an address that is not an interface address of it.
 * token == NULL: accept any client; else a client must present these token_len bytes.
 * 0 and *out on success; a CDDP_STORE_E* code and a message in err otherwise. */
int cddp_store_server_start(const char *host, int port, int listen_fd, const uint8_t *token,
                            size_t token_len, cddp_store_server **out, char *err, size_t errlen);
int cddp_store_server_port(const cddp_store_server *s);
/* Clients connected now, clients closed so far for breaking the protocol, and connections
 * closed before their HELLO to make room (at most max_unauthed wait for HELLO at once). */
void cddp_store_server_stats(const cddp_store_server *s, int64_t *clients, int64_t *dropped,
                             int64_t *evicted);
/* Test hook (fuzzing): runs data[0..n) as one client's byte stream through the server's own
 * framing, buffers and handlers — over a socketpair, `step` bytes at a time (0: all), on a
 * fresh map, no thread — until the server closes the client or the bytes run out. Replies
 * are checked to be well-formed frames. 0 and out = {replies, bytes consumed by the server's
 * socket, clients dropped for breaking the protocol}; -2 a malformed reply (a bug), -1 the
 * feed could not be set up; err says which. */
int cddp_store_feed(const uint8_t *data, size_t n, size_t step, const uint8_t *token,
                    size_t token_len, int64_t out[3], char *err, size_t errlen);
/* Stops the thread (wakes it, joins it: milliseconds), closes every socket, frees s.
 * In a process forked from the owner it only frees the copy (fork closed its sockets). */
void cddp_store_server_stop(cddp_store_server *s);

/* ---- client (distributed/store/client.c) ------------------------------------------------ */

typedef struct cddp_store_client cddp_store_client;

/* Connect and say HELLO, retrying refused/unreachable connects until timeout_ms passes (the
 * server may start later). 0 and *out; or ETIMEOUT / EREFUSED / EPROTO / ESYS + message. */
int cddp_store_client_open(const char *host, int port, const uint8_t *token, size_t token_len,
                           int64_t timeout_ms, cddp_store_client **out, char *err, size_t errlen);
/* One request/reply: sends op + payload, waits for the reply until timeout_ms passes.
 * On success *reply is a malloc'd buffer of *reply_len >= 1 bytes: status byte, then the
 * reply payload; the caller frees it. Thread-safe: concurrent calls use separate connections
 * (opened on demand, up to 16). Blocks: call it with the GIL released. */
int cddp_store_client_call(cddp_store_client *c, uint8_t op, const uint8_t *head, size_t head_len,
                           const uint8_t *tail, size_t tail_len, int64_t timeout_ms,
                           uint8_t **reply, size_t *reply_len, char *err, size_t errlen);
void cddp_store_client_close(cddp_store_client *c);
/* Called (without any lock) when a signal interrupts a client's wait; nonzero aborts the call
 * with CDDP_STORE_EINTR. distributed/python/py_store.c installs one that runs Python's signal
 * handlers, so Ctrl-C stops a blocked get() instead of waiting out the store timeout. */
void cddp_store_set_interrupt_hook(int (*hook)(void));

/* ---- the clock -------------------------------------------------------------------------- */

/* Milliseconds on the monotonic clock: the deadlines of the client, the server's loop and its
 * handlers (defined here, below all three, so none of them calls into another for it). */
static inline int64_t cddp_store_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
