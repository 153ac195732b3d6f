/* distributed/pg/shm.c — the shared-memory transport: every rank of the group on one host maps
 * one segment; collectives copy through per-rank slots and synchronise with sequence numbers.
 *
 * Mirrors: what torch's gloo does over loopback TCP, without TCP on the data path.
 *
 * The segment (its layout, creation and attachment) is distributed/pg/shm_segment.c and
 * distributed/pg/shm_internal.h; this file is what runs on it.
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
 *
 * Called by the engine through cddp_pg_shm_ops (distributed/pg/engine.c), and by hier.c for a
 * host's subgroup (run, cddp_pg_shm_broken_rank, cddp_pg_shm_break_remote).
 */
#include "distributed/pg/shm_internal.h"
#include "common/arena.h"
#include "distributed/pg/reduce_kernels.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* w->p2p of an in-flight send/recv */
typedef struct {
    uint64_t ticket;
    int64_t off;
    int started;
} p2p_state;

/* ---- sequence numbers and doorbells --------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
    cddp_pg_op_prefix(w, pre, sizeof pre);
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
        cddp_pg_op_prefix(w, pre, sizeof pre);
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
 * back to another core).
 * patient: the caller is the group's worker thread waiting for peers to *arrive* at an op
 * it started in the background (DDP's bucket all-reduces during backward): the peers are
 * still computing and may be milliseconds away, and this process's own compute thread wants
 * the core, so spin only 1 us, skip the yield phase and sleep on the futex (a publisher wakes
 * it). Waits inside an op, where every peer is running the same collective, stay eager. */
