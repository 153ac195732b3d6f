/* distributed/pg/engine.c — the process group object: worker thread, FIFO op queue, Work handles,
 * argument validation, creation and shutdown (the helpers every transport shares — names, the
 * op header every rank compares, peer liveness, the broken state — are common.c's).
 *
 * Mirrors: c10d::ProcessGroupGloo's work queue (one thread per group here, ops run in issue
 * order) and c10d::Work (wait / isCompleted / exception).
 *
 *   submit(op) ──▶ queue ──▶ worker: run(op) on the transport ──▶ Work DONE / FAILED
 *                └─ idle group and a synchronous caller: run on the caller's thread instead
 *                   (saves two thread hand-offs per small op)
 *   send/recv are driven as non-blocking state machines: the worker keeps every consecutive
 *   send/recv in flight together (so isend+irecv pairs between two ranks cannot deadlock),
 *   and a collective queued after them starts once they have all finished.
 *
 * Header (int64[6], common.c): sequence number, op, dtype, element count, root, reduce op.
 * Ranks write theirs before any data moves and compare after the first synchronisation.
 */
#include "distributed/pg/pg.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434   /* same number on x86_64 and aarch64 */
#endif

/* ---- Work ---------------------------------------------------------------------------- */

void cddp_work_incref(cddp_work *w) { atomic_fetch_add(&w->refcnt, 1); }

void cddp_work_decref(cddp_work *w)
{
    if (w && atomic_fetch_sub(&w->refcnt, 1) == 1) {
        free(w->a.iblk);
        free(w->a.oblk);
        free(w);
    }
}

int cddp_work_state(cddp_work *w)
{
    int s;
    pthread_mutex_lock(&w->pg->mu);
    s = w->state;
    pthread_mutex_unlock(&w->pg->mu);
    return s;
}

int cddp_work_wait(cddp_work *w, double timeout_s)
{
    cddp_pg *pg = w->pg;
    struct timespec ts;
    int rc;
    clock_gettime(CLOCK_REALTIME, &ts);       /* condvars default to the realtime clock */
    if (timeout_s >= 0) {
        double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + timeout_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&pg->mu);
    while (w->state < CDDP_WORK_DONE) {
        if (timeout_s < 0)
            pthread_cond_wait(&pg->cv_done, &pg->mu);
        else if (pthread_cond_timedwait(&pg->cv_done, &pg->mu, &ts) == ETIMEDOUT)
            break;
    }
    rc = w->state == CDDP_WORK_DONE ? 0 : w->state == CDDP_WORK_FAILED ? -1 : 1;
    pthread_mutex_unlock(&pg->mu);
    return rc;
}

/* Mark w finished (failed when w->err is set) and wake waiters. */
static void work_complete(cddp_pg *pg, cddp_work *w)
{
    pthread_mutex_lock(&pg->mu);
    w->state = w->err[0] ? CDDP_WORK_FAILED : CDDP_WORK_DONE;
    pthread_cond_broadcast(&pg->cv_done);
    pthread_mutex_unlock(&pg->mu);
}

static void work_fail_now(cddp_pg *pg, cddp_work *w, int kind, const char *msg)
{
    w->err_kind = kind;
    cddp_pg_seterr(w->err, "%s", msg);
    work_complete(pg, w);
}

static int is_p2p(const cddp_work *w) { return w->a.op == CDDP_PG_SEND || w->a.op == CDDP_PG_RECV; }

/* ---- running ops --------------------------------------------------------------------- */

