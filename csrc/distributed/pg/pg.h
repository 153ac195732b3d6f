/* distributed/pg/pg.h — the CPU process-group engine (pure C, no Python.h): a group of `size`
 * ranks, one worker thread per group running collectives in issue order, Work handles, the
 * per-op header check, peer-failure detection, and three transports: shared memory on one host
 * (shm.c), TCP between hosts or when CDDP_TRANSPORT=tcp (tcp.c with the algorithms in ring.c
 * and direct.c), and hierarchical, shm inside each host + TCP between them (hier.c).
 *
 * Mirrors: torch.distributed.ProcessGroup (gloo backend) and its Work objects.
 *
 *   pg = cddp_pg_create(&info, err)           # after rendezvous (distributed/pg/rendezvous.c)
 *   w  = cddp_pg_submit(pg, &args, inline)    # queued on the worker (or run inline when idle)
 *   cddp_work_wait(w, timeout)                # 0 ok, -1 failed (cddp_work_error), 1 not yet
 *   cddp_pg_destroy(pg)                       # stops the thread; never hangs
 *
 * Element counts are int64 elements of the op's dtype (cddp_dtype values: 0 float32,
 * 1 float64, 2 int64, 3 int32, 4 bool, 5 float16, 6 bfloat16, 7 uint8, 8 int8, 9 int16).
 * Every blocking wait has a deadline (the group's timeout per op) and watches for dead peers,
 * so no call hangs.
 *
 * Environment knobs (read when a group is created; sizes accept k/m suffixes):
 *   CDDP_TRANSPORT     auto | shm | tcp | hier   (tests force tcp on one host)
 *   CDDP_SHM_CHUNK     bytes per slot buffer: the all_reduce pipeline's chunk (256k)
 *   CDDP_SHM_SMALL     all_reduce up to this many bytes takes the one-step path (16k)
 *   CDDP_SHM_P2P       send/recv mailbox buffer bytes (64k; 16k above 8 local ranks)
 *   CDDP_SHM_SPIN_US / CDDP_SHM_YIELD_US   spin, then sched_yield, before the futex (20/100;
 *                      2 us spin when ranks outnumber cores)
 *   CDDP_TCP_CHUNK     ring pipeline granularity (256k); CDDP_TCP_SMALL: eager all_reduce (16k)
 *   CDDP_SOCKET_ADDR   the address peers use to reach this rank (else the route to MASTER_ADDR)
 *   CDDP_HEARTBEAT_S   TCP: seconds of silence (no reply to keepalive probes, unacked data)
 *                      after which a peer's host counts as lost (10; 0 = never; tcp_mesh.c)
 *   CDDP_HOST_ID       tests: a host identity overriding hostname + boot id (simulated hosts)
 */
#ifndef CDDP_PG_H
#define CDDP_PG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CDDP_PG_MAX_RANKS 4096
#define CDDP_PG_ERRLEN 512

enum cddp_pg_op {
    CDDP_PG_ALLREDUCE = 0, CDDP_PG_BROADCAST, CDDP_PG_REDUCE, CDDP_PG_ALLGATHER,
    CDDP_PG_GATHER, CDDP_PG_SCATTER, CDDP_PG_REDUCE_SCATTER, CDDP_PG_ALLTOALL,
    CDDP_PG_BARRIER, CDDP_PG_SEND, CDDP_PG_RECV, CDDP_PG_NOPS
};
/* The peer of a recv from any sender (torch's recv with src=None). */
#define CDDP_PG_ANY (-1)

/* torch.distributed.ReduceOp values as the Python layer numbers them */
enum cddp_pg_redop {
    CDDP_RED_SUM = 0, CDDP_RED_AVG, CDDP_RED_PRODUCT, CDDP_RED_MIN, CDDP_RED_MAX,
    CDDP_RED_BAND, CDDP_RED_BOR, CDDP_RED_BXOR, CDDP_RED_NOPS
};

/* HIER: ranks on several hosts, some hosts holding several ranks: the TCP mesh for every op,
 * plus a shared-memory group per host for the hierarchical all_reduce (distributed/pg/hier.c). */
/* EXT: a transport supplied from outside cddp._C through cddp_pg_info.ext_ops (the MPI
 * backend, cddp._mpi: distributed/mpi/mpi_transport.c). */
enum cddp_pg_transport { CDDP_PG_SHM = 1, CDDP_PG_TCP = 2, CDDP_PG_HIER = 3, CDDP_PG_EXT = 4 };

