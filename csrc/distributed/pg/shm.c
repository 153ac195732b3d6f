/* distributed/pg/shm.c — the shared-memory transport: every rank of the group on one host maps one
 * segment; collectives copy through per-rank slots and synchronise with sequence numbers.
 *
 * Mirrors: what torch's gloo does over loopback TCP, without TCP on the data path.
 *
 * Segment (created by rank 0 as /cddp-<nonce>, unlinked as soon as every rank has mapped it,
 * so nothing is left behind even when processes die):
 *   seg_hdr                    magic, layout, attach counter, the group-wide `broken` word
 *   seg_ctl[n]                 per rank, cache-line separated: seq (futex word) + waiter count,
 *                              the op header of the last two ops (by parity), p2p doorbell
 *   slots[n][3][C]             per rank, three rotating buffers of C bytes (CDDP_SHM_CHUNK)
 *   mbox ctl[n][n], data[n][n][2][P]   send/recv mailboxes, one per ordered pair
 *
 * Synchronisation: each rank publishes a monotonically increasing 32-bit `seq` (release store)
 * and waits until the ranks it needs have published a value (acquire load): spin briefly, then
 * FUTEX_WAIT with a 2 ms timeout, re-checking peer liveness (pidfd), the broken word, the
 * abort flag and the deadline between waits; publishers FUTEX_WAKE only when someone sleeps.
 * Every rank publishes the same sequence of values (ops are deterministic given the headers),
 * so "rank j reached value v" means "rank j finished the same point of the same op".
 *
 * Buffer reuse: a rank writes data step s into slot buffer s % 3 only after seeing every rank
 * publish a value that each publishes after its last read of step s - 3 (argued per algorithm
 * below), so no step needs an extra barrier.
 */
#include "distributed/pg/pg.h"
#include "distributed/pg/reduce_kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x3170646463ULL      /* "cddp1" */
#define SHM_NBUF 3
#define MB_ENTRY 64                     /* mailbox buffer: entry header, then payload */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

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
    _Alignas(64) atomic_uint bell;     /* bumped by whoever may have unblocked this rank's p2p */
    atomic_uint bell_waiters;
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
    int creator_unlinked;
    char name[64];
} shm_t;

typedef struct {
    uint64_t ticket;
    int64_t off;
    int started;
} p2p_state;

/* ---- segment access ------------------------------------------------------------------ */

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

static inline int reached(uint32_t v, uint32_t target) { return (int32_t)(v - target) >= 0; }

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(atomic_uint *addr, uint32_t val, int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}
static void futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

static void publish(shm_t *s, uint32_t v)
{
    seg_ctl *c = ctl(s, s->r);
    s->myseq = v;
    atomic_store(&c->seq, v);                  /* seq_cst: pairs with the waiter count below */
    if (atomic_load(&c->seq_waiters))
        futex_wake(&c->seq);
}

static void ring(shm_t *s, int j)
{
    seg_ctl *c = ctl(s, j);
    atomic_fetch_add(&c->bell, 1);
    if (atomic_load(&c->bell_waiters))
        futex_wake(&c->bell);
}

static void wake_everyone(shm_t *s)
{
    futex_wake(&s->h->attached);
    for (int j = 0; j < s->n; j++) {
        futex_wake(&ctl(s, j)->seq);
        futex_wake(&ctl(s, j)->bell);
    }
}

/* ---- failures ------------------------------------------------------------------------ */

static void op_prefix(const cddp_work *w, char *buf, size_t len)
{
    if (w->a.op == CDDP_PG_SEND || w->a.op == CDDP_PG_RECV)
        snprintf(buf, len, "%s %s rank %d", cddp_pg_op_name[w->a.op],
                 w->a.op == CDDP_PG_SEND ? "to" : "from", w->a.root);
    else
        snprintf(buf, len, "%s #%lld", cddp_pg_op_name[w->a.op], (long long)w->seq);
}

/* Record the group-wide broken word (first cause wins) and wake every sleeper. */
static void seg_break(shm_t *s, int rank, int kind)
{
    unsigned expect = 0;
    atomic_compare_exchange_strong(&s->h->broken, &expect, (unsigned)(rank + 1) | (unsigned)kind << 24);
    wake_everyone(s);
}

/* Describe the broken word into w->err and mark the local group broken. Ranks in messages
 * are global (a host-local subgroup maps its members back). */
