/* distributed/mpi/mpi_transport.h — the process-group engine's transport over the MPI C API
 * (pure C + mpi.h, no Python.h), built into cddp._mpi only when an MPI library is found at
 * build time. The engine (cddp._C: distributed/pg/engine.c) runs it as a CDDP_PG_EXT
 * transport; the binding (distributed/python/py_mpi.c) initialises MPI and hands the table
 * and a communicator over in a "cddp.pg_ext" capsule.
 *
 * Mirrors: c10d::ProcessGroupMPI (torch's backend="mpi"): rank and size from the
 * communicator, one op at a time per group on its worker thread, MPI_Comm_split subgroups.
 *
 *   group creation:  init dups the communicator it is given (collective over its ranks)
 *   every collective: the arrival check, then the data op (mpi_ops.c)
 *   send / recv:      MPI_Isend / MPI_Irecv with the user's tag, driven by MPI_Test
 *
 * Environment knobs (read when a group is created):
 *   CDDP_MPI_CHECK=0      skip the arrival check (no mismatch detection, no timeout; one
 *                         small collective less per op)
 *   CDDP_MPI_BLOCKING=0|1 data ops as non-blocking calls driven by MPI_Test under the
 *                         group's deadline (0), or as the blocking calls of the MPI library's
 *                         tuned collectives (1, the default: faster in Open MPI 4.1, whose
 *                         non-blocking collectives use slower generic algorithms)
 */
#ifndef CDDP_MPI_TRANSPORT_H
#define CDDP_MPI_TRANSPORT_H

#include "distributed/pg/pg.h"

#include <mpi.h>

/* What init takes (cddp_pg_info.ext_arg): the communicator to dup for the group. */
typedef struct {
    MPI_Comm comm;
} cddp_mpi_arg;

/* The transport's state (pg->tr). */
typedef struct {
    MPI_Comm comm;             /* the group's own duplicate */
    int rank, size;
    int blocking, check;       /* CDDP_MPI_BLOCKING, CDDP_MPI_CHECK */
    int64_t *hdr;              /* [24] arrival check: mine (12) and the reduced (12); a
                                  request that never completed keeps it (leaked on purpose) */
    char *scratch;             /* staging of blocked buffers (lists of tensors) */
    size_t scratch_cap;
} cddp_mpi_t;

extern const cddp_pg_transport_ops cddp_mpi_ops;

/* The binding says how MPI was initialised: serialized = 1 when the library gave only
 * MPI_THREAD_SERIALIZED (then every MPI call of the transport takes one process-wide lock and
 * data ops are non-blocking, so a waiting group never holds the lock). */
void cddp_mpi_set_serialized(int serialized);
/* Lock / unlock around MPI calls made outside the transport (the binding's comm splits). */
void cddp_mpi_lock(void);
void cddp_mpi_unlock(void);

/* ---- distributed/mpi/mpi_ops.c: the collectives ----------------------------------------- */

/* The MPI datatype / reduce op of a cddp dtype / ReduceOp (AVG reduces as SUM). */
MPI_Datatype cddp_mpi_dtype(int dtype);
MPI_Op cddp_mpi_redop(int redop, int dtype);
/* One collective's data movement after the arrival check. 0, or -1 with w->err set. */
int cddp_mpi_collective(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w);
/* Complete request *q under the op's deadline, the group's shutdown and Ctrl-C: 0, or -1
 * (w->err; a request that cannot complete is left to MPI and the group is broken). */
int cddp_mpi_wait(cddp_pg *pg, cddp_mpi_t *t, cddp_work *w, MPI_Request *q, const char *what);
/* w->err from an MPI error code of call `what`; marks the group broken; -1. */
int cddp_mpi_fail(cddp_pg *pg, cddp_work *w, int rc, const char *what);
/* Grow t->scratch to at least `bytes`: 0, or -1 (w->err). */
int cddp_mpi_scratch(cddp_mpi_t *t, cddp_work *w, size_t bytes);

#endif