/* Run one collective on the calling thread (worker or inline caller). */
static void run_collective(cddp_pg *pg, cddp_work *w)
{
    if (atomic_load(&pg->broken)) {
        pthread_mutex_lock(&pg->mu);
        snprintf(w->err, CDDP_PG_ERRLEN, "%s #%lld: the process group failed earlier: %.400s",
                 cddp_pg_op_name[w->a.op], (long long)w->seq, pg->broken_msg);
        pthread_mutex_unlock(&pg->mu);
        work_complete(pg, w);
        return;
    }
    w->t_start = cddp_pg_now();
    if (pg->ops->run(pg, w) < 0 && !w->err[0])
        snprintf(w->err, CDDP_PG_ERRLEN, "%s #%lld failed", cddp_pg_op_name[w->a.op],
                 (long long)w->seq);
    work_complete(pg, w);
}

/* Start a send/recv; 0 in flight, -1 failed (completed). */
static int p2p_begin(cddp_pg *pg, cddp_work *w)
{
    if (atomic_load(&pg->broken)) {
        char pre[96];
        cddp_pg_op_prefix(w, pre, sizeof pre);
        pthread_mutex_lock(&pg->mu);
        snprintf(w->err, CDDP_PG_ERRLEN, "%s: the process group failed earlier: %.360s", pre,
                 pg->broken_msg);
        pthread_mutex_unlock(&pg->mu);
        work_complete(pg, w);
        return -1;
    }
    w->t_start = cddp_pg_now();
    if (w->a.root != CDDP_PG_ANY && pg->ops->p2p_start(pg, w) < 0) {
        work_complete(pg, w);
        return -1;
    }
    return 0;
}

/* Progress of one send/recv; a recv from any sender first waits for a matching message. */
static int p2p_step(cddp_pg *pg, cddp_work *w)
{
    if (w->a.root == CDDP_PG_ANY) {
        int j = pg->ops->p2p_probe(pg, w);
        if (j < 0)
            return j == -1 ? 0 : -1;
        w->a.root = j;
        if (pg->ops->p2p_start(pg, w) < 0)
            return -1;
    }
    return pg->ops->p2p_progress(pg, w);
}

/* Drive `first` and every send/recv queued behind it until all have finished. Called with
 * pg->executing set and pg->mu unlocked. Consumes the worker's reference of each work. */
static void p2p_loop(cddp_pg *pg, cddp_work *first)
{
    cddp_work **act = NULL;
    int nact = 0, cap = 0;
    cddp_work *w = first;
    for (;;) {
        if (w) {
            if (nact == cap) {
                cddp_work **n2 = realloc(act, sizeof *act * (size_t)(cap ? 2 * cap : 8));
                if (!n2) {
                    work_fail_now(pg, w, CDDP_ERR_RUNTIME, "out of memory");
                    cddp_work_decref(w);
                    w = NULL;
                    continue;
                }
                act = n2;
                cap = cap ? 2 * cap : 8;
            }
            if (p2p_begin(pg, w) == 0)
                act[nact++] = w;
            else
                cddp_work_decref(w);
            w = NULL;
        }
        int progressed = 0;
        double now = cddp_pg_now();
        for (int i = 0; i < nact; i++) {
            cddp_work *x = act[i];
            int r = p2p_step(pg, x);
            int stopped = r == 0 && (cddp_pg_aborting(pg) || cddp_pg_interrupted(x));
            if (stopped || (r == 0 && now - x->t_start > pg->timeout_s)) {
                char pre[96];
                cddp_pg_op_prefix(x, pre, sizeof pre);
                if (stopped) {
                    cddp_pg_seterr(x->err, "%s: process group was shut down or interrupted",
                                   pre);
                } else {
                    x->err_kind = CDDP_ERR_TIMEOUT;
                    cddp_pg_seterr(x->err, "%s (tag %d): timed out after %.1f s", pre,
                                   x->a.tag, pg->timeout_s);
                }
                r = -1;
            }
            if (r != 0) {
                if (r < 0)
                    pg->ops->p2p_cancel(pg, x);
                work_complete(pg, x);
                cddp_work_decref(x);
                act[i--] = act[--nact];
                progressed = 1;
            }
        }
        atomic_store(&pg->n_p2p_active, nact);
        /* take more send/recv from the queue head; a collective waits for these to finish */
        pthread_mutex_lock(&pg->mu);
        if (pg->head && is_p2p(pg->head)) {
            w = pg->head;
            pg->head = w->next;
            if (!pg->head) pg->tail = NULL;
            w->state = CDDP_WORK_RUNNING;
        }
        pthread_mutex_unlock(&pg->mu);
        if (w)
            continue;
        if (nact == 0)
            break;
        if (!progressed)
            pg->ops->p2p_wait(pg, 0.002);
    }
    atomic_store(&pg->n_p2p_active, 0);
    free(act);
}

