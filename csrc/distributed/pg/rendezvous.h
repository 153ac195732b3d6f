/* distributed/pg/rendezvous.h — how the ranks of a new process group find each other through
 * the store, and which transport they then use (pure C, no Python.h).
 *
 * Mirrors: what torch's ProcessGroupGloo constructor does with its store (every rank publishes
 * its address under the group's prefix and reads the others'), plus the transport choice that
 * gloo leaves to its device: shared memory on one host, TCP between hosts.
 *
 *   store = {ctx, add, set, get}              # the binding wraps its Python store object
 *   pg = cddp_pg_rendezvous(&store, &args, err, sizeof err, &kind)
 *
 * Keys, under "cddp/pg/<group_name>/" (torch's prefixing by group):
 *   gen                 add(1) by every rank: the generation, (value - 1) / size, so a group
 *                       created again under the same name gets fresh keys
 *   <gen>/info/<rank>   "pid host boot_id addr port nonce size" (nonce: 16 hex digits); rank
 *                       0's nonce names the group's shared memory and guards the TCP hello;
 *                       a size other than this rank's fails the rendezvous on both sides
 *
 * Transport: CDDP_TRANSPORT (else args.transport) "auto" picks shm when every rank has this
 * host's name and boot id, hier when ranks span hosts and some host holds several, else tcp.
 * CDDP_HOST_ID replaces the host identity (tests simulate hosts on one machine).
 */
#ifndef CDDP_PG_RENDEZVOUS_H
#define CDDP_PG_RENDEZVOUS_H

#include "distributed/pg/pg.h"

/* Room for every rendezvous message: the engine's (CDDP_PG_ERRLEN) behind a prefix naming the
 * group. */
#define CDDP_PG_RDZV_ERRLEN (CDDP_PG_ERRLEN + 512)

/* The store, as rendezvous uses it. Each call returns 0 (get: a value) or -1 (get: NULL) when
 * the store failed; the store then recorded its own error where its owner finds it (the Python
 * binding: a pending exception) and rendezvous stops with CDDP_ERR_STORE. The calls come from
 * the thread that called cddp_pg_rendezvous, which may have released a lock the callbacks
 * retake (the binding releases the GIL around rendezvous; its callbacks take it back). */
typedef struct {
    void *ctx;
    /* key's integer value += delta (a missing key counts as 0); the new value in *value */
    int (*add)(void *ctx, const char *key, int64_t delta, int64_t *value);
    int (*set)(void *ctx, const char *key, const char *value);
    /* key's value once it exists, waiting up to the store's own timeout (torch's Store.get):
     * a malloc'ed NUL-terminated copy the caller frees */
    char *(*get)(void *ctx, const char *key);
} cddp_pg_store;

/* What the caller asks for (ProcessGroupCPU's constructor arguments). */
typedef struct {
    int rank, size;
    double timeout_s;          /* per-op deadline of the group; not > 0: 1800 s */
    const char *group_name;    /* store prefix; the group's name in messages */
    const char *transport;     /* "auto" | "shm" | "tcp" | "hier"; $CDDP_TRANSPORT overrides */
} cddp_pg_rdzv_args;

/* Check the arguments, publish this rank, read every rank's entry (blocking in store->get up to
 * the store's timeout), choose the transport, then create the group (cddp_pg_create: blocking
 * up to the group's timeout while the transport connects). Returns the group, or NULL with a
 * message in err (errlen bytes, CDDP_PG_RDZV_ERRLEN is enough) and *kind saying what failed:
 * CDDP_ERR_VALUE (bad arguments), CDDP_ERR_NOMEM, CDDP_ERR_STORE (a store call failed: its own
 * error stands), CDDP_ERR_RUNTIME (everything else). Nothing is left behind on failure (the
 * listening socket is closed; keys already published stay in the store, as in torch). */
cddp_pg *cddp_pg_rendezvous(const cddp_pg_store *store, const cddp_pg_rdzv_args *args,
                            char *err, size_t errlen, int *kind);

#endif
