/* ops/index/index_adv.c — advanced indexing: element plans (see ops/index/index.h) built from
 * a parsed key (ops/index/key.c), the gather / put / accumulate kernel that runs them, and the
 * one autograd backward every indexing op shares.
 *
 * Mirrors: at::index (t[idx]), at::index_put_ (t[idx] = v, accumulate for backward), with
 * NumPy's placement rule as torch applies it: the broadcast shape B of the index tensors
 * replaces the indexed dims in place when they are adjacent, else B goes to the front.
 *
 *   x (3, 4, 5)[:, i (2, 6), j (6,)]   ->  (3, 2, 6)      adjacent: B replaces dims 1..2
 *   x (3, 4, 5)[i (6,), :, j (6,)]     ->  (6, 4)         separated: B first
 */
#include "ops/index/index.h"
#include <string.h>

/* ---- plans ---------------------------------------------------------------------------- */

int cddp_ix_plan_alloc(cddp_iplan *p, int64_t nb)
{
    if (nb < 0 || (uint64_t)nb > (SIZE_MAX / sizeof(int64_t)) - CDDP_IPLAN_HDR) {
        PyErr_NoMemory();
        return -1;
    }
    p->mem = PyMem_Malloc(sizeof(int64_t) * (size_t)(CDDP_IPLAN_HDR + nb));
    if (!p->mem) {
        PyErr_NoMemory();
        return -1;
    }
    p->off = p->mem + CDDP_IPLAN_HDR;
    p->nb = nb;
    return 0;
}

void cddp_ix_plan_free(cddp_iplan *p)
{
    PyMem_Free(p->mem);
    p->mem = NULL;
    p->off = NULL;
}

/* Plan of the key's view V (no advanced part): geometry `which` (0 real, 1 contiguous). */
void cddp_ix_plan_basic(const cddp_ix_key *k, int which, cddp_iplan *p)
{
    p->ndim = k->nd;
    memcpy(p->shape, k->shape, sizeof(int64_t) * k->nd);
    memcpy(p->sstride, k->st[which], sizeof(int64_t) * k->nd);
    memset(p->bstride, 0, sizeof(int64_t) * k->nd);
    p->base = k->off[which];
    p->off[0] = 0;
}

/* B = broadcast of the index shapes; IndexError naming every shape when they do not fit. */
static int index_broadcast(const cddp_ix_key *k, int *bnd, int64_t *bshape)
{
    *bnd = 0;
    for (int j = 0; j < k->nadv; j++) {
        const TensorObject *t = k->aidx[j];
        int n = t->ndim > *bnd ? t->ndim : *bnd;
        int64_t out[CDDP_MAX_DIMS];
        for (int i = 0; i < n; i++) {
            int ia = *bnd - n + i, ib = t->ndim - n + i;
            int64_t a = ia >= 0 ? bshape[ia] : 1, b = ib >= 0 ? t->shape[ib] : 1;
            if (a != b && a != 1 && b != 1) {
                char msg[1024];
                size_t len = 0;
                for (int q = 0; q < k->nadv && len < sizeof msg - 300; q++) {
                    if (q)
                        len += (size_t)snprintf(msg + len, sizeof msg - len, ", ");
                    cddp_ix_format_shape(msg + len, sizeof msg - len, k->aidx[q]->ndim,
                                         k->aidx[q]->shape);
                    len = strlen(msg);
                }
                PyErr_Format(PyExc_IndexError,
                             "shape mismatch: indexing tensors could not be broadcast together "
                             "with shapes %s", msg);
                return -1;
            }
            out[i] = a == 1 ? b : a;
        }
        memcpy(bshape, out, sizeof(int64_t) * n);
        *bnd = n;
    }
    return 0;
}

/* Lay out the result dims of both plans: V's unindexed dims keep their strides, B's dims
 * step through off[] (C order over B). */
