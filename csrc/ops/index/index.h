/* ops/index/index.h — private to ops/index/index.c / ops/index/index_adv.c / ops/index/index_fn.c: the parsed form of
 * an indexing key and the "element plan" every indexing kernel and backward runs on.
 *
 * An element plan describes a strided-plus-gathered walk over a base tensor:
 *
 *   for every multi-index r over plan.shape (C order):
 *       base element = plan.base + sum_d r[d] * sstride[d] + off[sum_d r[d] * bstride[d]]
 *
 * Basic views are plans with nb == 1 and bstride == 0; advanced indexing fills off[] with the
 * offsets picked by the (broadcast) index tensors; gather/scatter/index_select are plans too.
 * The same plan, built against the contiguous layout of the input's shape ("virtual" plan), is
 * stored in the autograd node (node->ibuf) so one backward serves every indexing op.
 */
#ifndef CDDP_OPS_INDEX_H
#define CDDP_OPS_INDEX_H
#include "core/cddp.h"

typedef struct {
    int ndim;                          /* dims of the walk (= the indexed result's dims) */
    int64_t shape[CDDP_MAX_DIMS];
    int64_t sstride[CDDP_MAX_DIMS];    /* base elements per step of each dim (0 on gathered dims) */
    int64_t bstride[CDDP_MAX_DIMS];    /* off[] entries per step of each dim (0 on strided dims) */
    int64_t base;                      /* element offset added to every element */
    int64_t nb;                        /* entries in off */
    int64_t *off;                      /* gathered element offsets; points into mem */
    int64_t *mem;                      /* PyMem block (header room + off), owned, or NULL */
} cddp_iplan;

/* header int64s stored before off[] when a plan lives in node->ibuf */
#define CDDP_IPLAN_HDR (3 + 3 * CDDP_MAX_DIMS)

enum { IX_GATHER = 0, IX_PUT = 1, IX_ACC = 2 };

/* One parsed key, walked against a tensor x: a view V of x (basic part) plus advanced
 * indices applied to V's dims. Geometry is kept twice: [0] in x's real storage (offsets from
 * the storage start), [1] in the contiguous layout of x's shape (for backward). */
typedef struct {
    int nd;
    int64_t shape[CDDP_MAX_DIMS];
    int64_t st[2][CDDP_MAX_DIMS];
    int64_t off[2];
    const char *name;                  /* torch's node name for the last view op */
    const char *oob;                   /* out-of-bounds IndexError text; NULL: torch's default */
    int nadv;
    int adim[CDDP_MAX_DIMS];           /* first V dim each index applies to (increasing) */
    int aspan[CDDP_MAX_DIMS];          /* V dims it covers: 1, or a bool mask's rank */
    char amask[CDDP_MAX_DIMS];         /* aidx holds a mask's precomputed offsets (below) */
    int adim_in[CDDP_MAX_DIMS];        /* x dim it came from (for messages); -1 for bools */
    /* owned: int64/int32 index tensors; for a mask, an int64 (nnz,) tensor (stride 2) of the
     * true elements' offsets in x's storage, each followed by its contiguous-layout offset */
    TensorObject *aidx[CDDP_MAX_DIMS];
} cddp_ix_key;

/* ops/index/index.c */
int cddp_ix_parse(TensorObject *x, PyObject *key, cddp_ix_key *k);
void cddp_ix_key_clear(cddp_ix_key *k);
int cddp_ix_number(PyObject *v, TensorObject **out);
PyObject *cddp_ix_index_put(TensorObject *x, PyObject *indices, PyObject *values, int acc,
                            int inplace);

/* ops/index/index_adv.c */
int cddp_ix_plan_alloc(cddp_iplan *p, int64_t nb);
void cddp_ix_plan_free(cddp_iplan *p);
void cddp_ix_plan_basic(const cddp_ix_key *k, int which, cddp_iplan *p);
int cddp_ix_plan_adv(const cddp_ix_key *k, cddp_iplan *real, cddp_iplan *virt);
void cddp_ix_plan_run(int mode, cddp_dtype dt, char *base, const cddp_iplan *p, char *other,
                      const int64_t *ostr);
/* Node with the generic indexing backward; takes ownership of virt's memory on success.
 * kind IX_GATHER: out = in[plan] (input 0).  kind IX_PUT: self[plan] = src (inputs 0, 1);
 * acc: scatter_add-like (self's gradient passes unchanged); embed: src gradient is the plan
 * region of src's shape (scatter) rather than a broadcast sum (setitem). */
NodeObject *cddp_ix_node(const char *name, int kind, int acc, int embed, TensorObject *in0,
                         TensorObject *in1, cddp_iplan *virt, int *err);
/* ops/index/index_fn.c */
int cddp_ix_masked_fill_raw(TensorObject *out, TensorObject *mask, TensorObject *v);

void cddp_ix_format_shape(char *buf, size_t cap, int nd, const int64_t *s);

/* Index value at p of an int64/int32/bool tensor t. */
static inline int64_t cddp_ix_read_index(const TensorObject *t, const char *p)
{
    return t->dtype == CDDP_INT64 ? *(const int64_t *)p
         : t->dtype == CDDP_INT32 ? *(const int32_t *)p : *(const uint8_t *)p;
}
#endif