static int fail_broken(cddp_pg *pg, shm_t *s, cddp_work *w, int waited_for)
{
    unsigned b = atomic_load(&s->h->broken);
    int d = (int)(b & 0xffffff) - 1, kind = (int)(b >> 24);
    int gd = kind == BRK_REMOTE ? d : cddp_pg_gname(pg, d);
    char pre[96], msg[CDDP_PG_ERRLEN];
    op_prefix(w, pre, sizeof pre);
    if (kind == BRK_EXITED)
        snprintf(msg, sizeof msg, "rank %d (pid %d) exited%s", gd, pg->pids[d],
                 d == waited_for ? "" : " (reported by a peer)");
    else if (kind == BRK_SHUTDOWN)
        snprintf(msg, sizeof msg, "rank %d aborted (shut down or interrupted) during a "
                 "collective", gd);
    else if (kind == BRK_REMOTE)
        snprintf(msg, sizeof msg, "rank %d failed (reported by rank %d)", gd,
                 (int)atomic_load(&s->h->broken_by));
    else
        snprintf(msg, sizeof msg, "rank %d did not arrive within the group's timeout (%.1f s)",
                 gd, pg->timeout_s);
    if (kind == BRK_EXITED && d == waited_for)
        cddp_pg_seterr(w->err, "%s: rank %d (pid %d) exited while rank %d was waiting for it",
                       pre, gd, pg->pids[d], cddp_pg_gname(pg, s->r));
    else
        cddp_pg_seterr(w->err, "%s: %s", pre, msg);
    if (kind == BRK_TIMEOUT)
        w->err_kind = CDDP_ERR_TIMEOUT;
    cddp_pg_mark_broken(pg, msg);
    return -1;
}

int cddp_pg_shm_broken_rank(cddp_pg *sub)
{
    shm_t *s = sub->tr;
    unsigned b = s ? atomic_load(&s->h->broken) : 0;
    int d = (int)(b & 0xffffff) - 1;
    if (!b)
        return -1;
    return (int)(b >> 24) == BRK_REMOTE ? d : cddp_pg_gname(sub, d);
}

void cddp_pg_shm_break_remote(cddp_pg *sub, int who, int reporter)
{
    shm_t *s = sub->tr;
    if (!s)
        return;
    atomic_store(&s->h->broken_by, (unsigned)reporter);
    seg_break(s, who, BRK_REMOTE);
}

/* Between sleeps: the broken word, shutdown, the deadline, whether `j` is still alive.
 * 0 to keep waiting; -1 with w->err set. */
static int check_fail(cddp_pg *pg, shm_t *s, cddp_work *w, int j)
{
    if (atomic_load(&s->h->broken))
        return fail_broken(pg, s, w, j);
    if (cddp_pg_aborting(pg) || cddp_pg_interrupted(w)) {
        seg_break(s, s->r, BRK_SHUTDOWN);
        return fail_broken(pg, s, w, j);
    }
    if (j >= 0 && cddp_pg_peer_dead(pg, j)) {
        seg_break(s, j, BRK_EXITED);
        return fail_broken(pg, s, w, j);
    }
    if (cddp_pg_now() - w->t_start > pg->timeout_s) {
        char pre[96];
        op_prefix(w, pre, sizeof pre);
        cddp_pg_seterr(w->err, "%s: rank %d timed out after %.1f s waiting for rank %d",
                       pre, cddp_pg_gname(pg, s->r), pg->timeout_s, cddp_pg_gname(pg, j));
        w->err_kind = CDDP_ERR_TIMEOUT;
        seg_break(s, j, BRK_TIMEOUT);
        cddp_pg_mark_broken(pg, w->err);
        return -1;
    }
    return 0;
}

/* Wait until rank j has published `target`. 0, or -1 with w->err set.
 * Three phases: spin (the peer runs on another core: it answers within ~1 us), then yield the
 * CPU (the peer may be waiting for this core: 4 ranks on 2 cores, or a busy machine), then
 * sleep on the futex in 2 ms slices with the liveness checks between them.
 * The spin budget adapts: a sched_yield that returns at once means nobody else wanted this
 * core, so spinning was right (double it); one that ran someone else, or reaching the futex,
 * means we share a core (halve it, down to 1 us — still enough to notice a peer that came
 * back to another core). */
