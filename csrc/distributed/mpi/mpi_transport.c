/* distributed/mpi/mpi_transport.c — the process-group engine's transport over MPI: the group's
 * communicator, the arrival check every collective starts with, send / recv, waiting under a
 * deadline, and the transport table cddp._mpi hands to the engine (distributed/mpi/
 * mpi_transport.h says what each file does and which knobs there are).
 *
 * Mirrors: c10d::ProcessGroupMPI — with the checks torch's MPI backend lacks.
 *
 * Arrival check (the CPU backend's header exchange, on MPI): one non-blocking MPI_Iallreduce
 * of the op's header h (sequence number, op, dtype, count, root, reduce op) and of -h under
 * MPI_MAX, driven by MPI_Test under the group's deadline. Every rank learns at once whether
 * all headers agree (max h == h == -max(-h)); when they do not, an all-gather of the headers
 * gives every rank the CPU backend's message naming the first rank that differs, and no data
 * moves (the communicator stays usable). It is also what turns "a rank never calls the
 * collective" into a timeout instead of a hang: MPI's blocking collectives have no deadline.
 *
 * Where MPI does not let a wait end: a data op that already started (all ranks arrived) runs
 * to its end; if a peer dies inside it, Open MPI's runtime (mpirun / srun) kills the whole job
 * and reports the rank. A timed-out or interrupted request cannot be cancelled (MPI forbids it
 * for collectives): the group is then broken and its buffers are left to MPI.
 */
#include "distributed/mpi/mpi_transport.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_serialized;

void cddp_mpi_set_serialized(int serialized) { g_serialized = serialized; }
void cddp_mpi_lock(void) { if (g_serialized) pthread_mutex_lock(&g_mu); }
void cddp_mpi_unlock(void) { if (g_serialized) pthread_mutex_unlock(&g_mu); }

/* ---- errors and waiting -------------------------------------------------------------- */

int cddp_mpi_fail(cddp_pg *pg, cddp_work *w, int rc, const char *what)
{
    char pre[96], msg[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len > 0 && len <= MPI_MAX_ERROR_STRING ? len : 0] = 0;
    cddp_pg_op_prefix(w, pre, sizeof pre);
    cddp_pg_seterr(w->err, "%s: %s failed: %s", pre, what, msg);
    cddp_pg_mark_broken(pg, w->err);
    return -1;
}

int cddp_mpi_wait(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w, MPI_Request *q, const char *what)
{
    char pre[96];
    unsigned long spins = 0;
    for (;;) {
        int done = 0, rc;
        cddp_mpi_lock();
        rc = MPI_Test(q, &done, MPI_STATUS_IGNORE);
        cddp_mpi_unlock();
        if (rc != MPI_SUCCESS)
            return cddp_mpi_fail(pg, w, rc, what);
        if (done)
            return 0;
        if ((++spins & 127) == 0) {
            cddp_pg_op_prefix(w, pre, sizeof pre);
            if (cddp_pg_aborting(pg) || cddp_pg_interrupted(w)) {
                cddp_pg_seterr(w->err, "%s: process group was shut down or interrupted while "
                               "%s (an MPI request cannot be cancelled: the group is unusable "
                               "from here on)", pre, what);
                cddp_pg_mark_broken(pg, "process group was shut down or interrupted");
                return -1;
            }
            if (cddp_pg_now() - w->t_start > pg->timeout_s) {
                cddp_pg_seterr(w->err, "%s: rank %d timed out after %.1f s %s", pre, pg->rank,
                               pg->timeout_s, what);
                w->err_kind = CDDP_ERR_TIMEOUT;
                cddp_pg_mark_broken(pg, w->err);
                return -1;
            }
        }
        if (spins > 2048)      /* a long wait: let other processes of a busy node run */
            sched_yield();
    }
}

int cddp_mpi_scratch(cddp_mpi_t *t, cddp_work *w, size_t bytes)
{
    if (bytes > t->scratch_cap) {
        char *p = realloc(t->scratch, bytes);
        if (!p) {
            cddp_pg_seterr(w->err, "out of memory (%zu bytes of scratch)", bytes);
            return -1;
        }
        t->scratch = p;
        t->scratch_cap = bytes;
    }
    return 0;
}

