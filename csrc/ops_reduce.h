/* ops_reduce.h — private to the reduction files (ops_reduce*.c, ops_softmax.c): argument
 * parsing for METH_FASTCALL entry points, dim lists, and the reduction plan that views an
 * input as a contiguous (outer, R, inner) block.
 *
 * Plan: the reduced dims are a bitmask over the input's dims. When, ignoring size-1 dims,
 * they form one run, a contiguous input is already (outer, R, inner): no copy. Otherwise (or
 * when a kernel wants contiguous rows, `rows`) the input is permuted so kept dims come first
 * and reduced dims last, and copied: (outer, R, 1). The output of a reduction is always
 * (outer, inner) contiguous, which is the kept dims in their original order.
 */
#ifndef CDDP_OPS_REDUCE_H
#define CDDP_OPS_REDUCE_H
#include "cddp.h"

/* loops over more elements than this run with the GIL released */
#define CDDP_REDUCE_NOGIL_MIN 65536

#define CDDP_REDUCE_NOGIL(nelem, stmt)                                                   \
    do {                                                                                 \
        if ((nelem) > CDDP_REDUCE_NOGIL_MIN) {                                           \
            Py_BEGIN_ALLOW_THREADS stmt; Py_END_ALLOW_THREADS                            \
        } else {                                                                         \
            stmt;                                                                        \
        }                                                                                \
    } while (0)

/* Untyped data pointer, so kernels taking typed pointers need no casts at call sites. */
static inline void *cddp_reduce_ptr(const TensorObject *t) { return cddp_data(t); }

/* ---- arguments ------------------------------------------------------------------------ */

/* Fill out[0..n) (borrowed, NULL when absent) from FASTCALL positional args and keywords
 * matched by names[k]; only the first npos may be given positionally. A name "dim" also
 * accepts the keyword "axis" (NumPy spelling, as torch does). TypeError like torch's on too
 * many positionals, an unknown keyword or a duplicate. */
int cddp_reduce_args(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames, const char *const *names, int n, int npos,
                     PyObject **out);

/* Method entry point shape (self is the Tensor). */
typedef PyObject *(*cddp_reduce_meth)(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames);

/* Module function cddp.<fname>(input, ...) forwarding to the method impl: input is the first
 * positional or the keyword `input`. TypeError when it is not a Tensor. */
PyObject *cddp_reduce_as_function(const char *fname, cddp_reduce_meth impl,
                                  PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* keepdim (NULL/None -> 0) must be a bool, as torch insists. -1 + TypeError otherwise. */
int cddp_reduce_bool(const char *fname, const char *argname, PyObject *o, int dflt);
/* dtype argument: NULL/None -> *has = 0; else a cddp dtype. -1 on error. */
int cddp_reduce_dtype(PyObject *o, int *has, cddp_dtype *dt);
/* Normalize one dim against ndim (0-dim tensors accept -1 and 0). IndexError like torch. */
int cddp_reduce_norm_dim(int64_t dim, int ndim, int *out);
/* A single int dim (not bool/float/tuple). -1 + TypeError/IndexError. */
int cddp_reduce_int_dim(const char *fname, PyObject *o, int ndim, int *out);
/* dim argument as a bitmask of reduced dims: NULL/None (and, when empty_all, an empty
 * tuple/list) means every dim; an int, or a tuple/list of ints when allow_seq. Duplicates:
 * RuntimeError "dim 0 appears multiple times in the list of dims". */
int cddp_reduce_dims(const char *fname, PyObject *o, int ndim, int allow_seq, int empty_all,
                     uint32_t *mask);
/* torch's scalar type name for messages: Float, Double, Long, Int, Bool. */
const char *cddp_reduce_torch_name(cddp_dtype d);

/* ---- plan ----------------------------------------------------------------------------- */

typedef struct {
    int ndim;                          /* input */
    int64_t shape[CDDP_MAX_DIMS];
    uint32_t mask;                     /* bit d set: dim d is reduced */
    int keepdim;
    int permuted;                      /* layout = input permuted by perm (kept dims first) */
    int perm[CDDP_MAX_DIMS];
    int64_t outer, R, inner;           /* layout of the input as a contiguous block */
    int out_ndim;                      /* output shape (keepdim applied) */
    int64_t out_shape[CDDP_MAX_DIMS];
} cddp_rplan;

/* Plan for reducing dims `mask` of an input of this shape; rows != 0 forces inner == 1. */
void cddp_rplan_init(cddp_rplan *p, int ndim, const int64_t *shape, uint32_t mask,
                     int keepdim, int rows);
/* x (plan's shape, any layout/dtype) as a contiguous block in the plan's layout, cast to dt.
 * New reference (x itself when it already is one). */
TensorObject *cddp_rplan_layout(const cddp_rplan *p, TensorObject *x, cddp_dtype dt);
/* A new contiguous tensor to hold an input-shaped result in the plan's layout. */
TensorObject *cddp_rplan_new_layout(const cddp_rplan *p, cddp_dtype dt, int zero);
/* y from cddp_rplan_new_layout back to the input's shape, contiguous. New reference. */
TensorObject *cddp_rplan_unlayout(const cddp_rplan *p, TensorObject *y);
/* A gradient of the output's shape as a contiguous (outer, inner) block of dtype dt. */
TensorObject *cddp_rplan_grad(const cddp_rplan *p, TensorObject *g, cddp_dtype dt);
/* Rebuild the plan in a backward from the node's meta[0] and i[0] (mask), i[1] (keepdim). */
void cddp_rplan_from_node(cddp_rplan *p, NodeObject *node, int rows);
/* Store mask/keepdim in node->i[0..1] for cddp_rplan_from_node. */
static inline void cddp_rplan_to_node(const cddp_rplan *p, NodeObject *node)
{
    node->i[0] = p->mask;
    node->i[1] = p->keepdim;
}

/* Pairwise (NumPy-style) sums of a contiguous run, accumulated in double. */
double cddp_reduce_pw_sum_f32(const float *x, int64_t n);
double cddp_reduce_pw_sum_f64(const double *x, int64_t n);

/* ---- method tables of the sibling files (merged into ops_reduce.c's tables) ------------ */

PyObject *cddp_reduce_max(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_min(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_amax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_amin(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_argmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_argmin(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_max(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_min(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_log_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_log_softmax(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_logsumexp(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
PyObject *cddp_reduce_fn_vector_norm(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

#endif