static int wait_seq(cddp_pg *pg, shm_t *s, cddp_work *w, int j, uint32_t target)
{
    seg_ctl *c = ctl(s, j);
    int64_t t0, t1, slow_yields = 0;
    if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
        return 0;
    t0 = now_ns();
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
            return 0;
        if ((i & 31) == 0 && now_ns() - t0 > s->spin_cur)
            break;
    }
    for (t1 = now_ns(); t1 - t0 < s->yield_ns;) {
        int64_t ty = t1;
        sched_yield();
        t1 = now_ns();
        if (t1 - ty > 3000)
            slow_yields++;
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target)) {
            if (slow_yields)
                s->spin_cur = s->spin_cur / 2 > 1000 ? s->spin_cur / 2 : 1000;
            else
                s->spin_cur = 2 * s->spin_cur < s->spin_ns ? 2 * s->spin_cur : s->spin_ns;
            return 0;
        }
    }
    s->spin_cur = s->spin_cur / 2 > 1000 ? s->spin_cur / 2 : 1000;
    for (;;) {
        if (atomic_load(&s->h->broken) || cddp_pg_aborting(pg))
            return check_fail(pg, s, w, j);
        atomic_fetch_add(&c->seq_waiters, 1);
        uint32_t v = atomic_load(&c->seq);
        if (!reached(v, target))
            futex_wait(&c->seq, v, 2000000);
        atomic_fetch_sub(&c->seq_waiters, 1);
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
            return 0;
        if (check_fail(pg, s, w, j) < 0)
            return -1;
    }
}

static int wait_all(cddp_pg *pg, shm_t *s, cddp_work *w, uint32_t target)
{
    for (int j = 0; j < s->n; j++)
        if (j != s->r && wait_seq(pg, s, w, j, target) < 0)
            return -1;
    return 0;
}

/* Write this op's header; after the op's first synchronisation every rank compares. */
static void put_header(shm_t *s, cddp_work *w)
{
    cddp_pg_make_header(w, ctl(s, s->r)->hdr[w->seq & 1]);
}

static int check_headers(cddp_pg *pg, shm_t *s, cddp_work *w)
{
    int64_t(*h)[6] = malloc(sizeof *h * (size_t)s->n);
    int rc;
    if (!h) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    for (int j = 0; j < s->n; j++)
        memcpy(h[j], ctl(s, j)->hdr[w->seq & 1], sizeof h[j]);
    rc = cddp_pg_check_headers((const int64_t(*)[6])h, s->n, w->err);
    free(h);
    return rc;
}

/* ---- one-synchronisation-per-step collectives ----------------------------------------- */

/* Plan of a stepped op: K steps; step k moves window k (W bytes, the last one shorter) of
 * each Bm-byte block. */
typedef struct {
    int64_t K;
    size_t W, Bm, es;
    int nt;                            /* outputs far beyond the caches: streaming stores */
} plan_t;

static size_t win(const plan_t *p, int64_t k)
{
    size_t off = (size_t)k * p->W;
    return p->Bm - off < p->W ? p->Bm - off : p->W;
}

static void step_write(shm_t *s, cddp_work *w, const plan_t *p, int64_t k)
{
    const cddp_pg_args *a = &w->a;
    char *dst = slot(s, s->r, s->dstep + k);
    size_t off = (size_t)k * p->W, len = win(p, k);
    switch (a->op) {
    case CDDP_PG_BROADCAST:
        if (s->r == a->root)
            memcpy(dst, (char *)a->out + off, len);
        break;
    case CDDP_PG_ALLGATHER: case CDDP_PG_GATHER:
    case CDDP_PG_ALLREDUCE: case CDDP_PG_REDUCE:      /* the one-step small path */
        memcpy(dst, (char *)a->in + off, len);
        break;
    case CDDP_PG_SCATTER:
        if (s->r != a->root)
            break;
        /* fallthrough */
    case CDDP_PG_ALLTOALL: case CDDP_PG_REDUCE_SCATTER:
        for (int j = 0; j < s->n; j++)         /* sub-slot j: what rank j reads */
            memcpy(dst + (size_t)j * p->W, cddp_pg_block(a->in, a->iblk, j, p->Bm) + off, len);
        break;
    }
}

static void step_read(shm_t *s, cddp_work *w, const plan_t *p, int64_t k)
{
    const cddp_pg_args *a = &w->a;
    int64_t d = s->dstep + k;
    size_t off = (size_t)k * p->W, len = win(p, k);
    char *out = a->out;
    switch (a->op) {
    case CDDP_PG_BROADCAST:
        if (s->r != a->root)
            pg_copy(out + off, slot(s, a->root, d), len, p->nt);
        break;
    case CDDP_PG_GATHER:
        if (s->r != a->root)
            break;
        /* fallthrough */
    case CDDP_PG_ALLGATHER:
        for (int j = 0; j < s->n; j++)
            pg_copy(cddp_pg_block(out, a->oblk, j, p->Bm) + off, slot(s, j, d), len, p->nt);
        break;
    case CDDP_PG_SCATTER:
        pg_copy(out + off, slot(s, a->root, d) + (size_t)s->r * p->W, len, p->nt);
        break;
    case CDDP_PG_ALLTOALL:
        for (int j = 0; j < s->n; j++)
            pg_copy(cddp_pg_block(out, a->oblk, j, p->Bm) + off, slot(s, j, d) + (size_t)s->r * p->W,
                    len, p->nt);
        break;
    case CDDP_PG_REDUCE_SCATTER:
        for (int j = 0; j < s->n; j++)
            s->srcs[j] = slot(s, j, d) + (size_t)s->r * p->W;
        pg_reduce_n(out + off, s->srcs, s->n, (int64_t)(len / p->es), a->dtype, a->redop, s->n);
        break;
    case CDDP_PG_REDUCE:
        if (s->r != a->root)
            break;
        /* fallthrough */
    case CDDP_PG_ALLREDUCE:
        for (int j = 0; j < s->n; j++)
            s->srcs[j] = slot(s, j, d);
        pg_reduce_n(out, s->srcs, s->n, (int64_t)(len / p->es), a->dtype, a->redop, s->n);
        break;
    }
}

