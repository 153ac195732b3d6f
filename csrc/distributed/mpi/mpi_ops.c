/* distributed/mpi/mpi_ops.c — the data movement of every collective of the MPI backend, once the
 * arrival check passed (distributed/mpi/mpi_transport.c): one MPI call per op, the library's
 * own algorithms doing the work.
 *
 * Mirrors: c10d::ProcessGroupMPI's allreduce / broadcast / reduce / allgather / gather /
 * scatter / reduce_scatter / alltoall, which call the same MPI functions.
 *
 *   all_reduce      MPI_Allreduce(MPI_IN_PLACE)           AVG: SUM, then / size
 *   broadcast       MPI_Bcast
 *   reduce          MPI_Reduce (root in place; others' tensors untouched)
 *   all_gather      MPI_Allgather   (a list of outputs: through scratch)
 *   gather          MPI_Gather      (idem on the root)
 *   scatter         MPI_Scatter     (a list of inputs: through scratch on the root)
 *   reduce_scatter  MPI_Reduce_scatter_block (a list of inputs: through scratch)
 *   all_to_all      MPI_Alltoall
 *
 * Each is the blocking call, or its MPI_I* form driven by cddp_mpi_wait under the group's
 * deadline (CDDP_MPI_BLOCKING=0, and always when MPI gave only MPI_THREAD_SERIALIZED).
 * Element counts: up to INT_MAX per call (MPI-3's int counts); all_reduce, broadcast and
 * reduce are split into calls of at most 2^30 elements beyond that.
 *
 * dtypes: float32 MPI_FLOAT, float64 MPI_DOUBLE, int64 MPI_INT64_T, int32 MPI_INT32_T, bool
 * MPI_C_BOOL (SUM / MAX / BOR reduce as logical or, PRODUCT / MIN / BAND as and, BXOR as xor:
 * the CPU backend's rules, reduce_kernels.h), uint8/int8/int16 MPI_UINT8_T/INT8_T/INT16_T.
 * float16/bfloat16 travel as MPI_UINT16_T; MPI has no arithmetic for them, so their reductions
 * are user-defined MPI_Ops running the CPU backend's kernel (pg_reduce2: each step in float32,
 * rounded to the dtype), created on first use and kept until MPI_Finalize frees them.
 */
#include "distributed/mpi/mpi_transport.h"
#include "distributed/pg/reduce_kernels.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SPLIT ((int64_t)1 << 30)        /* elements per call of a split all_reduce / bcast */

MPI_Datatype cddp_mpi_dtype(int dtype)
{
    switch (dtype) {
    case 0: return MPI_FLOAT;
    case 1: return MPI_DOUBLE;
    case 2: return MPI_INT64_T;
    case 3: return MPI_INT32_T;
    case 5: case 6: return MPI_UINT16_T;
    case 7: return MPI_UINT8_T;
    case 8: return MPI_INT8_T;
    case 9: return MPI_INT16_T;
    default: return MPI_C_BOOL;
    }
}

/* MPI's user-op signature: inout[i] = in[i] op inout[i] (the ops below commute). */
#define HALF_OP(NAME, DT, OP)                                                             \
    static void NAME(void *in, void *inout, int *len, MPI_Datatype *type)                 \
    {                                                                                     \
        (void)type;                                                                       \
        pg_reduce2(inout, inout, in, *len, DT, OP);                                       \
    }
HALF_OP(f16_sum, 5, CDDP_RED_SUM)
HALF_OP(f16_prod, 5, CDDP_RED_PRODUCT)
HALF_OP(f16_min, 5, CDDP_RED_MIN)
HALF_OP(f16_max, 5, CDDP_RED_MAX)
HALF_OP(bf16_sum, 6, CDDP_RED_SUM)
HALF_OP(bf16_prod, 6, CDDP_RED_PRODUCT)
HALF_OP(bf16_min, 6, CDDP_RED_MIN)
HALF_OP(bf16_max, 6, CDDP_RED_MAX)

/* The user op for a float16 (dtype 5) / bfloat16 (6) reduction; the engine has refused the
 * bitwise ops for floating dtypes before this runs. */
static MPI_Op half_redop(int redop, int dtype)
{
    static MPI_Op made[2][4];
    static int ready[2][4];
    static MPI_User_function *const fn[2][4] = {{f16_sum, f16_prod, f16_min, f16_max},
                                                {bf16_sum, bf16_prod, bf16_min, bf16_max}};
    int j = redop == CDDP_RED_PRODUCT ? 1 : redop == CDDP_RED_MIN ? 2
          : redop == CDDP_RED_MAX ? 3 : 0, d = dtype == 6;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;     /* several groups' threads */
    MPI_Op op = MPI_SUM;
    pthread_mutex_lock(&mu);
    if (!ready[d][j]) {
        cddp_mpi_lock();
        if (MPI_Op_create(fn[d][j], 1, &made[d][j]) == MPI_SUCCESS)
            ready[d][j] = 1;
        cddp_mpi_unlock();
    }
    if (ready[d][j])
        op = made[d][j];
    pthread_mutex_unlock(&mu);
    return op;       /* MPI_SUM on MPI_UINT16_T only if MPI_Op_create failed: MPI then errors */
}