static void adv_layout(const cddp_ix_key *k, int bnd, const int64_t *bshape, cddp_iplan **ps,
                       int nps)
{
    int64_t bst[CDDP_MAX_DIMS];
    int indexed[CDDP_MAX_DIMS] = {0}, total = 0;
    int first = k->adim[0], last = k->adim[k->nadv - 1] + k->aspan[k->nadv - 1] - 1;
    cddp_contiguous_strides(bnd, bshape, bst);
    for (int a = 0; a < k->nadv; a++) {
        for (int d = k->adim[a]; d < k->adim[a] + k->aspan[a]; d++)
            indexed[d] = 1;
        total += k->aspan[a];
    }
    int adjacent = last - first + 1 == total;
    for (int q = 0; q < nps; q++) {
        cddp_iplan *p = ps[q];
        int o = 0;
        for (int d = -1; d < k->nd; d++) {
            if (d >= 0 && !indexed[d]) {
                p->shape[o] = k->shape[d];
                p->sstride[o] = k->st[q][d];
                p->bstride[o++] = 0;
            } else if (adjacent ? d == first : d < 0) {
                for (int b = 0; b < bnd; b++, o++) {
                    p->shape[o] = bshape[b];
                    p->sstride[o] = 0;
                    p->bstride[o] = bst[b];
                }
            }
        }
        p->ndim = o;
        p->base = k->off[q];
    }
}

static int oob_error(const cddp_ix_key *k, int j, int64_t v)
{
    int d = k->adim[j];
    if (k->oob)
        PyErr_SetString(PyExc_IndexError, k->oob);
    else
        PyErr_Format(PyExc_IndexError,
                     "index %lld is out of bounds for dimension %d with size %lld", (long long)v,
                     k->adim_in[j] >= 0 ? k->adim_in[j] : d, (long long)k->shape[d]);
    return -1;
}

#define IX_ADD_COLUMN(T)                                                                  \
    do {                                                                                  \
        const T *ip = (const T *)cddp_data(t);                                            \
        for (int64_t e = 0; e < nb; e++) {                                                \
            int64_t v = ip[e];                                                            \
            if (v < -size || v >= size)                                                   \
                return oob_error(k, j, v);                                                \
            v += v < 0 ? size : 0;                                                        \
            real->off[e] += v * s0;                                                       \
            if (virt)                                                                     \
                virt->off[e] += v * s1;                                                   \
        }                                                                                 \
    } while (0)

/* Whether index j is laid out exactly as B in C order (no broadcasting, contiguous): then
 * its element e pairs with result position e and the offsets can be built column by column. */
static int dense_index(const cddp_ix_key *k, int j, int bnd, const int64_t *bshape)
{
    const TensorObject *t = k->aidx[j];
    if (k->amask[j])                 /* (nnz,) with stride 2: dense unless it broadcasts */
        return bnd == 1 && t->shape[0] == bshape[0];
    return t->ndim == bnd && !memcmp(t->shape, bshape, sizeof(int64_t) * bnd) &&
           cddp_is_contiguous(t);
}

/* The common case (t[idx], t[mask], t[arange(n), labels]): offsets summed one index at a
 * time in tight loops, without the general odometer. */
static int offsets_dense(const cddp_ix_key *k, int64_t nb, cddp_iplan *real, cddp_iplan *virt)
{
    memset(real->off, 0, sizeof(int64_t) * (size_t)nb);
    if (virt)
        memset(virt->off, 0, sizeof(int64_t) * (size_t)nb);
    for (int j = 0; j < k->nadv; j++) {
        const TensorObject *t = k->aidx[j];
        int d = k->adim[j];
        int64_t size = k->shape[d], s0 = k->st[0][d], s1 = k->st[1][d];
        if (k->amask[j]) {
            const int64_t *mo = (const int64_t *)cddp_data(t);
            for (int64_t e = 0; e < nb; e++)
                real->off[e] += mo[2 * e];
            if (virt)
                for (int64_t e = 0; e < nb; e++)
                    virt->off[e] += mo[2 * e + 1];
        } else if (t->dtype == CDDP_INT64) {
            IX_ADD_COLUMN(int64_t);
        } else if (t->dtype == CDDP_INT32) {
            IX_ADD_COLUMN(int32_t);
        } else {
            IX_ADD_COLUMN(uint8_t);
        }
    }
    return 0;
}

/* Plans for an advanced key: real (x's storage; always) and virt (x's contiguous layout;
 * when non-NULL). Checks bounds and wraps negative indices. */