/* Steps: write(0), publish+header, wait all, check headers; then for each k: write(k+1) and
 * publish (overlapping the peers' reads of k), read(k), wait for step k+1.
 * Reuse: rank j publishes step k+2 only after read(k) — and a rank writes step k+3 only after
 * seeing everyone's step k+2 — so buffer (k+3) % 3 = k % 3 is free by then. */
static int run_stepped(cddp_pg *pg, shm_t *s, cddp_work *w, const plan_t *p)
{
    put_header(s, w);
    if (p->K > 0)
        step_write(s, w, p, 0);
    publish(s, s->myseq + 1);
    if (wait_all(pg, s, w, s->myseq) < 0)
        return -1;
    if (check_headers(pg, s, w) < 0) {
        s->dstep += 1;              /* every rank did the same single step: stay in lockstep */
        return -1;
    }
    for (int64_t k = 0; k < p->K; k++) {
        if (k + 1 < p->K) {
            step_write(s, w, p, k + 1);
            publish(s, s->myseq + 1);
        }
        step_read(s, w, p, k);
        if (k + 1 < p->K && wait_all(pg, s, w, s->myseq) < 0)
            return -1;
    }
    s->dstep += p->K;
    return 0;
}

/* ---- all_reduce / reduce on large buffers: reduce-scatter + all-gather per chunk ------- */

/* Slice j of a window of len bytes: ceil(len / n) rounded up to 64 bytes (a whole number of
 * elements, since every element size divides 64). */
static void slice_of(size_t len, int n, int j, size_t *lo, size_t *hi)
{
    size_t ps = ((len + (size_t)n - 1) / (size_t)n + 63) & ~(size_t)63;
    *lo = (size_t)j * ps < len ? (size_t)j * ps : len;
    *hi = *lo + ps < len ? *lo + ps : len;
}

/* Rank r's part of window k: copy the slices the OTHER ranks reduce into its slot (its own
 * slice never leaves private memory). */
static void copy_in_others(shm_t *s, const char *in, size_t off, size_t len, int64_t d)
{
    for (int j = 0; j < s->n; j++) {
        size_t lo, hi;
        if (j == s->r)
            continue;
        slice_of(len, s->n, j, &lo, &hi);
        if (hi > lo)
            memcpy(slot(s, s->r, d) + lo, in + off + lo, hi - lo);
    }
}

/* Per chunk k (C bytes of the tensor): every rank copies the others' slices into its slot and
 * publishes A_k; rank r reduces slice r (its own input straight from private memory, the
 * others' from their slots) into its output and its slot, publishes R_k, copies chunk k+1 in
 * (A_{k+1}) before waiting for R_k, then copies the other slices out of their owners' slots.
 * Per rank and byte that is ~4 memory passes instead of 5.5 for copy-everything-in.
 * Publication order A0 R0 A1 R1 ...: rank j publishes R_{k-1} (hence A_k) only after its
 * copy-out of k-2, so writing step k+1 = (k-2) % 3 after seeing A_k is safe.
 * reduce(): only the root needs results — others reduce into their slot alone and skip the
 * copy-out, the root keeps its own slice in its output only. */
