/* distributed/python/py_pg.h — private to the process group's Python binding (not an API):
 *
 *   distributed/python/py_pg.c     ProcessGroupCPU: constructor (store callbacks around the C
 *                                  rendezvous), argument parsing of every op, _pg_types
 *   distributed/python/py_work.c   Work: wait / is_completed / exception / result, the ring of
 *                                  unfinished Work a group keeps, and submit (op -> Work)
 *
 * py_pg.c calls py_work.c; py_work.c only reads the group's fields below.
 *
 * Mirrors: torch/csrc/distributed/c10d/init.cpp's bindings of ProcessGroup and Work, split
 * one file per class as c10d keeps its classes.
 */
#ifndef CDDP_PY_PG_H
#define CDDP_PY_PG_H

#include "module.h"
#include "distributed/pg/pg.h"

typedef struct {
    PyObject_HEAD
    cddp_pg *pg;
    int rank, size, transport;
    double timeout;
    PyObject *name;
    PyObject **pend;                   /* ring of unfinished Work objects (strong refs) */
    Py_ssize_t phead, plen, pcap;
} PGObject;

typedef struct {
    PyObject_HEAD
    cddp_work *w;
    PyObject *pg;
    PyObject *keep;                    /* tuple: tensors the op reads or writes */
    Py_ssize_t rfrom, rcount;          /* result() = list(keep[rfrom:rfrom + rcount]) */
    PyObject *exc;                     /* cached exception instance */
} WorkObject;

/* ---- distributed/python/py_work.c ------------------------------------------------------ */

/* The Work type's spec (cddp_pg_types_init makes the type from it). */
extern PyType_Spec cddp_pypg_work_spec;

/* Seconds from None / a number / a timedelta-like (total_seconds()) into *out; None: -1,
 * negatives: 0. 0, or -1 with an exception set. */
int cddp_pypg_parse_timeout(PyObject *o, double *out);

/* Queue (or, when sync, run and wait for) one op on self's group. `keep` (a tuple of the
 * tensors, or NULL after a failed build: then NULL is returned) is stolen, and so are
 * a->iblk / a->oblk; result() will list keep[rfrom:rfrom + rcount]. Returns the Work, None
 * when sync, or NULL with an exception set (the op's own error for a sync op). */
PyObject *cddp_pypg_submit(PGObject *self, cddp_pg_args *a, PyObject *keep, Py_ssize_t rfrom,
                           Py_ssize_t rcount, int sync);

/* Drop finished Work from the front of self's ring of unfinished Work (all of it: every
 * entry, finished or not — the group is going away). */
void cddp_pypg_sweep(PGObject *self, int all);

#endif
