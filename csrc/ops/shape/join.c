/* ops/shape/join.c — cat / stack: join a sequence of tensors along a dimension.
 *
 * Mirrors torch.cat(tensors, dim=0, *, out=None) (aliases concat, concatenate; `axis=` as
 * NumPy spells it) and torch.stack(tensors, dim=0, *, out=None):
 *   - the result dtype is the promotion of all inputs (cddp_promote);
 *   - cat: inputs agree in every dim but `dim`; 1-D empty tensors (shape [0]) are skipped, as
 *     torch's legacy rule; 0-dim inputs are an error. stack: all shapes equal, new dim inserted;
 *   - autograd: CatBackward0 / StackBackward0 hand input i its slice of the gradient (narrow
 *     along dim / select index i), cast back to input i's dtype.
 *
 * Layout of the copy (out: outer x [sum of s_i] x inner, s_i = input i's extent along dim,
 * 1 for stack): each outer row of out is the concatenation of the inputs' rows of s_i*inner
 * elements. Contiguous inputs of the result dtype take memcpy per row (one memcpy per input
 * when dim == 0); anything else is copied through a strided view of out (cddp_copy_into).
 */
#include "ops/shape/shape.h"
#include <string.h>

#define GIL_FREE_BYTES (256 * 1024)

/* Input i's gradient: its slice of g, cast to its dtype. i[0] = dim, i[1] = 1 for stack. */
static int join_backward(NodeObject *self, TensorObject **gout, TensorObject **gin)
{
    TensorObject *g = gout[0];
    int dim = (int)self->i[0], stack = (int)self->i[1];
    int64_t off = 0;
    if (!g)
        return 0;
    for (int k = 0; k < self->n_next; k++) {
        cddp_meta *m = &self->meta[k];
        TensorObject *piece;
        int skipped = !stack && m->ndim != g->ndim;     /* a legacy empty 1-D input */
        int64_t len = stack || skipped ? 0 : m->shape[dim];
        if (self->next[k].node) {
            if (skipped)
                piece = cddp_tensor_new(m->dtype, m->ndim, m->shape, 1);
            else if (stack)
                piece = cddp_shape_select_raw(g, dim, k);
            else
                piece = cddp_shape_narrow_raw(g, dim, off, len);
            if (!piece)
                return -1;
            gin[k] = cddp_tensor_cast_raw(piece, m->dtype);
            Py_DECREF(piece);
            if (!gin[k])
                return -1;
        }
        off += len;
    }
    return 0;
}

typedef struct {
    int64_t outer;          /* rows: prod(out.shape[:dim]) */
    size_t row;             /* bytes of one out row: prod(out.shape[dim:]) * itemsize */
    int n;
    char **src;             /* n: input data pointers */
    size_t *chunk;          /* n: bytes each input adds to a row (s_i * inner * itemsize) */
} memcpy_plan;

/* Inputs that each add one element of 4 or 8 bytes per row (stack or cat along the last
 * dim, e.g. torch.stack([re, im], -1)): an interleaving loop instead of a memcpy call per
 * element (measured 9x faster for two float32 inputs of 1M elements). */
#define INTERLEAVE(W, NAME)                                                                     \
    static void NAME(const memcpy_plan *p, char *restrict dst)                                 \
    {                                                                                           \
        size_t n = (size_t)p->n;                                                                \
        for (size_t k = 0; k < n; k++) {                                                        \
            const char *restrict s = p->src[k];                                                 \
            for (int64_t o = 0; o < p->outer; o++)                                              \
                memcpy(dst + ((size_t)o * n + k) * W, s + (size_t)o * W, W);                    \
        }                                                                                       \
    }
INTERLEAVE(4, interleave4)
INTERLEAVE(8, interleave8)