static int run_allreduce_chunked(cddp_pg *pg, shm_t *s, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t es = cddp_pg_dtype_size[a->dtype];
    size_t B = (size_t)a->count * es, C = s->C;
    int64_t K = (int64_t)((B + C - 1) / C);
    int n = s->n, r = s->r;
    int all = a->op == CDDP_PG_ALLREDUCE, copyout = all || r == a->root;
    /* no streaming stores here: all_reduce runs in place, so every output line was just
     * read (cached) and a streaming store to it would only force an eviction (measured 30%
     * slower at 16-256 MiB) */
    int nt = 0;
    char *in = a->in, *out = a->out;

    put_header(s, w);
    copy_in_others(s, in, 0, B < C ? B : C, s->dstep);
    publish(s, s->myseq + 1);
    if (wait_all(pg, s, w, s->myseq) < 0)
        return -1;
    if (check_headers(pg, s, w) < 0) {
        s->dstep += 1;
        return -1;
    }
    for (int64_t k = 0; k < K; k++) {
        int64_t d = s->dstep + k;
        size_t off = (size_t)k * C, len = B - off < C ? B - off : C, lo, hi;
        uint32_t rk;
        slice_of(len, n, r, &lo, &hi);
        if (hi > lo) {
            for (int j = 0; j < n; j++)
                s->srcs[j] = j == r ? in + off + lo : slot(s, j, d) + lo;
            pg_reduce_n2(copyout ? out + off + lo : slot(s, r, d) + lo,
                         all ? slot(s, r, d) + lo : NULL, s->srcs, n,
                         (int64_t)((hi - lo) / es), a->dtype, a->redop, n, copyout && nt);
        }
        publish(s, s->myseq + 1);
        rk = s->myseq;
        if (k + 1 < K) {
            size_t off2 = off + C;
            copy_in_others(s, in, off2, B - off2 < C ? B - off2 : C, d + 1);
            publish(s, s->myseq + 1);
        }
        if (wait_all(pg, s, w, rk) < 0)
            return -1;
        if (copyout)
            for (int j = 0; j < n; j++) {
                size_t l2, h2;
                if (j == r)
                    continue;
                slice_of(len, n, j, &l2, &h2);
                if (h2 > l2)
                    pg_copy(out + off + l2, slot(s, j, d) + l2, h2 - l2, nt);
            }
        if (k + 1 < K && wait_all(pg, s, w, s->myseq) < 0)
            return -1;
    }
    if (nt)
        pg_store_fence();
    s->dstep += K;
    return 0;
}

/* ---- dispatch ------------------------------------------------------------------------ */

static int shm_run(cddp_pg *pg, cddp_work *w)
{
    shm_t *s = pg->tr;
    const cddp_pg_args *a = &w->a;
    plan_t p = {0};
    int n = s->n, rc;
    size_t sub = (s->C / (size_t)n) & ~(size_t)63;      /* per-destination sub-slot */
    if (atomic_load(&s->h->broken))    /* a peer failed earlier (maybe while we were away) */
        return fail_broken(pg, s, w, -1);
    p.es = cddp_pg_dtype_size[a->dtype];
    switch (a->op) {
    case CDDP_PG_ALLREDUCE: case CDDP_PG_REDUCE:
        p.Bm = (size_t)a->count * p.es;
        if (p.Bm > s->small_max)
            return run_allreduce_chunked(pg, s, w);
        p.W = p.Bm;
        break;
    case CDDP_PG_BROADCAST: case CDDP_PG_ALLGATHER: case CDDP_PG_GATHER:
        p.Bm = (size_t)a->count * p.es;
        p.W = s->C;
        break;
    case CDDP_PG_SCATTER: case CDDP_PG_REDUCE_SCATTER:
        p.Bm = (size_t)a->count * p.es;
        p.W = sub;
        break;
    case CDDP_PG_ALLTOALL:
        p.Bm = (size_t)(a->count / n) * p.es;
        p.W = sub;
        break;
    case CDDP_PG_BARRIER:
        break;
    default:
        cddp_pg_seterr(w->err, "%s is not a collective", cddp_pg_op_name[a->op]);
        return -1;
    }
    p.K = p.Bm ? (int64_t)((p.Bm + p.W - 1) / p.W) : 0;
    p.nt = p.Bm * (a->op == CDDP_PG_ALLTOALL || a->op == CDDP_PG_ALLGATHER ? (size_t)n : 1)
           >= s->nt_min;
    rc = run_stepped(pg, s, w, &p);
    if (p.nt)
        pg_store_fence();
    return rc;
}

/* ---- send / recv through mailboxes --------------------------------------------------- */

static int shm_p2p_start(cddp_pg *pg, cddp_work *w)
{
    shm_t *s = pg->tr;
    p2p_state *st = calloc(1, sizeof *st);
    if (!st) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    st->ticket = w->a.op == CDDP_PG_SEND ? s->tx_next[w->a.root]++ : s->rx_next[w->a.root]++;
    w->p2p = st;
    return 0;
}

static void p2p_finish(shm_t *s, cddp_work *w)
{
    if (w->a.op == CDDP_PG_SEND)
        s->tx_serve[w->a.root]++;
    else
        s->rx_serve[w->a.root]++;
    free(w->p2p);
    w->p2p = NULL;
}