MPI_Op cddp_mpi_redop(int redop, int dtype)
{
    if (dtype == 5 || dtype == 6)
        return half_redop(redop, dtype);
    if (dtype == 4) {
        switch (redop) {
        case CDDP_RED_PRODUCT: case CDDP_RED_MIN: case CDDP_RED_BAND: return MPI_LAND;
        case CDDP_RED_BXOR: return MPI_LXOR;
        default: return MPI_LOR;
        }
    }
    switch (redop) {
    case CDDP_RED_PRODUCT: return MPI_PROD;
    case CDDP_RED_MIN: return MPI_MIN;
    case CDDP_RED_MAX: return MPI_MAX;
    case CDDP_RED_BAND: return MPI_BAND;
    case CDDP_RED_BOR: return MPI_BOR;
    case CDDP_RED_BXOR: return MPI_BXOR;
    default: return MPI_SUM;            /* SUM, AVG */
    }
}

/* A started call: rc from the MPI function; when non-blocking, wait for request q. */
static int finish(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w, int rc, MPI_Request *q,
                  const char *name)
{
    if (rc != MPI_SUCCESS)
        return cddp_mpi_fail(pg, w, rc, name);
    if (t->blocking)
        return 0;
    return cddp_mpi_wait(pg, t, w, q, "waiting for the other ranks' data");
}

static int too_many(cddp_work *w, int64_t n)
{
    if (n <= INT_MAX)
        return 0;
    cddp_pg_seterr(w->err, "%s #%lld: %lld elements per rank is more than the MPI backend moves "
                   "in one call (%d)", cddp_pg_op_name[w->a.op], (long long)w->seq,
                   (long long)n, INT_MAX);
    return 1;
}

/* all_reduce / broadcast / reduce on buf, split in calls of at most SPLIT elements. */
static int rooted_or_all(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    MPI_Datatype T = cddp_mpi_dtype(w->a.dtype);
    MPI_Op op = cddp_mpi_redop(w->a.redop, w->a.dtype);
    size_t es = cddp_pg_dtype_size[w->a.dtype];
    int root = w->a.root, me = t->rank;
    for (int64_t off = 0; off < w->a.count || (off == 0 && w->a.count == 0); off += SPLIT) {
        int n = (int)(w->a.count - off < SPLIT ? w->a.count - off : SPLIT), rc;
        char *p = (char *)w->a.out + (size_t)off * es;
        MPI_Request q = MPI_REQUEST_NULL;
        cddp_mpi_lock();
        switch (w->a.op) {
        case CDDP_PG_ALLREDUCE:
            rc = t->blocking ? MPI_Allreduce(MPI_IN_PLACE, p, n, T, op, t->comm)
                             : MPI_Iallreduce(MPI_IN_PLACE, p, n, T, op, t->comm, &q);
            break;
        case CDDP_PG_BROADCAST:
            rc = t->blocking ? MPI_Bcast(p, n, T, root, t->comm)
                             : MPI_Ibcast(p, n, T, root, t->comm, &q);
            break;
        default:                                                    /* reduce */
            rc = t->blocking
                     ? MPI_Reduce(me == root ? MPI_IN_PLACE : p, me == root ? p : NULL, n, T,
                                  op, root, t->comm)
                     : MPI_Ireduce(me == root ? MPI_IN_PLACE : p, me == root ? p : NULL, n, T,
                                   op, root, t->comm, &q);
        }
        cddp_mpi_unlock();
        if (finish(pg, t, w, rc, &q, cddp_pg_op_name[w->a.op]) < 0)
            return -1;
        if (w->a.count == 0)
            break;
    }
    if (w->a.redop == CDDP_RED_AVG && w->a.op != CDDP_PG_BROADCAST &&
        (w->a.op == CDDP_PG_ALLREDUCE || me == root))
        pg_divide(w->a.out, w->a.count, w->a.dtype, t->size);
    return 0;
}

/* all_gather and gather: rank j's m elements land in block j of the output (through scratch
 * when the output is a list of tensors). */