int cddp_ix_plan_adv(const cddp_ix_key *k, cddp_iplan *real, cddp_iplan *virt)
{
    int64_t bshape[CDDP_MAX_DIMS], ist[CDDP_MAX_DIMS][CDDP_MAX_DIMS], idx[CDDP_MAX_DIMS] = {0};
    int64_t pos[CDDP_MAX_DIMS] = {0}, nb = 1;
    const char *data[CDDP_MAX_DIMS];
    cddp_iplan *ps[2] = {real, virt};
    int bnd;
    if (index_broadcast(k, &bnd, bshape) < 0)
        return -1;
    if (k->nd - k->nadv + bnd > CDDP_MAX_DIMS) {
        PyErr_Format(PyExc_IndexError,
                     "indexing result would have more than %d dimensions (cddp's limit)",
                     CDDP_MAX_DIMS);
        return -1;
    }
    for (int b = 0; b < bnd; b++)
        nb *= bshape[b];
    if (cddp_ix_plan_alloc(real, nb) < 0 || (virt && cddp_ix_plan_alloc(virt, nb) < 0))
        return -1;
    adv_layout(k, bnd, bshape, ps, virt ? 2 : 1);
    {
        int dense = 1;
        for (int j = 0; j < k->nadv && dense; j++)
            dense = dense_index(k, j, bnd, bshape);
        if (dense)
            return offsets_dense(k, nb, real, virt);
    }
    for (int j = 0; j < k->nadv; j++) {
        if (cddp_broadcast_strides(k->aidx[j], bnd, bshape, ist[j]) < 0)
            return -1;
        data[j] = cddp_data(k->aidx[j]);
    }
    for (int64_t e = 0; e < nb; e++) {
        int64_t o0 = 0, o1 = 0;
        for (int j = 0; j < k->nadv; j++) {
            const TensorObject *t = k->aidx[j];
            int d = k->adim[j];
            int64_t v, size = k->shape[d];
            if (k->amask[j]) {       /* offsets computed (and in bounds) when parsing */
                const int64_t *mo = (const int64_t *)data[j] + pos[j];
                o0 += mo[0];
                o1 += mo[1];
                continue;
            }
            v = cddp_ix_read_index(t, data[j] + pos[j] * (int64_t)cddp_dtype_size[t->dtype]);
            if (v < -size || v >= size)
                return oob_error(k, j, v);
            if (v < 0)
                v += size;
            o0 += v * k->st[0][d];
            o1 += v * k->st[1][d];
        }
        real->off[e] = o0;
        if (virt)
            virt->off[e] = o1;
        for (int b = bnd - 1; b >= 0; b--) {          /* odometer over B */
            if (++idx[b] < bshape[b]) {
                for (int j = 0; j < k->nadv; j++)
                    pos[j] += ist[j][b];
                break;
            }
            for (int j = 0; j < k->nadv; j++)
                pos[j] -= ist[j][b] * (bshape[b] - 1);
            idx[b] = 0;
        }
    }
    return 0;
}

/* ---- the kernel ----------------------------------------------------------------------- */

#define IX_INNER(T, STMT)                                                                 \
    do {                                                                                  \
        T *B_ = (T *)base, *O_ = (T *)other;                                              \
        for (int64_t i = 0; i < n; i++) {                                                 \
            T *a = B_ + so + i * s1 + off[bo + i * b1];                                   \
            T *o = O_ + oo + i * o1;                                                      \
            STMT;                                                                         \
        }                                                                                 \
    } while (0)