static int p2p_check(cddp_pg *pg, shm_t *s, cddp_work *w)
{
    if (atomic_load(&s->h->broken))
        return fail_broken(pg, s, w, w->a.root);
    if (cddp_pg_peer_dead(pg, w->a.root)) {
        seg_break(s, w->a.root, BRK_EXITED);
        return fail_broken(pg, s, w, w->a.root);
    }
    return 0;
}

/* Sender: fill free mailbox buffers (two per pair) chunk by chunk; done once the whole
 * message is in the mailbox (buffered-send semantics). */
static int send_progress(cddp_pg *pg, shm_t *s, cddp_work *w, p2p_state *st)
{
    const cddp_pg_args *a = &w->a;
    int dst = a->root;
    seg_mbox *m = mbox(s, s->r, dst);
    int64_t total = a->count * (int64_t)cddp_pg_dtype_size[a->dtype];
    int64_t cap = (int64_t)(s->P - MB_ENTRY);
    if (atomic_load(&m->rejected)) {
        cddp_pg_seterr(w->err, "send to rank %d: rank %d rejected an earlier message from "
                       "rank %d (size, dtype or tag mismatch)", dst, dst, s->r);
        return -1;
    }
    while (st->off < total || !st->started) {
        uint32_t prod = atomic_load_explicit(&m->produced, memory_order_relaxed);
        uint32_t cons = atomic_load_explicit(&m->consumed, memory_order_acquire);
        if (prod - cons >= 2)
            break;
        char *b = mbuf(s, s->r, dst, prod);
        mb_entry *e = (mb_entry *)b;
        int64_t len = total - st->off < cap ? total - st->off : cap;
        e->total = total;
        e->offset = st->off;
        e->len = len;
        e->count = a->count;
        e->tag = a->tag;
        e->dtype = a->dtype;
        memcpy(b + MB_ENTRY, (char *)a->in + st->off, (size_t)len);
        atomic_store_explicit(&m->produced, prod + 1, memory_order_release);
        ring(s, dst);
        st->off += len;
        st->started = 1;
    }
    if (st->started && st->off == total)
        return 1;
    return p2p_check(pg, s, w);
}

static int recv_progress(cddp_pg *pg, shm_t *s, cddp_work *w, p2p_state *st)
{
    const cddp_pg_args *a = &w->a;
    int src = a->root;
    seg_mbox *m = mbox(s, src, s->r);
    int64_t total = a->count * (int64_t)cddp_pg_dtype_size[a->dtype];
    for (;;) {
        uint32_t cons = atomic_load_explicit(&m->consumed, memory_order_relaxed);
        uint32_t prod = atomic_load_explicit(&m->produced, memory_order_acquire);
        if (prod == cons)
            break;
        char *b = mbuf(s, src, s->r, cons);
        mb_entry *e = (mb_entry *)b;
        if (!st->started && (e->offset != 0 || e->total != total || e->tag != a->tag ||
                             e->dtype != a->dtype)) {
            int d = e->dtype >= 0 && e->dtype < 5 ? e->dtype : 0;
            cddp_pg_seterr(w->err, "recv from rank %d: rank %d sent %lld %s elements with tag "
                           "%d, rank %d expected %lld %s elements with tag %d", src, src,
                           (long long)e->count, cddp_pg_dtype_name[d], e->tag, s->r,
                           (long long)a->count, cddp_pg_dtype_name[a->dtype], a->tag);
            atomic_store(&m->rejected, 1);
            ring(s, src);
            return -1;
        }
        if (e->len < 0 || e->offset + e->len > total) {
            cddp_pg_seterr(w->err, "recv from rank %d: corrupt mailbox entry", src);
            atomic_store(&m->rejected, 1);
            return -1;
        }
        memcpy((char *)a->out + e->offset, b + MB_ENTRY, (size_t)e->len);
        st->off += e->len;
        st->started = 1;
        atomic_store_explicit(&m->consumed, cons + 1, memory_order_release);
        ring(s, src);
        if (st->off == total)
            return 1;
    }
    return p2p_check(pg, s, w);
}

static int shm_p2p_progress(cddp_pg *pg, cddp_work *w)
{
    shm_t *s = pg->tr;
    p2p_state *st = w->p2p;
    int peer = w->a.root, rc;
    int send = w->a.op == CDDP_PG_SEND;
    if (st->ticket != (send ? s->tx_serve[peer] : s->rx_serve[peer]))
        return atomic_load(&s->h->broken) ? fail_broken(pg, s, w, peer) : 0;  /* FIFO turn */
    rc = send ? send_progress(pg, s, w, st) : recv_progress(pg, s, w, st);
    if (rc == 1)
        p2p_finish(s, w);
    return rc;
}