static void run_memcpy_plan(const memcpy_plan *p, char *dst)
{
    int uniform = 1;
    for (int k = 0; k < p->n; k++)
        uniform &= p->chunk[k] == p->chunk[0];
    if (uniform && p->chunk[0] == 4 && (size_t)p->n * 4 == p->row) {
        interleave4(p, dst);
        return;
    }
    if (uniform && p->chunk[0] == 8 && (size_t)p->n * 8 == p->row) {
        interleave8(p, dst);
        return;
    }
    for (int64_t o = 0; o < p->outer; o++) {
        char *d = dst + (size_t)o * p->row;
        for (int k = 0; k < p->n; k++) {
            if (p->chunk[k]) {
                memcpy(d, p->src[k] + (size_t)o * p->chunk[k], p->chunk[k]);
                d += p->chunk[k];
            }
        }
    }
}

/* Checks the inputs and computes the output shape; ts: k borrowed tensors.
 * *dimp: in = as given, out = wrapped. */
static int join_shape(TensorObject **ts, Py_ssize_t k, int stack, int64_t *dimp, int *ndim,
                      int64_t *shape)
{
    TensorObject *ref = ts[0];
    int64_t dim = *dimp;
    char b1[256], b2[256];
    if (stack) {
        for (Py_ssize_t i = 1; i < k; i++) {
            if (ts[i]->ndim != ref->ndim ||
                memcmp(ts[i]->shape, ref->shape, sizeof(int64_t) * ref->ndim)) {
                cddp_shape_format(b1, sizeof b1, ref->ndim, ref->shape);
                cddp_shape_format(b2, sizeof b2, ts[i]->ndim, ts[i]->shape);
                PyErr_Format(PyExc_RuntimeError, "stack expects each tensor to be equal size, "
                             "but got %s at entry 0 and %s at entry %zd", b1, b2, i);
                return -1;
            }
        }
        if (ref->ndim >= CDDP_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "cddp tensors have at most %d dimensions",
                         CDDP_MAX_DIMS);
            return -1;
        }
        if (cddp_shape_wrap_dim(dim, ref->ndim + 1, &dim) < 0)
            return -1;
        for (int d = 0, j = 0; d <= ref->ndim; d++)
            shape[d] = d == dim ? (int64_t)k : ref->shape[j++];
        *ndim = ref->ndim + 1;
        *dimp = dim;
        return 0;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        if (ts[i]->ndim == 0) {
            PyErr_Format(PyExc_RuntimeError,
                         "zero-dimensional tensor (at position %zd) cannot be concatenated", i);
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < k; i++) {          /* the first input that is not skipped */
        if (!(ts[i]->ndim == 1 && ts[i]->shape[0] == 0)) {
            ref = ts[i];
            break;
        }
    }
    if (cddp_shape_wrap_dim(dim, ref->ndim, &dim) < 0)
        return -1;
    memcpy(shape, ref->shape, sizeof(int64_t) * ref->ndim);
    shape[dim] = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        TensorObject *t = ts[i];
        if (t->ndim == 1 && t->shape[0] == 0 && ref->ndim != 1)
            continue;
        if (t->ndim != ref->ndim) {
            PyErr_Format(PyExc_RuntimeError,
                         "Tensors must have same number of dimensions: got %d and %d",
                         ref->ndim, t->ndim);
            return -1;
        }
        for (int d = 0; d < ref->ndim; d++) {
            if (d != dim && t->shape[d] != ref->shape[d]) {
                PyErr_Format(PyExc_RuntimeError,
                             "Sizes of tensors must match except in dimension %lld. Expected "
                             "size %lld but got size %lld for tensor number %zd in the list.",
                             (long long)dim, (long long)ref->shape[d], (long long)t->shape[d], i);
                return -1;
            }
        }
        if (__builtin_add_overflow(shape[dim], t->shape[dim], &shape[dim])) {
            PyErr_Format(PyExc_RuntimeError, "cat: the joined size of dimension %lld "
                         "overflows int64", (long long)dim);
            return -1;
        }
    }
    *ndim = ref->ndim;
    *dimp = dim;
    return 0;
}