/* One run of n elements along the last plan dim. */
static void ix_run(int mode, cddp_dtype dt, char *base, const int64_t *off, int64_t so,
                   int64_t s1, int64_t bo, int64_t b1, char *other, int64_t oo, int64_t o1,
                   int64_t n)
{
    size_t isz = cddp_dtype_size[dt];
    if (b1 == 0 && s1 == 1 && o1 == 1) {          /* a contiguous run on both sides */
        char *a = base + (so + off[bo]) * (int64_t)isz, *o = other + oo * (int64_t)isz;
        if (mode == IX_GATHER) {
            memcpy(o, a, (size_t)n * isz);
            return;
        }
        if (mode == IX_PUT) {
            memcpy(a, o, (size_t)n * isz);
            return;
        }
        if (dt == CDDP_FLOAT32) {
            float *d = (float *)a; const float *v = (const float *)o;
            for (int64_t i = 0; i < n; i++) d[i] += v[i];
            return;
        }
        if (dt == CDDP_FLOAT64) {
            double *d = (double *)a; const double *v = (const double *)o;
            for (int64_t i = 0; i < n; i++) d[i] += v[i];
            return;
        }
    }
    if (mode == IX_ACC) {
        /* float16/bfloat16: each sum rounded to the dtype, as torch's index_put_ accumulate /
         * scatter_add_ in Half; small integers wrap */
        switch (dt) {
        case CDDP_FLOAT32: IX_INNER(float, *a += *o); break;
        case CDDP_FLOAT64: IX_INNER(double, *a += *o); break;
        case CDDP_INT64: IX_INNER(int64_t, *a = (int64_t)((uint64_t)*a + (uint64_t)*o)); break;
        case CDDP_INT32: IX_INNER(int32_t, *a = (int32_t)((uint32_t)*a + (uint32_t)*o)); break;
        case CDDP_FLOAT16:
            IX_INNER(uint16_t, *a = cddp_f32_to_f16(cddp_f16_to_f32(*a) + cddp_f16_to_f32(*o)));
            break;
        case CDDP_BFLOAT16:
            IX_INNER(uint16_t,
                     *a = cddp_f32_to_bf16(cddp_bf16_to_f32(*a) + cddp_bf16_to_f32(*o)));
            break;
        case CDDP_INT16: IX_INNER(uint16_t, *a = (uint16_t)(*a + *o)); break;
        case CDDP_UINT8: case CDDP_INT8: IX_INNER(uint8_t, *a = (uint8_t)(*a + *o)); break;
        default: IX_INNER(uint8_t, *a |= *o); break;
        }
    } else if (mode == IX_GATHER) {           /* pure data movement: any dtype by its size */
        if (isz == 8) IX_INNER(uint64_t, *o = *a);
        else if (isz == 4) IX_INNER(uint32_t, *o = *a);
        else if (isz == 2) IX_INNER(uint16_t, *o = *a);
        else IX_INNER(uint8_t, *o = *a);
    } else {
        if (isz == 8) IX_INNER(uint64_t, *a = *o);
        else if (isz == 4) IX_INNER(uint32_t, *a = *o);
        else if (isz == 2) IX_INNER(uint16_t, *a = *o);
        else IX_INNER(uint8_t, *a = *o);
    }
}

/* Run plan p over base (element 0 of the plan's address space) against `other`, a tensor of
 * the plan's shape given by its first element and element strides ostr:
 *   IX_GATHER other[r] = base[plan r];  IX_PUT base[plan r] = other[r];  IX_ACC +=.
 * Elements are visited in C order, so with duplicate offsets the last PUT wins and ACC sums.
 * Releases the GIL on large plans: it touches no Python object. */
void cddp_ix_plan_run(int mode, cddp_dtype dt, char *base, const cddp_iplan *p, char *other,
                      const int64_t *ostr)
{
    int64_t sh[CDDP_MAX_DIMS], ss[CDDP_MAX_DIMS], bs[CDDP_MAX_DIMS], os[CDDP_MAX_DIMS];
    int64_t idx[CDDP_MAX_DIMS] = {0}, total = 1, so = p->base, bo = 0, oo = 0;
    int nd = 0;
    PyThreadState *ts = NULL;
    /* coalesce: drop size-1 dims, merge a dim into the one outside it when all three walks
     * step through them as one (long inner runs, e.g. gather with an (N, 1) index) */
    for (int d = 0; d < p->ndim; d++) {
        total *= p->shape[d];
        if (p->shape[d] == 1)
            continue;
        if (nd > 0 && ss[nd - 1] == p->sstride[d] * p->shape[d] &&
            bs[nd - 1] == p->bstride[d] * p->shape[d] && os[nd - 1] == ostr[d] * p->shape[d]) {
            sh[nd - 1] *= p->shape[d];
            ss[nd - 1] = p->sstride[d];
            bs[nd - 1] = p->bstride[d];
            os[nd - 1] = ostr[d];
            continue;
        }
        sh[nd] = p->shape[d];
        ss[nd] = p->sstride[d];
        bs[nd] = p->bstride[d];
        os[nd] = ostr[d];
        nd++;
    }
    if (total == 0)
        return;
    if (nd == 0) {
        ix_run(mode, dt, base, p->off, so, 0, 0, 0, other, 0, 0, 1);
        return;
    }
    if (total > 65536)
        ts = PyEval_SaveThread();
    for (;;) {
        ix_run(mode, dt, base, p->off, so, ss[nd - 1], bo, bs[nd - 1], other, oo, os[nd - 1],
               sh[nd - 1]);
        int d = nd - 2;
        for (; d >= 0; d--) {
            so += ss[d];
            bo += bs[d];
            oo += os[d];
            if (++idx[d] < sh[d])
                break;
            so -= ss[d] * sh[d];
            bo -= bs[d] * sh[d];
            oo -= os[d] * sh[d];
            idx[d] = 0;
        }
        if (d < 0)
            break;
    }
    if (ts)
        PyEval_RestoreThread(ts);
}

