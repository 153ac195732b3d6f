/* distributed/store/server.h — what the store server's two files share: the server's state, a
 * client connection, a map entry, and the interface of the lower file (not an API: the server's
 * API is in distributed/store/proto.h).
 *
 *   distributed/store/server.c   the thread: poll loop, sockets, per-client buffers, fork safety
 *            | calls: map init / free, run a frame, begin a reply
 *            v
 *   distributed/store/ops.c      the map key -> bytes, the request handlers, reply framing
 *
 * The dependency goes one way, server.c -> ops.c: ops.c calls no function of server.c. A
 * handler acts on the loop only through the shared state declared here (it appends a reply to
 * the client's output, marks the client parked or closing with a deadline, and sets s->changed
 * so the loop reruns parked requests). The clock both use is proto.h's cddp_store_now_ms.
 *
 * Mirrors: the state of c10d's TCPStore server (TCPStoreBackend: its key map, its sockets,
 * the waiting GET/WAIT requests).
 *
 * Everything here is touched by the server thread only (under s->mu), except the counters
 * marked atomic.
 */
#ifndef CDDP_STORE_SERVER_H
#define CDDP_STORE_SERVER_H

#include "distributed/store/proto.h"

#include <pthread.h>
#include <sys/types.h>

#define MAX_TOTAL_BYTES ((size_t)1 << 30)    /* all keys + values held */
#define CLOSING_DEADLINE_MS 1000             /* a refused peer that does not read its reply */
#define BUF_MIN 16384                        /* first size of a client's buffers */
#define BUF_KEEP (1u << 20)                  /* larger idle buffers are freed */
#define NO_DEADLINE INT64_MAX

typedef struct store_entry {
    struct store_entry *next;
    uint64_t hash;
    uint32_t klen, vlen;
    uint8_t *val;                 /* vlen bytes, malloc'd; NULL when vlen == 0 */
    uint8_t key[];                /* klen bytes */
} store_entry;

typedef struct {
    int fd;
    char authed;                  /* HELLO accepted */
    char parked;                  /* frame at in + in_off is a GET/WAIT waiting for keys */
    char closing;                 /* close once the reply is flushed (refused peers) */
    char dead;
    int64_t deadline;             /* parked / hello / closing deadline, ms */
    uint8_t *in;                  /* [in_off, in_len) received, unconsumed */
    size_t in_off, in_len, in_cap;
    uint8_t *out;                 /* [out_off, out_len) to send */
    size_t out_off, out_len, out_cap;
} store_conn;

struct cddp_store_server {
    int lfd, efd, port;
    pthread_t thread;
    pthread_mutex_t mu;           /* held by the thread while it touches state; fork takes it */
    int stop;                     /* atomic */
    int forked;                   /* this is a fork child's copy: sockets closed, no thread */
    pid_t owner;
    store_conn **conns;
    size_t nconns, cap_conns;
    store_entry **buckets;
    size_t nbuckets, nkeys, bytes;
    uint64_t seed;
    int changed;                  /* a key appeared or changed this round: rerun parked */
    int64_t accept_pause_until;
    size_t max_unauthed;          /* connections without HELLO kept at once (oldest dropped) */
    int64_t n_clients, n_dropped, n_evicted;  /* atomic, read by cddp_store_server_stats */
    int has_token;
    size_t token_len;
    uint8_t token[CDDP_STORE_MAX_TOKEN];
    struct cddp_store_server *reg_next;   /* fork registry */
};

/* ---- distributed/store/ops.c: what server.c calls ---------------------------------------- */

/* An empty map with a random hash seed: 0, or -1 (out of memory). */
int cddp_store_map_init(cddp_store_server *s);
/* Frees every entry and the bucket array (also after a failed cddp_store_map_init). */
void cddp_store_map_free(cddp_store_server *s);
/* Runs the complete frame at the head of c's input. 0: done (reply queued, consume the
 * frame); 1: parked (a GET/WAIT whose keys are missing; the frame stays); -1: the frame
 * breaks the protocol (close the client). */
int cddp_store_run_frame(cddp_store_server *s, store_conn *c, int64_t now);
/* Appends a reply frame of plen payload bytes to c's output; returns where the payload goes,
 * or NULL (out of memory: c is marked dead, it cannot be answered). */
uint8_t *cddp_store_reply_begin(store_conn *c, uint8_t status, size_t plen);

#endif