/* out[...] = the inputs, joined along dim. */
static int join_fill(TensorObject *out, TensorObject **ts, Py_ssize_t k, int stack, int dim)
{
    size_t isz = cddp_dtype_size[out->dtype];
    int64_t inner = 1, outer = 1, off = 0;
    int fast = 1, rc = -1;
    memcpy_plan plan = {0};
    if (cddp_numel(out) == 0)
        return 0;
    for (int d = 0; d < dim; d++)
        outer *= out->shape[d];
    for (int d = dim + 1; d < out->ndim; d++)
        inner *= out->shape[d];
    for (Py_ssize_t i = 0; i < k && fast; i++)
        fast = ts[i]->dtype == out->dtype && cddp_is_contiguous(ts[i]);
    if (fast) {
        plan.outer = outer;
        plan.row = (size_t)(out->shape[dim] * inner) * isz;
        plan.n = (int)k;
        plan.src = PyMem_Malloc(sizeof(char *) * (size_t)k);
        plan.chunk = PyMem_Malloc(sizeof(size_t) * (size_t)k);
        if (!plan.src || !plan.chunk) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            int skipped = !stack && ts[i]->ndim != out->ndim;
            int64_t s = stack ? 1 : skipped ? 0 : ts[i]->shape[dim];
            plan.src[i] = cddp_data(ts[i]);
            plan.chunk[i] = (size_t)(s * inner) * isz;
        }
        if ((size_t)cddp_numel(out) * isz >= GIL_FREE_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            run_memcpy_plan(&plan, cddp_data(out));
            Py_END_ALLOW_THREADS
        } else {
            run_memcpy_plan(&plan, cddp_data(out));
        }
        rc = 0;
        goto done;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        TensorObject *dst;
        int skipped = !stack && ts[i]->ndim != out->ndim;
        if (skipped)
            continue;
        if (stack)
            dst = cddp_shape_select_raw(out, dim, i);
        else
            dst = cddp_shape_narrow_raw(out, dim, off, ts[i]->shape[dim]);
        if (!dst)
            goto done;
        if (cddp_copy_into(dst, ts[i]) < 0) {
            Py_DECREF(dst);
            goto done;
        }
        Py_DECREF(dst);
        off += stack ? 1 : ts[i]->shape[dim];
    }
    rc = 0;
done:
    PyMem_Free(plan.src);
    PyMem_Free(plan.chunk);
    out->storage->version = 0;           /* filling a new tensor is not a modification */
    return rc;
}

/* torch's cat result layout: the inputs' suggested memory format when they all share one
 * (channels-last inputs give a channels-last result), else row-major */
static int common_format(TensorObject *const *ts, Py_ssize_t k)
{
    int fmt = cddp_suggest_memory_format(ts[0]);
    for (Py_ssize_t i = 1; i < k && fmt != CDDP_MF_CONTIGUOUS; i++)
        if (cddp_suggest_memory_format(ts[i]) != fmt)
            return CDDP_MF_CONTIGUOUS;
    return fmt;
}

