/* common/arena.h — the shared arena's interface (implemented by core/arena.c): large blocks
 * other processes on this host can map. Here, not in core/, because both stacks use it: the
 * block cache (core/storage.c) allocates from it, and the shared-memory transport
 * (distributed/pg/shm*.c, pure C, no tensor library) maps the peers' arenas.
 *
 * cddp_arena_armed nonzero (DDP's reducer, from the end of a forward whose backward it will
 * reduce to the end of that iteration): the autograd engine sets cddp_arena_scope while it
 * runs a backward (autograd/engine.c), so the gradients and their temporaries come from the
 * arena, and nothing the user allocates between forward and backward does.
 * cddp_arena_scope nonzero: new cache-path storages come from the arena when it exists
 * (core/storage.c).
 *   init    0 ready, -1 unavailable (no exception; idempotent; thread-safe)
 *   take    fresh zeroed page-aligned bytes, NULL when absent or exhausted (GIL held)
 *   offset  where [p, p+n) lies in this process's arena, -1 outside it (any thread)
 *   owns    offset >= 0
 *   hollow  give the pages of an owned range back: they read as zeros after (GIL held)
 *   fd / size / token   what a peer maps (/proc/<pid>/fd/<fd>, size bytes) and the 8 bytes it
 *           must find at offset 0; -1 / 0 / 0 when there is no arena
 */
#ifndef CDDP_COMMON_ARENA_H
#define CDDP_COMMON_ARENA_H

#include <stddef.h>
#include <stdint.h>

extern int cddp_arena_scope;
extern int cddp_arena_armed;
int cddp_arena_init(void);
void *cddp_arena_take(size_t bytes);
int64_t cddp_arena_offset(const void *p, size_t n);
int cddp_arena_owns(const void *p, size_t n);
void cddp_arena_hollow(void *p, size_t bytes);
int cddp_arena_fd(void);
size_t cddp_arena_size(void);
uint64_t cddp_arena_token(void);

#endif
