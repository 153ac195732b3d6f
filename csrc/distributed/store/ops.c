/* distributed/store/ops.c — the store server's data and requests: the map key -> bytes, one
 * handler per op of the wire format (distributed/store/proto.h), and reply framing (pure C, no
 * Python.h). The layer below the server's loop: called by distributed/store/server.c, it calls
 * nothing there (distributed/store/server.h says what it may touch).
 *
 * Mirrors: the request handling of c10d's TCPStore server (set / get / add / compareSet /
 * deleteKey / getNumKeys / check / wait / append), including torch's compare_set rules and
 * counters kept as decimal text.
 *
 * Handlers read the payload through cddp_rd (bounds-checked) and reject anything short,
 * overlong or over a cap by returning -1: the loop (distributed/store/server.c) then closes
 * that client.
 */
#include "distributed/store/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the map -------------------------------------------------------------------------- */

/* Seeded 64-bit hash (FNV-1a steps, 8 bytes at a time, murmur finalizer): the seed is random
 * per server so colliding keys cannot be precomputed. */
static uint64_t key_hash(uint64_t seed, const uint8_t *k, size_t n)
{
    uint64_t h = seed ^ 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, k + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ k[i]) * 0x100000001b3ull;
    h ^= n;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static store_entry **map_slot(cddp_store_server *s, const uint8_t *k, uint32_t n, uint64_t *hash)
{
    uint64_t h = key_hash(s->seed, k, n);
    store_entry **p = &s->buckets[h & (s->nbuckets - 1)];
    *hash = h;
    for (; *p; p = &(*p)->next)
        if ((*p)->hash == h && (*p)->klen == n && memcmp((*p)->key, k, n) == 0)
            break;
    return p;
}

static store_entry *map_find(cddp_store_server *s, const uint8_t *k, uint32_t n)
{
    uint64_t h;
    return *map_slot(s, k, n, &h);
}

/* Doubles the bucket array; on allocation failure keeps the longer chains (still correct). */
static void map_grow(cddp_store_server *s)
{
    size_t nb = s->nbuckets * 2;
    store_entry **b = calloc(nb, sizeof(store_entry *));
    if (!b)
        return;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (store_entry *e = s->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

/* key := a ++ b (the concatenation lets APPEND share this). 0, or -1 with *why set when the
 * store is full or memory ran out; the old value is untouched on failure. */
static int map_put(cddp_store_server *s, const uint8_t *k, uint32_t klen, const uint8_t *a,
                   size_t alen, const uint8_t *b, size_t blen, const char **why)
{
    uint64_t h;
    store_entry **slot = map_slot(s, k, klen, &h), *e = *slot;
    size_t vlen = alen + blen, old = e ? e->vlen : 0, grow = vlen + (e ? 0 : klen);
    uint8_t *v = NULL;
    if (vlen > CDDP_STORE_MAX_VALUE) {
        *why = "value over the 64 MiB limit";
        return -1;
    }
    if (s->bytes - old + grow > MAX_TOTAL_BYTES) {
        *why = "store is full (1 GiB of keys and values)";
        return -1;
    }
    if (vlen && !(v = malloc(vlen))) {
        *why = "out of memory";
        return -1;
    }
    if (alen)
        memcpy(v, a, alen);
    if (blen)
        memcpy(v + alen, b, blen);
    if (!e) {
        if (!(e = malloc(sizeof(store_entry) + klen))) {
            free(v);
            *why = "out of memory";
            return -1;
        }
        e->hash = h;
        e->klen = klen;
        memcpy(e->key, k, klen);
        e->val = NULL;
        e->vlen = 0;
        e->next = NULL;
        *slot = e;
        s->nkeys++;
    }
    free(e->val);
    e->val = v;
    e->vlen = (uint32_t)vlen;
    s->bytes = s->bytes - old + grow;
    s->changed = 1;
    if (s->nkeys > s->nbuckets)
        map_grow(s);
    return 0;
}

static int map_delete(cddp_store_server *s, const uint8_t *k, uint32_t klen)
{
    uint64_t h;
    store_entry **slot = map_slot(s, k, klen, &h), *e = *slot;
    if (!e)
        return 0;
    *slot = e->next;
    s->bytes -= e->klen + (size_t)e->vlen;
    s->nkeys--;
    free(e->val);
    free(e);
    return 1;
}

int cddp_store_map_init(cddp_store_server *s)
{
    s->nbuckets = 64;
    if (!(s->buckets = calloc(s->nbuckets, sizeof(store_entry *))))
        return -1;
    if (getrandom(&s->seed, sizeof s->seed, GRND_NONBLOCK) != sizeof s->seed)
        s->seed = (uint64_t)cddp_store_now_ms() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
    return 0;
}

void cddp_store_map_free(cddp_store_server *s)
{
    for (size_t i = 0; s->buckets && i < s->nbuckets; i++)
        for (store_entry *e = s->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e->val);
            free(e);
        }
    free(s->buckets);
    s->buckets = NULL;
}

uint8_t *cddp_store_reply_begin(store_conn *c, uint8_t status, size_t plen)
{
    size_t need;
    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    need = c->out_len + 5 + plen;
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : BUF_MIN;
        uint8_t *p;
        while (cap < need)
            cap *= 2;
        if (!(p = realloc(c->out, cap))) {
            c->dead = 1;
            return NULL;
        }
        c->out = p;
        c->out_cap = cap;
    }
    cddp_wr_u32(c->out + c->out_len, (uint32_t)(1 + plen));
    c->out[c->out_len + 4] = status;
    c->out_len += 5 + plen;
    return c->out + c->out_len - plen;
}