/* The worker: pop, run, complete, in issue order. Keeps draining after stop is requested;
 * leaves once the queue is empty (shutdown sets abort if draining takes too long). */
static void *worker_main(void *arg)
{
    cddp_pg *pg = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);   /* signals belong to Python's main thread */
    pthread_mutex_lock(&pg->mu);
    for (;;) {
        while (!(pg->head && !pg->executing) && !(pg->stop && !pg->head && !pg->executing))
            pthread_cond_wait(&pg->cv_work, &pg->mu);
        if (!pg->head)
            break;
        cddp_work *w = pg->head;
        pg->head = w->next;
        if (!pg->head) pg->tail = NULL;
        w->state = CDDP_WORK_RUNNING;
        pg->executing = 1;
        pthread_mutex_unlock(&pg->mu);
        if (is_p2p(w)) {
            p2p_loop(pg, w);
        } else {
            run_collective(pg, w);
            cddp_work_decref(w);
        }
        pthread_mutex_lock(&pg->mu);
        pg->executing = 0;
        pthread_cond_broadcast(&pg->cv_done);
    }
    pthread_mutex_unlock(&pg->mu);
    return NULL;
}

/* ---- submit -------------------------------------------------------------------------- */

static int validate(cddp_pg *pg, const cddp_pg_args *a, char *err)
{
    if (a->op < 0 || a->op >= CDDP_PG_NOPS) {
        cddp_pg_seterr(err, "unknown process-group op %d", a->op);
        return -1;
    }
    if (a->dtype < 0 || a->dtype >= CDDP_PG_NDTYPES) {
        cddp_pg_seterr(err, "%s: unsupported dtype %d", cddp_pg_op_name[a->op], a->dtype);
        return -1;
    }
    if (a->count < 0) {
        cddp_pg_seterr(err, "%s: negative element count %lld", cddp_pg_op_name[a->op],
                       (long long)a->count);
        return -1;
    }
    if (a->op == CDDP_PG_RECV && a->root == CDDP_PG_ANY && !pg->ops->p2p_probe) {
        cddp_pg_seterr(err, "recv from any rank: the %s transport needs the sender's rank (src=)",
                       pg->ops->name);
        return -1;
    }
    if ((cddp_pg_uses_root(a->op) || is_p2p(&(cddp_work){.a = *a})) &&
        (a->root < 0 || a->root >= pg->size) &&
        !(a->op == CDDP_PG_RECV && a->root == CDDP_PG_ANY)) {
        cddp_pg_seterr(err, "%s: rank %d is out of range for a group of size %d",
                       cddp_pg_op_name[a->op], a->root, pg->size);
        return -1;
    }
    if ((a->op == CDDP_PG_SEND || a->op == CDDP_PG_RECV) && a->root == pg->rank) {
        cddp_pg_seterr(err, "Invalid destination rank: should not be the same as the rank of "
                       "the current process.");
        return -1;
    }
    if (cddp_pg_uses_redop(a->op)) {
        if (a->redop < 0 || a->redop >= CDDP_RED_NOPS) {
            cddp_pg_seterr(err, "%s: unknown reduce op %d", cddp_pg_op_name[a->op], a->redop);
            return -1;
        }
        if (a->redop >= CDDP_RED_BAND && cddp_pg_dtype_floating(a->dtype)) {
            cddp_pg_seterr(err, "Cannot use ReduceOp.%s with non-integral dtype %s",
                           cddp_pg_redop_name[a->redop], cddp_pg_dtype_name[a->dtype]);
            return -1;
        }
        if (a->redop == CDDP_RED_AVG && !cddp_pg_dtype_floating(a->dtype)) {
            cddp_pg_seterr(err, "ReduceOp.AVG needs a floating-point tensor, got %s",
                           cddp_pg_dtype_name[a->dtype]);
            return -1;
        }
    }
    if (a->op == CDDP_PG_ALLTOALL && a->count % pg->size) {
        cddp_pg_seterr(err, "all_to_all: %lld elements do not split evenly across %d ranks",
                       (long long)a->count, pg->size);
        return -1;
    }
    return 0;
}