static void shm_p2p_cancel(cddp_pg *pg, cddp_work *w)
{
    shm_t *s = pg->tr;
    if (!w->p2p)
        return;
    /* a half-moved message leaves the pair out of step: refuse further traffic on it */
    if (((p2p_state *)w->p2p)->started) {
        if (w->a.op == CDDP_PG_SEND)
            atomic_store(&mbox(s, s->r, w->a.root)->rejected, 1);
        else
            atomic_store(&mbox(s, w->a.root, s->r)->rejected, 1);
    }
    p2p_finish(s, w);
}

static void shm_p2p_wait(cddp_pg *pg, double max_s)
{
    shm_t *s = pg->tr;
    seg_ctl *c = ctl(s, s->r);
    uint32_t v = atomic_load(&c->bell);
    if (v == s->bell_seen && !cddp_pg_aborting(pg)) {
        atomic_fetch_add(&c->bell_waiters, 1);
        futex_wait(&c->bell, v, (int64_t)(max_s * 1e9));
        atomic_fetch_sub(&c->bell_waiters, 1);
    }
    s->bell_seen = atomic_load(&c->bell);
}

static void shm_doorbell(cddp_pg *pg)
{
    shm_t *s = pg->tr;
    if (s)
        ring(s, s->r);
}

/* ---- setup / teardown ---------------------------------------------------------------- */

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void shm_fini(cddp_pg *pg)
{
    shm_t *s = pg->tr;
    if (!s)
        return;
    if (s->base) {
        if (s->r == 0 && !s->creator_unlinked)
            shm_unlink(s->name);
        munmap(s->base, s->total);
    }
    free(s->srcs);
    free(s->tx_next);
    free(s);
    pg->tr = NULL;
}

/* Rank 0: create, size and describe the segment, then wait until every rank mapped it and
 * unlink the name. */
static int create_segment(cddp_pg *pg, shm_t *s, double deadline, char *err)
{
    int n = s->n, fd;
    size_t C = cddp_pg_env_size("CDDP_SHM_CHUNK", 256 << 10, 1024, 64 << 20) & ~(size_t)63;
    size_t P = cddp_pg_env_size("CDDP_SHM_P2P", n <= 8 ? 64 << 10 : 16 << 10, 256, 16 << 20);
    size_t off_ctl = 4096, off_slots, off_mbctl, off_mbdata, total;
    if (C < (size_t)n * 64)
        C = (size_t)n * 64;              /* every rank's sub-slot holds at least 64 bytes */
    P = align_up(P, 64);
    off_slots = align_up(off_ctl + (size_t)n * sizeof(seg_ctl), 4096);
    off_mbctl = align_up(off_slots + (size_t)n * SHM_NBUF * C, 4096);
    off_mbdata = align_up(off_mbctl + (size_t)n * n * sizeof(seg_mbox), 4096);
    total = off_mbdata + (size_t)n * n * 2 * P;
    fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        cddp_pg_seterr(err, "shm_open(%s) failed: %s", s->name, strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)total) < 0) {
        cddp_pg_seterr(err, "could not size the shared-memory segment to %zu bytes: %s "
                       "(is /dev/shm full?)", total, strerror(errno));
        close(fd);
        shm_unlink(s->name);
        return -1;
    }
    s->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        cddp_pg_seterr(err, "mmap of the shared-memory segment failed: %s", strerror(errno));
        shm_unlink(s->name);
        return -1;
    }
    s->total = total;
    s->h = (seg_hdr *)s->base;
    s->h->nonce = 0;
    s->h->size = n;
    s->h->total = total;
    s->h->chunk = C;
    s->h->mbox = P;
    s->h->off_ctl = off_ctl;
    s->h->off_slots = off_slots;
    s->h->off_mbctl = off_mbctl;
    s->h->off_mbdata = off_mbdata;
    atomic_store_explicit((_Atomic uint64_t *)&s->h->magic, SHM_MAGIC, memory_order_release);
    while (atomic_load(&s->h->attached) < (unsigned)(n - 1)) {
        uint32_t v = atomic_load(&s->h->attached);
        for (int j = 1; j < n; j++)
            if (cddp_pg_peer_dead(pg, j)) {
                cddp_pg_seterr(err, "rank %d (pid %d) exited before mapping the group's "
                               "shared memory", j, pg->pids[j]);
                return -1;
            }
        if (cddp_pg_now() > deadline) {
            cddp_pg_seterr(err, "timed out after %.1f s waiting for the other ranks to map "
                           "the shared-memory segment", pg->timeout_s);
            return -1;
        }
        if (v < (unsigned)(n - 1))
            futex_wait(&s->h->attached, v, 2000000);
    }
    shm_unlink(s->name);
    s->creator_unlinked = 1;
    return 0;
}