static void reply_msg(store_conn *c, uint8_t status, const char *msg)
{
    size_t n = strlen(msg);
    uint8_t *p = cddp_store_reply_begin(c, status, n);
    if (p)
        memcpy(p, msg, n);
}

static void reply_i64(store_conn *c, int64_t v)
{
    uint8_t *p = cddp_store_reply_begin(c, CDDP_STORE_ST_OK, 8);
    if (p)
        cddp_wr_u64(p, (uint64_t)v);
}

static void reply_u8(store_conn *c, int v)
{
    uint8_t *p = cddp_store_reply_begin(c, CDDP_STORE_ST_OK, 1);
    if (p)
        *p = (uint8_t)v;
}

static void reply_bytes(store_conn *c, const uint8_t *v, size_t n)
{
    uint8_t *p = cddp_store_reply_begin(c, CDDP_STORE_ST_OK, n);
    if (p && n)
        memcpy(p, v, n);
}

/* ---- requests ------------------------------------------------------------------------- */

/* The handlers get the payload of one frame; they return 0 (frame done, reply queued),
 * 1 (parked: keys missing, frame kept), or -1 (protocol violation: close the client). */

/* Remember who was refused (the server thread holds s->mu here). */
static void note_refused(cddp_store_server *s, store_conn *c)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    s->n_refused++;
    snprintf(s->refused_from, sizeof s->refused_from, "?");
    if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    if (ss.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, s->refused_from,
                  sizeof s->refused_from);
    } else if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))       /* an IPv4 client of the [::] listener */
            inet_ntop(AF_INET, a->s6_addr + 12, s->refused_from, sizeof s->refused_from);
        else
            inet_ntop(AF_INET6, a, s->refused_from, sizeof s->refused_from);
    }
}

int64_t cddp_store_server_refused(cddp_store_server *s, char *addr, size_t len)
{
    int64_t n;
    pthread_mutex_lock(&s->mu);
    n = s->n_refused;
    snprintf(addr, len, "%s", n ? s->refused_from : "");
    pthread_mutex_unlock(&s->mu);
    return n;
}