extern const char *const cddp_pg_op_name[CDDP_PG_NOPS];      /* "all_reduce", ... */
extern const char *const cddp_pg_redop_name[CDDP_RED_NOPS];  /* "SUM", ... */
#define CDDP_PG_NDTYPES 10
extern const char *const cddp_pg_dtype_name[CDDP_PG_NDTYPES];
extern const size_t cddp_pg_dtype_size[CDDP_PG_NDTYPES];
/* float32, float64, float16, bfloat16 */
static inline int cddp_pg_dtype_floating(int d) { return d == 0 || d == 1 || d == 5 || d == 6; }

/* One op. `count` is the per-rank unit the ranks compare (see the table in distributed/pg/engine.c):
 * all_reduce/broadcast/reduce/send/recv: numel(t); all_gather/gather: numel(input);
 * scatter/reduce_scatter: numel(output); all_to_all: numel(input) (= numel(output)).
 * `in`/`out` are raw data pointers the caller keeps alive until the Work completes. */
typedef struct {
    int op, dtype, redop;
    int root;                  /* root rank, or the peer of send/recv (recv: CDDP_PG_ANY
                                  until a sender is matched, then that sender) */
    int tag;                   /* send/recv */
    int64_t count;
    void *in, *out;
    /* optional [size] block addresses replacing in + j * block / out + j * block: outputs of
     * all_gather / gather, inputs of scatter / reduce_scatter given as separate tensors.
     * malloc'ed by the caller, owned (freed) by the Work from submit on. */
    void **iblk, **oblk;
} cddp_pg_args;

/* Rank j's block of a blocked buffer (blocks[j], or base + j * block_bytes). */
static inline char *cddp_pg_block(void *base, void *const *blocks, int j, size_t block_bytes)
{
    return blocks ? (char *)blocks[j] : (char *)base + (size_t)j * block_bytes;
}

/* What rendezvous learned about the group (filled by distributed/pg/rendezvous.c). */
typedef struct cddp_pg_transport_ops cddp_pg_transport_ops;

typedef struct {
    int rank, size;
    double timeout_s;
    int transport;             /* CDDP_PG_SHM, CDDP_PG_TCP, CDDP_PG_HIER or CDDP_PG_EXT */
    int *pids;                 /* [size] */
    unsigned char *local;      /* [size] 1 when that rank shares this host (pidfd works) */
    char **addrs;              /* [size] "ip" strings (TCP) */
    char **hostnames;          /* [size] host names (TCP: messages name a lost peer's host) */
    int *ports;                /* [size] TCP listen ports */
    int *host;                 /* [size] host index of each rank (HIER) */
    uint64_t nonce;            /* shared by the group: shm name / TCP handshake */
    char shm_name[64];         /* the segment's tag, "<nonce>" (a host group: "<nonce>-<leader>");
                                  rank 0 creates /cddp-<its pid>-<tag>, the others open it */
    int listen_fd;             /* this rank's TCP listener (cddp_pg_tcp_listen), or -1 */
    char group_name[128];
    const cddp_pg_transport_ops *ext_ops;   /* CDDP_PG_EXT: the transport's table */
    void *ext_arg;             /* CDDP_PG_EXT: handed to ext_ops->init (e.g. an MPI_Comm *) */
} cddp_pg_info;

typedef struct cddp_work cddp_work;
typedef struct cddp_pg cddp_pg;

/* Work states */
enum { CDDP_WORK_QUEUED = 0, CDDP_WORK_RUNNING, CDDP_WORK_DONE, CDDP_WORK_FAILED };
/* Failure kinds (the binding picks the exception class). A Work fails with one of the first
 * three; rendezvous (distributed/pg/rendezvous.h) adds NOMEM and STORE (a store callback
 * failed and its own error stands). */
enum { CDDP_ERR_RUNTIME = 0, CDDP_ERR_TIMEOUT, CDDP_ERR_VALUE, CDDP_ERR_NOMEM, CDDP_ERR_STORE };

struct cddp_work {
    atomic_int refcnt;
    cddp_pg *pg;               /* borrowed: the group outlives completion (destroy drains) */
    cddp_pg_args a;
    int64_t seq;               /* collective sequence number (1-based); 0 for send/recv */
    int state;                 /* guarded by pg->mu */
    int err_kind;
    double t_start;            /* monotonic seconds when it began running */
    void *p2p;                 /* transport state of an in-flight send/recv */
    int (*intr)(void *ctx);    /* inline runs only: "was the caller interrupted?" (Ctrl-C) */
    void *intr_ctx;
    double intr_last;
    cddp_work *next;           /* queue link (pg->mu) */
    char err[CDDP_PG_ERRLEN];
};