/* ---- autograd ------------------------------------------------------------------------- */

static void plan_from_node(const NodeObject *n, cddp_iplan *p)
{
    const int64_t *h = n->ibuf;
    p->ndim = (int)h[0];
    p->base = h[1];
    p->nb = h[2];
    memcpy(p->shape, h + 3, sizeof(int64_t) * CDDP_MAX_DIMS);
    memcpy(p->sstride, h + 3 + CDDP_MAX_DIMS, sizeof(int64_t) * CDDP_MAX_DIMS);
    memcpy(p->bstride, h + 3 + 2 * CDDP_MAX_DIMS, sizeof(int64_t) * CDDP_MAX_DIMS);
    p->off = n->ibuf + CDDP_IPLAN_HDR;
    p->mem = NULL;
}

/* Gradient for a PUT's source: the plan region of g, brought back to src's shape. */
static TensorObject *put_src_grad(NodeObject *self, const cddp_iplan *p, TensorObject *gc)
{
    const cddp_meta *m = &self->meta[1];
    int64_t cst[CDDP_MAX_DIMS];
    TensorObject *r, *s = NULL, *out = NULL;
    int lead = 0;
    r = cddp_tensor_new(gc->dtype, p->ndim, p->shape, 0);
    if (!r)
        return NULL;
    cddp_ix_plan_run(IX_GATHER, gc->dtype, cddp_data(gc), p, cddp_data(r), r->strides);
    cddp_contiguous_strides(m->ndim, m->shape, cst);
    if (self->i[2]) {                /* scatter: r is the leading region of src */
        TensorObject *region;
        s = cddp_tensor_new(gc->dtype, m->ndim, m->shape, 1);
        region = s ? cddp_tensor_alias(s, p->ndim, p->shape, cst, 0) : NULL;
        if (!region || cddp_copy_into(region, r) < 0)
            Py_CLEAR(s);
        Py_XDECREF(region);
    } else {                         /* setitem: undo the leading-1 strip and the broadcast */
        TensorObject *summed;
        while (lead < m->ndim && m->shape[lead] == 1)
            lead++;
        summed = cddp_sum_to(r, m->ndim - lead, m->shape + lead);
        if (summed) {
            s = cddp_tensor_alias(summed, m->ndim, m->shape, cst, summed->offset);
            Py_DECREF(summed);
        }
    }
    Py_DECREF(r);
    if (s) {
        out = cddp_tensor_cast_raw(s, m->dtype);
        Py_DECREF(s);
    }
    return out;
}

/* One backward for all indexing ops (plan in ibuf, relative to input 0's contiguous layout):
 *   IX_GATHER (t[key], gather, index_select): gin0 = zeros(in0) with g accumulated at plan.
 *   IX_PUT (setitem, scatter): gin0 = g with the written positions zeroed (or g itself when the
 *     op accumulates); gin1 = g read at plan, reduced to the source's shape. */
