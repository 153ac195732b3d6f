/* distributed/pg/tcp_internal.h — private to the TCP transport and the code built on it (not an
 * API: the engine sees only the transport tables in distributed/pg/pg.h).
 *
 * Mirrors: gloo's split between a transport (transport/tcp: pairs, buffers, the event loop) and
 * the algorithms that drive it (allreduce_ring_chunked.h, ...).
 *
 *   distributed/pg/tcp.c    the transport: the poll round, non-blocking io with failure
 *                           reporting, independent transfers, the header exchange, send/recv,
 *                           cddp_pg_tcp_ops
 *   distributed/pg/tcp_mesh.c  the mesh: listen, connect, hello, socket tuning with the
 *                           heartbeat (CDDP_HEARTBEAT_S), init/fini
 *   distributed/pg/ring.c   the ring algorithms over the mesh: the pipelined byte stream and
 *                           all_reduce / reduce / broadcast / all_gather / reduce_scatter
 *   distributed/pg/direct.c the direct algorithms: gather / scatter / all_to_all
 *   distributed/pg/hier.c   the hierarchical transport (cddp_pg_hier_ops): the TCP mesh plus a
 *                           shared-memory group per host, large all_reduce across host leaders
 *
 * Who calls whom: ring.c and direct.c move bytes through tcp.c; hier.c runs on tcp.c's table
 * and ring.c's ring; tcp.c's run() hands each collective to its algorithm (the one call
 * upward: the functions declared at the end).
 *
 * The functions here take the group, its TCP state and the running op (those they need). On
 * failure they return -1 with w->err set (the first cause wins); a failed connection has also
 * marked the group broken and told every peer (cddp_tcp_break), so the caller only returns -1
 * up the stack.
 */
#ifndef CDDP_PG_TCP_INTERNAL_H
#define CDDP_PG_TCP_INTERNAL_H

#include "distributed/pg/pg.h"

#include <sys/types.h>

#define TCP_NHDR 8              /* header words: magic, the 6 of cddp_pg_make_header, eager bytes */

typedef struct cddp_hier cddp_hier;

/* The TCP transport's state (pg->tr). [n] arrays are indexed by rank. */
typedef struct {
    int n, r;
    int *fd;                  /* [n] collective connection (-1 for self) */
    int *pfd;                 /* [n] send/recv connection */
    unsigned char *p2p_dead;  /* [n] send/recv channel unusable after an error */
    short *want;              /* [n] poll events the p2p ops wait for */
    int evfd;                 /* doorbell: new op queued / abort */
    size_t chunk, small_max;
    char *scratch;
    size_t scratch_cap;
    char *stage;              /* ring reduce staging: chunk + 8 bytes */
    int64_t (*hdrs)[TCP_NHDR];/* [n] header exchange */
    uint64_t *tx_next, *tx_serve, *rx_next, *rx_serve;
    int broke;                /* OOB notices already sent */
    int failed;               /* the rank named in them */
    char *names;              /* [n] "host (addr)" of each rank, for messages (tcp_mesh.c) */
    double hb_s;              /* heartbeat: a silent peer fails after this long (0: off) */
    cddp_hier *hier;          /* HIER only: the host level (hier.c owns it; NULL for plain TCP,
                                 and tcp.c / ring.c never look inside) */
} tcp_t;

/* One transfer of engine 1 (cddp_tcp_run_xfers): len bytes of buf to (send) or from `peer`. */
typedef struct {
    int peer, send;
    char *buf;
    size_t len, done;
} tcp_xfer;

/* ---- the mesh (distributed/pg/tcp_mesh.c) ---------------------------------------------- */

/* cddp_pg_tcp_ops.init / .fini: build the mesh (blocking up to the group's timeout; closes
 * info->listen_fd either way) / close every connection and free the state. */
int cddp_tcp_mesh_init(cddp_pg *pg, const cddp_pg_info *info, char *err);
void cddp_tcp_mesh_fini(cddp_pg *pg);
/* "host (addr)" of rank j, for messages. */
const char *cddp_tcp_peer(const tcp_t *t, int j);
/* $CDDP_HEARTBEAT_S: seconds of silence after which a peer's connection fails (10; 0: never). */
double cddp_tcp_heartbeat_s(void);

/* ---- the transport (distributed/pg/tcp.c) ----------------------------------------------- */

/* Tell every peer that rank `who` failed (one urgent byte per connection), then stop writing.
 * Once per group; later calls do nothing. Connections stay open until the group ends. */
void cddp_tcp_break(tcp_t *t, int who);
/* One poll round over the doorbell and every collective connection: ev[j] are the events
 * wanted from rank j (failure notices are always watched). Then the shutdown and deadline
 * checks, naming `waitfor` if the deadline passed. 0 to go on, -1 (w->err) to stop. */
int cddp_tcp_poll(cddp_pg *pg, tcp_t *t, cddp_work *w, const short *ev, int waitfor);
/* Move up to len bytes to / from rank j's collective connection without blocking: the bytes
 * moved (0 when the socket is not ready), or -1 (w->err) when the connection failed. */
ssize_t cddp_tcp_io_send(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, const char *buf, size_t len);
ssize_t cddp_tcp_io_recv(cddp_pg *pg, tcp_t *t, cddp_work *w, int j, char *buf, size_t len);
/* Engine 1: run x[0..nx) to completion, all in flight together (any order across peers,
 * in order per peer and direction). 0, or -1 (w->err). */
int cddp_tcp_run_xfers(cddp_pg *pg, tcp_t *t, cddp_work *w, tcp_xfer *x, int nx);
/* Grow t->scratch to at least `bytes` (contents not kept). 0, or -1 (w->err: out of memory). */
int cddp_tcp_scratch(tcp_t *t, cddp_work *w, size_t bytes);
/* The op's header exchange with every peer: the barrier and the mismatch check. `eager`
 * payload bytes of eager_buf ride along; when every rank sent the same amount, peer j's lands
 * in scratch[(j < r ? j : j - 1) * eager]. -1 (w->err) on a mismatch or a failure; the
 * connections stay in step after a mismatch. */
int cddp_tcp_exchange_headers(cddp_pg *pg, tcp_t *t, cddp_work *w, const char *eager_buf,
                              size_t eager);

/* ---- the algorithms (distributed/pg/ring.c, direct.c) ------------------------------------ */

/* Ring all-reduce in place on buf (w->a.count elements) among members mem[0..nm) (global
 * ranks; NULL: every rank), this rank being mem[me]. AVG divides by the whole group's size.
 * Call after the header exchange. 0, or -1 (w->err). */
int cddp_tcp_ring_allreduce(cddp_pg *pg, tcp_t *t, cddp_work *w, char *buf, const int *mem,
                            int nm, int me);
/* The collectives tcp.c's run() dispatches to (ring.c; the last one direct.c): each does its
 * header exchange, then moves the data (all_reduce and reduce take the eager path when
 * small). 0, or -1 (w->err). */
int cddp_tcp_allreduce(cddp_pg *pg, tcp_t *t, cddp_work *w);       /* all_reduce, reduce */
int cddp_tcp_broadcast(cddp_pg *pg, tcp_t *t, cddp_work *w);
int cddp_tcp_allgather(cddp_pg *pg, tcp_t *t, cddp_work *w);
int cddp_tcp_reduce_scatter(cddp_pg *pg, tcp_t *t, cddp_work *w);
int cddp_tcp_direct(cddp_pg *pg, tcp_t *t, cddp_work *w);          /* gather, scatter, all_to_all */

#endif