/* ---- shared helpers (distributed/pg/common.c) ------------------------------------------ */
double cddp_pg_now(void);                          /* CLOCK_MONOTONIC seconds */
/* snprintf into err when err is still empty (the first cause wins). */
void cddp_pg_seterr(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when local peer `r` has exited (pidfd, else kill(pid, 0)); 0 alive or unknown. */
int cddp_pg_peer_dead(cddp_pg *pg, int r);
/* For ops running on the caller's thread: ask (at most every 50 ms, from the slow part of a
 * blocking wait) whether the caller was interrupted. 1: stop the op (the transport then tells
 * the peers, as for a shutdown). */
int cddp_pg_interrupted(cddp_work *w);
/* The op as messages name it: "all_reduce #12", "send to rank 3", "recv from rank 0". */
void cddp_pg_op_prefix(const cddp_work *w, char *buf, size_t len);
/* A thread-less subgroup of `parent` over members[0..nm) (global ranks, parent->rank among
 * them) using the shared-memory transport on the segment tagged shm_name. NULL + err on
 * failure. */
cddp_pg *cddp_pg_sub_create(cddp_pg *parent, const int *members, int nm, const char *shm_name,
                            char *err);
/* Shared memory: fail every local peer's current and later ops, naming global rank `who`
 * as the rank that failed and `reporter` as the one that saw it (HIER leaders use it). */
void cddp_pg_shm_break_remote(cddp_pg *sub, int who, int reporter);
/* The global rank named by a subgroup's broken word, or -1. */
int cddp_pg_shm_broken_rank(cddp_pg *sub);
/* Raise the group-broken state with a message (first caller wins); fails later ops. */
void cddp_pg_mark_broken(cddp_pg *pg, const char *msg);
/* Compare the op headers of all ranks (hdrs[r] = 6 int64: seq, op, dtype, count, root, redop);
 * 0 when they agree, else -1 with a message naming the first rank that differs from rank 0. */
int cddp_pg_check_headers(const int64_t (*hdrs)[6], int size, char *err);
/* Header of an op in that layout. */
void cddp_pg_make_header(const cddp_work *w, int64_t hdr[6]);
/* Whether ranks must agree on an op's root (rooted ops) / reduce op (reducing ops). */
int cddp_pg_uses_root(int op);
int cddp_pg_uses_redop(int op);

/* ---- transports ---------------------------------------------------------------------- */
/* Each returns 0 or -1 with w->err set. `run` executes one collective; `p2p_start` /
 * `p2p_progress` drive a send/recv without blocking (progress: 1 done, 0 pending, -1 error);
 * `p2p_wait` sleeps up to `max_s` for p2p activity or a queue doorbell; `p2p_probe` (NULL: no
 * receive from any sender) returns the peer whose next message to this rank has the tag of the
 * CDDP_PG_ANY recv `w` and can be taken now (no recv from that peer queued ahead of it), -1
 * when there is none yet, -2 when `w` failed (w->err set); the engine binds `w` to that peer
 * and starts it. `name` is what
 * ProcessGroupCPU.transport reports. A table from another extension (CDDP_PG_EXT) is called
 * with that extension's own copies of the helpers below; it must stay loaded while the group
 * lives. */
struct cddp_pg_transport_ops {
    const char *name;
    int (*init)(cddp_pg *pg, const cddp_pg_info *info, char *err);
    int (*run)(cddp_pg *pg, cddp_work *w);
    int (*p2p_start)(cddp_pg *pg, cddp_work *w);
    int (*p2p_progress)(cddp_pg *pg, cddp_work *w);
    void (*p2p_cancel)(cddp_pg *pg, cddp_work *w);
    void (*p2p_wait)(cddp_pg *pg, double max_s);
    int (*p2p_probe)(cddp_pg *pg, cddp_work *w);
    void (*doorbell)(cddp_pg *pg);           /* wake p2p_wait (new op queued, abort) */
    void (*fini)(cddp_pg *pg);
};

/* What another extension hands ProcessGroupCPU._external in a PyCapsule named "cddp.pg_ext":
 * its transport table and the argument its init takes (info->ext_arg). Read during the call
 * only. */
typedef struct {
    const cddp_pg_transport_ops *ops;
    void *arg;
} cddp_pg_ext;

extern const cddp_pg_transport_ops cddp_pg_shm_ops;   /* distributed/pg/shm.c */
/* all_reduces the shm transport ran in place in the ranks' arenas, this process (tests) */
extern _Atomic long long cddp_pg_shm_zero_copy_ops;
extern const cddp_pg_transport_ops cddp_pg_tcp_ops;    /* distributed/pg/tcp.c (+ ring.c, direct.c) */
extern const cddp_pg_transport_ops cddp_pg_hier_ops;   /* distributed/pg/hier.c */

struct cddp_pg {
    int rank, size;
    double timeout_s;
    int transport;
    const cddp_pg_transport_ops *ops;
    void *tr;                  /* transport state */
    int *pids;                 /* [size] */
    int *pidfds;               /* [size] -1 when none (remote, or self) */
    unsigned char *local;      /* [size] */
    char group_name[128];

    pthread_mutex_t mu;
    pthread_cond_t cv_work;    /* worker: queue non-empty / stop */
    pthread_cond_t cv_done;    /* waiters: some work completed */
    cddp_work *head, *tail;    /* FIFO of queued work (mu) */
    int executing;             /* an op runs (worker or inline caller) (mu) */
    int stop;                  /* shutdown requested (mu) */
    atomic_int abort;          /* running ops give up at their next check */
    atomic_int broken;         /* later ops fail at once with broken_msg */
    char broken_msg[CDDP_PG_ERRLEN];
    int64_t coll_seq;          /* collectives issued so far (mu) */
    pthread_t thread;
    int thread_started;
    atomic_int n_p2p_active;   /* in-flight send/recv (set by the executor, read by submit) */
    int owner_pid;             /* a forked child must not touch the thread or the peers */
    struct cddp_pg *parent;    /* a host-local subgroup of a HIER group: its parent (aborts) */
    int *gname;                /* subgroup: global rank of each member (messages) */
};

/* Shutdown requested on this group (or on the group it is a subgroup of). */
static inline int cddp_pg_aborting(cddp_pg *pg)
{
    return atomic_load(&pg->abort) || (pg->parent && atomic_load(&pg->parent->abort));
}
/* Global rank of member j (subgroups name peers by their rank in the parent). */
static inline int cddp_pg_gname(const cddp_pg *pg, int j)
{
    return pg->gname ? pg->gname[j] : j;
}

/* Create the group from rendezvous info: opens pidfds, initializes the transport (maps the
 * segment or builds the TCP mesh — blocking up to timeout), starts the worker thread.
 * NULL with err set on failure. Call without the GIL. */
cddp_pg *cddp_pg_create(const cddp_pg_info *info, char *err);
/* Stop accepting work; let queued work finish for up to drain_s seconds (< 0: the group's
 * timeout, as gloo drains its queue), then abort what still runs ("process group was shut
 * down", peers are told through the transport) and join the worker. Idempotent.
 * cddp_pg_destroy = shutdown without draining + free (no Work may refer to pg any more). */
void cddp_pg_shutdown(cddp_pg *pg, double drain_s);
void cddp_pg_destroy(cddp_pg *pg);

/* Validate args (ranks, counts), then queue the op, or run it on the calling thread when
 * allow_inline and the group is idle (no queued or running work): the sync fast path.
 * Returns a new Work reference (never NULL except on malloc failure); a failed validation or
 * a broken group gives a Work already FAILED. Call without the GIL when allow_inline. */
cddp_work *cddp_pg_submit(cddp_pg *pg, const cddp_pg_args *a, int allow_inline);
/* Same, with an interrupt hook for the inline run (see cddp_pg_interrupted). */
cddp_work *cddp_pg_submit_ex(cddp_pg *pg, const cddp_pg_args *a, int allow_inline,
                             int (*intr)(void *ctx), void *intr_ctx);
/* Wait up to timeout_s (< 0: the group's deadline governs; the op itself always ends).
 * 0 done, -1 failed, 1 still running after timeout_s. */
int cddp_work_wait(cddp_work *w, double timeout_s);
int cddp_work_state(cddp_work *w);
void cddp_work_incref(cddp_work *w);
void cddp_work_decref(cddp_work *w);

/* A listening TCP socket on an ephemeral port (all interfaces); fills *port. -1 + err. */
int cddp_pg_tcp_listen(int *port, char *err);                      /* distributed/pg/tcp.c */
/* The IPv4 address peers should use to reach this host: $CDDP_SOCKET_ADDR, else the local
 * address of the route towards $MASTER_ADDR, else the hostname's address, else 127.0.0.1. */
void cddp_pg_local_addr(char *buf, size_t len);                    /* distributed/pg/tcp.c */

/* Env knobs (distributed/pg/common.c): an integer byte size with optional k/m suffix, clamped. */
size_t cddp_pg_env_size(const char *name, size_t dflt, size_t lo, size_t hi);

#endif