/* Other ranks: open (retrying until rank 0 created and described it), map, check, attach. */
static int attach_segment(cddp_pg *pg, shm_t *s, double deadline, char *err)
{
    for (;;) {
        int fd = shm_open(s->name, O_RDWR, 0);
        if (fd >= 0) {
            struct stat stt;
            if (fstat(fd, &stt) == 0 && (size_t)stt.st_size >= sizeof(seg_hdr)) {
                void *b = mmap(NULL, (size_t)stt.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (b == MAP_FAILED) {
                    cddp_pg_seterr(err, "mmap of the shared-memory segment failed: %s",
                                   strerror(errno));
                    return -1;
                }
                seg_hdr *h = b;
                if (atomic_load_explicit((_Atomic uint64_t *)&h->magic, memory_order_acquire)
                    == SHM_MAGIC) {
                    if (h->size != s->n || h->total != (uint64_t)stt.st_size) {
                        munmap(b, (size_t)stt.st_size);
                        cddp_pg_seterr(err, "shared-memory segment %s describes a group of %lld "
                                       "ranks, this rank expects %d", s->name,
                                       (long long)h->size, s->n);
                        return -1;
                    }
                    s->base = b;
                    s->total = (size_t)stt.st_size;
                    s->h = h;
                    /* the last rank to map it removes the name too, so it cannot outlive
                     * the group even if rank 0 dies right now (unlinking twice is harmless) */
                    if (atomic_fetch_add(&h->attached, 1) + 2 == (unsigned)s->n)
                        shm_unlink(s->name);
                    futex_wake(&h->attached);
                    return 0;
                }
                munmap(b, (size_t)stt.st_size);
            } else {
                close(fd);
            }
        } else if (errno != ENOENT) {
            cddp_pg_seterr(err, "shm_open(%s) failed: %s", s->name, strerror(errno));
            return -1;
        }
        if (cddp_pg_peer_dead(pg, 0)) {
            cddp_pg_seterr(err, "rank 0 (pid %d) exited before creating the group's shared "
                           "memory", pg->pids[0]);
            return -1;
        }
        if (cddp_pg_now() > deadline) {
            cddp_pg_seterr(err, "timed out after %.1f s waiting for rank 0's shared-memory "
                           "segment %s", pg->timeout_s, s->name);
            return -1;
        }
        usleep(500);
    }
}

static int shm_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    shm_t *s = calloc(1, sizeof *s);
    int n = info->size;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double deadline = cddp_pg_now() + pg->timeout_s;
    if (!s) {
        cddp_pg_seterr(err, "out of memory");
        return -1;
    }
    pg->tr = s;
    s->n = n;
    s->r = info->rank;
    snprintf(s->name, sizeof s->name, "%s", info->shm_name);
    s->srcs = calloc((size_t)n, sizeof *s->srcs);
    s->tx_next = calloc((size_t)n * 4, sizeof(uint64_t));
    if (!s->srcs || !s->tx_next) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;
    }
    s->tx_serve = s->tx_next + n;
    s->rx_next = s->tx_next + 2 * n;
    s->rx_serve = s->tx_next + 3 * n;
    /* spinning only pays when every rank has a core; oversubscribed, go to sleep at once */
    s->spin_ns = (int64_t)cddp_pg_env_size("CDDP_SHM_SPIN_US", (ncpu > 0 && n <= ncpu) ? 20 : 2,
                                           0, 1000000) * 1000;
    s->yield_ns = (int64_t)cddp_pg_env_size("CDDP_SHM_YIELD_US", 100, 0, 1000000) * 1000;
    s->spin_cur = s->spin_ns;
    if ((s->r == 0 ? create_segment(pg, s, deadline, err)
                   : attach_segment(pg, s, deadline, err)) < 0)
        goto fail;
    s->C = s->h->chunk;
    s->P = s->h->mbox;
    s->small_max = cddp_pg_env_size("CDDP_SHM_SMALL", 16 << 10, 0, 1 << 30);
    if (s->small_max > s->C)
        s->small_max = s->C;
    s->nt_min = cddp_pg_env_size("CDDP_SHM_NT", 16 << 20, 0, (size_t)1 << 62);
    return 0;
fail:
    shm_fini(pg);
    return -1;
}

const cddp_pg_transport_ops cddp_pg_shm_ops = {
    .init = shm_init,
    .run = shm_run,
    .p2p_start = shm_p2p_start,
    .p2p_progress = shm_p2p_progress,
    .p2p_cancel = shm_p2p_cancel,
    .p2p_wait = shm_p2p_wait,
    .doorbell = shm_doorbell,
    .fini = shm_fini,
};