cddp_work *cddp_pg_submit(cddp_pg *pg, const cddp_pg_args *a, int allow_inline)
{
    return cddp_pg_submit_ex(pg, a, allow_inline, NULL, NULL);
}

cddp_work *cddp_pg_submit_ex(cddp_pg *pg, const cddp_pg_args *a, int allow_inline,
                             int (*intr)(void *ctx), void *intr_ctx)
{
    cddp_work *w = calloc(1, sizeof *w);
    if (!w) {
        free(a->iblk);
        free(a->oblk);
        return NULL;
    }
    atomic_init(&w->refcnt, 2);       /* the caller's and the executor's */
    w->pg = pg;
    w->a = *a;
    if (validate(pg, a, w->err) < 0) {
        w->err_kind = CDDP_ERR_VALUE;
        w->state = CDDP_WORK_FAILED;
        atomic_store(&w->refcnt, 1);
        return w;
    }
    if (getpid() != pg->owner_pid) {
        snprintf(w->err, CDDP_PG_ERRLEN, "%s: this process group belongs to pid %d; a forked "
                 "child cannot use it", cddp_pg_op_name[a->op], pg->owner_pid);
        w->state = CDDP_WORK_FAILED;
        atomic_store(&w->refcnt, 1);
        return w;
    }
    pthread_mutex_lock(&pg->mu);
    if (!is_p2p(w))
        w->seq = ++pg->coll_seq;
    if (pg->stop) {
        snprintf(w->err, CDDP_PG_ERRLEN, "%s: the process group has been destroyed",
                 cddp_pg_op_name[a->op]);
        w->state = CDDP_WORK_FAILED;
        atomic_store(&w->refcnt, 1);
        pthread_mutex_unlock(&pg->mu);
        return w;
    }
    if (allow_inline && !pg->head && !pg->executing) {
        pg->executing = 1;
        w->state = CDDP_WORK_RUNNING;
        w->intr = intr;
        w->intr_ctx = intr_ctx;
        w->intr_last = cddp_pg_now();
        pthread_mutex_unlock(&pg->mu);
        if (is_p2p(w)) {
            p2p_loop(pg, w);
        } else {
            run_collective(pg, w);
            cddp_work_decref(w);
        }
        pthread_mutex_lock(&pg->mu);
        pg->executing = 0;
        if (pg->head || pg->stop)
            pthread_cond_signal(&pg->cv_work);
        pthread_cond_broadcast(&pg->cv_done);
        pthread_mutex_unlock(&pg->mu);
        return w;
    }
    if (pg->tail)
        pg->tail->next = w;
    else
        pg->head = w;
    pg->tail = w;
    pthread_cond_signal(&pg->cv_work);
    pthread_mutex_unlock(&pg->mu);
    if (atomic_load(&pg->n_p2p_active))
        pg->ops->doorbell(pg);      /* a p2p loop sleeping on the transport: look at the queue */
    return w;
}

/* ---- lifetime ------------------------------------------------------------------------ */