static int ix_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0], *gc = NULL;
    cddp_iplan p;
    int rc = -1;
    if (!g)
        return 0;
    plan_from_node(self, &p);
    if (self->i[0] == IX_GATHER) {
        const cddp_meta *m = &self->meta[0];
        TensorObject *z;
        if (!self->next[0].node)
            return 0;
        z = cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
        gc = z ? cddp_tensor_cast_raw(g, m->dtype) : NULL;
        if (!gc) {
            Py_XDECREF(z);
            return -1;
        }
        cddp_ix_plan_run(IX_ACC, m->dtype, cddp_data(z), &p, cddp_data(gc), gc->strides);
        Py_DECREF(gc);
        gin[0] = z;
        return 0;
    }
    gc = cddp_tensor_contiguous_raw(g);
    if (!gc)
        return -1;
    if (self->next[0].node) {
        if (self->i[1]) {
            gin[0] = (TensorObject *)Py_NewRef(g);
        } else {
            TensorObject *c = cddp_tensor_new(g->dtype, g->ndim, g->shape, 0);
            TensorObject *zero = cddp_scalar_tensor(0.0, g->dtype);
            int64_t zst[CDDP_MAX_DIMS] = {0};
            if (c && zero && cddp_copy_into(c, gc) == 0) {
                cddp_ix_plan_run(IX_PUT, g->dtype, cddp_data(c), &p, cddp_data(zero), zst);
                gin[0] = (TensorObject *)Py_NewRef(c);
            }
            Py_XDECREF(c);
            Py_XDECREF(zero);
            if (!gin[0])
                goto done;
        }
    }
    if (self->n_next > 1 && self->next[1].node) {
        gin[1] = put_src_grad(self, &p, gc);
        if (!gin[1])
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(gc);
    return rc;
}

NodeObject *cddp_ix_node(const char *name, int kind, int acc, int embed, TensorObject *in0,
                         TensorObject *in1, cddp_iplan *virt, int *err)
{
    TensorObject *ins[2] = {in0, in1};
    int64_t *h = virt->mem;
    NodeObject *n = cddp_maybe_node(name, ix_backward, kind == IX_GATHER ? 1 : 2, ins, err);
    if (!n)
        return NULL;
    n->i[0] = kind;
    n->i[1] = acc;
    n->i[2] = embed;
    h[0] = virt->ndim;
    h[1] = virt->base;
    h[2] = virt->nb;
    memcpy(h + 3, virt->shape, sizeof(int64_t) * CDDP_MAX_DIMS);
    memcpy(h + 3 + CDDP_MAX_DIMS, virt->sstride, sizeof(int64_t) * CDDP_MAX_DIMS);
    memcpy(h + 3 + 2 * CDDP_MAX_DIMS, virt->bstride, sizeof(int64_t) * CDDP_MAX_DIMS);
    n->ibuf = h;                     /* the node frees it */
    virt->mem = NULL;
    return n;
}

/* _index_plan(node) -> None when node is not an indexing node, else (kind, acc, embed,
 * positions): positions (int64, the plan's shape) holds, for each element the op reads or
 * writes, its flat offset in input 0's contiguous layout — what the higher-order engine
 * (cddp/autograd/_higher/shape.py) differentiates these nodes with, whatever their name. */
PyObject *cddp_ix_plan_py(PyObject *m, PyObject *arg)
{
    NodeObject *n = (NodeObject *)arg;
    cddp_iplan p;
    TensorObject *iota, *pos;
    int64_t numel = 1;
    if (!PyObject_TypeCheck(arg, cddp_state()->node_type)) {
        PyErr_SetString(PyExc_TypeError, "_index_plan expects an autograd Node");
        return NULL;
    }
    if (n->backward != ix_backward || !n->ibuf || n->n_next < 1)
        Py_RETURN_NONE;
    plan_from_node(n, &p);
    for (int d = 0; d < n->meta[0].ndim; d++)
        numel *= n->meta[0].shape[d];
    iota = cddp_tensor_new(CDDP_INT64, 1, &numel, 0);
    pos = iota ? cddp_tensor_new(CDDP_INT64, p.ndim, p.shape, 0) : NULL;
    if (!pos) {
        Py_XDECREF(iota);
        return NULL;
    }
    for (int64_t k = 0; k < numel; k++)
        ((int64_t *)cddp_data(iota))[k] = k;
    cddp_ix_plan_run(IX_GATHER, CDDP_INT64, cddp_data(iota), &p, cddp_data(pos), pos->strides);
    Py_DECREF(iota);
    return Py_BuildValue("(LLLN)", (long long)n->i[0], (long long)n->i[1], (long long)n->i[2],
                         (PyObject *)pos);
}