static int gathers(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    MPI_Datatype T = cddp_mpi_dtype(w->a.dtype);
    size_t blk = (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype];
    int all = w->a.op == CDDP_PG_ALLGATHER, root = w->a.root, m = (int)w->a.count, rc;
    int lands = all || t->rank == root;
    char *out = w->a.out;
    const void *in = w->a.in;
    MPI_Request q = MPI_REQUEST_NULL;
    if (too_many(w, w->a.count))
        return -1;
    if (lands && !w->a.oblk && in == out + (size_t)t->rank * blk && blk)
        in = MPI_IN_PLACE;              /* the input is this rank's own block of the output */
    if (lands && w->a.oblk) {
        if (cddp_mpi_scratch(t, w, blk * (size_t)t->size) < 0)
            return -1;
        out = t->scratch;
    }
    cddp_mpi_lock();
    if (all)
        rc = t->blocking ? MPI_Allgather(in, m, T, out, m, T, t->comm)
                         : MPI_Iallgather(in, m, T, out, m, T, t->comm, &q);
    else
        rc = t->blocking ? MPI_Gather(in, m, T, lands ? out : NULL, m, T, root, t->comm)
                         : MPI_Igather(in, m, T, lands ? out : NULL, m, T, root, t->comm, &q);
    cddp_mpi_unlock();
    if (finish(pg, t, w, rc, &q, cddp_pg_op_name[w->a.op]) < 0)
        return -1;
    if (lands && w->a.oblk)
        for (int j = 0; j < t->size; j++)
            memcpy(w->a.oblk[j], t->scratch + (size_t)j * blk, blk);
    return 0;
}

/* scatter and reduce_scatter: block j of the input goes to (is reduced into) rank j. A list
 * of input tensors is copied into scratch first. */
static int scatters(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    MPI_Datatype T = cddp_mpi_dtype(w->a.dtype);
    MPI_Op op = cddp_mpi_redop(w->a.redop, w->a.dtype);
    size_t blk = (size_t)w->a.count * cddp_pg_dtype_size[w->a.dtype];
    int red = w->a.op == CDDP_PG_REDUCE_SCATTER, root = w->a.root, m = (int)w->a.count, rc;
    int gives = red || t->rank == root;
    char *in = w->a.in;
    MPI_Request q = MPI_REQUEST_NULL;
    if (too_many(w, w->a.count))
        return -1;
    if (gives && w->a.iblk) {
        if (cddp_mpi_scratch(t, w, blk * (size_t)t->size) < 0)
            return -1;
        for (int j = 0; j < t->size; j++)
            memcpy(t->scratch + (size_t)j * blk, w->a.iblk[j], blk);
        in = t->scratch;
    }
    cddp_mpi_lock();
    if (red)
        rc = t->blocking ? MPI_Reduce_scatter_block(in, w->a.out, m, T, op, t->comm)
                         : MPI_Ireduce_scatter_block(in, w->a.out, m, T, op, t->comm, &q);
    else
        rc = t->blocking ? MPI_Scatter(gives ? in : NULL, m, T, w->a.out, m, T, root, t->comm)
                         : MPI_Iscatter(gives ? in : NULL, m, T, w->a.out, m, T, root, t->comm,
                                        &q);
    cddp_mpi_unlock();
    if (finish(pg, t, w, rc, &q, cddp_pg_op_name[w->a.op]) < 0)
        return -1;
    if (red && w->a.redop == CDDP_RED_AVG)
        pg_divide(w->a.out, w->a.count, w->a.dtype, t->size);
    return 0;
}

static int alltoall(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    MPI_Datatype T = cddp_mpi_dtype(w->a.dtype);
    int m = (int)(w->a.count / t->size), rc;
    const void *in = w->a.in == w->a.out ? MPI_IN_PLACE : w->a.in;
    MPI_Request q = MPI_REQUEST_NULL;
    if (too_many(w, w->a.count / t->size))
        return -1;
    cddp_mpi_lock();
    rc = t->blocking ? MPI_Alltoall(in, m, T, w->a.out, m, T, t->comm)
                     : MPI_Ialltoall(in, m, T, w->a.out, m, T, t->comm, &q);
    cddp_mpi_unlock();
    return finish(pg, t, w, rc, &q, "all_to_all");
}

int cddp_mpi_collective(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w)
{
    switch (w->a.op) {
    case CDDP_PG_ALLREDUCE: case CDDP_PG_BROADCAST: case CDDP_PG_REDUCE:
        return rooted_or_all(pg, t, w);
    case CDDP_PG_ALLGATHER: case CDDP_PG_GATHER: return gathers(pg, t, w);
    case CDDP_PG_SCATTER: case CDDP_PG_REDUCE_SCATTER: return scatters(pg, t, w);
    case CDDP_PG_ALLTOALL: return alltoall(pg, t, w);
    default:
        cddp_pg_seterr(w->err, "%s is not a collective", cddp_pg_op_name[w->a.op]);
        return -1;
    }
}