static int op_hello(cddp_store_server *s, store_conn *c, cddp_rd *r, int64_t now)
{
    uint32_t magic, version;
    unsigned diff = 0;
    if (cddp_rd_u32(r, &magic) < 0 || cddp_rd_u32(r, &version) < 0 || magic != CDDP_STORE_MAGIC)
        return -1;
    if (version != CDDP_STORE_VERSION) {
        reply_msg(c, CDDP_STORE_ST_ERROR, "cddp store protocol version mismatch");
        c->closing = 1;
        c->deadline = now + CLOSING_DEADLINE_MS;
        return 0;
    }
    if (s->has_token) {
        /* constant time in the token's bytes */
        diff = r->n != s->token_len;
        for (size_t i = 0; i < s->token_len; i++)
            diff |= s->token[i] ^ (i < r->n ? r->p[i] : 0);
    }
    if (diff) {
        note_refused(s, c);
        reply_msg(c, CDDP_STORE_ST_REFUSED, "bad or missing CDDP_TOKEN");
        c->closing = 1;
        c->deadline = now + CLOSING_DEADLINE_MS;
        return 0;
    }
    c->authed = 1;
    c->deadline = NO_DEADLINE;
    reply_bytes(c, NULL, 0);
    return 0;
}

static int op_set(cddp_store_server *s, store_conn *c, cddp_rd *r, int append)
{
    const uint8_t *k;
    uint32_t kn;
    const char *why;
    store_entry *e;
    if (cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0 || r->n > CDDP_STORE_MAX_VALUE)
        return -1;
    e = append ? map_find(s, k, kn) : NULL;
    if (map_put(s, k, kn, e ? e->val : NULL, e ? e->vlen : 0, r->p, r->n, &why) < 0)
        reply_msg(c, CDDP_STORE_ST_ERROR, why);
    else
        reply_bytes(c, NULL, 0);
    return 0;
}

static int64_t deadline_after(int64_t now, uint64_t ms)
{
    return ms >= (uint64_t)1 << 50 ? NO_DEADLINE : now + (int64_t)ms;
}

/* Parks the frame until its keys exist or wait_ms passes; deadline fixed at first park. */
static int park(store_conn *c, uint64_t wait_ms, int64_t now)
{
    if (!c->parked) {
        c->parked = 1;
        c->deadline = deadline_after(now, wait_ms);
    }
    return 1;
}

static int op_get(cddp_store_server *s, store_conn *c, cddp_rd *r, int64_t now)
{
    uint64_t wait_ms;
    const uint8_t *k;
    uint32_t kn;
    store_entry *e;
    if (cddp_rd_u64(r, &wait_ms) < 0 || cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0 || r->n)
        return -1;
    if (!(e = map_find(s, k, kn)))
        return park(c, wait_ms, now);
    reply_bytes(c, e->val, e->vlen);
    return 0;
}

/* WAIT and CHECK: are all n keys present? -1 on a malformed list. */
static int all_present(cddp_store_server *s, cddp_rd *r)
{
    uint32_t n, kn;
    const uint8_t *k;
    int all = 1;
    if (cddp_rd_u32(r, &n) < 0 || n > CDDP_STORE_MAX_KEYS)
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        if (cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0)
            return -1;
        if (all && !map_find(s, k, kn))
            all = 0;
    }
    return r->n ? -1 : all;
}

static int op_wait(cddp_store_server *s, store_conn *c, cddp_rd *r, int64_t now)
{
    uint64_t wait_ms;
    int all;
    if (cddp_rd_u64(r, &wait_ms) < 0 || (all = all_present(s, r)) < 0)
        return -1;
    if (!all)
        return park(c, wait_ms, now);
    reply_bytes(c, NULL, 0);
    return 0;
}

static int op_check(cddp_store_server *s, store_conn *c, cddp_rd *r)
{
    int all = all_present(s, r);
    if (all < 0)
        return -1;
    reply_u8(c, all);
    return 0;
}