cddp_pg *cddp_pg_create(const cddp_pg_info *info, char *err)
{
    cddp_pg *pg = calloc(1, sizeof *pg);
    int n = info->size;
    if (!pg) {
        cddp_pg_seterr(err, "out of memory");
        return NULL;
    }
    pg->rank = info->rank;
    pg->size = n;
    pg->timeout_s = info->timeout_s > 0 ? info->timeout_s : 1800.0;
    pg->transport = info->transport;
    pg->owner_pid = (int)getpid();
    pg->ops = info->transport == CDDP_PG_SHM    ? &cddp_pg_shm_ops
              : info->transport == CDDP_PG_HIER ? &cddp_pg_hier_ops
              : info->transport == CDDP_PG_EXT  ? info->ext_ops
                                                : &cddp_pg_tcp_ops;
    snprintf(pg->group_name, sizeof pg->group_name, "%s", info->group_name);
    pthread_mutex_init(&pg->mu, NULL);
    pthread_cond_init(&pg->cv_work, NULL);
    pthread_cond_init(&pg->cv_done, NULL);
    pg->pids = calloc((size_t)n, sizeof(int));
    pg->pidfds = malloc((size_t)n * sizeof(int));
    pg->local = calloc((size_t)n, 1);
    if (!pg->pids || !pg->pidfds || !pg->local) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;
    }
    for (int r = 0; r < n; r++) {
        pg->pids[r] = info->pids[r];
        pg->local[r] = info->local[r];
        pg->pidfds[r] = -1;
        if (r != info->rank && info->local[r])
            pg->pidfds[r] = (int)syscall(SYS_pidfd_open, info->pids[r], 0);
        /* ESRCH: already gone — kill(pid, 0) says so too; ENOSYS/EPERM: kill() fallback */
    }
    if (!pg->ops) {
        cddp_pg_seterr(err, "external transport without an ops table");
        goto fail;
    }
    if (pg->ops->init(pg, info, err) < 0)
        goto fail;
    if (pthread_create(&pg->thread, NULL, worker_main, pg) != 0) {
        cddp_pg_seterr(err, "could not start the process group's worker thread");
        pg->ops->fini(pg);
        goto fail;
    }
    pg->thread_started = 1;
    return pg;
fail:
    pg->tr = NULL;
    cddp_pg_destroy(pg);
    return NULL;
}

cddp_pg *cddp_pg_sub_create(cddp_pg *parent, const int *members, int nm, const char *shm_name,
                            char *err)
{
    cddp_pg *pg = calloc(1, sizeof *pg);
    cddp_pg_info info = {0};
    if (!pg) {
        cddp_pg_seterr(err, "out of memory");
        return NULL;
    }
    pg->size = nm;
    pg->timeout_s = parent->timeout_s;
    pg->transport = CDDP_PG_SHM;
    pg->owner_pid = parent->owner_pid;
    pg->ops = &cddp_pg_shm_ops;
    pg->parent = parent;
    pthread_mutex_init(&pg->mu, NULL);
    pthread_cond_init(&pg->cv_work, NULL);
    pthread_cond_init(&pg->cv_done, NULL);
    pg->pids = calloc((size_t)nm, sizeof(int));
    pg->pidfds = malloc((size_t)nm * sizeof(int));
    pg->local = calloc((size_t)nm, 1);
    pg->gname = malloc((size_t)nm * sizeof(int));
    if (!pg->pids || !pg->pidfds || !pg->local || !pg->gname) {
        cddp_pg_seterr(err, "out of memory");
        goto fail;
    }
    for (int j = 0; j < nm; j++) {
        int g = members[j];
        if (g == parent->rank)
            pg->rank = j;
        pg->gname[j] = g;
        pg->pids[j] = parent->pids[g];
        pg->local[j] = 1;
        pg->pidfds[j] = g == parent->rank ? -1 : (int)syscall(SYS_pidfd_open, pg->pids[j], 0);
    }
    snprintf(pg->group_name, sizeof pg->group_name, "%.100s.host", parent->group_name);
    info.rank = pg->rank;
    info.size = nm;
    info.timeout_s = pg->timeout_s;
    info.transport = CDDP_PG_SHM;
    info.pids = pg->pids;
    info.local = pg->local;
    info.listen_fd = -1;
    snprintf(info.shm_name, sizeof info.shm_name, "%s", shm_name);
    if (pg->ops->init(pg, &info, err) < 0)
        goto fail;
    return pg;
fail:
    pg->tr = NULL;
    cddp_pg_destroy(pg);
    return NULL;
}