static int wait_seq(cddp_pg *pg, shm_t *s, cddp_work *w, int j, uint32_t target, int patient)
{
    seg_ctl *c = ctl(s, j);
    int64_t t0, t1, slow_yields = 0, spin = patient ? 1000 : s->spin_cur;
    if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
        return 0;
    t0 = now_ns();
    for (unsigned i = 1;; i++) {
        cpu_relax();
        if (reached(atomic_load_explicit(&c->seq, memory_order_acquire), target))
            return 0;
        if ((i & 31) == 0 && now_ns() - t0 > spin)
            break;
    }
    for (t1 = now_ns(); !patient && t1 - t0 < s->yield_ns;) {
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
    if (!patient)
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
        if (j != s->r && wait_seq(pg, s, w, j, target, 0) < 0)
            return -1;
    return 0;
}

/* CDDP_SHM_PATIENT=0 turns patient arrival waits off (read once per process; every thread
 * computes the same value, so the unsynchronised first read is harmless). */
static int patient_enabled(void)
{
    static atomic_int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = getenv("CDDP_SHM_PATIENT");
        x = !(e && e[0] == '0');
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return x;
}

/* The first wait of an op: every peer has arrived (published the op's first step). Patient
 * (see wait_seq) on the group's worker thread. */
static int wait_arrival(cddp_pg *pg, shm_t *s, cddp_work *w, uint32_t target)
{
    cddp_pg *owner = pg->parent ? pg->parent : pg;
    int patient = owner->thread_started && pthread_equal(pthread_self(), owner->thread) &&
                  patient_enabled();
    for (int j = 0; j < s->n; j++)
        if (j != s->r && wait_seq(pg, s, w, j, target, patient) < 0)
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
    if (wait_arrival(pg, s, w, s->myseq) < 0)
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

/* ---- all_reduce in place in the ranks' arenas (zero-copy) -------------------------------- */

/* Map every peer's arena (core/arena.c) through /proc/<pid>/fd/<fd>, and check its token: a
 * pid reused by another process cannot pass. 0, or -1 (nothing to report: the group goes on
 * without the zero-copy path). */
static int map_peer_arenas(cddp_pg *pg, shm_t *s)
{
    for (int j = 0; j < s->n; j++) {
        seg_ctl *c = ctl(s, j);
        char path[64];
        int fd;
        void *m;
        if (j == s->r || s->peer_arena[j])
            continue;
        if (c->arena_fd < 0 || c->arena_size < 4096)
            return -1;
        snprintf(path, sizeof path, "/proc/%d/fd/%d", pg->pids[j], (int)c->arena_fd);
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0)
            return -1;
        m = mmap(NULL, (size_t)c->arena_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                 fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            return -1;
        s->peer_arena[j] = m;
        s->peer_arena_size[j] = (size_t)c->arena_size;
        if (memcmp(m, &c->arena_token, sizeof c->arena_token) != 0)
            return -1;
    }
    return 0;
}

/* What this rank offers for op w: its buffer's offset in its arena (an all_reduce in place
 * there), -1 (elsewhere, a reduce(), or the path is off), -2 (no arena: the group turns the
 * path off). */
static int64_t zc_offer(shm_t *s, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    if (s->zc < 0 || a->op != CDDP_PG_ALLREDUCE || s->n < 2)
        return -1;
    if (ctl(s, s->r)->arena_fd < 0)
        return -2;
    if (a->in != a->out)
        return -1;
    return cddp_arena_offset(a->in, (size_t)a->count * cddp_pg_dtype_size[a->dtype]);
}

/* After the arrival: whether op w runs in place — every rank offered an offset and every
 * rank maps every other's arena. The first such op maps the peers' arenas and shares the
 * outcome (one more synchronisation). Every rank reads the same values, so every rank
 * decides the same; s->zc settles to -1 for good when a rank has no arena or cannot map.
 * *some: whether any rank offered (and so held chunk 0 back).
 * 1 yes, 0 no, -1 with w->err set. */
static int zc_decide(cddp_pg *pg, shm_t *s, cddp_work *w, int *some)
{
    int par = w->seq & 1, every = 1;
    int64_t B = w->a.count * (int64_t)cddp_pg_dtype_size[w->a.dtype];
    for (int j = 0; j < s->n; j++) {
        int64_t o = ctl(s, j)->zoff[par];
        *some |= o >= 0;
        if (o == -2)
            s->zc = -1;
        /* an offer past the end of that rank's arena (it cannot come from core/arena.c)
         * turns the path off rather than reaching outside the mapping */
        every &= o >= 0 && o <= ctl(s, j)->arena_size - B;
    }
    if (!every || s->zc < 0)
        return 0;
    if (s->zc == 0) {
        atomic_store(&ctl(s, s->r)->arena_mapped, map_peer_arenas(pg, s) == 0 ? 1 : 2);
        publish(s, s->myseq + 1);
        if (wait_all(pg, s, w, s->myseq) < 0)
            return -1;
        s->zc = 1;
        for (int j = 0; j < s->n; j++)
            if (atomic_load(&ctl(s, j)->arena_mapped) != 1)
                s->zc = -1;
    }
    return s->zc > 0;
}

_Atomic long long cddp_pg_shm_zero_copy_ops;

/* Every rank's buffer is bytes [zoff_j, zoff_j + B) of its arena: rank r reduces slice r
 * straight from every rank's buffer and writes the result into every rank's buffer, then
 * publishes; once every rank has, every buffer holds the whole result. Per rank and byte of
 * the tensor (2 ranks): one read and one write, against ~4 memory passes through the slots,
 * and two synchronisations in all instead of two per chunk.
 * Safe: others write rank j's buffer only after j arrived (its data complete), each inside
 * its own slice; j returns only once every writer has published. n >= 2 (zc_offer). */
static int run_allreduce_zc(cddp_pg *pg, shm_t *s, cddp_work *w)
{
    const cddp_pg_args *a = &w->a;
    size_t es = cddp_pg_dtype_size[a->dtype], B = (size_t)a->count * es, W = 64 << 10, lo, hi;
    int n = s->n, r = s->r, par = w->seq & 1, first = r == 0 ? 1 : 0;
    char **dst = s->zdst;
    slice_of(B, n, r, &lo, &hi);
    for (int j = 0; j < n; j++)
        dst[j] = j == r ? (char *)a->out : s->peer_arena[j] + ctl(s, j)->zoff[par];
    /* window by window: the result goes to the first peer from the reduction's own scratch,
     * to the others (n > 2) from this rank's window while it is still in cache */
    for (size_t off = lo; off < hi; off += W) {
        size_t len = hi - off < W ? hi - off : W;
        for (int j = 0; j < n; j++)
            s->srcs[j] = dst[j] + off;
        pg_reduce_n2(dst[r] + off, dst[first] + off, s->srcs, n, (int64_t)(len / es),
                     a->dtype, a->redop, n, 0);
        for (int j = first + 1; j < n; j++)
            if (j != r)
                memcpy(dst[j] + off, dst[r] + off, len);
    }
    publish(s, s->myseq + 1);
    cddp_pg_shm_zero_copy_ops++;
    return wait_all(pg, s, w, s->myseq);
}

/* ---- all_reduce / reduce through the slots ------------------------------------------------ */

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
    int nt = 0, zc, offered = 0;
    int64_t offer;
    char *in = a->in, *out = a->out;

    put_header(s, w);
    /* A rank whose buffer may be reduced in place holds chunk 0 back until every rank's
     * offer is known; the others copy it in before arriving, as the copy path always does. */
    offer = zc_offer(s, w);
    ctl(s, r)->zoff[w->seq & 1] = offer;
    if (offer < 0)
        copy_in_others(s, in, 0, B < C ? B : C, s->dstep);
    publish(s, s->myseq + 1);
    if (wait_arrival(pg, s, w, s->myseq) < 0)
        return -1;
    if (check_headers(pg, s, w) < 0) {
        s->dstep += 1;
        return -1;
    }
    if ((zc = zc_decide(pg, s, w, &offered)) != 0)
        return zc < 0 ? -1 : run_allreduce_zc(pg, s, w);
    if (offered) {                     /* the copy path after all: chunk 0 in, one more sync */
        if (offer >= 0)
            copy_in_others(s, in, 0, B < C ? B : C, s->dstep);
        publish(s, s->myseq + 1);
        if (wait_all(pg, s, w, s->myseq) < 0)
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
            int d = e->dtype >= 0 && e->dtype < CDDP_PG_NDTYPES ? e->dtype : 0;
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

/* A recv from any sender: the first peer (from rank+1 on, so no peer starves) whose mailbox to
 * this rank starts a message with `tag` and has no recv of ours queued on it. A peer that
 * exited breaks the group, as it does for a recv naming it. */
static int shm_p2p_probe(cddp_pg *pg, cddp_work *w)
{
    shm_t *s = pg->tr;
    if (atomic_load(&s->h->broken)) {
        fail_broken(pg, s, w, -1);
        return -2;
    }
    for (int k = 1; k < s->n; k++) {
        int j = (s->r + k) % s->n;
        seg_mbox *m = mbox(s, j, s->r);
        if (s->rx_next[j] != s->rx_serve[j])
            continue;
        uint32_t cons = atomic_load_explicit(&m->consumed, memory_order_relaxed);
        if (atomic_load_explicit(&m->produced, memory_order_acquire) != cons) {
            const mb_entry *e = (const mb_entry *)mbuf(s, j, s->r, cons);
            if (e->offset == 0 && e->tag == w->a.tag)
                return j;
        } else if (cddp_pg_peer_dead(pg, j)) {
            seg_break(s, j, BRK_EXITED);
            fail_broken(pg, s, w, j);
            return -2;
        }
    }
    return -1;
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

/* ---- the transport's table (init / fini: distributed/pg/shm_segment.c) ----------------- */

const cddp_pg_transport_ops cddp_pg_shm_ops = {
    .init = cddp_shm_init,
    .run = shm_run,
    .p2p_start = shm_p2p_start,
    .p2p_progress = shm_p2p_progress,
    .p2p_probe = shm_p2p_probe,
    .p2p_cancel = shm_p2p_cancel,
    .p2p_wait = shm_p2p_wait,
    .doorbell = shm_doorbell,
    .fini = cddp_shm_fini,
};
