/* ops/index/index.h — private to the indexing files of ops/index/: the parsed form of an
 * indexing key and the "element plan" every indexing kernel and backward runs on.
 *
 * The files, in dependency order (a file calls only the files above it, and core/):
 *   key.c        a Python key -> cddp_ix_key (items classified, laid over the tensor's dims)
 *   mask.c       boolean-mask kernels (out[mask] = v, sum of g[mask])
 *   index_adv.c  element plans from a key, the gather/put/accumulate kernel that runs them,
 *                and the one backward every indexing op shares
 *   index.c      Tensor.__getitem__ / __setitem__ and index_put(_), which is setitem's path
 *   index_fn.c   the named ops (index_select, gather, scatter(_add), masked_fill, the
 *                index_put bindings) and the folder's method tables
 *   index_ops.c  index_add / index_copy / index_fill, scatter_reduce (plans of index_adv.c,
 *                its shared backward, index.c's number conversion; tables of its own)
 *   nonzero.c    nonzero / argwhere, masked_select, take (core/ only; tables of its own)
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

/* ---- ops/index/key.c ------------------------------------------------------------------ */

/* Parse `key` against x into k (k->nadv owned index tensors; cddp_ix_key_clear releases
 * them, also after a failure). 0, or -1 with IndexError/ValueError/TypeError in torch's
 * texts. */
int cddp_ix_parse(TensorObject *x, PyObject *key, cddp_ix_key *k);
/* Release k's index tensors (safe on a cleared key). */
void cddp_ix_key_clear(cddp_ix_key *k);
/* Shape s as "[2, 3]" into buf (truncated to cap) for error messages. */
void cddp_ix_format_shape(char *buf, size_t cap, int nd, const int64_t *s);

/* ---- ops/index/mask.c ----------------------------------------------------------------- */

/* out[mask] = v (v: 0-dim tensor of any dtype, converted to out's; mask a bool tensor
 * broadcastable to out). No autograd, no version bump. 0 / -1. */
int cddp_ix_masked_fill_raw(TensorObject *out, TensorObject *mask, TensorObject *v);
/* *sum = sum of g[mask] in double (g float32/float64, mask broadcastable to g). 0 / -1. */
int cddp_ix_masked_sum(TensorObject *g, TensorObject *mask, double *sum);

/* ---- ops/index/index_adv.c ------------------------------------------------------------ */

/* Room for nb offsets (and the node header) in p->mem; 0, or -1 with MemoryError. */
int cddp_ix_plan_alloc(cddp_iplan *p, int64_t nb);
/* Free p's memory (safe on a zeroed or freed plan). */
void cddp_ix_plan_free(cddp_iplan *p);
/* Plan of the key's view V (no advanced part): geometry `which` (0 real, 1 contiguous);
 * p must have room for one offset. */
void cddp_ix_plan_basic(const cddp_ix_key *k, int which, cddp_iplan *p);
/* Plans for an advanced key: real (x's storage; always) and virt (x's contiguous layout;
 * when non-NULL). Checks bounds and wraps negative indices. 0 / -1 (plans freed by caller). */
int cddp_ix_plan_adv(const cddp_ix_key *k, cddp_iplan *real, cddp_iplan *virt);
/* Run plan p over base against `other` (IX_GATHER other[r] = base[plan r]; IX_PUT
 * base[plan r] = other[r]; IX_ACC +=); ostr: other's element strides. */
void cddp_ix_plan_run(int mode, cddp_dtype dt, char *base, const cddp_iplan *p, char *other,
                      const int64_t *ostr);
/* Node with the generic indexing backward; takes ownership of virt's memory on success.
 * kind IX_GATHER: out = in[plan] (input 0).  kind IX_PUT: self[plan] = src (inputs 0, 1);
 * acc: scatter_add-like (self's gradient passes unchanged); embed: src gradient is the plan
 * region of src's shape (scatter) rather than a broadcast sum (setitem). */
NodeObject *cddp_ix_node(const char *name, int kind, int acc, int embed, TensorObject *in0,
                         TensorObject *in1, cddp_iplan *virt, int *err);
/* _C._index_plan(node): (kind, acc, embed, positions) of an indexing node, else None. */
PyObject *cddp_ix_plan_py(PyObject *m, PyObject *node);

/* ---- ops/index/index.c ---------------------------------------------------------------- */

/* A Python / NumPy number as a 0-dim tensor (bool, float64 or exact int64): 1 with *out set,
 * 0 when v is no number (nothing set), -1 with an exception. */
int cddp_ix_number(PyObject *v, TensorObject **out);
/* x.index_put_(indices, values, accumulate) (inplace) or x.index_put(...): setitem's path
 * with a tuple/list of index tensors. New reference (x itself when inplace), or NULL. */
PyObject *cddp_ix_index_put(TensorObject *x, PyObject *indices, PyObject *values, int acc,
                            int inplace);

/* Index value at p of an int64/int32/bool tensor t. */
static inline int64_t cddp_ix_read_index(const TensorObject *t, const char *p)
{
    return t->dtype == CDDP_INT64 ? *(const int64_t *)p
         : t->dtype == CDDP_INT32 ? *(const int32_t *)p : *(const uint8_t *)p;
}
#endif