/* Stop accepting work, let queued work finish for up to the group timeout (torch's gloo also
 * drains its queue on destruction), then abort whatever still runs and join the worker. */
static void shutdown_drain(cddp_pg *pg, double drain_s)
{
    struct timespec ts;
    if (pg->owner_pid && getpid() != pg->owner_pid)
        return;                 /* forked child: the thread is not ours, locks may be held */
    pthread_mutex_lock(&pg->mu);
    if (pg->stop) {
        pthread_mutex_unlock(&pg->mu);
        return;
    }
    pg->stop = 1;
    pthread_cond_signal(&pg->cv_work);
    clock_gettime(CLOCK_REALTIME, &ts);
    {
        double t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + drain_s;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    }
    while ((pg->head || pg->executing) && drain_s > 0)
        if (pthread_cond_timedwait(&pg->cv_done, &pg->mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&pg->mu);
    atomic_store(&pg->abort, 1);
    if (pg->tr)
        pg->ops->doorbell(pg);
    if (pg->thread_started) {
        pthread_join(pg->thread, NULL);
        pg->thread_started = 0;
    }
    /* an inline caller on another thread sees abort at its next check; bounded, in case the
     * caller is this very thread (a signal handler shutting the group down mid-op) */
    pthread_mutex_lock(&pg->mu);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 10;
    while (pg->executing)
        if (pthread_cond_timedwait(&pg->cv_done, &pg->mu, &ts) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&pg->mu);
}

/* The transport (segment, sockets, the peers' mapped arenas) and the peers' pidfds. Only
 * once nothing runs on the group: stopped, worker joined, no inline caller. */
static void release_transport(cddp_pg *pg)
{
    if (pg->tr)
        pg->ops->fini(pg);
    pg->tr = NULL;
    if (pg->pidfds)
        for (int r = 0; r < pg->size; r++)
            if (pg->pidfds[r] >= 0) {
                close(pg->pidfds[r]);
                pg->pidfds[r] = -1;
            }
}

void cddp_pg_shutdown(cddp_pg *pg, double drain_s)
{
    int idle;
    if (!pg)
        return;
    shutdown_drain(pg, drain_s < 0 ? pg->timeout_s : drain_s);
    if (pg->owner_pid && getpid() != pg->owner_pid)
        return;
    /* a stopped group refuses new work, so the transport can go now rather than when the
     * Python object dies — which a reference cycle (DDP's hooks and reducer hold the group)
     * can put off until a garbage collection */
    pthread_mutex_lock(&pg->mu);
    idle = !pg->executing;
    pthread_mutex_unlock(&pg->mu);
    if (idle)
        release_transport(pg);
}

void cddp_pg_destroy(cddp_pg *pg)
{
    if (!pg)
        return;
    if (pg->owner_pid && getpid() != pg->owner_pid)
        return;                 /* forked child: leave the parent's group alone (leaks a little) */
    shutdown_drain(pg, 0);
    release_transport(pg);
    free(pg->pids);
    free(pg->pidfds);
    free(pg->local);
    free(pg->gname);
    pthread_mutex_destroy(&pg->mu);
    pthread_cond_destroy(&pg->cv_work);
    pthread_cond_destroy(&pg->cv_done);
    free(pg);
}