/* ---- the arrival check ------------------------------------------------------------------ */

/* Every rank's header, gathered after a mismatch: the CPU backend's message in w->err. */
static int mismatch(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w, const int64_t h[6])
{
    int64_t(*all)[6] = malloc(sizeof *all * (size_t)t->size);
    MPI_Request q;
    int rc;
    if (!all) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    cddp_mpi_lock();
    rc = MPI_Iallgather(h, 6, MPI_INT64_T, all, 6, MPI_INT64_T, t->comm, &q);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS) {
        free(all);
        return cddp_mpi_fail(pg, w, rc, "MPI_Iallgather of the op headers");
    }
    if (cddp_mpi_wait(pg, t, w, &q, "gathering the op headers") < 0)
        return -1;                      /* `all` stays with the pending request */
    if (cddp_pg_check_headers((const int64_t(*)[6])all, t->size, w->err) == 0)
        cddp_pg_seterr(w->err, "%s #%lld: the ranks' op headers differ", cddp_pg_op_name[w->a.op],
                       (long long)w->seq);
    free(all);
    return -1;
}

/* All ranks called the same collective with the same arguments (see the file comment). */
static int arrival_check(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    int64_t h[6], *b;
    MPI_Request q;
    int rc, op = w->a.op;
    cddp_pg_make_header(w, h);
    if (!cddp_pg_uses_root(op))
        h[4] = 0;
    if (!cddp_pg_uses_redop(op))
        h[5] = 0;
    if (op == CDDP_PG_BARRIER)
        h[2] = 0;
    if (!t->hdr && !(t->hdr = malloc(24 * sizeof(int64_t)))) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    b = t->hdr;
    for (int i = 0; i < 6; i++) {
        b[i] = h[i];
        b[6 + i] = -h[i];
    }
    cddp_mpi_lock();
    rc = MPI_Iallreduce(b, b + 12, 12, MPI_INT64_T, MPI_MAX, t->comm, &q);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS)
        return cddp_mpi_fail(pg, w, rc, "MPI_Iallreduce of the op header");
    if (cddp_mpi_wait(pg, t, w, &q, "waiting for the other ranks to call it (MPI does not "
                      "say which rank is missing)") < 0) {
        t->hdr = NULL;                  /* the request may still write it: leave it to MPI */
        return -1;
    }
    for (int i = 0; i < 6; i++)
        if (b[12 + i] != h[i] || -b[18 + i] != h[i])
            return mismatch(pg, t, w, h);
    return 0;
}

/* ---- collectives ---------------------------------------------------------------------- */

static int mpi_run(cddp_pg *pg, cddp_work *w)
{
    cddp_mpi_t *t = pg->tr;
    if (t->size > 1 && t->check && arrival_check(pg, t, w) < 0)
        return -1;
    if (w->a.op == CDDP_PG_BARRIER) {
        if (t->check || t->size == 1)
            return 0;                   /* the arrival check was the barrier */
        MPI_Request q;
        int rc;
        cddp_mpi_lock();
        rc = MPI_Ibarrier(t->comm, &q);
        cddp_mpi_unlock();
        if (rc != MPI_SUCCESS)
            return cddp_mpi_fail(pg, w, rc, "MPI_Ibarrier");
        return cddp_mpi_wait(pg, t, w, &q, "waiting for the other ranks");
    }
    return cddp_mpi_collective(pg, t, w);
}

/* ---- send / recv ---------------------------------------------------------------------- */

typedef struct {
    MPI_Request q;
    int bytes;
} mpi_p2p;

