/* distributed/pg/shm_internal.h — private to the shared-memory transport (not an API: the
 * engine sees only cddp_pg_shm_ops in distributed/pg/pg.h):
 *
 *   distributed/pg/shm_segment.c   the segment: layout, create (rank 0) / attach (the others) /
 *                                  unlink, the transport state's init and fini
 *   distributed/pg/shm.c           what runs on the segment: sequence-number waits, failure
 *                                  reporting, the collectives, send/recv mailboxes, the table
 *
 * Mirrors: the shared segment of NCCL's shm transport (per-rank buffers and flags in one
 * mapping); torch's gloo has no shared-memory transport.
 *
 * shm.c calls shm_segment.c (init / fini); shm_segment.c calls nothing in shm.c. The layout
 * below is shared memory: every process of the group maps the same bytes (the layout comment
 * says who writes what).
 */
#ifndef CDDP_PG_SHM_INTERNAL_H
#define CDDP_PG_SHM_INTERNAL_H

#include "distributed/pg/pg.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Segment (created by rank 0 as /cddp-<rank 0's pid>-<tag>, unlinked as soon as every rank
 * has mapped it; a name left by a creator killed before that is swept by the next creator,
 * shm_segment.c's Note [dead creators' segments]):
 *   seg_hdr                    magic, layout, attach counter, the group-wide `broken` word
 *   seg_ctl[n]                 per rank, cache-line separated: seq (futex word) + waiter count,
 *                              the op header of the last two ops (by parity), p2p doorbell
 *   slots[n][3][C]             per rank, three rotating buffers of C bytes (CDDP_SHM_CHUNK)
 *   mbox ctl[n][n], data[n][n][2][P]   send/recv mailboxes, one per ordered pair
 * Writers: seg_hdr's layout fields, rank 0 before it publishes `magic`; a rank's seq, hdr and
 * slots, that rank; mailbox data and `produced`, the sender; `consumed`, the receiver. The
 * rest (waiter counts, `bell`, `attached`, `broken`, `rejected`) are atomics any rank updates. */
#define SHM_MAGIC 0x3170646463ULL      /* "cddp1" */
#define SHM_NBUF 3
#define MB_ENTRY 64                     /* mailbox buffer: entry header, then payload */

/* broken word kinds; the rank is local except for BRK_REMOTE (a global rank that failed on
 * another host, reported by global rank `broken_by`) */
enum { BRK_EXITED = 1, BRK_SHUTDOWN = 2, BRK_TIMEOUT = 3, BRK_REMOTE = 4 };

typedef struct {
    uint64_t magic;                    /* stored last (release) by rank 0 */
    uint64_t nonce;
    int64_t size;
    uint64_t total, chunk, mbox;
    uint64_t off_ctl, off_slots, off_mbctl, off_mbdata;
    _Alignas(64) atomic_uint attached; /* ranks 1..n-1 that mapped the segment */
    _Alignas(64) atomic_uint broken;   /* 0, or (rank + 1) | kind << 24 */
    atomic_uint broken_by;
} seg_hdr;

typedef struct {
    _Alignas(64) atomic_uint seq;
    atomic_uint seq_waiters;
    _Alignas(64) int64_t hdr[2][6];    /* header of op #k at [k & 1] */
    int64_t zoff[2];                   /* op #k's buffer in this rank's arena (shm.c, zero-copy
                                          all_reduce): offset, -1 elsewhere, -2 no arena */
    _Alignas(64) atomic_uint bell;     /* bumped by whoever may have unblocked this rank's p2p */
    atomic_uint bell_waiters;
    _Alignas(64) int64_t arena_fd;     /* this rank's arena (core/arena.c), written at init */
    int64_t arena_size;
    uint64_t arena_token;
    atomic_int arena_mapped;           /* 1 mapped every peer's arena, 2 could not */
} seg_ctl;

typedef struct {
    _Alignas(64) atomic_uint produced; /* chunks the sender has written */
    atomic_uint rejected;              /* the receiver refused a message: pair unusable */
    _Alignas(64) atomic_uint consumed; /* chunks the receiver has copied out */
} seg_mbox;

typedef struct {                       /* at the start of each mailbox buffer */
    int64_t total, offset, len;        /* bytes: whole message, this chunk */
    int64_t count;
    int32_t tag, dtype;
} mb_entry;

/* This rank's transport state (pg->tr): the mapping and what it knows of the protocol. */
typedef struct {
    char *base;
    size_t total;
    seg_hdr *h;
    int n, r;
    size_t C, P;                       /* slot buffer bytes, mailbox buffer bytes */
    uint32_t myseq;                    /* last value this rank published */
    int64_t dstep;                     /* data steps used so far (same on every rank) */
    uint32_t bell_seen;
    int64_t spin_ns, yield_ns;         /* spin ceiling, yield phase */
    int64_t spin_cur;                  /* adaptive spin budget (wait_seq) */
    size_t small_max;                  /* all_reduce bytes taking the one-step path */
    size_t nt_min;                     /* outputs from this size on: streaming stores */
    const void **srcs;                 /* [n] scratch for reductions */
    uint64_t *tx_next, *tx_serve, *rx_next, *rx_serve;   /* [n] p2p FIFO tickets */
    int zc;                            /* zero-copy all_reduce: 0 untried, 1 on, -1 off */
    char **peer_arena;                 /* [n] peers' arenas mapped here (NULL: not mapped) */
    char **zdst;                       /* [n] scratch: every rank's buffer, as mapped here */
    size_t *peer_arena_size;
    int creator_unlinked;
    int lock_fd;                       /* rank 0: the segment, flock'ed while its name exists */
    char name[80];
} shm_t;

/* ---- segment access ------------------------------------------------------------------ */

/* rank j's control block; its slot buffer for data step d; the mailbox src -> dst and its
 * buffer b (two alternate) */
static inline seg_ctl *ctl(shm_t *s, int j)
{
    return (seg_ctl *)(s->base + s->h->off_ctl) + j;
}
static inline char *slot(shm_t *s, int j, int64_t d)
{
    return s->base + s->h->off_slots + ((size_t)j * SHM_NBUF + (size_t)(d % SHM_NBUF)) * s->C;
}
static inline seg_mbox *mbox(shm_t *s, int src, int dst)
{
    return (seg_mbox *)(s->base + s->h->off_mbctl) + ((size_t)src * s->n + dst);
}
static inline char *mbuf(shm_t *s, int src, int dst, uint32_t b)
{
    return s->base + s->h->off_mbdata + (((size_t)src * s->n + dst) * 2 + (b & 1)) * s->P;
}

/* sequence numbers wrap: v has reached target when it is at most 2^31 ahead */
static inline int reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

/* Sleep while *addr == val, at most ns nanoseconds (or until a futex_wake); spurious wakeups
 * are fine: every caller re-checks its condition. */
static inline void futex_wait(atomic_uint *addr, uint32_t val, int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static inline void futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* ---- distributed/pg/shm_segment.c ------------------------------------------------------ */

/* The transport's init: state for info->size ranks, then rank 0 creates, sizes and describes
 * the segment /cddp-<info->pids[0]>-<info->shm_name> and waits until every rank mapped it
 * (then unlinks the name);
 * the others open it (retrying until rank 0 described it), check it and attach. Blocks up to
 * the group's timeout, watching the peers' liveness. 0, or -1 with err set (nothing left). */
int cddp_shm_init(cddp_pg *pg, const cddp_pg_info *info, char *err);
/* Unmap (rank 0 unlinks a name still linked) and free the state; pg->tr = NULL. */
void cddp_shm_fini(cddp_pg *pg);

#endif
