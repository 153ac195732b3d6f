/* core/arena.c — the shared arena: one memfd per process, mapped MAP_SHARED, from which the
 * block cache (core/storage.c) serves large blocks while a DDP backward is under way, so the
 * other ranks of a shared-memory process group on this host can map the same pages and
 * all-reduce a gradient where it lies (distributed/pg/shm.c, the zero-copy all_reduce).
 *
 * Mirrors: NCCL's registered user buffers and Open MPI's single-copy paths (XPMEM, CMA);
 * torch's gloo copies every buffer through its own.
 *
 * Why a separate arena and not every large block: a DataLoader worker forked from the
 * training process must keep torch's copy-on-write view of the parent's tensors, and a
 * MAP_SHARED block would leak the child's writes back. Only the blocks a DDP backward
 * allocates (gradients and their temporaries, while the engine runs an armed backward) come
 * from here, and a fork child stops using the arena (pthread_atfork handler below). Those
 * gradients stay shared with a child forked while they live (documented in DDP's docs).
 *
 * Reserve: CDDP_SHM_ARENA_GB (default 64; 0 disables the arena) of address space, mapped
 * MAP_NORESERVE: a page costs memory only once touched, and cddp_arena_hollow gives pages
 * back (the addresses stay, for the next block of the same size class). Addresses are
 * handed out by bumping a cursor and never returned: storage.c keeps every arena block on
 * its class's free list.
 *
 * The first 4 KiB hold a random token a peer compares after mapping, so a pid reused by
 * another process (or another pid namespace) cannot pass for this one.
 *
 * Threads: take and hollow run with the GIL (storage.c's cache); init runs in a process
 * group's constructor, without it (a mutex; `state` is published last); cddp_arena_offset
 * runs on the process group's worker thread too and reads only fields fixed before `state`.
 */
#include "common/arena.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/mman.h>
#include <unistd.h>

static struct {
    int fd;                       /* the memfd, kept open: peers open it by /proc path */
    char *base;
    size_t size, top;             /* reserved bytes; first never-handed-out byte */
    uint64_t token;               /* also the arena's first 8 bytes */
    atomic_int state;             /* 0 not tried, 1 ready, -1 unavailable */
    int atfork;                   /* handler registered */
} arena = {.fd = -1};

static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;

int cddp_arena_scope;
int cddp_arena_armed;

/* A fork child keeps the parent's arena mapped (its tensors live there) but must not hand
 * out or hollow those pages: they are the parent's too. It may build an arena of its own. */
static void arena_fork_child(void)
{
    if (arena.fd >= 0)
        close(arena.fd);
    arena.fd = -1;
    arena.base = NULL;
    arena.size = arena.top = 0;
    atomic_store(&arena.state, 0);
    cddp_arena_scope = 0;
    cddp_arena_armed = 0;
    pthread_mutex_init(&arena_lock, NULL);
}

static int arena_create(void)
{
    const char *e = getenv("CDDP_SHM_ARENA_GB");
    size_t gb = e && *e ? (size_t)strtoull(e, NULL, 10) : 64;
    void *m;
    if (!arena.atfork && pthread_atfork(NULL, NULL, arena_fork_child) == 0)
        arena.atfork = 1;
    if (!gb || gb > ((size_t)1 << 16) || !arena.atfork ||
        getrandom(&arena.token, sizeof arena.token, 0) != (ssize_t)sizeof arena.token)
        return -1;
    arena.size = gb << 30;
    arena.fd = memfd_create("cddp-arena", MFD_CLOEXEC);
    if (arena.fd < 0)
        return -1;
    if (ftruncate(arena.fd, (off_t)arena.size) < 0)
        goto fail;
    m = mmap(NULL, arena.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, arena.fd, 0);
    if (m == MAP_FAILED)
        goto fail;
    arena.base = m;
    memcpy(arena.base, &arena.token, sizeof arena.token);
    arena.top = 4096;
    return 0;
fail:
    close(arena.fd);
    arena.fd = -1;
    arena.size = 0;
    return -1;
}

int cddp_arena_init(void)
{
    int st = atomic_load(&arena.state);
    if (!st) {
        pthread_mutex_lock(&arena_lock);
        st = atomic_load(&arena.state);
        if (!st) {
            st = arena_create() == 0 ? 1 : -1;
            atomic_store(&arena.state, st);
        }
        pthread_mutex_unlock(&arena_lock);
    }
    return st > 0 ? 0 : -1;
}

void *cddp_arena_take(size_t bytes)
{
    size_t b = (bytes + 4095) & ~(size_t)4095;
    void *p;
    if (atomic_load_explicit(&arena.state, memory_order_relaxed) <= 0 ||
        b > arena.size - arena.top)
        return NULL;
    p = arena.base + arena.top;
    arena.top += b;
    return p;
}

int cddp_arena_owns(const void *p, size_t n)
{
    return cddp_arena_offset(p, n) >= 0;
}

int64_t cddp_arena_offset(const void *p, size_t n)
{
    const char *c = p;
    if (atomic_load(&arena.state) <= 0 || c < arena.base || n > arena.size ||
        (size_t)(c - arena.base) > arena.size - n)
        return -1;
    return (int64_t)(c - arena.base);
}

void cddp_arena_hollow(void *p, size_t bytes)
{
    if (cddp_arena_owns(p, bytes))
        madvise(p, bytes, MADV_REMOVE);  /* advice: a refusal keeps the pages, nothing else */
}

int cddp_arena_fd(void) { return atomic_load(&arena.state) > 0 ? arena.fd : -1; }
size_t cddp_arena_size(void) { return atomic_load(&arena.state) > 0 ? arena.size : 0; }
uint64_t cddp_arena_token(void) { return atomic_load(&arena.state) > 0 ? arena.token : 0; }