static int mpi_p2p_start(cddp_pg *pg, cddp_work *w)
{
    cddp_mpi_t *t = pg->tr;
    size_t bytes = (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype];
    mpi_p2p *st;
    int rc, *ub = NULL, flag = 0;
    char pre[96];
    cddp_pg_op_prefix(w, pre, sizeof pre);
    MPI_Comm_get_attr(t->comm, MPI_TAG_UB, &ub, &flag);
    if (w->a.tag < 0 || (flag && ub && w->a.tag > *ub)) {
        cddp_pg_seterr(w->err, "%s: tag %d is outside the MPI library's range [0, %d]", pre,
                       w->a.tag, flag && ub ? *ub : 32767);
        return -1;
    }
    if (bytes > INT_MAX) {
        cddp_pg_seterr(w->err, "%s: %zu bytes is more than the MPI backend sends in one message "
                       "(%d)", pre, bytes, INT_MAX);
        return -1;
    }
    if (!(st = calloc(1, sizeof *st))) {
        cddp_pg_seterr(w->err, "out of memory");
        return -1;
    }
    st->bytes = (int)bytes;
    cddp_mpi_lock();
    rc = w->a.op == CDDP_PG_SEND
             ? MPI_Isend(w->a.in, st->bytes, MPI_BYTE, w->a.root, w->a.tag, t->comm, &st->q)
             : MPI_Irecv(w->a.out, st->bytes, MPI_BYTE, w->a.root, w->a.tag, t->comm, &st->q);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS) {
        free(st);
        return cddp_mpi_fail(pg, w, rc, w->a.op == CDDP_PG_SEND ? "MPI_Isend" : "MPI_Irecv");
    }
    w->p2p = st;
    return 0;
}

/* A receive that got another size than asked for: the CPU backend's wording. */
static int p2p_size_error(cddp_mpi_t *t, cddp_work *w, int got)
{
    int j = w->a.root;
    if (got < 0)
        cddp_pg_seterr(w->err, "recv from rank %d: rank %d sent more than the %lld %s elements "
                       "(tag %d) rank %d expected", j, j, (long long)w->a.count,
                       cddp_pg_dtype_name[w->a.dtype], w->a.tag, t->rank);
    else
        cddp_pg_seterr(w->err, "recv from rank %d: rank %d sent %d bytes, rank %d expected %lld "
                       "%s elements (%zu bytes) with tag %d", j, j, got, t->rank,
                       (long long)w->a.count, cddp_pg_dtype_name[w->a.dtype],
                       (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype], w->a.tag);
    return -1;
}

static int mpi_p2p_progress(cddp_pg *pg, cddp_work *w)
{
    cddp_mpi_t *t = pg->tr;
    mpi_p2p *st = w->p2p;
    MPI_Status s;
    int done = 0, rc, cls = 0, got = 0;
    cddp_mpi_lock();
    rc = MPI_Test(&st->q, &done, &s);
    if (rc == MPI_SUCCESS && done && w->a.op == CDDP_PG_RECV)
        MPI_Get_count(&s, MPI_BYTE, &got);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &cls);
        if (cls == MPI_ERR_TRUNCATE || (cls == MPI_ERR_IN_STATUS && s.MPI_ERROR == MPI_ERR_TRUNCATE))
            return p2p_size_error(t, w, -1);
        return cddp_mpi_fail(pg, w, rc, w->a.op == CDDP_PG_SEND ? "MPI_Isend" : "MPI_Irecv");
    }
    if (!done)
        return 0;
    w->p2p = NULL;
    if (w->a.op == CDDP_PG_RECV && got != st->bytes) {
        free(st);
        return p2p_size_error(t, w, got);
    }
    free(st);
    return 1;
}

static void mpi_p2p_cancel(cddp_pg *pg, cddp_work *w)
{
    mpi_p2p *st = w->p2p;
    if (!st)
        return;
    cddp_mpi_lock();
    if (st->q != MPI_REQUEST_NULL) {
        MPI_Cancel(&st->q);
        MPI_Request_free(&st->q);
    }
    cddp_mpi_unlock();
    free(st);
    w->p2p = NULL;
}

/* A recv from any sender: MPI_Iprobe(MPI_ANY_SOURCE) for the tag; MPI's matching then gives
 * the recv bound to that source the probed message (or an earlier one of the same tag). */