/* Strict decimal int64 (torch stores counters as their decimal text). */
static int parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0, lim;
    if (n && (p[0] == '-' || p[0] == '+'))
        neg = p[i++] == '-';
    if (i == n || n > 20)
        return -1;
    lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || v > (lim - (p[i] - '0')) / 10)
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int op_add(cddp_store_server *s, store_conn *c, cddp_rd *r)
{
    uint64_t amount;
    const uint8_t *k;
    uint32_t kn;
    int64_t cur = 0, next;
    store_entry *e;
    char text[24];
    const char *why;
    if (cddp_rd_u64(r, &amount) < 0 || cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0 || r->n)
        return -1;
    if ((e = map_find(s, k, kn)) && parse_i64(e->val, e->vlen, &cur) < 0) {
        reply_msg(c, CDDP_STORE_ST_ERROR, "add: the key's value is not an integer");
        return 0;
    }
    if (__builtin_add_overflow(cur, (int64_t)amount, &next)) {
        reply_msg(c, CDDP_STORE_ST_ERROR, "add: int64 overflow");
        return 0;
    }
    snprintf(text, sizeof text, "%lld", (long long)next);
    if (map_put(s, k, kn, (const uint8_t *)text, strlen(text), NULL, 0, &why) < 0)
        reply_msg(c, CDDP_STORE_ST_ERROR, why);
    else
        reply_i64(c, next);
    return 0;
}

/* torch's compareSet: a missing key is set when expected is empty (else expected comes back);
 * a present key is set when it equals expected; the reply is the value now held (or
 * expected, for a missing key left missing). */
static int op_cas(cddp_store_server *s, store_conn *c, cddp_rd *r)
{
    const uint8_t *k, *x;
    uint32_t kn, xn;
    store_entry *e;
    const char *why;
    if (cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0 ||
        cddp_rd_str(r, CDDP_STORE_MAX_VALUE, &x, &xn) < 0 || r->n > CDDP_STORE_MAX_VALUE)
        return -1;
    e = map_find(s, k, kn);
    if (e ? (e->vlen == xn && (xn == 0 || memcmp(e->val, x, xn) == 0)) : xn == 0) {
        if (map_put(s, k, kn, r->p, r->n, NULL, 0, &why) < 0)
            reply_msg(c, CDDP_STORE_ST_ERROR, why);
        else
            reply_bytes(c, r->p, r->n);
    } else if (e) {
        reply_bytes(c, e->val, e->vlen);
    } else {
        reply_bytes(c, x, xn);
    }
    return 0;
}

static int op_delete(cddp_store_server *s, store_conn *c, cddp_rd *r)
{
    const uint8_t *k;
    uint32_t kn;
    if (cddp_rd_str(r, CDDP_STORE_MAX_KEY, &k, &kn) < 0 || r->n)
        return -1;
    reply_u8(c, map_delete(s, k, kn));
    return 0;
}

int cddp_store_run_frame(cddp_store_server *s, store_conn *c, int64_t now)
{
    uint32_t n = cddp_ld_u32(c->in + c->in_off);
    uint8_t op = c->in[c->in_off + 4];
    cddp_rd r = {c->in + c->in_off + 5, n - 1};
    if (!c->authed)
        return op == CDDP_STORE_OP_HELLO ? op_hello(s, c, &r, now) : -1;
    switch (op) {
    case CDDP_STORE_OP_SET: return op_set(s, c, &r, 0);
    case CDDP_STORE_OP_APPEND: return op_set(s, c, &r, 1);
    case CDDP_STORE_OP_GET: return op_get(s, c, &r, now);
    case CDDP_STORE_OP_ADD: return op_add(s, c, &r);
    case CDDP_STORE_OP_WAIT: return op_wait(s, c, &r, now);
    case CDDP_STORE_OP_CHECK: return op_check(s, c, &r);
    case CDDP_STORE_OP_CAS: return op_cas(s, c, &r);
    case CDDP_STORE_OP_DELETE: return op_delete(s, c, &r);
    case CDDP_STORE_OP_NUM_KEYS:
        if (r.n)
            return -1;
        reply_i64(c, (int64_t)s->nkeys);
        return 0;
    default:
        return -1;                           /* HELLO twice, or an unknown op */
    }
}