static PyObject *join(const char *fname, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, int stack)
{
    static const char *const names[] = {"tensors", "dim", "out", "axis"};
    PyObject *a[4], *fast = NULL, *res = NULL;
    TensorObject **ts = NULL, *out = NULL;
    Py_ssize_t k;
    int64_t dim = 0, shape[CDDP_MAX_DIMS];
    int ndim;
    cddp_dtype dt;
    if (cddp_shape_parse_args(fname, args, nargs, kwnames, names, 4, 2, a) < 0)
        return NULL;
    if (!a[0]) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'tensors' (pos 1)", fname);
        return NULL;
    }
    if (a[1] && a[3]) {
        PyErr_Format(PyExc_TypeError, "%s() got both 'dim' and its alias 'axis'", fname);
        return NULL;
    }
    if (a[3])
        a[1] = a[3];
    if (a[1] && cddp_shape_get_int(a[1], fname, "dim", &dim) < 0)
        return NULL;
    if (cddp_tensor_check(a[0]) || !(PyList_Check(a[0]) || PyTuple_Check(a[0]) ||
                                     PySequence_Check(a[0]))) {
        PyErr_Format(PyExc_TypeError, "%s(): argument 'tensors' (position 1) must be tuple of "
                     "Tensors, not %s", fname, Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    fast = PySequence_Fast(a[0], "argument 'tensors' must be a sequence of Tensors");
    if (!fast)
        return NULL;
    k = PySequence_Fast_GET_SIZE(fast);
    if (k == 0) {
        if (stack)
            PyErr_SetString(PyExc_RuntimeError, "stack expects a non-empty TensorList");
        else
            PyErr_SetString(PyExc_ValueError, "torch.cat(): expected a non-empty list of Tensors");
        goto done;
    }
    if (k > INT32_MAX) {
        PyErr_NoMemory();
        goto done;
    }
    ts = (TensorObject **)PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < k; i++) {
        if (!cddp_tensor_check((PyObject *)ts[i])) {
            if (cddp_is_complex_obj((PyObject *)ts[i])) {      /* cddp/_complex.py joins them */
                PyObject *name = PyUnicode_FromString(fname);
                res = name ? cddp_complex_call("_join_call", name, args, nargs, kwnames) : NULL;
                Py_XDECREF(name);
                goto done;
            }
            PyErr_Format(PyExc_TypeError,
                         "expected Tensor as element %zd in argument 0, but got %s", i,
                         Py_TYPE(ts[i])->tp_name);
            goto done;
        }
    }
    dt = ts[0]->dtype;
    for (Py_ssize_t i = 1; i < k; i++)
        dt = cddp_promote(dt, ts[i]->dtype);
    if (join_shape(ts, k, stack, &dim, &ndim, shape) < 0)
        goto done;
    out = cddp_tensor_new(dt, ndim, shape, 0);
    if (!out || join_fill(out, ts, k, stack, (int)dim) < 0)
        goto done;
    {
        int err;
        NodeObject *node = cddp_maybe_node(stack ? "StackBackward0" : "CatBackward0",
                                           join_backward, (int)k, ts, &err);
        if (err)
            goto done;
        if (node) {
            cddp_set_history(out, node, 0);
            node->i[0] = dim;
            node->i[1] = stack;
            Py_DECREF(node);
        }
    }
    if (a[2] && a[2] != Py_None) {
        /* out=: the result copied into a tensor of exactly the result's shape */
        TensorObject *o = (TensorObject *)a[2];
        if (!cddp_tensor_check(a[2]) || o->ndim != out->ndim ||
            memcmp(o->shape, out->shape, sizeof(int64_t) * out->ndim)) {
            PyErr_Format(PyExc_RuntimeError, "%s(): out= must be a Tensor of the result's shape "
                         "(cddp does not resize out tensors)", fname);
            goto done;
        }
        if (cddp_grad_enabled && cddp_needs_grad(out)) {
            PyErr_Format(PyExc_RuntimeError, "%s(): functions with out=... arguments don't "
                         "support automatic differentiation, but one of the arguments requires "
                         "grad.", fname);
            goto done;
        }
        if (cddp_copy_into(o, out) < 0)
            goto done;
        res = Py_NewRef(a[2]);
        goto done;
    }
    res = stack ? Py_NewRef(out) : cddp_convert_as_format(out, common_format(ts, k));
done:
    Py_XDECREF(out);
    Py_XDECREF(fast);
    return res;
}

PyObject *cddp_join_cat(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return join("cat", args, nargs, kwnames, 0);
}

PyObject *cddp_join_stack(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return join("stack", args, nargs, kwnames, 1);
}
