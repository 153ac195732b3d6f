/* distributed/pg/shm_segment.c — the shared-memory transport's segment: its layout
 * (distributed/pg/shm_internal.h), rank 0 creating it, the other ranks attaching, the name
 * unlinked once every rank has it mapped, and the transport state's init and fini.
 *
 * Mirrors: NCCL's shm transport setup (one named segment per group, opened by every local
 * rank); torch's gloo has no shared-memory transport.
 *
 *   rank 0:   sweep dead creators' segments -> shm_open(O_EXCL) -> flock(LOCK_SH) ->
 *             ftruncate -> mmap -> write the layout -> publish `magic` -> wait (futex on
 *             `attached`) until n - 1 ranks attached -> unlink, drop the lock
 *   others:   shm_open until it exists and `magic` is published -> check the layout -> mmap
 *             -> attached += 1 (the last one unlinks too, in case rank 0 died meanwhile)
 *
 * Every wait has the group's deadline and watches the peers' liveness (pidfd). Called by
 * shm.c's transport table (cddp_pg_shm_ops: init, fini).
 *
 * Note [dead creators' segments]: the name is /cddp-<creator pid>-<tag>. A job SIGKILLed while
 * rank 0 waits for the others to attach leaves the name behind (nothing runs to unlink it), so
 * every creator first sweeps /dev/shm: a cddp-<pid>-* segment whose pid does not exist here
 * and that nobody holds a lock on is removed. The creator's shared flock is what proves it
 * alive (the kernel drops it when the process dies, in any pid namespace); the pid in the name
 * only spares the sweep from opening live segments of its own pid namespace.
 */
#include "distributed/pg/shm_internal.h"
#include "common/arena.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* ---- teardown, create, attach, init ------------------------------------------------------ */

void cddp_shm_fini(cddp_pg *pg)
{
    shm_t *s = pg->tr;
    if (!s)
        return;
    if (s->r == 0 && !s->creator_unlinked && s->lock_fd >= 0)
        shm_unlink(s->name);
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    if (s->base)
        munmap(s->base, s->total);
    for (int j = 0; s->peer_arena && j < s->n; j++)
        if (s->peer_arena[j])
            munmap(s->peer_arena[j], s->peer_arena_size[j]);
    free(s->peer_arena);
    free(s->peer_arena_size);
    free(s->zdst);
    free(s->srcs);
    free(s->tx_next);
    free(s);
    pg->tr = NULL;
}

/* Rank 0, before creating: remove the segments of creators that died before unlinking them
 * (Note [dead creators' segments]). Best effort: whatever cannot be opened is left alone. */
static void sweep_dead_segments(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    if (!d)
        return;
    while ((e = readdir(d))) {
        char name[300], *end;
        long pid;
        int fd;
        if (strncmp(e->d_name, "cddp-", 5) != 0)
            continue;
        pid = strtol(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || *end != '-' || pid <= 0 || pid > INT32_MAX)
            continue;                      /* not this naming scheme */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;                      /* alive here, or someone else's (EPERM) */
        snprintf(name, sizeof name, "/%s", e->d_name);
        if ((fd = shm_open(name, O_RDWR | O_NOFOLLOW, 0)) < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)     /* no creator holds it: garbage */
            shm_unlink(name);
        close(fd);
    }
    closedir(d);
}

/* Rank 0: create, size and describe the segment, then wait until every rank mapped it and
 * unlink the name. The creator holds a shared flock on the segment while its name exists. */
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
    sweep_dead_segments();
    fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        cddp_pg_seterr(err, "shm_open(%s) failed: %s", s->name, strerror(errno));
        return -1;
    }
    s->lock_fd = fd;                     /* fini unlinks the name and closes it from here on */
    if (flock(fd, LOCK_SH) < 0) {
        cddp_pg_seterr(err, "flock of the shared-memory segment failed: %s", strerror(errno));
        return -1;
    }
    if (ftruncate(fd, (off_t)total) < 0) {
        cddp_pg_seterr(err, "could not size the shared-memory segment to %zu bytes: %s "
                       "(is /dev/shm full?)", total, strerror(errno));
        return -1;
    }
    s->base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        cddp_pg_seterr(err, "mmap of the shared-memory segment failed: %s", strerror(errno));
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
    close(s->lock_fd);                   /* no name left to guard */
    s->lock_fd = -1;
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
                    int64_t hsize = h->size;        /* read before any munmap */
                    uint64_t htotal = h->total;
                    if (hsize != s->n || htotal != (uint64_t)stt.st_size) {
                        munmap(b, (size_t)stt.st_size);
                        cddp_pg_seterr(err, "shared-memory segment %s describes a group of %lld "
                                       "ranks in %llu bytes, this rank expects %d ranks (%lld "
                                       "bytes mapped): the ranks disagree on the group's "
                                       "members", s->name, (long long)hsize,
                                       (unsigned long long)htotal, s->n,
                                       (long long)stt.st_size);
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

int cddp_shm_init(cddp_pg *pg, const cddp_pg_info *info, char *err)
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
    s->lock_fd = -1;
    /* the creator's pid in the name: Note [dead creators' segments] */
    snprintf(s->name, sizeof s->name, "/cddp-%d-%.40s", info->pids[0], info->shm_name);
    s->srcs = calloc((size_t)n, sizeof *s->srcs);
    s->tx_next = calloc((size_t)n * 4, sizeof(uint64_t));
    s->peer_arena = calloc((size_t)n, sizeof *s->peer_arena);
    s->peer_arena_size = calloc((size_t)n, sizeof *s->peer_arena_size);
    s->zdst = calloc((size_t)n, sizeof *s->zdst);
    if (!s->srcs || !s->tx_next || !s->peer_arena || !s->peer_arena_size || !s->zdst) {
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
    /* this rank's arena, for the zero-copy all_reduce (shm.c): described before this rank
     * publishes anything, so a peer that saw any of its publications reads it whole */
    ctl(s, s->r)->arena_fd = -1;
    if (cddp_pg_env_size("CDDP_SHM_ZEROCOPY", 1, 0, 1) && cddp_arena_init() == 0) {
        ctl(s, s->r)->arena_size = (int64_t)cddp_arena_size();
        ctl(s, s->r)->arena_token = cddp_arena_token();
        ctl(s, s->r)->arena_fd = cddp_arena_fd();
    }
    return 0;
fail:
    cddp_shm_fini(pg);
    return -1;
}