static int mpi_p2p_probe(cddp_pg *pg, cddp_work *w)
{
    cddp_mpi_t *t = pg->tr;
    MPI_Status s;
    int flag = 0, rc;
    cddp_mpi_lock();
    rc = MPI_Iprobe(MPI_ANY_SOURCE, w->a.tag, t->comm, &flag, &s);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS) {
        cddp_mpi_fail(pg, w, rc, "MPI_Iprobe");
        return -2;
    }
    return flag ? s.MPI_SOURCE : -1;
}

/* Nothing to sleep on (MPI has no file descriptor to poll): let others run, then the engine
 * tests its requests again. */
static void mpi_p2p_wait(cddp_pg *pg, double max_s) { sched_yield(); }
static void mpi_doorbell(cddp_pg *pg) {}

/* ---- setup ---------------------------------------------------------------------------- */

static void mpi_fini(cddp_pg *pg)
{
    cddp_mpi_t *t = pg->tr;
    int finalized = 1;
    if (!t)
        return;
    MPI_Finalized(&finalized);
    if (!finalized && t->comm != MPI_COMM_NULL) {
        cddp_mpi_lock();
        MPI_Comm_free(&t->comm);        /* local in practice; pending requests keep it alive */
        cddp_mpi_unlock();
    }
    free(t->hdr);
    free(t->scratch);
    free(t);
    pg->tr = NULL;
}

static int env_flag(const char *name, int dflt)
{
    const char *s = getenv(name);
    return s && *s ? strcmp(s, "0") != 0 : dflt;
}

/* Dup the communicator (MPI_Comm_idup under the group's deadline: a rank that never creates
 * the group makes the others time out instead of hang), errors returned, not fatal. */
static int mpi_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
{
    const cddp_mpi_arg *a = info->ext_arg;
    cddp_mpi_t *t = calloc(1, sizeof *t);
    cddp_work w = {.a = {.op = CDDP_PG_BARRIER}};
    MPI_Request q;
    int rc;
    if (!t || !a) {
        free(t);
        cddp_pg_seterr(err, t ? "MPI transport without a communicator" : "out of memory");
        return -1;
    }
    pg->tr = t;
    t->comm = MPI_COMM_NULL;
    w.t_start = cddp_pg_now();
    cddp_mpi_lock();
    rc = MPI_Comm_idup(a->comm, &t->comm, &q);
    cddp_mpi_unlock();
    if (rc != MPI_SUCCESS || cddp_mpi_wait(pg, t, &w, &q, "waiting for every rank to create "
                                           "the group") < 0) {
        if (rc != MPI_SUCCESS)
            cddp_mpi_fail(pg, &w, rc, "MPI_Comm_idup");
        cddp_pg_seterr(err, "%s", strlen(w.err) > 12 ? w.err + 12 : w.err);  /* "barrier #0: " */
        t->comm = MPI_COMM_NULL;        /* a pending idup owns it */
        mpi_fini(pg);
        return -1;
    }
    cddp_mpi_lock();
    MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(t->comm, &t->rank);
    MPI_Comm_size(t->comm, &t->size);
    cddp_mpi_unlock();
    if (t->rank != info->rank || t->size != info->size) {
        cddp_pg_seterr(err, "the MPI communicator has rank %d of %d, the group was asked for "
                       "rank %d of %d", t->rank, t->size, info->rank, info->size);
        mpi_fini(pg);
        return -1;
    }
    t->check = env_flag("CDDP_MPI_CHECK", 1);
    t->blocking = env_flag("CDDP_MPI_BLOCKING", 1) && !g_serialized;
    return 0;
}

const cddp_pg_transport_ops cddp_mpi_ops = {
    .name = "mpi",
    .init = mpi_init,
    .run = mpi_run,
    .p2p_start = mpi_p2p_start,
    .p2p_progress = mpi_p2p_progress,
    .p2p_cancel = mpi_p2p_cancel,
    .p2p_wait = mpi_p2p_wait,
    .p2p_probe = mpi_p2p_probe,
    .doorbell = mpi_doorbell,
    .fini = mpi_fini,
};
